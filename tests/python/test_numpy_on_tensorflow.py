"""NumPy's functions in batch-aware primitives on TensorFlow.

A batch-aware function written with NumPy (`np.sqrt(x)`, `x.sum(axis=-1)`,
`np.linalg.solve(a, b)`, a helper of the user's that calls NumPy) runs on
TensorFlow in a form that calls TensorFlow's NumPy API (and `tf.linalg`)
where given tensors, which NumPy's functions cannot take inside a graph:
eagerly, under `tf.function` and under XLA, with the values and dtypes of
the NumPy backend and of the dry run.  A NumPy function TensorFlow lacks
still says to write TensorFlow ops.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

ctx = ab.Context()


def _integrand(x):
  return np.sin(x) * np.exp(-x / 5)


@ctx.batch
def simpson(a, b, eps, depth):
  m = (a + b) / 2
  whole = (b - a) / 6 * (_integrand(a) + 4 * _integrand(m) + _integrand(b))
  lm = (a + m) / 2
  rm = (m + b) / 2
  left = (m - a) / 6 * (_integrand(a) + 4 * _integrand(lm) + _integrand(m))
  right = (b - m) / 6 * (_integrand(m) + 4 * _integrand(rm) + _integrand(b))
  if depth <= 0 or abs(left + right - whole) <= 15 * eps:
    return left + right + (left + right - whole) / 15
  return (simpson(a, m, eps / 2, depth - 1) +
          simpson(m, b, eps / 2, depth - 1))


@ctx.batch
def reductions(x, n):
  s = np.sum(x, axis=-1)
  while n > 0:
    s = s + np.prod(x[:, :2], axis=-1) + np.abs(x).max(axis=-1)
    n -= 1
  return (s, np.mean(x, axis=-1), np.sqrt(np.abs(s)), np.argmax(x, axis=-1),
          np.cumsum(x, axis=-1), x.astype(np.float32).mean(axis=-1))


@ctx.batch
def newton_logistic(xs, y, iters):
  w = np.zeros_like(xs[:, 0, :])
  for _ in range(iters):
    p = 1.0 / (1.0 + np.exp(-np.einsum('bnd,bd->bn', xs, w)))
    g = np.einsum('bnd,bn->bd', xs, y - p)
    h = (np.einsum('bnd,bn,bne->bde', xs, p * (1 - p), xs) +
         1e-3 * np.eye(xs.shape[-1]))
    w = w + np.linalg.solve(h, g[..., None])[..., 0]
    if np.max(np.abs(g), axis=-1) < 1e-8:
      break
  return w, np.linalg.norm(w, axis=-1)


@ctx.batch
def lookup(arr, target):
  lo = 0 * target
  hi = lo + arr.shape[-1] - 1
  while lo <= hi:
    mid = (lo + hi) // 2
    val = np.take_along_axis(arr, mid[:, None], axis=-1)[:, 0]
    if val == target:
      return mid
    elif val < target:
      lo = mid + 1
    else:
      hi = mid - 1
  return -1 + 0 * target


def test_a_helper_calling_numpy_in_a_recursion():
  rng = np.random.default_rng(0)
  run_everywhere(simpson, [np.zeros(4), rng.uniform(1, 10, 4),
                           np.full(4, 1e-6), np.full(4, 8)],
                 max_stack_depth=12)


@pytest.mark.parametrize('dtypes', [(np.float64, np.int64),
                                    (np.float32, np.int32),
                                    (np.int32, np.int32)],
                         ids=['float64', 'float32', 'int32'])
def test_reductions_and_array_methods(dtypes):
  rng = np.random.default_rng(1)
  x = (rng.normal(size=(4, 3)) * 4).astype(dtypes[0])
  n = rng.integers(0, 3, 4).astype(dtypes[1])
  tf = pytest.importorskip('tensorflow')
  alone = reductions(x, n, dry_run=True)
  for out in (reductions(x, n), reductions(tf.constant(x), tf.constant(n)),
              tf.function(reductions)(tf.constant(x), tf.constant(n)),
              tf.function(reductions, jit_compile=True)(tf.constant(x),
                                                        tf.constant(n))):
    for got, want in zip(out, alone):
      got = np.asarray(got)
      assert got.dtype == np.asarray(want).dtype
      np.testing.assert_allclose(got, want, rtol=1e-5)


def test_linear_algebra_by_tf_linalg():
  rng = np.random.default_rng(2)
  xs = rng.normal(size=(4, 12, 3))
  y = (rng.random((4, 12)) < 0.5).astype(np.float64)
  run_everywhere(newton_logistic, [xs, y, rng.integers(1, 5, 4)])


def test_take_along_axis_in_a_search():
  rng = np.random.default_rng(3)
  arr = np.sort(rng.integers(0, 30, (5, 8)), axis=-1)
  run_everywhere(lookup, [arr, arr[:, 3].copy()])


_BIN_EDGES = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])


@ctx.batch
def histogram(x):
  d = np.digitize(x, _BIN_EDGES)
  onehot = (d[..., None] == np.arange(len(_BIN_EDGES) + 1)).astype(np.int64)
  return np.sum(onehot, axis=1), np.digitize(x, _BIN_EDGES[::-1], right=True)


def test_digitize_by_tf_searchsorted():
  # Under tf.function it was NumPy's own, which cannot take the tensor.
  x = np.random.default_rng(4).normal(size=(4, 9))
  x[:, 0] = 0.5
  run_everywhere(histogram, [x])


def test_a_numpy_function_tensorflow_lacks_asks_for_tensorflow_ops():
  tf = pytest.importorskip('tensorflow')
  c = ab.Context()

  @c.batch
  def middle(v):
    return np.median(v, axis=-1)
  with pytest.raises(errors.PrimitiveError, match='TensorFlow ops'):
    tf.function(middle)(tf.constant(np.ones((3, 4))))


@ctx.batch(per_member=True)
def member_newton(x0, tol):
  x = x0.copy()
  steps = 0
  while steps < 50:
    f = np.array([x[0] ** 2 + x[1] ** 2 - 4.0, x[0] - x[1]])
    jacobian = np.array([[2 * x[0], 2 * x[1]], [1.0, -1.0]])
    dx = np.linalg.solve(jacobian, f)
    x = x - dx
    steps += 1
    if np.linalg.norm(dx) < tol:
      break
  return x, steps, np.linalg.det(jacobian)


def test_per_member_linear_algebra_by_tf_linalg():
  rng = np.random.default_rng(4)
  run_everywhere(member_newton, [rng.uniform(0.5, 3, (4, 2)),
                                 np.full(4, 1e-10)])


@ctx.batch
def gaussian_log_density(cov, x, shrink):
  while np.min(np.linalg.eigvalsh(cov), axis=-1) > 1.0:
    cov = cov * shrink[:, None, None]
  sign, logdet = np.linalg.slogdet(cov)
  quad = np.einsum('bi,bi->b', x, np.linalg.solve(cov, x[..., None])[..., 0])
  return sign, -0.5 * (logdet + quad), np.linalg.det(cov)


def test_determinants_under_xla_too():
  # TensorFlow's determinant kernels have no XLA form: there an
  # elimination computes them.
  rng = np.random.default_rng(5)
  m = rng.normal(size=(4, 3, 3))
  cov = m @ np.swapaxes(m, -1, -2) + 3 * np.eye(3)
  run_everywhere(gaussian_log_density, [cov, rng.normal(size=(4, 3)),
                                        np.full(4, 0.7)])


@ctx.batch
def normalized_power_iteration(a, n):
  eps = 1e-12
  v = np.ones_like(a[:, 0, :])
  k = 0
  while k < n:
    w = np.einsum('bij,bj->bi', a, v)
    v = w / (np.linalg.norm(w, axis=-1, keepdims=True) + eps)
    k += 1
  return (v, np.linalg.norm(v, 1, -1), np.linalg.norm(w, ord=np.inf, axis=-1),
          np.linalg.norm(w, ord=0, axis=1), np.linalg.norm(w, 3, -1, True),
          np.linalg.norm(a, axis=(1, 2)), np.linalg.norm(a, 1, (1, 2)),
          np.linalg.norm(a, -np.inf, (-2, -1), keepdims=True))


@ctx.batch(per_member=True)
def member_norms(v, a):
  return (np.linalg.norm(v), np.linalg.norm(v, 1), np.linalg.norm(a),
          np.linalg.norm(a, np.inf), np.linalg.norm(a, axis=0, keepdims=True))


def test_norms_with_ord_axis_and_keepdims():
  # np.linalg.norm's vector norms (2, 1, inf, 0, p) along one axis and
  # matrix norms (Frobenius, 1, inf) over two, keepdims too, by
  # TensorFlow's reductions in a graph.
  rng = np.random.default_rng(6)
  m = rng.normal(size=(3, 4, 4))
  run_everywhere(normalized_power_iteration, [m + np.swapaxes(m, 1, 2),
                                              np.array([1, 4, 9])])
  run_everywhere(member_norms, [rng.normal(size=(3, 4)),
                                rng.normal(size=(3, 2, 3))])


class _Linear:
  """A user's model object whose method a primitive calls."""

  def __init__(self):
    self.w = np.array([1.0, -1.0, 0.5])
    self.proj = np.array([[1.0, 0.5], [0.0, 1.0], [2.0, -1.0]])
    self.bias = 0.1

  def predict(self, x):
    return x @ self.w + self.bias

  def features(self, x):
    return np.tanh(x @ self.proj)


