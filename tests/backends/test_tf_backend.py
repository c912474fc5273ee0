"""The TensorFlow backend: same answers as NumPy, eagerly, staged and in XLA.

Each program runs on TF tensors eagerly, inside a user's `tf.function`,
inside `tf.function(jit_compile=True)` and in stackless mode (eagerly), and
is compared with the NumPy backend and with each member run alone
(`dry_run=True`).  Then: gradients against per-member gradients, stack
overflow and failed `assert`s in every mode, dtypes, stats, and errors.
"""

import dataclasses
import functools
import os
import re
import subprocess
import sys
import warnings
from typing import Callable

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.e2e_programs import Particle
from tests.e2e_programs import break_continue
from tests.e2e_programs import collatz_loop
from tests.e2e_programs import divmod_rec
from tests.e2e_programs import empty_rows
from tests.e2e_programs import fibonacci
from tests.e2e_programs import fibonacci_ref
from tests.e2e_programs import gcd
from tests.e2e_programs import is_even
from tests.e2e_programs import power
from tests.e2e_programs import simulate

tf = pytest.importorskip('tensorflow')

ctx = ab.Context()


# -- programs ------------------------------------------------------------------
# The shared end-to-end programs, plus a vector program written with
# operators only (e2e's `vec_halve` calls NumPy, which cannot be staged).

@ctx.batch()
def vec_halve(v, count):
  # Operators and indexing only, so it runs on NumPy and on (symbolic) TF.
  if v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1] + v[:, 2] * v[:, 2] > 1.0:
    return vec_halve(v * 0.5, count + 1)
  return v, count


@dataclasses.dataclass
class Case:
  name: str
  fn: Callable
  make_args: Callable     # (rng, batch) -> tuple of NumPy arrays/patterns
  depth: int = 20
  rtol: float = 0.0


def _ints(low, high):
  return lambda rng, b: (rng.integers(low, high, size=b),)


CASES = [
    Case('fibonacci', fibonacci, _ints(1, 12)),
    Case('even_odd', is_even, _ints(0, 18)),
    Case('gcd', gcd, lambda rng, b: (rng.integers(0, 300, size=b),
                                     rng.integers(0, 300, size=b))),
    Case('collatz_while', collatz_loop, _ints(1, 40)),
    Case('power_f64', power, lambda rng, b: (rng.uniform(-2, 2, size=b),
                                             rng.integers(0, 12, size=b)),
         rtol=1e-12),
    Case('power_f32', power,
         lambda rng, b: (rng.uniform(-2, 2, size=b).astype(np.float32),
                         rng.integers(0, 12, size=b).astype(np.int32)),
         rtol=1e-5),
    Case('tuple_result', divmod_rec,
         lambda rng, b: (rng.integers(0, 30, size=b),
                         rng.integers(2, 7, size=b))),
    Case('namedtuple_state', simulate,
         lambda rng, b: (Particle(rng.normal(size=b), rng.normal(size=b)),
                         rng.integers(0, 8, size=b)), rtol=1e-12),
    Case('vector_state', vec_halve,
         lambda rng, b: (rng.normal(scale=20, size=(b, 3)),
                         np.zeros(b, np.int64)), rtol=1e-12),
    Case('break_continue', break_continue, _ints(0, 20)),
    # A register holding nothing, live across a recursive call (stacks of
    # empty frames): TensorFlow's gathers and scatters fail on such tensors.
    Case('empty_rows', empty_rows,
         lambda rng, b: (np.zeros((b, 0, 2)), rng.integers(0, 6, size=b))),
]

MODES = ['eager', 'graph', 'xla', 'stackless']
BATCH_SIZES = [1, 5, 33]
# XLA compiles take about a second each, and graph mode traces per batch
# size: by default every program eagerly (which runs the same staged loop)
# at every size, in a graph and stackless at batch 5, and under XLA at batch
# 5 the programs that test_end_to_end.test_tensorflow_matches_reference does
# not compile (vector_state: there it calls NumPy); the rest is in `-m slow`.
_XLA_ONLY_HERE = {'vector_state'}


def _slow_mode_batch(case, mode, batch):
  if mode == 'eager':
    return False
  if mode == 'xla':
    return batch != 5 or case.name not in _XLA_ONLY_HERE
  return batch != 5


CASE_MODE_BATCHES = [
    pytest.param(case, mode, batch, id=f'{case.name}-{mode}-{batch}',
                 marks=[pytest.mark.slow]
                 if _slow_mode_batch(case, mode, batch) else [])
    for case in CASES for mode in MODES for batch in BATCH_SIZES]


def _cases_by_default(names, cases=None):
  """`cases` (default CASES) as params, those not in `names` marked slow:
  variants of the XLA run (knobs that force a code path) compile every
  program again, so the default run compiles a few that cover the path."""
  return [pytest.param(c, id=c.name,
                       marks=[] if c.name in names else [pytest.mark.slow])
          for c in (CASES if cases is None else cases)]


# Structures, events, an empty register and gcd's unused stack: the packs
# that made group runs fail before.
_GROUP_CASES = {'gcd', 'namedtuple_state', 'vector_state', 'empty_rows'}


# -- helpers -------------------------------------------------------------------

def to_tf(args):
  return [ab.instructions.pattern_map(tf.constant, a) for a in args]


def to_np(value):
  return ab.instructions.pattern_map(np.asarray, value)


def assert_same(actual, expected, rtol=0.0):
  a_leaves = ab.instructions.pattern_flatten(actual)
  e_leaves = ab.instructions.pattern_flatten(expected)
  assert type(actual) is type(expected) or not isinstance(expected, tuple)
  assert len(a_leaves) == len(e_leaves)
  for a, e in zip(a_leaves, e_leaves):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape, (a.shape, e.shape)
    assert a.dtype == e.dtype, (a.dtype, e.dtype)
    if e.dtype.kind == 'f':
      np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-12)
    else:
      np.testing.assert_array_equal(a, e)


def run_tf(fn, args, mode, **kwargs):
  """`fn` on TF tensors in `mode`; returns NumPy values."""
  targs = to_tf(args)
  if mode == 'eager':
    return to_np(fn(*targs, **kwargs))
  if mode == 'stackless':
    return to_np(fn(*targs, stackless=True))
  if mode == 'xla':
    # A bare jit_compile cannot raise: the run says which members failed
    # (a recursion returning a boolean must, `vm.failures`); none does.
    out, ok = tf.function(lambda *a: fn(*a, on_error='status', **kwargs),
                          jit_compile=True)(*targs)
    assert ok.numpy().all()
    return to_np(out)
  compiled = tf.function(lambda *a: fn(*a, **kwargs))
  return to_np(compiled(*targs))


@functools.lru_cache(maxsize=None)
def numpy_and_alone(case_name, batch):
  """Args, NumPy-backend result and per-member (dry run) result."""
  case = next(c for c in CASES if c.name == case_name)
  args = case.make_args(np.random.default_rng(batch), batch)
  batched = case.fn(*args, max_stack_depth=case.depth)
  alone = case.fn(*args, dry_run=True)
  return args, batched, alone


# -- differential tests ---------------------------------------------------------

@pytest.mark.parametrize('case, mode, batch', CASE_MODE_BATCHES)
def test_matches_numpy_and_members_alone(case, mode, batch):
  args, on_numpy, alone = numpy_and_alone(case.name, batch)
  result = run_tf(case.fn, args, mode, max_stack_depth=case.depth)
  assert_same(result, on_numpy, case.rtol)
  assert_same(result, alone, case.rtol)


@pytest.mark.parametrize('mode', ['eager', 'graph'])
def test_schedule_most(mode):
  args, on_numpy, _ = numpy_and_alone('fibonacci', 33)
  result = run_tf(fibonacci, args, mode, max_stack_depth=20,
                  schedule='most')
  assert_same(result, on_numpy)


@pytest.mark.parametrize('batch', [1, 7, 64])
def test_xla_schedule_picks_the_block_numpy_picks(batch):
  # XLA's 'most' schedule takes a max over count * K + K - 1 - block: the
  # lowest-numbered of the blocks with the most members, as NumPy's
  # argmax; finished or parked members (pc >= num_blocks) count nowhere.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends import scheduler  # pylint: disable=g-import-not-at-top
  num_blocks = 5
  pick = tf.function(
      lambda pc: loop.next_block_tensor(pc, num_blocks, 'most',
                                        knobs.CPU.one_hot_max),
      jit_compile=True)
  rng = np.random.default_rng(batch)
  cases = [np.full(batch, num_blocks), np.full(batch, num_blocks + 3),
           np.arange(batch) % num_blocks, np.arange(batch)[::-1] % 3 + 2]
  cases += [rng.integers(0, num_blocks + 2, size=batch) for _ in range(30)]
  # With its count of members, which the loop carries for its statistics.
  counted = tf.function(
      lambda pc: loop.next_block_tensor(pc, num_blocks, 'most',
                                        knobs.CPU.one_hot_max,
                                        with_count=True),
      jit_compile=True)
  for pc in cases:
    pc = pc.astype(np.int32)
    want = scheduler.Scheduler('most', num_blocks).next_block(pc)
    assert int(pick(tf.constant(pc))) == want, pc
    block, count = counted(tf.constant(pc))
    assert int(block) == want, pc
    assert int(count) == (0 if want == num_blocks else
                          int(np.sum(pc == want))), pc


def _condition_variables(hlo):
  """Per `while` of HLO text: the loop variables its condition reads, from
  the condition's root (through calls), as (tuple index, whether a
  scalar)."""
  comps = {}
  for chunk in re.split(r'\n(?=\S)', hlo):
    head = re.match(r'(?:ENTRY )?(%[\w.\-]+) ', chunk)
    if head:
      comps[head.group(1)] = chunk.splitlines()[1:]

  def reads(comp):
    defs, root, param = {}, None, None
    for line in comps[comp]:
      name, _, rest = line.strip().partition(' = ')
      if name.startswith('ROOT '):
        name = root = name[5:]
      rest = re.sub(r', metadata=\{.*', '', rest)
      defs[name] = rest
      if re.search(r' parameter\(0\)', rest):
        param = name
    found, todo, seen = set(), [root], set()
    while todo:
      name = todo.pop()
      if name in seen or name not in defs:
        continue
      seen.add(name)
      rest = defs[name]
      gte = re.search(r'get-tuple-element\(.*?(%[\w.\-]+)\), index=(\d+)',
                      rest)
      call = re.search(r' call\(.*?(%[\w.\-]+)\), to_apply=(%[\w.\-]+)',
                       rest)
      if gte and gte.group(1) == param:
        found.add((int(gte.group(2)), bool(re.match(r'\w+\[\] ', rest))))
      elif call and call.group(1) == param:
        found |= reads(call.group(2))
      else:
        todo += [n for n in re.findall(r'%[\w.\-]+', rest) if n not in comps]
    return found

  return [reads(c.group(1)) for lines in comps.values() for line in lines
          for c in [re.search(r' while\(.*condition=(%[\w.\-]+)', line)]
          if c]


def test_xla_loop_conditions_read_no_lone_scalar():
  # XLA asks how many trips each loop makes in every round of its
  # simplification passes; for a condition that compares one scalar
  # variable it copies the body's computation of that variable
  # (`loop.loop_test`).
  args, _, _ = numpy_and_alone('gcd', 5)
  staged = tf.function(lambda *a: gcd(*a, max_stack_depth=16),
                       jit_compile=True)
  hlo = staged.experimental_get_compiler_ir(*to_tf(args))(stage='hlo')
  reads = _condition_variables(hlo)
  assert reads, 'no while loop found in the HLO'
  assert all(len(r) >= 2 or not any(s for _, s in r) for r in reads), reads


