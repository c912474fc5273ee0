"""`for` loops over sequences, as Python iterates them.

`for x in v`, `for i, x in enumerate(v, start)` and
`for a, b in zip(u, v)` over one member's arrays (per-member functions),
and over sequences the same for every member (a global's list or tuple,
a NumPy array, a literal; tuple targets take the columns of a table of
rows) in both kinds of functions, with `break`, `continue` and `else`:
each program against its dry run on NumPy (stack VM, stackless) and
TensorFlow (eager, `tf.function`, XLA).  A batch-aware loop over a
batched array (which would iterate over the batch) stays refused.
"""

import collections

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import python as python_tests
from tests.python import run_everywhere

ctx = ab.Context()
PAIRS = [(1.0, 2.0), (3.0, 0.5), (-1.0, 4.0)]
COEF = np.array([1.0, -2.0, 0.5, 3.0])


@ctx.batch(per_member=True)
def positive_sum(v):
  total = 0.0
  for x in v:
    if x > 0:
      total += x
  return total, x   # the loop's variable keeps the last item


@ctx.batch(per_member=True)
def last_above(v, t):
  best = -1
  for i, x in enumerate(v, 1):
    if x > t:
      best = i
  first = -1
  for i, x in enumerate(v, start=10):
    if x > t and first < 0:
      first = i
  return best, first


@ctx.batch(per_member=True)
def dot_until_negative(a, b):
  s = 0.0
  for x, y in zip(a, b):
    if x * y < -1:
      break
    s += x * y
  else:
    s += 100.0
  return s


@ctx.batch(per_member=True)
def best_row(m):
  best = -np.inf
  for row in m:
    t = np.sum(row)
    if t > best:
      best = t
  return best


@ctx.batch(per_member=True)
def member_polynomial(x):
  s = 0.0
  for a, b in PAIRS:
    s += a * x + b
  for k, c in enumerate(COEF, 1):
    s += c * x ** k
  return s


@ctx.batch
def batch_polynomial(x, n):
  s = 0.0 * x
  for (a, b), c in zip(PAIRS, COEF):
    s = s + a * x * c + b
  for i, c in enumerate(COEF):
    for w in (0.5, 1.5):
      if i >= n:
        continue
      s = s + c * w * x
  return s


@ctx.batch(per_member=True)
def weighted_pairs(u, v):
  s = 0.0
  for i, (a, b) in enumerate(zip(u, v)):   # enumerate of a zip
    s += i * a * b
  for k, (a, (p, q)) in enumerate(zip(u, PAIRS), 1):
    s += k * a * p - q
  return s


@ctx.batch
def countdown(x):
  total = 0.0 * x
  for w in [0.5, 0.25, 0.25]:
    total = total + w * x
  while True:
    total = total - 1
    if total < 0:
      break
  return total


def _data(seed):
  return np.random.default_rng(seed)


@pytest.mark.parametrize('fn,args', [
    (positive_sum, lambda r: [r.normal(size=(4, 5))]),
    (last_above, lambda r: [r.normal(size=(4, 5)), np.full(4, 0.3)]),
    (dot_until_negative, lambda r: [r.normal(size=(4, 5)),
                                    r.normal(size=(4, 5))]),
    (best_row, lambda r: [r.normal(size=(4, 3, 2))]),
    (member_polynomial, lambda r: [r.normal(size=4)]),
    (batch_polynomial, lambda r: [r.normal(size=4), r.integers(0, 5, 4)]),
    (countdown, lambda r: [r.uniform(0, 5, 4)]),
    (weighted_pairs, lambda r: [r.normal(size=(4, 5)), r.normal(size=(4, 5))]),
], ids=lambda x: getattr(x, '__name__', ''))
def test_for_over_a_sequence_matches_python(fn, args):
  run_everywhere(fn, args(_data(0)))


def test_a_batch_aware_loop_over_a_batched_array_is_refused():
  c = ab.Context()

  @c.batch
  def total(v):
    s = 0.0
    for x in v:
      s = s + x
    return s
  with pytest.raises(errors.UnsupportedSyntaxError, match='per_member=True'):
    total(np.ones((3, 2)))


def test_unpacking_items_of_another_length_is_refused():
  c = ab.Context()

  @c.batch
  def bad(x):
    s = 0.0 * x
    for a, b, d in PAIRS:
      s = s + a + b + d
    return s
  with pytest.raises(errors.UnsupportedSyntaxError, match='unpacking'):
    bad(np.ones(3))


@ctx.batch(per_member=True)
def spread(v):
  squares = np.array([x * x for x in v])
  return (max(v) - min(v), sum(v), sum((x * x for x in v), 1.0),
          np.sum(squares))


def test_builtins_and_comprehensions_over_a_members_array():
  # On TensorFlow Python iterates no tensor inside a graph: a
  # comprehension takes the items of `tf.unstack`, `sum` a reduction.
  run_everywhere(spread, [_data(1).normal(size=(4, 5))])


