"""Leaf returns: a call to a leaf block goes on at its return site in one step.

A pure pass `LoweredProgram -> LoweredProgram`, after `return_inlining` and
before `copy_propagation`.  A *leaf* is a block that returns
(`indirect_goto`) and that calls reach directly: the base case of a
recursion, after `block_merge` moved the base-case test into the callers.
A member that calls it pushes the return block `R`, spends a step at the
leaf, pops `R` and spends a step at `R`:

    B:    ...; push_branch R, c ? L : T
    L:    ...leaf code...; indirect_goto
    R:    ...code after the call...; <terminator>

The leaf always returns to `R` when it is entered from that call, so the
pass gives each (leaf, return block) pair a copy of the leaf followed by the
return block's code, and the call jumps there without pushing:

    B:    ...; call_branch R, c ? L>R : call T
    L>R:  ...leaf code...; ...code after the call...; <terminator>

The copy's own terminator is rewritten the same way, so a leaf called again
after the call (the second recursive call of a tree walk) chains on.  In
NUTS's `build_tree` every leapfrog takes one VM step instead of two; in the
tree encoder every leaf does.

Each member runs exactly the instructions it ran before, in the same order,
and its PC stack holds the same return blocks at every call that remains;
only the push and pop around a leaf go (so a leaf call can no longer
overflow the PC stack) and how the code is cut into steps changes.  A leaf
reached by any other jump keeps its original block for it.

Limits.  The pass trades waiting for company against steps.  A member
that leaves a leaf runs the return block's code at once, in the copy,
instead of waiting at the return block to run it with the members that
reach it from elsewhere (returning from a deeper call); and members at one
leaf that return to different blocks run different copies, in different
steps, where without the pass they run the leaf in one.  Where members
move in step (NUTS's chains), nothing is lost and a step per leaf is
saved.  Where they do not, the saving is smaller and can cost more
primitive runs, each for fewer members; it pays most where steps are
dear (XLA).  Under the `'lowest'` schedule, which gathers members by
running blocks in order, the copies scatter them, so the pass leaves
programs for that schedule unchanged (docs/performance.md gives the
figures for both).  Copies are made only of leaves with at most
`_MAX_SITES` return blocks, and of return blocks of at most `_MAX_COPIED`
instructions, to bound the program's growth.  A leaf that holds a sync
point (`ab.sync_point`) is copied too: its copies are numbered last, like
it, and members that reach it together return together where they move in
step.
"""

import dataclasses

from autobatch_vm.ir import instructions as inst

__all__ = ['merge_leaf_returns']

_MAX_SITES = 4      # most return blocks a leaf is copied for
_MAX_COPIED = 64    # most instructions of a return block copied into a leaf


def _leaves(program):
  """Labels of the blocks that may be copied: returning, not the entry."""
  return {b.label for b in program.blocks[1:]
          if isinstance(b.terminator, inst.IndirectGotoOp)}


def _call_edges(blocks, leaves):
  """{leaf: the return blocks calls push before jumping straight to it}."""
  sites = {}
  for b in blocks:
    for leaf, ret in _leaf_calls(b.terminator, leaves):
      sites.setdefault(leaf, [])
      if ret not in sites[leaf]:
        sites[leaf].append(ret)
  return sites


def _leaf_calls(t, leaves):
  """(leaf, return block) for each jump of `t` that calls a leaf."""
  if isinstance(t, inst.PushGotoOp):
    targets = [t.goto_block]
  elif isinstance(t, inst.PushBranchOp):
    targets = [t.true_block, t.false_block]
  elif isinstance(t, inst.CallBranchOp):
    targets = [t.call_block]
  else:
    return []
  return [(x, t.push_block) for x in dict.fromkeys(targets)
          if x in leaves and x != t.push_block]


def _rewritten(t, copy_of):
  """Terminator `t` with its calls of copied leaves turned into jumps to
  the copies (`copy_of(leaf, ret)` -> label or None: not copied)."""
  if isinstance(t, inst.PushGotoOp):
    target = copy_of(t.goto_block, t.push_block)
    return t if target is None else inst.GotoOp(target, t.loc)
  if isinstance(t, inst.PushBranchOp):
    true = copy_of(t.true_block, t.push_block)
    false = copy_of(t.false_block, t.push_block)
    if true is None and false is None:
      return t
    if true is not None and false is not None:
      return inst.BranchOp(t.cond, true, false, t.loc)
    if true is not None:   # members going to the copy no longer push
      return inst.CallBranchOp(t.push_block, t.cond, true, t.false_block,
                               False, t.loc)
    return inst.CallBranchOp(t.push_block, t.cond, t.true_block, false,
                             True, t.loc)
  if isinstance(t, inst.CallBranchOp):
    target = copy_of(t.call_block, t.push_block)
    if target is None:
      return t
    if t.call_side:
      return inst.BranchOp(t.cond, target, t.false_block, t.loc)
    return inst.BranchOp(t.cond, t.true_block, target, t.loc)
  return t


def merge_leaf_returns(program, schedule):
  """Makes calls to leaf blocks go on at their return site in one step.

  See the module docstring for the rewrite and its limits.

  Args:
    program: A `LoweredProgram` (after `return_inlining`).
    schedule: The VM schedule it will run under, `'most'` or `'lowest'`;
      under `'lowest'` the program is returned unchanged.

  Returns:
    An equivalent `LoweredProgram` in which calls to leaf blocks jump to
    copies of the leaf that go on with the return block's code.
  """
  if not program.blocks or schedule == 'lowest':
    return program
  by_label = {b.label: b for b in program.blocks}
  leaves = _leaves(program)
  sites = _call_edges(program.blocks, leaves)
  copyable = {leaf for leaf, rets in sites.items()
              if len(rets) <= _MAX_SITES and
              all(len(by_label[r].instructions) <= _MAX_COPIED
                  for r in rets)}
  if not copyable:
    return program

  copies = {}   # (leaf, return block) -> the copy's label, in creation order

  def copy_of(leaf, ret):
    if leaf not in copyable or ret == leaf:
      return None
    if (leaf, ret) not in copies:
      copies[(leaf, ret)] = f'{leaf}>{ret}'
    return copies[(leaf, ret)]

  blocks = [dataclasses.replace(b, terminator=_rewritten(b.terminator,
                                                         copy_of))
            for b in program.blocks]
  made, done = {}, 0
  while done < len(copies):   # a copy's terminator may call a leaf too
    (leaf, ret), label = list(copies.items())[done]
    done += 1
    l, r = by_label[leaf], by_label[ret]
    made[label] = dataclasses.replace(
        l, label=label, instructions=l.instructions + r.instructions,
        terminator=_rewritten(r.terminator, copy_of))
  # Each copy right after its leaf: a sync leaf's copies stay last.
  ordered = []
  for b in blocks:
    ordered.append(b)
    ordered += [made[label] for (leaf, _), label in copies.items()
                if leaf == b.label]
  return dataclasses.replace(
      program, blocks=tuple(inst.reachable_blocks(ordered)))
