"""One member's slice whose length differs between members, held masked.

`v[lo:hi]` with per-member bounds gives each member an array of its own
length, which no batch holds.  Where the members' lengths differ on
NumPy (`numpy_indexing`), and under XLA on TensorFlow, where a length must
be known when traced (`member_ops`), the slice is a `Ragged`: the array
with the sliced axis whole and each member's bounds along it.  What
Python does with such a slice within one statement works on it as on the
slice itself:

- elementwise arithmetic, comparisons and NumPy's elementwise functions
  with numbers, with arrays that do not reach the sliced axis, or with a
  slice of the same bounds (`u[i, i + 1:] * x[i + 1:]`): a `Ragged`;
- reductions (`np.sum`, `prod`, `mean`, `var`, `std`, `max`, `min`,
  `argmax`, `argmin`, `any`, `all`, `count_nonzero`, their methods, and
  Python's `sum`, `min`, `max`, `any`, `all`), `len`, `np.cumsum` and
  `np.cumprod`, `np.linalg.norm`, and products (`np.dot`, `@`, `inner`,
  `vdot`) of slices of the same bounds: the members outside the slice
  take the operation's identity (0 for a sum, 1 for a product, -inf for
  a maximum), so the result is Python's.

Anything else (keeping the slice in a variable, returning it, indexing
it, passing it to another function) raises the `PerMemberError` the slice
itself raised before: one member's value would have a shape of its own.
A maximum, minimum, argmax or argmin of an empty slice fails those
members with Python's `ValueError` (`member_math.FAILURES`).
"""

import builtins
import operator
import sys

import numpy as np

from autobatch_vm import errors
from autobatch_vm import ops
from autobatch_vm.per_member import member_math

# pylint: disable=protected-access


def is_ragged(*xs):
  """Whether any of `xs` is a `Ragged`."""
  return builtins.any(type(x) is Ragged for x in xs)  # pylint: disable=unidiomatic-typecheck


def _tf():
  return sys.modules['tensorflow']


# The module of per-member helpers (`member_ops`, which installs itself
# with `use_ops` when imported) whose TensorFlow forms a slice of tensors
# computes with: NumPy's functions by TensorFlow's NumPy API, the
# failures noted for the vectorizer.  A tensor reaches a slice only
# through it.
_OPS = []


def use_ops(module):
  """Installs `member_ops` (which imports this module) as the helpers of
  slices of tensors."""
  _OPS[:] = [module]


def _ops():
  return _OPS[0]


def _is_tf(*xs):
  tf = sys.modules.get('tensorflow')
  return tf is not None and builtins.any(
      isinstance(x, (tf.Tensor, tf.Variable)) for x in xs)


def _note(kind, bad):
  """The members for which Python raises `kind`
  (`member_math.FAILURES`): noted for the vectorizer on TensorFlow,
  raised on NumPy, where Python computes the slice
  (`member_ops.note_failure`)."""
  _ops().note_failure(kind, bad)


