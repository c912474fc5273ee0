"""Programs written in TFP's `dsl.ProgramBuilder` style, run through TFP's
module-level sequence of calls (`type_inference.infer_types`,
`allocation_strategy.optimize`, `lowering.lower_function_calls`,
`stack_optimization.fuse_pop_push`, `virtual_machine.execute`,
`stackless.execute`), with only the import changed.

Every batched result is compared per member with plain Python (value,
shape, dtype) on NumPy and TensorFlow (eager and `tf.function`).
"""

import collections
import inspect

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
from autobatch_vm import stackless
from autobatch_vm import type_inference
from autobatch_vm import virtual_machine as vm

BOOL = inst.TensorType(np.bool_, ())
DEPTH = 64

Case = collections.namedtuple(
    'Case', ['program', 'reference', 'inputs', 'out_dtypes'])


# -- programs, in TFP's builder vocabulary ---------------------------------------

def fibonacci_program():
  ab_ = dsl.ProgramBuilder()

  def fib_type(arg_types):
    return arg_types[0]

  with ab_.function('fibonacci', type_inference=fib_type) as fibonacci:
    n = ab_.param('n')
    ab_.var.cond = ab_.primop(lambda n: n > 1)
    with ab_.if_(ab_.var.cond, then_name='recur', else_name='base',
                 continue_name='join'):
      ab_.var.nm1 = ab_.primop(lambda n: n - 1)
      ab_.var.fibm1 = ab_.call(fibonacci, [ab_.var.nm1])
      ab_.var.nm2 = ab_.primop(lambda n: n - 2)
      ab_.var.fibm2 = ab_.call(fibonacci, [ab_.var.nm2])
      ab_.var.ans = ab_.primop(lambda fibm1, fibm2: fibm1 + fibm2)
    with ab_.else_():
      ab_.var.ans = ab_.const(1)
    ab_.return_(ab_.var.ans)
  assert n == 'n'
  return ab_.program(main=fibonacci)


def _fib(n):
  return _fib(n - 1) + _fib(n - 2) if n > 1 else 1


def even_odd_program():
  """Mutual recursion: `is_odd` is declared before `is_even` calls it."""
  ab_ = dsl.ProgramBuilder()
  is_odd = ab_.declare_function('is_odd', type_inference=lambda _: BOOL)
  with ab_.function('is_even', type_inference=lambda _: BOOL) as is_even:
    ab_.param('n')
    ab_.var.zero = ab_.primop(lambda n: n == 0)
    with ab_.if_(ab_.var.zero):
      ab_.var.ans = ab_.const(True)
    with ab_.else_():
      ab_.var.m = ab_.primop(lambda n: n - 1)
      ab_.var.ans = ab_.call(is_odd, [ab_.var.m])
    ab_.return_(ab_.var.ans)
  with ab_.define_function(is_odd):
    ab_.param('n')
    ab_.var.zero = ab_.primop(lambda n: n == 0)
    with ab_.if_(ab_.var.zero):
      ab_.var.ans = ab_.const(False)
    with ab_.else_():
      ab_.var.m = ab_.primop(lambda n: n - 1)
      ab_.var.ans = ab_.call(is_even, [ab_.var.m])
    ab_.return_(ab_.var.ans)
  return ab_.program(main=is_even)


