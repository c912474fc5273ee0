"""Locals that hold None for some members and a value for others.

`best = None`, later `best = v[i]`, and `best is None or v[i] < best`:
a search's "nothing yet".  A batched variable holds one array of one
dtype for every member, and None is no array, so such a local `x` gets
a companion flag, a per-member bool: `rewrite` turns

- `x = None` into `<flag> = True` (the array keeps what it held);
- every other statement that assigns `x` into itself followed by
  `<flag> = False` (a `for x in ...` loop: at the top of its body), and
  `x op= v` into `x = x op v` (that reads `x`, below);
- `x is None` and `x is not None` (either side) into `<flag>` and
  `not <flag>`;
- every other read of `x` into `<marker>(x, <flag>)`: the VM reads the
  array, and in a per-member function the members whose `x` is None
  there fail with Python's `TypeError` (`member_ops.optional_value`),
  where Python reads `x` for them (a read in the right operand of
  `x is None or ...` is not made where `x` is None).

The dry run runs the user's function as written.
"""

import ast
import copy

__all__ = ['flag_names', 'optional_locals', 'rewrite', 'unparse']


def _is_none(node):
  return isinstance(node, ast.Constant) and node.value is None


def _none_assignment(stmt):
  """The names `stmt` assigns None to (`a = b = None`), or None."""
  if (isinstance(stmt, ast.Assign) and _is_none(stmt.value) and
      all(isinstance(t, ast.Name) for t in stmt.targets)):
    return [t.id for t in stmt.targets]
  return None


def _own_statements(body):
  """The statements of a body, nested blocks included, not those of
  functions or classes defined in it."""
  todo = list(body)
  while todo:
    node = todo.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      continue
    if isinstance(node, ast.stmt):
      yield node
    for field in ('body', 'orelse', 'finalbody', 'handlers'):
      todo.extend(getattr(node, field, None) or ())


def optional_locals(fn_node, params):
  """The locals that `rewrite` gives a flag.

  A name counts where the function's body assigns it None by a plain
  assignment (`x = None`) and something else elsewhere, only by
  assignments, augmented assignments and `for` targets, and no function,
  lambda or class defined in the body uses the name (they would read
  the variable itself).

  Args:
    fn_node: The function's `ast.FunctionDef`.
    params: Its parameters' names (never rewritten).

  Returns:
    A sorted list of names.
  """
  none_assigned, other_assigned, refused = set(), set(), set(params)
  for stmt in _own_statements(fn_node.body):
    names = _none_assignment(stmt)
    if names is not None:
      none_assigned.update(names)
      continue
    if isinstance(stmt, (ast.Global, ast.Nonlocal)):
      refused.update(stmt.names)
  for node in ast.walk(fn_node):
    if node is fn_node:
      continue
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                         ast.ClassDef)):
      refused.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
      if not isinstance(node, ast.Lambda):
        refused.add(node.name)
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp,
                           ast.GeneratorExp)):
      refused.update(n.id for g in node.generators
                     for n in ast.walk(g.target) if isinstance(n, ast.Name))
  for stmt in _own_statements(fn_node.body):
    if _none_assignment(stmt) is not None:
      continue
    stored = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and
              isinstance(n.ctx, (ast.Store, ast.Del))
              and _stores_directly(stmt, n)}
    other_assigned.update(stored)
    # Stores this rewrite does not follow: `del x`, `with ... as x`,
    # `except E as x`, `x := v`.
    if isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try, ast.Delete)):
      refused.update(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, (ast.Store, ast.Del))
                     and _stores_directly(stmt, n))
    refused.update(n.target.id for n in ast.walk(stmt)
                   if isinstance(n, ast.NamedExpr))
  return sorted((none_assigned & other_assigned) - refused)


def _stores_directly(stmt, name):
  """Whether Name node `name`, stored in `stmt`'s subtree, is stored by
  `stmt` itself rather than by a statement nested in it."""
  for field in ('body', 'orelse', 'finalbody', 'handlers'):
    for child in getattr(stmt, field, None) or ():
      if any(n is name for n in ast.walk(child)):
        return False
  return True


