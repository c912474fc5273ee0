"""Helpers defined inside a batched function, lifted out of it.

A batched function may define a helper at the top of its body, with
`def` or as `name = lambda ...`, and call it in its expressions:

    def newton(a):
      def f(x):
        return x * x - a          # reads the enclosing function's `a`
      ...
      x = x - f(x) / (2 * x)

A helper runs as a primitive does, on whole batches (on one member's
values in a per-member function).  `lift` compiles each one as a function
of its own whose free variables that are the enclosing function's
variables (`a` above) become keyword-only parameters; the frontend passes
their values at each call (Python reads them when the helper runs, so a
variable assigned later is read as it is then).  The lifted function
reads the enclosing function's globals and closure as the helper does,
and the other helpers through closure cells.  What a primitive cannot do
is refused at the helper's line: calling a batched function (the VM runs
those), rebinding the enclosing function's variables (`nonlocal`), a
default value read from them, or a helper with such variables used other
than by calling it.
"""

import ast
import copy
import types

from autobatch_vm import errors
from autobatch_vm.per_member import member_helpers

__all__ = ['definitions', 'lift']

# Attributes of a lifted helper: the enclosing function's variables it
# reads (keyword-only parameters), and its definition (`member_helpers`
# rewrites a per-member helper from it).
FREE = '__ab_free__'
DEFINITION = '__ab_definition__'


def definitions(fn_node):
  """The helpers defined at the top of a function's body.

  Args:
    fn_node: The function's `ast.FunctionDef`.

  Returns:
    `{name: ast.FunctionDef}` (a lambda assigned to a name as the `def`
    it stands for), in their order; a name assigned anywhere else in the
    function is not a helper (the frontend refuses it as before).
  """
  found = {}
  for s in fn_node.body:
    if isinstance(s, ast.FunctionDef):
      found[s.name] = s
    elif (isinstance(s, ast.Assign) and len(s.targets) == 1 and
          isinstance(s.targets[0], ast.Name) and
          isinstance(s.value, ast.Lambda)):
      name = s.targets[0].id
      lam = s.value
      found[name] = ast.copy_location(ast.FunctionDef(
          name=name, args=lam.args,
          body=[ast.copy_location(ast.Return(lam.body), lam.body)],
          decorator_list=[], returns=None, type_comment=None,
          type_params=[]), s)
  stores = {}
  for node in _outer_nodes(fn_node):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      stores[node.id] = stores.get(node.id, 0) + 1
    elif isinstance(node, ast.FunctionDef) and node is not fn_node:
      stores[node.name] = stores.get(node.name, 0) + 1
  return {n: d for n, d in found.items() if stores.get(n, 0) == 1}


def _outer_nodes(fn_node):
  """The nodes of a function outside its nested functions and lambdas
  (their `def` and `lambda` nodes included)."""
  stack = list(fn_node.body)
  while stack:
    node = stack.pop()
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                         ast.ClassDef)):
      continue
    stack.extend(ast.iter_child_nodes(node))


def lift(helpers, outer_locals, closure, fn_globals, filename, line_offset,
         is_batched, loc):
  """Compiles each helper as a function of its own (see the module).

  Args:
    helpers: `definitions`' result.
    outer_locals: The enclosing function's variables.
    closure: Its closure cells, by name.
    fn_globals: Its globals.
    filename: Its file.
    line_offset: What turns a line of its parsed source into the file's.
    is_batched: `node -> bool`: whether a call node calls a batched
      function.
    loc: `node -> SourceLoc`, for errors.

  Returns:
    `{name: closure cell holding the lifted function}`.

  Raises:
    UnsupportedSyntaxError: Where a helper cannot run as a primitive.
  """
  cells = {name: types.CellType() for name in helpers}
  free_of = {name: set(_free_variables(d, outer_locals, set(helpers)))
             for name, d in helpers.items()}
  calls = {name: _helpers_called(d, set(helpers)) for name, d in
           helpers.items()}
  # A helper that calls another passes it the variables it reads, so it
  # reads them too (to a fixed point: helpers may call each other).
  changed = True
  while changed:
    changed = False
    for name in helpers:
      for g in calls[name]:
        if not free_of[g] <= free_of[name]:
          free_of[name] |= free_of[g]
          changed = True
  free_of = {name: tuple(sorted(v)) for name, v in free_of.items()}
  for name, d in helpers.items():
    _check(d, is_batched, loc, outer_locals)
    lifted = _compile(d, free_of[name], free_of, cells, closure,
                      fn_globals, filename, line_offset)
    cells[name].cell_contents = lifted
  return cells


