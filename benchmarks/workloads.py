"""The batched programs the benchmarks share (one Context), and timing.

Scripts in benchmarks/ import it as `from benchmarks import workloads`
after putting the repository root on sys.path, so they run both as
`python benchmarks/NAME.py` and as `python -m benchmarks.NAME`.
"""

import contextlib
import gc
import platform
import statistics
import time

import autobatch_vm as ab

ctx = ab.Context()


@ctx.batch(type_inference=lambda arg_types: arg_types[0])
def fibonacci(n):
  if n > 2:
    return fibonacci(n - 1) + fibonacci(n - 2)
  else:
    return 1


def fibonacci_ref(n):
  return fibonacci_ref(n - 1) + fibonacci_ref(n - 2) if n > 2 else 1


@ctx.batch()
def collatz(n):
  steps = 0
  while n > 1:
    if n % 2 == 0:
      n = n // 2
    else:
      n = 3 * n + 1
    steps += 1
  return steps


def interleaved_median_times(runs, repeats, min_seconds=0.0,
                             max_repeats=25, clock=None):
  """Median seconds of each of `runs` (None: skipped, None returned), each
  warmed up by one untimed call, then timed in turns, a call of each per
  round, so that all of them meet the same machine conditions (on a shared
  machine, speed drifts by tens of percent over seconds).

  At least `repeats` rounds; more, up to `max_repeats`, until the first
  run's timed calls add up to `min_seconds` (a median of 3 calls of a few
  milliseconds moved by 1.5x between runs here).  `clock` is read around
  each call: `time.perf_counter` (wall time; None), or `time.process_time`
  (the process's CPU time, every thread's, BLAS's and XLA's included),
  which other processes on a loaded machine move much less.
  """
  clock = clock or time.perf_counter
  live = [r for r in runs if r is not None]
  for run in live:
    run()
  times = {id(run): [] for run in live}
  rounds = 0
  with no_garbage_collection():
    while live and (rounds < repeats or (
        rounds < max_repeats and sum(times[id(live[0])]) < min_seconds)):
      for run in live:
        start = clock()
        run()
        times[id(run)].append(clock() - start)
      rounds += 1
  return [None if r is None else statistics.median(times[id(r)])
          for r in runs]


def median_time(run, repeats):
  """Median seconds of `repeats` calls of `run()`, after one untimed call
  (compiles the program and the block code, traces TF functions)."""
  run()
  times = []
  with no_garbage_collection():
    for _ in range(repeats):
      start = time.perf_counter()
      run()
      times.append(time.perf_counter() - start)
  return statistics.median(times)


@contextlib.contextmanager
def no_garbage_collection():
  """Python's garbage collector collected, then off (as `timeit` does).

  A benchmark process holds the traced graphs of every cell so far: with
  millions of objects, a full collection takes ~0.2 s, and calls made
  soon after a cell was built each triggered one.  TFP's autobatched NUTS
  under XLA measured 0.24 s per call next to ours, 0.045 s alone; with
  the collector off, 0.045 s either way (and ours 0.047 -> 0.026 s).
  """
  enabled = gc.isenabled()
  gc.collect()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def apply_quick(flags, quick):
  """Under `--quick`, sets each flag of `quick` (name -> value) that the
  command line did not give.

  Args:
    flags: The absl `FLAGS` holding a boolean `quick` flag.
    quick: The flags' values for a quick run.
  """
  if not flags.quick:
    return
  for name, value in quick.items():
    if not flags[name].present:
      setattr(flags, name, value)


def cpu_model():
  """The CPU model, and whether it has AVX-512, for the record: results
  differ between machines and sessions, and not by one factor (TFP's
  autobatched NUTS at 64 chains under XLA took 0.059 s in one session and
  0.088 s in another, with the same versions, where ours took 0.039 and
  0.040 s)."""
  model, avx512 = platform.processor() or 'unknown CPU', False
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key.strip() == 'model name':
          model = value.strip()
        elif key.strip() == 'flags':
          avx512 = 'avx512f' in value.split()
          break
  except OSError:
    pass
  return model + (', AVX-512' if avx512 else '')
