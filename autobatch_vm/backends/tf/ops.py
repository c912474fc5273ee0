"""Tensor ops of a staged step: pending writes and in-place updates.

A block's register writes and pushes stay pending (`MaskedWrite`,
`StackWrite`) until the step knows how to apply them: one select per pack,
a scatter of ports after the switch, or an in-place update.
"""

import functools
import os
import re

import numpy as np
import tensorflow as tf

from autobatch_vm.backends.tf import masks

__all__ = ['PackRow', 'MaskedWrite', 'value', 'StackWrite', 'hot',
           'window_push', 'xla_cpu_expands_scatter', 'pushing_members',
           'no_elements', 'nbytes', 'update_rows', 'private_copy',
           'storage_dtype', 'stack']


class PackRow:
  """A stack as a block reads it outside XLA: row `row` of its pack.

  Not sliced out: pops gather from the whole pack, pushes only need its
  dtype.

  Args:
    pack: The pack tensor.
    row: The stack's row in it.
  """
  __slots__ = ('pack', 'row')

  def __init__(self, pack, row):
    self.pack = pack
    self.row = row

  @property
  def dtype(self):
    """The stack's dtype (the pack's)."""
    return self.pack.dtype

  def materialize(self):
    """The stack, sliced out of its pack."""
    return self.pack[self.row]


class MaskedWrite:
  """A masked register write not yet done (see `TensorFlowBackend.write`).

  Args:
    old: The register's value for the members not in `m`.
    new: Its value for the members in `m`.
    m: The `masks.Mask`.
  """

  def __init__(self, old, new, m):
    self.old = old
    self.new = new
    self.m = m

  def materialize(self):
    """The write done: one select."""
    return self.m.select(self.new, value(self.old))

  def for_members(self, m):
    """A value right in the lanes of the members in `m`.

    The others' lanes do not matter: `new`, with no select, if this write
    is for them.

    Args:
      m: A `masks.Mask`.

    Returns:
      The tensor.
    """
    return self.new if self.m is m else self.materialize()


def value(x):
  """`x` as a tensor: a pending masked write done, a stack sliced out.

  Args:
    x: A tensor, `MaskedWrite` or `PackRow`.

  Returns:
    The tensor.
  """
  return x.materialize() if isinstance(x, (MaskedWrite, PackRow)) else x


class StackWrite:
  """A push not yet applied.

  `value[b]` goes to row `target[b]` of `base` for members with
  `target[b] >= 0`.  In the staged loop it becomes a scatter of
  `[batch, *shape]` rows after the switch; read in the block, or on a
  stack carried unpacked, it is applied by `materialize`.

  Args:
    base: The stack.
    target: The frame of each member, -1 for none.
    value: The values pushed, `[batch, *shape]`.
    full: Whether every member pushes.
  """

  def __init__(self, base, target, value, full=False):
    self.base = base
    self.target = target
    self.value = value
    self.full = full     # every member pushes

  def materialize(self):
    """The stack after the push."""
    if no_elements(self.base):
      return self.base   # nothing to write (and a scatter would fail)
    rows = self.base.shape[0]
    extra = len(self.base.shape) - 2
    if extra and not masks.in_xla_context():
      # Outside XLA, a stack of events (`[depth + 1, batch, *event]`) takes
      # a scatter of the pushing members' rows: on CPU a select over the
      # whole stack, with the one-hot broadcast over the event, cost 4x
      # more (NUTS's [11, 64, 25] stacks), and a scatter costs per row.
      batch = self.target.shape[0]
      if self.full:
        if batch is None:   # a batch axis of unknown size
          axis = masks.batch_axis()
          members = (tf.range(tf.shape(self.target)[0]) if axis is None
                     else axis.members)
        else:
          members = tf.range(batch, dtype=tf.int32)
        index = tf.stack([self.target, members], axis=-1)
        return tf.tensor_scatter_nd_update(self.base, index, self.value)
      members = tf.reshape(tf.where(self.target >= 0), [-1])
      index = tf.stack([tf.gather(self.target, members),
                        tf.cast(members, tf.int32)], axis=-1)
      return tf.tensor_scatter_nd_update(self.base, index,
                                         tf.gather(self.value, members))
    # Under XLA, and outside it for a stack of scalars, a select with the
    # one-hot of the targets.  There the scatter, which copies its input
    # (it is not forwarded in a `Case` branch), costs more
    # (docs/performance.md).
    return tf.where(hot(rows, self.target, extra), self.value[tf.newaxis],
                    self.base)


