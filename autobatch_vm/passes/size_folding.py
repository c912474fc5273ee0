"""Sizes computed in a per-member function, folded into constants.

In a per-member function a member's shapes are fixed for a signature, so
`n = len(x)` (or `x.shape[0]`, `x.ndim`, `x.size`, and integer arithmetic
on such values: `python.member_sizes`) is one Python int for every member
and every call.  Batched, `n` would be an array with a value per member,
and `np.zeros(n)` could not know its shape; so type inference, which
learns `x`'s type, folds `n` into a constant for the signature:

- a value written by such a primitive whose inputs are read only through
  their shapes or are constants themselves is a constant: the primitive
  is run once on one member's made-up values of the inputs' types (a
  size reads no values);
- a variable is a constant where an instruction reads it if every
  assignment that reaches that instruction (reaching definitions over
  the function's blocks) gives the same constant: `n = len(x)`,
  `np.zeros(n)`, then `n -= 1` in a loop sizes the array with the value
  `n` has at the call; the loop's `n` is one per member;
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

A batch-aware function's shapes past the batch axis are fixed for a
signature too: its size primitives (`n = x.shape[1]`,
`python.member_sizes.batch_size_roles`) are run on made-up batches of one
and of two members, and folded where both give one Python int (`len(x)`,
`x.shape[0]` count members, and are not); the batch-aware primitives
that read such a constant get it as a Python int (`given_constants`), as
the function does when one member runs alone, and so does the dry run
(`dry_run._member_types`).

`SizeFolding` keeps what type inference has learned; the program it
returns holds the rewritten primitives.
"""

import dataclasses
import functools

import numpy as np

from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness as ir_liveness

__all__ = ['SizeFolding', 'given_constants']


class SizeFolding:
  """The constants of a program's per-member functions, as types are learned.

  Args:
    program: The untyped `Program`.

  Attributes:
    constants: `(function name, id of an instruction)` -> the value, a
      Python int, that the size primitive writes (a variable's value where
      it is read, a parameter's and a call's result are derived from
      these: `constant`).
  """

  def __init__(self, program):
    self.constants = {}
    self._functions = {f.name: f for f in program.functions}
    self._reaching = {}   # function -> its `_reaching_definitions`, made once
    # The entry's parameters are the user's arguments: never constants.
    self._params = {f.name: tuple(f.vars_in) for f in program.functions
                    if f.name != program.main_function.name}
    # Callee -> `(caller, call instruction)` per call in the program.
    self._calls = {f.name: [] for f in program.functions}
    # Function -> the instructions that write its result.
    self._returns = {}
    for f in program.functions:
      self._returns[f.name] = []
      for block in f.blocks:
        for op in block.instructions:
          if isinstance(op, inst.FunctionCallOp) and op.function in (
              self._calls):
            self._calls[op.function].append((f.name, op))
          if getattr(op, 'vars_out', None) == inst.RETURN_VAR:
            self._returns[f.name].append(op)
    # `(function, id of an instruction)` -> the `(function, variable,
    # instruction)` a learned constant was computed from (`value`
    # inputs), checked again when settled.
    self._reads = {}
    self._settled = False
    self._bound = {}

  def constant(self, name, v, at, seen=frozenset()):
    """The Python int that variable `v` of function `name` holds for every
    member where instruction `at` reads it, or None.

    Args:
      name: The function's name.
      v: The variable.
      at: The instruction of that function that reads `v`, as the
        frontend made it.
      seen: Definitions being derived (a cycle gives None).

    Returns:
      The value every assignment of `v` that reaches `at` gives: a
      learned size; a parameter's, where the calls of the function pass
      the same constant (every call once settled, else every call known
      so far); a call's result, where the callee's result is one.
    """
    if name not in self._reaching:
      self._reaching[name] = _reaching_definitions(self._functions[name])
    defs = self._reaching[name].get(id(at), {}).get(v)
    if not defs:
      return None
    values = set()
    for d in defs:
      value = self._defined(name, v, d, seen)
      if value is None:
        return None
      values.add(value)
    return values.pop() if len(values) == 1 else None

  def _defined(self, name, v, d, seen):
    """The constant that definition `d` (an instruction, or `_ENTRY`)
    gives variable `v` of function `name`, or None."""
    key = (name, v, id(d))
    if key in seen:
      return None
    seen = seen | {key}
    if d is _ENTRY:
      return self._parameter(name, v, seen)
    if isinstance(d, inst.FunctionCallOp):
      if d.vars_out != v or d.function not in self._returns:
        return None
      return self._result(d.function, seen)
    known = (name, id(d))
    if known not in self.constants:
      return None
    if self._settled and any(self.constant(*r, seen=seen) is None
                             for r in self._reads.get(known, ())):
      return None
    return self.constants[known]

  def _parameter(self, name, v, seen):
    """A parameter's constant: the one its calls pass."""
    if v not in self._params.get(name, ()):
      return None   # unassigned, or the entry's parameter
    position = self._params[name].index(v)
    values = set()
    for caller, call in self._calls[name]:
      value = self.constant(caller, call.vars_in[position], call, seen)
      if value is None:
        if self._settled:
          return None
        continue
      values.add(value)
    return values.pop() if len(values) == 1 else None

  def _result(self, name, seen):
    """A function's constant result: the one every `return` gives."""
    values = set()
    for op in self._returns[name]:
      value = self._defined(name, inst.RETURN_VAR, op, seen)
      if value is None:
        return None
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
    if not (isinstance(op, inst.PrimOp) and
            getattr(op.function, 'sizes', None) is not None and
            isinstance(op.vars_out, str) and
            (fn.name, id(op)) not in self.constants):
      return
    # One member's made-up values; batch-aware, batches of one and two.
    batches = (None,) if op.per_member else (1, 2)
    calls = [[] for _ in batches]
    reads = []
    for v, t, role in zip(op.vars_in, in_types, op.function.sizes):
      if role == 'value':
        value = self.constant(fn.name, v, op)
        if value is None:
          return
        for args in calls:
          args.append(value)
        reads.append((fn.name, v, op))
      elif t is None:
        return
      else:
        for args, batch in zip(calls, batches):
          args.append(inst.pattern_map(
              lambda l, b=batch: np.zeros(
                  (() if b is None else (b,)) + tuple(l.shape), l.dtype),
              t, inst.TensorType))
    run = op.function.member_function if op.per_member else op.function
    values = set()
    for args in calls:
      try:
        value = run(*args)
      except Exception:  # pylint: disable=broad-except
        return   # not folded: run per member, as any other primitive
      if type(value) is not int:  # pylint: disable=unidiomatic-typecheck
        return
      values.add(value)
    if len(values) == 1:   # (a count of members is not a size)
      self.constants[(fn.name, id(op))] = values.pop()
      self._reads[(fn.name, id(op))] = tuple(reads)

  def bound(self, fn, op, at=None):
    """`op`, given the constants it reads.

    Args:
      fn: The `Function` holding `op`.
      op: An instruction.
      at: The instruction as the frontend made it, where `op` is a form
        of it made since; None where `op` is.

    Returns:
      `op` itself, or for a primitive that reads constants a `PrimOp`
      whose function gets them as Python ints (the same object while the
      constants are the same).
    """
    if not (isinstance(op, inst.PrimOp) and op.vars_in and
            op.function not in (inst.identity, inst.parallel_copy)):
      return op
    at = op if at is None else at
    given = tuple((k, value) for k, value in (
        (k, self.constant(fn.name, v, at)) for k, v in enumerate(op.vars_in))
                  if value is not None)
    if not given:
      return op
    key = (id(op), given)
    if key not in self._bound:
      self._bound[key] = (op, dataclasses.replace(
          op, function=given_constants(op.function, dict(given))))
    return self._bound[key][1]


