"""A user's helpers in the plain NumPy form of a per-member primitive.

`member_direct` rewrites the body of a function the primitive calls (a
helper: a `def` or a `lambda`, through namespaces and sync points) for
the values it is called with, as it rewrites the primitive: namedtuples
and tuples of values, `isinstance` on them, comprehensions over them, an
`if` on a shared value, `a if c else b`, builtins as a primitive has
them, an item write to a member's copy.  Each program
below is one primitive; batched on NumPy (stack VM and stackless) it must
equal a plain Python loop over members and the dry run, and the test
checks whether the primitive takes the plain form.  A helper that tests a
member's value, calls itself, writes its argument, or whose source no
longer matches its code goes to the rules, which give the loop's values
or refuse as they do without the plain form.
"""

import collections
import importlib.util
import linecache
import pathlib
import sys
import types

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.per_member import numpy_rules
from tests.python import check_batched_equals_a_loop_and_the_dry_run
from tests.python import per_member_primitive

B = 4
Pair = collections.namedtuple('Pair', ['x', 'y'])
LIMIT = 1
MATRIX = np.linspace(-1.0, 1.0, 12).reshape(4, 3)


def where(c, a, b):
  """A select that maps over tuples (as NUTS's `lib.where`)."""
  if isinstance(a, tuple):
    return type(a)(*[np.where(c, p, q) for p, q in zip(a, b)])
  return np.where(c, a, b)


def scaled(p, s):
  """An early return on a shared value, a namedtuple built anew."""
  if LIMIT < 0:
    return p
  return Pair(p.x * s, p.y + s)


def with_limit(x, y):
  """A namedtuple with a leaf the same for every member."""
  return Pair(x * y, LIMIT)


def total(p):
  return p.x.sum() + p.y


def clipped(v, y):
  """`a if c else b` on a member's value, and on a shared one."""
  return (v if y > 0 else -v) * (2.0 if LIMIT > 0 else 1.0)


def builtins_of(y, v):
  """Builtins and `np.array` of a member's values, as in a primitive."""
  return np.array([float(y), abs(y), min(y, 0.5), len(v) * v[0]])


def put(v, i, x):
  """An item write to a copy of a member's array."""
  v = v.copy()
  v[i] = x
  return v


def norm2(v):
  return np.dot(v, v)


@ab.sync_point
def project(v):
  """A sync point over a shared matrix times a member's vector."""
  w = MATRIX @ v
  return w, np.sum(w * w)


lib = types.SimpleNamespace(twice=lambda v: 2.0 * v, where=where,
                            exp=np.exp)


def member_test(x):
  """An `if` on a member's value: the rules refuse it."""
  if x[0] > 0:
    return x
  return -x


def countdown(x, n):
  """A helper calling itself."""
  if n == 0:
    return x
  return countdown(x + 1.0, n - 1)


def writes_argument(v):
  """Writes into its argument, not a copy of it."""
  v[0] = 0.0
  return v.sum()


def _stale():
  """A helper whose file now says something else than its code does."""
  source = 'def stale(x):\n  return x + 1.0\n'
  scope = {}
  exec(compile(source, '<stale helper>', 'exec'), scope)  # pylint: disable=exec-used
  text = 'def stale(x):\n  return x + 2.0\n'
  linecache.cache['<stale helper>'] = (len(text), None,
                                       text.splitlines(True),
                                       '<stale helper>')
  return scope['stale']


stale = _stale()
ctx = ab.Context()


@ctx.batch(per_member=True)
def tuples(x, y):
  return total(where(y > 0, Pair(x, y), scaled(Pair(x, y), y)))


@ctx.batch(per_member=True)
def item_write(v, i, y):
  return put(v, i, norm2(v) * y)


@ctx.batch(per_member=True)
def namespace_and_sync_point(x, y):
  return lib.exp(lib.where(y > 0, lib.twice(project(x)[1]), y))


@ctx.batch(per_member=True)
def conditions_and_builtins(x, y):
  return clipped(x, y) + builtins_of(y, x).sum()


