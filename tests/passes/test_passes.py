"""Each compiler pass on the hand-built programs of `tests/programs.py`.

Passes must be pure (their input prints the same afterwards), keep every
program's meaning (the reference interpreter agrees with plain Python after
each stage), and do their specific job: allocation classes, caller-saves
around exactly the calls that need them, pop+push fusion into `restore`,
self tail calls into `goto`.  The verifier must reject broken programs and
show the offending instruction.
"""

import dataclasses

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import allocation_strategy
from autobatch_vm import dsl
from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import liveness
from autobatch_vm import lowering
from autobatch_vm import stack_optimization
from autobatch_vm import type_inference
from autobatch_vm import virtual_machine
from autobatch_vm.ir import verifier
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.passes import block_merge
from autobatch_vm.passes import copy_propagation
from autobatch_vm.passes import leaf_returns
from autobatch_vm.passes import pipeline
from autobatch_vm.passes import return_inlining
from tests import programs as progs

VA = inst.VariableAllocation
CASES = progs.CASES
IDS = [c.name for c in CASES]
BACKEND = NumpyBackend()


def typed(name):
  case = progs.BY_NAME[name]
  return pipeline.typed(case.program, case.input_types, BACKEND, verify=True)


def _lowered_up_to(program, last):
  """`program` through `pipeline.LOWERED_PASSES` up to and including the
  pass named `last`, verified after each."""
  names = [p.name for p in pipeline.LOWERED_PASSES]
  passes = pipeline.LOWERED_PASSES[:names.index(last) + 1]
  return pipeline.run(passes, program, verify=True,
                      schedule=virtual_machine.DEFAULT_SCHEDULE)


def lowered(name, optimize=True):
  """`name` lowered: whole pipeline, up to block merging ('merge'), only
  stack optimization ('stack'), or neither."""
  program = typed(name)
  if optimize == 'merge':
    return _lowered_up_to(program, 'block_merge')
  if optimize == 'stack':
    return _lowered_up_to(program, 'stack_optimization')
  if optimize:
    return pipeline.lowered(program, verify=True)
  return _lowered_up_to(program, 'lowering')


def ops_of(program, kind):
  blocks = (program.blocks if isinstance(program, inst.LoweredProgram) else
            [b for f in program.functions for b in f.blocks])
  return [op for b in blocks for op in b.instructions + (b.terminator,)
          if isinstance(op, kind)]


def block_lines(program, label):
  b = next(b for b in program.blocks if b.label == label)
  return [inst.op_str(op) for op in b.instructions + (b.terminator,)]


# -- purity and determinism ----------------------------------------------------------

@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_passes_are_pure_and_deterministic(case):
  # Every pass of every table leaves its input as it was.
  untyped = case.program
  context = dict(input_types=case.input_types, backend=BACKEND,
                 schedule=virtual_machine.DEFAULT_SCHEDULE, exits=True)
  program, stages = untyped, {}
  for table in (pipeline.TYPED_PASSES, pipeline.LOWERED_PASSES):
    for p in table:
      before = str(program)
      out = p.apply(program, context)
      assert str(program) == before, p.name
      stages[p.name] = program = out
  t1, a1, l1 = stages['type_inference'], stages['allocation'], stages[
      'lowering']
  o1 = program
  # Running the whole pipeline again gives equal results.
  o2 = pipeline.lowered(pipeline.typed(untyped, case.input_types, BACKEND),
                        exits=True)
  assert str(o1) == str(o2)
  assert o1 == o2   # structurally equal, not just printed alike
  # And the passes did something: types, allocations, no calls left.
  assert all(f.var_defs for f in t1.functions)
  assert all(not f.var_alloc for f in t1.functions)
  assert all(set(f.var_alloc) == set(f.var_defs) for f in a1.functions)
  assert not ops_of(l1, (inst.FunctionCallOp, inst.ReturnOp))


@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_every_stage_verifies_and_keeps_the_meaning(case):
  args = case.make_args(np.random.default_rng(1), 8)
  typed_program = typed(case.name)
  stages = [typed_program, lowering.lower(typed_program),
            pipeline.lowered(typed_program, verify=True),
            pipeline.lowered(typed_program, verify=True, exits=True)]
  for program in stages:
    for i in range(8):
      member = [np.int64(a) for a in case.member_args(args, i)]
      got = inst.interpret(program, *member, max_steps=10**5)
      assert progs.scalar(got) == case.expected(args, i)


# -- type inference -----------------------------------------------------------------

def test_types_of_tuple_results_and_literals():
  program = typed('tuple_return')
  main, helper = program.function('tuple_main'), program.function('divmod3')
  i64, f64 = inst.TensorType(np.int64), inst.TensorType(np.float64)
  assert helper.var_defs['%ret'] == inst.Type((i64, i64))
  assert main.var_defs['%ret'] == inst.Type((i64, f64))
  assert main.var_defs['half'] == inst.Type(f64)
  assert typed('even_odd').function('is_odd').var_defs['%ret'] == \
      inst.Type(inst.TensorType(np.bool_))


def test_weak_literal_takes_the_type_it_meets():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['x']):
    pb.const(1, out='acc')
    pb.primop(lambda acc, x: acc + x, out='acc')
    pb.return_('acc')
  program = pipeline.typed(pb.program(), [inst.TensorType(np.float32)],
                           BACKEND)
  # NumPy keeps float32 for `1 + float32` (as a per-member Python run does).
  assert program.main_function.var_defs['acc'] == inst.Type(
      inst.TensorType(np.float32))
  pb = dsl.ProgramBuilder()
  with pb.function('g', ['x']):
    pb.const(0.5, out='acc')
    pb.primop(lambda acc, x: acc * x, out='acc')
    pb.return_('acc')
  program = pipeline.typed(pb.program(), [inst.TensorType(np.int32)], BACKEND)
  assert program.main_function.var_defs['acc'] == inst.Type(
      inst.TensorType(np.float64))
  narrow = pipeline.typed(progs.BY_NAME['fibonacci'].program,
                          [inst.TensorType(np.int8)], BACKEND)
  assert {str(t) for t in narrow.main_function.var_defs.values()} == {
      'int8', 'bool'}


