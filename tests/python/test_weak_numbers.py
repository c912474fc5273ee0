"""Python numbers are weak: they take the dtype of the arrays they meet.

Per member, `1 if d == 0 else -1` of a loop counter `d` is a Python int,
`math.sqrt(k)` of a Python int `k` a Python float, and a Python number
passed as an argument stays one: next to an int32 or float32 array each
takes the array's dtype (NumPy 2, NEP 50).  Each program runs batched
against each member run alone as plain Python (values and dtypes): the
dry run, NumPy (stack VM, stackless) and TensorFlow (eager,
`tf.function`, XLA).
"""

import math

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

# The references are NumPy 2's (NEP 50); NumPy 1 promotes Python numbers
# by value.
pytestmark = pytest.mark.skipif(
    np.lib.NumpyVersion(np.__version__) < '2.0.0',
    reason='Python numbers are weak from NumPy 2 (NEP 50)')

ctx = ab.Context()


def _alone(fn, args):
  """Each member's plain Python result, stacked (a list of leaves)."""
  batch = next(len(a) for a in args if isinstance(a, np.ndarray))
  with np.errstate(over='ignore'):   # int8 scalars wrap, as arrays do
    results = [ab.instructions.pattern_flatten(fn.python_function(
        *[a[b] if isinstance(a, np.ndarray) else a for a in args]))
               for b in range(batch)]
  return [np.stack([np.asarray(leaf) for leaf in leaves])
          for leaves in zip(*results)]


def run_everywhere(fn, args, **kwargs):
  """`fn` batched everywhere against each member alone; Python numbers
  among `args` are passed as they are."""
  want = _alone(fn, args)
  with np.errstate(over='ignore'):   # as `_alone`
    outs = {'dry run': fn(*args, dry_run=True, **kwargs)}
  for stackless in (False, True):
    outs[f'numpy stackless={stackless}'] = fn(*args, stackless=stackless,
                                              **kwargs)
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) if isinstance(a, np.ndarray) else a for a in args]
  outs['eager'] = fn(*targs, **kwargs)
  for jit in (False, True):
    outs[f'tf.function jit={jit}'] = tf.function(
        lambda *a: fn(*a, **kwargs), jit_compile=jit, autograph=False)(*targs)
  for mode, out in outs.items():
    leaves = ab.instructions.pattern_flatten(out)
    assert len(leaves) == len(want), mode
    for got, w in zip(leaves, want):
      got = np.asarray(got)
      assert got.dtype == w.dtype, (mode, got.dtype, w.dtype)
      np.testing.assert_allclose(got, w, rtol=1e-6, err_msg=mode)


@ctx.batch()
def signed_steps(n):
  s = n * 0
  d = 0
  while d < 3:
    s = s + (1 if d == 0 else -1)
    d += 1
  return s


@ctx.batch()
def chosen_scale(x, n):
  y = x
  k = 0
  while k < n:
    y = y * (2.0 if k % 2 == 0 else 0.5) + k
    k += 1
  return y


def test_a_choice_between_python_numbers_takes_the_arrays_dtype():
  run_everywhere(signed_steps, [np.arange(4, dtype=np.int32)])
  run_everywhere(chosen_scale, [np.linspace(1, 2, 3, dtype=np.float32),
                                np.array([0, 1, 4], np.int32)])


@ctx.batch(per_member=True)
def root_shift(v, k):
  return v * k + math.sqrt(k)


@ctx.batch(per_member=True)
def root_steps(v):
  k = 1
  while k < 3:
    v = v * k + math.sqrt(k)
    k += 1
  return v


def test_a_math_function_of_a_python_number_is_a_python_float():
  v = np.linspace(1, 2, 6, dtype=np.float32).reshape(3, 2)
  run_everywhere(root_shift, [v, 4])
  run_everywhere(root_steps, [v])


@ctx.batch()
def count_from(n):
  i = 128
  c = n * 0
  while i <= n:
    c = c + 1
    i += 1
  return c


@ctx.batch()
def count_past(n):
  i = 0
  c = 0
  while i <= n:
    i += 1
    c += 1
  return c


@ctx.batch()
def odd_steps(n):
  i = -1
  c = 0
  while i < n:
    i += 2
    c += 1
  return c


def _at_most(a, b):
  return a <= b


@ctx.batch()
def count_from_helper(n):
  i = 120
  c = n * 0
  while _at_most(i, n):
    c = c + 1
    i += 1
  return c


def test_a_counter_beyond_a_narrow_dtype_is_compared_as_itself():
  # (max_steps: a counter wrapped into the dtype would loop for ever.)
  int8 = np.array([5, 127, -3], np.int8)
  run_everywhere(count_from, [int8], max_steps=2000)
  # In a helper (its operators promote as NumPy's on TensorFlow), the
  # counter passes 127.
  run_everywhere(count_from_helper, [int8], max_steps=2000)
  run_everywhere(count_past, [int8], max_steps=2000)
  run_everywhere(odd_steps, [np.array([5, 255, 0], np.uint8)],
                 max_steps=2000)


@ctx.batch()
def shifted(x, c):
  return x + c


