"""Hello world of autobatch_vm: doubly recursive Fibonacci, batched.

    python examples/fibonacci.py                 # NumPy backend
    python examples/fibonacci.py --backend=tf    # TensorFlow, tf.function
    python examples/fibonacci.py --batch_size=1024 --low=8 --high=16
    python examples/fibonacci.py --nostackless   # NumPy's stack VM

On NumPy the default mode runs this program stackless (a level's calls
together), as it does any branching recursion; `--nostackless` forces the
stack VM, `--stackless` stackless mode (also on TensorFlow, eagerly).
"""

import time

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab

FLAGS = flags.FLAGS
flags.DEFINE_integer('batch_size', 8, 'Number of batch members.')
flags.DEFINE_integer('low', 8, 'Smallest n (inclusive).')
flags.DEFINE_integer('high', 16, 'Largest n (exclusive).')
flags.DEFINE_integer('seed', 0, 'Random seed for the inputs.')
flags.DEFINE_enum('backend', 'numpy', ['numpy', 'tf', 'xla'],
                  'numpy, tf (tf.function) or xla (jit_compile=True).')
flags.DEFINE_boolean('stackless', None, 'stackless= of the call: True, '
                     'False (the stack VM), or unset: the default choice '
                     '(stackless on NumPy for this program, else the VM).')

ctx = ab.Context()


def fib_type(arg_types):
  return arg_types[0]


@ctx.batch(type_inference=fib_type)
def fibonacci(n):
  if n > 2:
    return fibonacci(n - 1) + fibonacci(n - 2)
  else:
    return 1


def unbatched_additions(n):
  """Additions plain recursion does for one member (the work batched)."""
  if n > 2:
    return 1 + unbatched_additions(n - 1) + unbatched_additions(n - 2)
  return 0


def run(n, backend, stackless):
  depth = int(max(n.max(), 1)) + 1
  if backend == 'numpy':
    return fibonacci(n, max_stack_depth=depth, stackless=stackless)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if stackless:
    return fibonacci(tf.constant(n), max_stack_depth=depth,
                     stackless=True).numpy()
  run = lambda x: fibonacci(x, max_stack_depth=depth)
  # Under XLA, compile_nested_output raises a stack overflow as an
  # exception after the compiled call (XLA itself cannot raise).
  fn = (ab.xla.compile_nested_output(run) if backend == 'xla'
        else tf.function(run))
  return fn(tf.constant(n)).numpy()


def main(argv):
  del argv
  rng = np.random.default_rng(FLAGS.seed)
  n = rng.integers(FLAGS.low, FLAGS.high, size=FLAGS.batch_size)
  start = time.perf_counter()
  result = run(n, FLAGS.backend, FLAGS.stackless)
  elapsed = time.perf_counter() - start
  expected = [int(fibonacci(np.array([k]), dry_run=True)[0]) for k in n]
  print(f'n:         {n.tolist()}')
  print(f'fib(n):    {np.asarray(result).tolist()}')
  assert np.asarray(result).tolist() == expected, (result, expected)
  print(f'matches each member run alone; {elapsed:.3f} s on {FLAGS.backend}')
  stats = fibonacci.last_stats
  if stats is not None and FLAGS.backend == 'numpy':
    additions = sum(unbatched_additions(int(k)) for k in n)
    add_label = next((label for label, loc in stats.block_loc.items()
                      if loc is not None and 'fibonacci(n - 1) +' in
                      (loc.source_line or '')
                      and stats.block_executions.get(label)), None)
    what = ('stackless mode, blocks run' if stats.stackless
            else 'stack VM, steps')
    print(f'{what}: {stats.steps}, mean utilization: '
          f'{stats.utilization:.1%}')
    if add_label is not None:
      # Stackless mode runs a member's two recursive calls as one call:
      # a frame holds every call of one recursion level.
      each = ('on a frame of one recursion level\'s calls' if
              stats.stackless else 'on the whole batch')
      print(f'batched additions executed: {stats.block_executions[add_label]}'
            f' (each {each}) vs {additions} unbatched')
    print(stats)


if __name__ == '__main__':
  app.run(main)
