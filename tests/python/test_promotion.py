"""NumPy's dtype promotion in primitives on TensorFlow.

TensorFlow's operators refuse operands of different dtypes (`x * n` of a
float64 and an int64, `c + (x > k)` of an int64 and a bool); NumPy
promotes them.  A primitive that fails so on TensorFlow runs in a form
whose arithmetic and comparison operators promote as NumPy's do, so the
same program gives the same values and dtypes on both backends.  Each
program is compared with its dry run on NumPy and with NumPy's own batched
run, on TensorFlow eagerly, under `tf.function` and under XLA.
"""

import numpy as np
import pytest

import autobatch_vm as ab

ctx = ab.Context()


@ctx.batch
def mixed(x, n):
  t = 0.0
  i = 0
  while i < n:
    t = t + x * i + 0.5 * n
    i += 1
  return t, x * n, n / 2, x ** n, (x > n) & (n > 1)


@ctx.batch
def counting(x):
  c = 0
  k = 0
  while k < 3:
    c = c + (x > k)
    k += 1
  return c


HALVES = np.array([0.5, 1.5, 2.5])
QUARTER = np.float32(0.25)


@ctx.batch
def reads_numpy_floats(n):
  # TensorFlow's operators cast a NumPy float to the integer tensor's
  # dtype (1.5 read as 1), silently; NumPy promotes.
  scaled = n * HALVES[1]
  above = n >= HALVES[1]
  k = 0
  while k < n:
    k += 1
  return scaled, above, QUARTER * k


@ctx.batch
def with_float_literals(n, x, y):
  # A Python float beside an integer (TensorFlow's operators cast it to
  # the integer dtype and fail), and float `//`, which TensorFlow takes
  # as the floor of the rounded quotient (-0.9 // 0.3 is -3.0 there).
  picked = n or 2.5
  half = n if n > 1 else 0.5
  return picked, half, n // 0.5, n % 0.5, x // y, divmod(x, y)


@ctx.batch
def with_booleans(x, i):
  # TensorFlow's `*` of a boolean tensor is a logical and ((x > 0) * 2
  # was a boolean), and an inline NumPy float met an integer tensor's
  # dtype (i * np.float64(0.5) was 0).
  return (x > 0) * 2, x * (x > 0), (x > 1) * 1.5, i * np.float64(0.5)


@ctx.batch
def narrow_quotients(n, m):
  # TensorFlow divides int8 and int16 in float32; NumPy every integer in
  # float64.
  half = n / 2
  third = m / 3
  return half, third, n / m


@ctx.batch
def outside_their_dtype(n, m):
  # Numbers a uint8 or int8 cannot hold: TensorFlow wrapped them into
  # the dtype (`n > -1` was false), NumPy compares the numbers.
  positive = n > -1
  below = n < 2**31
  other = n != 256
  return positive, below, other


@ctx.batch
def clipped(m):
  # On NumPy 1.26 an int16 (value-based casting); NumPy 2 keeps int8.
  return np.clip(m, -5, 300)


@ctx.batch
def overflowing(m):
  return m + 200


@ctx.batch(per_member=True)
def member_literals(n, x, y):
  nan = x * np.nan
  return (max(n, 1.5), min(n, 0.5, 2), n // 0.5, x // y, min(x, nan),
          max(nan, x), min(nan, x), max([x, nan, y]))


@ctx.batch(per_member=True)
def member_mixed(x, n, v):
  return x * n + n / 3, x ** n, v.sum() * n


@ctx.batch
def builtin_pow(x, n):
  return pow(x, n), pow(base=n, exp=2), pow(x, exp=n)


@ctx.batch(per_member=True)
def member_builtin_pow(x, n):
  return pow(x, n), pow(base=n, exp=2), pow(x, exp=n)


def _tf_runs(fn, args):
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) for a in args]
  yield 'eager', fn(*targs)
  for jit in (False, True):
    yield f'jit={jit}', tf.function(fn, jit_compile=jit)(*targs)


@pytest.mark.parametrize('fn,args', [
    (mixed, (np.array([1.0, 2.0, 0.5]), np.array([1, 2, 3]))),
    (mixed, (np.array([1.0, 2.0, 0.5], np.float32),
             np.array([1, 2, 3], np.int32))),
    (counting, (np.array([0.5, 1.5, 2.5]),)),
    (reads_numpy_floats, (np.array([1, 2, 3]),)),
    (with_float_literals, (np.array([0, 3, -2]), np.array([-0.9, 1.0, 5.0]),
                           np.array([0.3, 0.1, -np.inf]))),
    (member_literals, (np.array([0, 3, -2]), np.array([-0.9, 1.0, 5.0]),
                       np.array([0.3, 0.1, -np.inf]))),
    (with_booleans, (np.array([1.0, -2.0, 3.0]),
                     np.array([1, 3, 5], np.int32))),
    (member_mixed, (np.array([1.0, 2.0, 0.5]), np.array([1, 2, 3]),
                    np.ones((3, 4), np.float32))),
    (narrow_quotients, (np.array([1, 3, 7], np.int8),
                        np.array([3, 7, 9], np.uint16))),
    (outside_their_dtype, (np.array([0, 7, 255], np.uint8),
                           np.array([0, -100, 100], np.int8))),
    # pow(x, n) as x ** n: Pow of a float32 and an int64 had failed.
    (builtin_pow, (np.array([2.0, 3.0, 1.5], np.float32),
                   np.array([3, 0, 2]))),
    (member_builtin_pow, (np.array([2.0, 3.0, 1.5], np.float32),
                          np.array([3, 0, 2]))),
], ids=['float64_int64', 'float32_int32', 'bool_count', 'numpy_floats',
     'float_literals', 'member_literals', 'booleans', 'per_member',
     'narrow_quotients', 'outside_their_dtype', 'builtin_pow',
     'member_builtin_pow'])
