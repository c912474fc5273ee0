"""`stage`: a batched function under `tf.function` or XLA, with statistics.

Inside a `tf.function` a batched function's `last_stats` are tensors of the
graph being traced (`RunStats.symbolic`): once the function returns they
cannot be read.  The way to read them is to return `last_stats.counts()`
from the staged function and to call `with_counts` on its value after the
call (guide, section 9).  `stage` does that for the common case, one
batched function staged as a whole:

    encode_xla = ab.stage(encode, jit_compile=True, max_stack_depth=20)
    out = encode_xla(roots)                  # tensors, as tf.function's
    print(encode_xla.last_stats.table())     # numbers, for this call

Each trace keeps its own statistics (the program, and the batch size, are
those of the call's signature), and every call returns an id of the trace
it ran, so `last_stats` describes the call even when calls alternate
between shapes that `tf.function` traced separately.  With
`jit_compile=True` the function is compiled by
`xla.compile_nested_output`, so a stack overflow, which XLA cannot raise,
is raised after the call as `StackOverflowError`.
"""

import dataclasses
import itertools
import statistics
import time

import numpy as np
import tensorflow as tf

from autobatch_vm import errors
from autobatch_vm import frontend
from autobatch_vm.backends import numpy as numpy_backend
from autobatch_vm.backends.tf import loop as tf_loop
from autobatch_vm.backends.tf import xla
from autobatch_vm.vm import machine

__all__ = ['StagedFunction', 'stage', 'EXACT_SIZES']

# `batch_buckets='auto'` (the default): under XLA the first EXACT_SIZES
# batch sizes of a member signature are compiled each for its size, later
# ones padded to a power of two (docs/performance.md, "Batch sizes and
# caches").
EXACT_SIZES = 4


