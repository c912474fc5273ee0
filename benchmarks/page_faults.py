"""Page faults and time per call on the NumPy backend, by heap setting.

    python benchmarks/page_faults.py [--batch=64] [--width=8192]
        [--fib_batch=4096] [--calls=5]

Each cell runs in a fresh process, called twice to warm up, then
`--calls` times; it reports the minor page faults (`getrusage`) and the
milliseconds per call.  Two programs: a loop that updates a
`[batch, width]` float64 array five times (stack VM and stackless: large
arrays), and fibonacci, n ~ U[8, 16), stackless at `--fib_batch` members
(many smaller arrays: a whole tree level per frame).  Heap settings:

- kept: the backend as shipped (`keep_freed_heap` sets glibc's mmap and
  trim thresholds);
- kept, 32 MiB trim: the same mmap threshold, but the heap keeps only
  32 MiB free at its top (as far as glibc's own adjustment goes);
- glibc's defaults: `keep_freed_heap` skipped, so arrays above 128 KiB
  come from fresh `mmap` pages on every call;
- kept, `MALLOC_MMAP_THRESHOLD_` set: a fixed threshold in the
  environment turns off glibc's own adjustment, not ours;
- kept, in a thread: the calls run in a thread other than the main one
  (as a Dask worker runs its tasks), which allocates from a thread arena;
- kept, in a thread, no top pad: the same, with the thread arenas' heaps
  left to glibc (unmapped whenever one empties).
"""

import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_integer('batch', 64, 'Batch size of the array loop.')
flags.DEFINE_integer('width', 8192, 'Elements per member (float64).')
flags.DEFINE_integer('fib_batch', 4096, 'Batch size of fibonacci.')
flags.DEFINE_integer('calls', 5, 'Measured calls.')

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = '''
import ctypes, resource, sys, threading, time
import numpy as np
import autobatch_vm as ab
from autobatch_vm.backends import numpy as numpy_backend

heap, program, batch, width, calls, stackless = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
    int(sys.argv[5]), sys.argv[6] == '1')
if heap == 'default':
  numpy_backend._heap_kept = True   # as if already done: glibc's defaults hold
ctx = ab.Context()

@ctx.batch()
def smooth(x):
  i = 0
  while i < 5:
    x = (x + x * x) * 0.5
    i = i + 1
  return x

@ctx.batch()
def fib(n):
  if n <= 1:
    return n
  return fib(n - 1) + fib(n - 2)

if heap == 'thread_nopad':   # thread heaps left to glibc
  numpy_backend._THREAD_HEAP_BYTES = 0
if program == 'smooth':
  fn, x = smooth, np.zeros((batch, width))
else:
  fn, x = fib, np.random.default_rng(batch).integers(8, 16, size=batch)

def body():
  fn(x[:2], stackless=stackless)   # sets the thresholds (unless 'default')
  if heap == 'trim32':
    ctypes.CDLL(None).mallopt(-1, 32 << 20)   # M_TRIM_THRESHOLD
  for _ in range(2):
    fn(x, stackless=stackless)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  start = time.perf_counter()
  for _ in range(calls):
    fn(x, stackless=stackless)
  seconds = (time.perf_counter() - start) / calls
  faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls
  print(faults, seconds)

if heap.startswith('thread'):   # as a Dask worker runs its tasks
  worker = threading.Thread(target=body)
  worker.start()
  worker.join()
else:
  body()
'''


def measure(heap, program, batch, stackless, env_threshold=None):
  """(faults, ms) per call of `program` in a fresh process."""
  env = dict(os.environ, PYTHONPATH=_ROOT)
  if env_threshold:
    env['MALLOC_MMAP_THRESHOLD_'] = str(env_threshold)
  with tempfile.NamedTemporaryFile('w', suffix='.py') as script:
    script.write(_CHILD)   # batched functions need a source file
    script.flush()
    out = subprocess.run(
        [sys.executable, script.name, heap, program, str(batch),
         str(FLAGS.width), str(FLAGS.calls), '1' if stackless else '0'],
        capture_output=True, text=True, check=True, env=env)
  faults, seconds = out.stdout.split()[-2:]
  return float(faults), float(seconds) * 1e3


def main(argv):
  del argv
  mib = FLAGS.batch * FLAGS.width * 8 / 2**20
  cells = [(f'array loop [{FLAGS.batch}, {FLAGS.width}] ({mib:.1f} MiB), '
            'stack VM', 'smooth', FLAGS.batch, False),
           ('array loop, stackless', 'smooth', FLAGS.batch, True),
           (f'fibonacci B={FLAGS.fib_batch}, stackless', 'fib',
            FLAGS.fib_batch, True)]
  heaps = (('kept', 'kept', None), ('kept, 32 MiB trim', 'trim32', None),
           ("glibc's defaults", 'default', None),
           ('kept, MALLOC_MMAP_THRESHOLD_', 'kept', 131072),
           ('kept, in a thread', 'thread', None),
           ('kept, in a thread, no top pad', 'thread_nopad', None))
  print('| program | heap | faults per call | ms per call |')
  print('|---|---|---|---|')
  for label, program, batch, stackless in cells:
    for heap_label, heap, env in heaps:
      faults, ms = measure(heap, program, batch, stackless, env)
      print(f'| {label} | {heap_label} | {faults:,.0f} | {ms:.1f} |')


if __name__ == '__main__':
  app.run(main)
