"""TensorFlow backend: the whole VM run stages as one `tf.while_loop`.

One loop iteration is one VM step: pick the next block (the lowest PC, or
the most populated block), count the members there, and run that block
through a `tf.switch_case` over all blocks.  Everything has a static shape,
so the same graph runs under `tf.function` and `tf.function(jit_compile=
True)` (XLA), and `tf.GradientTape` differentiates through it.

Stacks are preallocated `[depth + 1, batch, *shape]` tensors: one spare
row above the capacity; a member writing the spare row has overflowed.  A
pop reads every member's top with one `tf.gather` and keeps it where the
mask says.  The VM caches the top of each stack in its register, so reads
never touch the stack.

The loop carries the state packed, one tensor per (kind, dtype, shape), and
each block's branch returns only what the block writes: register values,
and pushes as `[batch, *shape]` rows with each member's target frame.
These are scattered into the packs after the switch (in place under XLA).
A step therefore costs what its block computes and writes, not the size of
the state: XLA copies every value that a conditional merely passes through,
which made a step of a program with large state (NUTS) several times
slower.

Errors that only data can reveal (recursion deeper than `max_stack_depth`,
a failing `assert`) cannot raise in a graph.  Instead the members involved
are *parked*: their PC is set to an error code (`num_blocks + 1 + site`),
which stops them and lets the others finish.  After the loop:
- eagerly: the error is raised as `StackOverflowError` /
  `AssertionFailedError` naming the members;
- in a graph (`tf.function`): a `tf.debugging.Assert` fails the run with
  the same message (`tf.errors.InvalidArgumentError`);
- under XLA, which drops asserts (the run adds none there), every output
  of the run is poisoned (NaN for floats, the dtype's minimum for
  integers; booleans cannot be poisoned), and
  `autobatch_vm.xla.compile_nested_output` turns the error into an
  exception after the compiled function returns.

Eager mode runs the same staged loop through an internal `tf.function`,
traced once per compiled program and cached (it is tens of times faster
than stepping eagerly).  As with any `tf.function`, primitives run once at
tracing: a Python side effect happens once, and a closed-over Python or
NumPy value is frozen at its first value (a `tf.Variable` is read at every
call).  If a primitive cannot be staged (say it calls NumPy on the tensor),
the program steps eagerly from then on; if the staged run fails inside
TensorFlow, that run is repeated step by step eagerly, which raises the
error naming the members.

RunStats: eagerly, ints as on NumPy (with `profile=True` the run steps
eagerly so that each block can be timed).  In a graph, `steps` and the
per-block counts are scalar int32 tensors of that graph, and with
`profile=True` the loop also carries blocks per member and (outside XLA)
seconds per block from timestamps around each step: return
`stats.counts()` from your `tf.function` and read it with
`stats.with_counts(value)`; `utilization` and tables need numbers.
"""

import collections
import contextlib
import functools
import itertools
import threading
import time
import warnings

import numpy as np
import tensorflow as tf

from autobatch_vm import errors

try:  # The functional Case without lowering (see _switch); TF >= 2.2.
  from tensorflow.python.ops.cond_v2 import indexed_case as _indexed_case  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
except ImportError:  # pragma: no cover
  _indexed_case = None

__all__ = ['TensorFlowBackend']

_PC = 0
_EAGER_CACHE_SIZE = 64
# Outside XLA, packs (of small registers and stacks) stay below this size:
# see _staged_loop.
_PACK_BYTES = 128 * 1024
# Outside XLA, registers with rows of at least this many bytes are packed
# with the registers of their dtype and shape that the same blocks write:
# such a block writes the whole pack, which it stacks anew instead of
# copying the pack to scatter into it (NUTS at 64 chains: the leaf block
# copied five 128 KB packs).
_SIGNATURE_BYTES = 4 * 1024
# Under XLA, what one more group of blocks costs a step (its single-trip
# loop), in bytes of ports it would save: see _write_groups.  Measured on
# CPU: with groups of one block guarded (`_GUARDED_GROUP_BYTES`), 16 KB
# (NUTS at 64 chains: 5 groups) against 32 KB (4 groups) was 1.3% faster
# on NUTS (six in-process A/B pairs, +0.3% to +2.8%), 5-7% on tree-RNN at
# B=256, unchanged at B=1024 and on fibonacci and Collatz (one group).
# On a GPU a while loop's trip test copies its predicate to the host
# (microseconds, megabytes of ports), so there groups cost far more.
_GROUP_STEP_BYTES = 16 * 1024
_GROUP_STEP_BYTES_GPU = 16 * 1024 * 1024
# Under XLA, a group of one block that writes packs of this many bytes or
# more runs its block in a conditional (whose other branch, never taken,
# writes nothing) instead of inline: see `_run_group`.  On a GPU the
# conditional's branch index goes to the host, as a loop's trip test does.
_GUARDED_GROUP_BYTES = 64 * 1024
_GUARDED_GROUP_BYTES_GPU = 16 * 1024 * 1024
# Under XLA on CPU, where XLA compiles a scatter as a loop with a trip per
# index (TensorFlow 2.18 and older), stacks of at most this many frames
# are pushed by a select over the stack, and deeper ones by the scatter,
# whose cost does not grow with the depth (about 400 ns per member and
# push).  Fibonacci at 1024 members on TensorFlow 2.18, CPU time per run:
# by the select, 213 ms with 17 frames and 874 ms with 65; by the
# scatter, 570 ms at any depth.  So no push costs much more than the
# scatter would.  See `_select_push`.
_SELECT_PUSH_FRAMES = 40
# Outside XLA, on CPU, a pack of stacks this large or larger is pushed in
# place (`_update_rows`) instead of copied by a scatter or a select: see
# `_Packing`.  A copy costs the pack's size per push, the in-place write
# a fixed few graph nodes plus its rows; the copy is bounded by this size,
# so no step costs more with `max_stack_depth`.  Fibonacci under
# `tf.function` (scalar stacks), in-place against the copy: at 64 members
# 1.13x slower with 8.7 KB stacks (depth 16), 1.02x faster with 33 KB
# (depth 64); at 256 members 1.07x faster with 35 KB (depth 16).
_INPLACE_STACK_BYTES = 32 * 1024


def _in_xla_context():
  """Whether ops are being traced for XLA (tf.function(jit_compile=True))."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = tf.compat.v1.get_default_graph()
  return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


# -- masks ---------------------------------------------------------------------

class _Mask:
  """The members at the block being run, in the forms ops want.

  `full` is a Python bool (True only when statically known); `count` is an
  int eagerly and None in a graph.  Derived tensors are cached, so build a
  new `_Mask` per traced branch (tensors cannot cross graphs).
  """
  __slots__ = ('mask', 'count', 'full', 'batch', '_as_int', '_expanded',
               '_idx', '_first', '_fill_index', '_fill_index_nd')

  def __init__(self, mask, count, full, batch):
    self.mask = mask
    self.count = count
    self.full = full
    self.batch = batch
    self._as_int = None
    self._expanded = {}
    self._idx = None
    self._first = None
    self._fill_index = None
    self._fill_index_nd = None

  @property
  def first(self):
    """The index of the first member in the mask, as a `[1]` tensor."""
    if self._first is None:
      self._first = tf.argmax(self.as_int[tf.newaxis], axis=1,
                              output_type=tf.int32)
    return self._first

  @property
  def as_int(self):
    if self._as_int is None:
      self._as_int = tf.cast(self.mask, tf.int32)
    return self._as_int

  @property
  def fill_index(self):
    """Per lane: itself inside the mask, the first member's lane outside."""
    if self._fill_index is None:
      self._fill_index = tf.where(
          self.mask, tf.range(self.batch, dtype=tf.int32),
          tf.fill([self.batch], self.first[0]))
    return self._fill_index

  @property
  def fill_index_nd(self):
    """`fill_index` as `tf.gather_nd` indices `[1, batch, 1]`."""
    if self._fill_index_nd is None:
      self._fill_index_nd = tf.reshape(self.fill_index, [1, self.batch, 1])
    return self._fill_index_nd

  def like_rows(self, k, shape):
    """The mask broadcast to `[k, *shape]` (`shape` is `[batch, ...]`):
    for a select over `k` stacked values."""
    key = (k,) + tuple(shape)
    if key not in self._expanded:
      mask = tf.reshape(self.mask, [1, self.batch] + [1] * (len(shape) - 1))
      self._expanded[key] = tf.broadcast_to(mask, key)
    return self._expanded[key]

  def like(self, shape):
    """The mask broadcast to `shape` (`[batch, ...]`), to select between
    values of that shape: on CPU TensorFlow's select is several times
    slower when it broadcasts its condition (a `[64, 1]` mask against
    `[64, 25]` values)."""
    ndim = len(shape)
    if ndim <= 1:
      return self.mask
    key = tuple(shape)
    if key not in self._expanded:
      mask = tf.reshape(self.mask, [self.batch] + [1] * (ndim - 1))
      if None not in key and not _in_xla_context():   # XLA fuses it
        mask = tf.broadcast_to(mask, key)
      self._expanded[key] = mask
    return self._expanded[key]

  @property
  def idx(self):
    if self._idx is None:
      self._idx = np.flatnonzero(self.mask.numpy())
    return self._idx


# -- data-dependent errors -----------------------------------------------------

class _Sites:
  """Error sites of one staged run; site k parks members at `base + k`."""

  def __init__(self, num_blocks):
    self.base = num_blocks + 1
    self.makers = []      # site -> function(members) -> AutoBatchError

  def add(self, make_error):
    self.makers.append(make_error)
    return self.base + len(self.makers) - 1

  def error(self, code, members):
    return self.makers[code - self.base](members)

  def graph_messages(self):
    return [_without_members(self.error(self.base + k, None))
            for k in range(len(self.makers))]


def _without_members(err):
  """The text of `err` for a graph, where the members are unknown."""
  text = str(err)
  for known in (' for batch members None', ' for batch members []'):
    text = text.replace(known, ' for some batch members')
  # Assert prints strings escaped: keep the message on one line.
  lines = [line.strip() for line in text.split('\n') if line.strip()]
  return (f'{type(err).__name__}: {" -- ".join(lines)} (run eagerly to see '
          'which members)')


class _Step:
  """Collects what one traced block wants done to the PCs afterwards."""

  def __init__(self, sites):
    self.sites = sites
    self.park = []        # (bool [batch] tensor, code)


