"""NumPy batching rules: one member's NumPy code, run once on a whole batch.

A `MemberArray` wraps a batched array (leading axis: the batch) and shows
one member's array: its `shape`, `len()`, indexing, reductions and every
NumPy function see the member's axes only.  Each operation is mapped to
one operation on the batched array (a batching rule, as `jax.vmap` has one
per primitive):

- ufuncs (`__array_ufunc__`, hence every Python operator): member ranks
  are aligned by inserting axes after the batch axis, so a member of shape
  (3,) and a plain array of shape (2, 3) broadcast as they do per member;
  the methods `reduce`, `accumulate`, `outer` and `at` map their axes.
- NumPy functions (`__array_function__`): a rule per function family in
  `_RULES` (reductions and scans over member axes, linear algebra through
  `einsum` and the stacked `np.linalg` routines, joining and reshaping,
  creation `*_like`, `where`, `take`, `searchsorted`, `nonzero` ...).
- Indexing and index assignment (`getitem`, `setitem`): per-member integer
  indices become advanced indices next to a batch index `arange(B)`, with
  the advanced block moved where NumPy puts it for one member.

A value the same for every member stays a plain NumPy array or number.
A NumPy function without a rule runs once per member and its results are
stacked (`_run_per_member`): right, slower, and reported to the
`fallback` callback of `vectorize`.  That loop is the only one over
members; every rule costs the same Python work at any batch size.

A shape that differs between members (a boolean mask selecting different
counts, `np.nonzero`, `np.unique`, a per-member length) cannot be one
batched array: `PerMemberError` says so and points to padding, unless every
member agrees.  A per-member value is not one Python number: `bool()`,
`int()`, `float()` and `.item()` refuse and say what to write instead.

Dtypes follow NEP 50 on every NumPy (Python numbers are weak), as NumPy 2
gives per member.
"""

import functools
import string
import threading

import numpy as np

from autobatch_vm import errors
from autobatch_vm import patterns

__all__ = ['MemberArray', 'vectorize', 'getitem', 'setitem', 'asarray',
           'member_shape', 'member_len', 'is_member']

_PAD_HINT = (
    'A batch holds one array per value, so every member\'s array must have '
    'the same shape.  Pad to a fixed size and carry the length: keep '
    'fixed-size arrays with a per-member count (np.where(np.arange(W) < n, '
    'x, 0)) instead of selecting or building arrays of per-member size.')

_SCALAR_HINT = (
    'Inside a per-member function a value holds every member\'s number at '
    'once.  For a choice between values write np.where(c, a, b), '
    'np.minimum or np.maximum; for a test that decides what runs, move it '
    'into the function\'s own control flow (if/while), which is batched.')


class _Active(threading.local):
  """The `fallback` callbacks of the `vectorize` calls running in this
  thread, innermost last."""

  def __init__(self):
    super().__init__()
    self.callbacks = []


_ACTIVE = _Active()


class MemberArray:
  """One member's view of a batched NumPy array.

  Args:
    batched: A NumPy array whose leading axis is the batch.

  Attributes:
    batched: The batched array.
  """

  __slots__ = ('batched',)

  def __init__(self, batched):
    self.batched = batched

  # Shape queries: the member's axes only.
  @property
  def shape(self):
    """The member's shape (the batched shape without the batch axis)."""
    return self.batched.shape[1:]

  @property
  def ndim(self):
    """The member's number of axes."""
    return self.batched.ndim - 1

  @property
  def size(self):
    """The member's number of elements."""
    return int(np.prod(self.batched.shape[1:], dtype=np.int64))

  @property
  def dtype(self):
    """The dtype, the same for every member."""
    return self.batched.dtype

  @property
  def T(self):  # pylint: disable=invalid-name
    """The member's transpose."""
    return np.transpose(self)

  @property
  def real(self):
    """The real part."""
    return np.real(self)

  @property
  def imag(self):
    """The imaginary part."""
    return np.imag(self)

  def __len__(self):
    if self.batched.ndim == 1:
      raise TypeError('len() of unsized object')
    return self.batched.shape[1]

  def __iter__(self):
    for k in range(len(self)):
      yield self[k]

  def __repr__(self):
    return (f'MemberArray(member shape {self.shape}, dtype {self.dtype}, '
            f'batch of {self.batched.shape[0]})')

  # A per-member value is not one Python value.
  def _refuse_scalar(self, what):
    raise errors.PerMemberError(
        f'{what} of a per-member value: it holds a number for each member, '
        'not one Python value.', hint=_SCALAR_HINT)

  def __bool__(self):
    self._refuse_scalar('bool() (an if, while, and, or, not or a '
                        'comparison chain)')

  def __int__(self):
    self._refuse_scalar('int()')

  def __float__(self):
    self._refuse_scalar('float()')

  def __complex__(self):
    self._refuse_scalar('complex()')

  def __index__(self):
    raise errors.PerMemberError(
        'A per-member value used as one Python integer (a length, shape, '
        'range bound or index of a Python list): it holds an integer for '
        'each member.', hint=_PAD_HINT)

  def item(self, *args):
    """Refused: a per-member value is not one Python number.

    Args:
      *args: As `ndarray.item`'s.
    """
    del args
    self._refuse_scalar('.item()')

  def tolist(self):
    """Refused: a per-member value is not one Python list."""
    self._refuse_scalar('.tolist()')

  def __array__(self, dtype=None, copy=None):
    del dtype, copy
    raise errors.PerMemberError(
        'NumPy was asked for a plain array of a per-member value (np.asarray, '
        'np.array, np.arange or indexing a plain array with it).',
        hint='Use per-member values directly in NumPy functions and '
        'operators, and index plain arrays in the per-member function\'s '
        'own code (a[i] there reads each member\'s element); for a size, '
        'use a fixed size.  ' + _PAD_HINT)

  # NumPy's protocols.
  def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    if kwargs.get('out') is not None:
      raise errors.PerMemberError(
          f'np.{ufunc.__name__}(..., out=...) on per-member values.',
          hint='Write y = np.%s(...) and use y: per-member functions are '
          'functional.' % ufunc.__name__)
    kwargs.pop('out', None)
    if method == '__call__':
      if ufunc is np.matmul:
        return _matmul(*inputs, **kwargs)
      return _ufunc_call(ufunc, inputs, kwargs)
    rule = _UFUNC_METHODS.get(method)
    if rule is None:
      return _run_per_member(getattr(ufunc, method), inputs, kwargs,
                             f'np.{ufunc.__name__}.{method}')
    return rule(ufunc, *inputs, **kwargs)

  def __array_function__(self, func, types, args, kwargs):
    del types
    rule = _RULES.get(func)
    if rule is not None:
      try:
        result = rule(*args, **kwargs)
      except _NoRule:
        result = _NO_RULE
      if result is not _NO_RULE:
        return result
    return _run_per_member(func, args, kwargs, _name(func))

  # Indexing.
  def __getitem__(self, key):
    return getitem(self, key)

  def __setitem__(self, key, value):
    # The wrapper takes the updated array; the batched array it held is
    # not written, since it may be a caller's input.
    self.batched = setitem(self, key, value).batched

  # Methods of ndarray, as NumPy functions of the member.
  def astype(self, dtype, *args, **kwargs):
    """The member's array cast to `dtype`.

    Args:
      dtype: The new dtype.
      *args, **kwargs: As `ndarray.astype`'s.

    Returns:
      A `MemberArray`.
    """
    return MemberArray(self.batched.astype(dtype, *args, **kwargs))

  def copy(self, order='C'):
    """A copy of the member's array.

    Args:
      order: As `ndarray.copy`'s.

    Returns:
      A `MemberArray`.
    """
    return MemberArray(self.batched.copy(order))

  def reshape(self, *shape, **kwargs):
    """The member's array reshaped to a member shape.

    Args:
      *shape, **kwargs: As `ndarray.reshape`'s: the member's new shape.

    Returns:
      A `MemberArray`.
    """
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
      shape = shape[0]
    return np.reshape(self, tuple(shape), **kwargs)

  def transpose(self, *axes):
    """The member's array with its axes permuted.

    Args:
      *axes: As `ndarray.transpose`'s, member axes.

    Returns:
      A `MemberArray`.
    """
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
      axes = axes[0]
    return np.transpose(self, axes or None)

  def flatten(self, order='C'):
    """The member's array as a flat copy.

    Args:
      order: As `ndarray.flatten`'s.

    Returns:
      A `MemberArray`.
    """
    return MemberArray(self.batched.reshape(self.batched.shape[0], -1,
                                            order=order).copy())

  def __getattr__(self, name):
    # Other ndarray methods (sum, mean, argmax, cumsum, ...) are the NumPy
    # functions of the same name, with their rules; the rest run per member.
    if name.startswith('_') or not hasattr(np.ndarray, name):
      raise AttributeError(
          f'{type(self).__name__!r} object has no attribute {name!r}')
    func = _METHOD_FUNCTIONS.get(name)
    if func is not None:
      return functools.partial(func, self)
    def method(*args, **kwargs):
      return _run_per_member(
          lambda x, *a, **k: getattr(x, name)(*a, **k), (self,) + args,
          kwargs, f'ndarray.{name}')
    return method


