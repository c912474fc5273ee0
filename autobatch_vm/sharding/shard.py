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

This module holds `ShardedFunction` and `shard`; `split` the split,
the statistics and the errors' member indices, `executor` the
executor form (shipping and workers), `tf_shards` the strategy form.
"""

from autobatch_vm import errors
from autobatch_vm import frontend
from autobatch_vm.sharding import executor as shard_executor
from autobatch_vm.sharding import tf_shards as shard_tf
# run_shard is what the executor's tasks call (importable here as before).
from autobatch_vm.sharding.executor import run_shard
from autobatch_vm.sharding.split import Shard
from autobatch_vm.sharding.split import ShardStats
from autobatch_vm.sharding.split import split_indices
from autobatch_vm.sharding.split import SPLITS

__all__ = ['Shard', 'ShardStats', 'ShardedFunction', 'shard',
           'split_indices', 'SPLITS']

# Keyword arguments of a batched call that a shard passes on.
_CALL_KWARGS = ('stackless', 'max_stack_depth', 'schedule', 'profile',
                'max_steps', 'backend', 'on_error')


# ---------------------------------------------------------------------------
# The sharded function.
# ---------------------------------------------------------------------------

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
      self._executor = shard_executor.ExecutorShards(self, jit_compile)
      # The executor form's pickled programs, by signature.
      self._payloads = self._executor.payloads
    else:
      self._tf = shard_tf.TensorFlowShards(self, jit_compile)
    self.__name__ = fn.name
    self.__doc__ = fn.__doc__

  def __repr__(self):
    how = (f'strategy {type(self.strategy).__name__}' if self.strategy
           is not None else f'executor {type(self.executor).__name__}')
    return f'<sharded batched function {self.fn.name} ({how})>'

  def __reduce__(self):
    how = ('strategy' if self.strategy is not None else 'executor')
    raise errors.ArgumentError(
        f'A sharded function ({self.fn.name}) does not pickle: its {how} '
        'belongs to this process', loc=self.fn.context.function_loc(
            self.fn.name),
        hint=f'Pickle the batched function ({self.fn.name}, or '
        '`sharded.fn`) and call ab.shard where it is unpickled.')

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
    return self.fn.bind_arguments(args, kwargs, batched=True)

  def split_batch(self, args, batch, available):
    """Splits a call's batch into the members of each shard.

    The executor and strategy forms call it with their number of workers
    or replicas; `shards=` given to `shard` takes precedence.

    Args:
      args: The call's arguments, bound to the function's parameters
        (NumPy values where `cost` reads them).
      batch: The batch size.
      available: The number of workers or replicas, the number of shards
        unless `shards` was given (then it may be None).

    Returns:
      (parts, split): one sorted int64 array of member indices per shard
      (`split_indices`), and the split made: 'interleaved', 'contiguous'
      or 'cost'.
    """
    num_shards = self.shards if self.shards is not None else available
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
      return self._executor.call(args)
    return self._tf.call(args)


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
      `schedule`, `stackless`, `profile`, `max_steps`, `backend`,
      `on_error`: with `'status'` the sharded call returns `(outputs,
      ok)`, `ok` in the batch's order as the outputs).

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