_MODEL = _Linear()


@ctx.batch
def model_steps(x, n):
  k = 0
  y = _MODEL.predict(x)
  while k < n:
    y = y + _MODEL.predict(x) * np.sum(_MODEL.features(x), axis=-1)
    k += 1
  return y, x @ _MODEL.proj @ np.ones(2)


def test_matmul_with_vectors_and_methods_of_a_users_object():
  # `x @ w` with a NumPy vector `w` is NumPy's product (tf.matmul
  # refuses a vector), in the primitive and in a method of the user's
  # object, whose NumPy calls run by TensorFlow's NumPy API.
  rng = np.random.default_rng(8)
  run_everywhere(model_steps, [rng.normal(size=(4, 3)), np.array([0, 1, 2, 3])])
  # float32 data: on TensorFlow a NumPy operand of `@` takes the tensor's
  # dtype, as TensorFlow's operator gives it (NumPy would widen to
  # float64).
  tf = pytest.importorskip('tensorflow')
  x = rng.normal(size=(3, 3)).astype(np.float32)
  n = np.array([2, 0, 1])
  alone = model_steps(x, n, dry_run=True)
  for jit in (False, True):
    out = tf.function(model_steps, jit_compile=jit)(tf.constant(x),
                                                    tf.constant(n))
    for got, want in zip(out, alone):
      assert got.dtype == tf.float32
      np.testing.assert_allclose(got, want, rtol=1e-5)


