"""Python's `math` functions, `round` and `int` in per-member functions.

Each program runs batched and is compared with `dry_run=True` (each
member alone, as plain Python: Python's own `math`) in values, shapes and
dtypes, on NumPy (stack VM and stackless) and on TensorFlow (eagerly,
`tf.function`, XLA); members for which Python raises fail with Python's
exception, named, except where Python would not make the call.
"""

import math

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

ctx = ab.Context()


@ctx.batch(per_member=True)
def floats(x, y):
  a = (math.sqrt(x) + math.exp(-x) + math.log(x) + math.log1p(x) +
       math.log2(x) + math.log10(x) + math.log(x, 3.0))
  b = (math.sin(x) + math.cos(y) + math.tan(x) + math.atan(y) +
       math.atan2(y, x) + math.hypot(x, y) + math.asin(x / 10.0) +
       math.acos(x / 10.0))
  c = (math.sinh(y) + math.cosh(y) + math.tanh(y) + math.asinh(y) +
       math.copysign(x, y) + math.fmod(x, 1.5) + math.expm1(y))
  d = (math.pow(x, 1.5) + math.fabs(y) + math.degrees(y) +
       math.radians(x) + math.exp2(y) + math.cbrt(y) + math.acosh(x + 1.0) +
       math.atanh(y / 10.0))
  # The normal CDF of Black-Scholes, and the gamma functions (NumPy has
  # none of them).
  e = (0.5 * (1.0 + math.erf(y / math.sqrt(2.0))) + math.erfc(x) +
       math.erf(3.0 * y) + math.erfc(-2.0 * x) + math.lgamma(x) +
       math.gamma(y) + math.lgamma(y) + math.gamma(x * 8.0))
  return a, b, c, d, e


@ctx.batch(per_member=True)
def integers_and_tests(x, y):
  n = math.floor(y) + math.ceil(y) + round(y) + int(y) + round(x * 7.0)
  r = round(y, 2) + round(x, 1)
  close = math.isclose(x, y, rel_tol=0.5) or math.isclose(x, 2.0)
  flags = math.isnan(x / y) or math.isinf(x) or not math.isfinite(y)
  return n, r, close, flags


@ctx.batch(per_member=True)
def series(x, n):
  s = 0.0
  i = 0
  while i < n:
    s += math.sqrt(abs(x) + i) * math.cos(i)
    i += 1
  return s, int(s), math.floor(s), round(s)


@ctx.batch(per_member=True)
def guarded(x):
  root = math.sqrt(x) if x >= 0 else -1.0
  small = x > 0 and math.log(x) < 1.0
  whole = int(x) if math.isfinite(x) else 0
  return root, small, whole


@ctx.batch(per_member=True)
def root(x):
  return math.sqrt(x)


@ctx.batch(per_member=True)
def exponential(x):
  return math.exp(x)


@ctx.batch(per_member=True)
def whole(x):
  return int(x)


@ctx.batch(per_member=True)
def floor(x):
  return math.floor(x)


@ctx.batch(per_member=True)
def truncated(x):
  return math.trunc(x)


@ctx.batch(per_member=True)
def factorial(n):
  return math.factorial(n)


@ctx.batch(per_member=True)
def power_of_three(n):
  return 3 ** n + n ** 2


@ctx.batch(per_member=True)
def gamma(x):
  return math.gamma(x)


@ctx.batch(per_member=True)
def taylor(x, n):
  # A loop counter through math.factorial, beside a float (`s` and `k`
  # hold Python numbers: on TensorFlow an int64 and a float64 array).
  s = 0.0
  t = 0.0
  for k in range(n):
    s += x ** k / math.factorial(k)
    t += math.factorial(k)
  return s, t, math.factorial(n)


X = np.array([0.5, 2.0, 3.7, 9.0])
Y = np.array([-1.2, 0.3, 2.5, -3.5])


def _same(out, ref, tol):
  for o, r in zip(out, ref):
    o, r = np.asarray(o), np.asarray(r)
    assert o.shape == r.shape and o.dtype == r.dtype, (o, r)
    if r.dtype.kind == 'f':
      np.testing.assert_allclose(o, r, rtol=tol, atol=tol)
    else:
      np.testing.assert_array_equal(o, r)


