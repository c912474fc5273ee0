"""The profiler's numbers agree with the run and with each member alone."""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import profiler
from tests import e2e_programs as progs


def test_profile_rows_and_table():
  n = np.array([3, 9, 12, 5])
  out = progs.fibonacci(n, profile=True)
  np.testing.assert_array_equal(out, [progs.fibonacci_ref(k) for k in n])
  stats = progs.fibonacci.last_stats
  rows = profiler.rows(stats)
  assert sum(r['runs'] for r in rows) == stats.steps
  assert all(r['seconds'] is not None and r['seconds'] >= 0 for r in rows)
  assert abs(sum(r['time_share'] for r in rows) - 1) < 1e-9
  assert all(r['function'] == 'fibonacci' for r in rows)
  assert all(0 < r['utilization'] <= 1 for r in rows)
  assert any('fibonacci(n - 1) + fibonacci(n - 2)' in r['source']
             for r in rows)
  table = stats.table()
  assert 'utilization' in table and 'e2e_programs.py' in table
  # Members active summed over blocks = each member's own block count.
  alone = 0
  for k in n:
    progs.fibonacci(np.array([k]))
    alone += progs.fibonacci.last_stats.member_block_executions
  assert sum(r['runs'] * r['active_per_run'] for r in rows) == \
      pytest.approx(alone)


BACKENDS = ['numpy', 'tf']


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('schedule', ['lowest', 'most'])
def test_blocks_per_member_are_each_members_solo_run(backend, schedule):
  """profile=True counts each member's blocks: exactly the steps of a run
  of that member alone; the longest of them bounds the run's steps."""
  n = np.array([3, 9, 12, 5, 1, 7])
  args = n
  if backend == 'tf':
    tf = pytest.importorskip('tensorflow')
    args = tf.constant(n)
  # The stack VM (NumPy's default runs fibonacci stackless).
  progs.fibonacci(args, profile=True, schedule=schedule, stackless=False)
  stats = progs.fibonacci.last_stats
  alone = []
  for k in n:
    progs.fibonacci(np.array([k]), schedule=schedule, stackless=False)
    alone.append(progs.fibonacci.last_stats.steps)
  np.testing.assert_array_equal(stats.member_blocks, alone)
  assert stats.longest_member_blocks == max(alone)
  assert stats.steps >= max(alone)
  assert stats.schedule_overhead == stats.steps / max(alone)
  assert (f'longest member alone: {max(alone)} blocks'
          in profiler.summary(stats))
  assert profiler.summary(stats) in stats.table()


def test_profile_off_has_no_times():
  progs.fibonacci(np.array([5, 6]))
  stats = progs.fibonacci.last_stats
  assert not stats.block_time
  assert profiler.rows(stats)[0]['seconds'] is None
  assert '-' in profiler.format_table(stats)
  assert stats.member_blocks is None and stats.schedule_overhead is None
  assert 'longest member' not in profiler.summary(stats)


def test_plot(tmp_path):
  import pytest  # pylint: disable=g-import-not-at-top
  pytest.importorskip('matplotlib')
  progs.collatz_loop(np.array([7, 27, 1]), profile=True)
  path = tmp_path / 'profile.png'
  profiler.plot(progs.collatz_loop.last_stats, str(path))
  assert path.stat().st_size > 1000


def test_schedules_both_available():
  n = np.array([3, 9, 12, 5, 14])
  low = progs.fibonacci(n, schedule='lowest')
  s_low = progs.fibonacci.last_stats
  most = progs.fibonacci(n, schedule='most')
  s_most = progs.fibonacci.last_stats
  np.testing.assert_array_equal(low, most)
  assert s_low.member_block_executions == s_most.member_block_executions
  assert ab.virtual_machine.SCHEDULES == ('lowest', 'most')


# Each schedule and each mode by default; the other pairs in `-m slow`.
@pytest.mark.parametrize('schedule, jit', [
    pytest.param(s, jit, id=f'{s}-{jit_id}',
                 marks=[] if (s == 'most') == jit else [pytest.mark.slow])
    for s in ('lowest', 'most')
    for jit, jit_id in ((False, 'graph'), (True, 'xla'))])
