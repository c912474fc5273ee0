"""NumPy's functions in a batch-aware primitive's TensorFlow form.

A batch-aware primitive written with NumPy (`np.sqrt(x)`,
`x.sum(axis=-1)`, `np.linalg.solve(a, b)`, a helper of the user's that
calls NumPy) cannot run on TensorFlow's symbolic tensors as written: no
NumPy function takes them.  Its TensorFlow form
(`python.primitives.tf_numpy`, which type inference takes on TensorFlow)
calls those functions through `numpy_call` and `numpy_method`, which run
TensorFlow's NumPy API's function of the same name
(`tf.experimental.numpy`), or `tf.linalg`'s, where given a tensor, and
NumPy's as written otherwise.
"""

import builtins
import sys

import numpy as np

from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_ops

__all__ = ['numpy_call', 'numpy_method', 'matmul', 'table_item',
           'attribute', 'getitem']

# `key[index]` is `index` (a helper's subscripts, `getitem(x, key[...])`).
key = member_ops.key
# A helper's operators (`member_helpers`): NumPy's promotion.
promoted = member_ops.promoted


def numpy_call(func, *args, **kwargs):
  """`func(*args, **kwargs)` in a batch-aware primitive's TensorFlow form.

  A NumPy function given a TensorFlow tensor, which it cannot take inside
  a graph, runs as TensorFlow's NumPy API's function of its name
  (`tf.experimental.numpy`; `member_helpers.TF_NUMPY_BATCH`), as do
  `np.zeros_like` and its kin, and `np.linalg`'s functions by
  `tf.linalg`'s (`member_helpers.LINALG`), and NumPy's NaN-skipping
  functions of floats by TensorFlow forms of their own
  (`member_helpers.NAN_SKIPPING`); `len` of a tensor is its first
  axis; a user's helper runs with its
  own such calls rewritten (`member_helpers.tf_numpy_helper`).  Anything
  else runs as written.

  Args:
    func: The function called.
    *args, **kwargs: Its arguments.

  Returns:
    What it gives for the batch.
  """
  if member_helpers.is_helper(func):
    ops = sys.modules[__name__]
    args, kwargs = member_helpers.helper_arguments(
        args, kwargs, lambda f: member_helpers.tf_numpy_helper(f, ops))
    return member_helpers.tf_numpy_helper(func, ops)(*args, **kwargs)
  if func is builtins.len and len(args) == 1 and not kwargs and (
      member_ops.is_tf(args[0])):
    return _length(args[0])
  if func in member_ops.DTYPE_INFO:
    return member_ops.dtype_info(func, *args, **kwargs)
  if member_helpers.makes_generator(func):
    # `np.random.default_rng(seed)` of the members' seeds: refused as in
    # a per-member function (NumPy's own TypeError said nothing of it).
    return member_ops.random_generator(func, *args, **kwargs)
  # A tensor's dtype (`np.ones(3, dtype=v.dtype)`) as NumPy's.
  args = [_numpy_dtype(a) for a in args]
  kwargs = {k: _numpy_dtype(v) for k, v in kwargs.items()}
  if member_ops.is_tf(*member_ops.leaves(list(args) + list(kwargs.values()))):
    func = member_ops.nan_free(func, args)
    if func in member_helpers.LIKE:
      if args and member_ops.is_tf(args[0]):
        return member_ops.tf_like(func, *args, **kwargs)
    elif func in member_helpers.TF_NUMPY_BATCH:
      return member_ops.tnp_call(func, args, kwargs)
    elif func in member_helpers.LINALG:
      return member_ops.tf_linalg(func, *args, **kwargs)
    elif func is np.digitize:
      return member_ops.tf_digitize(*args, **kwargs)
    elif func in member_helpers.TF_CREATION:   # of a traced size
      return getattr(member_ops._tnp(), func.__name__)(*args, **kwargs)  # pylint: disable=protected-access
    elif func in member_helpers.NAN_SKIPPING:   # of floats
      return getattr(member_ops, 'tf_' + func.__name__)(*args, **kwargs)
  return func(*args, **kwargs)


def matmul(a, b):
  """`a @ b` in a batch-aware primitive's TensorFlow form: NumPy's
  matrix product (`tf.experimental.numpy.matmul`) where a TensorFlow
  tensor meets a vector (`x @ w` of `x` `[batch, n]` and `w` `[n]`,
  which `tf.matmul` refuses), a NumPy operand converted to the tensor's
  dtype as the operator converts it; else the operator as written.

  Args:
    a: The left operand.
    b: The right operand.

  Returns:
    The product.
  """
  return member_ops.matmul(a, b)


def numpy_method(obj, name, *args, **kwargs):
  """`obj.name(*args, **kwargs)` in a batch-aware primitive's TensorFlow
  form: an array method (`member_helpers.METHODS`) of a TensorFlow
  tensor, which lacks it, as `member_ops.method`; else the method.

  Args:
    obj: The object whose method is called.
    name: The method's name.
    *args, **kwargs: Its arguments.

  Returns:
    What the method gives.
  """
  args = [_numpy_dtype(a) for a in args]
  kwargs = {k: _numpy_dtype(v) for k, v in kwargs.items()}
  if not member_ops.is_tf(obj) or hasattr(obj, name):
    return getattr(obj, name)(*args, **kwargs)
  return member_ops.method(obj, name, *args, **kwargs)


