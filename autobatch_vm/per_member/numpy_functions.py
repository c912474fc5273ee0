"""Batching rules of NumPy functions: reductions, shapes, joining, creation.

Each rule takes a NumPy function's arguments as one member gives them and
calls the function once on the batched arrays, with member axes mapped to
batched ones (`core.axes_of`: `axis=None` is every member axis, negative
axes count from the member's end) and member ranks aligned behind the
batch axis.  A rule returns `core.NO_RULE` (or raises `core.NoRule`) for
arguments it has no batched form for; the call then runs once per member.
"""

import numpy as np

from autobatch_vm import errors
from autobatch_vm.per_member import numpy_array as core
from autobatch_vm.per_member import numpy_indexing
from autobatch_vm.per_member import ragged
from autobatch_vm.per_member.numpy_array import MemberArray

__all__ = []

@core.rule(*core.numpy_functions('sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'amax', 'amin',
            'any', 'all', 'nansum', 'nanprod', 'nanmean', 'nanstd', 'nanvar',
            'nanmax', 'nanmin', 'ptp', 'median', 'nanmedian'))
def _reduction(func, a, axis=None, *args, **kwargs):
  if not isinstance(a, MemberArray) or args:
    return core.NO_RULE
  core.refuse_out(core.name_of(func), kwargs.pop('out', None))
  where = kwargs.get('where', True)
  if where is not True:
    kwargs['where'] = core.aligned(where, a.ndim)
  return core.wrap(func(a.batched, core.axes_of(axis, a.ndim), **kwargs))


@core.rule(np.count_nonzero)
def _count_nonzero(func, a, axis=None, **kwargs):
  a = core.as_member(a)
  return core.wrap(func(a.batched, axis=core.axes_of(axis, a.ndim), **kwargs))


@core.rule(*core.numpy_functions('argmax', 'argmin', 'nanargmax', 'nanargmin'))
def _arg_reduction(func, a, axis=None, out=None, **kwargs):
  if not isinstance(a, MemberArray):
    return core.NO_RULE
  core.refuse_out(core.name_of(func), out)
  if axis is not None:
    return core.wrap(func(a.batched, core.axis_of(axis, a.ndim), **kwargs))
  keepdims = kwargs.pop('keepdims', False)
  result = func(core.flat(a), 1, **kwargs)
  if keepdims:
    result = result.reshape((-1,) + (1,) * a.ndim)
  return core.wrap(result)


@core.rule(*core.numpy_functions('cumsum', 'cumprod', 'nancumsum', 'nancumprod'))
def _scan(func, a, axis=None, dtype=None, out=None):
  if not isinstance(a, MemberArray):
    return core.NO_RULE
  core.refuse_out(core.name_of(func), out)
  if axis is None:
    return core.wrap(func(core.flat(a), 1, dtype))
  return core.wrap(func(a.batched, core.axis_of(axis, a.ndim), dtype))


@core.rule(np.sort, np.argsort)
def _sort(func, a, axis=-1, **kwargs):
  if not isinstance(a, MemberArray):
    return core.NO_RULE
  if axis is None:
    return core.wrap(func(core.flat(a), 1, **kwargs))
  return core.wrap(func(a.batched, core.axis_of(axis, a.ndim), **kwargs))


@core.rule(np.partition, np.argpartition)
def _partition(func, a, kth, axis=-1, **kwargs):
  if not isinstance(a, MemberArray) or isinstance(kth, MemberArray):
    return core.NO_RULE
  if axis is None:
    return core.wrap(func(core.flat(a), kth, 1, **kwargs))
  return core.wrap(func(a.batched, kth, core.axis_of(axis, a.ndim), **kwargs))


