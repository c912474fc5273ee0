"""Independent calls run together in stackless mode (`parallel_calls`).

The pass groups independent calls of one function in a block; the
stackless executor runs a group as one call whose frame holds every
call's rows.  Checked here: which calls the pass groups (and which it must
not), that it is pure, and that grouped runs equal each member alone and
the stack VM on NumPy and TensorFlow, with errors naming the run's
members and statistics per frame row.  Also the executor's frames: freed
when their call returns, their memory reused, and NumPy's row queues
choosing blocks as program counters do.
"""

import collections
import dataclasses
import gc
import inspect
import platform
import tracemalloc

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import instructions as inst
from autobatch_vm.ir import verifier
from autobatch_vm.passes import parallel_calls
from autobatch_vm.vm import stackless
from tests import e2e_programs as progs

ctx = ab.Context()
I64 = [ab.TensorType(np.int64, ())]


@ctx.batch()
def tribonacci(n):
  if n > 2:
    return tribonacci(n - 1) + tribonacci(n - 2) + tribonacci(n - 3)
  return n


def tribonacci_ref(n):
  return (tribonacci_ref(n - 1) + tribonacci_ref(n - 2)
          + tribonacci_ref(n - 3)) if n > 2 else n


@ctx.batch()
def chained(n):
  # The second call reads the first's result: they cannot run together.
  if n > 1:
    a = chained(n - 1)
    return chained(a - 1) + 1
  return n


def chained_ref(n):
  return chained_ref(chained_ref(n - 1) - 1) + 1 if n > 1 else n


@ctx.batch()
def old_value(n):
  # `c = b + 1` reads the `b` written before the first call: the second
  # call, which writes `b`, cannot move before it.
  if n > 1:
    b = n * 10
    a = old_value(n - 1)
    c = b + 1
    b = old_value(n - 2)
    return a + b + c
  return n


def old_value_ref(n):
  if n > 1:
    return old_value_ref(n - 1) + old_value_ref(n - 2) + n * 10 + 1
  return n


Pair = collections.namedtuple('Pair', ['low', 'high'])


@ctx.batch()
def span(lo, hi):
  # Pattern results, and an argument computed between the calls.
  if hi - lo > 1:
    mid = (lo + hi) // 2
    left = span(lo, mid)
    shift = mid + 0
    right = span(shift, hi)
    return Pair(np.minimum(left.low, right.low),
                np.maximum(left.high, right.high) + 1)
  return Pair(lo * 1, hi * 1)


def span_ref(lo, hi):
  if hi - lo > 1:
    mid = (lo + hi) // 2
    left, right = span_ref(lo, mid), span_ref(mid, hi)
    return Pair(min(left.low, right.low), max(left.high, right.high) + 1)
  return Pair(lo, hi)


def _checked(n, bad):
  if np.any(bad):
    raise ValueError('bad leaf')
  return n


@ctx.batch()
def tree_check(n, bad):
  if n > 1:
    return tree_check(n - 1, bad) + tree_check(n - 2, bad)
  return _checked(n, bad)


def _calls(program, name):
  fn = program.function(name)
  return [op for b in fn.blocks for op in b.instructions
          if isinstance(op, inst.FunctionCallOp)]


def test_independent_calls_are_grouped_and_adjacent():
  program = progs.ctx.program_stackless('fibonacci', I64)
  calls = _calls(program, 'fibonacci')
  assert [c.parallel for c in calls] == [True, False]
  block = next(b for b in program.function('fibonacci').blocks
               if calls[0] in b.instructions)
  i = block.instructions.index(calls[0])
  assert block.instructions[i + 1] == calls[1]
  # The second call's argument (n - 2) was moved before the first call.
  assert 'parallel' in str(program)
  assert [c.parallel for c in _calls(
      ctx.program_stackless('tribonacci', I64), 'tribonacci')] == [
          True, True, False]


@pytest.mark.parametrize('name', ['chained', 'old_value'])
def test_dependent_calls_are_not_grouped(name):
  program = ctx.program_stackless(name, I64)
  assert not any(c.parallel for c in _calls(program, name))


def test_argument_computed_between_the_calls_moves_up():
  program = ctx.program_stackless('span', I64 * 2)
  calls = _calls(program, 'span')
  assert [c.parallel for c in calls] == [True, False]


