"""The errors a run raises, built with the user's terms and lines.

Every executor (the closure compiler, the NumPy code generator, the
stackless executor) and the TensorFlow backend's parked members report
through these builders, so a failure reads the same on every path.
"""

import collections
import dataclasses
import functools

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.per_member import member_math
from autobatch_vm.per_member import member_ops

__all__ = ['step_limit_error', 'step_limit', 'enclosing_loops',
           'saving_what', 'defining_text',
           'overflow', 'primitive_failure', 'result_shape_error',
           'primitive_error']


def step_limit_error(max_steps, members, loc, where):
  """The `StepLimitError` for `members`.

  Args:
    max_steps: The limit.
    members: The members not finished.
    loc: The source location the error names.
    where: How `loc` relates to the members, appended to the message.

  Returns:
    The error.
  """
  shown = errors.member_indices(members)
  return errors.StepLimitError(
      f'Not finished after max_steps={max_steps} VM steps for batch '
      f'members {shown}{where}', loc=loc,
      hint='Pass a larger max_steps= (or None for no limit), or check '
      'that every loop and recursion terminates for these members '
      '(fn(..., profile=True) shows which blocks run most).',
      members=members)


def saving_what(program, names):
  """What a push saves, in the user's terms, for a stack overflow's message.

  A variable is named as in the user's function, a temporary by the
  expression that computed it.

  Args:
    program: The `LoweredProgram`.
    names: The variables the push saves.

  Returns:
    The text, `'saving ...'`.
  """
  parts = []
  for var in names:
    _, dot, local = var.partition('.')
    local = local if dot else var
    if not local.startswith('%'):
      parts.append(f'variable {local!r}')
      continue
    text = defining_text(program, var)
    parts.append(f'the value of `{text}`' if text else
                 'an intermediate value')
  return 'saving ' + ', '.join(parts)


def defining_text(program, var):
  """The source text of the primitive that computes `var`.

  Args:
    program: The `LoweredProgram`.
    var: A variable.

  Returns:
    The text, if a primitive computes `var` and its text is the user's
    (not a copy between temporaries); else None.
  """
  for block in program.blocks:
    for op in block.instructions:
      if (isinstance(op, inst.PrimOp) and op.text and '%' not in op.text
          and var in inst.pattern_flatten(op.vars_out)):
        return op.text
  return None


def overflow(what, loc, depth):
  """A maker of the `StackOverflowError` of one push.

  Args:
    what: What the push saves (`saving_what`, or the call stack).
    loc: The source location of the push.
    depth: `max_stack_depth`.

  Returns:
    `make(members)`, the error for the members that overflowed.
  """
  def make(members):
    return errors.StackOverflowError(
        f'Recursion deeper than max_stack_depth={depth} ({what}) '
        f'for batch members {errors.member_indices(members)}', loc=loc,
        hint=f'Pass a larger max_stack_depth= (e.g. {depth * 2}) to the '
        'batched function, or check that the recursion terminates.',
        members=members)
  return make


def primitive_failure(error, op, backend, m, compacted=False):
  """The error for a primitive that raised, naming the members it ran for.

  A primitive never runs for leftover data here: on a compacting backend
  it gets the rows of the members at the block only, and a backend that
  runs it on the whole batch (`sanitizes`) fills the other lanes from a
  member at the block first.  So what it raised is the members' own
  failure.

  Args:
    error: The exception the primitive raised.
    op: The `PrimOp`.
    backend: The backend (its `members(m)` names the members).
    m: The mask of the members at the block.
    compacted: Whether the primitive got the members' rows only.

  Returns:
    The `AutoBatchError` to raise from `error`.
  """
  members = backend.members(m)
  if isinstance(error, member_math.MemberFailure):
    failing = _failing_members(error.rows, backend, m)
    return member_error(error.kind, op,
                        failing if failing is not None else members,
                        str(error) if error.kind == 'index' else None)
  messages = None
  if (isinstance(error, errors.FailedAssertion) and
      error.message is not None and members is not None):
    messages = _assert_messages(error, backend, m, compacted)
  return primitive_error(error, op, members, compacted, messages)