def _runs(fn, args):
  """The batched runs of `fn`: (name, call) on each backend and mode."""
  yield 'numpy', lambda: fn(*args)
  yield 'stackless', lambda: fn(*args, stackless=True)
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) for a in args]
  yield 'eager', lambda: fn(*targs)
  yield 'function', lambda: ab.stage(fn)(*targs)
  yield 'xla', lambda: ab.stage(fn, jit_compile=True)(*targs)


def _numpy(out):
  return [np.asarray(o) for o in out]


@pytest.mark.parametrize('dtype', [np.float64, np.float32])
@pytest.mark.parametrize('fn', [floats, integers_and_tests],
                         ids=lambda f: f.__name__)
def test_math_functions_match_python(fn, dtype):
  """Float functions give float64 (Python's float), `floor`, `ceil`,
  `round(x)` and `int` an int64, the tests booleans, on every backend:
  the dry run's values."""
  args = (X.astype(dtype), Y.astype(dtype))
  ref = _numpy(fn(*args, dry_run=True))
  for name, run in _runs(fn, args):
    out = _numpy(run())
    assert [o.dtype for o in out] == [r.dtype for r in ref], name
    _same(out, ref, 1e-9 if dtype == np.float64 else 1e-6)
  if fn is floats:
    assert all(r.dtype == np.float64 for r in ref)


def test_math_in_a_loop_and_int_of_its_result():
  args = (np.array([1.0, -2.0, 3.0, 0.5]), np.array([0, 3, 7, 2]))
  ref = _numpy(series(*args, dry_run=True))
  assert [r.dtype for r in ref[1:]] == [np.int64] * 3
  for _, run in _runs(series, args):
    _same(_numpy(run()), ref, 1e-9)


def test_round_is_half_to_even_as_python():
  x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.675])
  ref = [round(v) for v in x]
  assert ref == [0, 2, 2, 0, -2, 3]
  out = whole_round(x)
  np.testing.assert_array_equal(out[0], ref)
  np.testing.assert_allclose(out[1], [round(v, 2) for v in x])


def test_round_of_a_float32_to_digits_is_numpys_float32():
  # NumPy rounds a float32 in float32 (round(np.float32(2.675), 2) is
  # 2.68, a float32); in float64 it gave 2.67.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  x = np.array([0.125, 2.675, 1.005, -3.14159, 0.335, 1234.5], np.float32)

  def check(out):
    want = [np.asarray(round(v, 2)) for v in x], [
        np.asarray(round(v, -1)) for v in x]
    for got, w in zip(out, want):
      assert got.dtype == np.float32
      np.testing.assert_array_equal(got, w)
  run_everywhere(rounded_to_digits, [x], check=check)


_conversions_ctx = ab.Context()


@_conversions_ctx.batch(per_member=True)
def conversions(x, k, n):
  flag = bool(x > k)
  some = bool(n) and bool(x)
  z = complex(x, k) ** 0.5 + complex(n, 1.5) + complex(2.0, x)
  return flag, some, float(flag) + int(x > k), z, complex(x, math.inf)


@_conversions_ctx.batch(per_member=True)
def complex_of_vector(v):
  return complex(v, 1.0)


def test_bool_and_complex_of_a_members_numbers_as_python():
  # `bool(x > k)` and `complex(re, im)` of a member's numbers were refused
  # ("bool() (an if, while, and, or, not or a comparison chain)"; on
  # TensorFlow complex() raised a raw TypeError), where float() and int()
  # take them.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  args = [np.array([1.5, -2.0, 0.0]), np.array([0.0, -3.0, 2.5]),
          np.array([0, 3, -1])]
  want = [conversions.python_function(*[a[b] for a in args])
          for b in range(3)]

  def check(out):
    for k, got in enumerate(out):
      expected = np.array([w[k] for w in want])
      np.testing.assert_array_equal(got, expected)
      assert got.dtype == expected.dtype
  run_everywhere(conversions, args, check=check)
  v = np.ones((2, 3))
  with pytest.raises(TypeError):
    complex_of_vector(v, dry_run=True)
  with pytest.raises(errors.PrimitiveError,
                     match=r'complex\(\) of a member.s array of shape'):
    complex_of_vector(v)


@ab.Context().batch(per_member=True)
def rounded_to_digits(x):
  return round(x, 2), round(x, -1)


