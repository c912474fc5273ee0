"""Liveness analysis of one function (an analysis, not a transform).

`lowered_live_out` does the same for a whole lowered program, where calls
and returns are jumps (see there).

Expects a `Function` before lowering.  Computes, by the usual backward
dataflow to a fixpoint over the CFG, which variables are live on entry to
and exit from each block, and which are live across each `FunctionCallOp`
(live both before and after it, i.e. needed again once the call returns).
A `ReturnOp` reads the function's `vars_out`; a `BranchOp` reads its
condition.
"""

import dataclasses
from typing import Dict, FrozenSet, Tuple

from autobatch_vm import errors
from autobatch_vm import instructions as inst

__all__ = ['Liveness', 'analyze', 'crossing', 'lowered_live_out', 'reads',
           'transfer', 'writes']


@dataclasses.dataclass(frozen=True)
class Liveness:
  live_in: Dict[str, FrozenSet[str]]
  live_out: Dict[str, FrozenSet[str]]
  # (block label, instruction index) -> variables live across that call.
  across_call: Dict[Tuple[str, int], FrozenSet[str]]


def crossing(fn, live):
  """The variables of `fn` that cross a block boundary: its parameters and
  results, and every variable live into or out of a block (`live`: its
  `analyze(fn)`)."""
  out = set(fn.vars_in) | set(inst.pattern_flatten(fn.vars_out))
  for b in fn.blocks:
    out |= live.live_in[b.label] | live.live_out[b.label]
  return out


def reads(op, fn=None):
  """Variables an instruction or terminator reads."""
  if isinstance(op, (inst.PrimOp, inst.FunctionCallOp)):
    return set(op.vars_in)
  if isinstance(op, (inst.BranchOp, inst.PushBranchOp,
                     inst.CallBranchOp)):
    return {op.cond}
  if isinstance(op, inst.ReturnOp):
    return set(inst.pattern_flatten(fn.vars_out)) if fn else set()
  if isinstance(op, (inst.GotoOp, inst.PushGotoOp, inst.IndirectGotoOp)):
    return set()
  if isinstance(op, (inst.PushOp, inst.PopOp, inst.RestoreOp)):
    return set(op.vars) if isinstance(op, inst.PushOp) else set()
  raise errors.InternalError(f'Unknown instruction {op!r}')


def writes(op):
  """Variables an instruction writes."""
  if isinstance(op, (inst.PrimOp, inst.FunctionCallOp)):
    return set(inst.pattern_flatten(op.vars_out))
  if isinstance(op, (inst.PopOp, inst.RestoreOp)):
    return set(op.vars)
  return set()


def successors(block):
  t = block.terminator
  if isinstance(t, inst.GotoOp):
    return [t.block]
  if isinstance(t, inst.BranchOp):
    return [t.true_block, t.false_block]
  if isinstance(t, inst.PushGotoOp):
    return [t.push_block]
  return []


def transfer(block, fn, live_out, across=None):
  """Live-in of `block` given its live-out (any block, lowered too; `fn`:
  the function whose `ReturnOp` reads its `vars_out`, or None); records
  live-across-call sets in `across`."""
  live = set(live_out) | reads(block.terminator, fn)
  for i in range(len(block.instructions) - 1, -1, -1):
    op = block.instructions[i]
    out = writes(op)
    if across is not None and isinstance(op, inst.FunctionCallOp):
      across[(block.label, i)] = frozenset(live - out)
    live -= out
    live |= reads(op, fn)
  return live


def _fixpoint(blocks, succ, fn, exit_reads=lambda block: frozenset()):
  """(live_in, live_out) per block label, by backward dataflow over the
  edges `succ(block)`; `exit_reads(block)`: read after the block too."""
  live_in = {b.label: frozenset() for b in blocks}
  live_out = dict(live_in)
  changed = True
  while changed:
    changed = False
    for block in reversed(blocks):
      out = frozenset().union(exit_reads(block),
                              *[live_in[s] for s in succ(block)])
      new_in = frozenset(transfer(block, fn, out))
      if out != live_out[block.label] or new_in != live_in[block.label]:
        live_out[block.label] = out
        live_in[block.label] = new_in
        changed = True
  return live_in, live_out


def analyze(fn):
  """Liveness of every block of `fn`."""
  live_in, live_out = _fixpoint(fn.blocks, successors, fn)
  across = {}
  for block in fn.blocks:
    transfer(block, fn, live_out[block.label], across)
  return Liveness(live_in, live_out, across)


def lowered_live_out(program):
  """Variables live on exit from each block of a lowered `Program`.

  Calls and returns are jumps there: a call goes to the callee's entry
  (and a `CallBranchOp` or `PushBranchOp` to either side); a return
  (`IndirectGotoOp`) may go to any block that a call pushed as its return
  point, or leave the program, which reads `vars_out`.  A variable
  restored by a pop is written there.  This over-approximates each
  member's real path, so a variable not live here is never read again
  before it is written.
  """
  returns = sorted({b.terminator.push_block for b in program.blocks
                    if hasattr(b.terminator, 'push_block')})
  exit_reads = frozenset(inst.pattern_flatten(program.vars_out))

  def succ(block):
    t = block.terminator
    if isinstance(t, inst.GotoOp):
      return [t.block]
    if isinstance(t, inst.PushGotoOp):
      return [t.goto_block]
    if isinstance(t, (inst.BranchOp, inst.PushBranchOp, inst.CallBranchOp)):
      return [t.true_block, t.false_block]
    if isinstance(t, inst.IndirectGotoOp):
      return returns
    raise errors.InternalError(f'Unknown terminator {t!r}')

  def after(block):
    if isinstance(block.terminator, inst.IndirectGotoOp):
      return exit_reads
    return frozenset()

  return _fixpoint(program.blocks, succ, None, after)[1]