# The most failing members whose own assertion messages an error shows.
_MESSAGES_SHOWN = 3


def _failing_members(rows, backend, m):
  """The members of rows `rows` of the arrays a primitive got on NumPy
  (the rows of the members at the block, in order), or None where
  unknown."""
  if rows is None or m is None:
    return None
  row_members = getattr(backend, 'row_members', None)
  owners = np.asarray(row_members(m) if row_members is not None else m.idx,
                      np.int64)
  rows = np.asarray(rows, np.int64)
  if rows.size and rows.max() >= owners.size:
    return None
  return np.unique(owners[rows])


def _assert_messages(error, backend, m, compacted):
  """A failed assert's message, computed for its first failing members.

  Args:
    error: The `errors.FailedAssertion`.
    backend: The backend (or a stackless frame's view of it, whose
      `row_members(m)` names the member of each row of `m`).
    m: The mask of the members at the block (all failing it).
    compacted: Whether the primitive got the members' rows only.

  Returns:
    `(shown, count)`: `(member, message)` for up to `_MESSAGES_SHOWN`
    members, lowest first, and the number of failing members.
  """
  idx = np.asarray(m.idx, np.int64)
  row_members = getattr(backend, 'row_members', None)
  owners = np.asarray(row_members(m) if row_members is not None else idx)
  rows = np.arange(idx.size) if compacted else idx
  # Each failing member once, lowest first, with its first row.
  members, first = np.unique(owners, return_index=True)
  shown = [(int(member), error.member_message(int(rows[k])))
           for member, k in zip(members[:_MESSAGES_SHOWN],
                                first[:_MESSAGES_SHOWN])]
  return shown, members.size


def _shown_messages(messages):
  """The text of `_assert_messages`' result: one message where the shown
  members' messages agree, else each with its member."""
  shown, count = messages
  texts = {text for _, text in shown}
  if len(texts) == 1 and count == len(shown):
    return shown[0][1]
  text = '; '.join(f'member {member}: {msg}' for member, msg in shown)
  if count > len(shown):
    text += f'; and {count - len(shown)} more'
  return text


def _user_variables(pattern):
  """Variables `pattern` as the user's function names them: its variables
  by name; the result and temporaries by what they are."""
  names = []
  for var in inst.pattern_flatten(pattern):
    _, dot, local = var.partition('.')
    local = local if dot else var
    names.append('the result' if local == inst.RETURN_VAR else
                 'its value' if local.startswith('%') else
                 f'variable {local!r}')
  return ', '.join(dict.fromkeys(names)) or 'its variables'


def result_shape_error(e, op, backend, m):
  """The error for a primitive's result that does not fit its variables.

  Args:
    e: The `ValueError` coercing the result raised.
    op: The `PrimOp`.
    backend: The backend (named in the hint).
    m: The mask of the members at the block.

  Returns:
    The `PrimitiveError`.
  """
  text = op.text or getattr(op.function, '__name__', '?')
  rows = getattr(m, 'count', None)
  return errors.PrimitiveError(
      f'`{text}` returned a value that does not fit '
      f'{_user_variables(op.vars_out)} ({e})', loc=op.loc,
      hint=(f'On {backend.name} a primitive gets arrays with one row per '
            f'member at this block (here {rows}); it must return one row '
            'per input row. Axis 0 is the batch: slice, index and reduce '
            'along the later axes (`x[:, :1]`, `axis=-1`), and pass '
            'per-member data as an argument of the batched function '
            'instead of closing over a batch-sized array.'))


