"""The executor form of `shard`: shards run as tasks of worker processes.

The program is compiled on the caller's side once per signature and
shipped: the Context, as its `export_state` (its functions, and the
compiled programs of the call's signature), is pickled with cloudpickle
by `shipping`, functions by value where their module cannot be imported
by name, and rebuilt in the worker with `install_state`.  A worker
process unpickles one payload once and keeps it for later shards and
calls (`run_shard`).  A shard's error is raised naming the members of
the whole batch, from the worker's exception; a shard that does not come
back (its worker died) raises `WorkerError`.
`ExecutorShards` is a `ShardedFunction`'s executor form: it submits one
task per shard and puts the outputs back in the batch's order.
"""

import os
import pickle
import socket
import time
import traceback

import numpy as np

from autobatch_vm import errors
from autobatch_vm import frontend
from autobatch_vm import shipping
from autobatch_vm.backends import numpy as numpy_backend
from autobatch_vm.backends import scheduler
from autobatch_vm.ir import instructions as inst
from autobatch_vm.sharding.split import batch_size_of
from autobatch_vm.sharding.split import global_error
from autobatch_vm.sharding.split import leading
from autobatch_vm.sharding.split import Shard
from autobatch_vm.sharding.split import ShardStats

__all__ = ['ExecutorShards', 'run_shard']


# Shipping a Context to worker processes: `shipping.dumps` pickles it (as
# its `export_state`), `shipping.load` unpickles a payload once per worker
# process while it keeps it.
_dumps = shipping.dumps


def _worker_name():
  try:
    from distributed import get_worker  # pylint: disable=g-import-not-at-top
    return str(get_worker().address)
  except (ImportError, ValueError):
    return f'{socket.gethostname()}:{os.getpid()}'


def _portable(exc):
  """`exc`, or where it does not survive pickling, a `RuntimeError` that
  names it (None stays None)."""
  if exc is None:
    return None
  try:
    pickle.loads(_dumps(exc))
    return exc
  except Exception:  # pylint: disable=broad-except
    return RuntimeError(f'{type(exc).__name__}: {exc}')


def _worker_exception(original, where):
  """The worker's exception, as `run_shard` sent it: its cause chained
  again (pickling drops it) and the worker's traceback as a note."""
  exc, cause, trace = original
  exc.__cause__ = cause
  if hasattr(exc, 'add_note'):
    exc.add_note(f'Raised on worker {where}:\n{trace}')
  return exc


def _came_back(future):
  """Whether a shard's future holds its result now."""
  try:
    return future.done() and future.exception() is None
  except Exception:  # pylint: disable=broad-except
    return False


def _lost_shard(e, fn, parts, j, futures):
  """The `WorkerError` for shard j, whose future raised `e` (the worker
  died running it, or the task failed outside the batched call)."""
  part = parts[j]
  shown = errors.member_indices(part)
  more = f' and {part.size - len(shown)} more' if part.size > len(shown) else ''
  waiting = [k for k, f in enumerate(futures)
             if k != j and not _came_back(f)]
  others = (f'; shards {waiting} had not come back either' if waiting
            else '')
  err = errors.WorkerError(
      f'Shard {j} of {len(parts)} of {fn.name} (members {shown}{more}) did '
      f'not come back from the executor: {type(e).__name__}: {e}{others}',
      loc=fn.context.function_loc(fn.name),
      hint='A worker died running it (a primitive that crashes the process: '
      'a segmentation fault, os._exit, running out of memory), or the task '
      'failed outside the batched call.  Call the function unsharded on '
      'these members, or with dry_run=True, to find the member and the '
      'primitive.')
  err.members = [int(i) for i in part]
  err.shard = j
  return err


def run_shard(payload, args):
  """Runs one shard in a worker.

  Args:
    payload: The shipped batched function and call keywords, pickled.
    args: The shard's arguments, pickled.

  Returns:
    Pickled bytes: ('ok', outputs, RunStats, info) or, for a mistake the
    call reports (`AutoBatchError`), ('error', class, message, loc, hint,
    info, (the exception, its cause, its traceback as text)), which the
    caller raises naming global member indices, from the exception.
  """
  (fn, call_kwargs), loaded = shipping.load(payload)
  ctx = fn.context
  compiled_before = ctx.compiled
  start = time.perf_counter()
  shard_args = pickle.loads(args)
  info = dict(where=_worker_name(), loaded=loaded)
  try:
    out = fn(*shard_args, **call_kwargs)
  except errors.AutoBatchError as e:
    info['seconds'] = time.perf_counter() - start
    trace = ''.join(traceback.format_exception(type(e), e, e.__traceback__))
    original = (_portable(e), _portable(e.__cause__), trace)
    return _dumps(('error', type(e), e.message, e.loc, e.hint, info,
                   original))
  info['seconds'] = time.perf_counter() - start
  info['compiled'] = not compiled_before and ctx.compiled
  return _dumps(('ok', out, fn.last_stats, info))


# ---------------------------------------------------------------------------
# The executor form of a sharded function.
# ---------------------------------------------------------------------------

