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

import sys
import types

import numpy as np

from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_ops

__all__ = ['numpy_call', 'numpy_method']


def _is_tf(*xs):
  return member_ops.is_tf(*xs)


def _tf():
  return sys.modules['tensorflow']


def numpy_call(func, *args, **kwargs):
  """`func(*args, **kwargs)` in a batch-aware primitive's TensorFlow form.

  A NumPy function given a TensorFlow tensor, which it cannot take inside
  a graph, runs as TensorFlow's NumPy API's function of its name
  (`tf.experimental.numpy`; `member_helpers.TF_NUMPY_BATCH`, and
  `np.zeros_like` and its kin, and `np.linalg`'s functions by
  `tf.linalg`'s: `member_helpers.LINALG`); a user's helper runs with its
  own such calls rewritten
  (`member_helpers.tf_numpy_helper`).  Anything else runs as written.

  Args:
    func: The function called.
    *args, **kwargs: Its arguments.

  Returns:
    What it gives for the batch.
  """
  if type(func) is types.FunctionType:  # pylint: disable=unidiomatic-typecheck
    return member_helpers.tf_numpy_helper(func, sys.modules[__name__])(*args, **kwargs)
  if _is_tf(*member_ops.leaves(list(args) + list(kwargs.values()))):
    if func in member_helpers.LIKE:
      if args and _is_tf(args[0]):
        return member_ops.tf_like(func, *args, **kwargs)
    elif func in member_helpers.TF_NUMPY_BATCH:
      return member_ops.tnp_call(func, args, kwargs)
    elif func in member_helpers.LINALG:
      return _tf_linalg(func, *args, **kwargs)
  return func(*args, **kwargs)


def _tf_linalg(func, *args, **kwargs):
  """NumPy's linear algebra function `func` (`member_helpers.LINALG`) on
  TensorFlow tensors, by `tf.linalg`, as NumPy computes it: `solve`'s
  right side a vector where it has one axis, `norm` the 2-norm (of the
  flattened array without `axis`), `qr` reduced.  Other arguments than
  NumPy's defaults go to NumPy, which refuses the tensors."""
  tf = _tf()
  name = func.__name__
  a = tf.convert_to_tensor(args[0]) if args else None
  if name == 'solve' and len(args) == 2 and not kwargs:
    b = tf.convert_to_tensor(args[1])
    if b.dtype != a.dtype:
      joint = tf.as_dtype(np.result_type(a.dtype.as_numpy_dtype,
                                         b.dtype.as_numpy_dtype))
      a, b = tf.cast(a, joint), tf.cast(b, joint)
    if b.shape.rank == 1:
      return tf.linalg.solve(a, b[:, None])[:, 0]
    return tf.linalg.solve(a, b)
  if name == 'norm' and len(args) == 1 and set(kwargs) <= {'axis'}:
    axis = kwargs.get('axis')
    if axis is None:
      return tf.norm(tf.reshape(a, [-1]))
    if isinstance(axis, int):
      return tf.norm(a, axis=axis)
  if name == 'qr' and len(args) == 1 and not kwargs:
    return tf.linalg.qr(a)
  if len(args) == 1 and not kwargs and name != 'norm':
    if a.dtype.is_integer:
      a = tf.cast(a, tf.float64)
    return {'inv': tf.linalg.inv, 'det': tf.linalg.det,
            'slogdet': tf.linalg.slogdet, 'cholesky': tf.linalg.cholesky,
            'eigh': tf.linalg.eigh, 'eigvalsh': tf.linalg.eigvalsh,
            'pinv': tf.linalg.pinv}[name](a)
  return func(*args, **kwargs)


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
  if not _is_tf(obj) or hasattr(obj, name):
    return getattr(obj, name)(*args, **kwargs)
  return member_ops.method(obj, name, *args, **kwargs)
