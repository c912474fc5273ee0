"""Keyword-only parameters (`def f(x, *, tol=1e-9)`), as Python binds them.

A batched function may take keyword-only parameters, with or without
defaults: a call, from Python or from another batched function, passes
them by name, and gets Python's `TypeError`-like `ArgumentError` for one
passed by position, missing or unknown.  Each program is compared with
`dry_run=True` on NumPy and TensorFlow.

A default that a call from outside takes is the same value for every
member, as each member called alone in Python takes it: an array default
(`w=W0`, a `[3]` vector) is `W0` for each member (broadcast along the
batch axis, batch-aware), not a batch of 3 scalars; passed explicitly,
the argument is a batch as any other.
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


# A weight vector shared by every member, as a default.
_W0 = np.array([1.0, 0.5, 0.25])
_defaults_ctx = ab.Context()


@_defaults_ctx.batch(per_member=True)
def weighted(v, w=_W0, *, scale=2.0):
  return np.dot(v, w) * scale


@_defaults_ctx.batch
def weighted_batch_aware(v, w=_W0, *, scale=2.0):
  return np.sum(v * w, axis=-1) * scale


@_defaults_ctx.batch(per_member=True)
def affine_of_pair(v, coef=(_W0, 1.5), *, power=[1.0, 2.0]):  # pylint: disable=dangerous-default-value
  return (np.dot(v, coef[0]) + coef[1]) * power[0] + power[1]


@_defaults_ctx.batch
def calls_weighted(v):
  return weighted(v) + weighted_batch_aware(v, scale=1.0)


def _each_member(fn, *args, **kwargs):
  """`fn` called on each member alone, as plain Python, stacked."""
  return np.stack([np.asarray(fn(*[a[b] for a in args], **kwargs))
                   for b in range(len(args[0]))])


@pytest.mark.parametrize('batch', [2, 3])
@pytest.mark.parametrize('fn', [weighted, weighted_batch_aware])
def test_an_array_default_is_the_same_for_every_member(fn, batch):
  # Batch 3, the default's length, once read it as a batch of 3 scalars
  # (member b: v_b * W0[b] * scale); other sizes refused 'w' as a batch.
  v = np.arange(3.0 * batch).reshape(batch, 3)
  expected = _each_member(weighted.python_function, v)
  python_tests.run_everywhere(
      fn, [v], lambda alone: np.testing.assert_allclose(alone, expected))
  for one in (fn(v[:1]), fn(v[:1], dry_run=True), fn(v, scale=1.0) * 2):
    np.testing.assert_allclose(one, expected[:len(one)])


@pytest.mark.parametrize('fn', [weighted, weighted_batch_aware])
def test_an_array_passed_for_it_is_a_batch(fn):
  v = np.arange(9.0).reshape(3, 3)
  w = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
  python_tests.run_everywhere(
      fn, [v, w], lambda alone: np.testing.assert_allclose(
          alone, 2 * np.diagonal(v)))
  with pytest.raises(errors.ArgumentError, match='different batch sizes'):
    fn(v, w[:2])


def test_array_leaves_of_a_structured_default_and_number_lists():
  v = np.arange(6.0).reshape(2, 3)
  expected = _each_member(affine_of_pair.python_function, v)
  python_tests.run_everywhere(
      affine_of_pair, [v],
      lambda alone: np.testing.assert_allclose(alone, expected))


def test_a_call_between_batched_functions_takes_the_same_default():
  v = np.arange(9.0).reshape(3, 3)
  expected = 1.5 * _each_member(weighted.python_function, v)
  python_tests.run_everywhere(
      calls_weighted, [v],
      lambda alone: np.testing.assert_allclose(alone, expected))
