"""`on_error=`: what a stack overflow (or failed assert, or max_steps) does.

Under a bare `tf.function(jit_compile=True)` nothing can raise at run
time: the default refuses a run that can fail and returns a boolean (no
value to mark a failed member with), poisons only the failed members'
numbers, and `on_error='status'` returns `(outputs, ok)` everywhere
(`vm.failures`).
"""

import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

tf = pytest.importorskip('tensorflow')

ctx = ab.Context()


def _same(r, n):
  del n
  return r


@ctx.batch
def walk(n, x):
  """Returns `x` after recursing `n` deep (not a tail call)."""
  if n <= 0:
    return x
  r = walk(n - 1, x)
  return _same(r, n)


@ctx.batch
def has_mult7(n):
  if n <= 0:
    return False
  r = has_mult7(n - 1)
  return r or n % 7 == 0


@ctx.batch
def _above(x):
  if x > 2:
    return x > 5
  return x < 0


@ctx.batch
def calls_without_recursion(x):
  a = _above(x)
  b = _above(x + 1)
  return a and b


@ctx.batch
def _double_above_two(x):
  if x > 2:
    return x * 2
  return x


@ctx.batch
def calls_in_a_loop(n):
  acc = n * 0
  i = n * 0
  while i < n:
    acc = acc + _double_above_two(i)
    i = i + 1
  return acc > 10


N = np.array([2, 9, 1, 12], np.int32)    # members 1 and 3 need depth > 4
FAILED = np.array([False, True, False, True])
DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]
VALUES = np.array([1, 1, 0, 1])


def _marker(dtype):
  if dtype == np.bool_:
    return False
  if np.issubdtype(dtype, np.integer):
    return np.iinfo(dtype).min
  return np.nan


def _expected(dtype):
  out = VALUES.astype(dtype)
  out[FAILED] = _marker(dtype)
  return out


def _bare_xla(fn, **kwargs):
  return tf.function(lambda *a: fn(*a, **kwargs), jit_compile=True)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: np.dtype(d).name)
def test_status_under_bare_xla_marks_failed_members_keeps_the_others(dtype):
  x = tf.constant(VALUES.astype(dtype))
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.XlaErrorsWarning)  # none: chosen
    out, ok = _bare_xla(walk, max_stack_depth=4, on_error='status')(
        tf.constant(N), x)
  np.testing.assert_array_equal(ok.numpy(), ~FAILED)
  assert out.dtype == tf.as_dtype(dtype)
  np.testing.assert_array_equal(out.numpy(), _expected(dtype))


@pytest.mark.parametrize('dtype', DTYPES[1:], ids=lambda d: np.dtype(d).name)
def test_default_under_bare_xla_poisons_only_failed_numbers(dtype):
  x = tf.constant(VALUES.astype(dtype))
  with pytest.warns(errors.XlaErrorsWarning, match="on_error='status'"):
    out = _bare_xla(walk, max_stack_depth=4)(tf.constant(N), x)
  np.testing.assert_array_equal(out.numpy(), _expected(dtype))


def test_default_under_bare_xla_refuses_a_boolean_naming_the_function():
  run = _bare_xla(has_mult7, max_stack_depth=4)
  with pytest.raises(errors.BackendError) as e:
    run(tf.constant([3, 9, 2, 20]))
  assert e.value.loc.function == 'has_mult7'
  assert e.value.loc.filename == __file__
  assert 'returns a boolean' in e.value.message
  assert 'StackOverflowError' in e.value.message
  assert "on_error='status'" in e.value.hint
  assert 'compile_nested_output' in e.value.hint
  # Chosen: the members that fit are right, the others say so.
  out, ok = _bare_xla(has_mult7, max_stack_depth=4, on_error='status')(
      tf.constant([3, 9, 2, 20]))
  np.testing.assert_array_equal(ok.numpy(), [True, False, True, False])
  np.testing.assert_array_equal(out.numpy()[[0, 2]], [False, False])
  out, ok = _bare_xla(has_mult7, max_stack_depth=30, on_error='status')(
      tf.constant([3, 9, 2, 20]))
  np.testing.assert_array_equal(ok.numpy(), [True] * 4)
  np.testing.assert_array_equal(out.numpy(), [False, True, False, True])


def test_calls_without_recursion_are_not_refused_under_bare_xla():
  # Their depth is bounded and fits: no run of them can overflow.
  x = np.array([-1, 3, 6, 1], np.int32)
  expected = calls_without_recursion(x)
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.XlaErrorsWarning)
    out = _bare_xla(calls_without_recursion, max_stack_depth=1)(
        tf.constant(x))
  np.testing.assert_array_equal(out.numpy(), expected)


def test_call_depth_is_bounded_without_recursion_only():
  from autobatch_vm.vm import failures  # pylint: disable=g-import-not-at-top
  sig = [ab.TensorType(np.int32, ())]
  depth = lambda f: failures.call_depth(ctx.program_lowered(f, sig))  # pylint: disable=unnecessary-lambda-assignment
  assert depth(has_mult7) is None
  assert depth(calls_without_recursion) in (0, 1)
  assert depth(calls_in_a_loop) in (0, 1)
  n = np.array([0, 3, 5, 9], np.int32)
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.XlaErrorsWarning)
    out = _bare_xla(calls_in_a_loop, max_stack_depth=1)(tf.constant(n))
  np.testing.assert_array_equal(out.numpy(), calls_in_a_loop(n))