@ctx.batch(per_member=True)
def nearest(v, t):
  best = min(range(len(v)), key=lambda i: abs(v[i] - t))
  worst = max(range(len(v)), key=lambda i: abs(v[i] - t))
  first = min(range(3), key=lambda i: v[i])
  pair = max([(v[0], 0), (v[1], 1), (v[2], 2)], key=lambda p: p[0])
  return best, worst, first, pair, min(v[0], v[1], key=abs)


def test_min_and_max_with_a_key_over_a_range_are_pythons():
  # The argmin written the Python way: the first item of least (greatest)
  # key, a NaN key passed over but first, member by member; it was a
  # PerMemberError about a bool() the user never wrote.
  v = np.array([[1.0, 2.0, 3.0, 2.0], [0.5, 0.5, 0.5, 0.1],
                [1.0, -1.0, 2.0, -1.0], [np.nan, 3.0, 1.0, 1.0]])
  run_everywhere(nearest, [v, np.array([2.1, 0.0, -0.9, 1.0])])


_Point = collections.namedtuple('_Point', 'x y')


@ctx.batch(per_member=True)
def farthest(a, b, c, d):
  p = max(_Point(a, b), _Point(c, d), key=lambda t: t.x)
  q = min((a, b), (c, d), key=lambda t: t[1])
  return p.x, p.y, q


