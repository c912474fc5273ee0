"""Masks of the members at a block, and where ops are being traced."""

import numpy as np
import tensorflow as tf

__all__ = ['Mask', 'BatchAxis', 'batch_axis', 'in_xla_context', 'on_gpu']


def in_xla_context():
  """Whether ops are being traced for XLA (tf.function(jit_compile=True))."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = tf.compat.v1.get_default_graph()
  return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


# -- a batch axis of unknown size ----------------------------------------------

class BatchAxis:
  """Tensors of a staged loop's batch size, where tracing has no size.

  Made once before the loop (`loop.staged_loop`) and captured by its
  blocks, so that a step reads them instead of computing the batch size
  from a shape (which a static shape would have folded away).

  Args:
    pc: The PCs, an int32 tensor `[batch]`.
  """

  def __init__(self, pc):
    self.shape = tf.shape(pc)                   # [batch], int32
    self.size = self.shape[0]
    self.members = tf.range(self.size)          # 0, 1, ..., batch - 1
    self.members_row = self.members[tf.newaxis]


_AXES = []


def batch_axis():
  """The `BatchAxis` of the staged loop being traced, or None.

  None where the batch size is known when tracing, or outside a loop.
  """
  return _AXES[-1] if _AXES else None


class tracing_axis:  # pylint: disable=invalid-name
  """Context manager: `batch_axis()` is `axis` inside.

  Args:
    axis: A `BatchAxis`, or None (`batch_axis()` unchanged).
  """

  def __init__(self, axis):
    self.axis = axis

  def __enter__(self):
    if self.axis is not None:
      _AXES.append(self.axis)

  def __exit__(self, *exc):
    if self.axis is not None:
      _AXES.pop()


# -- masks ---------------------------------------------------------------------

class Mask:
  """The members at the block being run, in the forms ops want.

  `full` is a Python bool (True only when statically known); `count` is an
  int eagerly and None in a graph.  Derived tensors are cached, so build a
  new `Mask` per traced branch (tensors cannot cross graphs).

  Args:
    mask: A bool tensor `[batch]`.
    count: The members in it: an int eagerly, None in a graph.
    full: Whether every member is in it (True only when statically known).
    batch: The batch size: an int, or a scalar int32 tensor in a staged
      loop whose batch axis has no size when tracing.
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
    """The mask as int32 `[batch]`."""
    if self._as_int is None:
      self._as_int = tf.cast(self.mask, tf.int32)
    return self._as_int

  @property
  def fill_index(self):
    """Per lane: itself inside the mask, the first member's lane outside."""
    if self._fill_index is None:
      axis = batch_axis() if tf.is_tensor(self.batch) else None
      if axis is not None:   # the first lane broadcast by the select
        self._fill_index = tf.where(self.mask, axis.members, self.first[0])
      else:
        self._fill_index = tf.where(
            self.mask, tf.range(self.batch, dtype=tf.int32),
            tf.fill([self.batch], self.first[0]))
    return self._fill_index

  @property
  def fill_index_nd(self):
    """`fill_index` as `tf.gather_nd` indices `[1, batch, 1]`."""
    if self._fill_index_nd is None:
      self._fill_index_nd = tf.reshape(self.fill_index, [1, -1, 1])
    return self._fill_index_nd

  def like_rows(self, k, shape):
    """The mask broadcast to `[k, *shape]`, for a select over `k` values.

    Args:
      k: The number of stacked values.
      shape: The shape of one value, `[batch, ...]`.

    Returns:
      The broadcast mask.
    """
    key = (k,) + tuple(shape)
    if key not in self._expanded:
      mask = tf.reshape(self.mask, [1, -1] + [1] * (len(shape) - 1))
      self._expanded[key] = tf.broadcast_to(mask, self._shape(key))
    return self._expanded[key]

  def like(self, shape):
    """The mask broadcast to `shape`, to select between values of it.

    On CPU TensorFlow's select is several times slower when it broadcasts
    its condition (a `[64, 1]` mask against `[64, 25]` values).

    Args:
      shape: The values' shape, `[batch, ...]`.

    Returns:
      The mask, broadcast (reshaped only under XLA, which fuses it).
    """
    ndim = len(shape)
    if ndim <= 1:
      return self.mask
    key = tuple(shape)
    if key not in self._expanded:
      mask = tf.reshape(self.mask, [-1] + [1] * (ndim - 1))
      if not in_xla_context() and (None not in key or
                                   tf.is_tensor(self.batch)):
        mask = tf.broadcast_to(mask, self._shape(key))   # XLA fuses it
      self._expanded[key] = mask
    return self._expanded[key]

  def _shape(self, shape):
    """`shape` (a tuple of ints, None only for the batch axis) with the
    batch size in place of None: a tuple, or a tensor when the batch size
    is one."""
    if None not in shape:
      return shape
    if not tf.is_tensor(self.batch):
      return tuple(self.batch if d is None else d for d in shape)
    return tf.stack([self.batch if d is None else tf.constant(d, tf.int32)
                     for d in shape])

  @property
  def idx(self):
    """The members' indices, a NumPy array (eagerly only)."""
    if self._idx is None:
      self._idx = np.flatnonzero(self.mask.numpy())
    return self._idx


def on_gpu():
  """Whether ops traced here run on a GPU.

  A `tf.device` scope says so, or there is none and a GPU is visible.
  """
  requested = tf.DeviceSpec.from_string(tf.constant(0).device).device_type
  if requested is None:
    return bool(tf.config.list_logical_devices('GPU'))
  return requested.upper() == 'GPU'
