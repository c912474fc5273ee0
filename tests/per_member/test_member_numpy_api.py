"""NumPy's functions and array methods on one member's TensorFlow values.

A per-member function written with NumPy (`v.sum()`, `np.argmax(v)`,
`np.cumsum(v)`, `v.astype(np.float32).reshape(2, 2).T`) runs on
TensorFlow unchanged: each NumPy function or array method that
TensorFlow's NumPy API (`tf.experimental.numpy`) has by name runs as
that one on a member's tensor, inside TensorFlow's vectorizer.  Compared
with `dry_run=True` and with NumPy's own results, on NumPy (stack VM and
stackless) and TensorFlow (eagerly, `tf.function`, XLA).
"""

import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from tests import python as python_tests

ctx = ab.Context()


@ctx.batch(per_member=True)
def summaries(v, w):
  s = v.sum() + np.sum(w) + v.mean() + np.max(v) - v.min()
  k = int(np.argmax(v)) + v.argmin()
  c = np.cumsum(v)[-1] + np.sqrt(np.abs(w)).sum() + np.dot(v, w)
  q = v.astype(np.float32).copy().reshape(2, 2).T.sum(axis=0)
  z = (np.where(v > 0, v, 0.0).max() + np.clip(w, -0.5, 0.5).sum() +
       np.maximum(v, w).sum())
  m = np.stack([v, w]).mean(axis=0) + np.concatenate([v, w])[:4]
  return s, k, c, q, z, m


def _expected(v, w):
  s = v.sum(1) + w.sum(1) + v.mean(1) + v.max(1) - v.min(1)
  k = np.argmax(v, 1) + np.argmin(v, 1)
  c = (np.cumsum(v, 1)[:, -1] + np.sqrt(np.abs(w)).sum(1) +
       np.sum(v * w, 1))
  q = v.astype(np.float32).reshape(-1, 2, 2).transpose(0, 2, 1).sum(1)
  z = (np.where(v > 0, v, 0.0).max(1) + np.clip(w, -0.5, 0.5).sum(1) +
       np.maximum(v, w).sum(1))
  m = (v + w) / 2 + v
  return s, k, c, q, z, m


def test_numpy_functions_and_methods_run_on_every_backend():
  rng = np.random.default_rng(0)
  v, w = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
  def check(alone):
    for got, want in zip(alone, _expected(v, w)):
      np.testing.assert_allclose(got, want, rtol=1e-5)
    assert alone[3].dtype == np.float32
  python_tests.run_everywhere(summaries, [v, w], check)


@ctx.batch(per_member=True)
def of_integers(n, v):
  return (np.sqrt(n) + np.exp(v).sum(), np.log1p(v).max(),
          np.abs(v - 3).sum(), np.maximum(v, 2).sum())


def test_a_ufunc_of_integers_gives_numpys_float():
  """`np.sqrt` of an int32 is float64, as NumPy's, on TensorFlow too."""
  n = np.array([1, 4, 9], np.int32)
  v = np.arange(12).reshape(3, 4)
  def check(alone):
    assert [a.dtype for a in alone] == [np.float64, np.float64, np.int64,
                                        np.int64]
    np.testing.assert_allclose(alone[0], np.sqrt(n) + np.exp(v).sum(1))
  python_tests.run_everywhere(of_integers, [n, v], check)


_search_ctx = ab.Context()


@_search_ctx.batch(per_member=True)
def _placements(v, t):
  s = np.sort(v)
  return (np.searchsorted(s, 0.0), np.searchsorted(s, t, side='right'),
          np.searchsorted(s, np.array([-0.5, 0.5])),
          np.searchsorted(np.arange(5), 2))


def test_searchsorted_of_a_members_vector():
  # TensorFlow's NumPy API has no searchsorted: tf.searchsorted, int64.
  rng = np.random.default_rng(7)
  python_tests.run_everywhere(_placements, [rng.normal(size=(4, 6)),
                                            rng.normal(size=4)])


_EDGES = np.array([-1.0, -0.25, 0.0, 0.5, 1.5])


@_search_ctx.batch(per_member=True)
def _binned(x, edges):
  fixed = np.linspace(-1.0, 1.0, 5)
  return (np.digitize(x, fixed), np.digitize(x, _EDGES, right=True),
          np.digitize(x[0], _EDGES[::-1]), np.digitize(x, fixed[::-1], True),
          np.digitize(x, [0.0, 0.0, 1.0]), np.digitize(x, edges),
          np.digitize(x, edges[::-1], right=True))


def test_digitize_runs_on_every_backend():
  # TensorFlow has no digitize: tf.searchsorted for bins known when
  # traced, and for a member's own bins a count of the edges below (or
  # above, decreasing) each value.
  rng = np.random.default_rng(8)
  x = rng.normal(size=(4, 7))
  x[:, 0] = 0.0   # on an edge: right= decides
  edges = np.sort(rng.normal(size=(4, 4)), axis=-1)
  x[:, 1] = edges[:, 2]
  python_tests.run_everywhere(_binned, [x, edges])


@_search_ctx.batch(per_member=True)
def _binned_by(x, edges):
  return np.digitize(x, edges)