def test_min_and_max_with_a_key_of_namedtuples_are_pythons():
  # A namedtuple was rebuilt from a generator: a TypeError in every mode.
  a, b = np.array([1.0, 5.0, 2.0]), np.array([2.0, 0.0, 2.0])
  c, d = np.array([3.0, 4.0, 2.0]), np.array([-1.0, 9.0, 1.0])
  def check(alone):
    np.testing.assert_array_equal(alone[0], [3.0, 5.0, 2.0])
    np.testing.assert_array_equal(alone[1], [-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(alone[2][0], [3.0, 5.0, 2.0])
  run_everywhere(farthest, [a, b, c, d], check)


_argmin_ctx = ab.Context()


@_argmin_ctx.batch(per_member=True)
def _nearest_of_first(v, n):
  return min(range(n), key=lambda i: v[i])


def test_min_with_a_key_over_a_members_range_says_to_use_argmin():
  python_tests.refused_everywhere(
      _nearest_of_first, [np.ones((2, 3)), np.array([2, 3])],
      errors.PerMemberError, r'(?s)one Python integer.*np\.argmin\(v\[:n\]')


@ctx.batch(per_member=True)
def graded(v, thr):
  every = all(x > thr for x in v)
  some = any(x > thr for x in v)
  if all(x > thr for x in v):
    grade = 1.0
  elif any([v[0] > thr, v[-1] > thr]):
    grade = 0.5
  else:
    grade = 0.0
  return every, some, all(v > thr), any(v > thr), all(()), grade


def test_all_and_any_of_a_members_values():
  # Python's all() and any() call bool() on each item, one member's value
  # here: they are a reduction of the items' truths.
  thr = np.array([-3.0, 0.0, 0.5, 3.0, -0.2])
  run_everywhere(graded, [_data(2).normal(size=(5, 4)), thr])


@ctx.batch
def backwards(a, b, x):
  s1 = 0
  for i in reversed(range(a, b)):
    s1 = s1 * 3 + i
  s2 = 0
  for i in reversed(range(a, b, 2)):
    s2 = s2 * 3 + i
  s3 = 0
  for i in reversed(range(b, a, -3)):
    s3 = s3 * 3 + i
  s4 = 0
  for i in reversed(range(b)):
    s4 = s4 * 3 + i
    if i == 2:
      break
  acc = 0.0
  for c in reversed(COEF):
    acc = acc * x + c
  return s1, s2, s3, s4, acc


@ctx.batch(per_member=True)
def horner_backwards(c, x):
  acc = 0.0
  for k in reversed(range(c.shape[0])):
    acc = acc * x + c[k]
  total = 0.0
  for v in reversed(c):
    total = total * x + v
  return acc, total


def test_reversed_ranges_and_sequences():
  # reversed(range(a, b, s)) with per-member bounds and a literal step
  # (empty ranges included), reversed of a constant sequence and of a
  # member's array, as Python iterates them.
  a = np.array([0, 2, 5, 3, -4, 7])
  b = np.array([5, 9, 5, 2, 3, 11])
  run_everywhere(backwards, [a, b, np.linspace(-1.0, 2.0, 6)])
  run_everywhere(horner_backwards, [_data(3).normal(size=(3, 4)),
                                    np.array([0.5, -1.0, 2.0])])


def loop_then_comprehension(a):
  total = 0
  for x in a:
    total += x
  largest = max(x for x in a)
  smallest = min([x * 2 for x in a])
  s = 0
  for i in range(len(a)):
    s += a[i]
  squares = sum(a[i] * a[i] for i in range(len(a)))
  return total, largest, smallest, s, squares


def test_a_comprehension_reusing_a_loops_name_has_its_own_variable():
  # The comprehension's `x` and `i` are its own (Python 3 scoping): they
  # were dropped from the function's variables, so the loops' `x` and `i`
  # were "not defined"; read as the function's, sum(a[i] * a[i] for i in
  # ...) took the last `i` every time, silently.  max() and min() of a
  # generator fold its items.
  ctx = ab.Context()
  a = np.array([[1, -2, 3, -4, 0], [2, 4, 6, 8, 10]])
  fn = ctx.batch_uncurried(loop_then_comprehension, per_member=True)
  want = [loop_then_comprehension(list(row)) for row in a]
  got = fn(a, dry_run=True)
  for k in range(5):
    np.testing.assert_array_equal(got[k], [w[k] for w in want])
  run_everywhere(fn, [a])


TABLE = np.array([3, 34, 4, 12, 5, 2])
COST = np.arange(12.0).reshape(3, 4)


def table_reads(i, j, s):
  return s - TABLE[i] + COST[j, i % 4] + COST[-1, j] + TABLE[-1 - i]


def test_a_constant_table_read_at_a_batch_of_indices_runs_in_a_graph():
  # `TABLE[i]` of a global array in a batch-aware function: NumPy's
  # indexing got symbolic tensors under tf.function and XLA.
  ctx = ab.Context()
  run_everywhere(ctx.batch_uncurried(table_reads),
                 [np.array([0, 2, 3]), np.array([1, 2, 0]),
                  np.array([10.0, 10.0, 10.0])])


CUBE = np.arange(24.0).reshape(2, 3, 4)


def table_columns(i, j):
  # Slices beside per-member indices: NumPy's advanced indexing puts the
  # indices' axis where they stand when they are adjacent, else first.
  return (COST[:, j].T, COST[1:, j].T, CUBE[i, :, j], CUBE[-1, :, j],
          CUBE[0, i + 1, 1:], CUBE[:, i, j].T, CUBE[::-1, i, :2][:, :, 1].T)


def test_a_constant_table_sliced_beside_a_batch_of_indices_runs_in_a_graph():
  # `COST[:, j]` of a global array in a batch-aware function: NumPy's
  # indexing got symbolic tensors under tf.function and XLA ("Cannot
  # convert a symbolic tf.Tensor to a numpy array").
  ctx = ab.Context()
  i, j = np.array([0, 1, 1]), np.array([3, 0, 2])
  fn = ctx.batch_uncurried(table_columns)

  def check(alone):
    want = table_columns(i, j)
    for got, expected in zip(alone, want):
      np.testing.assert_array_equal(got, expected)
  run_everywhere(fn, [i, j], check=check)


def filtered_counts(a):
  evens = sum(1 for x in a if x % 2 == 0)
  positive = sum(x for x in a if x > 0)
  inverses = sum(1.0 / x for x in a if x != 0)
  large = len([x for x in a if x > 2])
  some = any(x > 5 for x in a if x < 9)
  every = all(x < 9 for x in a if x > 0)
  return evens, positive, inverses, large, some, every


def test_a_generators_filter_decides_item_by_item_per_member():
  # `if` in a generator asked a member's value for one bool (refused);
  # it now decides each item (a dropped item counts as 0, False or True),
  # an item that Python filters out never computed (1.0 / x at 0).
  ctx = ab.Context()
  run_everywhere(ctx.batch_uncurried(filtered_counts, per_member=True),
                 [np.array([[1, -2, 3, -4, 0, 6], [2, 4, 6, 8, 10, 0]])])


def reach_of_weights(w0, w1, w2, target):
  reach = 1
  for w in (w0, w1, w2):
    reach = reach | (reach << w)
  total = 0.0
  for k, v in [(w0, 1.5), (w2, -0.5)]:
    total += k * v
  else:
    total += 1.0
  return (reach >> target) & 1 == 1, total


def test_a_batch_aware_loop_over_a_tuple_of_values_is_written_out():
  # `for w in (w0, w1, w2)` of the function's values was refused ("would
  # iterate over the batch"): the items are evaluated once, then the body
  # runs once per item.
  ctx = ab.Context()
  run_everywhere(ctx.batch_uncurried(reach_of_weights),
                 [np.array(c) for c in ([3, 1, 5], [4, 1, 6], [5, 1, 7],
                                        [9, 5, 20])])


def _row_totals(v):
  return v.sum(axis=-1) + v.max(axis=-1)


def helper_methods_and_inline_table(x, k):
  return _row_totals(x) + np.array([1.0, 2.0, 5.0, 10.0])[k - 1]


def test_a_helpers_array_methods_and_an_inline_table_run_in_a_graph():
  # A batch-aware helper's `v.sum(axis=-1)` was an AttributeError on
  # TensorFlow; `np.array([...])[k - 1]` got symbolic tensors under
  # tf.function and XLA.
  ctx = ab.Context()
  run_everywhere(ctx.batch_uncurried(helper_methods_and_inline_table),
                 [np.arange(6.0).reshape(2, 3), np.array([1, 3])])
