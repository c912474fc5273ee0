"""Measuring cells in this process: each cell's times, ours and its
baselines' in turns (`measure`), its peak memory (`peak_bytes`), both VM
schedules (`compare_schedules`), and every cell of a run
(`measure_here`)."""

import time
import tracemalloc

from autobatch_vm import virtual_machine
from benchmarks import cells
from benchmarks import nuts_ess
from benchmarks import options
from benchmarks import workloads

FLAGS = options.FLAGS


def measure(workload, backend, batch):
  cell = cells.WORKLOADS[workload](backend, batch)
  # Ours and the baselines doing the same work, timed in turns.
  tfp_run = cell.tfp() if cell.tfp else None
  hand_run = cell.hand() if cell.hand else None
  floor_run = cell.floor() if cell.floor else None
  repeats = FLAGS.repeats
  if workload in cells.NUTS_WORKLOADS:
    repeats = max(repeats, FLAGS.nuts_repeats)
  seconds, tfp, hand, floor = workloads.interleaved_median_times(
      [cell.run, tfp_run, hand_run, floor_run], repeats, FLAGS.min_seconds,
      max(repeats, FLAGS.max_repeats))
  peak = peak_bytes(cell.run, backend)
  stats = cell.stats() if cell.stats else None
  steps = util = None
  if stats is not None:
    steps, util = stats.steps, stats.utilization
  alone = cell.alone() if cell.alone else None
  return dict(workload=workload, backend=backend, batch=batch,
              seconds=seconds, throughput=cell.units / seconds,
              unit=cell.unit,
              peak_mib=(None if peak is None else peak / 2**20),
              steps=steps, utilization=util, alone_seconds=alone,
              tfp_seconds=tfp, hand_seconds=hand, floor_seconds=floor)


def peak_bytes(run, backend):
  """The most memory `run()` holds at once beyond what was held before it,
  in bytes: NumPy's allocations (tracemalloc), or TensorFlow's on the CPU
  device (XLA's buffers included) where its allocator counts them, that
  is in a process started with TF_CPU_ALLOCATOR_USE_BFC=true (see
  `measure_memory_in_a_process`); else None."""
  if backend in cells.NUMPY_BACKENDS:
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    before = tf.config.experimental.get_memory_info('CPU:0')
  except ValueError:   # the default CPU allocator keeps no statistics
    return None
  if not before['current']:   # or counts nothing
    return None
  tf.config.experimental.reset_memory_stats('CPU:0')
  run()
  return tf.config.experimental.get_memory_info('CPU:0')['peak'] - (
      before['current'])


def measure_memory_here(workload, backend, batch):
  """Peak bytes of one call of a cell, after a warm-up call."""
  cell = cells.WORKLOADS[workload](backend, batch)
  cell.run()
  return peak_bytes(cell.run, backend)


def compare_schedules(backends, batch):
  """Each workload on each backend under both schedules: our time, VM
  steps and utilization."""
  rows = []
  chosen = FLAGS.schedule
  try:
    for workload in FLAGS.workloads:
      # The VM's schedules (stackless frames are scheduled alike, but the
      # question is the VM's default).
      for backend in backends:
        if backend == 'stackless':
          continue
        row = {'workload': workload, 'backend': backend}
        built = []
        for schedule in virtual_machine.SCHEDULES:
          FLAGS.schedule = schedule
          cell = cells.WORKLOADS[workload](backend, batch)
          cell.run()   # (stats are the function's last run's)
          stats = cell.stats() if cell.stats else None
          if stats is not None:
            row[schedule + '_steps'] = (stats.steps, stats.utilization)
          built.append(cell)
        times = workloads.interleaved_median_times(
            [cell.run for cell in built], FLAGS.repeats, FLAGS.min_seconds,
            max(FLAGS.repeats, FLAGS.max_repeats))
        row.update(zip(virtual_machine.SCHEDULES, times))
        rows.append(row)
        print(f'schedules {workload:<10} {backend:<8} B={batch:<5} ' +
              '  '.join(f'{s} {row[s]:.4f} s'
                        for s in virtual_machine.SCHEDULES), flush=True)
  finally:
    FLAGS.schedule = chosen
  return rows


def measure_here(backends):
  """Every cell of --workloads on `backends`, in this process: the main
  table's rows, the schedule table's and the ESS table's."""
  rows = []
  for workload in FLAGS.workloads:
    for backend in backends:
      if not cells.measured(workload, backend):
        continue
      for batch in cells.batch_sizes(workload):
        start = time.perf_counter()
        r = measure(workload, backend, batch)
        rows.append(r)
        print(f'[{time.perf_counter() - start:6.1f}s] {workload:<10} '
              f'{backend:<8} B={batch:<5} {r["seconds"]:.4f} s  '
              f'{r["throughput"]:,.0f} {r["unit"]}', flush=True)
  schedules = (compare_schedules(backends, FLAGS.schedule_batch)
               if FLAGS.schedule_batch else [])
  ess = (nuts_ess.nuts_ess(backends) if 'nuts' in FLAGS.workloads and
         FLAGS.nuts_ess_samples else [])
  return {'rows': rows, 'schedules': schedules, 'ess': ess}
