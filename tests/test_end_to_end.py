"""Differential end-to-end tests: batched == each member alone == Python.

Every program of `e2e_programs.CASES` runs batched at several batch sizes in
stack and stackless modes, and is compared with the plain-Python reference
of each member and with `dry_run=True` (each member run alone through the
user's own Python function).
"""

import inspect

import numpy as np
import pytest

import autobatch_vm as ab
from tests import e2e_programs as progs

BATCH_SIZES = [1, 7, 200]
MODES = ['stack', 'stackless']


def dtypes_of(value):
  return [np.asarray(x).dtype.name
          for x in ab.instructions.pattern_flatten(value)]


def assert_same(actual, expected, rtol, dtypes=()):
  """Values, shapes and dtypes: the dtypes are `dtypes` where given (a
  plain-Python reference computes in other types), else `expected`'s."""
  a_leaves = ab.instructions.pattern_flatten(actual)
  e_leaves = ab.instructions.pattern_flatten(expected)
  assert len(a_leaves) == len(e_leaves)
  assert type(actual) is type(expected), (type(actual), type(expected))
  assert dtypes_of(actual) == list(dtypes or dtypes_of(expected)), (
      dtypes_of(actual), dtypes or dtypes_of(expected))
  for a, e in zip(a_leaves, e_leaves):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape, (a.shape, e.shape)
    if e.dtype.kind == 'f':
      np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-12)
    else:
      np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('batch', BATCH_SIZES)
@pytest.mark.parametrize('case', progs.CASES, ids=lambda c: c.name)
def test_batched_matches_reference(case, batch, mode):
  rng = np.random.default_rng(batch)
  args = case.make_args(rng, batch)
  result = case.fn(*args, stackless=(mode == 'stackless'),
                   max_stack_depth=case.depth)
  assert_same(result, progs.reference_batch(case, args, batch), case.rtol,
              case.dtypes)
  stats = case.fn.last_stats
  assert stats.steps > 0 and 0 < stats.utilization <= 1


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('case', progs.CASES, ids=lambda c: c.name)
def test_batched_matches_dry_run(case, mode):
  """dry_run is the reference: the same values, shapes and dtypes."""
  rng = np.random.default_rng(5)
  args = case.make_args(rng, 9)
  batched = case.fn(*args, max_stack_depth=case.depth,
                    stackless=(mode == 'stackless'))
  alone = case.fn(*args, dry_run=True)
  assert_same(batched, alone, case.rtol)
  assert_same(alone, progs.reference_batch(case, args, 9), case.rtol,
              case.dtypes)


@pytest.mark.parametrize('case', progs.CASES, ids=lambda c: c.name)
def test_empty_batch_matches_dry_run(case):
  args = case.make_args(np.random.default_rng(0), 0)
  batched = case.fn(*args, max_stack_depth=case.depth)
  alone = case.fn(*args, dry_run=True)
  assert all(np.asarray(x).shape[0] == 0
             for x in ab.instructions.pattern_flatten(batched))
  assert_same(batched, alone, case.rtol)


@pytest.mark.parametrize('case', progs.CASES, ids=lambda c: c.name)
def test_schedules_agree(case):
  rng = np.random.default_rng(11)
  args = case.make_args(rng, 13)
  # The stack VM's schedules, and the default mode (stackless for a
  # branching recursion) under each.
  for stackless in (False, None):
    lowest = case.fn(*args, max_stack_depth=case.depth, schedule='lowest',
                     stackless=stackless)
    most = case.fn(*args, max_stack_depth=case.depth, schedule='most',
                   stackless=stackless)
    assert_same(most, lowest, case.rtol)


def test_dtypes_follow_inputs():
  n32 = np.array([5, 9, 1], np.int32)
  assert progs.fibonacci(n32).dtype == np.int32
  x32 = np.array([1.5, 2.0], np.float32)
  assert progs.power(x32, np.array([3, 2], np.int32)).dtype == np.float32


def test_unreachable_functions_are_ignored():
  ctx = ab.Context()

  @ctx.batch()
  def used(x):
    return x + 1

  @ctx.batch()
  def unused(x):  # would fail type inference: never returns concretely
    return unused(x)

  np.testing.assert_array_equal(used(np.array([1, 2])), [2, 3])
  assert ctx.function_names() == ['used', 'unused']
  assert [f.name for f in ctx.program('used').functions] == ['used']


def test_closures_and_globals():
  scale = np.array(3)

  def make(ctx, offset):
    @ctx.batch()
    def f(x):
      if x > offset:
        return f(x - 1) + scale
      return x * 0
    return f

  f = make(ab.Context(), 4)
  np.testing.assert_array_equal(f(np.array([2, 6, 9])), [0, 6, 15])


