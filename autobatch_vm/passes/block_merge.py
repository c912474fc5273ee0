"""Block merging: fewer, larger blocks, so fewer VM steps.

A pure pass `LoweredProgram -> LoweredProgram`, after `block_order` (block
numbers are final from here: the schedule rule below reads them);
`pipeline.LOWERED_PASSES` lists what runs after it.
Every VM step costs a fixed dispatch overhead (pick a block, build its mask,
update the program counters) on top of the block's own work, and the
frontend makes many blocks that do almost nothing: a loop header testing its
condition, a function's entry testing `if n <= 1`, a join that only
returns.  Following a block's unconditional jump, it takes the code of the
block it jumps to when either

1. that block has no other predecessor and is not the entry (a plain merge:
   the block then disappears), or
2. that block is small: at most `_SMALL` primitive instructions, no stack
   operation and no sync primitive (a copy: the block stays for its other
   predecessors).  Past a copy, the chain continues only through small
   blocks: a large block with one predecessor is not copied along.  Under
   the lowest-first schedule (`'lowest'`) a copy must also not split
   members that would have run the block together (`_loses_no_company`):
   copying an if's join into both arms would send the arms on separately.
   Under `'most'` (the default) every small block is copied: that gives
   fewer steps there (docs/performance.md).

A call (`push_goto R, E`) can take the callee's small entry block too: the
terminator becomes `push_goto R, F` or `push_branch R, c ? T : F`, so a
recursive call tests its base case in the caller's step.  A block follows
at most `_MAX_HOPS` jumps, never back to itself.

A block holding a sync primitive is scheduled last on purpose (it waits
for company), so it is never copied, and a block that takes one by a
plain merge takes its place among the last blocks too: the jumping block's
code then runs in the sync block's step, which its members reach next
anyway.  NUTS's `run_chunk` loop jumps to `transition`'s entry, whose
first leapfrog is a sync point: one step per transition fewer.  The entry
block stays first, so it takes no sync block, and so does a block holding a
sync primitive itself (members at the second one could wait for those of
several runs of the first).

Each member runs exactly the instructions it ran before, in the same order;
only how they are cut into steps changes.  Blocks left unreachable are
dropped.
"""

import collections
import dataclasses

from autobatch_vm.ir import instructions as inst

__all__ = ['merge_blocks']

# A block copied into its predecessors runs in each of their steps: keep
# copies to a few (cheap, as a rule) primitives.
_SMALL = 4
_MAX_HOPS = 4


def _references(blocks):
  """How many jumps (of any kind) name each label; the entry counts once."""
  refs = collections.Counter([blocks[0].label])
  for b in blocks:
    refs.update(inst.jump_targets(b.terminator))
  return refs


def _small(block):
  return (len(block.instructions) <= _SMALL and
          all(isinstance(op, inst.PrimOp) for op in block.instructions))


def _then(call, t):
  """Terminator for call `call` (or None: no call) followed by `t`, or None.

  A merged call keeps the call's source line: a call-stack overflow names it.
  """
  if call is None:
    return t
  if isinstance(t, inst.GotoOp):
    return inst.PushGotoOp(call.push_block, t.block, call.loc)
  if isinstance(t, inst.BranchOp):
    return inst.PushBranchOp(call.push_block, t.cond, t.true_block,
                             t.false_block, call.loc)
  return None   # a second push, or a return straight after the call


def _jump(t):
  """(target, the call or None) of an unconditional jump; else (None, None)."""
  if isinstance(t, inst.GotoOp):
    return t.block, None
  if isinstance(t, inst.PushGotoOp):
    return t.goto_block, t
  return None, None


def _loses_no_company(origin, target, index):
  """Whether copying block `target` into the block at index `origin` keeps
  the steps members share under the lowest-first schedule.

  When a block runs, every lower-numbered block is empty (else it would
  have run first): members it sends to a lower block run there next, alone
  either way, so copying that block only saves the step.  Members it sends
  to a higher block may meet others there; copied, they meet them at that
  block's destinations instead, provided those come later still.
  """
  y = index[target.label]
  if y < origin:
    return True
  after = inst.destinations(target.terminator)
  return after is not None and all(index[d] > y for d in after)


def _merged(block, by_label, refs, index, schedule):
  """(`block` with the code of the blocks it jumps to, the label of the
  first sync block it took or None)."""
  ops, t = list(block.instructions), block.terminator
  seen = {block.label}
  origin = index[block.label]
  copying = False   # once a copied block's code is in, only copy small ones
  anchor = None
  for _ in range(_MAX_HOPS):
    target, call = _jump(t)
    if target is None or target in seen:
      break
    nxt = by_label[target]
    only_way_in = refs[target] == 1 and not copying
    if inst.has_sync(nxt):
      # Only by a plain merge, not into the entry (which stays first), and
      # not into a block that syncs already (the second sync block could
      # gather the members of several runs of the first).
      if (not only_way_in or origin == 0 or anchor is not None or
          inst.has_sync(block)):
        break
    elif not (only_way_in or (
        _small(nxt) and (schedule != 'lowest' or
                         _loses_no_company(origin, nxt, index)))):
      break
    new_t = _then(call, nxt.terminator)
    if new_t is None:
      break
    if inst.has_sync(nxt):
      anchor = target
    ops += nxt.instructions
    t = new_t
    seen.add(target)
    copying = copying or not only_way_in
  return (dataclasses.replace(block, instructions=tuple(ops), terminator=t),
          anchor)


def merge_blocks(program, schedule):
  """An equivalent `LoweredProgram` with fewer blocks per member's path.

  Args:
    program: A `LoweredProgram` whose block numbers are final
      (`block_order.order_blocks`).
    schedule: The VM schedule it will run under, `'most'` or `'lowest'`.
      Under `'lowest'` a small block is copied only where that keeps
      members together (see `_loses_no_company`); under `'most'`, wherever
      it is small.

  Returns:
    The merged `LoweredProgram`; blocks left unreachable are dropped.
  """
  if not program.blocks:
    return program
  by_label = {b.label: b for b in program.blocks}
  refs = _references(program.blocks)
  index = program.block_index()
  merged = [_merged(b, by_label, refs, index, schedule)
            for b in program.blocks]
  kept = {b.label for b in inst.reachable_blocks([b for b, _ in merged])}
  # A block that took a sync block by a plain merge goes to its place.
  moved = {anchor: b for b, anchor in merged
           if anchor is not None and b.label in kept}
  blocks = []
  for b, anchor in merged:
    if b.label in moved:
      blocks.append(moved[b.label])
    elif not (anchor is not None and b.label in kept):
      blocks.append(b)
  return dataclasses.replace(program,
                             blocks=tuple(inst.reachable_blocks(blocks)))
