"""Slices whose bounds differ between members, within one statement.

`u[i, i + 1:]` in a back substitution, `a[k:, k]` in a pivot search,
`v[lo:hi]` of each member's own bounds: where the members' lengths differ
(NumPy) or are not known when traced (XLA), the slice is held masked
(`per_member.ragged`) and what its statement does with it gives Python's
value; kept as an array of its own it is refused at its line.
"""

import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

B = 5


def _line_of(fn, text):
  import inspect  # pylint: disable=g-import-not-at-top
  lines, start = inspect.getsourcelines(fn)
  return start + next(k for k, line in enumerate(lines) if text in line)


def _quiet(fn, *args, **kwargs):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    return fn(*args, **kwargs)


def back_substitution(u, b):
  n = b.shape[0]
  x = np.zeros(n)
  for i in range(n - 1, -1, -1):
    x[i] = (b[i] - np.dot(u[i, i + 1:], x[i + 1:])) / u[i, i]
  return x


def cholesky(a):
  n = a.shape[0]
  l = np.zeros_like(a)
  for j in range(n):
    l[j, j] = np.sqrt(a[j, j] - np.sum(l[j, :j] ** 2))
    for i in range(j + 1, n):
      l[i, j] = (a[i, j] - l[i, :j] @ l[j, :j]) / l[j, j]
  return l


def gauss_with_pivoting(a, b):
  n = b.shape[0]
  a = a.copy()
  b = b.copy()
  for k in range(n - 1):
    p = k + np.argmax(np.abs(a[k:, k]))
    if p != k:
      row = a[k].copy()
      a[k] = a[p]
      a[p] = row
      t = b[k]
      b[k] = b[p]
      b[p] = t
    for i in range(k + 1, n):
      f = a[i, k] / a[k, k]
      a[i] = a[i] - f * a[k]
      b[i] = b[i] - f * b[k]
  x = np.zeros(n)
  for i in range(n - 1, -1, -1):
    x[i] = (b[i] - np.dot(a[i, i + 1:], x[i + 1:])) / a[i, i]
  return x


def test_triangular_solves_and_factorizations_run_everywhere():
  # The loop counter bounds each slice: on NumPy every member's counter
  # agrees (one length); under XLA the length is not known when traced,
  # where these were a PerMemberError.
  ctx = ab.Context()
  rng = np.random.default_rng(0)
  u = np.triu(rng.normal(size=(B, 4, 4))) + 3 * np.eye(4)
  m = rng.normal(size=(B, 4, 4))
  spd = m @ np.transpose(m, (0, 2, 1)) + 4 * np.eye(4)
  b = rng.normal(size=(B, 4))
  run_everywhere(ctx.batch_uncurried(back_substitution, per_member=True),
                 [u, b])
  run_everywhere(ctx.batch_uncurried(cholesky, per_member=True), [spd])
  solve = ctx.batch_uncurried(gauss_with_pivoting, per_member=True)
  run_everywhere(solve, [m, b])
  np.testing.assert_allclose(solve(m, b), np.linalg.solve(m, b[..., None])[..., 0],
                             rtol=1e-9)


def reductions(v, lo, hi):
  a = (np.sum(v[lo:hi] ** 2) + np.prod(1.0 + 0.1 * v[lo:hi]) +
       v[lo:hi].mean() + np.var(v[lo:hi]) + np.std(v[lo:]))
  b = np.max(v[lo:hi]) - np.min(v[:hi]) + v[lo:].max()
  c = np.argmax(v[lo:hi]) + np.argmin(v[lo:]) * 10 + v[:hi].argmax() * 100
  d = np.count_nonzero(v[lo:hi] > 0) + np.sum(np.abs(v[lo:hi]) > 0.5)
  e = (np.any(v[lo:hi] > 1.0), np.all(v[lo:hi] > -2.0),
       all(v[lo:hi] > -3.0), any(v[lo:hi] < -1.0))
  f = sum(v[lo:hi]) + max(v[lo:hi]) + min(v[lo:hi]) + len(v[lo:hi])
  g = (np.linalg.norm(v[lo:hi]) + np.linalg.norm(v[lo:hi], 1) +
       np.linalg.norm(v[lo:hi], np.inf))
  h = (np.dot(v[lo:hi], v[lo:hi]) + v[lo:hi] @ v[lo:hi] +
       np.inner(v[lo:hi], v[lo:hi]) + v[lo:hi].dot(v[lo:hi]))
  k = (np.sum(np.cumsum(v[lo:hi]) * v[lo:hi]) +
       np.sum(np.where(v[lo:hi] > 0, v[lo:hi], 0.0)) +
       np.sum(np.clip(v[lo:hi], -0.5, 0.5)) +
       np.sum(np.sqrt(np.abs(v[lo:hi]))))
  # Two slices of one length at different offsets, item by item.
  s = np.sum(v[lo:hi - 1] * v[lo + 1:hi])
  return a, b, c, d, e, f, g, h, k, s