def test_xla_blocks_fill_lanes_only_where_a_gradient_can_run():
  # Under XLA a block fills the lanes of members not at it only for a
  # gradient, which needs max_steps there.
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import masks  # pylint: disable=g-import-not-at-top
  backend = ab.TensorFlowBackend()
  left_as_is = {}

  @tf.function(jit_compile=True)
  def read(x, mask):
    m = masks.Mask(mask, None, False, 4)
    for can in (True, False):
      with loop.differentiable_loop(can):
        left_as_is[can] = backend.sanitize(x, m) is x
    return x
  read(tf.ones([4, 2]), tf.constant([True, False, True, False]))
  assert left_as_is == {True: False, False: True}


def test_an_integer_leftover_makes_no_nan_gradient_under_xla():
  # `x * log(n)` for the members that branch: the lane of a member with
  # n == 0 elsewhere computed -inf from its unfilled integer, and the
  # copy of a live member's x took 0 * inf = NaN back to that member.
  c = ab.Context()

  @c.batch
  def scaled(x, n):
    if ab.truthy(n > 0):
      y = x * tf.math.log(tf.cast(n, tf.float32))
    else:
      y = x
    return y

  x = tf.constant([1.0, 2.0, 3.0])
  n = tf.constant([0, 2, 3])

  def gradient():
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = scaled(x, n, max_steps=10)
    return tape.gradient(y, x)
  want = [1.0, np.log(2.0), np.log(3.0)]
  np.testing.assert_allclose(gradient(), want, rtol=1e-6)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', ab.errors.XlaErrorsWarning)
    got = tf.function(gradient, jit_compile=True)()
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_basic_block_xla_device():
  backend = ab.TensorFlowBackend(basic_block_xla_device='/device:CPU:0')
  args, on_numpy, _ = numpy_and_alone('gcd', 5)
  assert_same(run_tf(gcd, args, 'graph', backend=backend), on_numpy)


def test_eager_runs_primitives_that_cannot_be_staged():
  # A NumPy function that TensorFlow's NumPy API lacks (np.median) cannot
  # be traced; eagerly it steps instead.
  c = ab.Context()

  @c.batch()
  def halve(v, count):
    if np.median(np.abs(v), axis=-1) > 1.0:
      return halve(v * 0.5, count + 1)
    return v, count

  v = np.random.default_rng(0).normal(scale=9, size=(5, 2))
  count = np.zeros(5, np.int64)
  expected = halve(v, count)
  assert_same(to_np(halve(tf.constant(v), tf.constant(count))), expected)
  stepped = halve.last_stats
  halve(v, count)
  assert stepped.steps == halve.last_stats.steps
  assert stepped.block_active == halve.last_stats.block_active
  with pytest.raises(errors.PrimitiveError, match='TensorFlow ops'):
    tf.function(halve)(tf.constant(v), tf.constant(count))


# -- dtypes and shapes ------------------------------------------------------------

@ctx.batch()
def carry(x, n):
  if n > 0:
    y = carry(x, n - 1)
    return y
  return x


@pytest.mark.parametrize('mode', [
    'eager', pytest.param('graph', marks=pytest.mark.slow), 'xla'])
@pytest.mark.parametrize('dtype', ['int32', 'int64', 'float32', 'float64',
                                   'bool'])
def test_dtypes_and_event_dims_survive_the_stack(dtype, mode):
  rng = np.random.default_rng(3)
  x = (rng.normal(size=(6, 2, 3)) * 10).astype(dtype)
  n = rng.integers(0, 5, size=6).astype(np.int32)
  result = run_tf(carry, (x, n), mode)
  assert result.dtype == np.dtype(dtype)
  np.testing.assert_array_equal(result, x)


def test_empty_batch():
  args = (np.zeros((0, 3)), np.zeros((0,), np.int64))
  for mode in ('eager', 'graph', 'stackless'):
    v, count = run_tf(vec_halve, args, mode)
    assert v.shape == (0, 3) and count.shape == (0,)


# -- stats ---------------------------------------------------------------------

def test_stats_eager_are_ints_equal_to_numpy():
  args, _, _ = numpy_and_alone('fibonacci', 33)
  fibonacci(*args, max_stack_depth=20, stackless=False)
  expected = fibonacci.last_stats
  fibonacci(*to_tf(args), max_stack_depth=20)
  stats = fibonacci.last_stats
  assert isinstance(stats.steps, int) and stats.steps == expected.steps
  assert stats.block_executions == expected.block_executions
  assert stats.block_active == expected.block_active
  assert all(isinstance(v, int) for v in stats.block_active.values())


def test_stats_in_graph_are_tensors():
  args, _, _ = numpy_and_alone('fibonacci', 33)
  fibonacci(*args, max_stack_depth=20, stackless=False)
  expected = fibonacci.last_stats

  @tf.function
  def run(n):
    fibonacci(n, max_stack_depth=20)
    s = fibonacci.last_stats
    return s.steps, s.block_executions, s.block_active

  steps, runs, active = run(*to_tf(args))
  assert int(steps) == expected.steps
  assert {k: int(v) for k, v in runs.items()} == expected.block_executions
  assert {k: int(v) for k, v in active.items()} == expected.block_active


def test_profile_eagerly_times_every_block():
  args, on_numpy, _ = numpy_and_alone('fibonacci', 5)
  result = fibonacci(*to_tf(args), max_stack_depth=20, profile=True)
  assert_same(to_np(result), on_numpy)
  stats = fibonacci.last_stats
  assert set(stats.block_time) == set(stats.block_executions)
  assert 'fibonacci.1' in stats.table()
  # In a graph there is nothing to time per block; the run still works.
  run = tf.function(lambda n: fibonacci(n, max_stack_depth=20, profile=True))
  assert_same(to_np(run(*to_tf(args))), on_numpy)


# -- gradients ------------------------------------------------------------------

@ctx.batch()
def wiggle(x, n):
  if n <= 0:
    return x
  if x > 0:
    return wiggle(x * 0.5 - 1.0, n - 1) * 2.0
  return wiggle(x * x + 0.3, n - 1) + x


SCALE = tf.Variable(1.5, dtype=tf.float64)


@ctx.batch()
def scaled(x, n):
  if n <= 0:
    return x
  return scaled(x * SCALE, n - 1) + SCALE


def _gradients(fn, x, n, mode, max_stack_depth=16, **kwargs):
  def grad(x, n):
    with tf.GradientTape() as tape:
      tape.watch(x)
      if mode == 'alone':
        y = fn(x, n, dry_run=True)   # each member alone, plain Python
      elif mode == 'xla':
        # XLA differentiates a while_loop only with a static trip count.
        y = fn(x, n, max_stack_depth=max_stack_depth, max_steps=500,
               **kwargs)
      else:
        y = fn(x, n, max_stack_depth=max_stack_depth, **kwargs)
      total = tf.reduce_sum(y)
    dx, dscale = tape.gradient(total, [x, SCALE])
    return y, dx, dscale
  if mode in ('graph', 'xla'):
    grad = tf.function(grad, jit_compile=(mode == 'xla'))
  return grad(x, n)


# power_f64 in a graph and under XLA, and branches in a graph, are in
# `-m slow` (power_f32 and closed_over_variable run in every mode).
@pytest.mark.parametrize('fn, dtype, mode', [
    pytest.param(fn, dtype, mode, id=f'{name}-{mode}',
                 marks=[pytest.mark.slow] if (name, mode) in (
                     ('power_f64', 'graph'), ('power_f64', 'xla'),
                     ('branches', 'graph')) else [])
    for fn, dtype, name in [(power, np.float32, 'power_f32'),
                            (power, np.float64, 'power_f64'),
                            (wiggle, np.float64, 'branches'),
                            (scaled, np.float64, 'closed_over_variable')]
    for mode in ('eager', 'graph', 'xla')])
def test_gradients_match_each_member_alone(fn, dtype, mode):
  rng = np.random.default_rng(7)
  x = tf.constant(rng.uniform(-1.5, 1.5, size=7).astype(dtype))
  n = tf.constant(rng.integers(0, 9, size=7))
  y, dx, dscale = _gradients(fn, x, n, mode)
  y0, dx0, dscale0 = _gradients(fn, x, n, 'alone')
  rtol = 1e-5 if dtype == np.float32 else 1e-12
  np.testing.assert_allclose(y.numpy(), y0.numpy(), rtol=rtol)
  np.testing.assert_allclose(dx.numpy(), dx0.numpy(), rtol=rtol)
  if fn is scaled:
    np.testing.assert_allclose(dscale.numpy(), dscale0.numpy(), rtol=rtol)
  else:
    assert dscale is None and dscale0 is None


@ctx.batch()
def newton_sqrt(a, n):
  """`n` Newton steps towards sqrt(a): a loop whose trip count varies."""
  x = a
  i = 0
  while i < n:
    x = 0.5 * (x + a / x)
    i += 1
  return x


def _tape_gradient(fn, a, n):
  with tf.GradientTape() as tape:
    tape.watch(a)
    y = fn(a, n)
  return y, tape.gradient(y, a)


def test_tape_outside_an_xla_function_is_refused_clearly():
  # TensorFlow cannot differentiate an XLA-compiled while_loop from
  # outside the compiled function (its own error: "Support for TensorList
  # crossing the XLA/TF boundary is not implemented", naming neither the
  # function nor the remedy); the batched call says so and what to do.
  a = tf.constant([2.0, 3.0, 5.0], tf.float64)
  n = tf.constant([1, 3, 6])
  expected = newton_sqrt(a, n).numpy()
  fn = lambda a, n: newton_sqrt(a, n, max_steps=100)  # pylint: disable=unnecessary-lambda-assignment
  inner = tf.function(fn, jit_compile=True)

  @tf.function(jit_compile=True)
  def gradient_inside(a, n):
    return _tape_gradient(fn, a, n)[1]

  calls = {
      'traced under the tape': tf.function(fn, jit_compile=True),
      'traced before': inner,
      'compile_nested_output': ab.xla.compile_nested_output(fn),
      # The compiled function is called inside a plain tf.function.
      'inside tf.function': tf.function(inner),
      # A tape outside differentiates the gradient taken inside.
      'second order': gradient_inside,
  }
  np.testing.assert_allclose(inner(a, n).numpy(), expected, rtol=1e-12)
  for what, call in calls.items():
    with pytest.raises(errors.ArgumentError) as e:
      _tape_gradient(call, a, n)
    assert e.value.loc.function == 'newton_sqrt', what
    assert e.value.loc.filename == __file__, what
    assert ('newton_sqrt() runs inside tf.function(jit_compile=True), and '
            'a gradient tape outside that function records its call'
            in e.value.message), what
    assert 'TensorList crossing the XLA/TF boundary' in e.value.message
    assert ('Take the gradient inside the compiled function'
            in e.value.hint), what
    assert 'without jit_compile' in e.value.hint, what
  # A tape that does not record the call leaves it alone.
  with tf.GradientTape():
    np.testing.assert_allclose(inner(a, n).numpy(), expected, rtol=1e-12)


