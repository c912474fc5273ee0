"""`ab.stage`: a batched function under tf.function or XLA, its statistics
read back as numbers for each call, equal to the same run's on NumPy."""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import profiler
from tests import e2e_programs as progs

tf = pytest.importorskip('tensorflow')

MODES = [False, True]
MODE_IDS = ['graph', 'xla']


# Each schedule and each mode by default; the other pairs in `-m slow`.
@pytest.mark.parametrize('schedule, jit', [
    pytest.param(s, jit, id=f'{s}-{jit_id}',
                 marks=[] if (s == 'most') == jit else [pytest.mark.slow])
    for s in ('lowest', 'most') for jit, jit_id in zip(MODES, MODE_IDS)])
def test_stats_of_each_call_equal_numpy_runs(jit, schedule):
  """Calls alternate between two batch sizes (two traces): each call's
  statistics are its own, not those of the latest trace."""
  staged = ab.stage(progs.fibonacci, jit_compile=jit, schedule=schedule)
  for n in ([3, 9, 12, 5], [4, 8, 1, 7, 6, 2, 11, 10], [3, 9, 12, 5]):
    n = np.array(n)
    out = staged(n)
    assert tf.is_tensor(out)
    np.testing.assert_array_equal(out.numpy(),
                                  [progs.fibonacci_ref(k) for k in n])
    got = staged.last_stats
    progs.fibonacci(n, schedule=schedule, stackless=False)
    want = progs.fibonacci.last_stats
    assert not got.symbolic
    assert got.batch_size == want.batch_size == len(n)
    assert got.steps == want.steps
    assert got.block_executions == want.block_executions
    assert got.block_active == want.block_active
    assert got.utilization == want.utilization
    assert profiler.summary(got) == profiler.summary(want)


@pytest.mark.parametrize('jit', MODES, ids=MODE_IDS)
def test_stats_read_later_are_the_last_calls(jit):
  """`last_stats` are made when read: read after several calls (of two
  traces, with tensors or arrays), they are the last call's; read twice,
  they are the same object; before any call, None."""
  staged = ab.stage(progs.fibonacci, jit_compile=jit)
  assert staged.last_stats is None
  small, large = np.array([3, 9, 12]), np.array([4, 8, 1, 7, 6, 2, 11])
  for n in (small, tf.constant(large), small):
    staged(n)
  got = staged.last_stats
  assert got is staged.last_stats
  progs.fibonacci(small, stackless=False)
  want = progs.fibonacci.last_stats
  assert got.batch_size == 3 and got.steps == want.steps
  assert got.block_executions == want.block_executions
  staged(tf.constant(large))
  progs.fibonacci(large, stackless=False)
  assert staged.last_stats.batch_size == 7
  assert staged.last_stats.steps == progs.fibonacci.last_stats.steps


@pytest.mark.parametrize('jit', MODES, ids=MODE_IDS)
def test_profile_and_numpy_outputs(jit):
  n = np.array([3, 9, 12, 5, 1, 7])
  staged = ab.stage(progs.fibonacci, jit_compile=jit, profile=True)
  out = staged.numpy(n)
  assert isinstance(out, np.ndarray)
  np.testing.assert_array_equal(out, [progs.fibonacci_ref(k) for k in n])
  alone = []
  for k in n:
    progs.fibonacci(np.array([k]), stackless=False)
    alone.append(progs.fibonacci.last_stats.steps)
  stats = staged.last_stats
  np.testing.assert_array_equal(stats.member_blocks, alone)
  # Seconds per block under tf.function; XLA has no clock.
  assert bool(stats.block_time) == (not jit)
  assert 'longest member alone' in stats.table()


def test_stack_overflow_under_xla_is_raised_after_the_call():
  staged = ab.stage(progs.fibonacci, jit_compile=True, max_stack_depth=3)
  with pytest.raises(ab.errors.StackOverflowError, match='max_stack_depth'):
    staged(np.array([2, 10]))
  # Also from a call that takes the traced concrete function directly.
  np.testing.assert_array_equal(staged(np.array([2, 3])), [1, 2])
  with pytest.raises(ab.errors.StackOverflowError, match=r'\[1\]'):
    staged(np.array([2, 10]))
  assert staged.fast_calls == 2


