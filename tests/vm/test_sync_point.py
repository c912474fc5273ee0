"""`ab.sync_point`: blocks calling a marked primitive are scheduled last."""

import numpy as np
import pytest

import autobatch_vm as ab


def _expensive(x):
  return x * 2 + 1


def _make(mark):
  """A recursion whose leaves call `leaf`, marked or not."""
  ctx = ab.Context()
  leaf = ab.sync_point(_expensive) if mark else _expensive

  @ctx.batch(type_inference=lambda t: t[0])
  def walk(n):
    if n <= 1:
      return leaf(n)
    # Members reach their leaves at different steps: depth differs.
    return walk(n - 1) + walk(n // 2)
  return ctx, walk


def _walk_ref(n):
  return _expensive(n) if n <= 1 else _walk_ref(n - 1) + _walk_ref(n // 2)


def _leaves(n):
  return 1 if n <= 1 else _leaves(n - 1) + _leaves(n // 2)


N = np.array([1, 5, 9, 2, 12, 7, 3, 0])


def test_sync_point_wraps_without_changing_the_function():
  marked = ab.sync_point(_expensive)
  assert marked is not _expensive
  assert marked(np.array([3]))[0] == 7
  assert not hasattr(_expensive, ab.ops.SYNC_ATTRIBUTE)
  assert marked.__name__ == '_expensive'


def _runs(fn, program, text):
  """How many steps ran a block holding the primitive `text` (a leaf and
  its copies followed by their return blocks: leaf_returns)."""
  return sum(fn.last_stats.block_executions[b.label] for b in program.blocks
             if any(isinstance(op, ab.instructions.PrimOp) and
                    text in op.text for op in b.instructions))


@pytest.mark.parametrize('schedule', ab.virtual_machine.SCHEDULES)
def test_marked_primitive_is_sync_in_the_ir_and_its_blocks_are_last(
    schedule):
  ctx, _ = _make(True)
  program = ctx.lowered_for_args('walk', [N], schedule=schedule)
  listing = str(program)
  assert 'prim[leaf(n)](walk.n) sync' in listing
  sync = [ab.instructions.has_sync(b) for b in program.blocks]
  assert sync[-1] and sync == sorted(sync)   # every sync block after the rest
  # Under 'most' the leaf also has copies followed by its return blocks
  # (`leaf>return`, leaf_returns), numbered last like it; not under
  # 'lowest', which runs it last on purpose.
  assert (sum(sync) == 1) == (schedule == 'lowest')
  assert all(sync[i] for i, b in enumerate(program.blocks) if '>' in b.label)
  # Unmarked: the same program in source order.
  ctx2, _ = _make(False)
  plain = ctx2.lowered_for_args('walk', [N], schedule=schedule)
  assert 'sync' not in str(plain)
  assert [b.label for b in plain.blocks] != [b.label for b in program.blocks]
  assert sorted(b.label for b in plain.blocks) == sorted(
      b.label for b in program.blocks)
  assert program.blocks[0].label == plain.blocks[0].label


@pytest.mark.parametrize('schedule', ab.virtual_machine.SCHEDULES)
@pytest.mark.parametrize('stackless', [False, True])
def test_same_results_and_fewer_runs_of_the_sync_block(stackless, schedule):
  expected = [_walk_ref(int(n)) for n in N]
  runs = {}
  for mark in (False, True):
    ctx, walk = _make(mark)
    out = walk(N, max_stack_depth=30, stackless=stackless,
               schedule=schedule)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(walk(N, dry_run=True), expected)
    if not stackless:
      program = ctx.lowered_for_args('walk', [N], schedule=schedule)
      runs[mark] = _runs(walk, program, 'leaf')
  if not stackless:
    assert runs[True] < runs[False]
    if schedule == 'lowest':
      # Deferred, the leaf runs only when every unfinished member waits
      # there, so each run takes one leaf of every member: as many runs as
      # the member with the most leaves has leaves.
      assert runs[True] == max(_leaves(int(n)) for n in N)


# 'most' by default; test_sync_point's NumPy tests run both schedules.
@pytest.mark.parametrize('schedule', [
    pytest.param(s, marks=[] if s == 'most' else [pytest.mark.slow])
    for s in ab.virtual_machine.SCHEDULES])
def test_sync_point_on_tensorflow(schedule):
  tf = pytest.importorskip('tensorflow')
  expected = [_walk_ref(int(n)) for n in N]
  ctx, walk = _make(True)
  program = ctx.lowered_for_args('walk', [N], schedule=schedule)
  np.testing.assert_array_equal(
      walk(tf.constant(N), max_stack_depth=30, schedule=schedule), expected)
  eager_runs = _runs(walk, program, 'leaf')
  ctx2, plain = _make(False)
  plain(tf.constant(N), max_stack_depth=30, schedule=schedule)
  assert eager_runs < _runs(
      plain, ctx2.lowered_for_args('walk', [N], schedule=schedule), 'leaf')
  if schedule == 'lowest':
    assert eager_runs == max(_leaves(int(n)) for n in N)
  for jit_compile in (False, True):
    staged = tf.function(
        lambda n: walk(n, max_stack_depth=30, schedule=schedule),
        jit_compile=jit_compile)
    np.testing.assert_array_equal(staged(tf.constant(N)), expected)


@pytest.mark.parametrize('schedule', ['most', 'lowest'])
def test_block_before_a_sync_block_takes_it(schedule):
  # `sync_after_loop` calls `mixed_once` once, after a loop; its entry
  # block syncs.  The loop's exit block takes that block (one way in) and
  # its place among the last blocks: one step fewer per member, results
  # as each member alone.
  from tests import e2e_programs as progs  # pylint: disable=g-import-not-at-top
  a = np.array([3, 600, 10, 996, 0, 499])
  b = np.array([5, 1, 700, 2, 0, 990])
  program = ab.pipeline.lowered(
      progs.ctx.program_compiled('sync_after_loop',
                                 [ab.TensorType(np.int64, ())] * 2),
      schedule=schedule)
  labels = [blk.label for blk in program.blocks]
  sync = [blk.label for blk in program.blocks
          if ab.instructions.has_sync(blk)]
  assert sync == labels[-1:]
  assert sync[0].startswith('sync_after_loop.')   # the caller's block
  assert not any(label.startswith('mixed_once.') for label in labels)
  got = progs.sync_after_loop(a, b, schedule=schedule)
  want = [progs.sync_after_loop_ref(x, y) for x, y in zip(a, b)]
  np.testing.assert_array_equal(got, want)
  stats = progs.sync_after_loop.last_stats
  assert stats.block_executions[sync[0]] == 1   # every member together