@pytest.mark.slow
def test_tape_inside_an_xla_function_or_outside_a_plain_one_differentiates():
  # d/da of n Newton steps towards sqrt(a), by every mode that TensorFlow
  # can differentiate: against central differences and the eager tape.
  a = tf.constant([2.0, 3.0, 5.0, 0.7], tf.float64)
  n = tf.constant([1, 3, 6, 0])
  y, eager = _tape_gradient(newton_sqrt, a, n)
  h = 1e-6
  central = (newton_sqrt(a + h, n).numpy()
             - newton_sqrt(a - h, n).numpy()) / (2 * h)
  np.testing.assert_allclose(eager.numpy(), central, rtol=1e-7)
  fn = lambda a, n: newton_sqrt(a, n, max_steps=100)  # pylint: disable=unnecessary-lambda-assignment
  inside = tf.function(lambda a, n: _tape_gradient(fn, a, n),
                       jit_compile=True)
  # A tape inside an outer compiled function, around an inner one: the
  # whole is one XLA compilation.
  nested = tf.function(
      lambda a, n: _tape_gradient(tf.function(fn, jit_compile=True), a, n),
      jit_compile=True)
  runs = {'tape inside jit_compile=True': inside(a, n),
          'nested compiled functions': nested(a, n)}
  for jit_compile in (None, False):
    runs[f'tape outside jit_compile={jit_compile}'] = _tape_gradient(
        tf.function(fn, jit_compile=jit_compile), a, n)
  for what, (got_y, got) in runs.items():
    np.testing.assert_allclose(got_y.numpy(), y.numpy(), rtol=1e-12,
                               err_msg=what)
    np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=1e-12,
                               err_msg=what)


# -- registers whose writes nothing reads -------------------------------------------

_LEFT = np.array([0, 0, 0, 1, 2], np.int32)
_RIGHT = np.array([0, 0, 0, 0, 3], np.int32)
_LEAF = np.array([True, True, True, False, False])


@ctx.batch()
def encode_tree(node):
  """A tree encoder: `h_left` is written, pushed across the second call
  and popped, then dead; its register is never read."""
  if ab.truthy(tf.gather(_LEAF, node)):
    return tf.ones(tf.concat([tf.shape(node), [3]], 0), tf.float64) * (
        tf.cast(node, tf.float64)[:, None])
  else:
    h_left = encode_tree(tf.gather(_LEFT, node))
    h_right = encode_tree(tf.gather(_RIGHT, node))
    return tf.tanh(h_left - 0.5 * h_right)


def test_dead_register_writes_are_not_stored_or_carried():
  """A block's write (or pop) of a register that is dead when the block
  ends (or written again in it) is not stored: a staged step then neither
  selects nor scatters it.  Later reads and pushes in the block take the
  value as computed.  Results match each member alone in every mode."""
  from autobatch_vm import liveness  # pylint: disable=g-import-not-at-top
  from autobatch_vm import virtual_machine  # pylint: disable=g-import-not-at-top
  nodes = np.array([4, 3, 0, 4, 1, 2, 4], np.int32)
  program = ctx.lowered_for_args('encode_tree', to_tf([nodes]))
  compiled = virtual_machine.CompiledProgram(
      program, ab.TensorFlowBackend(), len(nodes), 8)
  live_out = liveness.lowered_live_out(program)
  h_left = set(compiled.layout.regs['encode_tree.h_left'])
  pushes = [k for k, b in enumerate(program.blocks) if any(
      isinstance(op, ab.instructions.PushOp)
      and 'encode_tree.h_left' in op.vars for op in b.instructions)]
  pops = [k for k, b in enumerate(program.blocks) if any(
      isinstance(op, ab.instructions.PopOp)
      and 'encode_tree.h_left' in op.vars for op in b.instructions)]
  assert pushes and pops
  for k in pops:
    # Popped, used once, dead at the end: restored into `temps` only.
    assert 'encode_tree.h_left' not in live_out[program.blocks[k].label]
    assert not h_left & compiled.blocks[k].writes
  for k in pushes:
    block = program.blocks[k]
    # Written and pushed here, dead at the end: the register is not
    # among what the block writes (the stack is).
    assert any('encode_tree.h_left' in liveness.writes(op)
               for op in block.instructions)
    assert 'encode_tree.h_left' not in live_out[block.label]
    assert not h_left & compiled.blocks[k].writes
  alone = encode_tree(*to_tf([nodes]), dry_run=True).numpy()
  for mode in ('eager', 'graph', 'xla'):
    out = run_tf(encode_tree, [nodes], mode, max_stack_depth=8)
    np.testing.assert_allclose(out, alone, rtol=1e-12)


# -- XLA: blocks grouped by what they write ---------------------------------------

@ctx.batch()
def sparse_history(h, x, n):
  """Cheap steps on scalars; a wide buffer `h` written every third one."""
  i = 0
  while i < n:
    x = x * 0.5 + 1.0
    if i % 3 == 0:
      h = h * 0.9 + x[..., None]   # (a primitive sees the whole batch)
    i += 1
  return h, x


@pytest.mark.parametrize('differentiate', [False, True])
def test_xla_groups_blocks_by_what_they_write(differentiate, monkeypatch):
  """Under XLA the step is split into groups (each a switch in a one-trip
  while_loop); results and gradients still match each member alone."""
  from autobatch_vm.backends.tf import groups as groups_lib  # pylint: disable=g-import-not-at-top
  seen = []

  def spy(*args):
    groups = real(*args)
    seen.append(groups)
    return groups
  real = groups_lib.write_groups
  monkeypatch.setattr(groups_lib, 'write_groups', spy)
  rng = np.random.default_rng(3)
  # [16, 512] float64 rows are 64 KB: worth a group of their own.
  h = tf.constant(rng.normal(size=(16, 512)))
  x = tf.constant(rng.normal(size=(16,)))
  n = tf.constant(rng.integers(0, 8, size=16))

  def run(h, x, n, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch(h)
      out = sparse_history(h, x, n, **kwargs)
      total = tf.reduce_sum(out[0]) + tf.reduce_sum(out[1])
    return out, (tape.gradient(total, h) if differentiate else None)
  options = {'max_steps': 200} if differentiate else {}
  out, dh = tf.function(lambda *a: run(*a, **options),
                        jit_compile=True)(h, x, n)
  out0, dh0 = run(h, x, n, dry_run=True)
  assert len(seen) == 1 and len(seen[0]) > 1, seen
  # XLA may fuse a multiply-add: equal up to rounding.
  for a, e in zip(out, out0):
    np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-10, atol=1e-14)
  if differentiate:
    np.testing.assert_allclose(dh.numpy(), dh0.numpy(), rtol=1e-10)


@ctx.batch()
def mixed_widths(x, n, key, c, flag):
  """Recursion keeping float64, uint64, int32 and bool values on the stack
  across a call, and int64 and uint64 registers."""
  if n <= 0:
    return x, key, c, flag
  k = key * 6364136223846793005 + 1442695040888963407   # wraps around
  y, k2, c2, f2 = mixed_widths(x * 0.5 + 1.0, n - 1, k, c + 3, n % 2 == 1)
  return y + x * x, k2 ^ key, c2 - c, f2 != flag


def test_xla_packs_integers_of_one_width_together(monkeypatch):
  """Under XLA int64 and uint64 values share packs (bitcast to uint64),
  and int32 and bool ones (as uint32), registers and stacks alike; floats
  keep their own (a bitcast has no gradient).  Results, with uint64 keys
  over 2**63 and negative int64s, and gradients match each member
  alone."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  layouts = []

  class Spy(packing.Packing):

    def __init__(self, state, *args):
      super().__init__(state, *args)
      layouts.append({(key[0], key[1].name): sorted({self.dtypes[s].name
                                                     for s in slots})
                      for key, slots in zip(self.keys, self.slots)})
  monkeypatch.setattr(packing, 'Packing', Spy)
  rng = np.random.default_rng(11)
  b = 16
  x = tf.constant(rng.normal(size=b))
  n = tf.constant(rng.integers(-2, 7, size=b))
  key = tf.constant(rng.integers(0, 2**64, size=b, dtype=np.uint64))
  c = tf.constant(rng.integers(-50, 50, size=b, dtype=np.int32))
  flag = tf.constant(rng.random(b) < 0.5)

  def run(x, n, key, c, flag, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch(x)
      # It returns a boolean: under a bare jit_compile, with max_steps, it
      # says which members failed (`vm.failures`); none does.
      out, ok = mixed_widths(x, n, key, c, flag, on_error='status',
                             **kwargs)
      total = tf.reduce_sum(out[0])
    return out, tf.reduce_all(ok), tape.gradient(total, x)
  out, ok, dx = tf.function(lambda *a: run(*a, max_steps=200),
                            jit_compile=True)(x, n, key, c, flag)
  assert ok.numpy()
  out0, _, dx0 = run(x, n, key, c, flag, dry_run=True)
  layout = layouts[-1]
  assert layout[(False, 'uint64')] == ['int64', 'uint64'], layout
  assert layout[(True, 'uint64')] == ['uint64'], layout
  assert layout[(True, 'uint32')] == ['bool', 'int32'], layout
  assert 'bool' not in {dtype for _, dtype in layout}, layout
  assert layout[(True, 'float64')] == ['float64'], layout
  assert max(key.numpy()) >= 2**63 and min(n.numpy()) < 0
  np.testing.assert_allclose(out[0].numpy(), out0[0].numpy(), rtol=1e-12)
  for a, e in zip(out[1:], out0[1:]):
    assert a.dtype == e.dtype
    np.testing.assert_array_equal(a.numpy(), e.numpy())
  np.testing.assert_allclose(dx.numpy(), dx0.numpy(), rtol=1e-12)


@pytest.mark.parametrize('limit', [0, 64 * 1024, None],
                         ids=['every_block', 'some_blocks', 'default'])
@pytest.mark.parametrize('same', [True, False], ids=['all_full', 'mixed'])
def test_graph_full_steps_and_packs_match_members_alone(same, limit,
                                                        monkeypatch):
  """In a plain graph a block writing registers of `full_block_bytes` or
  more (every block, at 0) has a branch for steps with all members at it
  (no masks) besides the masked one, and `[16, 512]` float64 registers
  (4 KB rows) are packed with those the same blocks write: results and
  gradients match each member alone, whether every step is full
  (identical members) or not."""
  from autobatch_vm.backends.tf import groups  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  if limit is not None:
    monkeypatch.setattr(knobs, 'CPU', dataclasses.replace(
        knobs.CPU, full_block_bytes=limit))
  written = []

  def spy_bytes(block_fn, state, stack_slots, nominal):
    written.append(real_bytes(block_fn, state, stack_slots, nominal))
    return written[-1]
  real_bytes = loop._written_register_bytes  # pylint: disable=protected-access
  monkeypatch.setattr(loop, '_written_register_bytes', spy_bytes)
  branches = []

  def spy(b, fns):
    branches.append(len(fns))
    return real(b, fns)
  real = groups.switch
  monkeypatch.setattr(groups, 'switch', spy)
  rng = np.random.default_rng(5)
  rows = 1 if same else 16
  h = tf.constant(np.repeat(rng.normal(size=(rows, 512)), 16 // rows, 0))
  x = tf.constant(np.repeat(rng.normal(size=(rows,)), 16 // rows, 0))
  n = tf.constant(np.repeat(rng.integers(1, 8, size=rows), 16 // rows, 0))

  def run(h, x, n, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch(h)
      out = sparse_history(h, x, n, **kwargs)
      total = tf.reduce_sum(out[0] * out[0]) + tf.reduce_sum(out[1])
    return out, tape.gradient(total, h)
  out, dh = tf.function(run)(h, x, n)
  out0, dh0 = run(h, x, n, dry_run=True)
  program = ctx.lowered_for_args('sparse_history', (h, x, n))
  large = sum(w >= knobs.CPU.full_block_bytes for w in written)
  assert len(written) == len(program.blocks)
  assert branches == [len(program.blocks) + large], branches
  # Every block at 0; at 64 KB those writing a `[16, 512]` float64
  # register; by default (96 KB) none.
  expected = {0: len(program.blocks), 64 * 1024: 2, None: 0}[limit]
  assert large == expected, written
  for a, e in zip(out, out0):
    np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-12)
  assert isinstance(dh, tf.Tensor)   # dense, not IndexedSlices
  np.testing.assert_allclose(dh.numpy(), dh0.numpy(), rtol=1e-12)


@ctx.batch()
def deep_blend(h, x, n):
  """Recursion keeping `[512]` rows (`h`, `g`) on the stack across a call."""
  if n <= 0:
    return h * x[..., None]   # (a primitive sees the whole batch)
  g = h * 0.5 + x[..., None]
  r = deep_blend(g, x * 0.9, n - 1)
  return r + g * h


def _deep_blend_and_gradient(h, x, n, **kwargs):
  """`deep_blend`'s result and the gradient of its sum of squares in `h`."""
  with tf.GradientTape() as tape:
    tape.watch(h)
    out = deep_blend(h, x, n, max_stack_depth=12, **kwargs)
    total = tf.reduce_sum(out * out)
  return out, tape.gradient(total, h)


