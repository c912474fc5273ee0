"""The dry run: each batch member run alone, as plain Python.

`f(x, dry_run=True)` calls the user's Python function once per member, on
that member's arguments as a batch of one, and stacks the results as the
batched call does (`DryRuns.run`); a batched function it calls runs as
plain Python too, with the arguments the batched call gives one member
(`DryRuns.call`).  It is the reference that a batched run is checked
against, and a member can be debugged in it with Python's own tools.  Each
`Context` hands its dry runs to a `DryRuns` of its own.
"""

import threading
import weakref

import numpy as np

from autobatch_vm import call_arguments
from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import python_to_ir
from autobatch_vm.call_arguments import _PY_NUMBERS

__all__ = ['DryRuns']


class DryRuns:
  """The dry runs of one `Context`: which run, in each thread, and how.

  A batched function called while a dry run of its Context runs in this
  thread is itself run as plain Python (`active`, `call`).  The Python
  function a dry run calls for a batched function (the copy that
  `python_to_ir.dry_run_function` makes) is made once per batched
  function.
  """

  def __init__(self):
    self._local = threading.local()
    self._functions = weakref.WeakKeyDictionary()

  def active(self):
    """Tells whether a dry run of this Context runs in this thread.

    Returns:
      True inside a dry run, where a batched call runs as plain Python.
    """
    return self._depth() > 0

  def _depth(self):
    return getattr(self._local, 'depth', 0)

  def run(self, bf, args, batch, backend):
    """Runs `bf`'s plain Python function once per member (batches of one).

    The results are stacked as the batched call's are: each leaf gets the
    batch axis where a member returned it without one (a leaf whose shape
    is the per-member shape of the batched call's result type; one of
    shape `[1, *that]` is already a batch of one), and is cast to that
    type's dtype.  An empty batch gives empty arrays of that type.  Where
    the result type cannot be found (the batched call fails to compile,
    e.g. over a `print`), a scalar gets the batch axis and anything else
    is taken as a batch of one.

    Args:
      bf: The `BatchedFunction`.
      args: Its arguments, converted (`call_arguments.convert_arguments`).
      batch: Their batch size.
      backend: The backend of the arrays.

    Returns:
      The members' results, stacked.

    Raises:
      ArgumentError: If the batch is empty and the result type unknown.
    """
    program = _typed_or_none(bf, args, backend)
    result_type = (None if program is None else
                   program.main_function.var_defs[python_to_ir.RETURN_VAR]
                   .tensors)
    run = self._python_function(bf)
    results = []
    outer = getattr(self._local, 'program', None)
    self._local.depth = self._depth() + 1
    self._local.program = (program, backend, {})
    try:
      for i in range(batch):
        # A copy: the member's code may update a variable in place
        # (`a += 1` on an array), which must not write through to the
        # caller's arguments.
        member = [inst.pattern_map(lambda x: _own(backend.slice(x, i)), a)
                  for a in args]
        results.append(run(*member))
    finally:
      self._local.depth -= 1
      self._local.program = outer
    if not results:
      if result_type is None:
        raise errors.ArgumentError(
            f'dry run of {bf.name}() on an empty batch: the result type is '
            'unknown', loc=bf.context.function_loc(bf.name),
            hint='The batched call on the same arguments says why.')
      return inst.pattern_map(lambda t: backend.zeros(t, 0), result_type,
                              inst.TensorType)
    types_ = (inst.pattern_flatten(result_type, inst.TensorType)
              if result_type is not None else None)
    leaves = [inst.pattern_flatten(r) for r in results]
    if types_ is not None and any(len(l) != len(types_) for l in leaves):
      types_ = None
    columns = list(zip(*leaves))
    merged = []
    for k, column in enumerate(columns):
      t = types_[k] if types_ is not None else None
      merged.append(backend.concat([_member_rows(backend, x, t)
                                    for x in column]))
    return inst.pattern_unflatten(results[0], merged)

  def call(self, bf, args, kwargs):
    """Runs a call of batched function `bf` inside a dry run, as plain Python.

    The callee gets the arguments that the batched call gives one member.
    There a callee's parameters are per-member values, as at the top
    level: each argument leaf becomes a batch of one of its parameter's
    type in the batched program (`_argument_types`), so that a literal
    `f(v, 1)` is `array([1])` (not `1`) and a constant `np.zeros(3)` gets
    the batch axis.  Where the program does not
    compile, a scalar leaf becomes a batch of one of its own dtype.

    Args:
      bf: The called `BatchedFunction`.
      args: The call's positional arguments.
      kwargs: Its keyword arguments.

    Returns:
      What the callee's Python returns.

    Raises:
      ArgumentError: If the arguments do not bind to its parameters.
    """
    args = bf.bind_arguments(args, kwargs)
    program, backend, known = self._local.program
    if bf.name not in known:   # once per function and dry run
      known[bf.name] = None
      if program is not None and any(
          f.name == bf.name for f in program.functions):
        known[bf.name] = _argument_types(program.function(bf.name))
    types_ = known[bf.name]
    converted = []
    for k, a in enumerate(args):
      t = types_[k] if types_ is not None else None
      try:
        converted.append(inst.pattern_map2(
            lambda x, tt: _member_rows(backend, x, tt), a, t,
            inst.TensorType) if t is not None else
                         call_arguments.map_arguments(
                             lambda x: _member_rows(backend, x, None), a))
      except Exception:  # pylint: disable=broad-except
        # Not of the parameter's structure (the batched call would have
        # refused it): as written, for the callee to fail on as Python.
        converted.append(a)
    return self._python_function(bf)(*converted)

  def _python_function(self, bf):
    """The Python function a dry run calls for `bf` (see
    `python_to_ir.dry_run_function`), made once."""
    fn = self._functions.get(bf)
    if fn is None:
      try:
        fn = python_to_ir.dry_run_function(bf.python_function)
      except errors.AutoBatchError:
        fn = bf.python_function  # no readable source: run it as it is
      self._functions[bf] = fn
    return fn


