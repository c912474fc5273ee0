"""The IR itself: pattern utilities, the printer and the reference interpreter.

The interpreter is the oracle of the other tests, so here it is checked
against plain Python on every program of `tests/programs.py`, on the untyped,
typed and lowered forms (lowered both before and after stack optimization).
"""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest

from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import lowering
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.passes import pipeline
from tests import programs as progs

Point = collections.namedtuple('Point', ['x', 'y'])
CASES = progs.CASES
IDS = [c.name for c in CASES]
MEMBERS = 12   # members checked per program
MAX_STEPS = 10**5   # plenty for these inputs; a miscompiled loop fails fast


def _stages(case):
  typed = pipeline.typed(case.program, case.input_types, NumpyBackend(),
                         verify=True)
  return {
      'untyped': case.program,
      'typed': typed,
      'lowered_unoptimized': lowering.lower(typed),
      'lowered': pipeline.lowered(typed, verify=True),
  }


# -- patterns -------------------------------------------------------------------

NESTED = (1, [2, Point(3, (4,))], ())


def test_pattern_map_keeps_structure_and_container_types():
  out = inst.pattern_map(lambda x: x * 10, NESTED)
  assert out == (10, [20, Point(30, (40,))], ())
  assert isinstance(out[1], list)
  assert isinstance(out[1][1], Point)


def test_pattern_flatten_order_and_unflatten_roundtrip():
  leaves = inst.pattern_flatten(NESTED)
  assert leaves == [1, 2, 3, 4]
  rebuilt = inst.pattern_unflatten(NESTED, ['a', 'b', 'c', 'd'])
  assert rebuilt == ('a', ['b', Point('c', ('d',))], ())
  assert type(rebuilt[1][1]) is Point


def test_pattern_unflatten_rejects_leftover_leaves():
  with pytest.raises(ValueError, match='left over'):
    inst.pattern_unflatten((1, 2), [1, 2, 3])


def test_pattern_map2_and_zip():
  a = (1, Point(2, 3))
  b = (10, Point(20, 30))
  assert inst.pattern_map2(lambda x, y: x + y, a, b) == (11, Point(22, 33))
  # TFP's pattern_zip: the leaf pairs, flat, in depth-first order.
  assert list(inst.pattern_zip(a, b)) == [(1, 10), (2, 20), (3, 30)]


def test_pattern_zip_pairs_a_leaf_with_a_subpattern():
  # Where the first pattern has a leaf, the pair holds the second's
  # subpattern whole (TFP's test compares an array with a tuple of arrays).
  pairs = list(inst.pattern_zip(('x', ['y', 'z']), ((1, 2), [3, (4, 5)])))
  assert pairs == [('x', (1, 2)), ('y', 3), ('z', (4, 5))]
  t = inst.TensorType(np.int32, ())
  assert list(inst.pattern_zip((inst.Type((t,)),), (7,), inst.Type)) == [
      (inst.Type((t,)), 7)]


@pytest.mark.parametrize('other', [((1, 2, 3), 3), (1, 3), 5])
def test_pattern_zip_rejects_mismatched_structures(other):
  with pytest.raises(ValueError, match='do not match'):
    list(inst.pattern_zip(((1, 2), 3), other))


@pytest.mark.parametrize('other', [((1, 2, 3), 3), (1, 3), 5])
def test_pattern_map2_rejects_mismatched_structures(other):
  with pytest.raises(ValueError, match='do not match'):
    inst.pattern_map2(lambda x, y: x, ((1, 2), 3), other)


def test_leaf_type_stops_descent():
  t = inst.TensorType(np.int32, (2,))
  typ = inst.Type((t, t))   # a namedtuple: would be descended into
  assert inst.pattern_flatten(typ) == [t, t]
  assert inst.pattern_flatten(typ, inst.Type) == [typ]
  assert inst.pattern_map(str, (typ,), inst.Type) == (str(typ),)


def test_pattern_traverse_yields_the_leaves():
  # TFP's pattern_traverse: the leaves, as pattern_flatten lists them.
  assert list(inst.pattern_traverse(NESTED)) == [1, 2, 3, 4]
  assert list(inst.pattern_traverse(7)) == [7]
  t = inst.TensorType(np.int32, ())
  assert list(inst.pattern_traverse([inst.Type((t,))], inst.Type)) == [
      inst.Type((t,))]


def test_pattern_paths():
  assert list(inst.pattern_paths(NESTED)) == [
      ((0,), 1), ((1, 0), 2), ((1, 1, 0), 3), ((1, 1, 1, 0), 4)]
  assert list(inst.pattern_paths(7)) == [((), 7)]


def test_types_print_and_compare_structurally():
  a = inst.TensorType('int64', [3, 2])
  assert a == inst.TensorType(np.int64, (3, 2))
  assert str(a) == 'int64[3x2]'
  assert str(inst.TensorType(float, (), weak=True)) == 'float64~'
  assert str(inst.Type((a, inst.TensorType(bool)))) == '(int64[3x2], bool)'
  assert hash(a) == hash(inst.TensorType(np.int64, (3, 2)))


