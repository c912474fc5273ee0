"""What a run does with members that fail: the `on_error=` policy.

A member fails at an error that only its data reveals: recursion deeper
than `max_stack_depth` (`StackOverflowError`), a failed `assert`
(`AssertionFailedError`), more than `max_steps` VM steps
(`StepLimitError`).  The policy is the batched call's `on_error=`:

- `'raise'` (the default): the error is raised -- at once on NumPy and
  eagerly, by a failed assertion inside `tf.function`, after the compiled
  call in `xla.compile_nested_output` (and `ab.stage(jit_compile=True)`).
  A bare `tf.function(jit_compile=True)` cannot raise at run time: there
  the failed members' outputs are poisoned (NaN for floats, the dtype's
  minimum for signed integers, its maximum for unsigned ones; the other members keep their values) and the
  trace warns (`XlaErrorsWarning`).  A boolean has no value to spare, so
  a run there that can fail and returns a boolean is refused while
  tracing (`refuse_unmarkable`), unless only a per-member primitive can
  fail (`int(nan)`, the maximum of an empty slice: possible in most
  per-member functions, which were never refused for it); the warning
  then says a boolean keeps a value.
- `'status'`: the call returns `(outputs, ok)`, `ok` a boolean per member,
  False for the members an error stopped, whose outputs are poisoned
  (booleans False); the others finish with their values.  Where a run
  stops members rather than raising (TensorFlow's stack VM: eagerly,
  inside `tf.function`, under XLA) nothing is raised.  On NumPy the stack
  VM stops at the first error, which names the members it stops
  (`AutoBatchError.members`): `vm.machine.execute` runs the call again
  without them, until a run finishes.  Where the executor stops at the
  first error otherwise (stackless mode asked for, a dry run, TensorFlow
  stepping eagerly) that error is raised as with `'raise'`, so no value
  is ever returned wrong.

`can_overflow` tells whether a program's stacks can overflow at all: a
program whose calls do not recurse has a bounded call depth, and where
that fits `max_stack_depth` its pushes need no check (TensorFlow then
adds none, and such a run cannot fail by overflow).
"""

import warnings

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['ON_ERROR', 'check_on_error', 'can_overflow', 'refuse_unmarkable',
           'settle', 'finished']

ON_ERROR = ('raise', 'status')


def check_on_error(on_error, loc=None):
  """Raises `ArgumentError` unless `on_error` is one of `ON_ERROR`.

  Args:
    on_error: The value given.
    loc: The user's function's `SourceLoc`, or None.
  """
  if not (isinstance(on_error, str) and on_error in ON_ERROR):
    raise errors.ArgumentError(
        f"on_error must be 'raise' or 'status', got {on_error!r}", loc=loc,
        hint="'raise' (the default) raises a stack overflow, a failed "
        "assert or max_steps; 'status' returns (outputs, ok) with a "
        'boolean per member, False where an error stopped it.')


def _edges(block):
  """`(target, calls)` for each block `block` may go to in a run.

  `calls` is 1 where the target runs one call deeper (a callee's block),
  0 in the same frame (a jump, a branch, an exit, the block a call
  returns to).  None where the terminator is not known here.
  """
  out = _terminator_edges(block.terminator)
  if out is None:
    return None
  return [(label, 0) for label in inst.exit_targets(block)] + out


def _terminator_edges(t):
  """`_edges` of a block's terminator `t`."""
  if isinstance(t, inst.GotoOp):
    return [(t.block, 0)]
  if isinstance(t, inst.BranchOp):
    return [(t.true_block, 0), (t.false_block, 0)]
  if isinstance(t, inst.PushGotoOp):
    return [(t.push_block, 0), (t.goto_block, 1)]
  if isinstance(t, inst.PushBranchOp):
    # The callee's entry test, merged into the caller's block.
    return [(t.push_block, 0), (t.true_block, 1), (t.false_block, 1)]
  if isinstance(t, inst.CallBranchOp):
    other = t.false_block if t.call_side else t.true_block
    return [(t.push_block, 0), (t.call_block, 1), (other, 0)]
  if isinstance(t, inst.IndirectGotoOp) or t is None:
    return []
  return None


def call_depth(program):
  """The most calls active at once in a run of `program`, or None.

  The blocks form a graph: a jump or branch stays in the frame, a call
  goes one frame deeper into the callee and, for the caller, on to the
  block it returns to.  The deepest a run can nest is the most call edges
  on a path from the entry; a cycle through a call edge is a recursion,
  with no bound.

  Args:
    program: A `LoweredProgram`.

  Returns:
    That most, if no call recurses and no variable lives on a stack;
    else None.
  """
  if any(a == inst.VariableAllocation.FULL
         for a in program.var_alloc.values()):
    return None
  if not program.blocks:
    return 0
  edges = {}
  for block in program.blocks:
    out = _edges(block)
    if out is None:
      return None
    edges[block.label] = out
  # Tarjan's strongly connected components, iteratively, from the entry.
  index, low, comp, stack, on_stack = {}, {}, {}, [], set()
  finished = []   # components as they complete: successors first
  counter = [0]
  entry = program.blocks[0].label
  work = [(entry, 0)]
  while work:
    v, i = work.pop()
    if i == 0:
      index[v] = low[v] = counter[0]
      counter[0] += 1
      stack.append(v)
      on_stack.add(v)
    succ = edges.get(v, [])
    if i < len(succ):
      work.append((v, i + 1))
      w = succ[i][0]
      if w not in index:
        work.append((w, 0))
      elif w in on_stack:
        low[v] = min(low[v], index[w])
      continue
    if low[v] == index[v]:
      finished.append(v)
      while True:
        w = stack.pop()
        on_stack.discard(w)
        comp[w] = v
        if w == v:
          break
    if work:
      parent = work[-1][0]
      low[parent] = min(low[parent], low[v])
  for v in comp:
    for w, calls in edges.get(v, []):
      if calls and comp.get(w) == comp[v]:
        return None   # a call inside a cycle: recursion
  # The deepest nesting: a longest path over the components (a DAG).
  members = {}
  for v, c in comp.items():
    members.setdefault(c, []).append(v)
  depth = {}
  for c in finished:
    best = 0
    for v in members[c]:
      for w, calls in edges.get(v, []):
        if comp.get(w, c) != c:
          best = max(best, calls + depth[comp[w]])
    depth[c] = best
  return depth[comp[entry]]


