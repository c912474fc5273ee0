"""Which block runs next: the one scheduler every executor follows.

Every member has a program counter (PC); a member whose PC is
`num_blocks` (or more: a staged run parks failed members past the exit)
has finished.  One step runs one block, for the members at it:

- `'most'` (the default): the block with the most members, ties to the
  lowest index, except that the exit of a loop waits while any member is
  in the loop (`ir.loops.exit_waits`: `waits`), unless every block with
  members waits;
- `'lowest'`: the lowest-indexed block that has any member.

When no block has a member, the run is over.  `Scheduler` applies this
rule to PCs held in a NumPy array (the NumPy stack VM's loop, TensorFlow
stepping eagerly, the stackless executor's frames) and to counts of
waiting rows (`RowQueue`, the stackless executor on a compacting
backend).  A staged TensorFlow loop cannot call Python at each step; it
computes the same choice with tensor ops (`backends.tf.loop`), which the
tests check against this one.
"""

import numpy as np

from autobatch_vm import errors

__all__ = ['SCHEDULES', 'DEFAULT_SCHEDULE', 'check_schedule', 'Scheduler',
           'Schedule', 'eligible_counts', 'ProgramCounter', 'RowQueue']

SCHEDULES = ('lowest', 'most')
# Better on three of the four benchmark workloads (collatz, tree-RNN,
# NUTS) and about even on fibonacci: docs/performance.md.
DEFAULT_SCHEDULE = 'most'


def check_schedule(schedule):
  """Raises `ArgumentError` unless `schedule` is one of `SCHEDULES`.

  Args:
    schedule: The schedule a caller asked for.

  Raises:
    ArgumentError: `schedule` is not a known schedule.
  """
  if schedule not in SCHEDULES:
    raise errors.ArgumentError(
        f'Unknown schedule {schedule!r}; choose one of {SCHEDULES}')


class Scheduler:
  """The rule that picks the next block, for a program of `num_blocks`.

  Args:
    schedule: `'most'` or `'lowest'` (see the module docstring).
    num_blocks: The number of blocks; a PC of `num_blocks` or more is a
      member that has finished.

  Under `'most'` a `Schedule` (the name with its program's `waits`) also
  holds back loops' exits: block `x` does not run while a member is at a
  block `y` with `waits[x, y]` (unless every block with members waits).
  """
  __slots__ = ('schedule', 'most', 'num_blocks', '_size', '_waits')

  def __init__(self, schedule, num_blocks):
    self.schedule = schedule
    self.most = schedule == 'most'
    self.num_blocks = num_blocks
    self._size = num_blocks + 1
    self._waits = getattr(schedule, 'waits', None) if self.most else None

  def next_block(self, pc):
    """The block to run next.

    Args:
      pc: The members' PCs, a NumPy int array `[batch]` (non-negative).

    Returns:
      The block's index, or `num_blocks` if every member has finished.
    """
    if self.most:
      # PCs past the exit (parked members) make `counts` longer: they
      # count nowhere among the blocks.
      counts = np.bincount(pc, minlength=self._size)[:self.num_blocks]
      if self._waits is not None:
        counts = eligible_counts(counts, self._waits)
      b = int(counts.argmax())
      return b if counts[b] else self.num_blocks
    return int(pc.min())

  def next_waiting(self, sizes):
    """The block to run next, from the rows waiting at each block.

    Args:
      sizes: A dict, block index -> rows waiting there (only blocks with
        rows); not empty.

    Returns:
      The block's index.
    """
    if len(sizes) == 1:
      return next(iter(sizes))
    if self.most:
      return max(sizes, key=lambda k: (sizes[k], -k))
    return min(sizes)


class Schedule(str):
  """A schedule's name (`'most'`) with its program's loop exits.

  `waits` is `ir.loops.exit_waits`'s array.  The value is the name to
  every comparison and cache key (the waits follow from the program,
  which those keys hold), so it passes through the executors as the name
  does, and `Scheduler` and the staged loop's schedule read `waits`.

  Args:
    name: The schedule's name.
    waits: The bool array `[num_blocks, num_blocks]`.
  """
  __slots__ = ('waits',)

  def __new__(cls, name, waits):
    out = super().__new__(cls, name)
    out.waits = waits
    return out

  def __reduce__(self):
    return (Schedule, (str(self), self.waits))


def eligible_counts(counts, waits):
  """The counts the `'most'` schedule compares, loops' exits held.

  Args:
    counts: Members per block, an int array `[num_blocks]`.
    waits: A `Schedule`'s `waits`.

  Returns:
    `counts` with 0 for the blocks that wait for a block with members;
    `counts` as they are where every block with members waits.
  """
  held = (waits & (counts > 0)).any(axis=1)
  out = np.where(held, 0, counts)
  return out if out.any() else counts