def test_graph_large_stacks_packed_by_pushers(monkeypatch):
  """In a plain graph stacks of `[depth + 1, 16, 512]` float64 (over the
  pack limit) are packed with the stacks the same blocks push, pushed by a
  scatter (members not pushing write the spare frame): results, gradients
  and overflow match each member alone / fail the run."""
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  layouts = []

  class Spy(packing.Packing):

    def __init__(self, state, stack_slots, *args):
      super().__init__(state, stack_slots, *args)
      layouts.append([(g, tuple(key[2]), len(slots))
                      for g, (key, slots) in enumerate(zip(self.keys,
                                                           self.slots))
                      if key[0]])
  monkeypatch.setattr(packing, 'Packing', Spy)
  rng = np.random.default_rng(7)
  h = tf.constant(rng.normal(size=(16, 512)))
  x = tf.constant(rng.normal(size=(16,)))
  n = tf.constant(rng.integers(0, 9, size=16))

  out, dh = tf.function(_deep_blend_and_gradient)(h, x, n)
  out0, dh0 = _deep_blend_and_gradient(h, x, n, dry_run=True)
  # `h` and `g`, pushed by the same block, in one pack.
  big = [(shape, count) for layout in layouts for _, shape, count in layout
         if np.prod(shape) * 8 * 2 > knobs.CPU.pack_bytes]
  assert big == [((13, 16, 512), 2)], layouts
  np.testing.assert_allclose(out.numpy(), out0.numpy(), rtol=1e-12)
  np.testing.assert_allclose(dh.numpy(), dh0.numpy(), rtol=1e-12)
  shallow = tf.function(lambda h, x, n: deep_blend(h, x, n,
                                                   max_stack_depth=6))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='StackOverflowError.*max_stack_depth=6'):
    shallow(h, x, n)


@ctx.batch()
def twin_blend(h, x, n):
  """Recursion whose one block writes two `[512]` rows (`a`, `b`)."""
  if n <= 0:
    return h * x[..., None]
  a = h * 0.5 + x[..., None]
  b = h * 0.25 - x[..., None]
  r = twin_blend(a + b, x * 0.9, n - 1)
  return r + a * b


def test_graph_large_registers_carried_flat(monkeypatch):
  """Outside XLA a register of `flat_register_bytes` or more (`twin_blend`'s
  `[16, 512]` float64 rows, 64 KB) is a loop variable of its own; with the
  knob off, `a` and `b`, which one block writes, share a pack.  Values and
  gradients match each member alone either way."""
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  flats = []

  class Spy(packing.Packing):

    def __init__(self, state, *args, **kwargs):
      super().__init__(state, *args, **kwargs)
      flats.append(sum(tuple(state[s].shape) == (16, 512)
                       for s in self.flat))
  monkeypatch.setattr(packing, 'Packing', Spy)
  rng = np.random.default_rng(3)
  h = tf.constant(rng.normal(size=(16, 512)))
  x = tf.constant(rng.normal(size=(16,)))
  n = tf.constant(rng.integers(0, 6, size=16))

  def run(**kwargs):
    with tf.GradientTape() as tape:
      tape.watch(h)
      out = twin_blend(h, x, n, max_stack_depth=8, **kwargs)
      total = tf.reduce_sum(out * out)
    return out, tape.gradient(total, h)
  out0, dh0 = run(dry_run=True)
  counted = []
  for knob in [knobs.CPU, knobs.TuningKnobs(flat_register_bytes=None)]:
    flats.clear()
    out, dh = tf.function(functools.partial(
        run, backend=ab.TensorFlowBackend(knobs=knob)))()
    counted.append(flats[0])
    np.testing.assert_allclose(out.numpy(), out0.numpy(), rtol=1e-12)
    np.testing.assert_allclose(dh.numpy(), dh0.numpy(), rtol=1e-12)
  flat_on, flat_off = counted
  assert flat_on == flat_off + 2, counted


def _pushes_in_place(monkeypatch):
  """A backend pushing every stack pack in place (`ops.update_rows`), not
  only those of the default `inplace_stack_bytes` or more; returns it and
  a list that counts the pushes traced in place."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  traced = []
  real = ops.update_rows

  def spy(*args):
    traced.append(1)
    return real(*args)
  monkeypatch.setattr(ops, 'update_rows', spy)
  return ab.TensorFlowBackend(
      knobs=ab.tf_backend.TuningKnobs(inplace_stack_bytes=1)), traced


@pytest.mark.parametrize('case', _cases_by_default(_GROUP_CASES))
def test_xla_with_many_groups_matches_members_alone(case, monkeypatch):
  """Under XLA the blocks run in groups, each in a single-trip loop (see
  `groups.write_groups`).  With a group per distinct set of writes (3-5 groups
  here), every program matches the NumPy backend and each member alone.
  (When every group's loop carried every pack, programs with a pack no
  block writes, such as gcd's unused stack, failed to compile with three
  groups or more.)  No pack is written whole here: blocks writing
  different rows of a pack then write it alike, and fall into fewer
  groups."""
  from autobatch_vm.backends.tf import groups as groups_lib  # pylint: disable=g-import-not-at-top
  backend = ab.TensorFlowBackend(
      knobs=ab.tf_backend.TuningKnobs(group_step_bytes=1,
                                      whole_pack_bytes=0))
  groups = []
  write_groups = groups_lib.write_groups

  def spy(packing, block_writes, *heavy):
    groups.append(write_groups(packing, block_writes, *heavy))
    return groups[-1]
  monkeypatch.setattr(groups_lib, 'write_groups', spy)
  args, on_numpy, alone = numpy_and_alone(case.name, 5)
  result = run_tf(case.fn, args, 'xla', max_stack_depth=case.depth,
                  backend=backend)
  assert groups and all(len(g) >= 3 for g in groups)
  assert_same(result, on_numpy, case.rtol)
  assert_same(result, alone, case.rtol)


@pytest.mark.parametrize('max_steps', [None, 10**6])
def test_xla_group_loops_count_trips_only_for_a_gradient(max_steps):
  # A group's single-trip loop ends on its predicate alone; TensorFlow's
  # trip counter (maximum_iterations), which XLA copies in, adds to and
  # tests at every step, is there only where a gradient can run through
  # the loop (max_steps, `loop.differentiable`).
  backend = ab.TensorFlowBackend(
      knobs=ab.tf_backend.TuningKnobs(group_step_bytes=1,
                                      whole_pack_bytes=0))
  args, _, _ = numpy_and_alone('gcd', 5)
  staged = tf.function(lambda *a: gcd(*a, max_stack_depth=16,
                                      max_steps=max_steps, backend=backend),
                       jit_compile=True)
  hlo = staged.experimental_get_compiler_ir(*to_tf(args))(stage='hlo')
  # Per loop, the scalars its condition reads: a group's predicate, and
  # the counter if any (the staged loop's block index is not a scalar).
  scalar_reads = [sum(s for _, s in r) for r in _condition_variables(hlo)]
  counted = scalar_reads.count(2)
  assert len(scalar_reads) >= 4, scalar_reads   # the loop and 3+ groups
  assert counted == (0 if max_steps is None else len(scalar_reads) - 1), (
      scalar_reads)


@pytest.mark.parametrize('case', [
    c for c in CASES if c.name in ('fibonacci', 'even_odd', 'power_f64',
                                   'tuple_result')])
def test_xla_packs_written_whole_match_members_alone(case, monkeypatch):
  """Under XLA a small pack is written whole: each block's branch returns
  the pack after its writes and pushes (`packing.Packing.whole`).  With
  every pack so written, in a group per set of written packs, every
  program matches the NumPy backend and each member alone, and so do
  gradients."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  written = []
  real = packing.Packing._whole_pack  # pylint: disable=protected-access

  def spy(self, st, writes, g):
    written.append(self.keys[g][0])
    return real(self, st, writes, g)
  monkeypatch.setattr(packing.Packing, '_whole_pack', spy)
  backend = ab.TensorFlowBackend(knobs=ab.tf_backend.TuningKnobs(
      group_step_bytes=1, whole_pack_bytes=1 << 30))
  _assert_xla_case_matches_alone(case, backend)
  assert True in written and False in written   # stacks and registers


def _assert_xla_case_matches_alone(case, backend):
  """`case` under XLA on `backend` matches the NumPy backend and each
  member alone; for power_f64, gradients too."""
  args, on_numpy, alone = numpy_and_alone(case.name, 5)
  result = run_tf(case.fn, args, 'xla', max_stack_depth=case.depth,
                  backend=backend)
  assert_same(result, on_numpy, case.rtol)
  assert_same(result, alone, case.rtol)
  if case.name == 'power_f64':
    rng = np.random.default_rng(3)
    x = tf.constant(rng.uniform(-1.5, 1.5, size=7))
    n = tf.constant(rng.integers(0, 9, size=7))
    _assert_gradients_match_alone(power, x, n, 'xla', backend=backend)


# Every program in windows of 2 frames; over the whole stack, power_f64
# (with gradients) by default and the others in `-m slow`.
@pytest.mark.parametrize('case, window', [
    pytest.param(c, window, id=f'{c.name}-{window}',
                 marks=[pytest.mark.slow]
                 if window == 32 and c.name != 'power_f64' else [])
    for c in CASES
    if c.name in ('fibonacci', 'even_odd', 'power_f64', 'tuple_result')
    for window in (2, 32)])
