"""Allocation: where the VM keeps each variable.

Expects a typed `Program` (before lowering).  Guarantees every variable of
every function a `VariableAllocation` in `Function.var_alloc`:

- NULL: never read.  Its writes are dropped.
- TEMPORARY: read only inside the block (segment between calls) that
  writes it.  It never enters the VM state and needs no masked write.
- REGISTER: crosses a block boundary or a call, or is a parameter or the
  result (written by one function and read by another); one value per
  member, masked writes.
- FULL: live across a call whose callee can (transitively) call this
  function again and may overwrite it there: a register plus a
  per-member stack; lowering saves it around exactly those calls.  The
  callee may overwrite what this function's instructions write, and its
  parameters, except one that every call into it made while the callee
  runs passes on unchanged (`f(x, n - 1)` inside `f(x, n)`): `x` then
  keeps its value through the recursion and needs no stack.

Algorithm: liveness per function, plus the transitive closure of the call
graph.  Cost is linear in the program size times the CFG depth.
"""

import dataclasses

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['allocate', 'call_graph_closure']

VA = inst.VariableAllocation


def call_graph_closure(program):
  """Finds the functions each function reaches by one or more calls.

  Args:
    program: A `Program` (before lowering).

  Returns:
    A dict from each function's name to the set of names of the functions
    it can reach by one or more calls (itself included if it is recursive).
  """
  direct = {f.name: {op.function for b in f.blocks for op in b.instructions
                     if isinstance(op, inst.FunctionCallOp)}
            for f in program.functions}
  reach = {}
  for name in direct:
    seen, stack = set(), list(direct[name])
    while stack:
      g = stack.pop()
      if g in seen:
        continue
      seen.add(g)
      stack.extend(direct.get(g, ()))
    reach[name] = seen
  return reach


def _param_writers(program):
  """name -> {parameter: functions with a call into that function that
  writes the parameter}.  A call from the function itself that passes the
  parameter on as it is (the same variable, same position) does not write
  it: the lowered copy of that argument is dropped (stack_optimization)."""
  writers = {f.name: {p: set() for p in f.vars_in}
             for f in program.functions}
  for g in program.functions:
    for b in g.blocks:
      for op in b.instructions:
        if not isinstance(op, inst.FunctionCallOp):
          continue
        callee = program.function(op.function)
        for arg, param in zip(op.vars_in, callee.vars_in):
          if g.name != callee.name or arg != param:
            writers[callee.name][param].add(g.name)
  return writers


def _allocate_function(fn, reach, param_writers):
  live = liveness.analyze(fn)
  read, own_writes = set(), set()
  for b in fn.blocks:
    for op in b.instructions:
      read |= liveness.reads(op, fn)
      own_writes |= liveness.writes(op)
    read |= liveness.reads(b.terminator, fn)
  boundary = liveness.crossing(fn, live)
  full = set()
  for (label, i), vars_across in live.across_call.items():
    boundary |= vars_across
    callee = fn.block(label).instructions[i].function
    if callee == fn.name or fn.name in reach.get(callee, ()):
      # What may run before the call returns, and what it may write here.
      running = {callee} | reach.get(callee, set())
      clobbered = own_writes | {
          p for p, by in param_writers[fn.name].items() if by & running}
      full |= vars_across & clobbered
  alloc = {}
  for var in fn.var_defs:
    if var not in read:
      alloc[var] = VA.NULL
    elif var in full:
      alloc[var] = VA.FULL
    elif var in boundary:
      alloc[var] = VA.REGISTER
    else:
      alloc[var] = VA.TEMPORARY
  return dataclasses.replace(fn, var_alloc=inst.FrozenDict(alloc))


def allocate(program):
  """Allocates every variable of every function (see the module docstring).

  Args:
    program: A typed `Program` (before lowering).

  Returns:
    `program` with `var_alloc` set on every function.
  """
  reach = call_graph_closure(program)
  param_writers = _param_writers(program)
  return dataclasses.replace(program, functions=tuple(
      _allocate_function(f, reach, param_writers)
      for f in program.functions))


# TFP's module-level name for this pass.
__all__ += ['optimize']


def optimize(program):
  """Allocates every variable of every function; TFP's name for `allocate`.

  Args:
    program: A `Program` (before lowering), typed or not.

  Returns:
    `program` with a `VariableAllocation` for every variable of every
    function.

  Raises:
    ArgumentError: If `program` is not a `Program` (e.g. already lowered).
  """
  if not isinstance(program, inst.Program):
    raise errors.ArgumentError(
        f'allocation_strategy.optimize takes a Program before lowering, '
        f'got a {type(program).__name__}')
  return allocate(program)
