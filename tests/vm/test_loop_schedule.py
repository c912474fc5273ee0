"""Loops under the `'most'` schedule: a loop's exit waits for the loop.

`ir.loops.exit_waits` finds a lowered program's loops (within a function,
with no call in them) and their exits; under `'most'` an exit does not
run while a member is in its loop (`backends.scheduler`).  A nested loop
then takes as few steps as under `'lowest'` (its members leave each inner
loop together), where it took 2-4x as many, and results are the same as
each member's alone, on every backend and in both modes.  Recursion (no
such loop) is scheduled as before.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.backends import scheduler
from autobatch_vm.ir import loops

W = 8

ctx = ab.Context()


@ctx.batch(per_member=True)
def edit_distance(a, b, la, lb):
  d = np.zeros((W + 1, W + 1), dtype=np.int64)
  for i in range(la + 1):
    d[i, 0] = i
  for j in range(lb + 1):
    d[0, j] = j
  for i in range(1, la + 1):
    for j in range(1, lb + 1):
      c = 0 if a[i - 1] == b[j - 1] else 1
      d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + c)
  return d[la, lb]


@ctx.batch()
def gcd_sum(a, n):
  s = 0 * a
  k = 1 + 0 * a
  while k <= n:
    x = a
    y = k
    while y > 0:
      t = x % y
      x = y
      y = t
    s += x
    k += 1
  return s


@ctx.batch(type_inference=lambda types: types[0])
def fib(n):
  if n > 2:
    return fib(n - 1) + fib(n - 2)
  return n * 0 + 1


def _edit_args(batch, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, 3, (batch, W)), rng.integers(0, 3, (batch, W)),
          rng.integers(0, W + 1, batch), rng.integers(0, W + 1, batch))


def _edit_alone(a, b, la, lb):
  return np.array([edit_distance.__wrapped__(*row)
                   for row in zip(a, b, la, lb)])


def _gcd_alone(a, n):
  out = []
  for x0, m in zip(a, n):
    s = 0
    for k in range(1, m + 1):
      x, y = x0, k
      while y:
        x, y = y, x % y
      s += x
    out.append(s)
  return np.array(out)


def _steps(fn, args, schedule, **kw):
  fn(*args, schedule=schedule, stackless=False, profile=True, **kw)
  return fn.last_stats.steps


def test_nested_loops_wait_at_their_exits():
  args = _edit_args(4)
  blocks = ctx.lowered_for_args('edit_distance', args).blocks
  waits = loops.exit_waits(blocks)
  assert waits is not None
  # No block waits for itself, and the entry (in no loop) for none.
  assert not waits.diagonal().any()
  assert not waits[0].any()
  # The inner loop (the last block that jumps to itself) is waited for by
  # the blocks it leaves to, and those, inside the outer loop, are waited
  # for by the outer loop's exit.
  inner = [i for i, b in enumerate(blocks) if b.label in
           loops._jumps(b)]  # pylint: disable=protected-access
  exits = np.nonzero(waits[:, inner[-1]])[0]
  assert len(exits) > 0
  assert any(waits[:, x].any() for x in exits)


def test_recursion_has_no_waits():
  n = np.arange(3, 9)
  blocks = ctx.lowered_for_args('fib', (n,)).blocks
  assert loops.exit_waits(blocks) is None


@pytest.mark.parametrize('batch', [1, 5, 64])
def test_nested_loops_take_the_steps_of_lowest(batch):
  args = _edit_args(batch, seed=batch)
  most = _steps(edit_distance, args, 'most')
  lowest = _steps(edit_distance, args, 'lowest')
  assert most <= lowest
  out = edit_distance(*args, stackless=False)
  np.testing.assert_array_equal(out, _edit_alone(*args))


def test_nested_loops_steps_at_the_longest_member():
  # Each member runs its blocks in step with the others: no more steps
  # than the member that runs the most blocks takes alone, plus one a trip
  # of the outer loop at most (members leave an inner loop together).
  args = _edit_args(64, seed=3)
  edit_distance(*args, stackless=False, profile=True)
  stats = edit_distance.last_stats
  assert stats.steps <= stats.longest_member_blocks + W + 2


@pytest.mark.parametrize('mode', ['numpy', 'stackless', 'eager', 'function',
                                  'xla'])
def test_loops_match_each_member_alone(mode):
  args = _edit_args(7, seed=11)
  rng = np.random.default_rng(5)
  gargs = (rng.integers(1, 60, 6), rng.integers(0, 9, 6))
  want = (_edit_alone(*args), _gcd_alone(*gargs))
  if mode in ('numpy', 'stackless'):
    got = (edit_distance(*args, stackless=mode == 'stackless'),
           gcd_sum(*gargs, stackless=mode == 'stackless'))
  else:
    tf = pytest.importorskip('tensorflow')
    targs = [tf.constant(x) for x in args]
    gtargs = [tf.constant(x) for x in gargs]
    if mode == 'eager':
      got = (edit_distance(*targs), gcd_sum(*gtargs))
    else:
      run = tf.function(lambda x, y: (edit_distance(*x), gcd_sum(*y)),
                        jit_compile=mode == 'xla', autograph=False)
      got = run(targs, gtargs)
    got = tuple(np.asarray(g) for g in got)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_tensorflow_takes_the_steps_numpy_takes(mode):
  tf = pytest.importorskip('tensorflow')
  args = _edit_args(16, seed=2)
  on_numpy = _steps(edit_distance, args, 'most')
  targs = [tf.constant(x) for x in args]
  if mode == 'eager':
    edit_distance(*targs, profile=True)
    steps = int(edit_distance.last_stats.steps)
  else:
    staged = ab.stage(edit_distance, jit_compile=True)
    staged(*targs)
    steps = int(staged.last_stats.steps)
  assert steps == on_numpy


def test_eligible_counts():
  waits = np.zeros((4, 4), bool)
  waits[3, [1, 2]] = True   # block 3 leaves the loop of blocks 1 and 2
  counts = np.array([0, 1, 0, 9])
  np.testing.assert_array_equal(scheduler.eligible_counts(counts, waits),
                                [0, 1, 0, 0])
  # Where every block with members waits, none does.
  waits[1, 3] = True
  np.testing.assert_array_equal(scheduler.eligible_counts(counts, waits),
                                counts)
  pc = np.array([3] * 9 + [1])
  waits[1, 3] = False
  sched = scheduler.Scheduler(scheduler.Schedule('most', waits), 4)
  assert sched.next_block(pc) == 1
  assert scheduler.Scheduler('most', 4).next_block(pc) == 3
  assert scheduler.Scheduler(scheduler.Schedule('most', waits),
                             4).next_block(np.array([4, 3])) == 3


@pytest.mark.parametrize('batch', [1, 7, 64])
def test_staged_schedule_with_waits_picks_the_block_numpy_picks(batch):
  tf = pytest.importorskip('tensorflow')
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  num_blocks = 6
  waits = np.zeros((num_blocks, num_blocks), bool)
  waits[4, [1, 2, 3]] = True
  waits[3, 2] = True
  waits[5, [1, 2, 3, 4]] = True
  schedule = scheduler.Schedule('most', waits)
  rng = np.random.default_rng(batch)
  cases = [rng.integers(0, num_blocks + 2, size=batch) for _ in range(30)]
  cases += [np.full(batch, 4), np.full(batch, num_blocks)]
  for jit in (False, True):
    pick = tf.function(
        lambda pc: loop.next_block_tensor(pc, num_blocks, schedule,
                                          knobs.CPU.one_hot_max),
        jit_compile=jit)
    for pc in cases:
      pc = pc.astype(np.int32)
      want = scheduler.Scheduler(schedule, num_blocks).next_block(pc)
      assert int(pick(tf.constant(pc))) == want, (jit, pc)


def test_schedule_pickles():
  import pickle  # pylint: disable=g-import-not-at-top
  waits = np.eye(3, dtype=bool)
  s = pickle.loads(pickle.dumps(scheduler.Schedule('most', waits)))
  assert s == 'most'
  np.testing.assert_array_equal(s.waits, waits)
