"""The source of a batched Python function, and the copy a dry run calls.

`Source` reads and parses the user's function and turns AST nodes into
`SourceLoc`s (its file, its line, its text), which every error of the
frontend names.  `dry_run_function` makes the copy of the function that a
dry run calls, whose `range()` bounds take a member's one value and whose
variables are given, as they are assigned, the value a member has in the
batched call.
"""

import ast
import copy
import inspect
import textwrap
import types

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['Source', 'assigned_names', 'dry_run_function', 'fold_none_tests',
           'generated_prefix', 'is_constant_value', 'iterated_live',
           'literal_constants', 'range_bound']


class Source:
  """The parsed source of the user's function and its location.

  Args:
    fn: The user's Python function.

  Raises:
    UnsupportedSyntaxError: If its source cannot be read or it is not a
      plain `def` function.

  Attributes:
    fn: The function.
    name: Its name.
    filename: The file it is defined in.
    first_line: The line of the file its source starts at.
    lines: The lines of its source.
    node: Its `ast.FunctionDef`, parsed from the dedented source.
  """

  def __init__(self, fn):
    self.fn = fn
    self.name = fn.__name__
    try:
      lines, first = inspect.getsourcelines(fn)
      self.filename = inspect.getsourcefile(fn) or '<unknown>'
    except (OSError, TypeError) as e:
      raise errors.UnsupportedSyntaxError(
          f'Cannot read the source of batched function {self.name!r}: {e}',
          hint='Define batched functions in a file (not in an interactive '
          'prompt or exec string).') from e
    self.first_line = first
    self.lines = lines
    tree = ast.parse(textwrap.dedent(''.join(lines)))
    defs = [n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs or isinstance(defs[0], ast.AsyncFunctionDef):
      raise errors.UnsupportedSyntaxError(
          f'{self.name!r} is not a plain `def` function',
          hint='Decorate a function defined with `def` (lambdas and async '
          'functions cannot be batched).')
    self.node = defs[0]

  def loc(self, node):
    """Where `node` is in the user's file.

    Args:
      node: An AST node of the function's tree (one without a line stands
        for the `def` line).

    Returns:
      Its `SourceLoc`: function, file, line and the line's text.
    """
    lineno = getattr(node, 'lineno', None) or self.node.lineno
    idx = lineno - 1
    text = self.lines[idx].rstrip('\n') if 0 <= idx < len(self.lines) else ''
    return inst.SourceLoc(self.name, self.filename,
                          lineno + self.first_line - 1, text)


def item_written_params(fn_node):
  """The parameters of function `fn_node` whose items its body assigns
  (`p[i] = v`, `p[i, j] += v`) or that it updates in place (`p -= m`,
  in place where `p` holds an array) and that it never assigns whole: in
  Python such a write changes the caller's array.  (One assigned whole,
  `p = p.copy()`, may be a copy by then.)

  Args:
    fn_node: An `ast.FunctionDef`.

  Returns:
    The parameter names, a tuple in their order.
  """
  args = fn_node.args
  params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
  items, whole, updated, arrays = set(), set(), set(), set()
  for node in _own_nodes(fn_node):
    targets = []
    if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(
        node.value, ast.Name):
      arrays.add(node.value.id)   # indexed, or a method or `.shape` read
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
      # `v -= m`: an array updated in place (a number, such as a counter,
      # is bound anew: only a name used as an array counts).
      updated.add(node.target.id)
      continue
    if isinstance(node, ast.Assign):
      targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
      targets = [node.target]
    elif isinstance(node, (ast.For, ast.withitem, ast.NamedExpr)):
      targets = [getattr(node, 'target', None) or node.optional_vars]
    for t in targets:
      for n in ast.walk(t) if t is not None else ():
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
          whole.add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
          base = n.value
          while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
          if isinstance(base, ast.Name):
            items.add(base.id)
  items |= updated & arrays
  return tuple(p for p in params if p in items and p not in whole)


def _own_nodes(fn_node):
  """The nodes of a function's body, without those of functions, lambdas
  and classes defined in it."""
  todo = list(fn_node.body)
  while todo:
    node = todo.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                         ast.ClassDef)):
      continue
    yield node
    todo.extend(ast.iter_child_nodes(node))


