"""Per-member functions end to end: batched runs against Python per member.

Each program of `per_member_programs` runs batched and is compared with a
plain Python loop over members (the undecorated functions, each member's
arrays without a batch axis) and with `dry_run=True`: values, shapes and
dtypes, on NumPy (stack VM and stackless) and TensorFlow (eager,
`tf.function`, XLA).  Then gradients through a per-member tree RNN, calls
between per-member and batch-aware functions, the dry run's shapes where
the batched call compiles and where it does not, the listing's mark, the
counted fallback of a NumPy function without a batching rule, and the
errors a user's mistake gets at the user's line.
"""

import logging
import math
import types
import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.per_member import primitive
from tests import per_member as per_member_tests
from tests import per_member_programs as programs
from tests import python as python_tests

BATCH = 5
NUMPY = programs.PROGRAMS
BOTH = [p for p in programs.PROGRAMS if p.backends == 'both']
# The TensorFlow runs of the fast tier (program, mode); the others are in
# the slow tier (each traces the program for seconds).
FAST_TF = {('edit_distance', 'eager'), ('edit_distance', 'function'),
           ('edit_distance', 'xla'), ('edit_distance', 'stackless'),
           ('collatz', 'eager'), ('collatz', 'xla'), ('gcd', 'eager'),
           ('gcd', 'stackless'), ('merge_rank', 'eager'),
           ('merge_rank', 'function')}


def inputs(program, seed=0, batch=BATCH):
  return program.inputs(np.random.default_rng(seed), batch)


def python_loop(program, args):
  """Each member's result of the undecorated function, stacked."""
  with per_member_tests.plain_python(programs):
    results = [program.fn.python_function(*[np.copy(a[k]) for a in args])
               for k in range(len(args[0]))]
  return np.stack([np.asarray(r) for r in results])