_local = threading.local()


def _current_step():
  return getattr(_local, 'step', None)


@contextlib.contextmanager
def _tracing_step(step):
  old = _current_step()
  _local.step = step
  try:
    yield
  finally:
    _local.step = old


def _explain_symbolic(e):
  """`e`, with a hint if a primitive met a symbolic tensor it cannot use."""
  cause = e.__cause__
  if not (isinstance(cause, (NotImplementedError, TypeError)) or
          type(cause).__name__ == 'OperatorNotAllowedInGraphError'):
    return e
  if 'symbolic' not in str(cause) and 'graph' not in str(cause):
    return e
  return errors.PrimitiveError(
      e.message, loc=e.loc,
      hint='Inside tf.function (or XLA) primitives get symbolic tensors: '
      'use TensorFlow ops (operators, tf.math, tf.gather, ...) rather than '
      'NumPy functions or Python `if` on values, or call the batched '
      'function eagerly.')


def _overflow_maker(overflow_error):
  """A site's maker from `overflow_error(members)` (also a step limit's)."""
  def make(members):
    return overflow_error([] if members is None else members)
  return make


def _assert_maker(err):
  def make(members):
    who = 'some batch members' if members is None else \
        f'batch members {errors.member_indices(members)}'
    cause = err.__cause__ if err.__cause__ is not None else err.message
    return errors.AssertionFailedError(f'Assertion failed for {who}: {cause}',
                                       loc=err.loc, hint=err.hint)
  return make


# Error codes of runs traced inside `xla.compile_nested_output`, which checks
# them after the compiled function returns (XLA itself cannot raise).
_collectors = threading.local()


@contextlib.contextmanager
def collect_errors(sink):
  """Makes staged runs append `(code, members_failed, sites)` to `sink`."""
  stack = getattr(_collectors, 'stack', [])
  _collectors.stack = stack + [sink]
  try:
    yield sink
  finally:
    _collectors.stack = stack


def _report_to_collector(code, failed, sites):
  """Hands the run's error code to `collect_errors`; False if none."""
  stack = getattr(_collectors, 'stack', None)
  if stack:
    stack[-1].append((code, failed, sites))
  return bool(stack)


def _warn_uncollected_under_xla(sites):
  """Says, while tracing, that this XLA run cannot raise its errors."""
  if not _in_xla_context():
    return
  what = sorted({type(sites.error(sites.base + k, [])).__name__
                 for k in range(len(sites.makers))})
  warnings.warn(
      f'autobatch_vm under tf.function(jit_compile=True): XLA cannot raise '
      f'at run time, so a {" or ".join(what)} in this batched run poisons '
      'its outputs (NaN for floats, the minimum for integers; booleans are '
      'left as they are) instead of raising.  Compile with '
      'autobatch_vm.xla.compile_nested_output(fn) to get the exception.',
      errors.XlaErrorsWarning, stacklevel=errors.user_stacklevel())


def _poison(x, bad):
  """`x` with every element replaced by an unmistakable value if `bad`."""
  dtype = x.dtype
  if dtype.is_floating or dtype.is_complex:
    value = float('nan')
  elif dtype.is_integer:
    value = dtype.max if dtype.is_unsigned else dtype.min
  else:
    return x  # booleans have no value to spare
  return tf.where(bad, tf.constant(value, dtype), x)


# -- the backend ---------------------------------------------------------------

