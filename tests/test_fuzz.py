"""Differential fuzzer: random programs, batched vs plain Python per member.

Every generated program (tests/fuzz_programs.py) runs batched and is
compared with the same source run as plain Python, one member at a time:

- NumPy backend, VM (`stack`) and `stackless`: every program;
- TensorFlow backend (programs restricted to operations that stage, see
  `fuzz_programs.program_strategy(portable=True)`): eager (the VM's cached
  `tf.function`), inside a user's `tf.function`, inside
  `tf.function(jit_compile=True)` (XLA) and `stackless` (eager).

Ints must match exactly, floats to 1e-12.  Counts: the default (CI) profile
runs NUMPY_PROGRAMS['ci'] programs on NumPy and TF_PROGRAMS['ci'] on
TensorFlow; `python -m pytest tests/test_fuzz.py --long` (or AB_FUZZ=long)
runs the 'long' counts (TF tracing and XLA compilation take about a second
per program and mode).  A mismatch prints the mode, the seed and the
program's source; add it to REGRESSIONS below.
"""

import os

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from tests import fuzz_programs

try:
  import tensorflow as tf
except ImportError:  # pragma: no cover
  tf = None

BATCH = 6
DEPTH = 200

NUMPY_MODES = ('stack', 'stackless')
TF_MODES = ('tf_eager', 'tf_function', 'tf_xla', 'tf_stackless')

LONG = settings.default.max_examples >= 1000   # conftest loads the profile
NUMPY_PROGRAMS = {'ci': 30, 'long': 1000}      # the profiles' max_examples
TF_PROGRAMS = {'ci': 4, 'long': 300}
INT_DTYPES = (np.int64, np.int32)


def make_args(seed, int_dtype=np.int64):
  rng = np.random.default_rng(seed)
  a = rng.integers(-20, 100, size=BATCH).astype(int_dtype)
  b = rng.integers(-20, 100, size=BATCH).astype(int_dtype)
  x = rng.uniform(-5, 30, size=BATCH)
  d = rng.integers(0, 4, size=BATCH).astype(int_dtype)
  return a, b, x, d


def reference(plain, name, args):
  """Each member alone, as plain Python scalars."""
  a, b, x, d = args
  expected = [getattr(plain, name)(int(a[i]), int(b[i]), float(x[i]),
                                   int(d[i])) for i in range(BATCH)]
  return (np.array([int(e[0]) for e in expected]),
          np.array([float(e[1]) for e in expected]))


def run_batched(fn, args, mode):
  """`fn(*args)` batched in `mode`; returns NumPy arrays."""
  if mode in NUMPY_MODES:
    return fn(*args, stackless=(mode == 'stackless'), max_stack_depth=DEPTH)
  targs = [tf.constant(v) for v in args]
  if mode == 'tf_eager':
    out = fn(*targs, max_stack_depth=DEPTH)
  elif mode == 'tf_stackless':
    out = fn(*targs, stackless=True)
  else:
    out = tf.function(lambda *a: fn(*a, max_stack_depth=DEPTH),
                      jit_compile=(mode == 'tf_xla'))(*targs)
  for v in out:
    assert tf.is_tensor(v), (mode, type(v))
  return tuple(np.asarray(v) for v in out)


def run_program(source, seed, modes=NUMPY_MODES, int_dtype=np.int64):
  plain = fuzz_programs.load(source, batched=False)
  batched = fuzz_programs.load(source, batched=True)
  try:
    name = fuzz_programs.main_name(source)
    args = make_args(seed, int_dtype)
    exp_int, exp_float = reference(plain, name, args)
    for mode in modes:
      where = (f'mode={mode} seed={seed} int_dtype='
               f'{np.dtype(int_dtype).name}\n{source}')
      got_int, got_float = run_batched(getattr(batched, name), args, mode)
      np.testing.assert_array_equal(got_int, exp_int, err_msg=where)
      np.testing.assert_allclose(got_float, exp_float, rtol=1e-12,
                                 atol=1e-12, err_msg=where)
  finally:
    os.remove(plain.__path_to_remove__)
    os.remove(batched.__path_to_remove__)


@st.composite
def cases(draw, portable=False):
  """(source, seed, int dtype of a, b, d)."""
  int_dtype = draw(st.sampled_from(INT_DTYPES))
  # With int32 state, avoid WHERE_LITERAL_BUG and RANGE_INT32_BUG.
  source = draw(fuzz_programs.program_strategy(
      portable=portable, int32_safe=(int_dtype == np.int32)))
  return source, draw(st.integers(0, 2**16)), int_dtype


@given(cases())
def test_random_programs_match_python(case):
  source, seed, int_dtype = case
  run_program(source, seed, NUMPY_MODES, int_dtype)


@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
@settings(max_examples=TF_PROGRAMS['long' if LONG else 'ci'])
@given(cases(portable=True))
def test_random_programs_match_python_on_tf(case):
  source, seed, int_dtype = case
  run_program(source, seed, NUMPY_MODES + TF_MODES, int_dtype)


# Programs that once failed, with the seed, the modes and the int dtype.
REGRESSIONS = []


@pytest.mark.parametrize('source, seed, modes, int_dtype', REGRESSIONS)
def test_regressions(source, seed, modes, int_dtype):
  if any(m.startswith('tf') for m in modes) and tf is None:
    pytest.skip('needs TensorFlow')
  run_program(source, seed, modes, int_dtype)