def iterated_live(for_node, local_names, source=None):
  """Finds the array a loop iterates that its body writes in place.

  That is `v` of `for x in v:` (or of `enumerate(v)`, `zip(v, w)`,
  `reversed(v)`: `source`) where the body writes `v`'s items
  (`v[i + 1] += x`) or updates it (`v *= 2`) and never binds it anew.
  Python's iterator over an array reads each item when it gets there, so
  it sees those writes; a batched function's variables are values (each
  write makes a new one), so such a loop reads `v[k]` from the variable
  at each trip (a snapshot taken before the loop would miss them).  A
  body that also binds `v` anew (`v = v.copy()`) iterates the array the
  loop started with.

  Args:
    for_node: An `ast.For`.
    local_names: The names of the function's variables.
    source: The sequence iterated, where not `for_node.iter` itself (an
      argument of the `enumerate`, `zip` or `reversed` it calls).

  Returns:
    The name `v`, or None.
  """
  it = for_node.iter if source is None else source
  if not (isinstance(it, ast.Name) and it.id in local_names):
    return None
  name = it.id
  written = False
  holder = ast.Module(body=list(for_node.body) + list(for_node.orelse),
                      type_ignores=[])
  bound_targets = [for_node.target]
  for node in _own_nodes(holder):
    if isinstance(node, ast.AugAssign) and isinstance(
        node.target, ast.Name) and node.target.id == name:
      written = True
      continue
    if isinstance(node, ast.AugAssign):
      bound_targets.append(node.target)
    elif isinstance(node, ast.Assign):
      bound_targets.extend(node.targets)
    elif isinstance(node, ast.AnnAssign):
      bound_targets.append(node.target)
    elif isinstance(node, (ast.For, ast.comprehension)):
      bound_targets.append(node.target)
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
      bound_targets.append(node.optional_vars)
    elif isinstance(node, ast.NamedExpr):
      bound_targets.append(node.target)
    elif isinstance(node, ast.Delete):
      bound_targets.extend(node.targets)
  for t in bound_targets:
    for n in ast.walk(t):
      if isinstance(n, ast.Name) and n.id == name and not isinstance(
          n.ctx, ast.Load):
        return None
      if isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load):
        base = n.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
          base = base.value
        if isinstance(base, ast.Name) and base.id == name:
          written = True
  return name if written else None


def assigned_names(fn_node):
  """Names Python would treat as local: parameters and assignment targets.

  Args:
    fn_node: The function's `ast.FunctionDef`.

  Returns:
    The set of names assigned in its body (nested functions' names, not
    what they assign), comprehension targets left out.
  """
  names = set()
  stack = list(fn_node.body)
  while stack:
    node = stack.pop()
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      names.add(node.name)
      continue   # its body is its own scope
    if isinstance(node, ast.Lambda):
      continue
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp,
                         ast.GeneratorExp)):
      # Its targets are local to it, not the function (which may use the
      # same name: `for x in a: ...`, then `max(x for x in a)`); a `:=`
      # in it binds in the function.
      names.update(n.target.id for n in ast.walk(node)
                   if isinstance(n, ast.NamedExpr))
      continue
    stack.extend(ast.iter_child_nodes(node))
  return names