class TensorFlowBackend:
  """Runs autobatch_vm programs on TensorFlow tensors, staged."""

  name = 'tensorflow'
  staged = True

  def __init__(self, safety_checks=True, while_parallel_iterations=10,
               while_maximum_iterations=None, basic_block_xla_device=None):
    """TFP's constructor arguments, with TFP's meanings.

    Args:
      safety_checks: detect stack overflow at run time.  The check is part
        of every push (one comparison per member), so it stays on either
        way: `False` is accepted for TFP's programs and changes nothing.
      while_parallel_iterations: `parallel_iterations` of the VM's
        `tf.while_loop`.
      while_maximum_iterations: at most this many VM steps: a run that has
        not finished by then raises `StepLimitError` (TFP's loop stopped
        silently).  The default for the call's `max_steps`.
      basic_block_xla_device: if set (e.g. `'/device:CPU:0'`), every
        basic block is compiled with XLA on that device, inside a loop
        that is not (useful when the whole run cannot be `jit_compile`d).
    """
    self.safety_checks = bool(safety_checks)
    self.while_parallel_iterations = while_parallel_iterations
    if while_maximum_iterations is not None and (
        isinstance(while_maximum_iterations, bool)
        or not isinstance(while_maximum_iterations, int)
        or while_maximum_iterations < 1):
      raise errors.ArgumentError(
          'while_maximum_iterations must be None or a positive int, got '
          f'{while_maximum_iterations!r}')
    self.while_maximum_iterations = while_maximum_iterations
    self.basic_block_xla_device = basic_block_xla_device

  def _key(self):
    return (self.while_parallel_iterations, self.while_maximum_iterations,
            self.basic_block_xla_device)

  def __repr__(self):
    return (f'TensorFlowBackend(safety_checks={self.safety_checks}, '
            f'while_parallel_iterations={self.while_parallel_iterations}, '
            f'while_maximum_iterations={self.while_maximum_iterations}, '
            f'basic_block_xla_device={self.basic_block_xla_device!r})')

  def __eq__(self, other):
    return isinstance(other, TensorFlowBackend) and self._key() == other._key()

  def __hash__(self):
    return hash((TensorFlowBackend,) + self._key())

  def in_graph(self):
    """Whether ops are being staged into a graph (tf.function, XLA)."""
    return not tf.executing_eagerly()

  # -- values --------------------------------------------------------------

  def asarray(self, x):
    if isinstance(x, tf.Variable):
      return x.read_value()
    return tf.convert_to_tensor(x)

  def shape(self, x):
    if not (tf.is_tensor(x) or isinstance(x, tf.Variable)):
      return tuple(np.shape(x))
    shape = x.shape
    if shape.rank is None or None in shape.as_list():
      raise errors.BackendError(
          f'a tensor of shape {shape} has unknown dimensions; autobatch_vm '
          'needs static shapes (stacks are preallocated)',
          hint='Give tf.function an input_signature with fixed sizes (or '
          'no input_signature and no reduce_retracing), or tf.ensure_shape '
          'the arguments.')
    return tuple(shape.as_list())

  def dtype(self, x):
    if tf.is_tensor(x) or isinstance(x, tf.Variable):
      return np.dtype(x.dtype.as_numpy_dtype)
    return np.asarray(x).dtype

  def cast(self, x, dtype):
    return tf.cast(x, tf.as_dtype(np.dtype(dtype)))

  def dummy(self, tensor_type, batch):
    return tf.zeros((batch,) + tuple(tensor_type.shape),
                    tf.as_dtype(tensor_type.dtype))

  zeros = dummy

  def traces_symbolically(self):
    """Whether `trace` can find a primitive's result type without
    computing values: when running eagerly (inside a graph, primitives
    build ops and compute nothing anyway)."""
    return tf.executing_eagerly()

  def trace(self, fn, args):
    """`fn(*args)` traced in a scratch graph on `tf.TensorSpec`s like
    `args` (Python scalars stay constants): its result with symbolic
    tensors, of static dtypes and shapes, and no value computed."""
    names = itertools.count()

    def spec(x):
      if tf.is_tensor(x):   # named: the primitive's own names may not be
        return tf.TensorSpec(x.shape, x.dtype, name=f'arg{next(names)}')
      return x
    specs = tf.nest.map_structure(spec, list(args))
    results = []

    def keep(*a):
      # What `fn` returns as Python sees it: a Python scalar stays one
      # (a weak literal), where the function's outputs would be tensors.
      results.append(fn(*a))
      return results[-1]
    tf.function(keep, autograph=False).get_concrete_function(*specs)
    return results[0]

  def coerce_fn(self, tensor_type, batch, strict=False):
    """A function making a primitive's result `[batch, *shape]` of dtype
    (see `numpy_backend.coercer` for `strict`: the rows are checked where
    the result's shape is known while tracing)."""
    np_dtype = np.dtype(tensor_type.dtype)
    dtype = tf.as_dtype(np_dtype)
    full_shape = [batch] + list(tensor_type.shape)

    def coerce(x):
      if isinstance(x, tf.Variable):
        x = x.read_value()
      elif not tf.is_tensor(x):
        if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex,
                          list)):
          x = np.asarray(x, np_dtype)
        x = tf.convert_to_tensor(x)
      if x.dtype != dtype:
        x = tf.cast(x, dtype)
      if x.shape.as_list() != full_shape:
        if (strict and x.shape.rank == len(full_shape) and
            x.shape[0] is not None and x.shape[0] != batch):
          raise ValueError(errors.row_count_message(x.shape[0],
                                                           batch))
        x = tf.broadcast_to(x, full_shape)
      return x
    return coerce

  def coercer(self, tensor_type, strict=False):
    """`coerce(x, rows)`, as `coerce_fn(tensor_type, rows, strict)(x)`."""
    return lambda x, rows: self.coerce_fn(tensor_type, rows, strict)(x)

  def take_rows(self, x, idx):
    """The rows `idx` (member indices) of `x`."""
    if _no_elements(x):
      return tf.zeros([len(idx)] + x.shape.as_list()[1:], x.dtype)
    return tf.gather(x, idx)

  def scatter(self, x, rows, m):
    """`x` with the members of `m` set to `rows` (eager, as `members`)."""
    if m.full:
      return tf.convert_to_tensor(rows)
    if _no_elements(x):
      return x
    return tf.tensor_scatter_nd_update(x, m.idx[:, np.newaxis], rows)

  def concat(self, xs):
    return tf.concat(xs, axis=0)

  def slice(self, x, i):
    return x[i:i + 1]

  def expand(self, x):
    return tf.expand_dims(self.asarray(x), 0)

  def to_bool(self, x):
    x = self.asarray(x)
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros_like(x))

  def error_context(self):
    return contextlib.nullcontext()

  # -- masks ---------------------------------------------------------------

  def make_mask(self, pc, block, batch):
    if tf.executing_eagerly():
      return self.mask_of(tf.equal(pc, block), batch)
    static = tf.get_static_value(pc)
    if static is not None:  # e.g. the initial PC, to write the inputs
      mask = static == block
      return _Mask(tf.constant(mask), int(mask.sum()), bool(mask.all()),
                   batch)
    return _Mask(tf.equal(pc, block), None, False, batch)

  def mask_of(self, mask, batch):
    if tf.executing_eagerly():
      count = int(np.count_nonzero(mask.numpy()))
      return _Mask(mask, count, count == batch, batch)
    return _Mask(mask, None, False, batch)

  def submask(self, m, cond, negate=False):
    """The members of `m` where `cond` holds (fails, if `negate`)."""
    if negate:
      cond = tf.logical_not(cond)
    return self.mask_of(cond if m.full else tf.logical_and(m.mask, cond),
                        m.batch)

  def start_pc(self, active, num_blocks):
    """Entry (0) for `active` members, exit for the rest."""
    return tf.where(active, tf.constant(0, tf.int32),
                    tf.constant(num_blocks, tf.int32))

  def fill_inactive(self, x, m):
    """`x` with the lanes outside `m` copied from the first lane inside."""
    x = self.asarray(x)
    if len(x.shape) == 0 or _no_elements(x):
      return x
    if _in_xla_context():
      # XLA fuses the broadcast of one row into the select.
      return tf.where(m.like(x.shape.as_list()), x, tf.gather(x, m.first))
    if x.dtype.is_floating or x.dtype.is_complex:
      # Not `tf.gather`, nor `tf.gather_nd` with `[batch, 1]` indices,
      # whose gradients are `IndexedSlices`: tape.gradient would return
      # those as the gradient of the run's inputs.  With `[1, batch, 1]`
      # indices the gradient is dense.  One gather and a reshape instead of
      # a gather and a select: under `tf.function`, NUTS at 64 chains
      # 1.01-1.03x and tree-RNN at 256 trees 1.02-1.06x faster (in-process
      # A/B runs).
      filled = tf.gather_nd(x, m.fill_index_nd)
      return tf.reshape(filled, tf.shape(x) if None in x.shape.as_list()
                        else x.shape)
    return tf.gather(x, m.fill_index)

  def sanitize(self, x, m):
    """A register as a block's primitives see it: the lanes of members not
    at the block hold a copy of a member's that is (`fill_inactive`).

    Primitives run on the whole batch here, and leftover data in the other
    lanes must not matter: an index out of range there would fail the run
    (`tf.gather` checks indices on CPU), and a derivative that is inf there
    would make gradients NaN (0 * inf through the masked write).  With a
    live member's data, those lanes compute what it computes.  Under XLA,
    which clamps indices and defines integer division by zero, only
    floating registers are filled (for gradients, with `max_steps`).
    """
    if m is None or m.full:
      return _value(x)
    if isinstance(x, _MaskedWrite):
      # Written (say popped) in this block for the members in `m`: their
      # lanes are `new`, and the others' are filled from them anyway.
      x = x.for_members(m)
    dtype = getattr(x, 'dtype', None)   # None: a Python scalar, left as is
    if dtype is not None and _in_xla_context():
      dtype = tf.as_dtype(dtype)
      if not (dtype.is_floating or dtype.is_complex):
        return x
    return self.fill_inactive(x, m)

  def members(self, m):
    """Indices of the members in `m`, or None in a graph (unknown)."""
    if not tf.executing_eagerly():
      return None
    return m.idx

  def write(self, old, new, m):
    """`new` for the members in `m`, `old` for the rest.

    In a block of the staged loop outside XLA the select waits
    (`_MaskedWrite`): the registers a block writes into one pack then take
    one select over the pack instead of one each (`_Packing.ports`).
    """
    if m.full:
      return new
    if _current_step() is not None and not _in_xla_context():
      if isinstance(old, _MaskedWrite) and old.m is m:
        old = old.old   # written twice in the block: the last one counts
      return _MaskedWrite(old, new, m)
    return tf.where(m.like(new.shape.as_list()), new, _value(old))

  # -- program counter -----------------------------------------------------

  def goto(self, pc, m, target):
    target = tf.constant(target, tf.int32)
    if m.full:
      return tf.fill(tf.shape(pc), target)
    return tf.where(m.mask, target, pc)

  def branch(self, pc, m, cond, true_target, false_target):
    to = tf.where(cond, tf.constant(true_target, tf.int32),
                  tf.constant(false_target, tf.int32))
    if m.full:
      return to
    return tf.where(m.mask, to, pc)

  def next_block(self, pc, num_blocks, schedule):
    """The block to run next (an int eagerly, a scalar tensor in a graph)."""
    if tf.executing_eagerly():
      return _next_block_np(pc.numpy(), num_blocks, schedule)
    return _next_block_tf(pc, num_blocks, schedule)

  # -- stacks --------------------------------------------------------------
  # A stack of capacity `depth` has `depth + 1` rows; the last is scratch.

  def stack_zeros(self, tensor_type, depth, batch):
    return tf.zeros((depth + 1, batch) + tuple(tensor_type.shape),
                    tf.as_dtype(tensor_type.dtype))

  def sp_zeros(self, batch):
    return tf.zeros((batch,), tf.int32)

  def push(self, stacks, sp, values, m, depth, overflow_error):
    """Pushes each of `values` on its stack for the members in `m`."""
    # Members not in `m`, and members parked after an overflow (sp >
    # depth), target row -1: no row.
    target = sp if m.full else tf.where(m.mask, sp, -1)
    out = []
    for s, v in zip(stacks, values):
      if isinstance(v, _MaskedWrite):
        # Only the members in `m` push: their lanes are enough.
        v = v.for_members(m)
      v = tf.convert_to_tensor(v, s.dtype)
      out.append(_StackWrite(s, target, v, m.full))
    if _current_step() is None:   # not in the staged loop: apply at once
      out = [w.materialize() for w in out]
    new_sp = sp + 1 if m.full else sp + m.as_int
    if overflow_error is not None:
      # Members in `m` writing the spare row `depth` overflowed.
      self._check_overflow(tf.equal(target, depth), overflow_error)
    return out, new_sp

  def _check_overflow(self, over, overflow_error):
    if tf.executing_eagerly():
      if bool(tf.reduce_any(over)):
        raise overflow_error(np.flatnonzero(over.numpy()))
      return
    step = _current_step()
    if step is None:  # not inside our loop: fall back on an assertion
      msg = _without_members(overflow_error([]))
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(over)), [msg])
      return
    code = step.sites.add(_overflow_maker(overflow_error))
    step.park.append((over, code))

  def pop(self, stacks, sp, values, m):
    """Restores `values` from the top of their stacks and drops the frame."""
    out = self.peek(stacks, sp, values, m)
    return out, (sp - 1 if m.full else sp - m.as_int)

  def peek(self, stacks, sp, values, m):
    """Restores `values` from the top of their stacks, keeping the frame."""
    batch = m.batch
    # Row-major flat index of (top, member); a member with an empty stack
    # (only ever one not in `m`) reads row 0, which `write` discards.
    flat = tf.maximum(sp - 1, 0) * batch + tf.range(batch, dtype=tf.int32)
    tops = {}
    packs = collections.defaultdict(list)
    for s in stacks:
      if isinstance(s, _PackRow):
        packs[id(s.pack)].append(s)
    for key, rows_of in packs.items():
      pack = rows_of[0].pack
      shape = pack.shape.as_list()
      if (len(rows_of) < 2 or 2 * len(rows_of) < shape[0]
          or _no_elements(pack)):
        continue   # a gather per stack: the pack is mostly other stacks
      # Most stacks of one pack (NUTS: the nine `[25]` stacks of a
      # subtree): one gather of every row's top frames, then an unstack.
      rows = tf.reshape(pack, [shape[0], shape[1] * batch] + shape[3:])
      tops[key] = tf.unstack(tf.gather(rows, flat, axis=1))
    out = []
    for s, v in zip(stacks, values):
      if isinstance(s, _PackRow) and id(s.pack) in tops:
        top = tops[id(s.pack)][s.row]
      else:
        s = _value(s)
        shape = s.shape.as_list()
        if _no_elements(s):   # a gather from no elements fails
          top = tf.zeros([batch] + shape[2:], s.dtype)
        else:
          rows = tf.reshape(s, [shape[0] * batch] + shape[2:])
          top = tf.gather(rows, flat)
      out.append(self.write(v, top, m))
    return out

  # -- the loop ------------------------------------------------------------

  def run(self, blocks, state, num_blocks, schedule, stats, labels,
          max_steps=None, step_limit_error=None):
    """Runs the VM loop; fills `stats` (ints eagerly, tensors in a graph).

    `max_steps` is the loop's `maximum_iterations` (members left then fail
    with `step_limit_error(members)`); a static trip count also lets XLA
    differentiate the loop.
    """
    batch = stats.batch_size
    if not batch:
      _fill_stats(stats, labels, 0, [0] * num_blocks, [0] * num_blocks)
      return state
    limit = (max_steps, step_limit_error)
    if tf.executing_eagerly():
      return self._run_eagerly(blocks, state, num_blocks, schedule, stats,
                               labels, limit)
    sites = _Sites(num_blocks)
    state, acc, profiled = self._staged_loop(
        blocks, state, num_blocks, schedule, batch, sites, limit,
        profile=stats.profile)
    state = self._fail_in_graph(state, num_blocks, sites)
    runs, active = tf.unstack(acc, axis=1)
    _fill_stats(stats, labels, tf.reduce_sum(runs), tf.unstack(runs),
                tf.unstack(active))
    if profiled is not None:
      seconds, stats.member_blocks = profiled
      if seconds is not None:
        stats.block_time.update(zip(labels, tf.unstack(seconds)))
    return state

  def _staged_loop(self, blocks, state, num_blocks, schedule, batch, sites,
                   step_limit=(None, None), profile=False):
    """Builds the `tf.while_loop`; returns (state, [num_blocks, 2] counts,
    profile), where with `profile` the last is (seconds per block, or None
    under XLA, which has no clock; blocks run per member), else None.

    The loop carries the state partly packed by dtype and shape
    (`_Packing`).

    In a plain graph, the step is one `Case` over the blocks, and each
    branch scatters into the packs its block writes and passes the others
    through (free outside XLA).  There a step's cost is mostly graph nodes
    (about a microsecond each), and every loop variable costs several (the
    loop's and the `Case`'s plumbing), so the state is packed:
    - small registers and stacks by dtype and shape, in packs of at most
      `_PACK_BYTES`, since a scatter copies its pack (NUTS at 64 chains had
      a 384 KB pack of `[64, 25]` registers, copied at every step);
    - large registers (rows of `_SIGNATURE_BYTES` or more) with those that
      the same blocks write, so that a block writing one writes the whole
      pack, stacked anew (no copy of the old pack, no scatter).
    A block reads a pack's rows by one unstack.  The `Case` has two
    branches per block: one for a step with every member at the block,
    which reads and writes without masks, and one for the others (a
    select per register written, a gather per register read, see
    `sanitize`).  NUTS at 64 chains: 0.067 -> 0.047 s per call; without
    the first kind, 1.14-1.17x slower (in-process A/B runs).

    Under XLA everything is packed, and no pack goes through a
    conditional: XLA copies every value a conditional returns, so a step
    would cost the size of the whole state.  A branch returns instead, per
    pack, rows to scatter after the switch, in place (ports).  All branches
    of a switch return the same shapes, so a step costs the widest block's
    ports; the blocks are therefore split into groups of similar writes
    (`_write_groups`), each a switch with its own ports run in a
    single-trip `while_loop` (which, unlike a conditional, updates its
    state in place) taken only when the block is one of its own.  Tree-RNN
    at B=256: 0.019 -> 0.008 s; NUTS at 64 chains: 0.029 -> 0.025 s.
    """
    state = [tf.convert_to_tensor(s) for s in state]
    stack_slots = blocks[0].stack_slots if blocks else frozenset()
    xla = _in_xla_context()
    if xla:
      packed, limit = range(len(state)), None
    else:
      # Stacks are all packed: large ones with those the same blocks push.
      packed = [i for i, x in enumerate(state)
                if 2 * x.shape.num_elements() * x.dtype.size <= _PACK_BYTES
                or i in stack_slots]
      limit = _PACK_BYTES
    writers = None
    if not xla:
      writers = collections.defaultdict(set)
      for k, blk in enumerate(blocks):
        for slot in blk.writes:
          writers[slot].add(k)
    # Large stacks are pushed in place where that is safe and supported:
    # not under XLA (which updates in place itself), not in blocks compiled
    # by XLA one at a time, and on CPU.
    inplace = (None if xla or self.basic_block_xla_device is not None
               or _on_gpu() else _INPLACE_STACK_BYTES)
    packing = _Packing(state, stack_slots, frozenset(packed), limit, writers,
                       inplace)
    writes = [blk.writes for blk in blocks]
    groups = _write_groups(packing, writes) if xla else None
    widths = {}
    for members, width in groups or ():
      widths.update((k, width) for k in members)
    branch_fns = [self._branch_fn(blk, batch, sites, packing, widths.get(k))
                  for k, blk in enumerate(blocks)]
    # Outside XLA, each block also gets a variant for a step where every
    # member is at the block (70% of NUTS's steps at 64 chains): it reads
    # and writes registers without masks.  A batch of one is always full.
    full_fns = None
    if groups is None:
      full_fns = [self._branch_fn(blk, batch, sites, packing, None,
                                  full=True) for blk in blocks]
      if batch == 1:
        branch_fns = full_fns
        full_fns = None

    # profile=True: blocks per member and, outside XLA (which has no
    # clock op), seconds per block between timestamps around the step's
    # switch, as loop variables.
    timed = profile and not xla
    extra0 = []
    if profile:
      extra0 = [tf.zeros([batch], tf.int32)]
      if timed:
        extra0.append(tf.zeros([num_blocks], tf.float64))
    num_extra = len(extra0)

    # `staging.StagedFunction.profile_blocks` traces loops that run one
    # block at every step, to time it (XLA has no clock op in the loop):
    # the block whose index a variable holds, read at run time, so one
    # trace times every block (and XLA cannot inline the block's switch
    # for a constant index, which would make a different step).
    forced = _FORCED_BLOCK[-1] if _FORCED_BLOCK else None

    def next_block(pc):
      if forced is None:
        return _next_block_tf(pc, num_blocks, schedule)
      return tf.identity(forced.read_value())

    def cond(b, acc, *rest):
      del acc, rest
      return b < num_blocks

    def body(b, acc, *rest):
      extra, carried = list(rest[:num_extra]), rest[num_extra:]
      mask = tf.equal(packing.read(carried, _PC), b)
      count = tf.reduce_sum(tf.cast(mask, tf.int32))
      run = tf.stack([tf.constant(1, tf.int32), count])[tf.newaxis]
      if xla:
        # A one-hot sum fuses into one loop; XLA made the scatter a
        # bounds check, an index and an update (NUTS-like steps on a
        # cheap target, together with the shared `case` of `_run_groups`:
        # 8% faster).
        hot = tf.cast(tf.equal(tf.range(num_blocks), b), tf.int32)
        acc += hot[:, tf.newaxis] * run
      else:
        acc = tf.tensor_scatter_nd_add(acc, tf.reshape(b, [1, 1]), run)
      if profile:
        extra[0] += tf.cast(mask, tf.int32)
      start = None
      if timed:
        with tf.control_dependencies([mask]):
          start = tf.timestamp()
      with tf.control_dependencies([] if start is None else [start]):
        if full_fns is not None:
          index = b + num_blocks * tf.cast(tf.equal(count, batch), tf.int32)
          carried = packing.after_switch(carried, _switch(
              index,
              [_bind(f, mask, carried) for f in branch_fns + full_fns]))
        elif groups is None:
          carried = packing.after_switch(carried, _switch(
              b, [_bind(f, mask, carried) for f in branch_fns]))
        else:
          carried = _run_groups(b, mask, groups, branch_fns, packing,
                                list(carried), writes)
      if timed:
        with tf.control_dependencies(tf.nest.flatten(carried)):
          elapsed = tf.timestamp() - start
        extra[1] = tf.tensor_scatter_nd_add(
            extra[1], tf.reshape(b, [1, 1]), tf.reshape(elapsed, [1]))
      return [next_block(packing.read(carried, _PC)), acc] + extra + list(
          carried)

    b0 = next_block(state[_PC])
    acc0 = tf.zeros([num_blocks, 2], tf.int32)
    max_steps, step_limit_error = step_limit
    out = tf.while_loop(cond, body,
                        [b0, acc0] + extra0 + packing.carry(state),
                        parallel_iterations=self.while_parallel_iterations,
                        maximum_iterations=max_steps)
    profiled = None
    if profile:
      profiled = (out[3] if timed else None, out[2])
    state = packing.unpack(out[2 + num_extra:])
    if max_steps is not None and forced is None:
      # Members still running after max_steps: parked at the limit's site
      # (not in a loop that times one block: there they never finish).
      code = sites.add(_overflow_maker(step_limit_error))
      pc = state[_PC]
      state[_PC] = tf.where(pc < num_blocks, tf.constant(code, tf.int32), pc)
    return state, out[1], profiled

  def _branch_fn(self, block_fn, batch, sites, packing, width, full=False):
    """One block, traced into a switch branch: `f(mask, *carried)` returns
    the loop variables after it (outside XLA), or, given its group's ports
    per pack (`width`, under XLA), `(ports, flat)`.  `full`: for a step
    with every member at the block (`mask` all true)."""

    def run_block(mask, *carried):
      st = _BlockState(carried, packing, block_fn.writes)
      m = _Mask(mask, batch if full else None, full, batch)
      step = _Step(sites)
      with _tracing_step(step):
        try:
          block_fn(st, m)
        except errors.AssertionFailedError as e:
          # An `assert` that fails for every member reaching this block:
          # park them all (it raised while tracing, not at run time).
          step.park.append((mask, sites.add(_assert_maker(e))))
        except errors.PrimitiveError as e:
          raise _explain_symbolic(e) from e.__cause__
      pc = st[_PC]
      # Reversed, so that the block's first failure names the error.
      for where, code in reversed(step.park):
        pc = tf.where(where, tf.constant(code, tf.int32), pc)
      st[_PC] = pc
      if width is None:
        return packing.carried_after(st, block_fn.writes, carried)
      return (packing.ports(st, block_fn.writes, width),
              packing.flat_values(st))

    if self.basic_block_xla_device is None:
      return run_block
    device = self.basic_block_xla_device
    compiled = tf.function(traceable(run_block), jit_compile=True,
                           autograph=False)

    def run_on_device(mask, *carried):
      with tf.device(device):
        return compiled(mask, *carried)
    return run_on_device

  def _fail_in_graph(self, state, num_blocks, sites):
    """Makes a run with parked members fail: Assert, poison, collectors."""
    if not sites.makers:
      return state
    pc = state[_PC]
    code = tf.reduce_max(pc)
    bad = code > num_blocks
    # One assertion per site, with a constant message.  Not under XLA,
    # which drops assertions (logging "Ignoring Assert operator" for each
    # at every compile): there the error code reaches a collector
    # (`xla.compile_nested_output`), and the outputs are poisoned.
    checks = [] if _in_xla_context() else [
        tf.debugging.Assert(tf.not_equal(code, sites.base + k), [msg],
                            summarize=1)
        for k, msg in enumerate(sites.graph_messages())]
    if not _report_to_collector(code, pc > num_blocks, sites):
      _warn_uncollected_under_xla(sites)
    with tf.control_dependencies(checks):
      return [tf.identity(_poison(s, bad)) for s in state]

  # -- eager ---------------------------------------------------------------

  def _run_eagerly(self, blocks, state, num_blocks, schedule, stats, labels,
                   limit):
    """Runs the staged loop via a cached tf.function; steps eagerly if not."""
    batch = stats.batch_size
    staged = _eager_cache_get(self, blocks, num_blocks, schedule, batch,
                              limit)
    if not staged.stageable or stats.profile:
      # profile=True times each block, which only stepping can do.
      return self._step_eagerly(blocks, state, num_blocks, schedule, stats,
                                labels, limit)
    try:
      out_state, acc = staged(state)
    except tf.errors.OpError:
      # Failed at run time (say a primitive's own check): step eagerly to
      # report it with the members and the user's line.
      return self._step_eagerly(blocks, state, num_blocks, schedule, stats,
                                labels, limit)
    except Exception:  # pylint: disable=broad-except
      # Could not be traced (say a primitive calls NumPy on the tensor):
      # from now on this program steps eagerly, which works or raises.
      staged.stageable = False
      return self._step_eagerly(blocks, state, num_blocks, schedule, stats,
                                labels, limit)
    pc = out_state[_PC].numpy()
    if (pc > num_blocks).any():
      code = int(pc.max())
      raise staged.sites.error(code, np.flatnonzero(pc == code))
    acc = acc.numpy()
    _fill_stats(stats, labels, int(acc[:, 0].sum()),
                [int(r) for r in acc[:, 0]], [int(a) for a in acc[:, 1]])
    return out_state

  def _step_eagerly(self, blocks, state, num_blocks, schedule, stats,
                    labels, limit):
    """The NumPy backend's loop, on eager tensors (for diagnostics)."""
    max_steps, step_limit_error = limit
    batch = stats.batch_size
    runs = [0] * num_blocks
    active = [0] * num_blocks
    seconds = [0.0] * num_blocks
    member_blocks = np.zeros(batch, np.int64)
    steps = 0
    while True:
      pc = state[_PC].numpy()
      b = _next_block_np(pc, num_blocks, schedule)
      if b >= num_blocks:
        break
      if steps == max_steps:
        raise step_limit_error(np.flatnonzero(pc < num_blocks), b)
      mask = pc == b
      count = int(mask.sum())
      m = _Mask(tf.constant(mask), count, count == batch, batch)
      m._idx = np.flatnonzero(mask)  # pylint: disable=protected-access
      start = time.perf_counter()
      blocks[b](state, m)
      seconds[b] += time.perf_counter() - start
      member_blocks[m._idx] += 1  # pylint: disable=protected-access
      runs[b] += 1
      active[b] += count
      steps += 1
    _fill_stats(stats, labels, steps, runs, active)
    if stats.profile:
      stats.block_time.update(zip(labels, seconds))
      stats.member_blocks = member_blocks
    return state


