"""Type inference never trips on made-up data.

To type a primitive's result, inference traces it symbolically on
TensorFlow (eagerly: no values computed) and, on NumPy, runs it on
made-up inputs -- zeros, ones, identity matrices, values in (0.25, 0.75)
-- until one kind does not raise.  A primitive whose result a
`type_inference` callable declares does not run on made-up data at all;
its first real run checks its shape.  Each program here fails on zeros
(singular matrices, logarithms, an out-of-range index, an `assert`), and
each is compared, batched on NumPy and TensorFlow in both VM modes,
with `dry_run` and with plain NumPy per member: values, shapes and
dtypes.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

MODES = ['numpy', 'numpy_stackless', 'tf', 'tf_stackless']


def run(fn, args, mode, **kwargs):
  if mode.startswith('numpy'):
    backend = ab.NumpyBackend()
  else:
    tf = pytest.importorskip('tensorflow')
    backend = ab.TensorFlowBackend()
    args = [tf.constant(a) for a in args]
  out = fn(*args, backend=backend, stackless=mode.endswith('stackless'),
           **kwargs)
  return np.asarray(out)


def check(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape and got.dtype == want.dtype, (
      got.shape, got.dtype, want.shape, want.dtype)
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def spd(rng, batch, n):
  m = rng.normal(size=(batch, n, n))
  return m @ np.swapaxes(m, 1, 2) + n * np.eye(n)


ctx = ab.Context()


@ctx.batch()
def solve(m, b):
  # Singular on zeros: np.linalg.solve raises LinAlgError.
  return np.linalg.solve(m, b[..., None])[..., 0]


@ctx.batch()
def whiten(m, b):
  # A Cholesky factor inside a branch only some members take.
  if np.sum(b, axis=-1) > 0:
    chol = np.linalg.cholesky(m)
    return np.linalg.solve(chol, b[..., None])[..., 0]
  return b


@ctx.batch()
def newton(a, x):
  # Solves x^3 + a x = 1 per member: the Jacobian 3x^2 + a is singular
  # at zero when a is, and members take different numbers of steps.
  steps = 0
  while np.abs(x ** 3 + a * x - 1.0) > 1e-12:
    x = x - np.linalg.solve(
        (3 * x ** 2 + a)[..., None, None],
        (x ** 3 + a * x - 1.0)[..., None, None])[..., 0, 0]
    steps += 1
  return x, steps


@ctx.batch()
def domains(x):
  # log, sqrt and arccos outside their domains on zeros or ones.
  return np.log(x) + np.sqrt(x - 0.2) + np.arccos(2 * x - 0.6)


@ctx.batch()
def pick(table, i):
  # Data-dependent indexing: i is a valid row of each member's table.
  return np.take_along_axis(table, (i - 1)[:, None], axis=1)[:, 0]


@ctx.batch()
def checked_sqrt(x):
  assert np.all(x > 0, axis=-1), 'x must be positive'
  return np.sqrt(x)


def newton_ref(a, x):
  steps = 0
  while abs(x ** 3 + a * x - 1.0) > 1e-12:
    x = x - (x ** 3 + a * x - 1.0) / (3 * x ** 2 + a)
    steps += 1
  return x, steps


@pytest.mark.parametrize('mode', MODES)
def test_linear_solve_singular_on_zeros(mode):
  rng = np.random.default_rng(0)
  m, b = spd(rng, 7, 3), rng.normal(size=(7, 3))
  got = run(solve, [m, b], mode)
  check(got, np.linalg.solve(m, b[..., None])[..., 0])
  check(solve(m, b, dry_run=True), got)


@pytest.mark.parametrize('mode', MODES)
def test_cholesky_in_a_branch(mode):
  rng = np.random.default_rng(1)
  m, b = spd(rng, 9, 4), rng.normal(size=(9, 4))
  want = []
  for mi, bi in zip(m, b):
    if bi.sum() > 0:
      want.append(np.linalg.solve(np.linalg.cholesky(mi), bi))
    else:
      want.append(bi)
  got = run(whiten, [m, b], mode)
  check(got, np.array(want))
  check(whiten(m, b, dry_run=True), got)


@pytest.mark.parametrize('mode', ['numpy', 'numpy_stackless', 'tf'])
def test_newton_solver_singular_at_zero(mode):
  a = np.array([0.0, 1.0, 2.5, 0.5, 4.0])
  x0 = np.array([1.0, 0.5, 0.3, 2.0, 0.1])
  got_x, got_steps = newton(a, x0) if mode == 'numpy' else [
      np.asarray(v) for v in (
          newton(a, x0, stackless=True) if mode == 'numpy_stackless' else
          newton(*[pytest.importorskip('tensorflow').constant(v)
                   for v in (a, x0)], backend=ab.TensorFlowBackend()))]
  refs = [newton_ref(ai, xi) for ai, xi in zip(a, x0)]
  check(got_x, np.array([r[0] for r in refs]))
  assert np.asarray(got_steps).tolist() == [r[1] for r in refs]
  alone_x, alone_steps = newton(a, x0, dry_run=True)
  check(alone_x, got_x)
  assert np.asarray(alone_steps).tolist() == np.asarray(got_steps).tolist()


@pytest.mark.parametrize('mode', MODES)
def test_functions_with_restricted_domains(mode):
  x = np.array([0.3, 0.45, 0.6, 0.75])
  got = run(domains, [x], mode)
  check(got, np.log(x) + np.sqrt(x - 0.2) + np.arccos(2 * x - 0.6))
  check(domains(x, dry_run=True), got)


@pytest.mark.parametrize('mode', ['numpy', 'numpy_stackless'])
def test_data_dependent_indexing(mode):
  table = np.arange(12.0).reshape(3, 4)
  i = np.array([4, 1, 3])   # 1-based: index 0 - 1 is out of range
  got = run(pick, [table, i], mode)
  check(got, table[np.arange(3), i - 1])
  check(pick(table, i, dry_run=True), got)


@pytest.mark.parametrize('mode', MODES)
def test_assert_on_made_up_data(mode):
  x = np.array([[1.0, 4.0], [9.0, 16.0]])
  got = run(checked_sqrt, [x], mode)
  check(got, np.sqrt(x))
  check(checked_sqrt(x, dry_run=True), got)
  with pytest.raises(errors.AssertionFailedError, match='x must be positive'):
    run(checked_sqrt, [-x], mode)


def test_declared_results_do_not_run_on_made_up_data():
  calls = []
  local = ab.Context()

  def inverse_diag(m):
    calls.append(np.array(m))
    if np.any(np.abs(np.linalg.det(m)) < 1e-9):
      raise ValueError('singular')    # as a strict user library would
    return np.diagonal(np.linalg.inv(m), axis1=-2, axis2=-1)

  @local.batch(type_inference=lambda args: [
      ab.TensorType(args[0].dtype, args[0].shape[:1])])
  def diag_of_inverse(m):
    return inverse_diag(m)

  m = spd(np.random.default_rng(2), 5, 3)
  got = diag_of_inverse(m)
  check(got, np.diagonal(np.linalg.inv(m), axis1=-2, axis2=-1))
  # Only the real rows ever reached the primitive.
  assert all(np.abs(np.linalg.det(c)).min() > 1e-9 for c in calls)


def _needs_seven_and_a_half(x):
  if not np.all(x == 7.5):
    raise ValueError('needs 7.5')
  return x


def test_a_primitive_that_fails_on_every_kind_of_made_up_data():
  local = ab.Context()

  @local.batch()
  def strict_call(x):
    return _needs_seven_and_a_half(x)

  with pytest.raises(errors.PrimitiveError) as e:
    strict_call(np.array([7.5, 7.5]))
  assert 'made-up inputs' in str(e.value) and 'type_inference=' in str(e.value)
  assert e.value.function == 'strict_call' and e.value.filename == __file__

  # Declaring the result type is the way out: nothing runs on made-up data.
  declared = ab.Context()

  @declared.batch(type_inference=lambda args: [args[0]])
  def strict_declared(x):
    return _needs_seven_and_a_half(x)

  check(strict_declared(np.array([7.5, 7.5])), np.array([7.5, 7.5]))


def test_tensorflow_primitives_are_traced_not_run():
  # A TensorFlow check that fails on every kind of made-up value: traced
  # symbolically, it computes nothing during inference.
  tf = pytest.importorskip('tensorflow')
  local = ab.Context()

  def above_seven(x):
    seven = tf.constant(7.0, x.dtype)
    with tf.control_dependencies([tf.debugging.assert_greater(x, seven)]):
      return tf.math.log(x - seven)

  @local.batch()
  def shifted_log(x):
    return above_seven(x)

  x = np.array([7.5, 8.0, 9.0])
  for stackless in (False, True):
    got = shifted_log(tf.constant(x), backend=ab.TensorFlowBackend(),
                      stackless=stackless)
    check(got, np.log(x - 7.0))
  check(shifted_log(tf.constant(x), dry_run=True), np.log(x - 7.0))


def test_made_up_inputs_that_differ_type_a_ratio_of_differences():
  # Every kind made `lo` and `hi` equal, so (v - lo) / (hi - lo) was NaN
  # and int() of it failed inference on NumPy.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  def bin_index(v, lo, hi):
    return int((v - lo) / (hi - lo) * 5)
  run_everywhere(ctx.batch_uncurried(bin_index, per_member=True),
                 [np.array([0.5, 0.1, 0.9]), np.zeros(3), np.ones(3)])


def test_a_python_float_times_a_counter_runs_on_tensorflow():
  # `2.0 * j` of an int64 counter typed on Python numbers; at run time
  # TensorFlow's operator cast 2.0 to int64 and failed.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  def ramp(n):
    s = 0.0
    for j in range(n):
      b = 2.0 * j
      s = s + b - 1.0
    return s
  n = np.array([3, 1, 4])
  run_everywhere(ctx.batch_uncurried(ramp), [n])
  run_everywhere(ctx.batch_uncurried(ramp, per_member=True), [n])