def test_inconsistent_types_are_a_user_error():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['x']):
    pb.primop(lambda x: x > 0, out='y')
    pb.primop(lambda x: np.stack([x, x], axis=-1), out='y')
    pb.return_('y')
  with pytest.raises(errors.TypeInferenceError, match="variable 'y'"):
    pipeline.typed(pb.program(), [progs.INT], BACKEND)


def test_recursion_without_base_case_asks_for_type_inference():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['x']):
    pb.return_(pb.call('f', ['x']))
  with pytest.raises(errors.TypeInferenceError, match='return type'):
    pipeline.typed(pb.program(), [progs.INT], BACKEND)


# -- liveness and allocation -----------------------------------------------------------

def test_liveness_across_the_calls_of_fibonacci():
  live = liveness.analyze(typed('fibonacci').main_function)
  assert live.across_call == {('fibonacci.1', 1): {'n'},
                              ('fibonacci.1', 3): {'%2'}}
  assert live.live_in['fibonacci.0'] == {'n'}
  assert live.live_out['fibonacci.1'] == set()


def test_call_graph_closure():
  reach = allocation_strategy.call_graph_closure(typed('even_odd'))
  assert reach == {'is_even': {'is_odd', 'is_even'},
                   'is_odd': {'is_odd', 'is_even'}}
  reach = allocation_strategy.call_graph_closure(typed('sum_squares'))
  assert reach == {'sum_squares': {'sum_squares', 'square'}, 'square': set()}


def test_allocation_of_fibonacci():
  alloc = dict(typed('fibonacci').main_function.var_alloc)
  assert alloc == {'n': VA.FULL, '%2': VA.FULL, '%ret': VA.REGISTER,
                   '%0': VA.TEMPORARY, '%1': VA.TEMPORARY,
                   '%3': VA.TEMPORARY, '%4': VA.TEMPORARY}


def test_allocation_sees_recursion_through_other_functions():
  program = typed('hofstadter')
  for name in ('female', 'male'):
    alloc = program.function(name).var_alloc
    # `twice` lives only across the call of the other function, which
    # calls back: it must be saved all the same.
    assert alloc['n'] == VA.FULL, name
    assert alloc['twice'] == VA.FULL, name
    assert alloc['%2'] == VA.TEMPORARY, name
  low = lowered('hofstadter')
  assert block_lines(low, 'female.2.1')[0] == 'restore female.n'
  assert block_lines(low, 'female.2.2')[0] == 'pop female.n, female.twice'


def test_allocation_saves_only_what_a_recursive_callee_can_clobber():
  program = typed('sum_squares')
  alloc = program.function('sum_squares').var_alloc
  # `n` lives across the call of the helper, which cannot re-enter
  # sum_squares: a register is enough.  `sq` lives across the recursion.
  assert alloc['n'] == VA.REGISTER
  assert alloc['sq'] == VA.FULL
  assert alloc['rest'] == VA.TEMPORARY
  assert dict(program.function('square').var_alloc) == {
      'x': VA.REGISTER, '%ret': VA.REGISTER}
  for name in ('collatz', 'gcd', 'even_odd', 'popcount', 'tuple_return'):
    allocs = [a for f in typed(name).functions for a in f.var_alloc.values()]
    assert VA.FULL not in allocs, name


def test_unread_variables_are_null():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['x', 'unused']):
    pb.primop(lambda x: x * 2, out='dead')
    pb.return_('x')
  program = pipeline.typed(pb.program(), [progs.INT, progs.INT], BACKEND,
                           verify=True)
  alloc = program.main_function.var_alloc
  assert alloc['dead'] == VA.NULL and alloc['unused'] == VA.NULL
  result = pipeline.lowered(program, verify=True)
  assert int(inst.interpret(result, np.int64(4), np.int64(5))) == 4


# -- lowering -------------------------------------------------------------------------

def test_lowering_flattens_and_qualifies():
  program = lowered('sum_squares', optimize=False)
  labels = [b.label for b in program.blocks]
  assert labels[0] == 'sum_squares.0' and 'square.0' in labels
  assert program.vars_in == ('sum_squares.n',)
  assert program.vars_out == 'sum_squares.%ret'
  assert all('.' in v for v in program.var_defs)
  assert set(program.var_alloc) == set(program.var_defs)
  # The call of the helper saves nothing; the recursive call saves `sq`.
  # The helper is called from one site only: it is jumped to and jumps
  # back, with no return block on the PC stack.
  assert block_lines(program, 'sum_squares.2') == [
      'square.x = prim[sum_squares.n](sum_squares.n)', 'goto square.0']
  assert block_lines(program, 'square.0')[-1] == 'goto sum_squares.2.1'
  assert ops_of(program, inst.PushOp) == [inst.PushOp(('sum_squares.sq',))]
  assert ops_of(program, inst.PopOp) == [inst.PopOp(('sum_squares.sq',))]


def test_lowering_returns_directly_from_single_call_sites_only():
  program = lowered('helpers', optimize=False)
  labels = [b.label for b in program.blocks]
  terminators = {b.label: inst.op_str(b.terminator) for b in program.blocks}
  # collatz_next: one call, in a loop; both its returns go to the site.
  assert terminators['helpers.2'] == 'goto collatz_next.0'
  nexts = [terminators[l] for l in labels if l.startswith('collatz_next.')]
  assert nexts.count('goto helpers.2.1') == 2
  # plus_one: two calls, so a pushed return block and `indirect_goto`.
  pushes = [t for t in terminators.values() if t.endswith('plus_one.0')]
  assert len(pushes) == 2 and all(t.startswith('push_goto') for t in pushes)
  assert terminators['plus_one.0'] == 'indirect_goto'
  # Recursive functions keep their pushes, even with a single call site
  # (each of even_odd's functions is called once, by the other), and so
  # does main (its return ends the member).
  for name, direct in (('even_odd', 0), ('hofstadter', 0), ('gcd', 0),
                       ('fibonacci', 0), ('sum_squares', 1), ('helpers', 1)):
    calls = ops_of(typed(name), inst.FunctionCallOp)
    program = lowered(name, optimize=False)
    assert len(ops_of(program, inst.PushGotoOp)) == len(calls) - direct, name
    main_returns = [b for b in program.blocks
                    if b.label.startswith(program.main + '.')
                    and isinstance(b.terminator, inst.IndirectGotoOp)]
    assert main_returns, name