def can_overflow(program, max_stack_depth):
  """Whether a run of `program` can recurse deeper than its stacks hold.

  Args:
    program: A `LoweredProgram`.
    max_stack_depth: The run's `max_stack_depth`.

  Returns:
    False where the calls do not recurse and their deepest chain fits
    `max_stack_depth` (`call_depth`); else True.
  """
  depth = call_depth(program)
  return depth is None or depth > max_stack_depth


def refuse_unmarkable(out, backend, loc, names):
  """Refuses a run whose failures nothing reports, if it returns a boolean.

  Under a bare `tf.function(jit_compile=True)` the failed members'
  outputs are poisoned, which a boolean cannot be: False or True would be
  a plausible, wrong answer.

  Args:
    out: The run's outputs (a pattern of backend arrays).
    backend: The backend.
    loc: The `SourceLoc` of the user's function, or None.
    names: The names of the errors the run can meet
      (`RunStats.unreported`).

  Raises:
    BackendError: An output is boolean.
  """
  leaves = inst.pattern_flatten(out)
  if not any(backend.dtype(x) == np.bool_ for x in leaves):
    return
  name = loc.function if loc is not None else 'the batched function'
  raise errors.BackendError(
      f'{name}() returns a boolean and runs under a bare '
      f'tf.function(jit_compile=True), where a {" or ".join(names)} cannot '
      'raise: the members it stopped would return a plausible but wrong '
      'boolean', loc=loc,
      hint=f"Choose what a failure does: call {name}(..., "
      "on_error='status'), which returns (outputs, ok) with ok False for "
      'the members stopped; or compile with '
      'autobatch_vm.xla.compile_nested_output(f) (or ab.stage(f, '
      'jit_compile=True)), which raises the error after the call; or '
      'return the boolean as a number (tf.cast(x, tf.int32)), which is '
      'poisoned (the minimum) where a member failed.')


def warn_unreported(names):
  """Says, while tracing, that this XLA run cannot raise its errors.

  Args:
    names: The names of the errors (`RunStats.unreported`).
  """
  warnings.warn(
      f'autobatch_vm under tf.function(jit_compile=True): XLA cannot raise '
      f'at run time, so a {" or ".join(names)} in this batched run poisons '
      'the outputs of the members it stops (NaN for floats, the minimum '
      'for integers; a boolean has no such value and keeps one) instead '
      'of raising; the other members keep their '
      "values.  Pass on_error='status' to get (outputs, ok), or compile "
      'with autobatch_vm.xla.compile_nested_output(fn) to get the '
      'exception.', errors.XlaErrorsWarning,
      stacklevel=errors.user_stacklevel())


# The errors of per-member primitives' failures (`vm.errors.member_error`).
_MEMBER_MATH = frozenset({'PrimitiveError'})


def settle(out, stats, on_error, backend, loc):
  """A run's outputs, once the members that failed are known.

  Where members may have failed without raising (`stats.failed`), their
  outputs are poisoned (`backend.poison_members`).  A run whose errors
  nothing raises (`stats.unreported`) is refused if it returns a boolean
  (`refuse_unmarkable`), else it warns.

  Args:
    out: The run's outputs, a pattern of backend arrays.
    stats: The run's `RunStats`.
    on_error: `'raise'` or `'status'`.
    backend: The backend.
    loc: The `SourceLoc` of the user's function, or None.

  Returns:
    The outputs; with `'status'`, `(outputs, ok)`, `ok` True for the
    members that finished.
  """
  failed = stats.failed
  if stats.unreported:
    if set(stats.unreported) - _MEMBER_MATH:
      refuse_unmarkable(out, backend, loc, stats.unreported)
    # A per-member function's math failures alone (`int(nan)`, the
    # maximum of an empty slice) are possible in most such functions, a
    # boolean beside them too: they are not refused, which they never
    # were, and the warning says a boolean cannot be marked.
    warn_unreported(stats.unreported)
  if failed is not None:
    out = inst.pattern_map(lambda x: backend.poison_members(x, failed), out)
  if on_error != 'status':
    return out
  return out, backend.members_ok(failed, stats.batch_size)


def finished(out, backend):
  """`(out, ok)` of a run that raises any error: every member finished.

  Args:
    out: The run's outputs, a pattern of backend arrays.
    backend: The backend.

  Returns:
    `(out, ok)`, `ok` True for each member.
  """
  leaves = inst.pattern_flatten(out)
  batch = backend.shape(leaves[0])[0] if leaves else 0
  return out, backend.members_ok(None, batch)
