"""Item assignments in per-member functions: unpacking targets, new arrays.

`v[j], v[j + 1] = v[j + 1], v[j]` (a swap), as Python runs it: the value
whole first, then each target from left to right; and items written into
`np.zeros_like(v)` and its kin, which TensorFlow makes too.  Each program is
compared with `dry_run=True` (each member alone, as plain Python) and
with Python's own results, on NumPy (stack VM and stackless) and on
TensorFlow (eagerly, `tf.function`, XLA).
"""

import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.per_member import primitive
from tests import python as python_tests
from tests.python import test_batch_item_assignment as batch_items

ctx = ab.Context()


@ctx.batch(per_member=True)
def bubble_sort(v):
  n = len(v)
  swaps = 0
  for i in range(n):
    for j in range(n - 1 - i):   # a size less a counter, on TensorFlow too
      if v[j] > v[j + 1]:
        v[j], v[j + 1] = v[j + 1], v[j]
        swaps += 1
  return v, swaps


@ctx.batch(per_member=True)
def mixed_targets(v, w, k):
  (v[0], k), w[1] = (v[1] + 1.0, k + 1), v[2]
  v[k], w[k] = w[k], v[k]      # both read before either is written
  return v, w, k


@ctx.batch(per_member=True)
def running_total(v):
  """Iterates `v` while writing its items: each item is read as the loop
  gets there, after the writes before it."""
  i = 0
  for x in v:
    if i + 1 < len(v):
      v[i + 1] += x
    i += 1
  return v


@ctx.batch(per_member=True)
def doubled_while_iterated(v):
  """`v *= 2` updates the array in place: the items read later are
  doubled, once per trip before them."""
  total = v[0] * 0.0
  for x in v:
    total += x
    v *= 2.0
  return total, v


@ctx.batch(per_member=True)
def rebound_while_iterated(v):
  """`v` bound anew in the body: the loop iterates the array it started
  with, and the writes go to the new one."""
  total = v[0] * 0.0
  for x in v:
    v = v * 2.0
    v[0] += x
    total += x
  return total, v


@ctx.batch(per_member=True)
def enumerated_running_total(v):
  """`enumerate(v)` reads each item as the loop gets there too."""
  for i, x in enumerate(v):
    if i + 1 < len(v):
      v[i + 1] += x
  return v


@ctx.batch(per_member=True)
def zipped_while_written(v):
  """Of `zip(v, w)`, the written `v`'s items as they are then; `w`'s as
  it was."""
  w = v * 0.5
  for x, y in zip(v, w):
    v[-1] += x * y
    w = w + 1.0
  return v, w


@ctx.batch(per_member=True)
def reversed_running_total(v):
  """`reversed(v)` reads from the last item, each as it is then."""
  k = len(v) - 1
  for x in reversed(v):
    if k > 0:
      v[k - 1] += x
    k -= 1
  return v


@ctx.batch(per_member=True)
def enumerated_zip_written(v):
  """`enumerate(zip(w, v))`, `v` written: its items as they are then."""
  w = v + 1.0
  for i, (x, y) in enumerate(zip(w, v), 1):
    if i < len(v):
      v[i] = v[i] + x * y
  return v


@ctx.batch(per_member=True)
def enumerated_and_rebound(v):
  """`v` bound anew in the body: `enumerate(v)` iterates the array it
  started with."""
  for i, x in enumerate(v):
    v = v.copy()
    if i + 1 < len(v):
      v[i + 1] += x
  return v


@pytest.mark.parametrize('fn', [running_total, doubled_while_iterated,
                                rebound_while_iterated,
                                enumerated_running_total,
                                zipped_while_written, reversed_running_total,
                                enumerated_zip_written,
                                enumerated_and_rebound],
                         ids=lambda f: f.name)
