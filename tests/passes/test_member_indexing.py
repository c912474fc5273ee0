"""Indexing a batched value by a per-member index (`member_indexing`).

`x[:, j]` with a per-member `j` (a loop counter, an argument) is NumPy's
outer indexing on the batch: `[batch, batch]`, silently wrong where a
reduction follows; `x[j]` reads other members' rows.  Type inference
refuses them, naming the line and the per-member gathers that work, and
leaves constant indices and per-member gathers alone.
"""

import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

try:
  import tensorflow as tf
except ImportError:  # pragma: no cover
  tf = None

X = np.arange(12.0).reshape(3, 4)
N = np.array([1, 2, 0])
K = 1
TABLE = np.arange(10.0) * 3

NUMPY_MODES = ({'stackless': False}, {'stackless': True})


def _tf_modes():
  if tf is None:
    return ()
  return ({'backend': ab.TensorFlowBackend()},)


def _fails(fn, args, text, what_works, modes=NUMPY_MODES):
  """`fn(*args, **mode)` raises a TypeInferenceError at `text`'s line for
  each mode, naming `what_works`."""
  for mode in modes:
    with pytest.raises(errors.TypeInferenceError) as info:
      fn(*args, **mode)
    message = str(info.value)
    assert f'`{text}`' in message, message
    assert f"function '{fn.__name__}'" in message, message
    assert __file__ in message, message
    assert text in info.value.loc.source_line, message
    for words in what_works:
      assert words in message, message


_WORKS = ('np.take_along_axis(x, j[:, None], axis=1)[:, 0]',
          'tf.gather(x, j, batch_dims=1)', 'x[np.arange(len(x)), j]')


def _column_walk():
  """`walk(x, n)`: the sum of x's first n columns, read as `x[:, j]` with
  a per-member counter `j`."""
  ctx = ab.Context()

  @ctx.batch
  def walk(x, n):
    j = 0
    s = x[:, 0] * 0
    while j < n:
      s = s + x[:, j]
      j = j + 1
    return s
  return walk


def test_while_counter_column():
  _fails(_column_walk(), (X, N), 'x[:, j]', _WORKS,
         NUMPY_MODES + _tf_modes())


def test_range_counter_column():
  ctx = ab.Context()

  @ctx.batch
  def walk(x, n):
    s = x[:, 0] * 0
    for i in range(n):
      s = s + x[:, i]
    return s

  _fails(walk, (X, N), 'x[:, i]',
         ('np.take_along_axis(x, i[:, None], axis=1)[:, 0]',
          'tf.gather(x, i, batch_dims=1)'), NUMPY_MODES + _tf_modes())


def test_silently_wrong_forms_are_refused():
  ctx = ab.Context()

  @ctx.batch
  def column(x, j):
    return x[:, j]

  @ctx.batch
  def summed(x, j):
    return x[:, j].sum(axis=-1)

  @ctx.batch
  def rows(x, j):
    return x[j] * 2.0

  # Batched, these gave (B, B), the sum of every member's index, and other
  # members' rows, without an error.
  _fails(column, (X, N), 'x[:, j]', _WORKS)
  _fails(summed, (X, N), 'x[:, j]', _WORKS)
  _fails(rows, (X, N), 'x[j]', ('indexes the batch axis',) + _WORKS)


def test_later_axes_and_ellipsis():
  ctx = ab.Context()

  @ctx.batch
  def third(x, j):
    return x[:, :, j]

  @ctx.batch
  def last(x, j):
    return x[..., j]

  x = np.arange(24.0).reshape(2, 3, 4)
  j = np.array([1, 3])
  _fails(third, (x, j), 'x[:, :, j]', ('tf.gather(x, j, axis=2, batch_dims=1)',
                                       'axis=2) on NumPy'))
  _fails(last, (x, j), 'x[..., j]', ('tf.gather(x, j, axis=-1, batch_dims=1)',))


def _agrees(fn, args, modes=NUMPY_MODES):
  expected = fn(*args, dry_run=True)
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    for mode in modes:
      np.testing.assert_allclose(np.asarray(fn(*args, **mode)), expected)


def test_constant_indices_and_per_member_gathers_run():
  ctx = ab.Context()

  @ctx.batch
  def along(x, n):
    j = n * 0
    s = x[:, 0] * 0
    while j < n:
      s = s + np.take_along_axis(x, j[:, None], axis=1)[:, 0]
      j = j + 1
    return s

  @ctx.batch
  def arange(x, n):
    s = x[:, 0] * 0
    for j in range(n):
      s = s + x[np.arange(len(x)), j]
    return s

  @ctx.batch
  def constants(x, n):
    return x[:, 0] + x[:, K] + x[:, x.shape[-1] - 1] + x[..., 1] + n

  @ctx.batch
  def diagonal(x, n):
    return np.diagonal(x[:, n])   # (B, B), then each member's own: right

  @ctx.batch
  def table(x, n):
    return TABLE[n] + x[:, 0]

  @ctx.batch
  def pair(x, n):
    p = (x, n)
    return p[0][:, 1] + p[1]

  for fn in (along, arange, constants, diagonal, table, pair):
    _agrees(fn, (X, N))


def _gather_walk():
  """`walk(x, n)` as `_column_walk`'s, each column read by a per-member
  gather (and column K by a constant index)."""
  ctx = ab.Context()

  @ctx.batch
  def walk(x, n):
    j = n * 0
    s = x[:, 0] * 0
    while j < n:
      s = s + tf.gather(x, j, batch_dims=1) + x[:, K]
      j = j + 1
    return s
  return walk


@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
def test_tf_gather_with_batch_dims_runs():
  _agrees(_gather_walk(), (tf.constant(X), tf.constant(N)), _tf_modes())


def _positive(v):
  if not np.all(v > 2.0):
    raise ValueError('needs values above 2')
  return v


def test_unchecked_primitive_warns():
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda types: ab.TensorType(np.float64, ()))
  def picked(x, j):
    return _positive(x[:, j]).sum(axis=-1)

  with pytest.warns(errors.MemberMixingWarning, match='could not be checked'):
    picked(X + 3.0, np.array([0, 0, 0]))


@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
@pytest.mark.parametrize('jit', [False, True])
def test_inside_tf_function_the_check_runs_eagerly(jit):
  """Inside the user's `tf.function` the made-up inputs run eagerly, so
  the same mistake gets the same message (it was an unrelated message
  about a Python literal's dtype), and per-member gathers still run."""
  walk, gathered = _column_walk(), _gather_walk()
  args = (tf.constant(X), tf.constant(N))
  with pytest.raises(errors.TypeInferenceError) as info:
    tf.function(walk, jit_compile=jit)(*args)
  message = str(info.value)
  assert '`x[:, j]` indexes `x` with `j`' in message, message
  assert 'tf.gather(x, j, batch_dims=1)' in message, message
  got = tf.function(gathered, jit_compile=jit)(*args)
  want = [sum(X[b, j] + X[b, K] for j in range(N[b])) for b in range(3)]
  np.testing.assert_allclose(got.numpy(), want)
