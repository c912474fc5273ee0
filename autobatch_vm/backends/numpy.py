"""NumPy backend: eager, a Python loop over VM steps, array work inside.

Every operation here is vectorized over the batch; none loops over members.

Blocks run *compacted* (each is a generated function, see
`vm.codegen`): a block's primitives get arrays with one row per member
at the block (the registers' rows gathered by the members' indices), and
results are scattered back.  So a block that only a few members reach
costs in proportion to those few, and leftover data of the other members
never flows through a primitive (no junk lanes).  When every member is at
the block, registers are passed as they are, with no gather.

Stacks are arrays `[max_stack_depth, batch, *shape]` with one stack pointer
per member; the generated blocks push and pop for the active members only
(by their indices), so their cost does not depend on the stack depth.
Stacks, stack pointers and the program counter belong to the run and are
updated in place.  A register is written in place only where the run owns
the array (no one else can hold it, see `vm.layout.Layout`); otherwise a
write copies, so a value a primitive returned, or an input array, is never
changed.
"""

import contextlib
import ctypes
import os
import platform
import threading
import time

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends import base
from autobatch_vm.backends.base import PC
from autobatch_vm.backends.scheduler import Scheduler

__all__ = ['NumpyBackend', 'coercer', 'take_rows']


class _Mask:
  """The members at the block being run: a bool mask and their indices."""
  __slots__ = ('mask', 'idx', 'count', 'full')

  def __init__(self, mask, batch):
    self.mask = mask
    self.idx = mask.nonzero()[0]
    self.count = self.idx.size
    self.full = self.count == batch


def take_rows(x, idx):
  """`x[idx]`, the rows of members `idx`.

  `take` is faster on arrays of vectors, indexing on 1-D ones.

  Args:
    x: A NumPy array `[batch, ...]`.
    idx: Row indices.

  Returns:
    The rows.
  """
  return x[idx] if x.ndim == 1 else x.take(idx, axis=0)


def coercer(tensor_type, strict=False):
  """`coerce(x, rows)`: `x` as an array `[rows, *shape]` of the type's dtype.

  A cast and a broadcast only where needed.

  Args:
    tensor_type: the `TensorType` of one member's value.
    strict: whether `x` comes from a primitive that got per-member inputs.
      Such a result with a leading dimension is one row per member; if it
      has another number of rows (`x[:1]` takes the first member's row, not
      a row of each member), `coerce` raises `ValueError` instead of
      broadcasting it.  A lower-rank result (a shape, a constant) is still
      broadcast to every member.

  Returns:
    The function `coerce(x, rows)`.
  """
  dtype, shape = tensor_type.dtype, tuple(tensor_type.shape)
  ndim = len(shape) + 1

  def coerce(x, rows):
    if type(x) is not np.ndarray or x.dtype != dtype:
      x = np.asarray(x, dtype)
    if x.ndim != ndim or x.shape[0] != rows:
      if not x.ndim:   # a constant: `np.full` costs a third of a broadcast
        return np.full((rows,) + shape, x, dtype)
      if strict and x.ndim == ndim:
        raise ValueError(errors.row_count_message(x.shape[0], rows))
      x = np.broadcast_to(x, (rows,) + shape)
    return x
  return coerce


_heap_kept = False
_thread_heaps_kept = False


