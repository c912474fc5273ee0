"""Python's `math` functions and `round`, `int` on one member's numbers.

A per-member function may call `math.sqrt(x)`, `math.floor(x)`,
`math.isclose(a, b)`, `round(x)` or `int(x)` on one member's scalar; the
frontend rewrites such a call to `member_ops.math_fn(name, ...)`
(`member_ops.round`, `member_ops.int`), which computes it for every
member at once: with NumPy on a member's array, a `MemberArray` or a
batch's rows, with TensorFlow on one member's tensor (inside
TensorFlow's vectorizer).

Each means what Python's does for one member:

- A float function converts its arguments to float64 and returns float64,
  as Python's `float` is (`float(x)` does the same).
- `floor`, `ceil`, `trunc` and `round(x)` return an int64 (Python's int:
  a result beyond int64 is an error here, as no int64 holds it); `round`
  rounds half to even, `round(x, n)` returns a float.
- `isnan`, `isinf`, `isfinite` and `isclose` return booleans.
- Where Python raises, the members for which it would raise fail with
  Python's exception: `ValueError('math domain error')` where a float
  function gives NaN of arguments that are not NaN (`math.sqrt(-1.0)`,
  `math.log(0.0)` gives -inf: also a domain error, `math.acos(2.0)`),
  `OverflowError('math range error')` where it overflows
  (`math.exp(1000.0)`), and `ValueError`/`OverflowError` where a NaN or an
  infinity is converted to an integer.  A call in an operand that Python
  evaluates only under a condition (`math.sqrt(x) if x >= 0 else 0.0`)
  checks only the members for which it holds (its guard).  On NumPy the
  primitive raises; on TensorFlow the flags go to the VM as those of an
  item index out of range do (`member_ops.note_failure`).
"""

import builtins
import math
import sys
import types

import numpy as np

from autobatch_vm import errors

__all__ = ['NAMES', 'FAILURES', 'MemberFailure', 'MemberIndexError',
           'boolean_scalar_index',
           'math_fn', 'to_int', 'round_half_even', 'pow_mod']

# Python's messages for what each failure kind stands for, by kind:
# (the exception's type name, its message).
FAILURES = {
    'domain': ('ValueError', 'math domain error'),
    'range': ('OverflowError', 'math range error'),
    'nan_int': ('ValueError', 'cannot convert float NaN to integer'),
    'inf_int': ('OverflowError', 'cannot convert float infinity to integer'),
    'int64': ('OverflowError',
              'the integer does not fit an int64 (a Python int would hold '
              'it; a batch holds int64)'),
    'zero_log_base': ('ZeroDivisionError', 'float division by zero'),
    'factorial_negative': ('ValueError',
                           'factorial() not defined for negative values'),
    'negative_integer': ('ValueError', 'comb(), perm() and isqrt() take '
                         'nonnegative integers'),
    'negative_power': ('ValueError', 'Integers to negative integer powers '
                       'are not allowed.'),
    # A slice whose bounds differ between members (`per_member.ragged`).
    'empty_reduction': ('ValueError',
                        'zero-size array to reduction operation which has '
                        'no identity (a maximum, minimum, argmax or argmin '
                        'of an empty slice)'),
    'empty_sequence': ('ValueError', 'max() or min() arg is an empty '
                       'sequence'),
    'empty_points': ('ValueError', 'array of sample points is empty '
                     '(np.interp of an empty slice)'),
    'digitize_bins': ('ValueError', 'bins must be monotonically '
                      'increasing or decreasing'),
    # A local read where it holds None (`python.optional`).
    'none': ('TypeError', 'a local that holds None is used as a value'),
    'slices_differ': ('ValueError',
                      'operands could not be broadcast together (slices '
                      'of different lengths, combined item by item)'),
    # `pow(a, e, m)` of a member's integers (`pow_mod`).
    'pow_mod_zero': ('ValueError', 'pow() 3rd argument cannot be 0'),
    'pow_mod_inverse': ('ValueError', 'base is not invertible for the '
                        'given modulus'),
    # `x in range(lo, hi, step)` with a member's zero step.
    'all_nan': ('ValueError', 'All-NaN slice encountered'),
    'range_step_zero': ('ValueError', 'range() arg 3 must not be zero'),
    'pow_mod_range': ('OverflowError',
                      'pow() with a modulus beyond 2**52 in absolute value '
                      '(a batch computes it in int64 and float64, exactly '
                      'below that bound)'),
}
# A Python int that the integer dtype it meets cannot hold, as NumPy 2
# refuses it (`member_ops.weak_operator`): `int_bounds_int8` ...
FAILURES.update({
    f'int_bounds_{np.dtype(t).name}': (
        'OverflowError', f'Python integer out of bounds for '
        f'{np.dtype(t).name}')
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
              np.uint32, np.uint64)})