@ctx.batch()
def shifted_by_counter(x, n):
  i = 100
  while i < n:
    i += 50
  return x + i


def test_a_python_int_an_arrays_dtype_cannot_hold_is_refused():
  x = np.array([1, 2, 3], np.int8)
  run_everywhere(shifted, [x, 100])
  run_everywhere(shifted_by_counter, [x, np.array([0, 0, 0], np.int32)])
  message = 'Python integer 300 out of bounds for int8'
  with pytest.raises(OverflowError, match=message):
    shifted(x, 300, dry_run=True)
  for stackless in (False, True):
    with pytest.raises(errors.PrimitiveError, match=message) as info:
      shifted(x, 300, stackless=stackless)
    assert 'x + c' in str(info.value)
  with pytest.raises(errors.PrimitiveError, match=message):
    shifted_by_counter(x, np.array([0, 300, 0], np.int32), stackless=True)
  tf = pytest.importorskip('tensorflow')
  with pytest.raises(errors.PrimitiveError, match=message):
    shifted(tf.constant(x), 300)
  # Staged, the check stops the run (XLA has no such check).
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='Python integer out of bounds for int8'):
    tf.function(lambda a: shifted(a, 300), autograph=False)(tf.constant(x))


@ctx.batch()
def rotated(x, c):
  return x * c


@ctx.batch(per_member=True)
def rotated_member(x, c):
  return x * c + c


def test_a_python_complex_argument_takes_the_arrays_precision():
  x = np.linspace(1, 2, 3, dtype=np.float32)
  run_everywhere(rotated, [x, 1j])
  run_everywhere(rotated_member, [x, 0.5 + 2j])
  run_everywhere(rotated, [x.astype(np.float64), 1j])


# NumPy's float64 scalars, which keep their dtype (NEP 50).
STRONG_TABLE = np.array([1.0, 0.5, 0.25])


@ctx.batch(per_member=True)
def horner(x):
  s = 0.0
  for c in (1.0, 0.5, 0.25):
    s = s * x + c
  return s


@ctx.batch(per_member=True)
def int_horner(n):
  s = 0
  for c in (1, 2, 3):
    s = s * n + c
  return s


@ctx.batch(per_member=True)
def paired_steps(x):
  s = x * 0
  for k, (a, w) in enumerate(zip((1, 2, 3), (0.5, 0.25, 2.0))):
    s = s * x + a * w + k
  return s


@ctx.batch()
def horner_until(x):
  s = x * 0
  for c in (1.0, 0.5, 0.25, 2.0):
    if c > 1.5:
      break   # (a loop, not written out)
    s = s * x + c
  return s


@ctx.batch()
def strong_horner(x):
  s = x * 0
  for c in STRONG_TABLE:
    s = s * x + c
  return s


@ctx.batch(per_member=True)
def strong_horner_member(x):
  s = x * 0
  for c in STRONG_TABLE:
    s = s * x + c
  return s


def test_the_items_of_a_tuple_of_python_numbers_are_python_numbers():
  x = np.array([0.0, 0.5, -1.0], np.float32)
  run_everywhere(horner, [x])
  run_everywhere(paired_steps, [x])
  run_everywhere(horner_until, [x])
  run_everywhere(int_horner, [np.array([1, 2, 3], np.int32)])
  # A NumPy array's items are float64, in both kinds of function.
  run_everywhere(strong_horner, [x])
  run_everywhere(strong_horner_member, [x])



@ctx.batch(per_member=True)
def bisected_sqrt(c):
  lo, hi = 0.0, c   # a bracket beside float32 data stays float32
  for _ in range(30):
    mid = 0.5 * (lo + hi)
    if mid * mid < c:
      lo = mid
    else:
      hi = mid
  return lo


@ctx.batch(per_member=True)
def paired_or_zero(x):
  if x > 0:
    return x, x
  return x, 0.0


@ctx.batch(per_member=True)
def itself_or_zero(x):
  if x > 0:
    return x
  return 0.0


@ctx.batch(per_member=True)
def counted_product(n):
  if n == 0:
    return n, 1
  k, p = counted_product(n - 1)
  return k + 1, p * n


def test_a_number_written_in_a_tuple_is_a_python_number():
  # Per member `lo, hi = 0.0, c`, `return x, 0.0` and `return n, 1` hold
  # Python numbers, which take the dtype of the data they meet.
  c = np.array([2.0, 9.0, 0.25], np.float32)
  run_everywhere(bisected_sqrt, [c])
  # A member's Python float beside another's float32 is float32, in a
  # tuple as alone (NEP 50's promotion; stacking each member's result
  # would make it float64).
  x = np.array([1.5, -1.0, 0.0], np.float32)
  for mode in ({}, {'dry_run': True}, {'stackless': True}):
    alone = itself_or_zero(x, **mode)
    paired = paired_or_zero(x, **mode)
    assert alone.dtype == paired[1].dtype == np.float32, mode
    np.testing.assert_array_equal(paired[1], [1.5, 0.0, 0.0])
    np.testing.assert_array_equal(alone, paired[1])
  n = np.array([3, 0, 5], np.int32)
  tf = pytest.importorskip('tensorflow')
  outs = {'dry run': counted_product(n, dry_run=True),
          'numpy': counted_product(n),
          'stackless': counted_product(n, stackless=True),
          'eager': counted_product(tf.constant(n))}
  for jit in (False, True):
    outs[f'jit={jit}'] = tf.function(counted_product, jit_compile=jit,
                                     autograph=False)(tf.constant(n))
  for mode, (k, p) in outs.items():
    # One member alone: (np.int32(n), 1 * n * ... ), int32 throughout.
    assert np.asarray(k).dtype == np.asarray(p).dtype == np.int32, mode
    np.testing.assert_array_equal(k, n, err_msg=mode)
    np.testing.assert_array_equal(p, [6, 1, 120], err_msg=mode)