_round_ctx = ab.Context()


@_round_ctx.batch(per_member=True)
def whole_round(x):
  return round(x), round(x, 2)


def test_a_call_python_skips_for_a_member_does_not_fail_it():
  """`math.sqrt(x) if x >= 0 else ...`, `x > 0 and math.log(x) < 1` and
  `int(x) if math.isfinite(x) else 0`: members whose condition fails
  make no call in Python, and no error here."""
  x = np.array([-1.0, 0.0, 4.0, 9.0, -3.0, np.inf])
  ref = _numpy(guarded(x, dry_run=True))
  for _, run in _runs(guarded, (x,)):
    _same(_numpy(run()), ref, 1e-12)


@pytest.mark.parametrize('fn,x,failing,kind', [
    (root, [1.0, -1.0, 4.0, -0.5], [1, 3], 'ValueError.*math domain error'),
    (exponential, [1.0, 1000.0, 2.0, 3.0], [1],
     'OverflowError.*math range error'),
    (whole, [1.5, np.nan, 2.0, -7.5], [1],
     'ValueError.*cannot convert float NaN to integer'),
    (whole, [1.5, np.inf, 2.0, -7.5], [1],
     'OverflowError.*cannot convert float infinity'),
    (floor, [1.0, 1e30, 2.0, 3.0], [1], 'OverflowError.*int64'),
    (factorial, [3, -2, 20, 4], [1],
     'ValueError.*factorial.. not defined for negative'),
    (factorial, [3, 21, 20, 4], [1], 'OverflowError.*int64'),
    (gamma, [1.5, -2.0, 3.0, 0.5], [1], 'ValueError.*math domain error'),
    (gamma, [1.5, 2.0, 180.0, 0.5], [2], 'OverflowError.*math range error'),
    (power_of_three, [2, -1, 3, 0], [1],
     'ValueError.*Integers to negative integer powers'),
], ids=['sqrt', 'exp', 'int_nan', 'int_inf', 'floor_int64',
        'factorial_negative', 'factorial_int64', 'gamma_pole',
        'gamma_overflow', 'negative_power'])
def test_members_for_which_python_raises_fail_with_its_error(
    fn, x, failing, kind):
  """Python's exception for the members that raise it, named: NumPy
  raises from the primitive, TensorFlow stops the members (eagerly
  raised, in a graph an assertion, under XLA after the loop, or their
  status with `on_error='status'`)."""
  x = np.array(x)
  with pytest.raises((ValueError, OverflowError)):
    fn(x[failing[0]:failing[0] + 1], dry_run=True)
  members = rf'batch members \[{", ".join(map(str, failing))}\]'
  for stackless in (False, True):
    with pytest.raises(errors.PrimitiveError, match=f'{kind}'):
      fn(x, stackless=stackless)
    with pytest.raises(errors.PrimitiveError, match=members):
      fn(x, stackless=stackless)
  tf = pytest.importorskip('tensorflow')
  tx = tf.constant(x)
  with pytest.raises(errors.PrimitiveError, match=f'{kind}.*\n.*'):
    fn(tx)
  with pytest.raises(errors.PrimitiveError, match=members):
    fn(tx)
  with pytest.raises(tf.errors.InvalidArgumentError, match=kind):
    ab.stage(fn)(tx)
  with pytest.raises(errors.PrimitiveError, match=members):
    ab.stage(fn, jit_compile=True)(tx)
  _, ok = ab.stage(fn, jit_compile=True, on_error='status')(tx)
  np.testing.assert_array_equal(
      ok.numpy(), [k not in failing for k in range(len(x))])


def test_trunc_takes_what_pythons_takes():
  """`math.trunc` calls `__trunc__`, which NumPy's float64 has and its
  float32 has not: the float32 call fails as Python's does."""
  x = np.array([1.5, -2.5, 3.0])
  np.testing.assert_array_equal(truncated(x), [1, -2, 3])
  with pytest.raises(TypeError, match='__trunc__'):
    truncated(x.astype(np.float32)[:1], dry_run=True)
  with pytest.raises(errors.PrimitiveError, match='__trunc__'):
    truncated(x.astype(np.float32))


_array_ctx = ab.Context()


@_array_ctx.batch(per_member=True)
def root_of_vector(v):
  return math.sqrt(v)