_METHOD_FUNCTIONS = {
    name: getattr(np, name) for name in (
        'sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'any', 'all',
        'argmax', 'argmin', 'cumsum', 'cumprod', 'ravel', 'squeeze',
        'swapaxes', 'clip', 'round', 'conj', 'conjugate', 'nonzero', 'dot',
        'trace', 'diagonal', 'take', 'repeat', 'searchsorted', 'ptp',
        'argsort', 'partition', 'argpartition')}


def _operators():
  """Python's operators on `MemberArray`, as the ufuncs NumPy maps them to."""
  def binary(ufunc):
    return (lambda self, other: ufunc(self, other),
            lambda self, other: ufunc(other, self))
  pairs = {'add': np.add, 'sub': np.subtract, 'mul': np.multiply,
           'truediv': np.true_divide, 'floordiv': np.floor_divide,
           'mod': np.remainder, 'pow': np.power, 'matmul': np.matmul,
           'and': np.bitwise_and, 'or': np.bitwise_or,
           'xor': np.bitwise_xor, 'lshift': np.left_shift,
           'rshift': np.right_shift, 'divmod': np.divmod}
  for name, ufunc in pairs.items():
    forward, reflected = binary(ufunc)
    setattr(MemberArray, f'__{name}__', forward)
    setattr(MemberArray, f'__r{name}__', reflected)
  comparisons = {'lt': np.less, 'le': np.less_equal, 'gt': np.greater,
                 'ge': np.greater_equal, 'eq': np.equal, 'ne': np.not_equal}
  for name, ufunc in comparisons.items():
    setattr(MemberArray, f'__{name}__', binary(ufunc)[0])
  unary = {'neg': np.negative, 'pos': np.positive, 'abs': np.absolute,
           'invert': np.invert}
  for name, ufunc in unary.items():
    setattr(MemberArray, f'__{name}__', lambda self, u=ufunc: u(self))
  MemberArray.__hash__ = None


_operators()


def is_member(x):
  """Whether `x` is a per-member value.

  Args:
    x: Any value.

  Returns:
    True for a `MemberArray`.
  """
  return isinstance(x, MemberArray)


def member_shape(x):
  """One member's shape of `x`.

  Args:
    x: A `MemberArray` or a plain value.

  Returns:
    The member shape (without the batch axis), or a plain value's shape.
  """
  if isinstance(x, MemberArray):
    return x.shape
  return np.shape(x)


def member_len(x):
  """`len()` of one member's `x`.

  Args:
    x: A `MemberArray` or a plain value.

  Returns:
    The length of its leading member axis.
  """
  return len(x)


# Helpers of the rules.

_NO_RULE = object()  # A rule's answer: run this call once per member.


def _name(func):
  module = getattr(func, '__module__', None) or ''
  name = getattr(func, '__qualname__', None) or getattr(func, '__name__',
                                                         repr(func))
  if module.startswith('numpy'):
    prefix = 'np.linalg.' if 'linalg' in module else 'np.'
    return prefix + name
  return f'{module}.{name}' if module else name


def _ndim(x):
  """One member's rank of `x`."""
  if isinstance(x, MemberArray):
    return x.batched.ndim - 1
  if type(x) in (float, int, bool):
    return 0
  return np.ndim(x)


def _aligned(x, ndim):
  """`x` as an operand of a batched operation of member rank `ndim`.

  A `MemberArray` gives its batched array with axes inserted after the
  batch axis up to member rank `ndim`; a plain value is returned as is
  (NumPy aligns it from the right).
  """
  if not isinstance(x, MemberArray):
    return x
  b = x.batched
  missing = ndim - (b.ndim - 1)
  if missing <= 0:
    return b
  return b.reshape(b.shape[:1] + (1,) * missing + b.shape[1:])


def _full(x, batch, ndim=None):
  """`x` as a batched array of member rank `ndim` (its own by default):
  a plain value is broadcast over `batch` members."""
  if isinstance(x, MemberArray):
    return _aligned(x, x.ndim if ndim is None else ndim)
  x = np.asarray(x)
  if ndim is not None and ndim > x.ndim:
    x = x.reshape((1,) * (ndim - x.ndim) + x.shape)
  return np.broadcast_to(x, (batch,) + x.shape)


def _ranked(x, ndim):
  """`x` with a batch axis (of 1 for a plain value) and, behind it, member
  rank `ndim` (at least): for operations that do not broadcast ranks."""
  if isinstance(x, MemberArray):
    return _aligned(x, ndim)
  return _full(x, 1, ndim)


def _batch_of(values):
  """The batch size of the first `MemberArray` among `values`, or None."""
  for v in values:
    if isinstance(v, MemberArray):
      return v.batched.shape[0]
    if isinstance(v, (list, tuple)):
      b = _batch_of(v)
      if b is not None:
        return b
  return None


def _wrap(result):
  """A batched result (an array, or a tuple/namedtuple of them) as
  `MemberArray`s."""
  if isinstance(result, tuple):
    items = [_wrap(r) for r in result]
    return type(result)(*items) if patterns.is_namedtuple(result) else tuple(
        items)
  if isinstance(result, list):
    return [_wrap(r) for r in result]
  return MemberArray(np.asarray(result))


def _axis(axis, ndim):
  """Member axis `axis` (negative counts from the end) as a batched axis."""
  axis = int(axis)
  if not -ndim <= axis < ndim:
    raise np.exceptions.AxisError(axis, ndim)
  return axis % ndim + 1


