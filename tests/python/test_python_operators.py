"""Python's own evaluation rules in a batched function's expressions.

Bit shifts (`<<`, `>>`) and `divmod`, which TensorFlow tensors lack; a
`for` loop over a range of literals, whose body Python always enters; and
conditional expressions and `and`/`or` whose test holds one value for
every member (a shape, a module flag), which run only the operands Python
runs.  Each program is compared with `dry_run=True` (each member alone, as
plain Python) on NumPy (stack VM and stackless) and on TensorFlow (eager,
`tf.function`, XLA), and with facts computed without autobatch_vm.
"""

import math

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import python as python_tests

ctx = ab.Context()


@ctx.batch
def binary_gcd(a, b):
  if a == 0:
    return b
  if b == 0:
    return a
  shift = 0
  while ((a | b) & 1) == 0:
    a = a >> 1
    b >>= 1
    shift += 1
  while (a & 1) == 0:
    a = a >> 1
  while b != 0:
    while (b & 1) == 0:
      b = b >> 1
    if a > b:
      a, b = b, a
    b = b - a
  return a << shift


@ctx.batch
def digit_sum(n):
  total = 0
  while n > 0:
    n, r = divmod(n, 10)    # TensorFlow tensors have no divmod either
    total += r
  return total


@ctx.batch
def xorshift(state, n):
  i = 0
  while i < n:
    state = state ^ ((state << 13) & 0xFFFFFFFF)
    state = state ^ (state >> 17)
    state = state ^ ((state << 5) & 0xFFFFFFFF)
    i += 1
  return state, 1 << (n % 10), (state >> n) & 3


def xorshift_alone(state, n):
  for _ in range(n):
    state ^= (state << 13) & 0xFFFFFFFF
    state ^= state >> 17
    state ^= (state << 5) & 0xFFFFFFFF
  return state, 1 << (n % 10), (state >> n) & 3


def cubic(x):
  return x * x * x - 2 * x - 5


@ctx.batch
def bisect(lo, hi, shift):
  """`mid` and `i` are assigned only in the loop's body, which a range of
  literals always enters."""
  flo = cubic(lo) - shift
  for i in range(200):
    mid = 0.5 * (lo + hi)
    fm = cubic(mid) - shift
    if hi - lo < 1e-9:
      break
    if (fm < 0) == (flo < 0):
      lo = mid
      flo = fm
    else:
      hi = mid
  return mid, i


@ctx.batch
def countdown(n):
  total = 0
  for k in range(10, -3, -4):
    last = k * n
    total += last
  return total, last, k


WIDE = True   # a module flag: one value for every member


@ctx.batch
def shared_tests(x, k):
  """Operands that Python does not run for these shapes and flags would
  fail (an axis that is not there)."""
  col = x[:, None] if x.ndim == 1 else x
  wide = col[:, :, 1] if col.ndim == 3 else col
  first = x.ndim == 2 and x[:, 1] > 0        # x is [B]: not run
  any_big = x.ndim == 1 or x[:, 5] > 0       # not run either
  scale = 2.0 if WIDE else x[:, 7]
  pick = x * scale if k > 2 else -x          # k is a member's: both run
  if WIDE and k > 0 and not first:
    return wide[:, 0] + pick, any_big
  return pick, any_big


SCALE = 0      # module settings, as a user's script has them
OFFSET = 3


@ctx.batch
def with_defaults(x):
  scale = SCALE or 2.0     # Python: 2.0 (it gave True, silently)
  offset = OFFSET and 5    # Python: 5
  return x * scale + offset


@ctx.batch
def operands(x, n):
  y = x or 2.5              # Python gives an operand, not a boolean
  k = n and 7
  w = n > 3 and x or -1.0   # Python's idiom for a conditional
  b = x > 1 or n > 2        # booleans: a boolean
  return y, k, w, b


@pytest.mark.parametrize('dtype', [np.int64, np.int32])
def test_shifts_on_every_backend(dtype):
  rng = np.random.default_rng(0)
  a = rng.integers(0, 5000, 7).astype(dtype)
  b = rng.integers(0, 5000, 7).astype(dtype)
  b[0] = 0

  def check(alone):
    np.testing.assert_array_equal(
        alone, [math.gcd(int(x), int(y)) for x, y in zip(a, b)])
  python_tests.run_everywhere(binary_gcd, [a, b], check)


def test_divmod_on_every_backend():
  n = np.random.default_rng(5).integers(0, 10**7, 6)
  python_tests.run_everywhere(
      digit_sum, [n], lambda alone: np.testing.assert_array_equal(
          alone, [sum(int(d) for d in str(v)) for v in n]))