def test_argument_reuse_in_calls():
  ctx = ab.Context()

  @ctx.batch()
  def swap_count(a, b, k):
    if k == 0:
      return a * 10 + b
    return swap_count(b, a, k - 1)

  out = swap_count(np.array([1, 1]), np.array([2, 2]), np.array([3, 4]))
  np.testing.assert_array_equal(out, [21, 12])


def test_block_code_cache_reused():
  cache = {}
  n = np.array([5, 6, 7])
  first = progs.fibonacci(n, block_code_cache=cache, stackless=False)
  size = len(cache)
  second = progs.fibonacci(n, block_code_cache=cache, stackless=False)
  assert size > 0 and len(cache) == size
  np.testing.assert_array_equal(first, second)


def test_stats_count_blocks():
  progs.fibonacci(np.array([10, 3]), stackless=False)
  stats = progs.fibonacci.last_stats
  assert stats.steps == sum(stats.block_executions.values())
  assert stats.batch_size == 2
  assert 'steps' in str(stats)
  # The number of member-block executions equals the unbatched count.
  progs.fibonacci(np.array([10]), stackless=False)
  alone = progs.fibonacci.last_stats.member_block_executions
  progs.fibonacci(np.array([3]), stackless=False)
  alone += progs.fibonacci.last_stats.member_block_executions
  assert stats.member_block_executions == alone


def test_empty_batch():
  out = progs.fibonacci(np.zeros((0,), np.int64))
  assert out.shape == (0,) and out.dtype == np.int64
  out = progs.fibonacci(np.zeros((0,), np.int64), stackless=True)
  assert out.shape == (0,)


def test_inspection_is_printable():
  ctx = progs.ctx
  assert 'fibonacci' in ctx.function_names()
  assert 'def fibonacci(n)' in str(ctx.module())
  sig = [ab.TensorType(np.int64, ())]
  assert 'int64' in str(ctx.program_compiled('fibonacci', sig))
  lowered = ctx.program_lowered('fibonacci', sig)
  assert 'call_branch' in str(lowered)
  assert str(ctx.lowered_for_args('fibonacci', [np.array([3, 4])])) == \
      str(lowered)


@pytest.mark.parametrize('case', progs.CASES, ids=lambda c: c.name)
def test_verifier_accepts_every_stage(case):
  """The same programs compiled with the verifier between passes."""
  ctx = progs.ctx
  ctx.debug = True
  try:
    rng = np.random.default_rng(3)
    args = case.fn.bind_arguments(case.make_args(rng, 5), {})
    sig = ctx._arg_types(args, ab.NumpyBackend())  # pylint: disable=protected-access
    ab.pipeline.lowered(
        ab.pipeline.typed(ctx.program(case.fn.name), sig, ab.NumpyBackend(),
                          verify=True), verify=True)
  finally:
    ctx.debug = False


_TABLE = np.arange(10) * 3


@pytest.mark.parametrize('stackless', [False, True])
def test_junk_lanes_never_poison_live_ones(stackless):
  ctx = ab.Context()

  @ctx.batch()
  def f(i, x):
    if i >= 0:
      # Members with i < 0 also flow through here with a junk index and
      # divide by zero / log of a negative; that must neither raise nor warn.
      return _TABLE[i] + np.log(x) + 1.0 / x
    return x * 0.0

  i = np.array([2, -7, 9, -100, 0])
  x = np.array([1.0, -1.0, 2.0, 0.0, 4.0])
  with np.errstate(all='raise'):
    out = f(i, x, stackless=stackless)
  live = i >= 0
  expected = [(_TABLE[k] + np.log(v) + 1.0 / v) if k >= 0 else 0.0
              for k, v in zip(i, x)]
  np.testing.assert_allclose(out, expected)
  assert not np.isnan(out).any()


def test_only_variables_live_across_calls_are_stacked():
  be = ab.NumpyBackend()
  n = np.array([5, 9, 3])
  fib = progs.ctx.lowered_for_args('fibonacci', [n], be)
  full = sorted(v for v, a in fib.var_alloc.items()
                if a == ab.instructions.VariableAllocation.FULL)
  # n is needed after the first recursive call; %2 (its result) after the
  # second.  Nothing else is stacked.
  assert full == ['fibonacci.%2', 'fibonacci.n']
  mem = ab.virtual_machine.CompiledProgram(fib, be, 3, 50).layout.memory()
  assert mem['stacks'] == 2 * (50 * 3 * 8 + 4 * 3)
  loop = progs.ctx.lowered_for_args('collatz_loop', [n], be)
  mem = ab.virtual_machine.CompiledProgram(loop, be, 3, 50).layout.memory()
  assert mem['stacks'] == 0 and mem['pc'] == 3 * 4 * 3  # no call stack


