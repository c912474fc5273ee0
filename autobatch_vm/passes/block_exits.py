"""Block exits: a branch's likely side runs in the branching block's step.

A pure pass `LoweredProgram -> LoweredProgram`, after `leaf_returns` and
before `copy_propagation`.  Block merging (`block_merge`) joins blocks only
across unconditional jumps, because every member at a block runs all of
it.  A block that ends in a branch sends its members on to one of two
blocks, each a step of its own, even where nearly all go the same way:
NUTS's `_build_tree` tests `continue_trajectory` after each subtree, and
nearly every chain goes on to build the next one.

An *exit* (`ExitOp`) lets members leave a block early: those for which
its condition has the exit's side jump to its target (no push, no pop)
and run nothing more of the block in this step; the others run the rest.
The pass rewrites a block `X` ending in `branch c ? T : F` into

    X:   ...X's code...; exit_unless c, F; ...T's code...; <T's terminator>

(or, inlining `F`, `exit_if c, T` and `F`'s code), so members going on to
`T` run its code in `X`'s step.  Rules:

1. Which side.  The side that continues the work: not a short return
   (a block that ends in `indirect_goto`, which its members leave at once
   for the caller's code, and which costs little to run in a step of its
   own), and, between two such, the true side, which is a loop's body and
   an `if`'s body.  A side is never `X` itself (its code would be copied
   without end: a loop whose body ends in its own test already runs one
   step an iteration after `block_merge`), the entry (it stays first), or
   a block holding a sync primitive (scheduled last on purpose, to wait
   for company; `block_order`), and `X` holding one takes no side either;
   the same for a failed `assert`'s block (a staged run may raise its
   failure while tracing it, stopping every member at the block, those
   an exit would have let go included).
   Nor is a side inlined twice into one block: a loop's body is not
   unrolled into the block before the loop.
2. How much.  The side's code is copied (tail duplication where it has
   other predecessors; where `X` was its only one, it disappears): at most
   `_MAX_COPIED` instructions, so that code size and first-call compile
   time stay bounded, and a wrong guess costs little: a staged backend
   runs the copied primitives at every step at `X`, for whichever members
   stay.  A block takes at most `_MAX_EXITS` exits (the side's own
   terminator may be a branch again: then its likely side follows).
3. Schedules.  Under the lowest-first schedule (`'lowest'`), which gathers
   members by running blocks in order, copies of a side scatter the
   members that would have run it together, as `leaf_returns`'s copies
   do: the pass leaves programs for that schedule unchanged.

Each member runs exactly the instructions it ran before, in the same
order; only how they are cut into steps changes.  Blocks left unreachable
are dropped.  NUTS: `_build_tree`'s two blocks that test
`continue_trajectory` go on into the next subtree's call in their own
step (docs/performance.md gives the figures).
"""

import dataclasses

from autobatch_vm.ir import instructions as inst

__all__ = ['add_exits']

_MAX_COPIED = 16   # most instructions of a side copied into a block
_MAX_EXITS = 2     # most exits a block takes


def _fails(block):
  """Whether `block` holds a failed `assert`'s primitive (`fail ...`),
  which a staged run may raise while tracing the block, stopping every
  member at it: no member may leave such a block early."""
  return any(isinstance(op, inst.PrimOp) and op.text.startswith('fail ')
             for op in block.instructions)


def _short_return(block):
  return isinstance(block.terminator, inst.IndirectGotoOp)


def _side(block, by_label, entry, taken):
  """(inlined label, whether members leave where the condition holds) for
  a block ending in a plain branch, or None.  `taken`: the labels whose
  code the block holds already (itself included)."""
  t = block.terminator
  if not isinstance(t, inst.BranchOp) or t.true_block == t.false_block:
    return None

  def allowed(label):
    side = by_label[label]
    return (label not in taken and label != entry and
            not inst.has_sync(side) and not _fails(side) and
            len(side.instructions) <= _MAX_COPIED)

  # The true side first: the false side wins only where it goes on and
  # the true side returns, or where the true side is not allowed.
  sides = [(t.true_block, False), (t.false_block, True)]
  sides = [s for s in sides if allowed(s[0])]
  if not sides:
    return None
  sides.sort(key=lambda s: _short_return(by_label[s[0]]))
  return sides[0]


def _with_exits(block, by_label, entry):
  """`block` with up to `_MAX_EXITS` likely sides inlined after exits."""
  if inst.has_sync(block) or _fails(block):
    return block
  exits = len(inst.exit_targets(block))
  taken = {block.label}
  while exits < _MAX_EXITS:
    side = _side(block, by_label, entry, taken)
    if side is None:
      break
    label, leave_when = side
    taken.add(label)
    t = block.terminator
    other = t.true_block if leave_when else t.false_block
    inlined = by_label[label]
    exits += 1 + len(inst.exit_targets(inlined))
    if exits > _MAX_EXITS:
      break
    block = dataclasses.replace(
        block, instructions=block.instructions + (
            inst.ExitOp(t.cond, leave_when, other, t.loc),) +
        inlined.instructions, terminator=inlined.terminator)
  return block


def add_exits(program, schedule):
  """Inlines the likely side of each branch after an exit.

  See the module docstring for the rewrite and its rules.

  Args:
    program: A `LoweredProgram` (after `leaf_returns`).
    schedule: The VM schedule it will run under, `'most'` or `'lowest'`;
      under `'lowest'` the program is returned unchanged.

  Returns:
    An equivalent `LoweredProgram` whose branching blocks go on into
    their likely side in the same step; blocks left unreachable are
    dropped.
  """
  if not program.blocks or schedule == 'lowest':
    return program
  by_label = {b.label: b for b in program.blocks}
  entry = program.blocks[0].label
  blocks = [_with_exits(b, by_label, entry) for b in program.blocks]
  if blocks == list(program.blocks):
    return program
  return dataclasses.replace(program,
                             blocks=tuple(inst.reachable_blocks(blocks)))