def _axes(axis, ndim):
  """Member `axis` (an int, a tuple, or None for every member axis) as
  batched axes."""
  if axis is None:
    return tuple(range(1, ndim + 1))
  if isinstance(axis, (tuple, list)):
    return tuple(_axis(a, ndim) for a in axis)
  return _axis(axis, ndim)


def _refuse_out(name, out):
  if out is not None:
    raise errors.PerMemberError(
        f'{name}(..., out=...) on per-member values.',
        hint='Use the returned value: per-member functions are functional.')


def _flat(x):
  """A `MemberArray`'s batched array with the member axes flattened."""
  b = x.batched
  return b.reshape(b.shape[0], -1)


# Ufuncs.

# NumPy before 2 promotes by value where an array meets a NumPy scalar; a
# member's NumPy scalar is strong under NEP 50, as an array of ones is.
_VALUE_BASED_PROMOTION = np.lib.NumpyVersion(np.__version__) < '2.0.0'


def _strong_scalars(inputs, ndim):
  return [np.reshape(x, (1,) * (ndim + 1)) if isinstance(x, np.generic) or (
      isinstance(x, np.ndarray) and not x.ndim) else x for x in inputs]


def _ufunc_call(ufunc, inputs, kwargs):
  if ufunc.signature is not None:
    return _gufunc_call(ufunc, inputs, kwargs)
  where = kwargs.get('where', True)
  ranks = [_ndim(x) for x in inputs]
  ndim = max(ranks)
  if where is not True:
    ndim = max(ndim, _ndim(where))
    kwargs = dict(kwargs, where=_aligned(where, ndim))
  if _VALUE_BASED_PROMOTION:
    inputs = _strong_scalars(inputs, ndim)
  # The common case, operands of one member rank, skips the alignment.
  result = ufunc(*[x.batched if type(x) is MemberArray and r == ndim else
                   _aligned(x, ndim) for x, r in zip(inputs, ranks)],
                 **kwargs)
  if type(result) is np.ndarray:
    return MemberArray(result)
  return _wrap(result)


def _core_ranks(signature):
  """The number of core axes of each input of a gufunc signature."""
  ins = signature.split('->')[0]
  return [len([d for d in part.strip('()').split(',') if d.strip()])
          for part in ins.split('),(')]


def _gufunc_call(ufunc, inputs, kwargs):
  if '?' in ufunc.signature:
    return _run_per_member(ufunc, inputs, kwargs, f'np.{ufunc.__name__}')
  cores = _core_ranks(ufunc.signature)
  loops = [_ndim(x) - c for x, c in zip(inputs, cores)]
  loop = max(loops)
  args = [_aligned(x, loop + c) for x, c in zip(inputs, cores)]
  return _wrap(ufunc(*args, **kwargs))


def _reduce(ufunc, array, axis=0, dtype=None, out=None, keepdims=False,
            **kwargs):
  _refuse_out(f'np.{ufunc.__name__}.reduce', out)
  if not isinstance(array, MemberArray):
    return _run_per_member(ufunc.reduce, (array, axis), dict(
        kwargs, dtype=dtype, keepdims=keepdims), f'np.{ufunc.__name__}.reduce')
  ndim = array.ndim
  where = kwargs.get('where', True)
  if where is not True:
    kwargs['where'] = _aligned(where, ndim)
  return _wrap(ufunc.reduce(array.batched, axis=_axes(axis, ndim),
                            dtype=dtype, keepdims=keepdims, **kwargs))


def _accumulate(ufunc, array, axis=0, dtype=None, out=None):
  _refuse_out(f'np.{ufunc.__name__}.accumulate', out)
  array = _as_member(array)
  return _wrap(ufunc.accumulate(array.batched, axis=_axis(axis, array.ndim),
                                dtype=dtype))


def _outer(ufunc, a, b, **kwargs):
  na, nb = _ndim(a), _ndim(b)
  if isinstance(a, MemberArray):
    ab = a.batched
    a = ab.reshape(ab.shape + (1,) * nb)
  else:
    a = np.reshape(a, np.shape(a) + (1,) * nb)
  b = _aligned(b, na + nb)
  return _wrap(ufunc(a, b, **kwargs))


def _at(ufunc, a, indices, b=None):
  if not isinstance(a, MemberArray):
    raise errors.PerMemberError(
        f'np.{ufunc.__name__}.at on a plain array with per-member indices or '
        'values: each member would change the one shared array.',
        hint='Make the array per member first (x = np.zeros_like(...) of a '
        'per-member value), or compute the update with np.where.')
  plan = _IndexPlan(a, indices)
  out = plan.source.copy()
  ufunc.at(out, plan.key, *(() if b is None else (plan.value(b),)))
  # The wrapper takes the result: its batched array may be a caller's.
  a.batched = out.reshape(plan.shape)


class _NoRule(Exception):
  """Raised by a rule that has no batched form for these arguments: the
  call runs once per member."""


def _as_member(x):
  """`x`, which a rule needs per member (else the call runs per member)."""
  if isinstance(x, MemberArray):
    return x
  raise _NoRule()


_UFUNC_METHODS = {'reduce': _reduce, 'accumulate': _accumulate,
                  'outer': _outer, 'at': _at}


def _matrix(x, left, loop):
  """A `matmul` operand as a batched stack of matrices with `loop` loop axes
  per member: a vector is a row (`left`) or a column matrix."""
  vector = _ndim(x) == 1
  if not isinstance(x, MemberArray):
    x = np.asarray(x)
    return (x[None, :] if left else x[:, None]) if vector else x
  b = x.batched
  if vector:
    b = b[:, None, :] if left else b[:, :, None]
  return b.reshape(b.shape[:1] + (1,) * (loop + 3 - b.ndim) + b.shape[1:])


def _matmul(a, b, **kwargs):
  na, nb = _ndim(a), _ndim(b)
  if na == 0 or nb == 0:
    raise ValueError('matmul: Input operand does not have enough dimensions '
                     '(a per-member scalar; use * for a product)')
  loop = max(na, nb, 2) - 2
  a, b = _matrix(a, True, loop), _matrix(b, False, loop)
  result = np.matmul(a, b, **kwargs)
  if nb == 1:
    result = result[..., 0]
  if na == 1:
    result = result[..., 0, :] if nb > 1 else result[..., 0]
  return _wrap(result)


# Indexing.

