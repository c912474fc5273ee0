"""A builder for writing autobatch_vm IR by hand.

The frontend turns Python source into IR; this module builds the same
untyped `instructions.Program` directly, one instruction at a time, so that
passes and executors can be tested (and experimented with) without parsing
Python.  The result follows the frontend's conventions exactly: variables
are function-local names, temporaries are `%0`, `%1`, ..., every function
returns through `%ret` (`RETURN_VAR`), and blocks are labelled
`<function>.<index>` in layout order, with the entry first.

Example, doubly recursive Fibonacci:

    from autobatch_vm.ir import dsl

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

`ProgramBuilder` is defined here with our vocabulary; TFP's methods come
from its base class `dsl_tfp.TfpVocabulary`, and `dsl_function` holds
the function being built (`Label`, `FunctionHandle`, `DslError`) and its
assembly into IR.
"""

import ast
import contextlib
import copy
import dataclasses
import functools
import inspect
import linecache

from autobatch_vm.ir import dsl_tfp
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir.dsl_function import assemble
from autobatch_vm.ir.dsl_function import caller_loc
from autobatch_vm.ir.dsl_function import DslError
from autobatch_vm.ir.dsl_function import FallOff
from autobatch_vm.ir.dsl_function import FunctionHandle
from autobatch_vm.ir.dsl_function import FunctionState
from autobatch_vm.ir.dsl_function import Label
from autobatch_vm.ir.dsl_function import OpenBlock

__all__ = ['ProgramBuilder', 'FunctionHandle', 'Label', 'DslError',
           'RETURN_VAR']

RETURN_VAR = inst.RETURN_VAR   # the frontend's name for a function's result


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


class ProgramBuilder(dsl_tfp.TfpVocabulary):
  """Builds an untyped `instructions.Program`; see the module docstring."""

  def __init__(self):
    super().__init__()
    self._functions = {}    # name -> Function, in definition order
    self._declared = {}     # name -> FunctionHandle, declared or defined
    self._fn = None         # FunctionState being built

  # -- functions -------------------------------------------------------------

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
    loc = caller_loc(name)
    self._fn = FunctionState(name, params, type_inference, loc)
    self.place(self.label())
    try:
      yield handle
      self._functions[name] = self._finish_function()
    finally:
      self._fn = None

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
    loc = caller_loc(self._state('return_').name)
    if callable(value):
      self.primop(value, out=RETURN_VAR)
    elif isinstance(value, str):
      if not self._retarget_last(value):
        self.assign(RETURN_VAR, value)
    elif isinstance(value, (tuple, list)):
      self._pack_into(value, RETURN_VAR)
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
      raise DslError(f'{label} is placed twice', loc=caller_loc(fn.name))
    if fn.current is not None:
      self._terminate(inst.GotoOp(label))
    fn.placed.add(label.serial)
    fn.current = OpenBlock(label, [], caller_loc(fn.name))
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
                     loc=caller_loc(self._fn.name))
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
                     loc=caller_loc(fn.name))
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
                     loc=caller_loc(self._fn.name if self._fn else '?'))
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

  def _pack_into(self, value, target):
    """Emits `target = value` for a pattern of variables `value`."""
    leaves = inst.pattern_flatten(value)
    for v in leaves:
      self._check_name(v)
    self.primop(_pack(value), leaves, target, text=inst.pattern_str(value))

  def _condition(self, cond):
    if callable(cond):
      return self.primop(cond)
    self._check_name(cond)
    return cond

  def _current(self):
    fn = self._fn
    if fn.current is None:   # code after a terminator: unreachable
      fn.current = OpenBlock(self.label(), [], caller_loc(fn.name))
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
    block.ops.append(make(out, caller_loc(fn.name)))
    return out

  def _terminate(self, terminator):
    block = self._current()
    if terminator.loc is None and not isinstance(terminator, FallOff):
      terminator = dataclasses.replace(terminator,
                                       loc=caller_loc(self._fn.name))
    block.terminator = terminator
    self._fn.current = None

  def _finish_function(self):
    fn = self._state('end of function')
    if fn.current is not None:
      self._terminate(FallOff(caller_loc(fn.name)))
    return assemble(fn)