def test_digitize_of_a_members_unordered_bins_fails_that_member():
  tf = pytest.importorskip('tensorflow')
  x = np.array([[0.5, 1.5], [0.2, 3.0]])
  edges = np.array([[0.0, 1.0, 2.0], [0.0, 2.0, 1.0]])
  with pytest.raises(ValueError, match='monotonically'):
    _binned_by(x, edges, dry_run=True)
  with pytest.raises(ab.errors.PrimitiveError,
                     match=r'(?s)members \[1\].*monotonically'):
    _binned_by(tf.constant(x), tf.constant(edges))


_SHARED = np.arange(12.0).reshape(4, 3) / 5


@ctx.batch(per_member=True)
def products(a, x, y):
  # `@` with vectors, which TensorFlow's `@` (tf.matmul) refuses.
  r = y - a @ x
  return r, x @ a.T @ r, r @ r, a @ a.T, _SHARED @ x, y @ _SHARED


def test_matrix_products_with_vectors_run_on_every_backend():
  rng = np.random.default_rng(3)
  a, x, y = (rng.normal(size=(3, 4, 3)), rng.normal(size=(3, 3)),
             rng.normal(size=(3, 4)))

  def check(alone):
    r = y - np.einsum('bij,bj->bi', a, x)
    np.testing.assert_allclose(alone[0], r)
    np.testing.assert_allclose(alone[2], np.sum(r * r, 1))
    np.testing.assert_allclose(alone[4], x @ _SHARED.T)
  python_tests.run_everywhere(products, [a, x, y], check)


@ctx.batch(per_member=True)
def reordered(keys, vals, m):
  # Indexing by a member's integer array: a gather on TensorFlow.
  order = np.argsort(keys)
  return vals[order], keys[order][::-1], m[:, order[:2]], m[order[-2:]], (
      vals[order - 5])


def test_indexing_by_a_members_integer_array_runs_on_every_backend():
  rng = np.random.default_rng(4)
  keys, vals = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
  m = rng.normal(size=(3, 5, 5))

  def check(alone):
    order = np.argsort(keys, axis=1)
    np.testing.assert_allclose(alone[0], np.take_along_axis(vals, order, 1))
    np.testing.assert_allclose(alone[4], alone[0])
  python_tests.run_everywhere(reordered, [keys, vals, m], check)


_TABLE = np.array([1.0, 0.5, 0.25, 0.125, 0.0625, 0.03])


@ctx.batch(per_member=True)
def rounded(x, i):
  # NumPy's rounding (TensorFlow's NumPy API's round needs NumPy behavior
  # enabled; it has no trunc or rint), and a constant table's window.
  return (np.round(x, 2), np.round(x), np.around(x, -1), np.trunc(x),
          np.fix(x), np.rint(x), _TABLE[i:i + 2].sum(), _TABLE[i:i + 2] * x[0])


def test_rounding_and_a_tables_window_run_on_every_backend():
  rng = np.random.default_rng(6)
  x = np.concatenate([rng.normal(size=(3, 4)) * 30,
                      np.array([[0.5, 1.5, -2.5, 2.675]])])
  i = np.array([0, 2, 4, 1])

  def check(alone):
    np.testing.assert_array_equal(alone[1], np.round(x))
    np.testing.assert_array_equal(alone[3], np.trunc(x))
  python_tests.run_everywhere(rounded, [x, i], check)


_TRANSITIONS = ((1, 0, 2), (1, 2, 0), (2, 2, 2))
_SCALES = (5, 7, 9)
_WEIGHTS = [0.5, 1.5, 2.5]
_FLAGS = (True, False, True)


@ctx.batch(per_member=True)
def table_reads(tokens, k):
  # Python numbers in a tuple or list read at a member's index: NumPy's
  # dtypes (int64, float64), so `* 10**9` does not wrap around in int32.
  state = 0
  for t in tokens:
    state = _TRANSITIONS[state][t]
  return (state, _SCALES[k] * 1000000000, (5, 7, 9)[k] * 1000000000,
          _WEIGHTS[k] + 1, _WEIGHTS[k] * 1e300, _FLAGS[k],
          [1, 2.5, 3][k] * 1e300)


def test_a_tuple_of_python_numbers_read_per_member_has_numpys_dtype():
  tokens = np.array([[0, 1, 2], [2, 2, 2], [1, 1, 0]])
  k = np.array([0, 1, 2])

  def check(alone):
    assert alone[0].dtype == alone[1].dtype == np.int64
    np.testing.assert_array_equal(alone[1], [5e9, 7e9, 9e9])
    assert alone[3].dtype == np.float64 and alone[5].dtype == np.bool_
  python_tests.run_everywhere(table_reads, [tokens, k], check)


@ctx.batch(per_member=True)
def interpolated(x, xp, fp, v):
  # np.interp and np.polyval, which TensorFlow's NumPy API lacks.
  return (np.interp(x, xp, fp), np.interp(v, xp, fp),
          np.interp(x, xp, fp, left=-1.0, right=9.0), np.polyval(fp[:3], x),
          np.polyval(fp, v), np.interp(v, xp[:1], fp[:1]))   # one point


def test_interp_and_polyval_run_on_every_backend():
  rng = np.random.default_rng(7)
  xp = np.sort(rng.uniform(0, 1, (4, 5)), axis=1)
  fp = rng.normal(size=(4, 5))
  x = np.array([-0.5, 0.2, 1.5, xp[3, -1]])
  v = rng.uniform(-0.2, 1.2, (4, 3))

  def check(alone):
    np.testing.assert_allclose(
        alone[0], [np.interp(x[k], xp[k], fp[k]) for k in range(4)])
    np.testing.assert_allclose(alone[5], np.broadcast_to(fp[:, :1], (4, 3)))
  python_tests.run_everywhere(interpolated, [x, xp, fp, v], check)