def test_xla_pushes_by_select_match_members_alone(case, window, monkeypatch):
  """Where XLA expands a scatter into a loop (TensorFlow 2.18 on CPU),
  pushes are selects (`ops.window_push`): over windows of a few frames, a
  loop trip per window holding pushes (here 2 frames, so members at
  different depths take several trips), or over the whole stack where it
  has at most that many frames (32 here, against stacks of 21).  With
  every push so written, on any TensorFlow, every program matches the
  NumPy backend and each member alone, and so do gradients.  (No pack is
  written whole here, or these small stacks would take no push.)"""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  pushes = []
  real = ops.window_push

  def spy(*args):
    pushes.append(1)
    return real(*args)
  backend = ab.TensorFlowBackend(knobs=ab.tf_backend.TuningKnobs(
      push_window_frames=window, whole_pack_bytes=0))
  monkeypatch.setattr(ops, 'xla_cpu_expands_scatter', lambda: True)
  monkeypatch.setattr(ops, 'window_push', spy)
  _assert_xla_case_matches_alone(case, backend)
  assert pushes   # the call stack at least


@pytest.mark.parametrize('window, window_bytes', [
    (2, 4096), (8, 300), pytest.param(32, 4096, marks=pytest.mark.slow)])
def test_xla_pushes_by_select_of_events_match_alone(window, window_bytes,
                                                    monkeypatch):
  """Pushes by select (`ops.window_push`) on stacks of events (`[13, 9, 4]`
  float64 frames, 288 bytes): results and gradients through the pushes
  match each member alone, in windows of 2 frames, of 1 frame (8 frames
  allowed, but only 300 bytes), and over the whole stack."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  backend = ab.TensorFlowBackend(knobs=ab.tf_backend.TuningKnobs(
      push_window_frames=window, push_window_bytes=window_bytes,
      whole_pack_bytes=0))
  windows = []
  real = ops.window_push

  def spy(pack, values, rows, targets, frames):
    windows.append(frames)
    return real(pack, values, rows, targets, frames)
  monkeypatch.setattr(ops, 'window_push', spy)
  monkeypatch.setattr(ops, 'xla_cpu_expands_scatter', lambda: True)
  rng = np.random.default_rng(11)
  h = tf.constant(rng.normal(size=(9, 4)))
  x = tf.constant(rng.normal(size=(9,)))
  n = tf.constant(rng.integers(0, 12, size=9))

  out, dh = tf.function(
      lambda *a: _deep_blend_and_gradient(*a, max_steps=200, backend=backend),
      jit_compile=True)(h, x, n)
  out0, dh0 = _deep_blend_and_gradient(h, x, n, dry_run=True)
  np.testing.assert_allclose(out.numpy(), out0.numpy(), rtol=1e-12)
  np.testing.assert_allclose(dh.numpy(), dh0.numpy(), rtol=1e-12)
  assert 1 in windows if window_bytes == 300 else 1 not in windows


@pytest.mark.parametrize('window', [1, 2, 6])
def test_window_push_of_ports_with_different_frames(window):
  """`ops.window_push` writes each port's pushes whatever frames the other
  ports push to (one loop of windows for all of them): two ports of a
  pack of stacks with members pushing to different frames, some not at
  all, against the same pushes written one by one in NumPy."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  pack = rng.normal(size=(3, 6, 5, 2)).astype(np.float32)
  values = rng.normal(size=(2, 5, 2)).astype(np.float32)
  rows = np.array([[1], [0]], np.int32)
  targets = np.array([[0, 5, -1, 2, 2], [3, -1, 3, 4, 0]], np.int32)
  want = pack.copy()
  for j in range(2):
    for b in range(5):
      if targets[j, b] >= 0:
        want[rows[j, 0], targets[j, b], b] = values[j, b]
  got = tf.function(
      lambda *a: ops.window_push(*a, window), jit_compile=True)(
          pack, values, rows, targets)
  np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize('n', [1, 8, 9, 13, 17, 64, 65])
@pytest.mark.parametrize('dtype', [np.float32, np.int64, np.bool_])
def test_stack_under_xla_is_tf_stack(n, dtype):
  """`ops.stack` under XLA (groups of at most 8, padded and selected)
  gives `tf.stack`'s values bit for bit: negative zeros and NaNs' payloads
  included, for rows of rank 0 to 2."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(n)
  for shape in ([], [5], [4, 3]):
    if dtype == np.bool_:
      values = rng.random([n] + shape) < 0.5
    elif dtype == np.int64:
      values = rng.integers(-2**62, 2**62, [n] + shape)
    else:
      bits = rng.integers(0, 2**32, [n] + shape, dtype=np.uint64)
      values = bits.astype(np.uint32).view(np.float32)   # NaNs, -0.0 too
      values.flat[0] = -0.0
    values = values.astype(dtype)
    got = tf.function(lambda *v: ops.stack(v), jit_compile=True)(*values)
    assert got.shape == values.shape
    np.testing.assert_array_equal(got.numpy().view(np.uint8),
                                  values.view(np.uint8))


def test_stack_under_xla_gradient():
  """The gradient through `ops.stack` under XLA (a gradient through the
  staged loop, with `max_steps`) is each row's own."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  values = [tf.constant(rng.normal(size=(4, 2)).astype(np.float32))
            for _ in range(11)]
  weights = tf.constant(rng.normal(size=(11, 4, 2)).astype(np.float32))

  @tf.function(jit_compile=True)
  def grads(*values):
    with tf.GradientTape() as tape:
      tape.watch(values)
      loss = tf.reduce_sum(ops.stack(values) * weights)
    return tape.gradient(loss, values)
  for got, want in zip(grads(*values), tf.unstack(weights)):
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _graph_op_types(fn, *args):
  """The op types of `fn`'s graph traced at `args` (`tf.function`)."""
  graph = tf.function(fn).get_concrete_function(*args).graph
  return [op.type for op in graph.get_operations()]


@pytest.mark.parametrize('dtype', [np.float32, np.int64, np.bool_, np.uint8])
def test_select_outside_xla_is_tf_where(dtype):
  """`masks.select` and `Mask.select` outside XLA give `tf.where`'s values
  bit for bit (NaN payloads, -0.0), by `Select` where the static shapes
  allow (equal), by `SelectV2` where the select broadcasts (`Mask.select`
  also by rows, its mask along the first axis) or for dtypes `Select`
  has no GPU kernel for (uint8); under XLA `tf.where`."""
  from autobatch_vm.backends.tf import masks  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(7)

  def values(shape):
    if dtype == np.bool_:
      return rng.random(shape) < 0.5
    if dtype == np.int64:
      return rng.integers(-2**62, 2**62, shape)
    if dtype == np.uint8:
      return rng.integers(0, 256, shape)
    bits = rng.integers(0, 2**32, shape, dtype=np.uint64)
    out = bits.astype(np.uint32).view(np.float32)
    out.flat[0] = -0.0
    return out
  member = rng.random(6) < 0.5
  cases = [  # condition, x, y, whether Select (v1) is expected
      (member, values([6]), values([6]), True),
      (rng.random([2, 6, 3]) < 0.5, values([2, 6, 3]),
       values([2, 6, 3]), True),
      (member[:, None], values([6, 3]), values([6, 3]), False),  # broadcast
      (member[:3], values([3, 3]), values([3, 3]), False),  # the last axis
      (member, values([6]), values([]), False),                  # broadcast
  ]
  for cond, x, y, v1 in cases:
    x, y = x.astype(dtype), y.astype(dtype)
    want = tf.where(cond, x, y).numpy()
    fn = lambda c, a, b: masks.select(c, a, b)  # pylint: disable=cell-var-from-loop
    got = tf.function(fn)(cond, x, y).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    v1 = v1 and dtype != np.uint8
    types = _graph_op_types(fn, cond, x, y)
    assert ('Select' in types) == v1 and ('SelectV2' in types) != v1
    xla = tf.function(fn, jit_compile=True)(cond, x, y).numpy()
    np.testing.assert_array_equal(xla.view(np.uint8), want.view(np.uint8))

  def by_mask(mask, new, old):
    m = masks.Mask(mask, None, False, int(mask.shape[0]))
    return m.select(new, old)
  for shape in ([6], [6, 3], [6, 2, 3]):
    new, old = values(shape).astype(dtype), values(shape).astype(dtype)
    want = tf.where(np.reshape(member, [6] + [1] * (len(shape) - 1)),
                    new, old).numpy()
    got = tf.function(by_mask)(member, new, old).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    types = _graph_op_types(by_mask, member, new, old)
    if dtype == np.uint8:
      assert 'Select' not in types and 'SelectV2' in types
    else:
      assert 'Select' in types and 'SelectV2' not in types
      assert 'BroadcastTo' not in types   # the rows' select takes the mask


def test_select_outside_xla_gradient():
  """The gradient through `Mask.select`'s `Select` is `tf.where`'s: the
  upstream gradient in the lanes each side gave, zero elsewhere."""
  from autobatch_vm.backends.tf import masks  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(4)
  member = tf.constant(rng.random(5) < 0.5)
  new = tf.constant(rng.normal(size=(5, 3)).astype(np.float32))
  old = tf.constant(rng.normal(size=(5, 3)).astype(np.float32))
  weights = tf.constant(rng.normal(size=(5, 3)).astype(np.float32))

  @tf.function
  def grads(new, old):
    with tf.GradientTape() as tape:
      tape.watch([new, old])
      picked = masks.Mask(member, None, False, 5).select(new, old)
      loss = tf.reduce_sum(picked * weights)
    return tape.gradient(loss, [new, old])
  got_new, got_old = grads(new, old)
  on = np.broadcast_to(member.numpy()[:, None], (5, 3))
  np.testing.assert_array_equal(got_new.numpy(),
                                np.where(on, weights.numpy(), 0))
  np.testing.assert_array_equal(got_old.numpy(),
                                np.where(on, 0, weights.numpy()))


_SCATTERED = ab.Context()


@_SCATTERED.batch(type_inference=lambda _: [ab.TensorType(np.float32, ())])
def scattered_writes(x):
  """Sixteen float32 registers, written every other one in a branch."""
  a0, a1, a2, a3 = x, x + 1, x + 2, x + 3
  a4, a5, a6, a7 = x * 2, x * 3, x * 4, x * 5
  a8, a9, a10, a11 = x - 1, x - 2, x - 3, x - 4
  a12, a13, a14, a15 = x / 2, x / 3, x / 4, x / 5
  n = 0
  while n < 3:
    if x > n:
      a0, a2, a4, a6 = a1 * a2, a3 - a0, a5 + a4, a7 * 0.5
      a8, a10, a12, a14 = a9 + a8, a11 * a10, a13 - a12, a15 + a14
    else:
      a1, a3 = a1 + a0, a3 - a2
    n = n + 1
  return (a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 +
          a12 + a13 + a14 + a15)


