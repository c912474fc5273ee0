"""A user's helper called from a per-member primitive, for one member.

Casts of one member's scalars (`np.float64(x)`, `np.int32(x)`, `float(x)`,
`int(x)`) and the builtins `min`, `max`, `abs` mean in a helper what they
mean in the per-member function itself, through helpers that call helpers
(`per_member.member_helpers`).  The program is checked against a plain
Python loop over members and the dry run, on NumPy (VM, stackless) and
TensorFlow (eager, stackless, `tf.function`, XLA).
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.per_member import member_helpers

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


@pytest.fixture(scope='module')
def case():
  args = _inputs(np.random.default_rng(0))
  expected = np.stack([np.asarray(casts(*[a[k] for a in args]))
                       for k in range(B)])
  return args, expected


def _same(got, expected):
  got = np.asarray(got)
  assert got.shape == expected.shape
  assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
  np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_numpy_equals_a_loop_and_the_dry_run(case):
  args, expected = case
  _same(CASTS(*args, stackless=False), expected)
  _same(CASTS(*args, stackless=True), expected)
  _same(CASTS(*args, dry_run=True), expected)


@pytest.mark.parametrize('mode', ['eager', 'stackless', 'function', 'xla'])
def test_tensorflow_equals_a_loop(case, mode):
  tf = pytest.importorskip('tensorflow')
  args, expected = case
  tensors = [tf.constant(a) for a in args]
  if mode in ('eager', 'stackless'):
    got = CASTS(*tensors, stackless=mode == 'stackless')
  else:
    got = tf.function(lambda *a: CASTS(*a), jit_compile=mode == 'xla',
                      autograph=False)(*tensors)
  _same(got.numpy(), expected)


def test_only_a_users_plain_functions_are_helpers():
  assert member_helpers.is_helper(_as_float)
  assert not member_helpers.is_helper(np.linalg.norm)
  assert not member_helpers.is_helper(lambda x: x)
  assert not member_helpers.is_helper(member_helpers.member_call)


def test_a_helper_without_such_calls_is_called_as_it_is():
  def plain(x):
    return x * 2 + 1
  assert member_helpers.member_helper(plain, None) is plain
