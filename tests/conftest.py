"""Shared pytest configuration: the `--long` fuzzing profile.

Profiles of hypothesis: 'ci' (default: 30 examples per property, e.g. 30
fuzzed programs on NumPy, and 2 on TensorFlow in the slow tier, `-m slow`,
see tests/test_fuzz.py) and
'long' (`--long` or AB_FUZZ=long: 1,000 examples per property, 300 fuzzed
programs on TensorFlow).
"""

import os

from hypothesis import HealthCheck
from hypothesis import settings

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
