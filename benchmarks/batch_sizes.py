"""Calls at many batch sizes: memory, caches and time per call.

    python benchmarks/batch_sizes.py [--parts=numpy,stackless,tf_eager,fixed]
        [--calls=2000] [--tf_calls=200] [--max_batch=4096]

Each part runs in a fresh process (fibonacci, the workload of `run.py`):

- numpy, stackless: `--calls` calls of fibonacci (n ~ U[1, 10)) on the
  NumPy stack VM (`stackless=False`) or stackless, each at a random batch
  size from 1 to `--max_batch`.  It reports the growth of the resident
  memory (RSS) over the calls (after a warm-up call at `--max_batch`),
  the Context's cache entries (`Context.cache_info`), and the time of a
  call at a batch size not seen before against the same call repeated at
  once (the median of the ratios).
- tf_eager: the same on TensorFlow eagerly, `--tf_calls` calls at sizes
  from 1 to `--tf_max_batch`, and the number of traces of the staged
  loop after the warm-up (a program's loop is traced once, at its first
  call, for every size: 0 expected).  The growth of the resident memory
  is also given from the first call at a second size on
  (`rss_growth_after_second_size_mb`).
- tf_function, xla: the same through `ab.stage(fib, jit_compile=...)`,
  `--staged_calls` calls (not in the default parts: under XLA each new
  size compiles; without, the warm-up's size has its own trace and one
  more serves every other size: 1 trace expected after the warm-up).
- xla_buckets: XLA at `--staged_calls` random batch sizes under each
  policy of `ab.stage(..., batch_buckets=...)` (each size compiled,
  padded to powers of two, 'auto'): compiles, seconds, and the padding's
  cost per call at a size repeated.
- fixed: the time of a call at a fixed batch size (64 and 1024, n ~
  U[8, 16)) on the NumPy stack VM, TensorFlow eagerly, under
  `tf.function` and XLA (`ab.stage`): the path the caches serve; and on
  NumPy a recursion saving a vector per member (`numpy_vectors`), whose
  pops read the batch size from the stack.  Medians and minimums.

Times are medians of calls in one process; run it on a quiet machine.
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list('parts', ['numpy', 'stackless', 'tf_eager', 'fixed'],
                  'Parts to run, each in a fresh process.')
flags.DEFINE_integer('calls', 2000, 'NumPy calls at random batch sizes.')
flags.DEFINE_integer('max_batch', 4096, 'Largest NumPy batch size.')
flags.DEFINE_integer('tf_calls', 200, 'TensorFlow eager calls.')
flags.DEFINE_integer('tf_max_batch', 4096, 'Largest TensorFlow batch size.')
flags.DEFINE_integer('staged_calls', 30,
                     'Calls under tf.function and XLA (`ab.stage`).')
flags.DEFINE_integer('fixed_repeats', 20, 'Timed calls per fixed cell.')
flags.DEFINE_integer('seed', 0, 'Random seed.')
flags.DEFINE_string('worker', None, 'Internal: run this part here.')


def _rss_mb():
  with open('/proc/self/statm') as f:
    pages = int(f.read().split()[1])
  return pages * os.sysconf('SC_PAGE_SIZE') / 2**20


def _fib(ctx):
  @ctx.batch
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    return 1
  return fib


def _cache_entries(ctx):
  info = getattr(ctx, 'cache_info', None)
  return info()['entries'] if info else len(ctx._cache)  # pylint: disable=protected-access


_traced = [0]


def _count_traces():
  """Counts the traces of eager calls' staged loops (one `staged_loop`
  each), those of loops since dropped from the cache included."""
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  staged_loop = loop.staged_loop

  def counted(*args, **kwargs):
    _traced[0] += 1
    return staged_loop(*args, **kwargs)
  loop.staged_loop = counted


def _tf_traces():
  return _traced[0]


def _sizes_part(part):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  tf_part = part in ('tf_eager', 'tf_function', 'xla')
  if tf_part:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    convert = lambda x: tf.constant(x)  # pylint: disable=unnecessary-lambda
    calls = FLAGS.tf_calls if part == 'tf_eager' else FLAGS.staged_calls
    top = FLAGS.tf_max_batch
  else:
    convert = lambda x: x
    calls, top = FLAGS.calls, FLAGS.max_batch
  kwargs = {} if tf_part else {'stackless': part == 'stackless'}
  ctx = ab.Context()
  fib = _fib(ctx)
  traces = _tf_traces
  if part == 'tf_eager':
    _count_traces()
  if part in ('tf_function', 'xla'):
    fib = ab.stage(fib, jit_compile=part == 'xla')
    staged = fib
    traces = lambda: sum(  # pylint: disable=g-long-lambda
        f.experimental_get_tracing_count() for f in
        (staged._function, getattr(staged, '_padded_function', None))  # pylint: disable=protected-access
        if f is not None)
  rng = np.random.default_rng(FLAGS.seed)

  def call(b):
    x = convert(rng.integers(1, 10, size=b).astype(np.int32))
    start = time.perf_counter()
    fib(x, **kwargs)
    return time.perf_counter() - start, x

  call(top)          # warm-up: the largest arrays, and the compilation
  call(top)
  rss0 = _rss_mb()
  traces0 = traces() if tf_part else 0
  seen, ratios, new_ms, rep_ms = {top}, [], [], []
  rss1 = None
  start = time.perf_counter()
  for _ in range(calls):
    b = int(rng.integers(1, top + 1))
    t, x = call(b)
    if rss1 is None and b != top:
      rss1 = _rss_mb()   # after the first call at a second size
    if b not in seen:
      seen.add(b)
      t0 = time.perf_counter()
      fib(x, **kwargs)   # the same call at once: a repeated size
      t_rep = time.perf_counter() - t0
      ratios.append(t / t_rep)
      new_ms.append(t * 1e3)
      rep_ms.append(t_rep * 1e3)
  wall = time.perf_counter() - start
  out = {
      'part': part, 'calls': calls, 'max_batch': top,
      'sizes': len(seen), 'seconds': round(wall, 1),
      'rss_growth_mb': round(_rss_mb() - rss0, 1),
      'rss_growth_after_second_size_mb': round(_rss_mb() - rss1, 1),
      'cache_entries': _cache_entries(ctx),
      'new_ms_median': round(float(np.median(new_ms)), 2),
      'repeated_ms_median': round(float(np.median(rep_ms)), 2),
      'new_over_repeated_median': round(float(np.median(ratios)), 2)}
  if tf_part:
    out['traces'] = traces() - traces0
  return out


def _buckets_part():
  """XLA at `--staged_calls` random batch sizes under each policy of
  `ab.stage(..., batch_buckets=...)`: False (each size compiled), True
  (padded to the next power of two, one compile per bucket) and 'auto'
  (the default: the first `staging.EXACT_SIZES` sizes compiled, later
  ones padded).

  The same sizes and arguments for each.  Per policy: the traces (each
  an XLA compile), the seconds of all the calls, and per size the call
  repeated at once (the steady state, CPU time: the least of five),
  whose ratio to the same call compiled for its size is the cost of the
  padding (median and largest).
  Padded members start at the program's exit: they take no step.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()
  fib = _fib(ctx)
  rng = np.random.default_rng(FLAGS.seed)
  top = FLAGS.tf_max_batch
  xs = [tf.constant(rng.integers(1, 10, size=int(b)).astype(np.int32))
        for b in rng.integers(1, top + 1, size=FLAGS.staged_calls)]
  fib(xs[0])   # the program compiled for the Context

  def timed(fn, x, clock=time.perf_counter):
    start = clock()
    fn(x).numpy()
    return clock() - start

  out = {'part': 'xla_buckets', 'calls': FLAGS.staged_calls,
         'max_batch': top}
  repeated = {}
  for policy in (False, True, 'auto'):
    staged = ab.stage(fib, jit_compile=True, batch_buckets=policy)
    start = time.perf_counter()
    rep = []
    for x in xs:
      timed(staged, x)
      # CPU time (of every thread): the machine may be shared.
      rep.append(min(timed(staged, x, time.process_time) for _ in range(5)))
    name = {False: 'exact', True: 'pow2', 'auto': 'auto'}[policy]
    repeated[name] = np.array(rep)
    out[f'{name}_traces'] = sum(
        f.experimental_get_tracing_count() for f in
        (staged._function, staged._padded_function))  # pylint: disable=protected-access
    out[f'{name}_seconds'] = round(time.perf_counter() - start, 1)
    out[f'{name}_repeated_cpu_ms_median'] = round(float(np.median(rep)) * 1e3, 2)
    if name != 'exact':
      ratio = repeated[name] / repeated['exact']
      out[f'{name}_over_exact_median'] = round(float(np.median(ratio)), 2)
      out[f'{name}_over_exact_max'] = round(float(np.max(ratio)), 2)
  return out


