"""Shared pytest configuration: the `--long` fuzzing profile."""

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
                   'examples each.')


def pytest_configure(config):
  long = config.getoption('--long') or os.environ.get('AB_FUZZ') == 'long'
  settings.load_profile('long' if long else 'ci')