class StagedFunction:
  """A batched function staged with `tf.function` (`stage` makes one).

  Call it like the batched function, without the keyword arguments given to
  `stage`; `last_stats` is then the `RunStats` of that call, with numbers.

  Args:
    fn: The `BatchedFunction` to stage.
    jit_compile: Whether to compile with XLA.
    batch_buckets: Under XLA, the batch sizes compiled (see `stage`).
    **call_kwargs: Keyword arguments passed to every call (see `stage`).

  Raises:
    ArgumentError: If `fn` is not a batched function, `call_kwargs` ask
      for a dry run or a NumPy backend, or `batch_buckets` is not one of
      its choices.

  Attributes:
    fn: The staged `BatchedFunction`.
    jit_compile: Whether it runs under XLA.
    call_kwargs: The keyword arguments passed to every call.
    fast_calls: How many calls took a traced concrete function directly.
  """

  def __init__(self, fn, jit_compile=False, batch_buckets='auto',
               **call_kwargs):
    if not isinstance(fn, frontend.BatchedFunction):
      raise errors.ArgumentError(
          f'stage() expects a batched function (decorated with '
          f'Context().batch()), got {fn!r}',
          hint='To stage a function that calls batched functions, use '
          'tf.function and return fn.last_stats.counts() with its result '
          '(guide, section 9).')
    if call_kwargs.get('dry_run') or isinstance(
        call_kwargs.get('backend'), numpy_backend.NumpyBackend):
      raise errors.ArgumentError(
          f'stage({fn.name}) runs the VM on TensorFlow: dry_run and other '
          'backends do not apply',
          hint='Call the batched function itself for a dry run or a NumPy '
          'run.', loc=fn.context.function_loc(fn.name))
    self.fn = fn
    self.jit_compile = bool(jit_compile)
    self.batch_buckets = _check_buckets(batch_buckets, fn)
    self.call_kwargs = dict(call_kwargs)
    self._last = None     # the last call's (trace id, counts), as tensors
    self._last_stats = None
    self._traced = {}     # trace id -> RunStats of that trace (tensors)
    self._ids = itertools.count()

    def traced(*args, **kwargs):
      out = fn(*args, **self.call_kwargs, **kwargs)
      stats = fn.last_stats
      trace_id = next(self._ids)   # atomic: no lock needed
      self._traced[trace_id] = stats
      return out, stats.counts(), tf.constant(trace_id, tf.int32)
    traced.__name__ = fn.name

    def traced_padded(live, *args):
      # A batch padded to a bucket: the members from `live` on start at
      # the program's exit.
      with machine.active_members(tf.range(_batch_of(args)) < live):
        return traced(*args)
    traced_padded.__name__ = fn.name
    # The tf.function, and what turns its result into `traced`'s (under
    # XLA, `compile_nested_output` raises a run's error).  See `__call__`.
    if self.jit_compile:
      compiled = xla.compile_nested_output(traced)
      self._function, self._finish = compiled.compiled, compiled.finish
      padded = xla.compile_nested_output(traced_padded)
      self._padded_function = padded.compiled
      self._sizes = {}   # member signature -> its sizes compiled exactly
    else:
      self._function = tf.function(tf_loop.traceable(traced))
      self._finish = lambda r: r
    # The arguments' signature -> concrete function.  Without XLA a
    # member signature (`_signature(args, batched=False)`, with which
    # arguments are a batch of one broadcast) -> the signature of its
    # first call, traced for that batch size; every other size of it
    # shares one trace with a batch axis of unknown size, kept in
    # `_concrete` under `(_ANY_SIZE, member)`.
    self._concrete = {}
    self._first_sizes = {}
    self.fast_calls = 0   # calls that took the concrete function directly

  def __repr__(self):
    mode = 'XLA' if self.jit_compile else 'tf.function'
    return f'<staged batched function {self.fn.name} ({mode})>'

  def __reduce__(self):
    # The batched function and the options travel; the tf.functions and
    # their traces stay, and the other side traces on its first call.
    return _restage, (self.fn, self.jit_compile, self.call_kwargs,
                      self.batch_buckets)

  def __call__(self, *args, **kwargs):
    """Runs the staged function, tracing it for a new input signature.

    Args:
      *args, **kwargs: The batched function's arguments (tensors or
        arrays), as for a call of the function itself.

    Returns:
      The batched results, as tensors.

    Raises:
      ArgumentError: If called inside a `tf.function` being traced.
      AutoBatchError: As a call of the batched function raises.
    """
    if not tf.executing_eagerly():
      raise errors.ArgumentError(
          f'A staged function ({self.fn.name}) was called inside a '
          'tf.function being traced',
          loc=self.fn.context.function_loc(self.fn.name),
          hint=f'Call {self.fn.name} itself there (your tf.function stages '
          'it), and return its last_stats.counts() to read them after the '
          'call.')
    flat = tf.nest.flatten(args)
    if not all(isinstance(x, tf.Tensor) for x in flat):
      args = tf.nest.map_structure(tf.convert_to_tensor, args)
      flat = tf.nest.flatten(args)
    # A signature (structure, dtypes, shapes) seen before calls its traced
    # concrete function directly, by the flat call its own __call__ makes:
    # `tf.function` would find it again, binding and flattening the
    # arguments and packing the outputs in Python: for nested arguments,
    # a large share of a short call's time (docs/performance.md).  A new
    # signature goes through `tf.function`, which traces it, and its
    # concrete function is kept.
    key = None if kwargs else _signature(args)
    concrete = self._concrete.get(key) if key is not None else None
    function, live = self._function, None
    if concrete is None and key is not None:
      if not self.jit_compile:
        concrete = self._any_size(key, args)
      else:
        padded = self._bucket(key, args)
        if padded is not None:
          # Padded to a bucket: called with the live members' count.
          function = self._padded_function
          live, args = padded
          args = (tf.constant(live, tf.int32),) + tuple(args)
          flat = tf.nest.flatten(args)
          key = (_BUCKET, _signature(args))
          concrete = self._concrete.get(key)
    if concrete is not None and concrete is not False:
      result = concrete._call_flat(flat, concrete.captured_inputs)  # pylint: disable=protected-access
      self.fast_calls += 1
    else:
      result = function(*args, **kwargs)
      if key is not None and key not in self._concrete:
        concrete = function.get_concrete_function(*args)
        # (False: a TensorFlow without the flat call; tf.function it is.)
        self._concrete[key] = callable(
            getattr(concrete, '_call_flat', None)) and concrete
    out, counts, trace_id = self._finish(result)
    if live is not None:   # the members padded on are dropped
      rows = tf.range(live)   # (a gather costs less than a slice here)
      out = tf.nest.map_structure(lambda t: tf.gather(t, rows), out)
    # The statistics are made when read (`last_stats`): a call that does
    # not read them skips copying the counts and building a RunStats.
    self._last, self._last_stats = (trace_id, counts, live), None
    return out

  def _bucket(self, key, args):
    """Under XLA, `(live, padded)`: `args` padded to their batch size's
    bucket, `live` the members given; None to compile for the size.

    Padding repeats the last member, so padded lanes hold values a
    member has (they run no block, see `vm.machine.active_members`).
    """
    size = _batch_of(args)
    buckets = self.batch_buckets
    if size is None or size < 2 or buckets is False:
      return None
    if buckets == 'auto':
      sizes = self._sizes.setdefault(_signature(args, batched=False), set())
      if size in sizes or len(sizes) < EXACT_SIZES:
        sizes.add(size)
        return None
    bucket = _bucket_size(size, buckets)
    if bucket == size:
      return None
    rows = tf.constant(np.minimum(np.arange(bucket), size - 1), tf.int32)
    return size, tf.nest.map_structure(
        lambda t: tf.gather(t, rows) if t.shape.rank and
        t.shape[0] == size else t, args)

  def _any_size(self, key, args):
    """The concrete function serving every batch size of `args`'s member
    signature but its first call's, traced on the first call at another
    size with a batch axis of unknown size; None for a first call (left
    to `tf.function`, which traces it for its size); False where
    TensorFlow has no flat call (then `tf.function` it is).

    The first size keeps its own trace, whose ops TensorFlow folds for
    that size: a loop serving any size reads the size at run time (see
    `backends.tf.loop.StagedRun`), which costs a fixed-size caller a few
    percent (docs/performance.md, "Batch sizes and caches").

    Args:
      key: `args`'s signature.
      args: The call's arguments.
    """
    size = _batch_of(args)
    # A batch of one beside wider arguments is broadcast: it keeps its
    # one row in the trace, where it is not a batch (the batch size is
    # read from the others).
    flat = tf.nest.flatten(args)
    ones = tuple(bool(t.shape.rank) and size != 1 and t.shape[0] == 1
                 for t in flat)
    member = (_signature(args, batched=False), ones)
    if self._first_sizes.setdefault(member, key) == key:
      return None
    concrete = self._concrete.get((_ANY_SIZE, member))
    if concrete is None:
      specs = tf.nest.pack_sequence_as(args, [
          tf.TensorSpec([1 if one else None] + t.shape[1:]
                        if t.shape.rank else t.shape, t.dtype)
          for t, one in zip(flat, ones)])
      # Its packing planned at this call's size, as an eager call's.
      with tf_loop.planned_batch(size or tf_loop.NOMINAL_BATCH):
        concrete = self._function.get_concrete_function(*specs)
      concrete = callable(getattr(concrete, '_call_flat', None)) and concrete
      self._concrete[(_ANY_SIZE, member)] = concrete
    return concrete

  @property
  def last_stats(self):
    """The `RunStats` of the last call, with numbers (None before any)."""
    if self._last_stats is None and self._last is not None:
      trace_id, counts, live = self._last
      stats = self._traced[int(trace_id)].with_counts(
          tf.nest.map_structure(lambda t: t.numpy(), counts))
      if live is not None:   # a padded call: its own members
        blocks = stats.member_blocks
        stats = dataclasses.replace(
            stats, batch_size=live,
            member_blocks=None if blocks is None else blocks[:live])
      self._last_stats = stats
    return self._last_stats

  def numpy(self, *args, **kwargs):
    """Runs the staged function and returns its outputs as NumPy arrays.

    Args:
      *args, **kwargs: As for a call.

    Returns:
      The call's outputs, each a NumPy array.
    """
    return tf.nest.map_structure(lambda t: t.numpy(),
                                 self(*args, **kwargs))

  def profile_blocks(self, *args, steps=100, repeats=5):
    """Times each block of a call with `args`, where XLA has no clock.

    Under XLA a step has no clock to read, so `profile=True` counts blocks
    but cannot time them.  Here each block that the call ran is timed on
    its own instead: this staging's loop is traced again (twice, `steps`
    and `3 * steps` steps long) to run one block at every step, the block
    chosen at run time; for each block the two loops are timed in turns
    `repeats` times, and the difference of their median times over
    `2 * steps` is the block's cost per step.  Under XLA a step costs the
    same whichever members it runs, as every lane is computed; under
    plain `tf.function` the timed steps run the block's masked variant
    (a step with every member at the block runs an unmasked one, guide,
    section 6).

    Args:
      *args: The call's arguments, as for a call.
      steps: The shorter timing loop's steps (the longer runs three times
        as many).
      repeats: How many times each block's two loops are timed.

    Returns:
      A `RunStats` like `last_stats` after `self(*args)`, whose
      `block_time` holds, per block, its runs times its cost per step:
      `table()` and `profiler.plot` show where the call's time goes.
      Their sum leaves out what a call costs beyond its steps (converting
      the arguments, starting the loop).
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
      raise errors.ArgumentError(
          f'profile_blocks(steps=...) must be a positive int, got '
          f'{steps!r}', loc=self.fn.context.function_loc(self.fn.name))
    self(*args)
    stats = self.last_stats
    block = tf.Variable(0, dtype=tf.int32, trainable=False)
    kwargs = dict(self.call_kwargs, profile=False)
    loops = []
    for n in (steps, 3 * steps):
      loop = StagedFunction(self.fn, self.jit_compile, False,
                            **dict(kwargs, max_steps=n))
      tf_loop.FORCED_BLOCK.append(block)
      try:
        _run_forced(loop, args)   # traces, and compiles
      finally:
        tf_loop.FORCED_BLOCK.pop()
      loops.append(loop)
    block_time = {}
    for k, label in enumerate(stats.block_executions):
      runs = stats.block_executions[label]
      if not runs:
        continue
      block.assign(k)
      times = [[], []]
      for _ in range(max(repeats, 1)):
        for i, loop in enumerate(loops):
          start = time.perf_counter()
          _run_forced(loop, args)
          times[i].append(time.perf_counter() - start)
      per_step = max(statistics.median(times[1]) -
                     statistics.median(times[0]), 0.0) / (2 * steps)
      block_time[label] = runs * per_step
    return dataclasses.replace(stats, block_time=block_time)


def _restage(fn, jit_compile, call_kwargs, batch_buckets='auto'):
  """A staged function unpickled: `fn` staged anew."""
  return StagedFunction(fn, jit_compile, batch_buckets, **call_kwargs)


def _check_buckets(buckets, fn):
  """`stage`'s `batch_buckets`, checked; a list becomes a sorted tuple."""
  if buckets in ('auto', True, False):
    return buckets
  try:
    sizes = tuple(sorted(int(b) for b in buckets))
    ok = all(b >= 1 and b == x for b, x in zip(sizes, sorted(buckets)))
  except (TypeError, ValueError):
    ok = False
  if not ok or not sizes:
    raise errors.ArgumentError(
        f'stage({fn.name}, batch_buckets=...) must be \'auto\', True, False '
        f'or a list of positive batch sizes, got {buckets!r}',
        hint='True pads every batch to the next power of two, a list to '
        'the next size in it; False compiles each batch size.',
        loc=fn.context.function_loc(fn.name))
  return sizes