class Ragged:
  """One member's array sliced along one axis by per-member bounds.

  Args:
    data: The member's array (a `MemberArray` on NumPy, one member's
      tensor on TensorFlow) with the sliced axis whole.
    axis: The sliced axis of `data` (non-negative).
    start, stop: Each member's bounds along it, `0 <= start <= stop <=
      size` (per-member integers: a `MemberArray` of int64 numbers, or
      int64 scalar tensors).
    refusal: A function giving the `PerMemberError` for a use of the
      slice that needs it as an array of its own length.
    bounds: What identifies the bounds where they cannot be compared by
      value (TensorFlow: the slice's own start and stop expressions).
  """

  __slots__ = ('data', 'axis', 'start', 'stop', 'refusal', 'bounds')
  __array_priority__ = 1000   # its reflected operators before ndarray's
  __hash__ = None

  def __init__(self, data, axis, start, stop, refusal, bounds=None):
    self.data = data
    self.axis = axis
    self.start = start
    self.stop = stop
    self.refusal = refusal
    self.bounds = bounds

  # -- what the slice would be: refused --------------------------------

  def refuse(self):
    """Raises the slice's `PerMemberError`."""
    raise self.refusal()

  def __array__(self, *args, **kwargs):
    self.refuse()

  def __len__(self):
    self.refuse()

  def __iter__(self):
    self.refuse()

  def __bool__(self):
    self.refuse()

  def __getitem__(self, key):
    self.refuse()

  @property
  def ndim(self):
    """The member's number of axes (the slice's, as the array's)."""
    return _ndim(self.data)

  @property
  def dtype(self):
    """The dtype."""
    return self.data.dtype

  @property
  def shape(self):
    self.refuse()

  @property
  def on_tf(self):
    """Whether the data is a TensorFlow tensor."""
    return _is_tf(self.data)

  def with_data(self, data, axis=None):
    """A `Ragged` of the same bounds holding `data`."""
    return Ragged(data, self.axis if axis is None else axis, self.start,
                  self.stop, self.refusal, self.bounds)

  # -- masks -------------------------------------------------------------

  def size(self):
    """The sliced axis's whole length."""
    return int(_shape(self.data)[self.axis])

  def mask(self, rank=None):
    """Each member's positions inside the slice along the sliced axis,
    shaped to broadcast against the data (of `rank` axes, the data's by
    default)."""
    rank = self.ndim if rank is None else rank
    n = self.size()
    trailing = rank - self.axis - 1
    if self.on_tf:
      tf = _tf()
      at = tf.range(n, dtype=self.start.dtype)
      inside = tf.logical_and(at >= self.start, at < self.stop)
      return tf.reshape(inside, [n] + [1] * trailing)
    at = np.arange(n)
    inside = (at >= self.start) & (at < self.stop)
    return np.reshape(inside, (n,) + (1,) * trailing)

  def count(self):
    """Each member's number of items in the slice along its axis."""
    return self.stop - self.start

  def filled(self, fill):
    """The data with `fill` outside the slice."""
    return _where(self.mask(), self.data, fill)

  def aligned(self, other):
    """`other`'s data with its slice's items where this one's are, item by
    item (`v[lo:hi] * v[lo + 1:hi + 1]`), its sliced axis as long as this
    one's; the members whose slices differ in length fail as Python fails
    them (NumPy's `ValueError`: the operands do not broadcast)."""
    if other.axis - other.ndim != self.axis - self.ndim:
      self.refuse()   # sliced along different axes
    if self.on_tf:
      same = (self.bounds is not None and other.bounds is not None and
              builtins.all(_same(a, b) for a, b in zip(self.bounds,
                                                        other.bounds)))
    else:
      same = (np.array_equal(_batched(self.start), _batched(other.start)) and
              np.array_equal(_batched(self.stop), _batched(other.stop)))
    if same and other.size() == self.size():
      return other.data
    _note('slices_differ', _not_equal(self.count(), other.count()))
    return _shifted(other.data, other.axis, other.start - self.start,
                    self.size())

  # -- operators ---------------------------------------------------------

  def _binary(self, other, fn, reflected=False):
    if is_ragged(other):
      data = self.aligned(other)
      result = fn(data, self.data) if reflected else fn(self.data, data)
      return self.with_data(result, _axis_after(self, result))
    if _ndim(other) > self.ndim - self.axis - 1:
      self.refuse()   # it reaches the sliced axis
    result = fn(other, self.data) if reflected else fn(self.data, other)
    return self.with_data(result, _axis_after(self, result))


def _operator(fn):
  def forward(self, other):
    return self._binary(other, fn)

  def reflected(self, other):
    return self._binary(other, fn, reflected=True)
  return forward, reflected


def _promoted(name):
  """Operator `name` of `ops.promoted`: NumPy's dtypes for tensors
  (TensorFlow's operators do not promote: a float32 slice times a
  float64)."""
  return lambda a, b: ops.promoted(name, a, b)


for _name, _fn in (('add', _promoted('add')), ('sub', _promoted('sub')),
                   ('mul', _promoted('mul')),
                   ('truediv', _promoted('truediv')),
                   ('floordiv', operator.floordiv), ('mod', operator.mod),
                   ('pow', _promoted('pow')), ('and', _promoted('and_')),
                   ('or', _promoted('or_')), ('xor', _promoted('xor'))):
  _f, _r = _operator(_fn)
  setattr(Ragged, f'__{_name}__', _f)
  setattr(Ragged, f'__r{_name}__', _r)
for _name in ('lt', 'le', 'gt', 'ge', 'eq', 'ne'):
  setattr(Ragged, f'__{_name}__', _operator(_promoted(_name))[0])
