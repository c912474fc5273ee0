"""Sizes computed in a per-member function, folded into constants.

In a per-member function a member's shapes are fixed for a signature, so
`n = len(x)` (or `x.shape[0]`, `x.ndim`, `x.size`, and integer arithmetic
on such values: `python.member_sizes`) is one Python int for every member
and every call.  Batched, `n` would be an array with a value per member,
and `np.zeros(n)` could not know its shape; so type inference, which
learns `x`'s type, folds `n` into a constant for the signature:

- a variable written once in its function, by such a primitive whose
  inputs are read only through their shapes or are constants themselves,
  is a constant: the primitive is run once on one member's made-up
  values of the inputs' types (a size reads no values);
- every per-member primitive of that function that reads a constant gets
  it as a Python int in place of the batched value
  (`PerMemberFunction.with_constants`), as the member's own code does.

A size that differs between members (a function argument `n`, a value
read from the data) is not folded; an array of that size is refused at
its line, with the advice to pad (`per_member.numpy_rules`).

`SizeFolding` keeps what type inference has learned; the program it
returns holds the rewritten primitives.
"""

import dataclasses

import numpy as np

from autobatch_vm.ir import instructions as inst

__all__ = ['SizeFolding']


class SizeFolding:
  """The constants of a program's per-member functions, as types are learned.

  Args:
    program: The untyped `Program`.

  Attributes:
    constants: `(function name, variable)` -> its value, a Python int.
  """

  def __init__(self, program):
    self.constants = {}
    self._written_once = {f.name: _written_once(f) for f in program.functions}
    self._bound = {}

  def learn(self, fn, op, in_types):
    """Records `op`'s output as a constant where it is a size.

    Args:
      fn: The `Function` holding `op`.
      op: An instruction, as the frontend made it.
      in_types: The types of its inputs so far (None where unknown).
    """
    if not (isinstance(op, inst.PrimOp) and op.per_member and
            getattr(op.function, 'sizes', None) is not None and
            op.vars_out in self._written_once[fn.name] and
            (fn.name, op.vars_out) not in self.constants):
      return
    args = []
    for v, t, role in zip(op.vars_in, in_types, op.function.sizes):
      if role == 'value':
        if (fn.name, v) not in self.constants:
          return
        args.append(self.constants[(fn.name, v)])
      elif t is None:
        return
      else:
        args.append(inst.pattern_map(
            lambda l: np.zeros(l.shape, l.dtype), t, inst.TensorType))
    try:
      value = op.function.member_function(*args)
    except Exception:  # pylint: disable=broad-except
      return   # not folded: run per member, as any other primitive
    if type(value) is int:  # pylint: disable=unidiomatic-typecheck
      self.constants[(fn.name, op.vars_out)] = value

  def bound(self, fn, op):
    """`op`, given the constants it reads.

    Args:
      fn: The `Function` holding `op`.
      op: An instruction, as the frontend made it.

    Returns:
      `op` itself, or for a per-member primitive that reads constants a
      `PrimOp` whose function gets them as Python ints (the same object
      while the constants are the same).
    """
    if not (isinstance(op, inst.PrimOp) and op.per_member):
      return op
    given = tuple((k, self.constants[(fn.name, v)])
                  for k, v in enumerate(op.vars_in)
                  if (fn.name, v) in self.constants)
    if not given:
      return op
    key = (id(op), given)
    if key not in self._bound:
      self._bound[key] = (op, dataclasses.replace(
          op, function=op.function.with_constants(dict(given))))
    return self._bound[key][1]


def _written_once(fn):
  """The variables of `fn` that one instruction writes, once, and that
  are not its parameters."""
  counts = {}
  for block in fn.blocks:
    for op in block.instructions:
      outs = getattr(op, 'vars_out', None)
      if outs is None:
        continue
      for v in inst.pattern_flatten(outs):
        counts[v] = counts.get(v, 0) + 1
  return {v for v, n in counts.items()
          if n == 1 and v not in fn.vars_in}
