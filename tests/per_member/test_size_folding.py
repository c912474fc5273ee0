"""A size computed in an earlier statement of a per-member function.

`n = len(x)`, `k = x.shape[0] + 1` and integer arithmetic on such values
are one Python int for a signature (`passes.size_folding`), so they can
make arrays in later statements.  Each program is checked against a plain
Python loop over members and the dry run, on NumPy (VM, stackless) and
TensorFlow (eager, `tf.function`, XLA); a size that differs between
members stays refused, with the advice to pad.  A size passed to a
per-member function, or returned by one, is folded the same way where
every call agrees on it.
"""

import sys

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import per_member as per_member_tests

B = 4


def running_means(x):
  """Prefix means, in a buffer sized by an earlier `len`."""
  n = len(x)
  out = np.zeros(n, dtype=x.dtype)
  total = x[0] * 0
  i = 0
  while i < n:
    total = total + x[i]
    out[i] = total / (i + 1)
    i += 1
  return out


def padded_ramp(x):
  """Sizes from `.shape` and `.ndim`, and arithmetic on them."""
  k = x.shape[0] + 1
  m = 2 * k - x.ndim
  ramp = np.arange(k) * 1.0
  ones = np.ones(m) + x.ndim
  head = ramp[:k - 1] + x
  if x[0] > 0:
    return head * 2.0 + ones[:k - 1]
  return head - ones[m - k + 1:]


def last_row(m):
  """A size in an earlier statement, then an index computed from it."""
  rows = m.shape[0]
  cols = len(m[0])
  grid = np.zeros((rows, cols)) + m
  return grid[rows - 1] * np.ones(cols)


def weighted_sum(m):
  """A size from `.size` (NumPy's: a tensor has no `.size`)."""
  s = m.size
  weights = np.arange(s) * 1.0
  return (weights.reshape(m.shape) * m).sum()


def countdown(x):
  """A buffer sized by `n`, which a loop then counts down: the size is
  the value `n` has where the array is made."""
  n = len(x)
  out = np.zeros(n)
  while n > 0:
    out[n - 1] = x[n - 1] * n
    n -= 1
  return out + n


def resized(x):
  """A size assigned on both sides of a branch, the same on both, then
  reassigned after the array it sizes."""
  if x[0] > 0:
    k = len(x) + 1
  else:
    k = x.shape[0] + 1
  buf = np.ones(k) * x[0]
  k = k * 2
  return buf[:k - 1 - len(x)] + k


def tuple_sizes(x, m):
  """Sizes assigned together from a tuple display, also nested, beside a
  swap (each item read before either name is assigned)."""
  n, k = len(x), m.shape[1]
  (r,), (p, q) = x.shape, m.shape
  grid = np.zeros((n + 1, k + 1)) + x[0]
  lo, hi = x[0], x[1]
  lo, hi = hi, lo
  return grid.sum() + np.ones(r * q).sum() + p + hi - lo


PROGRAMS = {
    'tuple_sizes': (tuple_sizes, lambda rng: (rng.normal(size=(B, 3)),
                                              rng.normal(size=(B, 2, 4)))),
    'countdown': (countdown, lambda rng: (rng.normal(size=(B, 5)),)),
    'resized': (resized, lambda rng: (rng.normal(size=(B, 3)),)),
    'running_means': (running_means, lambda rng: (rng.normal(size=(B, 5)),)),
    'padded_ramp': (padded_ramp, lambda rng: (rng.normal(size=(B, 3)),)),
    'last_row': (last_row, lambda rng: (rng.normal(size=(B, 2, 3)),)),
    'weighted_sum': (weighted_sum, lambda rng: (rng.normal(size=(B, 2, 3)),)),
}
TENSORFLOW = ['tuple_sizes', 'countdown', 'resized', 'running_means', 'padded_ramp', 'last_row']

ctx = ab.Context()
BATCHED = {name: ctx.batch_uncurried(fn, per_member=True)
           for name, (fn, _) in PROGRAMS.items()}


def _case(name):
  fn, make = PROGRAMS[name]
  args = make(np.random.default_rng(len(name)))
  expected = np.stack([np.asarray(fn(*[a[k] for a in args]))
                       for k in range(B)])
  return BATCHED[name], args, expected


def _same(got, expected):
  got = np.asarray(got)
  assert got.shape == expected.shape
  assert got.dtype == expected.dtype
  np.testing.assert_allclose(got, expected, rtol=1e-12)


# Sizes across calls: functions of one Context calling each other.
calls = ab.Context()


@calls.batch(per_member=True)
def window(x, n):
  """A buffer sized by a parameter that every call passes as `len(x)`."""
  buf = np.zeros(n)
  m = n - 1
  buf[:m] = x[1:] - x[:m]
  return buf[0] + buf[m - 1] * 2.0 + np.ones(m)[0] * m


@calls.batch(per_member=True)
def width(x):
  """A size returned: the function's one `return`."""
  return len(x) + 1


@calls.batch(per_member=True)
def across_calls(x):
  k = len(x)
  w = width(x)
  pad = np.zeros(w)
  pad[:k] = x
  return window(x, k) + pad[k - 1] * w + window(x * 2.0, len(x))


@calls.batch(per_member=True)
def first_caller(x):
  return window(x, len(x)) + second_caller(x * 0.5)


@calls.batch(per_member=True)
def second_caller(x):
  return window(x, x.shape[0])


@calls.batch(per_member=True)
def callers_in_turn(x):
  """`window` is reached from a caller before its other caller is."""
  return first_caller(x)