# name -> (number of arguments, what it returns, whether a finite argument
# giving an infinity is an overflow (OverflowError) rather than a domain
# error (ValueError)); 'float' results follow Python's rule for them.
_FLOAT1 = {
    'sqrt': False, 'exp': True, 'expm1': True, 'log1p': False,
    'log2': False, 'log10': False, 'sin': False, 'cos': False, 'tan': False,
    'asin': False, 'acos': False, 'atan': False, 'sinh': True, 'cosh': True,
    'tanh': False, 'asinh': False, 'acosh': False, 'atanh': False,
    'fabs': False, 'exp2': True, 'cbrt': False, 'erf': False,
    'erfc': False,
}
# Gamma functions: a pole (a non-positive integer) is a domain error, an
# infinity elsewhere an overflow (`_check_gamma`).
_GAMMA = {'gamma', 'lgamma'}
_FLOAT2 = {'atan2': False, 'hypot': True, 'copysign': False, 'fmod': False,
           'pow': True}
_PLAIN = {'degrees', 'radians'}      # no check: Python computes x * k
_INT = {'floor', 'ceil', 'trunc'}
_BOOL = {'isnan', 'isinf', 'isfinite'}
# Every name the rewrite routes here; those this Python's `math` has.
# Number theory of a member's integers (`_integer_function`).
_INTEGER = {'gcd', 'lcm', 'comb', 'perm', 'isqrt'}
NAMES = frozenset(n for n in (set(_FLOAT1) | set(_FLOAT2) | _PLAIN | _INT |
                              _BOOL | _INTEGER | _GAMMA |
                              {'log', 'isclose', 'factorial'})
                  if hasattr(math, n))
# n! for the n whose factorial an int64 holds.
_FACTORIALS = np.array([math.factorial(k) for k in range(21)], np.int64)

_INT64_LIMIT = 2.0 ** 63


def boolean_scalar_index():
  """The `PerMemberError` for a member's boolean scalar used as an index.

  Returns:
    The error, to raise.
  """
  return errors.PerMemberError(
      'A per-member boolean scalar used as an index (x[c]): it adds an axis '
      'of length 1 or 0, which differs between members.',
      hint='Write np.where(c, x, fill) instead.')


class MemberFailure(Exception):
  """Raised by a per-member primitive on NumPy for the members for which
  Python raises (`FAILURES[kind]`); `vm.errors.primitive_failure` names
  them.

  Args:
    kind: A key of `FAILURES`.
    rows: The failing rows of the arrays the primitive got (None where
      the value was shared: every member fails).
  """

  def __init__(self, kind, rows):
    name, message = FAILURES[kind]
    super().__init__(f'{name}: {message}')
    self.kind = kind
    self.rows = rows
    self.python_name = name
    self.python_message = message


class MemberIndexError(MemberFailure, IndexError):
  """NumPy's `IndexError` of one member's item index out of range, raised
  by a per-member primitive on NumPy for the members whose index lies
  outside its axis (kind `'index'`); an `IndexError` to anything that
  takes it as NumPy's.

  Args:
    message: NumPy's message.
    rows: The failing rows of the arrays the primitive got.
  """

  def __init__(self, message, rows):  # pylint: disable=super-init-not-called
    IndexError.__init__(self, message)
    self.kind = 'index'
    self.rows = rows
    self.python_name = 'IndexError'
    self.python_message = message


def _tf():
  return sys.modules['tensorflow']


def _is_tf(*xs):
  tf = sys.modules.get('tensorflow')
  return tf is not None and builtins.any(
      tf.is_tensor(x) or isinstance(x, tf.Variable) for x in xs)


def _rules():
  return sys.modules.get('autobatch_vm.per_member.numpy_rules')


def _is_member(x):
  rules = _rules()
  return rules is not None and isinstance(x, rules.MemberArray)


def _plain(*xs):
  return builtins.all(isinstance(x, (builtins.int, builtins.float,
                                     builtins.bool)) for x in xs)


def _scalar(name, x, rows):
  """Refuses what Python's `math` refuses: a member's array (Python
  converts only a number), a complex number.  `rows`: `x` is the rows of
  the members at a block (each a scalar: the caller knows), or shared."""
  shape = getattr(x, 'shape', ())
  if _is_tf(x):
    rank = x.shape.rank
  else:
    rank = len(shape)
  if rank and not rows:
    raise TypeError(f'{name}() of an array of shape {tuple(shape)}: '
                    'Python converts only one number (use NumPy or '
                    'TensorFlow functions on a member\'s array)')
  if _kind(x) == 'c':
    raise TypeError(f'{name}() of a complex number')


def _like(number, guard):
  """A Python number as a value of the guard's kind: a tensor on
  TensorFlow, else a NumPy scalar array (of NumPy's dtype for it)."""
  value = np.asarray(number)
  return _tf().constant(value) if _is_tf(guard) else value


