"""The hand-written IR builder: same IR as the frontend, clear misuse errors."""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import dsl
from autobatch_vm import instructions as inst
from tests import programs as progs


def _frontend_fibonacci():
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda arg_types: arg_types[0])
  def fibonacci(n):
    if n > 2:
      return fibonacci(n - 1) + fibonacci(n - 2)
    else:
      return 1
  assert fibonacci.name == 'fibonacci'
  return ctx.program('fibonacci')


def test_builder_makes_the_frontends_ir():
  built = progs.BY_NAME['fibonacci'].program
  assert str(built) == str(_frontend_fibonacci())
  sig = [inst.TensorType(np.int64)]
  backend = ab.NumpyBackend()
  assert str(ab.pipeline.lowered(ab.pipeline.typed(built, sig, backend))) == \
      str(ab.pipeline.lowered(ab.pipeline.typed(_frontend_fibonacci(), sig,
                                                backend)))


def test_conventions():
  fn = progs.BY_NAME['collatz'].program.main_function
  assert fn.vars_out == dsl.RETURN_VAR == ab.python_to_ir.RETURN_VAR
  assert [b.label for b in fn.blocks] == [f'collatz.{i}' for i in range(7)]
  assert fn.blocks[0].label == 'collatz.0'
  t = progs.BY_NAME['fibonacci'].program.main_function.type_inference
  assert t(['x']) == 'x'
  assert all(op.loc is not None and op.loc.filename.endswith('programs.py')
             for b in fn.blocks for op in b.instructions)


def test_program_lists_reachable_functions_main_first():
  pb = dsl.ProgramBuilder()
  with pb.function('unused', ['x']):
    pb.return_('x')
  with pb.function('helper', ['x']):
    pb.return_('x')
  with pb.function('main', ['x']):
    pb.return_(pb.call('helper', ['x']))
  assert [f.name for f in pb.program('main').functions] == ['main', 'helper']
  assert pb.program().main == 'unused'


def test_explicit_vars_in_out_and_text():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['a', 'b']):
    pb.primop(np.add, ['a', 'b'], out='s')
    pb.primop(lambda x, y: (x, y), ['s', 'a'], out=('p', 'q'), text='swap')
    pb.assign('r', 'p')
    pb.return_(['r', 'q'])
  listing = str(pb.program()).split('\n')
  assert listing[3:8] == [
      '    s = prim[add](a, b)',
      '    (p, q) = prim[swap](s, a)',
      '    r = prim[p](p)',
      '    %ret = prim[[r, q]](r, q)',
      '    return']
  result = inst.interpret(pb.program(), np.int64(2), np.int64(3))
  assert isinstance(result, list) and [int(x) for x in result] == [5, 2]


def test_lambdas_on_one_line_get_their_own_text():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['n']):
    a, b = pb.primop(lambda n: n + 1), pb.primop(lambda n: n * 2)
    pb.return_(pb.primop(lambda a, b: a - b, [a, b]))
  texts = [op.text for op in pb.program().main_function.blocks[0].instructions]
  assert texts == ['n + 1', 'n * 2', '%0 - %1']


def test_code_after_return_is_dropped():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['n']):
    pb.return_('n')
    pb.primop(lambda n: n + 1, out='n')
  (block,) = pb.program().main_function.blocks
  assert [inst.op_str(op) for op in block.instructions] == ['%ret = prim[n](n)']


def test_if_without_else_joins_on_the_else_block():
  pb = dsl.ProgramBuilder()
  with pb.function('clip', ['n']):
    with pb.if_(lambda n: n > 5):
      pb.const(5, out='n')
    pb.return_('n')
  program = pb.program()
  assert [b.label for b in program.main_function.blocks] == [
      'clip.0', 'clip.1', 'clip.2']
  for n, want in [(3, 3), (9, 5)]:
    assert int(inst.interpret(program, np.int64(n))) == want


def _build(body, params=('n',)):
  pb = dsl.ProgramBuilder()
  with pb.function('f', list(params)):
    body(pb)
  return pb.program()


def _if_returns_without_else(pb):
  with pb.if_(lambda n: n > 0):
    pb.return_('n')


def _loop_without_exit_return(pb):
  with pb.while_(lambda n: n > 0):
    pb.primop(lambda n: n - 1, out='n')


@pytest.mark.parametrize('body, message', [
    (lambda pb: None, 'can reach its end'),
    (_if_returns_without_else, 'can reach its end'),
    (_loop_without_exit_return, 'can reach its end'),
    (lambda pb: pb.else_().__enter__(), 'else_ must directly follow'),
    (lambda pb: pb.goto(pb.label()), 'never placed'),
    (lambda pb: pb.primop(42), 'expects a callable'),
    (lambda pb: pb.primop(lambda *xs: xs[0]), 'pass vars_in'),
    (lambda pb: pb.call(len, ['n']), 'function name'),
    (lambda pb: pb.return_(3), 'return_ expects'),
    (lambda pb: pb.assign('x', 5), 'variable names'),
    (lambda pb: pb.while_('c').__enter__(), 'while_ expects a callable'),
])
def test_misuse_raises_dsl_error(body, message):
  with pytest.raises(dsl.DslError, match=f'(?i){message}'):
    _build(body)


def test_label_placed_twice():
  with pytest.raises(dsl.DslError, match='placed twice'):
    pb = dsl.ProgramBuilder()
    with pb.function('f', ['n']):
      label = pb.label()
      pb.place(label)
      pb.place(label)


def test_label_of_another_function():
  pb = dsl.ProgramBuilder()
  with pb.function('f', ['n']):
    label = pb.label()
    pb.return_('n')
  with pytest.raises(dsl.DslError, match="not a label of function 'g'"):
    with pb.function('g', ['n']):
      pb.goto(label)


def test_program_level_errors():
  pb = dsl.ProgramBuilder()
  with pytest.raises(dsl.DslError, match='no functions'):
    pb.program()
  with pytest.raises(dsl.DslError, match='outside'):
    pb.primop(lambda n: n)
  with pb.function('f', ['n']):
    pb.return_(pb.call('g', ['n', 'n']))
    with pytest.raises(dsl.DslError, match='inside function'):
      pb.program()
    with pytest.raises(dsl.DslError, match='do not nest'):
      with pb.function('h', ['n']):
        pass
  with pytest.raises(dsl.DslError, match='undefined function'):
    pb.program()
  with pb.function('g', ['n']):
    pb.return_('n')
  with pytest.raises(dsl.DslError, match='takes 1 argument'):
    pb.program()
  with pytest.raises(dsl.DslError, match='defined twice'):
    with pb.function('g', ['n']):
      pass
  with pytest.raises(dsl.DslError, match='repeated parameters'):
    with pb.function('k', ['n', 'n']):
      pass
  with pytest.raises(dsl.DslError, match="no function 'zz'"):
    pb.program('zz')
  assert isinstance(dsl.DslError('x'), ab.AutoBatchError)
