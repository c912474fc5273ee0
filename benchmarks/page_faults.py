"""Page faults per call on the NumPy backend, with and without a kept heap.

    python benchmarks/page_faults.py [--batch=64] [--width=8192] [--calls=5]

Each line runs in a fresh process: a loop that updates a `[batch, width]`
float64 array five times (stack VM, then stackless), called twice to warm
up, then `--calls` times, and reports the minor page faults per call
(`getrusage`).  "kept" is the backend as shipped (`keep_freed_heap`
sets glibc's malloc thresholds); "default" skips it, so glibc's starting
thresholds hold: arrays above 128 KiB come from fresh `mmap` pages on
every call.  A fixed `MALLOC_MMAP_THRESHOLD_` in the environment is the
third line: it turns off glibc's own adjustment, not ours.
"""

import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_integer('batch', 64, 'Batch size.')
flags.DEFINE_integer('width', 8192, 'Elements per member (float64).')
flags.DEFINE_integer('calls', 5, 'Measured calls.')

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = '''
import resource, sys
import numpy as np
import autobatch_vm as ab
from autobatch_vm.backends import numpy as numpy_backend

if sys.argv[1] == 'default':
  numpy_backend._heap_kept = True   # as if already done: glibc's defaults hold
batch, width, calls, stackless = (int(sys.argv[2]), int(sys.argv[3]),
                                  int(sys.argv[4]), sys.argv[5] == '1')
ctx = ab.Context()

@ctx.batch()
def smooth(x):
  i = 0
  while i < 5:
    x = (x + x * x) * 0.5
    i = i + 1
  return x

x = np.zeros((batch, width))
for _ in range(2):
  smooth(x, stackless=stackless)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(calls):
  smooth(x, stackless=stackless)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls)
'''


def faults(heap, stackless, env_threshold=None):
  env = dict(os.environ, PYTHONPATH=_ROOT)
  if env_threshold:
    env['MALLOC_MMAP_THRESHOLD_'] = str(env_threshold)
  with tempfile.NamedTemporaryFile('w', suffix='.py') as script:
    script.write(_CHILD)   # batched functions need a source file
    script.flush()
    out = subprocess.run(
        [sys.executable, script.name, heap, str(FLAGS.batch), str(FLAGS.width),
         str(FLAGS.calls), '1' if stackless else '0'],
        capture_output=True, text=True, check=True, env=env)
  return float(out.stdout.split()[-1])


def main(argv):
  del argv
  mib = FLAGS.batch * FLAGS.width * 8 / 2**20
  print(f'page faults per call, [{FLAGS.batch}, {FLAGS.width}] float64 '
        f'({mib:.1f} MiB per array)')
  print(f'{"heap":<28} {"stack VM":>10} {"stackless":>10}')
  for label, heap, env in (('kept', 'kept', None),
                           ('default', 'default', None),
                           ('kept, MALLOC_MMAP_THRESHOLD_', 'kept', 131072)):
    print(f'{label:<28} {faults(heap, False, env):>10.0f} '
          f'{faults(heap, True, env):>10.0f}')


if __name__ == '__main__':
  app.run(main)
