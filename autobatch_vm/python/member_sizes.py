"""Which primitives compute a size: a value fixed by shapes.

A per-member function's shapes are fixed for a signature, so `len(x)`,
`x.shape[0]`, `x.ndim` and `x.size`, and integer arithmetic on them and on
other such values, give every member the same Python int.  `size_roles`
tells, for a primitive's expression as `PrimitiveRewriter` made it,
whether it computes only that, and how it reads each input: through its
shape (`'shape'`) or as a value (`'value'`, which must itself be such a
size).  Type inference folds such values into constants
(`passes.size_folding`), so that a size computed in one statement can
make an array in a later one (`n = len(x)`, then `np.zeros(n)`).

A batch-aware function's shapes past the batch axis are fixed too:
`batch_size_roles` tells the same of its primitives (`n = x.shape[1]`,
`x.ndim`, `len(x[0])`), and type inference folds those whose value does
not follow the batch size (`len(x)` counts members: not a size).
"""

import ast
import builtins

from autobatch_vm.python import primitives as python_primitives

__all__ = ['size_roles', 'batch_size_roles']

_SHAPE_ATTRIBUTES = frozenset(('shape', 'ndim', 'size'))
_HELPERS = frozenset(('len', 'min', 'max', 'abs', 'int'))
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow,
              ast.USub, ast.UAdd)


def size_roles(body, prefix, arity):
  """How a size expression reads its inputs, or None if it is not one.

  Args:
    body: The primitive's expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.
    arity: Its number of inputs.

  Returns:
    A tuple with one entry per input, `'shape'` (only its shape is read:
    `len(x)`, `x.shape`, `x.ndim`, `x.size`, also of its items at sizes,
    `len(m[0])`) or `'value'` (read as a value in integer arithmetic);
    None where the expression computes anything else, or is an input
    itself (a copy).
  """
  roles = [None] * arity
  if not arity or python_primitives.input_position(body, prefix) is not None:
    return None
  if not _size(body, prefix, roles):
    return None
  return tuple(r or 'value' for r in roles)


def _note(roles, k, role):
  if roles[k] != 'value':
    roles[k] = role


def _size(node, prefix, roles):
  """Whether `node` computes an integer from shapes and values only,
  noting how it reads each input in `roles`."""
  k = python_primitives.input_position(node, prefix)
  if k is not None:
    _note(roles, k, 'value')
    return True
  if isinstance(node, ast.Name):
    return True   # the user's global or closure value
  if isinstance(node, ast.Constant):
    return type(node.value) is int
  if isinstance(node, ast.Attribute):
    return node.attr in _SHAPE_ATTRIBUTES and _shaped(node.value, prefix,
                                                      roles)
  if isinstance(node, ast.BinOp):
    return isinstance(node.op, _OPERATORS) and _size(
        node.left, prefix, roles) and _size(node.right, prefix, roles)
  if isinstance(node, ast.UnaryOp):
    return isinstance(node.op, _OPERATORS) and _size(node.operand, prefix,
                                                     roles)
  if isinstance(node, ast.Call) and not node.keywords:
    name = python_primitives.helper_name(node, prefix,
                                         python_primitives.MEMBER_OPS)
    if name == 'len':
      return len(node.args) == 1 and _shaped(node.args[0], prefix, roles)
    if name == 'getitem':
      return len(node.args) == 2 and _size_index(node.args, prefix, roles)
    if not (name in _HELPERS or python_primitives.helper_name(
        node, prefix, 'ops') in ('mod', 'floordiv', 'lshift', 'rshift')):
      return False
    return all(_size(a, prefix, roles) for a in node.args)
  return False


def _size_index(args, prefix, roles):
  """`getitem(x.shape, key[i])`: an item of a shape, at a size `i`
  (also of `unpacked(x.shape, n)`, `m, n = x.shape`'s)."""
  shape, key = args
  if (isinstance(shape, ast.Call) and len(shape.args) == 2 and
      not shape.keywords and python_primitives.helper_name(
          shape, prefix, python_primitives.MEMBER_OPS) == 'unpacked' and
      isinstance(shape.args[1], ast.Constant)):
    shape = shape.args[0]
  if not (isinstance(shape, ast.Attribute) and shape.attr == 'shape' and
          _shaped(shape.value, prefix, roles) and
          isinstance(key, ast.Subscript)):
    return False
  index = key.slice   # a slice of a shape is a tuple, not a size
  return not isinstance(index, ast.Slice) and _size(index, prefix, roles)