def _switch(b, branches):
  """`tf.switch_case(b, branches)`, kept as one `Case` op outside XLA.

  By default TensorFlow lowers a `Case` in a graph to `Switch`/`Merge`
  nodes, and the executor then visits every node of every branch at each
  step (the untaken ones with dead tensors), so a step costs the size of
  the whole program.  Kept as a functional `Case`, a step runs only the
  taken block's function: fibonacci at B=1024 under `tf.function`, 0.15
  -> 0.10 s.  XLA compiles the `Case` as a conditional either way.
  """
  if _in_xla_context() or _indexed_case is None:
    return tf.switch_case(b, branches)
  return _indexed_case(b, branches, lower_using_switch_merge=False)


def _write_groups(packing, block_writes):
  """Splits the blocks into groups for XLA's step (see `_staged_loop`).

  Returns `[(members, width)]`: block indices and, per pack, the ports
  their switch returns (the most any member writes).  A step of a block
  costs its group's ports, in bytes, plus `_group_step_bytes()` per group;
  with blocks sorted by the bytes they write, the groups are the
  contiguous runs that minimize that cost summed over all blocks (each
  block counted once: which run most is not known when tracing).
  """
  row_bytes = []
  for is_stack, dtype, shape in packing.keys:
    row = shape[1:] if is_stack else shape
    row_bytes.append(int(np.prod(row, dtype=np.int64)) * dtype.size)
  widths = [packing.block_width(w) for w in block_writes]
  step_bytes = _group_step_bytes()

  def cost(width):
    return sum(r * w for r, w in zip(row_bytes, width))
  order = sorted(range(len(widths)), key=lambda k: (cost(widths[k]), k))
  n = len(order)
  # best[j]: the cheapest split of order[:j], whose last group is
  # order[cut[j]:j] with ports last_width[j].  For each end j the start i
  # goes down, so the group's ports grow by one block's writes at a time;
  # ties keep the earliest start.
  best = [0] + [None] * n
  cut = [0] * (n + 1)
  last_width = [None] * (n + 1)
  for j in range(1, n + 1):
    width = [0] * len(row_bytes)
    for i in range(j - 1, -1, -1):
      width = [max(a, b) for a, b in zip(width, widths[order[i]])]
      total = best[i] + (j - i) * cost(width) + n * step_bytes
      if best[j] is None or total <= best[j]:
        best[j], cut[j], last_width[j] = total, i, width
  groups = []
  while n:
    groups.append((tuple(order[cut[n]:n]), last_width[n]))
    n = cut[n]
  return groups[::-1]


