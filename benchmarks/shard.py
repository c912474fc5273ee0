"""Sharded calls: 1 vs 2 workers, balanced vs contiguous splits.

    OPENBLAS_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/shard.py
    python benchmarks/shard.py --parts=dask --batch_size=65536
    python benchmarks/shard.py --parts=xla --xla_batch_size=16384

A skewed fib workload: n mostly small (U[4, 12)), one member in 16 large
(U[16, 20)), the large ones first, so that contiguous chunks put them all
in one shard.

- dask: NumPy on a `dask.distributed.LocalCluster` of two worker processes
  (one thread each).  The batched call in this process; one shard on one
  worker; two workers with contiguous, interleaved and cost-balanced
  splits; and 8 shards over the two workers.
- xla: TensorFlow with two logical CPU devices, each shard XLA-compiled
  (`jit_compile=True`): one shard on one device, and two devices with
  contiguous and interleaved splits.

Cells are timed in turns, `--repeats` rounds after a warm-up call each;
medians.  Each row also shows the shards' imbalance (largest shard's work
over the mean, or steps x members under XLA) and the speed-up over the
one-worker row.  `--out=FILE` also writes the tables as Markdown
(benchmarks/results/shard.md).
"""

import os
import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_list('parts', ['dask', 'xla'], 'dask and/or xla.')
flags.DEFINE_integer('batch_size', 65536, 'Batch size of the Dask part.')
flags.DEFINE_integer('xla_batch_size', 16384, 'Batch size of the XLA part.')
flags.DEFINE_integer('repeats', 5, 'Timed rounds (median reported).')
flags.DEFINE_integer('seed', 0, 'Random seed of the workload.')
flags.DEFINE_string('out', None, 'Also write the tables to this Markdown '
                    'file.')
flags.DEFINE_enum('xla_devices', 'cpu', ['cpu', 'gpu'], 'The XLA part\'s two '
                  'devices: logical CPU devices, or two logical GPUs on the '
                  'first GPU.')


def skewed_fib_n(batch, seed=0):
  """n ~ U[4, 12), with the first 1/16 of the members n ~ U[16, 20)."""
  rng = np.random.default_rng(seed)
  n = rng.integers(4, 12, size=batch)
  large = max(batch // 16, 1)
  n[:large] = rng.integers(16, 20, size=large)
  return n


def fib_cost(n):
  """fib's calls grow as the golden ratio to the n: a cost per member."""
  return 1.618 ** np.asarray(n, np.float64)


def interleaved_medians(cells, repeats):
  """{name: median seconds}: each cell called once, then `repeats` rounds
  in turns."""
  for fn, _ in cells.values():
    fn()
  times = {name: [] for name in cells}
  for _ in range(repeats):
    for name, (fn, _) in cells.items():
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(t) for name, t in times.items()}


_MARKDOWN = []


def report(title, cells, medians, base):
  """Prints a table, and keeps it as Markdown for `--out`."""
  print(title)
  print(f'  {"configuration":<34}{"seconds":>9}{"vs 1 worker":>13}'
        f'{"imbalance":>11}  shard steps')
  _MARKDOWN.extend(['', title, '',
                    '| configuration | seconds | vs 1 worker | imbalance | '
                    'steps per shard |', '|---|---|---|---|---|'])
  for name, (_, stats) in cells.items():
    s = stats()
    imbalance = f'{s.imbalance:.2f}' if s is not None else '-'
    steps = ','.join(str(x) for x in s.steps) if s is not None else '-'
    ratio = medians[base] / medians[name]
    print(f'  {name:<34}{medians[name]:>9.3f}{ratio:>12.2f}x'
          f'{imbalance:>11}  {steps}')
    _MARKDOWN.append(f'| {name} | {medians[name]:.3f} | {ratio:.2f}x | '
                     f'{imbalance} | {steps.replace(",", ", ")} |')


