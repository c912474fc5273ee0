"""User identifiers never collide with the names of generated code.

The frontend compiles primitives and a dry run's copy of the function as
Python code next to names of its own (`python_source.generated_prefix`),
and the NumPy VM writes each block as a Python function whose globals are
constants named `FN_2`, `COERCE_7`, ... (`vm.codegen`).  A batched
function, parameter, variable or closure of any name must run as its
dry run does: here named after every generated name, and (hypothesis)
random identifiers, some made to look generated.
"""

import importlib.util
import itertools
import keyword

from hypothesis import given
from hypothesis import strategies as st
import numpy as np
import pytest

import autobatch_vm as ab

try:
  import tensorflow as tf
except ImportError:  # pragma: no cover
  tf = None

# The roles a name can have in `_TEMPLATE`.
ROLES = ('func', 'helper', 'p', 'q', 'local', 'acc', 'i', 'closure')

# Names the template module itself uses.
_TEMPLATE_NAMES = {'make', 'ab', 'ctx', 'range'}

_TEMPLATE = '''
def make(ab):
  ctx = ab.Context()
  {closure} = 3

  @ctx.batch
  def {helper}({p}):
    return {p} * 2 + {closure}

  @ctx.batch
  def {func}({p}, {q}):
    {local} = {p} + {closure}
    {acc} = {q} * 0
    while {local} > 0:
      {acc} = {acc} + {local}
      {local} = {local} - 2
    for {i} in range({p}):
      {acc} += {i}
    assert {acc} > -1000, f'{{{acc}}} too small'
    if {p} > 1:
      return {func}({p} - 1, {q}) + {helper}({acc})
    return {acc} + {q} if {q} > 2 else {q} - {acc}
  return ctx, {func}
'''

# Every name the generated code binds or reads: the NumPy VM's block
# constants (`vm.codegen._Gen.const` prefixes), its globals and locals,
# and the frontend's primitives' and dry-run copy's names.
CODEGEN_CONSTANTS = ('FN', 'OP', 'FAILURE', 'SHAPE_ERROR', 'CAST', 'DTYPE',
                     'FLAT', 'UNFLAT', 'UNPACK', 'COERCE', 'STRICT',
                     'OVERFLOW', 'PC_OVERFLOW', 'TO_BOOL', 'TARGETS', 'K')
CODEGEN_NAMES = ('np', 'take', 'AutoBatchError', 'BE', 'state', 'm', 'idx',
                 'full', 'own', 'top', 'frame', 'calls', 't', 'e', 'x1',
                 'r1', 'c1', 'run_block', 'block_FN_2', 'b_0')
FRONTEND_NAMES = ('__ab_v0', '__ab_v1', '__ab_ops', '__ab_helper_assertion',
                  '__ab_e', '__ab_prim', '__ab_make', '__ab_range_bound',
                  '__ab_dry_run_copy', '__ab0_v0', 'cast', 'identity')
GENERATED = (CODEGEN_CONSTANTS + tuple(f'{c}_{k}' for c in ('FN', 'COERCE')
                                       for k in range(3))
             + CODEGEN_NAMES + FRONTEND_NAMES)

_counter = itertools.count()


def _load(names, tmp_path):
  """`(ctx, func)` of `_TEMPLATE` with `names` (role -> identifier), from a
  file of its own (batched functions need their source)."""
  path = tmp_path / f'generated_names_{next(_counter)}.py'
  path.write_text(_TEMPLATE.format(**names))
  spec = importlib.util.spec_from_file_location(path.stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.make(ab)


def _args(int_type=np.int64):
  p = np.array([0, 1, 2, 3, 4, 2, 5], int_type)
  q = np.array([3, 0, 7, 1, 5, 2, 4], int_type)
  return p, q


def _check(names, tmp_path, tf_eager=False):
  _, func = _load(names, tmp_path)
  p, q = _args()
  expected = func(p, q, dry_run=True)
  for stackless in (False, True):
    got = func(p, q, stackless=stackless)
    assert got.dtype == expected.dtype, (names, stackless)
    np.testing.assert_array_equal(got, expected, err_msg=f'{names}')
  if tf_eager:
    got = func(tf.constant(p), tf.constant(q))
    np.testing.assert_array_equal(got.numpy(), expected, err_msg=f'{names}')


def _roles(first, rest):
  """Each role a distinct name: `first` the batched function's, then the
  other roles `rest`, in turn."""
  names = {'func': first}
  others = [n for n in rest if n != first]
  for role, name in zip(ROLES[1:], others):
    names[role] = name
  return names


@pytest.mark.parametrize('name', CODEGEN_CONSTANTS + ('FN_2', 'COERCE_7'))
def test_function_named_like_a_block_constant(name, tmp_path):
  rest = [n for n in GENERATED if n not in _TEMPLATE_NAMES]
  start = rest.index(name) + 1 if name in rest else 0
  _check(_roles(name, rest[start:] + rest), tmp_path)


@pytest.mark.parametrize('start', range(0, len(GENERATED), len(ROLES)))
def test_every_role_named_like_generated_code(start, tmp_path):
  rest = [n for n in GENERATED if n not in _TEMPLATE_NAMES]
  rest = rest[start:] + rest[:start]
  _check(_roles(rest[0], rest[1:]), tmp_path)


@pytest.mark.skipif(tf is None, reason='needs TensorFlow')
def test_generated_names_on_tensorflow(tmp_path):
  names = dict(zip(ROLES, ('FN', 'COERCE', '__ab_v0', '__ab_ops', 'x1',
                           '__ab_e', '__ab_range_bound', '__ab_make')))
  _check(names, tmp_path, tf_eager=True)


def test_prefix_avoids_the_users_names():
  from autobatch_vm.python import source as python_source

  def plain(x):
    return x + 1

  def users(__ab_v0, __ab0_x):
    return __ab_v0 + __ab0_x

  assert python_source.generated_prefix(
      plain, python_source.Source(plain).node) == '__ab_'
  assert python_source.generated_prefix(
      users, python_source.Source(users).node) == '__ab1_'


_LOOKALIKE = st.one_of(
    st.sampled_from(GENERATED),
    st.builds(lambda p, k: f'{p}_{k}', st.sampled_from(CODEGEN_CONSTANTS),
              st.integers(0, 40)),
    st.builds(lambda p, k: f'{p}{k}', st.sampled_from(
        ('x', 'r', 'c', '__ab_v', '__ab', 'block_FN_')), st.integers(0, 12)),
    st.builds(lambda k, s: f'__ab{k}_{s}', st.sampled_from(('', '0', '1')),
              st.sampled_from(('v0', 'ops', 'e', 'make', 'range_bound'))))
_RANDOM = st.from_regex(r'[A-Za-z_][A-Za-z0-9_]{0,12}', fullmatch=True)
IDENTIFIERS = st.one_of(_LOOKALIKE, _RANDOM).filter(
    lambda s: s.isidentifier() and not keyword.iskeyword(s)
    and s not in _TEMPLATE_NAMES and s != '__debug__')


@given(st.lists(IDENTIFIERS, min_size=len(ROLES), max_size=len(ROLES),
                unique=True))
def test_fuzzed_identifiers(tmp_path_factory, names):
  _check(dict(zip(ROLES, names)), tmp_path_factory.mktemp('names'))