@pytest.mark.parametrize('jit', MODES, ids=MODE_IDS)
def test_repeated_signatures_call_the_traced_function_directly(jit):
  """A call whose arguments have a signature (structure, dtypes, shapes)
  seen before calls its concrete function directly: same results and
  statistics as each run on NumPy; new signatures, and keyword arguments,
  go through tf.function.  Without XLA a second batch size of a member
  signature gets the concrete function serving every other size, called
  directly from its first call."""
  case = next(c for c in progs.CASES if c.name == 'namedtuple_state')
  staged = ab.stage(case.fn, jit_compile=jit, max_stack_depth=case.depth)
  rng = np.random.default_rng(5)
  fasts = (0, 1, 1, 2, 3) if jit else (0, 1, 2, 3, 4)
  for batch, fast in zip((6, 6, 4, 6, 4), fasts):
    args = case.make_args(rng, batch)
    out = staged(*args)
    assert staged.fast_calls == fast
    want = case.fn(*args, max_stack_depth=case.depth, stackless=False)
    for o, w in zip(out, want):
      np.testing.assert_allclose(o.numpy(), w, rtol=case.rtol)
    assert staged.last_stats.block_executions == (
        case.fn.last_stats.block_executions)
  names = case.fn.context._params_of(case.fn.name)  # pylint: disable=protected-access
  out = staged(**dict(zip(names, args)))
  assert staged.fast_calls == fasts[-1]
  for o, w in zip(out, want):
    np.testing.assert_allclose(o.numpy(), w, rtol=case.rtol)


def test_mistakes_are_argument_errors():
  with pytest.raises(ab.errors.ArgumentError, match='batched function'):
    ab.stage(progs.fibonacci_ref)
  with pytest.raises(ab.errors.ArgumentError, match='dry_run'):
    ab.stage(progs.fibonacci, dry_run=True)
  with pytest.raises(ab.errors.ArgumentError, match='dry_run'):
    ab.stage(progs.fibonacci, backend=ab.NumpyBackend())
  staged = ab.stage(progs.fibonacci)

  @tf.function
  def outer(n):
    return staged(n)
  with pytest.raises(ab.errors.ArgumentError,
                     match='inside a tf.function') as info:
    outer(tf.constant([3, 4]))
  assert 'e2e_programs.py' in str(info.value)


def test_xla_compile_logs_no_dropped_assertions(capfd):
  """Under XLA the VM's error checks are error codes, not assertions that
  XLA would drop, logging "Ignoring Assert operator" for each."""
  ctx = ab.Context()

  @ctx.batch()
  def countdown(n):
    if n > 0:
      return countdown(n - 1) + 1
    return n
  capfd.readouterr()
  staged = ab.stage(countdown, jit_compile=True, max_stack_depth=12)
  np.testing.assert_array_equal(staged.numpy(np.array([3, 0, 7])), [3, 0, 7])
  assert 'Ignoring Assert' not in capfd.readouterr().err
  with pytest.raises(ab.errors.StackOverflowError):
    staged(np.array([30]))


def test_without_the_flat_call_calls_go_through_tf_function(monkeypatch):
  """A TensorFlow whose concrete functions lack the flat call (a private
  method) keeps calling through tf.function, with the same results."""
  staged = ab.stage(progs.fibonacci)
  traced = staged._function.get_concrete_function  # pylint: disable=protected-access

  class Plain:   # a concrete function, less its _call_flat
    def __init__(self, concrete):
      self.concrete = concrete
  monkeypatch.setattr(staged._function, 'get_concrete_function',  # pylint: disable=protected-access
                      lambda *args: Plain(traced(*args)))
  for n in ([3, 9, 12], [5, 1, 7]):
    np.testing.assert_array_equal(staged(np.array(n)),
                                  [progs.fibonacci_ref(k) for k in n])
  assert staged.fast_calls == 0 and staged.last_stats.batch_size == 3


