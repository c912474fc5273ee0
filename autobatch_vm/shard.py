"""`shard`: one batched call split over devices or worker processes.

Batch members are independent, so a batch splits into shards that run
apart, each its own VM loop with no step in common, and whose outputs are
put back in the batch's order.  Two forms:

    # TensorFlow: the replicas of a tf.distribute strategy (GPUs, or
    # logical CPU devices), one shard placed on each.
    fib2 = ab.shard(fibonacci, strategy=tf.distribute.MirroredStrategy(),
                    jit_compile=True, max_stack_depth=20)
    fib2(tf.constant(n))

    # NumPy: any concurrent.futures.Executor-shaped object (`submit`
    # returning futures with `result()`): a dask.distributed Client, a
    # ProcessPoolExecutor.
    fibd = ab.shard(fibonacci, executor=client, max_stack_depth=20)
    fibd(n)
    print(fibd.last_stats)      # steps, utilization, seconds per shard

Members differ in cost (a recursion's depth, a sampler's tree sizes), and a
shard takes as long as its members' work: contiguous chunks of a batch
whose expensive members sit together leave workers idle.  `split=
'interleaved'` (the default) deals members out in turn (member i to shard
i mod k), which balances any cost that does not follow the members' order;
`cost=` (a function of the call's arguments giving a cost per member) sorts
members by cost and deals them out in a snake order, which balances known
costs; `shards=` larger than the number of workers lets an executor hand
out the shards as workers free up.

The executor form compiles the program once, on the caller's side, and
ships it: the Context (its functions, and the compiled programs of the
call's signature) is pickled with cloudpickle, functions by value where
their module cannot be imported by name.  A worker process unpickles one
payload once and keeps it for later shards and calls.
"""

import dataclasses
import hashlib
import importlib.machinery
import io
import itertools
import os
import pickle
import re
import socket
import sys
import threading
import time
from typing import List, Optional

import numpy as np

from autobatch_vm import errors
from autobatch_vm import frontend
from autobatch_vm import instructions as inst
from autobatch_vm import numpy_backend
from autobatch_vm import virtual_machine

__all__ = ['Shard', 'ShardStats', 'ShardedFunction', 'shard',
           'split_indices', 'SPLITS']

SPLITS = ('interleaved', 'contiguous')

# Keyword arguments of a batched call that a shard passes on.
_CALL_KWARGS = ('stackless', 'max_stack_depth', 'schedule', 'profile',
                'max_steps', 'backend')


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


def _inverse(parts, batch_size):
  """For the concatenation of `parts`, the position of each member."""
  order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
  inverse = np.empty(batch_size, np.int64)
  inverse[order] = np.arange(batch_size)
  return inverse


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
  stats: virtual_machine.RunStats
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


def _global_error(err, part, j, num_shards, where):
  """`err` (a shard's `AutoBatchError`) naming global member indices."""
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
# Shipping a Context to worker processes.
# ---------------------------------------------------------------------------

# Entries of a Context's program cache shipped with it: the typed, lowered
# and stackless programs of the call's signature and the stackless choice.
_SHIPPED_KINDS = ('typed', 'lowered', 'stackless', 'chooses_stackless')
_pickle_lock = threading.Lock()


def _importable(module_name):
  """Whether a worker can import `module_name` by name from its path (a
  module loaded from a file path under another name cannot)."""
  top = module_name.split('.')[0]
  if top in sys.builtin_module_names:
    return True
  spec = getattr(sys.modules.get(top), '__spec__', None)
  if spec is not None and spec.origin == 'frozen':
    return True
  return importlib.machinery.PathFinder.find_spec(top, sys.path) is not None


def _new_context(debug):
  return frontend.Context(debug=debug)


def _set_context_state(ctx, state):
  functions, cache = state
  ctx._functions.update(functions)  # pylint: disable=protected-access
  ctx._cache.update(cache)  # pylint: disable=protected-access
  return ctx