def given_constants(function, constants):
  """Primitive function `function`, given some inputs as Python ints.

  Args:
    function: A `PrimOp`'s function: a `PerMemberFunction` (its
      `with_constants`), or a batch-aware primitive's.
    constants: Input position -> its value, a Python int.

  Returns:
    A function of the same arguments that passes those values in place
    of the batched inputs at their positions; its `unbound` is the
    function as the frontend made it, its `constants` the values given.
  """
  with_constants = getattr(function, 'with_constants', None)
  if with_constants is not None:
    return with_constants(constants)
  unbound = getattr(function, 'unbound', None) or function
  constants = {**getattr(function, 'constants', {}), **constants}

  @functools.wraps(unbound)
  def bound(*args):
    args = list(args)
    for k, value in constants.items():
      args[k] = value
    return unbound(*args)
  bound.unbound = unbound
  bound.constants = constants
  return bound


# The definition of every variable on entry to a function: its argument
# for a parameter, none for any other.
_ENTRY = object()


def _reaching_definitions(fn):
  """The assignments that reach each instruction's inputs.

  Args:
    fn: A `Function` before lowering.

  Returns:
    `id(instruction)` -> {input variable -> frozenset of the
    instructions that may have written its value there, with `_ENTRY`
    where it may hold its value on entry}.
  """
  variables = set(fn.vars_in)
  for block in fn.blocks:
    for op in block.instructions:
      variables |= ir_liveness.writes(op)
  entry = {v: frozenset((_ENTRY,)) for v in variables}
  state_in = {fn.blocks[0].label: entry} if fn.blocks else {}
  result = {}
  work = [b.label for b in fn.blocks[:1]]
  blocks = {b.label: b for b in fn.blocks}
  while work:
    label = work.pop()
    block = blocks[label]
    state = dict(state_in[label])
    for op in block.instructions:
      if isinstance(op, (inst.PrimOp, inst.FunctionCallOp)):
        result[id(op)] = {v: state.get(v, frozenset()) for v in op.vars_in}
      for v in ir_liveness.writes(op):
        state[v] = frozenset((op,))
    for succ in ir_liveness.successors(block):
      old = state_in.get(succ)
      new = state if old is None else {
          v: old.get(v, frozenset()) | state.get(v, frozenset())
          for v in set(old) | set(state)}
      if new != old:
        state_in[succ] = new
        if succ not in work:
          work.append(succ)
  return result