def _typed_or_none(bf, args, backend):
  """The typed program of `bf` on converted `args`, as the batched
  call has it; None where the program does not compile."""
  try:
    return bf.context.program_compiled(
        bf.name, call_arguments.argument_types(args, backend), backend)
  except errors.AutoBatchError:
    return None


def _own(x):
  """`x`, copied if it is a NumPy array (a view of the caller's data)."""
  return x.copy() if isinstance(x, np.ndarray) else x


def _argument_types(fn):
  """The type each parameter of typed `Function` `fn` has for one member
  in the batched call, as a dry run gives it to the member.

  That is the parameter's type, except for a literal (a weak parameter,
  `f(v, 1)`), which the batched call keeps in its default dtype (int64,
  float64) and casts, where it meets a typed array, to the dtype a Python
  number would take there (`PrimOp.casts`): the dtype its uses agree on,
  else its own.
  """
  out = []
  for p in fn.vars_in:
    t = fn.var_defs[p].tensors
    if isinstance(t, inst.TensorType):
      seen = set()
      for block in fn.blocks:
        for op in block.instructions:
          if not isinstance(op, inst.PrimOp) or op.function is inst.identity:
            continue
          casts = dict(op.casts)
          seen.update(np.dtype(casts.get(i, t.dtype))
                      for i, v in enumerate(op.vars_in) if v == p)
      if len(seen) == 1:
        t = inst.TensorType(seen.pop(), t.shape)
    out.append(t)
  return out


def _member_rows(backend, x, tensor_type):
  """One member's result leaf `x` as a batch of one of `tensor_type`
  (None: unknown; then a scalar gets the batch axis)."""
  if tensor_type is None:
    v = backend.asarray(x)
    return v if len(backend.shape(v)) else backend.expand(v)
  if type(x) in _PY_NUMBERS:  # a literal: the type's dtype, as batched
    x = np.asarray(x, tensor_type.dtype)
  v = backend.asarray(x)
  shape = tuple(backend.shape(v))
  if shape == tuple(tensor_type.shape):
    v = backend.expand(v)  # the member's value: give it the batch axis
  elif shape != (1,) + tuple(tensor_type.shape) and not shape:
    v = backend.expand(v)  # not the batched call's type: a scalar is one row
  if backend.dtype(v) != np.dtype(tensor_type.dtype):
    v = backend.cast(v, tensor_type.dtype)
  return v
