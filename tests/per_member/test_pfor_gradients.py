"""Gradients through pfor's slices, tiles and pads, under XLA too.

A per-member function on TensorFlow whose loop slices (`x[1:4]`,
`x[::2]`: StridedSlice; `tf.slice`: Slice), tiles (`tf.tile`) and pads
(`tf.pad`, also with a fill value: Pad, PadV2) one member's vector, with
weights in a `tf.Variable`.  Its values equal a plain loop over members
and the dry run; the gradient with respect to the variable, batched
(eagerly, in a `tf.function`, under `jit_compile=True`), equals the dry
run's.  Under XLA the gradient needs the multiples of pfor's Tile as
constants (`per_member.tf_vectorize`).
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
