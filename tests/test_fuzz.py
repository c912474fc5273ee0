"""Differential fuzzer: random programs, batched vs plain Python per member.

Runs at a small count in CI; `python -m pytest tests/test_fuzz.py --long`
runs at least 1,000 programs.  A mismatch prints the program's source;
add it to tests/test_fuzz_regressions.py.
"""

import os

from hypothesis import given
from hypothesis import strategies as st
import numpy as np

from tests import fuzz_programs

BATCH = 6


def run_program(source, seed, modes=('stack', 'stackless')):
  plain = fuzz_programs.load(source, batched=False)
  batched = fuzz_programs.load(source, batched=True)
  try:
    name = fuzz_programs.main_name(source)
    rng = np.random.default_rng(seed)
    a = rng.integers(-20, 100, size=BATCH)
    b = rng.integers(-20, 100, size=BATCH)
    x = rng.uniform(-5, 30, size=BATCH)
    d = rng.integers(0, 4, size=BATCH)
    expected = [getattr(plain, name)(int(a[i]), int(b[i]), float(x[i]),
                                     int(d[i])) for i in range(BATCH)]
    exp_int = np.array([int(e[0]) for e in expected])
    exp_float = np.array([float(e[1]) for e in expected])
    for mode in modes:
      got_int, got_float = getattr(batched, name)(
          a, b, x, d, stackless=(mode == 'stackless'), max_stack_depth=200)
      np.testing.assert_array_equal(
          got_int, exp_int, err_msg=f'{mode}\n{source}')
      np.testing.assert_allclose(got_float, exp_float, rtol=1e-12,
                                 atol=1e-12, err_msg=f'{mode}\n{source}')
  finally:
    os.remove(plain.__path_to_remove__)
    os.remove(batched.__path_to_remove__)


@given(fuzz_programs.program_strategy(), st.integers(0, 2**16))
def test_random_programs_match_python(source, seed):
  run_program(source, seed)