@ctx.batch(per_member=True)
def shared_leaf(x, y):
  return with_limit(x, y)


def row_of_numbers(y, i):
  # A shared table's item at a member's index, a member's number and a
  # Python number in one array: in a helper, the rules cannot read a
  # plain array at a member's index; the plain form can.
  return np.array([MATRIX[1][i], y, 1.5])


@ctx.batch(per_member=True)
def shared_items_and_numbers(y, i):
  return row_of_numbers(y, i) * 2.0


@ctx.batch(per_member=True)
def rules_member_test(x):
  return member_test(x)


@ctx.batch(per_member=True)
def rules_recursion(x):
  return countdown(x, 3)


@ctx.batch(per_member=True)
def rules_written_argument(x):
  return writes_argument(x * 1.0)


@ctx.batch(per_member=True)
def rules_stale_source(x):
  return stale(x)


def _inputs(rng):
  return {'v': rng.normal(size=(B, 3)), 'x': rng.normal(size=(B, 3)),
          'y': rng.normal(size=B), 'i': rng.integers(0, 3, B)}


# name -> (argument names, whether its primitive takes the plain form)
CASES = {
    tuples: ('xy', True),
    item_write: ('viy', True),
    namespace_and_sync_point: ('xy', True),
    conditions_and_builtins: ('xy', True),
    shared_leaf: ('xy', True),
    shared_items_and_numbers: ('yi', True),
    rules_recursion: ('x', False),
    rules_written_argument: ('x', False),
    rules_stale_source: ('x', False),
}


def _primitive(fn):
  return per_member_primitive(ctx, fn)


@pytest.mark.parametrize('fn', list(CASES), ids=lambda f: f.__name__)
def test_batched_equals_a_loop_and_the_dry_run(fn):
  names, plain = CASES[fn]
  check_batched_equals_a_loop_and_the_dry_run(
      ctx, fn, names, plain, _inputs(np.random.default_rng(0)), B)


def test_a_test_of_a_members_value_in_a_helper_is_the_rules_refusal():
  x = _inputs(np.random.default_rng(1))['x']
  pm, _ = _primitive(rules_member_test)
  assert pm.direct.form(((2, 'd'),), pm.member_function, pm.loc) is None
  with pytest.raises(errors.PerMemberError, match='bool') as info:
    rules_member_test(x)
  # The error is at the primitive's line, and names the helper's line.
  assert 'in member_test(), ' in str(info.value)
  assert 'test_member_direct_helpers.py, line' in str(info.value)


def test_a_helper_calling_itself_goes_to_the_rules():
  pm, _ = _primitive(rules_recursion)
  assert pm.direct.form(((2, 'd'),), pm.member_function, pm.loc) is None


def _load_nuts():
  path = pathlib.Path(__file__).resolve().parents[2] / 'examples' / 'nuts.py'
  name = 'examples_nuts'
  if name not in sys.modules:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
  return sys.modules[name]


def test_nuts_per_member_primitives_all_take_the_plain_form(monkeypatch):
  """NUTS written for one chain (`examples/nuts.py --per_member`): every
  primitive, helpers and all, runs as plain NumPy; the rules never run."""
  nuts = _load_nuts()
  ruled = []
  vectorize = numpy_rules.vectorize
  monkeypatch.setattr(numpy_rules, 'vectorize', lambda fn, *a, **k: (
      ruled.append(fn.__name__), vectorize(fn, *a, **k))[1])
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  member = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=4,
                        per_member=True)
  aware = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=4)
  np.testing.assert_allclose(nuts.first_chunk(member, 3, 5),
                             nuts.first_chunk(aware, 3, 5), rtol=0,
                             atol=1e-10)
  if np.lib.NumpyVersion(np.__version__) >= '2.0.0':
    # (NumPy 1 promotes by the value of a NumPy scalar, as one member's
    # code does not: the random streams' uint64 arithmetic takes the rules.)
    assert not ruled