def _fixed_part():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  out = {'part': 'fixed'}
  rng = np.random.default_rng(FLAGS.seed)
  for b in (64, 1024):
    n = rng.integers(8, 16, size=b).astype(np.int32)
    ctx = ab.Context()
    fib = _fib(ctx)

    @ctx.batch
    def vecsum(v, k):   # a stack of vectors: its pops read the batch size
      if k > 0:
        return vecsum(v * 0.5, k - 1) + v
      return v
    v = rng.normal(size=(b, 8))
    k = rng.integers(0, 12, size=b)
    cells = {
        'numpy': lambda: fib(n, stackless=False),
        'numpy_vectors': lambda: vecsum(v, k, stackless=False),
        'tf_eager': lambda: fib(tf.constant(n)),
        'tf_function': ab.stage(fib, jit_compile=False),
        'xla': ab.stage(fib, jit_compile=True)}
    for name, fn in cells.items():
      arg = (() if name in ('numpy', 'numpy_vectors', 'tf_eager')
             else (tf.constant(n),))
      fn(*arg)
      times = []
      for _ in range(FLAGS.fixed_repeats):
        start = time.perf_counter()
        r = fn(*arg)
        if hasattr(r, 'numpy'):
          r.numpy()
        times.append(time.perf_counter() - start)
      out[f'{name}_B{b}_ms'] = round(float(np.median(times)) * 1e3, 2)
      out[f'{name}_B{b}_min_ms'] = round(float(np.min(times)) * 1e3, 2)
  return out


def main(argv):
  del argv
  if FLAGS.worker:
    part = FLAGS.worker
    result = (_fixed_part() if part == 'fixed' else
              _buckets_part() if part == 'xla_buckets' else
              _sizes_part(part))
    print('RESULT ' + json.dumps(result))
    return
  for part in FLAGS.parts:
    args = [sys.executable, os.path.abspath(__file__), f'--worker={part}']
    args += [f'--{name}={FLAGS[name].value}' for name in
             ('calls', 'max_batch', 'tf_calls', 'tf_max_batch', 'staged_calls',
              'fixed_repeats', 'seed')]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    lines = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')]
    if not lines:
      print(f'{part}: failed\n{proc.stderr[-3000:]}')
      continue
    print(json.dumps(json.loads(lines[-1][7:])))
    sys.stdout.flush()


if __name__ == '__main__':
  app.run(main)