@ctx.batch(per_member=True)
def damped(z, v):
  y = math.exp(-z)
  return (z * math.exp(-z), y, z * y, v * float(v[0]), v * round(v[1]),
          v + math.floor(v[1]), -math.sqrt(v[0]) * v)


@ctx.batch(per_member=True)
def truncated_sum(s, x):
  return s + int(x)


def test_pythons_math_functions_float_and_int_give_python_numbers():
  # Per member each is a Python number: float32 beside float32 data,
  # float64 alone.
  z = np.array([0.3, 1.5, -2.0], np.float32)
  v = np.array([[4.0, 2.5], [9.0, 7.7], [1.0, -3.2]], np.float32)
  run_everywhere(damped, [z, v])
  s = np.array([1, 100, -100], np.int8)
  run_everywhere(truncated_sum, [s, np.array([1.5, 20.2, -27.9])])
  beyond = np.array([1.5, 300.2, 0.0])
  with pytest.raises(OverflowError,
                     match='Python integer 300 out of bounds for int8'):
    truncated_sum(s, beyond, dry_run=True)
  with pytest.raises(errors.PrimitiveError, match=r'members \[1\]'):
    truncated_sum(s, beyond)


@ctx.batch()
def stepped(s, k):
  d = 0
  while d < 2:
    s = s + (k if d == 1 else 0)
    d += 1
  return s


@ctx.batch(per_member=True)
def stepped_member(s, k):
  d = 0
  while d < 2:
    s = s + (k if d == 1 else 0)
    d += 1
  return s


@ctx.batch()
def counted(s, n):
  d = 0
  while d < n:
    s = s + d * 100
    d += 1
  return s


@ctx.batch(per_member=True)
def chosen_sum(s, x):
  return (s + (300 if x > 1 else 1), s / (300 if x > 0 else 1),
          s < (300 if x > 0 else 0))


@ctx.batch()
def guarded(s, x):
  k = 0
  while k < 3:
    k += 1
  return ((s + k * 100) if x > 0 else s, x > 0 and s + k * 100 > 0,
          x <= 0 or s - k * 100 < 0)


@ctx.batch(per_member=True)
def guarded_member(s, x):
  k = 0
  while k < 3:
    k += 1
  return ((s + k * 100) if x > 0 else s, x > 0 and s + k * 100 > 0,
          x <= 0 or s - k * 100 < 0)


def test_a_computed_python_int_beyond_its_dtype_is_refused():
  s = np.array([1, 100, -100], np.int8)
  # Only where Python computes it: here for no member.
  run_everywhere(guarded, [s, np.array([-1.0, -2.0, 0.0])])
  run_everywhere(guarded_member, [s, np.array([-1.0, -2.0, 0.0])])
  # In bounds, as NumPy 2: 100 + 100 wraps to -56.
  run_everywhere(stepped, [s, 100])
  run_everywhere(stepped_member, [s, 100])
  run_everywhere(counted, [s, np.array([1, 2, 0], np.int32)])
  run_everywhere(chosen_sum, [s, np.array([0.5, 1.0, -27.9])])
  tf = pytest.importorskip('tensorflow')
  calls = [(stepped, (s, 300)), (stepped_member, (s, 300)),
           (counted, (s, np.array([1, 3, 0], np.int32))),
           (chosen_sum, (s, np.array([0.5, 1.5, 0.0]))),
           (guarded, (s, np.array([-1.0, 2.0, 0.0]))),
           (guarded_member, (s, np.array([-1.0, 2.0, 0.0])))]
  for fn, args in calls:
    with pytest.raises(OverflowError,
                       match=r'Python integer [23]00 out of bounds for int8'):
      fn(*args, dry_run=True)
    targs = [tf.constant(a) if isinstance(a, np.ndarray) else a
             for a in args]
    for run in (lambda: fn(*args), lambda: fn(*args, stackless=True),
                lambda: fn(*targs)):
      with pytest.raises(errors.PrimitiveError,
                         match='out of bounds for int8') as info:
        run()
      assert 'line' in str(info.value)
    # Staged, the check stops the run (XLA has no such check).
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match='out of bounds for int8'):
      tf.function(lambda *a: fn(*a), autograph=False)(*targs)
  # Per member only the members for which Python raises fail.
  with pytest.raises(errors.PrimitiveError, match=r'members \[1\]'):
    chosen_sum(s, np.array([0.5, 1.5, 0.0]))
