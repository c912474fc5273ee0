"""Return inlining: a call that returns at once takes no step in the callee.

A pure pass `LoweredProgram -> LoweredProgram`, after `block_merge` (which
moves a callee's base-case test into its callers: `push_branch R, c ? T :
F`).  Where the base case `F` only sets constants (or copies) and returns,

    F:  %ret = prim[1]()
        indirect_goto

its members push `R`, spend a VM step at `F`, pop `R` and go back to it.
Here `F`'s code moves into the calling block, and the call becomes

    %ret = prim[1]()
    call_branch R, c ? call T : R

where only the members going to `T` push `R`: the others are at `R` at
once.  In fibonacci, half of all calls are base cases, and each of them
saves the step spent at `F`.  The same goes for `push_goto R, F`
(the whole block's members return: `F`'s code, then `goto R`).

`F`'s code now runs for every member at the calling block, the ones that
go on to `T` included, so it must be harmless for them:
- only constant primitives (no inputs) and copies: nothing that could
  fail or cost more on other members' data;
- what it writes is dead on entry to `T` (liveness over the lowered CFG,
  where a return may go to any pushed block or to the exit);
- it does not write the branch's condition.
Each member still computes what it computed before; which block it takes
the base case's constants in is all that changes.
"""

import dataclasses

from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['inline_returns']

_SMALL = 4   # a base case moved into its callers: at most this many prims


def _harmless(op):
  return (isinstance(op, inst.PrimOp) and not op.sync and
          (not op.vars_in or op.function is inst.identity))


def _returning_leaf(block):
  """Whether `block` only sets constants or copies, then returns."""
  return (isinstance(block.terminator, inst.IndirectGotoOp) and
          len(block.instructions) <= _SMALL and
          all(_harmless(op) for op in block.instructions))


def _writes(block):
  out = set()
  for op in block.instructions:
    out |= liveness.writes(op)
  return out


def live_in(program):
  """Finds the variables live on entry to each block of a lowered program.

  Args:
    program: A `LoweredProgram`.

  Returns:
    A dict from each block's label to the set of variables live on entry.
  """
  return_sites = sorted({t.push_block for t in
                         (b.terminator for b in program.blocks)
                         if hasattr(t, 'push_block')}) + [None]
  at_exit = frozenset(inst.pattern_flatten(program.vars_out))
  live = {b.label: frozenset() for b in program.blocks}
  live[None] = at_exit
  changed = True
  while changed:
    changed = False
    for block in reversed(program.blocks):
      after = inst.destinations(block.terminator)
      live_out = set().union(*[live[s] for s in (
          return_sites if after is None else after)])
      new_in = frozenset(liveness.transfer(block, None, live_out))
      if new_in != live[block.label]:
        live[block.label] = new_in
        changed = True
  del live[None]
  return live


def _inlined(block, by_label, live):
  t = block.terminator
  if isinstance(t, inst.PushGotoOp):
    leaf = by_label[t.goto_block]
    if leaf is block or not _returning_leaf(leaf):
      return block
    return dataclasses.replace(
        block, instructions=block.instructions + leaf.instructions,
        terminator=inst.GotoOp(t.push_block, t.loc))
  if not isinstance(t, inst.PushBranchOp):
    return block
  # The false side first: a base case is usually the test's else.
  for call_side in (True, False):
    leaf = by_label[t.false_block if call_side else t.true_block]
    call = t.true_block if call_side else t.false_block
    written = _writes(leaf)
    if (leaf is block or not _returning_leaf(leaf) or t.cond in written or
        written & live[call]):
      continue
    return dataclasses.replace(
        block, instructions=block.instructions + leaf.instructions,
        terminator=inst.CallBranchOp(
            t.push_block, t.cond,
            call if call_side else t.push_block,
            t.push_block if call_side else call,
            call_side, t.loc))
  return block


def inline_returns(program):
  """Moves callees' constant base cases into the calling blocks.

  See the module docstring for when a base case moves.

  Args:
    program: A `LoweredProgram` (after `block_merge`).

  Returns:
    An equivalent `LoweredProgram` whose calls take their callees' constant
    base cases in the calling block.
  """
  if not program.blocks:
    return program
  by_label = {b.label: b for b in program.blocks}
  live = live_in(program)
  blocks = [_inlined(b, by_label, live) for b in program.blocks]
  return dataclasses.replace(
      program, blocks=tuple(inst.reachable_blocks(blocks)))