class ExecutorShards:
  """A `ShardedFunction`'s calls through an executor (NumPy in workers).

  Args:
    sharded: The `ShardedFunction`, whose `fn`, `executor`, `shards` and
      `call_kwargs` it reads and whose `last_stats` it sets.
    jit_compile: What `shard` was given (None here: it applies to the
      strategy form only).

  Raises:
    ArgumentError: If the executor has no `submit`, the backend is not
      NumPy's, or `jit_compile` is given.

  Attributes:
    payloads: The pickled programs shipped so far, by signature.
  """

  def __init__(self, sharded, jit_compile):
    self.sharded = sharded
    fn, executor = sharded.fn, sharded.executor
    loc = fn.context.function_loc(fn.name)
    if not callable(getattr(executor, 'submit', None)):
      raise errors.ArgumentError(
          f'executor= needs a submit() method (a concurrent.futures '
          f'Executor or a dask.distributed Client), got {executor!r}',
          loc=loc)
    backend = sharded.call_kwargs.get('backend')
    if backend is not None and not isinstance(
        backend, numpy_backend.NumpyBackend):
      raise errors.ArgumentError(
          f'shard({fn.name}, executor=...) runs its shards on NumPy, not '
          f'{backend!r}', loc=loc,
          hint='For TensorFlow devices pass strategy= instead.')
    if jit_compile is not None:
      raise errors.ArgumentError(
          'jit_compile applies to strategy=, not executor=', loc=loc)
    self.payloads = {}
    self._states = {}   # the shipped ContextStates, by signature

  def _workers(self):
    ex = self.sharded.executor
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
        loc=self.sharded.fn.context.function_loc(self.sharded.fn.name),
        hint='Pass shards= to shard().')

  def _payload(self, args, backend):
    """The pickled (Context, call keywords) for these arguments' signature,
    compiled here once and cached, and the Context's shipped state."""
    fn, ctx = self.sharded.fn, self.sharded.fn.context
    kwargs = dict(self.sharded.call_kwargs, backend=backend)
    schedule = kwargs.get('schedule', scheduler.DEFAULT_SCHEDULE)
    # The call's own checks and compile (as an unsharded call would do).
    ctx.lowered_for_args(fn.name, args, backend, schedule)
    sig = [inst.pattern_map(
        lambda v: inst.TensorType(np.asarray(v).dtype,
                                  tuple(np.shape(v))[1:]), a, leaf_type=list)
           for a in args]
    key = repr((sig, sorted((k, repr(v)) for k, v in kwargs.items())))
    if key in self.payloads:
      return self.payloads[key], self._states[key]
    ctx.program_compiled(fn.name, sig, backend)
    stackless = kwargs.get('stackless')
    depth = kwargs.get('max_stack_depth', frontend.DEFAULT_MAX_STACK_DEPTH)
    if stackless is None and isinstance(depth, int):
      ctx.chooses_stackless(fn.name, sig, backend, depth)
    if stackless is not False:
      ctx.program_stackless(fn.name, sig, backend)
    # The typed, stackless and lowered programs of this signature (and the
    # stackless choice), on every backend compiled for.
    state = ctx.export_state(fn.name, sig)
    try:
      payload = _dumps((fn, kwargs), ctx, state)
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
    self.payloads[key] = payload
    self._states[key] = state
    return payload, state

  def call(self, args):
    """Runs a call's shards as tasks and puts the outputs back in order.

    Args:
      args: The call's arguments, bound to the function's parameters.

    Returns:
      The batched results, in the batch's order.

    Raises:
      ArgumentError: If no argument gives the batch size, or the program
        cannot be pickled.
      AutoBatchError: As a shard's call raises, naming global member
        indices, from the worker's exception.
      WorkerError: If a shard does not come back (its worker died),
        naming its members, from the executor's exception.
    """
    start = time.perf_counter()
    sharded = self.sharded
    fn = sharded.fn
    backend = (sharded.call_kwargs.get('backend') or
               numpy_backend.NumpyBackend())
    args = [inst.pattern_map(np.asarray, a, leaf_type=list) for a in args]
    leaves = [x for a in args for x in inst.pattern_flatten(a)]
    batch = batch_size_of(fn, leaves)
    payload, state = self._payload(args, backend)
    if batch is None:
      raise errors.ArgumentError(
          f'{fn.name}() has no arguments to take the batch size from',
          loc=fn.context.function_loc(fn.name))
    parts, split = sharded.split_batch(
        args, batch, self._workers() if sharded.shards is None else None)
    dask = type(sharded.executor).__module__.startswith('distributed')
    # Dask would otherwise take shards with equal inputs for one task and
    # keep results of an earlier call with the same inputs.
    extra = {'pure': False} if dask else {}
    futures = []
    for part in parts:
      take = lambda x, part=part: (
          np.take(x, part, axis=0) if leading(x) == batch else x)
      shard_args = [inst.pattern_map(take, a) for a in args]
      futures.append(sharded.executor.submit(
          run_shard, payload, _dumps(shard_args, fn.context, state),
          **extra))
    results = []
    try:
      for j, future in enumerate(futures):
        try:
          result = pickle.loads(future.result())
        except errors.InternalError:
          raise
        except Exception as e:  # pylint: disable=broad-except
          # Dask's KilledWorker, a BrokenProcessPool, a task's error.
          raise _lost_shard(e, fn, parts, j, futures) from e
        if result[0] == 'error':
          _, cls, message, loc, hint, info, original = result
          original = _worker_exception(original, info['where'])
          raise global_error(cls(message, loc=loc, hint=hint), parts[j], j,
                             len(parts), info['where']) from original
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
    sharded.last_stats = ShardStats(
        batch_size=batch, split=split,
        seconds=time.perf_counter() - start,
        shards=[Shard(members=part, where=r[3]['where'], stats=r[2],
                      seconds=r[3]['seconds'], loaded=r[3]['loaded'],
                      compiled=r[3]['compiled'])
                for part, r in zip(parts, results)])
    return out