TF_MODES = ['eager', 'graph', 'xla', 'stackless']
# Eager calls run the same staged loop as a user's `tf.function` (through an
# internal one), so by default every program runs eagerly, under XLA and
# stackless, and in a user's `tf.function` a few (structures, loops, calls,
# literals); the others' graph runs, and the XLA runs of a second case of one
# function, are in `-m slow`.
_GRAPH_BY_DEFAULT = {'fibonacci', 'namedtuple_state', 'divmod_tuple',
                     'break_continue', 'loop_of_calls', 'empty_rows',
                     'literals_int32_float32', 'queue_events'}
_XLA_REPEATS = {'fibonacci_untyped', 'fibonacci_base_first',
                'literals_int64_float64', 'newton_cube_root_tol'}


def _tf_params():
  return [pytest.param(
      case, mode, id=f'{case.name}-{mode}',
      marks=[pytest.mark.slow]
      if (mode == 'graph' and case.name not in _GRAPH_BY_DEFAULT or
          mode == 'xla' and case.name in _XLA_REPEATS) else [])
          for case in progs.CASES for mode in TF_MODES]


@pytest.mark.parametrize('case, mode', _tf_params())
def test_tensorflow_matches_reference(case, mode):
  """The same programs on TF tensors: eager, tf.function, XLA, stackless."""
  pytest.importorskip('tensorflow')
  if case.numpy_primitives and mode in ('graph', 'xla'):
    pytest.skip('calls NumPy functions, which cannot be staged in a graph')
  from tests.backends.test_tf_backend import run_tf  # pylint: disable=g-import-not-at-top
  batch = 6
  args = case.make_args(np.random.default_rng(21), batch)
  result = run_tf(case.fn, args, mode, max_stack_depth=case.depth)
  assert_same(result, progs.reference_batch(case, args, batch), case.rtol,
              case.dtypes)
  if mode == 'eager':
    # dry_run on the same tensors: each member alone, through TensorFlow.
    from tests.backends.test_tf_backend import to_np, to_tf  # pylint: disable=g-import-not-at-top
    alone = to_np(case.fn(*to_tf(args), dry_run=True))
    assert_same(result, alone, case.rtol)


# -- Python as users write it ------------------------------------------------

_py_ctx = ab.Context()


@_py_ctx.batch
def scaled_power(x, k=3, scale=np.float64(1.0)):
  """x ** k * scale, by repeated multiplication."""
  r = x * 0.0 + scale
  while k > 0:
    r = r * x
    k -= 1
  return r


@_py_ctx.batch
def sum_of_powers(x):
  # Omitted defaults in calls between batched functions, by position and
  # by keyword.
  return scaled_power(x) + scaled_power(x, 2) + scaled_power(x, scale=2.0)


def _sum_of_powers_ref(x):
  return x ** 3 + x ** 2 + 2.0 * x ** 3


def _declared(arg_types):
  return arg_types[0]


@_py_ctx.batch(_declared)
def declared_positionally(x):
  return x + 1


@pytest.mark.parametrize('mode', MODES)
def test_default_values(mode):
  x = np.array([1.5, -2.0, 0.5])
  kw = dict(stackless=(mode == 'stackless'))
  for got, expected in [
      (scaled_power(x, **kw), x ** 3),
      (scaled_power(x, np.array([0, 1, 4]), **kw), x ** np.array([0, 1, 4])),
      (scaled_power(x, scale=np.float64(0.5), **kw), 0.5 * x ** 3),
      (scaled_power(x, k=2, **kw), x ** 2),
      (sum_of_powers(x, **kw), _sum_of_powers_ref(x))]:
    assert_same(got, expected, 1e-12)
  assert_same(scaled_power(x, dry_run=True), x ** 3, 1e-12)
  assert_same(sum_of_powers(x, dry_run=True), _sum_of_powers_ref(x), 1e-12)
  with pytest.raises(ab.errors.ArgumentError, match='missing'):
    scaled_power()


def test_default_values_on_tensorflow():
  tf = pytest.importorskip('tensorflow')
  x = np.array([1.5, -2.0, 0.5])
  for fn, expected in [(scaled_power, x ** 3),
                       (sum_of_powers, _sum_of_powers_ref(x))]:
    batched = fn(tf.constant(x))
    alone = fn(tf.constant(x), dry_run=True)
    assert_same(np.asarray(batched), expected, 1e-12)
    assert_same(np.asarray(alone), np.asarray(batched), 1e-12)
    staged = tf.function(lambda v: fn(v))(tf.constant(x))  # pylint: disable=cell-var-from-loop
    assert_same(np.asarray(staged), expected, 1e-12)