def _dtype(x):
  """The NumPy dtype of a member's value (a Python number's too)."""
  dtype = getattr(x, 'dtype', None)
  if dtype is None:
    return np.asarray(x).dtype
  return np.dtype(getattr(dtype, 'as_numpy_dtype', dtype))


def _kind(x):
  """The NumPy dtype kind of a member's value."""
  return _dtype(x).kind


def _as_float64(x):
  if _is_tf(x):
    tf = _tf()
    x = tf.convert_to_tensor(x)
    return x if x.dtype == tf.float64 else tf.cast(x, tf.float64)
  if _is_member(x):
    return x.astype(np.float64)
  return np.float64(x) if np.ndim(x) == 0 else np.asarray(x, np.float64)


def _cast_like(value, x):
  """`value` in float `x`'s dtype."""
  if _is_tf(x):
    return _tf().cast(value, x.dtype)
  return value.astype(x.dtype) if hasattr(value, 'astype') else (
      x.dtype.type(value))


def _api(x):
  """The array functions for `x`'s kind: TensorFlow's or NumPy's (which a
  `MemberArray` takes through its ufunc protocol)."""
  return _TfApi if _is_tf(x) else _NpApi


class _NpApi:
  """NumPy's forms (a `MemberArray` takes ufuncs through its protocol);
  the functions of `_FORMS` are set below."""

  @staticmethod
  def call(name, *xs):
    with np.errstate(all='ignore'):
      if name in _NP_SPECIAL:
        return _NP_SPECIAL[name](*xs)
      return getattr(np, _NP_NAMES.get(name, name))(*xs)

  @staticmethod
  def to_int(x):
    return x.astype(np.int64)


_NP_NAMES = {'asin': 'arcsin', 'acos': 'arccos', 'atan': 'arctan',
             'asinh': 'arcsinh', 'acosh': 'arccosh', 'atanh': 'arctanh',
             'atan2': 'arctan2', 'pow': 'power'}


def _np_erf_parts(x):
  """For `|x|`: where it is below 2.5, erf by its series of positive
  terms; above, erfc by its continued fraction (each to float64's
  precision at the boundary)."""
  a = np.abs(x)
  small = np.minimum(a, 2.5)
  term, total, twice = small, small, 2.0 * small * small
  for n in range(1, 70):
    term = term * twice / (2 * n + 1)
    total = total + term
  erf_small = 2.0 / math.sqrt(math.pi) * np.exp(-small * small) * total
  big = np.maximum(a, 2.5)
  fraction = big
  for k in range(90, 0, -1):
    fraction = big + (k / 2.0) / fraction
  erfc_big = np.exp(-big * big) / (math.sqrt(math.pi) * fraction)
  return a < 2.5, erf_small, erfc_big


def _np_erf(x):
  near, erf_small, erfc_big = _np_erf_parts(x)
  return np.sign(x) * np.where(near, erf_small, 1.0 - erfc_big)


def _np_erfc(x):
  near, erf_small, erfc_big = _np_erf_parts(x)
  above = np.where(near, 1.0 - erf_small, erfc_big)
  return np.where(x >= 0, above, 2.0 - above)


# Lanczos's approximation (g = 7, nine terms) of the gamma function.
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028,
            771.32342877765313, -176.61502916214059, 12.507343278686905,
            -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _lanczos_lgamma(x):
  """log |Gamma(x)| for x >= 0.5."""
  z = x - 1.0
  series = _LANCZOS[0]
  for i in range(1, len(_LANCZOS)):
    series = series + _LANCZOS[i] / (z + i)
  t = z + 7.5
  return (0.5 * math.log(2 * math.pi) + (z + 0.5) * np.log(t) - t +
          np.log(series))


def _np_lgamma(x):
  """log |Gamma(x)|, below 0.5 by the reflection formula."""
  right = _lanczos_lgamma(np.maximum(x, 0.5))
  left = np.minimum(x, 0.5)
  reflected = (np.log(math.pi / np.abs(np.sin(math.pi * left))) -
               _lanczos_lgamma(1.0 - left))
  return np.where(x >= 0.5, right, reflected)


def _np_gamma(x):
  """Gamma(x): its sign (negative between an odd negative integer and the
  even one above it) times exp of `_np_lgamma`."""
  odd = np.logical_and(x < 0, np.mod(np.floor(x), 2) != 0)
  return np.where(odd, -1.0, 1.0) * np.exp(_np_lgamma(x))


# The functions of `math` that NumPy lacks.
_NP_SPECIAL = {'erf': _np_erf, 'erfc': _np_erfc, 'lgamma': _np_lgamma,
               'gamma': _np_gamma}