_HEAVY = np.linspace(-1.0, 1.0, 200 * 200).reshape(200, 200) / 200.0


def _heavy(x):
  """Costs milliseconds per call: four [200, 200] matrix products, of a
  matrix scaled by the batch's values (so that no compiler folds them)."""
  m = tf.constant(_HEAVY) * (1.0 + 1e-3 * tf.reduce_mean(x))
  y = m
  for _ in range(4):
    y = tf.linalg.matmul(y, m)
  return x + 1e-300 * tf.reduce_sum(y)


def _light(x):
  return x - 1.0


_ctx = ab.Context()


@_ctx.batch()
def _count_down(x):
  """A loop that takes a costly step while x > 2.5 and a cheap one below
  (x: float64 counts)."""
  while x > 0.0:
    if x > 2.5:
      x = _heavy(x) - 2.0
    else:
      x = _light(x)
  return x


@pytest.mark.parametrize('jit', MODES, ids=MODE_IDS)
def test_profile_blocks_times_each_block_that_ran(jit):
  """Each block that the call ran is timed alone (XLA has no clock in the
  loop): the block with the matrix products takes most of the time, and
  the counts and results are the call's."""
  staged = ab.stage(_count_down, jit_compile=jit)
  x = np.array([7.0, 3.0, 1.0, 4.0])
  stats = staged.profile_blocks(x, steps=10, repeats=3)
  np.testing.assert_allclose(
      staged.numpy(x), np.asarray(_count_down(x, dry_run=True)))
  want = staged.last_stats
  assert stats.block_executions == want.block_executions
  assert stats.steps == want.steps
  ran = {label for label, runs in want.block_executions.items() if runs}
  assert set(stats.block_time) == ran
  assert all(seconds >= 0.0 for seconds in stats.block_time.values())
  program = _ctx.lowered_for_args('_count_down', [tf.constant(x)])
  heavy = [b.label for b in program.blocks
           if any('_heavy' in ab.instructions.op_str(op)
                  for op in b.instructions)]
  assert len(heavy) == 1, heavy
  per_run = {label: stats.block_time[label] / want.block_executions[label]
             for label in ran}
  # Matrix products against a subtraction (30x apart in a graph, 1000x
  # under XLA, when the machine is idle): the profile points at the block
  # with the products.
  assert max(per_run, key=per_run.get) == heavy[0], per_run
  assert all(r['seconds'] is not None for r in profiler.rows(stats))


def test_profile_blocks_checks_its_steps():
  staged = ab.stage(_count_down, jit_compile=True)
  with pytest.raises(ab.errors.ArgumentError, match='steps'):
    staged.profile_blocks(np.array([3.0]), steps=0)


def _retracing(caplog):
  """TensorFlow's "triggered tf.function retracing" warnings caught."""
  return [m for m in caplog.messages if 'retracing' in m]


@pytest.mark.parametrize('jit', [
    False, pytest.param(True, marks=pytest.mark.slow)], ids=MODE_IDS)
def test_staging_many_functions_does_not_warn_of_retracing(jit, caplog):
  """Each staged function is a `tf.function` of its own, traced once for
  a signature: six of them, called once each, are six traces that
  TensorFlow must not count as one function retracing (it counts by the
  traced Python function's code, shared by closures).  Under XLA one
  staged function called with six batch sizes does retrace, and
  TensorFlow still warns; without XLA it traces twice (the first size,
  then one trace for every other size)."""
  n = np.array([3, 9, 12])
  caplog.set_level('WARNING')
  for _ in range(6):
    staged = ab.stage(progs.fibonacci, jit_compile=jit)
    np.testing.assert_array_equal(staged(n),
                                  [progs.fibonacci_ref(k) for k in n])
  assert not _retracing(caplog)
  staged = ab.stage(progs.fibonacci, jit_compile=jit)
  for batch in range(1, 7):
    np.testing.assert_array_equal(staged(n[:1].repeat(batch)),
                                  [progs.fibonacci_ref(3)] * batch)
  warned = [m for m in _retracing(caplog) if '<function fibonacci>' in m]
  assert bool(warned) == jit
  # The traced graphs keep the batched function's name.
  concrete = staged._function.get_concrete_function(tf.constant(n))  # pylint: disable=protected-access
  assert 'fibonacci' in concrete.name.decode()


