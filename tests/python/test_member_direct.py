"""Per-member primitives as plain NumPy code on the batch (`member_direct`).

Each function below is one primitive.  Batched on NumPy (stack VM), it
must equal a plain Python loop over members (values, shapes, dtypes)
and the dry run; the test also checks which primitives take the plain
form (`DirectForms.form`) and which the rules run.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.ir import instructions as inst

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
def rules_scan(x):
  return np.cumsum(x)


@ctx.batch(per_member=True)
def rules_product_of_members(x):
  return x @ x


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
    flag: ('x', True),
    put_at_member_index: ('xiy', True),
    put_rows: ('mix', True),
    put_items: ('my', True),
    shared_matrix_of_member: ('x', True),
    rules_scan: ('x', False),
    rules_product_of_members: ('x', False),
    rules_index_after_slice: ('i', False),
    rules_shared_part: ('x', False),
}


def _primitive(fn):
  """The per-member primitive of `fn` (each function here has one), and
  the names of the parameters it reads, in its order."""
  (function,) = ctx.program(fn).functions
  ops = [op for b in function.blocks for op in b.instructions
         if isinstance(op, inst.PrimOp) and op.per_member]
  assert len(ops) == 1, ops
  return ops[0].function, [v.split('.')[-1] for v in ops[0].vars_in]


@pytest.mark.parametrize('fn', list(CASES), ids=lambda f: f.__name__)
def test_batched_equals_a_loop_and_the_dry_run(fn):
  names, plain = CASES[fn]
  values = _inputs(np.random.default_rng(0))
  args = [values[n] for n in names]
  expected = np.stack([
      np.asarray(fn.python_function(*[np.copy(a[k]) for a in args]))
      for k in range(B)])
  before = [np.copy(a) for a in args]
  for out in (fn(*args, stackless=False), fn(*args, stackless=True),
              fn(*args, dry_run=True)):
    for a, b in zip(args, before):
      np.testing.assert_array_equal(a, b)   # item writes copy
    out = np.asarray(out)
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=1e-12)
  pm, read = _primitive(fn)
  key = tuple((values[n].ndim, values[n].dtype.char) for n in read)
  assert (pm.direct.form(key, pm.member_function, pm.loc) is not None) == (
      plain)


def test_an_error_in_the_plain_form_is_the_rules_error_at_the_users_line():
  values = _inputs(np.random.default_rng(1))
  i = values['i'] + 7   # out of range of INDEX
  with pytest.raises(Exception) as caught:
    table_gather(values['x'], i, stackless=False)
  assert 'out of bounds' in str(caught.value)
  assert 'for axis 0' not in str(caught.value)   # the rules' wording
