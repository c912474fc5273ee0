"""TensorFlow backend: leftover ("junk") data in members not at a block.

On TensorFlow a block's primitives run on the whole batch; the lanes of
members that are elsewhere in the program hold whatever their variables
held last (an index already past the end of a table, a zero divisor, a
negative logarithm argument).  Their results are discarded by the masked
write, so they must neither raise nor leak into the active members'
results (or gradients).  Each program runs eagerly, inside `tf.function`,
inside `tf.function(jit_compile=True)` (XLA) and with `stackless=True`
(eager), and is compared with a plain-Python reference computed one member
at a time.  (These found two bugs, now fixed by
`TensorFlowBackend.sanitize`: a junk index made `tf.gather` fail the run,
and an inf derivative in a junk lane made gradients NaN.)
"""

import math

import numpy as np
import pytest

import autobatch_vm as ab

tf = pytest.importorskip('tensorflow')

ctx = ab.Context()

# An eager call runs the same staged loop as a user's `tf.function` (through
# an internal one): the runs inside a user's `tf.function` are in `-m slow`.
MODES = ['eager', pytest.param('graph', marks=pytest.mark.slow), 'xla',
         'stackless']

# A linked list in two tables: NEXT[i] is the successor of node i, -1 (or
# BIG) ends the walk.  VALUES[i] is the node's value.
VALUES = tf.constant([3, 1, 4, 1, 5, 9, 2, 6], tf.int64)
NEXT_NEG = tf.constant([1, 2, -1, 4, 5, -1, 0, 2], tf.int64)
BIG = 10**9
NEXT_BIG = tf.constant([1, 2, BIG, 4, 5, BIG, 0, 2], tf.int64)
VALUES_PY = [3, 1, 4, 1, 5, 9, 2, 6]
NEXT_PY = [1, 2, -1, 4, 5, -1, 0, 2]


# -- programs ------------------------------------------------------------------

@ctx.batch()
def walk_to_minus_one(i):
  # A member that has finished keeps i == -1 while the others still gather.
  total = tf.zeros_like(i)
  while i >= 0:
    total = total + tf.gather(VALUES, i)
    i = tf.gather(NEXT_NEG, i)
  return total


@ctx.batch()
def walk_to_big(i):
  # The same walk ending at a huge index (10**9) instead of -1.
  total = tf.zeros_like(i)
  while i < 8:
    total = total + tf.gather(VALUES, i)
    i = tf.gather(NEXT_BIG, i)
  return total


@ctx.batch()
def walk_clipped(i):
  # The documented workaround: clip the index inside the primitive.
  total = tf.zeros_like(i)
  while i >= 0:
    total = total + tf.gather(VALUES, tf.clip_by_value(i, 0, 7))
    i = tf.gather(NEXT_NEG, tf.clip_by_value(i, 0, 7))
  return total


@ctx.batch()
def lookup_if_valid(i):
  # Members with an invalid index never reach the gather; their input lanes
  # (-1, 8, 10**9, ...) flow through it anyway.
  if i >= 0 and i < 8:
    return tf.cast(tf.gather(VALUES, i), i.dtype) * 10
  return i * 0 - 1


@ctx.batch()
def per_member_table(table, i):
  # A per-member table (axis 0 is the batch) indexed with batch_dims=1.
  if i >= 0 and i < 4:
    return tf.gather(table, i, batch_dims=1)
  return i * 0


@ctx.batch()
def ratio(x, y):
  if y != 0.0:
    return x / y
  return x * 0.0


@ctx.batch()
def guarded_ratio(x, y):
  # The documented workaround: guard the divisor (finite gradients too).
  if y != 0.0:
    return x / tf.where(y == 0.0, tf.ones_like(y), y)
  return x * 0.0


@ctx.batch()
def int_ratio(a, b):
  # `//` and `%` become ab.ops.floordiv / ab.ops.mod: no integer division by
  # zero error from the leftover zeros.
  if b != 0:
    return a // b + a % b
  return a * 0


