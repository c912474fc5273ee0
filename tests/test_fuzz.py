"""Differential fuzzer: random programs, batched vs plain Python per member.

Every generated program (tests/fuzz_programs.py) runs batched and is
compared with the same source run as plain Python, one member at a time:

- NumPy backend, VM (`stack`) and `stackless`: every program;
- TensorFlow backend (programs restricted to operations that stage, see
  `fuzz_programs.program_strategy(portable=True)`): eager (the VM's cached
  `tf.function`), inside a user's `tf.function`, inside
  `tf.function(jit_compile=True)` (XLA) and `stackless` (eager).

The state `a, b, d` is int64 or int32 (drawn per program), `x` float64.
Ints must match exactly, floats to 1e-12, shapes are `[batch]`, and every
mode must give the dtypes `dry_run=True` gives (each member run alone
through the batched module's Python), whose values match too.  Counts:
the default (CI) profile runs NUMPY_PROGRAMS['ci'] programs on NumPy and
TF_PROGRAMS['ci'] on TensorFlow (each of those also on NumPy; that test
is in the slow tier, `-m slow`, with the regressions' int64 controls on
TensorFlow); `python -m pytest tests/test_fuzz.py -m "" --long` (or
AB_FUZZ=long)
runs the 'long' counts (TF tracing and XLA compilation take about a second
per program and mode).  A mismatch prints the mode, the seed, the int
dtype and the program's source; minimize it and add it to
_REGRESSION_PROGRAMS below.
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
TF_PROGRAMS = {'ci': 2, 'long': 300}
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


def check_result(got, expected, rtol, where):
  """(int, float) results: the values, and shapes `[BATCH]`."""
  (got_int, got_float), (exp_int, exp_float) = got, expected
  assert got_int.shape == got_float.shape == (BATCH,), (
      f'shapes {got_int.shape} {got_float.shape}\n{where}')
  assert got_int.dtype.kind in 'iu' and got_float.dtype.kind == 'f', (
      f'dtypes {got_int.dtype} {got_float.dtype}\n{where}')
  np.testing.assert_array_equal(got_int, exp_int, err_msg=where)
  np.testing.assert_allclose(got_float, exp_float, rtol=rtol, atol=rtol,
                             err_msg=where)


def run_program(source, seed, modes=NUMPY_MODES, int_dtype=np.int64,
                rtol=1e-12):
  plain = fuzz_programs.load(source, batched=False)
  batched = fuzz_programs.load(source, batched=True)
  try:
    name = fuzz_programs.main_name(source)
    args = make_args(seed, int_dtype)
    exp_int, exp_float = reference(plain, name, args)
    # dry_run (each member alone through the batched module's own Python)
    # is the reference for dtypes: every mode gives its dtypes and shapes.
    where = (f'mode=dry_run seed={seed} int_dtype='
             f'{np.dtype(int_dtype).name}\n{source}')
    alone = tuple(np.asarray(v) for v in getattr(batched, name)(
        *args, dry_run=True))
    check_result(alone, (exp_int, exp_float), rtol, where)
    dtypes = {'dry_run': tuple(v.dtype for v in alone)}
    for mode in modes:
      where = (f'mode={mode} seed={seed} int_dtype='
               f'{np.dtype(int_dtype).name}\n{source}')
      got = run_batched(getattr(batched, name), args, mode)
      check_result(got, (exp_int, exp_float), rtol, where)
      check_result(got, alone, rtol, where)
      dtypes[mode] = tuple(v.dtype for v in got)
      assert len(set(dtypes.values())) == 1, f'dtypes {dtypes}\n{where}'
  finally:
    os.remove(plain.__path_to_remove__)
    os.remove(batched.__path_to_remove__)


@st.composite
def cases(draw, portable=False):
  """(source, seed, int dtype of a, b, d)."""
  int_dtype = draw(st.sampled_from(INT_DTYPES))
  source = draw(fuzz_programs.program_strategy(portable=portable))
  return source, draw(st.integers(0, 2**16)), int_dtype


@given(cases())
def test_random_programs_match_python(case):
  source, seed, int_dtype = case
  run_program(source, seed, NUMPY_MODES, int_dtype)


@pytest.mark.slow    # a TensorFlow trace and XLA compile per fuzzed program
@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
@settings(max_examples=TF_PROGRAMS['long' if LONG else 'ci'])
@given(cases(portable=True))
def test_random_programs_match_python_on_tf(case):
  source, seed, int_dtype = case
  run_program(source, seed, NUMPY_MODES + TF_MODES, int_dtype)


# -- regressions ------------------------------------------------------------------
# Programs the fuzzer found failing, minimized.  Each runs in every mode; the
# modes where it still fails are xfailed (strict) with the bug's description.
# Fixed: with int32 state, `x if c else <literal>` was int64 on NumPy >= 2;
# a `for i in range(n)` counter and a literal argument of a batched call were
# int64 arrays where inference took them as literals (PrimOp.casts now).

_HEADER = 'import sys\nimport numpy as np\nimport autobatch_vm as ab\n\n'

_REGRESSION_PROGRAMS = [
    # (name, source, int dtype, {mode: bug that makes it fail})
    ('where_literal_int32', _HEADER + (
        '@DECORATOR\n'
        'def f0(a, b, x, d):\n'
        '    a = (0 if a > 1 else a)\n'
        '    return a, x\n'), np.int32,
     {}),
    ('range_int32', _HEADER + (
        '@DECORATOR\n'
        'def f0(a, b, x, d):\n'
        '    c = a % 7\n'
        '    for i0 in range(ab.truthy(a % 5)):\n'
        '        c = (c + i0) % 997\n'
        '    return c, x\n'), np.int32,
     {}),
    ('call_literal_int32', _HEADER + (
        '@DECORATOR\n'
        'def f0(a, b, x, d):\n'
        '    return (a + b) % 997, x\n'
        '\n'
        '@DECORATOR\n'
        'def f1(a, b, x, d):\n'
        '    a, x = f0(a, 1, x, d)\n'
        '    return a, x\n'), np.int32,
     {}),
    # A select of literals returned next to an array, assigned to an int32
    # variable: the result must stay a (weak) literal.
    ('literal_result_int32', _HEADER + (
        '@DECORATOR\n'
        'def f0(a, b, x, d):\n'
        '    a = 0\n'
        '    return (0 if 0 < a % 997 else a % 997), x\n'
        '\n'
        '@DECORATOR\n'
        'def f1(a, b, x, d):\n'
        '    a, x = f0(0, 0, x, d)\n'
        '    a = a % 997\n'
        '    return a, x\n'), np.int32, {}),
    # A select between a literal parameter and a literal, added to an int32
    # parameter: a literal too (Python's `x if c else y`), so still int32.
    ('literal_select_int32', _HEADER + (
        '@DECORATOR\n'
        'def f0(a, b, x, d):\n'
        '    return (b + (a if a < -1 else -1)) % 997, x\n'
        '\n'
        '@DECORATOR\n'
        'def f1(a, b, x, d):\n'
        '    a, x = f0(0, a, x, d)\n'
        '    a = a % 997\n'
        '    return a, x\n'), np.int32, {}),
    # The same programs with int64 state work everywhere.
    ('where_literal_int64', None, np.int64, {}),
    ('range_int64', None, np.int64, {}),
    ('call_literal_int64', None, np.int64, {}),
    ('literal_result_int64', None, np.int64, {}),
    ('literal_select_int64', None, np.int64, {}),
]


def _regression_params():
  sources = {}
  params = []
  for name, source, int_dtype, failing in _REGRESSION_PROGRAMS:
    key = name.rsplit('_', 1)[0]
    source = sources.setdefault(key, source)
    for mode in NUMPY_MODES + TF_MODES:
      marks = []
      if mode in failing:
        marks.append(pytest.mark.xfail(strict=True, reason=failing[mode]))
      if mode.startswith('tf') and tf is None:
        marks.append(pytest.mark.skip(reason='needs TensorFlow'))
      if mode.startswith('tf') and int_dtype == np.int64:
        marks.append(pytest.mark.slow)   # the controls, on NumPy by default
      params.append(pytest.param(source, mode, int_dtype, marks=marks,
                                 id=f'{name}-{mode}'))
  return params


@pytest.mark.parametrize('source, mode, int_dtype', _regression_params())
def test_regressions(source, mode, int_dtype):
  run_program(source, 0, (mode,), int_dtype)


# Found by the fuzzer (then minimized): iterating `x + x * x * 0.01` gives
# results 7e-11 (tf.function, and eager, which runs the same graph) and 3e-8
# (XLA) away from plain Python's, relatively.  Not an autobatch_vm bug:
# TensorFlow's graph optimizer regroups `x * x * 0.01` (and folds
# `(x - 1.25) + 0.5` into `x + -0.75`) and XLA fuses multiply-adds, each
# changing the last bit, which the chaotic map amplifies; stackless TF,
# which runs op by op, matches exactly.  With a power-of-two constant every
# grouping rounds alike and all modes agree to 1e-12, which is why
# fuzz_programs.float_expr uses only such constants.
_REASSOCIATION = _HEADER + (
    '@DECORATOR\n'
    'def f0(a, b, x, d):\n'
    '    t0 = 0\n'
    '    while t0 < 6:\n'
    '        t0 += 1\n'
    '        if d > 0:\n'
    '            a, x = f0(a, b, (x + x * x * K) % 50.0, d - 1)\n'
    '    return a, x\n')


@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
@pytest.mark.parametrize('mode', ['tf_function', 'tf_xla'])
def test_tf_float_rounding_differs_only_by_reassociation(mode):
  run_program(_REASSOCIATION.replace('K', '0.01'), 3446, (mode,), rtol=1e-6)
  run_program(_REASSOCIATION.replace('K', '0.0078125'), 3446, (mode,))