def _shipping_pickler(context, cache):
  import cloudpickle  # pylint: disable=g-import-not-at-top

  class Pickler(cloudpickle.Pickler):
    """cloudpickle, with `context` pickled as its functions and `cache`
    (a fresh Context is made on the other side) and batched functions
    without their last statistics."""

    def reducer_override(self, obj):
      if isinstance(obj, frontend.Context):
        if obj is not context:
          raise errors.ArgumentError(
              'A batched function to shard refers to a batched function '
              'of another Context',
              hint='Define the functions that call each other in one '
              'Context.')
        return (_new_context, (bool(obj.debug),),
                (dict(obj._functions), cache),  # pylint: disable=protected-access
                None, None, _set_context_state)
      if isinstance(obj, frontend.BatchedFunction):
        state = dict(obj.__dict__, last_stats=None)
        return (_new_batched, (type(obj),), state)
      if isinstance(obj, inst.FrozenDict):   # immutable: rebuilt from items
        return (inst.FrozenDict, (dict(obj),))
      return super().reducer_override(obj)

  return Pickler


def _new_batched(cls):
  return cls.__new__(cls)


def _dumps(obj, context=None, cache=None):
  """`obj` pickled for a worker: cloudpickle, the modules of `context`'s
  functions by value where a worker cannot import them by name."""
  import cloudpickle  # pylint: disable=g-import-not-at-top
  by_value = []
  if context is not None:
    names = {getattr(bf.python_function, '__module__', None)
             for bf in context._functions.values()}  # pylint: disable=protected-access
    for name in sorted(n for n in names if n):
      if name != '__main__' and name in sys.modules and not _importable(name):
        by_value.append(sys.modules[name])
  with _pickle_lock:
    for module in by_value:
      cloudpickle.register_pickle_by_value(module)
    try:
      buffer = io.BytesIO()
      _shipping_pickler(context, cache or {})(
          buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
      return buffer.getvalue()
    finally:
      for module in by_value:
        cloudpickle.unregister_pickle_by_value(module)


# Worker side: payload digest -> (batched function, call kwargs).  A worker
# process keeps the few payloads it ran last.
_LOADED = {}
_LOADED_MAX = 8
_loaded_lock = threading.Lock()


def _load(payload):
  key = hashlib.sha1(payload).digest()
  with _loaded_lock:
    entry = _LOADED.get(key)
  if entry is not None:
    return entry, False
  fn, call_kwargs = pickle.loads(payload)
  with _loaded_lock:
    while len(_LOADED) >= _LOADED_MAX:
      _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = (fn, call_kwargs)
  return (fn, call_kwargs), True


def _worker_name():
  try:
    from distributed import get_worker  # pylint: disable=g-import-not-at-top
    return str(get_worker().address)
  except (ImportError, ValueError):
    return f'{socket.gethostname()}:{os.getpid()}'


def run_shard(payload, args):
  """Runs one shard in a worker: `payload` (the shipped batched function
  and call keywords) on `args` (the shard's arguments), both pickled bytes.

  Returns pickled bytes: ('ok', outputs, RunStats, info) or, for a mistake
  the call reports (`AutoBatchError`), ('error', class, message, loc, hint,
  info), which the caller raises naming global member indices.
  """
  (fn, call_kwargs), loaded = _load(payload)
  ctx = fn.context
  compiled_before = ctx._module is not None  # pylint: disable=protected-access
  start = time.perf_counter()
  shard_args = pickle.loads(args)
  info = dict(where=_worker_name(), loaded=loaded)
  try:
    out = fn(*shard_args, **call_kwargs)
  except errors.AutoBatchError as e:
    info['seconds'] = time.perf_counter() - start
    return _dumps(('error', type(e), e.message, e.loc, e.hint, info))
  info['seconds'] = time.perf_counter() - start
  info['compiled'] = (not compiled_before and
                      ctx._module is not None)  # pylint: disable=protected-access
  return _dumps(('ok', out, fn.last_stats, info))


# ---------------------------------------------------------------------------
# The sharded function.
# ---------------------------------------------------------------------------

def _leading(x):
  shape = getattr(x, 'shape', None)
  if shape is None or len(shape) == 0:
    return None
  return shape[0]


def _batch_size(fn, leaves):
  """The batch size of the call: the leading dimension of its arguments
  (those of size 1 may broadcast, as the call itself decides)."""
  sizes = {_leading(x) for x in leaves} - {None}
  if None in [_leading(x) for x in leaves] and not sizes:
    return None
  if len(sizes) > 1:
    sizes.discard(1)
  if len(sizes) > 1:
    raise errors.ArgumentError(
        f'arguments of {fn.name}() have different batch sizes '
        f'({sorted(sizes)})', loc=fn.context.function_loc(fn.name),
        hint='Every argument needs the same leading (batch) dimension.')
  return sizes.pop() if sizes else None


class ShardedFunction:
  """A batched function whose calls split the batch into shards.

  `shard` makes one.  Call it as the batched function; `last_stats` is then
  a `ShardStats` of that call.

  Args:
    fn: A batched function (`Context().batch()`).
    strategy: A `tf.distribute.Strategy`, or None (see `shard`).
    executor: An executor with `submit`, or None (see `shard`).
    split: 'interleaved' or 'contiguous' (see `split_indices`).
    shards: The number of shards, or None (see `shard`).
    cost: A function of the call's arguments returning a cost per member,
      or None.
    jit_compile: Strategy form only: None, False or True (see `shard`).
    **call_kwargs: Passed to each shard's call (see `shard`).

  Raises:
    ArgumentError: If the arguments do not make a valid sharded function
      (neither or both of `strategy` and `executor`, an unknown split or
      keyword, a non-NumPy backend or `jit_compile` with an executor).

  Attributes:
    fn: The batched function.
    strategy: The strategy given, or None.
    executor: The executor given, or None.
    split: The split given.
    shards: The number of shards given, or None.
    cost: The cost function given, or None.
    call_kwargs: The keyword arguments passed to each shard's call.
    last_stats: The `ShardStats` of the last call (None before any).
  """

  def __init__(self, fn, strategy=None, executor=None, split='interleaved',
               shards=None, cost=None, jit_compile=None, **call_kwargs):
    if not isinstance(fn, frontend.BatchedFunction):
      raise errors.ArgumentError(
          f'shard() expects a batched function (decorated with '
          f'Context().batch()), got {fn!r}')
    loc = fn.context.function_loc(fn.name)
    if (strategy is None) == (executor is None):
      raise errors.ArgumentError(
          f'shard({fn.name}) takes strategy= (a tf.distribute.Strategy) or '
          'executor= (an Executor, e.g. a dask.distributed Client), one of '
          'them', loc=loc)
    if split not in SPLITS:
      raise errors.ArgumentError(
          f'Unknown split {split!r}; choose one of {SPLITS}', loc=loc,
          hint='For a split by known costs pass cost=, a function of the '
          'call\'s arguments returning a cost per member.')
    if cost is not None and not callable(cost):
      raise errors.ArgumentError(
          'cost= must be a function of the call\'s arguments returning one '
          f'cost per member, got {type(cost).__name__}', loc=loc)
    if shards is not None and (not isinstance(shards, int) or
                               isinstance(shards, bool) or shards < 1):
      raise errors.ArgumentError(
          f'shards must be None or a positive int, got {shards!r}', loc=loc)
    unknown = set(call_kwargs) - set(_CALL_KWARGS)
    if unknown:
      raise errors.ArgumentError(
          f'shard({fn.name}) got unknown keyword(s) {sorted(unknown)}',
          loc=loc, hint='Each shard\'s call takes '
          f'{", ".join(_CALL_KWARGS)}; dry_run and block_code_cache do not '
          'apply.')
    self.fn = fn
    self.strategy = strategy
    self.executor = executor
    self.split = split
    self.shards = shards
    self.cost = cost
    self.call_kwargs = dict(call_kwargs)
    self.last_stats = None
    if executor is not None:
      if not callable(getattr(executor, 'submit', None)):
        raise errors.ArgumentError(
            f'executor= needs a submit() method (a concurrent.futures '
            f'Executor or a dask.distributed Client), got {executor!r}',
            loc=loc)
      backend = call_kwargs.get('backend')
      if backend is not None and not isinstance(
          backend, numpy_backend.NumpyBackend):
        raise errors.ArgumentError(
            f'shard({fn.name}, executor=...) runs its shards on NumPy, not '
            f'{backend!r}', loc=loc,
            hint='For TensorFlow devices pass strategy= instead.')
      if jit_compile is not None:
        raise errors.ArgumentError(
            'jit_compile applies to strategy=, not executor=', loc=loc)
      self._payloads = {}
    else:
      self._tf = _TensorFlowShards(self, jit_compile)
    self.__name__ = fn.name
    self.__doc__ = fn.__doc__

  def __repr__(self):
    how = (f'strategy {type(self.strategy).__name__}' if self.strategy
           is not None else f'executor {type(self.executor).__name__}')
    return f'<sharded batched function {self.fn.name} ({how})>'

  # -- arguments ---------------------------------------------------------------

  def _bind(self, args, kwargs):
    if kwargs:
      modes = set(kwargs) & set(_CALL_KWARGS + ('dry_run',
                                                'block_code_cache'))
      if modes:
        raise errors.ArgumentError(
            f'Pass {sorted(modes)} to shard({self.fn.name}, ...), not to '
            'the sharded call', loc=self.fn.context.function_loc(
                self.fn.name))
    # As an unsharded call binds them: defaults filled in, and what is
    # wrong said by the batched function.
    return self.fn._bind_arguments(args, kwargs)  # pylint: disable=protected-access

  def _num_shards(self, available):
    return self.shards if self.shards is not None else available

  def _parts(self, args, batch, num_shards):
    if self.cost is None:
      return split_indices(batch, num_shards, self.split), self.split
    cost = self.cost(*args)
    if hasattr(cost, 'numpy'):
      cost = cost.numpy()
    return split_indices(batch, num_shards, cost=cost), 'cost'

  def __call__(self, *args, **kwargs):
    """Runs the call shard by shard and puts the outputs back in order.

    Args:
      *args, **kwargs: The batched function's own arguments, as for a call
        of it; its call modes go to `shard`, not here.

    Returns:
      The batched results, in the batch's order.

    Raises:
      ArgumentError: If the arguments do not fit the function, or name a
        call mode.
      AutoBatchError: As a shard's call raises, naming global member
        indices.
    """
    args = self._bind(args, kwargs)
    if self.executor is not None:
      return self._call_executor(args)
    return self._tf.call(args)

  # -- executor ------------------------------------------------------------------

  def _executor_workers(self):
    ex = self.executor
    nthreads = getattr(ex, 'nthreads', None)
    if callable(nthreads):     # a dask.distributed Client
      total = sum(nthreads().values())
      if total:
        return total
    workers = getattr(ex, '_max_workers', None)
    if isinstance(workers, int) and workers > 0:
      return workers
    raise errors.ArgumentError(
        f'Cannot tell how many workers {ex!r} has',
        loc=self.fn.context.function_loc(self.fn.name),
        hint='Pass shards= to shard().')

  def _payload(self, args, backend):
    """The pickled (Context, call keywords) for these arguments' signature,
    compiled here once and cached."""
    fn, ctx = self.fn, self.fn.context
    kwargs = dict(self.call_kwargs, backend=backend)
    schedule = kwargs.get('schedule', virtual_machine.DEFAULT_SCHEDULE)
    # The call's own checks and compile (as an unsharded call would do).
    ctx.lowered_for_args(fn.name, args, backend, schedule)
    sig = [inst.pattern_map(
        lambda v: inst.TensorType(np.asarray(v).dtype,
                                  tuple(np.shape(v))[1:]), a, leaf_type=list)
           for a in args]
    key = repr((sig, sorted((k, repr(v)) for k, v in kwargs.items())))
    if key in self._payloads:
      return self._payloads[key]
    typed = ctx.program_compiled(fn.name, sig, backend)
    stackless = kwargs.get('stackless')
    depth = kwargs.get('max_stack_depth', frontend.DEFAULT_MAX_STACK_DEPTH)
    if stackless is None and isinstance(depth, int):
      ctx.chooses_stackless(fn.name, sig, backend, depth)
    if stackless is not False:
      ctx.program_stackless(fn.name, sig, backend)
    cache = ctx._cache  # pylint: disable=protected-access
    sig_repr = [k[2] for k, v in cache.items()
                if isinstance(k, tuple) and k[:2] == ('typed', fn.name)
                and v is typed]
    shipped = {k: v for k, v in cache.items()
               if isinstance(k, tuple) and len(k) > 2 and
               k[0] in _SHIPPED_KINDS and k[1] == fn.name and
               sig_repr and k[2] == sig_repr[0]}
    try:
      payload = _dumps((fn, kwargs), ctx, shipped)
    except errors.AutoBatchError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.ArgumentError(
          f'{fn.name} (its Context and compiled program) cannot be pickled '
          f'for the executor\'s workers: {type(e).__name__}: {e}',
          loc=ctx.function_loc(fn.name),
          hint='Values that the batched functions and their primitives '
          'refer to must pickle (cloudpickle): module-level NumPy arrays '
          'and functions do; open files, locks and TensorFlow objects do '
          'not.') from e
    self._payloads[key] = payload
    return payload

  def _call_executor(self, args):
    start = time.perf_counter()
    fn = self.fn
    backend = self.call_kwargs.get('backend') or numpy_backend.NumpyBackend()
    args = [inst.pattern_map(np.asarray, a, leaf_type=list) for a in args]
    leaves = [x for a in args for x in inst.pattern_flatten(a)]
    batch = _batch_size(fn, leaves)
    payload = self._payload(args, backend)
    if batch is None:
      raise errors.ArgumentError(
          f'{fn.name}() has no arguments to take the batch size from',
          loc=fn.context.function_loc(fn.name))
    parts, split = self._parts(args, batch, self._num_shards(
        self._executor_workers() if self.shards is None else self.shards))
    dask = type(self.executor).__module__.startswith('distributed')
    # Dask would otherwise take shards with equal inputs for one task and
    # keep results of an earlier call with the same inputs.
    extra = {'pure': False} if dask else {}
    futures = []
    for part in parts:
      take = lambda x, part=part: (
          np.take(x, part, axis=0) if _leading(x) == batch else x)
      shard_args = [inst.pattern_map(take, a) for a in args]
      futures.append(self.executor.submit(
          run_shard, payload, _dumps(shard_args, fn.context), **extra))
    results = []
    try:
      for j, future in enumerate(futures):
        result = pickle.loads(future.result())
        if result[0] == 'error':
          _, cls, message, loc, hint, info = result
          raise _global_error(cls(message, loc=loc, hint=hint), parts[j], j,
                              len(parts), info['where'])
        results.append(result)
    except BaseException:
      for future in futures:
        future.cancel()
      raise
    outs = [r[1] for r in results]
    template = outs[0]
    columns = zip(*[inst.pattern_flatten(o) for o in outs])
    merged = []
    for column in columns:
      first = np.asarray(column[0])
      full = np.empty((batch,) + first.shape[1:], first.dtype)
      for part, value in zip(parts, column):
        full[part] = value
      merged.append(full)
    out = inst.pattern_unflatten(template, merged)
    self.last_stats = ShardStats(
        batch_size=batch, split=split,
        seconds=time.perf_counter() - start,
        shards=[Shard(members=part, where=r[3]['where'], stats=r[2],
                      seconds=r[3]['seconds'], loaded=r[3]['loaded'],
                      compiled=r[3]['compiled'])
                for part, r in zip(parts, results)])
    return out


# ---------------------------------------------------------------------------
# TensorFlow: shards placed on a strategy's devices.
# ---------------------------------------------------------------------------

class _TensorFlowShards:
  """The strategy form's calls (TensorFlow imported only here)."""

  def __init__(self, sharded, jit_compile):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from autobatch_vm import tf_backend  # pylint: disable=g-import-not-at-top
    self.tf = tf
    self.sharded = sharded
    fn = sharded.fn
    loc = fn.context.function_loc(fn.name)
    strategy = sharded.strategy
    if not isinstance(strategy, tf.distribute.Strategy):
      raise errors.ArgumentError(
          f'strategy= must be a tf.distribute.Strategy, got {strategy!r}',
          loc=loc)
    self.devices = list(strategy.extended.worker_devices)
    if strategy.num_replicas_in_sync != len(self.devices):
      raise errors.ArgumentError(
          f'shard({fn.name}) places shards on this host\'s replicas, but '
          f'{type(strategy).__name__} has {strategy.num_replicas_in_sync} '
          f'replicas of which {len(self.devices)} are here',
          loc=loc, hint='Across hosts, run a sharded call on each host '
          'with its own part of the batch, or use executor= with a Dask '
          'cluster (NumPy).')
    backend = sharded.call_kwargs.get('backend')
    if backend is not None and not isinstance(backend,
                                              tf_backend.TensorFlowBackend):
      raise errors.ArgumentError(
          f'shard({fn.name}, strategy=...) runs its shards on TensorFlow, '
          f'not {backend!r}', loc=loc,
          hint='For NumPy pass executor= instead.')
    if jit_compile not in (None, False, True):
      raise errors.ArgumentError(
          f'jit_compile must be None, False or True, got {jit_compile!r}',
          loc=loc)
    self.jit_compile = jit_compile
    self._ids = itertools.count()
    self._batch = None
    self._staged = None
    if jit_compile is not None:
      self._make_staged()

  # -- splitting -----------------------------------------------------------------

  def _convert(self, args):
    tf = self.tf
    def convert(x):
      return x if isinstance(x, (tf.Tensor, tf.Variable)) else \
          tf.convert_to_tensor(x)
    return [inst.pattern_map(convert, a, leaf_type=list) for a in args]

  def _split(self, args):
    fn = self.sharded.fn
    leaves = [x for a in args for x in inst.pattern_flatten(a)]
    if any(_leading(x) is None and len(x.shape) for x in leaves):
      raise errors.ArgumentError(
          f'shard({fn.name}) needs a static batch size: an argument\'s '
          'leading dimension is unknown in this trace',
          loc=fn.context.function_loc(fn.name),
          hint='Give tf.function an input_signature with the batch size, '
          'or let it trace each shape.')
    batch = _batch_size(fn, leaves)
    if batch is None:
      raise errors.ArgumentError(
          f'{fn.name}() has no arguments to take the batch size from',
          loc=fn.context.function_loc(fn.name))
    cost_args = args
    if self.sharded.cost is not None:
      static = [inst.pattern_map(self.tf.get_static_value, a) for a in args]
      if any(v is None for a in static for v in inst.pattern_flatten(a)):
        raise errors.ArgumentError(
            f'shard({fn.name}, cost=...) computes the split from the '
            'arguments\' values, which a tf.function being traced does '
            'not know', loc=fn.context.function_loc(fn.name),
            hint='Call the sharded function eagerly (jit_compile=True or '
            'False stages it), or use split=\'interleaved\'.')
      cost_args = static
    parts, split = self.sharded._parts(  # pylint: disable=protected-access
        cost_args, batch, self.sharded._num_shards(len(self.devices)))  # pylint: disable=protected-access
    return batch, parts, split

  def _take(self, args, batch, part):
    """The shard's arguments: rows `part` (a NumPy array, or a tensor in
    a staged call) of the batched leaves; the others whole."""
    tf = self.tf
    contiguous = (isinstance(part, np.ndarray) and part.size and
                  part[-1] - part[0] + 1 == part.size)
    def take(x):
      if _leading(x) != batch:
        return x
      if contiguous:
        return x[int(part[0]):int(part[-1]) + 1]
      return tf.gather(x, part)
    return [inst.pattern_map(take, a) for a in args]

  def _merge(self, outs, inverse):
    """The shards' outputs concatenated, in the batch's order (`inverse`:
    each member's position in the concatenation; None: in order)."""
    tf = self.tf
    def merge(*column):
      full = column[0] if len(column) == 1 else tf.concat(column, axis=0)
      return full if inverse is None else tf.gather(full, inverse)
    leaves = [inst.pattern_flatten(o) for o in outs]
    return inst.pattern_unflatten(outs[0], [merge(*c) for c in zip(*leaves)])

  @staticmethod
  def _inverse_or_none(parts, batch):
    inverse = _inverse(parts, batch)
    return None if np.array_equal(inverse, np.arange(batch)) else inverse

  def _where(self, j):
    return self.devices[j % len(self.devices)]

  # -- calls ---------------------------------------------------------------------

  def call(self, args):
    tf = self.tf
    args = self._convert(args)
    if self._staged is not None:
      return self._call_staged(args)
    batch, parts, split = self._split(args)
    fn, kwargs = self.sharded.fn, self.sharded.call_kwargs
    outs, shards = [], []
    for j, part in enumerate(parts):
      with tf.device(self._where(j)):
        try:
          outs.append(fn(*self._take(args, batch, part), **kwargs))
        except errors.AutoBatchError as e:
          if not tf.executing_eagerly():
            raise
          raise _global_error(e, part, j, len(parts), self._where(j)) from e
      shards.append(Shard(members=part, where=self._where(j),
                          stats=fn.last_stats))
    out = self._merge(outs, self._inverse_or_none(parts, batch))
    self.sharded.last_stats = ShardStats(batch_size=batch, shards=shards,
                                         split=split)
    return out

  def _make_staged(self):
    tf = self.tf
    from autobatch_vm import tf_backend  # pylint: disable=g-import-not-at-top
    from autobatch_vm import xla  # pylint: disable=g-import-not-at-top
    fn, kwargs = self.sharded.fn, self.sharded.call_kwargs
    templates = {}   # shard trace id -> its RunStats (tensors)
    self._templates = templates

    def one_shard(*shard_args):
      out = fn(*shard_args, **kwargs)
      stats = fn.last_stats
      trace_id = next(self._ids)
      templates[trace_id] = stats
      return out, stats.counts(), tf.constant(trace_id, tf.int32)
    one_shard.__name__ = fn.name
    # One function per device, traced under that device: variables of the
    # strategy (created in `strategy.scope()`) are then read from the
    # device's own copy, and each device's loop is its own function.
    if self.jit_compile:
      compiled = [xla.compile_nested_output(one_shard) for _ in self.devices]
      run_on = [c.compiled for c in compiled]
      self._finish = compiled[0].finish
    else:
      run_on = [tf.function(tf_backend.traceable(one_shard))
                for _ in self.devices]
      self._finish = None

    def staged(args, parts, inverse):
      batch = self._batch
      outs, extras = [], []
      for j, part in enumerate(parts):
        with tf.device(self._where(j)):
          result = run_on[j % len(run_on)](*self._take(args, batch, part))
        if self.jit_compile:
          (out, counts, trace_id), checks = result
        else:
          (out, counts, trace_id), checks = result, None
        outs.append(out)
        extras.append((counts, trace_id, checks))
      return self._merge(outs, inverse), extras
    staged.__name__ = f'sharded_{fn.name}'
    self._staged = tf.function(tf_backend.traceable(staged))

  def _call_staged(self, args):
    tf = self.tf
    fn = self.sharded.fn
    if not tf.executing_eagerly():
      raise errors.ArgumentError(
          f'A sharded function staged with jit_compile={self.jit_compile} '
          f'({fn.name}) was called inside a tf.function being traced',
          loc=fn.context.function_loc(fn.name),
          hint='Shard with jit_compile=None there (your tf.function stages '
          'the shards), or call this one eagerly.')
    # The split is made here, eagerly (a cost split reads the values);
    # the staged function takes it as tensors, whose shapes depend only on
    # the batch size and the number of shards.
    batch, parts, split = self._split(args)
    inverse = self._inverse_or_none(parts, batch)
    self._batch = batch   # read while tracing (a new batch size retraces)
    out, extras = self._staged(
        args, [tf.constant(p) for p in parts],
        None if inverse is None else tf.constant(inverse))
    shards = []
    for j, (part, (counts, trace_id, checks)) in enumerate(zip(parts,
                                                               extras)):
      if checks is not None:
        try:
          self._finish(((), checks))
        except errors.AutoBatchError as e:
          raise _global_error(e, part, j, len(parts), self._where(j)) from e
      numbers = tf.nest.map_structure(lambda t: t.numpy(), counts)
      stats = self._templates[int(trace_id)].with_counts(numbers)
      shards.append(Shard(members=part, where=self._where(j), stats=stats))
    self.sharded.last_stats = ShardStats(batch_size=batch, shards=shards,
                                         split=split)
    return out


def shard(fn, strategy=None, executor=None, split='interleaved', shards=None,
          cost=None, jit_compile=None, **call_kwargs):
  """Splits each call of the batched function `fn` into shards that run apart.

  The shards run on the replicas of a `tf.distribute` strategy, or as tasks
  of an executor.

  Args:
    fn: A batched function (`Context().batch()`).
    strategy: A `tf.distribute.Strategy` (`MirroredStrategy` over GPUs or
      logical CPU devices, `OneDeviceStrategy`, a one-host
      `MultiWorkerMirroredStrategy`): each shard runs on TensorFlow, placed
      on a replica's device, shard j on device j mod replicas.
    executor: An object with `submit(f, *args)` returning futures with
      `result()`: a `dask.distributed.Client`, a
      `concurrent.futures.ProcessPoolExecutor`.  Each shard runs on NumPy
      in a worker; the program is compiled here once per signature and
      shipped.
    split: 'interleaved' (member i to shard i mod shards; the default) or
      'contiguous' (consecutive chunks).
    shards: The number of shards; default the strategy's replicas, or the
      executor's workers (threads of a Dask cluster).  More shards than
      workers lets an executor balance as workers free up.
    cost: A function of the call's arguments returning a cost per member
      (NumPy array): members are dealt out by cost so that shards carry
      close sums of it (`split_indices`).
    jit_compile: Strategy form only.  None: each shard runs in the
      caller's mode (eagerly, or in the caller's `tf.function`).  False:
      the sharded call is a `tf.function` of its own, in which the shards'
      loops run in parallel.  True: as False, with each shard compiled by
      XLA (`xla.compile_nested_output`: a stack overflow raises after the
      call, naming the members).
    **call_kwargs: Passed to each shard's call (`max_stack_depth`,
      `schedule`, `stackless`, `profile`, `max_steps`, `backend`).

  Returns:
    A `ShardedFunction`: call it as `fn` (without keyword modes, which go
    here); its `last_stats` is a `ShardStats`.

  Raises:
    ArgumentError: If the arguments do not make a valid sharded function
      (see `ShardedFunction`).
  """
  return ShardedFunction(fn, strategy=strategy, executor=executor,
                         split=split, shards=shards, cost=cost,
                         jit_compile=jit_compile, **call_kwargs)