@ctx.batch()
def safe_log(x):
  if x > 0.0:
    return tf.math.log(x)
  return x


@ctx.batch()
def log_then_recurse(x, n):
  # The log block runs with leftover non-positive x of members elsewhere in
  # the recursion; active members must still get finite results.
  if n <= 0:
    return x
  if x > 0.0:
    return log_then_recurse(tf.math.log(x) + 1.0, n - 1) + 1.0
  return log_then_recurse(x * x + 0.5, n - 1) - 1.0


# -- references ------------------------------------------------------------------

def walk_ref(i):
  total = 0
  while 0 <= i < 8:
    total += VALUES_PY[i]
    i = NEXT_PY[i]
  return total


def lookup_ref(i):
  return VALUES_PY[i] * 10 if 0 <= i < 8 else -1


def ratio_ref(x, y):
  return x / y if y != 0.0 else 0.0


def int_ratio_ref(a, b):
  return a // b + a % b if b != 0 else 0


def safe_log_ref(x):
  return math.log(x) if x > 0.0 else x


def log_then_recurse_ref(x, n):
  if n <= 0:
    return x
  if x > 0.0:
    return log_then_recurse_ref(math.log(x) + 1.0, n - 1) + 1.0
  return log_then_recurse_ref(x * x + 0.5, n - 1) - 1.0


# -- helpers -------------------------------------------------------------------

def run(fn, args, mode, **kwargs):
  """`fn` on TF tensors in `mode`; returns a NumPy array."""
  targs = [tf.constant(a) for a in args]
  if mode == 'eager':
    return np.asarray(fn(*targs, **kwargs))
  if mode == 'stackless':
    kwargs.pop('max_stack_depth', None)
    return np.asarray(fn(*targs, stackless=True, **kwargs))
  compiled = tf.function(lambda *a: fn(*a, **kwargs),
                         jit_compile=(mode == 'xla'))
  return np.asarray(compiled(*targs))


def reference(ref, *args):
  return np.array([ref(*(a[k].item() for a in args))
                   for k in range(len(args[0]))])


# -- out-of-range gathers in inactive lanes -------------------------------------

START = np.array([0, 3, 6, 2, 7, 5, 1, 4], np.int64)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('fn', [walk_to_minus_one, walk_to_big],
                         ids=['index_-1', 'index_1e9'])
def test_gather_with_leftover_out_of_range_index(fn, mode):
  result = run(fn, [START], mode)
  np.testing.assert_array_equal(result, reference(walk_ref, START))


@pytest.mark.parametrize('mode', MODES)
def test_gather_with_clipped_index_works_in_every_mode(mode):
  result = run(walk_clipped, [START], mode)
  np.testing.assert_array_equal(result, reference(walk_ref, START))


@pytest.mark.parametrize('mode', MODES)
def test_gather_with_invalid_input_in_lanes_not_at_the_block(mode):
  i = np.array([2, -1, 7, BIG, 0, 8, -BIG, 5], np.int64)
  result = run(lookup_if_valid, [i], mode)
  np.testing.assert_array_equal(result, reference(lookup_ref, i))


@pytest.mark.parametrize('mode', MODES)
def test_gather_batch_dims_with_invalid_index_in_inactive_lanes(mode):
  rng = np.random.default_rng(0)
  table = rng.integers(0, 100, size=(6, 4))
  i = np.array([0, -1, 3, 4, BIG, 2], np.int64)
  result = run(per_member_table, [table, i], mode)
  expected = [table[k, i[k]] if 0 <= i[k] < 4 else 0 for k in range(6)]
  np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', [np.int32, np.int64])
def test_gather_junk_index_does_not_change_active_results(dtype, mode):
  # Same active members, different junk in the inactive lanes: same results.
  valid = np.array([1, 4, 6], dtype)
  results = []
  for junk in (-1, 8, BIG, -BIG, 2**31 - 1):
    i = np.array([valid[0], junk, valid[1], junk, valid[2]], dtype)
    out = run(lookup_if_valid, [i], mode)
    results.append(out[[0, 2, 4]])
    assert (out[[1, 3]] == -1).all()
  for out in results:
    np.testing.assert_array_equal(out, [VALUES_PY[v] * 10 for v in valid])