def test_shifts_of_a_python_integer_and_a_members_count():
  rng = np.random.default_rng(1)
  state = rng.integers(1, 2**31, 6)
  n = rng.integers(0, 12, 6)

  def check(alone):
    for i in range(6):
      want = xorshift_alone(int(state[i]), int(n[i]))
      assert [int(v[i]) for v in alone] == list(want)
  python_tests.run_everywhere(xorshift, [state, n], check)


pm = ab.Context()


@pm.batch(per_member=True)
def popcounts(x, k):
  out = np.zeros(4, dtype=np.int64)
  j = 0
  while j < 4:
    v = x[j] >> k
    c = 0
    while v > 0:
      c += v & 1
      v = v >> 1
    out[j] = c << 1
    j += 1
  return out


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'xla'])
def test_shifts_in_a_per_member_function(backend):
  rng = np.random.default_rng(2)
  x = rng.integers(0, 2**20, (5, 4))
  k = rng.integers(0, 5, 5)
  want = np.array([[2 * bin(int(v) >> int(kk)).count('1') for v in row]
                   for row, kk in zip(x, k)])
  np.testing.assert_array_equal(popcounts(x, k, dry_run=True), want)
  np.testing.assert_array_equal(
      python_tests.call_on(backend, popcounts, x, k), want)


def test_a_range_of_literals_is_entered():
  rng = np.random.default_rng(3)
  shift = rng.uniform(-3, 30, 6)

  def check(alone):
    mid, i = alone
    np.testing.assert_allclose(cubic(mid) - shift, 0, atol=1e-6)
    assert (i < 199).all()
  python_tests.run_everywhere(
      bisect, [np.zeros(6), np.full(6, 4.0), shift], check)
  python_tests.run_everywhere(
      countdown, [rng.integers(0, 5, 5)],
      lambda alone: np.testing.assert_array_equal(alone[2], np.full(5, -2)))


def test_a_range_that_may_be_empty_checks_the_variable_at_run_time():
  """Where the loop may not run (`range(n)`, `range(3, 3)`), the read
  after it is checked per member, as Python's UnboundLocalError is: the
  members that assigned the variable get it."""
  maybe_empty = ab.Context()

  @maybe_empty.batch
  def last(n):
    for i in range(n):      # n may be 0 for a member
      m = i * 2
    return m

  empty = ab.Context()

  @empty.batch
  def nothing(n):
    for i in range(3, 3):   # empty: Python raises UnboundLocalError
      m = i * n
    return m

  np.testing.assert_array_equal(last(np.array([2, 3])), [2, 4])
  for fn in (last, nothing):
    with pytest.raises(errors.AssertionFailedError,
                       match="'m' is read before it is assigned"):
      fn(np.array([0, 3]))


def test_shared_tests_run_only_pythons_operands():
  rng = np.random.default_rng(4)
  x = rng.normal(size=6)
  k = np.array([0, 1, 3, 4, 2, 5])

  def check(alone):
    value, any_big = alone
    assert any_big.all()
    pick = np.where(k > 2, 2 * x, -x)
    np.testing.assert_allclose(value, np.where(k > 0, x + pick, pick))
  python_tests.run_everywhere(shared_tests, [x, k], check)


def test_a_members_test_still_selects_each_members_side():
  sides = ab.Context()

  @sides.batch
  def f(x):
    y = x if x > 0 else -2 * x
    z = x > 1 or x < -1
    w = x > 0 and x < 1
    return y, z, w

  x = np.array([-2.0, -0.5, 0.5, 2.0])
  y, z, w = f(x)
  np.testing.assert_array_equal(y, [4.0, 1.0, 0.5, 2.0])
  np.testing.assert_array_equal(z, [True, False, False, True])
  np.testing.assert_array_equal(w, [False, False, True, False])


def test_python_numbers_and_or_give_the_operand_python_gives():
  x = np.array([1.0, 2.0, -0.5])
  python_tests.run_everywhere(
      with_defaults, [x], lambda alone: np.testing.assert_array_equal(
          alone, x * (SCALE or 2.0) + (OFFSET and 5)))


@pm.batch(per_member=True)
def member_defaults(x):
  scale = SCALE or 2.0
  offset = OFFSET and 5
  return x * scale + offset


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'xla'])
def test_python_numbers_and_or_in_a_per_member_function(backend):
  x = np.array([[1.0, 2.0], [3.0, -4.0]])
  want = x * (SCALE or 2.0) + (OFFSET and 5)
  np.testing.assert_array_equal(member_defaults(x, dry_run=True), want)
  np.testing.assert_array_equal(
      python_tests.call_on(backend, member_defaults, x), want)


def test_and_or_of_members_numbers_give_pythons_operand():
  x = np.array([0.0, 3.0, -2.0, 0.0, 1.5])
  n = np.array([0, 4, 5, 2, 0])

  def check(alone):
    want = [(float(a or 2.5), int(m and 7), float(m > 3 and a or -1.0),
             bool(a > 1 or m > 2)) for a, m in zip(x, n)]
    for got, expected in zip(alone, zip(*want)):
      np.testing.assert_array_equal(got, expected)
  python_tests.run_everywhere(operands, [x, n], check)


