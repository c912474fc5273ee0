"""`MemberArray`: one member's view of a batched NumPy array, and its ufuncs.

The core of the NumPy batching rules (`numpy_rules` is the entry point):
a `MemberArray` wraps a batched array (leading axis: the batch) and shows
one member's array: `shape`, `len()`, iteration and methods see the
member's axes only.  Ufuncs (`__array_ufunc__`, hence every Python
operator) align member ranks by inserting axes after the batch axis, so
that a member of shape (3,) and a plain array of shape (2, 3) broadcast as
they do for one member; `reduce`, `accumulate` and `outer` map their axes.

NumPy functions (`__array_function__`) look up their rule in `RULES`,
which `numpy_functions`, `numpy_indexing` and `numpy_linalg` fill (one rule
per function family, registered with `rule`); `numpy_indexing` also gives
`MemberArray` its indexing.  A function without a rule, or a rule that
raises `NoRule`, runs once per member (`run_per_member`): the one loop
over members, reported to the active `fallback` callback.  The helpers
here (`aligned`, `full`, `axes_of`, `wrap` ...) are what rules are written
with.

NumPy before 2 promotes by value where an array meets a NumPy scalar;
here a NumPy scalar is strong, so dtypes follow NEP 50 on every NumPy (as
NumPy 2 gives them for one member).
"""

import functools
import threading

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import patterns
from autobatch_vm.per_member import ragged

__all__ = ['MemberArray', 'is_member', 'member_shape', 'member_len']

PAD_HINT = errors.PAD_HINT

