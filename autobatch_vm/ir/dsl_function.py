"""The function a `dsl.ProgramBuilder` builds, and its assembly into IR.

The builder's vocabulary (`dsl`, `dsl_tfp`) records instructions into open
blocks whose jumps name `Label`s; when the function's `with` block ends,
`assemble` checks it (every label placed, no path running off the end, no
read of a variable nothing writes), drops the blocks no path reaches,
names the rest `<fn>.<i>` and makes the `instructions.Function`.  Errors
name the line of the user's code that called into the builder
(`caller_loc`).
"""

import contextlib
import dataclasses
import linecache
import os
import sys
from typing import Any, List, Optional

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['DslError', 'Label', 'FunctionHandle', 'FallOff', 'OpenBlock',
           'FunctionState', 'caller_loc', 'assemble']


class DslError(errors.AutoBatchError):
  """The program being built by hand is malformed."""


class Label:
  """A block of the function being built (`ProgramBuilder.label` makes one).

  Its final name is `<fn>.<i>`, or `<fn>.<name>` for a named one
  (`if_(..., then_name=...)`).

  Args:
    function: The name of the function it belongs to.
    serial: Its number among the function's labels.
    name: The name that labels its block, or None.
  """
  __slots__ = ('function', 'serial', 'name')

  def __init__(self, function, serial, name=None):
    self.function = function
    self.serial = serial
    self.name = name

  def __repr__(self):
    return f'<label {self.function}#{self.serial}>'


class FallOff:
  """Terminator of a block that runs off the end of its function.

  Args:
    loc: Where the function's code ends, or None.
  """

  def __init__(self, loc):
    self.loc = loc


@dataclasses.dataclass
class OpenBlock:
  """A block being built: its label, its ops so far, its terminator.

  Attributes:
    label: Its `Label`.
    ops: The instructions recorded so far.
    loc: Where in the user's code it starts, or None.
    terminator: Its terminator, whose targets are `Label`s until the
      function is assembled; None while it is open.
  """
  label: Label
  ops: List[Any]
  loc: Optional[inst.SourceLoc]
  terminator: Any = None   # with Label targets until the function is built


class FunctionHandle(str):
  """A declared function: its name, to `call` and to give `program`.

  TFP's builder hands out `instructions.Function` objects; this is the
  name here (functions call each other by name), with TFP's `name` and
  `type_inference` attributes.
  """

  def __new__(cls, name, type_inference=None):
    handle = super().__new__(cls, name)
    handle.type_inference = type_inference
    return handle

  @property
  def name(self):
    """The function's name (TFP's `Function.name`)."""
    return str(self)

  def __repr__(self):
    return f'<function {str(self)}>'


class FunctionState:
  """Everything known about the function being built.

  Args:
    name: The function's name.
    params: Its parameter names (TFP's form adds more with `param`).
    type_inference: Its type-inference callable, or None.
    loc: Where in the user's code it starts, or None.
  """

  def __init__(self, name, params, type_inference, loc):
    self.name = name
    self.params = list(params)
    self.type_inference = type_inference
    self.loc = loc
    self.blocks = []          # OpenBlock, in layout order
    self.placed = set()       # serials of placed labels
    self.current = None       # the OpenBlock receiving instructions
    self.pending_else = None  # else-label of an if_ that just ended
    self.pending_continue = None  # its continue_name, for the join block
    self.temp_count = 0
    self.temps = set()        # the temporaries made by temp()
    self.label_count = 0
    self.locals = {p: p for p in params}   # `var.x` / lambda name -> var
    self.used = set(params)   # every variable name given out or seen


# Frames in the builder's own modules (and contextlib's, for the `with`
# forms) are not the user's code.
_BUILDER_FILES = tuple(
    os.path.normcase(os.path.abspath(path)) for path in
    [os.path.join(os.path.dirname(__file__), name)
     for name in ('dsl.py', 'dsl_function.py', 'dsl_tfp.py')] +
    [contextlib.__file__])


