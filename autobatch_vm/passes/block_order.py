"""Block order: blocks that call a sync point are numbered last.

A pure pass `LoweredProgram -> LoweredProgram`.  The `'lowest'` schedule
runs the lowest-numbered block that has members, so there a block numbered
last runs only when every unfinished member is waiting there (or at
another such block).  The default `'most'` schedule runs the block with
the most members, ties going to the lowest number, so there a sync block
loses only its ties.  Blocks holding a `PrimOp` with `sync=True` (a call of
a primitive marked with `autobatch_vm.sync_point`) are moved to the end, in
their original order; the entry block stays first.  Other programs are
returned unchanged.  Labels, not positions, name jump targets, so nothing
else changes.
"""

import dataclasses

from autobatch_vm.ir import instructions as inst

__all__ = ['order_blocks']


def order_blocks(program):
  """Numbers the blocks that call a sync point last.

  Args:
    program: A `LoweredProgram`.

  Returns:
    `program` with its sync-point blocks (all but the entry) moved to the
    end in their original order, or `program` itself if it has none.
  """
  if not program.blocks:
    return program
  entry, rest = program.blocks[0], program.blocks[1:]
  late = [b for b in rest if inst.has_sync(b)]
  if not late:
    return program
  early = [b for b in rest if not inst.has_sync(b)]
  return dataclasses.replace(program, blocks=(entry, *early, *late))
