"""A size computed in an earlier statement of a batch-aware function.

`n = v.shape[1]`, `v.ndim`, `len(v[0])` and integer arithmetic on them
are one Python int for the call's shapes (`passes.size_folding`), so
`np.zeros((len(v), n))` in a later statement makes the array one member's
code makes; `len(v)` of a tensor is its first axis inside a graph too.
Each program runs batched on NumPy (stack VM, stackless) and TensorFlow
(eager, `tf.function`, XLA) against its dry run, and the dry run against
plain Python per member.  A count of members (`n = len(v)`) stays
refused.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

_ctx = ab.Context()


@_ctx.batch()
def _filled(v):
  n = v.shape[1]
  out = np.zeros(v.shape[:1] + (n,))
  return out + n


@_ctx.batch()
def _filled_then_changed(v):
  n = v.shape[1]
  out = np.zeros(v.shape[:1] + (n,))
  n = n - 1
  return out + n


@_ctx.batch()
def _counted_down(v):
  n = v.shape[1]
  out = np.zeros((len(v), n))
  while n > 0:
    out = out + 1
    n -= 1
  return out


@_ctx.batch()
def _padded(x, n):
  return np.zeros((len(x), n)) + x[:, :1]


@_ctx.batch()
def _sizes(v):
  n = v.shape[1]
  m = len(v[0]) * 2 - v.ndim + n // 2
  if n > 2:
    w = _padded(v, m)
  else:
    w = _padded(v, m) * 2.0
  return w.sum(axis=-1) + v[:, n - 1], n, m


def _plain(name, v):
  """One member's results, as plain Python."""
  n = len(v)
  if name == '_filled':
    return np.zeros(n) + n
  if name == '_filled_then_changed':
    return np.zeros(n) + n - 1
  if name == '_counted_down':
    return np.zeros(n) + n
  m = len(v) * 2 - 2 + n // 2   # (batched, v.ndim counts the batch axis)
  w = (np.zeros(m) + v[0]) * (1.0 if n > 2 else 2.0)
  return w.sum() + v[n - 1], n, m


@pytest.mark.parametrize('fn', [_filled, _filled_then_changed,
                                _counted_down, _sizes],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize('width', [2, 4])
def test_a_size_of_an_earlier_statement_makes_an_array(fn, width):
  v = np.arange(3.0 * width).reshape(3, width)

  def check(out):
    want = [_plain(fn.__name__, row) for row in v]
    if isinstance(want[0], tuple):
      for got, w in zip(out, zip(*want)):
        np.testing.assert_allclose(got, np.stack(w))
    else:
      np.testing.assert_allclose(out, np.stack(want))
  run_everywhere(fn, [v], check=check)


@_ctx.batch()
def _tuple_sizes(v, w):
  n, m = v.shape[1], w.shape[1]
  k, j = v.shape[-1], w.shape[-1]
  return np.ones((v.shape[0], n + 1, m + 1)).sum(axis=(1, 2)) + k * j


def test_sizes_assigned_together_from_a_tuple_make_an_array():
  v = np.arange(6.0).reshape(2, 3)
  w = np.arange(8.0).reshape(2, 4)

  def check(out):
    np.testing.assert_allclose(out, [4 * 5 + 12] * 2)
  run_everywhere(_tuple_sizes, [v, w], check=check)


@_ctx.batch()
def _counts_members(v):
  n = len(v)
  return np.zeros(n)


def test_a_count_of_members_is_no_size():
  with pytest.raises(errors.TypeInferenceError, match='counts the members'):
    _counts_members(np.ones((3, 2)))


@_ctx.batch()
def _shapes_unpacked(v, w):
  (k,), (j,) = v.shape[1:], w.shape[1:]
  depth = v.shape.rank if hasattr(v.shape, 'rank') else v.ndim
  z = np.zeros(v.shape) + 1
  return v.sum(axis=1) * k + w.sum(axis=1) * j + depth + z.sum(axis=1)


def test_a_slice_of_a_shape_unpacks_as_numpys_tuple():
  # On TensorFlow `v.shape[1:]` was a TensorShape, which type inference
  # took for an int64 array: "cannot unpack"; `.rank` stays TensorShape's.
  v, w = np.ones((3, 4)), np.ones((3, 2))

  def check(out):
    np.testing.assert_allclose(out, [16 + 4 + 2 + 4] * 3)
  run_everywhere(_shapes_unpacked, [v, w], check=check)
  tf = pytest.importorskip('tensorflow')
  unknown = tf.function(_shapes_unpacked, input_signature=[
      tf.TensorSpec([None, 4], tf.float64), tf.TensorSpec([None, 2],
                                                           tf.float64)])
  np.testing.assert_allclose(unknown(v, w), [26] * 3)
