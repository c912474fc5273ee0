"""Masks of the members at a block, and where ops are being traced."""

import threading

import numpy as np
import tensorflow as tf

__all__ = ['Mask', 'BatchAxis', 'batch_axis', 'broadcast_constant',
           'reshape_shape', 'in_xla_context', 'on_gpu', 'select']


def in_xla_context():
  """Whether ops are being traced for XLA (tf.function(jit_compile=True))."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = tf.compat.v1.get_default_graph()
  return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


# The dtypes `Select` has GPU kernels for (`SelectV2` has more: the
# unsigned and the small integers), TensorFlow 2.16 to 2.21.
_SELECT_DTYPES = frozenset([tf.bfloat16, tf.bool, tf.complex64, tf.complex128,
                            tf.float16, tf.float32, tf.float64, tf.int32,
                            tf.int64])


def _takes_select(x, y):
  """Whether `Select` (v1) can select between `x` and `y` outside XLA:
  tensors of one known shape, of a dtype it has kernels for on every
  device."""
  return (not in_xla_context() and tf.is_tensor(x) and tf.is_tensor(y) and
          x.dtype in _SELECT_DTYPES and x.shape.is_fully_defined() and
          x.shape == y.shape)


def select(cond, x, y):
  """`tf.where(cond, x, y)`; outside XLA, TensorFlow's `Select` where it can.

  `tf.where` makes a `SelectV2`, whose CPU kernel broadcasts even when the
  three shapes are equal: 2-4x slower than `Select` (v1) on the same
  operands, on one thread as on two (docs/performance.md).  Used where
  the three static shapes are known and equal, so that `tf.where`'s
  broadcasting has nothing to do (`Mask.select` also selects whole rows
  by the mask, which `Select` does along the first axis), and for the
  dtypes `Select` has GPU kernels for (not the unsigned and small
  integers, which `SelectV2` has).

  Args:
    cond: A bool tensor.
    x: Its true side.
    y: Its false side.

  Returns:
    The selected tensor.
  """
  if _takes_select(x, y) and tf.is_tensor(cond) and cond.shape == x.shape:
    return tf.raw_ops.Select(condition=cond, x=x, y=y)
  return tf.where(cond, x, y)


# -- a batch axis of unknown size ----------------------------------------------

class BatchAxis:
  """Tensors of a staged loop's batch size, where tracing has no size.

  Made for each graph of the loop (its body, each block's branch) from a
  tensor of that graph whose axis 0 is the batch (the PCs, a mask), so
  that the size is read where it is used, not carried through the loop
  and the switch; each tensor is made at its first use (a step computes
  only those its block reads), once per graph.

  Args:
    rows: A tensor `[batch, ...]` of the graph being traced.
  """

  def __init__(self, rows):
    self._rows = rows
    self._made = {}   # (graph, name) -> tensor
    self.rows = set()   # refs of values with one row per member
    self.constants = {}   # ref of a constant broadcast -> its NumPy value

  def _get(self, name, make):
    key = (tf.compat.v1.get_default_graph(), name)
    if key not in self._made:
      self._made[key] = make()
    return self._made[key]

  @property
  def shape(self):
    """`[batch]`, an int32 tensor."""
    return self._get('shape', lambda: tf.shape(self._rows))

  @property
  def size(self):
    """The batch size, a scalar int32 tensor."""
    return self._get('size', lambda: tf.size(self._rows))

  def shape_of(self, shape):
    """`[batch, *shape]`, an int32 tensor.

    Args:
      shape: A list of ints, the shape of a member's value.

    Returns:
      The tensor (made once per graph and shape).
    """
    if not shape:
      return self.shape
    return self._get(('shape_of',) + tuple(shape),
                     lambda: tf.concat([self.shape, shape], 0))

  @property
  def members(self):
    """0, 1, ..., batch - 1."""
    return self._get('members', lambda: tf.range(self.size))

  @property
  def members_row(self):
    """`members` as `[1, batch]`."""
    return self._get('members_row', lambda: self.members[tf.newaxis])

  def broadcast(self, x):
    """Scalar `x` broadcast to `[batch]`.

    A constant is broadcast once per graph: where the size is known when
    tracing, TensorFlow folds such a broadcast into a constant; here it
    is an op at every step.

    Args:
      x: A scalar tensor.

    Returns:
      The tensor `[batch]`.
    """
    value = tf.get_static_value(x)
    if value is None:
      return tf.broadcast_to(x, self.shape)
    value = np.asarray(value)
    key = ('broadcast', x.dtype, value.shape, value.tobytes())
    out = self._get(key, lambda: tf.broadcast_to(x, self.shape))
    if value.size == 1:
      # A batch of one (`[1]`) is recorded as its scalar, as a scalar is.
      self.constants[out.ref()] = value.reshape(())
    return out


# Ops whose result has the rows of its inputs of its own rank (the others
# broadcast): a value made by them from values with one row per member
# has one row per member, or fails.
_ROWWISE = frozenset([
    'Abs', 'Add', 'AddV2', 'Cast', 'Ceil', 'Cos', 'Div', 'DivNoNan',
    'Equal', 'Exp', 'Expm1', 'Floor', 'FloorDiv', 'FloorMod', 'Greater',
    'GreaterEqual', 'Identity', 'Less', 'LessEqual', 'Log', 'Log1p',
    'LogicalAnd', 'LogicalNot', 'LogicalOr', 'Maximum', 'Minimum', 'Mod',
    'Mul', 'Neg', 'NotEqual', 'Pow', 'RealDiv', 'Reciprocal', 'Round',
    'Rsqrt', 'Select', 'SelectV2', 'Sigmoid', 'Sign', 'Sin', 'Sqrt',
    'Square', 'Sub', 'Tanh', 'TruncateDiv', 'TruncateMod'])


def member_rows(x):
  """Marks `x` as one row per member, for `has_member_rows`.

  In a loop of unknown batch size (elsewhere a no-op).

  Args:
    x: A register as a block's primitives see it.

  Returns:
    `x`.
  """
  axis = batch_axis()
  if axis is not None and tf.is_tensor(x):
    axis.rows.add(x.ref())
  return x


def has_member_rows(x, budget=64):
  """Whether `x` has one row per member for sure.

  It does where it is marked (`member_rows`), or made by ops of
  `_ROWWISE` from such values (through at most `budget` ops).  False
  where that cannot be told: the rows are then checked at run time.

  Args:
    x: A tensor whose first axis has no size when tracing.
    budget: The most ops looked through.

  Returns:
    A bool.
  """
  axis = batch_axis()
  if axis is None:
    return False
  todo, seen = [x], set()
  while todo:
    t = todo.pop()
    if t.ref() in axis.rows or t.ref() in seen:
      continue
    seen.add(t.ref())
    if t.op.type not in _ROWWISE or len(seen) > budget:
      return False
    rank = t.shape.rank
    # Inputs of lower rank broadcast, and those with a size of their own
    # fail unless it is the batch's (or 1, broadcast to the others').
    todo.extend(i for i in t.op.inputs if i.shape.rank is None or (
        i.shape.rank == rank and i.shape[0] is None))
  return True


def broadcast_constant(x):
  """The scalar of a constant broadcast to the batch, else None.

  `x` is one where `BatchAxis.broadcast` made it from a constant.  A
  write of such a value can select the scalar into its register or stack
  instead (the select broadcasts it): where the batch size is known when
  tracing, TensorFlow folds the broadcast into a constant, and here it
  would be a shape and a broadcast at every step.

  Args:
    x: A tensor, or anything else (None then).

  Returns:
    A NumPy scalar, or None.
  """
  axis = batch_axis()
  if axis is None or not tf.is_tensor(x):
    return None
  return axis.constants.get(x.ref())


def reshape_shape(x):
  """`x`'s shape, for a reshape to it.

  A list of ints, -1 for its one axis of unknown size (where
  `tf.shape(x)` would be a kernel at every step), or else `tf.shape(x)`.

  Args:
    x: A tensor.

  Returns:
    A list, or an int32 tensor.
  """
  dims = x.shape.as_list() if x.shape.rank is not None else [None, None]
  if dims.count(None) == 1 and 0 not in dims:
    return [-1 if d is None else d for d in dims]
  if None not in dims:
    return dims
  return tf.shape(x)


class _Axes(threading.local):
  """Per thread (threads trace loops at once): the `BatchAxis` stack."""

  def __init__(self):
    super().__init__()
    self.stack = []


_AXES = _Axes()


def batch_axis():
  """The `BatchAxis` of the staged loop being traced, or None.

  None where the batch size is known when tracing, or outside a loop.
  """
  return _AXES.stack[-1] if _AXES.stack else None


class tracing_axis:  # pylint: disable=invalid-name
  """Context manager: `batch_axis()` is `axis` inside.

  Args:
    axis: A `BatchAxis`, or None (`batch_axis()` unchanged).
  """

  def __init__(self, axis):
    self.axis = axis

  def __enter__(self):
    if self.axis is not None:
      _AXES.stack.append(self.axis)

  def __exit__(self, *exc):
    if self.axis is not None:
      _AXES.stack.pop()


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
    batch: The batch size: an int, or a scalar int32 tensor or a
      `BatchAxis` (read at first use) in a staged loop whose batch axis
      has no size when tracing.
  """
  __slots__ = ('mask', '_count', 'full', '_batch', '_as_int', '_expanded',
               '_idx', '_first', '_fill_index', '_fill_index_nd',
               'filled_rows')

  def __init__(self, mask, count, full, batch):
    self.mask = mask
    self._count = count
    self.full = full
    self._batch = batch
    self._as_int = None
    self._expanded = {}
    self._idx = None
    self._first = None
    self._fill_index = None
    self._fill_index_nd = None
    # Outside XLA, in a block's branch: `f(x)` giving register `x` (as
    # read from its pack) with its inactive lanes filled from a fill of
    # its whole pack, or None (`packing.BlockState.filled`).
    self.filled_rows = None

  @property
  def batch(self):
    """The batch size: an int, or a scalar int32 tensor."""
    if isinstance(self._batch, BatchAxis):
      return self._batch.size
    return self._batch

  @property
  def sized(self):
    """Whether the batch size is known when tracing (an int)."""
    return not (isinstance(self._batch, BatchAxis) or
                tf.is_tensor(self._batch))

  @property
  def count(self):
    """The members in the mask: an int eagerly, else None.

    A full mask in a loop of unknown batch size counts the batch size's
    tensor.
    """
    if isinstance(self._count, BatchAxis):
      return self._count.size
    return self._count

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
      # The first lane, a scalar that the select broadcasts: an argmax of
      # the mask itself and a select, with no slice and no fill (a kernel
      # and its constants each, at every masked step).
      first = tf.argmax(self.as_int, output_type=tf.int32)
      axis = None if self.sized else batch_axis()
      members = (axis.members if axis is not None
                 else tf.range(self.batch, dtype=tf.int32))
      self._fill_index = tf.where(self.mask, members, first)
    return self._fill_index

  @property
  def fill_index_nd(self):
    """`fill_index` as `tf.gather_nd` indices `[1, batch, 1]`."""
    if self._fill_index_nd is None:
      self._fill_index_nd = tf.reshape(self.fill_index, [1, -1, 1])
    return self._fill_index_nd

  def like_rows(self, k, shape):
    """The mask broadcast to `[k, *shape]`, for a select over `k` values.

    Values of one scalar per member (`shape` `[batch]`) take the mask as
    it is: the select broadcasts it along its last axis, which for such
    small values costs less than a reshape and a broadcast of their own
    (two kernels and their constants).

    Args:
      k: The number of stacked values.
      shape: The shape of one value, `[batch, ...]`.

    Returns:
      The broadcast mask.
    """
    if len(shape) == 1:
      return self.mask
    key = (k,) + tuple(shape)
    if key not in self._expanded:
      mask = tf.reshape(self.mask, [1, -1] + [1] * (len(shape) - 1))
      self._expanded[key] = self._broadcast(mask, key)
    return self._expanded[key]

  def select(self, new, old):
    """`new` in the lanes of the members in the mask, `old` in the rest.

    Both are whole-batch values, `[batch, ...]`.  Outside XLA, a `Select`
    of their rows by the mask itself where their shapes are known and the
    same (`select`: no broadcast mask to make).

    Args:
      new: A tensor.
      old: A tensor of its shape.

    Returns:
      The tensor.
    """
    if (_takes_select(new, old) and new.shape.rank and
        self.mask.shape.is_fully_defined() and
        self.mask.shape[0] == new.shape[0]):
      return tf.raw_ops.Select(condition=self.mask, x=new, y=old)
    return select(self.like(new.shape.as_list()), new, old)

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
      if not in_xla_context() and (None not in key or not self.sized):
        mask = self._broadcast(mask, key)   # XLA fuses it
      self._expanded[key] = mask
    return self._expanded[key]

  def _broadcast(self, mask, shape):
    """`mask` (the batch axis its only axis longer than 1) broadcast to
    `shape` (a tuple of ints, None only for the batch axis).  Where the
    batch size is a tensor, a tile by the other axes' lengths, which
    needs no shape made at every step."""
    if None in shape and not self.sized:
      multiples = [1 if d is None else d for d in shape]
      if all(k == 1 for k in multiples):
        return mask   # its shape already (a kernel less at every step)
      return tf.tile(mask, multiples)
    return tf.broadcast_to(
        mask, tuple(self.batch if d is None else d for d in shape))

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