# -- division by zero and log of negatives in inactive lanes --------------------

@pytest.mark.parametrize('mode', MODES)
def test_division_by_zero_in_inactive_lanes(mode):
  x = np.array([1.0, 2.0, -3.0, 0.0, 5.0, 7.5])
  y = np.array([2.0, 0.0, 4.0, 0.0, -0.0, 0.25])
  result = run(ratio, [x, y], mode)
  assert np.isfinite(result).all(), result
  np.testing.assert_allclose(result, reference(ratio_ref, x, y), rtol=1e-15)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', [np.int32, np.int64])
def test_integer_division_by_zero_in_inactive_lanes(dtype, mode):
  a = np.array([7, -7, 3, 0, 9, -12], dtype)
  b = np.array([2, 0, -2, 0, 0, 5], dtype)
  result = run(int_ratio, [a, b], mode)
  np.testing.assert_array_equal(result, reference(int_ratio_ref, a, b))


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_log_of_negative_in_inactive_lanes(dtype, mode):
  x = np.array([2.0, -1.0, 0.5, 0.0, -np.inf, 10.0], dtype)
  result = run(safe_log, [x], mode)
  expected = reference(safe_log_ref, x).astype(dtype)
  active = x > 0
  assert np.isfinite(result[active]).all(), result
  np.testing.assert_allclose(result, expected,
                             rtol=1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize('mode', MODES)
def test_log_with_leftover_data_through_recursion(mode):
  rng = np.random.default_rng(1)
  x = rng.uniform(-3, 3, size=16)
  n = rng.integers(0, 7, size=16)
  result = run(log_then_recurse, [x, n], mode, max_stack_depth=10)
  expected = reference(log_then_recurse_ref, x, n)
  assert np.isfinite(result).all(), result
  np.testing.assert_allclose(result, expected, rtol=1e-12)


# -- gradients through blocks with junk lanes ------------------------------------

def _grad(fn, args, mode):
  targs = [tf.constant(a) for a in args]

  # Under XLA the loop's gradient needs a static trip count: max_steps.
  options = {'max_steps': 1000} if mode == 'xla' else {}

  def grad(*a):
    with tf.GradientTape() as tape:
      tape.watch(a[0])
      y = fn(*a, stackless=(mode == 'stackless'), **options)
      total = tf.reduce_sum(y)
    return y, tape.gradient(total, a[0])
  if mode in ('graph', 'xla'):
    grad = tf.function(grad, jit_compile=(mode == 'xla'))
  y, dx = grad(*targs)
  return np.asarray(y), np.asarray(dx)


@pytest.mark.parametrize('mode', MODES)
def test_gradient_of_division_ignores_zero_divisors_in_inactive_lanes(mode):
  x = np.array([1.0, 2.0, -3.0, 5.0])
  y = np.array([2.0, 0.0, 4.0, 0.0])
  _, dx = _grad(ratio, [x, y], mode)
  np.testing.assert_allclose(dx, [0.5, 0.0, 0.25, 0.0])


@pytest.mark.parametrize('mode', MODES)
def test_gradient_of_log_ignores_zeros_in_inactive_lanes(mode):
  x = np.array([2.0, 0.0, 0.5, -1.0])
  _, dx = _grad(safe_log, [x], mode)
  np.testing.assert_allclose(dx, [0.5, 1.0, 2.0, 1.0])


@pytest.mark.parametrize('mode', MODES)
def test_gradient_of_guarded_division_is_finite(mode):
  x = np.array([1.0, 2.0, -3.0, 5.0])
  y = np.array([2.0, 0.0, 4.0, 0.0])
  result, dx = _grad(guarded_ratio, [x, y], mode)
  np.testing.assert_allclose(result, reference(ratio_ref, x, y))
  np.testing.assert_allclose(dx, [0.5, 0.0, 0.25, 0.0])