def primitive_error(e, op, members, compacted=False, messages=None):
  """The error for a primitive that raised `e`, naming `members`.

  Args:
    e: The exception.
    op: The `PrimOp`.
    members: The members at the block, or None if unknown (in a graph).
    compacted: Whether the primitive got the members' rows only.
    messages: For a failed assert whose message is computed, the messages
      of its first failing members (`_assert_messages`), else None.

  Returns:
    An `AssertionFailedError` for a failed assert, else a
    `PrimitiveError`.
  """
  failing = members
  members = errors.member_indices(members) if members is not None else None
  e = errors.scalar_conversion_error(e)
  if isinstance(e, AssertionError):
    detail = _shown_messages(messages) if messages is not None else e
    return errors.AssertionFailedError(
        f'Assertion failed for batch members {members}: {detail}',
        loc=op.loc, members=failing)
  if isinstance(e, errors.HelperAssertionError):
    # The helper ran on whole arrays: which of these members failed it,
    # only the helper knows.
    return errors.AssertionFailedError(
        f'Assertion failed, for some of batch members {members}: {e}',
        loc=op.loc, hint='The called function runs on the arrays of every '
        'member at this line at once; run the batched function with '
        'dry_run=True to see which members fail it.')
  text = op.text or getattr(op.function, '__name__', '?')
  who = f' (members at this block: {members})' if members is not None else ''
  if getattr(op, 'per_member', False):
    hint = ('The statement is written for one member (per_member=True) '
            'and runs on every member at this block at once: call the '
            'batched function with dry_run=True to run each member alone, '
            'as plain Python, and see where it fails.')
  elif compacted:
    hint = ('The primitive is called on the rows of the members at this '
            'block (leading dimension = their number).')
  else:
    hint = ('The primitive is called on whole batched arrays (leading '
            'dimension = batch); members not at this block carry leftover '
            'data.')
  if isinstance(e, ValueError) and _ARRAY_TRUTH in str(e):
    # Type inference ran it at batch size 1, where an array of one
    # element has a truth value.
    hint += ("  Python's min(), max(), `and`, `or`, `not` and `x if c "
             "else y` inside it ask an array for one truth value: use "
             'np.minimum, np.maximum, np.logical_and or np.where, which '
             'work per element, or write the condition as a statement of '
             'the batched function, where it is per member.')
  return errors.PrimitiveError(
      f'{type(e).__name__} in `{text}`{who}: {e}', loc=op.loc, hint=hint)


# What to do about the failures of slices whose bounds differ between
# members (`per_member.ragged`), by kind.
_SLICE_HINTS = {
    'empty_reduction': 'Their slice has no items: guard the statement '
                       '(if hi > lo: ...), or take the extreme over the '
                       'whole array, masked (np.max(np.where(inside, v, '
                       '-np.inf))).',
    'empty_sequence': 'Their slice has no items: guard the statement (if '
                      'hi > lo: ...), or give max() a default.',
    'empty_points': 'Their slice of points has no items: guard the '
                    'statement (if n > 0: ...).',
    'slices_differ': 'Slices combined item by item must have one length '
                     'in each member (v[lo:hi] * w[lo + 1:hi + 1]).',
}