@pm.batch(per_member=True)
def member_operands(x, n):
  return x[0] or 2.5, n and 7, n > 3 and x[1] or -1.0, x[0] > 1 or n > 2


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'xla'])
def test_and_or_of_numbers_in_a_per_member_function(backend):
  x = np.array([[0.0, 1.0], [3.0, -2.0], [0.0, 4.0]])
  n = np.array([0, 4, 5])
  want = list(zip(*[(float(a[0] or 2.5), int(m and 7),
                     float(m > 3 and a[1] or -1.0), bool(a[0] > 1 or m > 2))
                    for a, m in zip(x, n)]))
  got = python_tests.call_on(backend, member_operands, x, n)
  for g, w, d in zip(got, want, member_operands(x, n, dry_run=True)):
    np.testing.assert_array_equal(np.asarray(g), w)
    np.testing.assert_array_equal(d, w)


VERBOSE = False


@pm.batch(per_member=True)
def member_shapes(x, k):
  v = x[:2] if x.shape[0] > 2 else x     # the sides' shapes differ
  s = np.sum(v) if VERBOSE else 0.0
  t = x[k] if k < len(x) else -1.0
  return v, s, t


def test_a_per_member_shared_test_takes_one_side():
  x = np.arange(12.0).reshape(4, 3)
  k = np.array([0, 2, 5, 1])
  v, s, t = member_shapes(x, k)
  np.testing.assert_array_equal(v, x[:, :2])
  np.testing.assert_array_equal(s, np.zeros(4))
  np.testing.assert_array_equal(t, [0.0, 5.0, -1.0, 10.0])
  for got, alone in zip((v, s, t), member_shapes(x, k, dry_run=True)):
    np.testing.assert_array_equal(got, alone)


@pm.batch(per_member=True)
def member_lazy_sides(y, v):
  a = math.trunc(y) if VERBOSE else 0      # float32 has no __trunc__
  b = v[5] if len(v) > 5 else v[-1]        # v[5] is out of range
  c = (y * 2.0 if y > 0 else -y) if len(v) == 4 else y
  d = VERBOSE and math.trunc(y) > 0        # decided by VERBOSE alone
  e = not VERBOSE or math.trunc(y) > 0
  return a, b, c, d, e


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'xla'])
def test_a_per_member_shared_test_computes_only_pythons_operands(backend):
  """The side (the operands) Python does not evaluate is not computed:
  it may fail there (a `TypeError`, an index out of range)."""
  y = np.array([1.5, -2.0, 3.0], np.float32)
  v = np.arange(12, dtype=np.float32).reshape(3, 4)
  out = python_tests.call_on(backend, member_lazy_sides, y, v)
  for got, alone in zip(out, member_lazy_sides(y, v, dry_run=True)):
    np.testing.assert_array_equal(got, alone)
  np.testing.assert_array_equal(out[2], [3.0, 2.0, 6.0])
  assert not np.any(out[3]) and np.all(out[4])


TABLE = np.array([1.0, -2.0])     # module data: one value for every member
POSITIVE = np.array([1.0, 2.0])


@ctx.batch
def numpy_scalar_tests(x):
  a = np.all(TABLE > 0) and x > 0       # a NumPy False decides
  b = np.all(POSITIVE > 0) and x > 0    # a NumPy True drops out
  c = np.any(TABLE > 5) or x < 0
  return a, b, c


def test_a_numpy_scalar_test_for_every_member():
  x = np.array([1.0, -1.0, 2.0])

  def check(alone):
    a, b, c = alone
    np.testing.assert_array_equal(a, [False] * 3)
    np.testing.assert_array_equal(b, x > 0)
    np.testing.assert_array_equal(c, x < 0)
  python_tests.run_everywhere(numpy_scalar_tests, [x], check)


WEIGHTS = np.array([0.5, 0.25, 0.125])   # module data, float64


@ctx.batch
def joint_sides(x8, x16, f32, c):
  m = x8 if c else x16          # int8 and int16: int16, as NumPy's
  w = f32 if c else WEIGHTS     # float32 and float64: float64
  return m, w


def test_sides_of_different_dtypes_take_their_joint_dtype():
  args = [np.array([1, 2, 3], np.int8), np.array([100, 200, 300], np.int16),
          np.ones((3, 3), np.float32), np.array([True, False, True])]
  def check(alone):
    assert alone[0].dtype == np.int16 and alone[1].dtype == np.float64
    np.testing.assert_array_equal(alone[0], [1, 200, 3])
  python_tests.run_everywhere(joint_sides, args, check)
