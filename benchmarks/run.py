"""All benchmarks side by side: workloads x backends x batch sizes.

    python benchmarks/run.py            # full: B = 1, 64, 1024 (NUTS 1, 64, 256)
    python benchmarks/run.py --quick    # B = 1, 64 (NUTS 1, 16), fewer repeats
    python benchmarks/run.py --workloads=fibonacci,collatz --backends=numpy

For each cell: median wall time of `--repeats` calls after a warm-up call,
throughput in the workload's unit, peak traced memory (NumPy only), VM
steps, mean utilization, and baselines measured in the same run: every
member run alone (the dry-run loop, timed on a few members and scaled) and,
when tensorflow_probability is installed, TFP's auto_batching on the same
fibonacci program.  Writes benchmarks/results/results.md and results.png.
"""

import functools
import importlib.util
import os

# Multi-threaded OpenBLAS is pathological on small shared machines (a
# [64,25]@[25,1000] product: 31 ms with 2 threads, 0.7 ms with 1).
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import statistics
import sys
import time
import tracemalloc

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_boolean('quick', False, 'Small batch sizes and repeats.')
flags.DEFINE_list('workloads', ['fibonacci', 'collatz', 'tree_rnn', 'nuts'],
                  'Workloads to run.')
flags.DEFINE_list('backends', ['numpy', 'function', 'xla'],
                  'numpy, function (tf.function), xla (jit_compile=True).')
