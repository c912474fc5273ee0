"""Fibonacci benchmark on the TensorFlow backend: tf.function and XLA.

    python benchmarks/tf_fibonacci.py [--batch_sizes=64,1024] [--repeats=3]
                                      [--modes=function,xla] [--eager]

n ~ U[8, 16).  For each mode the batched call is wrapped once in
`tf.function` (with `jit_compile=True` for xla), run once to trace and
compile (reported as "first call"), then timed: the median of `repeats`
calls, each ending with the result fetched to NumPy.
Reference (TFP 0.25 auto_batching, TensorFlowBackend, 2-core machine):
B=1024: 1.00 s under tf.function, 1.34 s under XLA.
"""

import os
import statistics
import sys
import time
import warnings

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import autobatch_vm as ab

# Timed like TFP's runs, under a bare jit_compile=True (where an overflow
# would poison outputs, not raise): the tracing-time warning is known here.
warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list('batch_sizes', ['64', '1024'], 'Batch sizes.')
flags.DEFINE_list('modes', ['function', 'xla'], 'function, xla, eager.')
flags.DEFINE_integer('repeats', 3, 'Timed repeats (median reported).')
flags.DEFINE_integer('while_parallel_iterations', 10,
                     'TensorFlowBackend(while_parallel_iterations=...).')

TFP_REFERENCE = {('function', 1024): 1.00, ('xla', 1024): 1.34}
MAX_STACK_DEPTH = 20

fibonacci = workloads.fibonacci
fibonacci_ref = workloads.fibonacci_ref


def make_runner(mode, backend):
  def run(n):
    return fibonacci(n, max_stack_depth=MAX_STACK_DEPTH, backend=backend)
  if mode == 'eager':
    return run
  return tf.function(run, jit_compile=(mode == 'xla'))


def measure(mode, batch, repeats, backend):
  rng = np.random.default_rng(batch)
  n_np = rng.integers(8, 16, size=batch)
  n = tf.constant(n_np)
  run = make_runner(mode, backend)
  start = time.perf_counter()
  result = run(n).numpy()
  first = time.perf_counter() - start
  expected = [fibonacci_ref(int(k)) for k in n_np]
  if result.tolist() != expected:
    raise AssertionError(f'wrong result in mode {mode}, batch {batch}')
  times = []
  with workloads.no_garbage_collection():
    for _ in range(repeats):
      start = time.perf_counter()
      run(n).numpy()
      times.append(time.perf_counter() - start)
  return first, statistics.median(times)


def main(argv):
  del argv
  backend = ab.TensorFlowBackend(
      while_parallel_iterations=FLAGS.while_parallel_iterations)
  print(f'TensorFlow {tf.__version__}; fibonacci, n ~ U[8, 16), '
        f'median of {FLAGS.repeats} after a warm-up call')
  print(f'{"B":>6} {"mode":>9} {"first call (s)":>15} {"time (s)":>10} '
        f'{"members/s":>11} {"TFP (s)":>8} {"speed-up":>9}')
  for b in [int(x) for x in FLAGS.batch_sizes]:
    for mode in FLAGS.modes:
      first, t = measure(mode, b, FLAGS.repeats, backend)
      ref = TFP_REFERENCE.get((mode, b))
      ref_text = f'{ref:.2f}' if ref else '-'
      ratio = f'{ref / t:.1f}x' if ref else '-'
      print(f'{b:>6} {mode:>9} {first:>15.3f} {t:>10.4f} {b / t:>11.0f} '
            f'{ref_text:>8} {ratio:>9}', flush=True)


if __name__ == '__main__':
  app.run(main)