for _name, _fn in (('neg', operator.neg), ('pos', operator.pos),
                   ('abs', operator.abs), ('invert', operator.invert)):
  setattr(Ragged, f'__{_name}__',
          lambda self, _fn=_fn: self.with_data(_fn(self.data)))


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
  if method != '__call__' or kwargs.get('out') is not None:
    self.refuse()
  kwargs.pop('out', None)
  return call(ufunc, inputs, kwargs)


def _array_function(self, func, types, args, kwargs):
  del self, types
  return call(func, args, kwargs)


Ragged.__array_ufunc__ = _array_ufunc
Ragged.__array_function__ = _array_function


def xla_refusal():
  """The `PerMemberError` for a slice whose length follows the member's
  data (`v[:n]`), held masked under XLA (`per_member.ragged`), where it
  is used as an array of its own: kept, returned, indexed, passed on."""
  return errors.PerMemberError(
      'A slice whose bounds differ between members (v[:n], v[k:], '
      'a[i, i + 1:] with a per-member n, k or i) is used as an array of its '
      'own (kept in a variable, returned, indexed or passed on): one '
      'member\'s value has a shape of its own, which XLA does not compile',
      hint=errors.PAD_HINT + '  Within one statement such a slice may '
      'be reduced (np.sum(v[:n]), np.max(a[k:, k]), np.dot(u[i, i + 1:], '
      'x[i + 1:]), len(v[lo:hi])), or combined item by item with numbers '
      'and slices of the same bounds first.')


# -- helpers ---------------------------------------------------------------

def _ndim(x):
  if type(x) is Ragged:  # pylint: disable=unidiomatic-typecheck
    return x.ndim
  if _is_tf(x):
    return x.shape.rank
  return np.ndim(x)


def _shape(x):
  if _is_tf(x):
    return tuple(x.shape)
  return tuple(x.shape)


def _batched(x):
  return getattr(x, 'batched', x)


def _numpy(func, *args, **kwargs):
  """NumPy function `func` on one member's values: on TensorFlow by
  `member_ops.call` (TensorFlow's NumPy API), on NumPy as it is."""
  if _is_tf(*args):
    return _ops().call(func, *args, **kwargs)
  return func(*args, **kwargs)


def _not_equal(a, b):
  if _is_tf(a, b):
    return _tf().not_equal(a, b)
  return a != b


def _shifted(data, axis, delta, size):
  """`data`'s items `p + delta` at positions `p` (`size` of them) along
  `axis`, each member by its own `delta` (clipped into the axis)."""
  n = _shape(data)[axis]
  if _is_tf(data):
    tf = _tf()
    at = tf.clip_by_value(tf.range(size, dtype=delta.dtype) + delta, 0,
                          max(n - 1, 0))
    return tf.gather(data, at, axis=axis)
  y = data.batched   # a `MemberArray`'s batch
  at = np.clip(np.arange(size)[None, :] + _batched(delta)[:, None], 0,
               max(n - 1, 0))
  shape = [y.shape[0]] + [1] * (y.ndim - 1)
  shape[axis + 1] = size
  at = np.broadcast_to(at.reshape(shape), y.shape[:axis + 1] + (size,) +
                       y.shape[axis + 2:])
  return type(data)(np.take_along_axis(y, at, axis=axis + 1))


def _same(a, b):
  if a is None or b is None:
    return a is None and b is None
  if _is_tf(a, b):
    return _ops()._same_value(a, b)
  return a == b


def _axis_after(r, result):
  """The sliced axis in `result`, an elementwise result of `r`'s data
  (broadcasting may add leading axes)."""
  return r.axis + _ndim(result) - r.ndim


def _where(cond, x, fill):
  """`x` where `cond`, else the number `fill` (in `x`'s dtype)."""
  if _is_tf(x):
    tf = _tf()
    fill = tf.cast(tf.constant(fill, x.dtype) if x.dtype != tf.bool else
                   builtins.bool(fill), x.dtype)
    return tf.where(cond, x, tf.broadcast_to(fill, tf.shape(x)))
  return np.where(cond, x, np.asarray(fill).astype(x.dtype))


