"""`None` arguments and defaults (`Context.variant`).

A call that passes `None`, or leaves out a parameter whose default is
`None`, runs the function's variant with that parameter fixed to `None`:
its `is None` tests decided where it still holds `None`
(`python.source.fold_none_tests`), the side that does not run not
compiled.  Calls from outside and from other batched functions, batch-aware
and per-member functions, recursion: each against its dry run on NumPy
(stack VM, stackless) and TensorFlow (eager, `tf.function`, XLA).
"""

import ast
import textwrap

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.python import source
from tests.python import run_everywhere

ctx = ab.Context()


@ctx.batch
def damp(x, scale=None):
  if scale is None:
    scale = np.ones_like(x)
  return x * scale


@ctx.batch
def solve(a, b, x0=None, tol=1e-10):
  if x0 is None:
    x = b * 0.0
  else:
    x = x0
  k = 0
  while k < 50:
    r = b - a * x
    if np.abs(r) < tol:
      break
    x = x + 0.5 * r / a
    k += 1
  return x, k


@ctx.batch
def both_starts(a, b):
  return solve(a, b), solve(a, b, b / a), solve(a, b, None, 1e-3)


@ctx.batch
def maybe_add(x, y=None):
  out = x * 2
  if y is not None:
    out = out + y
  return out


@ctx.batch
def uses_maybe(x):
  return maybe_add(x) + maybe_add(x, x) + maybe_add(x, y=None)


@ctx.batch
def fib(n, memo=None):
  if n < 2:
    return n
  return fib(n - 1, memo) + fib(n - 2, None)


@ctx.batch(per_member=True)
def clip_norm(v, max_norm=None):
  n = np.sqrt(np.sum(v * v))
  if max_norm is not None and n > max_norm:
    v = v * (max_norm / n)
  return v


@ctx.batch(per_member=True)
def weighted_mean(v, w=None):
  w = np.ones_like(v) if w is None else w
  return np.sum(v * w) / np.sum(w)


@ctx.batch
def norms(v):
  return clip_norm(v), clip_norm(v, 1.0), weighted_mean(v)


X = np.array([1.0, 2.0, 3.0])
A, B = np.array([1.0, 2.0, 4.0]), np.array([1.0, 1.0, 3.0])
V = np.random.default_rng(0).normal(size=(4, 3))


@pytest.mark.parametrize('fn, args', [
    (damp, [X]), (damp, [X, X]), (solve, [A, B]), (solve, [A, B, B]),
    (both_starts, [A, B]), (uses_maybe, [X]), (fib, [np.array([0, 3, 8])]),
    (clip_norm, [V]), (clip_norm, [V, np.full(4, 1.0)]),
    (weighted_mean, [V]), (norms, [V]),
], ids=lambda p: getattr(p, '__name__', ''))
def test_none_arguments_against_the_dry_run(fn, args):
  run_everywhere(fn, args)


def test_none_given_or_defaulted_runs_the_same_variant():
  np.testing.assert_array_equal(damp(X), damp(X, None))
  np.testing.assert_array_equal(damp(X, scale=None), X)
  assert 'damp(scale=None)' in str(ctx.lowered_for_args('damp', [X]))
  assert 'damp(scale=None)' not in str(ctx.lowered_for_args('damp', [X, X]))
  assert ctx.variant('damp', ['scale']).name == 'damp(scale=None)'
  assert 'damp(scale=None)' not in ctx.function_names()


def test_a_variant_compiles_only_the_side_that_runs():
  # With x0 None, `x = x0` is not compiled; with x0 given (an array,
  # never None), `b * 0.0` is not.
  lowered = str(ctx.lowered_for_args('solve', [A, B]))
  assert 'b * 0.0' in lowered and '= prim[x0]' not in lowered
  assert 'b * 0.0' not in str(ctx.lowered_for_args('solve', [A, B, B]))


def test_none_used_as_a_number_fails_at_the_users_line():
  local = ab.Context()

  @local.batch
  def shift(x, offset=None):
    return x + offset  # the line

  with pytest.raises(errors.AutoBatchError) as info:
    shift(X)
  assert info.value.function == 'shift'
  assert 'NoneType' in str(info.value)


def _folded(code, static, given=()):
  fn = ast.parse(textwrap.dedent(code)).body[0]
  return ast.unparse(source.fold_none_tests(fn, static, given))


def test_which_tests_are_decided():
  out = _folded('''
      def f(x, y, z):
        if x is None:
          z = 4
        if y is None:
          y = x
        if y is None:
          x = 0
        a = 1 if z is None else z
        if not z is not None or x > 0:
          a = 2
        while x > 0:
          if z is not None and x > 1:
            x = z
          x = x - 1
        z = 3
        return z is None
      ''', ['y', 'z'], ['x'])
  assert out == textwrap.dedent('''\
      def f(x, y, z):
          y = x
          if y is None:
              x = 0
          a = 1
          a = 2
          while x > 0:
              pass
              x = x - 1
          z = 3
          return z is None''')