def columns(m, k):
  col = np.sum(m[k:, 1]) + np.max(np.abs(m[k:, 2]))
  rows = np.sum(m[k:, :], axis=0)
  total = np.sum(np.sum(m[k:], axis=1))
  pivot = np.argmax(np.abs(m[k:, 0])) + k
  product = np.sum(m[k:, :] @ np.ones(4))
  return col, rows, total, pivot, product, np.mean(m[k:]), np.sum(
      m[k:, :2] * 2.0)


def test_reductions_of_slices_of_members_own_lengths_run_everywhere():
  # Each member's own bounds: NumPy refused the slices (lengths differ),
  # TensorFlow ran each statement in a loop over the members, and XLA
  # refused them.
  ctx = ab.Context()
  rng = np.random.default_rng(1)
  v = rng.normal(size=(B, 7))
  lo = np.array([0, 2, 3, 1, 5])
  hi = np.array([7, 5, 5, 6, 7])
  fn = ctx.batch_uncurried(reductions, per_member=True)
  got = fn(v, lo, hi)
  want = [reductions(v[b], lo[b], hi[b]) for b in range(B)]
  for k, leaf in enumerate(ab.instructions.pattern_flatten(got)):
    np.testing.assert_allclose(
        leaf, [ab.instructions.pattern_flatten(w)[k] for w in want],
        rtol=1e-12)
  _quiet(run_everywhere, fn, [v, lo, hi])
  m = rng.normal(size=(B, 6, 4))
  _quiet(run_everywhere, ctx.batch_uncurried(columns, per_member=True),
         [m, np.array([0, 1, 3, 5, 2])])


def strided(v, lo, hi):
  return (np.sum(v[lo:hi:2]), np.max(v[hi:lo:-3]), np.sum(v[lo::3] * 2.0),
          np.sum(v[:hi:2] * v[1:hi + 1:2]), len(v[lo:hi:2]))


def test_reductions_of_strided_slices_of_members_own_lengths_run_everywhere():
  # `np.sum(v[lo:hi:2])`: NumPy and XLA refused the slice as "used as an
  # array of its own" (it is reduced in its statement; step 1 was held
  # masked), TensorFlow ran the statement in a loop over the members.
  ctx = ab.Context()
  v = np.arange(14.0).reshape(2, 7) ** 1.5
  lo, hi = np.array([0, 1]), np.array([6, 4])
  fn = ctx.batch_uncurried(strided, per_member=True)
  want = [strided(v[b], lo[b], hi[b]) for b in range(2)]

  def check(alone):
    for k, leaf in enumerate(alone):
      np.testing.assert_allclose(leaf, [w[k] for w in want], rtol=1e-12)
  _quiet(run_everywhere, fn, [v, lo, hi], check=check)


def test_a_slice_of_members_own_lengths_kept_is_refused_at_its_line():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def kept(v, lo, hi):
    w = v[lo:hi]
    return np.sum(w)

  def sorted_slice(v, lo, hi):
    return np.sum(np.sort(v[lo:hi]) * np.arange(2))
  v = np.arange(12.0).reshape(3, 4)
  lo, hi = np.array([0, 1, 2]), np.array([2, 4, 3])
  for f, text in ((kept, 'w = v[lo:hi]'), (sorted_slice, 'np.sort')):
    fn = ctx.batch_uncurried(f, per_member=True)
    with pytest.raises(errors.PerMemberError,
                       match='different number of elements') as info:
      fn(v, lo, hi)
    assert info.value.lineno == _line_of(f, text)
    assert 'Pad to a fixed size' in str(info.value)
    with pytest.raises(errors.PerMemberError, match='slice whose bounds'):
      _quiet(tf.function(fn, jit_compile=True), tf.constant(v),
             tf.constant(lo), tf.constant(hi))


