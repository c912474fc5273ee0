"""Per-member primitives as plain NumPy code on the batch (`member_direct`).

Each function below is one primitive.  Batched on NumPy (stack VM), it
must equal a plain Python loop over members (values, shapes, dtypes)
and the dry run; the test also checks which primitives take the plain
form (`DirectForms.form`) and which the rules run.  A property test
(hypothesis) builds random expressions and item writes of a member's
values and shared arrays and compares them with the loop (30 examples
in the fast tier, 500 in the slow one).
"""

import atexit
import linecache
import os
import shutil
import tempfile

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import check_batched_equals_a_loop_and_the_dry_run

ctx = ab.Context()
TABLE = np.arange(12.0).reshape(4, 3)
INDEX = np.array([3, 0, 2, 1])
W = np.linspace(-1.0, 1.0, 12).reshape(6, 2)
V = np.array([0.5, -0.25])
B = 5


@ctx.batch(per_member=True)
def table_gather(x, i):
  return TABLE[INDEX[i]] * 2.0 + x[0]


@ctx.batch(per_member=True)
def member_take(x, i):
  return x[i] - x[-1] + x[1:].sum()


@ctx.batch(per_member=True)
def methods(m, x):
  return m.max(axis=-1).astype(np.float32) + m.sum(0)[1:] + x.mean()


@ctx.batch(per_member=True)
def member_items(m, i):
  return m[i - 1, 1:] * m[0, 2]


@ctx.batch(per_member=True)
def cell(x, y):
  return np.tanh(np.concatenate([x, x * y]) @ W + V)


@ctx.batch(per_member=True)
def stack_and_reduce(m):
  return np.max(np.stack([m, m + 1.0], axis=-1), axis=0) + np.sum(m)


@ctx.batch(per_member=True)
def ranks_aligned(m, x, y):
  return m * y + x + TABLE[1:3]


@ctx.batch(per_member=True)
def choice(x, y):
  return x if y > 0 else -x