def _identity(kind, dtype):
  """The fill that leaves reduction `kind` unchanged, in `dtype`."""
  dtype = np.dtype(getattr(dtype, 'as_numpy_dtype', dtype))
  if kind in ('sum', 'any', 'count_nonzero'):
    return False if dtype.kind == 'b' else 0
  if kind in ('prod', 'all'):
    return True if dtype.kind == 'b' else 1
  if dtype.kind == 'b':
    return kind in ('min', 'argmin')
  if dtype.kind in 'iu':
    info = np.iinfo(dtype)
    return info.min if kind in ('max', 'argmax') else info.max
  return -np.inf if kind in ('max', 'argmax') else np.inf


def _reduce(kind, x, axis=None, keepdims=False):
  """NumPy's reduction `kind` of one member's value `x` (a tensor or a
  member's NumPy value)."""
  if _is_tf(x):
    tf = _tf()
    fns = {'sum': tf.reduce_sum, 'prod': tf.reduce_prod,
           'max': tf.reduce_max, 'min': tf.reduce_min,
           'any': tf.reduce_any, 'all': tf.reduce_all}
    if x.dtype == tf.bool and kind in ('sum', 'prod', 'max', 'min'):
      x = tf.cast(x, tf.int64)
      if kind in ('max', 'min'):
        return tf.cast(fns[kind](x, axis=axis, keepdims=keepdims), tf.bool)
    return fns[kind](x, axis=axis, keepdims=keepdims)
  return getattr(np, kind)(x, axis=axis, keepdims=keepdims)


def _cast_like(x, like):
  if _is_tf(like):
    return _tf().cast(x, like.dtype)
  return x


def _to_float(x):
  if _is_tf(x):
    tf = _tf()
    return x if x.dtype.is_floating or x.dtype.is_complex else tf.cast(
        x, tf.float64)
  return x


def _normalized_axis(r, axis):
  if axis is None:
    return None
  if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
    r.refuse()
  axis = int(axis)
  if not -r.ndim <= axis < r.ndim:
    raise np.exceptions.AxisError(axis, r.ndim) if hasattr(
        np, 'exceptions') else ValueError(f'axis {axis} is out of bounds')
  return axis % r.ndim


def _fail_if_empty(r):
  """Fails the members whose slice has no items, for a reduction that
  needs one (a maximum, an argmax: NumPy's `ValueError`)."""
  other = builtins.any(
      d == 0 for k, d in enumerate(_shape(r.data)) if k != r.axis)
  if other:
    return
  _note('empty_reduction', r.count() <= 0)


def reduction(kind, r, axis=None, keepdims=False, ddof=0):
  """NumPy's `np.<kind>(r, axis=axis)` of a `Ragged`.

  Args:
    kind: 'sum', 'prod', 'mean', 'var', 'std', 'max', 'min', 'argmax',
      'argmin', 'any', 'all' or 'count_nonzero'.
    r: The `Ragged`.
    axis: None or one axis.
    keepdims: As NumPy's.
    ddof: For 'var' and 'std'.

  Returns:
    A member's value, or a `Ragged` where the reduction keeps the sliced
    axis (`axis` another one).
  """
  axis = _normalized_axis(r, axis)
  if axis is not None and axis != r.axis:
    out = _plain_reduction(kind, r.data, axis, keepdims, ddof)
    new_axis = r.axis if keepdims or axis > r.axis else r.axis - 1
    return r.with_data(out, new_axis)
  if kind in ('argmax', 'argmin'):
    if axis is None and r.ndim != 1:
      r.refuse()   # NumPy's index into the flattened slice
    return _arg_reduction(kind, r, keepdims)
  if kind in ('max', 'min'):
    _fail_if_empty(r)
    if r.on_tf and r.data.dtype.is_floating:
      # NumPy's extreme is NaN where the slice has one; XLA's is not.
      tf = _tf()
      out = _reduce(kind, r.filled(_identity(kind, r.dtype)), axis, keepdims)
      nan = _reduce('any', r.with_data(tf.math.is_nan(r.data)).filled(False),
                    axis, keepdims)
      return tf.where(nan, tf.constant(np.nan, out.dtype), out)
  if kind == 'count_nonzero':
    nonzero = r.with_data(
        _tf().not_equal(r.data, _tf().zeros_like(r.data)) if r.on_tf
        else r.data != 0)
    out = reduction('sum', nonzero, axis, keepdims)
    return _tf().cast(out, _tf().int64) if r.on_tf else out
  if kind in ('mean', 'var', 'std'):
    total = _reduce('sum', r.filled(0), axis, keepdims)
    count = r.count()
    if axis is None:
      others = int(np.prod([d for k, d in enumerate(_shape(r.data))
                            if k != r.axis], dtype=np.int64))
      count = count * others
    count = _cast_like(count, _to_float(total)) if r.on_tf else count
    mean = _to_float(total) / count
    if kind == 'mean':
      return mean
    centered = r.with_data(_to_float(r.data) - (
        mean if axis is None or keepdims else _expanded(mean, r.axis, r)))
    squares = centered * centered
    var = _reduce('sum', squares.filled(0), axis, keepdims) / (count - ddof)
    if kind == 'var':
      return var
    return _tf().sqrt(var) if r.on_tf else np.sqrt(var)
  return _reduce(kind, r.filled(_identity(kind, r.dtype)), axis, keepdims)


