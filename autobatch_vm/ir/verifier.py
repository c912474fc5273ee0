"""Checks a program's invariants between passes (tests and debug mode).

`verify(program, stage)` accepts a `Program` or `LoweredProgram` and raises
`InternalError` showing the offending instruction with a few lines of the
printed IR around it.  Checked:

- every branch/goto/push_goto/exit target exists; `return` only before
  lowering, `push_goto`/`indirect_goto`/stack ops/exits only after;
- every variable read is written somewhere on a path to the read (no read
  of a variable that is unassigned on every path);
- once typed: every variable has a type, and every condition (an exit's
  too) is a per-member scalar; once allocated: every variable has an
  allocation, stack operations touch only FULL variables, no NULL variable
  is read, and a TEMPORARY is read only in its own block after being
  written.
"""

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['verify']

VA = inst.VariableAllocation


def _fail(listing, needle, message, stage):
  lines = listing.split('\n')
  at = next((i for i, l in enumerate(lines) if needle and needle in l), 0)
  context = '\n'.join(
      ('>> ' if i == at else '   ') + lines[i]
      for i in range(max(0, at - 4), min(len(lines), at + 5)))
  raise errors.InternalError(
      f'IR verification failed after {stage}: {message}\n{context}')


def _check_blocks(blocks, params, var_defs, var_alloc, lowered, listing,
                  stage, fn=None):
  labels = {b.label for b in blocks}
  if len(labels) != len(blocks):
    _fail(listing, '', 'duplicate block labels', stage)
  allowed = ((inst.GotoOp, inst.BranchOp, inst.PushGotoOp,
              inst.PushBranchOp, inst.CallBranchOp, inst.IndirectGotoOp)
             if lowered else
             (inst.GotoOp, inst.BranchOp, inst.ReturnOp))
  written = set(params)
  for b in blocks:
    for op in b.instructions:
      written |= liveness.writes(op)
      if lowered and isinstance(op, inst.PushOp):
        written |= set(op.vars)
  for b in blocks:
    t = b.terminator
    line = inst.op_str(t)
    if not isinstance(t, allowed):
      _fail(listing, line, f'{type(t).__name__} not allowed here', stage)
    for target in inst.jump_targets(t):
      if target not in labels:
        _fail(listing, line, f'unknown block {target!r}', stage)
    for op in b.instructions:
      if isinstance(op, inst.ExitOp):
        _check_exit(op, labels, var_defs, lowered, listing, stage)
    temps = set()
    ops = list(b.instructions)
    for k, op in enumerate(ops + [t], 1):
      text = inst.op_str(op)
      if isinstance(op, inst.FunctionCallOp) and lowered:
        _fail(listing, text, 'call left after lowering', stage)
      if isinstance(op, inst.FunctionCallOp) and op.parallel:
        # ops[k]: the next instruction.
        if not (k < len(ops) and isinstance(ops[k], inst.FunctionCallOp)
                and ops[k].function == op.function):
          _fail(listing, text, 'parallel call not followed by a call of '
                'the same function', stage)
      if isinstance(op, (inst.PushOp, inst.PopOp, inst.RestoreOp)):
        if not lowered:
          _fail(listing, text, 'stack operation before lowering', stage)
        for v in op.vars:
          if var_alloc and var_alloc.get(v) != VA.FULL:
            _fail(listing, text, f'stack operation on non-FULL {v!r}', stage)
      for v in liveness.reads(op, fn):
        if v not in written:
          _fail(listing, text, f'{v!r} is read but never written', stage)
        if var_defs and v not in var_defs:
          _fail(listing, text, f'{v!r} has no type', stage)
        if var_alloc:
          a = var_alloc.get(v)
          if a is None or a == VA.NULL:
            _fail(listing, text, f'{v!r} is read but allocated {a}', stage)
          if a == VA.TEMPORARY and v not in temps:
            _fail(listing, text, f'TEMPORARY {v!r} read before its write '
                  'in this block', stage)
      if isinstance(op, inst.FunctionCallOp):
        temps.clear()  # a call ends the segment TEMPORARYs live in...
      for v in liveness.writes(op):  # ...and its results start the next
        if var_alloc and var_alloc.get(v) == VA.TEMPORARY:
          temps.add(v)
    if isinstance(t, (inst.BranchOp, inst.PushBranchOp, inst.CallBranchOp)):
      _check_condition(t, var_defs, listing, stage)


def _check_exit(op, labels, var_defs, lowered, listing, stage):
  """An exit: after lowering only, to a block that exists, on a scalar."""
  text = inst.op_str(op)
  if not lowered:
    _fail(listing, text, 'exit before lowering', stage)
  if op.block not in labels:
    _fail(listing, text, f'unknown block {op.block!r}', stage)
  if not isinstance(op.when, bool):
    _fail(listing, text, f'exit side {op.when!r} is not a bool', stage)
  _check_condition(op, var_defs, listing, stage)


def _check_condition(op, var_defs, listing, stage):
  """A branch's or an exit's condition is a per-member scalar."""
  t = var_defs.get(op.cond) if var_defs else None
  ct = None if t is None else t.tensors
  if ct is not None and (not isinstance(ct, inst.TensorType)
                         or ct.shape != ()):
    _fail(listing, inst.op_str(op), 'condition is not a scalar', stage)


def verify(program, stage='?'):
  """Checks the invariants of `program` (see the module docstring).

  Args:
    program: A `Program` or a `LoweredProgram`.
    stage: The pass that made `program`, named in the error message.

  Returns:
    `program` itself, unchanged.

  Raises:
    InternalError: If `program` breaks an invariant; the message shows the
      offending instruction among a few lines of the printed IR.
  """
  listing = inst.print_program(program)
  if isinstance(program, inst.LoweredProgram):
    _check_blocks(program.blocks, program.vars_in, program.var_defs,
                  program.var_alloc, True, listing, stage)
    return program
  for fn in program.functions:
    names = {f.name for f in program.functions}
    for b in fn.blocks:
      for op in b.instructions:
        if isinstance(op, inst.FunctionCallOp) and op.function not in names:
          _fail(listing, inst.op_str(op), f'unknown function {op.function}',
                stage)
    _check_blocks(fn.blocks, fn.vars_in, fn.var_defs, fn.var_alloc, False,
                  listing, stage, fn)
  return program
