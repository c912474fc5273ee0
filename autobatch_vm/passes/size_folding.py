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
- a parameter is a constant where every call of its function in the
  program passes a constant, the same one (`helper(len(x))`): one
  signature per function, so a size flows into a callee as it does into
  a later statement;
- the result of a call is a constant where the callee's result is (a
  function whose one `return` gives a size: `n = width(x)`);
- every per-member primitive that reads a constant gets it as a Python
  int in place of the batched value (`PerMemberFunction.with_constants`),
  as the member's own code does.

While types are still being learned, a parameter is taken as a constant
from the calls whose arguments are known to be constants so far (another
caller may not have been walked yet); the program returned holds only
what every call agrees on (`settle`), so a size that turns out to differ
between calls is refused when the primitive runs, as any other.

A size that differs between members (an argument of the user's call, a
value read from the data, a parameter that calls pass different sizes or
a per-member value) is not folded; an array of that size is refused at
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
    constants: `(function name, variable)` -> its value, a Python int:
      the variables a size primitive writes (parameters and calls'
      results are derived from these, `constant`).
  """

  def __init__(self, program):
    self.constants = {}
    self._written_once = {f.name: _written_once(f) for f in program.functions}
    # The entry's parameters are the user's arguments: never constants.
    self._params = {f.name: tuple(f.vars_in) for f in program.functions
                    if f.name != program.main_function.name}
    # Callee -> `(caller, argument variables)` per call in the program;
    # `(function, variable)` -> the callee whose result a call writes.
    self._calls = {f.name: [] for f in program.functions}
    self._results = {}
    for f in program.functions:
      for block in f.blocks:
        for op in block.instructions:
          if isinstance(op, inst.FunctionCallOp) and op.function in (
              self._calls):
            self._calls[op.function].append((f.name, op.vars_in))
            if isinstance(op.vars_out, str):
              self._results[(f.name, op.vars_out)] = op.function
    # `(function, variable)` -> the keys a learned constant was computed
    # from (`value` inputs), checked again when settled.
    self._reads = {}
    self._settled = False
    self._bound = {}

  def constant(self, name, v, seen=frozenset()):
    """The Python int that variable `v` of function `name` holds for every
    member, or None.

    Args:
      name: The function's name.
      v: The variable.
      seen: Keys being derived (a cycle of calls gives None).

    Returns:
      A learned size; a parameter's, where the calls of the function
      pass the same constant (every call once settled, else every call
      known so far); a call's result, where the callee's result is one.
    """
    key = (name, v)
    if key in seen:
      return None
    seen = seen | {key}
    if key in self.constants:
      if self._settled and any(self.constant(*k, seen=seen) is None
                               for k in self._reads.get(key, ())):
        return None
      return self.constants[key]
    if key in self._results:
      if v not in self._written_once[name]:
        return None
      return self.constant(self._results[key], inst.RETURN_VAR, seen)
    if v not in self._params.get(name, ()):
      return None   # a variable not written once, or the entry's parameter
    position = self._params[name].index(v)
    values = set()
    for caller, args in self._calls[name]:
      value = self.constant(caller, args[position], seen)
      if value is None:
        if self._settled:
          return None
        continue
      values.add(value)
    return values.pop() if len(values) == 1 else None

  def settle(self):
    """From now on a parameter is a constant only where every call of its
    function passes that constant (see the module docstring)."""
    self._settled = True

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
    args, reads = [], []
    for v, t, role in zip(op.vars_in, in_types, op.function.sizes):
      if role == 'value':
        value = self.constant(fn.name, v)
        if value is None:
          return
        args.append(value)
        reads.append((fn.name, v))
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
      self._reads[(fn.name, op.vars_out)] = tuple(reads)

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
    given = tuple((k, value) for k, value in (
        (k, self.constant(fn.name, v)) for k, v in enumerate(op.vars_in))
                  if value is not None)
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