def test_xla_whole_pack_of_scattered_writes_matches_alone(monkeypatch):
  """A pack written whole under XLA by a block writing every other row
  (more than 8 pieces between kept runs: `ops.stack`'s groups, a select)
  and by blocks writing two rows (`tf.stack`, a concatenate XLA fuses):
  against each member alone."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  made = set()
  real = packing.Packing._whole_pack

  def spy(self, st, writes, g):
    out = real(self, st, writes, g)
    if len(self.slots[g]) > 8:
      made.add(out.op.type)
    return out
  monkeypatch.setattr(packing.Packing, '_whole_pack', spy)
  x = np.array([-1.0, 0.5, 1.5, 2.5, 4.0, 0.25], np.float32)
  want = scattered_writes(x, dry_run=True)
  got = run_tf(scattered_writes, [x], 'xla')
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert made == {'Pack', 'SelectV2'}, made


_HEAVY = ab.Context()
_WIDE = np.linspace(-1.0, 1.0, 4096).astype(np.float32)


@_HEAVY.batch(type_inference=lambda _: [ab.TensorType(np.float32, ())])
def wide_steps(x):
  """A loop whose one branch makes a `[4096]` value per member (a heavy
  block at 16 members: `knobs.TuningKnobs.heavy_block_elements`)."""
  n = 0
  while n < 3:
    if x > n:
      x = tf.reduce_mean(tf.tanh(x[..., tf.newaxis] * _WIDE), axis=-1) + x
    else:
      x = x * 0.5 - 1.0
    n = n + 1
  return x


def _heavy_groups_seen(monkeypatch):
  """Stubs the probes to say XLA splits loops outside conditionals only;
  returns a list that gets `(heavy, groups)` of each staged loop."""
  from autobatch_vm.backends.tf import groups  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ops, 'xla_cpu_splits_outside_conditionals_only',
                      lambda: True)
  monkeypatch.setattr(ops, 'xla_cpu_runs_thunks', lambda: True)
  seen = []
  real = groups.write_groups

  def spy(packing, writes, heavy=frozenset()):
    out = real(packing, writes, heavy)
    seen.append((heavy, out))
    return out
  monkeypatch.setattr(groups, 'write_groups', spy)
  return seen


@pytest.mark.parametrize('heavy', [True, False])
def test_xla_heavy_block_runs_alone_and_matches(monkeypatch, heavy):
  """Where XLA splits loops over threads outside conditionals only (the
  probe, stubbed here), a block whose values are large runs in a group
  of its own outside any conditional, even where its packs would have it
  guarded; against each member alone, as with the knob off."""
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  seen = _heavy_groups_seen(monkeypatch)
  x = np.linspace(-1.0, 3.0, 16).astype(np.float32)
  want = wide_steps(x, dry_run=True)
  backend = ab.TensorFlowBackend(knobs=knobs.TuningKnobs(
      guarded_group_bytes=0,
      heavy_block_elements=knobs.CPU.heavy_block_elements if heavy else None))
  got = run_tf(wide_steps, [x], 'xla', backend=backend)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert seen
  for marked, out in seen:
    if not heavy:
      assert not marked
      continue
    assert len(marked) == 1, marked
    assert [m for m, _ in out if set(m) & marked] == [tuple(marked)]


_W1024 = np.linspace(-1.0, 1.0, 1024).astype(np.float32)


@_HEAVY.batch(type_inference=lambda _: [ab.TensorType(np.float32, ())])
def wide_registers(x):
  """Blocks with `[1024]` values a member that write rows of a pack of
  eight such registers."""
  a0 = x[..., tf.newaxis] * _W1024
  a1, a2, a3 = a0 + 1.0, a0 - 1.0, a0 * 2.0
  a4, a5, a6, a7 = a0 * 3.0, a0 + 2.0, a0 - 2.0, a0 * 0.5
  n = 0
  while n < 2:
    if x > n:
      a0 = tf.tanh(a0 * a1)
    else:
      a1 = a1 * 0.5 + a2
    n = n + 1
  return tf.reduce_sum(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7, axis=-1)


def test_xla_block_writing_large_packs_is_not_heavy(monkeypatch):
  """A block whose largest value reaches the knob but whose packs hold
  more than twice as many bytes stays in its group: run inline, XLA
  would copy those packs twice a step (TFP's NUTS program on a 512-d
  Gaussian at 64 chains took 7x as long a step)."""
  seen = _heavy_groups_seen(monkeypatch)
  x = np.linspace(-1.0, 3.0, 32).astype(np.float32)
  want = wide_registers(x, dry_run=True)
  got = run_tf(wide_registers, [x], 'xla')
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert seen and not any(heavy for heavy, _ in seen), seen


def _wide_steps_status(backend):
  return lambda x: wide_steps(x, on_error='status', backend=backend)


def test_xla_heavy_block_is_split_over_threads():
  """Where XLA runs thunks and splits no loop of a conditional's branches
  (TensorFlow 2.18), the heavy block's loops are split: its group runs it
  outside any conditional.  With the knob off they are not."""
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  if not (ops.xla_cpu_runs_thunks() and
          ops.xla_cpu_splits_outside_conditionals_only()):
    pytest.skip('this XLA splits loops in conditionals too, or none, or '
                'runs no thunks')
  # 64 members: XLA splits the `[64, 4096]` loop (not `[16, 4096]`).
  x = tf.constant(np.linspace(-1.0, 3.0, 64).astype(np.float32))
  split = []
  for limit in (knobs.CPU.heavy_block_elements, None):
    backend = ab.TensorFlowBackend(
        knobs=knobs.TuningKnobs(heavy_block_elements=limit))
    f = tf.function(_wide_steps_status(backend), jit_compile=True)
    hlo = f.experimental_get_compiler_ir(x)(stage='optimized_hlo')
    split.append('outer_dimension_partitions' in hlo)
  assert split == [True, False]


def test_xla_cpu_runs_thunks_follows_xla_flags(monkeypatch):
  """The thunk runtime is TensorFlow 2.18's and newer, unless `XLA_FLAGS`
  turns it off."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  new = tuple(int(v) for v in tf.__version__.split('.')[:2]) >= (2, 18)
  monkeypatch.delenv('XLA_FLAGS', raising=False)
  assert ops.xla_cpu_runs_thunks() == new
  monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_use_thunk_runtime=false')
  assert not ops.xla_cpu_runs_thunks()
  monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_use_thunk_runtime=true')
  assert ops.xla_cpu_runs_thunks() == new


def _repeated_later_outputs(node_defs):
  """Pack nodes stacking one tensor twice where it is not its op's first
  output (`op:3`, or `op:output:3` in a function)."""
  found = []
  for node in node_defs:
    if node.op != 'Pack':
      continue
    inputs = [i for i in node.input if not i.startswith('^')]
    later = [i for i in inputs if i.rsplit(':', 1)[-1] not in (i, '0')]
    if len(later) != len(set(later)):
      found.append(node.name)
  return found


@pytest.mark.parametrize('case', CASES[:6], ids=lambda c: c.name)
def test_no_stack_of_a_repeated_later_output_where_grappler_runs(case):
  """Grappler (TensorFlow 2.16 to 2.21) rewrites a stack of one tensor
  repeated, when that tensor is not its op's first output, to stack the
  first output instead: `tf.function(lambda p: tf.stack([tf.unstack(p)[3]]
  * 2))` returns row 0.  Grappler optimizes a staged run's loop body and
  the graph around it, but not the blocks' `Case` branches, kept
  functional: no such stack may be built outside them."""
  def body(i, x):
    return i + 1, tf.stack([tf.unstack(x)[1]] * 2)
  looped = tf.function(lambda x: tf.while_loop(
      lambda i, x: i < 1, body, [0, x])).get_concrete_function(
          tf.zeros([2, 3])).graph.as_graph_def()
  assert [name for f in looped.library.function
          for name in _repeated_later_outputs(f.node_def)] == ['while/stack']
  args, _, _ = numpy_and_alone(case.name, 5)
  concrete = tf.function(
      lambda *a: case.fn(*a, max_stack_depth=case.depth)).get_concrete_function(
          *to_tf(args))
  graph_def = concrete.graph.as_graph_def()
  functions = {f.signature.name: f for f in graph_def.library.function}
  branches = set()
  for node in list(graph_def.node) + [
      n for f in functions.values() for n in f.node_def]:
    if node.op in ('Case', 'StatelessCase'):
      branches.update(f.name for f in node.attr['branches'].list.func)
  assert branches, 'no Case: the test sees no staged loop'
  found = _repeated_later_outputs(graph_def.node)
  for name, function in functions.items():
    if name not in branches:
      found += _repeated_later_outputs(function.node_def)
  assert not found, found


