"""How a sharded call splits its batch, and what it reports.

`split_indices` deals a batch's members out to shards (interleaved,
contiguous, or by cost); `batch_size_of` reads the call's batch size from
its arguments; `ShardStats` (one `Shard` per shard) is what a sharded call
did; `global_error` makes a shard's error name the members by their index
in the whole batch.  Both forms of `shard` (executor and strategy) use them.
"""

import dataclasses
import re
from typing import List, Optional

import numpy as np

from autobatch_vm import errors
from autobatch_vm.vm.stats import RunStats

__all__ = ['SPLITS', 'Shard', 'ShardStats', 'batch_size_of', 'global_error',
           'leading', 'split_indices']

SPLITS = ('interleaved', 'contiguous')


# ---------------------------------------------------------------------------
# Splitting a batch.
# ---------------------------------------------------------------------------

def split_indices(batch_size, num_shards, split='interleaved', cost=None):
  """Splits the members of a batch into shards.

  Args:
    batch_size: The members of the batch.
    num_shards: The most shards to make, a positive int.
    split: 'interleaved' (member i to shard i mod num_shards) or
      'contiguous' (consecutive chunks, sizes differing by at most one).
    cost: Optional per-member costs, `[batch_size]`: members are sorted by
      cost, most expensive first, and dealt out in a snake order (0, 1,
      ..., k-1, k-1, ..., 0, 0, 1, ...), so that shards have the same size
      up to one member and close sums of cost.  Overrides `split`.

  Returns:
    The members of each shard: a list of at most `num_shards` sorted int64
    arrays (empty shards left out), which together hold
    `range(batch_size)` once.

  Raises:
    ArgumentError: If `split` or `num_shards` is invalid, or `cost` does
      not give one finite number per member.
  """
  if split not in SPLITS:
    raise errors.ArgumentError(
        f'Unknown split {split!r}; choose one of {SPLITS}, or pass cost=')
  if not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
    raise errors.ArgumentError(
        f'shards must be a positive int, got {num_shards!r}')
  k = int(min(num_shards, max(batch_size, 1)))
  members = np.arange(batch_size, dtype=np.int64)
  if cost is not None:
    cost = np.asarray(cost, dtype=np.float64).reshape(-1)
    if cost.shape != (batch_size,):
      raise errors.ArgumentError(
          f'cost= gave {cost.shape[0]} costs for a batch of {batch_size}',
          hint='The cost function takes the call\'s arguments and returns '
          'one number per batch member.')
    if not np.all(np.isfinite(cost)):
      raise errors.ArgumentError('cost= gave costs that are not finite')
    order = np.argsort(-cost, kind='stable')
    rank = np.arange(batch_size)
    lap, pos = rank // k, rank % k
    owner = np.where(lap % 2 == 0, pos, k - 1 - pos)
    shard_of = np.empty(batch_size, np.int64)
    shard_of[order] = owner
    return [np.sort(members[shard_of == j]) for j in range(k)
            if np.any(shard_of == j)]
  if split == 'contiguous':
    parts = np.array_split(members, k)
  else:
    parts = [members[j::k] for j in range(k)]
  return [p for p in parts if p.size]


# ---------------------------------------------------------------------------
# Statistics.
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Shard:
  """One shard of a sharded call.

  Attributes:
    members: The batch members it ran (global indices, ascending).
    where: The device it was placed on, or the worker that ran it
      (host:pid, or the Dask worker's address).
    stats: Its `RunStats` (steps, utilization, blocks).
    seconds: The time the run took on the worker (executor form), from the
      arguments unpickled to the outputs ready; None on TensorFlow.
    loaded: Whether the worker unpickled the shipped program for this
      shard (the first shard of a signature a worker process runs).
    compiled: Whether the worker compiled the program from source, which
      happens only if the shipped programs did not serve the call.
  """
  members: np.ndarray
  where: str
  stats: RunStats
  seconds: Optional[float] = None
  loaded: bool = False
  compiled: bool = False

  @property
  def size(self):
    """The number of members of the shard."""
    return int(self.members.size)