def test_running_many_programs_eagerly_does_not_warn_of_retracing(caplog):
  """Eagerly, each compiled program runs through a `tf.function` of its
  own (`backends.tf.loop.StagedRun`), traced once per batch size."""
  caplog.set_level('WARNING')
  for k in range(6):
    ctx = ab.Context()

    @ctx.batch()
    def shifted(x):
      return x + k   # pylint: disable=cell-var-from-loop
    np.testing.assert_array_equal(shifted(tf.constant([1, 2])),
                                  [1 + k, 2 + k])
  assert not _retracing(caplog)


def _traces(staged):
  """The traces (under XLA, compiles) of a staged function's calls."""
  return sum(f.experimental_get_tracing_count() for f in (
      staged._function, staged._padded_function))  # pylint: disable=protected-access


def _check_padded_call(staged, n, depth):
  """`staged(n)` (on_error='status') against an eager run of the members
  (which finished, statistics) and each member alone (values)."""
  out, ok = staged(n)
  _, want_ok = progs.fibonacci(tf.constant(n), max_stack_depth=depth,
                               on_error='status')
  want_ok = want_ok.numpy()
  np.testing.assert_array_equal(ok.numpy(), want_ok)
  np.testing.assert_array_equal(
      out.numpy()[want_ok], [progs.fibonacci_ref(k) for k in n[want_ok]])
  got = staged.last_stats
  assert got.batch_size == len(n)
  assert got.steps == progs.fibonacci.last_stats.steps
  assert got.block_active == progs.fibonacci.last_stats.block_active


def test_xla_pads_batch_sizes_to_powers_of_two():
  """batch_buckets=True: a call is padded to the next power of two, one
  compile per bucket; the padded members take no step and cannot fail
  (one member here overflows the stack), and the outputs are the
  members'."""
  depth = 8
  staged = ab.stage(progs.fibonacci, jit_compile=True, batch_buckets=True,
                    max_stack_depth=depth, on_error='status')
  rng = np.random.default_rng(9)
  for size in (3, 5, 7, 2, 6):
    n = rng.integers(1, 9, size=size)
    n[size // 2] = 14   # deeper than max_stack_depth
    _check_padded_call(staged, n, depth)
  assert _traces(staged) == 3   # buckets 4, 8 and 2


@pytest.mark.slow   # seven XLA compiles
def test_xla_auto_buckets_after_four_sizes_and_given_buckets():
  """'auto': each of the first four sizes of a signature compiles for its
  own, later ones pad to a power of two; a list of buckets pads to the
  next in it, and a larger call compiles for its size.  A padded call's
  overflow raises naming the member."""
  depth = 8
  rng = np.random.default_rng(10)
  staged = ab.stage(progs.fibonacci, jit_compile=True,
                    max_stack_depth=depth, on_error='status')
  for size in (3, 5, 6, 7, 9, 3, 12):
    _check_padded_call(staged, rng.integers(1, 9, size=size), depth)
  assert _traces(staged) == 5   # 3, 5, 6, 7 and the bucket 16
  listed = ab.stage(progs.fibonacci, jit_compile=True, batch_buckets=[6],
                    max_stack_depth=depth)
  for size in (4, 5, 7):
    n = rng.integers(1, 9, size=size)
    np.testing.assert_array_equal(listed(n).numpy(),
                                  [progs.fibonacci_ref(k) for k in n])
  assert _traces(listed) == 2   # the bucket 6, and 7 for its size
  with pytest.raises(ab.errors.StackOverflowError, match=r'members \[2\]'):
    listed(np.array([3, 4, 14, 5]))


def test_batch_buckets_is_checked():
  for bad in ('pow2', [0, 4], [2.5], [], 3):
    with pytest.raises(ab.errors.ArgumentError, match='batch_buckets'):
      ab.stage(progs.fibonacci, jit_compile=True, batch_buckets=bad)
