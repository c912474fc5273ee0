"""NumPy blocks as generated functions (block_codegen) and the liveness of
lowered programs that lets them skip stores nothing reads.

Results of generated blocks are checked against each member alone by every
NumPy test of the stack VM (tests/vm/test_vm.py, test_end_to_end.py,
test_fuzz.py); here: the code is deterministic and readable, stores of
dead registers are skipped, and skipping them never changes a result.
"""

import numpy as np

import autobatch_vm as ab
from autobatch_vm.vm import codegen as block_codegen
from autobatch_vm import instructions as inst
from autobatch_vm import liveness
from autobatch_vm import virtual_machine
from tests import e2e_programs as progs


def _encoder():
  ctx = ab.Context()
  left = np.array([0, 0, 0, 1, 2], np.int32)
  right = np.array([0, 0, 0, 0, 3], np.int32)
  leaf = np.array([True, True, True, False, False])

  @ctx.batch()
  def encode(node):
    if ab.truthy(leaf[node]):
      return np.ones(node.shape + (3,)) * node[:, None]
    else:
      h_left = encode(left[node])
      h_right = encode(right[node])
      return np.tanh(h_left - 0.5 * h_right)

  return ctx, encode


def _compiled(ctx, name, args, batch, depth=8):
  program = ctx.lowered_for_args(name, args)
  return program, virtual_machine.CompiledProgram(
      program, ab.NumpyBackend(), batch, depth)


def test_generated_source_is_deterministic_and_readable():
  n = np.array([5, 9, 3])
  _, c1 = _compiled(progs.ctx, 'fibonacci', [n], 3)
  _, c2 = _compiled(progs.ctx, 'fibonacci', [n], 3)
  src = block_codegen.source(c1)
  assert src == block_codegen.source(c2)
  assert 'def block_fibonacci_0(state, m):' in src
  assert '# block fibonacci.0' in src
  assert 'n > 2' in src   # each instruction as a comment
  for block, fn in zip(c1.program.blocks, c1.blocks):
    assert f'# block {block.label}' in fn.source


def test_dead_register_stores_are_skipped():
  ctx, encode = _encoder()
  nodes = np.array([4, 3, 0, 4, 1], np.int32)
  program, compiled = _compiled(ctx, 'encode', [nodes], 5)
  live_out = liveness.lowered_live_out(program)
  h_left = compiled.layout.regs['encode.h_left'][0]
  stored = [fn.source for fn in compiled.blocks
            if f'state[{h_left}] = ' in fn.source]
  restored = [b for b in program.blocks if any(
      isinstance(op, inst.PopOp) and 'encode.h_left' in op.vars
      for op in b.instructions)]
  assert restored
  for b in restored:
    # Popped, used once, dead afterwards: no store, only the stack pop.
    assert 'encode.h_left' not in live_out[b.label]
  assert not stored
  out = encode(nodes, max_stack_depth=8)
  np.testing.assert_allclose(out, encode(nodes, dry_run=True))


def test_lowered_liveness_returns_reach_every_return_point_of_their_calls():
  # fibonacci calls only itself: each return may go to every return point,
  # and out of the program.
  n = np.array([5, 9, 3])
  program, _ = _compiled(progs.ctx, 'fibonacci', [n], 3)
  live_out = liveness.lowered_live_out(program)
  returns = {b.terminator.push_block for b in program.blocks
             if hasattr(b.terminator, 'push_block')}
  live_in = {b.label: liveness.transfer(b, None, live_out[b.label])
             for b in program.blocks}
  for b in program.blocks:
    if isinstance(b.terminator, inst.IndirectGotoOp):
      # The result is read by the caller or by the run's outputs.
      assert set(inst.pattern_flatten(program.vars_out)) <= \
          live_out[b.label]
      for r in returns:
        assert live_in[r] <= live_out[b.label]


def test_lowered_liveness_returns_go_back_to_their_own_callers():
  """A return goes to the return points of calls into its own function:
  the callee's result, read after its calls, is not live where the caller
  returns (or at blocks that only lead there), so it is not stored there.
  """
  ctx = ab.Context()

  @ctx.batch()
  def depth(n):
    if ab.truthy(n <= 1):
      return n * 1.0
    else:
      return depth(n - 1) + 1.0

  @ctx.batch()
  def outer(n):
    total = n * 0.0
    i = n * 0
    while ab.truthy(i < n):
      total = total + depth(i)
      i = i + 1
    return total

  n = np.array([0, 3, 5, 2])
  program, _ = _compiled(ctx, 'outer', [n], len(n))
  live_out = liveness.lowered_live_out(program)
  outer_returns = [b for b in program.blocks
                   if isinstance(b.terminator, inst.IndirectGotoOp)
                   and b.label.startswith('outer.')]
  assert outer_returns
  for b in outer_returns:
    assert 'depth.%ret' not in live_out[b.label], b.label
    assert 'outer.%ret' in live_out[b.label]
  # The base case that goes on in the caller (leaf_returns) computes the
  # result for the caller's next instruction only: not stored.
  assert 'depth.%ret' not in live_out['depth.1>outer.2.1']
  # The callee's result is read after its call, so live into that point.
  returns_of_depth = [b for b in program.blocks
                      if isinstance(b.terminator, inst.IndirectGotoOp)
                      and b.label.startswith('depth.')]
  assert returns_of_depth
  for b in returns_of_depth:
    assert 'depth.%ret' in live_out[b.label]
  for batch_run in (dict(max_stack_depth=8),
                    dict(max_stack_depth=8, stackless=True)):
    np.testing.assert_allclose(outer(n, **batch_run),
                               outer(n, dry_run=True))


def test_skipped_stores_never_change_results_across_runs():
  """Registers whose stores are skipped keep stale rows; a reused compiled
  program (block code cache) and a second batch must not see them."""
  ctx, encode = _encoder()
  cache = {}
  rng = np.random.default_rng(0)
  for _ in range(3):
    nodes = rng.integers(0, 5, size=17).astype(np.int32)
    out = encode(nodes, max_stack_depth=8, block_code_cache=cache,
                 stackless=False)
    np.testing.assert_allclose(out, encode(nodes, dry_run=True))
  assert len(cache) == 1


_empty_ctx = ab.Context()


@_empty_ctx.batch()
def _nothing(x):
  return ()


@_empty_ctx.batch()
def _plus_length(x, t):
  return x + len(t)


@_empty_ctx.batch()
def _carried(x, t, n):
  if n > 0:
    return _carried(x + len(t), t, n - 1)
  return x, t


def test_patterns_of_no_tensors_compile_into_blocks():
  # `return ()` and a read of `()` made blocks whose generated code did
  # not compile (an empty unpacking; an `if` with no body).
  x = np.array([1.0, 2.0])
  n = np.array([2, 0])
  for stackless in (False, True):
    assert _nothing(x, stackless=stackless) == ()
    np.testing.assert_array_equal(_plus_length(x, (), stackless=stackless),
                                  x)
    out, t = _carried(x, (), n, stackless=stackless)
    np.testing.assert_array_equal(out, x)
    assert t == ()
