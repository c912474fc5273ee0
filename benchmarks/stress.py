"""Load test: very large batches and deep stacks.

    python benchmarks/stress.py [--batch_size=100000] [--depth=1000]

Runs fibonacci (n ~ U[8,16)) and Collatz (n ~ U[1, 10^4)) at the given
batch size with max_stack_depth=--depth on NumPy (and TensorFlow with
--tf), and reports time, peak traced memory, and the VM state's memory as
the allocation promises it (stacks only for variables live across calls).
"""

import os
import sys
import time
import tracemalloc

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position
from autobatch_vm import virtual_machine

FLAGS = flags.FLAGS
flags.DEFINE_integer('batch_size', 100000, 'Batch members.')
flags.DEFINE_integer('depth', 1000, 'max_stack_depth.')
flags.DEFINE_boolean('tf', False, 'Also run on the TensorFlow backend.')

ctx = workloads.ctx
fibonacci = workloads.fibonacci
collatz = workloads.collatz


def promised_memory(fn, args, depth, backend):
  program = ctx.lowered_for_args(fn.name, args, backend)
  layout = virtual_machine.CompiledProgram(
      program, backend, len(args[0]), depth).layout
  full = [v for v, a in program.var_alloc.items()
          if a == ab.instructions.VariableAllocation.FULL]
  return layout.memory(), full


def run_one(name, fn, n, depth, backend, convert):
  args = [convert(n)]
  fn(*[convert(n[:4])], max_stack_depth=depth, backend=backend)  # compile
  tracemalloc.start()
  start = time.perf_counter()
  out = fn(*args, max_stack_depth=depth, backend=backend)
  seconds = time.perf_counter() - start
  _, peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  mem, full = promised_memory(fn, args, depth, backend)
  stats = fn.last_stats
  print(f'{name:<10} {backend.name:<6} B={len(n):<7} depth={depth:<5} '
        f'{seconds:8.2f} s  steps={stats.steps:<6} '
        f'util={stats.utilization:.2f}  peak traced={peak / 2**20:8.1f} MiB  '
        f'state: stacks={mem["stacks"] / 2**20:.1f} MiB '
        f'(FULL: {", ".join(full) or "none"}) '
        f'registers={mem["registers"] / 2**20:.1f} MiB '
        f'pc={mem["pc"] / 2**20:.1f} MiB', flush=True)
  return out


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  b, depth = FLAGS.batch_size, FLAGS.depth
  fib_n = rng.integers(8, 16, size=b)
  col_n = rng.integers(1, 10**4, size=b)
  backends = [(ab.NumpyBackend(), np.asarray)]
  if FLAGS.tf:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    backends.append((ab.TensorFlowBackend(), tf.constant))
  for backend, convert in backends:
    run_one('fibonacci', fibonacci, fib_n, depth, backend, convert)
    run_one('collatz', collatz, col_n, depth, backend, convert)


if __name__ == '__main__':
  app.run(main)
