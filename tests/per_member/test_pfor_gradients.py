"""Gradients through pfor's slices, tiles and pads, under XLA too.

A per-member function on TensorFlow whose loop slices (`x[1:4]`,
`x[::2]`: StridedSlice; `tf.slice`: Slice), tiles (`tf.tile`) and pads
(`tf.pad`, also with a fill value: Pad, PadV2) one member's vector, with
weights in a `tf.Variable`.  Its values equal a plain loop over members
and the dry run; the gradient with respect to the variable, batched
(eagerly, in a `tf.function`, under `jit_compile=True`), equals the dry
run's.  Under XLA the gradient needs the multiples of pfor's Tile, and
the axes of its reductions and scans, as constants
(`per_member.tf_vectorize`).
"""

import numpy as np
import pytest

import autobatch_vm as ab

tf = pytest.importorskip('tensorflow')

WEIGHTS = tf.Variable(np.linspace(-0.5, 0.7, 12).reshape(3, 4))
ctx = ab.Context()


@ctx.batch(per_member=True)
def reshaped(x, n):
  h = x
  i = 0
  while i < n:
    head = h[1:4] * WEIGHTS[0, :3]
    tiled = tf.tile(head, [2])
    padded = tf.pad(h[::2][:2] * WEIGHTS[1, 1:3], [[2, 2]])
    filled = tf.pad(h[4:] * WEIGHTS[2, 1], [[1, 3]], constant_values=0.5)
    part = tf.slice(h, [1], [3])
    h = tf.tanh(tiled + padded + filled +
                tf.concat([part, part * WEIGHTS[2, 0]], 0))
    i += 1
  return h


def _inputs():
  rng = np.random.default_rng(0)
  return (tf.constant(rng.normal(size=(4, 6))),
          tf.constant(np.array([1, 3, 0, 2])))


def _gradient(*args, **kwargs):
  with tf.GradientTape() as tape:
    total = tf.reduce_sum(reshaped(*args, **kwargs) ** 2)
  return tape.gradient(total, WEIGHTS)


def test_values_equal_a_loop_and_the_dry_run():
  x, n = _inputs()
  expected = np.stack([reshaped.python_function(x[k], n[k]).numpy()
                       for k in range(len(n))])
  for got in (reshaped(x, n), reshaped(x, n, stackless=True),
              reshaped(x, n, dry_run=True)):
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize('mode', [
    'eager', pytest.param('function', marks=pytest.mark.slow), 'xla'])
def test_gradients_equal_the_dry_runs(mode):
  x, n = _inputs()
  alone = _gradient(x, n, dry_run=True).numpy()
  if mode == 'eager':
    got = _gradient(x, n)
  else:
    # max_steps bounds the VM's loop, which XLA needs for a gradient.
    got = tf.function(lambda *a: _gradient(*a, max_steps=50),
                      jit_compile=mode == 'xla', autograph=False)(x, n)
  assert np.count_nonzero(alone) == 7   # the weights the loop reads
  np.testing.assert_allclose(got.numpy(), alone, rtol=1e-9, atol=1e-12)


@ctx.batch(per_member=True)
def reduced(q, n):
  # NumPy's reductions and scans of a member's vector (Sum, Mean, Max,
  # Prod, Cumsum under pfor): under XLA their gradients need the axes as
  # constants.
  e = 0.0
  k = 0
  while k < n:
    e = e + (np.mean(q * q) + np.max(q) + np.linalg.norm(q) +
             np.cumsum(q)[-1] + np.prod(q[:2]) + np.var(q) +
             np.sum(np.exp(q) / np.sum(np.exp(q)) * q))
    q = q * 0.9
    k += 1
  return e


@pytest.mark.parametrize('mode', ['eager', 'xla'])
def test_gradients_of_reductions_and_scans(mode):
  q, n = tf.constant(np.random.default_rng(1).normal(size=(4, 3))), (
      tf.constant(np.array([1, 2, 3, 0])))

  def gradient(q, n, **kwargs):
    with tf.GradientTape() as tape:
      tape.watch(q)
      total = tf.reduce_sum(reduced(q, n, **kwargs))
    return tape.gradient(total, q)

  def one(x, count):   # one member's, in TensorFlow's own ops
    with tf.GradientTape() as tape:
      tape.watch(x)
      e = tf.constant(0.0, tf.float64)
      y = x
      for _ in range(count):
        e += (tf.reduce_mean(y * y) + tf.reduce_max(y) + tf.norm(y) +
              tf.cumsum(y)[-1] + tf.reduce_prod(y[:2]) +
              tf.math.reduce_variance(y) +
              tf.reduce_sum(tf.exp(y) / tf.reduce_sum(tf.exp(y)) * y))
        y = y * 0.9
    return tape.gradient(e, x)
  alone = np.stack([np.zeros(3) if n[k] == 0 else one(q[k], int(n[k]))
                    for k in range(4)])
  if mode == 'eager':
    got = gradient(q, n)
  else:
    got = tf.function(lambda *a: gradient(*a, max_steps=50),
                      jit_compile=True, autograph=False)(q, n)
  assert np.count_nonzero(alone) == 9   # members that run the loop
  np.testing.assert_allclose(got.numpy(), alone, rtol=1e-9, atol=1e-12)
