"""Independent calls of one function, made adjacent and marked parallel.

    h_left = encode(lib.left(node))
    h_right = encode(lib.right(node))

The second call does not read what the first returns, so the two can run
as one call over both calls' members: the stackless executor then runs the
callee once, on a batch that holds the first call's arguments of every
member at the block followed by the second call's.  A tree recursion so
runs level by level, each level of every tree in one batched call,
instead of one root-to-leaf path at a time.

`parallelize_calls(program)` expects a typed `Program` (before lowering)
and returns it with, in each block, such calls moved next to each other
(with the primitives that compute the later call's arguments moved before
the first call) and every call but the last of a group marked
`parallel=True`.  Only the stackless executor reads the mark; the
instructions' meaning is unchanged, since an instruction only moves past
instructions it does not depend on, nor they on it (no variable one writes
is read or written by the other).

Algorithm: scan each block; at a call, look at every later call of the
same function in the block.  A candidate joins the group when the
instructions it needs (those between, transitively, that write its
inputs) and the candidate itself can move up past everything between that
stays, and past the group's calls: primitives only are moved, and no
dependence is crossed.  Candidates that fail stay where they are and can
start a group of their own.

Known limits: calls in different blocks (e.g. one in each arm of an `if`)
are not grouped, nor calls of different functions; a primitive with side
effects (a global random generator) may run in another order relative to
the calls, as it already does between batched and unbatched runs.
"""

import dataclasses

from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness

__all__ = ['parallelize_calls']


def parallelize_calls(program):
  """Groups independent calls of the same function (see the module docstring).

  Args:
    program: A typed `Program` (before lowering).

  Returns:
    `program` with independent calls of the same function grouped and
    marked `parallel`.
  """
  functions = tuple(
      dataclasses.replace(fn, blocks=tuple(
          dataclasses.replace(b, instructions=_group_block(b.instructions))
          for b in fn.blocks))
      for fn in program.functions)
  return dataclasses.replace(program, functions=functions)


def _depends(first, second):
  """Whether `second` must stay after `first`: one writes a variable the
  other reads or writes."""
  w1, w2 = liveness.writes(first), liveness.writes(second)
  return bool(w1 & (liveness.reads(second) | w2)
              or liveness.reads(first) & w2)


def _is_call(op):
  return isinstance(op, inst.FunctionCallOp)


def _group_block(ops):
  ops = [dataclasses.replace(op, parallel=False) if _is_call(op) else op
         for op in ops]
  out = []
  while ops:
    op, ops = ops[0], ops[1:]
    if not _is_call(op):
      out.append(op)
      continue
    group, hoisted, between = _grow_group(op, ops)
    out.extend(hoisted)
    out.extend(dataclasses.replace(c, parallel=True) for c in group[:-1])
    out.append(group[-1])
    ops = between
  return tuple(out)


def _grow_group(first, rest):
  """(calls grouped with `first`, instructions moved before them, the rest
  of `rest` in its order)."""
  group, hoisted, between = [first], [], []
  for op in rest:
    if not (_is_call(op) and op.function == first.function):
      between.append(op)
      continue
    moved = _movable(op, group, between)
    if moved is None:
      between.append(op)
      continue
    hoisted.extend(between[i] for i in moved)
    between = [x for i, x in enumerate(between) if i not in moved]
    group.append(op)
  return group, hoisted, between


def _movable(call, group, between):
  """Positions in `between` of the instructions `call` needs, if those and
  `call` can all move before `group` (None if not)."""
  need, needed = set(call.vars_in), set()
  for i in range(len(between) - 1, -1, -1):
    if liveness.writes(between[i]) & need:
      needed.add(i)
      need |= liveness.reads(between[i])
  for i in sorted(needed):
    op = between[i]
    if not isinstance(op, inst.PrimOp):
      return None
    stays = [between[k] for k in range(i) if k not in needed]
    if any(_depends(x, op) for x in group + stays):
      return None
  stays = [x for k, x in enumerate(between) if k not in needed]
  if any(_depends(x, call) for x in stays):
    return None
  # Run together: neither call may see the other's results.
  if any(_depends(g, call) or _depends(call, g) for g in group):
    return None
  return needed