def patterns_program():
  """Tuple outputs: explicit `vars_out` patterns, `ab(pattern).pattern =`
  on a call and on a constant, and a tuple result."""
  ab_ = dsl.ProgramBuilder()
  with ab_.function('divmod3',
                    type_inference=lambda ts: [ts[0], ts[0]]) as divmod3:
    ab_.param('n')
    ab_.primop(lambda n: (n // 3, n % 3), vars_out=[ab_.var.q, ab_.var.r])
    ab_.return_([ab_.var.q, ab_.var.r])
  with ab_.function('main') as main:
    n = ab_.param('n')
    ab_((ab_.var.q, ab_.var.r)).pattern = ab_.call(divmod3, [n])
    ab_((ab_.var.two, ab_.var.four)).pattern = ab_.const((2, 4))
    ab_.var.x = ab_.primop(lambda q, two: q * two)
    ab_.var.y = ab_.primop(lambda r, four: r + four)
    ab_.return_((ab_.var.x, ab_.var.y))
  return ab_.program(main=main)


def collatz_program():
  """A loop as tail recursion, with an `if_` nested in an `else_`; the
  second input is a scalar, broadcast to the batch."""
  ab_ = dsl.ProgramBuilder()
  with ab_.function('collatz', type_inference=lambda ts: ts[1]) as loop:
    ab_.param('n')
    ab_.param('steps')
    ab_.var.done = ab_.primop(lambda n: n <= 1)
    with ab_.if_(ab_.var.done):
      ab_.var.ans = ab_.var.steps       # a copy
    with ab_.else_():
      ab_.var.even = ab_.primop(lambda n: n % 2 == 0)
      with ab_.if_(ab_.var.even):
        ab_.var.next = ab_.primop(lambda n: n // 2)
      with ab_.else_():
        ab_.var.next = ab_.primop(lambda n: 3 * n + 1)
      ab_.var.s1 = ab_.primop(lambda steps: steps + 1)
      ab_.var.ans = ab_.call(loop, [ab_.var.next, ab_.var.s1])
    ab_.return_(ab_.var.ans)
  return ab_.program(main=loop)


def _collatz(n, steps):
  while n > 1:
    n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
  return steps


def locals_program():
  """`locals_` and `local` as explicit outputs, on floats."""
  ab_ = dsl.ProgramBuilder()
  with ab_.function('sumsq') as sumsq:
    a, b = ab_.param('a'), ab_.param('b')
    sa, sb = ab_.locals_(2, 'sq')
    ab_.primop(lambda a, b: (a * a, b * b), vars_out=(sa, sb))
    ab_.var.tot = ab_.primop(lambda x, y: x + y, vars_in=[sa, sb])
    t = ab_.local()
    ab_.primop(lambda tot, a: tot - a, vars_out=t)
    ab_.return_(t)
  assert (a, b, sa, sb, t) == ('a', 'b', 'sq', 'sq_1', 'var_1')
  return ab_.program(main=sumsq)


def _ints(rng, batch, low, high, dtype):
  return rng.integers(low, high, size=batch).astype(dtype)


CASES = {
    'fibonacci': lambda rng, b, it: Case(
        fibonacci_program(), _fib, [_ints(rng, b, 0, 10, it)], [it]),
    'even_odd': lambda rng, b, it: Case(
        even_odd_program(), lambda n: n % 2 == 0,
        [_ints(rng, b, 0, 12, it)], [np.bool_]),
    'patterns': lambda rng, b, it: Case(
        patterns_program(), lambda n: (n // 3 * 2, n % 3 + 4),
        [_ints(rng, b, 0, 50, it)], [it, it]),
    'collatz': lambda rng, b, it: Case(
        collatz_program(), _collatz,
        [_ints(rng, b, 1, 20, it), np.array(0, it)], [it]),
    'locals': lambda rng, b, it: Case(
        locals_program(), lambda a, b: a * a + b * b - a,
        [rng.normal(size=b).astype(np.float32),
         rng.normal(size=b).astype(np.float32)], [np.float32]),
}


# -- TFP's sequence of calls ---------------------------------------------------------

def compiled(program, inputs, backend):
  typed = type_inference.infer_types(program, inputs, backend)
  return allocation_strategy.optimize(typed)


def lowered(program, inputs, backend, fuse=True):
  low = lowering.lower_function_calls(compiled(program, inputs, backend))
  return stack_optimization.fuse_pop_push(low) if fuse else low


def _member_inputs(inputs, batch, i):
  return [np.asarray(x)[i] if np.ndim(x) else np.asarray(x)
          for x in inputs]


def check(case, out, batch):
  """`out` (batched) agrees with the plain-Python reference per member."""
  dtypes = case.out_dtypes
  leaves = list(out) if len(dtypes) > 1 else [out]
  assert len(leaves) == len(dtypes)
  arrays = [np.asarray(x) for x in leaves]
  for a, dtype in zip(arrays, dtypes):
    assert a.shape == (batch,)
    assert a.dtype == np.dtype(dtype)
  for i in range(batch):
    want = case.reference(*[x.item() for x in
                            _member_inputs(case.inputs, batch, i)])
    want = want if len(dtypes) > 1 else (want,)
    for a, w in zip(arrays, want):
      np.testing.assert_allclose(a[i], w, rtol=1e-6)
  # The reference interpreter runs the untyped program per member too.
  for i in range(batch):
    member = _member_inputs(case.inputs, batch, i)
    got = inst.interpret(case.program, *member)
    got = list(got) if len(dtypes) > 1 else [got]
    for g, a in zip(got, arrays):
      np.testing.assert_allclose(np.asarray(g), a[i], rtol=1e-6)


# -- NumPy -------------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(CASES))
@pytest.mark.parametrize('batch', [1, 7])
def test_numpy_vm(name, batch):
  case = CASES[name](np.random.default_rng(batch), batch, np.int64)
  backend = ab.NumpyBackend()
  program = lowered(case.program, case.inputs, backend)
  check(case, vm.execute(program, case.inputs, DEPTH, backend), batch)


@pytest.mark.parametrize('name', sorted(CASES))
def test_numpy_vm_without_fusion_and_with_keywords(name):
  case = CASES[name](np.random.default_rng(3), 5, np.int64)
  backend = ab.NumpyBackend()
  program = lowered(case.program, case.inputs, backend, fuse=False)
  cache = {}
  for _ in range(2):   # the second run takes the cached block code
    out = vm.execute(program, case.inputs, max_stack_depth=DEPTH,
                     backend=backend, block_code_cache=cache)
    check(case, out, 5)
  assert cache


@pytest.mark.parametrize('name', sorted(CASES))
def test_numpy_stackless(name):
  case = CASES[name](np.random.default_rng(4), 6, np.int64)
  backend = ab.NumpyBackend()
  program = compiled(case.program, case.inputs, backend)
  check(case, stackless.execute(program, backend, None, *case.inputs), 6)


def test_our_forms_still_return_stats():
  case = CASES['fibonacci'](np.random.default_rng(5), 4, np.int64)
  backend = ab.NumpyBackend()
  sig = [inst.TensorType(np.int64)]
  typed = type_inference.infer_types(case.program, sig, backend)
  assert typed == type_inference.infer_types(case.program, case.inputs,
                                             backend)
  assert typed == type_inference.infer_types_from_signature(
      case.program, [inst.Type(inst.TensorType(np.int64))], backend)
  program = ab.pipeline.lowered(allocation_strategy.optimize(typed))
  out, stats = vm.execute(program, case.inputs, backend, 4)
  check(case, out, 4)
  assert isinstance(stats, ab.RunStats)
  out, stats = stackless.execute(allocation_strategy.optimize(typed),
                                 case.inputs, backend, 4)
  check(case, out, 4)
  assert stats.stackless


def test_batch_size_one_inputs_broadcast_and_scalars_are_batches_of_one():
  case = CASES['collatz'](np.random.default_rng(6), 5, np.int64)
  backend = ab.NumpyBackend()
  program = lowered(case.program, case.inputs, backend)
  for steps in (np.array([10]), np.int64(10), 10):
    out = vm.execute(program, [case.inputs[0], steps], DEPTH, backend)
    want = [_collatz(int(n), 10) for n in case.inputs[0]]
    assert out.dtype == np.int64 and out.tolist() == want
  one = vm.execute(program, [np.int64(6), np.int64(0)], DEPTH, backend)
  assert one.shape == (1,) and one.tolist() == [8]


def _incrementing(record):
  """The program `inc(n) = record(n)` (a primitive returning n + 1)."""
  ab_ = dsl.ProgramBuilder()
  with ab_.function('inc') as inc:
    ab_.param('n')
    ab_.var.m = ab_.primop(record)
    ab_.return_(ab_.var.m)
  return ab_.program(main=inc)


def test_primitives_see_which_machinery_calls_them():
  seen = []

  def record(n):
    seen.append((type_inference.is_inferring(), vm.is_staging(),
                 stackless.is_running()))
    return n + 1
  program = _incrementing(record)
  backend = ab.NumpyBackend()
  x = np.arange(3, dtype=np.int64)
  alloc = compiled(program, [x], backend)
  assert seen and set(seen) == {(True, False, False)}
  seen.clear()
  vm.execute(stack_optimization.fuse_pop_push(
      lowering.lower_function_calls(alloc)), [x], 4, backend)
  assert seen and set(seen) == {(False, True, False)}
  seen.clear()
  assert stackless.execute(alloc, backend, None, x).tolist() == [1, 2, 3]
  assert seen and set(seen) == {(False, False, True)}
  assert not (type_inference.is_inferring() or vm.is_staging()
              or stackless.is_running())


# -- TensorFlow -------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(CASES))
def test_tensorflow_eager_vm_and_stackless(name):
  tf = pytest.importorskip('tensorflow')
  case = CASES[name](np.random.default_rng(7), 5, np.int32)
  backend = ab.TensorFlowBackend()
  inputs = [tf.constant(x) for x in case.inputs]
  program = lowered(case.program, inputs, backend)
  out = vm.execute(program, inputs, DEPTH, backend)
  assert all(tf.is_tensor(x) for x in inst.pattern_flatten(out))
  check(case, out, 5)
  alloc = compiled(case.program, inputs, backend)
  check(case, stackless.execute(alloc, backend, {}, *inputs), 5)


@pytest.mark.parametrize('name', [
    'fibonacci', 'patterns', pytest.param('collatz', marks=pytest.mark.slow)])
def test_tensorflow_function_vm(name):
  tf = pytest.importorskip('tensorflow')
  case = CASES[name](np.random.default_rng(8), 6, np.int32)
  backend = ab.TensorFlowBackend()
  inputs = [tf.constant(x) for x in case.inputs]
  program = lowered(case.program, inputs, backend)
  run = tf.function(lambda *xs: vm.execute(program, list(xs), DEPTH, backend))
  check(case, run(*inputs), 6)


def test_autograph_runs_the_library_as_it_is():
  """A `tf.function` with AutoGraph on (TFP's `tf.function(lambda:
  execute(...))`) calls the VM as it is: AutoGraph converted the whole
  library before, function by function, and once called one converted
  function for another."""
  tf = pytest.importorskip('tensorflow')
  frames = []

  def record(n):
    frames.append({f.filename for f in inspect.stack()})
    return n + 1
  program = _incrementing(record)
  backend = ab.TensorFlowBackend()
  x = tf.constant(np.arange(3, dtype=np.int64))
  program = lowered(program, [x], backend)
  frames.clear()
  run = tf.function(lambda n: vm.execute(program, [n], 4, backend))
  assert np.asarray(run(x)).tolist() == [1, 2, 3]
  assert frames
  for files in frames:
    assert any('autobatch_vm' in f for f in files)
    # Only the test's own lambda is converted.
    assert len([f for f in files if '__autograph_generated_file' in f]) == 1


# -- the builder -------------------------------------------------------------------

def test_block_names_and_listing():
  fn = fibonacci_program().main_function
  assert [b.label for b in fn.blocks] == [
      'fibonacci.0', 'fibonacci.recur', 'fibonacci.base', 'fibonacci.join']
  assert inst.op_str(fn.blocks[0].instructions[0]) == 'cond = prim[n > 1](n)'
  assert inst.op_str(fn.blocks[1].instructions[1]) == \
      'fibm1 = call fibonacci(nm1)'


def test_else_names_override_and_if_without_else():
  ab_ = dsl.ProgramBuilder()
  with ab_.function('clip') as clip:
    ab_.param('n')
    ab_.var.big = ab_.primop(lambda n: n > 5)
    with ab_.if_(ab_.var.big, continue_name='after'):
      ab_.var.n = ab_.const(5)
    ab_.var.big = ab_.primop(lambda n: n > 3)
    with ab_.if_(ab_.var.big, else_name='x', continue_name='y'):
      ab_.var.n = ab_.const(4)
    with ab_.else_(else_name='small', continue_name='end'):
      ab_.var.n = ab_.primop(lambda n: n + 1)
    ab_.return_(ab_.var.n)
  program = ab_.program(clip)
  assert [b.label for b in program.main_function.blocks] == [
      'clip.0', 'clip.1', 'clip.after', 'clip.3', 'clip.small', 'clip.end']
  assert [int(inst.interpret(program, np.int64(n))) for n in (1, 4, 9)] == \
      [2, 4, 4]


def test_functions_with_one_name_and_unnamed_functions_get_unique_names():
  ab_ = dsl.ProgramBuilder()
  with ab_.function('f') as f1:
    ab_.param('n')
    ab_.return_(ab_.var.n)
  with ab_.function('f') as f2:
    ab_.param('n')
    ab_.var.m = ab_.call(f1, [ab_.var.n])
    ab_.return_(ab_.var.m)
  with ab_.function() as anon:
    ab_.param()
    ab_.return_(ab_.call(f2, ['var_1']))
  assert (f1, f2, anon) == ('f', 'f_1', 'function_2')
  assert (f1.name, f2.type_inference) == ('f', None)
  program = ab_.program(main=anon)
  assert [f.name for f in program.functions] == ['function_2', 'f_1', 'f']
  assert [f.name for f in ab_.module().functions] == ['f', 'f_1',
                                                      'function_2']
  assert int(inst.interpret(program, np.int64(3))) == 3


def test_var_reads_and_copies_share_plain_names():
  """`var.x` is the variable `x`: the string forms and TFP's mix."""
  ab_ = dsl.ProgramBuilder()
  with ab_.function('f', ['n']) as f:
    ab_.primop(lambda n: n * 2, out='twice')
    ab_.var.again = ab_.var.twice                     # a copy
    ab_.var.pair = (ab_.var.again, 'n')               # packs a tuple
    ab_((ab_.var.a, ab_.var.b)).pattern = ab_.var.pair  # unpacks it
    ab_.return_(ab_.primop(lambda a, b: a - b))
  listing = [inst.op_str(op) for op in
             ab_.program(f).main_function.blocks[0].instructions]
  assert listing == ['twice = prim[n * 2](n)', 'again = prim[twice](twice)',
                     'pair = prim[(again, n)](again, n)',
                     '(a, b) = prim[pair](pair)', '%ret = prim[a - b](a, b)']
  assert int(inst.interpret(ab_.program(f), np.int64(5))) == 5


def _reads_unwritten(ab_):
  with ab_.function('f') as f:
    ab_.param('n')
    ab_.var.m = ab_.primop(lambda n, k: n + k)
    ab_.return_(ab_.var.m)
  return f


def _stale_temporary(ab_):
  with ab_.function('f') as f:
    ab_.param('n')
    t = ab_.primop(lambda n: n + 1)
    ab_.var.m = t                      # renames the output: t is gone
    ab_.return_(ab_.primop(lambda x: x, [t]))
  return f


def _both_spellings(ab_):
  with ab_.function('f') as f:
    ab_.param('n')
    ab_.primop(lambda n: n, out='a', vars_out='b')
  return f


def _define_unknown(ab_):
  with ab_.define_function('nope'):
    pass


def _assign_a_number(ab_):
  with ab_.function('f'):
    ab_.param('n')
    ab_.var.m = 5


def _var_outside(ab_):
  return ab_.var.x


@pytest.mark.parametrize('build, message', [
    (_reads_unwritten, "reads variable 'k', which nothing in it writes"),
    (_stale_temporary, "reads variable '%0'"),
    (_both_spellings, 'both out= and vars_out='),
    (_define_unknown, "declare_function, got 'nope'"),
    (_assign_a_number, 'var.m = expects'),
    (_var_outside, 'outside a function body'),
])
def test_builder_misuse(build, message):
  with pytest.raises(dsl.DslError, match=message) as e:
    build(dsl.ProgramBuilder())
  if 'reads' in message:
    assert e.value.loc.filename.endswith('test_tfp_dsl.py')


def test_declared_but_never_defined():
  ab_ = dsl.ProgramBuilder()
  g = ab_.declare_function('g')
  with ab_.function('f') as f:
    ab_.param('n')
    ab_.return_(ab_.call(g, [ab_.var.n]))
  with pytest.raises(dsl.DslError, match="undefined function 'g'") as e:
    ab_.program(f)
  assert 'define_function' in str(e.value)


# -- misuse of the module-level functions --------------------------------------------

def test_module_function_errors():
  backend = ab.NumpyBackend()
  program = fibonacci_program()
  x = np.arange(4, dtype=np.int64)
  alloc = compiled(program, [x], backend)
  fused = lowered(program, [x], backend)
  cases = [
      (lambda: vm.execute(alloc, [x], 15, backend), 'lowered program'),
      (lambda: vm.execute(fused, [x], 0, backend), 'positive int'),
      (lambda: vm.execute(fused, [x, x], 15, backend), 'takes 1 input'),
      (lambda: vm.execute(fused, [x.astype(np.int32)], 15, backend),
       'typed for int64'),
      (lambda: vm.execute(fused, [np.zeros((4, 2), np.int64)], 15, backend),
       'per-member shape'),
      (lambda: vm.execute(fused, ['a'], 15, backend), 'not an array'),
      (lambda: stackless.execute(program, backend, None, x),
       'typed, allocated'),
      (lambda: lowering.lower_function_calls(
          allocation_strategy.optimize(program)), 'is not typed'),
      (lambda: stack_optimization.fuse_pop_push(alloc), 'lowered program'),
      (lambda: allocation_strategy.optimize(fused), 'before lowering'),
      (lambda: type_inference.infer_types(program, [x, x], backend),
       'takes 1 input'),
  ]
  for run, message in cases:
    with pytest.raises(errors.ArgumentError, match=message):
      run()
  collatz = lowered(collatz_program(), [x, np.int64(0)], backend)
  with pytest.raises(errors.ArgumentError, match='different batch sizes'):
    vm.execute(collatz, [x, np.zeros(3, np.int64)], 15, backend)


def test_liveness_analysis():
  fn = fibonacci_program().main_function
  info = liveness.liveness_analysis(fn, ['%ret'])
  entry, recur, base, join = fn.blocks
  assert info[None] == liveness.LivenessInfo(
      frozenset({'%ret'}), [], frozenset({'%ret'}))
  assert info[entry].live_into_block == {'n'}
  assert info[entry].live_out_instructions == [{'n', 'cond'}]
  assert info[entry].live_out_of_block == {'n'}
  assert info[recur].live_out_of_block == {'ans'}
  assert info[recur].live_out_instructions[1] == {'n', 'fibm1'}
  assert info[base].live_into_block == frozenset()
  assert info[join].live_into_block == {'ans'}
  assert info[join].live_out_of_block == {'%ret'}
  with pytest.raises(errors.ArgumentError, match='takes a Function'):
    liveness.liveness_analysis(fibonacci_program(), [])


def test_extract_referenced_variables():
  program = fibonacci_program()
  fn = program.main_function
  assert inst.extract_referenced_variables(fn.blocks[0]) == {'n', 'cond'}
  assert inst.extract_referenced_variables(program) == {
      'n', 'cond', 'nm1', 'nm2', 'fibm1', 'fibm2', 'ans', '%ret'}
  with pytest.raises(errors.ArgumentError, match='not an instruction'):
    inst.extract_referenced_variables(3)


def test_context_programs_run_through_the_module_functions():
  """TFP's pattern `vm.execute(ctx.program_lowered(...), ...)` and
  `stackless.execute(ctx.program_compiled(...), ...)`."""
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda arg_types: [arg_types[0]])
  def fibonacci(n):
    if n > 1:
      return fibonacci(n - 1) + fibonacci(n - 2)
    return n

  backend = ab.NumpyBackend()
  x = np.array([0, 1, 5, 9], np.int64)
  sig = type_inference.signature(ctx.program('fibonacci'), [x], backend)
  assert sig == [inst.TensorType(np.int64, ())]
  want = np.array([0, 1, 5, 34], np.int64)
  out = vm.execute(ctx.program_lowered('fibonacci', sig, backend), [x], 15,
                   backend)
  np.testing.assert_array_equal(out, want)
  assert out.dtype == np.int64
  out = stackless.execute(ctx.program_compiled('fibonacci', sig, backend),
                          backend, None, x)
  np.testing.assert_array_equal(out, want)
