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
from autobatch_vm.ir import instructions as inst

__all__ = ['Liveness', 'analyze', 'crossing', 'lowered_live_out',
           'lowered_liveness', 'reads', 'transfer', 'writes']


@dataclasses.dataclass(frozen=True)
class Liveness:
  """The liveness of every block of one function (`analyze`).

  Attributes:
    live_in: Block label -> the variables live on entry to the block.
    live_out: Block label -> the variables live on exit from the block.
    across_call: (block label, instruction index) -> the variables live
      across the `FunctionCallOp` there (needed again once it returns).
  """
  live_in: Dict[str, FrozenSet[str]]
  live_out: Dict[str, FrozenSet[str]]
  # (block label, instruction index) -> variables live across that call.
  across_call: Dict[Tuple[str, int], FrozenSet[str]]


def crossing(fn, live):
  """Finds the variables of `fn` that cross a block boundary.

  Args:
    fn: A `Function` before lowering.
    live: Its `Liveness`, from `analyze(fn)`.

  Returns:
    The set of its parameters and results, and of every variable live into
    or out of one of its blocks.
  """
  out = set(fn.vars_in) | set(inst.pattern_flatten(fn.vars_out))
  for b in fn.blocks:
    out |= live.live_in[b.label] | live.live_out[b.label]
  return out


def reads(op, fn=None):
  """Finds the variables an instruction or terminator reads.

  Args:
    op: An instruction or terminator, before or after lowering.
    fn: The `Function` whose `vars_out` a `ReturnOp` reads, or None (a
      `ReturnOp` then reads nothing).

  Returns:
    The set of variable names `op` reads.

  Raises:
    InternalError: If `op` is no known instruction.
  """
  if isinstance(op, (inst.PrimOp, inst.FunctionCallOp)):
    return set(op.vars_in)
  if isinstance(op, (inst.BranchOp, inst.PushBranchOp,
                     inst.CallBranchOp, inst.ExitOp)):
    return {op.cond}
  if isinstance(op, inst.ReturnOp):
    return set(inst.pattern_flatten(fn.vars_out)) if fn else set()
  if isinstance(op, (inst.GotoOp, inst.PushGotoOp, inst.IndirectGotoOp)):
    return set()
  if isinstance(op, (inst.PushOp, inst.PopOp, inst.RestoreOp)):
    return set(op.vars) if isinstance(op, inst.PushOp) else set()
  raise errors.InternalError(f'Unknown instruction {op!r}')


def writes(op):
  """Finds the variables an instruction writes.

  Args:
    op: An instruction or terminator, before or after lowering.

  Returns:
    The set of variable names `op` writes (empty for a terminator).
  """
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


def transfer(block, fn, live_out, across=None, exit_live=None):
  """Computes the variables live on entry to `block` from those live out.

  Args:
    block: Any `Block`, lowered too.
    fn: The function whose `ReturnOp` reads its `vars_out`, or None.
    live_out: The variables live on exit from `block`.
    across: A dict, or None; if given, it gets
      `(block.label, index) -> variables live across that call` for each
      `FunctionCallOp` of `block`.
    exit_live: For a block with exits (`ExitOp`): `exit_live(label)`, the
      variables live on entry to an exit's target, live at the exit too.
      None: `live_out` (which holds them, the targets being successors).

  Returns:
    The set of variables live on entry to `block`.
  """
  live = set(live_out) | reads(block.terminator, fn)
  for i in range(len(block.instructions) - 1, -1, -1):
    op = block.instructions[i]
    if isinstance(op, inst.ExitOp):
      live |= exit_live(op.block) if exit_live else live_out
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
      new_in = frozenset(transfer(block, fn, out, exit_live=live_in.get))
      if out != live_out[block.label] or new_in != live_in[block.label]:
        live_out[block.label] = out
        live_in[block.label] = new_in
        changed = True
  return live_in, live_out


def analyze(fn):
  """Computes the liveness of every block of a function before lowering.

  Args:
    fn: A `Function` (before lowering).

  Returns:
    Its `Liveness`.
  """
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
        for s in inst.exit_targets(block) + _within_function(t):
          if s not in seen:
            seen.add(s)
            todo.append(s)
      cache[label] = frozenset(out)
    return cache[label]
  return returns_from


def lowered_live_out(program):
  """Computes the variables live on exit from each block of a lowered program.

  Args:
    program: A `LoweredProgram`.

  Returns:
    A dict from each block's label to the frozenset of variables live on
    exit from it (`lowered_liveness` for the rules).
  """
  return lowered_liveness(program)[1]


def lowered_liveness(program):
  """Computes the variables live into and out of each lowered block.

  Args:
    program: A `LoweredProgram`.

  Returns:
    `(live_in, live_out)`: dicts from each block's label to the frozenset
    of variables live on entry to it, and on exit from it.

  Calls and returns are jumps there: a call goes to the callee's entry
  (and a `CallBranchOp` or `PushBranchOp` to either side), an exit
  (`ExitOp`) to its target, with what is live there live at it; a return
  (`IndirectGotoOp`) goes to the return points of the calls whose callee
  may end with it (`_returns_from`), and a return that the program's entry
  reaches without a call leaves the program, which reads `vars_out`.  A
  variable restored by a pop is written there.  This over-approximates
  each member's real path (a return may go to any call of its function),
  so a variable not live here is never read again before it is written.

  A return going to every return point instead would make a callee's
  result live out of blocks of its caller, through the program's own
  return: NUTS's leaf block that goes on in `transition` would store the
  subtree it returns (`build_tree.%ret`, a whole tree state per chain) for
  nothing.
  """
  if not program.blocks:
    return {}, {}
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
    return inst.exit_targets(block) + after_terminator(block)

  def after_terminator(block):
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

  return _fixpoint(program.blocks, succ, None, after)


# ---------------------------------------------------------------------------
# TFP's module-level API.  TFP analyzes its `ControlFlowGraph`; here the
# graph is a `Function` (its blocks), and loops are fine.
# ---------------------------------------------------------------------------

__all__ += ['LivenessInfo', 'liveness_analysis']

LivenessInfo = collections.namedtuple(
    'LivenessInfo',
    ['live_into_block', 'live_out_instructions', 'live_out_of_block'])
LivenessInfo.__doc__ = """The liveness of one block (`liveness_analysis`).

Attributes:
  live_into_block: The frozenset of variables live into the block.
  live_out_instructions: A list parallel to the block's instructions, of
    the variables live out of each (the last one's includes what the
    terminator reads).
  live_out_of_block: The frozenset of variables live out of the block.
"""


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