class _IndexPlan:
  """How one member's `x[key]` runs on the batched array.

  Attributes:
    source: `x`'s batched array, with an axis of length 1 for each None of
      the key (a None then indexes like a slice of that axis, which is
      where NumPy puts its axis, and the advanced block, for one member).
    key: The key of `source` (the batch axis first).
    rank: The member result's rank.
    move: None, or (block rank, position): the batched result holds the
      advanced block right after the batch axis, and one member's result
      holds it at this position among the sliced axes.
  """

  def __init__(self, x, key):
    self.shape = x.batched.shape
    batch = self.shape[0]
    key = _expanded_key(key if isinstance(key, tuple) else (key,), x.ndim)
    source = x.batched
    if any(k is None for k in key):
      shape = list(self.shape)
      for p, k in enumerate(key):
        if k is None:
          shape.insert(p + 1, 1)
      source = source.reshape(shape)
      key = tuple(slice(None) if k is None else k for k in key)
    self.source = source
    slices = sum(1 for k in key if isinstance(k, slice))
    advanced = [p for p, k in enumerate(key)
                if isinstance(k, (MemberArray, np.ndarray))]
    self.move = None
    if not advanced:
      self.key = (slice(None),) + key
      self.rank = slices
      return
    # With an array among them, integers index as advanced indices too.
    advanced = [p for p, k in enumerate(key) if not isinstance(k, slice)]
    shapes = [member_shape(key[p]) for p in advanced]
    block = shapes[0] if len(set(shapes)) == 1 else np.broadcast_shapes(
        *shapes)
    self.rank = slices + len(block)
    contiguous = advanced[-1] - advanced[0] == len(advanced) - 1
    if contiguous and not any(isinstance(key[p], MemberArray)
                              for p in advanced):
      # NumPy keeps the block in place, behind the batch axis's slice.
      self.key = (slice(None),) + key
      return
    batch_index = _batch_index(batch, len(block))
    self.key = (batch_index,) + tuple(
        _aligned(k, len(block)) if isinstance(k, MemberArray) else k
        for k in key)
    if contiguous and advanced[0] > 0:
      self.move = (len(block), advanced[0])

  def _moved_axes(self):
    rank, at = self.move
    return range(1, 1 + rank), range(1 + at, 1 + at + rank)

  def result_of(self, batched):
    """The batched `source[key]` laid out as one member's `x[key]`."""
    if self.move is None:
      return batched
    return np.moveaxis(batched, *self._moved_axes())

  def value(self, value):
    """`value`, as each member writes it into `x[key]`, laid out as the
    batched `source[key]`."""
    v = _ranked(value, self.rank)
    if self.move is None or v.ndim != self.rank + 1:
      return v
    destination, source = self._moved_axes()
    return np.moveaxis(v, source, destination)

  def written(self, value):
    """A copy of `x`'s batched array with `value` written at `key`."""
    out = self.source.copy()
    out[self.key] = self.value(value)
    return out.reshape(self.shape)


@functools.lru_cache(maxsize=64)
def _batch_index(batch, rank):
  """`arange(batch)` with `rank` axes of length 1 behind, read-only."""
  index = np.arange(batch).reshape((batch,) + (1,) * rank)
  index.flags.writeable = False
  return index


def _expanded_key(key, ndim):
  """`key` with lists as arrays, boolean masks as integer indices and the
  Ellipsis (or the end) spelled out as slices."""
  out = []
  for k in key:
    if isinstance(k, list):
      k = asarray(k)
    if isinstance(k, MemberArray) and k.dtype == np.bool_:
      out.extend(_member_mask_indices(k))
    elif isinstance(k, np.ndarray) and k.dtype == np.bool_ and k.ndim:
      out.extend(np.nonzero(k))
    else:
      out.append(k)
  used = sum(1 for k in out if k is not None and k is not Ellipsis)
  ellipsis = [p for p, k in enumerate(out) if k is Ellipsis]
  if ellipsis:
    out[ellipsis[0]:ellipsis[0] + 1] = [slice(None)] * (ndim - used)
  else:
    out.extend([slice(None)] * (ndim - used))
  return tuple(out)


def _member_mask_indices(mask):
  """The integer indices selecting where a per-member boolean mask holds,
  as `MemberArray`s; every member must select as many elements."""
  b = mask.batched
  if b.ndim == 1:
    raise errors.PerMemberError(
        'A per-member boolean scalar used as an index (x[c]): it adds an axis '
        'of length 1 or 0, which differs between members.',
        hint='Write np.where(c, x, fill) instead.')
  counts = b.reshape(b.shape[0], -1).sum(axis=1)
  if counts.size and np.any(counts != counts[0]):
    raise errors.PerMemberError(
        'A per-member boolean mask selects a different number of elements '
        f'in different members ({int(counts.min())} to {int(counts.max())}): '
        'the result\'s shape differs between members.', hint=_PAD_HINT +
        '  For a masked reduction, write np.sum(np.where(mask, x, 0)).')
  count = int(counts[0]) if counts.size else 0
  return [MemberArray(i.reshape(b.shape[0], count)) for i in np.nonzero(b)[1:]]


def getitem(x, index):
  """One member's `x[index]`, for per-member or plain `x` and `index`.

  Args:
    x: A `MemberArray`, or a plain array (indexed by per-member indices).
    index: What one member indexes with: ints, slices, None, Ellipsis,
      integer or boolean arrays, per-member or plain, or a tuple of them.

  Returns:
    The member's `x[index]` (plain where `x` and `index` are plain).
  """
  if not isinstance(x, MemberArray):
    batch = _batch_of(index if isinstance(index, tuple) else (index,))
    if batch is None:
      return x[index]
    x = MemberArray(_full(x, batch))
  plan = _IndexPlan(x, index)
  return MemberArray(plan.result_of(plan.source[plan.key]))


def setitem(x, index, value):
  """`x` with one member's `x[index] = value`, as a new value.

  Functional: `x` is not written.  `x`, `index` and `value` may each be
  per-member or plain; a plain `x` is broadcast over the batch when the
  index or the value is per member.

  Args:
    x: The array written.
    index: As for `getitem`.
    value: What each member writes; cast to `x`'s dtype as NumPy does.

  Returns:
    The new array: a `MemberArray`, or plain where all three are plain.
  """
  parts = (x, value) + (index if isinstance(index, tuple) else (index,))
  batch = _batch_of(parts)
  if batch is None:
    if isinstance(x, list):
      out = list(x)
    else:
      out = np.array(x, copy=True)
    out[index] = value
    return out
  if not isinstance(x, MemberArray):
    x = MemberArray(_full(x, batch))
  mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
  if (isinstance(mask, (MemberArray, np.ndarray)) and mask.dtype == np.bool_
      and _ndim(mask) and _ndim(value) == 0):
    # Each member writes one value where its mask holds, whatever the count.
    ndim = x.ndim
    written = np.where(_aligned(mask, ndim) if isinstance(
        mask, MemberArray) else np.reshape(
            mask, mask.shape + (1,) * (ndim - mask.ndim)),
                       _aligned(value, ndim), x.batched)
    return MemberArray(written.astype(x.dtype, copy=False))
  return MemberArray(_IndexPlan(x, index).written(value))


def asarray(value, dtype=None):
  """One member's `np.asarray(value, dtype)`.

  A list or tuple mixing per-member values and numbers is stacked per
  member.

  Args:
    value: A `MemberArray`, a plain value, or nested lists/tuples of both.
    dtype: The dtype, or None for NumPy's.

  Returns:
    A `MemberArray`, or a plain array where nothing is per member.
  """
  if isinstance(value, MemberArray):
    return value if dtype is None else value.astype(dtype)
  if not isinstance(value, (list, tuple)):
    return np.asarray(value, dtype=dtype)
  batch = _batch_of(value)
  if batch is None:
    return np.asarray(value, dtype=dtype)
  items = [asarray(v) for v in value]
  if any(member_shape(v) != member_shape(items[0]) for v in items):
    raise ValueError('setting an array element with a sequence: the '
                     'per-member parts have different shapes '
                     f'{[member_shape(v) for v in items]}')
  result_dtype = np.result_type(*[
      v.dtype if isinstance(v, MemberArray) else v for v in items])
  if dtype is not None:
    result_dtype = dtype
  stacked = np.stack([_full(v, batch) for v in items], axis=1)
  return MemberArray(stacked.astype(result_dtype, copy=False))


# The fallback: once per member.