def test_a_loop_over_an_array_sees_its_bodys_writes_as_python(fn):
  v = np.arange(12.0).reshape(3, 4) - 3.0
  expected = [fn.python_function(v[m].copy()) for m in range(3)]
  def check(alone):
    for m, want in enumerate(expected):
      got = ab.instructions.pattern_map(lambda a, m=m: a[m], alone)
      for g, w in zip(ab.instructions.pattern_flatten(got),
                      ab.instructions.pattern_flatten(want)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
  python_tests.run_everywhere(fn, [v], check)


def test_a_swap_of_items_sorts_as_python():
  v = np.random.default_rng(0).integers(0, 10, size=(5, 6))
  def check(alone):
    np.testing.assert_array_equal(alone[0], np.sort(v, axis=1))
    assert np.all(alone[1] >= 0)
  python_tests.run_everywhere(bubble_sort, [v], check)


def test_item_and_name_targets_unpack_left_to_right():
  v = np.arange(12.0).reshape(3, 4)
  w = -np.arange(12.0).reshape(3, 4)
  k = np.array([0, 1, 2])
  expected = [mixed_targets.python_function(v[m].copy(), w[m].copy(), k[m])
              for m in range(3)]
  def check(alone):
    for m, (ev, ew, ek) in enumerate(expected):
      np.testing.assert_array_equal(alone[0][m], ev)
      np.testing.assert_array_equal(alone[1][m], ew)
      assert alone[2][m] == ek
  python_tests.run_everywhere(mixed_targets, [v, w, k], check)


_batch_ctx = ab.Context()


@_batch_ctx.batch
def _swaps_items(v):
  v[0], v[1] = v[1], v[0]
  return v


def test_a_batch_aware_function_still_refuses_item_targets():
  with pytest.raises(errors.UnsupportedSyntaxError,
                     match='assignment to items'):
    _swaps_items(np.ones((2, 3)))


@ctx.batch(per_member=True)
def prefix_sums(v):
  out = np.zeros_like(v)       # on TensorFlow too: arrays like a member's
  counts = np.ones_like(v, dtype=np.int32)
  halves = np.full_like(counts, 7.9)   # NumPy casts the fill: 7
  acc = 0.0
  for i in range(len(v)):
    acc += v[i]
    out[i] = acc
    counts[i] += i
  return out, counts, halves, np.empty_like(v, np.float32).shape[0]


def test_arrays_like_a_members_array_are_written_item_by_item():
  v = np.random.default_rng(1).normal(size=(3, 5))
  def check(alone):
    np.testing.assert_allclose(alone[0], np.cumsum(v, axis=1))
    np.testing.assert_array_equal(alone[1], np.tile(np.arange(1, 6), (3, 1)))
    assert alone[1].dtype == np.int32 and alone[2].dtype == np.int32
    np.testing.assert_array_equal(alone[2], np.full((3, 5), 7))
  python_tests.run_everywhere(prefix_sums, [v], check)


@ctx.batch(per_member=True)
def windows(v, lo, n):
  w = v.copy()
  w[lo:lo + 2] = 0.0            # a window of one length, per-member start
  w[:n] += 1.0                  # windows of different lengths, updated
  w[n::2] *= -w[0]
  w[lo + 1:lo + 3] = v[:2] * 2  # an array into a window of one length
  return w, np.max(w[lo:lo + 3])


def test_slices_with_per_member_bounds_read_and_write_windows():
  # Slices whose bounds differ between members: read where every member's
  # window has one length, written (`=`, `+=`) whatever the lengths.
  # TensorFlow's vectorizer cannot compile them under XLA: refused there.
  tf = pytest.importorskip('tensorflow')
  v = np.arange(24.0).reshape(4, 6) - 4.0
  lo, n = np.array([0, 1, 2, 3]), np.array([1, 3, 6, 0])
  alone = windows(v, lo, n, dry_run=True)
  want = [windows.python_function(v[m].copy(), lo[m], n[m]) for m in range(4)]
  for got, expected in zip(alone, zip(*want)):
    np.testing.assert_array_equal(got, np.stack(expected))
  targs = [tf.constant(a) for a in (v, lo, n)]
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', primitive.PerMemberFallbackWarning)
    outs = [windows(v, lo, n, stackless=s) for s in (False, True)]
    outs += [windows(*targs), tf.function(windows)(*targs)]
    with pytest.raises(errors.PerMemberError, match='slice whose bounds'):
      tf.function(windows, jit_compile=True)(*targs)
  for out in outs:
    for got, expected in zip(out, alone):
      np.testing.assert_array_equal(np.asarray(got), expected)
  # Kept, windows of different lengths have no batch to be held in.
  with pytest.raises(errors.PerMemberError, match='different number'):
    _prefix(v, n)


@ctx.batch(per_member=True)
def _prefix(v, n):
  return v[:n] * 2


@ctx.batch(per_member=True)
def unpacking(v, m):
  a, b = v                     # a member's vector's items
  (p, q), r = m[0], m[1]
  lo, hi = divmod(a, 1.0)      # a tuple stays a tuple
  return a * b, a - b, p + q, r.sum(), lo + hi


def test_a_members_array_unpacks_into_names():
  rng = np.random.default_rng(2)
  v, m = rng.normal(size=(3, 2)), rng.normal(size=(3, 2, 2))
  python_tests.run_everywhere(unpacking, [v, m])
  with pytest.raises(errors.PrimitiveError,
                     match=r'`a, b = v`.*too many values to unpack'):
    unpacking(np.ones((2, 3)), m[:2])


def test_a_shape_unpacked_gives_sizes_known_when_compiled():
  # `m, n = a.shape` made `n` a per-member value, so `np.zeros(n)` was
  # refused (`n = a.shape[1]` was not); more names than axes is Python's
  # ValueError.
  ctx = ab.Context()

  def padded(a):
    m, n = a.shape
    return np.zeros(n) + m, np.eye(m)[0] * n

  fn = ctx.batch_uncurried(padded, per_member=True)
  python_tests.run_everywhere(fn, [np.ones((2, 3, 4))])
  with pytest.raises(errors.PrimitiveError, match='too many values to unpack'):
    fn(np.ones((2, 3, 4, 5)))


def _sieve_and_marks(n, a, b, s):
  is_prime = np.ones(32, dtype=bool)
  is_prime[:2] = False
  i = 2
  while i * i < n:
    if is_prime[i]:
      is_prime[i * i::i] = False
    i += 1
  v = np.zeros(12)
  v[a:b:s] = 1.0
  w = np.zeros(12)
  w[b::-s] = 2.0
  return is_prime, v, w


def test_a_stepped_slice_of_a_members_step_written_runs_everywhere():
  # `is_prime[i * i::i] = False` on TensorFlow: a misleading "needs a
  # single bool" PerMemberError.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()
  fn = ctx.batch_uncurried(_sieve_and_marks, per_member=True)
  args = [np.array([10, 30, 20, 5]), np.array([1, 0, 3, -5]),
          np.array([9, 11, 4, -1]), np.array([2, 3, 1, 4])]
  got = fn(*args)
  for m in range(4):
    want = _sieve_and_marks(*[a[m] for a in args])
    for k in range(3):
      np.testing.assert_array_equal(got[k][m], want[k])
  run_everywhere(fn, args)


_in_place_ctx = ab.Context()


@_in_place_ctx.batch(per_member=True)
def scaled_in_place(v, d):
  w = v.copy()
  w *= d
  return w


@_in_place_ctx.batch(per_member=True)
def added_into_slice(v, d):
  w = v.copy()
  w[1:3] += d
  return w


@_in_place_ctx.batch(per_member=True)
def added_into_window(v, d, n):
  w = v.copy()
  w[:n] += d
  return w


@_in_place_ctx.batch(per_member=True)
def numbers_rebound(v, d, n):
  w = v.copy()
  w[n] += d        # an item of a vector is a number: cast when written
  s = 0
  s += d           # a number rebound: a float
  s *= v[0]
  return w, s


def _plain_loop(fn, args):
  outs = [fn.python_function(*[np.copy(a[k]) for a in args])
          for k in range(len(args[0]))]
  return outs


def test_in_place_operators_keep_a_members_arrays_dtype_as_numpy():
  # A member's `w *= d` on an int array and a float was `w = w * d`, a
  # float64 array (NumPy raises); `w[1:3] += d` and `w[:n] += d`
  # truncated the sums silently (NumPy raises).  A float32 array times a
  # float64 became float64 (NumPy's in-place operator keeps float32).
  v = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
  d = np.array([0.5, 1.7])
  n = np.array([2, 3])
  for fn, args in ((scaled_in_place, [v, d]), (added_into_slice, [v, d]),
                   (added_into_window, [v, d, n])):
    with pytest.raises(TypeError, match='same_kind'):
      _plain_loop(fn, args)
    with pytest.raises(TypeError, match='same_kind'):
      fn(*args, dry_run=True)
    python_tests.refused_everywhere(fn, args, errors.PrimitiveError,
                                    r"int64.*float64.*'same_kind'")
  f32 = v.astype(np.float32)
  # Sums and products float32 holds exactly: NumPy 1 computes them in
  # float32 (a float64 number beside a float32 array), NumPy 2 in float64.
  d = np.array([0.5, 1.75])
  assert _plain_loop(scaled_in_place, [f32, d])[0].dtype == np.float32
  for fn, args in ((scaled_in_place, [f32, d]), (added_into_slice, [f32, d]),
                   (added_into_window, [f32, d, n]),
                   (added_into_window, [v, n, n])):
    want = np.stack(_plain_loop(fn, args))
    python_tests.run_everywhere(
        fn, args, check=lambda alone, want=want: (
            np.testing.assert_array_equal(alone, want),
            np.testing.assert_equal(alone.dtype, want.dtype)))


def test_in_place_operators_rebind_a_members_numbers_as_python():
  v = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
  d = np.array([0.5, 1.7])
  n = np.array([1, 3])
  outs = _plain_loop(numbers_rebound, [v, d, n])
  want = (np.stack([w for w, _ in outs]), np.array([s for _, s in outs]))

  def check(alone):
    for got, expected in zip(alone, want):
      np.testing.assert_allclose(got, expected, rtol=1e-12)
      assert got.dtype == expected.dtype
  python_tests.run_everywhere(numbers_rebound, [v, d, n], check=check)


def test_items_of_a_list_written_at_constant_indices():
  # A Python list of values is structure: `parts[0] = v` rebuilds it with
  # that item replaced (`ops.list_setitem`), as the batch-aware programs.
  c = ab.Context()
  batched = [c.batch(per_member=True)(fn)
             for fn in batch_items.LIST_PROGRAMS]
  batch_items.check_list_programs(batched)


def test_list_item_writes_it_cannot_take_are_refused_as_a_lists():
  batch_items.check_list_refusals(per_member=True)