def keep_freed_heap():
  """Once per process: makes glibc's malloc keep freed memory for reuse.

  A batched run allocates arrays of hundreds of KiB and more (NUTS's
  `[64, 1000]` float64 logits; a stackless frame holds a whole tree
  level, and a primitive's results on it are as large).  With glibc's
  starting thresholds these come from fresh `mmap` pages, or the heap's
  top is given back to the system when they are freed, so every call
  faults its memory in again (`benchmarks/page_faults.py` counts them).
  This sets the mmap threshold glibc itself adopts once a program has
  freed a 16 MiB array (see mallopt(3), M_MMAP_THRESHOLD): arrays up to
  16 MiB come from the heap.  The heap keeps up to `_trim_bytes()` free at
  its top (M_TRIM_THRESHOLD; glibc's own adjustment stops at 32 MiB, less
  than a stackless run at a few thousand members frees between calls).
  Set explicitly, they hold whatever the environment's `MALLOC_*_`
  variables or earlier frees did.

  A run in a thread other than the main one (a Dask worker runs its tasks
  in threads) allocates from that thread's arena, whose heaps glibc
  unmaps whenever one empties, whatever the thresholds: every step would
  fault its arrays in again.  The first such run also sets M_TOP_PAD to
  the size of a thread heap (64 MiB), so that no heap counts as empty
  enough to unmap; the price is that a thread's arena keeps the heaps it
  grew.

  Elsewhere than glibc, or with `AUTOBATCH_VM_KEEP_HEAP=0` in the
  environment, it does nothing.
  """
  global _heap_kept, _thread_heaps_kept
  in_thread = threading.current_thread() is not threading.main_thread()
  if _heap_kept and (_thread_heaps_kept or not in_thread):
    return
  mallopt = None
  if os.environ.get('AUTOBATCH_VM_KEEP_HEAP', '1') != '0':
    mallopt = _glibc_mallopt()
  if not _heap_kept:
    _heap_kept = True
    if mallopt is not None:
      mallopt(_M_MMAP_THRESHOLD, 16 << 20)
      mallopt(_M_TRIM_THRESHOLD, _trim_bytes())
  if in_thread:
    _thread_heaps_kept = True
    if mallopt is not None:
      mallopt(_M_TOP_PAD, _THREAD_HEAP_BYTES)


def _glibc_mallopt():
  """glibc's `mallopt`, or None elsewhere."""
  if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
    return None
  try:
    mallopt = ctypes.CDLL(None).mallopt
  except (OSError, AttributeError):
    return None
  mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  mallopt.restype = ctypes.c_int
  return mallopt


_M_TRIM_THRESHOLD = -1   # glibc's <malloc.h>
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
# A thread arena's heaps are at most this large (glibc's HEAP_MAX_SIZE on
# 64-bit: twice the largest mmap threshold).
_THREAD_HEAP_BYTES = 64 << 20