def _group_step_bytes():
  """`_GROUP_STEP_BYTES`, or its GPU value when the run is on a GPU."""
  return _GROUP_STEP_BYTES_GPU if _on_gpu() else _GROUP_STEP_BYTES


def _guarded_group_bytes():
  """`_GUARDED_GROUP_BYTES`, or its GPU value when the run is on a GPU."""
  return _GUARDED_GROUP_BYTES_GPU if _on_gpu() else _GUARDED_GROUP_BYTES


def _on_gpu():
  """Whether ops traced here run on a GPU (a `tf.device` scope says so, or
  there is none and a GPU is visible)."""
  requested = tf.DeviceSpec.from_string(tf.constant(0).device).device_type
  if requested is None:
    return bool(tf.config.list_logical_devices('GPU'))
  return requested.upper() == 'GPU'


def _run_groups(b, mask, groups, branch_fns, packing, carried, writes):
  """XLA's step: block `b`'s group switches to it and scatters its ports.
  `writes`: each block's writes."""
  num_packs = len(packing.slots)
  if len(groups) == 1:
    return _run_group(b, mask, groups[0], branch_fns, packing, writes,
                      *carried)
  # One lookup for all groups, not one per group (each a step's thunk
  # that XLA may hand to another thread when many are ready at once, see
  # `_storage_dtype`).
  case = _group_position(b, groups)
  for group in groups:
    members, width = group
    taken = tf.reduce_any(tf.equal(b, tf.constant(members, tf.int32)))
    # The group's loop carries only what it writes: the packs its blocks
    # scatter into (and the flat slots); it reads the others from here.
    # Carrying every pack, with three groups or more and a pack no block
    # writes (gcd's unused stack), tf2xla failed to compile the run
    # ("Propagate: Cannot find body function ..._const_0").  Same speed.
    live = [g for g in range(num_packs) if width[g]] + list(
        range(num_packs, len(carried)))
    before = list(carried)

    def run(*values, before=before, live=live, group=group):
      full = list(before)
      for g, v in zip(live, values):
        full[g] = v
      out = _run_group(b, mask, group, branch_fns, packing, writes, *full,
                       case=case)
      return [out[g] for g in live]
    after = _run_once(taken, run, [carried[g] for g in live])
    carried = list(carried)
    for g, v in zip(live, after):
      carried[g] = v
  return carried


def _run_group(b, mask, group, branch_fns, packing, writes, *carried,
               case=None):
  """A group's switch to block `b` (one of its members), and the scatter
  of its ports into the packs.

  A group of one block has no switch, unless the packs it writes are
  large (`_GUARDED_GROUP_BYTES`): then its block runs in a conditional
  with a branch that writes nothing (never taken, as the group runs only
  for its block).  Inline, the block's reads of a pack and the scatter
  into it are in one computation, and XLA copied the pack there, twice
  per step (NUTS at 64 chains: a 550 KB pack of `[64, 25]` registers, at
  each first leapfrog of a transition; 1.1 MB per transition).  In a
  conditional the reads are done when the scatter runs, and XLA updates
  the pack in place.
  """
  members, width = group
  num_packs = len(packing.slots)
  if len(members) == 1:
    k = members[0]
    if packing.written_bytes(width) < _guarded_group_bytes():
      ports, flat = branch_fns[k](mask, *carried)
    else:
      ports, flat = tf.switch_case(
          tf.cast(tf.not_equal(b, k), tf.int32),
          [_bind(branch_fns[k], mask, carried),
           lambda: packing.no_ports(writes[k], width, carried)])
  else:
    if case is None:
      case = _group_position(b, [group])
    ports, flat = tf.switch_case(
        case, [_bind(branch_fns[k], mask, carried) for k in members])
  packs = packing.scatter(list(carried[:num_packs]), list(ports), width)
  return packs + list(flat)


def _group_position(b, groups):
  """Block `b`'s position among its group's members, for `groups`
  (`[(members, width)]`) that together hold it."""
  position = np.zeros(max(max(m) for m, _ in groups) + 1, np.int32)
  for members, _ in groups:
    position[list(members)] = np.arange(len(members), dtype=np.int32)
  return tf.gather(tf.constant(position), tf.minimum(b, len(position) - 1))


def _run_once(taken, fn, carried):
  """`fn(*carried)` if `taken`, else `carried`: a `while_loop` of at most
  one trip, which XLA runs in place, unlike a conditional."""

  def body(go, *values):
    del go
    return [tf.constant(False)] + list(fn(*values))
  return tf.while_loop(lambda go, *values: go, body, [taken] + list(carried),
                       maximum_iterations=1)[1:]


def _bind(f, mask, carried):
  return lambda: f(mask, *carried)


class _PackRow:
  """A stack as a block reads it outside XLA: row `row` of its pack,
  not sliced out (pops gather from the whole pack; pushes only need its
  dtype)."""
  __slots__ = ('pack', 'row')

  def __init__(self, pack, row):
    self.pack = pack
    self.row = row

  @property
  def dtype(self):
    return self.pack.dtype

  def materialize(self):
    return self.pack[self.row]


class _MaskedWrite:
  """A masked register write not yet done: `new` for the members in `m`,
  `old` for the rest (see `TensorFlowBackend.write`)."""

  def __init__(self, old, new, m):
    self.old = old
    self.new = new
    self.m = m

  def materialize(self):
    return tf.where(self.m.like(self.new.shape.as_list()), self.new,
                    _value(self.old))

  def for_members(self, m):
    """A value right in the lanes of the members in `m` (the others' do
    not matter): `new`, with no select, if this write is for them."""
    return self.new if self.m is m else self.materialize()


def _value(x):
  """`x` as a tensor: a pending masked write done, a stack sliced out."""
  return x.materialize() if isinstance(x, (_MaskedWrite, _PackRow)) else x