def _run_per_member(func, args, kwargs, name):
  """`func(*args, **kwargs)` run once per member, its results stacked."""
  batch = _batch_of(list(args) + list(kwargs.values()))
  if batch is None:
    return func(*args, **kwargs)
  callback = _ACTIVE.callbacks[-1] if _ACTIVE.callbacks else None
  if callback is not None:
    callback(name)
  def member(b):
    def leaf(v):
      if isinstance(v, MemberArray):
        return v.batched[b]
      return v
    return (patterns.pattern_map(leaf, list(args), leaf_type=MemberArray),
            {k: patterns.pattern_map(leaf, v, leaf_type=MemberArray)
             for k, v in kwargs.items()})
  results = []
  for b in range(batch):  # The counted fallback: the one loop over members.
    a, k = member(b)
    results.append(func(*a, **k))
  if not results:
    return _empty_result(func, args, kwargs)
  return _stack(results, name)


def _empty_result(func, args, kwargs):
  """A batch of no members: the result of one member of zeros, with no
  rows."""
  def zeros(v):
    if isinstance(v, MemberArray):
      return np.zeros(v.shape, v.dtype)
    return v
  a = patterns.pattern_map(zeros, list(args), leaf_type=MemberArray)
  k = {n: patterns.pattern_map(zeros, v, leaf_type=MemberArray)
       for n, v in kwargs.items()}
  one = func(*a, **k)
  return patterns.pattern_map(
      lambda r: MemberArray(np.empty((0,) + np.shape(r), np.asarray(r).dtype)),
      one)


def _stack(results, name):
  first = results[0]
  flats = [patterns.pattern_flatten(r) for r in results]
  if any(len(f) != len(flats[0]) for f in flats):
    raise errors.PerMemberError(
        f'{name} returned results of different structure for different '
        'members.', hint=_PAD_HINT)
  leaves = []
  for column in zip(*flats):
    if not all(isinstance(v, (np.ndarray, np.generic, int, float, complex,
                              bool)) for v in column):
      if any(v is not column[0] and v != column[0] for v in column):
        raise errors.PerMemberError(
            f'{name} returned different non-array values for different '
            'members.', hint=_SCALAR_HINT)
      leaves.append(column[0])
      continue
    shapes = {np.shape(v) for v in column}
    if len(shapes) > 1:
      raise errors.PerMemberError(
          f'{name} gives arrays of different shapes for different members '
          f'({", ".join(str(s) for s in sorted(shapes)[:4])}): a batch holds '
          'one shape.', hint=_PAD_HINT)
    leaves.append(MemberArray(np.stack([np.asarray(v) for v in column])))
  return patterns.pattern_unflatten(first, leaves)


# The rule table: NumPy function -> rule(*args, **kwargs).

_RULES = {}


def _rule(*funcs):
  def register(rule):
    for func in funcs:
      if func is not None:
        _RULES[func] = functools.partial(rule, func)
    return rule
  return register


def _np(*names):
  """NumPy's functions of these names (`linalg.x` for np.linalg), skipping
  those this NumPy lacks."""
  found = []
  for name in names:
    owner = np
    for part in name.split('.')[:-1]:
      owner = getattr(owner, part)
    found.append(getattr(owner, name.split('.')[-1], None))
  return found


@_rule(*_np('sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'amax', 'amin',
            'any', 'all', 'nansum', 'nanprod', 'nanmean', 'nanstd', 'nanvar',
            'nanmax', 'nanmin', 'ptp', 'median', 'nanmedian'))
def _reduction(func, a, axis=None, *args, **kwargs):
  if not isinstance(a, MemberArray) or args:
    return _NO_RULE
  _refuse_out(_name(func), kwargs.pop('out', None))
  where = kwargs.get('where', True)
  if where is not True:
    kwargs['where'] = _aligned(where, a.ndim)
  return _wrap(func(a.batched, _axes(axis, a.ndim), **kwargs))


@_rule(np.count_nonzero)
def _count_nonzero(func, a, axis=None, **kwargs):
  a = _as_member(a)
  return _wrap(func(a.batched, axis=_axes(axis, a.ndim), **kwargs))


@_rule(*_np('argmax', 'argmin', 'nanargmax', 'nanargmin'))
def _arg_reduction(func, a, axis=None, out=None, **kwargs):
  if not isinstance(a, MemberArray):
    return _NO_RULE
  _refuse_out(_name(func), out)
  if axis is not None:
    return _wrap(func(a.batched, _axis(axis, a.ndim), **kwargs))
  keepdims = kwargs.pop('keepdims', False)
  result = func(_flat(a), 1, **kwargs)
  if keepdims:
    result = result.reshape((-1,) + (1,) * a.ndim)
  return _wrap(result)


@_rule(*_np('cumsum', 'cumprod', 'nancumsum', 'nancumprod'))
def _scan(func, a, axis=None, dtype=None, out=None):
  if not isinstance(a, MemberArray):
    return _NO_RULE
  _refuse_out(_name(func), out)
  if axis is None:
    return _wrap(func(_flat(a), 1, dtype))
  return _wrap(func(a.batched, _axis(axis, a.ndim), dtype))


@_rule(np.sort, np.argsort)
def _sort(func, a, axis=-1, **kwargs):
  if not isinstance(a, MemberArray):
    return _NO_RULE
  if axis is None:
    return _wrap(func(_flat(a), 1, **kwargs))
  return _wrap(func(a.batched, _axis(axis, a.ndim), **kwargs))


@_rule(np.partition, np.argpartition)
def _partition(func, a, kth, axis=-1, **kwargs):
  if not isinstance(a, MemberArray) or isinstance(kth, MemberArray):
    return _NO_RULE
  if axis is None:
    return _wrap(func(_flat(a), kth, 1, **kwargs))
  return _wrap(func(a.batched, kth, _axis(axis, a.ndim), **kwargs))


@_rule(np.percentile, np.quantile, np.nanpercentile, np.nanquantile)
def _quantile(func, a, q, axis=None, out=None, **kwargs):
  if not isinstance(a, MemberArray) or isinstance(q, MemberArray):
    return _NO_RULE
  _refuse_out(_name(func), out)
  result = func(a.batched, q, _axes(axis, a.ndim), **kwargs)
  qdims = np.ndim(q)
  return _wrap(np.moveaxis(result, qdims, 0) if qdims else result)


@_rule(np.flip)
def _flip(func, m, axis=None):
  m = _as_member(m)
  return _wrap(func(m.batched, _axes(axis, m.ndim)))


@_rule(np.roll)
def _roll(func, a, shift, axis=None):
  if not isinstance(a, MemberArray) or isinstance(shift, MemberArray):
    return _NO_RULE
  if axis is None:
    return _wrap(func(_flat(a), shift, 1).reshape(a.batched.shape))
  return _wrap(func(a.batched, shift, _axes(axis, a.ndim)))


@_rule(np.diff)
def _diff(func, a, n=1, axis=-1, **kwargs):
  if not isinstance(a, MemberArray):
    return _NO_RULE
  ndim = a.ndim
  for edge in ('prepend', 'append'):
    if edge in kwargs:
      v = kwargs[edge]
      if np.ndim(v) == 0 and not isinstance(v, MemberArray):
        continue
      kwargs[edge] = _full(v, a.batched.shape[0], ndim)
  return _wrap(func(a.batched, n, _axis(axis, ndim), **kwargs))