def flag_names(fn_node, names):
  """A flag's name for each of `names`: `<x>_is_none`, with underscores
  added until no name of the function is it."""
  used = {n.id for n in ast.walk(fn_node) if isinstance(n, ast.Name)}
  used |= {a.arg for a in ast.walk(fn_node) if isinstance(a, ast.arg)}
  flags = {}
  for x in names:
    flag = f'{x}_is_none'
    while flag in used:
      flag = '_' + flag
    used.add(flag)
    flags[x] = flag
  return flags


def rewrite(fn_node, flags, marker, asserts=False):
  """`fn_node` with its optional locals given flags (see the module).

  Args:
    fn_node: The function's `ast.FunctionDef` (not changed).
    flags: Local name -> its flag's name (`optional_locals`,
      `flag_names`).
    marker: The name of the function the frontend takes for "read this
      optional local": `marker(x, flag)`.
    asserts: Whether a statement that reads an optional local where
      Python surely evaluates the read (not in an operand of `and` or
      `or` after the first, nor in a side of `a if c else b`) is
      preceded by an `assert` that it is not None there: a batch-aware
      function's check (a per-member one's reads check themselves,
      `member_ops.optional_value`).

  Returns:
    A new `ast.FunctionDef`.
  """
  node = copy.deepcopy(fn_node)
  rewriter = _Rewriter(flags, marker, asserts)
  # A flag is assigned where its local is, None included: a read before
  # either is Python's UnboundLocalError, which the frontend checks on
  # the flag (`python.cfg`).
  node.body = rewriter.statements(node.body)
  return ast.fix_missing_locations(node)


