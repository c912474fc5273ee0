"""A per-member primitive as plain NumPy code on the batch, where it can be.

The NumPy batching rules (`per_member.numpy_rules`) run any member code
on a batch, at a cost of some microseconds of Python per operation.  Most
primitives are simpler: a lookup in a table by a member's index
(`embedding[word[node]]`), arithmetic, a product with a shared matrix.
For those the same NumPy code, slightly rewritten, computes every
member's value at once at the cost of hand-written batch-aware code.

`DirectForms` does that rewrite for the batched arguments' ranks and
dtypes (the member's shapes are fixed for a signature): it reads the
primitive's expression (as `PrimitiveRewriter` made it) with each value
known as one member's of rank r (its batched array has the batch axis
first) or the same for every member, and rewrites

- elementwise operators, comparisons, ufuncs and the elementwise helpers
  (`min`, `max`, `abs`, `a if c else b`, `and`, `or`, `not`): as written,
  a member's value of lower rank given axes after the batch axis;
- `table[i]`, a shared array read at member integers (leading indices,
  then slices): as written (one gather);
- `x[i]`, `x[1:3]` of a member's array: the batch axis kept
  (`x[arange(B), i]`, `x[:, 1:3]`);
- `x @ w`, `np.dot` and `np.matmul` of a member's array and a shared
  vector or matrix: as written;
- `np.concatenate` and `np.stack` of members' arrays of one rank, and the
  reductions `np.sum`, `np.mean`, `np.prod`, `np.min`, `np.max`, `np.any`,
  `np.all`: with the axis moved past the batch axis;
- `np.array([a, b])` of members' values of one rank (nested lists too,
  `dtype=` a constant's or a value's): stacked after the batch axis;
- `np.linalg.inv`, `det` and `cholesky` of a member's matrices, `solve`
  and `norm`: as the batching rules of `per_member.numpy_linalg` run them
  (`solve`'s right side a column, `norm`'s axes past the batch axis);
- `np.float64(x)`, `np.int32(x)` (NumPy's scalar types), `float(x)` and
  `int(x)` of a member's values: a cast (`float`, `int`: to float64,
  int64).

Anything else (a call it does not know, a member's value used as a shared
one would need, a boolean index) leaves the primitive to the rules, and so
does an error in the rewritten code, so that the rules report it at the
user's line.  Shared values' ranks and dtypes are those the primitive's
names referred to when the function compiled, as type inference assumes.
"""

import ast
import copy

import numpy as np

from autobatch_vm.per_member import member_ops
from autobatch_vm.python import primitives as python_primitives

__all__ = ['DirectForms', 'direct_forms']

_NUMPY_2 = np.lib.NumpyVersion(np.__version__) >= '2.0.0'
_PYTHON_NUMBERS = (int, float, bool)
_REDUCTIONS = (np.sum, np.mean, np.prod, np.min, np.max, np.amin, np.amax,
               np.any, np.all)
_REDUCTION_METHODS = frozenset(('sum', 'mean', 'prod', 'min', 'max', 'any',
                                'all'))
_CREATION = (np.zeros, np.ones, np.empty, np.full, np.arange, np.eye)
_FUNCTIONS = ([(f, 'reduce') for f in _REDUCTIONS] +
              [(f, 'create') for f in _CREATION] +
              [(np.concatenate, 'concatenate'), (np.stack, 'stack'),
               (np.matmul, 'matmul'), (np.dot, 'matmul'),
               (np.linalg.solve, 'solve'), (np.linalg.norm, 'norm')] +
              [(f, 'linalg') for f in (np.linalg.inv, np.linalg.det,
                                       np.linalg.cholesky)])
# The routines of `np.linalg` that broadcast over leading axes: the rank
# of a member's result, from that of its matrix.
_LINALG_RANK = {'inv': 0, 'det': -2, 'cholesky': 0}
# Helpers of `member_ops` that compute element by element.
_ELEMENTWISE_HELPERS = frozenset(('min', 'max', 'abs', 'where', 'logical_and',
                                  'logical_or', 'logical_not'))