# Shapes and joining.

@_rule(np.reshape)
def _reshape(func, a, shape=None, order='C', **kwargs):
  a = _as_member(a)
  if shape is None:
    shape = kwargs.pop('newshape')
  shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
  return _wrap(func(a.batched, (a.batched.shape[0],) + shape, order=order,
                    **kwargs))


@_rule(np.ravel)
def _ravel(func, a, order='C'):
  del func
  a = _as_member(a)
  return _wrap(a.batched.reshape(a.batched.shape[0], -1, order=order))


@_rule(np.transpose)
def _transpose(func, a, axes=None):
  a = _as_member(a)
  if axes is None:
    axes = range(a.ndim - 1, -1, -1)
  return _wrap(func(a.batched, (0,) + tuple(_axis(x, a.ndim) for x in axes)))


@_rule(np.swapaxes)
def _swapaxes(func, a, axis1, axis2):
  a = _as_member(a)
  return _wrap(func(a.batched, _axis(axis1, a.ndim), _axis(axis2, a.ndim)))


@_rule(np.moveaxis)
def _moveaxis(func, a, source, destination):
  a = _as_member(a)
  return _wrap(func(a.batched, _axes(source, a.ndim),
                    _axes(destination, a.ndim)))


@_rule(np.expand_dims)
def _expand_dims(func, a, axis):
  a = _as_member(a)
  count = len(axis) if isinstance(axis, (tuple, list)) else 1
  return _wrap(func(a.batched, _axes(axis, a.ndim + count)))


@_rule(np.squeeze)
def _squeeze(func, a, axis=None):
  a = _as_member(a)
  if axis is None:
    axis = tuple(i for i, n in enumerate(a.shape) if n == 1)
  return _wrap(func(a.batched, _axes(axis, a.ndim)))


@_rule(np.broadcast_to)
def _broadcast_to(func, array, shape, **kwargs):
  array = _as_member(array)
  shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
  return _wrap(func(_aligned(array, len(shape)),
                    (array.batched.shape[0],) + shape, **kwargs))


@_rule(np.atleast_1d, np.atleast_2d, np.atleast_3d)
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
  batch = _batch_of(arrays)
  return [_full(a, batch) for a in arrays], batch


@_rule(np.concatenate)
def _concatenate(func, arrays, axis=0, out=None, **kwargs):
  _refuse_out('np.concatenate', out)
  arrays = list(arrays)
  if axis is None:
    arrays = [np.ravel(a) for a in arrays]
    axis = 0
  batched, _ = _joined(arrays)
  return _wrap(func(batched, _axis(axis, batched[0].ndim - 1), **kwargs))


@_rule(np.stack)
def _stack_rule(func, arrays, axis=0, out=None, **kwargs):
  _refuse_out('np.stack', out)
  batched, _ = _joined(list(arrays))
  return _wrap(func(batched, _axis(axis, batched[0].ndim), **kwargs))


@_rule(np.hstack)
def _hstack(func, tup, **kwargs):
  del func
  arrays = [np.atleast_1d(a) for a in tup]
  axis = 0 if all(_ndim(a) == 1 for a in arrays) else 1
  return np.concatenate(arrays, axis=axis, **kwargs)


@_rule(np.vstack)
def _vstack(func, tup, **kwargs):
  del func
  return np.concatenate([np.atleast_2d(a) for a in tup], axis=0, **kwargs)


@_rule(np.column_stack)
def _column_stack(func, tup):
  del func
  arrays = [np.reshape(a, (-1, 1)) if _ndim(a) < 2 else a for a in tup]
  return np.concatenate(arrays, axis=1)


@_rule(np.append)
def _append(func, arr, values, axis=None):
  del func
  if axis is None:
    return np.concatenate([np.ravel(arr), np.ravel(values)])
  return np.concatenate([arr, values], axis=axis)


@_rule(np.pad)
def _pad(func, array, pad_width, mode='constant', **kwargs):
  if not isinstance(array, MemberArray) or any(
      isinstance(v, MemberArray) for v in kwargs.values()):
    return _NO_RULE
  widths = np.broadcast_to(np.asarray(pad_width), (array.ndim, 2))
  return _wrap(func(array.batched, [(0, 0)] + [tuple(w) for w in widths],
                    mode, **kwargs))


@_rule(np.tile)
def _tile(func, A, reps):
  A = _as_member(A)
  reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
  ndim = max(A.ndim, len(reps))
  reps = (1,) * (ndim - len(reps)) + reps
  return _wrap(func(_aligned(A, ndim), (1,) + reps))


@_rule(np.repeat)
def _repeat(func, a, repeats, axis=None):
  if not isinstance(a, MemberArray) or isinstance(repeats, MemberArray):
    return _NO_RULE
  if axis is None:
    return _wrap(func(_flat(a), repeats, 1))
  return _wrap(func(a.batched, repeats, _axis(axis, a.ndim)))


# Elementwise functions that are not ufuncs: member ranks aligned.

def _elementwise(func, arrays, *args, **kwargs):
  ndim = max(_ndim(a) for a in arrays)
  return _wrap(func(*[_aligned(a, ndim) for a in arrays], *args, **kwargs))


@_rule(np.where)
def _where(func, condition, *xy):
  if not xy:
    return np.nonzero(condition)
  return _elementwise(func, (condition,) + xy)


@_rule(np.clip)
def _clip(func, a, *bounds, out=None, **kwargs):
  _refuse_out('np.clip', out)
  named = {k: kwargs.pop(k) for k in ('min', 'max') if k in kwargs}
  ndim = max(_ndim(v) for v in (a,) + bounds + tuple(named.values()))
  bounds = [None if v is None else _aligned(v, ndim) for v in bounds]
  named = {k: None if v is None else _aligned(v, ndim)
           for k, v in named.items()}
  return _wrap(func(_aligned(a, ndim), *bounds, **named, **kwargs))


@_rule(np.isclose)
def _isclose(func, a, b, *args, **kwargs):
  return _elementwise(func, (a, b), *args, **kwargs)


@_rule(np.allclose)
def _allclose(func, a, b, *args, **kwargs):
  del func
  close = np.isclose(a, b, *args, **kwargs)
  return np.all(close) if isinstance(close, MemberArray) else bool(
      np.all(close))


@_rule(np.array_equal)
def _array_equal(func, a1, a2, equal_nan=False):
  if member_shape(a1) != member_shape(a2):
    return False
  equal = a1 == a2
  if equal_nan:
    equal = equal | (np.isnan(a1) & np.isnan(a2))
  return np.all(equal)


@_rule(*_np('round', 'around', 'round_', 'nan_to_num', 'real', 'imag',
            'conj', 'conjugate', 'angle', 'iscomplexobj', 'isrealobj',
            'isreal', 'iscomplex', 'copy', 'sinc', 'i0'))
def _pointwise(func, a, *args, **kwargs):
  if not isinstance(a, MemberArray) or any(
      isinstance(v, MemberArray) for v in list(args) + list(kwargs.values())):
    return _NO_RULE
  _refuse_out(_name(func), kwargs.pop('out', None))
  result = func(a.batched, *args, **kwargs)
  if func in (np.iscomplexobj, np.isrealobj):
    return result
  return _wrap(result)