def caller_loc(function):
  """Where the user's code called into the builder.

  Args:
    function: The name of the function being built, for the location.

  Returns:
    The `SourceLoc` of the innermost frame outside the builder's modules,
    or None if there is none.
  """
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and os.path.normcase(
      os.path.abspath(frame.f_code.co_filename)) in _BUILDER_FILES:
    frame = frame.f_back
  if frame is None:
    return None
  filename, line = frame.f_code.co_filename, frame.f_lineno
  return inst.SourceLoc(function, filename, line,
                        linecache.getline(filename, line).rstrip('\n'))


def assemble(fn):
  """Checks a finished function and makes its `instructions.Function`.

  Args:
    fn: The `FunctionState` of a function whose every block is
      terminated.

  Returns:
    The untyped `Function`: the blocks a path reaches, in layout order,
    named `<fn>.<i>` (or `<fn>.<name>`), returning through `RETURN_VAR`.

  Raises:
    DslError: If a label is jumped to but never placed, a path runs off
      the end, or the function reads a variable nothing in it writes.
  """
  for b in fn.blocks:
    for target in _targets(b.terminator):
      if target.serial not in fn.placed:
        raise DslError(f'{target} is jumped to but never placed in '
                       f'function {fn.name!r}', loc=b.terminator.loc)
  kept = _reachable(fn.blocks)
  for b in kept:
    if isinstance(b.terminator, FallOff):
      raise DslError(
          f'function {fn.name!r} can reach its end without return_',
          loc=b.terminator.loc or fn.loc,
          hint='End every path with builder.return_(value).')
  _check_written(fn, kept)
  names = _block_names(fn.name, kept)
  blocks = tuple(inst.Block(names[b.label.serial], tuple(b.ops),
                            _rename(b.terminator, names), b.loc)
                 for b in kept)
  return inst.Function(
      name=fn.name, vars_in=tuple(fn.params), vars_out=inst.RETURN_VAR,
      blocks=blocks, type_inference=fn.type_inference, loc=fn.loc)


def _check_written(fn, blocks):
  """Every variable the function reads is one of its parameters or is
  written by one of its instructions."""
  written = set(fn.params)
  for b in blocks:
    for op in b.ops:
      written.update(inst.pattern_flatten(op.vars_out))
  for b in blocks:
    reads = [(v, op.loc) for op in b.ops for v in op.vars_in]
    if isinstance(b.terminator, inst.BranchOp):
      reads.append((b.terminator.cond, b.terminator.loc))
    for v, loc in reads:
      if v not in written:
        raise DslError(
            f'function {fn.name!r} reads variable {v!r}, which nothing in '
            'it writes', loc=loc or fn.loc,
            hint='Write it first (var.x = builder.primop(...), or out=), '
            'or make it a parameter (builder.param).')


def _block_names(fn_name, blocks):
  """Label serial -> final block name: `<fn>.<i>` (i: position), or
  `<fn>.<name>` for a named label, made unique with `_<i>`."""
  names, taken = {}, set()
  for i, b in enumerate(blocks):
    name = b.label.name
    if name is None or str(name).isdigit():
      label = f'{fn_name}.{i}' if name is None else f'{fn_name}.{name}_{i}'
    else:
      label = f'{fn_name}.{name}'
    while label in taken:
      label = f'{label}_{i}'
    taken.add(label)
    names[b.label.serial] = label
  return names


def _targets(t):
  if isinstance(t, inst.GotoOp):
    return [t.block]
  if isinstance(t, inst.BranchOp):
    return [t.true_block, t.false_block]
  return []


def _reachable(blocks):
  """The blocks reachable from the entry, in layout order."""
  by_serial = {b.label.serial: b for b in blocks}
  seen, stack = set(), [blocks[0].label.serial]
  while stack:
    s = stack.pop()
    if s not in seen:
      seen.add(s)
      stack.extend(t.serial for t in _targets(by_serial[s].terminator))
  return [b for b in blocks if b.label.serial in seen]


def _rename(t, names):
  if isinstance(t, inst.GotoOp):
    return inst.GotoOp(names[t.block.serial], t.loc)
  if isinstance(t, inst.BranchOp):
    return inst.BranchOp(t.cond, names[t.true_block.serial],
                         names[t.false_block.serial], t.loc)
  return t