_BOOLEAN_HELPERS = frozenset(('logical_and', 'logical_or', 'logical_not'))
# Operators that keep integers integers.
_INTEGER_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
                      ast.USub, ast.UAdd, ast.Invert, ast.BitAnd, ast.BitOr,
                      ast.BitXor, ast.LShift, ast.RShift)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def direct_forms(body, arity, prefix, static_value):
  """The `DirectForms` of a rewritten per-member primitive.

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.
    arity: Its number of inputs.
    prefix: The prefix of generated names.
    static_value: AST node -> the object a name or attribute chain of the
      user's refers to (any other object where it is not static).

  Returns:
    A `DirectForms`.
  """
  statics = {}
  for node in ast.walk(body):
    if isinstance(node, (ast.Name, ast.Attribute)):
      info = _static_info(static_value(node))
      if info is not None:
        statics[ast.unparse(node)] = info
  return DirectForms(body, arity, prefix, statics)


def _static_info(value):
  """What the rewrite needs to know of a shared value, or None."""
  if type(value) is np.ndarray:  # pylint: disable=unidiomatic-typecheck
    return ('array', value.ndim, value.dtype.kind, True)   # no subclass
  if type(value) in _PYTHON_NUMBERS:
    return ('array', 0, np.asarray(value).dtype.kind, False)
  if isinstance(value, np.generic):
    return ('array', 0, value.dtype.kind, True)
  if isinstance(value, np.ufunc):
    return ('function', 'ufunc')
  if isinstance(value, type) and issubclass(value, np.generic):
    kind = np.dtype(value).kind if value in np.sctypeDict.values() else None
    return ('function', 'scalar', kind) if kind and kind in 'biufc' else None
  for fn, tag in _FUNCTIONS:
    if value is fn:
      return ('function', tag)
  return None


class DirectForms:
  """Builds a primitive's plain NumPy form per signature of its arguments.

  Args:
    body: The primitive's expression, as `PrimitiveRewriter` rewrote it.
    arity: Its number of inputs.
    prefix: The prefix of generated names.
    statics: Source text of a shared name or attribute chain -> what it
      is (`_static_info`).

  Attributes:
    body, arity, prefix, statics: As given.
  """

  def __init__(self, body, arity, prefix, statics):
    self.body = body
    self.arity = arity
    self.prefix = prefix
    self.statics = statics

  def form(self, key, member_function, loc):
    """The plain NumPy form for arguments of signature `key`, or None.

    Args:
      key: The arguments' ranks and dtypes: per argument `(ndim, dtype
        char)` (an array) or its type (a Python number).
      member_function: The primitive's function of one member (its
        closure and globals are the form's).
      loc: The primitive's `SourceLoc`.

    Returns:
      A function of the batched arguments computing every member's value
      (with the batch axis first), or None where the rules must run it.
    """
    inputs = []
    for k in key:
      if isinstance(k, type):
        inputs.append(_Value(False, 0, np.dtype(k).kind, False))
      else:
        ndim, char = k
        inputs.append(_Value(ndim > 0, max(ndim - 1, 0),
                             np.dtype(char).kind, True))
    try:
      value, body = _Rewrite(inputs, self.statics, self.prefix).value(
          copy.deepcopy(self.body))
    except _NotDirect:
      return None
    if not value.member:   # the same for every member: a size, a constant
      batched = [k for k, v in enumerate(inputs) if v.member]
      if not batched:
        return None
      body = ast.Call(ast.Attribute(ast.Name(self.prefix + _DIRECT,
                                             ast.Load()),
                                    'broadcast', ast.Load()),
                      [body, ast.Name(f'{self.prefix}v{batched[0]}',
                                      ast.Load())], [])
    code = member_function.__code__
    closure = dict(zip(code.co_freevars, member_function.__closure__ or ()))
    return python_primitives.make_function(
        body, self.arity, loc, None, closure, member_function.__globals__,
        member_function.__name__, self.prefix,
        helpers={python_primitives.MEMBER_OPS: member_ops,
                 _DIRECT: _Helpers})


