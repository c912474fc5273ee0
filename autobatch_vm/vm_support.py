"""What the executors share: instruction dispatch, result unpacking and
casts, and the errors a run raises.

The stack VM's closure compiler (`virtual_machine`), its NumPy code
generator (`block_codegen`) and the stackless executor (`stackless`) all
import this module, and it imports none of them, so the executors depend
on it one way.
"""

from autobatch_vm import errors
from autobatch_vm import instructions as inst

__all__ = ['dispatch', 'unpack', 'cast_args', 'flatten_like',
           'step_limit_error', 'saving_what', 'defining_text', 'overflow',
           'retry_on_live_data', 'result_shape_error', 'primitive_error']


def dispatch(compiler, op):
  """`compiler.prim`, `.push` or `.pop` for instruction `op` (the closure
  compiler here and the NumPy generator, `block_codegen`, both compile a
  lowered block's instructions by these three)."""
  if isinstance(op, inst.PrimOp):
    return compiler.prim(op)
  if isinstance(op, inst.PushOp):
    return compiler.push(op)
  if isinstance(op, (inst.PopOp, inst.RestoreOp)):
    return compiler.pop(op, keep=isinstance(op, inst.RestoreOp))
  if isinstance(op, inst.FunctionCallOp):
    raise errors.InternalError('FunctionCallOp reached the VM unlowered')
  raise errors.InternalError(f'Unknown instruction {op!r}')


def unpack(value, n):
  """`value` as a tuple of its `n` parts (a primitive's result bound to a
  tuple of variables)."""
  values = tuple(value)
  if len(values) != n:
    raise errors.InternalError(f'cannot unpack {len(values)} into {n}')
  return values


def cast_args(op, args, backend):
  """`args` of `op` with its `casts` applied (for the stackless executor)."""
  if not op.casts:
    return args
  args = list(args)
  for i, dtype in op.casts:
    args[i] = backend.cast(args[i], dtype)
  return args


def flatten_like(template, value):
  """Leaves of `value` following the structure of type pattern `template`."""
  if isinstance(template, inst.TensorType):
    return [value]
  values = tuple(value)
  if len(values) != len(template):
    raise errors.InternalError('value does not match its type pattern')
  out = []
  for t, v in zip(template, values):
    out.extend(flatten_like(t, v))
  return out


def step_limit_error(max_steps, members, loc, where):
  """The `StepLimitError` for `members` (`where`: how `loc` relates)."""
  members = errors.member_indices(members)
  return errors.StepLimitError(
      f'Not finished after max_steps={max_steps} VM steps for batch '
      f'members {members}{where}', loc=loc,
      hint='Pass a larger max_steps= (or None for no limit), or check '
      'that every loop and recursion terminates for these members '
      '(fn(..., profile=True) shows which blocks run most).')


def saving_what(program, names):
  """What a push of variables `names` of lowered `program` saves, in the
  user's terms, for a stack overflow's message: a variable by its name in
  the user's function, a temporary by the expression that computed it."""
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
  """The source text of the primitive that computes `var`, if one does
  and its text is the user's (not a copy between temporaries)."""
  for block in program.blocks:
    for op in block.instructions:
      if (isinstance(op, inst.PrimOp) and op.text and '%' not in op.text
          and var in inst.pattern_flatten(op.vars_out)):
        return op.text
  return None


def overflow(what, loc, depth):
  def make(members):
    members = errors.member_indices(members)
    return errors.StackOverflowError(
        f'Recursion deeper than max_stack_depth={depth} ({what}) '
        f'for batch members {members}', loc=loc,
        hint=f'Pass a larger max_stack_depth= (e.g. {depth * 2}) to the '
        'batched function, or check that the recursion terminates.')
  return make


def retry_on_live_data(error, op, args, backend, m, compacted=False):
  """Re-runs a primitive that raised, with leftover lanes made harmless.

  Members not at the block still flow through the primitive with leftover
  data (e.g. an out-of-range index).  Their results are discarded anyway,
  so the primitive is re-run with their inputs replaced by a live member's;
  if it still raises, the error is the live members' and is reported.
  With `compacted` arguments (rows of live members only) it is at once.
  """
  if not (getattr(m, 'full', True) or backend.staged or compacted):
    fill = backend.fill_inactive
    clean = [inst.pattern_map(lambda x: fill(x, m), a) for a in args]
    try:
      return op.function(*clean)
    except Exception:  # pylint: disable=broad-except
      pass
  raise primitive_error(error, op, backend.members(m), compacted) from error


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


def primitive_error(e, op, members, compacted=False):
  members = errors.member_indices(members) if members is not None else None
  if isinstance(e, AssertionError):
    return errors.AssertionFailedError(
        f'Assertion failed for batch members {members}: {e}', loc=op.loc)
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
  return errors.PrimitiveError(
      f'{type(e).__name__} in `{text}`{who}: {e}', loc=op.loc,
      hint=('The primitive is called on the rows of the members at this '
            'block (leading dimension = their number).' if compacted else
            'The primitive is called on whole batched arrays (leading '
            'dimension = batch); members not at this block carry leftover '
            'data.'))