def _expanded(x, axis, r):
  """`x`, reduced along `axis`, with that axis back (length 1)."""
  if r.on_tf:
    return _tf().expand_dims(x, axis)
  return np.expand_dims(x, axis)


def _plain_reduction(kind, x, axis, keepdims, ddof):
  """NumPy's reduction of a plain value along `axis`."""
  if _is_tf(x):
    return _ops().tnp_call(getattr(np, kind), (x,), dict(
        axis=axis, keepdims=keepdims, **({'ddof': ddof} if kind in (
            'var', 'std') else {})))
  extra = {'ddof': ddof} if kind in ('var', 'std') else {}
  if kind in ('argmax', 'argmin', 'count_nonzero'):
    return getattr(np, kind)(x, axis=axis)
  return getattr(np, kind)(x, axis=axis, keepdims=keepdims, **extra)


def _arg_reduction(kind, r, keepdims):
  """`np.argmax` / `argmin` along the sliced axis: the first position of
  the slice's extreme (its first NaN where it has one), from the slice's
  start."""
  _fail_if_empty(r)
  extreme = _reduce('max' if kind == 'argmax' else 'min',
                    r.filled(_identity(kind, r.dtype)), r.axis, True)
  mask = r.mask()
  if r.on_tf:
    tf = _tf()
    hit = tf.logical_and(tf.equal(r.data, extreme), mask)
    if r.data.dtype.is_floating:
      nan = tf.logical_and(tf.math.is_nan(r.data), mask)
      hit = tf.where(tf.reduce_any(nan, axis=r.axis, keepdims=True), nan, hit)
    at = tf.argmax(tf.cast(hit, tf.int32), axis=r.axis)
    out = at - tf.cast(r.start, at.dtype)
    return tf.expand_dims(out, r.axis) if keepdims else out
  hit = (r.data == extreme) & mask
  if np.dtype(r.dtype).kind in 'fc':
    nan = np.isnan(r.data) & mask
    hit = np.where(np.any(nan, axis=r.axis, keepdims=True), nan, hit)
  out = np.argmax(hit, axis=r.axis) - r.start
  return np.expand_dims(out, r.axis) if keepdims else out


def cumulative(kind, r, axis=None):
  """`np.cumsum` / `np.cumprod` of a 1-D `Ragged` (or along its sliced
  axis): the slice's running totals, still a `Ragged`."""
  axis = _normalized_axis(r, axis)
  if axis is None and r.ndim != 1:
    r.refuse()
  if axis is not None and axis != r.axis:
    return r.with_data(_numpy(getattr(np, kind), r.data, axis=axis))
  fill = 0 if kind == 'cumsum' else 1
  out = _numpy(getattr(np, kind), r.filled(fill), axis=r.axis)
  return r.with_data(out)


def interp(x, xp, fp, left=None, right=None):
  """`np.interp(x, xp, fp)` where the points `xp` and values `fp` are
  1-D slices of one member's bounds (`np.interp(t, XS[:n], y[:n])`): the
  points outside each member's slice are left out of the search (taken
  as -inf before it and +inf after), so the result is NumPy's on the
  slice.  An empty slice fails its members with NumPy's `ValueError`.

  Args:
    x: Where to interpolate: a member's number or array (not a slice).
    xp: The points, a 1-D `Ragged`.
    fp: The values, a 1-D `Ragged` of the same bounds, or an array of the
      points' whole length.
    left, right: As NumPy's, or None.

  Returns:
    The values, float64, shaped as `x`.
  """
  if not is_ragged(xp) or xp.ndim != 1 or is_ragged(x, left, right):
    (xp if is_ragged(xp) else fp).refuse()
  values = xp.aligned(fp) if is_ragged(fp) else fp
  _note('empty_points', xp.count() <= 0)
  if xp.on_tf:
    return _tf_interp(x, xp, values, left, right)
  return _np_interp(x, xp, values, left, right)