def test_pass_is_pure_and_idempotent():
  typed = progs.ctx.program_compiled('fibonacci', I64)
  before = str(typed)
  once = parallel_calls.parallelize_calls(typed)
  assert str(typed) == before
  assert not any(c.parallel for c in _calls(typed, 'fibonacci'))
  assert parallel_calls.parallelize_calls(once) == once


def _backends():
  out = [ab.NumpyBackend()]
  try:
    out.append(ab.TensorFlowBackend())
  except (ImportError, AttributeError):
    pass
  return out


# Eager TensorFlow at 60 members (an op per row group) is in `-m slow`.
@pytest.mark.parametrize('backend, batch', [
    pytest.param(b, n, id=f'{n}-{b.name}', marks=[pytest.mark.slow]
                 if n == 60 and b.name != 'numpy' else [])
    for b in _backends() for n in (1, 7, 60)])
def test_grouped_runs_match_each_member_alone(backend, batch):
  rng = np.random.default_rng(batch)
  n = rng.integers(0, 12, size=batch)
  for fn, ref in [(tribonacci, tribonacci_ref), (chained, chained_ref),
                  (old_value, old_value_ref)]:
    stackless = np.asarray(fn(n, stackless=True, backend=backend))
    np.testing.assert_array_equal(stackless, [ref(int(k)) for k in n])
    np.testing.assert_array_equal(
        stackless, np.asarray(fn(n, max_stack_depth=30, backend=backend)))
    stats = fn.last_stats
    assert 0 < stats.utilization <= 1
  lo = rng.integers(0, 5, size=batch)
  hi = lo + rng.integers(1, 20, size=batch)
  got = span(lo, hi, stackless=True, backend=backend)
  want = [span_ref(int(a), int(b)) for a, b in zip(lo, hi)]
  np.testing.assert_array_equal(np.asarray(got.low), [w.low for w in want])
  np.testing.assert_array_equal(np.asarray(got.high), [w.high for w in want])


def test_grouped_calls_take_fewer_steps_than_the_stack_vm():
  n = np.random.default_rng(0).integers(8, 16, size=64)
  progs.fibonacci(n, max_stack_depth=20, stackless=False)
  stack = progs.fibonacci.last_stats
  progs.fibonacci(n, stackless=True, profile=True)
  stats = progs.fibonacci.last_stats
  # One frame per recursion level, every member's calls of the level in it.
  assert stats.steps * 10 < stack.steps
  assert stats.member_block_executions > stats.steps * 64
  assert 0 < stats.utilization <= 1
  assert all(stats.rows(l) >= stats.block_active[l]
             for l in stats.block_executions)
  assert 'stackless mode ran its independent calls together' in (
      stats.table())


@pytest.mark.parametrize('backend', _backends(), ids=lambda b: b.name)
def test_error_in_a_grouped_call_names_the_runs_members(backend):
  # Members 2 and 4 recurse: their leaves run in frames of their own rows.
  n = np.array([1, 0, 6, 1, 5])
  bad = np.array([False, False, True, False, True])
  with pytest.raises(ab.errors.PrimitiveError) as info:
    tree_check(n, bad, stackless=True, backend=backend)
  message = str(info.value)
  assert 'bad leaf' in message and '[2, 4]' in message
  assert 'test_parallel_calls.py' in message


def test_verifier_checks_the_grouped_program():
  debug = ab.Context(debug=True)

  @debug.batch()
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    return 1

  n = np.arange(12)
  np.testing.assert_array_equal(fib(n, stackless=True),
                                [progs.fibonacci_ref(int(k)) for k in n])
  program = debug.program_stackless('fib', I64)
  call = next(op for b in program.function('fib').blocks
              for op in b.instructions
              if isinstance(op, inst.FunctionCallOp) and op.parallel)
  broken = program.function('fib')
  blocks = tuple(
      b if call not in b.instructions else
      dataclasses.replace(b, instructions=tuple(
          op for op in b.instructions
          if not (isinstance(op, inst.FunctionCallOp) and not op.parallel)))
      for b in broken.blocks)
  bad = dataclasses.replace(
      program, functions=(dataclasses.replace(broken, blocks=blocks),))
  with pytest.raises(ab.errors.InternalError, match='parallel call'):
    verifier.verify(bad, 'test')


State = collections.namedtuple('State', ['depth', 'weight'])


