"""Assignment expressions (`:=`) in a statement's test or value.

`while (y := v[i]) > 0:`, `if (m := v.max()) > 2:` and `s = (a := v[0])
+ a` assign the name first, as Python does each time the statement runs
(a `while` test on every trip, `continue` included), in per-member and
batch-aware functions: each program runs batched on NumPy (stack VM,
stackless) and TensorFlow (eager, `tf.function`, XLA) against its dry
run, and the dry run against plain Python per member.  One that Python
evaluates only sometimes (after the first operand of `and`, in a side of
`x if c else y`), or one read before it is assigned, stays refused at its
line.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

ctx = ab.Context()


@ctx.batch(per_member=True)
def _walk(v):
  count = 0
  total = 0.0
  i = 0
  while (y := v[i]) > 0 and i < len(v) - 1:
    total += y
    count += 1
    i += 1
  return total, count


@ctx.batch(per_member=True)
def _grade(v):
  if (m := v.max()) > 2:
    r = m * 2
  elif (k := v.min()) < 0:
    r = k
  else:
    r = 0.0
  return r + ((a := v[0]) + (b := v[1]) * a) + b


@ctx.batch()
def _halvings(x):
  n = 0
  while (y := x * 0.5 ** n) > 0.1:
    n += 1
    if y > 5:
      continue
  return n, y


def _python(fn, args):
  outs = [fn.python_function(*[a[k] for a in args])
          for k in range(len(args[0]))]
  return [np.array(o) for o in zip(*outs)] if isinstance(
      outs[0], tuple) else [np.array(outs)]


@pytest.mark.parametrize('fn', [_walk, _grade, _halvings],
                         ids=['while', 'if_and_value', 'batch_aware'])
def test_an_assignment_expression_assigns_before_its_statement(fn):
  # It was refused ("Use a separate assignment statement").
  if fn is _halvings:
    args = [np.array([0.05, 1.0, 20.0])]
  else:
    args = [np.array([[1.0, 2, -3, 4], [0.5, 0.25, 3, 1], [-3, 1, 1, 1],
                      [0.5, 0.5, 0.5, 0.5]])]
  want = _python(fn, args)

  def check(alone):
    for got, w in zip(ab.instructions.pattern_flatten(alone), want):
      np.testing.assert_allclose(got, w)
  run_everywhere(fn, args, check=check)


def _after_and(v):
  if v[0] > 0 and (z := v[1]) > 0:
    return z
  return 0.0


def _read_first(v):
  x = v[0]
  return x + (x := v[1])


@pytest.mark.parametrize('fn', [_after_and, _read_first])
def test_one_python_evaluates_only_sometimes_is_refused(fn):
  f = ab.Context().batch(per_member=True)(fn)
  with pytest.raises(errors.UnsupportedSyntaxError,
                     match='only sometimes') as info:
    f(np.ones((2, 3)))
  assert info.value.loc.filename == __file__
