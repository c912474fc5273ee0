"""Compiles the source of one batched Python function into an IR `Function`.

Expects: a plain Python function (not a lambda) whose source is available,
and a `resolve_batched(obj, name)` callback that says whether a call of the
Python object `obj` (None where it is not known statically), spelt as the
bare name `name` (None for other callee expressions), is a call of a batched
function of the same Context (and gives its name).

Guarantees: every statement of the supported subset becomes IR; maximal
sub-expressions that contain no call of a batched function become one
`PrimOp` each (so `n - 1 + k` is one primitive, evaluated on whole arrays);
calls of batched functions become `FunctionCallOp`s; `if`, `while`, `for ...
in range(...)`, `break`, `continue`, `return`, short-circuit `and`/`or` and
`a if c else b` around batched calls become blocks and branches.  Constructs
that do not batch as written (`and`, `or`, `not`, chained comparisons and
conditional expressions on arrays) are rewritten to per-member helpers from
`autobatch_vm.ops`.  Anything else raises `UnsupportedSyntaxError` naming the
construct, the function, the file and the line.

Variables keep the user's names; temporaries are `%0`, `%1`, ... and the
result is `%ret`, names no Python identifier can clash with.

This module walks the statements and expressions; `source` reads
the function's source (and makes a dry run's copy), `primitives`
turns a pure expression into its batched primitive, and `cfg`
prunes and checks the finished blocks.
"""

import ast
import builtins
import collections
import copy
import dataclasses
import functools
import operator
import types

import numpy as np

from autobatch_vm import errors
from autobatch_vm import ops as ops_module
from autobatch_vm.ir import instructions as inst
from autobatch_vm.passes import member_indexing
from autobatch_vm.passes import type_inference
from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_ops
from autobatch_vm.per_member import primitive as member_primitive
from autobatch_vm.per_member import tf_numpy
from autobatch_vm.python import cfg as python_cfg
from autobatch_vm.python import member_direct
from autobatch_vm.python import member_sizes
from autobatch_vm.python import nested as python_nested
from autobatch_vm.python import optional as python_optional
from autobatch_vm.python import primitives as python_primitives
from autobatch_vm.python import source as python_source
from autobatch_vm.python.source import dry_run_function
from autobatch_vm.python.source import range_bound

__all__ = ['compile_function', 'dry_run_function', 'range_bound',
           'RETURN_VAR']

RETURN_VAR = inst.RETURN_VAR

_UNSUPPORTED_STATEMENTS = {
    ast.Try: ('try statements', 'Handle errors outside the batched function.'),
    ast.With: ('with statements', 'Move the context manager outside the '
               'batched function.'),
    ast.AsyncWith: ('async with statements', None),
    ast.AsyncFor: ('async for loops', None),
    ast.AsyncFunctionDef: ('nested async functions', None),
    ast.Global: ('global declarations', 'Batched functions cannot rebind '
                 'globals; return the value instead.'),
    ast.Nonlocal: ('nonlocal declarations', 'Batched functions cannot rebind '
                   'enclosing variables; return the value instead.'),
    ast.Delete: ('del statements', 'Simply stop using the variable.'),
    ast.FunctionDef: ('nested function definitions', 'Define the helper at '
                      'module level (decorate it too if it needs control '
                      'flow).'),
    ast.ClassDef: ('class definitions', 'Define the class at module level.'),
    ast.Import: ('import statements', 'Import at module level.'),
    ast.ImportFrom: ('import statements', 'Import at module level.'),
    ast.Raise: ('raise statements', 'Use `assert cond, "message"` to check '
                'a per-member condition.'),
}
if hasattr(ast, 'Match'):
  _UNSUPPORTED_STATEMENTS[ast.Match] = ('match statements', 'Use if/elif.')
if hasattr(ast, 'TryStar'):
  _UNSUPPORTED_STATEMENTS[ast.TryStar] = ('try statements', None)

_UNSUPPORTED_EXPRESSIONS = {
    ast.Yield: ('yield', 'Batched functions cannot be generators.'),
    ast.YieldFrom: ('yield from', 'Batched functions cannot be generators.'),
    ast.Await: ('await', None),
    # Where Python evaluates it every time (a statement's test or
    # value, outside `and`/`or` operands after the first), it is an
    # assignment of its own (`_assignment_expressions`).
    ast.NamedExpr: ('an assignment expression (:=) that Python evaluates '
                    'only sometimes (in an operand of `and` or `or` after '
                    'the first, a side of `x if c else y`, a comprehension '
                    'or a lambda), or whose name the statement reads before '
                    'it is assigned',
                    'Assign it in a statement of its own, or nest the '
                    'tests: `if a:` then `if (z := f()) > 0:`.'),
}


# Methods that change their object in place (lists, dicts, sets, NumPy
# arrays): called on a variable of a batched function, the change would
# be lost.
_IN_PLACE = frozenset((
    'append', 'extend', 'insert', 'pop', 'remove', 'clear', 'sort',
    'reverse', 'update', 'add', 'discard', 'setdefault', 'popitem', 'fill',
    'resize', 'put', 'itemset', 'partition', 'setfield', 'byteswap'))


# NumPy functions that write their first argument in place.
_WRITES_FIRST_ARGUMENT = frozenset(
    getattr(np, name) for name in ('fill_diagonal', 'copyto', 'put', 'place',
                                   'putmask', 'put_along_axis')
    if hasattr(np, name)) | frozenset((np.random.shuffle,))


def _writes_in_place(func):
  """Whether `func` is a NumPy function that writes its first argument."""
  try:
    return func in _WRITES_FIRST_ARGUMENT
  except TypeError:   # unhashable
    return False


def _numpy_callable(func):
  """Whether `func` is a ufunc or a function of NumPy (whose `out=` is
  the array it writes)."""
  return isinstance(func, np.ufunc) or (
      callable(func) and
      (getattr(func, '__module__', None) or '').split('.')[0] == 'numpy')


def _root_name(node):
  """The name an expression `d`, `d[i]` or `d.T` reads its array from,
  or None."""
  while isinstance(node, (ast.Subscript, ast.Attribute)):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


# Augmented assignments an item's window takes where it lies
# (`member_ops.setitem_with`): the `operator` function of each.
_AUGMENTED = {ast.Add: 'add', ast.Sub: 'sub', ast.Mult: 'mul',
              ast.Div: 'truediv', ast.FloorDiv: 'floordiv', ast.Mod: 'mod',
              ast.Pow: 'pow', ast.BitAnd: 'and_', ast.BitOr: 'or_',
              ast.BitXor: 'xor', ast.LShift: 'lshift', ast.RShift: 'rshift'}


def _has_variable_slice(index):
  """Whether subscript `index` has a slice with a bound or step that is
  not a literal (`w[:n]`, `w[j:j + 2]`)."""
  parts = index.elts if isinstance(index, ast.Tuple) else [index]
  return any(isinstance(p, ast.Slice) and any(
      b is not None and not isinstance(b, ast.Constant)
      for b in (p.lower, p.upper, p.step)) for p in parts)


def _list_locals(node):
  """Names that function `node` assigns a Python list (or tuple): a
  display (`[a, b]`, `(a, b)`), a list comprehension, `list(...)`, or a
  sum or repetition of those (`[v] + rest`, `[a] * 3`).  Their items are
  assigned as a list's (`ops.list_setitem`), which refuses a tuple's."""
  def is_list(v):
    if isinstance(v, (ast.List, ast.ListComp, ast.Tuple)):
      return True
    if (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and
        v.func.id == 'list'):
      return True
    if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Mult)):
      # `[v] + rest`, `[a] * 3` or `3 * [a]`, not `x * y` of arrays.
      return is_list(v.left) or (isinstance(v.op, ast.Mult) and isinstance(
          v.left, ast.Constant) and is_list(v.right))
    return False
  out = set()
  for n in ast.walk(node):
    if isinstance(n, ast.Assign):
      targets, value = n.targets, n.value
    elif isinstance(n, ast.AnnAssign) and n.value is not None:
      targets, value = [n.target], n.value
    else:
      continue
    if is_list(value):
      out.update(t.id for t in targets if isinstance(t, ast.Name))
  return out