def hot(rows, target, extra=0):
  """Whether each row is the member's target.

  Args:
    rows: The stack's frames.
    target: The targets, `[..., batch]`.
    extra: Trailing dimensions of size 1 to add (for events).

  Returns:
    A bool tensor `[..., rows, batch, 1 * extra]`.
  """
  hot = tf.equal(tf.range(rows, dtype=tf.int32)[:, tf.newaxis],
                 target[..., tf.newaxis, :])
  if extra:
    shape = hot.shape.as_list()
    hot = tf.reshape(hot, shape + [1] * extra if None not in shape else
                     tf.concat([tf.shape(hot), [1] * extra], 0))
  return hot


def window_frames(shape, dtype, window, window_bytes):
  """The frames of a push window (`window_push`) in a pack of stacks.

  At most `window` frames, and at most `window_bytes` (at least one
  frame): a window is read and written whole at each trip, so a frame of
  wide rows (NUTS's `[chains, 50]` states) costs its bytes there however
  few members push to it.

  Args:
    shape: The pack's shape, `[slots + 1, frames, batch, *event]`.
    dtype: The pack's dtype.
    window: The most frames (the knob `push_window_frames`).
    window_bytes: The most bytes (the knob `push_window_bytes`).

  Returns:
    The frames, at most the stack's.
  """
  # XLA plans a run for its batch size: a batch axis of unknown size
  # (never seen under XLA) counts as one member.
  frame_bytes = nbytes(dtype, [1 if d is None else d for d in shape[2:]])
  return max(1, min(shape[1], window, window_bytes // max(frame_bytes, 1)))


def window_push(pack, values, rows, targets, window):
  """Under XLA, a pack with the ports' pushes written by selects.

  Selects with the targets' one-hot, where a scatter would be `batch`
  trips of a loop (see `packing.Packing.push_window`).  Stacks of at most
  `window` frames take one select over each port's stack.  Deeper ones
  take one loop for all the ports over windows of `window` frames: each
  trip selects, in each port's stack, over the window from the lowest
  frame that a member still pushes to in any port, so the pushes cost the
  spread of their frames, not the stacks' capacity (one trip where they
  lie within a window, as one push instruction's do; none where no
  member pushes).  Windows are read and written as XLA's dynamic slices,
  in place.

  Args:
    pack: The pack, `[slots + 1, frames, batch, *event]`.
    values: The pushed values, `[K, batch, *event]`.
    rows: The ports' stacks in the pack, `[K, 1]`.
    targets: The members' frames, `[K, batch]` (-1: no push).
    window: The frames a select covers (`window_frames`).

  Returns:
    The pack after the pushes.
  """
  shape = pack.shape.as_list()
  frames, extra = shape[1], len(shape) - 3
  window = min(frames, window)
  frame = tf.reshape(tf.range(window, dtype=tf.int32), [window, 1])
  zeros = [0] * (len(shape) - 2)

  def write(pack, done):
    """The pushes to frames `done` and above, from the lowest one, in a
    window (the last window of the stacks, if that one is higher); and
    the frame above the window."""
    lowest = tf.reduce_min(tf.where(targets >= done, targets, frames))
    start = tf.minimum(lowest, frames - window)
    for j in range(values.shape[0]):
      begin = tf.stack([rows[j, 0], start] + zeros)
      old = _dynamic_slice(pack, begin, [1, window] + shape[2:])
      hot = tf.equal(frame + start, targets[j][tf.newaxis])
      if extra:
        hot = tf.reshape(hot, [window, shape[2]] + [1] * extra)
      new = tf.where(hot, values[j][tf.newaxis], old[0])
      pack = _update_slice(pack, new[tf.newaxis], begin)
    return pack, start + window

  zero = tf.constant(0, tf.int32)
  if window == frames:
    return write(pack, zero)[0]
  # A trip writes at least the lowest frame left and every push up to
  # `window` frames above it: at most `frames / window` trips.  One loop
  # for all the ports: NUTS's push of nine `[chains, 50]` stacks (one
  # frame a window) takes 0.88x the CPU of a loop per port at 64 chains
  # (docs/performance.md).
  return tf.while_loop(
      lambda pack, done: tf.reduce_any(targets >= done), write,
      [pack, zero], maximum_iterations=-(-frames // window))[0]


def _dynamic_slice(x, begin, size):
  """XLA's dynamic-slice: the `size` elements of `x` from `begin` (a
  tensor), differentiable in `x`."""
  from tensorflow.compiler.tf2xla.python import xla as tf2xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

  @tf.custom_gradient
  def dynamic_slice(x, begin):
    def grad(dy):
      return tf2xla.dynamic_update_slice(tf.zeros_like(x), dy, begin), None
    return tf2xla.dynamic_slice(x, begin, size), grad
  return dynamic_slice(x, begin)


@tf.custom_gradient
def _update_slice(x, update, begin):
  """XLA's dynamic-update-slice: `x` with `update` from `begin`, in place
  where XLA can; differentiable in `x` and `update`."""
  from tensorflow.compiler.tf2xla.python import xla as tf2xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

  def grad(dy):
    d_update = tf2xla.dynamic_slice(dy, begin, update.shape.as_list())
    dx = tf2xla.dynamic_update_slice(dy, tf.zeros_like(update), begin)
    return dx, d_update, None
  return tf2xla.dynamic_update_slice(x, update, begin), grad


@functools.lru_cache(maxsize=None)
def has_xla_slices():
  """Whether this TensorFlow has the XLA slice ops `window_push` uses.

  They come from `tensorflow.compiler.tf2xla.python.xla`, a module of
  every TensorFlow this package supports, but not a public API: where it
  is missing, pushes stay scatters.
  """
  try:
    from tensorflow.compiler.tf2xla.python import xla as tf2xla  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  except ImportError:
    return False
  return all(hasattr(tf2xla, name)
             for name in ('dynamic_slice', 'dynamic_update_slice'))


@functools.lru_cache(maxsize=None)
def xla_cpu_expands_scatter():
  """Whether XLA on this CPU compiles a scatter as a loop.

  A loop with a trip per index (TensorFlow 2.18 and older: a push of
  `batch` members is `batch` trips at every step) rather than one kernel
  (TensorFlow 2.21).  Found by compiling a small scatter once.
  """
  hlo = _cpu_optimized_hlo(
      lambda x, i: tf.tensor_scatter_nd_update(x, i, tf.ones([2], x.dtype)),
      np.zeros([8], np.float32), np.array([[1], [5]], np.int32))
  if hlo is None:
    return False   # cannot tell: keep the scatter
  return ' scatter(' not in hlo


def _cpu_optimized_hlo(fn, *args):
  """XLA's optimized HLO of `fn` compiled on this CPU for `args` (NumPy
  arrays), as text; None where it does not compile.  A probe of what this
  TensorFlow's XLA does, traced outside any graph being built."""
  with tf.init_scope(), tf.device('/device:CPU:0'):
    probe = tf.function(fn, jit_compile=True, autograph=False)
    try:
      return probe.experimental_get_compiler_ir(
          *[tf.constant(a) for a in args])(stage='optimized_hlo')
    except Exception:  # pylint: disable=broad-except
      return None


@functools.lru_cache(maxsize=None)
def xla_cpu_splits_outside_conditionals_only():
  """Whether XLA on this CPU splits large loops over threads, but none in a
  conditional's branches.

  XLA:CPU's parallel task assignment marks a large loop to run in parts
  on its threads (`outer_dimension_partitions`); TensorFlow 2.18 and
  older do that outside conditionals only, TensorFlow 2.21 in their
  branches too.  Found by compiling one large loop outside and one in a
  branch, once (`xla_cpu_split_loops`); False where it cannot tell, and
  without compiling on TensorFlow 2.21 and newer.
  """
  if _tf_version() >= (2, 21):
    return False
  return xla_cpu_split_loops() == (True, False)


def xla_cpu_split_loops():
  """Whether XLA splits a large loop over threads (outside a conditional,
  in a conditional's branch), by compiling both; None where it cannot
  tell."""

  def outside(x, i):
    del i
    return tf.exp(x) * 2.0 + 1.0

  def inside(x, i):
    return tf.switch_case(i, [lambda: tf.exp(x) * 2.0 + 1.0,
                              lambda: x * 3.0])
  splits = []
  for fn in (outside, inside):
    hlo = _cpu_optimized_hlo(fn, np.zeros([256, 1024], np.float32),
                             np.int32(0))
    if hlo is None:
      return None
    splits.append('outer_dimension_partitions' in hlo)
  return tuple(splits)


def _tf_version():
  """TensorFlow's (major, minor) version."""
  return tuple(int(v) for v in re.findall(r'\d+', tf.__version__)[:2])


def xla_cpu_runs_thunks():
  """Whether XLA on CPU runs a computation as thunks, a kernel each.

  TensorFlow 2.18 and newer, unless `XLA_FLAGS` turns that runtime off
  (`--xla_cpu_use_thunk_runtime=false`); older ones compile a computation
  into one function.
  """
  flags = os.environ.get('XLA_FLAGS', '')
  return (_tf_version() >= (2, 18) and not re.search(
      r'xla_cpu_use_thunk_runtime=(false|0)\b', flags))


def pushing_members(values, rows, targets):
  """A stack port's frames of the members that push (those with a target).

  Args:
    values: The pushed values, `[K, batch, *event]`.
    rows: The ports' stacks in the pack, `[K, 1]`.
    targets: The members' frames, `[K, batch]` (-1: no push).

  Returns:
    `(pack rows, frames, members, values)`: three `[n]` tensors and the
    values `[n, *event]`.
  """
  hit = tf.where(targets >= 0)    # [n, 2]: (port, member)
  port, member = tf.unstack(tf.cast(hit, tf.int32), axis=1)
  return (tf.gather(rows[:, 0], port), tf.gather_nd(targets, hit), member,
          tf.gather_nd(values, hit))


def no_elements(x):
  """Whether `x` has a dimension known to be 0.

  It then holds nothing, and TensorFlow's gathers and scatters fail on it
  (a register `[batch, 0]`).

  Args:
    x: A tensor.

  Returns:
    A Python bool.
  """
  shape = x.shape
  return shape.rank is not None and 0 in shape.as_list()


# XLA:CPU fuses no concatenate of more than this many operands
# (`kMaxConcatenateArguments` of its instruction fusion).
FUSED_CONCAT_OPERANDS = 8


def stack(values):
  """`tf.stack(values)`; under XLA, one kernel with the values it stacks.

  XLA:CPU fuses no concatenate of more than 8 operands (nor one on the
  minor dimension), so each value of a wider `tf.stack` (a block's nine
  register selects, say) would be a kernel of its own: compiled apart,
  and a thunk of its own at every step.  Under XLA the values are
  stacked by groups of at most 8, each padded to the whole and chosen
  row by row with a select; XLA fuses all that into one kernel.  (Groups
  stacked and then concatenated are flattened back into one concatenate
  by XLA's simplifier; a stack of the groups' stacks, reshaped, is one
  kernel too, but a slower one: docs/performance.md.)

  Args:
    values: Tensors of one shape and dtype.

  Returns:
    The stacked tensor.
  """
  values = list(values)
  n = len(values)
  if n <= FUSED_CONCAT_OPERANDS or not masks.in_xla_context():
    return tf.stack(values)
  values = [tf.convert_to_tensor(v) for v in values]
  groups = -(-n // FUSED_CONCAT_OPERANDS)
  size = -(-n // groups)
  rank = len(values[0].shape)
  out = None
  for start in reversed(range(0, n, size)):
    part = stack(values[start:start + size])
    part = tf.pad(part, [[start, n - start - part.shape[0]]] +
                  [[0, 0]] * rank)
    if out is None:
      out = part
    else:
      rows = np.reshape(np.arange(n) < start + size, [n] + [1] * rank)
      out = tf.where(rows, part, out)
  return out


def nbytes(dtype, shape):
  """The bytes of a tensor.

  Args:
    dtype: A `tf.DType`.
    shape: Its static shape.

  Returns:
    An int.
  """
  return int(np.prod(shape, dtype=np.int64)) * dtype.size


@tf.custom_gradient
def update_rows(x, index, rows):
  """`x` with rows `index` (distinct) set to `rows`, written in place:
  only for a buffer no one else holds (see `packing.Packing`)."""
  y = tf.raw_ops.InplaceUpdate(x=x, i=index, v=rows)

  def grad(dy):
    d_rows = tf.gather(dy, index)
    dx = tf.tensor_scatter_nd_update(dy, index[:, tf.newaxis],
                                     tf.zeros_like(d_rows))
    return dx, None, d_rows
  return y, grad


def private_copy(x, parts):
  """A copy of `x` in a buffer of its own, for `update_rows`.

  Fresh at every run (`Empty` is stateful: never constant-folded nor
  shared).  Stacks start empty: then the buffer is only zeroed.

  Args:
    x: A pack.
    parts: The tensors `x` stacks.

  Returns:
    The copy.
  """
  if all(_is_zeros(p) for p in parts):
    return tf.raw_ops.Empty(shape=tf.shape(x), dtype=x.dtype, init=True)
  buffer = tf.raw_ops.Empty(shape=tf.shape(x), dtype=x.dtype, init=False)
  return update_rows(buffer, tf.range(tf.shape(x)[0]), x)


def _is_zeros(x):
  """Whether `x` is known, when tracing, to be all zeros (a fill of zeros
  whose shape is known only at run time, a batch of unknown size, too)."""
  if x.op.type == 'ZerosLike':
    return True
  if x.op.type == 'Fill':
    value = tf.get_static_value(x.op.inputs[1])
  elif x.op.type == 'Const':
    value = tf.get_static_value(x)
  else:
    return False
  return value is not None and not np.any(value)


def storage_dtype(dtype):
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
  chains) take less time a call (docs/performance.md).

  Args:
    dtype: A `tf.DType`.

  Returns:
    The storage `tf.DType`.
  """
  if dtype in (tf.int64, tf.uint64):
    return tf.uint64
  if dtype in (tf.int32, tf.uint32, tf.bool):
    return tf.uint32
  return dtype
