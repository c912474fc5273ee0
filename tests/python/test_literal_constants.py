"""A local assigned one literal is that constant (`python.source.literal_constants`).

`h = 0.1`, assigned once at a function's top level and bound nowhere
else, is read as Python reads it for one member: a number, which
broadcasts against each member's values, not an array of one number per
member (`[batch]`), which would line up with a member's vector's last
axis.  Each program runs batched against its dry run on NumPy (stack VM,
stackless) and TensorFlow (eager, `tf.function`, XLA).  Names bound any
other way (twice, in a branch or loop, by `for`, `+=`, `del`, `global`,
before a read) stay variables; against a vector the broadcasting check
refuses such a number (`tests/passes/test_member_mixing.py`).
"""

import ast
import textwrap

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.python import source
from tests.python import run_everywhere


def _constants(code):
  fn = ast.parse(textwrap.dedent(code)).body[0]
  return source.literal_constants(fn, [a.arg for a in fn.args.args])


def test_which_locals_are_constants():
  assert _constants('''
      def f(x, p):
        h = 0.1
        n: int = 3
        mode = 'fast'
        shape = (2, (3, None))
        neg = -4
        p = 2.0
        twice = 1
        twice = 2
        later = 1
        later += 1
        listed = [1, 2]
        branch = 0
        if x > 0:
          inner = 5
        looped = 1
        for looped in range(3):
          pass
        gone = 1
        del gone
        early = x + late
        late = 1.0
        glob = 1
        global glob
        comp = 1
        ys = [comp for comp in range(3)]
        return x
      ''') == {'h': 0.1, 'n': 3, 'mode': 'fast', 'shape': (2, (3, None)),
               'neg': -4, 'branch': 0}


def test_names_a_nested_function_binds_are_not_constants():
  assert _constants('''
      def f(x):
        a = 1
        b = 2
        c = 3
        def g(a):
          return a
        h = lambda b: b
        def k():
          nonlocal c
          c = 4
        return x
      ''') == {}


ctx = ab.Context()


@ctx.batch
def euler(v, n):
  h = 0.1
  eps = 1e-3
  k = 0
  while k < n:
    v = v + h * v + eps
    k += 1
  return v


@ctx.batch
def clipped(v, n):
  limit = 2
  mode = 'clip'
  k = 0
  while k < n:
    v = v * 1.5
    if mode == 'clip':
      v = np.minimum(v, limit)
    k += 1
  return v


@ctx.batch
def scaled_call(v, n):
  factor = 0.5
  return euler(v * factor, n)


@ctx.batch(per_member=True)
def member_poly(v):
  c = 2.0
  total = 0.0
  for x in v:
    total += c * x * x
  return total


@pytest.mark.parametrize('batch', [2, 3, 5])
def test_a_constant_scales_each_members_vector(batch):
  # At 2 (and 3) members, `h` as an array [batch] would broadcast along
  # v's last axis of 2 (3): silently wrong, or refused.
  for width in (2, 3):
    v = np.arange(batch * width, dtype=np.float64).reshape(batch, width)
    run_everywhere(euler, [v, np.arange(batch) % 4])


def test_constants_in_conditions_and_calls():
  v = np.linspace(0.1, 1.0, 6).reshape(3, 2)
  n = np.array([0, 2, 4])
  run_everywhere(clipped, [v, n])
  run_everywhere(scaled_call, [v, n])
  np.testing.assert_allclose(clipped(v, n).max(), 2.0)


def test_a_constant_in_a_per_member_function():
  run_everywhere(member_poly, [np.arange(12.0).reshape(4, 3)])


def test_a_float32_member_keeps_its_dtype_against_a_constant():
  v = np.ones((3, 2), np.float32)
  out = euler(v, np.array([1, 2, 3]))
  assert out.dtype == np.float32
  np.testing.assert_allclose(out, euler(v, np.array([1, 2, 3]),
                                        dry_run=True))