def test_xla_cpu_split_loops_in_branches_from_tf_2_21():
  """TensorFlow 2.21's XLA splits a large loop in a conditional's branch as
  outside one, which `ops.xla_cpu_splits_outside_conditionals_only`
  assumes there without compiling; older ones split it outside only."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  if len(os.sched_getaffinity(0)) < 2:
    pytest.skip('XLA splits no loop on one CPU')
  new = tuple(int(v) for v in tf.__version__.split('.')[:2]) >= (2, 21)
  assert ops.xla_cpu_split_loops() == ((True, True) if new
                                       else (True, False))


def test_work_counts_input_dependent_values_per_member():
  """`work` keeps a primitive's largest value that depends on its inputs,
  per member: values made from constants alone do not count, in a graph
  (a staged run's type inference) or traced eagerly."""
  from autobatch_vm.backends.tf import work  # pylint: disable=g-import-not-at-top
  backend = ab.TensorFlowBackend()
  big = np.ones([300, 700], np.float32)

  def prim(x):
    c = tf.constant(big) * 2.0   # constants only: not counted
    spread = x[:, :, tf.newaxis] * tf.ones([1, 1, 30])   # 150 a member
    return tf.reduce_sum(spread, axis=-1) + tf.reduce_sum(c)

  def prim_eager(x):
    return prim(x)

  @tf.function
  def staged():
    backend.call_for_types(prim, [tf.zeros([2, 5])], 2)
    return tf.constant(0)
  staged()
  assert work.elements(prim) == 150
  backend.trace(prim_eager, [tf.zeros([1, 5])], 1)
  assert work.elements(prim_eager) == 150
  assert work.elements(lambda x: x) == 0


def test_stack_of_nine_selects_is_one_xla_kernel():
  """Nine register selects stacked (a block writing nine registers of a
  pack): XLA:CPU's optimized HLO has no concatenate of more than 8
  operands left unfused, whose operands would be kernels of their own."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  old = tf.constant(rng.normal(size=(9, 4, 3)).astype(np.float32))
  new = tf.constant(rng.normal(size=(9, 4, 3)).astype(np.float32))
  mask = tf.constant([True, False, True, True])

  def block(old, new, mask):
    m = mask[:, tf.newaxis]
    return ops.stack([tf.where(m, new[i] * 2.0, old[i]) for i in range(9)])

  f = tf.function(block, jit_compile=True)
  want = np.where(mask.numpy()[None, :, None], new.numpy() * 2, old.numpy())
  np.testing.assert_array_equal(f(old, new, mask).numpy(), want)
  hlo = f.experimental_get_compiler_ir(old, new, mask)(stage='optimized_hlo')
  entry = hlo[hlo.index('ENTRY'):]
  widths = [m.group(1).count('%') for m in
            re.finditer(r'concatenate\(([^)]*)\)', entry)]
  assert all(w <= 8 for w in widths), widths
  assert entry.count(' fusion(') <= 2, entry


def test_push_window_frames_bounded_by_bytes():
  """A push window holds at most `push_window_frames` frames, at most
  `push_window_bytes`, at least one frame, and at most the stack."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  f32 = tf.float32
  # [256, 50] float32 frames: 51 KB each.
  assert ops.window_frames([10, 13, 256, 50], f32, 8, 4096) == 1
  # [64] float32 frames: 256 bytes.
  assert ops.window_frames([3, 21, 64], f32, 8, 4096) == 8
  assert ops.window_frames([3, 21, 256], f32, 8, 4096) == 4
  assert ops.window_frames([3, 5, 64], f32, 8, 4096) == 5
  assert ops.window_frames([3, 21, 0], f32, 8, 4096) == 8
  # A batch axis of unknown size counts as one member.
  assert ops.window_frames([3, 21, None, 2000], f32, 8, 4096) == 1


def test_scatter_probe_says_what_xla_compiles():
  """`_xla_cpu_expands_scatter` reads XLA's optimized HLO: a scatter
  there is either a `scatter` instruction or a loop, never neither."""
  from autobatch_vm.backends.tf import ops  # pylint: disable=g-import-not-at-top
  expands = ops.xla_cpu_expands_scatter()
  assert isinstance(expands, bool)
  major, minor = (int(v) for v in tf.__version__.split('.')[:2])
  if (major, minor) >= (2, 21):
    assert not expands
  elif (major, minor) <= (2, 18):
    assert expands


def _assert_gradients_match_alone(fn, x, n, mode, **kwargs):
  """The outputs and gradients of a run in `mode` are each member's."""
  y, dx, dscale = _gradients(fn, x, n, mode, **kwargs)
  y0, dx0, dscale0 = _gradients(fn, x, n, 'alone')
  np.testing.assert_allclose(y.numpy(), y0.numpy(), rtol=1e-12)
  np.testing.assert_allclose(dx.numpy(), dx0.numpy(), rtol=1e-12)
  if fn is scaled:
    np.testing.assert_allclose(dscale.numpy(), dscale0.numpy(), rtol=1e-12)


def _guard_every_group(monkeypatch):
  """A backend that, under XLA, makes a group per distinct set of writes,
  and runs every group of one block in its conditional (`run_group`);
  returns it and a list that counts the conditionals' other branches
  traced (`no_ports`)."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  traced = []
  no_ports = packing.Packing.no_ports

  def spy(self, *args):
    traced.append(1)
    return no_ports(self, *args)
  monkeypatch.setattr(packing.Packing, 'no_ports', spy)
  return ab.TensorFlowBackend(knobs=ab.tf_backend.TuningKnobs(
      group_step_bytes=1, guarded_group_bytes=0, whole_pack_bytes=0)), traced


@pytest.mark.parametrize('fn', [
    pytest.param(power, id='power'),
    pytest.param(wiggle, id='branches', marks=pytest.mark.slow),
    pytest.param(scaled, id='closed_over_variable')])
def test_xla_gradients_through_guarded_groups(fn, monkeypatch):
  """Gradients under XLA with a group per distinct set of writes and every
  group of one block run in its conditional (`groups.run_group`) match each
  member's."""
  backend, traced = _guard_every_group(monkeypatch)
  rng = np.random.default_rng(5)
  x = tf.constant(rng.uniform(-1.5, 1.5, size=7))
  n = tf.constant(rng.integers(0, 9, size=7))
  _assert_gradients_match_alone(fn, x, n, 'xla', backend=backend)
  assert traced


@pytest.mark.parametrize('case', _cases_by_default(_GROUP_CASES))
def test_xla_guarded_groups_of_one_block_match_members_alone(case,
                                                             monkeypatch):
  """Under XLA a group of one block that writes large packs runs it in a
  conditional whose other branch writes nothing (`groups.run_group`).  With a
  group per distinct set of writes and every group of one block so run,
  every program matches the NumPy backend and each member alone."""
  backend, traced = _guard_every_group(monkeypatch)
  args, on_numpy, alone = numpy_and_alone(case.name, 5)
  result = run_tf(case.fn, args, 'xla', max_stack_depth=case.depth,
                  backend=backend)
  assert traced
  assert_same(result, on_numpy, case.rtol)
  assert_same(result, alone, case.rtol)


@pytest.mark.parametrize('batch', [
    pytest.param(1, marks=pytest.mark.slow), 5,
    pytest.param(33, marks=pytest.mark.slow)])
@pytest.mark.parametrize('case', _cases_by_default(
    {'fibonacci', 'namedtuple_state', 'vector_state', 'empty_rows'}))
def test_graph_stacks_pushed_in_place_match_members_alone(case, batch,
                                                          monkeypatch):
  """Outside XLA, large stacks are written in place after the switch.
  With every stack so written: each program matches the NumPy backend and
  each member alone, and again on a second call with other arguments (the
  stacks' buffer is fresh per run, so nothing is left from the first)."""
  backend, traced = _pushes_in_place(monkeypatch)
  args, on_numpy, alone = numpy_and_alone(case.name, batch)
  other, on_numpy_other, _ = numpy_and_alone(case.name, batch + 1)
  run = tf.function(lambda *a: case.fn(*a, max_stack_depth=case.depth,
                                       backend=backend))
  assert_same(to_np(run(*to_tf(args))), on_numpy, case.rtol)
  assert_same(to_np(run(*to_tf(args))), alone, case.rtol)
  assert traced   # the PC stack at least
  assert_same(to_np(run(*to_tf(other))), on_numpy_other, case.rtol)
  assert_same(to_np(run(*to_tf(args))), alone, case.rtol)


@pytest.mark.parametrize('fn, dtype', [(power, np.float64),
                                       (wiggle, np.float64),
                                       (scaled, np.float64)],
                         ids=['power', 'branches', 'closed_over_variable'])
def test_graph_gradients_through_stacks_pushed_in_place(fn, dtype,
                                                        monkeypatch):
  """The in-place push has its own gradient (rows to the pushed values,
  the rest to the stack), and a differentiated loop never needs a stack's
  values, which later pushes overwrite: gradients match each member's."""
  backend, traced = _pushes_in_place(monkeypatch)
  rng = np.random.default_rng(11)
  x = tf.constant(rng.uniform(-1.5, 1.5, size=9).astype(dtype))
  n = tf.constant(rng.integers(0, 9, size=9))
  _assert_gradients_match_alone(fn, x, n, 'graph', backend=backend)
  assert traced


def test_stacks_pushed_in_place_only_when_large_on_cpu_outside_xla():
  """`deep_blend`'s `[13, 16, 512]` float64 stacks (two, 1.7 MB) are pushed
  in place in a plain graph on CPU, and so are stacks of scalars; not
  under XLA (in place by itself), nor on a GPU, nor where the stacks are
  small."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  seen = []

  class Spy(packing.Packing):

    def __init__(self, *args):
      super().__init__(*args)
      seen.append([tuple(self.keys[g][2]) for g in self.inplace])
  rng = np.random.default_rng(2)

  def args(rows):
    return (tf.constant(rng.normal(size=(16, rows))),
            tf.constant(rng.normal(size=(16,))),
            tf.constant(rng.integers(0, 5, size=16)))
  run = lambda *a: deep_blend(*a, max_stack_depth=12)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(packing, 'Packing', Spy)
    tf.function(run)(*args(512))
    tf.function(run, jit_compile=True)(*args(512))
    tf.function(run)(*args(4))

    @tf.function
    def on_gpu(*a):
      with tf.device('/device:GPU:0'):
        return run(*a)
    on_gpu.get_concrete_function(*args(512))
    # Stacks of scalars: fibonacci's `[21, 8000]` int64 ones (1.3 MB) and
    # its call stack (`[22, 8000]` int32), not at 16 members (2.7 KB).
    tf.function(lambda n: fibonacci(n, max_stack_depth=20))(
        tf.constant(np.arange(8000) % 5))
    tf.function(lambda n: fibonacci(n, max_stack_depth=20))(
        tf.constant(np.arange(16) % 5))
  assert seen[:4] == [[(13, 16, 512)], [], [], []], seen
  assert sorted(seen[4]) == [(21, 8000), (21, 8000), (22, 8000)], seen
  assert seen[5:] == [[]], seen


@ctx.batch()
def rewrite_push_pop(a, b, n):
  """Registers written twice in a block, then pushed, popped and read
  back, in steps where only some members are at the block."""
  if n <= 0:
    return a * b
  a = a * 0.5
  a = a + b          # written again: the block's last write counts
  b = b - a * 0.25
  r = rewrite_push_pop(b, a, n - 1)   # `a`, `b` saved across the call
  return r * 0.5 + a * b              # and read back after it


@pytest.mark.parametrize('rows', [1, 8])
def test_graph_masked_writes_match_members_alone(rows):
  """Outside XLA a masked register write waits until the block ends, so
  that a pack's rows take one select (or none: a pop or a push of the
  value uses its members' lanes).  Results and gradients match each
  member alone, with scalar and `[8]` registers."""
  rng = np.random.default_rng(4)
  shape = (12,) if rows == 1 else (12, rows)
  a = tf.constant(rng.normal(size=shape))
  b = tf.constant(rng.normal(size=shape))
  n = tf.constant(rng.integers(0, 6, size=12))

  def run(a, b, n, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch([a, b])
      out = rewrite_push_pop(a, b, n, **kwargs)
      total = tf.reduce_sum(out * out)
    return out, tape.gradient(total, [a, b])
  out, grads = tf.function(lambda *x: run(*x, max_stack_depth=8))(a, b, n)
  out0, grads0 = run(a, b, n, dry_run=True)
  np.testing.assert_allclose(out.numpy(), out0.numpy(), rtol=1e-12)
  for g, g0 in zip(grads, grads0):
    np.testing.assert_allclose(g.numpy(), g0.numpy(), rtol=1e-12)


@ctx.batch()
def spread(a, b, c, n):
  """Scalar registers of one pack read together, and some of its stacks
  pushed, in steps where only some members are at the block."""
  if n <= 0:
    return a + b * c
  if n % 2 == 0:
    r = spread(a * 0.5 + b, b - c * 0.25, c + a * 0.1, n - 1)
    return r * 0.5 + a * b - c   # `a`, `b`, `c` saved across the call
  r = spread(a - 0.1, b * 0.9, c, n - 1)
  return r + a                   # `a` alone saved across this one


def test_graph_masked_reads_fill_their_pack_at_once(monkeypatch):
  """Outside XLA a block that reads several floating registers of a
  small pack, for some members only, fills the other members' lanes in
  the whole pack by one gather (`BlockState.filled`): results and
  gradients (dense) match each member alone."""
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  seen = {'filled': 0}

  def filled(self, m, x):
    out = real_filled(self, m, x)
    seen['filled'] += out is not None
    return out

  real_filled = packing.BlockState.filled
  monkeypatch.setattr(packing.BlockState, 'filled', filled)
  rng = np.random.default_rng(6)
  a, b, c = (tf.constant(rng.normal(size=12)) for _ in range(3))
  n = tf.constant(rng.integers(0, 7, size=12))

  def run(a, b, c, n, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch([a, b, c])
      out = spread(a, b, c, n, max_stack_depth=8, **kwargs)
      total = tf.reduce_sum(out * out)
    return out, tape.gradient(total, [a, b, c])
  out, grads = tf.function(run)(a, b, c, n)
  out0, grads0 = run(a, b, c, n, dry_run=True)
  assert seen['filled'], seen
  np.testing.assert_allclose(out.numpy(), out0.numpy(), rtol=1e-12)
  for g, g0 in zip(grads, grads0):
    assert isinstance(g, tf.Tensor)   # dense, not IndexedSlices
    np.testing.assert_allclose(g.numpy(), g0.numpy(), rtol=1e-12)


def test_group_cost_follows_the_device():
  """On a GPU a one-trip loop's test syncs with the host: groups cost more
  there (so XLA keeps fewer), whatever machine traces the program."""
  backend = ab.TensorFlowBackend()
  seen = {}

  @tf.function
  def trace():
    with tf.device('/device:GPU:0'):
      seen['gpu'] = backend.device_knobs().group_step_bytes
    with tf.device('/device:CPU:0'):
      seen['cpu'] = backend.device_knobs().group_step_bytes
    return tf.constant(0)
  trace.get_concrete_function()
  assert seen['gpu'] > 100 * seen['cpu'], seen


# -- max_steps ------------------------------------------------------------------

@ctx.batch()
def count_up(n):
  """Never finishes for n > 0."""
  k = 0
  while n > 0:
    n = n + 1
    k += 1
  return k


@pytest.mark.parametrize('mode', ['eager', 'stackless'])
def test_step_limit_stops_a_run_eagerly(mode):
  # The stack VM names the members in the loop that did not finish, and
  # its line (not those waiting behind them, outside it).  Stackless
  # names the members at the block due next.
  n = tf.constant([0, 3, -2, 1])
  with pytest.raises(errors.StepLimitError,
                     match=r'max_steps=50 .*members \[1, 3\]') as e:
    count_up(n, max_steps=50, stackless=(mode == 'stackless'))
  assert e.value.function == 'count_up'
  if mode == 'eager':
    assert e.value.loc.source_line.strip() == 'while n > 0:'
    assert 'in the loop (or recursion) at this line' in str(e.value)
  np.testing.assert_array_equal(
      count_up(tf.constant([0, -2]), max_steps=50).numpy(), [0, 0])


@ctx.batch()
def nested_spin(n):
  """The inner loop never ends for n > 1."""
  i = n * 0
  while i < n:
    j = i * 0
    while j < i:
      j = j * 1
    i = i + 1
  return i


def test_step_limit_names_the_innermost_loop_or_the_recursive_call():
  with pytest.raises(errors.StepLimitError, match=r'members \[1\]') as e:
    nested_spin(tf.constant([1, 3, 0]), max_steps=60)
  assert e.value.loc.source_line.strip() == 'while j < i:'
  with pytest.raises(errors.StepLimitError) as e:
    fibonacci(tf.constant([14, 2]), max_steps=40, max_stack_depth=20)
  assert 'fibonacci(n - 1)' in e.value.loc.source_line
  assert 'in the loop (or recursion) at this line' in str(e.value)


def test_step_limit_fails_the_graph():
  run = tf.function(lambda n: count_up(n, max_steps=50))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='StepLimitError.*max_steps=50.*in the loop.*'
                     'count_up.*while n > 0:'):
    run(tf.constant([0, 3]))


def test_step_limit_under_xla_with_compile_nested_output():
  run = ab.xla.compile_nested_output(lambda n: count_up(n, max_steps=50))
  with pytest.raises(errors.StepLimitError, match=r'members \[0, 1\]') as e:
    run(tf.constant([0, 3]))
  assert e.value.loc.source_line.strip() == 'while n > 0:'
  np.testing.assert_array_equal(run(tf.constant([0, -1])).numpy(), [0, 0])


# -- stack overflow and failed asserts --------------------------------------------

OVERFLOW_ARGS = (np.array([3, 10, 5, 12]),)   # fib(12) needs depth > 8


def test_overflow_eager_raises_naming_variable_and_members():
  with pytest.raises(errors.StackOverflowError) as info:
    fibonacci(*to_tf(OVERFLOW_ARGS), max_stack_depth=8)
  text = str(info.value)
  assert 'max_stack_depth=8' in text and "saving variable 'n'" in text
  assert "in function 'fibonacci'" in text
  assert 'batch members [3]' in text and 'larger max_stack_depth' in text


def test_overflow_in_graph_fails_the_run():
  run = tf.function(lambda n: fibonacci(n, max_stack_depth=8))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"(?s)StackOverflowError.*max_stack_depth=8.*"
                     r"fibonacci.*larger max_stack_depth"):
    run(*to_tf(OVERFLOW_ARGS))


@pytest.mark.parametrize('mode', ['graph', 'xla'])
def test_deep_stacks_match_members_alone_and_overflow_fails(mode):
  """With a capacity of 1000 frames, whose stacks (and call stack) are
  pushed in place outside XLA: fibonacci matches each member, and a
  recursion one frame too deep still fails the run."""
  n = np.array([3, 14, 1, 9, 12, 7, 2, 15, 10, 5, 11] * 12)
  run = tf.function(lambda n: fibonacci(n, max_stack_depth=1000),
                    jit_compile=mode == 'xla')
  np.testing.assert_array_equal(run(tf.constant(n)).numpy(),
                                [fibonacci_ref(int(k)) for k in n])
  if mode == 'xla':
    return
  # fib(k) needs k - 2 frames: 12 hold every n % 14, not n = 15.
  deep = tf.function(lambda n: fibonacci(n, max_stack_depth=12))
  np.testing.assert_array_equal(deep(tf.constant(n % 14)).numpy(),
                                [fibonacci_ref(int(k)) for k in n % 14])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='StackOverflowError.*max_stack_depth=12'):
    deep(tf.constant(n))


def test_deep_stacks_gradients_match_members_alone():
  """Gradients through a run with 1000-frame stacks, pushed in place,
  match each member's."""
  rng = np.random.default_rng(12)
  x = tf.constant(rng.uniform(-1.5, 1.5, size=40))
  n = tf.constant(rng.integers(0, 9, size=40))
  y, dx, _ = _gradients(power, x, n, 'graph', max_stack_depth=1000)
  y0, dx0, _ = _gradients(power, x, n, 'alone')
  np.testing.assert_allclose(y.numpy(), y0.numpy(), rtol=1e-12)
  np.testing.assert_allclose(dx.numpy(), dx0.numpy(), rtol=1e-12)


def test_overflow_under_xla_poisons_the_results_and_warns_when_traced():
  run = tf.function(lambda n: fibonacci(n, max_stack_depth=8),
                    jit_compile=True)
  with pytest.warns(errors.XlaErrorsWarning,
                    match='StackOverflowError.*compile_nested_output'):
    result = run(*to_tf(OVERFLOW_ARGS)).numpy()
  # Only the member that overflowed is poisoned; the others are right.
  assert result[3] == np.iinfo(np.int64).min
  np.testing.assert_array_equal(result[:3], [2, 55, 5])


def test_overflow_under_xla_compile_nested_output_raises():
  run = ab.xla.compile_nested_output(
      lambda n: fibonacci(n, max_stack_depth=8))
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.XlaErrorsWarning)  # none here
    with pytest.raises(errors.StackOverflowError, match=r'members \[3\]'):
      run(*to_tf(OVERFLOW_ARGS))
  ok = ab.xla.compile_nested_output(
      lambda n: fibonacci(n, max_stack_depth=13))
  np.testing.assert_array_equal(ok(*to_tf(OVERFLOW_ARGS)).numpy(),
                                [2, 55, 5, 144])