def test_lowering_copies_arguments_in_parallel():
  program = lowered('gcd', optimize=False)
  assert '(gcd.a, gcd.b) = prim[gcd.b, gcd.%1](gcd.b, gcd.%1)' in \
      block_lines(program, 'gcd.2')


def test_arguments_passed_on_unchanged_are_neither_copied_nor_saved():
  """A recursive call that passes parameters on unchanged (NUTS's
  `build_tree(point, joint0, v, j - 1, eps, seed, counter)`) copies only
  the others, and the unchanged ones need no stack: nothing the call runs
  can change them.  Before, each such call copied NUTS's three-array point
  onto itself and pushed and popped four scalars."""
  ctx = ab.Context(debug=True)   # the verifier checks every stage

  @ctx.batch()
  def scaled_sum(x, scale, k):
    if ab.truthy(k == 0):
      return x * 0.0
    return scaled_sum(x, scale, k - 1) + x * scale

  x = np.array([1.0, 2.0, -0.5, 4.0])
  scale = np.array([0.5, -1.0, 3.0, 2.0])
  k = np.array([0, 3, 5, 1])
  typed_program = ctx.program_compiled('scaled_sum', ctx._arg_types(  # pylint: disable=protected-access
      [x, scale, k], BACKEND), BACKEND)
  alloc = typed_program.function('scaled_sum').var_alloc
  assert alloc['x'] == alloc['scale'] == VA.REGISTER
  lowered_program = lowering.lower(typed_program)
  copy = [op for op in ops_of(lowered_program, inst.PrimOp)
          if op.function is inst.parallel_copy]
  assert [c.vars_out for c in copy] == [
      ('scaled_sum.x', 'scaled_sum.scale', 'scaled_sum.k')]
  program = stack_optimization.optimize(lowered_program)
  assert not ops_of(program, inst.PushOp) and not ops_of(program, inst.PopOp)
  written = {v for b in program.blocks for op in b.instructions
             for v in liveness.writes(op)}
  assert 'scaled_sum.k' in written
  assert not written & {'scaled_sum.x', 'scaled_sum.scale'}
  assert 'scaled_sum.k = prim[scaled_sum.%1](scaled_sum.%1)' in \
      block_lines(program, 'scaled_sum.2')
  expected = scaled_sum(x, scale, k, dry_run=True)
  np.testing.assert_allclose(expected, x * scale * k)
  for stackless in (False, True):
    np.testing.assert_allclose(
        scaled_sum(x, scale, k, max_stack_depth=8, stackless=stackless),
        expected)


def test_a_parameter_another_function_writes_is_saved():
  """Mutual recursion: `pong` calls `ping` back with a new `x`, so `ping`'s
  `x` may change while `pong` runs and is saved around that call; `n`,
  read only before the call, needs no stack."""
  ctx = ab.Context(debug=True)

  @ctx.batch()
  def ping(x, n):
    if ab.truthy(n > 0):
      return x + pong(x, n - 1)
    return x

  @ctx.batch()
  def pong(a, n):
    return ping(a * 2, n)

  x = np.array([1, 2, 3, 5])
  n = np.array([0, 1, 3, 2])
  program = ctx.program_compiled('ping', ctx._arg_types(  # pylint: disable=protected-access
      [x, n], BACKEND), BACKEND)
  assert program.function('ping').var_alloc['x'] == VA.FULL
  assert program.function('ping').var_alloc['n'] != VA.FULL

  def ref(x, n):
    return x if n <= 0 else x + ref(2 * x, n - 1)
  expected = [ref(a, b) for a, b in zip(x, n)]
  np.testing.assert_array_equal(ping(x, n, dry_run=True), expected)
  for stackless in (False, True):
    np.testing.assert_array_equal(
        ping(x, n, max_stack_depth=8, stackless=stackless), expected)


# -- stack optimization -----------------------------------------------------------------

def test_pop_push_fusion_makes_restore():
  before = lowered('fib_plus_n', optimize=False)
  after = lowered('fib_plus_n')
  lines = block_lines(before, 'fib_plus_n.1.1')
  assert lines[0] == 'pop fib_plus_n.n'
  assert 'push fib_plus_n.a, fib_plus_n.n' in lines
  lines = block_lines(after, 'fib_plus_n.1.1')
  assert lines[0] == 'restore fib_plus_n.n'
  assert 'push fib_plus_n.a' in lines
  assert not any(l.startswith('pop') for l in lines)
  # One push of `n` per call instead of two.
  pushed = [v for op in ops_of(after, inst.PushOp) for v in op.vars]
  assert pushed.count('fib_plus_n.n') == 1
  assert ops_of(after, inst.RestoreOp) == [inst.RestoreOp(('fib_plus_n.n',))]


def test_no_fusion_when_nothing_is_live_across_both_calls():
  assert not ops_of(lowered('fibonacci'), inst.RestoreOp)
  assert not ops_of(lowered('sum_squares'), inst.RestoreOp)


def _lowered_block(ops):
  program = lowered('fib_plus_n', optimize=False)
  blocks = tuple(dataclasses.replace(b, instructions=tuple(ops))
                 if b.label == 'fib_plus_n.1.1' else b for b in program.blocks)
  return dataclasses.replace(program, blocks=blocks)