def _trim_bytes():
  """The freed memory the heap keeps: 512 MiB, or a sixteenth of the
  machine's memory where that is less (and at least 32 MiB)."""
  try:
    physical = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  except (ValueError, OSError, AttributeError):
    physical = 0
  return min(512 << 20, max(32 << 20, physical // 16))


class NumpyBackend(base.Backend):
  """Runs autobatch_vm programs on NumPy arrays, eagerly (see `Backend`)."""

  name = 'numpy'
  compacts = True   # primitives get the active members' rows only

  def __repr__(self):
    return 'NumpyBackend()'

  def __eq__(self, other):
    return isinstance(other, NumpyBackend)

  def __hash__(self):
    return hash(NumpyBackend)

  # -- values --------------------------------------------------------------

  def asarray(self, x):
    return np.asarray(x)

  def shape(self, x, batched=False):
    del batched   # every axis has a size
    return tuple(np.shape(x))

  def dtype(self, x):
    return np.asarray(x).dtype

  def cast(self, x, dtype):
    return np.asarray(x).astype(dtype, copy=False)

  def cast_weak(self, x, dtype, where=''):
    x = np.asarray(x)
    outside = base.ints_outside(x, dtype)
    if outside is not None:
      raise OverflowError(f'Python integer {outside} out of bounds for '
                          f'{np.dtype(dtype)}')
    return x.astype(dtype, copy=False)

  # No tracer (the default `traces_symbolically`): type inference runs
  # primitives on made-up values (`type_inference.MADE_UP`).

  # -- members stopped by an error (`vm.failures`; `vm.machine.execute`
  # runs a call again without the members each error stops) -------------

  def start_pc(self, active, num_blocks):
    return np.where(np.asarray(active, np.bool_), 0,
                    num_blocks).astype(np.int32)

  def poison_members(self, x, failed):
    x = np.asarray(x)
    failed = np.asarray(failed, np.bool_)
    if x.ndim == 0 or not failed.any():
      return x
    if x.dtype.kind in 'fc':
      value = np.nan
    elif x.dtype.kind in 'iu':
      info = np.iinfo(x.dtype)
      value = info.max if x.dtype.kind == 'u' else info.min
    elif x.dtype.kind == 'b':
      value = False
    else:
      return x
    out = x.copy()
    out[failed] = value
    return out

  def members_ok(self, failed, batch):
    if failed is None:
      return np.ones((batch,), np.bool_)
    return np.logical_not(np.asarray(failed, np.bool_))

  def dummy(self, tensor_type, batch):
    return np.zeros((batch,) + tensor_type.shape, tensor_type.dtype)

  zeros = dummy

  def coercer(self, tensor_type, strict=False):
    return coercer(tensor_type, strict)

  def coerce_fn(self, tensor_type, batch, strict=False):
    coerce = coercer(tensor_type, strict)
    return lambda x: coerce(x, batch)

  def concat(self, xs):
    return np.concatenate(xs, axis=0)

  def take_rows(self, x, idx):
    return take_rows(np.asarray(x), idx)

  def slice(self, x, i):
    return x[i:i + 1]

  def expand(self, x):
    return np.asarray(x)[np.newaxis]

  def to_bool(self, x):
    x = np.asarray(x)
    return x if x.dtype == np.bool_ else x != 0

  @contextlib.contextmanager
  def error_context(self):
    # A Python scalar of a batch raises on every NumPy, as on the newest
    # (`errors.scalar_conversions_raise`).
    with np.errstate(all='ignore'), errors.scalar_conversions_raise():
      yield

  def prepare_run(self):
    keep_freed_heap()

  # -- masks ---------------------------------------------------------------

  def make_mask(self, pc, block, batch):
    return _Mask(pc == block, batch)

  def members(self, m):
    return np.flatnonzero(m.mask)

  def write(self, old, new, m):
    if m.full:
      return new
    mask = m.mask
    if new.ndim > 1:
      mask = mask.reshape(mask.shape + (1,) * (new.ndim - 1))
    return np.where(mask, new, old)

  # -- stacks --------------------------------------------------------------

  def stack_zeros(self, tensor_type, depth, batch):
    return np.zeros((depth, batch) + tensor_type.shape, tensor_type.dtype)

  def sp_zeros(self, batch):
    return np.zeros((batch,), np.int32)

  def push(self, stacks, sp, values, m, depth, overflow_error):
    idx = m.idx
    top = sp[idx]
    full = m.full
    if not stacks and m.count and top.max() >= depth:  # nothing to index
      raise overflow_error(idx[top >= depth])
    try:
      for stack, value in zip(stacks, values):
        # Stacks are owned by the VM run.  A full stack has no row `top`:
        # NumPy's own bounds check finds an overflow (stack pointers are
        # never negative), with no extra pass over `top`.
        stack[top, idx] = value if full else take_rows(value, idx)
    except IndexError:
      if (top >= depth).any():
        raise overflow_error(idx[top >= depth]) from None
      raise
    sp[idx] = top + 1   # stack pointers, like stacks, belong to the run
    return stacks, sp

  # -- loop ----------------------------------------------------------------

  def run(self, blocks, state, num_blocks, schedule, stats, labels,
          max_steps=None, step_limit_error=None, on_error='raise'):
    del on_error   # errors raise at once here (`vm.failures`)
    batch = stats.batch_size
    keep_freed_heap()
    next_block = Scheduler(schedule, num_blocks).next_block
    runs = [0] * num_blocks
    active = [0] * num_blocks
    seconds = [0.0] * num_blocks
    steps = 0
    if batch:
      clock = time.perf_counter if stats.profile else None
      if clock is not None:
        member_blocks = stats.member_blocks = np.zeros(batch, np.int64)
      while True:
        pc = state[PC]
        b = next_block(pc)
        if b >= num_blocks:
          break
        if steps == max_steps:
          raise step_limit_error(np.flatnonzero(pc < num_blocks), b,
                                 pcs=pc)
        m = _Mask(pc == b, batch)
        if clock is None:
          blocks[b](state, m)
        else:
          start = clock()
          blocks[b](state, m)
          seconds[b] += clock() - start
          member_blocks[m.idx] += 1
        runs[b] += 1
        active[b] += m.count
        steps += 1
    stats.steps = steps
    for label, r, a, t in zip(labels, runs, active, seconds):
      stats.block_executions[label] = r
      stats.block_active[label] = a
      if stats.profile:
        stats.block_time[label] = t
    return state
