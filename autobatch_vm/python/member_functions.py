"""A user's Python function as source to rewrite, and the rewrite compiled.

`member_direct` rewrites a per-member primitive into plain NumPy on the
batch; where the primitive calls a function of the user's (a helper:
`leaf(point, v)`, `lib.where(c, a, b)`), it rewrites that function's body
the same way, once per signature of its arguments.  This module gives it
what that needs of a function:

- `function_tree`: the function's own syntax tree (a `def` or a
  `lambda`), read from its file and checked against its code object;
- `plain_function`: the function a call runs (a sync point's wrapper is
  the function it marks), or None where it is no plain Python function;
- `resolve`: what a name or attribute chain of non-locals refers to, as
  the function's code finds it (closure, globals, builtins);
- `compile_function`: the rewritten `def`, compiled with the function's
  globals and closure cells and its file and lines.
"""

import ast
import builtins
import copy
import inspect
import linecache
import types
import weakref

from autobatch_vm import ops as ops_module
from autobatch_vm.ir import patterns
from autobatch_vm.python import primitives as python_primitives

__all__ = ['MISSING', 'function_tree', 'plain_function', 'resolve',
           'compile_function']

MISSING = object()   # `resolve`'s answer where a name is not static

_NOT_PLAIN = (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS |
              inspect.CO_GENERATOR | inspect.CO_COROUTINE |
              inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE)
_SYNC_WRAPPER_CODE = ops_module.sync_point(lambda: None).__code__
# (filename, hash of its text) -> `_module_tree`'s value.
_TREES = {}
# A function -> its checked definition, or None (`function_tree`).
_FUNCTION_TREES = weakref.WeakKeyDictionary()


def plain_function(obj):
  """The plain Python function a call of `obj` runs, or None.

  A sync point's wrapper (`ab.sync_point`) runs the function it marks; a
  plain function has positional parameters only (defaults allowed), no
  `*args`, `**kwargs`, keyword-only parameters, and is no generator.

  Args:
    obj: The object called.

  Returns:
    The function, or None.
  """
  if (type(obj) is types.FunctionType  # pylint: disable=unidiomatic-typecheck
      and obj.__code__ is _SYNC_WRAPPER_CODE):
    obj = getattr(obj, '__wrapped__', None)
  if type(obj) is not types.FunctionType:  # pylint: disable=unidiomatic-typecheck
    return None
  code = obj.__code__
  if code.co_flags & _NOT_PLAIN or code.co_kwonlyargcount or (
      code.co_posonlyargcount):
    return None
  return obj


def function_tree(fn):
  """A new copy of the syntax tree of `fn`'s definition, or None.

  Read from `fn`'s file: the `def` (or `lambda`) that starts on its
  code's first line, of its name and parameters.  None where the file
  cannot be read or parsed, or where no one definition matches (two
  lambdas of the same parameters on one line).

  Args:
    fn: A plain Python function.

  Returns:
    An `ast.FunctionDef` or `ast.Lambda`, or None.
  """
  try:
    found = _FUNCTION_TREES[fn]
  except KeyError:
    found = _FUNCTION_TREES[fn] = _definition(fn)
  return copy.deepcopy(found) if found is not None else None


def _definition(fn):
  """`fn`'s definition in its file, checked (`function_tree`), or None."""
  code = fn.__code__
  module = _module_tree(code.co_filename)
  if module is None:
    return None
  tree, by_line = module
  params = list(code.co_varnames[:code.co_argcount])
  found = []
  for node in by_line.get(code.co_firstlineno, ()):
    name = node.name if isinstance(node, ast.FunctionDef) else '<lambda>'
    args = node.args
    if (name == code.co_name and [a.arg for a in args.args] == params and
        not args.posonlyargs and not args.kwonlyargs and
        args.vararg is None and args.kwarg is None):
      found.append(node)
  if len(found) != 1 or not _compiles_to(found[0], fn, tree):
    return None
  return found[0]