def member_error(kind, op, members, detail=None):
  """The error of members for which per-member primitive `op` fails as
  Python would for them: an item index out of range (`'index'`), or a
  failure of `member_math.FAILURES` (a math domain error ...).

  Args:
    kind: `'index'` or a key of `member_math.FAILURES`.
    op: The `PrimOp`.
    members: The members, or None where unknown (in a graph).
    detail: For `'index'`, NumPy's message where known, or None.

  Returns:
    A `PrimitiveError`.
  """
  who = ('some batch members' if members is None else
         f'batch members {errors.member_indices(members)}')
  text = op.text or getattr(op.function, '__name__', '?')
  if kind == 'index':
    return errors.PrimitiveError(
        f'IndexError in `{text}` for {who}: ' + (
            detail or 'an item index is out of range of the axis it '
            'indexes'), loc=op.loc, members=members,
        hint='Python raises IndexError here for these members (a dry run, '
        'dry_run=True, shows each alone).  An item is read only where '
        'Python reads it: in the right operand of `and` or `or`, or in a '
        'side of `x if c else y`, only where the condition lets Python '
        'evaluate it.')
  if kind == 'window':
    return errors.PerMemberError(
        f'`{text}` slices a window whose bounds differ between members '
        f'(v[j:j + 3]), and for {who} it does not lie within its axis: '
        'Python gives them a shorter slice there (or counts a negative '
        'start from the end), a length other members\' windows do not '
        'have', loc=op.loc, members=members,
        hint='Keep each window within the array '
        '(np.clip the start to len(v) - 3), or pad the array by the '
        "window's length.")
  name, message = member_math.FAILURES[kind]
  if kind == 'pow_mod_range':
    return errors.PrimitiveError(
        f'{name} in `{text}` for {who}: {message}', loc=op.loc,
        members=members,
        hint='Python computes it with its unbounded ints; a batch holds '
        'int64s and is exact for moduli up to 2**52.  Compute these '
        'members outside the batched function, or reduce the modulus.')
  return errors.PrimitiveError(
      f'{name} in `{text}` for {who}: {message}', loc=op.loc,
      members=members,
      hint=f'Python raises {name} here for these members (a dry run, '
      'dry_run=True, shows each alone)' + _FAILURE_HINTS.get(
          kind, _MATH_HINT))


# Why Python raises, per kind of `member_math.FAILURES` (`member_error`).
_FAILURE_HINTS = {
    kind: '.  ' + hint for kind, hint in _SLICE_HINTS.items()}
_FAILURE_HINTS['none'] = (
    ': a local they read was assigned None (x = None) and no value after '
    'it on the path they took.  Test `x is None` before using it (a read '
    'in the right operand of `x is None or ...` is made only where it is '
    'not None), or give it a value on every path.')
_MATH_HINT = (
    ': an argument outside the '
    'function\'s domain (math.sqrt or math.log of a negative number, '
    'math.log(0.0), math.acos(2.0)), a result too large for a float '
    '(math.exp(1000.0)), or a NaN or an infinity made an integer.  A '
    'call is checked only where Python makes it: in the right operand '
    'of `and` or `or`, or in a side of `x if c else y`, only where the '
    'condition lets Python evaluate it.')


def reporting_member_errors(op, backend, m, call):
  """`call()`, the run of per-member primitive `op` on a backend whose
  vectorized primitives report the members that fail as in Python
  (`Backend.reports_out_of_range`): an item index out of range, a math
  domain error.  The members of `m` reported fail with `member_error`
  (`Backend.fail_members`).

  Args:
    op: The `PrimOp`.
    backend: The backend.
    m: The mask of the members at the block.
    call: Runs the primitive; returns its result.

  Returns:
    The result.
  """
  with member_ops.out_of_range_reports() as reports:
    result = call()
  by_kind = {}
  for report in reports:
    for kind, flags in report.items():
      by_kind.setdefault(kind, []).append(flags)
  for kind in sorted(by_kind, key=lambda k: (k != 'index', k)):
    backend.fail_members(by_kind[kind], m,
                         functools.partial(member_error, kind, op), kind)
  return result


# NumPy's message for `bool(array)` of more than one element.
_ARRAY_TRUTH = 'truth value of an array with more than one element'


def step_limit(program, max_steps):
  """A maker of the `StepLimitError`s of a run of `program`.

  Args:
    program: The `LoweredProgram`.
    max_steps: The run's step limit.

  Returns:
    `make(members, block=None, loop=None, pcs=None)`: the error for the
    members not finished, naming `loop`, the `SourceLoc` of the loop they
    are in (a staged run, which parks them by loop: `make.loops()` is
    `enclosing_loops(program)`); or given `block`, the block due next,
    and `pcs`, every member's PC: the loop of the block due next, else
    the loop holding the most of them, and the members in it, or where
    none is in a loop the line of `block`; with neither, the program's
    first line.
  """
  return _StepLimit(program, max_steps)