def assert_same(batched, expected):
  batched = np.asarray(batched)
  assert batched.shape == expected.shape
  assert batched.dtype == expected.dtype, (batched.dtype, expected.dtype)
  np.testing.assert_allclose(batched, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize('stackless', [False, True])
@pytest.mark.parametrize('program', NUMPY, ids=lambda p: p.name)
def test_numpy_matches_python_and_dry_run(program, stackless):
  args = inputs(program)
  expected = python_loop(program, args)
  assert_same(program.fn(*[np.copy(a) for a in args], stackless=stackless),
              expected)
  assert_same(program.fn(*[np.copy(a) for a in args], dry_run=True),
              expected)


def _tf_modes():
  out = []
  for program in BOTH:
    for mode in ('eager', 'function', 'xla', 'stackless'):
      fast = (program.name, mode) in FAST_TF
      out.append(pytest.param(program, mode, id=f'{program.name}-{mode}',
                              marks=() if fast else pytest.mark.slow))
  return out


def run_tf(program, args, mode):
  tf = pytest.importorskip('tensorflow')
  args = [tf.constant(a) for a in args]
  if mode == 'eager':
    return program.fn(*args).numpy()
  if mode == 'stackless':
    return program.fn(*args, stackless=True).numpy()
  if mode == 'function':
    return tf.function(program.fn)(*args).numpy()
  out, ok = tf.function(lambda *a: program.fn(*a, on_error='status'),
                        jit_compile=True)(*args)
  assert np.all(ok.numpy())
  return out.numpy()


@pytest.mark.parametrize('program,mode', _tf_modes())
def test_tensorflow_matches_python(program, mode):
  args = inputs(program, seed=1)
  assert_same(run_tf(program, args, mode), python_loop(program, args))


@pytest.mark.parametrize('program', BOTH[:2], ids=lambda p: p.name)
def test_tensorflow_dry_run_matches_python(program):
  tf = pytest.importorskip('tensorflow')
  args = inputs(program, seed=2)
  out = program.fn(*[tf.constant(a) for a in args], dry_run=True)
  assert_same(out.numpy(), python_loop(program, args))


class _Records(logging.Handler):

  def __init__(self):
    super().__init__(logging.WARNING)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


def test_a_staged_xla_run_leaves_autograph_alone():
  """pfor hands its loop body to AutoGraph where the trace has it on
  (`ab.stage(..., jit_compile=True)`); AutoGraph cannot read the
  generated primitive's source and warned, once per primitive, that it
  "could not transform" it and that this was TensorFlow's bug."""
  tf = pytest.importorskip('tensorflow')
  program = next(p for p in BOTH if p.name == 'edit_distance')
  args = inputs(program, seed=4)
  records = _Records()
  tf.get_logger().addHandler(records)
  try:
    out = ab.stage(program.fn, jit_compile=True)(
        *[tf.constant(a) for a in args])
  finally:
    tf.get_logger().removeHandler(records)
  assert_same(out.numpy(), python_loop(program, args))
  assert not [m for m in records.messages if 'AutoGraph' in m], (
      records.messages)


_helper_ctx = ab.Context()


def _positive_at(x, k):
  return k < len(x) and x[k] > 0    # Python's `and` on a member's value


@_helper_ctx.batch(per_member=True)
def _count_positive(x, n):
  c = 0
  k = 0
  while _positive_at(x, k) and k < n:
    c += 1
    k += 1
  return c


def test_a_helpers_test_of_a_members_value_is_named_not_the_literal():
  """A helper (a plain function the primitive calls) that asks a member's
  value for one bool is refused as such, where the primitive also mixes
  a literal counter with arrays: the error is the helper's mistake, not
  that no dtype of the literal gives the primitive's type."""
  with pytest.raises(errors.PerMemberError, match=r'bool\(\)'):
    _count_positive(np.ones((3, 4)), np.array([1, 2, 3]))


_oob_ctx = ab.Context()


@_oob_ctx.batch(per_member=True)
def _read_past(x, i):
  total = 0.0
  k = 0
  while k < i:    # member 1 reads x[len(x)]: an IndexError in Python
    total = total + x[k]
    k += 1
  return total


def test_an_index_out_of_range_on_tensorflow_is_an_index_error():
  """On TensorFlow a per-member read runs on every lane and clips its
  index into range (members not at the block hold leftover values); a
  member at the block whose index is out of range fails with
  `IndexError`, as in Python, instead of reading a clipped item."""
  tf = pytest.importorskip('tensorflow')
  x = np.arange(12.0).reshape(3, 4)
  i = np.array([2, 5, 4])
  with pytest.raises(IndexError):
    _read_past(x[1], i[1], dry_run=True)
  with pytest.raises(errors.PrimitiveError,
                     match=r'IndexError.*batch members \[1\]'):
    _read_past(x, i)
  args = (tf.constant(x), tf.constant(i))
  for stackless in (False, True):
    with pytest.raises(errors.PrimitiveError,
                       match=r'IndexError.*batch members \[1\]'):
      _read_past(*args, stackless=stackless)
  with pytest.raises(tf.errors.InvalidArgumentError, match='IndexError'):
    tf.function(_read_past)(*args)
  for jit in (False, True):
    out, ok = tf.function(lambda a, b: _read_past(a, b, on_error='status'),
                          jit_compile=jit)(*args)
    np.testing.assert_array_equal(ok.numpy(), [True, False, True])
    np.testing.assert_array_equal(out.numpy()[[0, 2]], [1.0, 38.0])
  with pytest.raises(errors.PrimitiveError, match='IndexError'):
    ab.stage(_read_past, jit_compile=True)(*args)


@_oob_ctx.batch(per_member=True)
def _write_past(x, i):
  y = x.copy()
  y[i] = -1.0     # member 1 writes y[5]: an IndexError in Python
  return y


@pytest.mark.parametrize('fn', [_read_past, _write_past])
def test_status_stops_a_member_whose_index_is_out_of_range_on_numpy_too(fn):
  """With on_error='status', NumPy raised one member's out-of-range item
  index as every member's error; now, as on TensorFlow, that member
  alone is stopped and the call returns (outputs, ok)."""
  x = np.arange(12.0).reshape(3, 4)
  i = np.array([2, 5, 3])
  want = fn(x[[0, 2]], i[[0, 2]], dry_run=True)
  outs = {f'numpy stackless={s}': fn(x, i, stackless=s, on_error='status')
          for s in (False, None)}
  tf = pytest.importorskip('tensorflow')
  args = (tf.constant(x), tf.constant(i))
  outs['eager'] = fn(*args, on_error='status')
  for jit in (False, True):
    outs[f'jit={jit}'] = tf.function(
        lambda a, b: fn(a, b, on_error='status'), jit_compile=jit)(*args)
  for mode, (out, ok) in outs.items():
    np.testing.assert_array_equal(np.asarray(ok), [True, False, True],
                                  err_msg=mode)
    np.testing.assert_array_equal(np.asarray(out)[[0, 2]], want,
                                  err_msg=mode)
    assert np.isnan(np.asarray(out)[1]).all(), mode


@_oob_ctx.batch(per_member=True)
def _read_at_flag(x, c):
  return x[c]


def test_a_members_boolean_scalar_index_is_refused_on_every_backend():
  # TensorFlow read `x[c]` of a member's boolean `c` as `x[0]` or `x[1]`.
  tf = pytest.importorskip('tensorflow')
  x = np.arange(8.0).reshape(2, 4)
  c = np.array([True, False])
  runs = [lambda: _read_at_flag(x, c),
          lambda: _read_at_flag(tf.constant(x), tf.constant(c))]
  runs += [lambda jit=jit: tf.function(_read_at_flag, jit_compile=jit)(
      tf.constant(x), tf.constant(c)) for jit in (False, True)]
  for run in runs:
    with pytest.raises(errors.PerMemberError, match='boolean scalar'):
      run()


@_oob_ctx.batch(per_member=True)
def _summed(flags, small):
  return sum(flags), sum(small), sum(flags[1:], 2)


def test_pythons_sum_of_booleans_and_narrow_integers_runs_everywhere():
  # TensorFlow sums no booleans: `sum(row)` of a member's boolean row
  # failed there; NumPy summed a uint8 row in uint64.
  flags = np.array([[True, False, True], [False, False, False],
                    [True, True, True]])
  small = np.array([[100, 100, 100], [1, 2, 3], [0, 0, 255]], np.uint8)

  def check(alone):
    np.testing.assert_array_equal(alone[0], [2, 0, 3])
    # Python adds a uint8's items in uint8.
    assert alone[1].dtype == np.uint8
    np.testing.assert_array_equal(alone[1], [44, 6, 255])
  python_tests.run_everywhere(_summed, [flags, small], check)


@_oob_ctx.batch(per_member=True)
def _contains(x, t):
  i = 0
  while i < len(x):
    if x[i] == t:
      return True
    i += 1
  return False


def test_a_boolean_of_item_reads_runs_under_a_bare_xla_function():
  """Under a bare `tf.function(jit_compile=True)` nothing could report an
  index out of range, so a read clamps it, as XLA's own indexing does: a
  per-member function that reads items and returns a boolean (whose
  failed members would have no value to mark) is not refused there, and
  nothing warns."""
  tf = pytest.importorskip('tensorflow')
  x = np.arange(12).reshape(3, 4)
  t = np.array([5, 9, 0])
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    out = tf.function(_contains, jit_compile=True)(tf.constant(x),
                                                   tf.constant(t))
  np.testing.assert_array_equal(out.numpy(), _contains(x, t, dry_run=True))


@_oob_ctx.batch(per_member=True)
def _first_at_least(v, t):
  i = 0
  while v[i] < t:
    i += 1
  return i, v[i] * 2.0, i > 0


def test_a_loop_that_reads_past_the_end_stops_under_a_bare_xla_function():
  """`while v[i] < t: i += 1` where a member's `v` has no item `t`: under
  a bare `tf.function(jit_compile=True)` its read past the end stops it
  (its outputs poisoned: the integer minimum, NaN, False), where a
  clamped index read the last item for ever; the other members finish,
  and nothing warns."""
  import threading  # pylint: disable=g-import-not-at-top
  tf = pytest.importorskip('tensorflow')
  v = np.array([[1., 2., 3.], [1., 5., 9.], [4., 5., 6.]])
  t = np.array([2.5, 10., 5.5])
  done = {}

  def run():
    with warnings.catch_warnings():
      warnings.simplefilter('error')
      try:
        done['out'] = tf.function(_first_at_least, jit_compile=True)(
            tf.constant(v), tf.constant(t))
      except Exception as e:  # pylint: disable=broad-except
        done['error'] = e
  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(timeout=120)
  assert not thread.is_alive(), 'the XLA run did not end'
  assert 'error' not in done, done.get('error')
  i, x, positive = (np.asarray(o) for o in done['out'])
  ok = np.array([0, 2])
  want = _first_at_least(v[ok], t[ok], dry_run=True)
  np.testing.assert_array_equal(i[ok], want[0])
  np.testing.assert_array_equal(x[ok], want[1])
  np.testing.assert_array_equal(positive[ok], want[2])
  assert i[1] == np.iinfo(np.int64).min
  assert np.isnan(x[1]) and not positive[1]
  with pytest.raises(errors.PrimitiveError, match='IndexError'):
    _first_at_least(v, t)


@pytest.fixture(scope='module')
def tf_programs():
  pytest.importorskip('tensorflow')
  return {p.name: p for p in programs.tensorflow_programs()}


@pytest.mark.parametrize('name,numpy_name', [
    ('newton_tf', 'newton'),
    pytest.param('tree_rnn_tf', 'tree_rnn', marks=pytest.mark.slow)])
def test_tensorflow_forms_match_numpy(tf_programs, name, numpy_name):
  tf = pytest.importorskip('tensorflow')
  program = tf_programs[name]
  numpy_program = next(p for p in NUMPY if p.name == numpy_name)
  args = inputs(program, seed=3)
  expected = python_loop(numpy_program, args)
  tensors = [tf.constant(a) for a in args]
  assert_same(program.fn(*tensors).numpy(), expected)
  assert_same(program.fn(*tensors, dry_run=True).numpy(), expected)


def _tree_rnn_gradients(tf_programs, jit_compile=None, **kwargs):
  """Gradients of the squared encodings of three trees with respect to
  the tree RNN's variables: batched (in a `tf.function` of `jit_compile`,
  or eagerly where None) and each tree alone (`dry_run`)."""
  tf = pytest.importorskip('tensorflow')
  encode = tf_programs['tree_rnn_tf'].fn
  args = [tf.constant(a) for a in inputs(tf_programs['tree_rnn_tf'],
                                         seed=4, batch=3)]

  def gradients(*args, **kwargs):
    with tf.GradientTape() as tape:
      total = tf.reduce_sum(encode(*args, **kwargs) ** 2)
    return tape.gradient(total, encode.variables)
  batched = gradients
  if jit_compile is not None:
    batched = tf.function(lambda *a: gradients(*a, **kwargs),
                          jit_compile=jit_compile, autograph=False)
  with warnings.catch_warnings():
    # tf.gather of a tf.Variable by a per-member index is vectorized
    # (tf_vectorize's rule for ResourceGather), not run per member.
    warnings.simplefilter('error', primitive.PerMemberFallbackWarning)
    got = batched(*args, **({} if jit_compile is not None else kwargs))
  alone = gradients(*args, dry_run=True)
  for b, a in zip(got, alone, strict=True):
    b = tf.convert_to_tensor(b).numpy()
    assert np.any(b != 0)
    np.testing.assert_allclose(b, tf.convert_to_tensor(a).numpy(),
                               rtol=1e-9, atol=1e-12)


def test_gradients_flow_through_a_per_member_tree_rnn(tf_programs):
  _tree_rnn_gradients(tf_programs)


@pytest.mark.slow
def test_gradients_of_a_per_member_tree_rnn_compile_under_xla(tf_programs):
  # max_steps bounds the VM's loop, which XLA needs to keep its values for
  # the gradient; pfor's operations are built in the compiled graph with
  # constant axes and permutations, which XLA needs in the gradient.
  _tree_rnn_gradients(tf_programs, jit_compile=True, max_steps=200)


# -- mixing with batch-aware functions ----------------------------------------

mix_ctx = ab.Context()


@mix_ctx.batch(per_member=True)
def normalized_sum(x):
  """Per member: the sum of x scaled by a batch-aware helper."""
  s = scaled(x, x)
  return s[0] + s[1] + s[2] + float(count_down(len(x)))


@mix_ctx.batch()
def scaled(x, y):
  """Batch-aware: x and y are [batch, 3]."""
  return x + y


@mix_ctx.batch()
def count_down(n):
  """Batch-aware, calling a per-member function."""
  if n <= 0:
    return halve(n)
  return count_down(n - 1) + 1


@mix_ctx.batch(per_member=True)
def halve(n):
  return n // 2


@pytest.mark.parametrize('backend', ['numpy', 'tensorflow'])
def test_per_member_and_batch_aware_functions_call_each_other(backend):
  x = np.arange(12.0).reshape(4, 3)
  expected = 2 * x.sum(axis=1) + 3
  if backend == 'tensorflow':
    tf = pytest.importorskip('tensorflow')
    x = tf.constant(x)
  for kwargs in ({}, {'dry_run': True}):
    out = normalized_sum(x, **kwargs)
    np.testing.assert_allclose(np.asarray(out), expected)


# -- the dry run's shapes ------------------------------------------------------

shape_ctx = ab.Context()


def signed(x):
  """A helper testing a member's value: the batched call refuses it, so
  the dry run stacks results of a type it does not know."""
  if x[0] > 0:
    return x
  return -x


def _returns(pick):
  """Per-member functions returning `pick(x)` in several forms."""
  def argument(x):
    return pick(x)

  def view(x):
    return pick(x)[:]

  def sliced(x):
    return pick(x)[1:]

  def scalar(x):
    return pick(x)[0]

  def pair(x):
    y = pick(x)
    return y, y[2]
  return argument, view, sliced, scalar, pair


def _unchanged(x):
  return x


# A Context each: a Context's functions are known by name.
_FORMS = {}
for _refused, _pick in ((True, signed), (False, _unchanged)):
  _ctx = ab.Context()
  _FORMS.update({(_refused, fn.__name__): _ctx.batch_uncurried(
      fn, per_member=True) for fn in _returns(_pick)})


def _stacked_loop(fn, x):
  """`fn` on each member's row of `x` in plain Python, stacked."""
  outs = [fn.python_function(np.copy(x[k])) for k in range(len(x))]
  if isinstance(outs[0], tuple):
    return tuple(np.stack(column) for column in zip(*outs))
  return np.stack(outs)


def _assert_leaves(got, expected):
  if isinstance(expected, tuple):
    assert isinstance(got, tuple) and len(got) == len(expected)
  for g, e in zip(ab.instructions.pattern_flatten(got),
                  ab.instructions.pattern_flatten(expected)):
    assert_same(np.asarray(g), e)


@pytest.mark.parametrize('backend', ['numpy', 'tensorflow'])
@pytest.mark.parametrize('key', list(_FORMS), ids=lambda k: '%s-%s' % (
    'refused' if k[0] else 'typed', k[1]))
def test_a_dry_run_gives_each_member_its_row_whatever_it_returns(key,
                                                                 backend):
  """The argument itself, a view, a slice, a scalar and a tuple each get
  the batch axis, whether or not the batched call compiles."""
  fn = _FORMS[key]
  x = np.random.default_rng(3).normal(size=(4, 3))
  expected = _stacked_loop(fn, x)
  if key[0]:
    with pytest.raises(errors.PerMemberError):
      fn(x)
  elif backend == 'numpy':
    for stackless in (False, True):
      _assert_leaves(fn(x, stackless=stackless), expected)
  if backend == 'tensorflow':
    tf = pytest.importorskip('tensorflow')
    x = tf.constant(x)
  _assert_leaves(fn(x, dry_run=True), expected)


@shape_ctx.batch()
def row_sums(x):
  """Batch-aware: x is [batch, 3]."""
  return np.sum(x, axis=1)


@shape_ctx.batch(per_member=True)
def summed(x):
  return row_sums(x) + 1.0


@shape_ctx.batch()
def doubled_signed(x):
  """Batch-aware, calling a per-member function the batched call
  refuses."""
  return per_member_signed(x) * 2.0


@shape_ctx.batch(per_member=True)
def per_member_signed(x):
  return signed(x)


def test_a_dry_run_passes_one_members_arrays_between_the_two_kinds():
  """A per-member function's array reaches a batch-aware callee as a batch
  of one, and comes back from a per-member callee as one."""
  x = np.random.default_rng(4).normal(size=(4, 3))
  np.testing.assert_allclose(summed(x, dry_run=True), x.sum(axis=1) + 1.0)
  np.testing.assert_allclose(summed(x), x.sum(axis=1) + 1.0)
  expected = np.where(x[:, :1] > 0, x, -x) * 2.0
  got = doubled_signed(x, dry_run=True)
  assert got.shape == (4, 3)
  np.testing.assert_allclose(got, expected)

def test_the_listing_marks_per_member_primitives():
  listing = str(mix_ctx.program(normalized_sum))
  assert 'member[' in listing
  assert 'member[' not in str(mix_ctx.program(scaled))


def test_item_assignment_of_the_batch_axis_stays_refused_in_batch_aware_functions():
  # x[0] there would write member 0's row (tests/python/
  # test_batch_item_assignment.py has those that keep axis 0).
  ctx = ab.Context()

  def assign(x):
    x[0] = 1.0
    return x
  ctx.batch_uncurried(assign)
  with pytest.raises(errors.UnsupportedSyntaxError, match='keep axis 0'):
    ctx.program(assign)


# -- the counted fallback and errors at the user's line --------------------------

fallback_ctx = ab.Context()


@fallback_ctx.batch(per_member=True)
def smoothed(x):
  return np.convolve(x, np.ones(2) / 2, mode='valid')


def test_a_function_without_a_rule_runs_per_member_counted_and_warned():
  if np.convolve in getattr(
      __import__('autobatch_vm.per_member.numpy_rules',
                 fromlist=['_RULES']), '_RULES', {}):
    pytest.skip('np.convolve has a batching rule now')
  x = np.random.default_rng(5).normal(size=(4, 5))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    out = smoothed(x)
  expected = np.stack([np.convolve(r, np.ones(2) / 2, mode='valid')
                       for r in x])
  np.testing.assert_allclose(out, expected)
  assert smoothed.last_stats.per_member_fallbacks.get('np.convolve', 0) >= 1
  messages = [w for w in caught
              if issubclass(w.category, primitive.PerMemberFallbackWarning)]
  assert messages and 'convolve' in str(messages[0].message)
  assert messages[0].lineno == _line_of(smoothed.python_function,
                                       "np.convolve")


def _line_of(fn, text):
  lines = fn.__code__.co_firstlineno
  import inspect  # pylint: disable=g-import-not-at-top
  source = inspect.getsource(fn).splitlines()
  return lines + next(i for i, l in enumerate(source) if text in l)


def test_a_shape_that_differs_between_members_points_to_padding():
  ctx = ab.Context()

  def ramp(n):
    r = np.arange(n)
    return r.sum()
  ctx.batch_uncurried(ramp, per_member=True)
  with pytest.raises(errors.PerMemberError, match='(?i)pad') as info:
    ctx._functions['ramp'](np.array([2, 3, 4]))
  assert info.value.lineno == _line_of(ramp, 'np.arange(n)')


_range_ctx = ab.Context()


@_range_ctx.batch(per_member=True)
def _any_over_a_members_range(v, n):
  return any(v[i] > 1.0 for i in range(n))


def test_a_generator_over_a_members_range_is_refused_alike_everywhere():
  # TensorFlow's own TypeError ("'SymbolicTensor' object cannot be
  # interpreted as an integer") was raw; it is NumPy's refusal, which
  # says to loop or reduce a slice.
  python_tests.refused_everywhere(
      _any_over_a_members_range,
      [np.array([[0.5, 2.0, 0.1], [3.0, 0.2, 0.1]]), np.array([2, 0])],
      errors.PerMemberError, r'(?s)one Python integer.*np\.any\(v\[:n\]')


def casts_and_lists(x, n):
  """NumPy calls that its protocols do not dispatch: a scalar type's cast,
  a list display of one member's values, a creation function."""
  y = np.float32(x) * 2
  top = np.max([x, np.float64(n), 0.5])
  z = np.zeros(3, dtype=np.asarray(x).dtype) + x
  return y + top + z.sum()


@pytest.mark.parametrize('mode', ['numpy', 'eager', 'xla'])
def test_numpy_calls_protocols_miss_run_per_member(mode):
  # The edit distance's np.zeros(W + 1, dtype=prev.dtype) is one too (a
  # tensor's dtype on TensorFlow): test_tensorflow_matches_python.
  ctx = ab.Context()
  x = np.array([0.25, -1.0, 3.0, 2.5, 0.0])
  n = np.array([1, 4, -2, 0, 7])
  if mode == 'numpy':
    cl = ctx.batch_uncurried(casts_and_lists, per_member=True)
    assert_same(cl(x, n), np.stack([casts_and_lists(x[k], n[k])
                                    for k in range(BATCH)]))
    return
  tf = pytest.importorskip('tensorflow')
  run = (lambda f: f) if mode == 'eager' else (
      lambda f: tf.function(f, jit_compile=True))
  # On TensorFlow a list of one member's tensors goes to NumPy as it is
  # (TensorFlow users write tf ops); the cast and the dtype work.
  # The sum is a float64 (x's dtype), which NumPy's promotion keeps, as
  # in a dry run; TensorFlow's operator would cast it to float32.
  def casts(x):
    return np.float32(x) * 2, np.float32(x) * 2 + np.zeros(
        3, dtype=x.dtype).sum()
  c = ctx.batch_uncurried(casts, per_member=True)
  single, out = run(c)(tf.constant(x))
  assert single.dtype == tf.float32 and out.dtype == tf.float64
  assert c(x, dry_run=True)[1].dtype == np.float64
  np.testing.assert_allclose(out.numpy(), (x * 2).astype(np.float32))


def positive(x):
  """A helper written for one member, deciding with Python's `if`."""
  if x > 0:
    return x
  return -x


@pytest.mark.parametrize('backend', ['numpy', 'tensorflow'])
def test_one_members_value_where_python_needs_one_bool(backend):
  ctx = ab.Context()

  def magnitude(x):
    y = positive(x) * 2
    return y
  fn = ctx.batch_uncurried(magnitude, per_member=True)
  x = np.array([1.0, -2.0])
  if backend == 'tensorflow':
    tf = pytest.importorskip('tensorflow')
    x = tf.constant(x)
    fn = tf.function(fn)
  with pytest.raises(errors.PerMemberError) as info:
    fn(x)
  assert info.value.lineno == _line_of(magnitude, 'positive(x)')


def test_assignment_to_a_nested_item_is_refused_at_its_line():
  ctx = ab.Context()

  def nested(x):
    x[0][1] = 2.0
    return x
  ctx.batch_uncurried(nested, per_member=True)
  with pytest.raises(errors.UnsupportedSyntaxError) as info:
    ctx.program(nested)
  assert info.value.lineno == _line_of(nested, 'x[0][1]')


def test_a_numpy_function_of_tensorflow_values_asks_for_tensorflow_ops():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def total(x):
    y = np.nanmedian(x * 2.0)   # TensorFlow's NumPy API has no nanmedian
    return y
  fn = ctx.batch_uncurried(total, per_member=True)
  with pytest.raises(errors.PerMemberError, match='NumPy function') as info:
    fn(tf.constant(np.ones((3, 4))))
  assert info.value.lineno == _line_of(total, 'np.nanmedian')


def test_an_op_pfor_cannot_vectorize_is_counted_and_refused_under_xla():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def histogram_total(x):
    y = tf.reduce_sum(tf.math.bincount(x, minlength=4, maxlength=4))
    return y
  fn = ctx.batch_uncurried(histogram_total, per_member=True)
  x = tf.constant([[1, 2, 2], [0, 3, 3]], tf.int32)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    np.testing.assert_array_equal(fn(x).numpy(), [3, 3])
  assert fn.last_stats.per_member_fallbacks.get('tf.DenseBincount', 0) >= 1
  assert any(issubclass(w.category, primitive.PerMemberFallbackWarning)
             for w in caught)
  xla = tf.function(lambda a: fn(a, on_error='status'), jit_compile=True)
  with pytest.raises(errors.PerMemberError, match='XLA') as info:
    xla(x)
  assert info.value.lineno == _line_of(histogram_total, 'bincount')


def test_a_members_stateless_draw_compiles_under_xla():
  # pfor has no rule for stateless random ops with a member's seed and
  # runs them in a loop over the members; with shapes known when traced
  # XLA compiles it, each member drawing what it draws alone under XLA.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def draws(seed, n):
    k = tf.constant(0, tf.int64)
    total = tf.constant(0.0, tf.float64)
    while k < n:
      total += tf.random.stateless_uniform(
          [], seed=tf.stack([seed, k]), dtype=tf.float64)
      k += 1
    return total
  fn = ctx.batch_uncurried(draws, per_member=True)
  seeds = tf.constant(np.arange(4) + 10, tf.int64)
  n = tf.constant([0, 1, 2, 3], tf.int64)

  def alone(s, m):
    return tf.while_loop(
        lambda k, t: k < m,
        lambda k, t: (k + 1, t + tf.random.stateless_uniform(
            [], seed=tf.stack([s, k]), dtype=tf.float64)),
        (tf.constant(0, tf.int64), tf.constant(0.0, tf.float64)))[1]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', primitive.PerMemberFallbackWarning)
    got = tf.function(fn, jit_compile=True)(seeds, n).numpy()
    np.testing.assert_allclose(fn(seeds, n), fn(seeds, n, dry_run=True))
  each = [tf.function(alone, jit_compile=True)(seeds[b], n[b]).numpy()
          for b in range(4)]
  np.testing.assert_allclose(got, each)


def test_a_slice_with_per_member_bounds_is_masked_under_xla_not_wrong():
  # pfor's rule for a slice refuses bounds that differ between members and
  # runs it in a loop over them, which XLA compiled to wrong results
  # (zeros) where the members' slices differ in length.  Under XLA the
  # slice is held masked (`per_member.ragged`): reduced in its statement
  # it gives Python's value; kept, it is refused at its line.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def prefix_sum(v, n):
    return np.sum(v[:n])

  def window_sum(v, j):
    return np.sum(v[j:j + 3])
  prefix = ctx.batch_uncurried(prefix_sum, per_member=True)
  window = ctx.batch_uncurried(window_sum, per_member=True)
  v = np.arange(20.0).reshape(2, 10)
  # Outside XLA each member's slice runs in a loop, counted and warned
  # about.  A window of one length (`v[j:j + 3]`) is a gather, under XLA
  # too.
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    got = prefix(tf.constant(v), tf.constant([3, 7]))
  np.testing.assert_allclose(got, [0 + 1 + 2, sum(range(10, 17))])
  assert prefix.last_stats.per_member_fallbacks.get('tf.StridedSlice', 0) >= 1
  assert any(issubclass(w.category, primitive.PerMemberFallbackWarning)
             and 'A slice whose bounds' in str(w.message) for w in caught)
  for run in (window, tf.function(window, jit_compile=True)):
    np.testing.assert_allclose(run(tf.constant(v), tf.constant([1, 5])),
                               [1 + 2 + 3, 15 + 16 + 17])
  assert not window.last_stats.per_member_fallbacks
  np.testing.assert_allclose(
      tf.function(prefix, jit_compile=True)(tf.constant(v),
                                            tf.constant([3, 7])),
      [0 + 1 + 2, sum(range(10, 17))])

  def kept(v, n):
    w = v[:n]
    return w
  fn = ctx.batch_uncurried(kept, per_member=True)
  with pytest.raises(errors.PerMemberError, match='slice whose bounds') as (
      info):
    tf.function(fn, jit_compile=True)(tf.constant(v), tf.constant([3, 7]))
  assert info.value.lineno == _line_of(kept, 'w = v[:n]')


def test_a_member_shaped_value_reduced_in_its_statement_runs_on_tensorflow():
  # `np.sum(v[:n])` with n differing between members: pfor's loop over
  # the members runs the slice alone and stacks slices of different
  # lengths, which failed at run time ("Incompatible shapes during
  # merge"); the statement runs in one loop over the members instead.
  # Kept as a value (`w = v[:n]`), it is a PerMemberError at its line,
  # eagerly and under `tf.function`, even where the members' lengths
  # agree: there type inference ran it on made-up constants, typed `w`
  # as `v[:0]`, and the run failed with TensorFlow's "Incompatible
  # shapes".
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def prefix(v, n):
    return np.sum(v[:n] ** 2) + np.dot(v[:n], v[:n]), np.sum(np.arange(n))

  def positive(v):
    return v[v > 0].sum()

  def kept(v, n):
    w = v[:n]
    return np.sum(w)
  fns = [ctx.batch_uncurried(f, per_member=True)
         for f in (prefix, positive, kept)]
  v = np.arange(12.0).reshape(3, 4) - 4.0
  n = np.array([1, 3, 4])
  want = [prefix(v[b], n[b]) for b in range(3)]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', primitive.PerMemberFallbackWarning)
    for run in (lambda f, *a: f(*a), lambda f, *a: tf.function(f)(*a)):
      sums, counts = run(fns[0], tf.constant(v), tf.constant(n))
      np.testing.assert_allclose(sums, [w[0] for w in want])
      np.testing.assert_array_equal(counts, [w[1] for w in want])
      np.testing.assert_allclose(run(fns[1], tf.constant(v)),
                                 [positive(v[b]) for b in range(3)])
    for run in (lambda f, *a: f(*a), lambda f, *a: tf.function(f)(*a)):
      for k in (n, np.array([2, 2, 2])):
        with pytest.raises(errors.PerMemberError,
                           match='is kept or returned') as info:
          run(fns[2], tf.constant(v), tf.constant(k))
        assert info.value.lineno == _line_of(kept, 'w = v[:n]')
    # Gradients flow through the loop over the members.
    x = tf.constant(v)
    with tf.GradientTape() as tape:
      tape.watch(x)
      total = tf.reduce_sum(fns[0](x, tf.constant(n))[0])
    mask = np.arange(4) < n[:, None]
    np.testing.assert_allclose(tape.gradient(total, x), 4 * v * mask)


def test_a_loop_over_a_member_shaped_value_names_its_cause_on_numpy():
  # Type inference on NumPy runs `w = v[:n]` on made-up values (n = 0):
  # `w` has no elements, and the loop's item fails to index.  The error
  # named the loop's generated variables and blamed the code; it names
  # the loop's sequence, its size following the data, and the fix.
  ctx = ab.Context()

  def loop(v, n):
    w = v[:n]
    total = 0.0
    for t in w:
      total += t
    return total
  fn = ctx.batch_uncurried(loop, per_member=True)
  with pytest.raises(errors.PrimitiveError,
                     match='sequence had no elements when typed') as info:
    fn(np.ones((3, 4)), np.array([1, 2, 4]))
  assert '__ab' not in str(info.value)
  assert 'Pad to a fixed size' in str(info.value)
  assert info.value.lineno == _line_of(loop, 'for t in w')


def test_windows_of_per_member_start_and_one_length_compile_under_xla():
  # `v[i:i + 3]`, its length known when traced (the stop is the start
  # plus a constant): a gather, which XLA compiles (pfor refuses a slice
  # of member bounds).  A window the array's end shortens for a member is
  # Python's shorter slice where the statement reduces it (one loop over
  # the members, outside XLA), and that member's failure where it is kept.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def conv(v, w, lo):
    out = np.zeros(4)
    for i in range(4):
      out[i] = np.dot(v[i:i + 3], w)
    k = 2 * lo
    return out, v[k // 2 + 1:k // 2 + 3], v[-lo - 2:-lo]

  def window_sum(v, lo):
    return np.sum(v[lo:lo + 3])

  def kept(v, lo):
    w = v[lo:lo + 3]
    return w * 2
  v = np.arange(24.0).reshape(4, 6) - 4.0
  w = np.arange(12.0).reshape(4, 3) / 3
  lo = np.array([1, 1, 2, 3])
  fn = ctx.batch_uncurried(conv, per_member=True)
  python_tests.run_everywhere(fn, [v, w, lo])
  late = np.array([1, 4, 2, 3])           # member 1's window: v[4:7]
  summed = ctx.batch_uncurried(window_sum, per_member=True)
  want = [window_sum(v[b], late[b]) for b in range(4)]
  targs = [tf.constant(v), tf.constant(late)]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', primitive.PerMemberFallbackWarning)
    np.testing.assert_allclose(summed(*targs), want)
    np.testing.assert_allclose(tf.function(summed)(*targs), want)
    out, ok = tf.function(lambda *a: summed(*a, on_error='status'),
                          jit_compile=True)(*targs)
  np.testing.assert_array_equal(ok, [True, False, True, True])
  np.testing.assert_allclose(out.numpy()[ok.numpy()],
                             np.array(want)[ok.numpy()])
  held = ctx.batch_uncurried(kept, per_member=True)
  with pytest.raises(errors.PerMemberError,
                     match=r'for batch members \[1\] it does not lie'):
    held(*targs)
  out, ok = tf.function(lambda *a: held(*a, on_error='status'))(*targs)
  np.testing.assert_array_equal(ok, [True, False, True, True])
  np.testing.assert_allclose(out.numpy()[2], 2 * v[2, 2:5])


def test_a_context_rebuilt_from_its_state_keeps_per_member_functions():
  args = inputs(programs.PROGRAMS[0], seed=6, batch=3)
  other = ab.Context()
  functions = other.install_state(programs.edit_ctx.export_state())
  assert functions['edit_distance'].per_member
  assert_same(functions['edit_distance'](*args),
              python_loop(programs.PROGRAMS[0], args))


@pytest.mark.slow
def test_a_per_member_tree_rnn_with_variables_compiles_under_xla(tf_programs):
  tf = pytest.importorskip('tensorflow')
  program = tf_programs['tree_rnn_tf']
  args = inputs(program, seed=7, batch=4)
  out, ok = tf.function(lambda *a: program.fn(*a, on_error='status'),
                        jit_compile=True)(*[tf.constant(a) for a in args])
  assert np.all(ok.numpy())
  numpy_program = next(p for p in NUMPY if p.name == 'tree_rnn')
  assert_same(out.numpy(), python_loop(numpy_program, args))


@pytest.mark.parametrize('mode', [pytest.param('eager', marks=pytest.mark.slow),
                                  'xla'])
def test_products_with_a_shared_matrix_on_tensorflow(mode):
  """tf.linalg.matmul and matvec of a shared matrix by a member's vector or
  matrix, with each transpose flag (tf_vectorize's rule for MatMul): the
  products of each member alone, and gradients through them."""
  tf = pytest.importorskip('tensorflow')
  rng = np.random.default_rng(5)
  shared = tf.constant(rng.normal(size=(4, 3)))

  def products(v, m):
    t = tf.transpose(shared)
    return (tf.linalg.matvec(shared, v) + tf.linalg.matvec(t, v,
                                                           transpose_a=True)
            + tf.linalg.matmul(shared, v[None, :], transpose_b=True)[:, 0],
            tf.linalg.matmul(shared, m) + tf.linalg.matmul(
                t, tf.transpose(m), transpose_a=True, transpose_b=True))
  ctx = ab.Context()
  fn = ctx.batch_uncurried(products, per_member=True)
  v, m = tf.constant(rng.normal(size=(BATCH, 3))), tf.constant(
      rng.normal(size=(BATCH, 3, 2)))

  def run(v, m):
    with tf.GradientTape() as tape:
      tape.watch(v)
      if mode == 'xla':
        (vectors, matrices), _ = fn(v, m, on_error='status', max_steps=10)
      else:
        vectors, matrices = fn(v, m)
      total = tf.reduce_sum(vectors ** 2)
    return vectors, matrices, tape.gradient(total, v)
  if mode == 'xla':
    run = tf.function(run, jit_compile=True, autograph=False)
  vectors, matrices, grad = run(v, m)
  for k in range(BATCH):
    one = v[k]
    with tf.GradientTape() as tape:
      tape.watch(one)
      want_v, want_m = products(one, m[k])
      total = tf.reduce_sum(want_v ** 2)
    np.testing.assert_allclose(vectors[k].numpy(), want_v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(matrices[k].numpy(), want_m.numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(
        grad[k].numpy(),
        tape.gradient(total, one).numpy(), rtol=1e-12)


@pytest.mark.parametrize('mode', ['eager', 'function'])
def test_an_item_write_by_int64_indices_vectorizes_on_tensorflow(mode,
                                                                  caplog):
  """tf.tensor_scatter_nd_update at a member's int64 index: pfor's rule
  (int32 member numbers) fails on int64 indices, tf_vectorize's does not,
  also where an eager call's trace leaves the batch size unknown."""
  tf = pytest.importorskip('tensorflow')

  def put(samples, i, v):
    return tf.tensor_scatter_nd_update(
        samples, tf.reshape(tf.cast(i, tf.int64), [1, 1]), v[None])
  fn = ab.Context().batch_uncurried(put, per_member=True)
  if mode == 'function':
    fn = tf.function(fn, autograph=False)
  samples = tf.zeros([BATCH, 4, 2], tf.float64)
  i = tf.constant(np.arange(BATCH) % 4)
  v = tf.constant(np.arange(2.0 * BATCH).reshape(BATCH, 2))
  with caplog.at_level('ERROR', logger='tensorflow'):
    got = fn(samples, i, v).numpy()
  assert not [r for r in caplog.records if 'pfor' in r.getMessage()]
  for k in range(BATCH):
    assert_same(got[k], put(samples[k], i[k], v[k]).numpy())


def test_pfor_rules_swapped_by_one_thread_at_a_time():
  """tf_vectorize swaps rules in pfor's global registry while it converts:
  a second thread's conversion waits for the first's to end, so the
  registry holds pfor's own rules afterwards, whatever order they end in."""
  pytest.importorskip('tensorflow')
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  from autobatch_vm.per_member import tf_vectorize  # pylint: disable=g-import-not-at-top
  registry = pfor_lib._pfor_converter_registry  # pylint: disable=protected-access
  own = {name: registry[name] for name in tf_vectorize._STATIC}  # pylint: disable=protected-access
  first_in, second_started, first_out = (threading.Event(),
                                         threading.Event(), threading.Event())

  def first():
    with tf_vectorize._static_rules():  # pylint: disable=protected-access
      first_in.set()
      second_started.wait(10)
      time.sleep(0.2)   # the second thread asks for the rules meanwhile
    first_out.set()

  def second():   # ends after the first, had they overlapped
    first_in.wait(10)
    second_started.set()
    with tf_vectorize._static_rules():  # pylint: disable=protected-access
      first_out.wait(10)
  threads = [threading.Thread(target=first), threading.Thread(target=second)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(30)
  assert {name: registry[name] for name in own} == own


# -- TensorFlow eager, stackless: one trace per primitive ---------------------

trace_ctx = ab.Context()
TRACES = [0]


def _counted(x):
  """Counts the traces of the primitive that calls it (it runs when
  TensorFlow traces the primitive, not when the trace runs)."""
  TRACES[0] += 1
  return x


@trace_ctx.batch(per_member=True)
def counted_steps(n):
  steps = 0
  while n > 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps = _counted(steps) + 1
  return steps


def test_stackless_tensorflow_eager_traces_each_primitive_once(caplog):
  """The stackless executor runs a block on the members at it, so a
  primitive sees a new batch size at nearly every call on TF eager: each
  is traced once for any size, and TensorFlow warns of no retracing."""
  tf = pytest.importorskip('tensorflow')
  program = next(p for p in BOTH if p.name == 'edit_distance')
  with caplog.at_level('WARNING', logger='tensorflow'):
    for batch in (5, 7, 3):
      args = inputs(program, seed=batch, batch=batch)
      assert_same(program.fn(*[tf.constant(a) for a in args],
                             stackless=True).numpy(),
                  python_loop(program, args))
  assert not [r for r in caplog.records if 'retracing' in r.getMessage()]
  traces = []
  for batch in (5, 7, 3, 9):
    n = np.arange(1, batch + 1) * 3
    expected = counted_steps(n, dry_run=True)   # counts, but not traces
    before = TRACES[0]
    assert_same(counted_steps(tf.constant(n), stackless=True).numpy(),
                expected)
    traces.append(TRACES[0] - before)
  assert traces[0] and traces[1:] == [0, 0, 0]


def test_one_members_types_are_found_without_pfor(monkeypatch):
  """Type inference runs a primitive on one member's made-up values; in a
  `tf.function` too, that is the member function on them, not a pfor
  conversion (which costs what the batched one does)."""
  tf = pytest.importorskip('tensorflow')
  from autobatch_vm.per_member import tf_vectorize  # pylint: disable=g-import-not-at-top
  sizes = []
  convert = tf_vectorize._vectorized_map  # pylint: disable=protected-access

  def counted(member, tensors):
    sizes.append(tensors[0].shape[0])
    return convert(member, tensors)
  monkeypatch.setattr(tf_vectorize, '_vectorized_map', counted)
  program = next(p for p in BOTH if p.name == 'edit_distance')
  args = inputs(program, seed=6)
  got = tf.function(program.fn, autograph=False)(
      *[tf.constant(a) for a in args])
  assert_same(got.numpy(), python_loop(program, args))
  assert sizes and 1 not in sizes, sizes


def test_a_per_member_statement_failing_at_run_time_says_it_is_one_members():
  # Its hint spoke of whole batched arrays and leftover rows, which a
  # per-member statement never sees.
  ctx = ab.Context()

  def factor(m):
    return np.linalg.cholesky(m)
  fn = ctx.batch_uncurried(factor, per_member=True)
  bad = np.stack([np.eye(2), -np.eye(2)])
  with pytest.raises(errors.PrimitiveError) as info:
    fn(bad)
  assert 'written for one member' in str(info.value)
  assert 'leftover' not in str(info.value)


_ALLOWED = (2, 3, 5)


def _membership(c, v):
  near = c in (0, 3) or c in [c + 1] or c in range(10, 12)
  return near, c not in _ALLOWED, c in v, (c - 1) not in v


@pytest.mark.parametrize('per_member', [False, True])
def test_pythons_in_of_a_members_value_runs_everywhere(per_member):
  # `c in (0, 3)` asked `==` for one bool, which a member's value is not:
  # refused on every backend.  Per member, `c in v` of a member's array
  # is NumPy's `(v == c).any()`.
  c = np.array([0, 1, 3, 4, 11])
  v = np.array([[0, 2], [2, 2], [3, 3], [1, 1], [10, 12]])
  fn = ab.Context().batch(per_member=per_member)(
      _membership if per_member else _batch_membership)

  def check(alone):
    for m in range(len(c)):
      want = (_membership if per_member else _batch_membership)(c[m], v[m])
      for got, w in zip(alone, want):
        assert bool(got[m]) == bool(w)
  python_tests.run_everywhere(fn, [c, v], check)


def _batch_membership(c, v):  # pylint: disable=unused-argument
  return c in (0, 3), c not in _ALLOWED, c in [1, c]


def _in_ranges(i, lo, hi, step):
  return (i in range(lo, hi), i not in range(hi), i in range(lo, hi, 2),
          i in range(hi, lo, -3), i in range(lo, hi, step),
          i + 0.5 in range(lo, hi))


@pytest.mark.parametrize('per_member', [False, True])
def test_in_a_range_of_a_members_bounds_runs_everywhere(per_member):
  # A member's bounds make no Python range (refused per member, a raw
  # TypeError on TensorFlow and batch-aware, the dry run too): `x in
  # range(lo, hi[, step])` is `lo <= x < hi` on the step, as Python's.
  i = np.array([1, 5, 3, 4, -2, 0, 6])
  lo = np.array([0, 0, 3, 0, -5, 2, 0])
  hi = np.array([2, 5, 4, 9, 3, -4, 8])
  step = np.array([1, 2, -1, 2, 3, -2, -3])
  fn = ab.Context().batch(per_member=per_member)(_in_ranges)

  def check(alone):
    for m in range(len(i)):
      want = _in_ranges(int(i[m]), int(lo[m]), int(hi[m]), int(step[m]))
      for got, w in zip(alone, want):
        assert bool(got[m]) == w, (m, alone, want)
  python_tests.run_everywhere(fn, [i, lo, hi, step], check)


tuples = ab.Context()


@tuples.batch(per_member=True)
def egcd(a, b):
  if b == 0:
    return (a, 1, 0) if a >= 0 else (-a, -1, 0)
  g, x, y = egcd(b, a % b)
  return g, y, x - (a // b) * y


@tuples.batch()
def signed_pair(a):
  return (a, 1, [a * 2]) if ab.truthy(a >= 0) else (-a, -1, [a])


def _plain_egcd(a, b):
  if b == 0:
    return (a, 1, 0) if a >= 0 else (-a, -1, 0)
  g, x, y = _plain_egcd(b, a % b)
  return g, y, x - (a // b) * y


def test_a_conditional_expression_of_tuples_selects_item_by_item():
  # A member's `(a, 1, 0) if a >= 0 else (-a, -1, 0)` was refused with a
  # message about np.asarray (a RecursionError on TensorFlow in a
  # recursive function), and batch-aware with NumPy's raw error.
  a = np.array([12, -9, 0, 7, -4])
  b = np.array([18, 6, 0, 0, -6])

  def check(alone):
    want = [_plain_egcd(int(p), int(q)) for p, q in zip(a, b)]
    for k, got in enumerate(alone):
      np.testing.assert_array_equal(got, [w[k] for w in want])
  python_tests.run_everywhere(egcd, [a, b], check)

  def check_pair(alone):
    np.testing.assert_array_equal(alone[0], np.abs(a))
    np.testing.assert_array_equal(alone[1], np.where(a >= 0, 1, -1))
    np.testing.assert_array_equal(alone[2][0], np.where(a >= 0, 2 * a, a))
  python_tests.run_everywhere(signed_pair, [a], check_pair)


def _different_tuples(a):
  return (a, 1) if a >= 0 else (-a, -1, 0)


def _different_tuples_ba(a):
  return (a, 1) if ab.truthy(a >= 0) else (-a, -1, 0)


@pytest.mark.parametrize('per_member', [False, True])
def test_a_conditional_expression_of_different_tuples_is_refused(per_member):
  fn = ab.Context().batch(per_member=per_member)(
      _different_tuples if per_member else _different_tuples_ba)
  with pytest.raises(errors.UnsupportedSyntaxError,
                     match='different structures') as e:
    fn(np.array([3, -4]))
  assert 'if/else statement' in str(e.value)
  assert __file__.rstrip('c') in str(e.value)


empty = ab.Context()


@empty.batch(per_member=True)
def empty_axis_sums(m):
  """Loops over an axis that may be empty: their bodies index an item."""
  s = m[:, :1].sum() * 0.0
  for i in range(len(m[0])):
    s = s + m[0, i]
  for x in m[-1]:
    s = s + x * 2.0
  for j in range(m.shape[1]):
    s = s + m[1, j] * m[0, j]
  return s


@pytest.mark.parametrize('width', [0, 3])
def test_a_loop_over_an_empty_axis_does_not_run(width):
  # Type inference ran each primitive of the loops' bodies on made-up
  # values of the empty axis, and `m[0, i]` failed to index: a false
  # alarm, as the bodies never run for such a member.
  _run_over_empty_axis(empty_axis_sums, empty_axis_sums.python_function,
                       width)


def _run_over_empty_axis(fn, plain, width):
  """Runs batched `fn` everywhere on members with an axis of `width`
  items, against `plain` on each member alone."""
  if width == 0:
    tf = pytest.importorskip('tensorflow')
    if tuple(int(v) for v in tf.__version__.split('.')[:2]) < (2, 18):
      pytest.skip('TensorFlow 2.16 fails a gather on the empty axis: '
                  'a known gap')
  m = np.arange(2 * 2 * width, dtype=np.float64).reshape(2, 2, width)
  want = np.array([plain(r) for r in m])
  def check(alone):
    np.testing.assert_allclose(alone, want)
  python_tests.run_everywhere(fn, [m], check)


def test_an_item_of_an_empty_axis_still_fails_its_members():
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def first(v):
    return v[0] * 2.0

  with pytest.raises(errors.PrimitiveError, match='IndexError') as info:
    first(np.ones((3, 0)))
  assert info.value.function == 'first'
  assert info.value.lineno == first.python_function.__code__.co_firstlineno + 2


@empty.batch()
def empty_axis_sums_batched(m):
  """`empty_axis_sums` written batch-aware: each member's item at its
  counter is a gather."""
  s = m[:, 0, :1].sum(axis=-1) * 0.0
  for i in range(m.shape[2]):
    s = s + np.take_along_axis(m[:, 0], np.expand_dims(i, -1), axis=1)[:, 0]
  j = 0
  while j < m.shape[-1]:
    k = np.expand_dims(j, -1)
    s = s + (np.take_along_axis(m[:, 1], k, axis=1) *
             np.take_along_axis(m[:, 0], k, axis=1))[:, 0]
    j += 1
  return s


def _empty_axis_sums_batched_plain(m):
  s = 0.0
  for i in range(m.shape[1]):
    s = s + m[0, i]
  for j in range(m.shape[1]):
    s = s + m[1, j] * m[0, j]
  return s


@pytest.mark.parametrize('width', [0, 3])
def test_a_batch_aware_loop_over_an_empty_axis_does_not_run(width):
  # As per member: type inference ran the gathers of the loops' bodies
  # on made-up values of the empty axis, and they failed to index.
  _run_over_empty_axis(empty_axis_sums_batched,
                       _empty_axis_sums_batched_plain, width)


def test_a_batch_aware_item_of_an_empty_axis_still_fails():
  ctx = ab.Context()

  @ctx.batch()
  def first(v):
    return np.take_along_axis(v, np.zeros((len(v), 1), np.int64),
                              axis=1)[:, 0] * 2.0

  with pytest.raises(errors.PrimitiveError, match='IndexError') as info:
    first(np.ones((3, 0)))
  assert info.value.function == 'first'
  assert info.value.lineno == first.python_function.__code__.co_firstlineno + 2


_W64 = np.array([0.1, 0.2, 0.3])


def _midpoint(lo, hi):
  return (lo + hi) * 0.5


def _weighted(k, x):
  return k * x + (x < k)


def _scaled(x):
  return x * _W64


def test_a_helpers_operators_promote_as_numpys():
  """A helper's `(lo + hi) * 0.5` of int64s, `k * x` of an int and a
  float, `x * W` of float32 and a float64 array: NumPy's dtypes on every
  backend (TensorFlow's operators do not promote: they failed, or kept
  float32)."""
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top

  @ab.Context().batch(per_member=True)
  def helpers(lo, hi, x, v):
    return _midpoint(lo, hi), _weighted(lo, x), _scaled(v)

  lo, hi = np.array([1, 2, 3]), np.array([4, 8, 9])
  x = np.array([0.5, 1.5, 2.5])
  v = np.arange(9, dtype=np.float32).reshape(3, 3)

  def check(out):
    want = [(_midpoint(a, b), _weighted(a, c), _scaled(d))
            for a, b, c, d in zip(lo, hi, x, v)]
    for i, got in enumerate(out):
      w = np.stack([np.asarray(row[i]) for row in want])
      assert got.dtype == w.dtype, (i, got.dtype, w.dtype)
      np.testing.assert_allclose(got, w, rtol=1e-12)
  run_everywhere(helpers, [lo, hi, x, v], check=check)



def _bumpy_math(x):
  return math.sqrt(abs(x)) * math.cos(x)


def _bumpy_numpy(x):
  return np.sqrt(np.abs(x)) * np.cos(x)


def _midpoint_rule(g, a, b, points=4):
  h = (b - a) / points
  total = 0.0 * a
  for k in range(points):
    total = total + g(a + (k + 0.5) * h)
  return h * total


def _integrals_math(a, b):
  return _midpoint_rule(_bumpy_math, a, b)


def _integrals_numpy(a, b):
  return _midpoint_rule(g=_bumpy_numpy, a=a, b=b)



_contraction = lambda z: np.cos(z) * 0.9 + np.sqrt(np.abs(z)) * 0.1  # pylint: disable=g-long-lambda,unnecessary-lambda-assignment
_damped = lambda z, c=0.5: c * math.tanh(z) + (1 - c) * z  # pylint: disable=unnecessary-lambda-assignment


def _iterated_lambda(x, k):
  i = 0
  while i < k:
    x = _contraction(x)
    i += 1
  return x


def _lambda_through_helper(a, b):
  return _midpoint_rule(_damped, a, b)


kk = 100.0   # not the parameter the inline lambda below reads


def _inline_lambda_through_helper(a, b, kk):  # pylint: disable=redefined-outer-name
  y = _midpoint_rule(lambda t: t * kk, a, b)
  return y


@pytest.mark.parametrize('fn,per_member', [
    (_iterated_lambda, False), (_iterated_lambda, True),
    (_lambda_through_helper, True),
    (_inline_lambda_through_helper, True),
    (_inline_lambda_through_helper, False)])
def test_a_lambda_helper_is_rewritten_as_a_def_one(fn, per_member):
  """A module-level lambda called as a helper, or passed to one, runs
  on TensorFlow as a `def` does (under `tf.function` and XLA its NumPy
  and math calls reached symbolic tensors)."""
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  f = ab.Context().batch(per_member=per_member)(fn)
  a = np.array([0.0, 1.0, -2.0])
  b = np.array([3, 10, 0]) if fn is _iterated_lambda else np.array(
      [1.0, 3.0, 2.0])
  args = [a, b]
  if fn is _inline_lambda_through_helper:
    args.append(np.array([2.0, 3.0, -1.0]))

  def check(out):
    np.testing.assert_allclose(out, [fn(*x) for x in zip(*args)],
                               rtol=1e-12)
  run_everywhere(f, args, check=check)


# Lambdas whose source line is not a statement of their own, or holds
# more than one lambda: found in the parsed file, told apart by columns.
_cos_step, _sin_step = lambda z: np.cos(z) * 0.5, lambda z: np.sin(z) * 0.5  # pylint: disable=unnecessary-lambda-assignment
_steps = types.SimpleNamespace(
    grow=lambda b: np.sqrt(np.abs(b)) + 1.0,
    damp=lambda b: np.exp(-b * b) * math.cos(0.0))
_twice = lambda z: (lambda w: np.tanh(w) * 2.0)(z) + 1.0  # pylint: disable=unnecessary-lambda-assignment


class _Model:
  scale = 2.0
  apply = lambda self, x: np.sin(x) * self.scale  # pylint: disable=unnecessary-lambda-assignment


_model = _Model()


def _lambdas_of_many_kinds(x, k):
  i = 0
  while i < k:
    x = _cos_step(x) + _sin_step(x) + _steps.grow(x) * _steps.damp(x)
    x = _twice(x) * 0.1 + _model.apply(x)
    i += 1
  return x


@pytest.mark.parametrize('per_member', [False, True])
def test_lambdas_beside_others_or_inside_expressions_are_helpers(per_member):
  """Two lambdas on a line, lambdas inside a call spanning lines, a
  lambda in a lambda and one in a class body run on TensorFlow as a
  `def` does (under `tf.function` and XLA their NumPy calls reached
  symbolic tensors)."""
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  f = ab.Context().batch(per_member=per_member)(_lambdas_of_many_kinds)
  x, k = np.array([0.0, 1.0, -2.0]), np.array([3, 1, 0])

  def check(out):
    np.testing.assert_allclose(
        out, [_lambdas_of_many_kinds(*a) for a in zip(x, k)], rtol=1e-12)
  run_everywhere(f, [x, k], check=check)


def test_a_lambda_whose_source_cannot_be_read_is_called_as_written(
    tmp_path):
  """A lambda whose file is gone, or no longer parses, is called as
  written: reading its source raises nothing."""
  from autobatch_vm.per_member import member_helpers  # pylint: disable=g-import-not-at-top
  from autobatch_vm.per_member import member_ops  # pylint: disable=g-import-not-at-top
  text = 'g = lambda t: np.cos(t) * 2.0\n'
  broken = tmp_path / 'broken.py'
  broken.write_text('g = lambda t: np.cos(t) * (\n')
  for name in (str(tmp_path / 'gone.py'), str(broken)):
    space = {'np': np}
    exec(compile(text, name, 'exec'), space)  # pylint: disable=exec-used
    g = space['g']
    assert member_helpers.is_helper(g)
    assert member_helpers.member_helper(g, member_ops) is g
    assert g(0.0) == 2.0


@pytest.mark.parametrize('fn,per_member', [
    (_integrals_math, True), (_integrals_numpy, True),
    (_integrals_numpy, False)])
def test_a_function_passed_to_a_helper_is_rewritten_as_the_helper(
    fn, per_member):
  """`integrate(g, a, b)`: `g`, reached through the helper's argument,
  runs on the helper's values (one member's tensors, a batch's symbolic
  ones), so its math and NumPy calls are rewritten as the helper's."""
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  f = ab.Context().batch(per_member=per_member)(fn)
  a = np.array([0.0, 1.0, -2.0])
  b = np.array([1.0, 3.0, 2.0])

  def check(out):
    np.testing.assert_allclose(out, [fn(x, y) for x, y in zip(a, b)],
                               rtol=1e-12)
  run_everywhere(f, [a, b], check=check)


def _splitmix(z):
  return z ^ (z >> np.uint64(3))


def _numpy_scalars_first(z):
  return ((np.uint64(5) ^ z) + (np.uint64(1) << (z & np.uint64(7))) +
          (z << np.uint64(2)) - (np.uint64(7) >> (z & np.uint64(1))))


def _float_scalars(x):
  return np.float32(2.0) * x + x / np.float64(3.0) < np.float32(4)


@pytest.mark.parametrize('per_member', [False, True])
def test_a_helpers_operators_take_numpy_scalars(per_member):
  """A helper's `z >> np.uint64(3)`, `np.uint64(5) ^ z`, `np.float32(2.0)
  * x` on TensorFlow: NumPy's reflected operator would have read a
  symbolic tensor's values (under `tf.function` and XLA)."""
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top

  @ab.Context().batch(per_member=per_member)
  def helpers(z, x):
    return _splitmix(z), _numpy_scalars_first(z), _float_scalars(x)

  z = np.array([1, 2, 3, 40], np.uint64)
  x = np.array([0.5, 1.0, 2.5, 3.0], np.float32)

  def check(out):
    want = [(_splitmix(a), _numpy_scalars_first(a), _float_scalars(b))
            for a, b in zip(z, x)]
    for i, got in enumerate(out):
      w = np.stack([np.asarray(row[i]) for row in want])
      assert np.asarray(got).dtype == w.dtype, (i, got.dtype, w.dtype)
      np.testing.assert_array_equal(got, w)
  run_everywhere(helpers, [z, x], check=check)


def test_a_generator_of_a_members_seed_is_refused_with_what_to_write():
  """`np.random.default_rng(seed)` of a member's seed: no batch holds a
  generator per member, so it is refused at the user's line with the
  counter-based generator to write instead (the message spoke of
  `MemberArray`s); the dry run, plain Python, runs."""
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def walk(seed, n):
    rng = np.random.default_rng(seed)
    x = 0.0
    for _ in range(n):
      x = x + rng.normal()
    return x

  @ctx.batch(per_member=True)
  def legacy(seed):
    return np.random.RandomState(seed).normal()

  seed, n = np.array([1, 2, 3]), np.array([2, 3, 4])
  np.testing.assert_allclose(
      walk(seed, n, dry_run=True),
      [np.random.default_rng(s).normal(size=k).sum()
       for s, k in zip(seed, n)])
  tf = pytest.importorskip('tensorflow')
  for fn, args in ((walk, (seed, n)), (legacy, (seed,))):
    for call in (lambda: fn(*args),
                 lambda: fn(*[tf.constant(a) for a in args])):
      with pytest.raises(errors.PerMemberError) as info:
        call()
      assert info.value.function == fn.__name__
      assert info.value.lineno == (
          fn.python_function.__code__.co_firstlineno + 2)
      text = str(info.value)
      assert 'cannot be batched' in text and 'MemberArray' not in text
      assert 'counter-based' in text and 'splitmix64' in text


def test_a_batch_aware_generator_of_the_seeds_is_refused_on_tensorflow():
  """Batch-aware `np.random.default_rng(seed)` of the members' seeds on
  TensorFlow showed NumPy's raw TypeError ("SeedSequence expects int or
  sequence of ints"); it is refused at the user's line as a per-member
  one is, with what to write instead."""
  ctx = ab.Context()

  @ctx.batch()
  def draws(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=seed.shape)

  tf = pytest.importorskip('tensorflow')
  seed = tf.constant([1, 2, 3])
  for call in (lambda: draws(seed), lambda: tf.function(draws)(seed),
               lambda: tf.function(draws, jit_compile=True)(seed)):
    with pytest.raises(errors.PerMemberError) as info:
      call()
    assert info.value.function == 'draws'
    assert info.value.lineno == (
        draws.python_function.__code__.co_firstlineno + 2)
    text = str(info.value)
    assert 'cannot be batched' in text and 'SeedSequence' not in text
    assert 'counter-based' in text and 'splitmix64' in text


def test_a_generator_held_in_a_variable_is_refused_as_one():
  """A primitive whose value is a random generator (`rng =
  np.random.default_rng(0)`): it says so, and what to write instead (it
  said 'an array of dtype object')."""
  @ab.Context().batch()
  def draws(x):
    rng = np.random.default_rng(0)
    return x + rng.normal(size=x.shape)

  with pytest.raises(errors.TypeInferenceError) as info:
    draws(np.zeros(3))
  assert info.value.function == 'draws'
  assert info.value.lineno == draws.python_function.__code__.co_firstlineno + 2
  assert 'random generator' in str(info.value)
  assert 'counter-based' in str(info.value)