def _bucket_size(size, buckets):
  """The batch size a call of `size` members is padded to: the next
  power of two (`buckets` True or 'auto'), or the next size in the list
  `buckets` (`size` itself above its largest)."""
  if buckets in (True, 'auto'):
    return 1 << (size - 1).bit_length()
  return next((b for b in buckets if b >= size), size)


def _batch_of(args):
  """The batch size of staged arguments: their one size of axis 0 other
  than 1 (1 where every leaf has 1 or none); None where they differ."""
  sizes = {int(t.shape[0]) for t in tf.nest.flatten(args)
           if t.shape.rank and t.shape[0] is not None}
  wide = sizes - {1}
  if len(wide) > 1:
    return None
  return wide.pop() if wide else 1


def _run_forced(loop, args):
  """Calls a staging that runs one block at every step (its members never
  finish; it stops at its step limit, without the limit's error).

  Members that the block keeps (a loop of one block) may run it past what
  the program allows them, say to a full stack: the error that raises
  after the steps have run is ignored, as only their time is wanted.
  """
  try:
    tf.nest.map_structure(lambda t: t.numpy(), loop(*args))
  except (errors.AutoBatchError, tf.errors.InvalidArgumentError):
    pass


_ANY_SIZE = 'any batch size'   # keys of `StagedFunction._concrete`
_BUCKET = 'padded to a bucket'