def literal_constants(fn_node, params):
  """Locals that hold one literal for the whole call: `h = 0.1`.

  A name counts where its one binding in the function is an assignment
  of a literal (a number, a bool, a string, None, a tuple of those) in
  the function's top-level statements, and no statement before it reads
  the name.  Every read then sees that value, as a constant would: the
  batched call reads it as Python's number, which broadcasts against a
  member's values as it does for one member, not as one number per
  member (an array `[batch]`).

  Args:
    fn_node: The function's `ast.FunctionDef`.
    params: Its parameters' names (never constants).

  Returns:
    A dict, name -> value.
  """
  bindings = {}
  excluded = set(params)

  def bind(name):
    bindings[name] = bindings.get(name, 0) + 1

  for node in ast.walk(fn_node):
    if node is fn_node:
      continue
    if isinstance(node, ast.Name) and isinstance(node.ctx,
                                                 (ast.Store, ast.Del)):
      bind(node.id)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      bind(node.name)
      excluded.update(_parameter_names(node.args))
    elif isinstance(node, ast.ClassDef):
      bind(node.name)
    elif isinstance(node, ast.Lambda):
      excluded.update(_parameter_names(node.args))
    elif isinstance(node, ast.ExceptHandler) and node.name:
      bind(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        bind((alias.asname or alias.name).split('.')[0])
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
      excluded.update(node.names)
    elif isinstance(node, ast.comprehension):
      excluded.update(t.id for t in ast.walk(node.target)
                      if isinstance(t, ast.Name))
    elif hasattr(ast, 'MatchAs') and isinstance(
        node, (ast.MatchAs, ast.MatchStar)) and node.name:
      bind(node.name)
  constants = {}
  read = set()
  for stmt in fn_node.body:
    name, value = _literal_assignment(stmt)
    if (name is not None and bindings.get(name) == 1
        and name not in excluded and name not in read):
      constants[name] = value
    read.update(n.id for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
  return constants


def fold_none_tests(fn_node, static, given=()):
  """`fn_node` with its `is None` tests of parameters decided.

  Parameters `static` are given None, parameters `given` arrays (never
  None).  Where a parameter still holds what it was given (from the top
  of the function to a statement that may assign it), `p is None` and
  `p is not None` are known: an `if` so tested becomes the side it takes
  (`if y is None: y = np.zeros_like(x)` becomes the assignment, or
  nothing), and so does a conditional expression, a test in `and`/`or`,
  `not`; the side that does not run is not compiled.  The rest of the
  function is compiled as written.

  Args:
    fn_node: The function's `ast.FunctionDef` (not changed).
    static: The names of the parameters given None.
    given: The names of the parameters given arrays.

  Returns:
    A new `ast.FunctionDef`, or `fn_node` itself where it has no `is` test.
  """
  if not any(isinstance(n, (ast.Is, ast.IsNot)) for n in ast.walk(fn_node)):
    return fn_node
  node = copy.deepcopy(fn_node)
  live = {p: False for p in given}
  live.update({p: True for p in static})
  node.body = _fold_statements(node.body, live) or [ast.Pass()]
  return node


def _fold_statements(stmts, live):
  """`stmts` with the tests decided; `live` (name -> whether it is None)
  loses the names the statements may assign."""
  out = []
  for s in stmts:
    if isinstance(s, ast.If):
      taken = _none_test(s.test, live)
      if taken is not None:
        out.extend(_fold_statements(s.body if taken else s.orelse, live))
        continue
    assigned = {n.id for n in ast.walk(s) if isinstance(n, ast.Name)
                and isinstance(n.ctx, (ast.Store, ast.Del))}
    if (isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None
        and live and not any(isinstance(n, ast.NamedExpr)
                             for n in ast.walk(s.value))):
      # The value is computed before the targets are bound.
      s.value = _NoneTests(live).visit(s.value)
    kept = {p: v for p, v in live.items() if p not in assigned}
    if kept:
      s = _NoneTests(kept).visit(s)
    for p in assigned:
      live.pop(p, None)
    out.append(s)
  return out


def _none_test(test, live):
  """True or False where `test` is known from `live` (name -> whether it
  is None): `p is None`, `p is not None`, `not`, `and`/`or` of known
  tests, a bool literal; else None."""
  if isinstance(test, ast.Constant) and isinstance(test.value, bool):
    return test.value
  if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
    inner = _none_test(test.operand, live)
    return None if inner is None else not inner
  if isinstance(test, ast.BoolOp):
    values = [_none_test(v, live) for v in test.values]
    stop = not isinstance(test.op, ast.And)   # `or` stops at a True
    for v in values:
      if v is None:
        return None
      if v is stop:
        return stop
    return not stop
  if (isinstance(test, ast.Compare) and len(test.ops) == 1 and
      isinstance(test.ops[0], (ast.Is, ast.IsNot))):
    sides = (test.left, test.comparators[0])
    names = [x.id for x in sides if isinstance(x, ast.Name)]
    nones = [x for x in sides if isinstance(x, ast.Constant)
             and x.value is None]
    if len(names) == 1 and len(nones) == 1 and names[0] in live:
      return live[names[0]] == isinstance(test.ops[0], ast.Is)
  return None


class _NoneTests(ast.NodeTransformer):
  """Replaces known `is None` tests by their constants, and an `if` or a
  conditional expression so tested by its side."""

  def __init__(self, live):
    self.live = live

  def visit_FunctionDef(self, node):   # its own scope
    return node

  visit_Lambda = visit_FunctionDef

  def _decided(self, node):
    node = self.generic_visit(node)
    taken = _none_test(node, self.live)
    if taken is None:
      return node
    return ast.copy_location(ast.Constant(taken), node)

  visit_Compare = _decided
  visit_UnaryOp = _decided
  visit_BoolOp = _decided

  def visit_If(self, node):
    node = self.generic_visit(node)
    taken = _none_test(node.test, self.live)
    if taken is None:
      return node
    return (node.body if taken else node.orelse) or ast.Pass()

  def visit_IfExp(self, node):
    node = self.generic_visit(node)
    taken = _none_test(node.test, self.live)
    if taken is None:
      return node
    return node.body if taken else node.orelse


def _parameter_names(arguments):
  return {a.arg for a in ast.walk(arguments) if isinstance(a, ast.arg)}


def _literal_assignment(stmt):
  """`(name, value)` where `stmt` is `name = <literal>` (or annotated),
  else `(None, None)`."""
  if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
    target, value = stmt.targets[0], stmt.value
  elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
    target, value = stmt.target, stmt.value
  else:
    return None, None
  if not isinstance(target, ast.Name):
    return None, None
  try:
    value = ast.literal_eval(value)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return None, None
  # Immutable only: `acc = []` is appended to.
  return ((target.id, value) if is_constant_value(value, (tuple,))
          else (None, None))


def is_constant_value(value, sequences=(tuple, list)):
  """Whether `value` can be written as a literal in generated code.

  That is None, a Python bool, int, float, complex, str or bytes (not
  NumPy's scalar types, whose dtypes a literal would lose), or a sequence
  of those of a type in `sequences`.

  Args:
    value: Any object.
    sequences: The sequence types taken (tuples, lists).

  Returns:
    True or False.
  """
  if value is None or type(value) in (bool, int, float, complex, str,
                                      bytes):
    return True
  if type(value) in sequences:
    return all(is_constant_value(v, sequences) for v in value)
  return False


def generated_prefix(fn, node):
  """The prefix of every name that code generated from `fn` binds.

  The primitives (`primitives.make_function`) and the dry run's
  copy (`dry_run_function`) are Python code compiled with `fn`'s globals
  and closure, next to names of their own (parameters, helpers).  Those
  names start with this prefix, which no identifier of `fn` starts with,
  so none of them can hide a name of the user's: `__ab_`, or where `fn`
  uses names that start with it, the first free one of `__ab0_`,
  `__ab1_`, ...

  Args:
    fn: The user's Python function.
    node: Its `ast.FunctionDef`.

  Returns:
    The prefix.
  """
  used = set(fn.__code__.co_freevars) | set(fn.__code__.co_names)
  for n in ast.walk(node):
    if isinstance(n, ast.Name):
      used.add(n.id)
    elif isinstance(n, ast.arg):
      used.add(n.arg)
    elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                        ast.ClassDef)):
      used.add(n.name)
  prefix, k = '__ab_', 0
  while any(u.startswith(prefix) for u in used):
    prefix, k = f'__ab{k}_', k + 1
  return prefix


