"""What one batched run did: `RunStats`, filled by every executor."""

import dataclasses
from typing import Dict, Optional

import numpy as np

from autobatch_vm import errors
from autobatch_vm import profiler

__all__ = ['RunStats']


@dataclasses.dataclass
class RunStats:
  """What one batched run did.

  steps: VM steps (blocks executed, each on the whole batch).
  block_executions: label -> times the block ran.
  block_active: label -> members active, summed over its executions.
  block_loc: label -> source location (function, file, line) it came from.
  block_time: label -> seconds spent in the block (only with profile=True).
  member_blocks: blocks each member executed, a NumPy int array [batch]
    (only with profile=True): what it would execute alone.
  block_rows: label -> rows the block ran on, summed over its executions,
    where that is not `batch_size` per execution: in stackless mode a
    call's frame holds its callers' rows only (fewer than the batch, or
    more when calls run together).  Empty for the VM.
  stackless: whether stackless mode ran the call (`stackless=True`, or
    chosen by `stackless=None`, the default): then `steps` counts blocks
    run, each on a frame of rows, not VM steps.
  failed: where the run stops members at an error (a stack overflow, a
    failed `assert`, `max_steps`) instead of raising at once (TensorFlow
    in a graph, and any TensorFlow run with `on_error='status'`), a
    boolean `[batch]`, True for the members stopped; None where no member
    can fail so (`vm.failures`).
  unreported: the names of the errors (`'StackOverflowError'`, ...) the
    run can meet and nothing can raise: it runs under a bare
    `tf.function(jit_compile=True)` (not `xla.compile_nested_output`)
    with `on_error='raise'`; else empty.
  per_member_fallbacks: NumPy function name -> times it ran once per
    member in a per-member primitive (it has no batching rule), in this
    run; empty where none did.
  """
  batch_size: int
  steps: int = 0
  block_executions: Dict[str, int] = dataclasses.field(default_factory=dict)
  block_active: Dict[str, int] = dataclasses.field(default_factory=dict)
  block_loc: Dict[str, object] = dataclasses.field(default_factory=dict)
  block_time: Dict[str, float] = dataclasses.field(default_factory=dict)
  profile: bool = False
  stackless: bool = False
  member_blocks: Optional[np.ndarray] = dataclasses.field(default=None,
                                                          compare=False)
  block_rows: Dict[str, int] = dataclasses.field(default_factory=dict)
  failed: Optional[object] = dataclasses.field(default=None, compare=False)
  unreported: tuple = dataclasses.field(default=(), compare=False)
  per_member_fallbacks: Dict[str, int] = dataclasses.field(
      default_factory=dict, compare=False)

  @property
  def longest_member_blocks(self):
    """Blocks of the member that executes the most (profile=True only).

    None without `profile=True`.  On the VM a step moves each member by
    at most one block, so no schedule can finish in fewer steps than this
    (stackless mode, which runs a member's independent calls together,
    can).
    """
    if self.member_blocks is None:
      return None
    self.require_numbers('longest_member_blocks')
    if not self.member_blocks.size:
      return None
    return int(self.member_blocks.max())

  @property
  def schedule_overhead(self):
    """`steps / longest_member_blocks` (profile=True only, else None).

    1.0 means the run took no more steps than its longest member alone; the
    excess is divergence, which a schedule or a sync point can reduce."""
    longest = self.longest_member_blocks
    if not longest:
      return None
    return self.steps / longest

  def rows(self, label):
    """Rows block `label` ran on, summed over its executions.

    The batch per execution, except in stackless mode (see `block_rows`).

    Args:
      label: A block's label.

    Returns:
      The number of rows.
    """
    if self.block_rows:
      return self.block_rows.get(label, 0)
    return self.block_executions.get(label, 0) * self.batch_size

  @property
  def utilization(self):
    """Mean fraction of the rows a block ran on that were active.

    Of the batch, except in stackless mode (see `block_rows`).
    """
    self.require_numbers('utilization')
    total = sum(self.rows(l) for l in self.block_executions)
    if not total:
      return 0.0
    return sum(self.block_active.values()) / total

  @property
  def member_block_executions(self):
    """Block executions summed over members: the unbatched block count."""
    return sum(self.block_active.values())

  @property
  def symbolic(self):
    """Whether the counts are tensors of a `tf.function` being traced.

    Read them after the call with `counts()` and `with_counts`.
    """
    return not isinstance(self.steps, (int, np.integer))

  def counts(self):
    """The run's numbers as a dict of arrays.

    To read a staged run's statistics after the call (`with_counts`):
    - 'counts': executions and active members per block, `[blocks, 2]`
      int32, rows in the order of `block_executions`;
    - with `profile=True`: 'member_blocks', the blocks each member ran,
      `[batch]`, and (not under XLA, which has no clock) 'seconds', the
      time per block, `[blocks]` float64;
    - where the batch size is a tensor (a run whose batch axis has no size
      while traced), 'batch_size', a scalar int32.

    NumPy arrays after an eager run.  Inside a `tf.function` (XLA
    included) the statistics are tensors of the traced graph, which cannot
    be read once the function returns: return `fn.last_stats.counts()`
    from the function along with its result, then
    `fn.last_stats.with_counts(value)` gives the statistics with numbers.
    """
    labels = list(self.block_executions)
    runs = [self.block_executions[l] for l in labels]
    active = [self.block_active.get(l, 0) for l in labels]
    seconds = ([self.block_time.get(l, 0.0) for l in labels]
               if self.block_time else [])
    if not self.symbolic:
      out = {'counts': np.array([runs, active], np.int32).reshape(2, -1).T}
      if seconds:
        out['seconds'] = np.array(seconds, np.float64)
      if self.member_blocks is not None:
        out['member_blocks'] = np.asarray(self.member_blocks)
      return out
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    as_int = lambda xs: [tf.cast(x, tf.int32) for x in xs]
    out = {'counts': tf.stack([tf.stack(as_int(runs)),
                               tf.stack(as_int(active))], axis=1)}
    if seconds:
      out['seconds'] = tf.stack([tf.cast(t, tf.float64) for t in seconds])
    if self.member_blocks is not None:
      out['member_blocks'] = self.member_blocks
    if tf.is_tensor(self.batch_size):
      out['batch_size'] = self.batch_size
    return out

  def require_numbers(self, what):
    """Raises `ArgumentError` naming `what` if the counts are tensors.

    Args:
      what: The property or method that needs numbers.

    Raises:
      ArgumentError: The counts are tensors of a trace.
    """
    if self.symbolic:
      raise errors.ArgumentError(
          f'RunStats.{what} needs numbers, but these statistics are tensors '
          'of a tf.function being traced',
          hint='Stage the batched function with ab.stage(fn, ...), whose '
          'last_stats has each call\'s numbers; or return '
          'fn.last_stats.counts() from the tf.function along with its '
          'result, and call fn.last_stats.with_counts(value) on the value '
          'after the call.')

  def with_counts(self, counts):
    """These statistics with the numbers `counts()` returned.

    The way to read a staged run's statistics.

    Args:
      counts: The value of `counts()`: NumPy arrays or eager tensors.

    Returns:
      A `RunStats` with numbers.

    Raises:
      ArgumentError: `counts` is not what `counts()` returned for this run.
    """
    labels = list(self.block_executions)
    hint = ('Return fn.last_stats.counts() from the tf.function that calls '
            'fn, and pass its value here.')
    if not isinstance(counts, dict) or 'counts' not in counts:
      raise errors.ArgumentError(
          'with_counts() expects the dict that counts() returned, got '
          f'{type(counts).__name__}', hint=hint)
    value = np.asarray(counts['counts'])
    if value.shape != (len(labels), 2) or value.dtype.kind not in 'iu':
      raise errors.ArgumentError(
          f'with_counts() expects counts of shape [{len(labels)}, 2] and an '
          f'integer dtype for this run, got {value.dtype}'
          f'{list(value.shape)}', hint=hint)
    block_time = dict(self.block_time)
    if 'seconds' in counts:
      block_time = {l: float(t) for l, t in
                    zip(labels, np.asarray(counts['seconds']))}
    batch_size = self.batch_size
    if 'batch_size' in counts:
      batch_size = int(counts['batch_size'])
    member_blocks = self.member_blocks
    if 'member_blocks' in counts:
      member_blocks = np.asarray(counts['member_blocks']).astype(np.int64)
    return dataclasses.replace(
        self, batch_size=batch_size, steps=int(value[:, 0].sum()),
        block_executions={l: int(r) for l, r in zip(labels, value[:, 0])},
        block_active={l: int(a) for l, a in zip(labels, value[:, 1])},
        block_loc=dict(self.block_loc), block_time=block_time,
        member_blocks=member_blocks)

  def table(self):
    """The per-block profile as text (see `autobatch_vm.profiler`)."""
    self.require_numbers('table()')
    return profiler.format_table(self)

  def __str__(self):
    if self.symbolic:
      return (f'RunStats of a staged run (batch {self.batch_size}): counts '
              'are tensors; see RunStats.counts()')
    what = 'blocks run (stackless)' if self.stackless else 'steps'
    lines = [f'{what}: {self.steps}   batch: {self.batch_size}   '
             f'utilization: {self.utilization:.1%}']
    lines.append(f'{"block":<24}{"runs":>8}{"active/run":>12}  source')
    for label, runs in self.block_executions.items():
      if not runs:
        continue
      active = self.block_active[label] / runs
      loc = self.block_loc.get(label)
      where = f'{loc.filename.rsplit("/", 1)[-1]}:{loc.line}' if loc else ''
      lines.append(f'{label:<24}{runs:>8}{active:>12.1f}  {where}')
    return '\n'.join(lines)