@ctx.batch()
def weigh(s):
  # A pattern argument, calls inside a loop, mutual recursion.
  total = s.weight * 1.0
  k = 0
  while k < 2:
    if s.depth > 0:
      total = (total + weigh(State(s.depth - 1, s.weight * 0.5))
               + balance(State(s.depth - 1, s.weight * 0.25))
               + weigh(State(s.depth - 1, s.weight * 0.125)))
    k = k + 1
  return total


@ctx.batch()
def balance(s):
  if s.depth > 0:
    return weigh(State(s.depth - 1, s.weight)) * 0.5
  return s.weight * 2.0


def weigh_ref(depth, weight):
  total = weight
  for _ in range(2):
    if depth > 0:
      total += (weigh_ref(depth - 1, weight * 0.5)
                + balance_ref(depth - 1, weight * 0.25)
                + weigh_ref(depth - 1, weight * 0.125))
  return total


def balance_ref(depth, weight):
  return weigh_ref(depth - 1, weight) * 0.5 if depth > 0 else weight * 2.0


@pytest.mark.parametrize('backend', _backends(), ids=lambda b: b.name)
def test_pattern_arguments_loops_and_mutual_recursion(backend):
  depth = np.array([0, 3, 1, 4, 2])
  weight = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
  calls = _calls(ctx.program_stackless(
      'weigh', [State(ab.TensorType(np.int64, ()),
                      ab.TensorType(np.float64, ()))]), 'weigh')
  # The two weigh calls, with balance's between them, run together.
  assert [(c.function, c.parallel) for c in calls] == [
      ('weigh', True), ('weigh', False), ('balance', False)]
  got = weigh(State(depth, weight), stackless=True, backend=backend)
  np.testing.assert_allclose(
      np.asarray(got), [weigh_ref(int(d), float(w))
                        for d, w in zip(depth, weight)])


def test_step_limit_in_a_grouped_call_names_the_runs_members():
  n = np.array([1, 30, 2, 25])
  with pytest.raises(ab.errors.StepLimitError, match=r'\[1, 3\]'):
    progs.fibonacci(n, stackless=True, max_steps=40)