SCALAR_HINT = (
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


ACTIVE = _Active()


class MemberArray:
  """One member's view of a batched NumPy array.

  Indexing (`x[i]`, `x[i] = v`) comes with `numpy_indexing`, which
  `numpy_rules` imports.

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
        'not one Python value.', hint=SCALAR_HINT)

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
    raise errors.PerMemberError(errors.PYTHON_INTEGER, hint=errors.PYTHON_INTEGER_HINT)

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
        'use a fixed size.  ' + PAD_HINT)

  # NumPy's protocols.
  def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    if ragged.is_ragged(*inputs):
      return NotImplemented   # the slice's own (`Ragged.__array_ufunc__`)
    if 'out' in kwargs:
      if kwargs['out'] is not None:
        raise errors.PerMemberError(
            f'np.{ufunc.__name__}(..., out=...) on per-member values.',
            hint='Write y = np.%s(...) and use y: per-member functions are '
            'functional.' % ufunc.__name__)
      del kwargs['out']
    if method == '__call__':
      if ufunc is np.matmul:   # its rule is in numpy_linalg
        return RULES[np.matmul](*inputs, **kwargs)
      return _ufunc_call(ufunc, inputs, kwargs)
    rule = UFUNC_METHODS.get(method)
    if rule is None:
      return run_per_member(getattr(ufunc, method), inputs, kwargs,
                             f'np.{ufunc.__name__}.{method}')
    return rule(ufunc, *inputs, **kwargs)

  def __array_function__(self, func, types, args, kwargs):
    if ragged.Ragged in types:
      return NotImplemented   # the slice's own (`Ragged.__array_function__`)
    rule = RULES.get(func)
    if rule is not None:
      try:
        result = rule(*args, **kwargs)
      except NoRule:
        result = NO_RULE
      if result is not NO_RULE:
        return result
    return run_per_member(func, args, kwargs, name_of(func))

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
    if name in ('itemsize', 'nbytes'):
      return getattr(self.batched[0] if len(self.batched) else np.zeros(
          self.shape, self.dtype), name)
    if not callable(getattr(np.ndarray, name)):
      raise AttributeError(
          f'{name!r} of a per-member array: it describes the batched array\'s '
          'memory, not one member\'s.')
    def method(*args, **kwargs):
      return run_per_member(
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
  """Python's operators on `MemberArray`, as the ufuncs NumPy maps them to
  (their rules called directly: NumPy's dispatch to `__array_ufunc__` would
  only add its own cost)."""
  def binary(ufunc):
    if ufunc is np.matmul:
      return (lambda self, other: RULES[np.matmul](self, other),
              lambda self, other: RULES[np.matmul](other, self))
    def forward(self, other):
      if type(other).__name__ == 'Ragged':
        return NotImplemented   # a slice of per-member bounds: its own
      return _ufunc_call(ufunc, (self, other), {})

    def reflected(self, other):
      if type(other).__name__ == 'Ragged':
        return NotImplemented
      return _ufunc_call(ufunc, (other, self), {})
    return forward, reflected
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
    setattr(MemberArray, f'__{name}__',
            lambda self, u=ufunc: MemberArray(u(self.batched)))
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

NO_RULE = object()  # A rule's answer: run this call once per member.


def name_of(func):
  module = getattr(func, '__module__', None) or ''
  name = getattr(func, '__qualname__', None) or getattr(func, '__name__',
                                                         repr(func))
  if module.startswith('numpy'):
    prefix = 'np.linalg.' if 'linalg' in module else 'np.'
    return prefix + name
  return f'{module}.{name}' if module else name


def member_rank(x):
  """One member's rank of `x`."""
  kind = type(x)
  if kind is MemberArray:
    return x.batched.ndim - 1
  if kind is np.ndarray:
    return x.ndim
  if kind in (float, int, bool):
    return 0
  if isinstance(x, MemberArray):
    return x.batched.ndim - 1
  return np.ndim(x)


def aligned(x, ndim):
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


def full(x, batch, ndim=None):
  """`x` as a batched array of member rank `ndim` (its own by default):
  a plain value is broadcast over `batch` members."""
  if isinstance(x, MemberArray):
    return aligned(x, x.ndim if ndim is None else ndim)
  x = np.asarray(x)
  if ndim is not None and ndim > x.ndim:
    x = x.reshape((1,) * (ndim - x.ndim) + x.shape)
  return np.broadcast_to(x, (batch,) + x.shape)


def ranked(x, ndim):
  """`x` with a batch axis (of 1 for a plain value) and, behind it, member
  rank `ndim` (at least): for operations that do not broadcast ranks."""
  if isinstance(x, MemberArray):
    return aligned(x, ndim)
  return full(x, 1, ndim)


def batch_of(values):
  """The batch size of the first `MemberArray` among `values`, or None."""
  for v in values:
    if isinstance(v, MemberArray):
      return v.batched.shape[0]
    if isinstance(v, (list, tuple)):
      b = batch_of(v)
      if b is not None:
        return b
  return None


def wrap(result):
  """A batched result (an array, or a tuple/namedtuple of them) as
  `MemberArray`s."""
  if isinstance(result, tuple):
    items = [wrap(r) for r in result]
    return type(result)(*items) if patterns.is_namedtuple(result) else tuple(
        items)
  if isinstance(result, list):
    return [wrap(r) for r in result]
  return MemberArray(np.asarray(result))


def axis_of(axis, ndim):
  """Member axis `axis` (negative counts from the end) as a batched axis."""
  axis = int(axis)
  if not -ndim <= axis < ndim:
    raise np.exceptions.AxisError(axis, ndim)
  return axis % ndim + 1


def axes_of(axis, ndim):
  """Member `axis` (an int, a tuple, or None for every member axis) as
  batched axes."""
  if axis is None:
    return tuple(range(1, ndim + 1))
  if isinstance(axis, (tuple, list)):
    return tuple(axis_of(a, ndim) for a in axis)
  return axis_of(axis, ndim)


def refuse_out(name, out):
  if out is not None:
    raise errors.PerMemberError(
        f'{name}(..., out=...) on per-member values.',
        hint='Use the returned value: per-member functions are functional.')


def flat(x):
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
  ranks = [member_rank(x) for x in inputs]
  ndim = max(ranks)
  if where is not True:
    ndim = max(ndim, member_rank(where))
    kwargs = dict(kwargs, where=aligned(where, ndim))
  if _VALUE_BASED_PROMOTION:
    inputs = _strong_scalars(inputs, ndim)
  # The common case, operands of one member rank, skips the alignment.
  result = ufunc(*[x.batched if type(x) is MemberArray and r == ndim else
                   aligned(x, ndim) for x, r in zip(inputs, ranks)],
                 **kwargs)
  if type(result) is np.ndarray:
    return MemberArray(result)
  return wrap(result)


def _core_ranks(signature):
  """The number of core axes of each input of a gufunc signature."""
  ins = signature.split('->')[0]
  return [len([d for d in part.strip('()').split(',') if d.strip()])
          for part in ins.split('),(')]


def _gufunc_call(ufunc, inputs, kwargs):
  if '?' in ufunc.signature:
    return run_per_member(ufunc, inputs, kwargs, f'np.{ufunc.__name__}')
  cores = _core_ranks(ufunc.signature)
  loops = [member_rank(x) - c for x, c in zip(inputs, cores)]
  loop = max(loops)
  args = [aligned(x, loop + c) for x, c in zip(inputs, cores)]
  return wrap(ufunc(*args, **kwargs))


def _reduce(ufunc, array, axis=0, dtype=None, out=None, keepdims=False,
            **kwargs):
  refuse_out(f'np.{ufunc.__name__}.reduce', out)
  if not isinstance(array, MemberArray):
    return run_per_member(ufunc.reduce, (array, axis), dict(
        kwargs, dtype=dtype, keepdims=keepdims), f'np.{ufunc.__name__}.reduce')
  ndim = array.ndim
  where = kwargs.get('where', True)
  if where is not True:
    kwargs['where'] = aligned(where, ndim)
  return wrap(ufunc.reduce(array.batched, axis=axes_of(axis, ndim),
                            dtype=dtype, keepdims=keepdims, **kwargs))


def _accumulate(ufunc, array, axis=0, dtype=None, out=None):
  refuse_out(f'np.{ufunc.__name__}.accumulate', out)
  array = as_member(array)
  return wrap(ufunc.accumulate(array.batched, axis=axis_of(axis, array.ndim),
                                dtype=dtype))


def _outer(ufunc, a, b, **kwargs):
  na, nb = member_rank(a), member_rank(b)
  if isinstance(a, MemberArray):
    ab = a.batched
    a = ab.reshape(ab.shape + (1,) * nb)
  else:
    a = np.reshape(a, np.shape(a) + (1,) * nb)
  b = aligned(b, na + nb)
  return wrap(ufunc(a, b, **kwargs))


class NoRule(Exception):
  """Raised by a rule without a batched form for its arguments.

  The call then runs once per member.
  """


def as_member(x):
  """`x`, which a rule needs per member (else the call runs per member)."""
  if isinstance(x, MemberArray):
    return x
  raise NoRule()


# Rules of ufunc methods by name; numpy_indexing adds 'at'.
UFUNC_METHODS = {'reduce': _reduce, 'accumulate': _accumulate,
                 'outer': _outer}


# The fallback: once per member.

def run_per_member(func, args, kwargs, name):
  """`func(*args, **kwargs)` run once per member, its results stacked."""
  batch = batch_of(list(args) + list(kwargs.values()))
  if batch is None:
    return func(*args, **kwargs)
  callback = ACTIVE.callbacks[-1] if ACTIVE.callbacks else None
  if callback is not None:
    callback(name)
  # Each member gets rows of a copy, which its wrapper then takes: a
  # function that writes its argument in place (np.fill_diagonal) writes
  # the member's array, never the caller's batched input.
  copies = {}
  def member(b):
    def leaf(v):
      if isinstance(v, MemberArray):
        if id(v) not in copies:
          copies[id(v)] = (v, v.batched.copy())
        return copies[id(v)][1][b]
      return v
    return (patterns.pattern_map(leaf, list(args), leaf_type=MemberArray),
            {k: patterns.pattern_map(leaf, v, leaf_type=MemberArray)
             for k, v in kwargs.items()})
  results = []
  for b in range(batch):  # The counted fallback: the one loop over members.
    a, k = member(b)
    results.append(func(*a, **k))
  for v, copy in copies.values():
    v.batched = copy
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
        'members.', hint=PAD_HINT)
  leaves = []
  for column in zip(*flats):
    if not all(isinstance(v, (np.ndarray, np.generic, int, float, complex,
                              bool)) for v in column):
      if any(v is not column[0] and v != column[0] for v in column):
        raise errors.PerMemberError(
            f'{name} returned different non-array values for different '
            'members.', hint=SCALAR_HINT)
      leaves.append(column[0])
      continue
    shapes = {np.shape(v) for v in column}
    if len(shapes) > 1:
      raise errors.PerMemberError(
          f'{name} gives arrays of different shapes for different members '
          f'({", ".join(str(s) for s in sorted(shapes)[:4])}): a batch holds '
          'one shape.', hint=PAD_HINT)
    leaves.append(MemberArray(np.stack([np.asarray(v) for v in column])))
  return patterns.pattern_unflatten(first, leaves)


# The rule table: NumPy function -> rule(*args, **kwargs).

RULES = {}


def rule(*funcs):
  def register(rule):
    for func in funcs:
      if func is not None:
        RULES[func] = functools.partial(rule, func)
    return rule
  return register


def numpy_functions(*names):
  """NumPy's functions of these names (`linalg.x` for np.linalg), skipping
  those this NumPy lacks."""
  found = []
  for name in names:
    owner = np
    for part in name.split('.')[:-1]:
      owner = getattr(owner, part)
    found.append(getattr(owner, name.split('.')[-1], None))
  return found
