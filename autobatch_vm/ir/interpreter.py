"""The reference interpreter: one member, plain Python, the oracle for tests.

`interpret` runs a typed `Program` or a `LoweredProgram` for one batch
member, calling each primitive on a batch of one; the batched executors
are tested against it.  `instructions` re-exports it.
"""

import collections

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import patterns
from autobatch_vm.ir import program as ir

__all__ = ['interpret']


def _bind(env, names, value):
  if isinstance(names, (tuple, list)):
    values = list(value)
    if len(values) != len(names):
      raise errors.InternalError(
          f'Cannot unpack {len(values)} values into {ir.pattern_str(names)}')
    for n, v in zip(names, values):
      _bind(env, n, v)
  else:
    env[names] = value


def _read(env, names):
  return patterns.pattern_map(lambda name: env[name], names)


def _expand(x):
  """A single member's value as a batch of one."""
  return patterns.pattern_map(lambda a: np.asarray(a)[np.newaxis], x)


def _squeeze(x):
  return patterns.pattern_map(lambda a: np.asarray(a)[0], x)


def interpret(program, *args, max_steps=10**7):
  """Runs `program` for ONE member: the reference the VM is tested against.

  Primitives are called on batches of size one.

  Args:
    program: A typed `Program` or a `LoweredProgram`.
    *args: The member's values (no batch dimension), one per parameter of
      main.
    max_steps: The most blocks the run may execute.

  Returns:
    The member's result.

  Raises:
    InternalError: If the run takes more than `max_steps`, or `program`
      holds an instruction of the wrong stage.
  """
  if isinstance(program, ir.Program):
    return _interpret_function(program, program.main, list(args), [max_steps])
  if isinstance(program, ir.LoweredProgram):
    return _interpret_lowered(program, list(args), max_steps)
  raise errors.InternalError(f'Cannot interpret {type(program).__name__}')


def _run_prim(op, env):
  with np.errstate(all='ignore'):
    result = op.function(*[_expand(env[v]) for v in op.vars_in])
  if not op.vars_in:
    result = _expand(result)
  _bind(env, op.vars_out, _squeeze(result))


def _interpret_function(program, name, args, budget):
  fn = program.function(name)
  env = dict(zip(fn.vars_in, args))
  blocks = {b.label: b for b in fn.blocks}
  block = fn.blocks[0]
  while True:
    budget[0] -= 1
    if budget[0] < 0:
      raise errors.InternalError('interpret: step budget exhausted')
    for op in block.instructions:
      if isinstance(op, ir.PrimOp):
        _run_prim(op, env)
      elif isinstance(op, ir.FunctionCallOp):
        result = _interpret_function(
            program, op.function, [env[v] for v in op.vars_in], budget)
        _bind(env, op.vars_out, result)
      else:
        raise errors.InternalError(f'{ir.op_str(op)} before lowering')
    t = block.terminator
    if isinstance(t, ir.GotoOp):
      block = blocks[t.block]
    elif isinstance(t, ir.BranchOp):
      block = blocks[t.true_block if bool(env[t.cond]) else t.false_block]
    elif isinstance(t, ir.ReturnOp):
      return _read(env, fn.vars_out)
    else:
      raise errors.InternalError(f'{ir.op_str(t)} before lowering')


def _interpret_lowered(program, args, max_steps):
  env = dict(zip(program.vars_in, args))
  stacks = collections.defaultdict(list)
  pc_stack = [None]
  blocks = {b.label: b for b in program.blocks}
  label = program.blocks[0].label
  for _ in range(max_steps):
    if label is None:
      return _read(env, program.vars_out)
    block = blocks[label]
    left = None   # the target of an exit taken
    for op in block.instructions:
      if isinstance(op, ir.PrimOp):
        _run_prim(op, env)
      elif isinstance(op, ir.ExitOp):
        if bool(env[op.cond]) == op.when:
          left = op.block
          break
      elif isinstance(op, ir.PushOp):
        for v in op.vars:
          stacks[v].append(env[v])
      elif isinstance(op, ir.PopOp):
        for v in op.vars:
          env[v] = stacks[v].pop()
      elif isinstance(op, ir.RestoreOp):
        for v in op.vars:
          env[v] = stacks[v][-1]
      else:
        raise errors.InternalError(f'{ir.op_str(op)} after lowering')
    t = block.terminator
    if left is not None:
      label = left
    elif isinstance(t, ir.GotoOp):
      label = t.block
    elif isinstance(t, ir.BranchOp):
      label = t.true_block if bool(env[t.cond]) else t.false_block
    elif isinstance(t, ir.PushGotoOp):
      pc_stack.append(t.push_block)
      label = t.goto_block
    elif isinstance(t, ir.PushBranchOp):
      pc_stack.append(t.push_block)
      label = t.true_block if bool(env[t.cond]) else t.false_block
    elif isinstance(t, ir.CallBranchOp):
      taken = bool(env[t.cond])
      if taken == t.call_side:
        pc_stack.append(t.push_block)
      label = t.true_block if taken else t.false_block
    elif isinstance(t, ir.IndirectGotoOp):
      label = pc_stack.pop()
    else:
      raise errors.InternalError(f'{ir.op_str(t)} after lowering')
  raise errors.InternalError('interpret: step budget exhausted')