def test_no_fusion_when_the_variable_changes_in_between():
  n = 'fib_plus_n.n'
  write_n = inst.PrimOp(('fib_plus_n.%ret',), n, inst.identity, 'x')
  program = _lowered_block([inst.PopOp((n,)), write_n, inst.PushOp((n,))])
  out = stack_optimization.optimize(program)
  assert block_lines(out, 'fib_plus_n.1.1')[:3] == [
      f'pop {n}', f'{n} = prim[x](fib_plus_n.%ret)', f'push {n}']
  program = _lowered_block([inst.PopOp((n, 'fib_plus_n.a')),
                            inst.PushOp(('fib_plus_n.a',))])
  out = stack_optimization.optimize(program)
  assert block_lines(out, 'fib_plus_n.1.1')[:2] == [
      'restore fib_plus_n.a', f'pop {n}']


def test_self_tail_call_becomes_goto():
  before = lowered('gcd', optimize=False)
  after = lowered('gcd', optimize='stack')
  assert block_lines(before, 'gcd.2')[-1] == 'push_goto gcd.2.1, gcd.0'
  assert block_lines(before, 'gcd.2.1') == [
      'gcd.%ret = prim[gcd.%ret](gcd.%ret)', 'indirect_goto']
  assert block_lines(after, 'gcd.2')[-1] == 'goto gcd.0'
  assert 'gcd.2.1' not in [b.label for b in after.blocks]
  assert not ops_of(after, inst.PushGotoOp)


def test_tail_call_to_another_function_keeps_its_frame():
  after = lowered('even_odd', optimize='stack')
  assert block_lines(after, 'is_even.2')[-1] == \
      'push_goto is_even.2.1, is_odd.0'
  assert block_lines(after, 'is_even.2.1') == [
      'is_even.%ret = prim[is_odd.%ret](is_odd.%ret)', 'indirect_goto']


# -- block merging ----------------------------------------------------------------

def _vm_run(program, case, args, batch, schedule='lowest'):
  return virtual_machine.execute(program, args, BACKEND, batch,
                                 max_stack_depth=case.max_stack_depth,
                                 schedule=schedule)


def _check_each_member(program, out, case, args, batch):
  """Each member's batched result (`out`) and `program` interpreted for
  that member alone are the case's expected value."""
  for i in range(batch):
    assert progs.member_result(out, i) == case.expected(args, i)
    member = [np.int64(a) for a in case.member_args(args, i)]
    assert progs.scalar(inst.interpret(program, *member)) == \
        case.expected(args, i)


@pytest.mark.parametrize('schedule', virtual_machine.SCHEDULES)
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_block_merge_keeps_the_meaning_in_fewer_steps(case, schedule):
  before = lowered(case.name, optimize='stack')
  text = str(before)
  after = verifier.verify(block_merge.merge_blocks(before, schedule),
                          'block_merge')
  assert str(before) == text
  assert len(after.blocks) <= len(before.blocks)
  args = case.make_args(np.random.default_rng(3), 7)
  _, steps_before = _vm_run(before, case, args, 7, schedule)
  out, steps_after = _vm_run(after, case, args, 7, schedule)
  _check_each_member(after, out, case, args, 7)
  assert steps_after.steps <= steps_before.steps
  assert steps_after.member_block_executions <= \
      steps_before.member_block_executions


def test_a_call_tests_the_callees_base_case_in_the_callers_step():
  before = lowered('fibonacci', optimize='stack')
  after = lowered('fibonacci', optimize='merge')
  entry = after.blocks[0]
  calls = ops_of(after, inst.PushBranchOp)
  assert len(calls) == 2 and not ops_of(after, inst.PushGotoOp)
  old_calls = ops_of(before, inst.PushGotoOp)
  for call, old in zip(calls, old_calls):
    assert (call.push_block, call.true_block, call.false_block) == (
        old.push_block, entry.terminator.true_block,
        entry.terminator.false_block)
    assert call.loc == old.loc   # a call-stack overflow names the call
  for b in after.blocks:
    if isinstance(b.terminator, inst.PushBranchOp):
      assert b.instructions[-1] == entry.instructions[-1]   # the test
  args = progs.BY_NAME['fibonacci'].make_args(np.random.default_rng(0), 20)
  case = progs.BY_NAME['fibonacci']
  _, s0 = _vm_run(before, case, args, 20)
  _, s1 = _vm_run(after, case, args, 20)
  assert s1.steps < 0.8 * s0.steps


@pytest.mark.parametrize('schedule', virtual_machine.SCHEDULES)
def test_return_inlining_takes_a_constant_base_case_at_the_call(schedule):
  before = lowered('fibonacci', optimize='merge')
  text = str(before)
  after = verifier.verify(return_inlining.inline_returns(before),
                          'return_inlining')
  assert str(before) == text   # pure
  by_label = {b.label: b for b in before.blocks}
  olds = ops_of(before, inst.PushBranchOp)
  calls = ops_of(after, inst.CallBranchOp)
  assert len(calls) == len(olds) == 2
  assert not ops_of(after, inst.PushBranchOp)
  for call, old in zip(calls, olds):
    # `push_branch R, c ? T : F` -> `call_branch R, c ? call T : R`.
    assert (call.push_block, call.cond, call.true_block, call.false_block,
            call.call_side) == (old.push_block, old.cond, old.true_block,
                                old.push_block, True)
    assert call.loc == old.loc   # a call-stack overflow names the call
    leaf = by_label[old.false_block]
    caller = next(b for b in after.blocks if b.terminator == call)
    assert caller.instructions[-len(leaf.instructions):] == \
        leaf.instructions
  case = progs.BY_NAME['fibonacci']
  args = case.make_args(np.random.default_rng(0), 20)
  out0, s0 = _vm_run(before, case, args, 20, schedule)
  out1, s1 = _vm_run(after, case, args, 20, schedule)
  np.testing.assert_array_equal(out1, out0)
  for i in range(20):
    member = [np.int64(a) for a in case.member_args(args, i)]
    assert progs.scalar(inst.interpret(after, *member)) == \
        case.expected(args, i)
  # Half of fibonacci's calls are base cases: a quarter fewer steps.
  assert s1.steps < 0.8 * s0.steps


