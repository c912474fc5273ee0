"""Collatz step counts: a per-member `while` loop, batched.

Each member iterates n -> n/2 (n even) or 3n+1 (n odd) until it reaches 1
and counts its steps.  Members need very different numbers of iterations,
so the batch diverges: the VM keeps running the loop body for the members
still looping, masked, while finished members wait at the exit.  The
example prints the step counts, the VM's steps and its utilization (the
mean fraction of the batch active per executed block), and checks the
result against plain Python.

    python examples/collatz.py
    python examples/collatz.py --batch_size=1000 --high=100000
    python examples/collatz.py --branch_free     # a select instead of if/else
    python examples/collatz.py --backend=tf      # eager TensorFlow
"""

import time

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab

FLAGS = flags.FLAGS


def define_flags():
  """Command-line flags (defined only when run as a script, so that the
  examples can be imported together, e.g. by the tests)."""
  flags.DEFINE_integer('batch_size', 16, 'Number of batch members.')
  flags.DEFINE_integer('low', 1, 'Smallest starting value (inclusive).')
  flags.DEFINE_integer('high', 1000, 'Largest starting value (exclusive).')
  flags.DEFINE_integer('seed', 0, 'Random seed for the starting values.')
  flags.DEFINE_boolean('branch_free', False,
                       'Run the loop whose body selects per member instead of '
                       'branching (fewer blocks per iteration).')
  flags.DEFINE_enum('backend', 'numpy', ['numpy', 'tf'],
                    'numpy, or tf (eager TensorFlow; needs tf_backend).')
  flags.DEFINE_boolean('stackless', False, 'Use the stackless executor.')


ctx = ab.Context()


@ctx.batch()
def collatz_steps(n):
  """Steps until n reaches 1 (0 for n == 1)."""
  steps = 0
  while ab.truthy(n > 1):
    if ab.truthy(n % 2 == 0):
      n = n // 2
    else:
      n = 3 * n + 1
    steps += 1
  return steps


@ctx.batch()
def collatz_steps_branch_free(n):
  """The same loop; the body is one primitive, so it is one block.

  A conditional expression without batched calls in it is a per-member
  select (both sides are computed for every member), so the loop body has
  no branch and every iteration is a single VM step.
  """
  steps = 0
  while ab.truthy(n > 1):
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
  return steps


def collatz_plain(n):
  """Plain Python, one integer: the reference."""
  steps = 0
  while n > 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
  return steps


def tf_available():
  """Whether TensorFlow and autobatch_vm's TF backend can be imported."""
  try:
    from autobatch_vm import tf_backend  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


def run(n, branch_free=False, backend='numpy', stackless=False):
  """Returns (steps per member as a NumPy array, RunStats, seconds)."""
  fn = collatz_steps_branch_free if branch_free else collatz_steps
  start = time.perf_counter()
  if backend == 'tf':
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    out = fn(tf.constant(n), stackless=stackless)
    out = np.asarray(out)
  else:
    out = fn(n, stackless=stackless)
  elapsed = time.perf_counter() - start
  return np.asarray(out), fn.last_stats, elapsed


def main(argv):
  del argv
  backend = FLAGS.backend
  if backend == 'tf' and not tf_available():
    print('autobatch_vm.tf_backend is not available; running on NumPy.')
    backend = 'numpy'
  rng = np.random.default_rng(FLAGS.seed)
  n = rng.integers(FLAGS.low, FLAGS.high, size=FLAGS.batch_size)
  result, stats, elapsed = run(n, FLAGS.branch_free, backend,
                               FLAGS.stackless)
  expected = [collatz_plain(int(k)) for k in n]
  if FLAGS.batch_size <= 32:
    print(f'n:      {n.tolist()}')
    print(f'steps:  {result.tolist()}')
  else:
    print(f'{FLAGS.batch_size} members; steps min {result.min()}, '
          f'mean {result.mean():.1f}, max {result.max()}')
  assert result.tolist() == expected, (result, expected)
  print(f'matches plain Python for every member; {elapsed:.3f} s on '
        f'{backend}')
  if stats is not None:
    iterations = int(sum(expected))
    print(f'VM steps: {stats.steps}, utilization: {stats.utilization:.1%} '
          f'(loop iterations: {iterations} in total, {max(expected)} for '
          'the longest member)')
    print(stats)


if __name__ == '__main__':
  define_flags()
  app.run(main)