class _StackWrite:
  """A push not yet applied: `value[b]` goes to row `target[b]` of `base`
  for members with `target[b] >= 0`.  In the staged loop it becomes a
  scatter of `[batch, *shape]` rows after the switch; read in the block, or
  on a stack carried unpacked, it is applied here."""

  def __init__(self, base, target, value, full=False):
    self.base = base
    self.target = target
    self.value = value
    self.full = full     # every member pushes

  def materialize(self):
    if _no_elements(self.base):
      return self.base   # nothing to write (and a scatter would fail)
    rows = self.base.shape[0]
    extra = len(self.base.shape) - 2
    if extra and not _in_xla_context():
      # Outside XLA, a stack of events (`[depth + 1, batch, *event]`) takes
      # a scatter of the pushing members' rows: on CPU a select over the
      # whole stack, with the one-hot broadcast over the event, cost 4x
      # more (NUTS's [11, 64, 25] stacks), and a scatter costs per row.
      batch = self.target.shape[0]
      if self.full:
        index = tf.stack([self.target, tf.range(batch, dtype=tf.int32)],
                         axis=-1)
        return tf.tensor_scatter_nd_update(self.base, index, self.value)
      members = tf.reshape(tf.where(self.target >= 0), [-1])
      index = tf.stack([tf.gather(self.target, members),
                        tf.cast(members, tf.int32)], axis=-1)
      return tf.tensor_scatter_nd_update(self.base, index,
                                         tf.gather(self.value, members))
    # Under XLA, and outside it for a stack of scalars, a select with the
    # one-hot of the targets.  There the scatter, which copies its input
    # (it is not forwarded in a `Case` branch), was slower: fibonacci at
    # B=1024 under `tf.function`, 1.00-1.13x faster with the select (A/B
    # runs in one process), NUTS and tree-RNN 0.98-1.05x.
    return tf.where(_hot(rows, self.target, extra), self.value[tf.newaxis],
                    self.base)


def _hot(rows, target, extra=0):
  """`[..., rows, batch, 1 * extra]` for targets `[..., batch]`: whether
  each row is the member's target."""
  hot = tf.equal(tf.range(rows, dtype=tf.int32)[:, tf.newaxis],
                 target[..., tf.newaxis, :])
  if extra:
    hot = tf.reshape(hot, hot.shape.as_list() + [1] * extra)
  return hot


class _Packing:
  """The VM state packed into one tensor per (kind, dtype, shape) (several
  outside XLA, where each pack is kept below `max_bytes`).

  Pack g stacks its slots' tensors `[len(slots) + 1, *shape]`; the last row
  is scratch.  A block's writes become ports, per pack, which are scattered
  into the packs: in its branch outside XLA, after its group's switch under
  XLA (there a block's ports are padded, with writes to the scratch row, to
  the most any block of its group writes in that pack):
  - a register pack's port is (values `[K, *shape]`, rows `[K]`);
  - a stack pack's port is a push (values `[K, batch, *event]`, rows `[K]`,
    targets `[K, batch]`): only the pushed members' frames are written.

  Outside XLA a scatter copies its pack: a `Case` branch cannot update a
  tensor it was passed, nor can a scatter in the loop body (the loop keeps
  a reference).  For a stack pack of `inplace_bytes` or more (NUTS at 64
  chains: a 900 KB pack of the saved subtree's nine `[8, 64, 25]` stacks,
  copied at every push, 6% of a call) the branch returns the push instead,
  as flat row indices and rows, and the loop body writes those rows in
  place (`_update_rows`) after the switch.  That is safe because the pack
  is private to the loop: it starts as a fresh buffer (`_private_copy`),
  every read of it in a block is a gather, which copies, so no alias
  escapes, and the write follows the switch, whose block has then done
  all its reads.  Gradients only ever need the pack's shape, never its
  values (gathers' and pushes' gradients), so a loop that is
  differentiated stays correct.
  """

  def __init__(self, state, stack_slots, packed, max_bytes=None,
               writers=None, inplace_bytes=None):
    groups = collections.OrderedDict()
    chunk = collections.Counter()   # per (kind, dtype, shape): packs full
    self.flat = []                  # slots carried as they are
    # Under XLA values of one width share a pack (`_storage_dtype`); each
    # slot's own dtype is kept to read it back.
    self.dtypes = [x.dtype for x in state]
    merge = writers is None
    for slot, x in enumerate(state):
      if slot not in packed:
        self.flat.append(slot)
        continue
      stored = _storage_dtype(x.dtype) if merge else x.dtype
      kind = (slot in stack_slots, stored, tuple(x.shape.as_list()))
      size = x.shape.num_elements() * x.dtype.size
      if writers is not None and (
          size >= _SIGNATURE_BYTES if slot not in stack_slots
          else 2 * size > max_bytes):
        # With the registers the same blocks write (`_SIGNATURE_BYTES`),
        # or the stacks the same blocks push: a block writes all or none.
        groups.setdefault(kind + (frozenset(writers[slot]),), []).append(
            slot)
        continue
      key = kind + (chunk[kind],)
      if max_bytes is not None and key in groups:
        # A scatter copies its whole pack outside XLA: keep packs small.
        if (len(groups[key]) + 2) * size > max_bytes:
          chunk[kind] += 1
          key = kind + (chunk[kind],)
      groups.setdefault(key, []).append(slot)
    # Outside XLA a block writing every row of a pack builds it anew; XLA
    # updates packs in place.
    self.rewrite = writers is not None
    if self.rewrite:
      # A pack of one slot is carried as the slot itself: no unstack to
      # read it, no stack to write it (fibonacci at B=1024, where every
      # `[1024]` register is large enough to go by its writers, had 13
      # such nodes in a 45-node block: 1.1-1.2x faster without).
      # Except a stack to push in place: that is done to packs only.
      for key in [k for k, slots in groups.items() if len(slots) == 1]:
        if not (key[0] and
                _nbytes(key[1], key[2]) >= (inplace_bytes or np.inf)):
          self.flat.append(groups.pop(key)[0])
    self.flat_index = {s: i for i, s in enumerate(self.flat)}
    self.keys = [key[:3] for key in groups]
    self.slots = list(groups.values())
    # Under XLA a pack's last row is scratch: for a padded port or a member
    # that does not push.  Outside XLA ports are not padded, and only the
    # members that push are scattered: no scratch row.
    self.scratch = not self.rewrite
    self.inplace = []   # stack packs pushed in place, in order
    if inplace_bytes is not None and self.rewrite:
      for g, (key, slots) in enumerate(zip(self.keys, self.slots)):
        is_stack, dtype, shape = key
        if (is_stack and
            len(slots) * _nbytes(dtype, shape) >= inplace_bytes):
          self.inplace.append(g)
    self.where = {}
    for g, slots in enumerate(self.slots):
      for row, slot in enumerate(slots):
        self.where[slot] = (g, row)
    self.size = len(state)

  def stored(self, slot, x):
    """`x`, a value of `slot`, as its pack holds it."""
    if slot not in self.where:
      return x
    dtype = self.keys[self.where[slot][0]][1]
    x = tf.convert_to_tensor(x)
    if x.dtype == dtype:
      return x
    return tf.cast(x, dtype) if x.dtype == tf.bool else tf.bitcast(x, dtype)

  def _loaded(self, slot, x):
    """`x`, read from `slot`'s pack, as the slot's own dtype."""
    dtype = self.dtypes[slot]
    if x.dtype == dtype:
      return x
    return tf.not_equal(x, 0) if dtype == tf.bool else tf.bitcast(x, dtype)

  def carry(self, state):
    """The loop variables: the packs, then the flat slots."""
    packs = []
    for slots in self.slots:
      rows = [self.stored(s, state[s]) for s in slots]
      packs.append(tf.stack(rows + [tf.zeros_like(rows[0])] * self.scratch))
    for g in self.inplace:
      packs[g] = _private_copy(packs[g], [state[s] for s in self.slots[g]])
    return packs + [state[s] for s in self.flat]

  def read(self, carried, slot, rows=None):
    """The slot's value; `rows`, a dict, caches packs unstacked (outside
    XLA: one node per pack instead of a slice per register)."""
    if slot in self.where:
      g, row = self.where[slot]
      if rows is None or not self.rewrite:
        return self._loaded(slot, carried[g][row])
      if self.keys[g][0]:
        # A stack: popped by a gather over its whole pack (`peek`).
        return _PackRow(carried[g], row)
      unstacked = rows.get(g)
      if unstacked is None:
        unstacked = rows[g] = tf.unstack(carried[g])
      return unstacked[row]
    return carried[len(self.slots) + self.flat_index[slot]]

  def unpack(self, carried):
    state = [None] * self.size
    for slots, pack in zip(self.slots, carried):
      for slot, x in zip(slots, tf.unstack(pack)):
        state[slot] = self._loaded(slot, x)
    for slot, x in zip(self.flat, carried[len(self.slots):]):
      state[slot] = x
    return state

  def flat_values(self, st):
    """The flat slots' values at the end of a block (pushes applied)."""
    out = []
    for slot in self.flat:
      value = st.written(slot)
      if isinstance(value, _StackWrite):
        value = value.materialize()
      out.append(tf.convert_to_tensor(value))
    return out

  def block_width(self, writes):
    """Per pack, how many of its slots a block with `writes` writes."""
    counts = collections.Counter(self.where[s][0] for s in writes
                                 if s in self.where)
    return [counts[g] for g in range(len(self.slots))]

  def carried_after(self, st, writes, carried):
    """All loop variables after a block, scattered in its branch: only the
    packs the block writes are touched (outside XLA, where a scatter
    copies its pack and passing a tensor through a `Case` is free)."""
    width = self.block_width(writes)
    copied = [0 if g in self.inplace else k for g, k in enumerate(width)]
    packs = self.scatter(list(carried[:len(self.slots)]),
                         self.ports(st, writes, copied, carried), copied)
    in_place = [k if g in self.inplace else 0 for g, k in enumerate(width)]
    pushes = iter(self.ports(st, writes, in_place))
    updates = []
    for g in self.inplace:
      updates.extend(self._flat_push(g, next(pushes)) if width[g]
                     else self._no_push(g))
    kept = [p for g, p in enumerate(packs) if g not in self.inplace]
    return kept + self.flat_values(st) + updates

  def after_switch(self, carried, outputs):
    """The loop variables after a step, from those before and the switch's
    `outputs` (`carried_after`'s): the in-place pushes are applied here."""
    outputs = list(outputs)
    if not self.inplace:
      return outputs
    num_packs = len(self.slots)
    kept = num_packs - len(self.inplace)
    updates = outputs[len(outputs) - 2 * len(self.inplace):]
    rest = iter(outputs[:kept])
    packs = []
    for g in range(num_packs):
      if g in self.inplace:
        k = self.inplace.index(g)
        index, rows = updates[2 * k], updates[2 * k + 1]
        pack = carried[g]
        row_shape = pack.shape.as_list()[3:]
        flat = tf.reshape(pack, [-1] + row_shape)
        packs.append(tf.reshape(_update_rows(flat, index, rows),
                                tf.shape(pack)))
      else:
        packs.append(next(rest))
    return packs + outputs[kept:len(outputs) - len(updates)]

  def _flat_push(self, g, port):
    """Pack g's push as (flat row indices `[n]`, rows `[n, *event]`) of
    the pack seen as `[slots * (depth + 1) * batch, *event]`."""
    values, rows, targets, full = port
    _, dtype, shape = self.keys[g]
    frames, batch, event = shape[0], shape[1], list(shape[2:])
    members = tf.range(batch, dtype=tf.int32)
    if full:
      # Every member pushes: every target is a frame.
      index = (rows * frames + targets) * batch + members
      return [tf.reshape(index, [-1]), tf.reshape(values, [-1] + event)]
    row, frame, member, pushed = _pushing_members(values, rows, targets)
    return [(row * frames + frame) * batch + member, pushed]

  def _no_push(self, g):
    _, dtype, shape = self.keys[g]
    return [tf.zeros([0], tf.int32), tf.zeros([0] + list(shape[2:]), dtype)]

  def ports(self, st, writes, width, carried=None):
    """The values of `writes`, per pack: `width[g]` ports for pack g.

    Few graph nodes: a pack the block does not write gets constants only.
    """
    out = []
    for g, k in enumerate(width):
      if not k:
        continue
      is_stack, dtype, shape = self.keys[g]
      slots = self._port_slots(writes, g)
      pad = k - len(slots)
      rows = tf.constant(np.reshape(self._port_rows(g, slots, k), [k, 1]),
                         tf.int32)
      if not is_stack:
        values = _masked_rows([st.written(s, masked=not self.scratch)
                               for s in slots],
                              carried[g] if k == len(self.slots[g]) and
                              carried is not None else None,
                              [functools.partial(self.stored, s)
                               for s in slots])
        if values is None:
          values = _stack_padded([self.stored(s, st.written(s))
                                  for s in slots], pad, shape, dtype)
        out.append((values, rows))
        continue
      pushes = [st.written(s) for s in slots]
      if not all(isinstance(w, _StackWrite) for w in pushes):
        raise errors.InternalError('a stack was written other than by a '
                                   'push')
      batch = shape[1]
      values = _stack_padded([self.stored(s, w.value)
                              for s, w in zip(slots, pushes)], pad,
                             shape[1:], dtype)
      targets = _stack_padded([w.target for w in pushes], pad, [batch],
                              tf.int32, fill=-1)
      # Outside XLA (scattered in the branch): whether every member pushes.
      full = () if self.scratch else (all(w.full for w in pushes),)
      out.append((values, rows, targets) + full)
    return out

  def written_bytes(self, width):
    """The bytes of the packs that ports of `width` scatter into."""
    return sum(_nbytes(self.keys[g][1], self.keys[g][2]) *
               (len(self.slots[g]) + self.scratch)
               for g, k in enumerate(width) if k)

  def no_ports(self, writes, width, carried):
    """What a branch returns for a block with `writes` in a group of
    `width` (under XLA): `(ports, flat)` shaped as `ports` and
    `flat_values` make them, but leaving the state as it is: each register
    row written with its own value, no member pushing, the flat slots
    passed through."""
    out = []
    for g, k in enumerate(width):
      if not k:
        continue
      is_stack, dtype, shape = self.keys[g]
      rows = self._port_rows(g, self._port_slots(writes, g), k)
      index = tf.constant(np.reshape(rows, [k, 1]), tf.int32)
      if is_stack:
        out.append((tf.zeros([k] + list(shape[1:]), dtype), index,
                    tf.fill([k, shape[1]], tf.constant(-1, tf.int32))))
      else:
        out.append((tf.gather(carried[g], rows), index))
    num_packs = len(self.slots)
    return out, [carried[num_packs + i] for i in range(len(self.flat))]

  def _port_slots(self, writes, g):
    """The slots of pack g among `writes`, in the pack's order."""
    return sorted(s for s in writes
                  if s in self.where and self.where[s][0] == g)

  def _port_rows(self, g, slots, k):
    """Pack g's rows of `slots` (`_port_slots`), then the scratch row up
    to `k` ports."""
    return ([self.where[s][1] for s in slots] +
            [len(self.slots[g])] * (k - len(slots)))

  def scatter(self, packs, ports, width):
    it = iter(ports)
    for g, k in enumerate(width):
      if not k:
        continue
      if _no_elements(packs[g]):
        next(it)   # nothing to write (and a scatter would fail)
        continue
      if not self.keys[g][0]:
        values, rows = next(it)
        if k == len(self.slots[g]) and not self.scratch:
          # Every row (rows are in order): a new pack, no copy of the old.
          packs[g] = values
        else:
          packs[g] = tf.tensor_scatter_nd_update(packs[g], rows, values)
        continue
      values, rows, targets, *full = next(it)
      batch = self.keys[g][2][1]
      if (not self.scratch and k == len(self.slots[g])
          and len(self.keys[g][2]) == 2):
        # Outside XLA, pushes on every stack of a pack of scalar stacks:
        # a select with the targets' one-hot (see `_StackWrite`).
        packs[g] = tf.where(_hot(self.keys[g][2][0], targets),
                            values[:, tf.newaxis], packs[g])
        continue
      members = np.broadcast_to(np.arange(batch, dtype=np.int32), [k, batch])
      if self.scratch and self.keys[g][2][0] <= _select_push_frames():
        # XLA that expands a scatter into a loop: a select per port.
        packs[g] = _select_push(packs[g], values, rows, targets)
        continue
      if self.scratch:
        # Members that do not push write frame 0 of the scratch stack.
        index = tf.stack([
            tf.where(targets >= 0, rows, len(self.slots[g])),
            tf.maximum(targets, 0), tf.constant(members)], axis=-1)
      elif full[0]:
        # Outside XLA, every member pushes: every target is a frame.
        index = tf.stack([tf.broadcast_to(rows, [k, batch]), targets,
                          tf.constant(members)], axis=-1)
      else:
        # Outside XLA a scatter costs per row: only the pushing members'.
        row, frame, member, values = _pushing_members(values, rows, targets)
        index = tf.stack([row, frame, member], axis=-1)
      packs[g] = tf.tensor_scatter_nd_update(packs[g], index, values)
    return packs


