"""Fresh processes: each (workload, backend) measured in a Python process
of its own (`benchmarks/run.py --worker`), NUTS on TensorFlow in several
and each figure the median over them (`median_over_processes`), and the
peak memory of each TensorFlow cell in a process whose allocator counts
its bytes (`--memory_worker`)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from autobatch_vm import virtual_machine
from benchmarks import cells
from benchmarks import measure
from benchmarks import options
from benchmarks import targets

FLAGS = options.FLAGS
RUN_PY = os.path.join(options.HERE, 'run.py')


def measure_in_processes(backends):
  """Every cell of --workloads on `backends`, each (workload, backend) in
  fresh processes (`measure_in_a_process`): NUTS on TensorFlow in
  --nuts_processes of them, its figures the medians over them
  (`median_over_processes`).  Returns `measure.measure_here`'s dict."""
  results = {'rows': [], 'schedules': [], 'ess': []}
  for workload in FLAGS.workloads:
    for backend in backends:
      if not cells.measured(workload, backend):
        continue
      times = 1
      if (workload in cells.NUTS_WORKLOADS and
          backend not in cells.NUMPY_BACKENDS):
        times = max(FLAGS.nuts_processes, 1)
      runs = [measure_in_a_process(workload, backend)
              for _ in range(times)]
      for key, value in median_over_processes(runs).items():
        results[key] += value
  return results


def worker(path, backends):
  """--worker: every cell of --workloads on `backends` in this process,
  written as JSON to `path`."""
  with open(path, 'w') as f:
    json.dump(measure.measure_here(backends), f)


def memory_worker(path, backends):
  """--memory_worker: the peak bytes of the first of --workloads on the
  first of `backends` at --memory_batch, written as JSON to `path`."""
  with open(path, 'w') as f:
    json.dump(measure.measure_memory_here(FLAGS.workloads[0], backends[0],
                                          FLAGS.memory_batch), f)


def measure_in_a_process(workload, backend):
  """`measure.measure_here` for one workload and backend in a fresh Python
  process (same flags), so that no other cell's leftovers (thread pools, a
  large heap, caches) weigh on it."""
  return _in_a_process([f'--workloads={workload}', f'--backends={backend}'],
                       '--worker')


def _in_a_process(args, output_flag, env=None):
  """Runs benchmarks/run.py in a fresh process with this run's flags plus
  `args`; the worker writes JSON to the path given to `output_flag`,
  which is returned loaded."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'out.json')
    subprocess.run(
        [sys.executable, RUN_PY] + sys.argv[1:] + args +
        [f'{output_flag}={path}'], check=True, env=env)
    with open(path) as f:
      return json.load(f)


# Per table, the keys naming a row, and its numbers (the rest is copied).
_ROW_KEYS = {'rows': ('workload', 'backend', 'batch'),
             'schedules': ('workload', 'backend'),
             'ess': ('system', 'backend')}
_ROW_NUMBERS = {'rows': ('seconds', 'tfp_seconds', 'hand_seconds',
                         'alone_seconds', 'floor_seconds'),
                'schedules': tuple(virtual_machine.SCHEDULES),
                'ess': ('seconds', 'ess_min', 'ess_median')}


def median_over_processes(results):
  """One worker's results (`measure.measure_here`'s dict) from several: per row,
  each timing and ESS the median over the workers (None where none
  measured it); throughput follows the median time.  Rows are matched by
  their keys, in the first worker's order; `processes` counts them."""
  if len(results) == 1:
    return results[0]
  out = {}
  for table, keys in _ROW_KEYS.items():
    merged = []
    for first in results[0].get(table, []):
      key = tuple(first[k] for k in keys)
      same = [r for res in results for r in res.get(table, [])
              if tuple(r[k] for k in keys) == key]
      row = dict(first, processes=len(same))
      for name in _ROW_NUMBERS[table]:
        # Each process's value too, in process order: systems timed in
        # turns inside a process are best compared there (see
        # per_process_markdown).
        row[name + '_each'] = [r.get(name) for r in same]
        values = [r[name] for r in same if r.get(name) is not None]
        row[name] = statistics.median(values) if values else None
      if table == 'rows' and row['seconds']:
        row['throughput'] = first['throughput'] * first['seconds'] / (
            row['seconds'])
      merged.append(row)
    out[table] = merged
  return out


def measure_memory_in_a_process(workload, backend, batch):
  """Peak memory of a TensorFlow cell, measured in a fresh process whose
  CPU allocator counts its bytes (TF_CPU_ALLOCATOR_USE_BFC=true; the
  default allocator keeps no statistics).  Timings are not taken there, so
  that the timed runs use TensorFlow's default allocator, as users do.
  One process per cell: the allocator counts the chunks it hands out,
  which depend on what ran before (NUTS at 64 chains under XLA: 4.1 MiB
  alone, 5.0-7.1 MiB after the graph-mode cells).  Returns bytes or None.
  """
  return _in_a_process(
      [f'--workloads={workload}', f'--backends={backend}',
       f'--memory_batch={batch}'], '--memory_worker',
      env=dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC='true'))


def add_tf_memory(rows):
  """Fills the TensorFlow rows' peak memory (`measure_memory_in_a_process`)."""
  for r in rows:
    if r['backend'] in cells.NUMPY_BACKENDS:
      continue
    start = time.perf_counter()
    peak = measure_memory_in_a_process(r['workload'], r['backend'],
                                       r['batch'])
    if peak is not None:
      r['peak_mib'] = peak / 2**20
    print(f'[{time.perf_counter() - start:6.1f}s] {r["workload"]:<10} '
          f'{r["backend"]:<8} B={r["batch"]:<5} peak memory '
          f'{targets.fmt(r["peak_mib"], ".2f")} MiB', flush=True)