def test_return_inlining_only_where_the_base_case_is_harmless():
  """A base case moves into its callers only if it sets constants or
  copies, writes nothing live where the callers' other members go, and
  not the branch's condition."""
  from tests import e2e_programs  # pylint: disable=g-import-not-at-top
  ctx = e2e_programs.ctx
  n = np.arange(6)
  # Base case on the test's true side: the members that fail it call.
  first = ctx.lowered_for_args('fibonacci_base_first', [n])
  calls = ops_of(first, inst.CallBranchOp)
  assert len(calls) == 2 and all(not c.call_side for c in calls)
  # `n = 0; return n`: `n` is live on entry to the recursive path.
  # (leaf_returns then sends those calls to copies of the base case
  # followed by the return block: no call goes straight back to `R`.)
  reset = ctx.lowered_for_args('reset_sum', [n])
  assert not [c for c in ops_of(reset, inst.CallBranchOp)
              if c.push_block in (c.true_block, c.false_block)]
  # A base case that computes (`return n * 2`) stays where it is.
  local = ab.Context()

  @local.batch(type_inference=lambda t: t[0])
  def doubling(n):
    if n <= 1:
      return n * 2
    return doubling(n - 1) + doubling(n - 2)

  program = local.lowered_for_args('doubling', [n])
  assert not [c for c in ops_of(program, inst.CallBranchOp)
              if c.push_block in (c.true_block, c.false_block)]
  np.testing.assert_array_equal(doubling(np.arange(10)),
                                doubling(np.arange(10), dry_run=True))


def _through_return_inlining(typed_program, schedule):
  """`typed_program` through the passes before leaf_returns, verified."""
  program = verifier.verify(stack_optimization.optimize(
      lowering.lower(typed_program)), 'stack_optimization')
  program = verifier.verify(block_merge.merge_blocks(program, schedule),
                            'block_merge')
  return verifier.verify(return_inlining.inline_returns(program),
                         'return_inlining')


@pytest.mark.parametrize('schedule', virtual_machine.SCHEDULES)
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_leaf_returns_keep_the_meaning(case, schedule):
  before = _through_return_inlining(typed(case.name), schedule)
  text = str(before)
  after = verifier.verify(leaf_returns.merge_leaf_returns(before, schedule),
                          'leaf_returns')
  assert str(before) == text   # pure
  args = case.make_args(np.random.default_rng(5), 9)
  _, s0 = _vm_run(before, case, args, 9, schedule)
  out, s1 = _vm_run(after, case, args, 9, schedule)
  _check_each_member(after, out, case, args, 9)
  # Every member runs the same instructions in fewer (or as many) block
  # visits: a leaf and its return block are one visit now.
  assert s1.member_block_executions <= s0.member_block_executions
  if schedule == 'lowest':   # which gathers members by block order
    assert after == before


def test_leaf_returns_go_on_at_the_return_block():
  """`push_branch R, c ? L : T` with `L` a returning leaf becomes
  `call_branch R, c ? L>R : call T`, where `L>R` is `L`'s code, then
  `R`'s, then `R`'s terminator (itself rewritten: `R` calls again)."""
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: t[0])
  def doubling(n):
    if n <= 1:
      return n * 2   # computes: return_inlining leaves it where it is
    return doubling(n - 1) + doubling(n - 2)

  typed_program = ctx.program_compiled('doubling', [progs.INT])
  schedule = virtual_machine.DEFAULT_SCHEDULE
  before = _through_return_inlining(typed_program, schedule)
  after = leaf_returns.merge_leaf_returns(before, schedule)
  by_label = {b.label: b for b in before.blocks}
  olds = ops_of(before, inst.PushBranchOp)
  assert len(olds) == 2 and not ops_of(after, inst.PushBranchOp)
  leaf = by_label[olds[0].true_block]   # the test `n <= 1` holds there
  assert isinstance(leaf.terminator, inst.IndirectGotoOp)
  new = {b.label: b for b in after.blocks}
  for old in olds:
    copy = new[f'{leaf.label}>{old.push_block}']
    ret = by_label[old.push_block]
    assert copy.instructions == leaf.instructions + ret.instructions
    caller = next(b for b in after.blocks if b.terminator.loc == old.loc and
                  isinstance(b.terminator, inst.CallBranchOp) and
                  b.terminator.push_block == old.push_block)
    assert (caller.terminator.true_block, caller.terminator.false_block,
            caller.terminator.call_side) == (copy.label, old.false_block,
                                             False)
  # The first call's return block calls again: so does its copy.
  first, second = olds
  chained = new[f'{leaf.label}>{first.push_block}'].terminator
  assert isinstance(chained, inst.CallBranchOp)
  assert chained.true_block == f'{leaf.label}>{second.push_block}'
  # Same results in fewer steps (743 -> 612 here: members at different
  # depths reach their leaves at different steps, and the two copies of
  # the leaf then run apart).
  n = np.arange(12)
  expected = doubling(n, dry_run=True)
  for program in (before, after):
    for i in range(len(n)):
      assert inst.interpret(program, np.int64(n[i])) == expected[i]
  out0, s0 = virtual_machine.execute(before, [n], BACKEND, len(n),
                                     max_stack_depth=12, schedule=schedule)
  out1, s1 = virtual_machine.execute(after, [n], BACKEND, len(n),
                                     max_stack_depth=12, schedule=schedule)
  np.testing.assert_array_equal(out0, expected)
  np.testing.assert_array_equal(out1, expected)
  assert s1.steps < 0.85 * s0.steps
  np.testing.assert_array_equal(doubling(n), expected)