def test_compile_nested_output_in_graph_fails_the_run():
  run = tf.function(ab.xla.compile_nested_output(
      lambda n: fibonacci(n, max_stack_depth=8)))
  with pytest.raises(tf.errors.InvalidArgumentError, match='max_stack_depth'):
    run(*to_tf(OVERFLOW_ARGS))


def test_compile_nested_output_keeps_nested_outputs():
  run = ab.xla.compile_nested_output(
      lambda p, n: {'p': simulate(p, n), 'n': n})
  args, on_numpy, _ = numpy_and_alone('namedtuple_state', 5)
  out = run(*to_tf(args))
  assert isinstance(out['p'], Particle)
  assert_same(to_np(out['p']), on_numpy, 1e-12)


@ctx.batch()
def checked(n):
  assert n < 10, 'n too big'
  if n > 0:
    return checked(n - 1) + 1
  return n


def test_failed_assert_in_every_mode():
  n = tf.constant([1, 12, 3])
  with pytest.raises(errors.AssertionFailedError,
                     match=r'members \[1\]: n too big'):
    checked(n)
  with pytest.raises(tf.errors.InvalidArgumentError, match='n too big'):
    tf.function(checked)(n)
  # Under a bare jit_compile nothing raises: only the failing member is
  # poisoned (the dtype's minimum), the others keep their values.
  np.testing.assert_array_equal(
      tf.function(checked, jit_compile=True)(n).numpy(),
      [1, np.iinfo(np.int32).min, 3])
  np.testing.assert_array_equal(
      tf.function(checked)(tf.constant([1, 2, 3])).numpy(), [1, 2, 3])


# -- other errors ---------------------------------------------------------------

def test_stackless_inside_tf_function_is_a_backend_error():
  run = tf.function(lambda n: fibonacci(n, stackless=True))
  with pytest.raises(errors.BackendError, match='stackless'):
    run(tf.constant([3, 4]))


@ctx.batch()
def reshaper(x):
  return tf.reshape(x, [1]) + 0 * x


def test_primitive_error_members_known_eagerly_not_in_graph():
  x = tf.constant([1, 2, 3])
  with pytest.raises(errors.PrimitiveError,
                     match=r'members at this block: \[0, 1, 2\]'):
    reshaper(x)
  with pytest.raises(errors.PrimitiveError) as info:
    tf.function(reshaper)(x)
  assert 'members at this block' not in str(info.value)


def test_backend_equality():
  assert ab.TensorFlowBackend() == ab.TensorFlowBackend()
  assert hash(ab.TensorFlowBackend()) == hash(ab.TensorFlowBackend())
  assert ab.TensorFlowBackend(while_parallel_iterations=1) != \
      ab.TensorFlowBackend()
  assert ab.TensorFlowBackend() != ab.NumpyBackend()


def test_numpy_path_does_not_import_tensorflow(tmp_path):
  script = tmp_path / 'no_tf.py'
  script.write_text(
      'import sys\n'
      'sys.modules["tensorflow"] = None  # any import of it now fails\n'
      'import numpy as np\n'
      'import autobatch_vm as ab\n'
      'ctx = ab.Context()\n'
      '@ctx.batch()\n'
      'def f(n):\n'
      '  if n > 1:\n'
      '    return f(n - 1) + n % 3 + n // 2\n'
      '  return n\n'
      'print(f(np.array([1, 5, 9])).tolist())\n')
  out = subprocess.run([sys.executable, str(script)], capture_output=True,
                       text=True, check=True)

  def f(n):
    return f(n - 1) + n % 3 + n // 2 if n > 1 else n
  assert out.stdout.strip() == str([f(1), f(5), f(9)])


def test_ops_drawn_tells_the_draws_of_ops_built_in_a_graph():
  tf = pytest.importorskip('tensorflow')
  backend = ab.TensorFlowBackend()
  found = {}

  def built(name, fn):
    with backend.ops_drawn() as drawn:
      out = fn()
    found[name] = drawn[0]
    return out

  @tf.function(autograph=False)
  def traced(x):
    a = built('math', lambda: x * 2.0 + 1.0)
    b = built('random', lambda: tf.random.normal(tf.shape(x), dtype=x.dtype))
    c = built('loop', lambda: tf.while_loop(lambda v: v < 3.0,
                                            lambda v: (v + 1.0,), (x[0],))[0])
    return a + b + c

  traced(tf.zeros([3], tf.float64))
  assert found == {'math': False, 'random': True, 'loop': None}
  with backend.ops_drawn() as drawn:   # eagerly: nothing is staged
    tf.random.normal([2])
  assert drawn == [None]