def _tf_interp(x, xp, values, left, right):
  tf = _tf()
  n = xp.size()
  start = tf.cast(xp.start, tf.int64)
  stop = tf.maximum(tf.cast(xp.stop, tf.int64), start + 1)  # empty: failed
  points = tf.cast(xp.data, tf.float64)
  at = tf.range(n, dtype=tf.int64)
  inf = tf.constant(np.inf, tf.float64)
  search = tf.where(at < start, -inf, tf.where(at >= stop, inf, points))
  x = tf.cast(x, tf.float64)
  y = tf_line(tf.reshape(x, [-1]), search, points,
              tf.cast(values, tf.float64), start, stop, left, right)
  return tf.reshape(y, tf.shape(x))


def tf_line(flat, search, points, values, start, stop, left, right):
  """One member's `np.interp` of `flat` (a vector, float64) between its
  points `start` to `stop - 1` (at least one): linear, their first value
  (or `left`) below and their last (or `right`) above.  `search` is
  `points` with the points outside them -inf before and +inf after.

  Args:
    flat: Where to interpolate, a float64 vector.
    search: The points to search, float64, ascending.
    points: The points, float64.
    values: Their values, float64.
    start, stop: int64 scalars, the points taken.
    left, right: As NumPy's, or None.

  Returns:
    The values, a float64 vector.
  """
  tf = _tf()
  k = tf.cast(tf.searchsorted(search, flat, side='right'), tf.int64)
  upper = tf.clip_by_value(k, start + 1, tf.maximum(stop - 1, start + 1))
  lower = upper - 1
  upper = tf.minimum(upper, stop - 1)   # one point: its value everywhere
  x0, x1 = tf.gather(points, lower), tf.gather(points, upper)
  y0, y1 = tf.gather(values, lower), tf.gather(values, upper)
  width = x1 - x0
  y = y0 + (flat - x0) / tf.where(width == 0, tf.ones_like(width),
                                  width) * (y1 - y0)
  first, last = tf.gather(points, start), tf.gather(points, stop - 1)
  below = (tf.gather(values, start) if left is None
           else tf.cast(left, tf.float64))
  above = (tf.gather(values, stop - 1) if right is None
           else tf.cast(right, tf.float64))
  return tf.where(flat < first, below, tf.where(flat > last, above, y))


def _np_interp(x, xp, values, left, right):
  points = np.asarray(_batched(xp.data), np.float64)          # [B, n]
  values = np.asarray(_batched(values), np.float64)
  batch, n = points.shape
  values = np.broadcast_to(values, (batch, n))
  start = np.broadcast_to(np.asarray(_batched(xp.start), np.int64),
                          (batch,))[:, None]
  stop = np.maximum(np.broadcast_to(np.asarray(_batched(xp.stop), np.int64),
                                    (batch,))[:, None], start + 1)
  at = np.arange(n)[None, :]
  search = np.where(at < start, -np.inf, np.where(at >= stop, np.inf,
                                                  points))
  x_rows = np.asarray(_batched(x), np.float64)
  if type(x) is type(xp.data):  # pylint: disable=unidiomatic-typecheck
    flat = x_rows.reshape(batch, -1)
    shape = (batch,) + np.shape(x_rows)[1:]
  else:   # a number or an array, the same for every member
    flat = np.broadcast_to(x_rows.reshape(1, -1), (batch, x_rows.size))
    shape = (batch,) + np.shape(x_rows)
  y = np_lines(flat, search, points, values, start, stop, left, right)
  return type(xp.data)(y.reshape(shape))


