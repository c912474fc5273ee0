"""Loops of a lowered program, and the blocks that wait for them.

An analysis for the `'most'` schedule (`backends.scheduler`).  A member
that leaves a loop early waits at the loop's exit under `'lowest'`
(blocks are numbered in source order, the exit after the body) but not
under `'most'`, which runs the exit once its members outnumber those
still in the loop.  They then start the code after the loop (the next
trip of an outer loop) out of step with the others, and every block of
that code runs twice, once for each group: a nested loop
(`for i ...: for j ...:`) split its members into ever smaller groups and
took 2-4x the steps of `'lowest'`.  Under `'most'` a loop's exit
therefore waits while any member is in the loop; recursion, where
`'most'` gains by not waiting, is left as it is.

Loops are found on the jumps within a function (gotos, branches and
exits of the lowered blocks, and from a call's block to the block its
callee returns to; the callee's blocks are not edges):

- a loop is a strongly connected set of blocks in which no block calls
  (a loop that calls is left as it is: what comes back depends on the
  callee, and a recursion's members are better not held);
- its exits are the blocks outside it that its blocks jump to;
- loops nest: with the jumps into a loop's lowest-numbered block (its
  head, first in source order) removed, the blocks left form the loops
  inside it.
"""

import numpy as np

from autobatch_vm.ir import program as prog

__all__ = ['exit_waits']

_CALLS = (prog.PushGotoOp, prog.PushBranchOp, prog.CallBranchOp)


def _jumps(block):
  """The labels `block` goes on to within its function: its jumps, and
  for a call the block the callee returns to (and, for a call on one side
  of a branch, the other side)."""
  out = [op.block for op in block.instructions
         if isinstance(op, prog.ExitOp)]
  t = block.terminator
  if isinstance(t, prog.GotoOp):
    out.append(t.block)
  elif isinstance(t, prog.BranchOp):
    out += [t.true_block, t.false_block]
  elif isinstance(t, prog.CallBranchOp):
    out += [t.push_block,
            t.false_block if t.call_side else t.true_block]
  elif isinstance(t, (prog.PushGotoOp, prog.PushBranchOp)):
    out.append(t.push_block)
  return out


def _components(nodes, succ):
  """The strongly connected components of the graph on `nodes` (sorted
  ints) with successors `succ(v)`, by Tarjan's algorithm, iteratively."""
  index, low, on_stack, stack, out = {}, {}, set(), [], []
  for root in nodes:
    if root in index:
      continue
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    work = [(root, iter(succ(root)))]
    while work:
      v, it = work[-1]
      for w in it:
        if w not in index:
          index[w] = low[w] = len(index)
          stack.append(w)
          on_stack.add(w)
          work.append((w, iter(succ(w))))
          break
        if w in on_stack:
          low[v] = min(low[v], index[w])
      else:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
          comp = []
          while True:
            w = stack.pop()
            on_stack.discard(w)
            comp.append(w)
            if w == v:
              break
          out.append(sorted(comp))
  return out


def exit_waits(blocks):
  """Which blocks wait for which, for the `'most'` schedule.

  Args:
    blocks: A lowered program's blocks, in PC order.

  Returns:
    None where the program has no loop (as defined in the module
    docstring) with an exit; else a bool array `[n, n]`, `waits[x, y]`:
    block `x` is an exit of a loop that holds block `y`, so it does not
    run while a member is at `y`.
  """
  n = len(blocks)
  index = {b.label: i for i, b in enumerate(blocks)}
  jumps = [[index[l] for l in _jumps(b) if l in index] for b in blocks]
  calls = [isinstance(b.terminator, _CALLS) for b in blocks]
  waits = np.zeros((n, n), bool)
  # (blocks, jumps removed) still to look into.
  todo = [(list(range(n)), frozenset())]
  while todo:
    nodes, removed = todo.pop()
    inside = set(nodes)

    def succ(v, inside=inside, removed=removed):
      return [w for w in jumps[v] if w in inside and (v, w) not in removed]
    for comp in _components(nodes, succ):
      if len(comp) == 1 and comp[0] not in succ(comp[0]):
        continue   # not a loop
      if any(calls[v] for v in comp):
        continue
      members = set(comp)
      for v in comp:
        for w in jumps[v]:
          if w not in members:
            waits[w, comp] = True
      head = comp[0]
      todo.append((comp, removed | {(v, head) for v in comp}))
  return waits if waits.any() else None