def test_lowest_first_keeps_an_ifs_arms_together():
  """Under 'lowest' the join after an `if` is not copied into the arm: the
  arm's members would go round the loop ahead of the others.  Under
  'most' it is."""
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: t[0])
  def walk(x):
    while x < 40:
      if x % 3 == 0:
        x = x + 4
      x = x + 1
    return x

  x = np.arange(-5, 30, dtype=np.int64)

  def arm(schedule):
    program = ctx.lowered_for_args('walk', [x], schedule=schedule)
    block = next(b for b in program.blocks
                 if any('x + 4' in inst.op_str(op) for op in b.instructions))
    return block.terminator
  assert isinstance(arm('lowest'), inst.GotoOp)
  assert isinstance(arm('most'), inst.BranchOp)   # join and loop test in
  alone = walk(x, dry_run=True)
  for schedule in virtual_machine.SCHEDULES:
    np.testing.assert_array_equal(walk(x, schedule=schedule), alone)


def _prim(out, fn, *ins, sync=False):
  return inst.PrimOp(tuple(ins), out, fn, text=fn.__name__, sync=sync)


def test_block_merge_rules():
  """Small blocks are copied, single-predecessor ones merged (a sync block
  too, the merged block taking its place), and a loop is not unrolled."""
  def inc(x):
    return x + 1

  def double(x):
    return x * 2

  def small(x):
    return x < 50

  def expensive(x):
    return x - 3

  five = tuple(_prim('e.x', f, 'e.x')
               for f in (double, inc, inc, expensive, inc))
  blocks = (
      inst.Block('e.0', (_prim('e.x', inc, 'e.x'),), inst.GotoOp('e.1')),
      inst.Block('e.1', (_prim('e.c', small, 'e.x'),),
                 inst.BranchOp('e.c', 'e.2', 'e.3')),
      inst.Block('e.2', five, inst.GotoOp('e.1')),
      inst.Block('e.3', (_prim('e.x', inc, 'e.x'),), inst.GotoOp('e.4')),
      inst.Block('e.4', (_prim('e.x', expensive, 'e.x', sync=True),),
                 inst.GotoOp('e.5')),
      inst.Block('e.5', five, inst.GotoOp('e.6')),
      inst.Block('e.6', five, inst.GotoOp('e.7')),
      inst.Block('e.7', (), inst.IndirectGotoOp()))
  program = inst.LoweredProgram(blocks, inst.FrozenDict(),
                                inst.FrozenDict(), ('e.x',), 'e.x', 'e')
  merged = block_merge.merge_blocks(program, 'most')
  got = {b.label: b for b in merged.blocks}
  # The loop test is copied into the entry and the loop body, and dropped.
  assert list(got) == ['e.0', 'e.2', 'e.3']
  assert got['e.0'].instructions == blocks[0].instructions + \
      blocks[1].instructions
  assert got['e.0'].terminator == blocks[1].terminator
  assert got['e.2'].instructions == five + blocks[1].instructions
  # The sync block is pulled into its only predecessor, with its large
  # successors, which have no other way in.
  assert got['e.3'].instructions == (blocks[3].instructions +
                                     blocks[4].instructions + five + five)
  assert isinstance(got['e.3'].terminator, inst.IndirectGotoOp)
  for x in range(1, 60, 7):
    assert inst.interpret(merged, np.int64(x), max_steps=100) == \
        inst.interpret(program, np.int64(x), max_steps=100)


def test_block_merge_sync_block_keeps_its_place():
  """A block that takes a sync block by a plain merge goes where the sync
  block was (numbered last, `block_order`); a sync block with two ways in,
  or one the entry jumps to, is taken by none."""
  def inc(x):
    return x + 1

  def expensive(x):
    return x - 3

  sync = (_prim('e.x', expensive, 'e.x', sync=True),)
  blocks = (
      inst.Block('e.0', (_prim('e.c', lambda x: x < 5, 'e.x'),),
                 inst.BranchOp('e.c', 'e.1', 'e.2')),
      inst.Block('e.1', (_prim('e.x', inc, 'e.x'),), inst.GotoOp('e.3')),
      inst.Block('e.2', (_prim('e.x', inc, 'e.x'),), inst.GotoOp('e.4')),
      inst.Block('e.3', sync, inst.GotoOp('e.4')),    # one way in
      inst.Block('e.4', sync, inst.GotoOp('e.5')),    # two ways in
      inst.Block('e.5', sync, inst.IndirectGotoOp()))  # after a sync block
  program = inst.LoweredProgram(blocks, inst.FrozenDict(),
                                inst.FrozenDict(), ('e.x',), 'e.x', 'e')
  merged = block_merge.merge_blocks(program, 'most')
  assert [b.label for b in merged.blocks] == ['e.0', 'e.2', 'e.1', 'e.4',
                                              'e.5']
  assert merged.blocks[2].instructions == blocks[1].instructions + sync
  assert merged.blocks[2].terminator == inst.GotoOp('e.4')
  assert merged.blocks[1:2] + merged.blocks[3:] == (blocks[2],) + blocks[4:]
  for x in range(0, 9):
    assert inst.interpret(merged, np.int64(x), max_steps=100) == \
        inst.interpret(program, np.int64(x), max_steps=100)
  # The entry keeps its place: it takes no sync block.
  entry = inst.LoweredProgram(
      (inst.Block('e.0', (), inst.GotoOp('e.1')),
       inst.Block('e.1', sync, inst.IndirectGotoOp())),
      inst.FrozenDict(), inst.FrozenDict(), ('e.x',), 'e.x', 'e')
  assert block_merge.merge_blocks(entry, 'most') == entry


INT = inst.Type(inst.TensorType(np.int64, ()))


def _copy(out, src):
  return inst.PrimOp((src,), out, inst.identity, text=src)


