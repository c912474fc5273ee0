"""Lowering: calls and returns become explicit stack operations.

Expects a typed and allocated `Program`.  Guarantees a `LoweredProgram`: one
flat list of blocks (main's first, so block 0 is the entry), variables
qualified by function (`fibonacci.n`), no `FunctionCallOp` and no
`ReturnOp`.

A call `outs = g(args)` in block B of f splits B in two:

    B:   ...; push <saved>; g.params = (args); push_goto B', g.entry
    B':  pop <saved>; outs = g.%ret; ...

where <saved> are f's variables live across this call that g can overwrite
(g can reach f again) -- exactly the FULL variables that need it here
(caller-save).  `push_goto` pushes the return block on the program-counter
stack; a `return` becomes `indirect_goto`, which pops it.  The VM's PC stack
starts with the exit index, so main's return ends the member.

A function that only one call site in the program calls, and that cannot
reach itself, always returns to that site's block B': there the call is
`goto g.entry` and g's `return` is `goto B'`, with no PC stack traffic and
no step spent popping (`block_merge` then joins g's return block and B').
NUTS's `transition`, called once per iteration of `run_chunk`, saves a VM
step per transition this way.
"""

import dataclasses

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness
from autobatch_vm.passes import allocation_strategy

__all__ = ['lower']

VA = inst.VariableAllocation


def _q(fn_name, pattern):
  return inst.pattern_map(lambda v: f'{fn_name}.{v}', pattern)


def _qualify_op(op, fn_name):
  if isinstance(op, inst.PrimOp):
    return dataclasses.replace(
        op, vars_in=tuple(_q(fn_name, v) for v in op.vars_in),
        vars_out=_q(fn_name, op.vars_out))
  raise errors.InternalError(f'cannot qualify {inst.op_str(op)}')


def _part_label(label, k):
  """Block `label`'s part after its k-th call (k = 0: the block itself)."""
  return label if k == 0 else f'{label}.{k}'


def _return_labels(program):
  """function name -> the return label of each of its call sites (the
  block after the call: `_part_label` of the block's k-th call)."""
  labels = {}
  for fn in program.functions:
    for block in fn.blocks:
      calls = [op for op in block.instructions
               if isinstance(op, inst.FunctionCallOp)]
      for k, op in enumerate(calls, 1):
        labels.setdefault(op.function, []).append(
            _part_label(block.label, k))
  return labels


def _direct_returns(program, reach):
  """callee name -> the block its returns go to, for each function (not
  main) called from one site only and unable to reach itself."""
  return {name: labels[0]
          for name, labels in _return_labels(program).items()
          if len(labels) == 1 and name != program.main_function.name
          and name not in reach.get(name, ())}


def _lower_function(fn, program, reach, entry_of, direct):
  live = liveness.analyze(fn)
  blocks = []
  for block in fn.blocks:
    label = block.label
    ops = []
    part = 0
    for i, op in enumerate(block.instructions):
      if not isinstance(op, inst.FunctionCallOp):
        ops.append(_qualify_op(op, fn.name))
        continue
      callee = program.function(op.function)
      can_overwrite = (callee.name == fn.name
                       or fn.name in reach.get(callee.name, ()))
      saved = ()
      if can_overwrite:
        saved = tuple(sorted(
            _q(fn.name, v) for v in live.across_call[(label, i)]
            if fn.var_alloc.get(v) == VA.FULL))
      if saved:
        ops.append(inst.PushOp(saved, op.loc))
      params = [_q(callee.name, p) for p in callee.vars_in]
      if params:
        ops.append(inst.copy_op([_q(fn.name, v) for v in op.vars_in],
                                params, op.loc))
      part += 1
      ret_label = _part_label(label, part)
      if callee.name in direct:   # it returns to ret_label, always
        jump = inst.GotoOp(entry_of[callee.name], op.loc)
      else:
        jump = inst.PushGotoOp(ret_label, entry_of[callee.name], op.loc)
      blocks.append(inst.Block(
          _part_label(label, part - 1), tuple(ops), jump,
          block.loc))
      ops = []
      if saved:
        ops.append(inst.PopOp(saved, op.loc))
      ops.append(inst.PrimOp((_q(callee.name, callee.vars_out),),
                             _q(fn.name, op.vars_out), inst.identity,
                             _q(callee.name, callee.vars_out), op.loc))
    t = block.terminator
    if isinstance(t, inst.ReturnOp):
      t = (inst.GotoOp(direct[fn.name], t.loc) if fn.name in direct
           else inst.IndirectGotoOp(t.loc))
    elif isinstance(t, inst.BranchOp):
      t = inst.BranchOp(_q(fn.name, t.cond), t.true_block, t.false_block,
                        t.loc)
    final_label = _part_label(label, part)
    blocks.append(inst.Block(final_label, tuple(ops), t, block.loc))
  return blocks


def lower(program):
  """Flattens a typed, allocated `Program` into a `LoweredProgram`.

  Args:
    program: A typed `Program` whose functions all have `var_alloc` set
      (`allocation_strategy.allocate`).

  Returns:
    One flat `LoweredProgram` whose calls and returns are explicit
    program-counter and stack operations.
  """
  reach = allocation_strategy.call_graph_closure(program)
  entry_of = {f.name: f.blocks[0].label for f in program.functions}
  main = program.main_function
  ordered = [main] + [f for f in program.functions if f.name != main.name]
  direct = _direct_returns(program, reach)
  blocks, var_defs, var_alloc = [], {}, {}
  for fn in ordered:
    blocks.extend(_lower_function(fn, program, reach, entry_of, direct))
    for v, t in fn.var_defs.items():
      var_defs[f'{fn.name}.{v}'] = t
    for v, a in fn.var_alloc.items():
      var_alloc[f'{fn.name}.{v}'] = a
  return inst.LoweredProgram(
      blocks=tuple(blocks), var_defs=inst.FrozenDict(sorted(var_defs.items())),
      var_alloc=inst.FrozenDict(sorted(var_alloc.items())),
      vars_in=tuple(_q(main.name, v) for v in main.vars_in),
      vars_out=_q(main.name, main.vars_out), main=main.name)


# TFP's module-level name for this pass.
__all__ += ['lower_function_calls']


def lower_function_calls(program):
  """Flattens a typed, allocated `Program`; TFP's name for `lower`.

  Args:
    program: A typed, allocated `Program`, as made by
      `allocation_strategy.optimize(type_inference.infer_types(...))`.

  Returns:
    One flat `LoweredProgram`, calls and returns made explicit stack
    operations.

  Raises:
    ArgumentError: If `program` is not a `Program`, or one of its functions
      is not typed or not allocated.
  """
  if not isinstance(program, inst.Program):
    raise errors.ArgumentError(
        f'lowering.lower_function_calls takes a Program, got a '
        f'{type(program).__name__}')
  for fn in program.functions:
    if not fn.var_defs or not fn.var_alloc:
      raise errors.ArgumentError(
          f'function {fn.name!r} is not '
          f'{"typed" if not fn.var_defs else "allocated"}; lowering needs '
          'both', loc=fn.loc, hint='Lower allocation_strategy.optimize('
          'type_inference.infer_types(program, inputs, backend)).')
  return lower(program)