def _signature(x, batched=True):
  """A hashable key of `x`'s structure and its tensors' dtypes and shapes
  (None if a leaf is not a tensor, or a container is not one `tf.nest`
  flattens in a fixed order); `batched=False`: without the size of axis 0
  (the member signature)."""
  if isinstance(x, tf.Tensor):
    shape = tuple(x.shape)
    return x.dtype, (shape if batched or not shape
                     else (None,) + shape[1:])
  if isinstance(x, (tuple, list)):
    parts = tuple(_signature(v, batched) for v in x)
    return None if None in parts else (type(x), parts)
  if isinstance(x, dict):
    try:
      keys = sorted(x)
    except TypeError:   # keys of mixed types: let tf.function decide
      return None
    parts = tuple(_signature(x[k], batched) for k in keys)
    return None if None in parts else (dict, tuple(keys), parts)
  return None


def stage(fn, jit_compile=False, batch_buckets='auto', **call_kwargs):
  """Stages the batched function `fn` with `tf.function`.

  Call the result with tensors or arrays; after each call its `last_stats`
  are that call's statistics as numbers (steps, utilization, `table()`;
  with `profile=True` blocks per member and, outside XLA, seconds per
  block).

  Args:
    fn: A `BatchedFunction`.
    jit_compile: Whether to compile with XLA (through
      `xla.compile_nested_output`, which raises a run's errors).
    batch_buckets: Under XLA, which batch sizes are compiled (XLA
      compiles a function for static shapes: each size once).  `False`:
      each size the calls come with.  `True`: a call is padded to the
      next power of two, whose compiled function serves it; the members
      padded on take no step, and the outputs are sliced back.  A list
      of sizes: padded to the next size in it (a larger call is compiled
      for its size).  `'auto'` (the default): the first `EXACT_SIZES`
      sizes of a member signature are compiled each for its size, later
      ones padded to a power of two.  Without XLA the first size has its
      own trace and one more serves every other size (its batch axis has
      no size), and this is not used.
    **call_kwargs: Keyword arguments passed to every call:
      `max_stack_depth`, `schedule`, `profile`, `max_steps`, `stackless`,
      or the function's own arguments.

  Returns:
    A `StagedFunction`.

  Raises:
    ArgumentError: If `fn` is not a batched function, or `call_kwargs` ask
      for a dry run or a NumPy backend.
  """
  return StagedFunction(fn, jit_compile, batch_buckets, **call_kwargs)