@ctx.batch(per_member=True)
def matrix_kin(m, v):
  # More of NumPy's array and linear algebra functions on a member's
  # tensors: by TensorFlow's NumPy API (triu, tril, ptp, average)
  # or tf.linalg (svd, matrix_power by squaring).
  return (np.triu(m), np.tril(m, -1), np.ptp(v),
          np.average(v, weights=np.arange(1.0, 4.0)),
          np.linalg.matrix_power(m, 3), np.linalg.matrix_power(m, 0))


@ctx.batch(per_member=True)
def singular_values(m):
  u, s, vh = np.linalg.svd(m)
  return np.linalg.svd(m, compute_uv=False), (u * s) @ vh


def test_matrix_functions_run_on_every_backend():
  rng = np.random.default_rng(8)
  m, v = rng.normal(size=(3, 3, 3)), rng.normal(size=(3, 3))

  def check(alone):
    np.testing.assert_allclose(alone[4], m @ m @ m)
  python_tests.run_everywhere(matrix_kin, [m, v], check)
  # XLA's SVD on CPU (a Jacobi iteration) stops at about 1e-6 where
  # LAPACK's is exact to rounding.
  tf = pytest.importorskip('tensorflow')
  for got, tol in ((singular_values(m), 1e-9),
                   (singular_values(tf.constant(m)), 1e-9),
                   (tf.function(singular_values, jit_compile=True)(
                       tf.constant(m)), 1e-5)):
    np.testing.assert_allclose(got[0], np.linalg.svd(m, compute_uv=False),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1], m, rtol=tol, atol=tol)


@ctx.batch(per_member=True)
def order_statistics(v, m):
  # np.median, np.percentile and np.quantile (linear, NumPy's default) on
  # TensorFlow: sorted values, interpolated.
  return (np.median(v), np.percentile(v, 25), np.percentile(v, [10, 90]),
          np.median(m, axis=0), np.median(m, axis=1), np.quantile(m, 0.3),
          np.median(v[:4]))


def test_order_statistics_run_on_every_backend():
  rng = np.random.default_rng(9)
  v, m = rng.normal(size=(3, 5)), rng.normal(size=(3, 3, 4))

  def check(alone):
    np.testing.assert_allclose(alone[0], np.median(v, axis=1))
    np.testing.assert_allclose(alone[2], np.percentile(v, [10, 90], axis=1).T)
  python_tests.run_everywhere(order_statistics, [v, m], check)


INF = 10 ** 9


def fills_rows_and_sorts(x, r, c):
  m = np.full(4, x)
  best = np.full(3, INF)
  stack = np.zeros((3, 2), dtype=np.int64)
  stack[1] = (r, c)
  stack[2] = [0, c]
  s = sorted(np.array([x, r * 1.0, c * 2.0]))
  down = sorted([r, c], reverse=True)
  return m.sum() + best.min(), stack, s[1], down[0]


def test_fills_rows_of_values_and_sorted_run_everywhere():
  # np.full of a member's value (NumPy's own full ran, as if a helper of
  # the user's, and refused it), a tuple of a member's values assigned
  # to a row, and Python's sorted() of a member's vector or numbers.
  ctx = ab.Context()
  python_tests.run_everywhere(
      ctx.batch_uncurried(fills_rows_and_sorts, per_member=True),
      [np.array([3.0, 5.0, 7.0]), np.array([1, 2, 3]), np.array([4, 5, 6])])


def complex_roots(c):
  z = np.array([1.0 + 0j, 0.4 + 0.9j])
  return z[1] * z[1] + c[0], np.abs(z[0] - c[1])


def test_complex_and_real_values_mix_on_tensorflow():
  # A complex128 plus a float64 was TensorFlow's dtype error.
  ctx = ab.Context()
  python_tests.run_everywhere(
      ctx.batch_uncurried(complex_roots, per_member=True),
      [np.array([[1.0, 2.0], [0.5, -1.0]])])


def spreads_and_products(v, pts, rotation):
  return (np.std(v, ddof=1), v.var(ddof=1), np.var(v),
          (pts @ rotation).sum())


def test_ddof_and_a_product_of_two_float_widths_run_everywhere():
  # TensorFlow's NumPy API takes no ddof, and its product refuses a
  # float32 times a float64, which NumPy promotes.
  ctx = ab.Context()
  rng = np.random.default_rng(0)
  python_tests.run_everywhere(
      ctx.batch_uncurried(spreads_and_products, per_member=True),
      [rng.normal(size=(3, 5)), rng.normal(size=(3, 4, 2)).astype(np.float32),
       rng.normal(size=(3, 2, 2))])


_PICK = np.array([2, 0])


@ctx.batch(per_member=True)
def advanced_indices(a, perm, k, p):
  # NumPy's advanced indexing: a list is an array index (TensorFlow read
  # `a[[k, p]]` as `a[k, p]`, silently), arrays with integers or with
  # each other broadcast (TensorFlow refused them).
  b = a.copy()
  b[[k, p]] = b[[p, k]]
  v = a[0].copy()
  v[[k, p]] = v[[p, k]]
  return (b, v, a[[0, 2]], a[perm, 0], a[perm, perm], a[k, [0, 2]],
          a[[0, 2], 1:], a[_PICK], a[perm[:2], :2])


