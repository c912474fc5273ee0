"""A user's helper called from a per-member primitive, for one member.

Casts of one member's scalars (`np.float64(x)`, `np.int32(x)`, `float(x)`,
`int(x)`), the builtins `min`, `max`, `abs`, iterating and indexing a
member's array, its methods, `.T` and `@` mean in a helper what they
mean in the per-member function itself, through helpers that call helpers
(`per_member.member_helpers`), and in a helper that calls itself.  The
programs are checked against a plain Python loop over members and the dry
run, on NumPy (VM, stackless) and TensorFlow (eager, stackless,
`tf.function`, XLA).
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_ops

B = 5


def _as_float(x, k=2.0):
  """A helper: casts of one member's scalar to float64."""
  return np.float64(x) * k + float(x) / 4


def _bucket(v):
  """A helper calling a helper, `int` and `min`."""
  return int(_as_float(v, 0.5)) + min(int(v), 3)


def _narrow(x):
  """A cast to a narrower dtype, and `abs`."""
  return abs(np.int32(x)) * np.int32(2)


def casts(x, n):
  y = _as_float(n)
  b = _bucket(x * 3.0)
  while b > 0:
    y = y + 1.0
    b -= 1
  return y + np.float64(_narrow(x))


def _inputs(rng):
  return rng.normal(size=B) * 2.0, rng.integers(-3, 9, size=B)


ctx = ab.Context()
CASTS = ctx.batch_uncurried(casts, per_member=True)


def _countdown(x, n):
  """A helper calling itself on a shared number, passing a member's array
  along."""
  if n == 0:
    return x
  return _countdown(x + 1.0, n - 1)


def _halved(v, n):
  """A recursive helper with a cast of one member's scalar: each call of
  itself is its rewritten self."""
  if n == 0:
    return float(v)
  return _halved(v / 2.0, n - 1)


def recursive(x, s):
  return _countdown(x, 3) * _halved(s, 2)


RECURSIVE = ctx.batch_uncurried(recursive, per_member=True)


def _norm(v):
  """A comprehension over a member's vector, and a `for` over it."""
  total = 0.0
  for t in v:
    total += abs(t)
  return np.sqrt(sum(t * t for t in v)) + total


def _mixed(v, m, i, order):
  """Indexing by a member's integer and integer array, array methods,
  `.T` and `@` with vectors, in a helper."""
  return (m.T @ v)[i] + v[order].cumsum()[-1] + v[1:3].sum() + m[i] @ v


def arrays(v, m, i):
  return _norm(v) + _mixed(v, m, i, np.argsort(v))


ARRAYS = ctx.batch_uncurried(arrays, per_member=True)
PROGRAMS = {'casts': CASTS, 'recursive': RECURSIVE, 'arrays': ARRAYS}


def _arrays_inputs(rng):
  return (rng.normal(size=(B, 3)), rng.normal(size=(B, 3, 3)),
          rng.integers(0, 3, size=B))


def _recursive_inputs(rng):
  return rng.normal(size=(B, 3)), rng.normal(size=B)


@pytest.fixture(scope='module')
def cases():
  """Program name -> its arguments and a plain loop's results."""
  out = {}
  for name, make in (('casts', _inputs), ('recursive', _recursive_inputs),
                     ('arrays', _arrays_inputs)):
    fn = PROGRAMS[name].python_function
    args = make(np.random.default_rng(0))
    out[name] = args, np.stack([np.asarray(fn(*[a[k] for a in args]))
                                for k in range(B)])
  return out


def _same(got, expected):
  got = np.asarray(got)
  assert got.shape == expected.shape
  assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
  np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize('name', list(PROGRAMS))
def test_numpy_equals_a_loop_and_the_dry_run(cases, name):
  args, expected = cases[name]
  fn = PROGRAMS[name]
  _same(fn(*args, stackless=False), expected)
  _same(fn(*args, stackless=True), expected)
  _same(fn(*args, dry_run=True), expected)


@pytest.mark.parametrize('mode', ['eager', 'stackless', 'function', 'xla'])
@pytest.mark.parametrize('name', list(PROGRAMS))
def test_tensorflow_equals_a_loop(cases, name, mode):
  tf = pytest.importorskip('tensorflow')
  args, expected = cases[name]
  fn = PROGRAMS[name]
  tensors = [tf.constant(a) for a in args]
  if mode in ('eager', 'stackless'):
    got = fn(*tensors, stackless=mode == 'stackless')
  else:
    got = tf.function(lambda *a: fn(*a), jit_compile=mode == 'xla',
                      autograph=False)(*tensors)
  _same(got.numpy(), expected)


def test_only_a_users_plain_functions_are_helpers():
  assert member_helpers.is_helper(_as_float)
  assert not member_helpers.is_helper(np.linalg.norm)
  assert member_helpers.is_helper(lambda x: x)   # a user's lambda too
  assert not member_helpers.is_helper(member_helpers.member_call)


def test_a_helper_without_such_calls_is_called_as_it_is():
  def plain(x):
    return -x
  assert member_helpers.member_helper(plain, None) is plain


def test_a_helpers_operators_go_through_numpys_promotion():
  def arithmetic(x):
    return x * 2 + 1
  made = member_helpers.member_helper(arithmetic, member_ops)
  assert made is not arithmetic
  np.testing.assert_array_equal(made(np.array([1, 2])), [3, 5])


def _product_of_coordinates(v):
  x, y = v
  return x * y


def test_a_helper_unpacking_a_members_vector_runs_on_tensorflow():
  # `x, y = v` in a helper iterated the tensor (a misleading "needs a
  # single bool" PerMemberError on TensorFlow).
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  def area(v):
    return _product_of_coordinates(v) + 1.0
  run_everywhere(ctx.batch_uncurried(area, per_member=True),
                 [np.array([[1.0, 2.0], [3.0, 4.0], [0.5, 8.0]])])


def _accelerations(x):
  """A helper assigning items: n-body accelerations of 1-d positions."""
  a = np.zeros_like(x)
  for i in range(x.shape[0]):
    for j in range(x.shape[0]):
      if i != j:
        d = x[j] - x[i]
        a[i] += d / (abs(d) ** 3 + 0.1)
  return a


def _bumped(v):
  v = v.copy()
  v[0] = 5.0
  v[1:3] *= 2.0
  return v


def _gradient(x):
  """A hand-written gradient: a plain array filled with a member's
  values (on NumPy, 'setting an array element with a sequence')."""
  g = np.zeros(2)
  g[0] = 2.0 * x[0]
  g[1] = 4.0 * x[1]
  padded = np.zeros(5)
  padded[1:] = x
  return g, padded


def test_a_helper_assigning_items_runs_on_tensorflow():
  # Item assignment in a helper: on TensorFlow "'EagerTensor' object does
  # not support item assignment", where the guide says it works on both.
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  def step(x, dt):
    for _ in range(3):
      x = x + dt * _accelerations(x)
    return x, _bumped(x), _gradient(x)[0], _gradient(x)[1]
  x = np.array([[0.0, 1.0, 3.0, 4.5], [1.0, -1.0, 2.0, 0.5],
                [0.2, 0.4, 0.8, 1.6]])
  dt = np.array([0.01, 0.02, 0.05])
  fn = ctx.batch_uncurried(step, per_member=True)
  got = fn(x, dt)
  for b in range(3):
    want = step(x[b], dt[b])
    for k in range(4):
      np.testing.assert_allclose(got[k][b], want[k], rtol=1e-12)
  run_everywhere(fn, [x, dt])
