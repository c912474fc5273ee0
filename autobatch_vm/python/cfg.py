"""Checks and tidies the blocks the frontend made for one function.

`prune_unreachable` drops the blocks no path reaches, rejects a path that
runs off the end of the function (a block ending in `FallOff`) and a read
of a variable that some path leaves unassigned, and numbers the labels
densely in layout order, so that printed IR is stable.
"""

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['FallOff', 'prune_unreachable']


class FallOff(inst.ReturnOp):
  """Marks a block that reaches the end of the function without returning."""


def prune_unreachable(blocks, name, params):
  """Drops blocks no path reaches; rejects reachable fall-off ends.

  Args:
    blocks: The function's blocks, the entry first, with the frontend's
      labels.
    name: The function's name.
    params: Its parameter names.

  Returns:
    The blocks a path reaches, in layout order, labelled `<name>.<i>`.

  Raises:
    UnsupportedSyntaxError: If a path reaches the end of the function
      without a return, or reads a variable it may not have assigned.
  """
  by_label = {b.label: b for b in blocks}
  order = [b.label for b in blocks]
  seen = set()
  stack = [order[0]]
  while stack:
    label = stack.pop()
    if label in seen:
      continue
    seen.add(label)
    t = by_label[label].terminator
    if isinstance(t, inst.GotoOp):
      stack.append(t.block)
    elif isinstance(t, inst.BranchOp):
      stack.extend([t.false_block, t.true_block])
  kept = [by_label[label] for label in order if label in seen]
  for b in kept:
    if isinstance(b.terminator, FallOff):
      raise errors.UnsupportedSyntaxError(
          f'Batched function {name!r} can reach its end without '
          'returning a value (Python would return None)',
          loc=b.terminator.loc,
          hint='Add a final `return <value>` (or an `else:` that returns).')
  _check_definitely_assigned(kept, params)
  # Renumber labels densely in order, so printed IR is stable and compact.
  rename = {b.label: f'{name}.{i}' for i, b in enumerate(kept)}
  return [_relabel(b, rename) for b in kept]


def _check_definitely_assigned(blocks, params):
  """Rejects reads of a variable that some path leaves unassigned.

  Python would raise UnboundLocalError for the members taking that path;
  batched, they would silently read leftover data, so refuse up front.
  """
  params = set(params)
  succ = {}
  for b in blocks:
    t = b.terminator
    succ[b.label] = ([t.block] if isinstance(t, inst.GotoOp) else
                     [t.true_block, t.false_block]
                     if isinstance(t, inst.BranchOp) else [])
  preds = {b.label: [] for b in blocks}
  for label, ss in succ.items():
    for s in ss:
      preds[s].append(label)
  every = set(params)
  for b in blocks:
    for op in b.instructions:
      every |= set(inst.pattern_flatten(op.vars_out))
  entry = blocks[0].label
  assigned_in = {b.label: (set(params) if b.label == entry else set(every))
                 for b in blocks}
  changed = True
  while changed:
    changed = False
    for b in blocks:
      if b.label != entry:
        ins = [_assigned_out(b_, assigned_in) for b_ in
               (x for x in blocks if x.label in preds[b.label])]
        new = set.intersection(*ins) if ins else set(params)
        if new != assigned_in[b.label]:
          assigned_in[b.label] = new
          changed = True
  for b in blocks:
    have = set(assigned_in[b.label])
    for op in b.instructions:
      for v in op.vars_in:
        if v not in have and not v.startswith('%'):
          raise errors.UnsupportedSyntaxError(
              f'variable {v!r} may be used before it is assigned (some path '
              'reaches this line without assigning it)', loc=op.loc,
              hint=f'Assign {v!r} on every path first, e.g. initialize it '
              'before the if/loop.')
      have |= set(inst.pattern_flatten(op.vars_out))
    t = b.terminator
    if isinstance(t, inst.BranchOp) and t.cond not in have and \
        not t.cond.startswith('%'):
      raise errors.UnsupportedSyntaxError(
          f'variable {t.cond!r} may be used before it is assigned',
          loc=t.loc)
    if isinstance(t, inst.ReturnOp) and inst.RETURN_VAR not in have:
      raise errors.InternalError('return without a result')


def _assigned_out(block, assigned_in):
  out = set(assigned_in[block.label])
  for op in block.instructions:
    out |= set(inst.pattern_flatten(op.vars_out))
  return out


def _relabel(block, rename):
  t = block.terminator
  if isinstance(t, inst.GotoOp):
    t = inst.GotoOp(rename[t.block], t.loc)
  elif isinstance(t, inst.BranchOp):
    t = inst.BranchOp(t.cond, rename[t.true_block], rename[t.false_block],
                      t.loc)
  return inst.Block(rename[block.label], block.instructions, t, block.loc)