def test_compile_nested_output_and_stage_raise_or_report_status():
  n, x = tf.constant(N), tf.constant(VALUES.astype(np.bool_))
  run = ab.xla.compile_nested_output(
      lambda n, x: walk(n, x, max_stack_depth=4))
  with pytest.raises(errors.StackOverflowError, match=r'members \[1, 3\]'):
    run(n, x)
  status = ab.xla.compile_nested_output(
      lambda n, x: walk(n, x, max_stack_depth=4, on_error='status'))
  out, ok = status(n, x)
  np.testing.assert_array_equal(ok.numpy(), ~FAILED)
  np.testing.assert_array_equal(out.numpy(), _expected(np.bool_))
  staged = ab.stage(walk, jit_compile=True, max_stack_depth=4,
                    on_error='status')
  out, ok = staged(n, x)
  np.testing.assert_array_equal(ok.numpy(), ~FAILED)
  np.testing.assert_array_equal(out.numpy(), _expected(np.bool_))


@pytest.mark.parametrize('mode', ['eager', 'graph'])
def test_status_eagerly_and_in_a_graph(mode):
  n, x = tf.constant(N), tf.constant(VALUES.astype(np.float32))
  call = lambda n, x: walk(n, x, max_stack_depth=4, on_error='status')  # pylint: disable=unnecessary-lambda-assignment
  if mode == 'graph':
    call = tf.function(call)
  out, ok = call(n, x)
  np.testing.assert_array_equal(ok.numpy(), ~FAILED)
  np.testing.assert_array_equal(out.numpy(), _expected(np.float32))
  # The default still raises there.
  with pytest.raises((errors.StackOverflowError,
                      tf.errors.InvalidArgumentError),
                     match='max_stack_depth=4'):
    walk(n, x, max_stack_depth=4) if mode == 'eager' else tf.function(
        lambda n, x: walk(n, x, max_stack_depth=4))(n, x)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: np.dtype(d).name)
def test_status_on_numpy_marks_failed_members_keeps_the_others(dtype):
  x = VALUES.astype(dtype)
  out, ok = walk(N, x, max_stack_depth=20, on_error='status')
  np.testing.assert_array_equal(out, x)
  assert ok.dtype == np.bool_ and ok.all()
  out, ok = walk(N, x, max_stack_depth=4, on_error='status')
  np.testing.assert_array_equal(ok, ~FAILED)
  np.testing.assert_array_equal(out, _expected(dtype))
  with pytest.raises(errors.StackOverflowError, match='max_stack_depth=4'):
    walk(N, x, max_stack_depth=4)


@ctx.batch
def checked_root(x, n):
  """Newton's square root of `x` in `n` steps; asserts x >= 0."""
  assert x >= 0, 'a negative input'
  r = x + 1.0
  i = 0
  while i < n:
    r = (r + x / r) / 2
    i += 1
  return r


@ctx.batch
def nodes(n):
  """The nodes of a Fibonacci call tree (a branching recursion: stackless
  on NumPy by default); a negative `n` fails an assert at a leaf."""
  if n <= 1:
    assert n >= 0, 'a negative size'
    return 1
  return nodes(n - 1) + nodes(n - 2) + 1


def test_status_on_numpy_stops_each_failing_member_at_its_error():
  # Members fail at different steps: asserts first, then max_steps.
  x = np.array([4.0, -1.0, 9.0, 2.0, -3.0])
  n = np.array([3, 3, 50, 2, 1])
  out, ok = checked_root(x, n, max_steps=30, on_error='status')
  np.testing.assert_array_equal(ok, [True, False, False, True, False])
  want = checked_root(x[ok], n[ok], dry_run=True)
  np.testing.assert_allclose(out[ok], want)
  assert np.isnan(out[~ok]).all()
  with pytest.raises(errors.AssertionFailedError, match=r'members \[1, 4\]'):
    checked_root(x, n, max_steps=30)


def test_status_on_numpy_in_stackless_mode():
  n = np.array([5, -2, 7, 3])
  assert ctx.chooses_stackless(nodes, [ab.TensorType(np.int64, ())])
  # Chosen for the call, stackless mode hands a failing run to the VM.
  out, ok = nodes(n, on_error='status')
  np.testing.assert_array_equal(ok, [True, False, True, True])
  np.testing.assert_array_equal(out[ok], nodes(n[ok], dry_run=True))
  assert out[1] == np.iinfo(np.int64).min
  # Asked for, and in a dry run, the first error is raised.
  with pytest.raises(errors.AssertionFailedError):
    nodes(n, stackless=True, on_error='status')
  with pytest.raises(AssertionError):
    nodes(n, dry_run=True, on_error='status')


def test_bad_on_error_is_refused():
  with pytest.raises(errors.ArgumentError, match="on_error must be 'raise'"):
    walk(N, VALUES, on_error='nan')


def test_a_per_member_math_failure_under_bare_xla_poisons_and_warns():
  # `int(nan)` gave the failing member a plausible 0 under a bare
  # jit_compile, with no warning (an assert there poisons and warns).
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def truncated(x):
    return int(x) + 1

  x = tf.constant([1.5, np.nan, -2.5])
  with pytest.warns(errors.XlaErrorsWarning):
    out = _bare_xla(truncated)(x)
  np.testing.assert_array_equal(out.numpy(), [2, np.iinfo(np.int64).min, -1])
  out, ok = _bare_xla(truncated, on_error='status')(x)
  np.testing.assert_array_equal(ok.numpy(), [True, False, True])