def test_advanced_indices_and_lists_run_on_every_backend():
  a = np.arange(4 * 9.0).reshape(4, 3, 3)
  perm = np.array([[2, 0, 1], [1, 2, 0], [0, 1, 2], [2, 1, 0]])
  k = np.array([0, 1, 2, 0])
  p = np.array([1, 2, 0, 0])

  def check(alone):
    np.testing.assert_allclose(alone[0][0], a[0][[1, 0, 2]])
    np.testing.assert_allclose(alone[2], a[:, [0, 2]])
    np.testing.assert_allclose(alone[3][1], a[1][perm[1], 0])
  python_tests.run_everywhere(advanced_indices, [a, perm, k, p], check)


_RNG = np.random.default_rng(5)


def test_numpy_random_draws_run_on_numpy_and_are_refused_on_tensorflow():
  # Traced once on TensorFlow, NumPy drew once: every member's walk was
  # the same vector times its steps, silently.
  ctx_random = ab.Context()

  @ctx_random.batch(per_member=True)
  def walk(x, n):
    k = 0
    while k < n:
      x = x + np.random.normal(size=x.shape) + _RNG.uniform()
      k += 1
    return x

  n = np.array([1, 2, 3, 4])
  out = walk(np.zeros((4, 2)), n)
  ratio = out / n[:, None]
  assert not np.allclose(ratio, ratio[0])   # members' own draws
  tf = pytest.importorskip('tensorflow')
  for run in (walk, tf.function(walk)):
    with pytest.raises(ab.errors.PerMemberError, match='random normal') as e:
      run(tf.zeros((4, 2), tf.float64), tf.constant(n))
    assert e.value.loc is not None and e.value.loc.function == 'walk'


_CURVE_TIMES = np.array([0.5, 1.0, 2.0, 3.0, 5.0])


@ctx.batch(per_member=True)
def bootstrapped(par):
  # np.interp over the points so far (`[:i + 1]`, a loop counter's
  # bound): the points' count is known only when run (TensorFlow, outside
  # XLA, runs such a statement per member), where max() took None.
  zs = par.copy()
  for i in range(1, 5):
    zs[i] = np.interp(0.75, _CURVE_TIMES[:i + 1], zs[:i + 1])
  return zs


def test_interp_over_points_of_a_counters_bound():
  par = np.array([[1.0, 2, 3, 4, 5], [2.0, 4, 6, 8, 10], [0.0, 1, 0, 1, 0]])
  want = bootstrapped(par, dry_run=True)
  np.testing.assert_allclose(want[:, 1], [1.5, 3.0, 0.5])
  np.testing.assert_allclose(bootstrapped(par), want)
  tf = pytest.importorskip('tensorflow')
  for run in (bootstrapped, tf.function(bootstrapped)):
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')   # the per-member loop's fallback
      np.testing.assert_allclose(run(tf.constant(par)), want)


# Batch-aware primitives (each statement on the whole batch, axis 0) on
# TensorFlow run NumPy's calls by TensorFlow's NumPy API
# (`per_member.tf_numpy`), whose functions lack arguments NumPy has, or
# give other dtypes.

_aware = ab.Context()


@_aware.batch()
def whole_numbers(n, b, x):
  # NumPy 2 keeps an integer's (and a boolean's) dtype through floor,
  # ceil, trunc and fix; rint and round of a boolean are float16.
  return (np.floor(n), np.ceil(n), np.trunc(n), np.fix(n), np.rint(n),
          np.floor(b), np.trunc(b), np.rint(b), np.round(b),
          np.floor(n.astype(np.int8)), np.rint(n.astype(np.int8)),
          x.round(2), np.round(x, decimals=1), x.round(-1), n.round(-1))


def test_rounding_of_integers_and_decimals_run_on_every_backend():
  rng = np.random.default_rng(10)
  n = rng.integers(-50, 50, size=(4, 3))
  b = rng.random((4, 3)) > 0.5
  x = rng.normal(size=(4, 3)) * 40

  def check(alone):
    # The installed NumPy's dtypes: an integer's own from NumPy 2.1 on.
    whole = np.floor(n).dtype
    assert [a.dtype for a in alone[:5]] == [whole] * 4 + [np.float64]
    assert [a.dtype for a in alone[5:11]] == [
        np.floor(b).dtype, np.floor(b).dtype, np.float16, np.float16,
        np.floor(n.astype(np.int8)).dtype, np.float16]
    np.testing.assert_array_equal(alone[11], np.round(x, 2))
  python_tests.run_everywhere(whole_numbers, [n, b, x], check)


@_aware.batch()
def padded(x, n):
  # NumPy's default mode ('constant'), which TensorFlow's NumPy API's pad
  # takes no default for; a constant per axis and side, one cast to the
  # array's integers.
  return (np.pad(x, ((0, 0), (1, 2))), np.pad(x, [(0, 0), (2, 0)],
                                               constant_values=-1.5),
          np.pad(x, ((0, 0), (2, 1)), constant_values=((0, 0), (7, 9))),
          np.pad(n, ((0, 0), (1, 1)), constant_values=7.5),
          np.pad(x[:, None], ((0, 0), (1, 0), (0, 2)),
                 constant_values=((0, 0), (5, 6), (3, 4))),
          np.pad(x, ((0, 0), (1, 1)), 'reflect'))