@core.rule(np.percentile, np.quantile, np.nanpercentile, np.nanquantile)
def _quantile(func, a, q, axis=None, out=None, **kwargs):
  if not isinstance(a, MemberArray) or isinstance(q, MemberArray):
    return core.NO_RULE
  core.refuse_out(core.name_of(func), out)
  result = func(a.batched, q, core.axes_of(axis, a.ndim), **kwargs)
  qdims = np.ndim(q)
  return core.wrap(np.moveaxis(result, qdims, 0) if qdims else result)


@core.rule(np.flip)
def _flip(func, m, axis=None):
  m = core.as_member(m)
  return core.wrap(func(m.batched, core.axes_of(axis, m.ndim)))


@core.rule(np.roll)
def _roll(func, a, shift, axis=None):
  if not isinstance(a, MemberArray) or isinstance(shift, MemberArray):
    return core.NO_RULE
  if axis is None:
    return core.wrap(func(core.flat(a), shift, 1).reshape(a.batched.shape))
  return core.wrap(func(a.batched, shift, core.axes_of(axis, a.ndim)))


@core.rule(np.diff)
def _diff(func, a, n=1, axis=-1, **kwargs):
  if not isinstance(a, MemberArray):
    return core.NO_RULE
  ndim = a.ndim
  for edge in ('prepend', 'append'):
    if edge in kwargs:
      v = kwargs[edge]
      if np.ndim(v) == 0 and not isinstance(v, MemberArray):
        continue
      kwargs[edge] = core.full(v, a.batched.shape[0], ndim)
  return core.wrap(func(a.batched, n, core.axis_of(axis, ndim), **kwargs))


# Shapes and joining.

@core.rule(np.reshape)
def _reshape(func, a, shape=None, order='C', **kwargs):
  a = core.as_member(a)
  if shape is None:
    shape = kwargs.pop('newshape')
  shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
  return core.wrap(func(a.batched, (a.batched.shape[0],) + shape, order=order,
                    **kwargs))


@core.rule(np.ravel)
def _ravel(func, a, order='C'):
  del func
  a = core.as_member(a)
  return core.wrap(a.batched.reshape(a.batched.shape[0], -1, order=order))


@core.rule(np.transpose)
def _transpose(func, a, axes=None):
  a = core.as_member(a)
  if axes is None:
    axes = range(a.ndim - 1, -1, -1)
  return core.wrap(func(a.batched, (0,) + tuple(core.axis_of(x, a.ndim) for x in axes)))


@core.rule(np.swapaxes)
def _swapaxes(func, a, axis1, axis2):
  a = core.as_member(a)
  return core.wrap(func(a.batched, core.axis_of(axis1, a.ndim), core.axis_of(axis2, a.ndim)))


@core.rule(np.moveaxis)
def _moveaxis(func, a, source, destination):
  a = core.as_member(a)
  return core.wrap(func(a.batched, core.axes_of(source, a.ndim),
                    core.axes_of(destination, a.ndim)))


@core.rule(np.expand_dims)
def _expand_dims(func, a, axis):
  a = core.as_member(a)
  count = len(axis) if isinstance(axis, (tuple, list)) else 1
  return core.wrap(func(a.batched, core.axes_of(axis, a.ndim + count)))


@core.rule(np.squeeze)
def _squeeze(func, a, axis=None):
  a = core.as_member(a)
  if axis is None:
    axis = tuple(i for i, n in enumerate(a.shape) if n == 1)
  return core.wrap(func(a.batched, core.axes_of(axis, a.ndim)))


@core.rule(np.broadcast_to)
def _broadcast_to(func, array, shape, **kwargs):
  array = core.as_member(array)
  shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
  return core.wrap(func(core.aligned(array, len(shape)),
                    (array.batched.shape[0],) + shape, **kwargs))


@core.rule(np.atleast_1d, np.atleast_2d, np.atleast_3d)
def _atleast(func, *arys):
  rank = {np.atleast_1d: 1, np.atleast_2d: 2, np.atleast_3d: 3}[func]
  out = [_atleast_one(a, rank) for a in arys]
  return out[0] if len(out) == 1 else out