def test_the_maximum_of_an_empty_slice_fails_its_members_as_python():
  # NumPy raises ValueError for the maximum of no items; TensorFlow's is
  # -inf, which a member's loop over its slice returned silently.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def largest(v, lo, hi):
    return np.max(v[lo:hi])
  fn = ctx.batch_uncurried(largest, per_member=True)
  v = np.arange(12.0).reshape(3, 4)
  lo, hi = np.array([0, 2, 1]), np.array([3, 2, 4])
  with pytest.raises(ValueError):
    fn(v, lo, hi, dry_run=True)
  for run in (lambda *a: fn(*a), lambda *a: fn(*map(tf.constant, a)),
              lambda *a: ab.stage(fn, jit_compile=True)(
                  *map(tf.constant, a))):
    with pytest.raises(errors.PrimitiveError,
                       match=r'ValueError .* for batch members \[1\]'):
      _quiet(run, v, lo, hi)
  on_error = _quiet(fn, tf.constant(v), tf.constant(lo), tf.constant(hi),
                    on_error='status')
  np.testing.assert_array_equal(on_error[1], [True, False, True])
  np.testing.assert_allclose(on_error[0].numpy()[[0, 2]], [2.0, 11.0])


def test_slices_of_different_lengths_item_by_item_fail_their_members():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def pairs(v, lo, hi):
    return np.sum(v[lo:hi] * v[lo:hi + 1])
  fn = ctx.batch_uncurried(pairs, per_member=True)
  v = np.arange(12.0).reshape(3, 4)
  lo, hi = np.array([0, 1, 0]), np.array([2, 3, 3])
  for run in (lambda *a: fn(*a),
              lambda *a: ab.stage(fn, jit_compile=True)(
                  *map(tf.constant, a))):
    with pytest.raises(errors.PrimitiveError,
                       match='could not be broadcast together'):
      _quiet(run, v, lo, hi)


def test_extremes_with_nan_are_numpys_on_tensorflow():
  # NumPy's max is NaN, its argmax the first NaN's position; XLA's
  # reduce_max skipped the NaN, and TensorFlow's argmax did everywhere.
  ctx = ab.Context()

  def extremes(v):
    return np.max(v), np.argmax(v), np.argmin(v), v.min(), v.argmax()
  v = np.array([[1.0, np.nan, 3.0, -1.0], [1.0, 2.0, 3.0, -1.0],
                [np.nan, 0.0, np.nan, 5.0]])
  run_everywhere(ctx.batch_uncurried(extremes, per_member=True), [v])


def test_a_numpy_constant_meets_an_integer_member_as_numpy_promotes():
  # TensorFlow's operator cast the constant to the member's int64,
  # silently: np.full(3, 0.5) + n gave n.
  ctx = ab.Context()

  def shifted(n):
    return np.full(3, 0.5) + n, np.linspace(0.0, 1.0, 3) * n

  def shifted_batch(n):
    return np.expand_dims(n, -1) + np.full(3, 0.5)
  n = np.array([1, 2, 3])
  run_everywhere(ctx.batch_uncurried(shifted, per_member=True), [n])
  run_everywhere(ctx.batch_uncurried(shifted_batch), [n])


def test_a_kept_slice_of_a_counters_bound_is_refused_on_tensorflow():
  # `x = v[k:]` of a loop counter: typed on Python numbers, it ran into
  # TensorFlow's raw "Incompatible shapes" eagerly and under
  # tf.function; on NumPy the counters agree and it runs.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  def tails(v):
    s = 0.0
    for k in range(3):
      x = v[k:]
      s += x[0]
    return s
  fn = ctx.batch_uncurried(tails, per_member=True)
  v = np.arange(12.0).reshape(3, 4)
  np.testing.assert_allclose(fn(v), fn(v, dry_run=True))
  for run in (lambda *a: fn(*a), lambda *a: tf.function(fn)(*a)):
    with pytest.raises(errors.PerMemberError) as info:
      _quiet(run, tf.constant(v))
    assert info.value.lineno == _line_of(tails, 'x = v[k:]')