def test_staged_run_statistics_read_back_through_counts(jit, schedule):
  """Inside tf.function the statistics are tensors: `counts()` returned
  from the function, then `with_counts`, gives the numbers of the same
  run on NumPy; asking the tensors for numbers says how to get them."""
  tf = pytest.importorskip('tensorflow')
  n = np.array([3, 9, 12, 5, 1, 7])
  progs.fibonacci(n, schedule=schedule, stackless=False)   # the VM's
  want = progs.fibonacci.last_stats
  np.testing.assert_array_equal(
      want.counts()['counts'], [[want.block_executions[l],
                                 want.block_active[l]]
                                for l in want.block_executions])
  assert set(want.counts()) == {'counts'}   # no profile: no times
  traced = []

  def run(x):
    out = progs.fibonacci(x, schedule=schedule)
    stats = progs.fibonacci.last_stats
    traced.append(stats)
    assert stats.symbolic and 'counts are tensors' in str(stats)
    with pytest.raises(ab.errors.ArgumentError, match='with_counts'):
      stats.utilization   # pylint: disable=pointless-statement
    with pytest.raises(ab.errors.ArgumentError, match='tensors'):
      profiler.rows(stats)
    return out, stats.counts()
  staged = tf.function(run, jit_compile=jit)
  if jit:
    staged = ab.xla.compile_nested_output(run)
  out, counts = staged(tf.constant(n))
  np.testing.assert_array_equal(out, [progs.fibonacci_ref(k) for k in n])
  got = traced[-1].with_counts(counts)
  assert not got.symbolic
  assert got.steps == want.steps
  assert got.block_executions == want.block_executions
  assert got.block_active == want.block_active
  assert got.utilization == want.utilization
  assert got.block_loc == want.block_loc
  assert profiler.summary(got) == profiler.summary(want)


def test_with_counts_rejects_counts_of_another_shape():
  progs.fibonacci(np.array([4, 5]))
  stats = progs.fibonacci.last_stats
  with pytest.raises(ab.errors.ArgumentError, match='the dict that'):
    stats.with_counts(stats.counts()['counts'])
  with pytest.raises(ab.errors.ArgumentError, match=r'shape \['):
    stats.with_counts({'counts': np.zeros((2, 2), np.int32)})
  with pytest.raises(ab.errors.ArgumentError, match='float64'):
    stats.with_counts({'counts': stats.counts()['counts'].astype(float)})
  assert stats.with_counts(stats.counts()) == stats


@pytest.mark.parametrize('mode', ['graph', 'xla', 'stackless'])
def test_profile_of_staged_and_stackless_runs(mode):
  """profile=True under tf.function times every block (timestamps around
  each step), under XLA (no clock) counts blocks per member only, and in
  stackless mode does both; blocks per member are each member's own."""
  n = np.array([3, 9, 12, 5, 1, 7])
  alone = []
  for k in n:
    progs.fibonacci(np.array([k]), stackless=(mode == 'stackless'))
    # Blocks the member ran (in stackless mode more than the steps: its
    # independent calls run together).
    alone.append(progs.fibonacci.last_stats.member_block_executions)
  if mode == 'stackless':
    progs.fibonacci(n, profile=True, stackless=True)
    stats = progs.fibonacci.last_stats
  else:
    tf = pytest.importorskip('tensorflow')
    traced = []

    def run(x):
      out = progs.fibonacci(x, profile=True)
      traced.append(progs.fibonacci.last_stats)
      return out, progs.fibonacci.last_stats.counts()
    staged = (ab.xla.compile_nested_output(run) if mode == 'xla'
              else tf.function(run))
    _, counts = staged(tf.constant(n))
    assert set(counts) == ({'counts', 'member_blocks'} if mode == 'xla'
                           else {'counts', 'member_blocks', 'seconds'})
    stats = traced[-1].with_counts(counts)
  np.testing.assert_array_equal(stats.member_blocks, alone)
  assert stats.longest_member_blocks == max(alone)
  ran = [l for l, r in stats.block_executions.items() if r]
  if mode == 'xla':
    assert not stats.block_time
  else:
    assert all(stats.block_time[l] > 0 for l in ran)
    assert all(stats.block_time.get(l, 0.0) == 0.0
               for l, r in stats.block_executions.items() if not r)
    assert 's in blocks' in profiler.summary(stats)


def test_counts_round_trip_a_profiled_eager_run():
  """counts() of a profiled NumPy run and with_counts() give it back."""
  progs.fibonacci(np.array([3, 9, 12]), profile=True)
  stats = progs.fibonacci.last_stats
  counts = stats.counts()
  assert set(counts) == {'counts', 'seconds', 'member_blocks'}
  back = stats.with_counts(counts)
  assert back == stats
  assert back.block_time == stats.block_time
  np.testing.assert_array_equal(back.member_blocks, stats.member_blocks)