@ctx.batch()
def mixed(a, d):
  # The first call passes a constant (int64), the second an int32 value:
  # their arguments are made the parameter's type before they are joined.
  if d > 0:
    return mixed(a // 2, d - 1) + mixed(-8 // 6, d - 1)
  return a + 0


def mixed_ref(a, d):
  return mixed_ref(a // 2, d - 1) + mixed_ref(-8 // 6, d - 1) if d > 0 else a


@pytest.mark.parametrize('backend', _backends(), ids=lambda b: b.name)
def test_grouped_calls_with_arguments_of_different_dtypes(backend):
  a = np.array([5, 40, 7], np.int32)
  d = np.array([2, 0, 3], np.int32)
  got = mixed(a, d, stackless=True, backend=backend)
  np.testing.assert_array_equal(
      np.asarray(got), [mixed_ref(int(x), int(y)) for x, y in zip(a, d)])
  assert np.asarray(got).dtype == np.int32


@pytest.mark.parametrize('backend', _backends(), ids=lambda b: b.name)
def test_frames_are_freed_when_their_call_returns(backend):
  # A frame must not be part of a reference cycle: its arrays would wait
  # for the garbage collector (never, while a benchmark turns it off), and
  # every call would fault fresh memory in.
  # Only the run's own objects count: threads left by other tests (pools,
  # TensorFlow's) may make cyclic garbage of their own meanwhile.
  n = np.random.default_rng(1).integers(0, 12, size=20)
  tribonacci(n, stackless=True, backend=backend)   # compiled, cached
  gc.collect()
  gc.disable()
  gc.set_debug(gc.DEBUG_SAVEALL)
  try:
    tribonacci(n, stackless=True, backend=backend)
    gc.collect()
    ours = [type(o) for o in gc.garbage
            if isinstance(o, np.ndarray) or
            type(o).__module__.startswith('autobatch_vm') or
            (inspect.isframe(o) and 'autobatch_vm' in o.f_code.co_filename)]
    assert not ours, ours
  finally:
    gc.set_debug(0)
    gc.garbage.clear()
    gc.enable()


def test_numpy_runs_keep_freed_memory_for_reuse():
  # After the first run, a large stackless frame's memory comes back from
  # the heap on the next call rather than as fresh pages.
  if platform.libc_ver()[0] != 'glibc':
    pytest.skip('glibc malloc only')
  import resource  # pylint: disable=g-import-not-at-top
  n = np.full(1024, 12)
  progs.fibonacci(n, stackless=True)
  progs.fibonacci(n, stackless=True)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  progs.fibonacci(n, stackless=True)
  faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
  assert faults < 100, faults


@pytest.mark.parametrize('schedule', ['most', 'lowest'])
def test_numpy_row_queues_schedule_as_program_counters(schedule):
  # On NumPy a stackless frame keeps the rows waiting at each block, not a
  # program counter per row; it must choose the same blocks as the
  # program counters the other backends keep (ties to the lowest block).
  if len(_backends()) < 2:
    pytest.skip('needs TensorFlow')
  numpy_be, tf_be = _backends()
  rng = np.random.default_rng(3)
  n = rng.integers(0, 12, size=23)
  cases = [(tribonacci, (n,)), (progs.fibonacci, (n,)),
           (progs.collatz_loop, (rng.integers(1, 60, size=23),)),
           (span, (n, n + rng.integers(1, 20, size=23)))]
  for fn, args in cases:
    runs = []
    for be in (numpy_be, tf_be):
      out = fn(*args, stackless=True, backend=be, schedule=schedule)
      stats = fn.last_stats
      runs.append((_leaves(out), stats.steps,
                   dict(stats.block_executions), dict(stats.block_active),
                   dict(stats.block_rows)))
    (out_np, *stats_np), (out_tf, *stats_tf) = runs
    np.testing.assert_array_equal(out_np, out_tf)
    assert stats_np == stats_tf, fn.name


def _leaves(out):
  return [np.asarray(x) for x in inst.pattern_flatten(out)]


@pytest.mark.parametrize('backend', _backends(), ids=lambda b: b.name)
def test_groups_wider_than_the_cap_run_their_calls_in_turn(backend,
                                                          monkeypatch):
  # A group whose one frame would pass MAX_GROUP_FRAME_BYTES runs its calls
  # one after the other: same results, more blocks, less memory.
  n = np.full(6, 13)
  want = [progs.fibonacci_ref(13)] * 6
  steps, peaks = [], []
  for cap in [stackless.MAX_GROUP_FRAME_BYTES, 4096, 1]:
    monkeypatch.setattr(stackless, 'MAX_GROUP_FRAME_BYTES', cap)
    tracemalloc.start()
    try:
      got = progs.fibonacci(n, stackless=True, backend=backend)
      peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
      tracemalloc.stop()
    np.testing.assert_array_equal(np.asarray(got), want)
    steps.append(progs.fibonacci.last_stats.steps)
  assert steps[0] < steps[1] < steps[2], steps
  if backend.name == 'numpy':   # TF's allocator is not traced
    assert peaks[2] * 4 < peaks[0], peaks


# -- the default choice (stackless=None) ---------------------------------------

@ctx.batch()
def walk_then_split(n, m):
  # m tail calls, then a branching recursion of depth about n: stackless
  # nests m + n calls where the VM's stack holds only the branching ones.
  if m > 0:
    return walk_then_split(n, m - 1)
  if n > 1:
    return walk_then_split(n - 1, 0) + walk_then_split(n - 2, 0)
  return n * 1


def walk_then_split_ref(n, m):
  del m
  return walk_then_split_ref(n - 1, 0) + walk_then_split_ref(n - 2, 0) if (
      n > 1) else n


def _least_depth(fn, args, **modes):
  """The least max_stack_depth at which `fn(*args)` does not overflow."""
  for depth in range(1, 60):
    try:
      fn(*args, max_stack_depth=depth, **modes)
    except ab.errors.StackOverflowError:
      continue
    return depth
  raise AssertionError('no depth up to 60 works')


def test_default_runs_branching_recursion_stackless_on_numpy():
  """NumPy's default mode runs a program stackless where a function makes
  independent calls into its own recursion, and on the stack VM otherwise
  (loops, linear recursion, grouped calls of a function outside the
  caller's recursion); results equal the VM's and each member alone."""
  rng = np.random.default_rng(3)
  picked = {'fibonacci', 'tree_sum', 'reset_sum', 'conditional_expr',
            'short_circuit', 'loop_of_calls'}
  not_picked = {'collatz_rec', 'nested_calls', 'gcd', 'even_odd',
                'collatz_loop'}
  for case in progs.CASES:
    if case.name not in picked | not_picked:
      continue
    args = case.make_args(rng, 9)
    got = case.fn(*args, max_stack_depth=case.depth)
    assert case.fn.last_stats.stackless == (case.name in picked), case.name
    vm = case.fn(*args, max_stack_depth=case.depth, stackless=False)
    assert not case.fn.last_stats.stackless
    for g, v in zip(inst.pattern_flatten(got), inst.pattern_flatten(vm)):
      np.testing.assert_allclose(g, v, rtol=case.rtol)
    want = [case.reference(*[a[i] for a in args]) for i in range(9)]
    for g, w in zip(inst.pattern_flatten(got),
                    zip(*[inst.pattern_flatten(w) for w in want])):
      np.testing.assert_allclose(g, np.array(w), rtol=case.rtol)
    sig = case.fn.context._arg_types(list(args), ab.NumpyBackend())  # pylint: disable=protected-access
    assert case.fn.context.chooses_stackless(case.fn.name, sig) == (
        case.name in picked)


def test_default_never_overflows_where_the_vm_does_not():
  """At the least max_stack_depth the stack VM takes, the default mode
  completes too (falling back to the VM when stackless nesting is deeper,
  as with tail calls), and one less overflows in both with the VM's
  message."""
  n, m = np.array([6, 3, 9, 1]), np.array([0, 12, 2, 0])
  cases = [(progs.fibonacci, (np.array([13, 4, 9]),), progs.fibonacci_ref),
           (progs.tree_sum, (np.array([0, 5, 2]),), progs.tree_sum_ref),
           (walk_then_split, (n, m), walk_then_split_ref)]
  for fn, args, ref in cases:
    vm_depth = _least_depth(fn, args, stackless=False)
    assert _least_depth(fn, args) == vm_depth, fn.name
    got = fn(*args, max_stack_depth=vm_depth)
    np.testing.assert_array_equal(
        got, [ref(*[int(a[i]) for a in args]) for i in range(len(args[0]))])
    with pytest.raises(ab.errors.StackOverflowError,
                       match=f'max_stack_depth={vm_depth - 1}'):
      fn(*args, max_stack_depth=vm_depth - 1)
  # The tail calls nest deeper than the VM's stack holds: the run fell back.
  walk_then_split(n, m, max_stack_depth=_least_depth(walk_then_split,
                                                     (n, m)))
  assert not walk_then_split.last_stats.stackless
  walk_then_split(n, m, max_stack_depth=40)
  assert walk_then_split.last_stats.stackless


def test_default_step_limit_and_deep_limits_go_to_the_vm():
  """A stackless run that reaches max_steps runs again on the VM, whose
  step limit then decides; max_stack_depth above AUTO_STACKLESS_MAX_DEPTH
  keeps the VM (stackless depth spends Python's recursion limit); the
  TensorFlow backend keeps the VM."""
  n = np.array([1, 12, 2, 9])
  progs.fibonacci(n, stackless=True)
  blocks = progs.fibonacci.last_stats.steps
  progs.fibonacci(n, stackless=False)
  steps = progs.fibonacci.last_stats.steps
  assert blocks < steps
  progs.fibonacci(n, max_steps=blocks)
  assert progs.fibonacci.last_stats.stackless
  with pytest.raises(ab.errors.StepLimitError, match=r'\[1, 3\]'):
    progs.fibonacci(n, max_steps=blocks - 1)
  progs.fibonacci(n, max_stack_depth=ab.frontend.AUTO_STACKLESS_MAX_DEPTH)
  assert progs.fibonacci.last_stats.stackless
  progs.fibonacci(n, max_stack_depth=ab.frontend.AUTO_STACKLESS_MAX_DEPTH + 1)
  assert not progs.fibonacci.last_stats.stackless
  table = progs.fibonacci.last_stats.table()
  progs.fibonacci(n)
  assert 'blocks run (stackless mode)' in progs.fibonacci.last_stats.table()
  assert 'VM steps' in table
  tf_backend = pytest.importorskip('autobatch_vm.tf_backend')
  progs.fibonacci(n, backend=tf_backend.TensorFlowBackend())
  assert not progs.fibonacci.last_stats.stackless