class _Compiler:
  """Walks one function's AST and builds its blocks."""

  def __init__(self, fn, resolve_batched, params_of, type_inference,
               defaults_of=None, per_member=False, positional_of=None,
               variant_of=None, static=(), name=None, writes_of=None):
    self.src = python_source.Source(fn)
    self.writes_of = writes_of or (lambda name: ())
    # The IR function's name: the Python function's, or its variant's
    # for parameters given None (`static`).
    self.name = name or self.src.name
    self.variant_of = variant_of
    self.fn = fn
    self.per_member = per_member
    self.resolve_batched = resolve_batched
    self.params_of = params_of
    self.positional_of = positional_of or (lambda name: len(params_of(name)))
    self.defaults_of = defaults_of or (lambda name: {})
    self.type_inference = type_inference
    self.blocks = []          # finished blocks, in creation order
    self.label_count = 0
    self.temp_count = 0
    self.cur_label = None
    self.cur_ops = None
    self.cur_loc = None
    self.loops = []           # (continue_label, break_label)
    self.returns = 0
    # (name chain, `_snapshot`) of each global or closure value that the
    # compiled code holds as it was when compiling (`_read_static`).
    self.static_reads = []
    node = self.src.node
    self._check_signature(node)
    self.params = tuple(a.arg for a in node.args.args + node.args.kwonlyargs
                        if a.arg not in static)
    # `p is None` of a parameter is known where it holds what it was
    # given: None (`static`, a variant's) or an array.
    node = python_source.fold_none_tests(node, static, self.params)
    # Names of the generated primitives' own start with this.
    self.prefix = python_source.generated_prefix(fn, node)
    # Locals that hold None for some members (`best = None`): each with a
    # flag (`python.optional`), its reads through `ops.optional_value`.
    optional = python_optional.optional_locals(node, self.params)
    self.optional_flags = python_optional.flag_names(node, optional)
    if optional:
      node = python_optional.rewrite(node, self.optional_flags,
                                     self.prefix + 'optional_value',
                                     asserts=not per_member)
    self.node = node
    self.locals = python_source.assigned_names(node) | set(self.params)
    self.closure = {}
    if fn.__closure__:
      self.closure = dict(zip(fn.__code__.co_freevars, fn.__closure__))
    # A local that holds one literal (`h = 0.1`) is read as that constant,
    # as a closure's is: Python's number, not one number per member.
    self.constants = python_source.literal_constants(node, self.params)
    for name in static:
      if name not in self.locals:   # never assigned: None throughout
        self.constants[name] = None
    self.locals -= set(self.constants)
    # Locals assigned a list display (`parts = [a, b]`): their items are
    # assigned as a list's (`ops.list_setitem`), not a batched array's
    # (batch-aware; per member `member_ops.setitem` tells them apart).
    self.list_locals = _list_locals(node) & self.locals
    for name, value in self.constants.items():
      self.closure[name] = types.CellType(value)
    if optional:
      self.closure[self.prefix + 'optional_value'] = types.CellType(
          ops_module.optional_value)
    # Helpers defined in the body (`def f(x): ...`, `f = lambda x: ...`):
    # lifted out (`python.nested`), read from closure cells as a closure's
    # functions are, not variables.
    helpers = python_nested.definitions(node)
    self.nested = frozenset(helpers)
    self.locals -= self.nested
    self.closure.update(python_nested.lift(
        helpers, self.locals, dict(self.closure), fn.__globals__,
        self.src.filename, self.src.first_line - 1,
        lambda call: self._batched_callee(call) is not None, self.src.loc))

  # -- errors --------------------------------------------------------------

  def unsupported(self, node, what, hint=None):
    raise errors.UnsupportedSyntaxError(
        f'{what} are not supported in batched functions'
        if what.endswith('s') else f'{what} is not supported in batched '
        'functions', loc=self.src.loc(node), hint=hint)

  def _check_signature(self, node):
    a = node.args
    if a.vararg or a.kwarg or a.posonlyargs:
      raise errors.UnsupportedSyntaxError(
          f'Batched function {self.src.name!r} must take named parameters, '
          'positional or keyword-only, with or without default values (no '
          '*args, **kwargs or positional-only parameters)',
          loc=self.src.loc(node))

  # -- blocks --------------------------------------------------------------

  def new_label(self):
    label = f'{self.name}.{self.label_count}'
    self.label_count += 1
    return label

  def start(self, label, node=None):
    self.cur_label = label
    self.cur_ops = []
    self.cur_loc = self.src.loc(node) if node is not None else None

  def emit(self, op):
    if self.cur_label is None:   # unreachable code: give it a block anyway
      self.start(self.new_label())
    self.cur_ops.append(op)

  def terminate(self, term):
    if self.cur_label is None:
      self.start(self.new_label())
    # A block's location is where its first instruction came from.
    locs = [op.loc for op in self.cur_ops if op.loc is not None]
    loc = locs[0] if locs else (term.loc or self.cur_loc)
    self.blocks.append(inst.Block(self.cur_label, tuple(self.cur_ops), term,
                                  loc))
    self.cur_label = None
    self.cur_ops = None

  def goto_new(self, node=None):
    """Ends the current block with a goto to a fresh block, and starts it."""
    label = self.new_label()
    self.terminate(inst.GotoOp(label))
    self.start(label, node)
    return label

  def temp(self):
    name = f'%{self.temp_count}'
    self.temp_count += 1
    return name

  # -- driver --------------------------------------------------------------

  def compile(self):
    node = self.node
    self._check_aliases()
    self.start(self.new_label(), node)
    body = node.body
    if (body and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)):
      body = body[1:]  # docstring
    self.statements(body)
    if self.returns == 0:
      raise errors.UnsupportedSyntaxError(
          f'Batched function {self.src.name!r} never returns a value',
          loc=self.src.loc(node),
          hint='End every path with `return <value>`.')
    if self.cur_label is not None:
      end = self.src.loc(node.body[-1]) if node.body else self.src.loc(node)
      self.blocks.append(inst.Block(self.cur_label, tuple(self.cur_ops),
                                    python_cfg.FallOff(end), self.cur_loc))
    blocks = python_cfg.prune_unreachable(self.blocks, self.name,
                                         self.params, self.optional_flags)
    return inst.Function(
        name=self.name, vars_in=self.params, vars_out=RETURN_VAR,
        blocks=tuple(blocks), type_inference=self.type_inference,
        loc=self.src.loc(node), python_function=self.fn)

  def _check_aliases(self):
    """Warns where `b = a` binds a second name to an array, the function
    assigns items of `b`, and reads `a` afterwards: in Python `a` shows
    the change, here arrays are values and `a` keeps its items
    (`ArgumentWriteWarning`; positions in the source approximate the
    order, so a loop may hide or show one)."""
    events = []   # (position, kind, name, other)
    for n in ast.walk(self.node):
      if isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not self.node:
        continue
      if isinstance(n, ast.Assign):
        pos = (n.lineno, n.col_offset)
        if (len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and
            isinstance(n.value, ast.Name) and n.value.id in self.locals and
            n.value.id != n.targets[0].id):
          events.append((pos, 'alias', n.targets[0].id, n.value.id))
      if isinstance(n, ast.Name):
        pos = (n.lineno, n.col_offset)
        if isinstance(n.ctx, ast.Store):
          events.append((pos, 'bind', n.id, None))
        elif isinstance(n.ctx, ast.Load):
          events.append((pos, 'read', n.id, None))
      if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
        base = n.value
        while isinstance(base, ast.Subscript):
          base = base.value
        if isinstance(base, ast.Name):
          events.append(((n.lineno, n.col_offset), 'write', base.id, None))
    events.sort(key=lambda e: e[0])
    for k, (pos, kind, alias, source) in enumerate(events):
      if kind != 'alias':
        continue
      written = None
      for p, what, name, _ in events[k + 1:]:
        if what == 'bind' and name in (alias, source) and p > pos:
          if written is None or name == source:
            break
        if written is None and what == 'write' and name == alias:
          written = p
        elif written is not None and what == 'read' and name == source:
          loc = self.src.loc(ast.Name(lineno=written[0]))
          errors.ArgumentWriteWarning.warn(
              f'{alias!r} holds the array of {source!r} ({alias} = '
              f'{source}), {self.name}() assigns items of {alias!r} and '
              f'reads {source!r} afterwards: in Python {source!r} would '
              f'show the change; here arrays are values, so {source!r} '
              f'keeps its items (in {self.name}, {loc.filename}, line '
              f'{loc.line}).  Assign the items to {source!r} itself, or '
              f'copy on purpose ({alias} = {source}.copy())', loc)
          break

  # -- statements ----------------------------------------------------------

  def statements(self, stmts):
    for s in stmts:
      self.statement(s)

  def statement(self, s):
    if (isinstance(s, ast.FunctionDef) and s.name in self.nested) or (
        isinstance(s, ast.Assign) and isinstance(s.value, ast.Lambda) and
        len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and
        s.targets[0].id in self.nested):
      return   # a helper, lifted (`python.nested`)
    for kind, (what, hint) in _UNSUPPORTED_STATEMENTS.items():
      if isinstance(s, kind):
        self.unsupported(s, what, hint)
    if not isinstance(s, ast.While):   # (its test: in the loop's header)
      assigned, s = _assignment_expressions(s)
      self.statements(assigned)
    method = getattr(self, f'stmt_{type(s).__name__}', None)
    if method is None:
      self.unsupported(s, f'{type(s).__name__} statements')
    method(s)

  def stmt_Pass(self, s):
    pass

  def stmt_Expr(self, s):
    if isinstance(s.value, ast.Constant):
      return  # a bare string or number: no effect
    self._check_helper_writes(s.value)
    self.expr(s.value)

  def _check_helper_writes(self, value):
    """Refuses a statement that calls a helper (not a batched function)
    assigning items of its parameter, for the change it makes in place
    (`swap(a, i, j)`): a primitive's arguments are values, so the change
    would be lost."""
    if not isinstance(value, ast.Call) or self._batched_callee(value):
      return
    helper = self._static_value(value.func)
    if not (isinstance(helper, types.FunctionType) and
            member_helpers.is_helper(helper)):
      return
    written = item_written_params(helper)
    if not written:
      return
    raise errors.UnsupportedSyntaxError(
        f'`{python_optional.unparse(value)}` calls {helper.__name__}(), '
        'which assigns '
        f'items of its parameter {written[0]!r} (or updates it) in place, '
        'for its effect alone: a batched function\'s arrays are values, '
        'so the change would be lost', loc=self.src.loc(value),
        hint=f'Return the array from {helper.__name__}() and assign it '
        f'(x = {helper.__name__}(x, ...)), or write the assignment here.')

  def stmt_Assign(self, s):
    if self._defines_constant(s.targets[0]):
      return
    if len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript):
      self._item_assignment(s, s.targets[0], s.value)
      return
    if self.per_member and any(
        isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)
        for t in s.targets for n in ast.walk(t)):
      # Items among the targets (`v[j], v[j + 1] = v[j + 1], v[j]`), as
      # Python assigns them: the value first, whole, then each target
      # from left to right.
      var = self.expr(s.value)
      for t in s.targets:
        self._assign_from(s, t, var)
      return
    parts = _display_parts(s)
    if parts:
      for part in parts:
        self.stmt_Assign(part)
      return
    for t in s.targets:
      self._check_target(t)
    if self.per_member and self._shape_unpacked(s):
      return
    if len(s.targets) == 1:
      target = s.targets[0]
      value = (self._unpacked(target, s.value) if self.per_member
               else s.value)
      if value is not s.value:
        # Printed as the user wrote it (`a, b = v`).
        value.listing_text = python_primitives.shorten(
            python_optional.unparse(s))
      self.expr(value, self._target_pattern(target))
      return
    var = self.expr(s.value)
    for t in s.targets:
      pattern = self._target_pattern(t)
      self.emit(inst.PrimOp((var,), pattern, inst.identity, var,
                            self.src.loc(s)))

  def _shape_unpacked(self, s):
    """`m, n = a.shape` of a member's array `a`: each name assigned its
    own item (`m = a.shape[0]`), a size fixed by the member's shape that
    type inference folds (`passes.size_folding`), as `a.shape[1]` is
    (the tuple assigned whole was a per-member value, and `np.zeros(n)`
    was refused).  Whether there are as many names as axes is checked
    by each item, as Python's unpacking does.  Returns whether `s` was
    that."""
    if len(s.targets) != 1:
      return False
    target, value = s.targets[0], s.value
    if not (isinstance(target, (ast.Tuple, ast.List)) and target.elts and
            all(isinstance(e, ast.Name) for e in target.elts) and
            isinstance(value, ast.Attribute) and value.attr == 'shape' and
            isinstance(value.value, ast.Name) and
            value.value.id in self.locals and
            value.value.id not in {e.id for e in target.elts}):
      return False
    for k, e in enumerate(target.elts):
      # `unpacked(a.shape, 2)[k]`: the count checked by each item.
      item = ast.copy_location(ast.Subscript(
          self._unpacked(target, copy.deepcopy(value)), ast.Constant(k),
          ast.Load()), value)
      ast.fix_missing_locations(item)
      item.listing_text = python_primitives.shorten(python_optional.unparse(s))
      self.expr(item, e.id)
    return True

  def _unpacked(self, target, value):
    """`value` for tuple `target` in a per-member function, where a
    member's array is unpacked (`a, b = v`, `(p, q), r = m[0], m[1]`):
    `member_ops.unpacked(v, 2)`, its items (a tuple stays as it is)."""
    if not isinstance(target, (ast.Tuple, ast.List)) or any(
        isinstance(e, ast.Starred) for e in target.elts):
      return value
    if isinstance(value, (ast.Tuple, ast.List)):
      if len(value.elts) != len(target.elts):
        return value
      elts = [self._unpacked(t, v) for t, v in zip(target.elts, value.elts)]
      if all(e is v for e, v in zip(elts, value.elts)):
        return value
      return ast.copy_location(type(value)(elts, ast.Load()), value)
    if self._contains_batched_call(value):
      return value
    call = ast.copy_location(ast.Call(
        ast.Attribute(ast.Name(self.prefix + python_primitives.MEMBER_OPS,
                               ast.Load()), 'unpacked', ast.Load()),
        [value, ast.Constant(len(target.elts))], []), value)
    ast.fix_missing_locations(call)
    return call

  def stmt_AnnAssign(self, s):
    if s.value is None or self._defines_constant(s.target):
      return
    self._check_target(s.target)
    self.expr(s.value, self._target_pattern(s.target))

  def _defines_constant(self, target):
    """Whether `target` is a local read as its literal (`constants`),
    whose one assignment compiles to nothing."""
    return isinstance(target, ast.Name) and target.id in self.constants

  def stmt_AugAssign(self, s):
    if (self.per_member and isinstance(s.target, ast.Subscript) and
        type(s.op) in _AUGMENTED and _has_variable_slice(s.target.slice)):
      # `w[:n] += 1` in a per-member function: the window's items updated
      # where they lie (`member_ops.setitem_with`), so that windows of
      # different lengths in different members need no read of their own.
      self._item_assignment(s, s.target, s.value,
                            helper=('setitem_with', _AUGMENTED[type(s.op)]))
      return
    if isinstance(s.target, ast.Subscript):
      read = ast.Subscript(copy.deepcopy(s.target.value),
                           copy.deepcopy(s.target.slice), ast.Load())
      value = ast.copy_location(ast.BinOp(left=read, op=s.op,
                                          right=s.value), s)
      # The items written keep their dtype where they are an array, as
      # NumPy's in-place operator keeps it, or are refused where NumPy
      # refuses the cast (`ops.in_place`).
      value = self._in_place(copy.deepcopy(read), value, s)
      ast.fix_missing_locations(value)
      self._item_assignment(s, s.target, value)
      return
    if not isinstance(s.target, ast.Name):
      self.unsupported(s, 'augmented assignment to items or attributes',
                       'Compute a new value and assign it to a variable.')
    value = ast.BinOp(left=ast.Name(s.target.id, ast.Load()), op=s.op,
                      right=s.value)
    ast.copy_location(value, s)
    if self.per_member:
      # One member's array updated in place keeps its dtype and shape, as
      # NumPy's; a number is rebound, as Python rebinds it.  (A
      # batch-aware variable is a value: `x = x op v`, as its dry run.)
      value = self._in_place(ast.Name(s.target.id, ast.Load()), value, s)
      # Printed as the user wrote it (`w *= d`).
      value.listing_text = python_primitives.shorten(
          python_optional.unparse(s))
    ast.fix_missing_locations(value)
    self.expr(value, s.target.id)

  def _in_place(self, read, value, s):
    """`<ops>.in_place(read, value)`: what NumPy's `x op= v` leaves, where
    `value` is `read op v` (`in_place` of `ops`, or of the per-member
    helpers in a per-member function)."""
    module = (self.prefix + python_primitives.MEMBER_OPS if self.per_member
              else self.prefix + 'ops')
    return ast.copy_location(ast.Call(
        ast.Attribute(ast.Name(module, ast.Load()), 'in_place', ast.Load()),
        [read, value], []), s)

  def _item_assignment(self, s, target, value, helper=('setitem', None)):
    """`x[index] = value` in a per-member function: `x` becomes a new
    value, `member_ops.setitem(x, index, value)`."""
    if not (isinstance(target.value, ast.Name)
            and target.value.id in self.locals):
      self.unsupported(
          target, 'assignment to items of anything but a variable',
          'Assign the item of a variable of the function (`x[i] = v`); '
          'for a nested item, take the inner array into a variable, '
          'assign its item, and put it back.')
    name = target.value.id
    if self.per_member:
      name_of, operation = helper
      call = ast.Call(
          ast.Attribute(ast.Name(self.prefix + python_primitives.MEMBER_OPS,
                                 ast.Load()), name_of, ast.Load()),
          [ast.Name(name, ast.Load()),
           python_primitives.member_key(self.prefix, target.slice, target),
           value] + ([ast.Constant(operation)] if operation else []), [])
    else:
      if name not in self.list_locals:
        self._check_batch_index(target)
      call = ast.Call(
          ast.Attribute(ast.Name(self.prefix + 'ops', ast.Load()),
                        'batch_setitem', ast.Load()),
          [ast.Name(name, ast.Load()),
           python_primitives.batch_key(self.prefix, target.slice, target),
           value], [])
    ast.copy_location(call, s)
    ast.fix_missing_locations(call)
    # Printed as the user wrote it (`cur[j] = ...`).
    call.listing_text = python_primitives.shorten(python_optional.unparse(s))
    self.expr(call, name)

  def _check_batch_index(self, target):
    """Refuses an item assignment of a batch-aware function whose index
    may not keep axis 0, the batch: it must start with `:` or `...`
    (`x[:, 0] = v`), its other parts the same for every member, or be
    one array read from the function's variables (a boolean mask of the
    whole array, checked when it runs: `ops.batch_setitem`)."""
    index = target.slice
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    first = parts[0] if parts else None
    keeps_batch = (
        isinstance(first, ast.Slice) and first.lower is None and
        first.upper is None and first.step is None) or (
            isinstance(first, ast.Constant) and first.value is Ellipsis)
    if keeps_batch:
      for p in parts[1:]:
        if self._reads_locals(p):
          self.unsupported(
              p, 'item assignments at an index that reads the function\'s '
              'variables (one index per member)',
              'Every variable holds one value per member, so `x[:, j] = v` '
              'would write every member\'s j into every member.  Write '
              'the function for one member (per_member=True), where '
              '`x[j] = v` is one member\'s item, or select with np.where '
              '(np.where(np.arange(W) == j[:, None], v[:, None], x)).')
      return
    if not isinstance(index, ast.Tuple) and self._reads_locals(index):
      return   # a boolean mask, checked when it runs
    self.unsupported(
        target, 'item assignments whose index does not keep axis 0 (the '
        'batch)',
        'Axis 0 of every array here is the batch: write `x[:, i] = v` '
        '(or `x[..., i] = v`) for each member\'s item i, `x[mask] = v` '
        'with a mask of the whole array, or write the function for one '
        'member (per_member=True), where `x[i] = v` is one member\'s '
        'item.  (A Python list that the function builds, `x = [a, b]`, '
        'takes `x[0] = v`; a list it is given or gets from a call: build '
        'the new list, `x = [v] + x[1:]`.)')

  def _assign_from(self, s, target, var):
    """Assigns variable `var` to `target`, a name, an item of a variable
    (per member) or a tuple or list of such, unpacking as Python does."""
    loc = self.src.loc(s)
    if isinstance(target, ast.Subscript):
      value = ast.copy_location(ast.Name(var, ast.Load()), target)
      self._item_assignment(s, target, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
      self._check_starred(target)
      parts = tuple(self.temp() for _ in target.elts)
      self.emit(inst.PrimOp((var,), list(parts) if isinstance(
          target, ast.List) else parts, inst.identity, var, loc))
      for e, part in zip(target.elts, parts):
        self._assign_from(s, e, part)
    else:
      self._check_target(target)
      self.emit(inst.PrimOp((var,), target.id, inst.identity, var, loc))

  def _check_starred(self, t):
    for e in t.elts:
      if isinstance(e, ast.Starred):
        self.unsupported(e, 'starred assignment targets',
                         'Unpack into a fixed number of names.')

  def _check_target(self, t):
    if isinstance(t, ast.Name):
      return
    if isinstance(t, (ast.Tuple, ast.List)):
      self._check_starred(t)
      for e in t.elts:
        self._check_target(e)
      return
    if isinstance(t, (ast.Attribute, ast.Subscript)):
      self.unsupported(
          t, 'assignment to items or attributes',
          'Arrays and namedtuples are values here: build a new one (e.g. '
          '`state = state._replace(x=...)` or with np.where) instead.')
    self.unsupported(t, f'assignment to {type(t).__name__}')

  def _target_pattern(self, t):
    if isinstance(t, ast.Name):
      return t.id
    if isinstance(t, ast.List):
      return [self._target_pattern(e) for e in t.elts]
    return tuple(self._target_pattern(e) for e in t.elts)

  def stmt_Return(self, s):
    if s.value is None:
      self.unsupported(s, 'return without a value',
                       'Batched functions must return a value on every '
                       'path.')
    self.expr(s.value, RETURN_VAR)
    self.returns += 1
    self.terminate(inst.ReturnOp(self.src.loc(s)))

  def stmt_If(self, s):
    cond = self._condition(s.test)
    then_label, else_label = self.new_label(), self.new_label()
    join_label = self.new_label() if s.orelse else else_label
    self.terminate(inst.BranchOp(cond, then_label, else_label,
                                 self.src.loc(s)))
    self._statements_at(then_label, s.body, join_label)
    if s.orelse:
      self._statements_at(else_label, s.orelse, join_label)
    self.start(join_label, s)

  def _statements_at(self, label, stmts, next_label):
    """Compiles `stmts` from block `label` on, then jumps to `next_label`
    where they end without leaving (a `return`, `break` or `continue`)."""
    self.start(label, stmts[0])
    self.statements(stmts)
    if self.cur_label is not None:
      self.terminate(inst.GotoOp(next_label))

  def _condition(self, test):
    """Compiles a condition; returns a variable name."""
    return self.expr(test)

  def _loop_body(self, s, body_label, continue_label, exit_label,
                 prologue=()):
    """Compiles the body of loop `s`; `break`/`continue` jump as given."""
    self.start(body_label, s.body[0])
    for op in prologue:
      self.emit(op)
    self.loops.append((continue_label, exit_label))
    self.statements(s.body)
    if self.cur_label is not None:
      self.terminate(inst.GotoOp(continue_label))
    self.loops.pop()

  def _loop_else(self, s, else_label, exit_label):
    """After loop `s`'s body: its `else` clause at `else_label` (where the
    loop's test fails; a `break` jumps past it, to `exit_label`), then
    the code after the loop at `exit_label`."""
    if s.orelse:
      self._statements_at(else_label, s.orelse, exit_label)
    self.start(exit_label, s)

  def stmt_While(self, s):
    header = self.goto_new(s)
    assigned, s = _assignment_expressions(s)
    self.statements(assigned)   # at every trip, before the test
    body, exit_label = self.new_label(), self.new_label()
    # Where the test fails: the `else` clause, if any (Python runs it
    # when the loop ends without a `break`).
    else_label = self.new_label() if s.orelse else exit_label
    if isinstance(s.test, ast.Constant) and s.test.value is True:
      self.terminate(inst.GotoOp(body))
    else:
      cond = self._condition(s.test)
      self.terminate(inst.BranchOp(cond, body, else_label, self.src.loc(s)))
    self._loop_body(s, body, header, exit_label)
    self._loop_else(s, else_label, exit_label)

  def _is_range(self, node):
    """Whether `node` is a call `range(...)` of one to three positional
    arguments (`range` not a local)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'range' and 'range' not in self.locals
            and not node.keywords and 1 <= len(node.args) <= 3)

  def stmt_For(self, s):
    it = self._reversed_range(s.iter)
    if not self._is_range(it):
      unrolled = self._unrolled_sequence(s)
      if unrolled is not None:
        self.statements(unrolled)
        return
      self._for_over_sequence(s)
      return
    if not isinstance(s.target, ast.Name):
      self.unsupported(s.target, 'for-loop targets other than a single name')
    unrolled = self._unrolled(s, it)
    if unrolled is not None:
      self.statements(unrolled)
      return
    args = list(it.args)
    start = ast.Constant(0) if len(args) == 1 else args[0]
    stop = args[0] if len(args) == 1 else args[1]
    step = args[2] if len(args) == 3 else ast.Constant(1)
    for a in (start, stop, step):
      ast.copy_location(a, it)
    loc = self.src.loc(s)
    counter, stop_var, step_var = self.temp(), self.temp(), self.temp()
    self.expr(start, counter)
    self.expr(stop, stop_var)
    step_sign = None
    if isinstance(step, ast.Constant) and isinstance(step.value, int):
      if step.value == 0:
        self.unsupported(step, 'range() with step 0')
      step_sign = 1 if step.value > 0 else -1
    self.expr(step, step_var)
    if _static_length(start, stop, step):
      # A range of literals that is not empty: the first trip goes
      # straight into the body, as Python's does, so a variable that the
      # body assigns is assigned after the loop (`for i in range(100):
      # mid = ...` then `return mid`).
      body = self.new_label()
      self.terminate(inst.GotoOp(body))
      header = self.new_label()
      self.start(header, s)
    else:
      header = self.goto_new(s)
      body = self.new_label()
    if step_sign == 1:
      fn, text = (lambda c, e: c < e), f'{counter} < {stop_var}'
    elif step_sign == -1:
      fn, text = (lambda c, e, _: c > e), f'{counter} > {stop_var}'
    else:
      fn = _range_condition
      text = f'{counter} < {stop_var} if {step_var} > 0 else ...'
    cond = self.temp()
    ins = (counter, stop_var) if step_sign == 1 else (
        counter, stop_var, step_var)
    self.emit(inst.PrimOp(ins, cond, fn, text, loc))
    latch, exit_label = self.new_label(), self.new_label()
    else_label = self.new_label() if s.orelse else exit_label
    self.terminate(inst.BranchOp(cond, body, else_label, loc))
    # The user's variable gets the counter at the top of each iteration, so
    # after the loop it holds the last value, as in Python.
    self._loop_body(s, body, latch, exit_label, prologue=[inst.PrimOp(
        (counter,), s.target.id, inst.identity, counter, loc)])
    self.start(latch, s)
    self.emit(inst.PrimOp((counter, step_var), counter, _add,
                          f'{counter} + {step_var}', loc))
    self.terminate(inst.GotoOp(header))
    self._loop_else(s, else_label, exit_label)

  def _for_over_sequence(self, s):
    """`for target in seq:` (`enumerate(seq)`, `zip(a, b, ...)`) as a loop
    over `range(len(seq))` whose body first assigns the target its item.

    `seq` is evaluated once, before the loop, as Python does.  In a
    per-member function it may be one member's array (`for x in v`); a
    sequence the same for every member (a global or closure list or
    tuple, a literal) is made an array (`np.asarray`).  In a batch-aware
    function only such a sequence is iterated (an array there holds the
    batch), its item read by `ops.static_item` (every member's at its own
    counter).  The items of a sequence of Python numbers are Python
    numbers, weak as literals are (`for c in (1.0, 0.5)` next to float32
    data is float32); those of a NumPy array or of NumPy scalars keep
    their dtype.
    """
    it = s.iter
    if self._display_written_out(s):
      return
    callee = (self._static_value(it.func) if isinstance(it, ast.Call)
              else _NOT_STATIC)
    target = s.target
    index_target, start = None, None
    keywords = {k.arg: k.value for k in getattr(it, 'keywords', ())}
    if (callee is builtins.enumerate and 1 <= len(it.args) <= 2 and
        set(keywords) <= ({'start'} if len(it.args) == 1 else set()) and
        isinstance(target, ast.Tuple) and len(target.elts) == 2 and
        not any(isinstance(a, ast.Starred) for a in it.args)):
      sources, targets = [it.args[0]], [target.elts[1]]
      index_target = target.elts[0]
      start = it.args[1] if len(it.args) == 2 else keywords.get('start')
      if self._zipped(sources[0], targets[0]):
        # `for i, (a, b) in enumerate(zip(u, v))`.
        sources, targets = list(sources[0].args), list(targets[0].elts)
    elif self._zipped(it, target):
      sources, targets = list(it.args), list(target.elts)
    else:
      sources, targets = [it], [target]
    pre, assigned, lengths = [], [], []

    def static(target, table, weak):
      """(target, item) pairs of `table`'s items, a tuple target taking
      the columns of a table of rows; `weak`: the items are Python
      numbers."""
      if isinstance(target, (ast.Tuple, ast.List)) and not any(
          isinstance(e, ast.Starred) for e in target.elts):
        if table.ndim < 2 or table.shape[1] != len(target.elts):
          self.unsupported(
              target, f'unpacking items of shape {table.shape[1:]} into '
              f'{len(target.elts)} names')
        for k, e in enumerate(target.elts):
          static(e, table[:, k], weak)
        return
      name = self._generated(f'table{self.temp_count}')
      self.temp_count += 1
      self.closure[name] = types.CellType(table)
      if self.per_member and weak:
        # At one Python int (as type inference passes a counter) the item
        # is one member's Python number: weak.
        assigned.append((target, lambda i, name=name: ast.Subscript(
            ast.Name(name, ast.Load()), ast.Name(i, ast.Load()),
            ast.Load())))
      elif self.per_member:
        # A variable's items: one member's NumPy scalars.
        member(target, self._sequence_copy(pre, ast.Name(name, ast.Load())))
      else:
        assigned.append((target, lambda i, name=name: ast.Call(
            ast.Attribute(ast.Name(self.prefix + 'ops', ast.Load()),
                          'static_item', ast.Load()),
            [ast.Name(name, ast.Load()), ast.Name(i, ast.Load())],
            [] if weak else [ast.keyword('weak', ast.Constant(False))])))

    def member(target, item):
      """(target, item) pairs of a member's items `item(counter)`, a tuple
      target taking their items in turn."""
      if isinstance(target, (ast.Tuple, ast.List)) and not any(
          isinstance(e, ast.Starred) for e in target.elts):
        for k, e in enumerate(target.elts):
          member(e, lambda i, k=k: ast.Subscript(item(i), ast.Constant(k),
                                                 ast.Load()))
        return
      assigned.append((target, item))

    for source, target in zip(sources, targets):
      known, weak = self._static_sequence(source)
      inner = self._reversed_of(source)
      # The body writes the array's items: each trip reads its item from
      # the variable as it is then, as Python's iterator does (of
      # `enumerate`, `zip` and `reversed` too).
      live = (python_source.iterated_live(
          s, self.locals, source if inner is None else inner)
              if known is None and self.per_member else None)
      if known is None and inner is not None and self.per_member:
        # A member's array backwards: its items from the last.
        source = ast.copy_location(ast.Subscript(
            inner, ast.Slice(None, None, ast.Constant(-1)), ast.Load()),
                                   source)
      if known is None and (not self.per_member or
                            not self._reads_locals(source)):
        self.unsupported(
            s, 'for loops over anything but range(...), a sequence the '
            'same for every member, or (with per_member=True) a member\'s '
            'array',
            'Write `for i in range(n)` (n may be batched) or a while loop; '
            'iterating over an array would iterate over the batch.')
      if known is not None:
        lengths.append(ast.Constant(len(known)))
        static(target, known, weak)
      elif live is not None:
        lengths.append(ast.Call(ast.Name('len', ast.Load()),
                                [ast.Name(live, ast.Load())], []))
        member(target, lambda i, live=live, back=inner is not None: (
            ast.Subscript(ast.Name(live, ast.Load()), ast.BinOp(
                ast.Constant(-1), ast.Sub(), ast.Name(i, ast.Load()))
                          if back else ast.Name(i, ast.Load()), ast.Load())))
      else:
        item = self._sequence_copy(pre, source)
        lengths.append(ast.Call(ast.Name('len', ast.Load()),
                                [ast.Name(item.name, ast.Load())], []))
        member(target, item)
    counter = self._generated(f'it{self.temp_count}')
    self.temp_count += 1
    self.locals.add(counter)
    length = lengths[0] if len(lengths) == 1 else ast.Call(
        ast.Name('min', ast.Load()), lengths, [])
    assigns = [ast.Assign([_stored(t)], item(counter))
               for t, item in assigned]
    if index_target is not None:
      index = ast.Name(counter, ast.Load())
      if start is not None:
        index = ast.BinOp(index, ast.Add(), start)
      assigns.insert(0, ast.Assign([_stored(index_target)], index))
    loop = ast.For(
        target=ast.Name(counter, ast.Store()),
        iter=ast.Call(ast.Name('range', ast.Load()), [length], []),
        body=assigns + list(s.body), orelse=list(s.orelse),
        type_comment=None)
    for node in pre + [loop]:
      for n in ast.walk(node):
        if not hasattr(n, 'lineno') or n.lineno is None:
          ast.copy_location(n, s)
    self.statements(pre)
    self.stmt_For(loop)

  def _display_written_out(self, s):
    """A batch-aware `for w in (a, b, c):` over a tuple or list written
    out of values the function computes: its items, evaluated once before
    the loop as Python does, then the body once per item with the target
    assigned it (`_MAX_UNROLLED` items at most; a body without `break` or
    `continue` of this loop).  Returns whether `s` was that."""
    it = s.iter
    if (self.per_member or not isinstance(it, (ast.Tuple, ast.List)) or
        not it.elts or len(it.elts) > _MAX_UNROLLED or
        any(isinstance(e, ast.Starred) for e in it.elts) or
        not self._reads_locals(it) or _leaves_loop(s.body)):
      return False
    temps = []
    for e in it.elts:
      name = self._generated(f'item{self.temp_count}')
      self.temp_count += 1
      self.locals.add(name)
      temps.append(name)
      self.statement(ast.copy_location(
          ast.Assign([ast.Name(name, ast.Store())], e), e))
    for name in temps:
      assign = ast.copy_location(ast.Assign(
          [_stored(s.target)], ast.Name(name, ast.Load())), s)
      ast.fix_missing_locations(assign)
      self.statement(assign)
      self.statements(copy.deepcopy(s.body))
    self.statements(s.orelse)
    return True

  def _zipped(self, it, target):
    """Whether `for target in it` is `for a, b in zip(u, v)`: a call of
    `zip` whose arguments the tuple `target` names one by one."""
    return (isinstance(it, ast.Call) and
            self._static_value(it.func) is builtins.zip and it.args and
            not it.keywords and isinstance(target, ast.Tuple) and
            len(target.elts) == len(it.args) and
            not any(isinstance(a, ast.Starred) for a in it.args))

  def _sequence_copy(self, pre, value):
    """A variable of the function's assigned `value` (in statements
    `pre`), and its item at a counter: `item(counter)`, with the
    variable's name as `item.name`."""
    name = self._generated(f'seq{self.temp_count}')
    self.temp_count += 1
    self.locals.add(name)
    pre.append(ast.Assign([ast.Name(name, ast.Store())], value))
    def item(i):
      return ast.Subscript(ast.Name(name, ast.Load()),
                           ast.Name(i, ast.Load()), ast.Load())
    item.name = name
    return item

  def _generated(self, suffix):
    """A name of the generated code's (`<prefix><suffix>`)."""
    return self.prefix + suffix

  def _reversed_of(self, node):
    """`x` where `node` is `reversed(x)`, else None."""
    if (isinstance(node, ast.Call) and len(node.args) == 1 and
        not node.keywords and not isinstance(node.args[0], ast.Starred) and
        self._static_value(node.func) is builtins.reversed):
      return node.args[0]
    return None

  def _static_sequence(self, node):
    """`(array, weak)` of a sequence that is the same for every member (a
    global's or closure's list, tuple or array, a literal, `reversed` of
    one), `weak` whether its items are Python numbers (a list or tuple of
    `bool`, `int`, `float`, `complex`, or of tuples of them), or `(None,
    False)`."""
    if self._reads_locals(node):
      return None, False
    inner = self._reversed_of(node)
    if inner is not None:
      known, weak = self._static_sequence(inner)
      return (None, False) if known is None else (known[::-1], weak)
    value = self._read_static(node)
    if value is _NOT_STATIC:
      try:
        value = ast.literal_eval(node)
      except (ValueError, TypeError, SyntaxError, MemoryError,
              RecursionError):
        return None, False
    if not isinstance(value, (list, tuple, np.ndarray)):
      return None, False
    try:
      table = np.asarray(value)
    except (ValueError, TypeError):
      return None, False
    if table.ndim == 0 or table.dtype == object:
      return None, False
    return table, _python_numbers(value)

  def _reads_locals(self, node):
    return any(isinstance(n, ast.Name) and n.id in self.locals
               for n in ast.walk(node))

  def stmt_Break(self, s):
    if not self.loops:
      self.unsupported(s, '`break` outside a loop')
    self.terminate(inst.GotoOp(self.loops[-1][1], self.src.loc(s)))

  def stmt_Continue(self, s):
    if not self.loops:
      self.unsupported(s, '`continue` outside a loop')
    self.terminate(inst.GotoOp(self.loops[-1][0], self.src.loc(s)))

  def stmt_Assert(self, s):
    cond = self._condition(s.test)
    ok, bad = self.new_label(), self.new_label()
    loc = self.src.loc(s)
    self.terminate(inst.BranchOp(cond, ok, bad, loc))
    self.start(bad, s)
    fail = self.temp()
    if s.msg is None or isinstance(s.msg, ast.Constant):
      message = (str(s.msg.value) if s.msg is not None
                 else f'assert {python_optional.unparse(s.test)}')
      self.emit(inst.PrimOp((), fail, lambda: ops_module.fail(message),
                            f'fail {message!r}', loc))
    elif self._contains_batched_call(s.msg):
      # The call cannot run inside the failing primitive: the message
      # stays its source.
      message = python_optional.unparse(s.msg)
      self.emit(inst.PrimOp((), fail, lambda: ops_module.fail(message),
                            f'fail {message!r}', loc))
    else:
      # The message reads the function's variables: the primitive gets
      # them, and the VM computes the message for the failing members it
      # names, each from its own rows (`errors.FailedAssertion`).  Only
      # this block, which members reach when the assert fails, reads them.
      message = python_optional.unparse(s.msg)
      self._check_values(s.msg)
      self._check_pure(s.msg)
      rewritten, inputs = python_primitives.PrimitiveRewriter(
          self.locals, self._static_value, self.unsupported,
          self.prefix).rewrite(s.msg)
      compute = python_primitives.make_function(
          rewritten, len(inputs), self.src.loc(s.msg),
          python_primitives.expression_text(s.msg), self.closure,
          self.fn.__globals__, self.src.name, self.prefix)
      one_member = self.per_member
      self.emit(inst.PrimOp(
          tuple(inputs), fail,
          lambda *values: ops_module.fail(message, compute, *values,
                                          one_member=one_member),
          f'fail {python_primitives.shorten(message)}', loc))
    self.terminate(inst.GotoOp(ok))
    self.start(ok, s)

  # -- expressions ---------------------------------------------------------

  def _batched_callee(self, call):
    """The name of the batched function `call` calls, or None."""
    if not isinstance(call, ast.Call):
      return None
    obj = self._static_value(call.func)
    # A bare name registered in the Context is a batched call even where it
    # is not bound yet or names the undecorated function (TFP's rule:
    # `f = ctx.batch_uncurried(f_impl, ...)` with f_impl calling itself).
    name = (call.func.id if isinstance(call.func, ast.Name)
            and call.func.id not in self.locals else None)
    return self.resolve_batched(None if obj is _NOT_STATIC else obj, name)

  def _static_value(self, node):
    """The Python object a Name/Attribute chain of non-locals refers to."""
    return member_helpers.static_value(node, self.locals, self.closure,
                                       self.fn.__globals__, _NOT_STATIC)

  def _read_static(self, node):
    """`_static_value(node)`, where the compiled code keeps the value
    (a loop's trips, a table): noted in `static_reads`, so a call after
    the user rebinds or changes it compiles the function anew."""
    value = self._static_value(node)
    chain = _name_chain(node)
    if (value is not _NOT_STATIC and chain is not None and
        chain[0] not in self.constants and chain[0] not in self.nested):
      self.static_reads.append((chain, _snapshot(value)))
    return value

  def _contains_batched_call(self, node):
    return any(self._batched_callee(n) is not None for n in ast.walk(node))

  def expr(self, node, target=None):
    """Compiles `node`; stores it in `target` (a name pattern) if given.

    Returns the variable (or pattern) holding the value.
    """
    for kind, (what, hint) in _UNSUPPORTED_EXPRESSIONS.items():
      for n in ast.walk(node):
        if isinstance(n, kind):
          self.unsupported(n, what, hint)
    self._check_values(node)
    self._check_helper_arguments(node)
    if not self._contains_batched_call(node):
      if (isinstance(node, ast.Name) and node.id in self.locals
          and target is None):
        return node.id
      return self._primitive(node, target)
    callee = self._batched_callee(node)
    if callee is not None:
      return self._call(node, callee, target)
    if isinstance(node, ast.IfExp):
      return self._ifexp(node, target)
    if isinstance(node, ast.BoolOp):
      return self._boolop(node, target)
    if isinstance(node, ast.Compare) and len(node.ops) > 1:
      return self._boolop(python_primitives.split_compare(node), target)
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                         ast.GeneratorExp)):
      self.unsupported(node, 'calls of batched functions inside lambdas or '
                       'comprehensions', 'Call them in a statement.')
    # A pure expression around batched calls: evaluate each call-containing
    # child (left to right), then the rest as one primitive.
    node = _Substituter(self).visit(_deepcopy(node))
    return self._primitive(node, target)

  def _check_values(self, node):
    """Rejects a lambda as a value and calls of `print`, which would
    otherwise fail later with a message about types."""
    def lambdas(n):
      if isinstance(n, ast.Lambda):
        yield n
      elif isinstance(n, (ast.Tuple, ast.List)):
        for e in n.elts:
          yield from lambdas(e)
    calls = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    for n in ast.walk(node):
      if (isinstance(n, ast.Name) and n.id in self.nested and
          id(n) not in calls and getattr(
              self.closure[n.id].cell_contents, python_nested.FREE, ())):
        self.unsupported(
            n, f'helper {n.id!r}, which reads the batched function\'s '
            'variables, as a value',
            'Call it (its variables are passed at each call), or pass '
            'those values as arguments of a helper defined at module '
            'level.')
    for n in lambdas(node):
      raise errors.UnsupportedSyntaxError(
          'lambdas as values are not supported in batched functions: a '
          'variable of a batched function holds arrays, one row per member, '
          'not functions', loc=self.src.loc(n),
          hint='Define the function with `def` at module level and call it '
          'from here (it then runs as a primitive on whole batches), or '
          'write its expression inline.  A lambda passed straight to a '
          'function (`tf.map_fn(lambda r: ..., x)`) is fine.')
    for n in ast.walk(node):
      if (isinstance(n, ast.Call) and
          self._static_value(n.func) is builtins.print):
        raise errors.UnsupportedSyntaxError(
            'print() is not supported in batched functions: a batched '
            'function\'s statements run on whole batches, not per member, '
            'so print would run once on made-up values while types are '
            'inferred, then once per execution of its block (or once while '
            'a tf.function traces), never once per member',
            loc=self.src.loc(n),
            hint='Call the function with dry_run=True to run each member '
            'alone as plain Python: print works there and shows that '
            'member\'s values.  Or return the values you want to see.')
    for n in ast.walk(node):
      if not isinstance(n, ast.Call):
        continue
      if (isinstance(n.func, ast.Attribute) and
          n.func.attr in _IN_PLACE and isinstance(n.func.value, ast.Name) and
          n.func.value.id in self.locals):
        name = n.func.value.id
        raise errors.UnsupportedSyntaxError(
            f'`{name}.{n.func.attr}(...)` changes {name!r} in place, which '
            'a batched function cannot do: its variables hold values, and '
            'a call changes none of them (the change would be lost)',
            loc=self.src.loc(n),
            hint='Assign a new value instead: for a list that grows, '
            'make an array of its final size (out = np.zeros(n)) and '
            'assign its items (out[k] = x), or build a tuple (out = out + '
            '(x,)) where the count is the same for every member; for a '
            f'sort, {name} = np.sort({name}); for a fill, {name} = '
            f'np.full_like({name}, v).')
      func = self._static_value(n.func)
      written = None
      if _writes_in_place(func) and n.args:
        written = n.args[0]
      for k in n.keywords:
        if k.arg == 'out' and _numpy_callable(func):
          written = k.value
      name = _root_name(written)
      if name is None or name not in self.locals:
        continue
      what = python_optional.unparse(n.func)
      raise errors.UnsupportedSyntaxError(
          f'`{what}(...)` writes {name!r} in place, which a batched '
          'function cannot do: its variables hold values, and a call '
          'changes none of them (the change would be lost)',
          loc=self.src.loc(n),
          hint='Assign a new value instead: for np.fill_diagonal(d, v), '
          'd = np.where(np.eye(d.shape[-1], dtype=bool), v, d); for '
          'out=, assign the result (d = np.add(a, b)); for np.copyto(d, '
          's), d = s * 1 (or np.where(mask, s, d)).  A helper function '
          'the batched function calls may write its own arrays in place.')

  def _call(self, node, callee, target):
    for a in node.args:
      if isinstance(a, ast.Starred):
        self.unsupported(a, 'starred arguments in calls of batched functions',
                         'Pass each argument explicitly.')
    for k in node.keywords:
      if k.arg is None:
        self.unsupported(node, '**kwargs in calls of batched functions',
                         'Pass each argument explicitly.')
    params = self.params_of(callee)
    positional = self.positional_of(callee)
    defaults = self.defaults_of(callee)
    loc = self.src.loc(node)
    nargs = len(node.args) + len(node.keywords)
    if len(node.args) > positional:
      raise errors.ArgumentError(
          f'{callee}() takes {positional} positional argument(s) '
          f'({", ".join(params[:positional])}) but {len(node.args)} were '
          'given', loc=loc)
    by_name = {}
    for k in node.keywords:
      if k.arg not in params:
        raise errors.ArgumentError(
            f'{callee}() got an unexpected keyword argument {k.arg!r}',
            loc=loc, hint=f'Its parameters are: {", ".join(params)}.')
      by_name[k.arg] = k.value
    positional = dict(zip(params, node.args))
    for name in by_name:
      if name in positional:
        raise errors.ArgumentError(
            f'{callee}() got multiple values for argument {name!r}', loc=loc)
    positional.update(by_name)
    self._check_argument_writes(node, callee, positional, target)
    missing = [p for p in params if p not in positional and p not in defaults]
    if missing:
      raise errors.ArgumentError(
          f'{callee}() takes {len(params)} argument(s) '
          f'({", ".join(params)}) but {nargs} were given; missing '
          f'{", ".join(missing)}', loc=loc)
    # Arguments that are None (`None`, a default of None, a variable that
    # is None throughout) call the callee's variant with those fixed.
    static = tuple(p for p in params if (
        self._is_none(positional[p]) if p in positional else
        defaults[p] is None))
    if static and self.variant_of is not None:
      callee = self.variant_of(callee, static)
    else:
      static = ()
    arg_vars = []
    for p in params:
      if p in static:
        continue
      if p in positional:
        arg_vars.append(self.expr(positional[p]))
      else:
        # An omitted argument is its default value, as if written in the
        # call (a Python number is a literal that takes the type it meets).
        var = self.temp()
        value = defaults[p]
        self.emit(inst.PrimOp((), var, _constant(value),
                              f'{p}={python_primitives.shorten(repr(value))}', loc))
        arg_vars.append(var)
    out = target if target is not None else self.temp()
    self.emit(inst.FunctionCallOp(callee, tuple(arg_vars), out, loc))
    return out

  def _check_helper_arguments(self, node):
    """`_check_argument_writes` for the calls of the user's helpers (plain
    functions, run within a primitive) in expression `node`."""
    for call in ast.walk(node):
      if not isinstance(call, ast.Call) or self._batched_callee(call):
        continue
      helper = self._static_value(call.func)
      if not (isinstance(helper, types.FunctionType) and
              member_helpers.is_helper(helper)) or any(
                  isinstance(a, ast.Starred) for a in call.args):
        continue
      written = item_written_params(helper)
      if not written:
        continue
      code = helper.__code__
      names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
      arguments = dict(zip(names, call.args))
      arguments.update({k.arg: k.value for k in call.keywords if k.arg})
      self._check_argument_writes(call, helper.__name__, arguments, None,
                                  written)

  def _check_argument_writes(self, call, callee, arguments, target,
                             written=None):
    """Warns where `call` passes a variable that the caller reads later
    to a parameter whose items `callee` assigns (`written`, else the
    batched callee's `writes_of`): Python's caller would see the change,
    this one keeps its value (`ArgumentWriteWarning`).  A call whose
    result the variable takes (`v = f(v)`) does not warn."""
    assigned = set(inst.pattern_flatten(target)) if target is not None else (
        set())
    for p in (self.writes_of(callee) if written is None else written):
      arg = arguments.get(p)
      if not (isinstance(arg, ast.Name) and arg.id in self.locals and
              arg.id not in assigned and self._read_after(call, arg.id)):
        continue
      loc = self.src.loc(call)
      errors.ArgumentWriteWarning.warn(
          f'{callee}() assigns items of its parameter {p!r} (or updates '
          f'it in place), which this call passes {arg.id!r}, and '
          f'{self.name}() reads {arg.id!r} afterwards: in Python the call '
          f'would change the array {arg.id!r} holds; here a batched '
          f'function\'s arrays are values, so {arg.id!r} keeps its value '
          f'(in {self.name}, {loc.filename}, line {loc.line}).  '
          f'Return the array and assign it: {arg.id} = {callee}(...), or '
          f'return it with the result ({p} and the value as a tuple)', loc)

  def _read_after(self, call, name):
    """Whether this function reads variable `name` after `call` runs:
    later in its source, or at all where a loop holds the call (whose
    next trip passes the variable again)."""
    def path(node, around):
      """The nodes from the function down to `call`, or None."""
      if node is call:
        return around
      for c in ast.iter_child_nodes(node):
        found = path(c, around + [node])
        if found is not None:
          return found
      return None
    above = path(self.node, []) or []
    inside = {id(n) for n in ast.walk(call)}
    end = (call.end_lineno, call.end_col_offset)
    returned = next((n for n in above if isinstance(n, ast.Return)), None)
    # After a `return` holding the call only the rest of that statement
    # runs; in a loop the next trip passes the variable again.
    scope = returned or self.node
    if returned is None and any(isinstance(n, (ast.For, ast.While))
                                for n in above):
      return True
    return any(isinstance(n, ast.Name) and n.id == name and
               isinstance(n.ctx, ast.Load) and id(n) not in inside and
               (n.lineno, n.col_offset) >= end for n in ast.walk(scope))

  def _unrolled(self, s, it):
    """A batch-aware `for i in range(...)` of at most `_MAX_UNROLLED`
    trips known when compiling, as its trips written out, each with `i`
    its number: the statements, or None.

    A loop counter is one number per member, an array `[batch]`, which
    lines up with a member's vector's last axis (`i * v`) and may not
    index after the batch's colon (`x[:, i] = v`).  The trips' numbers
    are the same for every member, so each trip reads its own as Python
    does.  Which loops stay loops: `_written_out`.
    """
    if self.per_member:
      return None
    bounds = [self._static_int(a) for a in it.args]
    if None in bounds or (len(bounds) == 3 and bounds[2] == 0):
      return None
    return self._written_out(s, [{s.target.id: k}
                                 for k in range(*bounds)])

  def _unrolled_sequence(self, s):
    """A batch-aware `for x in SEQ` (`for a, b in SEQ`) over a tuple or
    list of at most `_MAX_UNROLLED` Python values (numbers, strings,
    None, tuples of them) as its trips written out, each with the names
    its item's values: the statements, or None.  So a table's rows may mix
    strings and numbers (`for name, w in (('a', 1.0), ('b', 2.0))`), and
    each item is Python's value, not one per member.  Per member only a
    table holding values no array holds (strings, None) is written out:
    a loop over numbers reads its items at the counter."""
    if self._reads_locals(s.iter):
      return None
    value = self._read_static(s.iter)
    if value is _NOT_STATIC:
      try:
        value = ast.literal_eval(s.iter)
      except (ValueError, TypeError, SyntaxError, MemoryError,
              RecursionError):
        return None
    if not isinstance(value, (tuple, list)) or not all(
        python_source.is_constant_value(v) for v in value):
      return None
    words = _holds_non_numbers(value)
    if self.per_member and not words:
      return None
    trips = []
    for item in value:
      trip = _bind_target(s.target, item)
      if trip is None:
        return None
      trips.append(trip)
    out = self._written_out(s, trips)
    if out is None and words:
      # No array holds its strings: written out or not at all.
      self.unsupported(
          s, 'A loop over a table holding strings or None that cannot be '
          'written out', hint=(
              f'such a loop runs as its trips written out, which takes at '
              f'most {_MAX_UNROLLED} items and a body that does not leave '
              'early (break, continue, return), call a batched function, '
              'define a function or rebind the loop\'s names, and whose '
              'names are not read after the loop.  Skip a trip with an if '
              '(`if name != "b": ...`) in place of continue, or loop over '
              'numbers (an index into the table)'))
    return out

  def _written_out(self, s, trips):
    """Loop `s`'s body once per trip (a dict: target name -> its value),
    each name read as its value, then the `else` part (only that where
    there is no trip); or None where the loop stays a loop: more trips
    than `_MAX_UNROLLED`; a body that
    leaves early (its own `break` or `continue`, `return`), calls a batched
    function, binds a target name or rebinds it in an inner scope; a
    body that reads none of the names; or a name read or bound elsewhere
    in the function (after the loop: the dry run gives a loop's variable
    its member's value)."""
    if not trips:
      # Python never runs the body (nor binds the target): the `else`,
      # where each name the body binds is bound elsewhere too (else the
      # loop stays, and a read after it fails as Python's does).
      def bound(tree):
        return collections.Counter(
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del)))
      inside, everywhere = bound(s), bound(self.node)
      if all(everywhere[n] > k for n, k in inside.items()
             if not (isinstance(s.target, ast.Name) and n == s.target.id)):
        return list(s.orelse)
      return None
    if len(trips) > _MAX_UNROLLED:
      return None
    names = set(trips[0])
    body = list(s.body)
    reads = False
    if _leaves_loop(body):
      return None   # (an inner loop's `break` leaves only that loop)
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
      if isinstance(node, (ast.Return,
                           ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef, ast.Lambda, ast.comprehension,
                           ast.Global, ast.Nonlocal, ast.Try)):
        return None
      if isinstance(node, ast.Name) and node.id in names:
        if not isinstance(node.ctx, ast.Load):
          return None
        reads = True
      if isinstance(node, ast.Call) and self._batched_callee(
          node) is not None:
        return None

    def count(tree):
      return sum(isinstance(n, ast.Name) and n.id in names
                 for n in ast.walk(tree))
    if not reads or count(s) != count(self.node):
      return None
    out = []
    for trip in trips:
      for stmt in body:
        copy_ = _deepcopy(stmt)
        for node in ast.walk(copy_):
          for field, value in ast.iter_fields(node):
            if isinstance(value, ast.Name) and value.id in trip:
              setattr(node, field, ast.copy_location(
                  ast.Constant(trip[value.id]), value))
            elif isinstance(value, list):
              value[:] = [ast.copy_location(ast.Constant(trip[v.id]), v)
                          if isinstance(v, ast.Name) and v.id in trip
                          else v for v in value]
        out.append(copy_)
    out.extend(s.orelse)
    for stmt in out:
      ast.fix_missing_locations(stmt)
    return out

  def _static_int(self, node):
    """The int a range bound is when compiling (a literal, a constant
    local, a global or closure int), else None."""
    value = _int_literal(node)
    if value is not None:
      return value
    if isinstance(node, (ast.Name, ast.Attribute)):
      value = self._read_static(node)
      if type(value) is int:  # pylint: disable=unidiomatic-typecheck
        return value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id == 'len' and 'len' not in self.locals and
        self._static_value(node.func) is len and len(node.args) == 1 and
        not node.keywords):
      # `len(TABLE)` of a global or closure tuple, list or array.
      value = self._read_static(node.args[0]) if isinstance(
          node.args[0], (ast.Name, ast.Attribute)) else _NOT_STATIC
      if isinstance(value, (tuple, list)) or (
          isinstance(value, np.ndarray) and value.ndim):
        return len(value)
      return None
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPERATORS:
      left, right = self._static_int(node.left), self._static_int(node.right)
      if left is None or right is None or (
          isinstance(node.op, ast.FloorDiv) and right == 0):
        return None
      return _INT_OPERATORS[type(node.op)](left, right)
    return None

  def _reversed_range(self, it):
    """`reversed(range(a, b, s))` (a literal step `s`) as the range it
    iterates, `range(a + (b - a - sign) // s * s, a - sign, -s)`; any
    other iterable as it is."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
            and it.func.id == 'reversed' and 'reversed' not in self.locals
            and len(it.args) == 1 and not it.keywords):
      return it
    inner = it.args[0]
    if not self._is_range(inner):
      return it
    args = list(inner.args)
    step = _int_literal(args[2]) if len(args) == 3 else 1
    if not step or any(self._contains_batched_call(a) for a in args):
      return it
    start = ast.Constant(0) if len(args) == 1 else args[0]
    stop = args[0] if len(args) == 1 else args[1]
    sign = 1 if step > 0 else -1

    def op(left, kind, right):
      return ast.BinOp(left=left, op=kind, right=right)
    last = op(_deepcopy(start), ast.Add(), op(op(op(op(
        _deepcopy(stop), ast.Sub(), _deepcopy(start)), ast.Sub(),
        ast.Constant(sign)), ast.FloorDiv(), ast.Constant(step)), ast.Mult(),
        ast.Constant(step)))
    new = ast.Call(func=ast.Name('range', ast.Load()), args=[
        last, op(_deepcopy(start), ast.Sub(), ast.Constant(sign)),
        ast.Constant(-step)], keywords=[])
    for n in ast.walk(new):
      ast.copy_location(n, it)
    return new

  def _is_none(self, node):
    """Whether argument `node` is None when the function compiles: the
    literal, or a name that holds it throughout (`constants`)."""
    if isinstance(node, ast.Constant):
      return node.value is None
    return (isinstance(node, ast.Name) and node.id in self.constants and
            self.constants[node.id] is None)

  def _ifexp(self, node, target):
    out = target if target is not None else self.temp()
    if not isinstance(out, str):
      tmp = self._ifexp(node, None)
      self.emit(inst.PrimOp((tmp,), out, inst.identity, tmp,
                            self.src.loc(node)))
      return out
    cond = self._condition(node.test)
    a, b, join = self.new_label(), self.new_label(), self.new_label()
    self.terminate(inst.BranchOp(cond, a, b, self.src.loc(node)))
    self.start(a, node)
    self.expr(node.body, out)
    self.terminate(inst.GotoOp(join))
    self.start(b, node)
    self.expr(node.orelse, out)
    self.terminate(inst.GotoOp(join))
    self.start(join, node)
    return out

  def _boolop(self, node, target):
    """`a and b` / `a or b` with short-circuit, for batched-call operands."""
    out = target if isinstance(target, str) else self.temp()
    loc = self.src.loc(node)
    is_and = isinstance(node.op, ast.And)
    self.expr(node.values[0], out)
    join = self.new_label()
    for v in node.values[1:]:
      nxt = self.new_label()
      self.terminate(inst.BranchOp(out, nxt, join, loc) if is_and else
                     inst.BranchOp(out, join, nxt, loc))
      self.start(nxt, v)
      self.expr(v, out)
    self.terminate(inst.GotoOp(join))
    self.start(join, node)
    if target is not None and not isinstance(target, str):
      self.emit(inst.PrimOp((out,), target, inst.identity, out, loc))
      return target
    return out

  def _primitive(self, node, target):
    loc = self.src.loc(node)
    self._check_pure(node)
    rewriter = python_primitives.PrimitiveRewriter(
        self.locals, self._static_value, self.unsupported, self.prefix,
        self.per_member)
    rewritten, inputs = rewriter.rewrite(node)
    text = (getattr(node, 'listing_text', None) or
            python_primitives.expression_text(node))
    out = target if target is not None else self.temp()
    if self.per_member and isinstance(node, ast.Name) and inputs:
      # A copy means the same for one member as for the batch.
      self.emit(inst.PrimOp(tuple(inputs), out, inst.identity, text, loc))
      return out
    # (Without inputs a value is the same for every member, and the
    # batch-aware primitive broadcasts it.)
    per_member = self.per_member and bool(inputs)
    subscripts = () if per_member else python_primitives.subscript_parts(
        rewriter, len(inputs), loc, self.closure, self.fn.__globals__,
        self.src.name)
    maker = _PrimitiveMaker(
        self.closure, self.fn.__globals__, self.src.name, self.prefix,
        self._helpers(), self.per_member, functools.partial(
            _static_value, frozenset(self.locals), self.closure,
            self.fn.__globals__))
    function = maker.make(rewritten, len(inputs), loc, text, per_member,
                          subscripts)
    # Its form where Python numbers that the members compute meet arrays
    # (`python_primitives.weak_operands`), which type inference takes.
    type_inference.register_weak_form(function, functools.partial(
        _weak_form, maker, rewritten, len(inputs), loc, text, per_member,
        subscripts))
    if per_member:
      self.emit(inst.PrimOp(tuple(inputs), out, function, text, loc,
                            per_member=True))
      return out
    sync = any(getattr(self._static_value(n.func), ops_module.SYNC_ATTRIBUTE,
                       False)
               is True for n in ast.walk(node) if isinstance(n, ast.Call))
    self.emit(inst.PrimOp(tuple(inputs), out, function, text, loc, sync))
    return out

  def _helpers(self):
    """The objects a primitive's code reads besides the user's: the
    per-member helpers, in a per-member function."""
    if not self.per_member:
      return None
    return {python_primitives.MEMBER_OPS: member_ops}

  def _check_pure(self, node):
    for n in ast.walk(node):
      if isinstance(n, ast.comprehension) and not self.per_member:
        if any(isinstance(m, ast.Name) and m.id in self.locals
               for m in ast.walk(n.iter)):
          self.unsupported(
              n.iter, 'comprehensions over batched values',
              'Iterating over a batched array iterates over the batch; use '
              'array operations, or range() over a Python int.')
      if isinstance(n, ast.Lambda):
        if any(isinstance(m, (ast.IfExp, ast.BoolOp)) for m in ast.walk(n)):
          self.unsupported(
              n, 'lambdas with control flow',
              'Define a batched function instead, or use np.where.')
      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
        if (not n.id.startswith(('%', self.prefix)) and n.id not in self.locals
            and n.id not in self.closure
            and n.id not in self.fn.__globals__
            and not hasattr(builtins, n.id) and not _bound_inside(node, n.id)):
          raise errors.NameResolutionError(
              f'name {n.id!r} is not defined', loc=self.src.loc(n),
              hint='Define it at module level or as a variable of the '
              'function before using it.')


_NOT_STATIC = object()


def _leaves_loop(body):
  """Whether statements `body` of a loop hold a `break` or `continue` of
  that loop (not of a loop inside it)."""
  todo = list(body)
  while todo:
    node = todo.pop()
    if isinstance(node, (ast.Break, ast.Continue)):
      return True
    if isinstance(node, (ast.For, ast.While)):
      todo.extend(node.orelse)   # its body's belong to it
      continue
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef, ast.Lambda)):
      continue
    todo.extend(ast.iter_child_nodes(node))
  return False


def _stored(target):
  """A copy of assignment target `target` in store context (a tuple's or
  list's elements too; what a subscript or attribute reads stays
  loaded)."""
  target = copy.deepcopy(target)
  def store(n):
    n.ctx = ast.Store()
    if isinstance(n, (ast.Tuple, ast.List)):
      for e in n.elts:
        store(e)
    elif isinstance(n, ast.Starred):
      store(n.value)
  store(target)
  return target


def _bound_inside(node, name):
  """Whether `name` is bound by a lambda or comprehension inside `node`."""
  for n in ast.walk(node):
    if isinstance(n, ast.Lambda):
      if any(a.arg == name for a in n.args.args):
        return True
    if isinstance(n, ast.comprehension):
      if any(isinstance(t, ast.Name) and t.id == name
             for t in ast.walk(n.target)):
        return True
  return False


def _add(a, b):
  return a + b


# The most trips a batch-aware `for i in range(K)` is written out for
# (`_Compiler._unrolled`).
_MAX_UNROLLED = 8
# The arithmetic of range bounds known when compiling (`_static_int`).
_INT_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub,
                  ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _python_numbers(value):
  """Whether `value` is a list or tuple of Python numbers (`bool`, `int`,
  `float`, `complex`, not NumPy's scalars) or of lists and tuples of
  them."""
  if type(value) not in (list, tuple):
    return False
  return all(type(v) in (bool, int, float, complex) or _python_numbers(v)
             for v in value)


def _holds_non_numbers(value):
  """Whether constant `value` (`is_constant_value`) holds a value that
  is no number (a string, bytes, None), which no array holds."""
  if isinstance(value, (tuple, list)):
    return any(_holds_non_numbers(v) for v in value)
  return type(value) not in (bool, int, float, complex)


def _bind_target(target, item):
  """`{name: value}` of loop target `target` (a name, or a tuple of
  names) bound to `item`, or None where it does not unpack so."""
  if isinstance(target, ast.Name):
    return {target.id: item}
  if (isinstance(target, (ast.Tuple, ast.List)) and
      isinstance(item, (tuple, list)) and len(item) == len(target.elts)):
    out = {}
    for t, v in zip(target.elts, item):
      sub = _bind_target(t, v)
      if sub is None or set(sub) & set(out):
        return None
      out.update(sub)
    return out
  return None


# Items of a list or tuple that `_snapshot` compares one by one, at most
# (a longer one: by identity and length).
_MAX_SNAPSHOT_ITEMS = 1024
_SNAPSHOT_SCALARS = (int, float, complex, str, bytes, type(None), np.generic)


def _name_chain(node):
  """`('cfg', 'scale')` of `cfg.scale` (a Name/Attribute chain), else
  None."""
  if isinstance(node, ast.Name):
    return (node.id,)
  if isinstance(node, ast.Attribute):
    base = _name_chain(node.value)
    return None if base is None else base + (node.attr,)
  return None


def _snapshot(value):
  """What identifies a value the compiled code holds: numbers and strings
  by value, lists and tuples item by item, an array (which the code holds
  itself, so sees written in place) by identity, shape and dtype, anything
  else by identity."""
  if isinstance(value, _SNAPSHOT_SCALARS):
    return (type(value), value)
  if isinstance(value, (list, tuple)):
    if len(value) > _MAX_SNAPSHOT_ITEMS:
      return (type(value), id(value), len(value))
    return (type(value), tuple(_snapshot(v) for v in value))
  if isinstance(value, np.ndarray):
    return (np.ndarray, id(value), value.shape, value.dtype.str)
  return (type(value), id(value))


def _chain_value(fn, chain):
  """The value name chain `chain` of `fn`'s non-locals refers to now, or
  `_NOT_STATIC`."""
  name = chain[0]
  code = getattr(fn, '__code__', None)
  cells = dict(zip(code.co_freevars, fn.__closure__ or ())) if code else {}
  if name in cells:
    try:
      value = cells[name].cell_contents
    except ValueError:   # an empty cell
      return _NOT_STATIC
  elif name in fn.__globals__:
    value = fn.__globals__[name]
  else:
    value = getattr(builtins, name, _NOT_STATIC)
  for attr in chain[1:]:
    if value is _NOT_STATIC:
      break
    value = getattr(value, attr, _NOT_STATIC)
  return value


def static_reads_changed(fn, reads):
  """Whether a global or closure value that compiling Python function
  `fn` read (`compile_function`'s `static_reads`) is another now.

  Args:
    fn: The user's Python function.
    reads: The `(name chain, snapshot)` pairs compiling it noted.

  Returns:
    True if any value differs from its snapshot.
  """
  return any(_snapshot(_chain_value(fn, chain)) != snap
             for chain, snap in reads)


def _int_literal(node):
  """The value of an integer literal (`3`, `-3`), else None."""
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
    value = _int_literal(node.operand)
    return None if value is None else -value
  if isinstance(node, ast.Constant) and type(node.value) is int:
    return node.value
  return None


def _static_length(start, stop, step):
  """The length of `range(start, stop, step)` written with literals, or
  0 where it is empty or any bound is not a literal."""
  values = [_int_literal(a) for a in (start, stop, step)]
  if None in values or values[2] == 0:
    return 0
  return len(range(*values))


def _range_condition(c, e, s):
  return ops_module.where(s > 0, c < e, c > e)


def _constant(value):
  """A primitive without inputs computing `value` (a default argument)."""
  def constant():
    return value
  return constant


def _deepcopy(node):
  return copy.deepcopy(node)


class _Substituter(ast.NodeTransformer):
  """Replaces each batched-call-containing child by a fresh temporary."""

  def __init__(self, compiler):
    self.c = compiler

  def generic_visit(self, node):
    for field, old in ast.iter_fields(node):
      if isinstance(old, list):
        new = []
        for item in old:
          new.append(self._child(item) if isinstance(item, ast.AST) else item)
        setattr(node, field, new)
      elif isinstance(old, ast.AST):
        setattr(node, field, self._child(old))
    return node

  def _child(self, child):
    if not isinstance(child, ast.expr) or not self.c._contains_batched_call(
        child):
      return child
    if (self.c._batched_callee(child) is not None
        or isinstance(child, (ast.IfExp, ast.BoolOp))
        or (isinstance(child, ast.Compare) and len(child.ops) > 1)):
      var = self.c.expr(child)
      return ast.copy_location(ast.Name(var, ast.Load()), child)
    return self.generic_visit(child)

  def visit(self, node):
    return self.generic_visit(node)


def _promoting_function(body, arity, loc, text, closure, fn_globals, name,
                        prefix, helpers):
  """The primitive of `body` with promoting operators
  (`python_primitives.promoting`), made when type inference asks; None
  where it has none (its operators all in lambdas of the user's)."""
  promoted = python_primitives.promoting(body, prefix)
  if promoted is None:
    return None
  return python_primitives.make_function(
      promoted, arity, loc, text, closure, fn_globals, name, prefix,
      helpers=helpers)


def _tf_numpy_function(body, arity, loc, text, closure, fn_globals, name,
                       prefix, helpers):
  """The TensorFlow form of the primitive of `body`
  (`python_primitives.tf_numpy`), made when type inference asks, with its
  own promoting form registered."""
  body = python_primitives.tf_numpy(body, prefix)
  helpers = {**(helpers or {}), python_primitives.TF_NUMPY_OPS: tf_numpy}
  fn = python_primitives.make_function(
      body, arity, loc, text, closure, fn_globals, name, prefix,
      helpers=helpers)
  if python_primitives.promotable(body):
    type_inference.register_promoting(fn, functools.partial(
        _promoting_function, body, arity, loc, text, closure, fn_globals,
        name, prefix, helpers))
  return fn


@dataclasses.dataclass(frozen=True, eq=False)
class _PrimitiveMaker:
  """What makes a primitive's functions of one function's expressions.

  Attributes:
    closure, fn_globals, name, prefix, helpers: As `make_function` takes
      them (`python_primitives.make_function`).
    per_member: Whether the function is a per-member one.
    static_value: AST node -> the object a name or attribute chain of
      the user's refers to, where the expression is.
  """
  closure: dict
  fn_globals: dict
  name: str
  prefix: str
  helpers: object
  per_member: bool
  static_value: object

  def make(self, rewritten, arity, loc, text, per_member, subscripts):
    """The function of a `PrimOp` of rewritten expression `rewritten`
    (`per_member`: a `PerMemberFunction`), its other forms registered for
    type inference; `subscripts` (`python_primitives.subscript_parts`)
    noted for `member_indexing`'s checks."""
    fn = python_primitives.make_function(
        rewritten, arity, loc, text, self.closure, self.fn_globals,
        self.name, self.prefix, helpers=self.helpers)
    # Its form with NumPy's promotion on TensorFlow, which type inference
    # makes and takes where this one fails for mixed dtypes there
    # (`type_inference.register_promoting`).
    promoting = None
    if python_primitives.promotable(rewritten):
      promoting = functools.partial(
          _promoting_function, rewritten, arity, loc, text,
          self.closure, self.fn_globals, self.name, self.prefix,
          self.helpers)
      if not self.per_member:
        type_inference.register_promoting(fn, promoting)
    if not self.per_member and python_primitives.tf_numpy(
        rewritten, self.prefix) is not None:
      # Its form on TensorFlow, NumPy's functions by TensorFlow's NumPy
      # API, which type inference takes there
      # (`type_inference.register_tensorflow_form`).
      type_inference.register_tensorflow_form(fn, functools.partial(
          _tf_numpy_function, rewritten, arity, loc, text,
          self.closure, self.fn_globals, self.name, self.prefix,
          self.helpers))
    if per_member:
      sizes = member_sizes.size_roles(rewritten, self.prefix, arity)
      function = member_primitive.PerMemberFunction(
          fn, loc, text, python_primitives.is_elementwise(
              rewritten, self.prefix, self.static_value),
          member_direct.direct_forms(rewritten, arity, self.prefix,
                                     self.static_value), sizes)
      if promoting is not None:   # its TensorFlow form only: no NumPy form
        type_inference.register_promoting(function, functools.partial(
            _per_member_promoting, promoting, loc, text, sizes))
      return function
    # A size (`n = x.shape[1]`), which type inference folds into a
    # constant where its value does not follow the batch size
    # (`passes.size_folding`).
    sizes = member_sizes.batch_size_roles(rewritten, self.prefix, arity,
                                          self.static_value)
    if sizes is not None:
      fn.sizes = sizes
    # A variable indexed by a variable (`x[:, j]`): type inference checks
    # that the index is not a per-member array (`member_indexing`).
    member_indexing.note(fn, subscripts)
    return fn


def _static_value(names, cells, fn_globals, node):
  """`member_helpers.static_value` of `node` (`_PrimitiveMaker`)."""
  return member_helpers.static_value(node, names, cells, fn_globals,
                                     _NOT_STATIC)


def _weak_form(maker, rewritten, arity, loc, text, per_member, subscripts,
               weak_inputs):
  """A primitive's form where its weak inputs are at `weak_inputs`
  (`type_inference.register_weak_form`): `(function, numbers)`, the
  function None where it is the primitive's own (no operator takes a
  Python number that the members compute), and which of its values are
  such numbers (`python_primitives.weak_operands`)."""
  body, numbers = python_primitives.weak_operands(
      rewritten, maker.prefix, weak_inputs, per_member,
      f' in `{text}` ({loc})' if loc is not None else '')
  if body is None:
    return None, numbers
  return maker.make(body, arity, loc, text, per_member, subscripts), numbers


def _per_member_promoting(make, loc, text, sizes):
  """A per-member primitive's promoting form (its TensorFlow form only),
  or None."""
  fn = make()
  return None if fn is None else member_primitive.PerMemberFunction(
      fn, loc, text, sizes=sizes)


def item_written_params(fn):
  """The parameters of Python function `fn` whose items it assigns and
  that it never assigns whole (`python.source.item_written_params`); ()
  where its source cannot be read, and for a lambda (an expression, which
  assigns nothing)."""
  if fn.__code__.co_name == '<lambda>':
    return ()
  try:
    node = python_source.Source(fn).node
  except (errors.UnsupportedSyntaxError, SyntaxError):
    return ()
  return python_source.item_written_params(node)


def compile_function(fn, resolve_batched, params_of, type_inference=None,
                     defaults_of=None, per_member=False, positional_of=None,
                     variant_of=None, static=(), name=None, writes_of=None,
                     static_reads=None):
  """Compiles Python function `fn` to an IR `Function`.

  Args:
    fn: The user's Python function.
    resolve_batched: (object or None, bare name or None) -> name of a
      batched function of the same Context, or None.
    params_of: Batched function name -> its parameter names (positional,
      then keyword-only).
    type_inference: The user's optional type-inference callable.
    defaults_of: Batched function name -> {parameter: default value} for
      its parameters that have one (a call may omit those).
    per_member: Whether `fn` is written for one member
      (`Context.batch(per_member=True)`): its primitives are then
      per-member `PrimOp`s, and `x[i] = v` assigns `x` a new value.
    positional_of: Batched function name -> how many of its parameters a
      call may pass by position (None: all).
    variant_of: `(name, params)` -> the name of batched function `name`'s
      variant with `params` given None (`Context.variant`); a call that
      passes None calls it.  None: no variants.
    static: The parameters this compile fixes to None (a variant).
    name: The IR function's name (a variant's); None: `fn`'s.
    writes_of: Batched function name -> the parameters whose items it
      assigns (`item_written_params`); a call passing a variable there
      that the caller reads afterwards warns (`ArgumentWriteWarning`).
    static_reads: Optional list, given the `(name chain, snapshot)` of
      each global or closure value the compiled code holds as it is now (a
      loop written out over `range(K)` or `for w in W`, a table):
      `static_reads_changed` tells whether the function must compile
      anew.

  Returns:
    The untyped IR `Function`.

  Raises:
    UnsupportedSyntaxError: If `fn` uses Python outside the supported
      subset.
    NameResolutionError: If `fn` uses a name that is not defined.
    ArgumentError: If `fn` calls a batched function with arguments that
      do not fit its parameters.
  """
  compiler = _Compiler(fn, resolve_batched, params_of, type_inference,
                       defaults_of, per_member, positional_of, variant_of,
                       tuple(static), name, writes_of)
  function = compiler.compile()
  if static_reads is not None:
    static_reads.extend(compiler.static_reads)
  return function


# The fields of each statement that Python evaluates first, whole: an
# assignment expression (`:=`) there is assigned before the statement.
_EVALUATED_FIRST = {ast.If: 'test', ast.While: 'test', ast.Assert: 'test',
                    ast.Assign: 'value', ast.AugAssign: 'value',
                    ast.AnnAssign: 'value', ast.Return: 'value',
                    ast.Expr: 'value'}


def _assignment_expressions(s):
  """Statement `s` with its assignment expressions (`while (y := v[i]) >
  0:`) made assignments of their own, which run first.

  Only those that Python evaluates every time the statement runs, before
  anything that reads their name: not in the right operand of `and` or
  `or`, a side of `x if c else y`, a comprehension or a lambda (which
  stay, and are refused as unsupported syntax).

  Args:
    s: A statement.

  Returns:
    `(assignments, statement)`: the new `y = v[i]` statements, in the
    order Python assigns them, and `s` with each such `(y := v[i])` read
    as `y` (`s` itself where there is none).
  """
  field = _EVALUATED_FIRST.get(type(s))
  value = getattr(s, field, None) if field else None
  if value is None or not any(isinstance(n, ast.NamedExpr)
                              for n in ast.walk(value)):
    return [], s
  assigned, read = [], set()

  def visit(node):
    if isinstance(node, ast.NamedExpr):
      value = visit(node.value)
      name = node.target.id
      if name in read:   # read before it is assigned: left as written
        return ast.NamedExpr(node.target, value)
      assigned.append(ast.copy_location(
          ast.Assign([ast.Name(name, ast.Store())], value), node))
      return ast.copy_location(ast.Name(name, ast.Load()), node)
    if isinstance(node, ast.Name):
      read.add(node.id)
      return node
    if isinstance(node, ast.BoolOp):
      first = visit(node.values[0])
      rest = [_reads_all(v, read) for v in node.values[1:]]
      return ast.copy_location(ast.BoolOp(node.op, [first] + rest), node)
    if isinstance(node, ast.IfExp):
      test = visit(node.test)
      return ast.copy_location(ast.IfExp(
          test, _reads_all(node.body, read), _reads_all(node.orelse, read)),
                               node)
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp,
                         ast.DictComp, ast.GeneratorExp)):
      return _reads_all(node, read)
    node = copy.copy(node)
    for name, old in ast.iter_fields(node):
      if isinstance(old, list):
        setattr(node, name, [visit(v) if isinstance(v, ast.AST) else v
                             for v in old])
      elif isinstance(old, ast.AST):
        setattr(node, name, visit(old))
    return node

  s = copy.copy(s)
  setattr(s, field, visit(value))
  return assigned, s


def _reads_all(node, read):
  """`node` unchanged, each name it holds counted as `read`."""
  read.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
  return node


def _display_parts(s):
  """`n, m = len(a), len(b)` as `n = len(a)` then `m = len(b)`.

  An assignment of a tuple display to a tuple of names assigns each name
  its own item; where no item reads a name assigned (`a, b = b, a` does),
  one statement per name assigns the same values, and each is a statement
  of its own to the passes: a size there is folded as it is on a line of
  its own (`passes.size_folding`).

  Args:
    s: An `ast.Assign`.

  Returns:
    The statements, in order (nested displays split too: `(n,), (m,) =
    a.shape, b.shape`), or None where `s` is no such assignment.
  """
  if len(s.targets) != 1:
    return None
  target, value = s.targets[0], s.value
  if not (isinstance(target, (ast.Tuple, ast.List)) and
          isinstance(value, (ast.Tuple, ast.List)) and
          len(target.elts) == len(value.elts) and len(target.elts) > 1):
    return None
  names = set()
  for node in ast.walk(target):
    if isinstance(node, ast.Name):
      names.add(node.id)
    elif not isinstance(node, (ast.Tuple, ast.List, ast.Store)):
      return None   # an item, attribute or starred target
  for node in ast.walk(value):
    if isinstance(node, ast.Starred) or (isinstance(node, ast.Name) and
                                         node.id in names):
      return None
  return [ast.copy_location(ast.Assign([t], v), s)
          for t, v in zip(target.elts, value.elts)]
