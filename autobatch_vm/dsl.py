"""A builder for writing autobatch_vm IR by hand.

The frontend turns Python source into IR; this module builds the same
untyped `instructions.Program` directly, one instruction at a time, so that
passes and executors can be tested (and experimented with) without parsing
Python.  The result follows the frontend's conventions exactly: variables
are function-local names, temporaries are `%0`, `%1`, ..., every function
returns through `%ret` (`RETURN_VAR`), and blocks are labelled
`<function>.<index>` in layout order, with the entry first.

Example, doubly recursive Fibonacci:

    from autobatch_vm import dsl

    pb = dsl.ProgramBuilder()
    with pb.function('fib', ['n'], type_inference=lambda ts: ts[0]):
      with pb.if_(lambda n: n > 2):
        a = pb.call('fib', [pb.primop(lambda n: n - 1)])
        b = pb.call('fib', [pb.primop(lambda n: n - 2)])
        pb.return_(pb.primop(lambda a, b: a + b, [a, b]))
      with pb.else_():
        pb.return_(pb.const(1))
    program = pb.program('fib')
    print(program)   # def fib(n) -> %ret: ... %0 = prim[n > 2](n) ...

The vocabulary:

- `function(name, params, type_inference=None)`: a context manager; the
  body builds the function.  Functions may call functions defined later.
- `primop(fn, vars_in=None, out=None, text=None)`: `out = fn(*vars_in)` on
  whole batched arrays.  `vars_in` defaults to the names of `fn`'s
  parameters (`lambda n: n - 1` reads `n`); `out` (a name or a pattern of
  names, for unpacking) defaults to a fresh temporary.  Returns `out`.
- `const(value)`, `assign(dst, src)`: a member-independent constant; a copy.
- `call(function, args, out=None)`: a call of a batched function.
- `return_(value)`: `value` is a variable, a pattern of variables (returns a
  tuple), or a callable (computed by a primop straight into `%ret`).  A
  temporary that the block's last instruction just computed is computed
  into `%ret` directly (`return_(call('f', ...))` is `%ret = call f(...)`,
  a tail call), as the frontend does for `return f(...)`.
- Structured control flow: `with if_(cond): ...` optionally followed by
  `with else_(): ...`, and `with while_(cond): ...`; `cond` is a variable or
  a callable (a primop computing it).
- Unstructured control flow: `label()` makes a label, `place(label)` starts
  its block (the open block, if any, falls through to it with a goto),
  `goto(label)`, `branch(cond, true_label, false_label)`.
- `program(main=None)`: the `Program` of `main` (default: the first function)
  and every function it can reach, main first, like `Context.program`.

Code after a terminator (e.g. after `return_`) goes in an unreachable block,
which is dropped, as the frontend does.  A function whose reachable code can
run off its end without `return_` is rejected.
"""

import ast
import contextlib
import copy
import dataclasses
import functools
import inspect
import linecache
import os
import sys
from typing import Any, List, Optional

from autobatch_vm import errors
from autobatch_vm import instructions as inst

__all__ = ['ProgramBuilder', 'Label', 'DslError', 'RETURN_VAR']

RETURN_VAR = '%ret'   # the frontend's name for a function's result


class DslError(errors.AutoBatchError):
  """The program being built by hand is malformed."""


class Label:
  """A block of the function being built; its final name is `<fn>.<i>`."""
  __slots__ = ('function', 'serial')

  def __init__(self, function, serial):
    self.function = function
    self.serial = serial

  def __repr__(self):
    return f'<label {self.function}#{self.serial}>'


class _FallOff:
  """Terminator of a block that runs off the end of its function."""

  def __init__(self, loc):
    self.loc = loc


@dataclasses.dataclass
class _OpenBlock:
  label: Label
  ops: List[Any]
  loc: Optional[inst.SourceLoc]
  terminator: Any = None   # with Label targets until the function is built


class _FunctionState:
  """Everything known about the function being built."""

  def __init__(self, name, params, type_inference, loc):
    self.name = name
    self.params = tuple(params)
    self.type_inference = type_inference
    self.loc = loc
    self.blocks = []          # _OpenBlock, in layout order
    self.placed = set()       # serials of placed labels
    self.current = None       # the _OpenBlock receiving instructions
    self.pending_else = None  # else-label of an if_ that just ended
    self.temp_count = 0
    self.temps = set()        # the temporaries made by temp()
    self.label_count = 0


_THIS_FILE = os.path.normcase(os.path.abspath(__file__))