flags.DEFINE_integer('repeats', 3, 'Timed repeats per cell (median).')
flags.DEFINE_enum('schedule', 'lowest', ['lowest', 'most'], 'VM schedule.')
flags.DEFINE_string('out', os.path.join(os.path.dirname(__file__), 'results'),
                    'Directory for results.md and results.png.')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def _example(name):
  """Imports examples/NAME.py (examples are scripts, not a package)."""
  path = os.path.join(ROOT, 'examples', f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'ab_example_{name}', path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


# -- workloads: make(backend, batch) -> Cell ----------------------------------

class Cell:
  """One workload at one batch size on one backend."""

  def __init__(self, run, units, unit, stats=None, alone=None):
    self.run = run          # () -> None, the timed call
    self.units = units      # work units per call (members, trees, leapfrogs)
    self.unit = unit
    self.stats = stats      # () -> RunStats or None
    self.alone = alone      # () -> seconds to do the same work unbatched


def _staged(fn, backend, **kwargs):
  """`fn` on the backend: NumPy as is, TF inside tf.function (maybe XLA)."""
  if backend == 'numpy':
    return lambda *a: fn(*a, **kwargs)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  staged = tf.function(lambda *a: fn(*a, **kwargs),
                       jit_compile=(backend == 'xla'))

  def call(*args):
    out = staged(*[tf.constant(a) for a in args])
    return tf.nest.map_structure(lambda t: t.numpy(), out)
  return call


def _alone_seconds(fn, inputs, batch, sample=8):
  """Time to run every member alone: measured on a few, scaled."""
  k = max(1, min(batch, sample))
  start = time.perf_counter()
  fn(*[x[:k] for x in inputs], dry_run=True)
  return (time.perf_counter() - start) * batch / k


fibonacci = workloads.fibonacci


def make_fibonacci(backend, batch):
  n = np.random.default_rng(batch).integers(8, 16, size=batch)
  run = _staged(fibonacci, backend, max_stack_depth=20,
                schedule=FLAGS.schedule)
  return Cell(lambda: run(n), batch, 'members/s',
              lambda: fibonacci.last_stats,
              lambda: _alone_seconds(fibonacci, [n], batch))


def make_collatz(backend, batch):
  collatz = workloads.collatz
  n = np.random.default_rng(batch).integers(1, 10**4, size=batch)
  run = _staged(collatz, backend, schedule=FLAGS.schedule)
  return Cell(lambda: run(n), batch, 'members/s',
              lambda: collatz.last_stats,
              lambda: _alone_seconds(collatz, [n], batch))


def make_tree_rnn(backend, batch):
  tr = _example('tree_rnn')
  rng = np.random.default_rng(batch)
  forest = tr.random_forest(batch, 2, 32, 100, rng)
  params = tr.random_params(64, 100, rng)
  tf_name = {'numpy': 'numpy', 'function': 'tf', 'xla': 'xla'}[backend]
  fn, encode = tr.encode_batched(forest, params, tf_name, FLAGS.schedule)

  def alone():
    k = min(batch, 16)
    sub = tr.Forest(**{**vars(forest), 'roots': forest.roots[:k]})
    start = time.perf_counter()
    tr.encode_each_alone(sub, params)
    return (time.perf_counter() - start) * batch / k
  return Cell(fn, batch, 'trees/s', lambda: encode.last_stats, alone)


NUTS_TRANSITIONS = 5
NUTS_MAX_TREE_DEPTH = 6
NUTS_WARMUP = 100


@functools.lru_cache(maxsize=None)
def nuts_warm_state(batch):
  """Chains after NUTS_WARMUP adapting iterations (NumPy, not timed), so
  that every backend samples from the typical set at adapted step sizes."""
  nuts = _example('nuts')
  sampler = nuts.Sampler(nuts.make_target('logistic'), 'numpy', chunk=25,
                         max_tree_depth=NUTS_MAX_TREE_DEPTH)
  return sampler.warmup(batch, NUTS_WARMUP, seed=batch)


def make_nuts(backend, batch):
  nuts = _example('nuts')
  target = nuts.make_target('logistic')
  kind = {'numpy': 'numpy', 'function': 'tf', 'xla': 'xla'}[backend]
  sampler = nuts.Sampler(target, kind, chunk=NUTS_TRANSITIONS,
                         max_tree_depth=NUTS_MAX_TREE_DEPTH,
                         schedule=FLAGS.schedule)
  state = nuts_warm_state(batch)
  adapt = np.zeros(batch, bool)
  leapfrogs = []

  def run():
    point, da, seeds, counter = state
    out = sampler._call('run_chunk', point, da, seeds, counter, adapt)  # pylint: disable=protected-access
    leapfrogs.append(float(np.sum(out[3])))

  run()   # warm-up also measures the work (leapfrogs) per call
  cell = Cell(run, leapfrogs[-1], 'leapfrogs/s',
              lambda: (sampler.fns.run_chunk.last_stats
                       if backend == 'numpy' else None))

  def alone():
    point, da, seeds, counter = state
    k = min(batch, 2)
    first = lambda x: x[:k]
    args = [ab.instructions.pattern_map(first, a)
            for a in (point, da, seeds, counter, adapt)]
    start = time.perf_counter()
    out = sampler.fns.run_chunk(*args, dry_run=True)
    seconds = time.perf_counter() - start
    return seconds / max(float(np.sum(out[3])), 1.0) * cell.units
  cell.alone = alone
  return cell


WORKLOADS = {'fibonacci': make_fibonacci, 'collatz': make_collatz,
             'tree_rnn': make_tree_rnn, 'nuts': make_nuts}


def batch_sizes(workload):
  if FLAGS.quick:
    return [1, 16] if workload == 'nuts' else [1, 64]
  return [1, 64, 256] if workload == 'nuts' else [1, 64, 1024]


# -- TFP's auto_batching baseline (optional) ----------------------------------

def tfp_fibonacci_seconds(backend, batch):
  """TFP 0.25's VM on the same fibonacci, or None if TFP is missing."""
  try:
    from tensorflow_probability.python.experimental import auto_batching as tfp_ab  # pylint: disable=g-import-not-at-top
  except Exception:  # pylint: disable=broad-except
    return None
  ctx = tfp_ab.Context()

  @ctx.batch(type_inference=lambda arg_types: arg_types[0])
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    else:
      return 1
  n = np.random.default_rng(batch).integers(8, 16, size=batch)
  if backend == 'numpy':
    run = lambda: fib(n, max_stack_depth=20, backend=tfp_ab.NumpyBackend())
  else:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    staged = tf.function(
        lambda x: fib(x, max_stack_depth=20,
                      backend=tfp_ab.TensorFlowBackend()),
        jit_compile=(backend == 'xla'))
    run = lambda: staged(tf.constant(n))
  return _median_time(run, 1)


# -- driver ---------------------------------------------------------------------

def _median_time(run, repeats):
  run()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def measure(workload, backend, batch):
  cell = WORKLOADS[workload](backend, batch)
  seconds = _median_time(cell.run, FLAGS.repeats)
  peak = None
  if backend == 'numpy':
    tracemalloc.start()
    cell.run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
  stats = cell.stats() if cell.stats else None
  steps = util = None
  if stats is not None and isinstance(stats.steps, int):
    steps, util = stats.steps, stats.utilization
  alone = cell.alone() if cell.alone and backend == 'numpy' else None
  tfp = (tfp_fibonacci_seconds(backend, batch)
         if workload == 'fibonacci' else None)
  return dict(workload=workload, backend=backend, batch=batch,
              seconds=seconds, throughput=cell.units / seconds,
              unit=cell.unit, peak_mib=(peak / 2**20 if peak else None),
              steps=steps, utilization=util, alone_seconds=alone,
              tfp_seconds=tfp)


def _fmt(x, spec):
  return '-' if x is None else format(x, spec)


def markdown(rows):
  lines = ['| workload | backend | B | time (s) | throughput | peak MiB | '
           'steps | util | alone (s) | speed-up vs alone | TFP (s) |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    speedup = (r['alone_seconds'] / r['seconds']
               if r['alone_seconds'] else None)
    lines.append(
        f'| {r["workload"]} | {r["backend"]} | {r["batch"]} | '
        f'{r["seconds"]:.4f} | {r["throughput"]:,.0f} {r["unit"]} | '
        f'{_fmt(r["peak_mib"], ".1f")} | {_fmt(r["steps"], "d")} | '
        f'{_fmt(r["utilization"], ".2f")} | '
        f'{_fmt(r["alone_seconds"], ".3f")} | {_fmt(speedup, ".1f")} | '
        f'{_fmt(r["tfp_seconds"], ".3f")} |')
  return '\n'.join(lines)


def plot(rows, path):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print('matplotlib not installed: no plot (pip install matplotlib)')
    return
  workloads = sorted({r['workload'] for r in rows})
  fig, axes = plt.subplots(1, len(workloads),
                           figsize=(4.5 * len(workloads), 4), squeeze=False)
  for ax, w in zip(axes[0], workloads):
    mine = [r for r in rows if r['workload'] == w]
    for backend in sorted({r['backend'] for r in mine}):
      pts = sorted((r['batch'], r['throughput']) for r in mine
                   if r['backend'] == backend)
      ax.plot(*zip(*pts), marker='o', label=f'autobatch_vm {backend}')
    alone = sorted((r['batch'], r['throughput'] * r['seconds'] /
                    r['alone_seconds']) for r in mine
                   if r['alone_seconds'])
    if alone:
      ax.plot(*zip(*alone), marker='x', linestyle='--',
              label='each member alone')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('batch size')
    ax.set_ylabel(mine[0]['unit'])
    ax.set_title(w)
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def main(argv):
  del argv
  if FLAGS.quick:
    FLAGS.repeats = min(FLAGS.repeats, 2)
  backends = list(FLAGS.backends)
  if any(b != 'numpy' for b in backends):
    try:
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      print('TensorFlow is not installed: NumPy only.')
      backends = ['numpy']
  rows = []
  for workload in FLAGS.workloads:
    for backend in backends:
      for batch in batch_sizes(workload):
        start = time.perf_counter()
        r = measure(workload, backend, batch)
        rows.append(r)
        print(f'[{time.perf_counter() - start:6.1f}s] {workload:<10} '
              f'{backend:<8} B={batch:<5} {r["seconds"]:.4f} s  '
              f'{r["throughput"]:,.0f} {r["unit"]}', flush=True)
  os.makedirs(FLAGS.out, exist_ok=True)
  table = markdown(rows)
  with open(os.path.join(FLAGS.out, 'results.md'), 'w') as f:
    f.write(f'# Benchmark results\n\n`python benchmarks/run.py'
            f'{" --quick" if FLAGS.quick else ""}`, schedule '
            f'{FLAGS.schedule}, {os.cpu_count()} CPUs.\n\n{table}\n')
  plot(rows, os.path.join(FLAGS.out, 'results.png'))
  print(table)


if __name__ == '__main__':
  app.run(main)