def _tolerance(x):
  # `eps * x`, not `4 * eps`: NumPy 1 makes `4 * eps` a float64.
  return x + np.finfo(x.dtype).eps * x, x - np.finfo(dtype=x.dtype).eps


def _half(x):
  return (np.array(0.5, dtype=x.dtype) * x,
          np.asarray([1, 2], dtype=x.dtype).sum() * x)


def _clamped(v):
  return min(v.astype(np.int64) * 3, np.iinfo(v.dtype).max)


def _clamped_batch(v):
  return np.minimum(v.astype(np.int64) * 3, np.iinfo(v.dtype).max)


@pytest.mark.parametrize('fn,per_member,arg', [
    (_tolerance, True, np.array([1.0, 2.0], np.float32)),
    (_tolerance, False, np.array([1.0, 2.0], np.float32)),
    (_half, True, np.array([1.0, 2.0], np.float32)),
    (_half, False, np.array([1.0, 2.0], np.float32)),
    (_clamped, True, np.array([100, 20000], np.int16)),
    (_clamped_batch, False, np.array([100, 20000], np.int16)),
])
def test_a_tensors_dtype_is_numpys_in_finfo_iinfo_and_array(fn, per_member,
                                                           arg):
  # On TensorFlow `x.dtype` is a tf.DType, which np.finfo, np.iinfo and
  # np.array(..., dtype=) could not interpret: type inference failed.
  f = ab.Context().batch(per_member=per_member)(fn)
  want = [fn(a) for a in arg]
  got = f(arg)
  for k, w in enumerate(want):
    for g, x in zip(ab.instructions.pattern_flatten(got),
                    ab.instructions.pattern_flatten(w)):
      np.testing.assert_allclose(np.asarray(g)[k], x, rtol=1e-6)
  run_everywhere(f, [arg])