def _atleast_one(a, rank):
  if not isinstance(a, MemberArray):
    return (np.atleast_1d, np.atleast_2d, np.atleast_3d)[rank - 1](a)
  b, shape = a.batched, a.shape
  if len(shape) >= rank:
    return a
  if rank == 3:
    shape = {0: (1, 1, 1), 1: (1,) + shape + (1,), 2: shape + (1,)}[len(shape)]
  else:
    shape = (1,) * (rank - len(shape)) + shape
  return MemberArray(b.reshape((b.shape[0],) + shape))


def _joined(arrays):
  """The batched arrays of `arrays` (per-member or plain) and their batch."""
  arrays = [numpy_indexing.asarray(a) if isinstance(a, (list, tuple)) else a
            for a in arrays]
  batch = core.batch_of(arrays)
  return [core.full(a, batch) for a in arrays], batch


@core.rule(np.concatenate)
def _concatenate(func, arrays, axis=0, out=None, **kwargs):
  core.refuse_out('np.concatenate', out)
  arrays = list(arrays)
  if axis is None:
    arrays = [np.ravel(a) for a in arrays]
    axis = 0
  if all(type(a) is MemberArray for a in arrays):   # the common case
    ranks = {a.batched.ndim for a in arrays}
    if len(ranks) == 1:
      return MemberArray(func([a.batched for a in arrays],
                              core.axis_of(axis, ranks.pop() - 1), **kwargs))
  batched, _ = _joined(arrays)
  return core.wrap(func(batched, core.axis_of(axis, batched[0].ndim - 1), **kwargs))


@core.rule(np.stack)
def _stack_rule(func, arrays, axis=0, out=None, **kwargs):
  core.refuse_out('np.stack', out)
  batched, _ = _joined(list(arrays))
  return core.wrap(func(batched, core.axis_of(axis, batched[0].ndim), **kwargs))


@core.rule(np.hstack)
def _hstack(func, tup, **kwargs):
  del func
  arrays = [np.atleast_1d(a) for a in tup]
  axis = 0 if all(core.member_rank(a) == 1 for a in arrays) else 1
  return np.concatenate(arrays, axis=axis, **kwargs)


@core.rule(np.vstack)
def _vstack(func, tup, **kwargs):
  del func
  return np.concatenate([np.atleast_2d(a) for a in tup], axis=0, **kwargs)


@core.rule(np.column_stack)
def _column_stack(func, tup):
  del func
  arrays = [np.reshape(a, (-1, 1)) if core.member_rank(a) < 2 else a for a in tup]
  return np.concatenate(arrays, axis=1)


@core.rule(np.append)
def _append(func, arr, values, axis=None):
  del func
  if axis is None:
    return np.concatenate([np.ravel(arr), np.ravel(values)])
  return np.concatenate([arr, values], axis=axis)


@core.rule(np.pad)
def _pad(func, array, pad_width, mode='constant', **kwargs):
  if not isinstance(array, MemberArray) or any(
      isinstance(v, MemberArray) for v in kwargs.values()):
    return core.NO_RULE
  widths = np.broadcast_to(np.asarray(pad_width), (array.ndim, 2))
  return core.wrap(func(array.batched, [(0, 0)] + [tuple(w) for w in widths],
                    mode, **kwargs))


@core.rule(np.tile)
def _tile(func, A, reps):
  A = core.as_member(A)
  reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
  ndim = max(A.ndim, len(reps))
  reps = (1,) * (ndim - len(reps)) + reps
  return core.wrap(func(core.aligned(A, ndim), (1,) + reps))


@core.rule(np.repeat)
def _repeat(func, a, repeats, axis=None):
  if not isinstance(a, MemberArray) or isinstance(repeats, MemberArray):
    return core.NO_RULE
  if axis is None:
    return core.wrap(func(core.flat(a), repeats, 1))
  return core.wrap(func(a.batched, repeats, core.axis_of(axis, a.ndim)))