def _bound(d):
  """The names helper `d` binds: its parameters and assignments."""
  a = d.args
  names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
  names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
  for node in _outer_nodes(d):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      names.add(node.id)
    elif isinstance(node, ast.FunctionDef):
      names.add(node.name)
  return names


def _free_variables(d, outer_locals, helper_names):
  """The enclosing function's variables helper `d` reads, sorted."""
  bound = _bound(d)
  read = {n.id for n in ast.walk(d)
          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
  return tuple(sorted((read & set(outer_locals)) - bound - helper_names))


def _check(d, is_batched, loc, outer_locals):
  """Refuses what a helper run as a primitive cannot do."""
  def refuse(node, what, hint):
    raise errors.UnsupportedSyntaxError(
        f'{what} in helper {d.name!r}, defined in a batched function',
        loc=loc(node), hint=hint)
  if d.decorator_list:
    refuse(d, 'a decorator', 'Define the decorated helper at module level.')
  for node in ast.walk(d):
    if isinstance(node, (ast.Nonlocal, ast.Global)):
      refuse(node, 'nonlocal or global declarations',
             'A helper runs as an expression does: return the value and '
             'assign it in the batched function.')
    if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
      refuse(node, 'yield or await', 'A helper must return its value.')
    if isinstance(node, ast.Call) and is_batched(node):
      refuse(node, 'a call of a batched function',
             'A helper runs as a primitive, on whole batches; call the '
             'batched function from the batched function itself, or '
             'decorate the helper and define it at module level.')
  a = d.args
  for default in a.defaults + [k for k in a.kw_defaults if k is not None]:
    if any(isinstance(n, ast.Name) and n.id in outer_locals
           for n in ast.walk(default)):
      refuse(default, 'a default value read from the batched function\'s '
             'variables', 'Pass the value as an argument.')


def _helpers_called(d, helper_names):
  """The helpers that helper `d` calls by name (not shadowed in it)."""
  bound = _bound(d)
  return {n.func.id for n in ast.walk(d)
          if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and
          n.func.id in helper_names and n.func.id not in bound}


class _PassFree(ast.NodeTransformer):
  """Calls of helpers that read the batched function's variables: given
  them (`name=name`), as the frontend gives them in a primitive."""

  def __init__(self, free_of, bound):
    self.free_of = free_of
    self.bound = bound

  def visit_Call(self, node):
    node = self.generic_visit(node)
    f = node.func
    if (isinstance(f, ast.Name) and f.id not in self.bound and
        self.free_of.get(f.id)):
      node.keywords = node.keywords + [
          ast.keyword(v, ast.copy_location(ast.Name(v, ast.Load()), node))
          for v in self.free_of[f.id]]
    return node


def _compile(d, free, free_of, cells, closure, fn_globals, filename,
             line_offset):
  """The lifted function of helper `d` (its free variables keyword-only)."""
  lifted = _PassFree(free_of, _bound(d)).visit(copy.deepcopy(d))
  lifted.decorator_list = []
  lifted.args.kwonlyargs = lifted.args.kwonlyargs + [ast.arg(v)
                                                     for v in free]
  lifted.args.kw_defaults = lifted.args.kw_defaults + [None] * len(free)
  definition = copy.deepcopy(lifted)
  ast.increment_lineno(definition, 1 - definition.lineno)
  fn_code = member_helpers.inner_code(lifted, sorted(set(closure) | set(
      cells)), filename, line_offset)
  scope = dict(fn_globals)
  for n, cell in closure.items():
    try:
      scope[n] = cell.cell_contents
    except ValueError:
      pass
  def value(expression):   # a default, as Python computes it at the `def`
    code = compile(ast.Expression(copy.deepcopy(expression)), filename,
                   'eval')
    return eval(code, scope)  # pylint: disable=eval-used
  defaults = tuple(value(e) for e in d.args.defaults)
  kw_defaults = {a.arg: value(e)
                 for a, e in zip(d.args.kwonlyargs, d.args.kw_defaults)
                 if e is not None}
  all_cells = {**closure, **cells}
  fn = types.FunctionType(fn_code, fn_globals, d.name, defaults or None,
                          tuple(all_cells[n] for n in fn_code.co_freevars))
  fn.__kwdefaults__ = kw_defaults or None
  setattr(fn, FREE, free)
  setattr(fn, DEFINITION, definition)
  return fn