def np_lines(flat, search, points, values, start, stop, left, right):
  """`np.interp` of each member's row of `flat` (`[batch, m]`) between its
  row of points `[batch, n]`, `start` to `stop - 1` (`[batch, 1]`, at
  least one point): as `tf_line`, row by row.

  Args:
    flat: Where to interpolate, `[batch, m]` float64.
    search: The points to search, `[batch, n]`, each row ascending.
    points: The points, `[batch, n]` float64.
    values: Their values, `[batch, n]` float64.
    start, stop: `[batch, 1]` integers, the points taken.
    left, right: As NumPy's, or None.

  Returns:
    The values, `[batch, m]` float64.
  """
  k = np.sum(search[:, None, :] <= flat[:, :, None], axis=-1)
  upper = np.clip(k, start + 1, np.maximum(stop - 1, start + 1))
  lower = upper - 1
  upper = np.minimum(upper, stop - 1)   # one point: its value everywhere
  x0 = np.take_along_axis(points, lower, 1)
  x1 = np.take_along_axis(points, upper, 1)
  y0 = np.take_along_axis(values, lower, 1)
  y1 = np.take_along_axis(values, upper, 1)
  width = np.where(x1 == x0, 1.0, x1 - x0)
  y = y0 + (flat - x0) / width * (y1 - y0)
  first = np.take_along_axis(points, start, 1)
  last = np.take_along_axis(points, stop - 1, 1)
  below = np.take_along_axis(values, start, 1) if left is None else left
  above = np.take_along_axis(values, stop - 1, 1) if right is None else right
  return np.where(flat < first, below, np.where(flat > last, above, y))


def product(func, a, b):
  """`np.dot(a, b)`, `a @ b`, `np.inner`, `np.vdot` where either is a
  `Ragged`: over a sliced axis of both (of the same bounds), the slices'
  items outside taken as zeros; a sliced axis that the product keeps
  stays sliced."""
  ra, rb = type(a) is Ragged, type(b) is Ragged  # pylint: disable=unidiomatic-typecheck
  na, nb = _ndim(a), _ndim(b)
  if func is np.vdot:
    if not (ra and rb and na == nb == 1):
      (a if ra else b).refuse()
    a = a.with_data(_numpy(np.conj, a.data))
    func = np.dot
  if func is np.inner and (na > 1 or nb > 1):
    (a if ra else b).refuse()
  if func is np.dot and (na > 2 or nb > 2):
    (a if ra else b).refuse()
  # The contracted axes: a's last, b's first (its only one for a vector,
  # else its second-to-last).
  a_axis = na - 1
  b_axis = 0 if nb == 1 else nb - 2
  kept = None
  if ra and a.axis == a_axis:
    if not (rb and b.axis == b_axis):
      a.refuse()
    b = b.with_data(a.aligned(b), b.axis)
    b = Ragged(b.data, b.axis, a.start, a.stop, a.refusal, a.bounds)
    a, b = a.filled(0), b.filled(0)
  elif rb and b.axis == b_axis:
    b.refuse()   # a's contracted axis is whole
  elif ra and rb:
    a.refuse()   # two sliced axes kept
  else:
    kept = a if ra else b
    a = a.data if ra else a
    b = b.data if rb else b
  if _is_tf(a, b):
    out = _ops().matmul(a, b) if func in (np.matmul, np.dot) else _numpy(
        func, a, b)
  else:
    out = func(a, b)
  if kept is None:
    return out
  axis = kept.axis if kept is not None and ra else _ndim(out) - 1
  return kept.with_data(out, axis)


def norm(r, ord=None, axis=None, keepdims=False):  # pylint: disable=redefined-builtin
  """`np.linalg.norm` of a `Ragged`: the 2-norm (Frobenius) of all its
  items, or of a vector the 1-norm and the maximum norm."""
  if axis is not None or keepdims:
    r.refuse()
  size = r.with_data(_numpy(np.abs, r.data))
  if ord in (None, 2, 'fro') and (ord != 2 or r.ndim == 1):
    total = reduction('sum', size * size)
    return _tf().sqrt(_to_float(total)) if r.on_tf else np.sqrt(total)
  if r.ndim == 1 and ord == 1:
    return reduction('sum', size)
  if r.ndim == 1 and ord in (np.inf, float('inf')):
    return reduction('max', size)
  r.refuse()


# NumPy's reductions that take the slice, by name.
_REDUCTIONS = {getattr(np, n): n for n in (
    'sum', 'prod', 'mean', 'var', 'std', 'max', 'min', 'amax', 'amin',
    'argmax', 'argmin', 'any', 'all', 'count_nonzero')}
