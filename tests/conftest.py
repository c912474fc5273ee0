"""Shared pytest configuration: the `--long` fuzzing profile, and how many
processes run the tests.

A run of whole directories (`python -m pytest -q`, `-m slow`, `-m ""`) runs
in worker processes of pytest-xdist (setup.cfg: `-n auto --dist loadfile`):
one per CPU, at most `MAX_WORKERS`, each test file in one worker, in its
order, so a file's programs compile once.  A run that names files or tests
(`python -m pytest -q tests/vm/test_vm.py -k fib`) runs in this process, with
no workers to start; so does any run with `-n 0`, and `-n N` asks for N.

Profiles of hypothesis: 'ci' (default: 30 examples per property, e.g. 30
fuzzed programs on NumPy, and 2 on TensorFlow in the slow tier, `-m slow`,
see tests/test_fuzz.py) and
'long' (`--long` or AB_FUZZ=long: 1,000 examples per property, 300 fuzzed
programs on TensorFlow).
"""

import os

from hypothesis import HealthCheck
from hypothesis import settings
import pytest

settings.register_profile(
    'ci', max_examples=30, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    'long', max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pytest_addoption(parser):
  parser.addoption('--long', action='store_true', default=False,
                   help='Run the fuzzer and property tests at >= 1000 '
                   'examples each (the TensorFlow fuzzer at 300 programs).')


def pytest_configure(config):
  long = config.getoption('--long') or os.environ.get('AB_FUZZ') == 'long'
  settings.load_profile('long' if long else 'ci')


# Each worker imports TensorFlow and compiles its files' programs (about
# 1-2 GB each); the largest test file bounds the run's time beyond a few.
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
  """Workers for `-n auto`: one per CPU (at most MAX_WORKERS) for a run of
  whole directories, none for a run that names files or tests."""
  if not all(os.path.isdir(arg) for arg in config.args):
    return 0
  try:
    cpus = len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    cpus = os.cpu_count() or 1
  return max(1, min(cpus, MAX_WORKERS))
