"""Checks and tidies the blocks the frontend made for one function.

`prune_unreachable` drops the blocks no path reaches, rejects a path that
runs off the end of the function (a block ending in `FallOff`), checks at
run time a read of a variable that some path may leave unassigned
(`_guard_unassigned_reads`), and numbers the labels densely in layout
order, so that printed IR is stable.
"""

from autobatch_vm import errors
from autobatch_vm import ops as ops_module
from autobatch_vm.ir import instructions as inst

__all__ = ['FallOff', 'prune_unreachable']


class FallOff(inst.ReturnOp):
  """Marks a block that reaches the end of the function without returning."""


def prune_unreachable(blocks, name, params, optional_flags=None):
  """Drops blocks no path reaches; rejects reachable fall-off ends.

  Args:
    blocks: The function's blocks, the entry first, with the frontend's
      labels.
    name: The function's name.
    params: Its parameter names.
    optional_flags: Local -> its flag, for the locals that may hold None
      (`python.optional`): a read of one reads its flag too, which is
      checked instead (assigned where the local is, None included).

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
    stack.extend(_successors(by_label[label]))
  kept = [by_label[label] for label in order if label in seen]
  for b in kept:
    if isinstance(b.terminator, FallOff):
      raise errors.UnsupportedSyntaxError(
          f'Batched function {name!r} can reach its end without '
          'returning a value (Python would return None)',
          loc=b.terminator.loc,
          hint='Add a final `return <value>` (or an `else:` that returns).')
  kept = _guard_unassigned_reads(kept, params, optional_flags or {})
  # Renumber labels densely in order, so printed IR is stable and compact.
  rename = {b.label: f'{name}.{i}' for i, b in enumerate(kept)}
  return [_relabel(b, rename) for b in kept]


def _assigned_in(blocks, params):
  """Per block label, the variables every path to its start assigns."""
  params = set(params)
  preds = {b.label: [] for b in blocks}
  for b in blocks:
    for s in _successors(b):
      preds[s].append(b.label)
  every = set(params)
  for b in blocks:
    for op in b.instructions:
      every |= set(inst.pattern_flatten(op.vars_out))
  entry = blocks[0].label
  assigned_in = {b.label: (set(params) if b.label == entry else set(every))
                 for b in blocks}
  by_label = {b.label: b for b in blocks}
  changed = True
  while changed:
    changed = False
    for b in blocks:
      if b.label != entry:
        ins = [_assigned_out(by_label[p], assigned_in)
               for p in preds[b.label]]
        new = set.intersection(*ins) if ins else set(params)
        if new != assigned_in[b.label]:
          assigned_in[b.label] = new
          changed = True
  return assigned_in


def _successors(block):
  t = block.terminator
  if isinstance(t, inst.GotoOp):
    return [t.block]
  if isinstance(t, inst.BranchOp):
    return [t.true_block, t.false_block]
  return []


def _unassigned_reads(block, have):
  """`(index, variable)` of the reads in `block` of a variable that some
  path may leave unassigned (index `len(instructions)`: its branch's
  condition), given `have`, the variables assigned on every path to it."""
  have = set(have)
  out = []
  for i, op in enumerate(block.instructions):
    for v in op.vars_in:
      if v not in have and not v.startswith('%'):
        out.append((i, v))
        have.add(v)
    have |= set(inst.pattern_flatten(op.vars_out))
  t = block.terminator
  if isinstance(t, inst.BranchOp) and t.cond not in have and \
      not t.cond.startswith('%'):
    out.append((len(block.instructions), t.cond))
  if isinstance(t, inst.ReturnOp) and inst.RETURN_VAR not in have:
    raise errors.InternalError('return without a result')
  return out


def _guard_unassigned_reads(blocks, params, optional_flags):
  """Checks at run time a read of a variable that some path may leave
  unassigned.

  Python raises `UnboundLocalError` for the members that take such a
  path, and only then: `for i in range(n): m = ...` then `return m` is
  right for every member whose `n` is positive.  A flag per such variable
  (`%assigned_<v>`) is False at the start and True after each assignment,
  and each such read is preceded by an `assert` of it: the members that
  reach it without a value fail there, as an `AssertionFailedError` naming
  the variable and the line (batched, they would read leftover data).
  Functions without such a read are returned as they are.
  """
  assigned_in = _assigned_in(blocks, params)
  reads = {b.label: _unassigned_reads(b, assigned_in[b.label])
           for b in blocks}
  unbound = sorted({v for rs in reads.values() for _, v in rs} -
                   set(optional_flags))
  named = {flag: v for v, flag in optional_flags.items()}
  reads = {label: [(i, v) for i, v in rs if v not in optional_flags]
           for label, rs in reads.items()}
  if not unbound:
    return blocks
  flags = {v: f'%assigned_{v}' for v in unbound}
  out = []
  for k, b in enumerate(blocks):
    ops = []
    if k == 0:
      ops += [_literal(flags[v], False, b.loc) for v in unbound]
    label, pieces = b.label, 0
    checks = {}
    for i, v in reads[b.label]:
      checks.setdefault(i, []).append(v)
    for i, op in enumerate(b.instructions + (b.terminator,)):
      for v in checks.get(i, ()):
        label, ops, pieces = _check(out, label, ops, pieces, flags[v],
                                    named.get(v, v), op.loc, b)
      if op is b.terminator:
        break
      ops.append(op)
      for v in inst.pattern_flatten(op.vars_out):
        if v in flags:
          ops.append(_literal(flags[v], True, op.loc))
    out.append(inst.Block(label, tuple(ops), b.terminator,
                          b.loc if pieces == 0 else _first_loc(ops)))
  return out


def _first_loc(ops):
  """Where the first of `ops` with a location came from, or None."""
  return next((op.loc for op in ops if op.loc is not None), None)


def _literal(name, value, loc):
  return inst.PrimOp((), name, (lambda: True) if value else (lambda: False),
                     repr(value), loc)


def _check(out, label, ops, pieces, flag, v, loc, block):
  """Ends the piece of `block` so far (`label`, `ops`) with a branch on
  `flag`: to a block failing the members without a value for `v`, then
  to the rest of the block.  Returns the rest's `(label, ops, pieces)`."""
  rest = f'{block.label}.assigned{pieces}'
  bad = f'{block.label}.unassigned{pieces}'
  loc = loc or block.loc
  out.append(inst.Block(label, tuple(ops), inst.BranchOp(flag, rest, bad, loc),
                        block.loc if pieces == 0 else _first_loc(ops) or loc))
  message = (f'local variable {v!r} is read before it is assigned (Python '
             'raises UnboundLocalError): no path these members took '
             f'assigned {v!r}')
  fail = f'%unassigned_{v}'
  out.append(inst.Block(bad, (inst.PrimOp(
      (), fail, lambda: ops_module.fail(message), f'fail {message!r}', loc),),
                        inst.GotoOp(rest), loc))
  return rest, [], pieces + 1


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