def test_pad_of_numpys_default_mode_runs_on_every_backend():
  rng = np.random.default_rng(11)
  x, n = rng.normal(size=(4, 3)), rng.integers(-9, 9, size=(4, 3))

  def check(alone):
    assert alone[3].dtype == np.int64
    np.testing.assert_array_equal(alone[3][:, 0], 7)
    np.testing.assert_array_equal(alone[4][:, 0, -1], 4)   # a corner
  python_tests.run_everywhere(padded, [x, n], check)


@_aware.batch()
def of_booleans(b, n):
  # TensorFlow refuses booleans where NumPy sums them as its integers,
  # or gives them back.
  return (np.cumsum(b, axis=-1), np.cumprod(b, axis=-1), b.cumsum(axis=-1),
          np.abs(b), np.square(b), np.sort(b, axis=-1), np.conj(b),
          np.sum(n.astype(np.int8), axis=-1),
          np.cumsum(n.astype(np.int16), axis=-1))


def test_sums_of_booleans_and_narrow_integers_run_on_every_backend():
  rng = np.random.default_rng(12)
  b, n = rng.random((4, 5)) > 0.5, rng.integers(0, 100, size=(4, 5))

  def check(alone):
    assert [a.dtype for a in alone] == [
        np.int64, np.int64, np.int64, np.bool_, np.int8, np.bool_, np.int8,
        np.int64, np.int64]
  python_tests.run_everywhere(of_booleans, [b, n], check)


@_aware.batch()
def masked_reductions(x, m, n):
  # where=, initial= and keepdims=, which TensorFlow's NumPy API's
  # reductions lack (or read otherwise), as functions and as methods.
  y = np.where(x > 1.5, np.nan, x)
  return (np.sum(x, axis=-1, where=m), x.sum(axis=(1,), where=m,
                                             initial=2.0, keepdims=True),
          np.prod(x, axis=-1, where=m), x.max(axis=-1, initial=0.0),
          x.min(axis=-1, where=m, initial=100.0),
          np.mean(x, axis=-1, where=m), np.var(x, axis=-1, where=m),
          np.std(x, axis=-1, where=m, ddof=1, keepdims=True),
          np.all(x > 0, axis=-1, where=m), np.any(x > 0, axis=-1, where=m),
          np.max(y, axis=-1, initial=0.0), np.amin(y, axis=-1, initial=-9.0),
          np.sum(n, axis=-1, initial=1.5), n.max(axis=-1, where=m, initial=3),
          np.mean(n, axis=-1, where=m),
          np.sum(x, axis=-1, where=np.array([True, False, True, True])))


def test_reductions_with_where_and_initial_run_on_every_backend():
  rng = np.random.default_rng(13)
  x = rng.normal(size=(4, 4))
  m = rng.random((4, 4)) > 0.3
  m[:, :2] = True
  n = rng.integers(-9, 9, size=(4, 4))

  def check(alone):
    np.testing.assert_allclose(alone[0], np.where(m, x, 0).sum(1))
    np.testing.assert_allclose(alone[3], np.maximum(x.max(1), 0))
    assert alone[12].dtype == np.int64 and alone[14].dtype == np.float64
  python_tests.run_everywhere(masked_reductions, [x, m, n], check)


@_aware.batch()
def differences(n, x):
  # np.diff's prepend= and append=, which TensorFlow's NumPy API lacks: a
  # number across the other axes, in the dtype NumPy joins them in.
  return (np.diff(n, prepend=0), np.diff(n, prepend=0.5),
          np.diff(n, append=n[:, :1]), np.diff(x, n=2, prepend=1, append=2),
          np.diff(x, axis=1, prepend=x[:, -1:]))


def test_diff_with_prepend_and_append_runs_on_every_backend():
  rng = np.random.default_rng(14)

  def check(alone):
    assert alone[0].dtype == np.int64 and alone[1].dtype == np.float64
  python_tests.run_everywhere(differences, [
      rng.integers(-9, 9, size=(4, 5)), rng.normal(size=(4, 5))], check)


@_aware.batch()
def rearranged(x):
  # Array methods a tensor lacks.
  return x.swapaxes(1, 2), x.repeat(2, axis=-1), x.conj()


def test_array_methods_a_tensor_lacks_run_on_every_backend():
  rng = np.random.default_rng(15)
  python_tests.run_everywhere(rearranged, [rng.normal(size=(4, 3, 2))])


@ctx.batch(per_member=True)
def masked_member_reductions(x, m, n):
  # The same on one member's values (a per-member primitive).
  return (np.sum(x, where=m), x.max(initial=0.5), x.min(where=m, initial=9.0),
          np.mean(x, where=m), np.std(x, where=m, ddof=1),
          np.any(x > 0, where=m), np.diff(n, prepend=0.5),
          np.diff(x, append=x[:1]), np.floor(n), x.round(1),
          np.cumsum(m), x.repeat(2))


def test_member_reductions_with_where_and_diff_run_on_every_backend():
  rng = np.random.default_rng(16)
  x = rng.normal(size=(4, 5))
  m = rng.random((4, 5)) > 0.3
  m[:, 0] = True
  python_tests.run_everywhere(masked_member_reductions, [
      x, m, rng.integers(-9, 9, size=(4, 5))])


_ORDER = np.array([2, 0])
_KEEP = np.array([True, False, True])