def _one_block(ops, terminator=None, temporaries=(), types=None):
  """A one-function lowered program `x, y -> r` of one block (ending in a
  return) plus whatever `terminator` branches to."""
  names = {'e.x', 'e.y', 'e.r'} | set(temporaries)
  for op in ops:
    names |= set(op.vars_in) | {op.vars_out}
  types = dict(types or {})
  var_defs = inst.FrozenDict({v: types.get(v, INT) for v in sorted(names)})
  var_alloc = inst.FrozenDict({
      v: VA.TEMPORARY if v in temporaries else VA.REGISTER
      for v in sorted(names)})
  blocks = [inst.Block('e.0', tuple(ops), terminator or inst.IndirectGotoOp())]
  if terminator is not None:
    blocks += [inst.Block('e.1', (_prim('e.r', neg, 'e.r'),),
                          inst.IndirectGotoOp()),
               inst.Block('e.2', (), inst.IndirectGotoOp())]
  return inst.LoweredProgram(tuple(blocks), var_defs, var_alloc,
                             ('e.x', 'e.y'), 'e.r', 'e')


def inc(x):
  return x + 1


def neg(x):
  return -x


def add(x, y):
  return x + y


def positive(x):
  return x > 0


def _propagated(program):
  text = str(program)
  out = verifier.verify(copy_propagation.propagate_copies(program),
                        'copy_propagation')
  assert str(program) == text   # pure
  for x in range(-3, 4):
    for y in (-2, 5):
      assert inst.interpret(out, np.int64(x), np.int64(y)) == \
          inst.interpret(program, np.int64(x), np.int64(y))
  return out


def test_copy_propagation_sinks_a_temporary_into_its_copy():
  """`t = f(x); push x; x = t`: f moves down and writes x (the push still
  saves the old x), and t leaves the variable table."""
  ops = [_prim('e.t', inc, 'e.x'), _prim('e.r', add, 'e.x', 'e.y'),
         _copy('e.x', 'e.t'), _prim('e.r', add, 'e.r', 'e.x')]
  out = _propagated(_one_block(ops, temporaries=['e.t']))
  assert out.blocks[0].instructions == (
      ops[1], _prim('e.x', inc, 'e.x'), ops[3])
  assert 'e.t' not in out.var_defs and 'e.t' not in out.var_alloc


def test_copy_propagation_forwards_a_copy_into_its_reads():
  """`t = r; r = r + t`: reads of t read r (the instruction writing r reads
  it first), the copy goes; a branch condition is forwarded too (here from
  a register: from a temporary, its producer would be sunk instead)."""
  ops = [_copy('e.t', 'e.x'), _prim('e.x', add, 'e.y', 'e.t'),
         _prim('e.r', add, 'e.x', 'e.y'), _prim('e.c', positive, 'e.r'),
         _copy('e.d', 'e.c')]
  program = _one_block(ops, inst.BranchOp('e.d', 'e.1', 'e.2'),
                       temporaries=['e.t', 'e.d'],
                       types={'e.c': inst.Type(inst.TensorType(bool, ())),
                              'e.d': inst.Type(inst.TensorType(bool, ()))})
  out = _propagated(program)
  assert out.blocks[0].instructions == (
      _prim('e.x', add, 'e.y', 'e.x'), ops[2], ops[3])
  assert out.blocks[0].terminator == inst.BranchOp('e.c', 'e.1', 'e.2')


def test_copy_propagation_keeps_copies_it_cannot_remove():
  """No sinking past a write of the producer's input or where the
  temporary is read again; no forwarding past a write of the source; no
  copy that converts (different types)."""
  cases = [
      # f's input x changes before the copy: f must run where it is.
      [_prim('e.t', inc, 'e.x'), _prim('e.x', neg, 'e.y'),
       _copy('e.y', 'e.t'), _prim('e.r', add, 'e.x', 'e.y')],
      # t is read again after the copy.
      [_prim('e.t', inc, 'e.x'), _copy('e.y', 'e.t'),
       _prim('e.r', add, 'e.t', 'e.y')],
      # The source x is written between the copy and the read of t.
      [_copy('e.t', 'e.x'), _prim('e.x', neg, 'e.y'),
       _prim('e.r', add, 'e.t', 'e.x')],
  ]
  for ops in cases:
    program = _one_block(ops, temporaries=['e.t'])
    assert copy_propagation.propagate_copies(program) is program
    _propagated(program)
  narrow = inst.Type(inst.TensorType(np.int32, ()))
  ops = [_copy('e.t', 'e.x'), _prim('e.r', add, 'e.t', 'e.y')]
  program = _one_block(ops, temporaries=['e.t'], types={'e.t': narrow})
  assert copy_propagation.propagate_copies(program) is program


@pytest.mark.parametrize('schedule', virtual_machine.SCHEDULES)
def test_copy_propagation_on_fibonacci(schedule):
  """Fibonacci's call sites lose 3 of 12 primitives: `%1 = n - 1; push n;
  n = %1` becomes `push n; n = n - 1`, and `%4 = %ret; %ret = %2 + %4`
  reads %ret; same results, same steps."""
  case = progs.BY_NAME['fibonacci']
  before = return_inlining.inline_returns(lowered('fibonacci', 'merge'))
  after = lowered('fibonacci')
  assert after == copy_propagation.propagate_copies(before)
  copies = lambda p: [op for op in ops_of(p, inst.PrimOp)
                      if op.function is inst.identity]
  assert len(ops_of(after, inst.PrimOp)) < len(ops_of(before, inst.PrimOp))
  assert len(copies(after)) < len(copies(before))
  args = case.make_args(np.random.default_rng(0), 20)
  out0, s0 = _vm_run(before, case, args, 20, schedule)
  out1, s1 = _vm_run(after, case, args, 20, schedule)
  np.testing.assert_array_equal(out1, out0)
  assert s1.steps == s0.steps


# -- verifier -----------------------------------------------------------------------------