def _calls_case(fn=across_calls):
  x = np.random.default_rng(7).normal(size=(B, 4))
  with per_member_tests.plain_python(sys.modules[__name__]):
    expected = np.stack([np.asarray(fn.python_function(x[k]))
                         for k in range(B)])
  return x, expected


@pytest.mark.parametrize('fn', [across_calls, callers_in_turn],
                         ids=lambda f: f.__name__)
def test_a_size_flows_across_calls_on_numpy(fn):
  x, expected = _calls_case(fn)
  _same(fn(x, stackless=False), expected)
  _same(fn(x, stackless=True), expected)
  _same(fn(x, dry_run=True), expected)


@pytest.mark.parametrize('mode', ['eager', 'stackless', 'function', 'xla'])
def test_a_size_flows_across_calls_on_tensorflow(mode):
  tf = pytest.importorskip('tensorflow')
  x, expected = _calls_case()
  x = tf.constant(x)
  if mode in ('eager', 'stackless'):
    got = across_calls(x, stackless=mode == 'stackless')
  else:
    got = tf.function(lambda a: across_calls(a), jit_compile=mode == 'xla',
                      autograph=False)(x)
  _same(got.numpy(), expected)


disagree = ab.Context()


@disagree.batch(per_member=True)
def sized(x, n):
  return np.zeros(n) + x[0]


@disagree.batch(per_member=True)
def two_sizes(x):
  return sized(x, len(x))[0] + sized(x, len(x) + 1)[0]


@disagree.batch(per_member=True)
def entry_sized(x, n):
  buf = np.zeros(n)
  if n > len(x):
    return entry_sized(x, len(x))
  return buf.sum() + x[0]


@pytest.mark.parametrize('fn,line', [
    (two_sizes, sized.python_function.__code__.co_firstlineno + 2),
    (entry_sized, entry_sized.python_function.__code__.co_firstlineno + 2)])
def test_a_size_that_calls_pass_differently_is_refused(fn, line):
  args = [np.full((B, 2), 3.0)] + ([np.array([2, 3, 3, 1])]
                                    if fn is entry_sized else [])
  with pytest.raises(errors.PerMemberError, match='one per member') as info:
    fn(*args)
  assert 'Pad to a fixed size' in str(info.value)
  assert info.value.loc.line == line


@pytest.mark.parametrize('name', list(PROGRAMS))
def test_numpy_equals_a_loop_and_the_dry_run(name):
  fn, args, expected = _case(name)
  _same(fn(*args, stackless=False), expected)
  _same(fn(*args, stackless=True), expected)
  _same(fn(*args, dry_run=True), expected)


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
@pytest.mark.parametrize('name', TENSORFLOW)
def test_tensorflow_equals_a_loop(name, mode):
  tf = pytest.importorskip('tensorflow')
  fn, args, expected = _case(name)
  tensors = [tf.constant(a) for a in args]
  if mode == 'eager':
    got = fn(*tensors)
  else:
    got = tf.function(lambda *a: fn(*a), jit_compile=mode == 'xla',
                      autograph=False)(*tensors)
  _same(got.numpy(), expected)


def sized_by_an_argument(x, n):
  return np.arange(n) * x


def sized_by_the_data(x):
  n = int(x[0])
  return np.zeros(n) + x[1]


def sized_after_a_loop(x):
  n = len(x)
  while n > 1:
    n -= 1
  return np.zeros(n) + x[1]


@pytest.mark.parametrize('fn', [sized_by_an_argument, sized_by_the_data,
                                sized_after_a_loop])
def test_a_size_that_differs_between_members_is_refused(fn):
  batched = ab.Context().batch_uncurried(fn, per_member=True)
  args = [np.full((B, 2), 3.0)] + ([np.array([2, 3, 3, 1])]
                                    if fn is sized_by_an_argument else [])
  with pytest.raises(errors.PerMemberError, match='one per member') as info:
    batched(*args)
  assert 'Pad to a fixed size' in str(info.value)
  assert info.value.loc.line == fn.__code__.co_firstlineno + {
      sized_by_an_argument: 1, sized_by_the_data: 2,
      sized_after_a_loop: 4}[fn]


def test_a_size_mixed_with_a_members_integer_and_a_float_runs_on_tensorflow():
  # `n = len(v)` folded into a constant, then `v[0] / (n - k)`: the
  # primitive given its sizes lost its promoting form, so TensorFlow's
  # float64 / int64 failed; a DFT's 2 * pi * k * n / N did too.
  import math  # pylint: disable=g-import-not-at-top
  from tests.python import run_everywhere  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  def ratios(v, k):
    n = len(v)
    return v[0] / (n - k), 2 * math.pi * k / n

  def dft_real(x):
    size = len(x)
    out = np.zeros(size)
    for k in range(size):
      re = 0.0
      for n in range(size):
        re += x[n] * math.cos(2 * math.pi * k * n / size)
      out[k] = re
    return out
  run_everywhere(ctx.batch_uncurried(ratios, per_member=True),
                 [np.array([[0.25, 0.5, 0.75], [1.5, 2.5, 0.5]]),
                  np.array([1, 2])])
  x = np.random.default_rng(0).normal(size=(3, 4))
  fn = ctx.batch_uncurried(dft_real, per_member=True)
  run_everywhere(fn, [x])
  np.testing.assert_allclose(fn(x), np.fft.fft(x).real, atol=1e-12)