def test_mixed_dtypes_promote_as_numpy_on_tensorflow(fn, args):
  want = ab.instructions.pattern_flatten(fn(*args))
  alone = ab.instructions.pattern_flatten(fn(*args, dry_run=True))
  for mode, out in _tf_runs(fn, args):
    for got, w, a in zip(ab.instructions.pattern_flatten(out), want, alone):
      got = np.asarray(got)
      assert got.dtype == w.dtype == np.asarray(a).dtype, mode
      np.testing.assert_allclose(got, w, rtol=1e-6, err_msg=mode)


def test_a_number_an_integer_dtype_cannot_hold_is_refused_in_arithmetic():
  # NumPy 2 raises OverflowError for `m + 200` of an int8, as here on
  # TensorFlow, which wrapped 200 to -56.
  tf = pytest.importorskip('tensorflow')
  m = tf.constant([1, 2], tf.int8)
  with pytest.raises(ab.errors.PrimitiveError,
                     match='Python integer 200 out of bounds for int8'):
    overflowing(m)
  assert all(np.asarray(x).all() for x in outside_their_dtype(
      tf.constant([0, 255], tf.uint8), m))
  for jit in (False, True):
    got = tf.function(clipped, jit_compile=jit)(
        tf.constant([0, -100, 100], tf.int8))
    np.testing.assert_array_equal(got, [0, -5, 100])


def test_float_literals_floor_division_and_nan_extremes_are_pythons():
  n = np.array([0, 3, -2])
  x = np.array([-0.9, 1.0, 5.0])
  y = np.array([0.3, 0.1, -np.inf])
  got = with_float_literals(n, x, y)
  np.testing.assert_allclose(got[0], [2.5, 3, -2])
  np.testing.assert_allclose(got[4], [-4.0, 9.0, -1.0])   # Python's
  np.testing.assert_allclose(got[5][0], got[4])
  member = member_literals(n, x, y)
  for b in range(3):
    nb, xb, yb = int(n[b]), float(x[b]), float(y[b])
    nan = float('nan')
    want = (max(nb, 1.5), min(nb, 0.5, 2), nb // 0.5, xb // yb,
            min(xb, nan), max(nan, xb), min(nan, xb), max([xb, nan, yb]))
    for k, w in enumerate(want):
      np.testing.assert_allclose(member[k][b], w, err_msg=str(k))


def _boolean_helper(a, b):
  return a + b, a * b, a ** b


@ctx.batch
def boolean_arithmetic(a, b):
  c = a
  c += b
  return (a + b, a * b, a ** b, a < b, a >= b, c, a + True, False * b,
          _boolean_helper(a, b))


@ctx.batch(per_member=True)
def member_boolean_arithmetic(a, b):
  c = a
  c *= b
  return (a + b, a * b, a ** b, a < b, a >= b, c, a + True, False * b,
          _boolean_helper(a, b))


@pytest.mark.parametrize('fn,shape', [
    (boolean_arithmetic, (4,)), (member_boolean_arithmetic, (4,)),
    (member_boolean_arithmetic, (3, 2))])
def test_booleans_add_and_multiply_as_numpys_on_tensorflow(fn, shape):
  # NumPy's `+` of booleans is a logical or, `*` a logical and, `**` an
  # int8 power, `<` compares False < True; TensorFlow has no such kernels.
  rng = np.random.default_rng(0)
  a, b = rng.random(shape) < 0.5, rng.random(shape) < 0.5
  alone = [fn.python_function(a[i], b[i]) for i in range(shape[0])]
  want = [np.stack([np.asarray(leaf) for leaf in leaves])
          for leaves in zip(*[ab.instructions.pattern_flatten(r)
                              for r in alone])]
  runs = [('numpy', fn(a, b)), ('dry run', fn(a, b, dry_run=True))]
  for mode, out in runs + list(_tf_runs(fn, (a, b))):
    got = ab.instructions.pattern_flatten(out)
    assert len(got) == len(want), mode
    for g, w in zip(got, want):
      g = np.asarray(g)
      assert g.dtype == w.dtype, (mode, g.dtype, w.dtype)
      np.testing.assert_array_equal(g, w, err_msg=mode)