def test_pythons_sum_of_a_members_slice_keeps_the_items_dtype():
  # Type inference's slice was empty, where Python's sum is the int 0:
  # the floats' sums were typed int64 and truncated on NumPy (and in the
  # dry run, cast to that type).
  ctx = ab.Context()

  def segment(v, lo, hi):
    return sum(v[lo:hi]), sum(v[:hi]) * 2
  run_everywhere(ctx.batch_uncurried(segment, per_member=True),
                 [np.array([[0.25, 0.5, 0.75], [1.5, 2.5, 0.5]]),
                  np.array([0, 1]), np.array([3, 2])])


def moving_windows(x, n):
  centred = 0.0
  i = 1
  while i < n - 1:
    w = x[i - 1:i + 2]
    centred = centred + np.sum(w) / 3.0
    i += 1
  trailing = 0.0
  j = 2
  while j < n:
    pair = x[j - 2:j]
    trailing = trailing + pair[0] * pair[1]
    j += 1
  return centred, trailing


def test_a_window_around_a_counter_kept_runs_everywhere():
  # Typed on the counter's literal as 0, `x[i - 1:i + 2]` was Python's
  # empty `x[-1:2]`: refused on NumPy, a raw shape error on TensorFlow.
  # Its length is the same for every other counter.
  ctx = ab.Context()
  x = np.arange(5 * 8, dtype=np.float64).reshape(5, 8) % 7
  n = np.array([5, 8, 3, 2, 6])
  fn = ctx.batch_uncurried(moving_windows, per_member=True)
  want = [moving_windows(x[b], n[b]) for b in range(5)]
  got = fn(x, n)
  for k in range(2):
    np.testing.assert_allclose(got[k], [w[k] for w in want], rtol=1e-12)
  _quiet(run_everywhere, fn, [x, n])


def textbook_lu_solve(a, b):
  a = a.copy()
  b = b.copy()
  n = b.shape[0]
  for k in range(n - 1):
    p = k + np.argmax(np.abs(a[k:, k]))
    if p != k:
      a[[k, p]] = a[[p, k]]
      b[[k, p]] = b[[p, k]]
    for i in range(k + 1, n):
      f = a[i, k] / a[k, k]
      a[i, k:] -= f * a[k, k:]
      b[i] -= f * b[k]
  x = np.zeros(n)
  for i in range(n - 1, -1, -1):
    x[i] = (b[i] - a[i, i + 1:] @ x[i + 1:]) / a[i, i]
  return x


def test_a_slice_written_from_a_slice_of_the_same_bounds_runs_everywhere():
  # `a[i, k:] -= f * a[k, k:]`, the textbook elimination step: refused
  # on NumPy where members' k differ and under XLA always (the value
  # was a slice used as an array of its own).
  ctx = ab.Context()
  rng = np.random.default_rng(3)
  a = rng.normal(size=(B, 5, 5))
  b = rng.normal(size=(B, 5))
  fn = ctx.batch_uncurried(textbook_lu_solve, per_member=True)
  np.testing.assert_allclose(fn(a, b), np.linalg.solve(a, b[..., None])[..., 0],
                             rtol=1e-9)
  _quiet(run_everywhere, fn, [a, b])


_POINTS = np.array([0.5, 1.0, 2.0, 3.0, 5.0])
_QUERIES = np.array([0.2, 0.75, 2.5, 9.0])


def interpolated_on_slices(y, n, t, lo):
  return (np.interp(t, _POINTS[:n], y[:n]),
          np.interp(_QUERIES, _POINTS[lo:n], y[lo:n]),
          np.interp(t, _POINTS[:n], y[:n], left=-1.0, right=99.0),
          np.interp(np.array([t, t + 1.0]), _POINTS[lo:], y[lo:]))


