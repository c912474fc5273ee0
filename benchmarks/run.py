"""All benchmarks side by side: workloads x backends x batch sizes.

    python benchmarks/run.py            # full: B = 1, 64, 1024 (NUTS 1, 64, 256)
    python benchmarks/run.py --quick    # an install check in a few minutes
    python benchmarks/run.py --workloads=fibonacci,collatz --backends=numpy

For each cell (under --schedule, the library's default 'most'): median
wall time of at least `--repeats` calls after a warm-up call (more, up to
`--max_repeats`, until they add up to `--min_seconds`), ours and the TFP
baselines of the cell timed in turns (a call of each per round),
throughput in the workload's unit, peak memory (NumPy: traced
allocations; TensorFlow: the CPU allocator's bytes in use, measured in a
separate process, see `processes.measure_memory_in_a_process`), VM steps
and mean utilization (a staged call returns its counts), and baselines
measured in the same run: every member run alone on the same backend (the
dry-run loop: plain Python per member on NumPy arrays or eager TF
tensors; every member where that takes under --alone_seconds, else the
first ones that fit, scaled) and, when tensorflow_probability is
installed (TFP 0.25 with TensorFlow 2.18, or 2.21 with tf-keras 2.21: see
benchmarks/tfp_baselines.py), TFP's auto_batching VM on the same
fibonacci, TFP's autobatched NUTS and its hand-batched NUTS
(`tfp.mcmc.NoUTurnSampler`) from the same chains and step sizes.  For
NUTS it also compares effective samples per second (--nuts_ess_samples),
and every workload and backend runs under both schedules at one batch
size (--schedule_batch).  Each (workload, backend) is measured in a fresh
Python process (--one_process: all in this one).  Writes results.md (with
the targets the benchmarks are held to, met or not as this run measured
them), results.json and results.png to --out (benchmarks/results/).

--quick checks an install: every workload and backend at one small batch
size, in one process, with few repeats, no memory processes, no schedule
table and no ESS comparison (`options.QUICK`; a flag given on the command
line keeps its value).

--nuts_systems then runs `benchmarks/nuts_systems.py` (TFP's NUTS program
on our VM beside TFP's hand-batched sampler, BlackJAX and NumPyro) into
--out/nuts_systems.

The parts: `options` (the flags), `cells` (the workloads and their
baselines), `measure` (timing and memory in this process), `nuts_ess`,
`processes` (fresh processes, medians over them), `targets`, `report`.
"""

import os
import subprocess
import sys

# Multi-threaded OpenBLAS is pathological on small shared machines (a
# [64,25]@[25,1000] product: 31 ms with 2 threads, 0.7 ms with 1).
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import cells  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import measure  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import options  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import processes  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import report  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = options.FLAGS


def tensorflow_backends(backends):
  """`backends`, less the TensorFlow ones when TensorFlow does not import."""
  if all(b in cells.NUMPY_BACKENDS for b in backends):
    return list(backends)
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    print('TensorFlow is not installed: NumPy only.')
    return [b for b in backends if b in cells.NUMPY_BACKENDS]
  return list(backends)


def main(argv):
  del argv
  options.apply_quick()
  backends = tensorflow_backends(FLAGS.backends)
  if FLAGS.memory_worker:
    processes.memory_worker(FLAGS.memory_worker, backends)
    return
  if FLAGS.worker:
    processes.worker(FLAGS.worker, backends)
    return
  if FLAGS.one_process:
    results = measure.measure_here(backends)
  else:
    results = processes.measure_in_processes(backends)
  if FLAGS.memory_processes:
    processes.add_tf_memory(results['rows'])
  report.write(results, backends)
  if FLAGS.nuts_systems:
    subprocess.run(
        [sys.executable, os.path.join(options.HERE, 'nuts_systems.py'),
         f'--out={os.path.join(FLAGS.out, "nuts_systems")}'] +
        (['--quick'] if FLAGS.quick else []), check=True)


if __name__ == '__main__':
  app.run(main)