def _select_push(pack, values, rows, targets):
  """Under XLA, `pack` (`[slots + 1, frames, batch, *event]`) with the
  ports' pushes (values `[K, batch, *event]`, rows `[K, 1]`, targets
  `[K, batch]`, -1 for a member that does not push), written by a select
  over each port's stack: one pass over `frames * batch` elements, where
  the scatter is `batch` trips of a loop (see `_select_push_frames`)."""
  shape = pack.shape.as_list()
  frames, extra = shape[1], len(shape) - 3
  frame = tf.reshape(tf.range(frames, dtype=tf.int32), [frames, 1])
  for j in range(values.shape[0]):
    row = rows[j, 0]
    hot = tf.equal(frame, targets[j][tf.newaxis])
    if extra:
      hot = tf.reshape(hot, [frames, shape[2]] + [1] * extra)
    new = tf.where(hot, values[j][tf.newaxis], pack[row])
    pack = tf.tensor_scatter_nd_update(pack, tf.reshape(row, [1, 1]),
                                       new[tf.newaxis])
  return pack


@functools.lru_cache(maxsize=None)
def _xla_cpu_expands_scatter():
  """Whether XLA on this CPU compiles a scatter as a loop with a trip per
  index (TensorFlow 2.18 and older: a push of `batch` members is `batch`
  trips, each a few dozen nanoseconds, at every step) rather than as one
  kernel (TensorFlow 2.21).  Found by compiling a small scatter once."""
  with tf.init_scope(), tf.device('/device:CPU:0'):
    probe = tf.function(
        lambda x, i: tf.tensor_scatter_nd_update(x, i, tf.ones([2], x.dtype)),
        jit_compile=True, autograph=False)
    args = (tf.zeros([8], tf.float32), tf.constant([[1], [5]], tf.int32))
    try:
      hlo = probe.experimental_get_compiler_ir(*args)(stage='optimized_hlo')
    except Exception:  # pylint: disable=broad-except
      return False   # cannot tell: keep the scatter
  return ' scatter(' not in hlo


def _select_push_frames():
  """Under XLA, stacks of at most this many frames (capacity + 1) are
  pushed by a select (`_select_push`) instead of a scatter: only where
  XLA expands scatters into loops (`_xla_cpu_expands_scatter`), and not
  on a GPU."""
  if _on_gpu() or not _xla_cpu_expands_scatter():
    return 0
  return _SELECT_PUSH_FRAMES


def _pushing_members(values, rows, targets):
  """A push's frames of the members that push (those with a target), as
  (pack rows, frames, members), each `[n]`, and their values
  `[n, *event]`; from a stack port (values `[K, batch, *event]`, rows
  `[K, 1]`, targets `[K, batch]`)."""
  hit = tf.where(targets >= 0)    # [n, 2]: (port, member)
  port, member = tf.unstack(tf.cast(hit, tf.int32), axis=1)
  return (tf.gather(rows[:, 0], port), tf.gather_nd(targets, hit), member,
          tf.gather_nd(values, hit))


def _no_elements(x):
  """Whether `x` has a dimension known to be 0: it holds nothing, and
  TensorFlow's gathers and scatters fail on it (a register `[batch, 0]`)."""
  shape = x.shape
  return shape.rank is not None and 0 in shape.as_list()


def _nbytes(dtype, shape):
  return int(np.prod(shape, dtype=np.int64)) * dtype.size


@tf.custom_gradient
def _update_rows(x, index, rows):
  """`x` with rows `index` (distinct) set to `rows`, written in place:
  only for a buffer no one else holds (see `_Packing`)."""
  y = tf.raw_ops.InplaceUpdate(x=x, i=index, v=rows)

  def grad(dy):
    d_rows = tf.gather(dy, index)
    dx = tf.tensor_scatter_nd_update(dy, index[:, tf.newaxis],
                                     tf.zeros_like(d_rows))
    return dx, None, d_rows
  return y, grad


