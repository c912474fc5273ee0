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

import collections
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


def _within_function(t):
  """Where a block ending in `t` goes within its function, without
  entering a callee: a call's return point (the callee runs in between),
  the side of a `CallBranchOp` that does not call (the callee's base
  case, inlined), and plain jumps (a tail call's too: the callee then
  returns for the caller)."""
  if isinstance(t, inst.GotoOp):
    return [t.block]
  if isinstance(t, inst.BranchOp):
    return [t.true_block, t.false_block]
  if isinstance(t, (inst.PushGotoOp, inst.PushBranchOp)):
    return [t.push_block]
  if isinstance(t, inst.CallBranchOp):
    return [t.push_block,
            t.false_block if t.call_side else t.true_block]
  return []


def successors(block):
  """`_within_function` of the block's terminator (the edges `analyze`
  follows; a function before lowering has jumps and returns only)."""
  return _within_function(block.terminator)


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


def _callee_entries(t):
  """The blocks a call terminator `t` enters its callee by."""
  if isinstance(t, inst.PushGotoOp):
    return [t.goto_block]
  if isinstance(t, inst.PushBranchOp):
    return [t.true_block, t.false_block]
  if isinstance(t, inst.CallBranchOp):
    return [t.call_block]
  return []


def _returns_from(program):
  """`returns_from(label)`: the returning blocks (`IndirectGotoOp`) that a
  call entering its callee at `label` may end with: those reached from it
  within the callee (`_within_function`), nested calls stepped over."""
  by_label = {b.label: b for b in program.blocks}
  cache = {}

  def returns_from(label):
    if label not in cache:
      seen, todo, out = {label}, [label], set()
      while todo:
        block = by_label[todo.pop()]
        t = block.terminator
        if isinstance(t, inst.IndirectGotoOp):
          out.add(block.label)
        for s in _within_function(t):
          if s not in seen:
            seen.add(s)
            todo.append(s)
      cache[label] = frozenset(out)
    return cache[label]
  return returns_from


def lowered_live_out(program):
  """Variables live on exit from each block of a lowered `Program`.

  Calls and returns are jumps there: a call goes to the callee's entry
  (and a `CallBranchOp` or `PushBranchOp` to either side); a return
  (`IndirectGotoOp`) goes to the return points of the calls whose callee
  may end with it (`_returns_from`), and a return that the program's entry
  reaches without a call leaves the program, which reads `vars_out`.  A
  variable restored by a pop is written there.  This over-approximates
  each member's real path (a return may go to any call of its function),
  so a variable not live here is never read again before it is written.

  A return going to every return point instead made a callee's result
  live out of blocks of its caller, through the program's own return:
  NUTS's leaf block that goes on in `transition` stored the subtree it
  returns (`build_tree.%ret`, 115 KB at 64 chains) for nothing.
  """
  if not program.blocks:
    return {}
  returns_from = _returns_from(program)
  return_points = collections.defaultdict(set)
  for b in program.blocks:
    t = b.terminator
    for entry in _callee_entries(t):
      for r in returns_from(entry):
        return_points[r].add(t.push_block)
  returns = {r: sorted(points) for r, points in return_points.items()}
  exits = returns_from(program.blocks[0].label)
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
      return returns.get(block.label, [])
    raise errors.InternalError(f'Unknown terminator {t!r}')

  def after(block):
    if block.label in exits:
      return exit_reads
    return frozenset()

  return _fixpoint(program.blocks, succ, None, after)[1]


# ---------------------------------------------------------------------------
# TFP's module-level API.  TFP analyzes its `ControlFlowGraph`; here the
# graph is a `Function` (its blocks), and loops are fine.
# ---------------------------------------------------------------------------

__all__ += ['LivenessInfo', 'liveness_analysis']

LivenessInfo = collections.namedtuple(
    'LivenessInfo',
    ['live_into_block', 'live_out_instructions', 'live_out_of_block'])


def liveness_analysis(graph, live_out):
  """Liveness of every block and instruction of a function before lowering.

  Args:
    graph: a `Function` (TFP: a `ControlFlowGraph`).
    live_out: the variables live when the function returns.

  Returns:
    A dict mapping each `Block` of `graph` (and `None`, the exit) to a
    `LivenessInfo`: the `frozenset` of variables live into the block; a
    list parallel to its instructions, of the variables live out of each
    (the last one's includes what the terminator reads); and the
    `frozenset` live out of the block.
  """
  if not isinstance(graph, inst.Function):
    raise errors.ArgumentError(
        f'liveness_analysis takes a Function, got {type(graph).__name__}',
        hint='Pass one function of a Program (program.functions[i]); '
        'TFP\'s ControlFlowGraph class does not exist here.')
  live_out = frozenset(live_out)
  _, block_out = _fixpoint(
      graph.blocks, successors, None,
      lambda b: live_out if isinstance(b.terminator, inst.ReturnOp)
      else frozenset())
  answer = {None: LivenessInfo(live_out, [], live_out)}
  for block in graph.blocks:
    live = set(block_out[block.label]) | reads(block.terminator)
    after = []
    for op in reversed(block.instructions):
      after.append(frozenset(live))
      live = (live - writes(op)) | reads(op)
    answer[block] = LivenessInfo(frozenset(live), after[::-1],
                                 block_out[block.label])
  return answer
