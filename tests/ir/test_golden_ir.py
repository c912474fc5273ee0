"""Golden printed IR of the frontend's fibonacci at every stage.

Compares `ctx.program`, `ctx.program_compiled` and `ctx.program_lowered`
listings with the files in `tests/ir/golden/`.  One narrow case (int8 inputs)
checks that literals take the narrow dtype and the listing says so.

After an intended change of the IR, regenerate and review the diff:

    UPDATE_GOLDEN=1 pytest tests/ir/test_golden_ir.py
    git diff tests/ir/golden
"""

import difflib
import os

import numpy as np
import pytest

import autobatch_vm as ab

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'golden')
UPDATE = os.environ.get('UPDATE_GOLDEN') == '1'

ctx = ab.Context()


@ctx.batch(type_inference=lambda arg_types: arg_types[0])
def fibonacci(n):
  if n > 2:
    return fibonacci(n - 1) + fibonacci(n - 2)
  else:
    return 1


INT64 = [ab.TensorType(np.int64, ())]
INT8 = [ab.TensorType(np.int8, ())]

LISTINGS = {
    'fibonacci_program': lambda: ctx.program('fibonacci'),
    'fibonacci_compiled': lambda: ctx.program_compiled('fibonacci', INT64),
    'fibonacci_lowered': lambda: ctx.program_lowered('fibonacci', INT64),
    'fibonacci_int8_lowered': lambda: ctx.program_lowered('fibonacci', INT8),
}


def check_golden(name, text):
  path = os.path.join(GOLDEN_DIR, name + '.txt')
  text = text.rstrip('\n') + '\n'
  if UPDATE:
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    with open(path, 'w') as f:
      f.write(text)
    return
  if not os.path.exists(path):
    pytest.fail(f'No golden file {path}; create it with UPDATE_GOLDEN=1 '
                f'pytest {__file__}')
  with open(path) as f:
    want = f.read()
  if text != want:
    diff = ''.join(difflib.unified_diff(
        want.splitlines(True), text.splitlines(True), 'golden', 'actual'))
    pytest.fail(f'{name} differs from {path}:\n{diff}\nIf the change is '
                'intended: UPDATE_GOLDEN=1 pytest tests/ir/test_golden_ir.py')


@pytest.mark.parametrize('name', sorted(LISTINGS))
def test_golden_listing(name):
  check_golden(name, str(LISTINGS[name]()))


def test_golden_programs_run():
  """The listed programs are the ones that run, and they are right."""
  n = np.arange(1, 12)
  want = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89]
  assert fibonacci(n).tolist() == want
  result = fibonacci(n.astype(np.int8))
  assert result.dtype == np.int8 and result.tolist() == want
