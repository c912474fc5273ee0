"""Load test: very large batches and deep stacks.

    python benchmarks/stress.py [--batch_size=100000] [--depth=1000] [--tf]
        [--nonumpy] [--tf_modes=eager,function,xla] [--programs=fibonacci]
        [--tracemalloc] [--noisolate]

Runs fibonacci (n ~ U[8,16)) and Collatz (n ~ U[1, 10^4)) at the given
batch size with max_stack_depth=--depth on NumPy (and TensorFlow with
--tf), each in a fresh process (--noisolate: all in this one), checks
TensorFlow's results against the NumPy backend's, and reports per run:

- time: the run alone.  A warm-up call at the same batch size and depth
  with inputs that finish at once (n = 1) compiles the blocks, and on
  TensorFlow traces (and for XLA compiles) the loop first;
- peak RSS: the process's resident-memory high-water mark during the run
  minus its resident memory before (Linux: VmHWM reset through
  /proc/self/clear_refs); "with warm-up": the high-water mark of warm-up
  and run together minus the resident memory before the warm-up.  The
  warm-up allocates the same state, and TensorFlow's allocator (like
  malloc) may keep and reuse what it freed, so on TF the run alone can
  show little; the figure with warm-up includes tracing and compiling.
  TensorFlow's allocations are not visible to tracemalloc, RSS sees every
  backend;
- peak traced (NumPy only; --tracemalloc): tracemalloc's peak during a
  second run.  It counts allocated bytes, RSS only the pages touched: a
  `np.zeros` stack is calloc'ed, so rows never pushed to never become
  resident;
- the VM state as the allocation promises it (`_Layout.memory()`: stacks
  only for FULL variables, those live across a call), next to the bytes
  the backend's initial state actually allocates for those stacks.
"""

import os
import subprocess
import sys
import time
import tracemalloc
import warnings

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import autobatch_vm as ab  # pylint: disable=g-import-not-at-top,wrong-import-position
from autobatch_vm import virtual_machine  # pylint: disable=g-import-not-at-top,wrong-import-position

# Timed like TFP's runs, under a bare jit_compile=True (where an overflow
# would poison outputs, not raise): the tracing-time warning is known here.
warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_integer('batch_size', 100000, 'Batch members.')
flags.DEFINE_integer('depth', 1000, 'max_stack_depth.')
flags.DEFINE_boolean('numpy', True, 'Run on the NumPy backend.')
flags.DEFINE_boolean('tf', False, 'Also run on the TensorFlow backend.')
flags.DEFINE_list('tf_modes', ['eager'],
                  'TensorFlow modes: eager (the VM\'s cached tf.function), '
                  'function (inside a tf.function), xla (jit_compile=True).')
flags.DEFINE_list('programs', ['fibonacci', 'collatz'], 'Programs to run.')
flags.DEFINE_boolean('isolate', True,
                     'Run each (mode, program) in a fresh process, so that '
                     'memory freed by one does not hide the next one\'s.')
flags.DEFINE_boolean('tracemalloc', False,
                     'NumPy: run once more under tracemalloc for its peak.')

ctx = workloads.ctx
PROGRAMS = {'fibonacci': workloads.fibonacci, 'collatz': workloads.collatz}
MIB = 2**20


def _status_kib(field):
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1])
  return None


def reset_peak_rss():
  """Resets VmHWM to the current RSS; returns the current RSS in bytes."""
  try:
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
  except OSError:
    return None
  return _status_kib('VmRSS') * 1024


def peak_rss():
  kib = _status_kib('VmHWM')
  return None if kib is None else kib * 1024


def state_memory(fn, args, depth, backend):
  """(promised bytes by kind, FULL vars, bytes the stacks really take)."""
  program = ctx.lowered_for_args(fn.name, args, backend)
  layout = virtual_machine.CompiledProgram(
      program, backend, len(args[0]), depth).layout
  full = [v for v, a in program.var_alloc.items()
          if a == ab.instructions.VariableAllocation.FULL]
  state = layout.initial_state()
  stack_slots = [s for slots, sp in layout.stacks.values()
                 for s in slots + [sp]]
  allocated = sum(
      int(np.prod(state[s].shape)) *
      np.dtype(getattr(state[s].dtype, 'as_numpy_dtype',
                       state[s].dtype)).itemsize for s in stack_slots)
  del state
  return layout.memory(), full, allocated