def test_frozen_dict_is_immutable_and_hashable():
  d = inst.FrozenDict(b=1, a=2)
  assert list(d) == ['b', 'a']
  assert d.set('c', 3) == inst.FrozenDict(b=1, a=2, c=3)
  assert d == inst.FrozenDict(b=1, a=2)
  assert hash(d) == hash(inst.FrozenDict(b=1, a=2))
  with pytest.raises(AttributeError):
    d.x = 1


# -- printer --------------------------------------------------------------------

@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_printer_is_deterministic_across_rebuilds(case):
  fresh = {c.name: c for c in progs.all_cases()}[case.name]
  for stage, program in _stages(case).items():
    again = _stages(fresh)[stage]
    assert inst.print_program(program) == inst.print_program(again), stage
    assert str(program) == inst.print_program(program)
    listing = inst.print_program(program)
    assert ' at 0x' not in listing and '<lambda>' not in listing, listing


_PRINT_ALL = """
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.passes import pipeline
from tests import programs
for c in programs.CASES:
  t = pipeline.typed(c.program, c.input_types, NumpyBackend())
  print(c.program); print(t); print(pipeline.lowered(t))
"""


def test_printer_does_not_depend_on_hash_seed():
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  outputs = []
  for seed in ('1', '2'):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    env['PYTHONPATH'] = root + os.pathsep + env.get('PYTHONPATH', '')
    outputs.append(subprocess.run(
        [sys.executable, '-c', _PRINT_ALL], cwd=root, env=env, check=True,
        capture_output=True, text=True).stdout)
  assert outputs[0] == outputs[1]
  assert 'def fibonacci(n) -> %ret:' in outputs[0]


def test_printer_shows_every_instruction_kind():
  block = inst.Block('f.0', (
      inst.PrimOp(('a',), ('b', ['c']), inst.identity, 'a'),
      inst.PushOp(('x', 'y')), inst.PopOp(('x',)), inst.RestoreOp(('y',)),
  ), inst.PushGotoOp('f.1', 'g.0'))
  program = inst.LoweredProgram(
      (block, inst.Block('f.1', (), inst.IndirectGotoOp())),
      inst.FrozenDict(), inst.FrozenDict(), ('a',), 'b')
  assert str(program).split('\n') == [
      'lowered program (a) -> b',
      ' blocks:',
      '  f.0:',
      '    (b, [c]) = prim[a](a)',
      '    push x, y',
      '    pop x',
      '    restore y',
      '    push_goto f.1, g.0',
      '  f.1:',
      '    indirect_goto',
  ]
  assert inst.op_str(inst.BranchOp('c', 'f.1', 'f.2')) == \
      'branch c ? f.1 : f.2'
  with pytest.raises(errors.InternalError):
    inst.op_str(object())


# -- reference interpreter -----------------------------------------------------------

@pytest.mark.parametrize('stage', ['untyped', 'typed', 'lowered_unoptimized',
                                   'lowered'])
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_interpret_matches_python(case, stage):
  program = _stages(case)[stage]
  args = case.make_args(np.random.default_rng(0), MEMBERS)
  for i in range(MEMBERS):
    member = [np.int64(a) for a in case.member_args(args, i)]
    got = progs.scalar(inst.interpret(program, *member, max_steps=MAX_STEPS))
    assert got == case.expected(args, i), (case.name, stage, member)


def test_interpret_returns_tuples_with_their_dtypes():
  program = progs.BY_NAME['tuple_return'].program
  r, half = inst.interpret(program, np.int64(8))
  assert (int(r), float(half)) == (2, 2.0)
  assert np.asarray(r).dtype == np.int64
  assert np.asarray(half).dtype == np.float64


def test_interpret_step_budget():
  program = progs.BY_NAME['collatz'].program
  assert progs.scalar(inst.interpret(program, np.int64(27))) == 111
  with pytest.raises(errors.InternalError, match='budget'):
    inst.interpret(program, np.int64(27), max_steps=50)
  lowered = _stages(progs.BY_NAME['collatz'])['lowered']
  with pytest.raises(errors.InternalError, match='budget'):
    inst.interpret(lowered, np.int64(27), max_steps=50)


def test_interpret_rejects_stage_mismatches():
  lowered = _stages(progs.BY_NAME['fibonacci'])['lowered']
  fn_with_pop = inst.Function('f', ('n',), '%ret', (inst.Block(
      'f.0', (inst.PopOp(('n',)),), inst.ReturnOp()),))
  with pytest.raises(errors.InternalError, match='before lowering'):
    inst.interpret(inst.Program((fn_with_pop,), 'f'), np.int64(1))
  with_return = inst.LoweredProgram(
      (inst.Block('x', (), inst.ReturnOp()),), lowered.var_defs,
      lowered.var_alloc, lowered.vars_in, lowered.vars_out)
  with pytest.raises(errors.InternalError, match='after lowering'):
    inst.interpret(with_return, np.int64(1))
  with pytest.raises(errors.InternalError, match='Cannot interpret'):
    inst.interpret(lowered.blocks[0], np.int64(1))