class _TfApi:
  """TensorFlow's forms, on one member's float64 tensors; the functions
  of `_FORMS` are set below."""

  @staticmethod
  def call(name, *xs):
    tf = _tf()
    if name in ('log2', 'log10'):
      return tf.math.log(xs[0]) / tf.constant(
          math.log(2 if name == 'log2' else 10), tf.float64)
    if name == 'exp2':
      return tf.pow(tf.constant(2.0, tf.float64), xs[0])
    if name == 'cbrt':
      x = xs[0]
      return tf.sign(x) * tf.pow(tf.abs(x), tf.constant(1 / 3, tf.float64))
    if name == 'fabs':
      return tf.abs(xs[0])
    if name == 'fmod':
      return tf.truncatemod(*xs)
    if name == 'hypot':
      a, b = tf.abs(xs[0]), tf.abs(xs[1])
      big, small = tf.maximum(a, b), tf.minimum(a, b)
      safe = tf.where(big > 0, big, tf.ones_like(big))
      r = small / safe
      out = big * tf.sqrt(1 + r * r)
      # Infinities win over NaN, as C's hypot.
      inf = tf.logical_or(tf.math.is_inf(a), tf.math.is_inf(b))
      return tf.where(inf, tf.constant(math.inf, tf.float64), out)
    if name == 'copysign':
      x, y = xs
      # The sign of y, -0.0's too (pfor has no rule for a bitcast; a
      # NaN's sign bit is not read).
      is_zero = tf.equal(y, 0)
      inverse = tf.math.reciprocal(tf.where(is_zero, y, tf.ones_like(y)))
      negative = tf.logical_or(y < 0, tf.logical_and(is_zero, inverse < 0))
      return tf.where(negative, -tf.abs(x), tf.abs(x))
    if name == 'pow':
      return tf.pow(*xs)
    if name == 'gamma':
      x = xs[0]
      odd = tf.logical_and(x < 0, tf.not_equal(
          tf.math.floormod(tf.floor(x), 2.0), 0.0))
      return tf.where(odd, -tf.exp(tf.math.lgamma(x)),
                      tf.exp(tf.math.lgamma(x)))
    return getattr(tf.math, name)(*xs)

  @staticmethod
  def to_int(x):
    return _tf().cast(x, _tf().int64)


# The array functions both forms have: name -> (NumPy's, TensorFlow's by
# its path under `tf`); `round_half_even` is `np.rint`, `tf.math.round`.
_FORMS = {
    'isnan': (np.isnan, 'math.is_nan'), 'isinf': (np.isinf, 'math.is_inf'),
    'isfinite': (np.isfinite, 'math.is_finite'),
    'logical_and': (np.logical_and, 'logical_and'),
    'logical_or': (np.logical_or, 'logical_or'),
    'logical_not': (np.logical_not, 'logical_not'),
    'abs': (np.abs, 'abs'), 'where': (np.where, 'where'),
    'less_equal': (np.less_equal, 'less_equal'),
    'equal': (np.equal, 'equal'), 'maximum': (np.maximum, 'maximum'),
    'zeros_like': (np.zeros_like, 'zeros_like'),
    'floor': (np.floor, 'floor'),
    'round_half_even': (np.rint, 'math.round')}


def _tf_function(path):
  def call(*args):
    fn = _tf()
    for part in path.split('.'):
      fn = getattr(fn, part)
    return fn(*args)
  return staticmethod(call)


for _name, (_np_function, _path) in _FORMS.items():
  setattr(_NpApi, _name, staticmethod(_np_function))
  setattr(_TfApi, _name, _tf_function(_path))


def result_kind(name):
  """The dtype kind of `math.<name>`'s result: 'b' (a test), 'i' (an
  integer: `floor`, `ceil`, `trunc`) or 'f'."""
  if name in _BOOL or name == 'isclose':
    return 'b'
  return 'i' if name in _INT or name in _INTEGER or name == 'factorial' else (
      'f')


def _python_first(compute, guard):
  """`(True, compute())` of plain Python numbers; where Python raises,
  the error, unless a member's guard decides which members make the call:
  then `(False, None)`, for the caller to compute them as arrays (which
  fails the members whose guard holds)."""
  try:
    return True, compute()
  except (ValueError, OverflowError):
    if guard is None or _plain(guard):
      raise
  return False, None


