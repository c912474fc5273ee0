"""Copy propagation: fewer copies between temporaries and variables.

A pure pass `LoweredProgram -> LoweredProgram`, last in the pipeline.  The
frontend evaluates every expression into a temporary and then copies it to
its target, and lowering copies a call's result out of the callee's return
register, so a call site of fibonacci reads

    fibonacci.%1 = prim[n - 1](fibonacci.n)
    push fibonacci.n
    fibonacci.n = prim[fibonacci.%1](fibonacci.%1)        # a copy
    ...
    fibonacci.%4 = prim[fibonacci.%ret](fibonacci.%ret)   # a copy
    fibonacci.%ret = prim[%2 + %4](fibonacci.%2, fibonacci.%4)

Each copy is a primitive the VM runs for the block's members: on NumPy a
gather, a call and a scatter; under TensorFlow a masked select for a
register.  Two rewrites, within a block (a TEMPORARY is only ever read in
the block that writes it, which the verifier checks):

- *sinking*: `t = f(a...)`, later `x = t` where that copy is the only read
  of `t`: `f` moves down to the copy and writes `x` (`push n; n = prim[n -
  1](n)` above).  Only where nothing in between writes `f`'s inputs, so `f`
  sees the same values, and where no exit lies in between, so `f` runs for
  the same members; moving the write of `x` down keeps the value that the
  instructions in between read (the push of `n`).
- *forwarding*: `t = r`, then reads of `t`: they read `r` instead, where `r`
  is not written in between (an instruction that reads `t` and writes `r`
  still reads the old `r`: inputs are read before outputs are written), and
  the copy goes (`%ret = prim[%2 + %4](%2, %ret)` above).

Only copies between variables of the same type, with no cast: a copy that
converts stays.  Temporaries left unused leave the variable table.
Fibonacci: 3 of its 12 primitives go, and 197 of the tree-RNN's 643
primitive runs per batch of 256 trees.
"""

import dataclasses

from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['propagate_copies']

VA = inst.VariableAllocation


def _is_copy(op, var_defs):
  return (isinstance(op, inst.PrimOp) and op.function is inst.identity and
          len(op.vars_in) == 1 and isinstance(op.vars_out, str) and
          not op.casts and not op.sync and
          var_defs.get(op.vars_in[0]) == var_defs.get(op.vars_out))


def _uses(ops, terminator, var, start):
  """Positions after `start` that read `var` before it is written again
  (`len(ops)` stands for the terminator), and whether it is written
  again."""
  out = []
  for k in range(start + 1, len(ops)):
    if var in liveness.reads(ops[k]):
      out.append(k)
    if var in liveness.writes(ops[k]):
      return out
  if var in liveness.reads(terminator):
    out.append(len(ops))
  return out


def _written_between(ops, names, lo, hi):
  """Whether an instruction strictly between `lo` and `hi` writes any of
  `names`."""
  return any(liveness.writes(ops[k]) & names for k in range(lo + 1, hi))


def _rename_reads(op, old, new):
  if isinstance(op, inst.PrimOp):
    return dataclasses.replace(
        op, vars_in=tuple(new if v == old else v for v in op.vars_in))
  return dataclasses.replace(op, cond=new)   # a terminator's condition


def _renamable(op):
  """Whether `_rename_reads` can rename what `op` reads (a temporary is
  read only by these: stack operations touch FULL variables only)."""
  return isinstance(op, (inst.PrimOp, inst.BranchOp, inst.PushBranchOp,
                         inst.CallBranchOp, inst.ExitOp))


def _exit_between(ops, lo, hi):
  """Whether an exit (`ExitOp`) lies strictly between `lo` and `hi`: a
  primitive sunk past it would no longer run for the members leaving
  there."""
  return any(isinstance(ops[k], inst.ExitOp) for k in range(lo + 1, hi))


def _sink(ops, terminator, j, temporary):
  """`ops` with copy `j` (from a temporary) replaced by the primitive that
  computes its source, or None."""
  src, dst = ops[j].vars_in[0], ops[j].vars_out
  if src not in temporary:
    return None
  i = next((k for k in range(j - 1, -1, -1)
            if src in liveness.writes(ops[k])), None)
  if i is None:
    return None
  producer = ops[i]
  if (not isinstance(producer, inst.PrimOp) or producer.vars_out != src or
      src in producer.vars_in or _uses(ops, terminator, src, i) != [j] or
      _written_between(ops, set(producer.vars_in), i, j) or
      _exit_between(ops, i, j)):
    return None
  moved = dataclasses.replace(producer, vars_out=dst)
  return ops[:i] + ops[i + 1:j] + [moved] + ops[j + 1:]


def _forward(ops, terminator, j, temporary):
  """`(ops, terminator)` with copy `j` (to a temporary) removed and its
  reads reading the copy's source, or None."""
  src, dst = ops[j].vars_in[0], ops[j].vars_out
  if dst not in temporary:
    return None
  uses = _uses(ops, terminator, dst, j)
  if any(_written_between(ops, {src}, j, k) or
         not _renamable(terminator if k == len(ops) else ops[k])
         for k in uses):
    return None
  ops = list(ops)
  for k in uses:
    if k == len(ops):
      terminator = _rename_reads(terminator, dst, src)
    else:
      ops[k] = _rename_reads(ops[k], dst, src)
  return ops[:j] + ops[j + 1:], terminator


def _propagate(block, var_defs, temporary):
  ops, terminator = list(block.instructions), block.terminator
  j = 0
  while j < len(ops):
    op = ops[j]
    if _is_copy(op, var_defs):
      sunk = _sink(ops, terminator, j, temporary)
      if sunk is not None:
        ops = sunk   # the copy's place now holds the producer: look again
        j = max(j - 1, 0)
        continue
      forwarded = _forward(ops, terminator, j, temporary)
      if forwarded is not None:
        ops, terminator = forwarded
        continue
    j += 1
  if ops == list(block.instructions) and terminator == block.terminator:
    return block
  return dataclasses.replace(block, instructions=tuple(ops),
                             terminator=terminator)


def _mentioned(program):
  names = set(program.vars_in) | set(inst.pattern_flatten(program.vars_out))
  for block in program.blocks:
    for op in block.instructions + (block.terminator,):
      names |= liveness.reads(op) | liveness.writes(op)
  return names


def propagate_copies(program):
  """Propagates copies into their readers (see the module docstring).

  Args:
    program: A `LoweredProgram`.

  Returns:
    An equivalent `LoweredProgram` with fewer copies; temporaries no
    longer mentioned are dropped from `var_defs` and `var_alloc`.
  """
  temporary = {v for v, a in program.var_alloc.items()
               if a == VA.TEMPORARY}
  blocks = tuple(_propagate(b, program.var_defs, temporary)
                 for b in program.blocks)
  if blocks == program.blocks:
    return program
  program = dataclasses.replace(program, blocks=blocks)
  unused = temporary - _mentioned(program)
  return dataclasses.replace(
      program,
      var_defs=inst.FrozenDict({v: t for v, t in program.var_defs.items()
                                if v not in unused}),
      var_alloc=inst.FrozenDict({v: a for v, a in program.var_alloc.items()
                                 if v not in unused}))