def write_markdown(path):
  """Writes the tables kept by `report` with what they ran on."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import workloads  # pylint: disable=g-import-not-at-top
  load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
  head = ['# Sharded calls: 1 vs 2 workers, balanced vs contiguous', '',
          f'`python benchmarks/shard.py --out={path}`: {os.cpu_count()} '
          f'CPUs ({workloads.cpu_model()}), numpy {np.__version__}, '
          f'TensorFlow {tf.__version__}; load average at the end {load}.',
          '', __doc__.split('\n\n', 2)[2].strip()]
  with open(path, 'w') as f:
    f.write('\n'.join(head + _MARKDOWN) + '\n')


def dask_part(batch, repeats, seed):
  import logging  # pylint: disable=g-import-not-at-top
  import distributed  # pylint: disable=g-import-not-at-top
  logging.getLogger('distributed').setLevel(logging.WARNING)
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  from benchmarks.workloads import fibonacci  # pylint: disable=g-import-not-at-top
  n = skewed_fib_n(batch, seed)
  depth = int(n.max()) + 1
  expected = fibonacci(n, max_stack_depth=depth)
  with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                processes=True,
                                dashboard_address=None) as cluster, \
      distributed.Client(cluster) as client:
    def sharded(**kwargs):
      return ab.shard(fibonacci, executor=client, max_stack_depth=depth,
                      **kwargs)
    configs = {
        '1 worker (1 shard)': sharded(shards=1),
        '2 workers, contiguous': sharded(split='contiguous'),
        '2 workers, interleaved': sharded(split='interleaved'),
        '2 workers, cost=1.618**n': sharded(cost=fib_cost),
        '2 workers, 8 contiguous shards': sharded(split='contiguous',
                                                  shards=8),
    }
    cells = {'in process, unsharded': (
        lambda: fibonacci(n, max_stack_depth=depth), lambda: None)}
    for name, fn in configs.items():
      out = fn(n)
      assert np.array_equal(out, expected), name
      cells[name] = ((lambda fn=fn: fn(n)), (lambda fn=fn: fn.last_stats))
    medians = interleaved_medians(cells, repeats)
    report(f'fib, NumPy on Dask (2 worker processes), B={batch}, '
           f'n mostly U[4,12), 1/16 U[16,20) first', cells, medians,
           '1 worker (1 shard)')
    _MARKDOWN.extend(['', 'Seconds each shard took on its worker, and the '
                      'whole call, in one more call of each:', ''])
    for name, fn in configs.items():
      fn(n)
      s = fn.last_stats
      seconds = ', '.join(f'{x.seconds:.3f}' for x in s.shards)
      print(f'  {name}: worker seconds per shard [{seconds}], '
            f'call {s.seconds:.3f}')
      _MARKDOWN.append(f'- {name}: {seconds}; call {s.seconds:.3f}')


def xla_part(batch, repeats, seed, kind='CPU'):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  from benchmarks.workloads import fibonacci  # pylint: disable=g-import-not-at-top
  devices = [d.name for d in tf.config.list_logical_devices(kind)]
  strategy = tf.distribute.MirroredStrategy(devices)
  n = skewed_fib_n(batch, seed)
  depth = int(n.max()) + 1
  x = tf.constant(n)
  expected = fibonacci(n, max_stack_depth=depth)
  configs = {
      '1 device (1 shard)': dict(shards=1),
      '2 devices, contiguous': dict(split='contiguous'),
      '2 devices, interleaved': dict(split='interleaved'),
  }
  cells = {}
  for name, kwargs in configs.items():
    fn = ab.shard(fibonacci, strategy=strategy, jit_compile=True,
                  max_stack_depth=depth, **kwargs)
    assert np.array_equal(fn(x).numpy(), expected), name
    cells[name] = ((lambda fn=fn: fn(x).numpy()),
                   (lambda fn=fn: _xla_stats(fn.last_stats)))
  medians = interleaved_medians(cells, repeats)
  report(f'fib, XLA on {len(devices)} logical {kind} devices, B={batch}, same '
         'workload (imbalance: steps x members)', cells, medians,
         '1 device (1 shard)')


class _xla_stats:  # pylint: disable=invalid-name
  """ShardStats whose imbalance is that of steps x members (XLA computes
  every lane of a step)."""

  def __init__(self, stats):
    self.steps = stats.steps
    self.imbalance = stats.step_imbalance


def main(argv):
  del argv
  if 'xla' in FLAGS.parts:
    # Logical devices must be set before TensorFlow initializes them.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if FLAGS.xla_devices == 'gpu':
      tf.config.set_logical_device_configuration(
          tf.config.list_physical_devices('GPU')[0],
          [tf.config.LogicalDeviceConfiguration(memory_limit=8192)] * 2)
    else:
      tf.config.set_logical_device_configuration(
          tf.config.list_physical_devices('CPU')[0],
          [tf.config.LogicalDeviceConfiguration()] * 2)
  if 'dask' in FLAGS.parts:
    dask_part(FLAGS.batch_size, FLAGS.repeats, FLAGS.seed)
  if 'xla' in FLAGS.parts:
    xla_part(FLAGS.xla_batch_size, FLAGS.repeats, FLAGS.seed,
             FLAGS.xla_devices.upper())
  if FLAGS.out:
    write_markdown(FLAGS.out)


if __name__ == '__main__':
  app.run(main)