def _none_test_of(node, flags):
  """The optional local that Compare `node` tests against None (`x is
  None`, `None is not x`, `x == None`), or None."""
  if len(node.ops) != 1 or not isinstance(
      node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
    return None
  left, right = node.left, node.comparators[0]
  if _is_none(right) and isinstance(left, ast.Name) and left.id in flags:
    return left.id
  if _is_none(left) and isinstance(right, ast.Name) and right.id in flags:
    return right.id
  return None


def _assign_flag(flag, value):
  return ast.Assign([ast.Name(flag, ast.Store())], ast.Constant(value))


class _Rewriter(ast.NodeTransformer):
  """Rewrites statements and their expressions (`rewrite`)."""

  def __init__(self, flags, marker, asserts):
    self.flags = flags
    self.marker = marker
    self.asserts = asserts

  def statements(self, body):
    out = []
    for stmt in body:
      out.extend(self.statement(stmt))
    return out

  def statement(self, stmt):
    """`stmt` rewritten, as a list of statements."""
    names = _none_assignment(stmt)
    if names is not None and any(n in self.flags for n in names):
      out = [ast.copy_location(_assign_flag(self.flags[n], True), stmt)
             for n in names if n in self.flags]
      rest = [ast.Name(n, ast.Store()) for n in names if n not in self.flags]
      if rest:
        out.append(ast.copy_location(ast.Assign(rest, ast.Constant(None)),
                                     stmt))
      return out
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      return [stmt]
    if (isinstance(stmt, ast.AugAssign) and
        isinstance(stmt.target, ast.Name) and stmt.target.id in self.flags):
      # `x op= v` reads x: `x = x op v` (the batched call's variables are
      # values, as the dry run's are).
      read = ast.copy_location(ast.Name(stmt.target.id, ast.Load()),
                               stmt.target)
      stmt = ast.copy_location(ast.Assign(
          [stmt.target], ast.copy_location(
              ast.BinOp(read, stmt.op, stmt.value), stmt)), stmt)
    stored = sorted({n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store) and n.id in self.flags
                     and _stores_directly(stmt, n)})
    for field in ('body', 'orelse', 'finalbody'):
      inner = getattr(stmt, field, None)
      if inner:
        setattr(stmt, field, self.statements(inner))
    if isinstance(stmt, ast.Try):
      for handler in stmt.handlers:
        handler.body = self.statements(handler.body)
    checks = self._checks(stmt) if self.asserts else []
    self._expressions(stmt)
    stmts = checks + [stmt]
    if not stored:
      return stmts
    cleared = [ast.copy_location(_assign_flag(self.flags[n], False), stmt)
               for n in stored]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
      stmt.body = cleared + stmt.body   # the target, at each trip
      return stmts
    return stmts + cleared

  def _checks(self, stmt):
    """`assert`s that the optional locals `stmt`'s own expressions surely
    read are not None (`rewrite`'s `asserts`)."""
    names = []
    todo = [(v, False) for f, v in ast.iter_fields(stmt)
            if f not in ('body', 'orelse', 'finalbody', 'handlers')
            for v in (v if isinstance(v, list) else [v])
            if isinstance(v, ast.AST)]
    while todo:
      node, guarded = todo.pop()
      if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp,
                           ast.DictComp, ast.GeneratorExp)):
        continue
      if isinstance(node, ast.Compare) and _none_test_of(node, self.flags):
        continue
      if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
          and node.id in self.flags and not guarded
          and node.id not in names):
        names.append(node.id)
      if isinstance(node, ast.BoolOp):
        todo.append((node.values[0], guarded))
        todo.extend((v, True) for v in node.values[1:])
      elif isinstance(node, ast.IfExp):
        todo.extend([(node.test, guarded), (node.body, True),
                     (node.orelse, True)])
      else:
        todo.extend((c, guarded) for c in ast.iter_child_nodes(node))
    return [ast.copy_location(ast.Assert(
        ast.UnaryOp(ast.Not(), ast.Name(self.flags[x], ast.Load())),
        ast.Constant(f'{x!r} is None here, and Python raises TypeError '
                     'where None is used as a value')), stmt)
            for x in names]

  def _expressions(self, stmt):
    """Rewrites the expressions of `stmt` itself (not of the statements
    nested in it)."""
    for field, value in ast.iter_fields(stmt):
      if field in ('body', 'orelse', 'finalbody', 'handlers'):
        continue
      if field in ('targets', 'target'):
        # `x[i] = v`, `x.a = v`: x itself is written, not read as a value.
        continue
      if isinstance(value, ast.AST):
        setattr(stmt, field, self.visit(value))
      elif isinstance(value, list):
        setattr(stmt, field, [self.visit(v) if isinstance(v, ast.AST) else v
                              for v in value])

  def visit_Compare(self, node):
    name = _none_test_of(node, self.flags)
    if name is None:
      return self.generic_visit(node)
    test = ast.copy_location(ast.Name(self.flags[name], ast.Load()), node)
    if isinstance(node.ops[0], (ast.IsNot, ast.NotEq)):
      test = ast.copy_location(ast.UnaryOp(ast.Not(), test), node)
    test.ab_source = node
    return test

  def visit_Name(self, node):
    if isinstance(node.ctx, ast.Load) and node.id in self.flags:
      read = ast.copy_location(ast.Call(
          ast.copy_location(ast.Name(self.marker, ast.Load()), node),
          [node, ast.copy_location(ast.Name(self.flags[node.id], ast.Load()),
                                   node)], []), node)
      read.ab_source = copy.copy(node)
      return read
    return node

  def visit_FunctionDef(self, node):
    return node

  visit_AsyncFunctionDef = visit_FunctionDef
  visit_ClassDef = visit_FunctionDef
  visit_Lambda = visit_FunctionDef


class _Restore(ast.NodeTransformer):
  """Puts back the source of the nodes `rewrite` made."""

  def visit(self, node):
    source = getattr(node, 'ab_source', None)
    if source is not None:
      return source
    return super().visit(node)


def unparse(node):
  """`ast.unparse(node)` as the user wrote it: `x is None` and reads of
  `x` where `rewrite` made a flag and a call of them."""
  if not any(hasattr(n, 'ab_source') for n in ast.walk(node)):
    return ast.unparse(node)
  return ast.unparse(_Restore().visit(copy.deepcopy(node)))
