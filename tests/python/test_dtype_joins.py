"""A variable given different dtypes on different paths takes their common one.

Per member, Python gives `return n` an int and `return n * 1.5` a float;
the members' values together are what NumPy makes of them (`np.stack`:
float64), which is what a dry run returns.  Type inference joins the
dtypes by `np.result_type`, and the VM casts every write to the joined
dtype.  Each program runs batched against its dry run on NumPy (stack VM,
stackless) and TensorFlow (eager, `tf.function`, XLA).
"""

import numpy as np
import pytest

import autobatch_vm as ab
from tests.python import run_everywhere

ctx = ab.Context()


@ctx.batch
def scale(n):
  if n > 3:
    return n * 1.5
  return n


@ctx.batch
def halve(n):
  x = n
  while x > 1:
    x = x / 2
  return x


@ctx.batch
def double(a):
  return a * 2


@ctx.batch
def calls(n):
  if n > 2:
    return double(n)
  return double(0.5 * n)


@ctx.batch
def either(x32, x64):
  if x32 > 0:
    y = x32
  else:
    y = x64
  return y


@ctx.batch
def flag(x):
  f = x > 0
  if x > 2:
    f = 0
  return f


@ctx.batch
def damped(n):
  # Recursive: int at the base case, float above it; pushed across calls.
  if n < 2:
    return n
  return damped(n - 1) + damped(n - 2) * 0.5


N = np.array([1, 2, 3, 5, 8])


@pytest.mark.parametrize('fn, args, dtype', [
    (scale, [N], np.float64),
    (halve, [N], np.float64),
    (calls, [N], np.float64),
    (either, [np.array([1, -1, 2], np.float32),
              np.array([1.0, 2.0, 3.0])], np.float64),
    (flag, [np.array([-1, 1, 3])], np.int64),
    (damped, [np.array([0, 1, 4, 6])], np.float64),
], ids=lambda p: getattr(p, '__name__', ''))
def test_paths_of_different_dtypes_give_the_common_one(fn, args, dtype):
  def check(alone):
    assert np.asarray(alone).dtype == dtype
  run_everywhere(fn, args, check)


def test_a_float32_path_and_a_python_float_keep_float32():
  # A literal is weak: it takes float32, which needs no widening.
  local = ab.Context()

  @local.batch
  def clip(x):
    y = x
    if x > 1:
      y = 1.0
    return y

  x = np.array([0.5, 2.0, 1.5], np.float32)
  assert clip(x).dtype == np.float32
  run_everywhere(clip, [x])