class ProgramCounter:
  """Which rows of a frame are at which block, as a PC per row.

  The VM keeps PCs so, on any backend.  `next()` returns the block to run
  and the mask of its rows, or `(None, None)` when all have returned.

  Args:
    backend: The backend holding the PCs.
    batch: The frame's rows.
    num_blocks: The function's blocks.
    schedule: `'most'` or `'lowest'`.
  """

  def __init__(self, backend, batch, num_blocks, schedule):
    self.be = backend
    self.batch = batch
    self.num_blocks = num_blocks
    self.scheduler = Scheduler(schedule, num_blocks)
    active = backend.asarray(np.ones(batch, bool))
    self.full = backend.mask_of(active, batch)
    self.pc = backend.start_pc(active, num_blocks)
    self._first = True

  def next(self):
    """The next block and the mask of its rows, or `(None, None)`."""
    if self._first:   # every row starts at the entry block
      self._first = False
      return 0, self.full
    b = self.scheduler.next_block(np.asarray(self.pc))
    if b >= self.num_blocks:
      return None, None
    return b, self.be.make_mask(self.pc, b, self.batch)

  def goto(self, m, target):
    """Moves the rows of `m` to block `target`.

    Args:
      m: The mask of the rows that ran.
      target: A block index.
    """
    self.pc = self.be.goto(self.pc, m, target)

  def branch(self, m, cond, true_block, false_block):
    """Moves each row of `m` to one of two blocks.

    Args:
      m: The mask of the rows that ran.
      cond: A bool per row of the frame.
      true_block: The block of the rows where `cond` holds.
      false_block: The block of the others.
    """
    self.pc = self.be.branch(self.pc, m, cond, true_block, false_block)

  def finish(self, m):
    """Marks the rows of `m` as returned.

    Args:
      m: The mask of the rows that returned.
    """
    self.pc = self.be.goto(self.pc, m, self.num_blocks)


class RowQueue:
  """`ProgramCounter` for a compacting backend (NumPy), without one.

  Per block, the (sorted) rows waiting there.  The rows at a block are
  what a compacting block needs, so no mask is built and no counter
  compared; the choice is the `Scheduler`'s.

  Args:
    backend: Unused (the queue holds NumPy index arrays).
    batch: The frame's rows.
    num_blocks: The function's blocks.
    schedule: `'most'` or `'lowest'`.
  """

  def __init__(self, backend, batch, num_blocks, schedule):
    del backend
    self.batch = batch
    self.scheduler = Scheduler(schedule, num_blocks)
    self.full = Rowset(np.arange(batch), batch)
    self.waiting = {0: [self.full.idx]}   # block -> index arrays
    self.sizes = {0: batch}               # block -> rows waiting there

  def next(self):
    """The next block and its rows (a `Rowset`), or `(None, None)`."""
    sizes = self.sizes
    if not sizes:
      return None, None
    b = self.scheduler.next_waiting(sizes)
    n = sizes.pop(b)
    parts = self.waiting.pop(b)
    if n == self.batch:
      return b, self.full
    idx = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
    return b, Rowset(idx, self.batch)

  def _add(self, b, idx, n):
    if b in self.sizes:
      self.sizes[b] += n
      self.waiting[b].append(idx)
    else:
      self.sizes[b] = n
      self.waiting[b] = [idx]

  def goto(self, m, target):
    """Moves the rows of `m` to block `target`.

    Args:
      m: The rows that ran.
      target: A block index.
    """
    self._add(target, m.idx, m.count)

  def branch(self, m, cond, true_block, false_block):
    """Moves each row of `m` to one of two blocks.

    Args:
      m: The rows that ran.
      cond: A bool per row of `m`.
      true_block: The block of the rows where `cond` holds.
      false_block: The block of the others.
    """
    taken = m.idx[cond]
    k = taken.size
    if k:
      self._add(true_block, taken, k)
    if k < m.count:
      self._add(false_block, m.idx[~cond], m.count - k)

  def finish(self, m):
    """Marks the rows of `m` as returned (they wait nowhere).

    Args:
      m: The rows that returned.
    """
    del m


class Rowset:
  """A `RowQueue`'s rows at a block, as a mask.

  `idx` (sorted), `count`, `full`, and a bool `mask` made only if
  something asks for it.

  Args:
    idx: The rows' indices, sorted.
    batch: The frame's rows.
  """
  __slots__ = ('idx', 'count', 'full', '_batch', '_mask')

  def __init__(self, idx, batch):
    self.idx = idx
    self.count = idx.size
    self.full = self.count == batch
    self._batch = batch
    self._mask = None

  @property
  def mask(self):
    """The rows as a bool mask `[batch]`."""
    if self._mask is None:
      self._mask = np.zeros(self._batch, bool)
      self._mask[self.idx] = True
    return self._mask