def range_bound(x):
  """Turns a `range()` bound of a dry run into one `range` takes.

  In a dry run a member's variables are batches of one (shape `[1]`),
  which Python's `range` does not take; a 0-d array or a number it does.

  Args:
    x: The bound: a batch of one, a 0-d array or a number.

  Returns:
    The one value of a batch of one, else `x`.
  """
  shape = getattr(x, 'shape', None)
  if shape is not None and tuple(shape) == (1,):
    return x[0]
  return x


class _DryRunRewriter(ast.NodeTransformer):
  """Wraps each argument of `for ... in range(...)` (and of `x in
  range(...)`) in `range_bound`,
  writes `x op= v` as `x = x op v`, and, given `member_name`, follows each
  assignment of a name `x` (and starts each iteration of a
  `for x in range(...)` loop) with `x = <member_name>('x', x)`.

  A dry run's variables hold batch-of-one NumPy arrays where the member's
  own Python would hold numbers, and NumPy's `x += v` updates `x` in
  place: after `i = lo`, `i += 1` would change `lo` too.  Variables of a
  batched function are values (its `i += 1` is `i = i + 1`), so the dry
  run rebinds them as well.
  """

  def __init__(self, local_names, range_name, member_name=None,
               items_name=None):
    self.local_names = local_names
    self.range_name = range_name
    self.member_name = member_name
    self.items_name = items_name
    self.changed = False
    self.trips = []   # the counters of loops over a live sequence

  def _item_assignment(self, node, target, value):
    """`x = <items_name>.setitem(x, <items_name>.key[index], value)` for
    `x[index] = value`, or None where it is not an item of a name."""
    if (self.items_name is None or not isinstance(target, ast.Subscript)
        or not isinstance(target.value, ast.Name)):
      return None
    self.changed = True
    items = ast.Name(self.items_name, ast.Load())
    name = target.value.id
    key = ast.Subscript(ast.Attribute(items, 'key', ast.Load()),
                        target.slice, ast.Load())
    call = ast.Call(ast.Attribute(items, 'setitem', ast.Load()),
                    [ast.Name(name, ast.Load()), key, value], [])
    return ast.copy_location(
        ast.Assign([ast.Name(name, ast.Store())], call), node)

  def _in_place(self, read, value):
    """In a per-member function, `<items_name>.in_place(read, value)`:
    what NumPy's `x op= v` leaves, `value` being `read op v`, as the
    batched call computes it; else `value`."""
    if self.items_name is None:
      return value
    return ast.copy_location(ast.Call(
        ast.Attribute(ast.Name(self.items_name, ast.Load()), 'in_place',
                      ast.Load()), [read, value], []), value)

  def _member_values(self, node, targets):
    """`x = <member_name>('x', x)` for each name that assignment `targets`
    bind, placed at `node`."""
    if self.member_name is None:
      return []
    names = [n.id for t in targets for n in ast.walk(t)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    self.changed = self.changed or bool(names)
    return [ast.copy_location(ast.Assign(
        [ast.Name(n, ast.Store())],
        ast.Call(ast.Name(self.member_name, ast.Load()),
                 [ast.Constant(n), ast.Name(n, ast.Load())], [])), node)
            for n in dict.fromkeys(names)]

  def visit_Assign(self, node):
    self.generic_visit(node)
    if len(node.targets) == 1:
      functional = self._item_assignment(node, node.targets[0], node.value)
      if functional is not None:
        return functional
    return [node] + self._member_values(node, node.targets)

  def visit_AnnAssign(self, node):
    self.generic_visit(node)
    if node.value is None:
      return node
    return [node] + self._member_values(node, [node.target])

  def visit_AugAssign(self, node):
    self.generic_visit(node)
    if isinstance(node.target, ast.Subscript):
      read = copy.deepcopy(node.target)
      read.ctx = ast.Load()
      value = ast.copy_location(ast.BinOp(read, node.op, node.value), node)
      return self._item_assignment(
          node, node.target, self._in_place(copy.deepcopy(read), value)) or node
    if not isinstance(node.target, ast.Name):
      return node
    self.changed = True
    value = ast.copy_location(ast.BinOp(
        ast.Name(node.target.id, ast.Load()), node.op, node.value), node)
    value = self._in_place(ast.Name(node.target.id, ast.Load()), value)
    assign = ast.copy_location(ast.Assign(
        [ast.Name(node.target.id, ast.Store())], value), node)
    return [assign] + self._member_values(node, assign.targets)

  def visit_For(self, node):
    live = (iterated_live(node, self.local_names)
            if self.items_name is not None else None)
    if live is not None:
      # `for x in v:` whose body writes `v`'s items: each trip reads its
      # item from `v` as it is then, as Python's iterator does and as the
      # batched call does (`iterated_live`).
      counter = f'{self.range_name}_trip{len(self.trips)}'
      self.trips.append(counter)
      item = ast.Assign([node.target], ast.Subscript(
          ast.Name(live, ast.Load()), ast.Name(counter, ast.Load()),
          ast.Load()))
      node = ast.copy_location(ast.For(
          target=ast.Name(counter, ast.Store()),
          iter=ast.Call(ast.Name('range', ast.Load()), [ast.Call(
              ast.Name('len', ast.Load()), [ast.Name(live, ast.Load())],
              [])], []),
          body=[ast.copy_location(item, node)] + list(node.body),
          orelse=list(node.orelse), type_comment=None), node)
      ast.fix_missing_locations(node)
    elif self.items_name is not None:
      # Of `enumerate(v)`, `zip(v, w)`, `reversed(v)`: each such `v` a
      # generator that reads its item from `v` as it is at that trip.
      node.iter = self._live_items(node, node.iter)
    self.generic_visit(node)
    it = node.iter
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
        and it.func.id == 'reversed' and it.func.id not in self.local_names
        and len(it.args) == 1):
      it = it.args[0]   # `reversed(range(...))`: the range's bounds
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
        and it.func.id == 'range' and it.func.id not in self.local_names):
      it.args = [ast.copy_location(ast.Call(
          ast.Name(self.range_name, ast.Load()), [a], []), a)
                 for a in it.args]
      self.changed = True
      node.body = self._member_values(node, [node.target]) + node.body
    return node

  def visit_Compare(self, node):
    self.generic_visit(node)
    # `x in range(lo, hi)`: its bounds, as a `for` loop's.
    for op, it in zip(node.ops, node.comparators):
      if (isinstance(op, (ast.In, ast.NotIn)) and isinstance(it, ast.Call)
          and isinstance(it.func, ast.Name) and it.func.id == 'range' and
          it.func.id not in self.local_names):
        it.args = [ast.copy_location(ast.Call(
            ast.Name(self.range_name, ast.Load()), [a], []), a)
                   for a in it.args]
        self.changed = True
    return node

  def _live_items(self, for_node, it):
    """`it`, the sequence of `for_node`, with each array it takes
    through `enumerate`, `zip` or `reversed` that the body writes in
    place (`iterated_live`) a generator of its items read at each trip:
    `(v[k] for k in range(len(v)))`, backwards `v[-1 - k]`."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
            it.func.id in ('enumerate', 'zip', 'reversed') and
            it.func.id not in self.local_names and it.args and
            not any(isinstance(a, ast.Starred) for a in it.args)):
      return it
    args = list(it.args)
    for k, a in enumerate(args[:1] if it.func.id == 'enumerate' else args):
      if it.func.id == 'reversed':
        live = iterated_live(for_node, self.local_names, a)
        if live is not None and len(args) == 1 and not it.keywords:
          self.changed = True
          return ast.copy_location(self._items_of(live, backwards=True), it)
        return it
      live = iterated_live(for_node, self.local_names, a)
      if live is not None:
        self.changed = True
        args[k] = ast.copy_location(self._items_of(live), a)
      else:
        args[k] = self._live_items(for_node, a)
    new = ast.copy_location(ast.Call(it.func, args, it.keywords), it)
    ast.fix_missing_locations(new)
    return new

  def _items_of(self, name, backwards=False):
    """`(name[k] for k in range(len(name)))` (`name[-1 - k]`
    `backwards`)."""
    k = f'{self.range_name}_item'
    index = ast.Name(k, ast.Load())
    if backwards:
      index = ast.BinOp(ast.Constant(-1), ast.Sub(), index)
    made = ast.GeneratorExp(
        ast.Subscript(ast.Name(name, ast.Load()), index, ast.Load()),
        [ast.comprehension(
            ast.Name(k, ast.Store()),
            ast.Call(ast.Name('range', ast.Load()), [ast.Call(
                ast.Name('len', ast.Load()), [ast.Name(name, ast.Load())],
                [])], []), [], 0)])
    return made


def dry_run_function(fn, member_value=None, items=None):
  """Finds the Python function a dry run calls for batched function `fn`.

  It is `fn` itself, except where `fn` loops `for ... in range(...)`,
  updates a variable with an augmented assignment or (with
  `member_value`) assigns a variable: then a copy compiled from its
  source whose range bounds go through `range_bound` (what the batched
  call compiles those loops to takes a per-member bound; the copy makes
  Python's `range` take one too), whose `x op= v` is `x = x op v` (the
  batched call's variables are values; NumPy's `+=` would update an array
  that another variable holds too), and which passes each value it
  assigns to a variable `x` (a loop counter at each iteration) through
  `member_value('x', value)`.  The copy has `fn`'s globals, closure cells,
  defaults, file and line numbers.

  Args:
    fn: The user's Python function.
    member_value: A callable `(name, value)` giving what the variable
      holds for one member in the batched call, or None.
    items: For a per-member function: the module of its item helpers
      (`per_member.member_ops`); the copy then writes `x[i] = v` and
      `x[i] op= v` as `x = items.setitem(x, i, v)`, as the batched call
      does (arrays are values; a TensorFlow tensor has no item
      assignment).

  Returns:
    `fn`, or the copy.
  """
  src = Source(fn)
  node = copy.deepcopy(src.node)
  prefix = generated_prefix(fn, node)
  range_name = prefix + 'range_bound'
  member_name = prefix + 'member_value'
  items_name = prefix + 'items'
  rewriter = _DryRunRewriter(assigned_names(node) |
                             {a.arg for a in node.args.args}, range_name,
                             member_name if member_value else None,
                             items_name if items else None)
  rewriter.visit(node)
  if not rewriter.changed:
    return fn
  node.decorator_list = []
  # Renamed, so that the function's name in its body (a recursive call)
  # is the global it is, not the maker's local.
  node.name = prefix + 'dry_run_copy'
  freevars = fn.__code__.co_freevars
  maker = ast.FunctionDef(
      name=prefix + 'make',
      args=ast.arguments(posonlyargs=[], args=[
          ast.arg(n) for n in freevars + (range_name, member_name,
                                          items_name)],
                         vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None,
                         defaults=[]),
      body=[node, ast.Return(ast.Name(node.name, ast.Load()))],
      decorator_list=[], returns=None, type_comment=None, type_params=[])
  module = ast.Module(body=[maker], type_ignores=[])
  ast.fix_missing_locations(module)
  ast.increment_lineno(module, src.first_line - 1)
  code = compile(module, src.filename, 'exec')
  maker_code = next(c for c in code.co_consts
                    if isinstance(c, types.CodeType))
  fn_code = next(c for c in maker_code.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == node.name)
  cells = dict(zip(freevars, fn.__closure__ or ()))
  cells[range_name] = types.CellType(range_bound)
  cells[member_name] = types.CellType(member_value)
  cells[items_name] = types.CellType(items)
  copied = types.FunctionType(fn_code, fn.__globals__, fn.__name__,
                              fn.__defaults__,
                              tuple(cells[n] for n in fn_code.co_freevars))
  copied.__qualname__ = fn.__qualname__
  copied.__doc__ = fn.__doc__
  copied.__kwdefaults__ = fn.__kwdefaults__
  return copied