def _length(x):
  """`len(x)` of a tensor: its first axis, known when traced (a symbolic
  tensor has no `len`), else the tensor's count."""
  tf = sys.modules['tensorflow']
  if x.shape.rank == 0:
    return len(x)   # Python's TypeError, as for an array
  if x.shape.rank is not None and x.shape[0] is not None:
    return int(x.shape[0])
  return tf.shape(x)[0]


def _numpy_dtype(x):
  """`x`, or NumPy's dtype for a TensorFlow `DType` (a tensor's `.dtype`,
  which NumPy's functions cannot interpret)."""
  tf = sys.modules.get('tensorflow')
  if tf is not None and isinstance(x, tf.dtypes.DType):
    return np.dtype(x.as_numpy_dtype)
  return x


def table_item(table, index):
  """`table[index]` in a batch-aware primitive's TensorFlow form, of the
  user's constant `table` (a NumPy array) at indices that are tensors
  (`ITEMS[i]`, `COST[i, j]`, `M[:, j]`, an index per member): NumPy
  cannot take symbolic tensors, so the slices (`:`, `1:3`) are taken
  from the table first and the integer indices (tensors and numbers,
  negative ones counting from the end as NumPy's do) are then one
  gather, their broadcast axes placed where NumPy's advanced indexing
  places them (where the integer indices are adjacent, else first); any
  other index is the table's own.

  Args:
    table: The value indexed.
    index: The index, as Python gives it to `__getitem__`.

  Returns:
    The items.
  """
  parts = index if isinstance(index, tuple) else (index,)
  if not (isinstance(table, np.ndarray) and member_ops.is_tf(*parts) and
          len(parts) <= table.ndim and all(
              isinstance(p, slice) or
              (member_ops.is_tf(p) and p.dtype.is_integer) or
              (isinstance(p, (int, np.integer)) and not isinstance(p, bool))
              for p in parts)):
    return table[index]
  tf = sys.modules['tensorflow']
  parts = parts + (slice(None),) * (table.ndim - len(parts))
  # The slices first, on the table itself (their bounds are numbers).
  table = table[tuple(p if isinstance(p, slice) else slice(None)
                      for p in parts)]
  gathered = [k for k, p in enumerate(parts) if not isinstance(p, slice)]
  kept = [k for k, p in enumerate(parts) if isinstance(p, slice)]
  at = []
  for k in gathered:
    p = tf.cast(parts[k], tf.int64)
    at.append(tf.where(p < 0, p + table.shape[k], p))
  zero = sum(tf.zeros_like(p) for p in at)   # their broadcast shape
  at = tf.stack([p + zero for p in at], axis=-1)
  # The gathered axes first, the kept ones after, in their order.
  items = tf.gather_nd(tf.constant(np.transpose(table, gathered + kept)),
                       at)
  adjacent = gathered == list(range(gathered[0], gathered[-1] + 1))
  before = sum(1 for k in kept if k < gathered[0])
  if not adjacent or not before:
    return items
  # Adjacent integer indices after a kept axis: NumPy puts their axes
  # where they stand (`M[:, j]` is `M.T[j].T` for a vector j).
  rank = zero.shape.rank
  perm = (list(range(rank, rank + before)) + list(range(rank)) +
          list(range(rank + before, rank + len(kept))))
  return tf.transpose(items, perm)


def attribute(obj, name):
  """`obj.name` in a batch-aware primitive's TensorFlow form: NumPy's
  array attributes that a TensorFlow tensor lacks (`member_ops.attribute`:
  `.T`, `.mT`, `.real`, `.imag`); a tensor's `.shape` as a `Shape`, a
  tuple as NumPy's; else the attribute.

  Args:
    obj: The object.
    name: The attribute's name.

  Returns:
    Its value.
  """
  if name == 'shape' and member_ops.is_tf(obj):
    return Shape(obj)
  if not member_ops.is_tf(obj) or hasattr(obj, name):
    return getattr(obj, name)
  return member_ops.attribute(obj, name)


class Shape(tuple):
  """A tensor's shape in a batch-aware primitive's TensorFlow form:
  NumPy's tuple of Python ints, where a `TensorShape` slices to another
  `TensorShape`, which is no tuple (`(k,) = v.shape[1:]` of a primitive's
  result); an axis unknown while tracing is its size tensor.  What a
  `TensorShape` has and a tuple lacks (`rank`, `as_list()`) reads the
  tensor's `TensorShape`."""

  def __new__(cls, tensor):
    shape = tensor.shape
    dims = shape.as_list()
    if None in dims:
      sizes = member_ops._tf().shape(tensor)  # pylint: disable=protected-access
      dims = [sizes[k] if d is None else d for k, d in enumerate(dims)]
    self = super().__new__(cls, dims)
    self.tensor_shape = shape
    return self

  def __getattr__(self, name):
    return getattr(self.__dict__['tensor_shape'], name)


def getitem(x, index):
  """`x[index]` in a batch-aware primitive's TensorFlow form: where a
  tensor's index holds a NumPy array or a list (`x[:, ORDER]` of the
  user's constant integer array, `x[:, [2, 0]]`, a constant boolean
  mask), NumPy's advanced indexing (`member_ops.constant_array_item`),
  which TensorFlow's indexing refuses (and reads a list as a tuple);
  else the item as TensorFlow indexes it.

  Args:
    x: The value indexed.
    index: The index, as Python gives it to `__getitem__`.

  Returns:
    The item.
  """
  parts = index if isinstance(index, tuple) else (index,)
  if member_ops.is_tf(x) and any(
      isinstance(p, (list, np.ndarray)) and not member_ops.is_tf(
          *member_ops.leaves(p)) for p in parts):
    return member_ops.constant_array_item(x, parts)
  return x[index]