@dataclasses.dataclass
class ShardStats:
  """What a sharded call did, shard by shard (`ShardedFunction.last_stats`).

  Attributes:
    batch_size: The members of the whole call.
    shards: One `Shard` per shard, in shard order.
    split: 'interleaved', 'contiguous' or 'cost'.
    seconds: The call's time as the caller saw it (executor form; None on
      TensorFlow): splitting, shipping, the slowest worker, reassembling.
  """
  batch_size: int
  shards: List[Shard]
  split: str
  seconds: Optional[float] = None

  @property
  def num_shards(self):
    """The number of shards the call ran."""
    return len(self.shards)

  @property
  def symbolic(self):
    """Whether the counts are tensors of a `tf.function` being traced."""
    return any(s.stats.symbolic for s in self.shards)

  @property
  def steps(self):
    """VM steps of each shard (a list)."""
    return [s.stats.steps for s in self.shards]

  @property
  def utilization(self):
    """Utilization of each shard (a list; see `RunStats.utilization`)."""
    return [s.stats.utilization for s in self.shards]

  @property
  def overall_utilization(self):
    """Active member-blocks over rows run, summed over every shard."""
    self._require_numbers('overall_utilization')
    active = sum(s.stats.member_block_executions for s in self.shards)
    rows = sum(s.stats.rows(l) for s in self.shards
               for l in s.stats.block_executions)
    return active / rows if rows else 0.0

  @property
  def work(self):
    """Block executions summed over the members of each shard (a list).

    That is the work each shard does, whatever its steps.
    """
    return [s.stats.member_block_executions for s in self.shards]

  @property
  def imbalance(self):
    """Largest shard's work over the mean (1.0: balanced).

    On NumPy a shard's time follows its work; under XLA, which computes
    every lane of a step, it follows steps times members (see
    `step_imbalance`).
    """
    self._require_numbers('imbalance')
    work = self.work
    mean = sum(work) / len(work) if work else 0
    return max(work) / mean if mean else 1.0

  @property
  def step_imbalance(self):
    """Largest `steps * members` of a shard over the mean (1.0: balanced)."""
    self._require_numbers('step_imbalance')
    cells = [s.stats.steps * s.size for s in self.shards]
    mean = sum(cells) / len(cells) if cells else 0
    return max(cells) / mean if mean else 1.0

  def _require_numbers(self, what):
    for s in self.shards:
      s.stats.require_numbers(f'ShardStats.{what}')

  def counts(self):
    """Each shard's `RunStats.counts()`, a list (see `with_counts`)."""
    return [s.stats.counts() for s in self.shards]

  def with_counts(self, counts):
    """Fills in the numbers of statistics made inside a `tf.function`.

    This is the way to read a sharded call's statistics made inside a
    `tf.function`: return `counts()` from it, and pass the value here.

    Args:
      counts: The value of what `counts()` returned: a list with one
        `RunStats.counts()` value per shard.

    Returns:
      These statistics, with numbers.

    Raises:
      ArgumentError: If `counts` is not a list of one value per shard.
    """
    if not isinstance(counts, (list, tuple)) or len(counts) != len(
        self.shards):
      raise errors.ArgumentError(
          f'with_counts() expects a list of {len(self.shards)} counts (what '
          'ShardStats.counts() returned), got '
          f'{type(counts).__name__}')
    shards = [dataclasses.replace(s, stats=s.stats.with_counts(c))
              for s, c in zip(self.shards, counts)]
    return dataclasses.replace(self, shards=shards)

  def __str__(self):
    if self.symbolic:
      return (f'ShardStats of a staged call ({len(self.shards)} shards, '
              f'batch {self.batch_size}): counts are tensors; see counts()')
    head = (f'batch: {self.batch_size}   shards: {len(self.shards)}   '
            f'split: {self.split}   imbalance: {self.imbalance:.2f}   '
            f'utilization: {self.overall_utilization:.1%}')
    if self.seconds is not None:
      head += f'   seconds: {self.seconds:.3f}'
    lines = [head, f'{"shard":>5}{"members":>9}{"steps":>8}{"work":>11}'
             f'{"util":>8}{"seconds":>9}  where']
    for j, s in enumerate(self.shards):
      secs = f'{s.seconds:9.3f}' if s.seconds is not None else f'{"":>9}'
      lines.append(f'{j:>5}{s.size:>9}{s.stats.steps:>8}'
                   f'{s.stats.member_block_executions:>11}'
                   f'{s.stats.utilization:>8.1%}{secs}  {s.where}')
    return '\n'.join(lines)

  table = __str__


# ---------------------------------------------------------------------------
# Errors: a shard's member indices made global.
# ---------------------------------------------------------------------------

_MEMBERS = re.compile(r'(members(?: at this block:)? )\[([0-9,\s]*)\]')


def global_error(err, part, j, num_shards, where):
  """`err` (a shard's `AutoBatchError`) naming global member indices.

  Args:
    err: The error a shard's call raised.
    part: The shard's members (global indices, ascending).
    j: The shard's number.
    num_shards: The number of shards of the call.
    where: The device or worker the shard ran on.

  Returns:
    An error of `err`'s class whose message names the members by their
    global index and the shard, with `members` (those indices, or None)
    and `shard` set.
  """
  def remap(match):
    local = [int(i) for i in match.group(2).replace(',', ' ').split()]
    mapped = [int(part[i]) if 0 <= i < part.size else i for i in local]
    return f'{match.group(1)}{mapped}'
  message, count = _MEMBERS.subn(remap, err.message)
  message += f' (in shard {j} of {num_shards}, on {where})'
  new = type(err)(message, loc=err.loc, hint=err.hint)
  found = _MEMBERS.search(message) if count else None
  new.members = ([int(i) for i in found.group(2).replace(',', ' ').split()]
                 if found else None)
  new.shard = j
  return new



# ---------------------------------------------------------------------------
# The batch size of a call.
# ---------------------------------------------------------------------------

def leading(x):
  """The leading (batch) dimension of an argument.

  Args:
    x: An array or tensor, or a Python value.

  Returns:
    Its first dimension, or None for a scalar or a value with no shape.
  """
  shape = getattr(x, 'shape', None)
  if shape is None or len(shape) == 0:
    return None
  return shape[0]


def batch_size_of(fn, leaves):
  """The batch size of the call: the leading dimension of its arguments.

  Arguments of size 1 may broadcast, as the call itself decides.

  Args:
    fn: The batched function called.
    leaves: The arrays or tensors of its arguments.

  Returns:
    The batch size, or None if no argument has a leading dimension.

  Raises:
    ArgumentError: If the arguments have different batch sizes.
  """
  sizes = {leading(x) for x in leaves} - {None}
  if None in [leading(x) for x in leaves] and not sizes:
    return None
  if len(sizes) > 1:
    sizes.discard(1)
  if len(sizes) > 1:
    raise errors.ArgumentError(
        f'arguments of {fn.name}() have different batch sizes '
        f'({sorted(sizes)})', loc=fn.context.function_loc(fn.name),
        hint='Every argument needs the same leading (batch) dimension.')
  return sizes.pop() if sizes else None
