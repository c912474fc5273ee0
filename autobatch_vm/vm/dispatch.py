"""What the executors share about instructions: dispatch, unpacking a
primitive's result, casts, and flattening values by their type pattern.

The stack VM's closure compiler (`vm.closures`), its NumPy code generator
(`vm.codegen`) and the stackless executor (`vm.stackless`) all import
this module, and it imports none of them.
"""

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['dispatch', 'unpack', 'cast_args', 'flatten_like']


def dispatch(compiler, op):
  """Compiles instruction `op` by `compiler.prim`, `.push`, `.pop`, `.exit`.

  The closure compiler (`vm.closures`) and the NumPy generator
  (`vm.codegen`) both compile a lowered block's instructions by these
  four.

  Args:
    compiler: An object with methods `prim(op)`, `push(op)`,
      `pop(op, keep)` and `exit(op)`.
    op: A lowered instruction.

  Returns:
    What the compiler's method returns.

  Raises:
    InternalError: `op` is not a lowered instruction.
  """
  if isinstance(op, inst.PrimOp):
    return compiler.prim(op)
  if isinstance(op, inst.PushOp):
    return compiler.push(op)
  if isinstance(op, (inst.PopOp, inst.RestoreOp)):
    return compiler.pop(op, keep=isinstance(op, inst.RestoreOp))
  if isinstance(op, inst.ExitOp):
    return compiler.exit(op)
  if isinstance(op, inst.FunctionCallOp):
    raise errors.InternalError('FunctionCallOp reached the VM unlowered')
  raise errors.InternalError(f'Unknown instruction {op!r}')


def unpack(value, n):
  """`value` as a tuple of its `n` parts.

  Args:
    value: A primitive's result bound to a tuple of variables.
    n: The number of variables.

  Returns:
    The tuple.

  Raises:
    InternalError: `value` has another number of parts.
  """
  values = tuple(value)
  if len(values) != n:
    raise errors.InternalError(f'cannot unpack {len(values)} into {n}')
  return values


def primitive(op, backend):
  """The function that runs `PrimOp` `op` on `backend`'s batched arrays.

  Args:
    op: A `PrimOp`.
    backend: The backend that runs it.

  Returns:
    `op.function`, or for a per-member primitive its batched form on the
    backend (`Backend.vectorize_member`).
  """
  if op.per_member:
    return backend.vectorize_member(op.function)
  return op.function


def cast_args(op, args, backend):
  """`args` of `op` with its `casts` applied (for the stackless executor).

  Args:
    op: A `PrimOp`.
    args: Its arguments' values.
    backend: The backend that casts.

  Returns:
    The arguments, cast.
  """
  if not op.casts:
    return args
  args = list(args)
  for i, dtype in op.casts:
    args[i] = backend.cast_weak(args[i], dtype, weak_cast_place(op))
  return args


def weak_cast_place(op):
  """Where `op` casts a weak input, for `Backend.cast_weak`'s message.

  Args:
    op: A `PrimOp`.

  Returns:
    A string: ' in `text` (place)', or ''.
  """
  return f' in `{op.text}` ({op.loc})' if op.loc is not None else ''


def flatten_like(template, value):
  """Leaves of `value` following the structure of type pattern `template`.

  Args:
    template: A `TensorType` or a pattern (tuples, lists) of them.
    value: A value of that structure.

  Returns:
    The list of leaves.
  """
  if isinstance(template, inst.TensorType):
    return [value]
  values = tuple(value)
  if len(values) != len(template):
    raise errors.InternalError('value does not match its type pattern')
  out = []
  for t, v in zip(template, values):
    out.extend(flatten_like(t, v))
  return out
