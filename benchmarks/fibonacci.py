"""Fibonacci benchmark on the NumPy backend.

    python benchmarks/fibonacci.py [--batch_sizes=1,64,1024] [--repeats=5]

n ~ U[8, 16).  Reports the median wall time after one warm-up run, VM
steps, utilization, and the unbatched baseline (each member run alone as
plain Python through `dry_run`, measured on a subset and scaled).
Reference (TFP 0.25 auto_batching, NumPy backend, 2-core machine):
B=64 2.64 s, B=1024 228 s.
"""

import os
import sys

from absl import app
from absl import flags
import numpy as np


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list('batch_sizes', ['1', '64', '1024'], 'Batch sizes.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats (median reported).')
flags.DEFINE_boolean('stackless', False, 'Use the stackless executor.')
flags.DEFINE_enum('schedule', 'lowest', ['lowest', 'most'], 'VM schedule.')

TFP_REFERENCE = {64: 2.64, 1024: 228.0}

fibonacci = workloads.fibonacci


def measure(batch, repeats, stackless=False, schedule='lowest'):
  rng = np.random.default_rng(batch)
  n = rng.integers(8, 16, size=batch)
  t = workloads.median_time(
      lambda: fibonacci(n, max_stack_depth=20, stackless=stackless,
                        schedule=schedule), repeats)
  stats = fibonacci.last_stats
  subset = n[:min(batch, 16)]
  t_alone = workloads.median_time(lambda: fibonacci(subset, dry_run=True), 1)
  return dict(batch=batch, seconds=t, steps=stats.steps,
              utilization=stats.utilization,
              members_per_s=batch / t,
              alone_seconds=t_alone * batch / len(subset))


def main(argv):
  del argv
  print(f'{"B":>6} {"time (s)":>10} {"members/s":>11} {"steps":>7} '
        f'{"util":>6} {"alone (s)":>10} {"vs TFP":>8}')
  rows = []
  for b in [int(x) for x in FLAGS.batch_sizes]:
    r = measure(b, FLAGS.repeats, FLAGS.stackless, FLAGS.schedule)
    rows.append(r)
    ref = TFP_REFERENCE.get(b)
    ratio = f'{ref / r["seconds"]:.0f}x' if ref else '-'
    print(f'{b:>6} {r["seconds"]:>10.4f} {r["members_per_s"]:>11.0f} '
          f'{r["steps"]:>7} {r["utilization"]:>6.2f} '
          f'{r["alone_seconds"]:>10.3f} {ratio:>8}', flush=True)
  by_b = {r['batch']: r['seconds'] for r in rows}
  if 64 in by_b and 1024 in by_b:
    print(f'B=1024 / B=64 time ratio: {by_b[1024] / by_b[64]:.2f} '
          '(target <= 3)')


if __name__ == '__main__':
  app.run(main)