@ctx.batch(per_member=True)
def integers(i, j):
  return max(abs(i - j), 1) + (i // 2) % 3


@ctx.batch(per_member=True)
def sizes(x, m, i):
  return x[len(x) - 1] + m.shape[1] * m.ndim + x[i] * x.size


@ctx.batch(per_member=True)
def size_alone(m):
  return len(m) + m.shape[-1]


@ctx.batch(per_member=True)
def created(m):
  return np.zeros(m.shape[1] + 1, dtype=m.dtype)


@ctx.batch(per_member=True)
def created_of_extent(m):
  # The size is an extent alone, not an expression holding one: an array
  # the batch's size long would broadcast to the batch unnoticed.
  return np.ones(m.shape[1]) * m[1, 0] + np.full(m.shape[1], 0.5)


@ctx.batch(per_member=True)
def guarded_items(x, j):
  # Python reads x[j] only where 0 <= j < len(x); j runs from -4 to 8.
  return (0 <= j < len(x) and x[j] > 0.0) or (j >= len(x) and x[-1] > 0.0)


@ctx.batch(per_member=True)
def guarded_sides(x, j):
  return x[j] * 2.0 if 0 <= j < len(x) else x[len(x) - 1 - j % 3] - 1.0


@ctx.batch(per_member=True)
def numbers_and_members(x, y, i):
  # Python numbers and shared items stacked with members' values, in the
  # dtype NumPy gives one member's array.
  return np.array([x[0], TABLE[i, 1], 1.5, y]) + np.array([y, 2])[0]


@ctx.batch(per_member=True)
def created_and_used(x, i):
  return np.arange(len(x) + 2)[i] + np.ones((2, 3)) * x + np.eye(3)[i]


@ctx.batch(per_member=True)
def flag(x):
  return 1 if x[0] > 0 else 0


@ctx.batch(per_member=True)
def put_at_member_index(x, i, y):
  x[i] = y * 2.0
  return x


@ctx.batch(per_member=True)
def put_rows(m, i, x):
  m[i - 1] = x
  return m


@ctx.batch(per_member=True)
def put_items(m, y):
  m[0, 1:] += y
  return m


@ctx.batch(per_member=True)
def shared_matrix_of_member(x):
  return x + TABLE


@ctx.batch(per_member=True)
def casts(x, i):
  return np.float32(x[0]) + np.float64(x[1]) + float(i) + int(x[1] * 3.0) + (
      np.int32(x))


@ctx.batch(per_member=True)
def array_of_items(x, y, i):
  return np.array([x[0], y, x[i]]) + np.array(
      [[y, x[1], y], [x[2], y, x[0]]], dtype=np.float32).sum(axis=0)


@ctx.batch(per_member=True)
def array_of_rows(x, y):
  return np.array((x, x * y), dtype=x.dtype)


@ctx.batch(per_member=True)
def linear_solve(m, x):
  return np.linalg.solve(m[:, :2] + 3.0 * np.eye(2), x[:2]) + np.linalg.det(
      m[:, 1:] + np.eye(2)) + np.linalg.solve(3.0 * np.eye(2), m[:, :2])[0]


@ctx.batch(per_member=True)
def inverse_and_factor(m, y):
  return np.linalg.inv(m[:, 1:] + 2.0 * np.eye(2)) @ V + np.linalg.cholesky(
      np.eye(2) * (4.0 + y * y))[1]


@ctx.batch(per_member=True)
def norms(m, x):
  return (np.linalg.norm(x) + np.linalg.norm(m, axis=0)[:2] +
          np.linalg.norm(m) * np.linalg.norm(m, 1, axis=1) +
          np.linalg.norm(m, ord=np.inf, keepdims=True)[0])


@ctx.batch(per_member=True)
def rules_scan(x):
  return np.cumsum(x)


@ctx.batch(per_member=True)
def product_of_members(x):
  return x @ x + np.dot(x, x) + (TABLE @ x)[1]


@ctx.batch(per_member=True)
def rules_product_of_members(m, x):
  return m @ x


@ctx.batch(per_member=True)
def rules_index_after_slice(i):
  return TABLE[:, i]


@ctx.batch(per_member=True)
def rules_shared_part(x):
  return np.concatenate([x, V])


def _inputs(rng):
  x = rng.normal(size=(B, 3))
  m = rng.normal(size=(B, 2, 3))
  y = rng.normal(size=B)
  i = rng.integers(0, 3, B)
  j = rng.integers(-4, 9, B)
  return {'x': x, 'm': m, 'y': y, 'i': i, 'j': j}


# name -> (argument names, whether its primitive takes the plain form)
CASES = {
    table_gather: ('xi', True),
    member_take: ('xi', True),
    methods: ('mx', True),
    member_items: ('mi', True),
    cell: ('xy', True),
    stack_and_reduce: ('m', True),
    ranks_aligned: ('mxy', True),
    choice: ('xy', True),
    integers: ('ij', True),
    sizes: ('xmi', True),
    size_alone: ('m', True),
    created: ('m', True),
    created_of_extent: ('m', True),
    numbers_and_members: ('xyi', True),
    guarded_items: ('xj', True),
    guarded_sides: ('xj', True),
    created_and_used: ('xi', True),
    flag: ('x', True),
    put_at_member_index: ('xiy', True),
    put_rows: ('mix', True),
    put_items: ('my', True),
    shared_matrix_of_member: ('x', True),
    casts: ('xi', True),
    array_of_items: ('xyi', True),
    array_of_rows: ('xy', True),
    linear_solve: ('mx', True),
    inverse_and_factor: ('my', True),
    norms: ('mx', True),
    rules_scan: ('x', False),
    product_of_members: ('x', True),
    rules_product_of_members: ('mx', False),
    rules_index_after_slice: ('i', False),
    rules_shared_part: ('x', False),
}


@pytest.mark.parametrize('fn', list(CASES), ids=lambda f: f.__name__)
def test_batched_equals_a_loop_and_the_dry_run(fn):
  names, plain = CASES[fn]
  check_batched_equals_a_loop_and_the_dry_run(
      ctx, fn, names, plain, _inputs(np.random.default_rng(0)), B)


def test_an_error_in_the_plain_form_is_the_rules_error_at_the_users_line():
  values = _inputs(np.random.default_rng(1))
  i = values['i'] + 7   # out of range of INDEX
  with pytest.raises(Exception) as caught:
    table_gather(values['x'], i, stackless=False)
  assert 'out of bounds' in str(caught.value)
  assert 'for axis 0' not in str(caught.value)   # the rules' wording


# The property test: random expressions of a member's values, batched,
# against the loop.

W2 = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
_LEAVES = {
    (): ['y', 'x[i]', 'm[i, 0]', 'TABLE[i, 2]', 'x.max()', '1.5',
         'x[len(x) - 1]', 'm.shape[1] * y'],
    (3,): ['x', 'm[i]', 'TABLE[i + 1]', 'm[0]', 'x[::-1]', 'TABLE[1]',
           'np.ones(m.shape[1])'],
    (2, 3): ['m', 'TABLE[:2]', 'm[:, ::2].sum(axis=1)[:, None] + m',
             'np.ones((2, len(x)), dtype=x.dtype)'],
    (2,): ['x @ W2', 'm[:, 1]', 'np.dot(x, W2)'],
}


def _linalg(data, shape, depth):
  """A random `np.linalg` call of member shape `shape` (the matrices
  solved or inverted kept far from singular)."""
  if shape == ():
    if data.draw(st.booleans()):
      return 'np.linalg.det(m[:, 1:] + 3.0 * np.eye(2) * y)'
    return f'np.linalg.norm({_expression(data, (3,), depth - 1)})'
  if shape == (2,):
    if data.draw(st.booleans()):
      return (f'np.linalg.solve(m[:, :2] + 4.0 * np.eye(2), '
              f'{_expression(data, (2,), depth - 1)})')
    return f'np.linalg.norm({_expression(data, (2, 3), depth - 1)}, axis=-1)'
  if shape == (3,):
    return f'np.linalg.norm({_expression(data, (2, 3), depth - 1)}, axis=0)'
  return (f'np.linalg.inv(m[:, :2] + 4.0 * np.eye(2)) @ '
          f'{_expression(data, (2, 3), depth - 1)}')


def _expression(data, shape, depth):
  """A random expression of `x` (3,), `m` (2, 3), `y` (), `i` (an index in
  [0, 2)) and shared arrays, of member shape `shape`."""
  kinds = ['leaf'] if depth == 0 else [
      'leaf', 'unary', 'binary', 'where', 'reduce', 'join', 'index',
      'array', 'linalg', 'cast']
  kind = data.draw(st.sampled_from(kinds))
  if kind == 'unary':
    f = data.draw(st.sampled_from(['np.tanh', 'np.abs', '-', 'np.square']))
    return f'{f}({_expression(data, shape, depth - 1)})'
  if kind == 'binary':
    op = data.draw(st.sampled_from(['+', '-', '*', 'np.maximum']))
    a = _expression(data, shape, depth - 1)
    b = _expression(data, data.draw(st.sampled_from(
        [shape, (), shape[1:]])), depth - 1)
    if data.draw(st.booleans()):
      a, b = b, a
    if op == 'np.maximum':
      return f'np.maximum({a}, {b})'
    return f'(({a}) {op} ({b}))'
  if kind == 'where':
    return (f'({_expression(data, shape, depth - 1)} if y > 0 else '
            f'{_expression(data, shape, depth - 1)})')
  if kind == 'reduce' and len(shape) < 2:
    axis = data.draw(st.sampled_from(['', ', axis=0', ', axis=-1']))
    inner = shape + (3,) if shape else (3,)
    inner = (2, 3) if shape == (2,) else inner
    if shape == (3,):
      return f'np.sum({_expression(data, (2, 3), depth - 1)}, axis=0)'
    if shape == (2,):
      return f'({_expression(data, (2, 3), depth - 1)}).mean(axis=-1)'
    return f'np.max({_expression(data, inner, depth - 1)}{axis})'
  if kind == 'join' and shape == (2, 3):
    return (f'np.stack([{_expression(data, (3,), depth - 1)}, '
            f'{_expression(data, (3,), depth - 1)}])')
  if kind == 'join' and shape == (3,):
    return (f'np.concatenate([{_expression(data, (2,), depth - 1)}, '
            f'({_expression(data, (), depth - 1)}) * np.ones(1)])')
  if kind == 'index' and shape == ():
    return f'({_expression(data, (3,), depth - 1)})[i]'
  if kind == 'array' and shape in ((3,), (2, 3)):
    items = ', '.join(_expression(data, shape[1:], depth - 1)
                      for _ in range(shape[0]))
    return f'np.array([{items}])'
  if kind == 'linalg':
    return _linalg(data, shape, depth)
  if kind == 'cast' and shape == ():
    f = data.draw(st.sampled_from(['float', 'np.float64', 'int']))
    inner = _expression(data, shape, depth - 1)
    return f'{f}({inner})' if f != 'int' else f'int(({inner}) * 4.0)'
  if kind == 'index' and shape == (3,):
    return f'({_expression(data, (2, 3), depth - 1)})[i]'
  return data.draw(st.sampled_from(_LEAVES[shape]))


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(st.data())
def test_random_expressions_match_loop(data):
  _check_random_expression(data)


@pytest.mark.slow
@hypothesis.settings(max_examples=500, deadline=None)
@hypothesis.given(st.data())
def test_many_random_expressions_match_loop(data):
  _check_random_expression(data)


_SOURCES = tempfile.mkdtemp(prefix='member_direct_')
atexit.register(shutil.rmtree, _SOURCES, True)


def _check_random_expression(data):
  """A random per-member function of one primitive (or an item write of
  one), batched on NumPy, equals the loop over members."""
  shape = data.draw(st.sampled_from(list(_LEAVES)))
  body = _expression(data, shape, data.draw(st.integers(1, 3)))
  write = data.draw(st.booleans()) and shape in ((), (3,))
  # In the function itself, in a helper it calls, or in a helper given
  # some of its values as a tuple.  (In a helper, a test of a member's
  # value and a plain array indexed by one are the rules' refusals, where
  # the plain form does not take the helper.)
  where = data.draw(st.sampled_from(['function', 'helper', 'tuple']))
  if ' if ' in body or 'TABLE[i' in body:
    where = 'function'
  copy = 'm * 1.0' if where == 'function' else 'm.copy()'
  lines = (f'  z = {copy}\n  z[i] = {body}\n  return z\n' if write else
           f'  return {body}\n')
  if where == 'function':
    source = 'def random_expression(x, m, y, i):\n' + lines
  else:
    head = ('def helper(x, m, y, i):\n' if where == 'helper' else
            'def helper(xm, y, i):\n  x, m = xm\n')
    call = ('helper(x, m, y, i)' if where == 'helper' else
            'helper((x, m), y, i)')
    source = (head + lines +
              f'def random_expression(x, m, y, i):\n  return {call}\n')
  # A file of its own: a helper's source is read from its file.
  filename = os.path.join(_SOURCES, f'random_{abs(hash(source))}.py')
  with open(filename, 'w') as f:
    f.write(source)
  linecache.cache[filename] = (len(source), None, source.splitlines(True),
                               filename)
  scope = dict(globals())
  exec(compile(source, filename, 'exec'), scope)  # pylint: disable=exec-used
  fn = scope['random_expression']
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
  args = (rng.normal(size=(B, 3)), rng.normal(size=(B, 2, 3)),
          rng.normal(size=B), rng.integers(0, 2, B))
  expected = np.stack([np.asarray(fn(*[np.copy(a[k]) for a in args]))
                       for k in range(B)])
  try:
    got = np.asarray(ab.Context().batch_uncurried(fn, per_member=True)(
        *args, stackless=False))
  except errors.PerMemberError as e:
    # In a helper the rules cannot read a plain array (a shared value
    # computed there) at a member's index; the plain form reads a shared
    # name's (`TABLE[i]`, `(TABLE[1])[i]`) only.
    if where != 'function' and 'plain array of a per-member value' in str(e):
      hypothesis.reject()
    raise
  assert got.shape == expected.shape, source
  assert got.dtype == expected.dtype, source
  np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=source)
