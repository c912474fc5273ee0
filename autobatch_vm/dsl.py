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
  body builds the function.  Functions may call functions defined later
  (by name, or by the `FunctionHandle` the `with` statement binds).
- `primop(fn, vars_in=None, out=None, text=None)`: `out = fn(*vars_in)` on
  whole batched arrays.  `vars_in` defaults to the names of `fn`'s
  parameters (`lambda n: n - 1` reads `n`); `out` (a name or a pattern of
  names, for unpacking) defaults to a fresh temporary.  Returns `out`.
- `const(value)`, `assign(dst, src)`: a member-independent constant; a copy.
- `call(function, args, out=None)`: a call of a batched function.
- `return_(value)`: `value` is a variable, a pattern of variables (returns
  that pattern of values), or a callable (computed by a primop straight
  into `%ret`).  A temporary that the block's last instruction just
  computed is computed into `%ret` directly (`return_(call('f', ...))` is
  `%ret = call f(...)`, a tail call), as the frontend does for
  `return f(...)`.
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
run off its end without `return_`, or that reads a variable nothing in it
writes, is rejected.

TFP's `tfp.experimental.auto_batching.dsl.ProgramBuilder` vocabulary is
accepted too, so a program written for it builds here unchanged:

    with pb.function(type_inference=lambda ts: ts[0]) as fibonacci:
      n = pb.param('n')
      pb.var.cond = pb.primop(lambda n: n > 1)
      with pb.if_(pb.var.cond, then_name='recur', else_name='base'):
        pb.var.nm1 = pb.primop(lambda n: n - 1)
        pb.var.fibm1 = pb.call(fibonacci, [pb.var.nm1])
        ...
      with pb.else_():
        pb.var.ans = pb.const(1)
      pb.return_(pb.var.ans)
    program = pb.program(main=fibonacci)

- `function(name=None, type_inference=None)` (no parameter list: the body
  declares them with `param(name)`), `declare_function(name=None,
  type_inference=None)` and `with define_function(f):` (mutual recursion)
  yield a `FunctionHandle`: the function's name (a `str`), to `call` and
  to give `program(main=...)`.  Its name is made unique if taken (TFP's
  names only label printouts, so two functions may share one there).
- `var.x = <op>` names the output of the instruction just emitted `x`;
  `var.x` reads it.  `pb((var.a, var.b)).pattern = <op>` unpacks a
  pattern.  Assigning a variable that is not the output just emitted
  (`var.y = var.x`) copies it.
- `local(name=None)`, `locals_(count, name=None)`: fresh variable names
  (`x`, then `x_1`, ...).
- `vars_out=` is accepted wherever `out=` is, and `return_(vars_out)`.
- `if_(condition, then_name=None, else_name=None, continue_name=None)`,
  `else_(else_name=None, continue_name=None)`: the names label the blocks
  (`<fn>.<name>`) in printouts.
- `module()`: every function defined so far, as a `Program` whose main is
  the first.

Variables are local to their function (the frontend's convention), so
`var.x` is the variable `x`, shared with the plain-string forms
(`out='x'`, `['x']`).  TFP's IR classes (mutable `Block`,
`ControlFlowGraph`, `Module`) do not exist here: the builder produces the
immutable `instructions.Program` that every pass and executor takes.
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

__all__ = ['ProgramBuilder', 'FunctionHandle', 'Label', 'DslError',
           'RETURN_VAR']

RETURN_VAR = inst.RETURN_VAR   # the frontend's name for a function's result


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


class _FunctionState:
  """Everything known about the function being built."""

  def __init__(self, name, params, type_inference, loc):
    self.name = name
    self.params = list(params)
    self.type_inference = type_inference
    self.loc = loc
    self.blocks = []          # _OpenBlock, in layout order
    self.placed = set()       # serials of placed labels
    self.current = None       # the _OpenBlock receiving instructions
    self.pending_else = None  # else-label of an if_ that just ended
    self.pending_continue = None  # its continue_name, for the join block
    self.temp_count = 0
    self.temps = set()        # the temporaries made by temp()
    self.label_count = 0
    self.locals = {p: p for p in params}   # `var.x` / lambda name -> var
    self.used = set(params)   # every variable name given out or seen


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