def test_a_members_array_is_refused_as_pythons_math_refuses_it():
  v = np.ones((3, 2))
  with pytest.raises(TypeError):
    root_of_vector(v, dry_run=True)
  with pytest.raises(errors.PrimitiveError,
                     match=r'math.sqrt\(\) of an array of shape \(2,\)'):
    root_of_vector(v)


_shared_ctx = ab.Context()
ZERO = 0.0
INFINITY = math.inf


@_shared_ctx.batch(per_member=True)
def shared_numbers(x):
  a = math.log(ZERO) if x > 100.0 else x
  b = int(INFINITY) if x > 100.0 else 1
  c = round(INFINITY) if x > 100.0 else 2
  return a, b, c


@_shared_ctx.batch(per_member=True)
def shared_log(x):
  return math.log(ZERO) if x > 1.0 else x


def test_a_shared_number_python_cannot_take_fails_only_guarded_members():
  """`math.log(ZERO)` of a module constant: Python raises for the members
  whose condition holds, and for no other."""
  x = np.array([1.0, 2.0, 3.0])
  ref = _numpy(shared_numbers(x, dry_run=True))
  for _, run in _runs(shared_numbers, (x,)):
    _same(_numpy(run()), ref, 1e-12)
  with pytest.raises(errors.PrimitiveError,
                     match=r'ValueError.*batch members \[1\]: math domain'):
    shared_log(np.array([0.5, 2.0]))
  tf = pytest.importorskip('tensorflow')
  with pytest.raises(errors.PrimitiveError,
                     match=r'ValueError.*batch members \[1\]: math domain'):
    shared_log(tf.constant([0.5, 2.0], tf.float64))


def _root_of_abs(x):     # a module-level helper of a per-member function
  return math.sqrt(abs(x)) + math.exp(-x)


_helper_ctx = ab.Context()


@_helper_ctx.batch(per_member=True)
def through_helper(x):
  return _root_of_abs(x)


def test_math_in_a_helper_the_function_calls():
  x = np.array([-2.5, 0.5, 9.0])
  ref = _numpy([through_helper(x, dry_run=True)])
  for _, run in _runs(through_helper, (x,)):
    _same(_numpy([run()]), ref, 1e-12)


def test_factorial_of_a_members_integer():
  x, n = np.array([0.5, 1.5, 2.0]), np.array([3, 12, 20])
  ref = [taylor.python_function(x[k], n[k]) for k in range(3)]
  ref = [np.array([r[i] for r in ref]) for i in range(3)]
  for _, run in _runs(taylor, (x, n)):
    _same(_numpy(run()), ref, 1e-12)
  with pytest.raises(errors.PrimitiveError, match='interpreted as an integer'):
    factorial(np.array([1.0, 2.0]))


def number_theory(a, b):
  return (math.gcd(a, b), math.lcm(a, b), math.comb(a, 3), math.perm(a, 2),
          math.perm(b % 9), math.isqrt(a * b), math.gcd(a, b, 6))


def test_integer_functions_of_math_match_python():
  # gcd, lcm, comb, perm and isqrt of a member's integers: a raw
  # TensorFlow TypeError, or on NumPy a "per-member value used as one
  # Python integer" refusal.  On TensorFlow the looping ones are refused
  # with the loop to write; isqrt runs everywhere.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()
  fn = ctx.batch_uncurried(number_theory, per_member=True)
  a, b = np.array([12, 7, 10, 30, 0]), np.array([18, 3, 15, 4, 5])
  want = [number_theory(int(x), int(y)) for x, y in zip(a, b)]
  for stackless in (False, True):
    got = fn(a, b, stackless=stackless)
    for k, values in enumerate(got):
      np.testing.assert_array_equal(values, [w[k] for w in want])
  with pytest.raises(errors.PerMemberError, match='math.gcd'):
    fn(tf.constant(a), tf.constant(b))

  def root(n):
    return math.isqrt(n)
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  roots = ctx.batch_uncurried(root, per_member=True)
  run_everywhere(roots, [np.array([0, 1, 15, 16, 17, 10 ** 12 + 1])])
  with pytest.raises(errors.PrimitiveError,
                     match=r'ValueError in .* for batch members \[1\]'):
    roots(np.array([4, -1]))