def math_fn(note, name, *args, guard=None, rows=False, **keywords):
  """`math.<name>(*args)` of one member's numbers (see the module).

  Args:
    note: `note(kind, bad, guard)` hands the flags of the members for
      which Python raises (`FAILURES`) to the caller
      (`member_ops.note_failure`).
    name: The function's name in `math` (`NAMES`).
    *args: Its arguments: numbers, one member's scalars.
    guard: The condition under which Python evaluates the call, or None.
    rows: Whether the arguments are the rows of the members at a block
      (NumPy code on the batch, `member_direct`, which checked that they
      are scalars), not one member's values.
    **keywords: `isclose`'s `rel_tol` and `abs_tol`.

  Returns:
    Its value for each member.
  """
  if _plain(*args) and not keywords:
    done, value = _python_first(lambda: getattr(math, name)(*args), guard)
    if done:
      return value
    args = tuple(_like(a, guard) for a in args)
  if name == 'isclose':
    return _isclose(rows, *args, **keywords)
  if keywords:
    raise TypeError(f'math.{name}() takes no keyword arguments')
  for x in args:
    _scalar(f'math.{name}', x, rows)
  if name in _BOOL:
    if len(args) != 1:
      raise TypeError(f'math.{name}() takes exactly one argument '
                      f'({len(args)} given)')
    x = args[0]
    if _is_tf(x) and not _tf().convert_to_tensor(x).dtype.is_floating:
      x = _as_float64(x)
    return getattr(_api(x), name)(x)
  if name == 'trunc' and _dtype(args[0]) != np.float64:
    # Python's `math.trunc` calls `__trunc__`, which of NumPy's scalars
    # only float64 (a Python float) has.
    raise TypeError(f'type numpy.{_dtype(args[0]).name} doesn\'t define '
                    '__trunc__ method')
  if name in _INT or name == 'factorial':
    if len(args) != 1:
      raise TypeError(f'math.{name}() takes exactly one argument '
                      f'({len(args)} given)')
    if name == 'factorial':
      return _factorial(note, args[0], guard)
    return _int_of(note, name, args[0], guard, rows)
  if name in _INTEGER:
    return _integer_function(note, name, args, guard)
  xs = [_as_float64(x) for x in args]
  api = _TfApi if _is_tf(*xs) else _NpApi
  if _is_tf(*xs):
    tf = _tf()
    xs = [tf.convert_to_tensor(x, tf.float64) if not _is_tf(x) else x
          for x in xs]
  if name in _PLAIN:
    k = 180.0 / math.pi if name == 'degrees' else math.pi / 180.0
    return xs[0] * k
  if name == 'log':
    return _log(note, api, xs, guard)
  if name in _GAMMA:
    if len(xs) != 1:
      raise TypeError(f'math.{name}() takes exactly one argument '
                      f'({len(xs)} given)')
    out = api.call(name, xs[0])
    _check_gamma(note, api, xs[0], out, guard)
    return out
  arity = 1 if name in _FLOAT1 else 2
  if len(xs) != arity:
    raise TypeError(f'math.{name}() takes exactly {arity} argument(s) '
                    f'({len(xs)} given)')
  out = api.call(name, *xs)
  overflows = _FLOAT1.get(name, _FLOAT2.get(name))
  _check_float(note, api, xs, out, overflows, guard,
               zero_power=(name == 'pow'))
  return out


def _check_gamma(note, api, x, out, guard):
  """Python's rule for `math.gamma` and `math.lgamma`: a pole (0, -1, -2,
  ..., and -inf for gamma) a domain error, an infinity of another finite
  argument an overflow."""
  pole = api.logical_and(api.less_equal(x, 0.0), api.equal(api.floor(x), x))
  note('domain', pole, guard)
  note('range', api.logical_and(
      api.logical_and(api.isinf(out), api.isfinite(x)),
      api.logical_not(pole)), guard)


def _check_float(note, api, xs, out, overflows, guard, zero_power=False):
  """Python's rule for a float function (CPython's `math_1`, `math_2`): a
  NaN of arguments that are not NaN is a domain error; an infinity of
  finite arguments an overflow (or, for functions that cannot overflow,
  a domain error: `log(0)`)."""
  not_nan = None
  finite = None
  for x in xs:
    n = api.logical_not(api.isnan(x))
    f = api.isfinite(x)
    not_nan = n if not_nan is None else api.logical_and(not_nan, n)
    finite = f if finite is None else api.logical_and(finite, f)
  nan_out = api.logical_and(api.isnan(out), not_nan)
  inf_out = api.logical_and(api.isinf(out), finite)
  if overflows and zero_power:
    # `0.0 ** negative` is a domain error, a large power an overflow.
    zero = api.equal(xs[0], 0.0)
    note('domain', api.logical_or(nan_out, api.logical_and(inf_out, zero)),
         guard)
    note('range', api.logical_and(inf_out, api.logical_not(zero)), guard)
  elif overflows:
    note('domain', nan_out, guard)
    note('range', inf_out, guard)
  else:
    note('domain', api.logical_or(nan_out, inf_out), guard)


def _log(note, api, xs, guard):
  """`math.log(x)` and `math.log(x, base)`."""
  if len(xs) not in (1, 2):
    raise TypeError(f'math.log() takes 1 or 2 arguments ({len(xs)} given)')
  out = api.call('log', xs[0])
  _check_float(note, api, xs[:1], out, False, guard)
  if len(xs) == 1:
    return out
  base = api.call('log', xs[1])
  _check_float(note, api, xs[1:], base, False, guard)
  note('zero_log_base', api.equal(base, 0.0), guard)
  return out / api.where(api.equal(base, 0.0), api.abs(base) + 1.0, base)


