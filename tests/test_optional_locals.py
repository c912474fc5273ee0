"""Locals that hold None for some members (`python.optional`).

`best = None`, then `best = v[i]` and `best is None or v[i] < best`: the
search idiom.  Each program runs batched on every backend and in both VM
modes against its dry run and against plain Python per member; a member
that uses a None as a value fails as Python's TypeError, named.
"""

import ast
import textwrap

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.python import optional
from tests.python import run_everywhere


def _closest(v, t):
  best_i = None
  best = 0.0
  for i in range(len(v)):
    d = abs(v[i] - t)
    if best_i is None or d < best:
      best = d
      best_i = i
  return best_i


def _spread(v, n):
  lo = hi = None
  last = None
  total = None
  for i in range(n):
    x = v[i]
    if lo == None or x < lo:  # pylint: disable=singleton-comparison
      lo = x
    if None is hi or x > hi:
      hi, last = x, i
    if total is None:
      total = x
    else:
      total += x
  if lo is not None:
    return hi - lo + total * 0, last
  return v[0] * 0, -1


def _first_found(v, t):
  found = None
  i = 0
  while i < 6:
    if v[i] > t:
      found = i
      break
    i += 1
  return -1 if found is None else found * 10


def _multiples(n, acc):
  if n <= 0:
    return acc
  prev = None
  if n % 3 == 0:
    prev = n
  if prev is not None:
    return _multiples(n - 1, acc + prev)
  return _multiples(n - 1, acc)


def _per_member(fn, *args):
  return np.stack([np.asarray(fn(*row)) for row in zip(*args)])


def test_optional_locals_run_per_member_everywhere():
  rng = np.random.RandomState(0)
  v = rng.randn(5, 6).astype(np.float32)
  n = np.array([0, 1, 3, 6, 2], np.int64)
  t = np.array([0.0, 0.5, 5.0, -3.0, 1.0], np.float32)

  closest = ab.Context().batch(per_member=True)(_closest)
  run_everywhere(closest, [v, t], check=lambda out: np.testing.assert_array_equal(
      out, _per_member(_closest, v, t)))

  spread = ab.Context().batch(per_member=True)(_spread)

  def check_spread(out):
    want = [_spread(*row) for row in zip(v, n)]
    np.testing.assert_allclose(out[0], [w[0] for w in want], rtol=1e-6)
    np.testing.assert_array_equal(out[1], [w[1] for w in want])
  run_everywhere(spread, [v, n], check=check_spread)

  first = ab.Context().batch(per_member=True)(_first_found)
  run_everywhere(first, [v, t], check=lambda out: np.testing.assert_array_equal(
      out, _per_member(_first_found, v, t)))


def test_an_optional_local_across_recursive_calls():
  multiples = ab.Context().batch(per_member=True)(_multiples)
  n, acc = np.array([0, 3, 7, 10], np.int64), np.array([0, 1, 2, 3], np.int64)
  run_everywhere(multiples, [n, acc],
                 check=lambda out: np.testing.assert_array_equal(
                     out, _per_member(_multiples, n, acc)))


def _steps_above(x, t):
  found = None
  steps = 0
  while steps < 20:
    x = x * 2 + 1
    if found is None and x > t:
      found = steps
    steps += 1
  if found is not None:
    return found
  return x * 0 - 1


def test_an_optional_local_in_a_batch_aware_function():
  fn = ab.Context().batch()(_steps_above)
  x, t = np.array([1, 2, 3, 100], np.int64), np.array([10, 10**9, 5, 50])
  run_everywhere(fn, [x, t], check=lambda out: np.testing.assert_array_equal(
      out, _per_member(_steps_above, x, t)))


def _read_none(k):
  r = None
  if k > 0:
    r = k * 2
  return r + 1


@pytest.mark.parametrize('per_member', [False, True])
@pytest.mark.parametrize('stackless', [False, True])
def test_using_a_none_fails_those_members(per_member, stackless):
  fn = ab.Context().batch(per_member=per_member)(_read_none)
  k = np.array([1, -1, 3, 0], np.int64)
  with pytest.raises(TypeError):
    fn(k, dry_run=True)
  with pytest.raises((errors.PrimitiveError,
                      errors.AssertionFailedError)) as e:
    fn(k, stackless=stackless)
  message = str(e.value)
  assert 'batch members [1, 3]' in message, message
  assert "_read_none" in message and 'return r + 1' in message, message
  assert 'TypeError' in message and 'optional_value' not in message, message
  if not stackless:   # (stackless mode raises any error)
    out, ok = fn(k, stackless=False, on_error='status')
    np.testing.assert_array_equal(ok, [True, False, True, False])
    np.testing.assert_array_equal(out[ok], [3, 7])


@pytest.mark.parametrize('per_member', [False, True])
def test_using_a_none_fails_those_members_on_tensorflow(per_member):
  tf = pytest.importorskip('tensorflow')
  fn = ab.Context().batch(per_member=per_member)(_read_none)
  k = tf.constant([1, -1, 3, 0], tf.int64)
  with pytest.raises((errors.PrimitiveError,
                      errors.AssertionFailedError)) as e:
    fn(k)
  assert 'batch members [1, 3]' in str(e.value)
  out, ok = fn(k, on_error='status')
  np.testing.assert_array_equal(ok, [True, False, True, False])
  np.testing.assert_array_equal(np.asarray(out)[np.asarray(ok)], [3, 7])


def _locals(source):
  node = ast.parse(textwrap.dedent(source)).body[0]
  params = [a.arg for a in node.args.args]
  return optional.optional_locals(node, params)


def test_which_locals_get_a_flag():
  assert _locals('''
      def f(v, p):
        a = b = None
        c = None
        p = None
        for a in v:
          b = a
        return a, b, c, p
      ''') == ['a', 'b']   # c: always None; p: a parameter
  # Read by a nested function or lambda, bound by `with`: left as written.
  assert _locals('''
      def f(v):
        a = None
        b = None
        c = None
        g = lambda: a
        with open(v) as b:
          pass
        a = b = c = 1
        return g, c
      ''') == ['c']


def test_printed_source_is_the_users():
  node = ast.parse(textwrap.dedent('''
      def f(v):
        best = None
        if best is None or v < best:
          best = v
        return best
      ''')).body[0]
  flags = optional.flag_names(node, ['best'])
  new = optional.rewrite(node, flags, '__ab_optional_value')
  test = new.body[1].test
  assert optional.unparse(test) == 'best is None or v < best'
  assert 'best_is_none' in ast.unparse(test)


def _filled(v, n):
  acc = None
  for i in range(n):
    if acc is None:
      acc = v * 0
    acc[i] = v[i] * 2
  if acc is None:
    return v * 0 - 1
  return acc


def test_an_optional_array_written_by_item():
  fn = ab.Context().batch(per_member=True)(_filled)
  v = np.random.RandomState(2).randn(4, 5).astype(np.float32)
  n = np.array([0, 1, 3, 5], np.int64)
  run_everywhere(fn, [v, n], check=lambda out: np.testing.assert_allclose(
      out, _per_member(_filled, v, n)))