def _picked(x, z):
  # A helper's items at the user's constant arrays and lists (TensorFlow's
  # indexing refuses an array and reads a list as a tuple), and array
  # attributes a tensor lacks.
  return (x[:, _ORDER], x[..., [1, 1]], x[:, _KEEP], x[:, [[1, 0], [2, 2]]],
          x[:, 1, _ORDER], z.real, z.imag, z.mT, x.real, x.imag)


@_aware.batch()
def picked_in_a_helper(x, z):
  return _picked(x, z)


def test_a_helpers_constant_array_index_and_attributes_run_everywhere():
  if not hasattr(np.ndarray, 'mT'):
    pytest.skip('NumPy before 2.0 has no .mT')
  rng = np.random.default_rng(17)
  x = rng.normal(size=(4, 3, 3))
  z = rng.normal(size=(4, 3, 2)) + 1j * rng.normal(size=(4, 3, 2))

  def check(alone):
    np.testing.assert_array_equal(alone[0], x[:, [2, 0]])
    np.testing.assert_array_equal(alone[7], np.swapaxes(z, 1, 2))
  python_tests.run_everywhere(picked_in_a_helper, [x, z], check)


@_aware.batch()
def picked(x, z):
  # The same in the primitive's own statements.
  return (x[:, _ORDER], x[..., [1, 1]], x[:, _KEEP], x[:, 1, _ORDER],
          z.real, z.imag, z.mT, x.mT.sum(axis=-1), np.conj(z).imag)


def test_a_constant_array_index_and_attributes_run_everywhere():
  if not hasattr(np.ndarray, 'mT'):
    pytest.skip('NumPy before 2.0 has no .mT')
  rng = np.random.default_rng(18)
  x = rng.normal(size=(4, 3, 3))
  z = rng.normal(size=(4, 3, 2)) + 1j * rng.normal(size=(4, 3, 2))
  python_tests.run_everywhere(picked, [x, z])


@_aware.batch()
def taken(x):
  return (np.take(x, [0, -1], axis=-1), np.take(x, [[2, -3], [1, 0]], axis=1),
          np.take(x, [0, 4], axis=-1, mode='wrap'),
          np.take(x, [-1, 7], axis=-1, mode='clip'))


@ctx.batch(per_member=True)
def member_taken(x, i):
  return np.take(x, i - 2) + np.take(x, -1), np.take(x, [0, -1])


def test_take_counts_negative_indices_from_the_end_on_every_backend():
  # TensorFlow's NumPy API clips every index of `take`: `[0, -1]` took the
  # first item twice, silently.
  x = np.arange(12.0).reshape(4, 3)

  def check(alone):
    np.testing.assert_array_equal(alone[0], x[:, [0, 2]])
    np.testing.assert_array_equal(alone[1], x[:, [[2, 0], [1, 0]]])
    np.testing.assert_array_equal(alone[2], x[:, [0, 1]])
    np.testing.assert_array_equal(alone[3], x[:, [0, 2]])
  python_tests.run_everywhere(taken, [x], check)
  i = np.array([1, 2, 4, 0])

  def member_check(alone):
    np.testing.assert_array_equal(
        alone[0], x[np.arange(4), (i - 2) % 3] + x[:, -1])
  python_tests.run_everywhere(member_taken, [x, i], member_check)


def test_take_of_an_index_out_of_range_fails_on_tensorflow():
  tf = pytest.importorskip('tensorflow')
  x = np.arange(12.0).reshape(4, 3)
  with pytest.raises(ab.errors.PrimitiveError, match="out of"):
    member_taken(tf.constant(x), tf.constant([1, 2, 5, 0]))


@_aware.batch()
def made_in_their_dtype(v):
  return (np.sum(v * np.ones(3, dtype=v.dtype), axis=-1),
          np.full(3, 2, v.dtype) * v, np.eye(3, dtype=v.dtype) @ v[..., None])


def test_numpys_constructors_take_a_tensors_dtype():
  # `np.ones(3, dtype=v.dtype)` on TensorFlow: NumPy cannot interpret a
  # tensor's dtype, so the constructor failed at type inference.
  v = np.arange(6, dtype=np.float32).reshape(2, 3)

  def check(alone):
    assert all(a.dtype == np.float32 for a in alone)
    np.testing.assert_allclose(alone[1], 2 * v)
  python_tests.run_everywhere(made_in_their_dtype, [v], check)


@ctx.batch(per_member=True)
def ufunc_forms(x, mu, v, n):
  logp = np.logaddexp(-0.5 * (x - mu) ** 2, -0.5 * (x + mu) ** 2)
  arith = (np.add(x, mu) * np.multiply(x, 2.0) - np.negative(mu) +
           np.reciprocal(2.0 + x * x) + np.cbrt(x) + np.sinc(x) +
           np.heaviside(x, 0.5) + np.greater(x, mu))
  ints = (np.mod(n, 3) + np.remainder(n - 7, 4) + np.floor_divide(n, 2) +
          np.squeeze(np.expand_dims(n, 0)))
  shaped = (np.append(v, x).sum() + np.pad(v, 1).sum() +
            np.full_like(v, 1.5).sum() + np.ones_like(v).sum())
  return logp, arith, ints, shaped