def _isclose(rows, a, b, rel_tol=1e-09, abs_tol=0.0):
  """`math.isclose`: equal, or both finite within the tolerances."""
  for x in (a, b):
    _scalar('math.isclose', x, rows)
  a, b = _as_float64(a), _as_float64(b)
  api = _TfApi if _is_tf(a, b) else _NpApi
  if _is_tf(a, b):
    tf = _tf()
    a, b = (tf.convert_to_tensor(x, tf.float64) for x in (a, b))
  with np.errstate(all='ignore'):
    diff = api.abs(a - b)
    bound = api.maximum(rel_tol * api.maximum(api.abs(a), api.abs(b)),
                        abs_tol + 0 * diff)
    close = api.logical_and(api.less_equal(diff, bound),
                            api.logical_and(api.isfinite(a), api.isfinite(b)))
  return api.logical_or(api.equal(a, b), close)


def _factorial(note, n, guard):
  """`math.factorial` of a member's integer: an int64 from a table; a
  negative `n` fails as Python's does, one beyond 20 as an int64 that
  cannot hold it (a Python int would)."""
  if _kind(n) not in 'iub':
    raise TypeError(f"'{_dtype(n).name}' object cannot be interpreted as "
                    'an integer')
  api = _api(n)
  note('factorial_negative', n < 0, guard)
  note('int64', n > 20, guard)
  at = api.where(n < 0, 0 * n, api.where(n > 20, 0 * n + 20, n))
  if _is_tf(at):
    tf = _tf()
    return tf.gather(tf.constant(_FACTORIALS), tf.cast(at, tf.int64))
  return _FACTORIALS[at]


