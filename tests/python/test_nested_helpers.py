"""Helpers defined inside a batched function (`def`, `name = lambda`).

A helper defined at the top of a batched function's body runs as a
primitive, reading the function's variables as they are when it is
called (Python's late binding), other helpers, globals and defaults.
Each program is compared with `dry_run=True` (each member alone, as plain
Python) and with facts, on NumPy (stack VM and stackless) and TensorFlow
(eager, `tf.function`, XLA); what a primitive cannot do is refused at the
helper's line.
"""

import math

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import python as python_tests

ctx = ab.Context()
EPS = 1e-300


@ctx.batch
def newton(a, n):
  def f(x):
    return x * x - a                  # reads the function's `a`
  fp = lambda x: 2.0 * x
  def step(x, damp=1.0, *, eps=EPS):  # calls f: is given `a` too
    return x - damp * f(x) / (fp(x) + eps)
  x = a + 1.0
  i = 0
  while i < n:
    x = step(x)
    i += 1
  return x, f(x) + a                  # x * x, away from 0


@ctx.batch
def late_binding(a):
  k = 1.0
  scale = lambda t: t * k
  k = 3.0                             # read when `scale` runs
  return scale(a)


@ctx.batch(per_member=True)
def member_newton(a, n):
  def f(x):
    return x * x - a
  def root(x):
    return math.sqrt(abs(x))
  x = a + 1.0
  for _ in range(n):
    x = x - f(x) / (2.0 * x)
  return x, root(x)


def test_helpers_read_the_functions_variables_when_called():
  a = np.array([2.0, 9.0, 0.5])
  n = np.array([3, 8, 20])
  python_tests.run_everywhere(
      newton, [a, n], lambda alone: np.testing.assert_allclose(
          alone[0][1:], np.sqrt(a[1:]), rtol=1e-9))
  python_tests.run_everywhere(
      late_binding, [a], lambda alone: np.testing.assert_allclose(
          alone, 3.0 * a))


def test_helpers_in_a_per_member_function():
  a = np.array([2.0, 9.0, 0.5])
  n = np.array([10, 10, 10])
  python_tests.run_everywhere(
      member_newton, [a, n], lambda alone: np.testing.assert_allclose(
          alone[1], np.sqrt(np.sqrt(a)), rtol=1e-9))


def _refused(fn, match):
  c = ab.Context()
  batched = c.batch_uncurried(fn)
  with pytest.raises(errors.UnsupportedSyntaxError, match=match) as info:
    batched(np.ones(2))
  return info.value


def test_what_a_helper_cannot_do_is_refused_at_its_line():
  def calls_batched(x):
    def g(t):
      return calls_batched(t)   # the VM runs batched calls
    return g(x)
  err = _refused(calls_batched, 'a call of a batched function in helper')
  assert 'return calls_batched(t)' in str(err)

  def as_value(x):
    def g(t):
      return t * x
    h = g                       # a helper reading `x` as a value
    return h(x)
  _refused(as_value, "helper 'g', which reads the batched function's")

  def rebinds(x):
    y = x
    def g(t):
      nonlocal y
      y = t
      return t
    return g(x)
  _refused(rebinds, 'nonlocal or global declarations')

  def inside_if(x):
    if x > 0:
      def g(t):
        return t
    return x
  _refused(inside_if, 'nested function definitions')