def _shaped(node, prefix, roles):
  """Whether `node` is an array whose shape only the shapes of inputs and
  sizes decide: an input, or items of one at sizes and static slices
  (`m[0]`, `x[1:n]`)."""
  k = python_primitives.input_position(node, prefix)
  if k is not None:
    _note(roles, k, 'shape')
    return True
  if not (isinstance(node, ast.Call) and len(node.args) == 2 and
          not node.keywords and python_primitives.helper_name(
              node, prefix, python_primitives.MEMBER_OPS) == 'getitem' and
          isinstance(node.args[1], ast.Subscript)):
    return False
  index = node.args[1].slice
  parts = index.elts if isinstance(index, ast.Tuple) else [index]
  for p in parts:
    if isinstance(p, ast.Slice):
      if not all(b is None or _size(b, prefix, roles)
                 for b in (p.lower, p.upper, p.step)):
        return False
    elif not _size(p, prefix, roles):
      return False
  return _shaped(node.args[0], prefix, roles)


# Python's builtins that make a size of sizes in a batch-aware primitive.
_BATCH_BUILTINS = frozenset((builtins.min, builtins.max, builtins.abs,
                             builtins.int))


def batch_size_roles(body, prefix, arity, static):
  """`size_roles` of a batch-aware primitive's expression: whether it
  computes a Python int from its inputs' shapes (`x.shape[1]`, `x.ndim`,
  `len(x[0])`), Python ints of the user's and integer arithmetic on them
  and on sizes (its `'value'` inputs), and how it reads each input.

  Args:
    body: The primitive's expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.
    arity: Its number of inputs.
    static: The object a name or attribute chain of the user's refers to
      (anything else where it is not one).

  Returns:
    As `size_roles` (an empty tuple for an expression without inputs,
    `W.shape[1]` of a global `W`); None where it computes anything else,
    is an input itself, or is a number written in place.
  """
  if (isinstance(body, ast.Constant) or
      python_primitives.input_position(body, prefix) is not None):
    return None
  roles = [None] * arity
  if not _BatchSizes(prefix, roles, static).size(body):
    return None
  return tuple(r or 'value' for r in roles)


class _BatchSizes:
  """`batch_size_roles`'s walk, noting how each input is read in
  `roles`."""

  def __init__(self, prefix, roles, static):
    self.prefix = prefix
    self.roles = roles
    self.static = static

  def size(self, node):
    """Whether `node` computes a Python int from sizes."""
    k = python_primitives.input_position(node, self.prefix)
    if k is not None:
      _note(self.roles, k, 'value')
      return True
    if isinstance(node, ast.Constant):
      return type(node.value) is int
    if isinstance(node, (ast.Name, ast.Attribute)) and (
        type(self.static(node)) is int):
      return True   # the user's global or closure int
    if isinstance(node, ast.Attribute):
      return node.attr in ('ndim', 'size') and self.shaped(node.value)
    if isinstance(node, ast.Subscript):
      # `x.shape[1]`: an item of a shape at a size (a slice of it is a
      # tuple, not a size).
      return (isinstance(node.value, ast.Attribute) and
              node.value.attr == 'shape' and self.shaped(node.value.value)
              and not isinstance(node.slice, (ast.Slice, ast.Tuple)) and
              self.size(node.slice))
    if isinstance(node, ast.BinOp):
      return (isinstance(node.op, _OPERATORS) and self.size(node.left) and
              self.size(node.right))
    if isinstance(node, ast.UnaryOp):
      return isinstance(node.op, _OPERATORS) and self.size(node.operand)
    if not isinstance(node, ast.Call) or node.keywords or any(
        isinstance(a, ast.Starred) for a in node.args):
      return False
    if python_primitives.helper_name(node, self.prefix, 'ops') in (
        'mod', 'floordiv'):
      return all(self.size(a) for a in node.args)
    callee = self.static(node.func)
    if callee is builtins.len:
      return len(node.args) == 1 and self.shaped(node.args[0])
    try:
      known = callee in _BATCH_BUILTINS
    except TypeError:   # unhashable
      return False
    return known and bool(node.args) and all(self.size(a)
                                             for a in node.args)

  def shaped(self, node):
    """Whether `node` is an array whose shape only the shapes of inputs
    and sizes decide: an input, the user's array, or items of one at
    sizes and slices of sizes (`x[0]`, `x[:, 1:]`)."""
    k = python_primitives.input_position(node, self.prefix)
    if k is not None:
      _note(self.roles, k, 'shape')
      return True
    if isinstance(node, (ast.Name, ast.Attribute)):
      return hasattr(self.static(node), 'shape')
    if not isinstance(node, ast.Subscript):
      return False
    index = node.slice
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for p in parts:
      if isinstance(p, ast.Slice):
        if not all(b is None or self.size(b)
                   for b in (p.lower, p.upper, p.step)):
          return False
      elif not (isinstance(p, ast.Constant) and p.value in (None, ...) or
                self.size(p)):
        return False
    return self.shaped(node.value)
