"""The strategy form of `shard`: shards placed on a strategy's devices.

Each shard runs on TensorFlow on a replica's device (shard j on device j
mod replicas), in the caller's mode, or staged in a `tf.function` of its
own in which the shards' loops run in parallel (`jit_compile=False`), each
compiled by XLA with `jit_compile=True`.  TensorFlow is imported only when
a `TensorFlowShards` is made.
"""

import itertools

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.sharding.split import batch_size_of
from autobatch_vm.sharding.split import global_error
from autobatch_vm.sharding.split import leading
from autobatch_vm.sharding.split import Shard
from autobatch_vm.sharding.split import ShardStats

__all__ = ['TensorFlowShards']


def _inverse(parts, batch_size):
  """For the concatenation of `parts`, the position of each member."""
  order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
  inverse = np.empty(batch_size, np.int64)
  inverse[order] = np.arange(batch_size)
  return inverse


class TensorFlowShards:
  """A `ShardedFunction`'s calls on a `tf.distribute` strategy's devices.

  Args:
    sharded: The `ShardedFunction`, whose `fn`, `strategy`, `cost` and
      `call_kwargs` it reads and whose `last_stats` it sets.
    jit_compile: None (each shard in the caller's mode), False (the call
      staged in a `tf.function` of its own) or True (as False, each shard
      compiled by XLA).

  Raises:
    ArgumentError: If the strategy is not a `tf.distribute.Strategy` with
      all its replicas on this host, the backend is not TensorFlow's, or
      `jit_compile` is not None, False or True.
  """

  def __init__(self, sharded, jit_compile):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from autobatch_vm.backends.tf import backend as tf_backend  # pylint: disable=g-import-not-at-top
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
    if any(leading(x) is None and len(x.shape) for x in leaves):
      raise errors.ArgumentError(
          f'shard({fn.name}) needs a static batch size: an argument\'s '
          'leading dimension is unknown in this trace',
          loc=fn.context.function_loc(fn.name),
          hint='Give tf.function an input_signature with the batch size, '
          'or let it trace each shape.')
    batch = batch_size_of(fn, leaves)
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
    parts, split = self.sharded.split_batch(cost_args, batch,
                                            len(self.devices))
    return batch, parts, split

  def _take(self, args, batch, part):
    """The shard's arguments: rows `part` (a NumPy array, or a tensor in
    a staged call) of the batched leaves; the others whole."""
    tf = self.tf
    contiguous = (isinstance(part, np.ndarray) and part.size and
                  part[-1] - part[0] + 1 == part.size)
    def take(x):
      if leading(x) != batch:
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
    """Runs a call's shards on the devices; puts the outputs in order.

    Args:
      args: The call's arguments, bound to the function's parameters.

    Returns:
      The batched results, in the batch's order.

    Raises:
      ArgumentError: If the batch size is unknown, or a cost split is
        asked for inside a `tf.function` being traced.
      AutoBatchError: As a shard's call raises, naming global member
        indices where the call runs eagerly.
    """
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
          raise global_error(e, part, j, len(parts), self._where(j)) from e
      shards.append(Shard(members=part, where=self._where(j),
                          stats=fn.last_stats))
    out = self._merge(outs, self._inverse_or_none(parts, batch))
    self.sharded.last_stats = ShardStats(batch_size=batch, shards=shards,
                                         split=split)
    return out

  def _make_staged(self):
    tf = self.tf
    from autobatch_vm.backends.tf import loop as tf_loop  # pylint: disable=g-import-not-at-top
    from autobatch_vm.backends.tf import xla  # pylint: disable=g-import-not-at-top
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
      run_on = [tf.function(tf_loop.traceable(one_shard))
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
    self._staged = tf.function(tf_loop.traceable(staged))

  def _refuse_outer_gradient(self, args):
    """Raises where a gradient tape records this XLA-compiled call.

    TensorFlow differentiates a compiled function from outside by having
    it return its loops' saved values, which XLA cannot hand out ("Support
    for TensorList crossing the XLA/TF boundary is not implemented"): the
    tape has to be inside the compiled function, or the shards not
    compiled.
    """
    from tensorflow.python.eager import record  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    tensors = [x for a in args for x in inst.pattern_flatten(a)
               if self.tf.is_tensor(x)]
    if not (tensors and record.should_record_backprop(tensors)):
      return
    from autobatch_vm.backends.tf import xla  # pylint: disable=g-import-not-at-top
    fn = self.sharded.fn
    raise xla.outer_gradient_error(
        f'shard({fn.name}, jit_compile=True) is called while a gradient '
        'tape records it', fn.context.function_loc(fn.name),
        hint='Shard with jit_compile=None or False to differentiate it '
        'with a tape outside, or take the gradient inside one '
        'tf.function(jit_compile=True) that calls a sharded function made '
        'with jit_compile=None (and max_steps=).')

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
    if self.jit_compile:
      self._refuse_outer_gradient(args)
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
          raise global_error(e, part, j, len(parts), self._where(j)) from e
      numbers = tf.nest.map_structure(lambda t: t.numpy(), counts)
      stats = self._templates[int(trace_id)].with_counts(numbers)
      shards.append(Shard(members=part, where=self._where(j), stats=stats))
    self.sharded.last_stats = ShardStats(batch_size=batch, shards=shards,
                                         split=split)
    return out