def _replace_block(program, label, **changes):
  if isinstance(program, inst.LoweredProgram):
    return dataclasses.replace(program, blocks=tuple(
        dataclasses.replace(b, **changes) if b.label == label else b
        for b in program.blocks))
  fns = []
  for f in program.functions:
    fns.append(dataclasses.replace(f, blocks=tuple(
        dataclasses.replace(b, **changes) if b.label == label else b
        for b in f.blocks)))
  return dataclasses.replace(program, functions=tuple(fns))


def _with_alloc(program, var, alloc):
  return dataclasses.replace(
      program, var_alloc=program.var_alloc.set(var, alloc))


def _broken_programs():
  fib_untyped = progs.BY_NAME['fibonacci'].program
  fib_typed = typed('fibonacci')
  fib_low = lowered('fibonacci')
  fib_block1 = fib_untyped.main_function.blocks[1]
  yield ('branch to a missing block', _replace_block(
      fib_untyped, 'fibonacci.0',
      terminator=inst.BranchOp('%0', 'fibonacci.1', 'fibonacci.9')),
         'branch %0 ? fibonacci.1 : fibonacci.9', 'unknown block')
  yield ('read of a never-written variable', _replace_block(
      fib_untyped, 'fibonacci.2', instructions=(inst.PrimOp(
          ('ghost',), '%ret', inst.identity, 'ghost'),)),
         '%ret = prim[ghost](ghost)', "'ghost' is read but never written")
  yield ('call of a missing function', _replace_block(
      fib_untyped, 'fibonacci.1', instructions=(
          fib_block1.instructions[:1] + (inst.FunctionCallOp(
              'fibonaci', ('%1',), '%2'),) + fib_block1.instructions[2:])),
         '%2 = call fibonaci(%1)', 'unknown function')
  yield ('stack op before lowering', _replace_block(
      fib_untyped, 'fibonacci.2',
      instructions=(inst.PushOp(('n',)),) +
      fib_untyped.main_function.blocks[2].instructions),
         'push n', 'stack operation before lowering')
  yield ('return after lowering', _replace_block(
      fib_low, 'fibonacci.2', terminator=inst.ReturnOp()),
         'return', 'ReturnOp not allowed')
  yield ('push of a non-FULL variable', _with_alloc(
      fib_low, 'fibonacci.n', VA.REGISTER),
         'push fibonacci.n', "non-FULL 'fibonacci.n'")
  yield ('read of a NULL variable', _with_alloc(
      fib_low, 'fibonacci.%0', VA.NULL),
         'branch fibonacci.%0 ? fibonacci.1 : fibonacci.2',
         "'fibonacci.%0' is read but allocated")
  fib_exits = pipeline.lowered(fib_typed, exits=True)
  entry = fib_exits.blocks[0]
  exit_at = next(i for i, op in enumerate(entry.instructions)
                 if isinstance(op, inst.ExitOp))

  def with_exit(program, exit_op):
    ops = list(entry.instructions)
    ops[exit_at] = exit_op
    return _replace_block(program, entry.label, instructions=tuple(ops))
  yield ('exit to a missing block', with_exit(fib_exits, inst.ExitOp(
      'fibonacci.%0', False, 'fibonacci.9')),
         'exit_unless fibonacci.%0, fibonacci.9', 'unknown block')
  yield ('exit on a vector condition', with_exit(dataclasses.replace(
      fib_exits, var_defs=fib_exits.var_defs.set(
          'fibonacci.%0', inst.Type(inst.TensorType(np.bool_, (3,))))),
                                                 entry.instructions[exit_at]),
         'exit_unless fibonacci.%0, fibonacci.2', 'condition is not a scalar')
  yield ('exit before lowering', _replace_block(
      fib_untyped, 'fibonacci.0', instructions=(
          fib_untyped.main_function.blocks[0].instructions +
          (inst.ExitOp('%0', True, 'fibonacci.2'),))),
         'exit_if %0, fibonacci.2', 'exit before lowering')
  yield ('TEMPORARY read outside its block', _with_alloc(
      fib_low, 'fibonacci.%ret', VA.TEMPORARY),
         'fibonacci.%2 = prim[fibonacci.%ret](fibonacci.%ret)',
         "TEMPORARY 'fibonacci.%ret'")
  bad_cond = dataclasses.replace(fib_typed.main_function, var_defs=(
      fib_typed.main_function.var_defs.set(
          '%0', inst.Type(inst.TensorType(np.bool_, (3,))))))
  yield ('vector condition', fib_typed.replace_function(bad_cond),
         'branch %0 ? fibonacci.1 : fibonacci.2', 'condition is not a scalar')
  untyped_var = dataclasses.replace(fib_typed.main_function, var_defs=(
      inst.FrozenDict((k, v) for k, v in
                      fib_typed.main_function.var_defs.items() if k != '%3')))
  yield ('variable without a type', fib_typed.replace_function(untyped_var),
         '%4 = call fibonacci(%3)', "'%3' has no type")
  yield ('call left after lowering', _replace_block(
      fib_low, 'fibonacci.2', instructions=(inst.FunctionCallOp(
          'fibonacci', ('fibonacci.n',), 'fibonacci.%ret'),)),
         'fibonacci.%ret = call fibonacci(fibonacci.n)',
         'call left after lowering')


BROKEN = list(_broken_programs())


@pytest.mark.parametrize('what, program, offending, message', BROKEN,
                         ids=[b[0] for b in BROKEN])
def test_verifier_rejects_and_points_at_the_instruction(
    what, program, offending, message):
  del what
  with pytest.raises(errors.InternalError) as info:
    verifier.verify(program, 'test')
  text = str(info.value)
  assert message in text
  assert 'after test' in text and 'bug in autobatch_vm' in text
  marked = [l for l in text.split('\n') if l.startswith('>> ')]
  assert len(marked) == 1 and marked[0].strip().endswith(offending), text


@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_verifier_accepts_every_stage(case):
  program = typed(case.name)
  assert verifier.verify(case.program, 'x') is case.program
  assert verifier.verify(program) is program
  verifier.verify(lowering.lower(program))
  verifier.verify(pipeline.lowered(program))