def make_runner(fn, backend, mode, depth):
  if mode == 'numpy' or mode == 'eager':
    return lambda x: fn(x, max_stack_depth=depth, backend=backend)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.function(lambda x: fn(x, max_stack_depth=depth, backend=backend),
                     jit_compile=(mode == 'xla'))


def run_one(name, n, depth, backend, mode, convert):
  fn = PROGRAMS[name]
  run = make_runner(fn, backend, mode, depth)
  x = convert(n)
  before_all = reset_peak_rss()
  start = time.perf_counter()
  np.asarray(run(convert(np.ones_like(n))))   # compile / trace at this size
  warmup = time.perf_counter() - start
  peak_warmup = peak_rss()
  before = reset_peak_rss()
  start = time.perf_counter()
  out = np.asarray(run(x))
  seconds = time.perf_counter() - start
  peak = peak_rss()
  if before is None:
    rss = rss_all = float('nan')
  else:
    rss = (peak - before) / MIB
    rss_all = (max(peak, peak_warmup) - before_all) / MIB
  steps = fn.last_stats.steps if mode in ('numpy', 'eager') else None
  traced = ''
  if FLAGS.tracemalloc and mode == 'numpy':
    tracemalloc.start()
    run(x)
    traced = f'peak traced={tracemalloc.get_traced_memory()[1] / MIB:.1f} MiB  '
    tracemalloc.stop()
  mem, full, allocated = state_memory(fn, [x], depth, backend)
  print(f'{name:<10} {mode:<8} B={len(n):<7} depth={depth:<5} '
        f'{seconds:8.2f} s (warm-up {warmup:.1f} s)  steps={steps}  '
        f'peak RSS +{rss:.1f} MiB (with warm-up +{rss_all:.1f})  {traced}'
        f'promised: stacks={mem["stacks"] / MIB:.1f} MiB '
        f'(FULL: {", ".join(full) or "none"}) '
        f'registers={mem["registers"] / MIB:.1f} MiB '
        f'pc={mem["pc"] / MIB:.1f} MiB total={mem["total"] / MIB:.1f} MiB; '
        f'stacks allocated={allocated / MIB:.1f} MiB',
        flush=True)
  return out


def configurations():
  """(mode, program) pairs the flags ask for, NumPy first."""
  modes = (['numpy'] if FLAGS.numpy else []) + (FLAGS.tf_modes if FLAGS.tf
                                                else [])
  return [(mode, name) for mode in modes for name in FLAGS.programs]


def run_isolated(mode, name):
  """Runs one configuration in a fresh process (clean memory figures)."""
  cmd = [sys.executable, os.path.abspath(__file__),
         f'--batch_size={FLAGS.batch_size}', f'--depth={FLAGS.depth}',
         f'--programs={name}', '--noisolate']
  if mode == 'numpy':
    cmd += ['--numpy', '--notf']
  else:
    cmd += ['--nonumpy', '--tf', f'--tf_modes={mode}']
  if FLAGS.tracemalloc:
    cmd.append('--tracemalloc')
  result = subprocess.run(cmd, check=False)
  if result.returncode:
    print(f'{name:<10} {mode:<8} B={FLAGS.batch_size:<7} '
          f'depth={FLAGS.depth:<5} FAILED (exit status {result.returncode})',
          flush=True)


def main(argv):
  del argv
  b, depth = FLAGS.batch_size, FLAGS.depth
  configs = configurations()
  if FLAGS.isolate and len(configs) > 1:
    for mode, name in configs:
      run_isolated(mode, name)
    return
  rng = np.random.default_rng(0)
  inputs = {'fibonacci': rng.integers(8, 16, size=b),
            'collatz': rng.integers(1, 10**4, size=b)}
  numpy_results = {}
  for mode, name in configs:
    if mode == 'numpy':
      numpy_results[name] = run_one(name, inputs[name], depth,
                                    ab.NumpyBackend(), 'numpy', np.asarray)
      continue
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    out = run_one(name, inputs[name], depth, ab.TensorFlowBackend(), mode,
                  tf.constant)
    if name not in numpy_results:   # after the run: not in its memory peak
      numpy_results[name] = PROGRAMS[name](inputs[name],
                                           max_stack_depth=depth)
    ok = np.array_equal(out, numpy_results[name])
    print(f'{name:<10} {mode:<8} result '
          f'{"equals NumPy" if ok else "DIFFERS FROM NUMPY"}', flush=True)


if __name__ == '__main__':
  app.run(main)
