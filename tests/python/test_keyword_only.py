"""Keyword-only parameters (`def f(x, *, tol=1e-9)`), as Python binds them.

A batched function may take keyword-only parameters, with or without
defaults: a call, from Python or from another batched function, passes
them by name, and gets Python's `TypeError`-like `ArgumentError` for one
passed by position, missing or unknown.  Each program is compared with
`dry_run=True` on NumPy and TensorFlow.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import python as python_tests

ctx = ab.Context()


@ctx.batch
def affine(x, scale=2.0, *, shift=0.5, times):
  return (x * scale + shift) * times


@ctx.batch
def branches(x):
  if x > 0:
    return affine(x, shift=1.0, times=2.0)
  return affine(x, 3.0, times=-1.0)


@ctx.batch(per_member=True)
def newton_sqrt(a, *, tol=1e-12, max_iter=50):
  x = a
  i = 0
  while i < max_iter and abs(x * x - a) > tol * a:
    x = 0.5 * (x + a / x)
    i += 1
  return x, i


def test_calls_between_batched_functions_pass_them_by_name():
  x = np.array([1.0, -1.0, 2.0, -0.5])
  python_tests.run_everywhere(
      branches, [x], lambda alone: np.testing.assert_allclose(
          alone, np.where(x > 0, (2 * x + 1) * 2, -(3 * x + 0.5))))


def test_a_call_passes_them_by_name_and_omits_defaulted_ones():
  x = np.array([1.0, 2.0, 3.0])
  python_tests.run_everywhere(
      affine, [x], lambda alone: np.testing.assert_allclose(
          alone, (2 * x + 0.5) * 3.0), times=3.0)
  python_tests.run_everywhere(
      newton_sqrt, [np.array([2.0, 9.0, 0.5])],
      lambda alone: np.testing.assert_allclose(alone[0], [2 ** 0.5, 3.0,
                                                          0.5 ** 0.5]))
  x, steps = newton_sqrt(np.array([2.0, 9.0]), max_iter=2)
  np.testing.assert_array_equal(steps, [2, 2])


@pytest.mark.parametrize('call,message', [
    (lambda x: affine(x, 1.0, 2.0, times=1.0),
     r'takes 2 positional argument\(s\) \(x, scale\) but 3 were given'),
    (lambda x: affine(x), r'missing argument\(s\) times'),
    (lambda x: affine(x, times=1.0, shfit=0.0),
     "unexpected keyword argument 'shfit'"),
])
def test_binding_mistakes_are_named(call, message):
  with pytest.raises(errors.ArgumentError, match=message):
    call(np.ones(2))


_bad_ctx = ab.Context()


@_bad_ctx.batch
def _passes_by_position(x):
  return affine_too(x, 1.0, 2.0)


@_bad_ctx.batch
def affine_too(x, scale, *, shift=0.0):
  return x * scale + shift


def test_a_batched_call_passing_one_by_position_is_refused():
  with pytest.raises(errors.ArgumentError,
                     match=r'affine_too\(\) takes 2 positional argument'):
    _passes_by_position(np.ones(2))