def test_decorator_forms_and_function_attributes():
  assert isinstance(scaled_power, ab.frontend.BatchedFunction)
  assert scaled_power.__name__ == 'scaled_power'
  assert scaled_power.__doc__ == 'x ** k * scale, by repeated multiplication.'
  assert scaled_power.__wrapped__ is scaled_power.python_function
  # The default as the installed NumPy prints it ('1.0' before NumPy 2).
  assert str(inspect.signature(scaled_power)) == \
      f'(x, k=3, scale={np.float64(1.0)!r})'
  # A type_inference given positionally is not taken for the function.
  assert declared_positionally.type_inference is not None
  x = np.array([1, 2])
  np.testing.assert_array_equal(declared_positionally(x), [2, 3])
  assert _py_ctx.function_names() == ['scaled_power', 'sum_of_powers',
                                      'declared_positionally']


def test_inspection_takes_the_function_object():
  ctx = _py_ctx
  sig = [ab.TensorType(np.float64, ())]
  for main in (sum_of_powers, sum_of_powers.__wrapped__, 'sum_of_powers'):
    assert ctx.program(main).main == 'sum_of_powers'
    assert ctx.program_compiled(main, sig) is \
        ctx.program_compiled('sum_of_powers', sig)
    assert ctx.program_lowered(main, sig) is \
        ctx.program_lowered('sum_of_powers', sig)
    assert ctx.program_stackless(main, sig) is \
        ctx.program_stackless('sum_of_powers', sig)
  x = np.array([1.0, 2.0])
  # The default k=3 is a Python number, as the argument 3 is (a literal).
  assert ctx.lowered_for_args(scaled_power, [x]) is \
      ctx.lowered_for_args('scaled_power', [x, 3])
  with pytest.raises(ab.errors.ArgumentError, match='not a batched function'):
    ctx.program(progs.fibonacci)  # of another Context
  with pytest.raises(ab.errors.ArgumentError, match='not a batched function'):
    ctx.program(np.sum)


def test_dry_run_empty_batch_on_tensorflow():
  tf = pytest.importorskip('tensorflow')
  for fn, arg in [(progs.collatz_loop, tf.zeros([0], tf.int64)),
                  (progs.constant_row, tf.zeros([0], tf.int64)),
                  (progs.cube_root, tf.zeros([0], tf.float64))]:
    batched = fn(arg)
    alone = fn(arg, dry_run=True)
    for b, a in zip(ab.instructions.pattern_flatten(batched),
                    ab.instructions.pattern_flatten(alone)):
      assert tf.is_tensor(a) and b.shape[0] == 0
      assert (a.shape, a.dtype) == (b.shape, b.dtype)


def test_dry_run_counter_dtype_on_tensorflow():
  """A Python-int counter returned: int64 batched and alone."""
  tf = pytest.importorskip('tensorflow')
  n = tf.constant([3, 6, 7, 1], tf.int64)
  batched = progs.collatz_loop(n)
  alone = progs.collatz_loop(n, dry_run=True)
  assert batched.dtype == alone.dtype == tf.int64
  np.testing.assert_array_equal(alone.numpy(), [7, 8, 16, 0])
  np.testing.assert_array_equal(batched.numpy(), alone.numpy())


def test_dry_run_leaves_the_arguments_alone():
  """`a += 1` on a member's batch-of-one array updates it in place in
  plain Python: the dry run gives each member its own copy."""
  ctx = ab.Context()

  @ctx.batch()
  def bump(a):
    a += 1
    return a * 10

  a = np.array([1, 2, 3])
  assert_same(bump(a, dry_run=True), np.array([20, 30, 40]), 0)
  np.testing.assert_array_equal(a, [1, 2, 3])
  assert_same(bump(a), np.array([20, 30, 40]), 0)


def _halved(n):
  return n // 2


def test_a_function_given_to_batch_positionally_is_told_apart():
  # ctx.batch(f) takes f for type_inference= (TFP's convention): calling
  # the decorator it returns with arrays said the source could not be
  # read, and with dry_run= gave a bare TypeError.
  ctx = ab.Context()
  wrong = ctx.batch(_halved)
  for kwargs in ({}, {'dry_run': True}):
    with pytest.raises(ab.errors.ArgumentError,
                       match=r'ctx.batch\(\)\(_halved\)') as e:
      wrong(np.array([4, 7]), **kwargs)
    assert 'could not be read' not in str(e.value)
  np.testing.assert_array_equal(ctx.batch()(_halved)(np.array([4, 7])),
                                [2, 3])
