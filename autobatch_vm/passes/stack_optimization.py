"""Stack optimization of a lowered program.

Expects a `LoweredProgram` from `lowering.lower`.  Guarantees the same
per-member behaviour with fewer stack operations and steps:

1. Copies of a variable onto itself are dropped: `f.%ret = f.%ret` after
   a self-recursive call, and the arguments that a recursive call passes
   on unchanged (`build_tree(point, ..., j - 1)` in the NUTS example
   copies only `j`; the whole copy goes if nothing else is copied).  Each
   would be a masked write of its whole register at every step that runs it
   (NUTS: a `Point` of three `[64, 25]` arrays per subtree).
2. Pop + push fusion: `pop v` followed in the same block by `push v` with no
   write of `v` in between restores the register from the top of the stack
   and keeps the frame (`restore v`) instead of popping and pushing it
   again.  This is the common case of a variable live across consecutive
   calls (`fib(n - 1) + fib(n - 2)` saves `n` once, not twice).
3. Tail calls: `push_goto R, X` where block R does nothing but return
   becomes `goto X`, so the callee returns straight to our caller and the
   call uses no stack.  Blocks left unreachable are dropped.

Limits: a tail call to another function still copies its result into ours
(`even.%ret = odd.%ret`), so only self tail calls are eliminated.
"""

import dataclasses

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['optimize']


def _without_self_copies(op):
  """`op`, less what it copies onto itself (None: nothing is left)."""
  if not isinstance(op, inst.PrimOp):
    return op
  if op.function is inst.identity:
    return None if op.vars_out == op.vars_in[0] else op
  if op.function is not inst.parallel_copy or op.casts:
    return op   # (lowering's copies have no casts: their indices stay)
  pairs = [(a, b) for a, b in zip(op.vars_in, op.vars_out) if a != b]
  if len(pairs) == len(op.vars_in):
    return op
  if not pairs:
    return None
  return inst.copy_op([a for a, _ in pairs], [b for _, b in pairs], op.loc)


def _drop_self_copies(block):
  ops = tuple(op for op in map(_without_self_copies, block.instructions)
              if op is not None)
  return dataclasses.replace(block, instructions=ops)


def _fuse_pop_push(block):
  ops = list(block.instructions)
  for i, op in enumerate(ops):
    if not isinstance(op, inst.PopOp):
      continue
    for v in op.vars:
      for j in range(i + 1, len(ops)):
        later = ops[j]
        if isinstance(later, inst.PushOp) and v in later.vars:
          ops[j] = inst.PushOp(tuple(x for x in later.vars if x != v),
                               later.loc)
          popped = ops[i]
          keep = tuple(x for x in popped.vars if x != v)
          restore = inst.RestoreOp((v,), popped.loc)
          ops[i:i + 1] = [restore] + ([inst.PopOp(keep, popped.loc)]
                                      if keep else [])
          return _fuse_pop_push(dataclasses.replace(
              block, instructions=tuple(o for o in ops
                                        if not _empty_stack_op(o))))
        if v in liveness.writes(later) or isinstance(
            later, (inst.PopOp, inst.RestoreOp)) and v in later.vars:
          break
  return block


def _empty_stack_op(op):
  return isinstance(op, (inst.PushOp, inst.PopOp, inst.RestoreOp)) and \
      not op.vars


def _tail_calls(blocks):
  by_label = {b.label: b for b in blocks}
  out = []
  for b in blocks:
    t = b.terminator
    if isinstance(t, inst.PushGotoOp):
      ret = by_label[t.push_block]
      if not ret.instructions and isinstance(ret.terminator,
                                             inst.IndirectGotoOp):
        b = dataclasses.replace(b, terminator=inst.GotoOp(t.goto_block,
                                                          t.loc))
    out.append(b)
  return out


def optimize(program):
  """Removes stack operations and steps (see the module docstring).

  Args:
    program: A `LoweredProgram` from `lowering.lower`.

  Returns:
    An equivalent `LoweredProgram` with fewer stack operations.
  """
  blocks = [_fuse_pop_push(_drop_self_copies(b)) for b in program.blocks]
  blocks = inst.reachable_blocks(_tail_calls(blocks))
  return dataclasses.replace(program, blocks=tuple(blocks))


# TFP's module-level name for this pass.
__all__ += ['fuse_pop_push']


def fuse_pop_push(program):
  """Fuses a pop and a push of one variable; TFP's name for `optimize`.

  Args:
    program: A `LoweredProgram`.

  Returns:
    The `LoweredProgram` with a pop followed by a push of the same variable
    fused into an update of its top, and the other stack savings of
    `optimize` (dropped self-copies, tail calls).

  Raises:
    ArgumentError: If `program` is not lowered.
  """
  if not isinstance(program, inst.LoweredProgram):
    raise errors.ArgumentError(
        f'stack_optimization.fuse_pop_push takes a lowered program, got a '
        f'{type(program).__name__}',
        hint='Lower it first: lowering.lower_function_calls(program).')
  return optimize(program)