# Elementwise functions that are not ufuncs: member ranks aligned.

def _elementwise(func, arrays, *args, **kwargs):
  ndim = max(core.member_rank(a) for a in arrays)
  return core.wrap(func(*[core.aligned(a, ndim) for a in arrays], *args, **kwargs))


@core.rule(np.where)
def _where(func, condition, *xy):
  if not xy:
    return np.nonzero(condition)
  return _elementwise(func, (condition,) + xy)


@core.rule(np.select)
def _select(func, condlist, choicelist, default=0):
  arrays = list(condlist) + list(choicelist) + [default]
  ndim = max(core.member_rank(a) for a in arrays)
  return core.wrap(func([core.aligned(c, ndim) for c in condlist],
                        [core.aligned(c, ndim) for c in choicelist],
                        core.aligned(default, ndim)))


@core.rule(np.clip)
def _clip(func, a, *bounds, out=None, **kwargs):
  core.refuse_out('np.clip', out)
  named = {k: kwargs.pop(k) for k in ('min', 'max') if k in kwargs}
  ndim = max(core.member_rank(v) for v in (a,) + bounds + tuple(named.values()))
  bounds = [None if v is None else core.aligned(v, ndim) for v in bounds]
  named = {k: None if v is None else core.aligned(v, ndim)
           for k, v in named.items()}
  return core.wrap(func(core.aligned(a, ndim), *bounds, **named, **kwargs))


@core.rule(np.isclose)
def _isclose(func, a, b, *args, **kwargs):
  return _elementwise(func, (a, b), *args, **kwargs)


@core.rule(np.allclose)
def _allclose(func, a, b, *args, **kwargs):
  del func
  close = np.isclose(a, b, *args, **kwargs)
  return np.all(close) if isinstance(close, MemberArray) else bool(
      np.all(close))


@core.rule(np.array_equal)
def _array_equal(func, a1, a2, equal_nan=False):
  if core.member_shape(a1) != core.member_shape(a2):
    return False
  equal = a1 == a2
  if equal_nan:
    equal = equal | (np.isnan(a1) & np.isnan(a2))
  return np.all(equal)


@core.rule(*core.numpy_functions(
    'round', 'around', 'round_', 'fix', 'nan_to_num', 'real', 'imag', 'conj',
    'conjugate', 'angle', 'iscomplexobj', 'isrealobj', 'isreal', 'iscomplex',
    'copy', 'sinc', 'i0'))
def _pointwise(func, a, *args, **kwargs):
  if not isinstance(a, MemberArray) or any(
      isinstance(v, MemberArray) for v in list(args) + list(kwargs.values())):
    return core.NO_RULE
  core.refuse_out(core.name_of(func), kwargs.pop('out', None))
  result = func(a.batched, *args, **kwargs)
  if func in (np.iscomplexobj, np.isrealobj):
    return result
  return core.wrap(result)


@core.rule(np.isin)
def _isin(func, element, test_elements, assume_unique=False, invert=False,
          **kwargs):
  if not isinstance(test_elements, MemberArray):
    return _elementwise(func, (element,), test_elements, assume_unique,
                        invert, **kwargs)
  batch = test_elements.batched.shape[0]
  e = core.full(element, batch)
  tests = core.flat(test_elements).reshape((batch,) + (1,) * (e.ndim - 1) + (-1,))
  found = np.any(e[..., None] == tests, axis=-1)
  return core.wrap(~found if invert else found)