def _compiles_to(node, fn, tree):
  """Whether definition `node` of module `tree`, compiled where `fn`'s
  free names are a closure's, gives `fn`'s code (its file may have
  changed since).  The module's imports come along: the compiler reads a
  method of an imported module differently."""
  node = copy.deepcopy(node)
  if isinstance(node, ast.FunctionDef):
    node.decorator_list = []
    definitions, result = [node], ast.Name(node.name, ast.Load())
  else:
    definitions, result = [], node
  imports = [s for s in tree.body if isinstance(s, (ast.Import,
                                                     ast.ImportFrom))]
  try:
    made = python_primitives.closure_code(
        definitions, result, fn.__code__.co_freevars, fn.__code__.co_filename,
        'outer', prelude=imports)
  except (SyntaxError, ValueError, TypeError):
    return False
  return _same_code(made, fn.__code__)


def _same_code(a, b):
  """Whether code objects `a` and `b` do the same (nested ones too)."""
  if (a.co_code != b.co_code or a.co_names != b.co_names or
      a.co_varnames != b.co_varnames or a.co_freevars != b.co_freevars or
      len(a.co_consts) != len(b.co_consts)):
    return False
  for x, y in zip(a.co_consts, b.co_consts):
    if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
      if not _same_code(x, y):
        return False
    elif type(x) is not type(y) or x != y:
      return False
  return True


def _module_tree(filename):
  """The parsed source of `filename` (cached while it is unchanged), and
  its definitions (`def`s and lambdas) by the first line of their code
  (a decorated `def`'s first decorator's); or None."""
  lines = linecache.getlines(filename)
  if not lines:
    return None
  text = ''.join(lines)
  key = (filename, hash(text))
  if key not in _TREES:
    try:
      tree = ast.parse(text, filename)
    except (SyntaxError, ValueError):
      _TREES[key] = None
      return None
    by_line = {}
    for node in ast.walk(tree):
      if isinstance(node, ast.Lambda):
        line = node.lineno
      elif isinstance(node, ast.FunctionDef):
        line = (node.decorator_list[0].lineno if node.decorator_list
                else node.lineno)
      else:
        continue
      by_line.setdefault(line, []).append(node)
    _TREES[key] = tree, by_line
  return _TREES[key]


def resolve(fn, text):
  """What dotted name `text` refers to in `fn`'s code, or `MISSING`.

  The first name is looked up as the code does (closure cell, globals,
  builtins); attributes are read only of modules, namespaces and
  namedtuples (whose attributes are plain values).

  Args:
    fn: A function (its closure and globals).
    text: A name or attribute chain (`np.sum`, `lib.where`).

  Returns:
    The object, or `MISSING`.
  """
  parts = text.split('.')
  if not all(p.isidentifier() for p in parts):
    return MISSING
  head = parts[0]
  code = fn.__code__
  if head in code.co_freevars:
    try:
      obj = fn.__closure__[code.co_freevars.index(head)].cell_contents
    except ValueError:   # an empty cell
      return MISSING
  elif head in fn.__globals__:
    obj = fn.__globals__[head]
  elif hasattr(builtins, head):
    obj = getattr(builtins, head)
  else:
    return MISSING
  for part in parts[1:]:
    if not (isinstance(obj, (types.ModuleType, types.SimpleNamespace)) or
            patterns.is_namedtuple(obj)):
      return MISSING
    obj = getattr(obj, part, MISSING)
    if obj is MISSING:
      return MISSING
  return obj


def compile_function(tree, fn, name, helpers):
  """Compiles rewritten definition `tree` of `fn` as a new function.

  Args:
    tree: An `ast.FunctionDef` (`fn`'s parameters, a rewritten body).
    fn: The user's function: its globals, closure cells, file and
      defaults are the new function's.
    name: The new function's name.
    helpers: Name -> object, more names the body reads (none of them a
      name of `fn`'s).

  Returns:
    The new function.
  """
  code = fn.__code__
  tree.name = name
  tree.decorator_list = []
  tree.args.defaults = [ast.Constant(None) for _ in tree.args.defaults]
  inner = python_primitives.closure_code(
      [tree], ast.Name(name, ast.Load()),
      list(code.co_freevars) + sorted(helpers), code.co_filename,
      name + '_make')
  cells = [types.CellType(helpers[n]) if n in helpers else
           fn.__closure__[code.co_freevars.index(n)]
           for n in inner.co_freevars]
  return types.FunctionType(inner, fn.__globals__, name, fn.__defaults__,
                            tuple(cells))