def test_interp_over_slices_of_members_own_bounds_runs_everywhere():
  # np.interp(t, XS[:n], y[:n]): refused on NumPy where members' n differ
  # and under XLA (a slice used as an array of its own).
  ctx = ab.Context()
  y = np.array([[1.0, 2, 3, 4, 5], [2.0, 4, 6, 8, 10], [0.0, 1, 0, 1, 0],
                [5.0, 4, 3, 2, 1], [1.0, 1, 2, 3, 5]])
  args = [y, np.array([2, 3, 5, 1, 4]), np.array([0.75, 0.1, 4.0, 2.0, 1.5]),
          np.array([0, 1, 2, 0, 3])]
  fn = ctx.batch_uncurried(interpolated_on_slices, per_member=True)
  got = fn(*args)
  for m in range(B):
    want = interpolated_on_slices(*[a[m] for a in args])
    for k in range(4):
      np.testing.assert_allclose(got[k][m], want[k], rtol=1e-12)
  _quiet(run_everywhere, fn, args)
  with pytest.raises(errors.PrimitiveError, match=r'members \[1\].*empty'):
    fn(y, np.array([2, 0, 3, 1, 2]), *args[2:])


def guarded_extremes(v, k):
  return (v[:k].max() if k > 0 else 0,
          k > 0 and v[:k].max() > 4,
          k == 0 or v[:k].min() < 3,
          np.argmax(v[:k]) if k else -1)


def unguarded_extreme(v, k):
  return v[:k].max()


def guarded_float_args(v, k):
  return (np.argmax(v[:k]) if k > 0 else -1,
          np.argmin(v[:k]) if k > 0 else -1)


def test_an_empty_float_slice_python_does_not_arg_reduce_fails_no_member():
  # Of floats, the position of a NaN was looked for in the slice itself,
  # empty for a member with k == 0: TensorFlow's 'Reduction axis 0 is
  # empty' (eagerly and under tf.function) for a member Python does not
  # reduce.
  v = np.array([[5.0, 1.0, 7.0], [2.0, np.nan, 4.0], [3.0, 3.0, 3.0],
                [8.0, 0.0, 2.0], [1.0, 2.0, -1.0]])
  _check_guarded(guarded_float_args, v, np.array([0, 2, 3, 0, 3]))


def _check_guarded(python_fn, v, k):
  """`python_fn` batched per member equals it on each member alone, and
  runs everywhere; returns its Context."""
  ctx = ab.Context()
  fn = ctx.batch_uncurried(python_fn, per_member=True)
  got = fn(v, k)
  for m in range(B):
    want = python_fn(v[m], k[m])
    for g, w in zip(got, want):
      assert g[m] == w
  _quiet(run_everywhere, fn, [v, k])
  return ctx


def test_an_empty_slice_python_does_not_reduce_fails_no_member():
  # `v[:k].max() if k > 0 else 0`: Python takes the maximum only where
  # k > 0, so a member with k == 0 does not fail (it did, on every
  # backend, and under XLA its result was poisoned).
  v = np.array([[5, 1, 7], [2, 9, 4], [3, 3, 3], [8, 0, 2], [1, 2, 3]])
  k = np.array([0, 2, 3, 0, 1])
  ctx = _check_guarded(guarded_extremes, v, k)
  # Unguarded, an empty slice's maximum still fails its member.
  bare = ctx.batch_uncurried(unguarded_extreme, per_member=True)
  with pytest.raises(errors.PrimitiveError, match=r'members \[0, 3\].*empty'):
    bare(v, k)


def _marked(v, lo, hi, n):
  w = np.zeros_like(v)
  w[lo:hi] = 1.0
  u = v.copy()
  u[:n] = v[0]
  return w, u


def test_a_number_written_into_a_window_of_members_own_bounds_runs_everywhere():
  # `w[lo:hi] = 1.0` and `u[:n] = v[0]`: under XLA the window is written
  # where it lies in each member, as `w[lo:hi] += d` is (it was refused
  # as a slice used as an array of its own).
  f = ab.Context().batch(per_member=True)(_marked)
  v = np.arange(18.0).reshape(3, 6)
  lo, hi, n = np.array([0, 2, 5]), np.array([6, 4, 6]), np.array([0, 3, 6])

  def check(alone):
    want = [_marked(*a) for a in zip(v, lo, hi, n)]
    for k, got in enumerate(alone):
      np.testing.assert_array_equal(got, np.stack([w[k] for w in want]))
  run_everywhere(f, [v, lo, hi, n], check=check)
