"""From a pure expression of a batched function to its batched primitive.

A maximal sub-expression without calls of batched functions becomes one
`PrimOp`: `PrimitiveRewriter` turns the IR variables it reads into the
parameters of a function and the Python operators that would see the
whole batch (`and`, `or`, `not`, chained comparisons, `a if c else b`, `%`
and `//`) into calls of the per-member helpers of `autobatch_vm.ops`;
`make_function` compiles that body into a real Python function with the
user's globals and closure cells and the user's file and line.
"""

import ast
import copy
import linecache
import types

from autobatch_vm import errors
from autobatch_vm import ops as ops_module

__all__ = ['PrimitiveRewriter', 'make_function', 'expression_text',
           'shorten', 'split_compare']

_OPS_NAME = '__ab_ops'
_ASSERT_NAME = '__ab_helper_assertion'


class PrimitiveRewriter(ast.NodeTransformer):
  """Makes a pure expression batch: IR variables become lambda parameters.

  `and`/`or`/`not`, chained comparisons and `a if c else b` become calls of
  the per-member helpers in `autobatch_vm.ops`; `truthy(x)` becomes `x`.

  Args:
    local_names: The names of the function's variables (its parameters
      and assignment targets).
    static_value: AST node -> the Python object a name or attribute chain
      of non-locals refers to (a sentinel where it is not static).
    unsupported: (node, what) -> raises the error for an unsupported
      construct.
  """

  def __init__(self, local_names, static_value, unsupported):
    self.local_names = local_names
    self.static_value = static_value
    self.unsupported = unsupported
    self.inputs = []

  def rewrite(self, node):
    """Rewrites a copy of `node`.

    Args:
      node: A pure expression (no call of a batched function).

    Returns:
      `(body, inputs)`: the rewritten expression, reading `__ab_v<i>`,
      and the variables it reads, `inputs[i]` for `__ab_v<i>`.
    """
    node = self.visit(copy.deepcopy(node))
    return node, self.inputs

  def _ops(self, name, args, like):
    fn = ast.Attribute(ast.Name(_OPS_NAME, ast.Load()), name, ast.Load())
    return ast.copy_location(ast.Call(fn, args, []), like)

  def visit_Name(self, node):
    """A read of a variable becomes the parameter `__ab_v<i>`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if isinstance(node.ctx, ast.Load) and (
        node.id in self.local_names or node.id.startswith('%')):
      if node.id not in self.inputs:
        self.inputs.append(node.id)
      return ast.copy_location(
          ast.Name(f'__ab_v{self.inputs.index(node.id)}', ast.Load()), node)
    return node

  def visit_Lambda(self, node):
    """A lambda is kept as written.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    # Lambda bodies are plain Python on whatever they are given.
    return node

  def visit_BoolOp(self, node):
    """`and`/`or` become `ops.logical_and`/`ops.logical_or`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    values = [self.visit(v) for v in node.values]
    name = 'logical_and' if isinstance(node.op, ast.And) else 'logical_or'
    return self._ops(name, values, node)

  def visit_UnaryOp(self, node):
    """`not` becomes `ops.logical_not`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    operand = self.visit(node.operand)
    if isinstance(node.op, ast.Not):
      return self._ops('logical_not', [operand], node)
    return ast.copy_location(ast.UnaryOp(node.op, operand), node)

  def visit_BinOp(self, node):
    """`%` and `//` become `ops.mod` and `ops.floordiv`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    # `%` and `//` go through helpers so that a zero divisor in a member not
    # at the block cannot fail a TensorFlow run (NumPy gives 0 there).
    if isinstance(node.op, (ast.Mod, ast.FloorDiv)):
      name = 'mod' if isinstance(node.op, ast.Mod) else 'floordiv'
      return self._ops(name, [self.visit(node.left), self.visit(node.right)],
                       node)
    return self.generic_visit(node)

  def visit_Compare(self, node):
    """A chained comparison becomes `ops.logical_and` of each.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if len(node.ops) > 1:
      return self.visit(split_compare(node))
    return self.generic_visit(node)

  def visit_IfExp(self, node):
    """`a if c else b` becomes `ops.where(c, a, b)`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    return self._ops('where', [self.visit(node.test), self.visit(node.body),
                               self.visit(node.orelse)], node)

  def visit_Call(self, node):
    """`truthy(x)` becomes `x`; other calls are kept.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if self.static_value(node.func) is ops_module.truthy:
      if len(node.args) != 1 or node.keywords:
        self.unsupported(node, 'truthy() with other than one argument')
      return self.visit(node.args[0])
    return self.generic_visit(node)


