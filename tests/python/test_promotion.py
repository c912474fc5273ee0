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


@ctx.batch(per_member=True)
def member_mixed(x, n, v):
  return x * n + n / 3, x ** n, v.sum() * n


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
    (member_mixed, (np.array([1.0, 2.0, 0.5]), np.array([1, 2, 3]),
                    np.ones((3, 4), np.float32))),
], ids=['float64_int64', 'float32_int32', 'bool_count', 'numpy_floats',
     'per_member'])
def test_mixed_dtypes_promote_as_numpy_on_tensorflow(fn, args):
  want = ab.instructions.pattern_flatten(fn(*args))
  alone = ab.instructions.pattern_flatten(fn(*args, dry_run=True))
  for mode, out in _tf_runs(fn, args):
    for got, w, a in zip(ab.instructions.pattern_flatten(out), want, alone):
      got = np.asarray(got)
      assert got.dtype == w.dtype == np.asarray(a).dtype, mode
      np.testing.assert_allclose(got, w, rtol=1e-6, err_msg=mode)