class _StepLimit:
  """`step_limit`'s maker: made on every run, it reads the program only
  when an error is made or a staged run is traced."""

  def __init__(self, program, max_steps):
    self.program = program
    self.max_steps = max_steps

  def __call__(self, members, block=None, loop=None, pcs=None):
    if loop is None and block is not None and pcs is not None:
      loop, members = self._loop_of(members, block, pcs)
    if loop is not None:
      return step_limit_error(self.max_steps, members, loop,
                              '; they are in the loop (or recursion) at '
                              'this line')
    blocks = self.program.blocks
    if block is None:   # staged: where each member is is not known
      return step_limit_error(self.max_steps, members, blocks[0].loc,
                              ' (started here)')
    return step_limit_error(self.max_steps, members, blocks[block].loc,
                            '; the block due next is at this line')

  def loops(self):
    return enclosing_loops(self.program)

  def _loop_of(self, members, block, pcs):
    """The loop to name for `members` at `pcs`, and the members in it."""
    loops = self.loops()
    of = [loops[p] if p < len(loops) else None for p in pcs[members]]
    loop = loops[block]
    if loop is None:
      counts = collections.Counter(l for l in of if l is not None)
      loop = counts.most_common(1)[0][0] if counts else None
    if loop is None:
      return None, members
    return loop, [m for m, l in zip(members, of) if l == loop]


def enclosing_loops(program):
  """The loop or recursion each block of `program` runs in, if any.

  Blocks go to the blocks their terminators name (a call to the callee's
  entry and to the block it returns to; a return nowhere) and to their
  exits' targets (`ExitOp`).  An edge back
  to a block at or before its source that reaches the source again closes
  a loop (a `while`, a `for`, or a recursive call); its body is what
  reaches the edge's source from the target without leaving the cycle.
  A block runs in the smallest body holding it, named by the line of the
  edge's terminator: the loop's condition, or the recursive call.  A
  staged run's step limit names it for the members still in it.

  Args:
    program: A `LoweredProgram`.

  Returns:
    A list with, per block, the `SourceLoc` of its innermost loop, or
    None for a block in no loop.
  """
  index = program.block_index()
  succ = []
  edge_loc = {}   # (u, h) -> the line of an exit's edge
  for u, b in enumerate(program.blocks):
    t = b.terminator
    targets = set()
    if dataclasses.is_dataclass(t):
      for field in dataclasses.fields(t):
        value = getattr(t, field.name)
        if isinstance(value, str) and value in index:
          targets.add(index[value])
    for op in b.instructions:
      if isinstance(op, inst.ExitOp):
        h = index[op.block]
        if h not in targets:
          targets.add(h)
          edge_loc[(u, h)] = op.loc
    succ.append(sorted(targets))
  pred = [[] for _ in succ]
  for u, targets in enumerate(succ):
    for h in targets:
      pred[h].append(u)

  reach = {}

  def reached_from(h):
    if h not in reach:
      seen, todo = set(), list(succ[h])
      while todo:
        j = todo.pop()
        if j not in seen:
          seen.add(j)
          todo.extend(succ[j])
      reach[h] = seen
    return reach[h]

  loops = []    # (body, loc)
  for u, targets in enumerate(succ):
    for h in targets:
      if h > u or u not in reached_from(h):
        continue
      body, todo = {h}, [u]
      while todo:
        v = todo.pop()
        if v not in body and v in reached_from(h):
          body.add(v)
          todo.extend(pred[v])
      loc = (edge_loc.get((u, h)) or
             getattr(program.blocks[u].terminator, 'loc', None) or
             program.blocks[u].loc or program.blocks[h].loc)
      if loc is not None:
        loops.append((body, loc))
  out = []
  for b in range(len(succ)):
    holding = [(len(body), k) for k, (body, _) in enumerate(loops)
               if b in body]
    out.append(loops[min(holding)[1]][1] if holding else None)
  return out