@_rule(np.isin)
def _isin(func, element, test_elements, assume_unique=False, invert=False,
          **kwargs):
  if not isinstance(test_elements, MemberArray):
    return _elementwise(func, (element,), test_elements, assume_unique,
                        invert, **kwargs)
  batch = test_elements.batched.shape[0]
  e = _full(element, batch)
  tests = _flat(test_elements).reshape((batch,) + (1,) * (e.ndim - 1) + (-1,))
  found = np.any(e[..., None] == tests, axis=-1)
  return _wrap(~found if invert else found)


@_rule(np.interp)
def _interp(func, x, xp, fp, *args, **kwargs):
  if isinstance(xp, MemberArray) or isinstance(fp, MemberArray) or any(
      isinstance(v, MemberArray) for v in list(args) + list(kwargs.values())):
    return _NO_RULE
  return _wrap(func(x.batched, xp, fp, *args, **kwargs))


@_rule(np.shape)
def _shape(func, a):
  del func
  return member_shape(a)


@_rule(np.ndim)
def _ndim_rule(func, a):
  del func
  return _ndim(a)


@_rule(np.size)
def _size(func, a, axis=None):
  del func
  shape = member_shape(a)
  return int(np.prod(shape, dtype=np.int64)) if axis is None else shape[axis]


@_rule(np.result_type)
def _result_type(func, *arrays_and_dtypes):
  return func(*[a.dtype if isinstance(a, MemberArray) else a
                for a in arrays_and_dtypes])


# Creation from a per-member array.

@_rule(np.zeros_like, np.ones_like, np.empty_like)
def _like(func, prototype, dtype=None, order='K', subok=True, shape=None,
          **kwargs):
  prototype = _as_member(prototype)
  b = prototype.batched
  if shape is not None:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    shape = (b.shape[0],) + shape
  return _wrap(func(b, dtype, order, subok, shape, **kwargs))


@_rule(np.full_like)
def _full_like(func, a, fill_value, dtype=None, order='K', subok=True,
               shape=None, **kwargs):
  batch = _batch_of((a, fill_value))
  like = _full(a, batch)
  if shape is not None:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    shape = (batch,) + shape
  out = np.empty_like(like, dtype, order, subok, shape, **kwargs)
  out[...] = _aligned(fill_value, out.ndim - 1)
  del func
  return MemberArray(out)


@_rule(np.linspace)
def _linspace(func, start, stop, num=50, endpoint=True, retstep=False,
              dtype=None, axis=0):
  ndim = max(_ndim(start), _ndim(stop))
  batch = _batch_of((start, stop))
  result = func(_full(start, batch, ndim), _full(stop, batch, ndim), num,
                endpoint, retstep, dtype, axis=_axis(axis, ndim + 1))
  return _wrap(result)


# Selecting by value: the shape must agree between members.

def _agreed_count(mask, name):
  """The number of True elements of each member of the batched `mask`,
  which must agree."""
  counts = mask.reshape(mask.shape[0], -1).sum(axis=1)
  if counts.size and np.any(counts != counts[0]):
    raise errors.PerMemberError(
        f'{name} gives a different number of elements in different members '
        f'({int(counts.min())} to {int(counts.max())}): the result\'s shape '
        'differs between members.', hint=_PAD_HINT)
  return int(counts[0]) if counts.size else 0


@_rule(np.nonzero)
def _nonzero(func, a):
  a = _as_member(a)
  if a.ndim == 0:
    a = np.atleast_1d(a)
  mask = a.batched != 0
  count = _agreed_count(mask, 'np.nonzero')
  batch = mask.shape[0]
  return tuple(MemberArray(i.reshape(batch, count))
               for i in func(mask)[1:])


@_rule(np.argwhere)
def _argwhere(func, a):
  del func
  a = _as_member(a)
  if a.ndim == 0:
    raise errors.PerMemberError(
        'np.argwhere of a per-member scalar: its result has 1 or 0 rows, '
        'which differs between members.', hint=_PAD_HINT)
  return np.stack(np.nonzero(a), axis=-1)


@_rule(np.flatnonzero)
def _flatnonzero(func, a):
  del func
  return np.nonzero(np.ravel(a))[0]


@_rule(np.unique)
def _unique(func, ar, *args, **kwargs):
  del func
  if args or any(kwargs.get(k) for k in (
      'return_index', 'return_inverse', 'return_counts', 'axis')):
    return _NO_RULE
  ar = _as_member(ar)
  ordered = np.sort(_flat(ar), axis=1)
  new = np.ones(ordered.shape, bool)
  new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
  if kwargs.get('equal_nan', True) and ordered.dtype.kind in 'fc':
    new[:, 1:] &= ~(np.isnan(ordered[:, 1:]) & np.isnan(ordered[:, :-1]))
  count = _agreed_count(new, 'np.unique')
  return MemberArray(ordered[new].reshape(ordered.shape[0], count))


# Indexing functions.

@_rule(np.take)
def _take(func, a, indices, axis=None, out=None, mode='raise'):
  del func
  _refuse_out('np.take', out)
  if axis is None:
    a, axis = np.ravel(a), 0
  size = member_shape(a)[axis]
  if mode == 'wrap':
    indices = np.mod(indices, size)
  elif mode == 'clip':
    indices = np.clip(indices, 0, size - 1)
  axis = _axis(axis, _ndim(a)) - 1
  return getitem(a, (slice(None),) * axis + (indices,))


@_rule(np.take_along_axis)
def _take_along_axis(func, arr, indices, axis=-1):
  batch = _batch_of((arr, indices))
  if axis is None:
    arr, axis = np.ravel(arr), 0
  ndim = _ndim(arr)
  return _wrap(func(_full(arr, batch), _full(indices, batch, ndim),
                    _axis(axis, ndim)))


@_rule(np.searchsorted)
def _searchsorted(func, a, v, side='left', sorter=None):
  if sorter is not None:
    return _NO_RULE
  if not isinstance(a, MemberArray):
    return _wrap(func(a, v.batched, side))
  # Each member's insertion point is how many of its elements precede v.
  batch = a.batched.shape[0]
  v = _full(v, batch)
  elements = a.batched.reshape((batch,) + (1,) * (v.ndim - 1) + (-1,))
  before = elements < v[..., None] if side == 'left' else (
      elements <= v[..., None])
  return MemberArray(np.sum(before, axis=-1, dtype=np.intp))


# Linear algebra.

def _einsum(subscripts, *operands, **kwargs):
  """One member's `np.einsum(subscripts, *operands)`: per-member operands
  get a batch letter."""
  spec = subscripts.replace(' ', '')
  inputs, _, output = spec.partition('->')
  inputs = inputs.split(',')
  if '->' not in spec:
    letters = [c for c in ''.join(inputs) if c.isalpha()]
    output = ('...' if '...' in spec else '') + ''.join(
        sorted(c for c in set(letters) if letters.count(c) == 1))
  letter = next(c for c in string.ascii_letters if c not in spec)
  inputs = [letter + s if isinstance(x, MemberArray) else s
            for s, x in zip(inputs, operands)]
  operands = [x.batched if isinstance(x, MemberArray) else x
              for x in operands]
  return _wrap(np.einsum(f'{",".join(inputs)}->{letter}{output}', *operands,
                         **kwargs))


@_rule(np.einsum)
def _einsum_rule(func, subscripts, *operands, out=None, **kwargs):
  del func
  _refuse_out('np.einsum', out)
  if not isinstance(subscripts, str):
    return _NO_RULE
  return _einsum(subscripts, *operands, **kwargs)


