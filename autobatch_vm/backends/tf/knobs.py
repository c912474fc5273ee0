"""The staged loop's tuning knobs: thresholds in bytes and frames.

Each knob picks between two ways of doing the same thing, which one is
cheaper depending on sizes; the results are the same either way.  The
defaults suit the device the run is traced on (`for_device`); a
`TensorFlowBackend(knobs=TuningKnobs(...))` uses the given ones instead.
The measurements behind each default are in docs/performance.md, under
the knob's name.
"""

import dataclasses
from typing import Optional

__all__ = ['TuningKnobs', 'CPU', 'GPU', 'for_device']


@dataclasses.dataclass(frozen=True)
class TuningKnobs:
  """Thresholds of the staged TensorFlow loop.

  Attributes:
    pack_bytes: Outside XLA, packs of small registers and stacks stay below
      this size: a scatter copies its whole pack.
    signature_bytes: Outside XLA, registers with rows of at least this many
      bytes are packed with the registers of their dtype and shape that the
      same blocks write: such a block writes the whole pack, which it
      stacks anew instead of copying the pack to scatter into it.
    flat_register_bytes: Outside XLA, a register of at least this many
      bytes is carried as a loop variable of its own, not in a pack: a
      block writing it selects into it, where stacking its pack anew would
      copy it once more.  None: registers go by `pack_bytes` alone.
    group_step_bytes: Under XLA, what one more group of blocks costs a step
      (its single-trip loop), in bytes of ports it would save
      (`groups.write_groups`).  On a GPU a while loop's trip test copies its
      predicate to the host, so there groups cost far more.
    guarded_group_bytes: Under XLA, a group of one block that writes packs
      of this many bytes or more runs its block in a conditional (whose
      other branch, never taken, writes nothing) instead of inline
      (`groups.run_group`), so that XLA updates the packs in place.
    push_window_frames: Under XLA, where XLA compiles a scatter as a loop
      with a trip per index (TensorFlow 2.18 and older on CPU), pushes are
      selects (`ops.window_push`): over the whole stack for a stack of at
      most this many frames, else over windows of this many frames, a loop
      trip per window holding pushes, so that a push costs the spread of
      the pushing members' frames, not the stack's capacity; register rows
      are then written a row at a time.  0: pushes are scatters.
    push_window_bytes: The most bytes of a push window: a stack whose
      frames hold more (wide rows, many members) takes windows of fewer
      frames, down to one (`ops.window_frames`).
    inplace_stack_bytes: Outside XLA, on CPU, a pack of stacks this large
      or larger is pushed in place (`ops.update_rows`) instead of copied
      by a scatter or a select; None: never.  The copy is bounded by this
      size, so no step costs more with `max_stack_depth`.
    whole_pack_bytes: Under XLA, a pack of at most this many bytes is
      written whole: each branch returns the pack after its block's writes
      (`packing.Packing.whole`), instead of rows to scatter into it after
      the switch.  0: never.
    fill_pack_bytes: Outside XLA, where a block reads a second floating
      register (a third integer one) of a pack for the members at it,
      the lanes of the others are filled in the whole pack by one gather
      (`packing.BlockState.filled`) instead of in each register read, if
      the pack has at most this many bytes or the block has read half
      its rows.
    one_hot_max: Under XLA the `'most'` schedule counts members per block
      by a `[blocks, batch]` comparison up to this many elements, and by a
      segment sum beyond.
    full_block_bytes: Outside XLA, a block that writes registers of this
      many bytes or more (at the batch size traced) also gets a variant
      for steps where every member is at it, which reads and writes them
      without masks; each step then tests for it, if any block has one.
      None: no block has one.
    heavy_block_elements: Under XLA, a block whose primitives make a value
      of this many elements or more (per member, as type inference traced
      them, times the batch: `work`), and whose packs hold at most four
      times that many 4-byte elements, runs in a group of its own and
      outside any conditional, where XLA:CPU runs thunks and splits large
      loops over threads outside conditionals only (TensorFlow 2.18).
      None: never.
  """
  pack_bytes: int = 128 * 1024
  signature_bytes: int = 4 * 1024
  flat_register_bytes: Optional[int] = 32 * 1024
  group_step_bytes: int = 16 * 1024
  guarded_group_bytes: int = 64 * 1024
  push_window_frames: int = 8
  push_window_bytes: int = 4 * 1024
  inplace_stack_bytes: Optional[int] = 32 * 1024
  one_hot_max: int = 1 << 18
  whole_pack_bytes: int = 16 * 1024
  fill_pack_bytes: int = 32 * 1024
  full_block_bytes: Optional[int] = 96 * 1024
  heavy_block_elements: Optional[int] = 1 << 15


# The defaults on a CPU.
CPU = TuningKnobs()
# On a GPU, where a loop's trip test and a conditional's branch index go to
# the host: in practice one group and no guarded group.  Pushes are
# scatters (a GPU compiles them as one kernel) and never in place (not
# every dtype has the kernel there).
GPU = TuningKnobs(flat_register_bytes=None,
                  group_step_bytes=16 * 1024 * 1024,
                  guarded_group_bytes=16 * 1024 * 1024,
                  push_window_frames=0, inplace_stack_bytes=None,
                  whole_pack_bytes=0, heavy_block_elements=None)


def for_device(gpu):
  """The default knobs for a device.

  Args:
    gpu: Whether the run is traced for a GPU.

  Returns:
    `GPU` or `CPU`.
  """
  return GPU if gpu else CPU
