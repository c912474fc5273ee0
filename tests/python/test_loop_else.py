"""`else` clauses of `while` and `for` loops, as in Python.

The clause runs for the members whose loop ends because its test fails,
not for those that leave it by `break` (nor by `return`).  Each program
is compared with `dry_run=True` (each member alone, as plain Python) on
NumPy (stack VM and stackless) and on TensorFlow (eager, `tf.function`,
XLA), and with the same loops run by Python on each member.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from tests import python as python_tests

ctx = ab.Context()


@ctx.batch
def smallest_factor(n):
  for d in range(2, 50):
    if n % d == 0:
      break
  else:
    return n
  return d


@ctx.batch
def power_index(n, base):
  p = 1
  k = 0
  while p < n:
    if p * base == n:
      k = k + 1
      break
    p = p * base
    k = k + 1
  else:
    k = -1
  return k


@ctx.batch
def first_multiple(x, k):
  for i in range(1, 20):
    if (x * i) % k != 0:
      continue
    found = i
    break
  else:
    found = -1
  return found


@ctx.batch
def nested(n):
  """Pairs (i, j) below n with i * j == n: the inner `else` runs when no
  `j` matched; the outer `else` when no `i` broke out."""
  hits = 0
  misses = 0
  i = 1
  while i < n:
    for j in range(1, 10):
      if i * j == n:
        hits += 1
        break
    else:
      misses += 1
    if hits == 2:
      break
    i += 1
  else:
    misses += 100
  return hits, misses


@ctx.batch(per_member=True)
def member_search(v, t):
  """The index of the first item of a member's vector above `t`, or its
  length (`for ... else` over a member's items)."""
  for i in range(len(v)):
    if v[i] > t:
      break
  else:
    i = len(v)
  return i


def _python(fn, *args):
  """Each member through the undecorated function, as Python runs it."""
  return np.array([fn.python_function(*(a[k] for a in args))
                   for k in range(len(args[0]))])


@pytest.mark.parametrize('fn,args', [
    (smallest_factor, (np.array([7, 12, 49, 97, 15, 2]),)),
    (power_index, (np.array([8, 9, 10, 1, 27, 5]),
                   np.array([2, 3, 3, 2, 3, 5]))),
    (first_multiple, (np.array([3, 4, 7, 5, 1]), np.array([6, 8, 11, 5, 31]))),
], ids=lambda v: getattr(v, '__name__', ''))
def test_loop_else_runs_where_the_loop_ends_without_break(fn, args):
  expected = _python(fn, *args)
  python_tests.run_everywhere(
      fn, args, check=lambda alone: np.testing.assert_array_equal(
          np.asarray(alone), expected))


def test_nested_loops_with_else_clauses():
  n = np.array([6, 7, 12, 1, 30])
  expected = [nested.python_function(v) for v in n]
  python_tests.run_everywhere(
      nested, (n,), check=lambda alone: np.testing.assert_array_equal(
          np.stack([np.asarray(a) for a in alone], 1), expected))


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'xla'])
def test_loop_else_in_a_per_member_function(backend):
  v = np.array([[0.1, 0.5, 0.9], [0.7, 0.2, 0.3], [0.0, 0.0, 0.0]])
  t = np.array([0.4, 0.6, 0.5])
  out = python_tests.call_on(backend, member_search, v, t)
  np.testing.assert_array_equal(out, [1, 0, 3])
  np.testing.assert_array_equal(member_search(v, t, dry_run=True), out)