def _prefix_batch(v):
  return (np.cumsum(v, axis=-1), np.cumprod(v, axis=-1), v.cumsum(axis=-1),
          np.cumsum(v, axis=-1, dtype=np.uint32))


def _prefix_member(v):
  return np.cumsum(v), np.cumprod(v), v.cumprod(), np.cumsum(v[::-1])


def _exactly_everywhere(f, arg, want):
  # run_everywhere's allclose reads uint64 as float64: compare bits too.
  tf = pytest.importorskip('tensorflow')
  outs = [f(arg), f(arg, stackless=True), f(tf.constant(arg))] + [
      tf.function(lambda a: f(a), jit_compile=jit)(tf.constant(arg))
      for jit in (False, True)]
  for out in outs:
    for g, w in zip(ab.instructions.pattern_flatten(out), want):
      g = np.asarray(g)
      assert g.dtype == w.dtype
      np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize('dtype', [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize('per_member', [False, True])
def test_running_sums_and_products_of_unsigned_ints_are_numpys(dtype,
                                                               per_member):
  # On TensorFlow np.cumsum / np.cumprod / .cumsum() of unsigned integers
  # gave float64 (NumPy: uint64), rounding uint64 values and not wrapping
  # a product as NumPy does.
  top = np.iinfo(dtype).max
  v = np.array([[top - 3, top - 1, 5, 7], [1, 2, 3, 4]], dtype)
  if dtype == np.uint64:
    v[0, :2] = [2**60 + 1, 2**60 + 3]
  fn = _prefix_member if per_member else _prefix_batch
  f = ab.Context().batch(per_member=per_member)(fn)
  with np.errstate(over='ignore'):
    want = (fn(v) if not per_member else
            [np.stack(w) for w in zip(*[fn(r) for r in v])])
  assert want[0].dtype == np.uint64
  _exactly_everywhere(f, v, want)
  run_everywhere(f, [v])


def _traces_member(v):
  m = np.stack([v, v[::-1], v, v])
  return np.trace(m), m.trace(), np.trace(m, offset=1)


def _traces_batch(m):
  return np.trace(m, axis1=-2, axis2=-1), np.trace(m, offset=1, axis1=1,
                                                   axis2=2)


@pytest.mark.parametrize('dtype', [np.int8, np.int16, np.uint8, np.uint32,
                                   np.bool_])
def test_a_trace_of_narrow_integers_accumulates_as_numpys_sum(dtype):
  # On TensorFlow np.trace of int8 / int16 / uint8 / uint32 kept the
  # input's dtype and overflowed: NumPy sums a trace in int64 / uint64.
  top = 1 if dtype == np.bool_ else np.iinfo(dtype).max
  v = np.array([[top, top - top // 3, 1, 1], [1, 0, top, top // 2]], dtype)
  f = ab.Context().batch(per_member=True)(_traces_member)
  want = [np.stack(w) for w in zip(*[_traces_member(r) for r in v])]
  assert want[0].dtype == (np.uint64 if np.dtype(dtype).kind == 'u' else
                           np.int64)
  _exactly_everywhere(f, v, want)
  run_everywhere(f, [v])
  m = np.stack([np.diag(r) + np.eye(4, k=1, dtype=dtype) * r[0] for r in v])
  g = ab.Context().batch()(_traces_batch)
  _exactly_everywhere(g, m, _traces_batch(m))
  run_everywhere(g, [m])


P8 = np.array([1, 2, 3], np.int8)


def _polynomials(x):
  return (np.polyval([1, 2, 3], x), np.polyval([1.5, 2], x),
          np.polyval(P8, x), np.polyval(P8.astype(np.int16), x))


@pytest.mark.parametrize('per_member', [False, True])
def test_polyval_of_narrow_integers_has_numpys_dtype(per_member):
  # On TensorFlow np.polyval of a list of Python ints at int8 gave int32
  # per member (NumPy: int64) and int8 batch-aware, overflowing; a list
  # of Python floats float32 per member (NumPy: float64).
  x = np.array([3, 100, -7], np.int8)
  f = ab.Context().batch(per_member=per_member)(_polynomials)
  with np.errstate(over='ignore'):
    want = (_polynomials(x) if not per_member else
            [np.stack(w) for w in zip(*[_polynomials(r) for r in x])])
  if np.__version__ >= '2':   # NumPy 1 keeps int8 batch-aware, by value
    assert want[0].dtype == np.int64 and want[1].dtype == np.float64
  _exactly_everywhere(f, x, want)
  run_everywhere(f, [x])


def _narrow_member(v):
  w = v[::-1]
  return (np.dot(v, v), v @ w, np.einsum('i,i->', v, w), np.inner(v, w),
          np.vdot(v, w), np.tensordot(v, w, 1), np.outer(v, w) @ v,
          np.einsum('i,j->ij', v, w), np.kron(v, w),
          np.linalg.matrix_power(np.outer(v, w), 2), np.abs(v), np.sign(v),
          abs(v[0] - v[1]), v ** 2, np.power(v, 3), -v, np.negative(v),
          np.argsort(-v), np.sort(v), np.tile(v, 2), np.nansum(v),
          np.nanprod(v), np.nanmean(v), np.average(v),
          np.average(v, weights=w), np.invert(v))


def _narrow_batch(v):
  w = v[:, ::-1]
  return (np.einsum('bi,bi->b', v, w), v[:, None, :] @ w[:, :, None],
          np.matmul(v[:, :, None], w[:, None, :]), np.abs(v), np.sign(v),
          v ** 2, np.power(v, 3), -v, np.argsort(-v, axis=-1),
          np.sort(v, axis=-1), np.nansum(v, axis=-1), np.nanprod(v, axis=-1),
          np.average(v, axis=-1), np.invert(v))


def _divisors_member(v):
  return np.gcd(v, 6), np.lcm(v, 4)


@pytest.mark.parametrize('dtype', [np.int8, np.int16, np.uint8, np.uint16,
                                   np.uint32, np.uint64])
@pytest.mark.parametrize('per_member', [False, True])
def test_narrow_and_unsigned_integers_are_numpys(dtype, per_member):
  # On TensorFlow products (np.dot, @, einsum, inner, vdot, tensordot,
  # matrix_power) of int8, int16 and unsigned integers, np.abs, np.sign,
  # -v and ** of unsigned ones, np.nansum / np.average of integers, a
  # sort of uint16 under XLA, np.tile of uint16 and np.invert failed
  # (under XLA a raw InvalidArgumentError); NumPy wraps the products.
  top = np.iinfo(dtype).max
  v = np.array([[top, top - 3, 5, 7], [1, 2, 3, top // 3]], dtype)
  fn = _narrow_member if per_member else _narrow_batch
  f = ab.Context().batch(per_member=per_member)(fn)
  with np.errstate(over='ignore'):
    want = (fn(v) if not per_member else
            [np.stack(w) for w in zip(*[fn(r) for r in v])])
    alone = f(v, dry_run=True)
  for a, w in zip(ab.instructions.pattern_flatten(alone), want):
    assert np.asarray(a).dtype == w.dtype
    np.testing.assert_array_equal(a, w)
  _exactly_everywhere(f, v, want)


@pytest.mark.parametrize('dtype', [np.int8, np.uint8, np.uint16, np.uint32])
def test_gcd_and_lcm_of_narrow_integers_are_numpys(dtype):
  # On TensorFlow np.gcd / np.lcm of unsigned integers had no kernel.
  # (TensorFlow's gcd loops per member, which XLA does not compile.)
  tf = pytest.importorskip('tensorflow')
  v = np.array([[12, 9, 100, 7], [1, 2, 3, 40]], dtype)
  f = ab.Context().batch(per_member=True)(_divisors_member)
  with np.errstate(over='ignore'):
    want = [np.stack(w) for w in zip(*[_divisors_member(r) for r in v])]
  for out in (f(v), f(tf.constant(v)),
              tf.function(lambda a: f(a))(tf.constant(v))):
    for g, w in zip(out, want):
      assert np.asarray(g).dtype == w.dtype
      np.testing.assert_array_equal(g, w)