def make_function(body, arity, loc, text, closure, fn_globals, name):
  """Builds `lambda __ab_v0, ...: body` with the user's globals/closure.

  Where `body` calls functions of the user's or a library's, it is a
  `def` instead, which turns an AssertionError raised in the callee into
  `errors.HelperAssertionError` (see `_helper_assertion`): inference
  and the VM then report the assertion, not a missing result.

  Args:
    body: The expression (an AST), reading its inputs as `__ab_v<i>`.
    arity: The number of inputs.
    loc: The `SourceLoc` of the expression: the function's code object
      carries its file and line.
    text: The expression's text, for the assertion's message, or None.
    closure: The user's function's closure cells, by name.
    fn_globals: The user's function's globals.
    name: The user's function's name (the primitive is `<name>_line<l>`).

  Returns:
    The primitive, a Python function of `arity` batched arguments.
  """
  args = [ast.arg(f'__ab_v{i}') for i in range(arity)]
  arguments = ast.arguments(posonlyargs=[], args=args, vararg=None,
                            kwonlyargs=[], kw_defaults=[], kwarg=None,
                            defaults=[])
  if _calls_outside_ops(body):
    handler = ast.ExceptHandler(
        type=ast.Name('AssertionError', ast.Load()), name='__ab_e',
        body=[ast.Raise(
            exc=ast.Call(ast.Name(_ASSERT_NAME, ast.Load()),
                         [ast.Name('__ab_e', ast.Load()),
                          ast.Constant(text or expression_text(body))], []),
            cause=ast.Name('__ab_e', ast.Load()))])
    made = ast.FunctionDef(
        name='__ab_prim', args=arguments,
        body=[ast.Try(body=[ast.Return(body)], handlers=[handler],
                      orelse=[], finalbody=[])],
        decorator_list=[], returns=None, type_comment=None,
        type_params=[])
    result = ast.Name('__ab_prim', ast.Load())
  else:
    made = None
    result = ast.Lambda(args=arguments, body=body)
  free = sorted(set(closure) | {_OPS_NAME, _ASSERT_NAME})
  maker = ast.FunctionDef(
      name='__ab_make',
      args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in free],
                         vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[]),
      body=([made] if made is not None else []) + [ast.Return(result)],
      decorator_list=[], returns=None, type_comment=None, type_params=[])
  module = ast.Module(body=[maker], type_ignores=[])
  ast.fix_missing_locations(module)
  _set_lines(module, loc.line)
  code = compile(module, loc.filename, 'exec')
  maker_code = next(c for c in code.co_consts
                    if isinstance(c, types.CodeType))
  lam_code = next(c for c in maker_code.co_consts
                  if isinstance(c, types.CodeType))
  cells = []
  for name in lam_code.co_freevars:
    if name == _OPS_NAME:
      cells.append(types.CellType(ops_module))
    elif name == _ASSERT_NAME:
      cells.append(types.CellType(_helper_assertion))
    else:
      cells.append(closure[name])
  fn = types.FunctionType(lam_code, fn_globals, f'{name}_line{loc.line}',
                          None, tuple(cells))
  return fn


def expression_text(node):
  """The source text of `node`, shortened to 60 characters.

  Args:
    node: An AST expression.

  Returns:
    Its text, as a primitive prints.
  """
  return shorten(ast.unparse(node))


def shorten(text):
  """`text`, cut to 60 characters with `...` if longer.

  Args:
    text: A string.

  Returns:
    `text`, or its first 57 characters and `...`.
  """
  return text if len(text) <= 60 else text[:57] + '...'


def _calls_outside_ops(node):
  """Whether expression `node` calls anything but `autobatch_vm.ops`."""
  for n in ast.walk(node):
    if isinstance(n, ast.Call):
      f = n.func
      if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
              and f.value.id == _OPS_NAME):
        return True
  return False


def _helper_assertion(error, text):
  """`errors.HelperAssertionError` for AssertionError `error`, raised in a
  function that primitive `text` calls: names that function, its file and
  the line of the assert."""
  tb = error.__traceback__
  while tb.tb_next is not None:
    tb = tb.tb_next
  code = tb.tb_frame.f_code
  line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
  where = f'{code.co_name}() ({code.co_filename}, line {tb.tb_lineno}'
  where += f': {line})' if line else ')'
  detail = f': {error}' if str(error) else ''
  return errors.HelperAssertionError(
      f'an assert in {where}, called by `{text}`, failed{detail}')


def _set_lines(tree, line):
  for n in ast.walk(tree):
    if 'lineno' in n._attributes:
      n.lineno = line
      n.end_lineno = line
      n.col_offset = 0
      n.end_col_offset = 0


def split_compare(node):
  """`a < b < c` -> `a < b and b < c` (as a BoolOp).

  Args:
    node: An `ast.Compare` of several comparisons.

  Returns:
    The `ast.BoolOp` of one comparison per operator.
  """
  parts = []
  left = node.left
  for op, right in zip(node.ops, node.comparators):
    parts.append(ast.copy_location(
        ast.Compare(left=left, ops=[op], comparators=[right]), node))
    left = right
  return ast.copy_location(ast.BoolOp(op=ast.And(), values=parts), node)