@core.rule(np.interp)
def _interp(func, x, xp, fp, left=None, right=None, period=None):
  if any(isinstance(v, MemberArray) for v in (left, right, period)) or (
      period is not None):
    return core.NO_RULE
  if not isinstance(xp, MemberArray) and not isinstance(fp, MemberArray):
    return core.wrap(func(x.batched, xp, fp, left, right))
  # Each member's own points: the interval of each x among its xp (as
  # np.searchsorted(xp, x, side='right')), then the line across it.
  batch = core.batch_of((x, xp, fp))
  points = core.full(xp, batch, 1).astype(np.float64)
  values = core.full(fp, batch, 1).astype(np.float64)
  n = points.shape[1]
  at = np.asarray(core.full(x, batch), np.float64)
  y = ragged.np_lines(at.reshape(batch, -1), points, points, values,
                      np.zeros((batch, 1), np.int64),
                      np.full((batch, 1), max(n, 1)), left, right)
  return core.wrap(y.reshape(at.shape))


@core.rule(np.polyval)
def _polyval(func, p, x):
  if not isinstance(p, MemberArray) and not isinstance(x, MemberArray):
    return core.NO_RULE
  del func
  batch = core.batch_of((p, x))
  coefficients = core.full(p, batch, 1)
  at = np.asarray(core.full(x, batch))
  y = np.zeros(at.shape, np.result_type(coefficients, at))
  shape = (batch,) + (1,) * (at.ndim - 1)
  for j in range(coefficients.shape[1]):   # Horner's rule
    y = y * at + coefficients[:, j].reshape(shape)
  return core.wrap(y)


@core.rule(np.shape)
def _shape(func, a):
  del func
  return core.member_shape(a)


@core.rule(np.ndim)
def _ndim_rule(func, a):
  del func
  return core.member_rank(a)


@core.rule(np.size)
def _size(func, a, axis=None):
  del func
  shape = core.member_shape(a)
  return int(np.prod(shape, dtype=np.int64)) if axis is None else shape[axis]


@core.rule(np.result_type)
def _result_type(func, *arrays_and_dtypes):
  return func(*[a.dtype if isinstance(a, MemberArray) else a
                for a in arrays_and_dtypes])


# Creation from a per-member array.

@core.rule(np.zeros_like, np.ones_like, np.empty_like)
def _like(func, prototype, dtype=None, order='K', subok=True, shape=None,
          **kwargs):
  prototype = core.as_member(prototype)
  b = prototype.batched
  if shape is not None:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    shape = (b.shape[0],) + shape
  return core.wrap(func(b, dtype, order, subok, shape, **kwargs))


@core.rule(np.full_like)
def _full_like(func, a, fill_value, dtype=None, order='K', subok=True,
               shape=None, **kwargs):
  batch = core.batch_of((a, fill_value))
  like = core.full(a, batch)
  if shape is not None:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    shape = (batch,) + shape
  out = np.empty_like(like, dtype, order, subok, shape, **kwargs)
  out[...] = core.aligned(fill_value, out.ndim - 1)
  del func
  return MemberArray(out)


@core.rule(np.copyto)
def _copyto(func, dst, src, casting='same_kind', where=True):
  if not isinstance(dst, MemberArray):
    raise errors.PerMemberError(
        'np.copyto into a plain array from per-member values: every member '
        'would write the one shared array.',
        hint='Make the array per member first (np.zeros_like or '
        'np.full_like of a per-member value), or build the result with '
        'np.where.')
  ndim = dst.ndim
  out = dst.batched.copy()
  func(out, core.aligned(src, ndim), casting=casting,
       where=core.aligned(where, ndim))
  # The wrapper takes the result: its batched array may be a caller's.
  dst.batched = out


@core.rule(np.linspace)
def _linspace(func, start, stop, num=50, endpoint=True, retstep=False,
              dtype=None, axis=0):
  ndim = max(core.member_rank(start), core.member_rank(stop))
  batch = core.batch_of((start, stop))
  result = func(core.full(start, batch, ndim), core.full(stop, batch, ndim), num,
                endpoint, retstep, dtype, axis=core.axis_of(axis, ndim + 1))
  return core.wrap(result)


@core.rule(np.cross)
def _cross(func, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
  if (axisa, axisb, axisc, axis) != (-1, -1, -1, None):
    return core.NO_RULE
  return _elementwise(func, (a, b))