def _letters(count, start=0):
  return string.ascii_lowercase[start:start + count]


@_rule(np.dot)
def _dot(func, a, b, out=None):
  del func
  _refuse_out('np.dot', out)
  na, nb = _ndim(a), _ndim(b)
  if na == 0 or nb == 0:
    return np.multiply(a, b)
  sa = _letters(na)
  if nb == 1:
    return _einsum(f'{sa},{sa[-1]}->{sa[:-1]}', a, b)
  sb = _letters(nb, na)
  sb = sb[:-2] + sa[-1] + sb[-1]
  return _einsum(f'{sa},{sb}->{sa[:-1]}{sb[:-2]}{sb[-1]}', a, b)


@_rule(np.inner)
def _inner(func, a, b):
  del func
  na, nb = _ndim(a), _ndim(b)
  if na == 0 or nb == 0:
    return np.multiply(a, b)
  sa, sb = _letters(na), _letters(nb, na)
  sb = sb[:-1] + sa[-1]
  return _einsum(f'{sa},{sb}->{sa[:-1]}{sb[:-1]}', a, b)


@_rule(np.outer)
def _outer_rule(func, a, b, out=None):
  del func
  _refuse_out('np.outer', out)
  return _einsum('i,j->ij', np.ravel(a), np.ravel(b))


@_rule(np.vdot)
def _vdot(func, a, b):
  del func
  return _einsum('i,i->', np.ravel(np.conj(a)), np.ravel(b))


@_rule(np.tensordot)
def _tensordot(func, a, b, axes=2):
  del func
  na, nb = _ndim(a), _ndim(b)
  if isinstance(axes, (int, np.integer)):
    axes_a, axes_b = list(range(na - axes, na)), list(range(axes))
  else:
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else axes_a
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else axes_b
  axes_a = [x % na for x in axes_a]
  axes_b = [x % nb for x in axes_b]
  sa, sb = list(_letters(na)), list(_letters(nb, na))
  for x, y in zip(axes_a, axes_b):
    sb[y] = sa[x]
  out = ([c for i, c in enumerate(sa) if i not in axes_a] +
         [c for i, c in enumerate(sb) if i not in axes_b])
  return _einsum(f'{"".join(sa)},{"".join(sb)}->{"".join(out)}', a, b)


@_rule(np.matmul)
def _matmul_rule(func, x1, x2, out=None, **kwargs):
  del func
  _refuse_out('np.matmul', out)
  return _matmul(x1, x2, **kwargs)


@_rule(np.trace, np.diagonal)
def _trace(func, a, offset=0, axis1=0, axis2=1, *args, **kwargs):
  a = _as_member(a)
  if func is np.trace:
    _refuse_out('np.trace', kwargs.pop('out', None))
  return _wrap(func(a.batched, offset, _axis(axis1, a.ndim),
                    _axis(axis2, a.ndim), *args, **kwargs))


@_rule(np.diag)
def _diag(func, v, k=0):
  del func
  v = _as_member(v)
  b = v.batched
  if v.ndim == 2:
    return MemberArray(np.diagonal(b, k, 1, 2).copy())
  if v.ndim != 1:
    raise ValueError('Input must be 1- or 2-d.')
  n = v.shape[0]
  size = n + abs(k)
  out = np.zeros((b.shape[0], size, size), b.dtype)
  steps = np.arange(n)
  out[:, steps + max(-k, 0), steps + max(k, 0)] = b
  return MemberArray(out)


@_rule(np.tril, np.triu)
def _tri(func, m, k=0):
  m = _as_member(m)
  if m.ndim < 2:
    return _NO_RULE
  return _wrap(func(m.batched, k))


@_rule(np.cross)
def _cross(func, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
  if (axisa, axisb, axisc, axis) != (-1, -1, -1, None):
    return _NO_RULE
  return _elementwise(func, (a, b))


@_rule(*_np('linalg.inv', 'linalg.det', 'linalg.slogdet', 'linalg.cholesky',
            'linalg.eigh', 'linalg.eigvalsh', 'linalg.eig', 'linalg.eigvals',
            'linalg.qr', 'linalg.svd', 'linalg.pinv', 'linalg.matrix_power',
            'linalg.matrix_rank', 'linalg.cond', 'linalg.svdvals'))
def _linalg_stacked(func, a, *args, **kwargs):
  # These broadcast over leading axes: the batch axis is one of them.
  if not isinstance(a, MemberArray) or any(
      isinstance(v, MemberArray) for v in list(args) + list(kwargs.values())):
    return _NO_RULE
  return _wrap(func(a.batched, *args, **kwargs))


@_rule(np.linalg.solve)
def _solve(func, a, b):
  na, nb = _ndim(a), _ndim(b)
  if na < 2:
    raise np.linalg.LinAlgError(f'{na}-dimensional array given. Array must '
                                'be at least two-dimensional')
  vector = nb == 1
  rank = max(na, nb + vector)
  a, b = _ranked(a, rank), _ranked(b, rank - vector)
  x = func(a, b[..., None] if vector else b)
  return _wrap(x[..., 0] if vector else x)


@_rule(np.linalg.norm)
def _norm(func, x, ord=None, axis=None, keepdims=False):  # pylint: disable=redefined-builtin
  x = _as_member(x)
  ndim = x.ndim
  if axis is None:
    if ord is None and ndim != 2:
      result = func(_flat(x), None, 1)
      if keepdims:
        result = result.reshape((-1,) + (1,) * ndim)
      return _wrap(result)
    axis = tuple(range(ndim)) if ndim == 2 else 0
  batched_axis = _axes(axis, ndim)
  return _wrap(func(x.batched, ord, batched_axis, keepdims))


# vectorize: the entry point of the NumPy backend.

def vectorize(fn, batch_size, fallback=None):
  """`fn`, written for one member, as a function of batched arrays.

  Args:
    fn: A function of one member's values (NumPy arrays without a batch
      axis, and patterns of them), returning a pattern of them.
    batch_size: The number of members.
    fallback: Called with a NumPy function's name each time it runs once
      per member for want of a batching rule; or None.

  Returns:
    `batched(*args)`: `args` are patterns whose leaves are NumPy arrays with
    a leading batch axis of `batch_size`; `fn` runs once, on `MemberArray`
    views of them.  Returns `fn`'s result pattern with every leaf a NumPy
    array with a leading batch axis: a leaf the same for every member (a
    plain array or number) is broadcast to the batch with the dtype NumPy
    gives it for one member.
  """
  def member(leaf):
    if isinstance(leaf, np.ndarray) and leaf.ndim:
      if leaf.shape[0] != batch_size:
        raise errors.InternalError(
            f'vectorize got an input of shape {leaf.shape} for a batch of '
            f'{batch_size}')
      return MemberArray(leaf)
    return leaf

  def batched_leaf(leaf):
    if isinstance(leaf, MemberArray):
      return leaf.batched
    if leaf is None:
      return None
    value = np.asarray(leaf)
    return np.array(np.broadcast_to(value, (batch_size,) + value.shape))

  def batched(*args):
    members = patterns.pattern_map(member, list(args))
    _ACTIVE.callbacks.append(fallback)
    try:
      result = fn(*members)
    finally:
      _ACTIVE.callbacks.pop()
    return patterns.pattern_map(batched_leaf, result, leaf_type=MemberArray)

  return batched
