"""Runs TensorFlow Probability's own auto_batching tests on autobatch_vm.

TFP's test files are not in its wheel, so this script is not part of the
pytest suite: it takes a checkout of tensorflow/probability, copies the
test modules (and the sampler and helpers they import) into a scratch
folder with each `auto_batching` import rebound to `autobatch_vm`, and
runs them with pytest against the installed TFP for everything else.

    git clone --depth 1 https://github.com/tensorflow/probability /tmp/tfp
    python tests/run_tfp_suite.py /tmp/tfp [pytest arguments...]
    python tests/run_tfp_suite.py /tmp/tfp --seeds=50   # NUTS eager tests,
                                                        # 50 test seeds

docs/migrating_from_tfp.md lists the tests expected to fail and why.
"""

import os
import re
import subprocess
import sys
import tempfile

# Files copied from the checkout, by path under tensorflow_probability/python.
FILES = (
    'experimental/auto_batching/frontend_test.py',
    'experimental/auto_batching/dsl_test.py',
    'experimental/auto_batching/test_programs.py',
    'experimental/mcmc/nuts_autobatching.py',
    'experimental/mcmc/nuts_autobatching_test.py',
    'experimental/mcmc/nuts_autobatching_xla_test.py',
    # Imported by the NUTS test, missing from the wheel.
    'distributions/internal/statistical_testing.py',
)

# Import lines rebound: (pattern, replacement).
REBIND = (
    (r'^from tensorflow_probability\.python\.experimental\.auto_batching '
     r'import (.*)$', r'from autobatch_vm import \1'),
    (r'^from tensorflow_probability\.python\.experimental import '
     r'auto_batching as ab$', 'import autobatch_vm as ab'),
    (r'^from tensorflow_probability\.python\.experimental\.mcmc import '
     r'nuts_autobatching(.*)$', r'import nuts_autobatching\1'),
    (r'^from tensorflow_probability\.python\.distributions\.internal import '
     r'statistical_testing as st$', 'import statistical_testing as st'),
)

# absl flags must be parsed before TFP's test_util reads them; TFP_SEED
# sets --fixed_seed.
CONFTEST = '''\
import os
from absl import flags
import tensorflow_probability.python.internal.test_util  # defines the flags
flags.FLAGS.mark_as_parsed()
if os.environ.get('TFP_SEED'):
  flags.FLAGS.fixed_seed = os.environ['TFP_SEED']
'''

# The NUTS tests that run each kernel's type inference eagerly, where random
# primitives are checked for mixing members (run once per seed by --seeds).
SEEDED = ('testCorrelatedMVNOneStep_eager',
          'testStacklessUnivariateNormalTargetConservation_eager',
          'testReproducibility_eager')


def prepare(checkout, folder):
  """Copies and rebinds TFP's files from `checkout` into `folder`."""
  root = os.path.join(checkout, 'tensorflow_probability', 'python')
  for path in FILES:
    with open(os.path.join(root, path)) as f:
      text = f.read()
    for pattern, replacement in REBIND:
      text = re.sub(pattern, replacement, text, flags=re.M)
    with open(os.path.join(folder, os.path.basename(path)), 'w') as f:
      f.write(text)
  with open(os.path.join(folder, 'conftest.py'), 'w') as f:
    f.write(CONFTEST)


def main(argv):
  if len(argv) < 2:
    print(__doc__)
    return 2
  checkout, rest = argv[1], argv[2:]
  seeds = [a for a in rest if a.startswith('--seeds=')]
  rest = [a for a in rest if not a.startswith('--seeds=')]
  with tempfile.TemporaryDirectory() as folder:
    prepare(checkout, folder)
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider']
    if not seeds:
      return subprocess.call(command + (rest or [
          'frontend_test.py', 'dsl_test.py', 'nuts_autobatching_test.py',
          'nuts_autobatching_xla_test.py']), cwd=folder)
    failed = 0
    selected = ' or '.join(SEEDED)
    for seed in range(int(seeds[0].split('=')[1])):
      env = dict(os.environ, TFP_SEED=str(1000 + seed))
      code = subprocess.call(command + ['nuts_autobatching_test.py', '-k',
                                        selected] + rest,
                             cwd=folder, env=env)
      print(f'seed {1000 + seed}: exit {code}', flush=True)
      failed += code != 0
    print(f'{failed} seeds failed')
    return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