def test_numpys_ufuncs_and_shaping_functions_run_per_member_everywhere():
  # The NumPy functions that TensorFlow's NumPy API has by name run on
  # one member's tensors as a batch-aware primitive's (they were refused
  # per member as a TensorFlow value passed to NumPy).
  x = np.array([0.0, 1.0, -3.0])
  mu = np.array([0.5, 2.0, 3.0])
  v = np.arange(9.0).reshape(3, 3)
  n = np.array([5, 8, -4])

  def check(alone):
    want = [ufunc_forms.python_function(*a) for a in zip(x, mu, v, n)]
    for k, got in enumerate(alone):
      w = np.stack([np.asarray(row[k]) for row in want])
      assert np.asarray(got).dtype == w.dtype, (k, got.dtype, w.dtype)
      np.testing.assert_allclose(got, w, rtol=1e-12)
  python_tests.run_everywhere(ufunc_forms, [x, mu, v, n], check)


@ctx.batch(per_member=True)
def counts_and_row_peaks(x, y, v):
  count = sum([x > 0, y > 0, x + y > 1])
  rows = v.reshape(2, 3)
  peaks = sum(r.max() for r in rows) + max([r.sum() for r in rows])
  return count, peaks


def test_a_sum_of_conditions_and_methods_of_a_comprehensions_items():
  # `sum([x > 0, ...])` counts as Python's int64 on TensorFlow (which adds
  # no booleans), and `r.max()` of a comprehension's item is an array
  # method on a member's tensor too (it was an AttributeError there).
  x = np.array([1.0, -1.0, 2.0])
  y = np.array([1.0, 3.0, -2.0])
  v = np.array([[1., -2, 3, 4, -5, 6], [0, 5, 0, 5, 0, 7],
                [-1, -1, -1, -2, -2, -2]])

  def check(alone):
    want = [counts_and_row_peaks.python_function(*a) for a in zip(x, y, v)]
    for k, got in enumerate(alone):
      w = np.stack([np.asarray(row[k]) for row in want])
      assert np.asarray(got).dtype == w.dtype, (k, got.dtype, w.dtype)
      np.testing.assert_array_equal(got, w)
  python_tests.run_everywhere(counts_and_row_peaks, [x, y, v], check)


@ctx.batch(per_member=True)
def zipped_comprehensions(x, w):
  dot = sum(a * b for a, b in zip(x, w))
  weighted = [k * a for k, a in enumerate(x, 1)]
  pairs = sum(a - b + c for a in x[:2] for b, c in zip(w, x))
  return dot, max(weighted), pairs


def test_comprehensions_over_zip_and_enumerate_of_a_members_vectors():
  # `zip(x, w)` of a member's tensors iterated each tensor itself, which
  # Python cannot inside a TensorFlow graph (refused as needing a bool).
  rng = np.random.default_rng(3)
  x = rng.uniform(size=(3, 4))
  w = x + 1.0

  def check(alone):
    want = [zipped_comprehensions.python_function(*a) for a in zip(x, w)]
    for k, got in enumerate(alone):
      np.testing.assert_allclose(
          got, np.stack([np.asarray(row[k]) for row in want]), rtol=1e-12)
  python_tests.run_everywhere(zipped_comprehensions, [x, w], check)


def _float_item(v, n):
  return v[n / 2]           # n // 2 meant


def _float_bound(v, n):
  return np.sum(v[:n / 2])


def _float_write(v, n):
  w = v.copy()
  w[n / 2] = 1.0
  return w


def _float_number(v, n):
  return v[1.0] + n


TABLE = np.arange(10.0) * 3


def _float_table_item(v, n):
  return TABLE[n * 0.5] + v[0]     # n // 2 meant