_DIRECT = 'direct'


class _Helpers:
  """What the rewritten code calls."""

  @staticmethod
  def align(x, rank):
    """Batched `x` with axes after the batch axis, to member rank `rank`."""
    shape = np.shape(x)
    return np.reshape(x, shape[:1] + (1,) * (rank + 1 - len(shape)) +
                      shape[1:])

  @staticmethod
  def broadcast(value, like):
    """`value`, the same for every member, with the batch axis of `like`."""
    value = np.asarray(value)
    return np.array(np.broadcast_to(value, (len(like),) + value.shape))

  int64 = np.int64
  float64 = np.float64

  @staticmethod
  def stack(items):
    """Each member's `np.array(items)` of batched `items` (one rank)."""
    return np.stack(items, axis=1)

  @staticmethod
  def cast(x, dtype):
    """Batched `x` as `dtype` (a copy)."""
    return np.array(x, dtype=dtype)

  @staticmethod
  def flat(x):
    """Each member's items of batched `x` as one axis."""
    return np.reshape(x, (len(x), -1))

  @staticmethod
  def solve(a, b, vector):
    """Each member's `np.linalg.solve(a, b)`, a shared operand with a batch
    axis of one; `vector`: `b` is each member's vector (a column)."""
    x = np.linalg.solve(a, b[..., None] if vector else b)
    return x[..., 0] if vector else x

  @staticmethod
  def length(x):
    """Each member's `len(x)` of batched `x` (the same for all)."""
    if x.ndim < 2:
      raise TypeError('len() of unsized object')
    return x.shape[1]

  @staticmethod
  def extent(x, axis):
    """Each member's `x.shape[axis]` of batched `x`."""
    return x.shape[1:][axis]

  @staticmethod
  def ndim(x):
    """Each member's `x.ndim` of batched `x`."""
    return x.ndim - 1

  @staticmethod
  def size(x):
    """Each member's `x.size` of batched `x`."""
    return int(np.prod(x.shape[1:], dtype=np.int64))

  @staticmethod
  def take(x, index):
    """Each member's `x[index]`: its own row of batched `x`, then `index`
    (leading parts batched integers)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    return x[(np.arange(len(x)),) + index]

  @staticmethod
  def put(x, index, value):
    """A copy of batched `x` with each member's `x[index] = value` (the
    leading parts of `index` batched integers)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    out = x.copy()
    out[(np.arange(len(x)),) + index] = value
    return out

  @staticmethod
  def put_items(x, index, value):
    """A copy of batched `x` with every member's `x[index] = value`
    (`index` the same for every member)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    out = x.copy()
    out[(slice(None),) + index] = value
    return out


class _NotDirect(Exception):
  """The expression needs the rules."""


class _Value:
  """What the rewrite knows of a value: one member's (`member`) or shared,
  its rank (a member's: without the batch axis), dtype kind, and whether
  a scalar of it is a strong NumPy scalar (NumPy 1 promotes arrays by the
  value of such scalars, as one member's code does not)."""

  __slots__ = ('member', 'rank', 'kind', 'strong')

  def __init__(self, member, rank, kind, strong=True):
    self.member = member
    self.rank = rank
    self.kind = kind
    self.strong = strong


def _integer(v):
  return v.kind is not None and v.kind in 'iu'


class _Rewrite:
  """Reads a rewritten primitive with its values' ranks, rewriting it."""

  def __init__(self, inputs, statics, prefix):
    self.inputs = inputs
    self.statics = statics
    self.prefix = prefix

  def _call(self, name, args):
    fn = ast.Attribute(ast.Name(self.prefix + _DIRECT, ast.Load()), name,
                       ast.Load())
    return ast.Call(fn, args, [])

  def value(self, node):
    """`(_Value, rewritten node)` of expression `node`."""
    k = python_primitives.input_position(node, self.prefix)
    if k is not None:
      return self.inputs[k], node
    if (isinstance(node, ast.Attribute) and node.attr in ('ndim', 'size')
        and self._is_value(node.value)):
      v, base = self.value(node.value)
      if not v.member:
        raise _NotDirect
      return _Value(False, 0, 'i', False), self._call(node.attr, [base])
    if isinstance(node, (ast.Name, ast.Attribute)):
      info = self.statics.get(ast.unparse(node))
      if info is None or info[0] != 'array':
        raise _NotDirect
      return _Value(False, info[1], info[2], info[3]), node
    if isinstance(node, ast.Constant):
      if type(node.value) not in _PYTHON_NUMBERS:
        raise _NotDirect
      return _Value(False, 0, np.asarray(node.value).dtype.kind,
                    False), node
    if isinstance(node, ast.UnaryOp):
      (v,), (node.operand,) = self._elementwise([node.operand])
      return self._kind(v, node.op), node
    if isinstance(node, ast.BinOp):
      if isinstance(node.op, ast.MatMult):
        return self._matmul(node, node.left, node.right)
      vs, (node.left, node.right) = self._elementwise([node.left,
                                                      node.right])
      return self._kind(vs, node.op), node
    if isinstance(node, ast.Compare):
      if len(node.ops) != 1 or not isinstance(node.ops[0], _COMPARISONS):
        raise _NotDirect
      v, nodes = self._elementwise([node.left] + node.comparators)
      node.left, node.comparators = nodes[0], nodes[1:]
      return _Value(v[0].member or v[1].member, max(x.rank for x in v),
                    'b'), node
    if isinstance(node, ast.Call):
      return self._call_value(node)
    raise _NotDirect

  def _call_value(self, node):
    """A call: a helper, a ufunc, a join, a product or a reduction."""
    helper = python_primitives.helper_name(node, self.prefix,
                                           python_primitives.MEMBER_OPS)
    if helper == 'len' and len(node.args) == 1 and not node.keywords:
      v, x = self.value(node.args[0])
      if not v.member:
        raise _NotDirect
      return _Value(False, 0, 'i', False), self._call('length', [x])
    if helper == 'getitem' and len(node.args) == 2 and not node.keywords:
      shape = node.args[0]
      if (isinstance(shape, ast.Attribute) and shape.attr == 'shape' and
          self._is_value(shape.value)):
        return self._extent(shape.value, node.args[1])
      return self._getitem(node)
    if helper == 'setitem' and len(node.args) == 3 and not node.keywords:
      return self._setitem(node)
    if helper == 'asarray':
      return self._array(node)
    if helper in ('int', 'float') and len(node.args) == 1 and (
        not node.keywords):
      dtype = 'int64' if helper == 'int' else 'float64'
      return self._cast(node.args[0], ast.Attribute(
          ast.Name(self.prefix + _DIRECT, ast.Load()), dtype, ast.Load()),
                        dtype[0])
    if helper == 'call' and node.args:   # a function given a list display
      node = ast.Call(node.args[0], node.args[1:], node.keywords)
      helper = None
      info = self.statics.get(ast.unparse(node.func))
      if info == ('function', 'create'):
        return self._created(node)
      if info is not None and info[:2] == ('function', 'scalar'):
        if len(node.args) != 1 or node.keywords:
          raise _NotDirect
        return self._cast(node.args[0], node.func, info[2])
    if helper is None and python_primitives.helper_name(
        node, self.prefix, 'ops') is None:
      method = self._method(node)
      if method is not None:
        return method
    if helper is None:
      info = self.statics.get(ast.unparse(node.func))
      if info in (('function', 'solve'), ('function', 'norm'),
                  ('function', 'linalg')):
        return self._linalg(node, ast.unparse(node.func).rsplit('.', 1)[-1])
    if node.keywords and helper is None:
      info = self.statics.get(ast.unparse(node.func))
      if info in (('function', 'concatenate'), ('function', 'stack'),
                  ('function', 'reduce')):
        return self._axis_call(node, info[1])
      raise _NotDirect
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
      raise _NotDirect
    if helper is not None:
      if helper not in _ELEMENTWISE_HELPERS or (
          helper in ('min', 'max') and len(node.args) < 2):
        raise _NotDirect
      vs, node.args = self._elementwise(node.args)
      if helper in _BOOLEAN_HELPERS:
        return _Value(any(v.member for v in vs), max(v.rank for v in vs),
                      'b'), node
      if helper == 'where':   # the dtype is the values', not the test's
        kind = self._kind(vs[1:], None).kind
        return _Value(any(v.member for v in vs), max(v.rank for v in vs),
                      kind), node
      return self._kind(vs, ast.Add()), node
    if python_primitives.helper_name(node, self.prefix, 'ops') in (
        'mod', 'floordiv'):
      vs, node.args = self._elementwise(node.args)
      return self._kind(vs, ast.Mod()), node
    info = self.statics.get(ast.unparse(node.func))
    if info == ('function', 'ufunc'):
      vs, node.args = self._elementwise(node.args)
      return self._kind(vs, None), node
    if info == ('function', 'matmul') and len(node.args) == 2:
      return self._matmul(node, *node.args)
    if info is not None and info[0] == 'function':
      return self._axis_call(node, info[1])
    raise _NotDirect

  def _elementwise(self, nodes):
    """Operands of an elementwise operation: `(values, rewritten nodes)`,
    a member's value of lower rank than the result given axes after the
    batch axis (so that it broadcasts as one member's does)."""
    pairs = [self.value(n) for n in nodes]
    values = [v for v, _ in pairs]
    rank = max(v.rank for v in values)
    out = []
    for v, n in pairs:
      if not v.member and v.rank == 0 and v.strong and not _NUMPY_2:
        raise _NotDirect
      if v.member and v.rank < rank:
        n = self._call('align', [n, ast.Constant(rank)])
      out.append(n)
    return values, out

  @staticmethod
  def _kind(values, op):
    """The value of an elementwise operation on `values` by `op`."""
    if isinstance(values, _Value):
      values = [values]
    member = any(v.member for v in values)
    rank = max(v.rank for v in values)
    kinds = {v.kind for v in values}
    if op is None:
      kind = kinds.pop() if len(kinds) == 1 else None
    else:
      kind = 'i' if all(_integer(v) for v in values) and isinstance(
          op, _INTEGER_OPERATORS) else None
    # Of shared values, Python numbers give a Python number.
    return _Value(member, rank, kind,
                  any(v.strong for v in values if not v.member))

  def _key_parts(self, key, xv):
    """The parts of `key` (`key[index]`) indexing `x` of value `xv`:
    leading integers (a member's or shared), then slices with shared
    bounds.  Returns the rewritten parts, the rank of the items, and
    whether a part is a member's."""
    if not (isinstance(key, ast.Subscript) and isinstance(key.value,
                                                          ast.Attribute)
            and key.value.attr == 'key'):
      raise _NotDirect
    index = key.slice
    parts = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    member, leading, sliced = False, 0, False
    for k, p in enumerate(parts):
      if isinstance(p, ast.Slice):
        for bound in ('lower', 'upper', 'step'):
          b = getattr(p, bound)
          if b is not None:
            bv, b = self.value(b)
            if bv.member or bv.rank:
              raise _NotDirect
            setattr(p, bound, b)
        sliced = True
        continue
      v, parts[k] = self.value(p)
      if sliced or v.rank or not _integer(v):
        raise _NotDirect
      member = member or v.member
      leading += 1
    if leading > xv.rank:
      raise _NotDirect
    return parts, xv.rank - leading, member

  def _getitem(self, node):
    """`getitem(x, key[index])`."""
    x, key = node.args
    xv, x = self.value(x)
    parts, rank, member = self._key_parts(key, xv)
    if not xv.member:   # a shared table: one gather, as written
      return _Value(member, rank, xv.kind), ast.Subscript(
          x, _index(parts), ast.Load())
    if member:
      key.slice = _index(parts)
      return _Value(True, rank, xv.kind), self._call('take', [x, key])
    return _Value(True, rank, xv.kind), ast.Subscript(
        x, ast.Tuple([ast.Slice()] + parts, ast.Load()), ast.Load())

  def _setitem(self, node):
    """`setitem(x, key[index], value)` of a member's `x`: a copy written
    at each member's items."""
    x, key, value = node.args
    xv, x = self.value(x)
    if not xv.member:
      raise _NotDirect
    parts, rank, member = self._key_parts(key, xv)
    vv, value = self.value(value)
    if vv.rank > rank:
      raise _NotDirect
    if vv.member and vv.rank < rank:
      value = self._call('align', [value, ast.Constant(rank)])
    key.slice = _index(parts)
    return _Value(True, xv.rank, xv.kind), self._call(
        'put' if member else 'put_items', [x, key, value])

  def _matmul(self, node, a, b):
    """`a @ b` (or `np.dot`, `np.matmul`): a member's array times a shared
    vector or matrix."""
    (av, a), (bv, b) = self.value(a), self.value(b)
    if not av.member or bv.member or av.rank < 1 or bv.rank not in (1, 2):
      raise _NotDirect
    if isinstance(node, ast.BinOp):
      node.left, node.right = a, b
    else:
      node.args = [a, b]
    return _Value(True, av.rank - (bv.rank == 1), None), node

  @staticmethod
  def _axis_argument(node, arity):
    """`node`'s arguments but its axis (`arity` of them), and its axis
    (None where it gives none)."""
    if any(isinstance(a, ast.Starred) for a in node.args):
      raise _NotDirect
    axis = None
    for kw in node.keywords:
      if kw.arg != 'axis':
        raise _NotDirect
      axis = kw.value
    args = list(node.args)
    if len(args) == arity + 1 and axis is None:
      axis = args.pop()
    if len(args) != arity:
      raise _NotDirect
    return args, axis

  @staticmethod
  def _reduced(v, axis):
    """A reduction of a member's value `v` over member axes `axis`: its
    value, and its `axis` keyword on the batched array."""
    if not v.member:
      raise _NotDirect
    moved = tuple(_moved(a, v.rank) for a in _constant_axes(axis, v.rank))
    return (_Value(True, v.rank - len(set(moved)), None),
            [ast.keyword('axis', ast.Constant(moved))])

  def _method(self, node):
    """A method of a member's array (a reduction, `astype`), or None
    where `node` calls no method of a value."""
    f = node.func
    if not isinstance(f, ast.Attribute) or not self._is_value(f.value):
      return None
    v, f.value = self.value(f.value)
    if f.attr == 'astype' and len(node.args) == 1 and not node.keywords:
      if not v.member or self._reads_input(node.args[0]):
        raise _NotDirect
      return _Value(True, v.rank, None), node
    if f.attr not in _REDUCTION_METHODS:
      raise _NotDirect
    node.args, axis = self._axis_argument(node, 0)
    value, node.keywords = self._reduced(v, axis)
    return value, node

  def _created(self, node):
    """`np.zeros(n, dtype=x.dtype)` and the like: an array the same for
    every member, its size a shared value and its dtype any value's."""
    name = ast.unparse(node.func).rsplit('.', 1)[-1]
    args = list(node.args)
    for kw in node.keywords:
      if kw.arg != 'dtype':
        raise _NotDirect
      kw.value = self._dtype(kw.value)
    if not args or any(isinstance(a, ast.Starred) for a in args):
      raise _NotDirect
    shape = args[0]
    parts = shape.elts if isinstance(shape, ast.Tuple) and name not in (
        'arange', 'eye') else [shape]
    for k, part in enumerate(parts):
      v, new = self.value(part)
      if v.member or v.rank:
        raise _NotDirect
      parts[k] = new
    for k in range(1, len(node.args)):
      v, node.args[k] = self.value(node.args[k])
      if v.member or v.rank:
        raise _NotDirect
    rank = {'arange': 1, 'eye': 2}.get(name, len(parts) if isinstance(
        shape, ast.Tuple) else 1)
    return _Value(False, rank, None), node

  def _is_value(self, node):
    """Whether `node` is a value (not a module or a helper's name)."""
    if isinstance(node, ast.Name) and node.id.startswith(self.prefix):
      return node.id.startswith(self.prefix + 'v')
    if isinstance(node, (ast.Name, ast.Attribute)):
      info = self.statics.get(ast.unparse(node))
      return info is not None and info[0] == 'array'
    return True

  def _extent(self, x, key):
    """`x.shape[k]` of a member's `x`, `k` a constant."""
    v, x = self.value(x)
    k = _integer_constant(key.slice) if isinstance(key, ast.Subscript) else (
        None)
    if not v.member or k is None or not -v.rank <= k < v.rank:
      raise _NotDirect
    return _Value(False, 0, 'i', False), self._call('extent',
                                                    [x, ast.Constant(k)])

  def _reads_input(self, node):
    """Whether `node` reads an input (a dtype must not)."""
    return any(python_primitives.input_position(n, self.prefix) is not None
               for n in ast.walk(node))

  def _axis_call(self, node, tag):
    """A join or reduction of members' arrays, its axis past the batch."""
    args, axis = self._axis_argument(node, 1)
    if tag == 'reduce':
      v, arg = self.value(args[0])
      value, node.keywords = self._reduced(v, axis)
      node.args = [arg]
      return value, node
    items = args[0]
    if not isinstance(items, (ast.List, ast.Tuple)) or not items.elts:
      raise _NotDirect
    pairs = [self.value(e) for e in items.elts]
    ranks = {v.rank for v, _ in pairs}
    if len(ranks) != 1 or not all(v.member for v, _ in pairs):
      raise _NotDirect
    rank = ranks.pop()
    out_rank = rank + (tag == 'stack')
    if tag == 'concatenate' and rank == 0:
      raise _NotDirect
    (a,) = _constant_axes(axis if axis is not None else ast.Constant(0),
                          out_rank if tag == 'stack' else rank)
    items.elts = [n for _, n in pairs]
    node.args = [items]
    node.keywords = [ast.keyword('axis', ast.Constant(_moved(a, out_rank)))]
    kinds = {v.kind for v, _ in pairs}
    return _Value(True, out_rank, kinds.pop() if len(kinds) == 1 else
                  None), node

  def _cast(self, arg, dtype, kind):
    """`np.float64(x)`, `float(x)` and the like of a member's value: a
    copy of the batched array as that dtype."""
    v, arg = self.value(arg)
    if not v.member:
      raise _NotDirect
    return _Value(True, v.rank, kind), self._call('cast', [arg, dtype])

  def _array(self, node):
    """`np.array([...])` (`asarray(items, dtype=...)`) of members' values
    of one rank, nested lists stacked level by level."""
    if len(node.args) != 1 or any(kw.arg != 'dtype' for kw in node.keywords):
      raise _NotDirect
    value, body = self._stacked(node.args[0])
    if not node.keywords:
      return value, body
    dtype = self._dtype(node.keywords[0].value)
    return _Value(True, value.rank, None), self._call('cast', [body, dtype])

  def _stacked(self, items):
    """A list display of members' values of one rank, stacked."""
    if not isinstance(items, (ast.List, ast.Tuple)) or not items.elts:
      raise _NotDirect
    pairs = [self._stacked(e) if isinstance(e, (ast.List, ast.Tuple)) else
             self.value(e) for e in items.elts]
    ranks = {v.rank for v, _ in pairs}
    if len(ranks) != 1 or not all(v.member for v, _ in pairs):
      raise _NotDirect
    kinds = {v.kind for v, _ in pairs}
    return _Value(True, ranks.pop() + 1, kinds.pop() if len(kinds) == 1 else
                  None), self._call('stack', [ast.List([n for _, n in pairs],
                                                       ast.Load())])

  def _dtype(self, node):
    """A `dtype=` argument: a constant's, or a value's `.dtype`."""
    if isinstance(node, ast.Attribute) and node.attr == 'dtype' and (
        self._is_value(node.value)):
      _, node.value = self.value(node.value)
    elif self._reads_input(node):
      raise _NotDirect
    return node

  def _linalg(self, node, name):
    """`np.linalg.inv`, `det`, `cholesky`, `solve` or `norm`, as the rules
    of `per_member.numpy_linalg` run them on the batched arrays."""
    if any(isinstance(a, ast.Starred) for a in node.args):
      raise _NotDirect
    if name == 'norm':
      return self._norm(node)
    if node.keywords or len(node.args) != (2 if name == 'solve' else 1):
      raise _NotDirect
    pairs = [self.value(a) for a in node.args]
    if name != 'solve':
      (v, a), = pairs
      if not v.member or v.rank < 2:
        raise _NotDirect
      node.args = [a]
      return _Value(True, v.rank + _LINALG_RANK[name], None), node
    (av, a), (bv, b) = pairs
    if av.rank != 2 or bv.rank not in (1, 2) or not (av.member or
                                                     bv.member):
      raise _NotDirect
    a, b = [n if v.member else ast.Subscript(n, ast.Constant(None),
                                             ast.Load())
            for v, n in pairs]
    return _Value(True, bv.rank, None), self._call(
        'solve', [a, b, ast.Constant(bv.rank == 1)])

  def _norm(self, node):
    """`np.linalg.norm(x, ord, axis, keepdims)` of a member's `x`, the
    arguments constants: a flat vector's norm where the rules take one,
    else the norm over the axes moved past the batch axis."""
    names = ('x', 'ord', 'axis', 'keepdims')
    if len(node.args) > len(names):
      raise _NotDirect
    given = dict(zip(names, node.args))
    for kw in node.keywords:
      if kw.arg not in names or kw.arg in given:
        raise _NotDirect
      given[kw.arg] = kw.value
    v, x = self.value(given['x'])
    if not v.member:
      raise _NotDirect
    order = given.get('ord', ast.Constant(None))
    ov, order = (None, order) if isinstance(order, ast.Constant) and (
        type(order.value) in (str, type(None))) else self.value(order)
    if ov is not None and (ov.member or ov.rank):
      raise _NotDirect
    keep = given.get('keepdims', ast.Constant(False))
    if not isinstance(keep, ast.Constant) or type(keep.value) is not bool:
      raise _NotDirect
    axis = given.get('axis')
    if axis is None or (isinstance(axis, ast.Constant) and axis.value is
                        None):
      if _is_none(order) and v.rank != 2:
        if keep.value:
          raise _NotDirect
        return _Value(True, 0, None), ast.Call(
            node.func, [self._call('flat', [x]), order, ast.Constant(1)],
            [])
      axes = (0, 1) if v.rank == 2 else (0,)
    else:
      axes = _constant_axes(axis, v.rank)
    moved = tuple(_moved(a, v.rank) for a in axes)
    rank = v.rank if keep.value else v.rank - len(set(moved))
    return _Value(True, rank, None), ast.Call(
        node.func, [x, order, ast.Constant(moved if len(moved) > 1 else
                                           moved[0]), keep], [])


def _is_none(node):
  return isinstance(node, ast.Constant) and node.value is None


def _index(parts):
  return ast.Tuple(parts, ast.Load()) if len(parts) > 1 else parts[0]


def _constant_axes(axis, rank):
  """The member axes an `axis` argument names: all where it is None."""
  if axis is None or (isinstance(axis, ast.Constant) and axis.value is None):
    return tuple(range(rank))
  parts = axis.elts if isinstance(axis, ast.Tuple) else [axis]
  axes = tuple(_integer_constant(e) for e in parts)
  if any(a is None or not -rank <= a < rank for a in axes):
    raise _NotDirect
  return axes


def _integer_constant(node):
  """The int that `node` writes (`2`, `-1`), or None."""
  sign = 1
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
    sign, node = -1, node.operand
  if isinstance(node, ast.Constant) and type(node.value) is int:
    return sign * node.value
  return None


def _moved(axis, rank):
  """Member axis `axis` (of `rank` axes) as an axis of the batched array."""
  return axis % rank + 1 if rank else axis
