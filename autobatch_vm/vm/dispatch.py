"""What the executors share about instructions: dispatch, unpacking a
primitive's result, casts, and flattening values by their type pattern.

The stack VM's closure compiler (`vm.closures`), its NumPy code generator
(`vm.codegen`) and the stackless executor (`vm.stackless`) all import
this module, and it imports none of them.
"""

from autobatch_vm import errors
from autobatch_vm import instructions as inst

__all__ = ['dispatch', 'unpack', 'cast_args', 'flatten_like']


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