_NAMES = {'amax': 'max', 'amin': 'min'}
_PRODUCTS = (np.dot, np.matmul, np.inner, np.vdot)
_ELEMENTWISE = (np.where, np.clip)


def call(func, args, kwargs):
  """NumPy function `func` called with a `Ragged` among `args`.

  Args:
    func: The function.
    args, kwargs: Its arguments.

  Returns:
    As for the slice itself, where `func` is one of those above.

  Raises:
    PerMemberError: The slice's, for any other use.
  """
  first = next(x for x in list(args) + list(kwargs.values())
               if type(x) is Ragged)  # pylint: disable=unidiomatic-typecheck
  name = _REDUCTIONS.get(func)
  if name is not None and args and args[0] is first and (
      builtins.all(not is_ragged(x) for x in args[1:])) and set(kwargs) <= {
          'axis', 'keepdims', 'ddof'} and len(args) <= 2:
    kw = dict(kwargs)
    if len(args) == 2:
      kw['axis'] = args[1]
    return reduction(_NAMES.get(name, name), first, **kw)
  if func in (np.cumsum, np.cumprod) and args and args[0] is first and (
      set(kwargs) <= {'axis'}) and len(args) <= 2:
    axis = args[1] if len(args) == 2 else kwargs.get('axis')
    return cumulative(func.__name__, first, axis)
  if func in _PRODUCTS and len(args) == 2 and not kwargs:
    return product(func, *args)
  if func is np.interp and len(args) == 3 and set(kwargs) <= {
      'left', 'right'}:
    return interp(*args, **kwargs)
  if func is np.linalg.norm and args and args[0] is first and len(args) <= 2:
    kw = dict(kwargs)
    if len(args) == 2:
      kw['ord'] = args[1]
    if set(kw) <= {'ord', 'axis', 'keepdims'}:
      return norm(first, **kw)
  if (isinstance(func, np.ufunc) and func.nout == 1 and not kwargs) or (
      func in _ELEMENTWISE and not kwargs):
    return elementwise(func, args)
  first.refuse()


def elementwise(func, args):
  """Elementwise `func` of arguments among which `Ragged`s (of the same
  bounds), numbers and arrays that do not reach the sliced axis."""
  first = next(x for x in args if type(x) is Ragged)  # pylint: disable=unidiomatic-typecheck
  reach = first.ndim - first.axis
  if builtins.any(type(x) is not Ragged and _ndim(x) >= reach for x in args):  # pylint: disable=unidiomatic-typecheck
    first.refuse()
  data = [(x.data if x is first else first.aligned(x))
          if type(x) is Ragged else x for x in args]  # pylint: disable=unidiomatic-typecheck
  out = _numpy(func, *data)
  return first.with_data(out, _axis_after(first, out))


def method(r, name, *args, **kwargs):
  """A `Ragged`'s array method `name` (`v[k:].sum()`)."""
  func = getattr(np, name, None)
  if name in ('sum', 'prod', 'mean', 'var', 'std', 'max', 'min', 'argmax',
              'argmin', 'any', 'all', 'cumsum', 'cumprod'):
    return call(func, (r,) + args, kwargs)
  if name == 'dot' and len(args) == 1 and not kwargs:
    return product(np.dot, r, args[0])
  if name == 'astype' and args:
    return r.with_data(_ops().method(r.data, name, *args, **kwargs) if r.on_tf
                       else getattr(r.data, name)(*args, **kwargs))
  if name == 'copy' and not args and not kwargs:
    return r
  r.refuse()


def builtin(name, r, *rest):
  """Python's builtin `name` (`len`, `sum`, `min`, `max`, `any`, `all`)
  of a 1-D `Ragged`."""
  if name == 'len':
    return r.count() if r.axis == 0 else _shape(r.data)[0]
  if r.axis != 0:
    r.refuse()
  if name == 'sum':
    total = reduction('sum', r, axis=0)
    return total + rest[0] if rest else total
  if rest or r.ndim != 1:
    r.refuse()
  if name in ('min', 'max'):
    _note('empty_sequence', r.count() <= 0)
    return _reduce(name, r.filled(_identity(name, r.dtype)))
  return reduction(name, r)