def _private_copy(x, parts):
  """A copy of `x` (which stacks `parts`) in a buffer of its own, fresh
  at every run (`Empty` is stateful: never constant-folded nor shared),
  for `_update_rows`.  Stacks start empty: then the buffer is only zeroed."""
  if all(_is_zeros(p) for p in parts):
    return tf.raw_ops.Empty(shape=tf.shape(x), dtype=x.dtype, init=True)
  buffer = tf.raw_ops.Empty(shape=tf.shape(x), dtype=x.dtype, init=False)
  return _update_rows(buffer, tf.range(tf.shape(x)[0]), x)


def _is_zeros(x):
  """Whether `x` is known, when tracing, to be all zeros."""
  if x.op.type not in ('Const', 'Fill', 'ZerosLike'):
    return False
  value = tf.get_static_value(x)
  return value is not None and not np.any(value)


def _storage_dtype(dtype):
  """The dtype a pack stores `dtype` values as under XLA.

  Integers of one width share packs as unsigned integers (bitcast, so
  every value round-trips), booleans with the 4-byte ones (cast); floats
  keep their own, as a bitcast has no gradient.  A step writes fewer
  packs: NUTS had int32 and bool registers and stacks, and int64 and
  uint64 ones, in separate packs.  Each pack a step writes is a scatter,
  and its loops carry one more value; XLA on CPU runs a step as many
  small thunks and hands part of them to another thread when more than
  eight are ready at once, which costs more than the thunks themselves.
  NUTS-like steps on a cheap target (a 25-dimensional Gaussian, 64
  chains, 1225 steps per call): 9% faster; NUTS on the logistic
  regression at 64 chains, where gradients dominate: 0.7%.
  """
  if dtype in (tf.int64, tf.uint64):
    return tf.uint64
  if dtype in (tf.int32, tf.uint32, tf.bool):
    return tf.uint32
  return dtype


def _masked_rows(writes, old_pack, stored):
  """Stacked values of a pack's `writes` (the pack's rows in order), if
  they are all masked writes with one mask: one select over the stacked
  new values and the old ones (the whole `old_pack` when every row is
  written).  None otherwise.  `stored`: per write, its value as the pack
  holds it."""
  if not writes or not all(isinstance(w, _MaskedWrite) for w in writes):
    return None
  m = writes[0].m
  if any(w.m is not m for w in writes):
    return None
  new = tf.stack([f(w.new) for f, w in zip(stored, writes)])
  old = old_pack if old_pack is not None else tf.stack(
      [f(_value(w.old)) for f, w in zip(stored, writes)])
  return tf.where(m.like_rows(len(writes), new.shape.as_list()[1:]), new,
                  old)


def _stack_padded(values, pad, shape, dtype, fill=0):
  """`tf.stack(values)` followed by `pad` rows of `fill`."""
  filler = tf.constant(np.full([pad] + list(shape), fill,
                               dtype.as_numpy_dtype)) if pad else None
  if not values:
    return filler
  stacked = tf.stack(values)
  return stacked if filler is None else tf.concat([stacked, filler], 0)


class _BlockState:
  """The state as a block sees it inside a branch: reads slice the packs,
  writes are kept (and must be among the block's declared writes)."""

  def __init__(self, carried, packing, writes):
    self._carried = carried
    self._packing = packing
    self._writes = writes
    self._values = {}
    self._rows = {}

  def __getitem__(self, slot):
    value = self._values.get(slot)
    if value is None:
      value = self._values[slot] = self._packing.read(self._carried, slot,
                                                      self._rows)
    if isinstance(value, _StackWrite):
      raise errors.InternalError('a block read a stack after pushing it')
    # A masked write stays pending: the backend's `sanitize`, `push` and
    # `write` take it as it is, or do it (`_value`).
    return value

  def written(self, slot, masked=False):
    """The slot's value at the end of the block (a push stays pending;
    so does a masked write, if `masked`)."""
    value = self._values.get(slot)
    if value is None:
      value = self._packing.read(self._carried, slot, self._rows)
    if isinstance(value, _MaskedWrite) and not masked:
      value = self._values[slot] = value.materialize()
    return value

  def __setitem__(self, slot, value):
    if slot not in self._writes:
      raise errors.InternalError(
          f'a block wrote state slot {slot} outside its declared writes')
    if isinstance(self._values.get(slot), _StackWrite):
      raise errors.InternalError('a block pushed the same stack twice')
    self._values[slot] = value


def _fill_stats(stats, labels, steps, runs, active):
  stats.steps = steps
  for label, r, a in zip(labels, runs, active):
    stats.block_executions[label] = r
    stats.block_active[label] = a


def _next_block_np(pc, num_blocks, schedule):
  if schedule == 'most':
    counts = np.bincount(np.minimum(pc, num_blocks),
                         minlength=num_blocks + 1)[:num_blocks]
    best = int(counts.argmax())
    return best if counts[best] else num_blocks
  return int(pc.min())


# Under XLA the 'most' schedule counts members per block by a [batch,
# blocks] comparison up to this many elements (fib at 1024 members: 15%
# faster than a segment sum), and by a segment sum beyond.
_ONE_HOT_MAX = 1 << 18


# While not empty, `_staged_loop`s traced run, at every step, the block
# whose index the last of these int32 `tf.Variable`s holds (the schedule
# is not consulted).  See `StagedFunction.profile_blocks`.
_FORCED_BLOCK = []


def _next_block_tf(pc, num_blocks, schedule):
  if schedule == 'most':
    xla = _in_xla_context()
    if not xla:
      # One kernel, no broadcast: in a loop on CPU, 16 -> 10 us per step
      # at 1024 members (the broadcast comparison), 7 -> 5 at 64.  Finished
      # and parked members (pc >= num_blocks) count nowhere.
      counts = tf.reduce_sum(tf.one_hot(pc, num_blocks, dtype=tf.int32),
                             axis=0)
    elif (pc.shape[0] is not None and
          pc.shape[0] * num_blocks <= _ONE_HOT_MAX):
      # Compare-and-sum fuses into one loop; a segment sum is a scatter.
      # Summed along the members, the minor axis: XLA of TensorFlow 2.18
      # on CPU took 14 us per step at 1024 members for a sum along the
      # major axis, 5 us for this one (2.21: 3 us either way).
      hits = tf.equal(tf.range(num_blocks, dtype=pc.dtype)[:, tf.newaxis],
                      pc[tf.newaxis])
      counts = tf.reduce_sum(tf.cast(hits, tf.int32), axis=1)
    else:
      counts = tf.math.unsorted_segment_sum(
          tf.ones_like(pc), tf.minimum(pc, num_blocks), num_blocks + 1)
      counts = counts[:num_blocks]
    if xla:
      return _most_by_key(counts, num_blocks, pc.shape[0])
    best = tf.argmax(counts, output_type=tf.int32)
    return tf.where(tf.reduce_max(counts) > 0, best,
                    tf.constant(num_blocks, tf.int32))
  return tf.reduce_min(pc)


def _most_by_key(counts, num_blocks, batch):
  """Under XLA, the lowest-numbered block with the most members (or
  `num_blocks` if none has any) by one max over `count * K + K - 1 - k`
  (K = num_blocks) instead of an argmax (a two-valued reduction) and a
  max: NUTS at 64 chains, 5.5 -> 4.5 us per step of the schedule (forced
  steps with and without it, in turns)."""
  k = num_blocks
  wide = batch is None or (batch + 1) * k >= 2**31
  dtype = tf.int64 if wide else tf.int32
  key = (tf.cast(counts, dtype) * k +
         tf.range(k - 1, -1, -1, dtype=dtype))
  top = tf.reduce_max(key)
  best = tf.cast((k - 1) - top % k, tf.int32)
  return tf.where(top >= k, best, tf.constant(num_blocks, tf.int32))


def traceable(fn, name=None):
  """`fn` as the Python function of a `tf.function` of its own: a
  `functools.partial` of it, named `name` (default: `fn`'s name), the
  name of the traced graphs and of TensorFlow's messages.

  TensorFlow counts a `tf.function`'s traces by its Python function's
  code (`__code__`) and warns of "excessive retracing" after five traces
  in a row.  All the closures made by one `def` share their code, so each
  `tf.function` over such a closure (one per staged function, per program
  run eagerly, per sampler of the NUTS example) added to one count:
  staging five functions, each traced once, warned.  A partial has no
  code and is counted on its own, so the warning keeps its meaning: one
  function traced for five signatures in a row.
  """
  out = _Traceable(fn)
  out.__name__ = name or getattr(fn, '__name__', 'function')
  return out


class _Traceable(functools.partial):
  """`traceable`'s partial, shown by its name in TensorFlow's messages
  ("... calls to <function fibonacci> triggered tf.function retracing")."""

  def __repr__(self):
    return f'<function {self.__name__}>'


# -- the eager path's cache of staged loops --------------------------------------

class _StagedRun:
  """A `tf.function` running one compiled program's loop, and its sites."""

  def __init__(self, backend, blocks, num_blocks, schedule, batch, limit):
    self.blocks = blocks      # keeps id(blocks) unique while cached
    self.sites = None
    self.stageable = True

    def loop(state):
      self.sites = _Sites(num_blocks)
      out, acc, _ = backend._staged_loop(  # pylint: disable=protected-access
          blocks, state, num_blocks, schedule, batch, self.sites, limit)
      return out, acc
    # One tf.function per program, each traced once per batch size: counted
    # alone (`traceable`).
    self.function = tf.function(traceable(loop), autograph=False)

  def __call__(self, state):
    return self.function(list(state))


_eager_cache = collections.OrderedDict()
_eager_lock = threading.Lock()


def _eager_cache_get(backend, blocks, num_blocks, schedule, batch, limit):
  key = (id(blocks), backend, schedule, limit[0])
  with _eager_lock:
    entry = _eager_cache.get(key)
    if entry is not None and entry.blocks is blocks:
      _eager_cache.move_to_end(key)
      return entry
    entry = _StagedRun(backend, blocks, num_blocks, schedule, batch, limit)
    _eager_cache[key] = entry
    while len(_eager_cache) > _EAGER_CACHE_SIZE:
      _eager_cache.popitem(last=False)
    return entry