_NOT_GIVEN = object()


def _one_of(what, ours, tfps, ours_name, tfps_name):
  """The value of a parameter TFP spells differently (`out`/`vars_out`)."""
  if ours is not None and tfps is not None:
    raise DslError(f'{what} got both {ours_name}= and {tfps_name}=',
                   hint='They mean the same; give one.')
  return ours if ours is not None else tfps


class ProgramBuilder:
  """Builds an untyped `instructions.Program`; see the module docstring."""

  def __init__(self):
    self._functions = {}    # name -> Function, in definition order
    self._declared = {}     # name -> FunctionHandle, declared or defined
    self._fn = None         # _FunctionState being built
    self._magic_vars = _MagicVars(self)

  # -- functions -------------------------------------------------------------

  def declare_function(self, name=None, type_inference=None):
    """Declares a function to define later (`define_function`).

    Functions defined before it can then call it (mutual recursion).

    Args:
      name: Labels the function (made unique: `f`, `f_1`, ...); None:
        `function_<k>`.
      type_inference: The function's type-inference callable, or None.

    Returns:
      Its `FunctionHandle`.

    Raises:
      DslError: If `name` is not a string.
    """
    if name is not None and not isinstance(name, str):
      raise DslError(f'function names are strings, got {name!r}')
    base = name or f'function_{len(self._declared)}'
    unique, k = base, 0
    while unique in self._declared:
      k += 1
      unique = f'{base}_{k}'
    handle = FunctionHandle(unique, type_inference)
    self._declared[unique] = handle
    return handle

  @contextlib.contextmanager
  def define_function(self, function):
    """Builds the body of a function from `declare_function`; yields it.

    Its parameters are declared in the body with `param`.

    Args:
      function: The `FunctionHandle` (or name) `declare_function` returned.

    Yields:
      The function's `FunctionHandle`.

    Raises:
      DslError: If `function` was not declared by this builder, or the
        function is malformed.
    """
    if not isinstance(function, str) or self._declared.get(function) is None:
      raise DslError(f'define_function expects a function from this '
                     f'builder\'s declare_function, got {function!r}')
    with self._building(self._declared[function], (),
                        self._declared[function].type_inference) as handle:
      yield handle

  @contextlib.contextmanager
  def function(self, name=None, params=None, type_inference=None):
    """Builds function `name` in the body of the `with` statement.

    Two forms: `function(name, params, type_inference=None)` with the list
    of parameter names, or TFP's `function(name=None, type_inference=None)`
    with parameters declared in the body by `param` (a callable second
    argument is TFP's positional `type_inference`).

    Args:
      name: The function's name (TFP's form: a label, made unique; None:
        `function_<k>`).
      params: The list of parameter names, or None (TFP's form).
      type_inference: The function's type-inference callable, or None.

    Yields:
      The function's `FunctionHandle` (a `str`, for `call`).

    Raises:
      DslError: If the name or parameters are malformed, the function is
        defined twice or inside another, or its body is malformed.
    """
    if callable(params) and type_inference is None:
      params, type_inference = None, params
    if params is None:   # TFP's form: `name` labels a new function
      handle = self.declare_function(name, type_inference)
      with self.define_function(handle):
        yield handle
      return
    if not isinstance(name, str):
      raise DslError(f'function expects a name (a string) with its '
                     f'parameters, got {name!r}')
    if isinstance(params, str):
      raise DslError(f'params of {name!r} must be a list of names, not the '
                     f'string {params!r}')
    if name in self._functions:
      raise DslError(f'function {name!r} is defined twice')
    handle = self._declared.get(name)
    if handle is None:
      handle = self._declared[name] = FunctionHandle(name, type_inference)
    elif type_inference is None:
      type_inference = handle.type_inference
    with self._building(handle, params, type_inference) as handle:
      yield handle

  @contextlib.contextmanager
  def _building(self, handle, params, type_inference):
    name = str(handle)
    if self._fn is not None:
      raise DslError(f'function {name!r} started inside function '
                     f'{self._fn.name!r}', hint='Functions do not nest.')
    if name in self._functions:
      raise DslError(f'function {name!r} is defined twice')
    params = list(params)
    for p in params:
      if not isinstance(p, str) or not p:
        raise DslError(f'parameters of {name!r} are names (non-empty '
                       f'strings), got {p!r}')
    if len(set(params)) != len(params):
      raise DslError(f'function {name!r} has repeated parameters {params}')
    loc = _caller_loc(name)
    self._fn = _FunctionState(name, params, type_inference, loc)
    self.place(self.label())
    try:
      yield handle
      self._functions[name] = self._finish_function()
    finally:
      self._fn = None

  def module(self):
    """Collects every function defined so far (as `Context.module()`).

    Returns:
      A `Program` of them, whose main is the first.

    Raises:
      DslError: If called inside a function being built.
    """
    if self._fn is not None:
      raise DslError(f'module() inside function {self._fn.name!r}')
    functions = tuple(self._functions.values())
    return inst.Program(functions, functions[0].name if functions else '')

  def program(self, main=None):
    """Collects `main` and every function it can reach into a `Program`.

    Args:
      main: A name or `FunctionHandle`; None: the first function defined.

    Returns:
      The `Program`, main first.

    Raises:
      DslError: If called inside a function, with no functions, or if
        `main` or a function it calls is undefined or called with the
        wrong number of arguments.
    """
    if self._fn is not None:
      raise DslError(f'program() inside function {self._fn.name!r}')
    if not self._functions:
      raise DslError('program() of a builder with no functions')
    if main is not None and not isinstance(main, str):
      raise DslError(f'program(main=...) expects a function of this builder '
                     f'(its handle or name), got {main!r}')
    main = next(iter(self._functions)) if main is None else str(main)
    order, queue = [], [main]
    while queue:
      name = queue.pop(0)
      if name in order:
        continue
      if name not in self._functions:
        raise DslError(
            f'call of undefined function {name!r}' if order
            else f'no function {name!r} to be main',
            hint='Define every declared function that is called '
            '(with define_function).' if name in self._declared else None)
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

  # -- variables -------------------------------------------------------------

  def param(self, name=None):
    """Adds a parameter to the function being built.

    Args:
      name: The parameter's name, made unique as by `local`.

    Returns:
      Its variable name (`local(name)`).
    """
    fn = self._state('param', settle=False)
    var = self.local(name)
    fn.params.append(var)
    return var

  def local(self, name=None, define=True):
    """Makes a fresh variable name of the function being built.

    The first variable made for `name` is the one `var.<name>` and a lambda
    parameter `name` read.

    Args:
      name: The wanted name, or None.
      define: Accepted for TFP's signature and ignored; whether a variable
        is written is checked when the function ends.

    Returns:
      `name` if no variable has it yet, else `name_1`, `name_2`, ...
      (`var_<k>` without a name).

    Raises:
      DslError: If `name` is not a non-empty string.
    """
    del define
    fn = self._state('local', settle=False)
    if name is not None and (not isinstance(name, str) or not name):
      raise DslError(f'variable names are non-empty strings, got {name!r}',
                     loc=_caller_loc(fn.name))
    base = name or 'var'
    var, k = base, 0
    while var in fn.used or name is None and k == 0:
      k += 1
      var = f'{base}_{k}'
    fn.used.add(var)
    if name is not None:
      fn.locals.setdefault(name, var)
    return var

  def locals_(self, count, name=None):
    """Makes `count` fresh variable names.

    Args:
      count: How many.
      name: The wanted name of each, as for `local`.

    Returns:
      A list of `count` names, `local(name)` each.
    """
    return [self.local(name) for _ in range(count)]

  @property
  def var(self):
    """The variables of the function being built, by attribute.

    `var.x = <op>` writes `x` (see the module docstring), `var.x` is `x`.
    """
    return self._magic_vars

  def __call__(self, pattern):
    """Unpacks the instruction just emitted: `builder(p).pattern = <op>`.

    Args:
      pattern: A pattern (tuple or list, nested) of variables to unpack
        the result into.

    Returns:
      An object whose `pattern` attribute, when set to the instruction's
      output, makes the instruction write `pattern`.
    """
    return _MagicPattern(self, pattern)

  def temp(self):
    """A fresh temporary variable name (`%0`, `%1`, ...)."""
    fn = self._state('temp')
    name = f'%{fn.temp_count}'
    fn.temp_count += 1
    fn.temps.add(name)
    return name

  # -- instructions ----------------------------------------------------------

  def primop(self, fn, vars_in=None, out=None, text=None, vars_out=None):
    """Emits `out = fn(*vars_in)`, computed on whole batched arrays.

    Args:
      fn: The primitive, a callable.
      vars_in: The input variables; None: the names of `fn`'s parameters
        (`lambda n: n - 1` reads `n`).
      out: The output: a name, or a pattern of names for unpacking; None:
        a fresh temporary.
      text: How the instruction prints; None: the lambda's source or the
        function's name.
      vars_out: TFP's name for `out`.

    Returns:
      `out`.

    Raises:
      DslError: If `fn` is not callable or a name is malformed.
    """
    out = _one_of('primop', out, vars_out, 'out', 'vars_out')
    if not callable(fn):
      raise DslError(f'primop expects a callable, got {fn!r}')
    state = self._state('primop')
    if vars_in is None:
      vars_in = tuple(state.locals.get(p, p) for p in _params_of(fn))
    else:
      vars_in = tuple(vars_in)
    for v in vars_in:
      self._check_name(v)
    if text is None:
      text = _lambda_text(fn, vars_in) or getattr(fn, '__name__', 'prim')
    return self._emit_out(
        lambda o, loc: inst.PrimOp(vars_in, o, fn, text, loc), out)

  def const(self, value, out=None, vars_out=None):
    """Emits `out = value`, the same for every member.

    Args:
      value: The constant.
      out: The output name or pattern; None: a fresh temporary.
      vars_out: TFP's name for `out`.

    Returns:
      `out`.
    """
    out = _one_of('const', out, vars_out, 'out', 'vars_out')
    return self._emit_out(lambda o, loc: inst.PrimOp(
        (), o, _const_fn(value), repr(value), loc), out)

  def assign(self, dst, src):
    """Emits the copy `dst = src`.

    Args:
      dst: The variable written, or a pattern of them (unpacking).
      src: The variable read.

    Returns:
      `dst`.
    """
    self._check_name(src)
    return self._emit_out(lambda o, loc: inst.PrimOp(
        (src,), o, inst.identity, src, loc), dst)

  def call(self, function, args=None, out=None, vars_in=None,
           vars_out=None):
    """Emits `out = function(*args)`, a call of a batched function.

    Args:
      function: A name or `FunctionHandle`.
      args: The argument variables.
      out: The output name or pattern; None: a fresh temporary.
      vars_in: TFP's name for `args`.
      vars_out: TFP's name for `out`.

    Returns:
      `out`.

    Raises:
      DslError: If `function` is not a name or a name is malformed.
    """
    args = _one_of('call', args, vars_in, 'args', 'vars_in')
    out = _one_of('call', out, vars_out, 'out', 'vars_out')
    if not isinstance(function, str):
      raise DslError(f'call expects a function name, got {function!r}')
    args = tuple(() if args is None else args)
    for v in args:
      self._check_name(v)
    function = str(function)
    return self._emit_out(lambda o, loc: inst.FunctionCallOp(
        function, args, o, loc), out)

  def return_(self, value=None, vars_out=None):
    """Sets `%ret` from `value` and returns from the function.

    Args:
      value: A variable, a pattern of variables (returns that pattern of
        values), or a callable (computed by a primop straight into
        `%ret`).
      vars_out: TFP's name for `value`.

    Raises:
      DslError: If `value` is none of these.
    """
    value = _one_of('return_', value, vars_out, 'value', 'vars_out')
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

  def label(self, name=None):
    """Makes a new label of the current function, to `place` later.

    Args:
      name: Labels its block `<fn>.<name>`, or None.

    Returns:
      The `Label`.
    """
    fn = self._state('label')
    fn.label_count += 1
    return Label(fn.name, fn.label_count - 1, name)

  def place(self, label):
    """Starts the block of `label`; an open block falls through to it.

    Args:
      label: A `Label` of this function, not yet placed.

    Raises:
      DslError: If `label` is placed twice or belongs elsewhere.
    """
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
    """Ends the block with a jump to `label`.

    Args:
      label: A `Label` of this function.
    """
    self._state('goto')
    self._check_label(label)
    self._terminate(inst.GotoOp(label))

  def branch(self, cond, true_label, false_label):
    """Ends the block with a per-member branch.

    Args:
      cond: The condition variable.
      true_label: Where members go where `cond` holds.
      false_label: Where the others go.
    """
    self._state('branch')
    self._check_name(cond)
    self._check_label(true_label)
    self._check_label(false_label)
    self._terminate(inst.BranchOp(cond, true_label, false_label))

  # -- structured control flow -----------------------------------------------

  @contextlib.contextmanager
  def if_(self, cond=None, then_name=None, else_name=None,
          continue_name=None, condition=None):
    """Runs the body for members where `cond` holds.

    Args:
      cond: A variable, or a callable (a primop computing it).
      then_name: Names the block of the body, or None.
      else_name: Names the block of the other side, or None.
      continue_name: Names the block of the join, or None.
      condition: TFP's name for `cond`.

    Yields:
      Nothing; the body builds the true side.

    Raises:
      DslError: If no condition is given.
    """
    cond = _one_of('if_', cond, condition, 'cond', 'condition')
    self._state('if_')
    if cond is None:
      raise DslError('if_ expects a condition (a variable or a callable)',
                     loc=_caller_loc(self._fn.name))
    cond = self._condition(cond)
    then_label, else_label = self.label(then_name), self.label(else_name)
    self.branch(cond, then_label, else_label)
    self.place(then_label)
    yield
    fn = self._state('if_')
    # Whether an else_ follows is known only at the next builder call.
    fn.pending_else = else_label
    fn.pending_continue = continue_name

  @contextlib.contextmanager
  def else_(self, else_name=None, continue_name=None):
    """Runs the body for the other members of the `if_` just closed.

    Args:
      else_name: Overrides the `if_`'s name of this side's block.
      continue_name: Overrides the `if_`'s name of the join's block.

    Yields:
      Nothing; the body builds the false side.

    Raises:
      DslError: If it does not directly follow a `with if_(...)` block.
    """
    fn = self._state('else_', settle=False)
    if fn.pending_else is None:
      raise DslError('else_ must directly follow a `with if_(...)` block',
                     loc=_caller_loc(fn.name))
    else_label, fn.pending_else = fn.pending_else, None
    join_name = continue_name or fn.pending_continue
    fn.pending_continue = None
    if else_name is not None:
      else_label.name = else_name
    then_end, fn.current = fn.current, None
    self.place(else_label)
    yield
    self._state('else_')
    join = self.label(join_name)
    if then_end is not None:
      then_end.terminator = inst.GotoOp(join, then_end.loc)
    self.place(join)

  @contextlib.contextmanager
  def while_(self, cond):
    """Runs the body while `cond` holds, per member.

    Args:
      cond: A callable computing the condition, recomputed at the top of
        each iteration (e.g. `lambda n: n > 0`).

    Yields:
      Nothing; the body builds the loop's body.

    Raises:
      DslError: If `cond` is not callable.
    """
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
      raise DslError(f'{what} outside a function body (`with '
                     'builder.function(...)`)')
    if settle and fn.pending_else is not None:
      label, fn.pending_else = fn.pending_else, None
      if fn.pending_continue is not None:
        # No else_ follows: the else-label is the join.
        label.name, fn.pending_continue = fn.pending_continue, None
      self.place(label)
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
    if self._fn is not None:
      self._fn.used.add(name)

  def _just_emitted(self, var):
    """Whether `var` is a temporary the builder made, written by the last
    instruction of the open block (so nothing else can read it yet)."""
    fn = self._fn
    ops = fn.current.ops if fn.current is not None else []
    return var in fn.temps and bool(ops) and ops[-1].vars_out == var

  def _retarget_last(self, var):
    """Makes `%t = op; %ret = %t` just `%ret = op`, as the frontend does.

    Only for a temporary the builder made, written by the last instruction
    of the block being ended by the return (so nothing else can read it).
    """
    fn = self._state('return_')
    if var == RETURN_VAR:
      return True
    if not self._just_emitted(var):
      return False
    fn.current.ops[-1] = dataclasses.replace(fn.current.ops[-1],
                                             vars_out=RETURN_VAR)
    fn.temps.discard(var)
    if var == f'%{fn.temp_count - 1}':
      fn.temp_count -= 1      # keep temporaries numbered densely
    return True

  def _bind(self, target, value, what):
    """`target = value` for `var.x = value` and `builder(p).pattern =
    value`: the output of the instruction just emitted is renamed; any
    other variable (or pattern of variables) is copied."""
    fn = self._state(what)
    for v in inst.pattern_flatten(target):
      self._check_name(v)
    if isinstance(value, str) and self._just_emitted(value):
      fn.current.ops[-1] = dataclasses.replace(fn.current.ops[-1],
                                               vars_out=target)
      # The number is not reused: a later read of the stale temporary
      # is then reported as never written.
      fn.temps.discard(value)
    elif isinstance(value, str):
      self.assign(target, value)
    elif isinstance(value, (tuple, list)) and all(
        isinstance(v, str) for v in inst.pattern_flatten(value)):
      leaves = inst.pattern_flatten(value)
      for v in leaves:
        self._check_name(v)
      self.primop(_pack(value), leaves, target, text=inst.pattern_str(value))
    else:
      raise DslError(
          f'{what} expects the result of primop, const or call, or a '
          f'variable, got {value!r}', loc=_caller_loc(fn.name),
          hint='Constants go through const: var.x = builder.const(5).')

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
    _check_written(fn, kept)
    names = _block_names(fn.name, kept)
    blocks = tuple(inst.Block(names[b.label.serial], tuple(b.ops),
                              _rename(b.terminator, names), b.loc)
                   for b in kept)
    return inst.Function(
        name=fn.name, vars_in=tuple(fn.params), vars_out=RETURN_VAR,
        blocks=blocks, type_inference=fn.type_inference, loc=fn.loc)


class _MagicVars:
  """`builder.var`: the variables of the function being built, by
  attribute (see the module docstring)."""

  def __init__(self, builder):
    object.__setattr__(self, '_builder', builder)

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    builder = object.__getattribute__(self, '_builder')
    fn = builder._state(f'var.{name}', settle=False)  # pylint: disable=protected-access
    var = fn.locals.setdefault(name, name)
    fn.used.add(var)
    return var

  def __setattr__(self, name, value):
    builder = object.__getattribute__(self, '_builder')
    target = getattr(self, name)
    if value is not None:   # `var.x = None` only declares `x` (TFP)
      builder._bind(target, value, f'var.{name} =')  # pylint: disable=protected-access


class _MagicPattern:
  """`builder(pattern)`: its `.pattern = value` unpacks `value`."""

  def __init__(self, builder, pattern):
    self._builder = builder
    self._pattern = pattern

  @property
  def pattern(self):
    return self._pattern

  @pattern.setter
  def pattern(self, value):
    if value is not None:
      self._builder._bind(self._pattern, value, 'builder(...).pattern =')  # pylint: disable=protected-access


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
