"""A batch-aware `for i in range(K)` of a few trips known when compiling,
and a `for` over a short constant tuple or list, are written out
(`python.to_ir._Compiler._written_out`).

Its counter is then the trip's number, the same for every member, as
Python has it for one member: `i * v` scales each member's vector and
`x[:, i] = v` writes column `i`.  A loop counter held as one number per
member (`[batch]`) would line up with the vector's last axis, or be
refused after the batch's colon.  Each program runs batched against its
dry run on NumPy (stack VM, stackless) and TensorFlow (eager,
`tf.function`, XLA).  Loops that leave early, call batched functions,
have more trips or bounds known only at run time, and counters read after
the loop stay loops.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

ctx = ab.Context()
WIDTH = 3


@ctx.batch
def poly_terms(v):
  out = v * 0.0
  for k in range(4):
    out = out + (k + 1) * v ** k
  return out


@ctx.batch
def scaled_columns(x):
  y = x * 0.0
  for i in range(WIDTH):
    y[:, i] = x[:, i] * (i + 1)
  else:
    y = y + 0.5
  return y


@ctx.batch
def inner_loop(x, n):
  d = 2
  total = x * 0.0
  j = 0
  while j < n:
    for i in range(1, d + 1):
      total = total + i * x
    j += 1
  return total


@ctx.batch
def backwards(x):
  acc = x[:, 0] * 0.0
  for i in reversed(range(WIDTH)):
    acc = acc * 2.0 + x[:, i]
  return acc


TERMS = (('square', 1.0), ('cube', 0.5), ('abs', 2.0))


@ctx.batch
def weighted_terms(x):
  out = x * 0.0
  for kind, wt in TERMS:
    if kind == 'square':
      out = out + wt * x ** 2
    elif kind == 'cube':
      out = out + wt * x ** 3
    else:
      out = out + wt * np.abs(x)
  for s in (0.5, 1.0):
    out = out + s * x
  return out


@ctx.batch
def nested_items(x, n):
  k = 0
  y = x * 0.0
  while k < n:
    for a, (b, c) in ((1, (2.0, 'p')), (3, (4.0, 'q'))):
      y = y + a * b * x if c == 'p' else y - a * b * x
    k += 1
  return y


@ctx.batch
def triangle(x):
  # The inner range's bound is the outer trip's number: range(0) never
  # runs (its body, which would broadcast a counter, is not compiled).
  out = x * 0.0
  for i in range(4):
    for j in range(i):
      out = out + (i * 10 + j) * x
    if np.sum(x, axis=-1) > i:
      out = out - i
  return out


@ctx.batch
def inner_search(x):
  # The inner loop's `break` and `continue` leave only the inner loop: the
  # outer one is written out, and writes column `j`.
  out = np.zeros((x.shape[0], 2))
  for j in range(2):
    s = x[:, 0] * 0.0
    k = 0
    while k < 10:
      k += 1
      if ab.truthy(s < 0.0):
        continue
      s = s + x[:, 0] + j
      if ab.truthy(s > 5.0):
        break
    out[:, j] = s * k
  return out


def _skipped_terms(x, which):
  total = x * 0.0
  for name, p in TERMS:
    if not (name == 'cube' and which == 0):
      total = total + x ** p
  return total


def _skipped_with_continue(x, which):
  total = x * 0.0
  for name, p in TERMS:
    if name == 'cube' and which == 0:
      continue
    total = total + x ** p
  return total


@pytest.mark.parametrize('per_member', [False, True])
def test_a_table_of_strings_is_written_out_in_both_kinds(per_member):
  # `not ('square' == 'cube' and ...)` of a trip's item is Python's bool
  # (it was an array of no batch axis), and per member a table holding
  # strings is written out as batch-aware (it was read as an array of
  # strings).
  fn = ab.Context().batch(per_member=per_member)(_skipped_terms)
  x = np.array([1.0, 2.0, 0.5])
  which = np.array([0, 1, 0])
  want = [_skipped_terms(a, w) for a, w in zip(x, which)]
  np.testing.assert_allclose(fn(x, which), want)
  run_everywhere(fn, [x, which])
  # With `continue` it cannot be: a clear refusal at the loop.
  refused = ab.Context().batch(per_member=per_member)(_skipped_with_continue)
  with pytest.raises(errors.UnsupportedSyntaxError,
                     match='table holding strings') as e:
    refused(x, which)
  assert 'continue' in str(e.value) and 'for name, p in TERMS' in str(
      e.value)

@pytest.mark.parametrize('batch', [2, 3, 4])
def test_written_out_trips_against_the_dry_run(batch):
  # Two and three members: a counter held as [batch] would broadcast
  # along the vectors' last axis of 2 or 3.
  rng = np.random.default_rng(batch)
  run_everywhere(poly_terms, [rng.normal(size=(batch, 2))])
  run_everywhere(scaled_columns, [rng.normal(size=(batch, WIDTH))])
  run_everywhere(inner_loop, [rng.normal(size=(batch, 3)),
                              np.arange(batch) % 3])
  run_everywhere(backwards, [rng.normal(size=(batch, WIDTH))])
  # A constant table's items, strings among them, as Python's values.
  run_everywhere(weighted_terms, [rng.normal(size=(batch, 2))])
  run_everywhere(nested_items, [rng.normal(size=(batch, 2)),
                                np.arange(batch) % 3])
  run_everywhere(triangle, [3.0 * rng.normal(size=(batch, 2))])
  run_everywhere(inner_search, [rng.uniform(0.2, 3.0, size=(batch, 1))])


def test_loops_that_stay_loops():
  local = ab.Context()

  @local.batch
  def early(v):
    for k in range(4):
      v = v + k * v
      if np.all(v > 100.0, axis=-1):
        break
    return v

  # `break` keeps the loop: its counter is one number per member.
  with pytest.raises(errors.TypeInferenceError,
                     match='runs on one member but not on'):
    early(np.ones((4, 2)))
  printed = str(local.lowered_for_args('early', [np.ones((4, 1))]))
  assert 'v + k * v' in printed and 'v + 1 * v' not in printed


_WEIGHTS = (2, -3, 5)
_TABLE = np.array([0.5, 1.5, 2.5, 3.5])


def test_a_range_of_a_global_tables_length_is_written_out():
  # `for i in range(len(G))` stayed a loop, so `G[i]` indexed a tuple
  # with a counter, one number per member: refused with a message about
  # giving the literal a dtype.
  ctx = ab.Context()

  @ctx.batch
  def weighted(x):
    s = 0
    for i in range(len(_WEIGHTS)):
      s = s + _WEIGHTS[i] * x
    t = 0.0
    for j in range(len(_TABLE) - 1):
      t = t + _TABLE[j + 1] * x
    return s, t

  x = np.array([1, 2, 4])
  got = weighted(x)
  np.testing.assert_array_equal(got[0], 4 * x)
  np.testing.assert_allclose(got[1], 7.5 * x)
  run_everywhere(weighted, [x])


_TRIPS = 3
_COEFFS = [1.0, 2.0, 3.0]
_ROWS = [(1.0, 0.5), (2.0, 0.25)]
_LONG = [float(k) for k in range(12)]


def test_written_out_loops_follow_globals_changed_since_compiling():
  # The trips of `range(K)`, `for w in W` and `range(len(W))` were written
  # out with the globals' values when compiling, and the cached program
  # kept them: a rebound `K` or an item of `W` written since gave the old
  # values, silently, on every backend (the dry run reads them anew).
  global _TRIPS, _COEFFS, _ROWS, _LONG
  ctx = ab.Context()

  @ctx.batch
  def series(x):
    s = x * 0.0
    for i in range(_TRIPS):
      s = s + x ** i
    h = x * 0.0
    for w in _COEFFS:
      h = h * x + w
    for a, b in _ROWS:
      h = h + a * x - b
    for i in range(len(_COEFFS) - 1):
      h = h + i
    for v in _LONG:
      h = h + v
    return s, h

  @ctx.batch(per_member=True)
  def member_series(x):
    h = 0.0
    for w in _COEFFS:
      h = h * x + w
    return h + _TRIPS

  saved = _TRIPS, list(_COEFFS), list(_ROWS), list(_LONG)
  x = np.array([0.5, 2.0])

  def check():
    for fn in (series, member_series):
      run_everywhere(fn, [x])
      want = [fn.python_function(v) for v in x]
      got = fn(x)
      for k in range(len(x)):
        np.testing.assert_allclose([np.asarray(g)[k] for g in got]
                                   if isinstance(got, tuple) else got[k],
                                   want[k])
  try:
    check()
    _TRIPS = 5
    _COEFFS[0] = 10.0
    _ROWS[1] = (3.0, 1.0)
    _LONG[3] = 100.0
    check()
    _COEFFS = (1.0, 1.0)
    _LONG = [1.0] * 9
    check()
  finally:
    _TRIPS = saved[0]
    _COEFFS, _ROWS, _LONG = saved[1:]