def _caller_loc(function):
  """Where the user's code called into the builder."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and os.path.normcase(
      os.path.abspath(frame.f_code.co_filename)) in (
          _THIS_FILE, os.path.normcase(os.path.abspath(contextlib.__file__))):
    frame = frame.f_back
  if frame is None:
    return None
  filename, line = frame.f_code.co_filename, frame.f_lineno
  return inst.SourceLoc(function, filename, line,
                        linecache.getline(filename, line).rstrip('\n'))


def _params_of(fn):
  try:
    params = inspect.signature(fn).parameters.values()
  except (TypeError, ValueError):
    raise DslError(f'cannot read the parameters of {fn!r}',
                   hint='Pass vars_in= explicitly.') from None
  names = []
  for p in params:
    if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
      raise DslError(f'{fn!r} has a *args, **kwargs or keyword-only '
                     'parameter', hint='Pass vars_in= explicitly.')
    names.append(p.name)
  return tuple(names)


def _lambda_text(fn, vars_in):
  """The body of a lambda as source text (`n - 1`), or None if unclear.

  Parameters are shown as the variables they read (`lambda a: a + 1` on
  `%2` reads `%2 + 1`).  Several lambdas on one line are told apart by the
  columns of their code (Python >= 3.11).
  """
  code = getattr(fn, '__code__', None)
  if code is None or getattr(fn, '__name__', '') != '<lambda>':
    return None
  lines = linecache.getlines(code.co_filename)
  if not lines:
    return None
  args = list(code.co_varnames[:code.co_argcount])
  positions = getattr(code, 'co_positions', lambda: ())()
  spans = [(p[0], p[2], p[1], p[3]) for p in positions
           if None not in p and (p[2], p[3]) != (0, 0)]
  candidates = [
      n for n in _lambdas_by_line(''.join(lines)).get(code.co_firstlineno, ())
      if [a.arg for a in n.args.args] == args
      and all((n.lineno, n.col_offset) <= (l, c) and
              (el, ec) <= (n.end_lineno, n.end_col_offset)
              for l, c, el, ec in spans)]
  if len(candidates) != 1 or len(vars_in) != len(args):
    return None
  rename = dict(zip(args, vars_in))
  body = copy.deepcopy(candidates[0].body)
  for node in ast.walk(body):
    if isinstance(node, ast.Name) and node.id in rename:
      node.id = rename[node.id]
  return ast.unparse(body)


@functools.lru_cache(maxsize=32)
def _lambdas_by_line(source):
  """line -> the `ast.Lambda` nodes starting there, for one source file."""
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return {}
  by_line = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Lambda):
      by_line.setdefault(node.lineno, []).append(node)
  return by_line


def _pack(template):
  """The function building a pattern like `template` from its leaves."""
  def pack(*leaves):
    return inst.pattern_unflatten(template, leaves)
  return pack


def _const_fn(value):
  def constant():
    return value
  return constant


class ProgramBuilder:
  """Builds an untyped `instructions.Program`; see the module docstring."""

  def __init__(self):
    self._functions = {}    # name -> Function, in definition order
    self._fn = None         # _FunctionState being built

  # -- functions -------------------------------------------------------------

  @contextlib.contextmanager
  def function(self, name, params=(), type_inference=None):
    """Builds function `name(*params)`; yields `name` (for `call`)."""
    if self._fn is not None:
      raise DslError(f'function {name!r} started inside function '
                     f'{self._fn.name!r}', hint='Functions do not nest.')
    if name in self._functions:
      raise DslError(f'function {name!r} is defined twice')
    if isinstance(params, str):
      raise DslError(f'params of {name!r} must be a list of names, not the '
                     f'string {params!r}')
    if len(set(params)) != len(params):
      raise DslError(f'function {name!r} has repeated parameters {params}')
    loc = _caller_loc(name)
    self._fn = _FunctionState(name, params, type_inference, loc)
    self.place(self.label())
    try:
      yield name
      self._functions[name] = self._finish_function()
    finally:
      self._fn = None

  def program(self, main=None):
    """The `Program` of `main` and every function it can reach."""
    if self._fn is not None:
      raise DslError(f'program() inside function {self._fn.name!r}')
    if not self._functions:
      raise DslError('program() of a builder with no functions')
    main = next(iter(self._functions)) if main is None else main
    order, queue = [], [main]
    while queue:
      name = queue.pop(0)
      if name in order:
        continue
      if name not in self._functions:
        raise DslError(f'call of undefined function {name!r}' if order
                       else f'no function {name!r} to be main')
      order.append(name)
      for op in self._calls(self._functions[name]):
        callee = self._functions.get(op.function)
        if callee is not None and len(callee.vars_in) != len(op.vars_in):
          raise DslError(
              f'{op.function!r} takes {len(callee.vars_in)} argument(s), '
              f'called with {len(op.vars_in)}', loc=op.loc)
        queue.append(op.function)
    return inst.Program(tuple(self._functions[n] for n in order), main)

  @staticmethod
  def _calls(fn):
    return [op for b in fn.blocks for op in b.instructions
            if isinstance(op, inst.FunctionCallOp)]

  # -- instructions ----------------------------------------------------------

  def temp(self):
    """A fresh temporary variable name (`%0`, `%1`, ...)."""
    fn = self._state('temp')
    name = f'%{fn.temp_count}'
    fn.temp_count += 1
    fn.temps.add(name)
    return name

  def primop(self, fn, vars_in=None, out=None, text=None):
    """Emits `out = fn(*vars_in)`; returns `out` (a fresh temp by default)."""
    if not callable(fn):
      raise DslError(f'primop expects a callable, got {fn!r}')
    vars_in = _params_of(fn) if vars_in is None else tuple(vars_in)
    for v in vars_in:
      self._check_name(v)
    if text is None:
      text = _lambda_text(fn, vars_in) or getattr(fn, '__name__', 'prim')
    return self._emit_out(
        lambda o, loc: inst.PrimOp(vars_in, o, fn, text, loc), out)

  def const(self, value, out=None):
    """Emits `out = value`, the same for every member."""
    return self._emit_out(lambda o, loc: inst.PrimOp(
        (), o, _const_fn(value), repr(value), loc), out)

  def assign(self, dst, src):
    """Emits the copy `dst = src`."""
    self._check_name(src)
    return self._emit_out(lambda o, loc: inst.PrimOp(
        (src,), o, inst.identity, src, loc), dst)

  def call(self, function, args, out=None):
    """Emits `out = function(*args)`; returns `out`."""
    if not isinstance(function, str):
      raise DslError(f'call expects a function name, got {function!r}')
    args = tuple(args)
    for v in args:
      self._check_name(v)
    return self._emit_out(lambda o, loc: inst.FunctionCallOp(
        function, args, o, loc), out)

  def return_(self, value):
    """Sets `%ret` from `value` and returns from the function."""
    loc = _caller_loc(self._state('return_').name)
    if callable(value):
      self.primop(value, out=RETURN_VAR)
    elif isinstance(value, str):
      if not self._retarget_last(value):
        self.assign(RETURN_VAR, value)
    elif isinstance(value, (tuple, list)):
      leaves = inst.pattern_flatten(value)
      for v in leaves:
        self._check_name(v)
      self.primop(_pack(value), leaves, RETURN_VAR,
                  text=inst.pattern_str(value))
    else:
      raise DslError(f'return_ expects a variable, a pattern of variables or '
                     f'a callable, got {value!r}', loc=loc)
    self._terminate(inst.ReturnOp(loc))

  # -- unstructured control flow ---------------------------------------------

  def label(self):
    """A new label of the current function, to `place` later."""
    fn = self._state('label')
    fn.label_count += 1
    return Label(fn.name, fn.label_count - 1)

  def place(self, label):
    """Starts the block of `label`; an open block falls through to it."""
    fn = self._state('place')
    self._check_label(label)
    if label.serial in fn.placed:
      raise DslError(f'{label} is placed twice', loc=_caller_loc(fn.name))
    if fn.current is not None:
      self._terminate(inst.GotoOp(label))
    fn.placed.add(label.serial)
    fn.current = _OpenBlock(label, [], _caller_loc(fn.name))
    fn.blocks.append(fn.current)

  def goto(self, label):
    """Ends the block with a jump to `label`."""
    self._state('goto')
    self._check_label(label)
    self._terminate(inst.GotoOp(label))

  def branch(self, cond, true_label, false_label):
    """Ends the block: to `true_label` where `cond` holds, else to
    `false_label`."""
    self._state('branch')
    self._check_name(cond)
    self._check_label(true_label)
    self._check_label(false_label)
    self._terminate(inst.BranchOp(cond, true_label, false_label))

  # -- structured control flow -----------------------------------------------

  @contextlib.contextmanager
  def if_(self, cond):
    """Runs the body for members where `cond` (a variable or callable) holds."""
    self._state('if_')
    cond = self._condition(cond)
    then_label, else_label = self.label(), self.label()
    self.branch(cond, then_label, else_label)
    self.place(then_label)
    yield
    fn = self._state('if_')
    # Whether an else_ follows is known only at the next builder call.
    fn.pending_else = else_label

  @contextlib.contextmanager
  def else_(self):
    """The other members of the `if_` just closed."""
    fn = self._state('else_', settle=False)
    if fn.pending_else is None:
      raise DslError('else_ must directly follow a `with if_(...)` block',
                     loc=_caller_loc(fn.name))
    else_label, fn.pending_else = fn.pending_else, None
    then_end, fn.current = fn.current, None
    self.place(else_label)
    yield
    self._state('else_')
    join = self.label()
    if then_end is not None:
      then_end.terminator = inst.GotoOp(join, then_end.loc)
    self.place(join)

  @contextlib.contextmanager
  def while_(self, cond):
    """Runs the body while `cond` (a callable, recomputed each time) holds."""
    self._state('while_')
    if not callable(cond):
      raise DslError('while_ expects a callable computing the condition '
                     'at the top of each iteration (e.g. lambda n: n > 0)')
    head, body, done = self.label(), self.label(), self.label()
    self.place(head)
    self.branch(self.primop(cond), body, done)
    self.place(body)
    yield
    self._state('while_')
    if self._fn.current is not None:
      self.goto(head)
    self.place(done)

  # -- internals -------------------------------------------------------------

  def _state(self, what, settle=True):
    """The function being built, after placing a pending else-label."""
    fn = self._fn
    if fn is None:
      raise DslError(f'{what} outside `with builder.function(...)`')
    if settle and fn.pending_else is not None:
      label, fn.pending_else = fn.pending_else, None
      self.place(label)   # no else_ follows: the else-label is the join
    return fn

  def _check_label(self, label):
    if not isinstance(label, Label) or label.function != self._fn.name:
      raise DslError(f'{label!r} is not a label of function '
                     f'{self._fn.name!r}', hint='Make labels with '
                     'builder.label() inside the function that uses them.')

  def _check_name(self, name):
    if not isinstance(name, str) or not name:
      raise DslError(f'variable names are non-empty strings, got {name!r}',
                     loc=_caller_loc(self._fn.name if self._fn else '?'))

  def _retarget_last(self, var):
    """Makes `%t = op; %ret = %t` just `%ret = op`, as the frontend does.

    Only for a temporary the builder made, written by the last instruction
    of the block being ended by the return (so nothing else can read it).
    """
    fn = self._state('return_')
    if var == RETURN_VAR:
      return True
    ops = fn.current.ops if fn.current is not None else []
    if (var not in fn.temps or not ops
        or ops[-1].vars_out != var):
      return False
    ops[-1] = dataclasses.replace(ops[-1], vars_out=RETURN_VAR)
    if var == f'%{fn.temp_count - 1}':
      fn.temp_count -= 1      # keep temporaries numbered densely
      fn.temps.discard(var)
    return True

  def _condition(self, cond):
    if callable(cond):
      return self.primop(cond)
    self._check_name(cond)
    return cond

  def _current(self):
    fn = self._fn
    if fn.current is None:   # code after a terminator: unreachable
      fn.current = _OpenBlock(self.label(), [], _caller_loc(fn.name))
      fn.placed.add(fn.current.label.serial)
      fn.blocks.append(fn.current)
    return fn.current

  def _emit_out(self, make, out):
    fn = self._state('instruction')
    if out is None:
      out = self.temp()
    for v in inst.pattern_flatten(out):
      self._check_name(v)
    block = self._current()
    block.ops.append(make(out, _caller_loc(fn.name)))
    return out

  def _terminate(self, terminator):
    block = self._current()
    if terminator.loc is None and not isinstance(terminator, _FallOff):
      terminator = dataclasses.replace(terminator,
                                       loc=_caller_loc(self._fn.name))
    block.terminator = terminator
    self._fn.current = None

  def _finish_function(self):
    fn = self._state('end of function')
    if fn.current is not None:
      self._terminate(_FallOff(_caller_loc(fn.name)))
    for b in fn.blocks:
      for target in _targets(b.terminator):
        if target.serial not in fn.placed:
          raise DslError(f'{target} is jumped to but never placed in '
                         f'function {fn.name!r}', loc=b.terminator.loc)
    kept = _reachable(fn.blocks)
    for b in kept:
      if isinstance(b.terminator, _FallOff):
        raise DslError(
            f'function {fn.name!r} can reach its end without return_',
            loc=b.terminator.loc or fn.loc,
            hint='End every path with builder.return_(value).')
    names = {b.label.serial: f'{fn.name}.{i}' for i, b in enumerate(kept)}
    blocks = tuple(inst.Block(names[b.label.serial], tuple(b.ops),
                              _rename(b.terminator, names), b.loc)
                   for b in kept)
    return inst.Function(
        name=fn.name, vars_in=fn.params, vars_out=RETURN_VAR, blocks=blocks,
        type_inference=fn.type_inference, loc=fn.loc)


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