def _integer_items(v, n):
  return v[n // 2] + v[np.int32(n) - 1] + np.sum(v[:n // 2]) + v[int(n / 2)]


@pytest.mark.parametrize('fn,error', [
    (_float_item, IndexError), (_float_bound, TypeError),
    (_float_write, IndexError), (_float_number, IndexError),
    (_float_table_item, IndexError)])
def test_a_float_index_fails_as_numpys_on_every_backend(fn, error):
  # A member's float index (`v[n / 2]`) silently truncated on TensorFlow
  # eagerly, under tf.function and XLA; NumPy and the dry run refuse it.
  tf = pytest.importorskip('tensorflow')
  f = ab.Context().batch(per_member=True)(fn)
  v = np.arange(10.0).reshape(2, 5)
  n = np.array([3, 5])
  with pytest.raises(error, match='indices'):
    fn(v[0], n[0])
  with pytest.raises(error, match='indices'):
    f(v, n, dry_run=True)
  runs = [lambda: f(v, n), lambda: f(v, n, stackless=True),
          lambda: f(tf.constant(v), tf.constant(n))] + [
              lambda jit=jit: tf.function(lambda a, b: f(a, b),
                                          jit_compile=jit)(
                                              tf.constant(v), tf.constant(n))
              for jit in (False, True)]
  for run in runs:
    with pytest.raises(ab.errors.PrimitiveError,
                       match=f'^{error.__name__} while inferring the type'
                       ) as info:
      run()
    assert f"in function '{fn.__name__}'" in str(info.value)


def test_integer_indices_beside_float_ones_still_run():
  v = np.arange(10.0).reshape(2, 5)
  python_tests.run_everywhere(
      ab.Context().batch(per_member=True)(_integer_items),
      [v, np.array([4, 5])])


def _outer_of_booleans(a, b):
  return np.outer(a, b), np.dot(a, b), np.einsum('i,j->ij', a, b)


def test_products_of_booleans_are_numpys():
  # TensorFlow 2.16's np.outer of booleans multiplied them (no kernel);
  # NumPy's products of booleans are booleans (a logical or of ands).
  a = np.array([[True, False, True], [False, False, True]])
  b = a[::-1].copy()
  python_tests.run_everywhere(
      ab.Context().batch(per_member=True)(_outer_of_booleans), [a, b])


def _modular_power(a, e, m):
  return pow(int(a), int(e), int(m)), pow(int(a), 2, mod=int(m))


def test_pow_with_a_modulus_of_a_members_integers():
  # pow(a, e, m) was refused; Python computes it for ints (a negative
  # exponent by the inverse of the base), with the sign of the modulus.
  a = np.array([3, 7, 123456, -5, 10, 2**40 + 3, 0])
  e = np.array([5, 0, 65537, 3, -1, 2**50 + 7, 0])
  m = np.array([7, 13, 2**31 - 1, 11, -17, 2**52 - 1, 1])
  f = ab.Context().batch(per_member=True)(_modular_power)
  want = [np.array(w) for w in zip(*[
      _modular_power(*x) for x in zip(a.tolist(), e.tolist(), m.tolist())])]
  for got, w in zip(f(a, e, m, dry_run=True), want):
    np.testing.assert_array_equal(got, w)
  python_tests.run_everywhere(f, [a, e, m], check=None)


@pytest.mark.parametrize('a,e,m,error,match', [
    (2, 3, 0, ValueError, 'cannot be 0'),
    (2, -1, 4, ValueError, 'not invertible'),
    (2, 3, 2**53, OverflowError, r'beyond 2\*\*52')])
def test_pow_with_a_modulus_fails_the_members_python_fails(a, e, m, error,
                                                          match):
  f = ab.Context().batch(per_member=True)(_modular_power)
  args = [np.array([3, a]), np.array([4, e]), np.array([5, m])]
  if error is ValueError:   # Python's own error
    with pytest.raises(error, match=match):
      f(*args, dry_run=True)
  tf = pytest.importorskip('tensorflow')
  for run in (lambda: f(*args), lambda: f(*args, stackless=True),
              lambda: f(*[tf.constant(x) for x in args])):
    with pytest.raises(ab.errors.PrimitiveError,
                       match=f'{error.__name__}.*members \\[1\\]') as info:
      run()
    assert match.replace('\\', '') in str(info.value) or (
        error is OverflowError)


def _nan_skipping(v):
  return (np.nanmax(v), np.nanmin(v), np.nanargmax(v), np.nanargmin(v),
          np.nancumsum(v), np.nancumprod(v), np.nanvar(v),
          np.nanstd(v, ddof=1), np.nanmax(v[None, :], axis=1))


@pytest.mark.parametrize('dtype', [np.float64, np.float32, np.int32])
def test_numpys_nan_skipping_functions_on_every_backend(dtype):
  # TensorFlow's NumPy API has no nanmax, nanmin, nanarg*, nancum*,
  # nanvar or nanstd: they were refused per member on TensorFlow, and
  # failed in a batch-aware primitive under tf.function and XLA.
  v = np.array([[1, np.nan, 3, 2.5], [np.nan, 2, -1, 7], [4, 4, 0.5, 1]])
  if np.dtype(dtype).kind == 'i':
    v = np.nan_to_num(v, nan=6).astype(dtype)
  v = v.astype(dtype)
  f = ab.Context().batch(per_member=True)(_nan_skipping)
  want = [np.stack(w) for w in zip(*[_nan_skipping(m) for m in v])]
  def check(alone):
    for got, w in zip(alone, want):
      assert got.dtype == w.dtype
      np.testing.assert_allclose(got, w, rtol=1e-6)
  python_tests.run_everywhere(f, [v], check)


def _batch_nan_skipping(v):
  return np.nanmax(v, axis=1), np.nanargmin(v, axis=1), np.nanvar(v, axis=1)


def test_numpys_nan_skipping_functions_in_batch_aware_code():
  v = np.array([[1, np.nan, 3, 2.5], [np.nan, 2, -1, 7]])
  f = ab.Context().batch()(_batch_nan_skipping)
  def check(alone):
    for got, w in zip(alone, _batch_nan_skipping(v)):
      np.testing.assert_allclose(got, w)
  python_tests.run_everywhere(f, [v], check)


def _in_stepped_range(x, lo, hi, step):
  return x in range(lo, hi, step)


def test_a_members_zero_step_of_range_fails_as_pythons():
  # It found nothing, silently, where Python raises.
  f = ab.Context().batch(per_member=True)(_in_stepped_range)
  args = [np.array([3, 4, 5]), np.zeros(3, np.int64), np.full(3, 10),
          np.array([1, 0, 2])]
  with pytest.raises(ValueError, match='must not be zero'):
    f(*args, dry_run=True)
  tf = pytest.importorskip('tensorflow')
  for run in (lambda: f(*args), lambda: f(*args, stackless=True),
              lambda: f(*[tf.constant(x) for x in args])):
    with pytest.raises(ab.errors.PrimitiveError,
                       match=r'ValueError.*members \[1\]'):
      run()
  args[3] = np.array([1, 3, 2])
  np.testing.assert_array_equal(f(*args), [True, False, False])