def _integer_function(note, name, args, guard):
  """`math.gcd`, `lcm` (of any number of integers), `comb`, `perm` and
  `isqrt` of a member's integers, as int64s; a negative argument of the
  last three fails the member with Python's `ValueError`, a result
  beyond int64 as an int64 that cannot hold it (a Python int would).

  `gcd`, `lcm`, `comb` and `perm` loop a number of times that depends on
  the values: on NumPy over the members at once, up to the largest
  count; on TensorFlow, where such a loop does not compile under XLA,
  they are refused with the loop to write instead.
  """
  for x in args:
    if _kind(x) not in 'iub':
      raise TypeError(f"'{_dtype(x).name}' object cannot be interpreted as "
                      'an integer')
  arity = {'isqrt': (1, 1), 'comb': (2, 2), 'perm': (1, 2)}.get(
      name, (0, 64))
  if not arity[0] <= len(args) <= arity[1]:
    raise TypeError(f'math.{name}() takes {arity[0]} to {arity[1]} '
                    f'arguments ({len(args)} given)')
  if name == 'isqrt':
    return _isqrt(note, args[0], guard)
  if _is_tf(*args):
    raise errors.PerMemberError(
        f'math.{name}() of a member\'s integers on TensorFlow: its loop '
        'runs a number of times that depends on the values, which the '
        'vectorizer would run per member and XLA does not compile.',
        hint='Write the loop in the function itself, where loops are per '
        'member (Euclid\'s: while b != 0: a, b = b, a % b), or run on '
        'NumPy.')
  xs = [np.asarray(x.batched if _is_member(x) else x, np.int64) for x in args]
  wrap = (lambda v: _rules().MemberArray(v)) if any(
      _is_member(x) for x in args) else (lambda v: v)
  if name in ('gcd', 'lcm'):
    if not xs:
      return 0 if name == 'gcd' else 1
    out = xs[0]
    for x in xs[1:]:
      out = np.gcd(out, x) if name == 'gcd' else np.lcm(out, x)
    return wrap(np.abs(out))
  n = xs[0]
  k = xs[1] if len(xs) > 1 else n
  bad = (n < 0) | (k < 0)
  note('negative_integer', wrap(bad), guard)
  n, k = np.where(bad, 0, n), np.where(bad, 0, k)
  none = k > n   # no way to choose: 0
  k = np.where(none, 0, k)
  if name == 'comb':
    k = np.minimum(k, n - k)
  out = np.ones(np.broadcast(n, k).shape, np.int64)
  over = np.zeros(out.shape, bool)
  limit = np.iinfo(np.int64).max
  for i in range(1, int(np.max(k, initial=0)) + 1):
    live = i <= k
    factor = np.where(live, n - k + i if name == 'comb' else n - i + 1, 1)
    over |= live & (out > limit // np.maximum(factor, 1))
    out = np.where(live, out * factor // (i if name == 'comb' else 1), out)
  out = np.where(none, 0, out)
  note('int64', wrap(over), guard)
  return wrap(out)


def _isqrt(note, n, guard):
  """`math.isqrt`: the floor of the square root of a nonnegative
  integer, exact (a float's root corrected by a step either way)."""
  api = _api(n)
  note('negative_integer', n < 0, guard)
  if _is_tf(n):
    tf = _tf()
    n = tf.maximum(tf.cast(n, tf.int64), 0)
    r = tf.cast(tf.floor(tf.sqrt(tf.cast(n, tf.float64))), tf.int64)
  else:
    n = api.maximum(n.astype(np.int64) if _is_member(n) else np.int64(n), 0)
    r = np.floor(np.sqrt(n.astype(np.float64))).astype(np.int64)
  for _ in range(2):
    r = api.where(r * r > n, r - 1, r)
    r = api.where((r + 1) * (r + 1) <= n, r + 1, r)
  return r


def _int_of(note, name, x, guard, rows):
  """`math.floor`, `ceil`, `trunc` of a member's number: an int64."""
  if _kind(x) in 'iub':   # an integer is its own floor
    return to_int(note, x, guard, rows)
  f = _as_float64(x)
  api = _api(f)
  if name == 'floor':
    y = api.floor(f)
  elif name == 'ceil':
    y = -api.floor(-f)
  else:
    y = api.where(f < 0, -api.floor(-f), api.floor(f))
  return to_int(note, y, guard, True)


def to_int(note, x, guard, rows=False):
  """`int(x)`: truncated toward zero, an int64 for each member; NaN, an
  infinity or a value beyond int64 fails those members."""
  if _plain(x):
    done, value = _python_first(lambda: builtins.int(x), guard)
    if done:
      return value
    x = _like(x, guard)
  _scalar('int', x, rows)
  kind = _kind(x)
  if kind in 'iub':
    if _dtype(x) == np.uint64:
      limit = 2 ** 63 - 1
      note('int64', x > (_tf().constant(limit, x.dtype) if _is_tf(x)
                         else np.uint64(limit)), guard)
    return _api(x).to_int(x)
  if kind != 'f':
    raise TypeError(f'int() of a {_dtype(x).name} value')
  api = _api(x)
  f = _as_float64(x)
  note('nan_int', api.isnan(f), guard)
  note('inf_int', api.isinf(f), guard)
  big = api.logical_and(api.isfinite(f),
                        api.logical_not(api.logical_and(
                            f < _INT64_LIMIT, f >= -_INT64_LIMIT)))
  note('int64', big, guard)
  # The failed members' values are never used: cast what is in range.
  safe = api.where(api.logical_and(api.isfinite(f), api.logical_not(big)),
                   f, api.zeros_like(f))
  return api.to_int(safe)


def round_half_even(note, x, ndigits, guard, rows=False):
  """`round(x)`, `round(x, ndigits)` of one member's number."""
  if _plain(x) and (ndigits is None or _plain(ndigits)):
    done, value = _python_first(lambda: builtins.round(x, ndigits), guard)
    if done:
      return value
    x = _like(x, guard)
  _scalar('round', x, rows)
  kind = _kind(x)
  if ndigits is None:
    if kind in 'iub':
      return to_int(note, x, guard, True)
    f = _as_float64(x)
    return to_int(note, _api(f).round_half_even(f), guard, True)
  integer = kind in 'iub'
  if integer and _plain(ndigits) and ndigits >= 0:
    return x   # Python: an int rounded to digits >= 0 is itself
  if kind == 'f' and _plain(ndigits) and _dtype(x).itemsize < 8:
    # A NumPy float32's `round(x, n)` is float32, scaled in float32 as
    # NumPy scales it; the integer it rounds to is scaled back in
    # float64, whose one rounding to float32 XLA does not rewrite.
    api = _api(x)
    with np.errstate(all='ignore'):
      if ndigits >= 0:
        n = _as_float64(api.round_half_even(x * 10.0 ** ndigits))
        return _cast_like(n / 10.0 ** ndigits, x)
      n = _as_float64(api.round_half_even(x / 10.0 ** -ndigits))
      return _cast_like(n * 10.0 ** -ndigits, x)
  # To a multiple of 10 ** -ndigits, half to even (an integer stays one).
  f = _as_float64(x)
  scale = 10.0 ** ndigits
  with np.errstate(all='ignore'):
    rounded = _api(f).round_half_even(f * scale) / scale
  return to_int(note, rounded, guard, True) if integer else rounded


# The largest modulus `pow_mod` computes exactly: its products are
# reduced through a float64 quotient, off by at most one below it.
POW_MOD_LIMIT = 2**52
# Steps of Euclid's algorithm that integers below `POW_MOD_LIMIT` take at
# most (consecutive Fibonacci numbers are the slowest pair).
_EUCLID_STEPS = 78


def pow_mod(note, base, exp, mod, guard=None):
  """Python's `pow(base, exp, mod)` of a member's integers, as an int64:
  square and multiply over the exponent's 63 bits, for every member at
  once; a negative exponent by the modular inverse of the base
  (Euclid's algorithm over a fixed number of steps).  Each product is
  reduced exactly (`_mul_mod`) while `|mod| <= 2**52`; beyond it the
  member fails with an OverflowError (`pow_mod_range`), a modulus of 0
  and a base with no inverse for a negative exponent as Python's
  ValueErrors.  The result has the sign of `mod`, as Python's.

  Args:
    note: `member_ops.note_failure`.
    base, exp, mod: A member's integers (Python ints, arrays, tensors).
    guard: The condition under which Python evaluates the call, or None.

  Returns:
    The member's int64 (a Python int where all three are).
  """
  if _plain(base, exp, mod) and not builtins.any(
      isinstance(x, builtins.float) for x in (base, exp, mod)):
    return builtins.pow(base, exp, mod)
  for x in (base, exp, mod):
    if _kind(x) not in 'iub':
      raise TypeError('pow() 3rd argument not allowed unless all '
                      'arguments are integers')
  if _is_tf(base, exp, mod):
    tf = _tf()
    a, e, m = (tf.cast(x, tf.int64) for x in (base, exp, mod))
    wrap = lambda v: v  # pylint: disable=unnecessary-lambda-assignment
  else:
    a, e, m = (np.asarray(x.batched if _is_member(x) else x, np.int64)
               for x in (base, exp, mod))
    wrap = (lambda v: _rules().MemberArray(v)) if builtins.any(
        _is_member(x) for x in (base, exp, mod)) else (lambda v: v)
  api = _pow_api(a)
  zero = m == 0
  note('pow_mod_zero', wrap(zero), guard)
  n = api.where(zero, api.ones_like(m), api.abs(m))
  big = n > POW_MOD_LIMIT
  note('pow_mod_range', wrap(big), guard)
  n = api.where(big, api.ones_like(n), n)
  a = a % n
  negative = e < 0
  inverse, divisor = _inverse_mod(api, a, n)
  note('pow_mod_inverse', wrap(negative & (divisor != 1) & ~zero & ~big),
       guard)
  a = api.where(negative, inverse, a)
  e = api.where(negative, -e, e)
  r = api.ones_like(a * e * n) % n
  for _ in range(63):
    r = api.where(e % 2 == 1, _mul_mod(api, r, a, n), r)
    a = _mul_mod(api, a, a, n)
    e = e // 2
  r = api.where((m < 0) & (r != 0), r + m, r)   # the sign of `mod`
  return wrap(r)


def _pow_api(x):
  """The array functions `pow_mod` uses, TensorFlow's or NumPy's."""
  if _is_tf(x):
    tf = _tf()
    return types.SimpleNamespace(
        where=tf.where, abs=tf.abs, floor=tf.floor, ones_like=tf.ones_like,
        zeros_like=tf.zeros_like,
        float64=lambda v: tf.cast(v, tf.float64),
        int64=lambda v: tf.cast(v, tf.int64))
  return types.SimpleNamespace(
      where=np.where, abs=np.abs, floor=np.floor, ones_like=np.ones_like,
      zeros_like=np.zeros_like,
      float64=lambda v: np.asarray(v, np.float64),
      int64=lambda v: np.asarray(v).astype(np.int64))


def _mul_mod(api, x, y, n):
  """`x * y % n` of int64s `0 <= x, y < n <= 2**52`, exact: the quotient
  from float64s is off by at most one, and the remainder from it is
  exact in int64's wrapping arithmetic (it lies in (-n, 2n))."""
  q = api.floor(api.float64(x) * api.float64(y) / api.float64(n))
  with np.errstate(over='ignore'):
    r = x * y - api.int64(q) * n
  r = api.where(r < 0, r + n, r)
  return api.where(r >= n, r - n, r)


def _inverse_mod(api, a, n):
  """`(inverse, divisor)`: `a`'s inverse modulo `n` (in [0, n)) and the
  greatest common divisor of `a` and `n` (the inverse is one only where
  it is 1), by Euclid's extended algorithm, `_EUCLID_STEPS` steps."""
  r0, r1 = n, a
  s0, s1 = api.zeros_like(a), api.ones_like(a)
  for _ in range(_EUCLID_STEPS):
    live = r1 != 0
    q = api.where(live, r0 // api.where(live, r1, api.ones_like(r1)), 0)
    r0, r1 = api.where(live, r1, r0), api.where(live, r0 - q * r1, r1)
    s0, s1 = api.where(live, s1, s0), api.where(live, s0 - q * s1, s1)
  return s0 % n, r0
