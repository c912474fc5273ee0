"""Item assignment in batch-aware functions (`x[:, i] = v`), and a number
under a mask in per-member ones.

Axis 0 of every array of a batch-aware function is the batch, so an item
assignment writes each member's items where its index starts with `:`
or `...` (`x[:, 0] = v`, `x[..., -1] -= 1`, `x[:, 1:] *= 0.5`), or is a
boolean mask of the whole array (`x[x < 0] = 0`): those run as NumPy's,
on a copy (NumPy's cast to the array's dtype included), on NumPy and on
TensorFlow (eager, `tf.function`, XLA), against the dry run.  An index
that would write axis 0 (`x[0] = v`, `...` on an array of one axis), or
that reads the function's variables after the batch's `:` (`x[:, j] = v`:
every member's j in every member), is refused at the user's line.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import refused_everywhere
from tests.python import run_everywhere

ctx = ab.Context()


@ctx.batch
def shifted(x, n):
  y = x.copy()
  while n > 0:
    y[:, 0] = y[:, 0] + 1.0
    y[:, 1:] *= 0.5
    y[..., -1] -= 1
    n -= 1
  y[y < 0] = 0.0
  return y


@ctx.batch
def truncated(x):
  y = x + 0
  y[:, 0] = 2.7     # cast to the array's integer dtype, as NumPy does
  return y


def test_item_assignment_keeping_the_batch_axis():
  rng = np.random.default_rng(0)
  run_everywhere(shifted, [rng.normal(size=(4, 3)), rng.integers(0, 4, 4)])
  run_everywhere(truncated, [rng.integers(0, 5, (4, 3))])


def test_the_arguments_are_left_as_they_were():
  x = np.ones((3, 2))
  shifted(x, np.array([1, 2, 0]))
  np.testing.assert_array_equal(x, np.ones((3, 2)))


def _refused(source_fn, args, error, match):
  with pytest.raises(error, match=match) as info:
    source_fn(*args)
  assert info.value.loc.filename == __file__
  return info.value


def test_an_index_that_writes_the_batch_axis_is_refused():
  c = ab.Context()

  @c.batch
  def first_row(x):
    y = x
    y[0] = 1.0
    return y

  @c.batch
  def each_member(x, j):
    y = x
    y[:, j] = 1.0
    return y

  @c.batch
  def ellipsis_of_scalars(x):
    y = x
    y[..., 0] = 1.0
    return y

  @c.batch
  def integer_index(x, m):
    y = x
    y[m] = 1.0
    return y
  _refused(first_row, [np.ones((4, 2))], errors.UnsupportedSyntaxError,
           'keep axis 0')
  _refused(each_member, [np.ones((4, 3)), np.zeros(4, np.int64)],
           errors.UnsupportedSyntaxError, 'one index per member')
  _refused(ellipsis_of_scalars, [np.ones(4)], errors.PrimitiveError,
           'covers no axis')
  _refused(integer_index, [np.ones((4, 3)), np.zeros(4, np.int64)],
           errors.PrimitiveError, 'boolean mask')


def test_gradients_through_item_assignment_under_xla():
  # A number assigned under a mask is a select on TensorFlow: of static
  # shape, as XLA needs it inside the loop and in the gradient.
  tf = pytest.importorskip('tensorflow')
  rng = np.random.default_rng(1)
  x = rng.normal(size=(4, 3))
  n = rng.integers(1, 4, 4)

  def grad(a):
    with tf.GradientTape() as tape:
      tape.watch(a)
      total = tf.reduce_sum(shifted(a, tf.constant(n), max_steps=100))
    return tape.gradient(total, a)
  got = tf.function(grad, jit_compile=True)(tf.constant(x)).numpy()
  eps = 1e-6
  for b, k in ((0, 0), (1, 2), (3, 1)):
    d = np.zeros_like(x)
    d[b, k] = eps
    want = (shifted(x + d, n).sum() - shifted(x - d, n).sum()) / (2 * eps)
    np.testing.assert_allclose(got[b, k], want, rtol=1e-5, atol=1e-7)


@ctx.batch(per_member=True)
def member_relu_steps(v, n):
  w = v.copy()
  k = 0
  while k < n:
    w[w < 0] = 0.0
    w = w - 0.3
    k += 1
  return w


def test_a_number_under_a_members_mask():
  # Per member, `w[w < 0] = 0.0` on TensorFlow is a select: pfor has no
  # rule for the mask's items, whose count differs between members.
  rng = np.random.default_rng(2)
  run_everywhere(member_relu_steps, [rng.normal(size=(5, 4)),
                                     rng.integers(0, 4, 5)])


_aug_ctx = ab.Context()


@_aug_ctx.batch
def added_into_items(v, d):
  w = v.copy()
  w[:, 1:3] += d[:, None]
  return w


def test_a_float_added_into_an_int_arrays_items_is_refused_as_numpy_does():
  # NumPy's in-place `+=` refuses to write a float64 sum into int64
  # items (its dry run raised UFuncTypeError); the batched modes
  # truncated the sum silently.
  v = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
  d = np.array([0.5, 1.7])
  with pytest.raises(TypeError, match='same_kind'):
    added_into_items(v, d, dry_run=True)
  refused_everywhere(added_into_items, [v, d], errors.PrimitiveError,
                     r"int64.*float64.*'same_kind'")
  # What NumPy's in-place operator can cast keeps the array's dtype.
  run_everywhere(added_into_items, [v.astype(np.int32), v[:, 0]])
  run_everywhere(added_into_items, [v.astype(np.float32), d])


# A Python list of values is structure: `parts[0] = v` at a constant index
# rebuilds the list with that item replaced, in both styles (the per-member
# programs are in tests/per_member/test_member_assignments.py).
def list_accumulated(x, n):
  parts = [x * 0, x * 0 + 1]
  for _ in range(n):
    parts[0] = parts[0] + x
    parts[1] = parts[1] * 2
  return parts[0], parts[1]


def list_written_in_branches(x, n):
  acc = [x * 0, n * 0, x]
  while n > 0:
    if n % 2 == 0:
      acc[0] += x
    else:
      acc[-1] = acc[-1] * 0.5
    acc[1] = acc[1] + 1        # an int64 item among float64 ones
    n -= 1
  return acc[0], acc[1], acc[2]


LIST_PROGRAMS = (list_accumulated, list_written_in_branches)
_list_ctx = ab.Context()
_list_batched = [_list_ctx.batch()(fn) for fn in LIST_PROGRAMS]


def expected_of_each_member(fn, x, n):
  """`fn` called on each member alone, as plain Python, stacked."""
  outs = [fn(x[b], n[b]) for b in range(len(x))]
  return tuple(np.stack([np.asarray(o[k]) for o in outs])
               for k in range(len(outs[0])))


def check_list_programs(batched):
  x, n = np.array([1.0, 2.0, 0.5]), np.array([3, 0, 5])
  for fn in batched:
    expected = expected_of_each_member(fn.python_function, x, n)
    def check(alone, expected=expected):
      for got, want in zip(alone, expected):
        np.testing.assert_allclose(got, want)
        assert got.dtype == want.dtype
    run_everywhere(fn, [x, n], check)


def test_items_of_a_list_written_at_constant_indices():
  check_list_programs(_list_batched)


def list_at_a_members_index(x, n):
  parts = [x * 0, x * 0]
  parts[n % 2] = x
  return parts[0]


def list_slice_written(x, n):
  parts = [x, x, x]
  parts[0:2] = [x, x]
  return parts[0]


def tuple_item_written(x, n):
  parts = (x, x)
  parts[0] = x + 1
  return parts[0]


LIST_REFUSALS = ((list_at_a_members_index, 'Python list at an index that '
                  'is a per-member value'),
                 (list_slice_written, 'slice assignment to a Python list'),
                 (tuple_item_written, 'item assignment to a tuple'))


def check_list_refusals(per_member):
  c = ab.Context()
  for fn, match in LIST_REFUSALS:
    refused_everywhere(c.batch(per_member=per_member)(fn),
                       [np.array([1.0, 2.0]), np.array([1, 2])],
                       errors.UnsupportedSyntaxError, match)


def test_list_item_writes_it_cannot_take_are_refused_as_a_lists():
  check_list_refusals(per_member=False)


def test_a_list_it_is_given_is_refused_with_a_hint_for_lists():
  c = ab.Context()

  @c.batch
  def given(x, parts):
    parts[0] = parts[0] + x
    return parts[0]
  error = _refused(given, [np.ones(2), [np.ones(2), np.ones(2)]],
                   errors.UnsupportedSyntaxError, 'keep axis 0')
  assert 'x = [v] + x[1:]' in error.hint
