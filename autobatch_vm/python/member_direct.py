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
  vector or matrix: as written; of a shared matrix and a member's vector,
  and of two members' vectors: one product for the batch;
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

- namedtuples, tuples and lists of values (arguments, displays,
  `Point(theta, r)`, `p.r`, `p[0]`, `p._replace(r=v)`, `type(p)`,
  `len(p)`, `isinstance(p, tuple)`), and a list comprehension over them
  (`[np.where(c, a, b) for a, b in zip(p, q)]`), item by item;
- a call of a function of the user's (a `def` or `lambda`, a sync
  point's; `member_functions` reads its source): a call of its body
  rewritten the same way for the arguments' values, once per function
  and values.  Its statements may assign locals (names, tuples of names,
  items of a member's array copied there with `.copy()`), `return`, test
  a value the same for every member or the signature (`isinstance`) in an
  `if`, and enter `np.errstate`; its expressions mean what a primitive's
  do (`min`, `len`, `float`, `np.array([...])` and `a if c else b` as
  the frontend rewrites them in a primitive).

Anything else (a call it does not know, a member's value used as a shared
one would need, a boolean index, an `if` on a member's value, a loop, a
function calling itself) leaves the primitive to the rules, and so does
an error in the rewritten code, so that the rules report it at the
user's line.  Shared values' ranks and dtypes, and the functions a
primitive calls, are those its names referred to when the function
compiled or the form was built, as type inference assumes.
"""

import ast
import builtins
import copy

import numpy as np

from autobatch_vm.ir import patterns
from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_math
from autobatch_vm.per_member import member_ops
from autobatch_vm.python import member_functions
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
               (np.linalg.solve, 'solve'), (np.linalg.norm, 'norm'),
               (np.where, 'where')] +
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
# The operators of `member_ops.weak_operator`, by its names for them.
_WEAK_OPERATORS = {
    'add': ast.Add(), 'sub': ast.Sub(), 'mul': ast.Mult(),
    'truediv': ast.Div(), 'pow': ast.Pow(), 'power': ast.Pow(),
    'and_': ast.BitAnd(), 'or_': ast.BitOr(), 'xor': ast.BitXor(),
    'mod': ast.Mod(), 'floordiv': ast.FloorDiv(), 'lshift': ast.LShift(),
    'rshift': ast.RShift()}


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
    inputs = [_input_value(k) for k in key]
    rewrite = _Rewrite(inputs, self.statics, self.prefix, member_function)
    try:
      value, body = rewrite.any_value(copy.deepcopy(self.body))
      mask = _member_mask(value)
    except _NotDirect:
      return None
    helpers = {python_primitives.MEMBER_OPS: member_ops, _DIRECT: _Helpers,
               **rewrite.functions.helpers}
    if mask is not True:   # leaves the same for every member: sizes
      like = _member_leaf(inputs, self.prefix)
      if like is None:
        return None
      args = [body, like]
      if mask is not False:
        helpers[_MASK] = mask
        args.append(ast.Name(self.prefix + _MASK, ast.Load()))
      body = ast.Call(ast.Attribute(
          ast.Name(self.prefix + _DIRECT, ast.Load()),
          'broadcast' if mask is False else 'batched', ast.Load()), args, [])
    code = member_function.__code__
    closure = dict(zip(code.co_freevars, member_function.__closure__ or ()))
    return python_primitives.make_function(
        body, self.arity, loc, None, closure, member_function.__globals__,
        member_function.__name__, self.prefix, helpers=helpers)


_DIRECT = 'direct'
_MASK = 'mask'


def _input_value(key):
  """What the rewrite knows of an argument of signature `key` (as for
  `DirectForms.form`; a tuple, list or namedtuple of arguments is
  `(its type, its items' keys)`)."""
  if isinstance(key, type):
    return _Value(False, 0, np.dtype(key).kind, False)
  if isinstance(key[0], type):
    return _Pattern(key[0], [_input_value(k) for k in key[1]])
  ndim, char = key
  return _Value(ndim > 0, max(ndim - 1, 0), np.dtype(char).kind, True)


def _member_mask(value):
  """Which leaves of a primitive's value are a member's: True (all),
  False (none: the same for every member), or per item of a pattern."""
  if isinstance(value, _Value):
    return value.member
  if not isinstance(value, _Pattern) or not value.items:
    raise _NotDirect
  mask = tuple(_member_mask(v) for v in value.items)
  return True if all(m is True for m in mask) else mask


def _member_leaf(inputs, prefix):
  """The expression of the first input leaf that is a member's
  (`<prefix>v1[0]`), or None."""
  def find(value, node):
    if isinstance(value, _Value):
      return node if value.member else None
    for k, item in enumerate(value.items):
      found = find(item, ast.Subscript(node, ast.Constant(k), ast.Load()))
      if found is not None:
        return found
    return None
  for i, value in enumerate(inputs):
    found = find(value, ast.Name(f'{prefix}v{i}', ast.Load()))
    if found is not None:
      return found
  return None


class _Helpers:
  """What the rewritten code calls."""

  @staticmethod
  def align(x, rank):
    """Batched `x` with axes after the batch axis, to member rank `rank`."""
    shape = x.shape
    return x.reshape(shape[:1] + (1,) * (rank + 1 - len(shape)) + shape[1:])

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
  def stack_shared(items, member):
    """`stack` where the items not `member` are the same for every member:
    each member's `np.array(items)`, of the dtype NumPy gives one member's
    (a member's float32 next to a Python float: float64)."""
    batch = next(len(x) for x, m in zip(items, member) if m)
    dtype = np.array([np.zeros(np.shape(x)[1:], np.asarray(x).dtype) if m
                      else x for x, m in zip(items, member)]).dtype
    return np.stack([np.asarray(x, dtype) if m else np.broadcast_to(
        np.asarray(x, dtype), (batch,) + np.shape(x))
                     for x, m in zip(items, member)], axis=1)

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
  def batched(value, like, mask):
    """Pattern `value` with each leaf that is the same for every member
    (False in `mask`, `_member_mask`'s) broadcast to the batch of `like`."""
    if mask is True:
      return value
    if mask is False:
      return _Helpers.broadcast(value, like)
    items = [_Helpers.batched(v, like, m) for v, m in zip(value, mask)]
    if patterns.is_namedtuple(value):
      return type(value)(*items)
    return type(value)(items)

  @staticmethod
  def inner(a, b):
    """Each member's `np.dot(a, b)` of two vectors."""
    return np.einsum('ij,ij->i', a, b)

  @staticmethod
  def matvec(matrix, x):
    """Each member's `matrix @ x` of a shared matrix and its vector: the
    members' vectors as the rows of one product."""
    return np.matmul(x, matrix.T)

  @staticmethod
  def write(x, index, value):
    """Each member's `x[index] = value`, in place (the leading parts of
    `index` batched integers)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    x[(np.arange(len(x)),) + index] = value

  @staticmethod
  def write_items(x, index, value):
    """Every member's `x[index] = value`, in place (`index` the same for
    every member)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    x[(slice(None),) + index] = value

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
  def take_guarded(x, index, guard):
    """`take` where `guard` holds: each other member reads at index 0 (a
    read Python skips for it; its value is discarded)."""
    if type(index) is not tuple:  # pylint: disable=unidiomatic-typecheck
      index = (index,)
    guard = np.asarray(guard, bool)
    if not guard.all():
      index = tuple(np.where(guard, k, 0) if np.ndim(k) else k
                    for k in index)
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

  def key(self):
    """What specializations are keyed by (hashable)."""
    return ('value', self.member, self.rank, self.kind, self.strong)


class _Pattern:
  """A tuple, list or namedtuple (`cls`) of values (`items`: `_Value`,
  `_Pattern` or `_Static`), as a pattern of arguments or a helper's value
  is."""

  __slots__ = ('cls', 'items')

  def __init__(self, cls, items):
    self.cls = cls
    self.items = list(items)

  def key(self):
    """What specializations are keyed by (hashable)."""
    return ('pattern', self.cls, tuple(v.key() for v in self.items))


class _Static:
  """A Python object known when the form is built (a function, a class, a
  module, a namespace), the same for every member."""

  __slots__ = ('obj',)

  def __init__(self, obj):
    self.obj = obj

  def key(self):
    """What specializations are keyed by (hashable)."""
    return ('static', id(self.obj))


def _merged(a, b):
  """What two returns of a helper give: the same structure and the same
  members' ranks, else the rules run it (a dtype may differ)."""
  if isinstance(a, _Value) and isinstance(b, _Value):
    if a.member != b.member or a.rank != b.rank:
      raise _NotDirect
    return _Value(a.member, a.rank, a.kind if a.kind == b.kind else None,
                  a.strong or b.strong)
  if isinstance(a, _Pattern) and isinstance(b, _Pattern):
    if a.cls is not b.cls or len(a.items) != len(b.items):
      raise _NotDirect
    return _Pattern(a.cls, [_merged(x, y) for x, y in zip(a.items, b.items)])
  if isinstance(a, _Static) and isinstance(b, _Static) and a.obj is b.obj:
    return a
  raise _NotDirect


def _classified(obj):
  """What the rewrite knows of a static object."""
  info = _static_info(obj)
  if info is not None and info[0] == 'array':
    return _Value(False, info[1], info[2], info[3])
  return _Static(obj)


def _is_namedtuple_class(obj):
  return isinstance(obj, type) and issubclass(obj, tuple) and hasattr(
      obj, '_fields')


class _Functions:
  """The helpers of one form: the user's functions rewritten for the
  values they are called with (`helpers`: generated name -> function),
  by `(function, key of the values)` (`done`: -> (name, value)), and
  those being rewritten (a recursive helper goes to the rules)."""

  def __init__(self):
    self.helpers = {}
    self.done = {}
    self.active = set()


def _integer(v):
  return v.kind is not None and v.kind in 'iu'


class _Rewrite:
  """Reads a rewritten primitive (or a helper's body, in `scope`) with its
  values' ranks, rewriting it.

  Args:
    inputs: The primitive's inputs' values (`<prefix>v<i>`).
    statics: Source text -> `_static_info` of the primitive's shared names
      (when it compiled).
    prefix: The prefix of generated names.
    fn: The function whose closure and globals the code's other names
      are read from.
    functions: The form's `_Functions` (a new one by default).
    env: Local name -> value, in a helper's body.
    local_names: The helper's local names (its parameters included).
  """

  def __init__(self, inputs, statics, prefix, fn, functions=None, env=None,
               local_names=()):
    self.inputs = inputs
    self.statics = statics
    self.prefix = prefix
    self.fn = fn
    self.functions = functions if functions is not None else _Functions()
    self.env = dict(env or {})
    self.local_names = frozenset(local_names)
    self.fresh = set()   # local names bound to a new member's array
    self.returns = []

  def _call(self, name, args):
    fn = ast.Attribute(ast.Name(self.prefix + _DIRECT, ast.Load()), name,
                       ast.Load())
    return ast.Call(fn, args, [])

  def value(self, node):
    """`(_Value, rewritten node)` of expression `node`, an array's or a
    number's."""
    v, node = self.any_value(node)
    if not isinstance(v, _Value):
      raise _NotDirect
    return v, node

  def _info(self, node):
    """What a name or attribute chain that no local starts refers to:
    `_static_info`'s tuple, `('object', obj)`, or None."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
      return None
    text = ast.unparse(node)
    info = self.statics.get(text)
    if info is not None:
      return info
    head = text.split('.', 1)[0]
    if head.startswith(self.prefix) or head in self.local_names:
      return None
    obj = member_functions.resolve(self.fn, text)
    if obj is member_functions.MISSING:
      return None
    return _static_info(obj) or ('object', obj)

  def any_value(self, node):
    """`(value, rewritten node)` of expression `node`: a `_Value`, a
    `_Pattern` or a `_Static`."""
    k = python_primitives.input_position(node, self.prefix)
    if k is not None:
      return self.inputs[k], node
    if isinstance(node, ast.Name) and node.id in self.local_names:
      if node.id not in self.env:
        raise _NotDirect
      return self.env[node.id], node
    if (isinstance(node, ast.Attribute) and node.attr in ('ndim', 'size')
        and self._is_value(node.value)):
      v, base = self.value(node.value)
      if not v.member:
        raise _NotDirect
      return _Value(False, 0, 'i', False), self._call(node.attr, [base])
    if isinstance(node, ast.Attribute) and self._is_local(node.value):
      v, node.value = self.any_value(node.value)
      if not (isinstance(v, _Pattern) and _is_namedtuple_class(v.cls) and
              node.attr in v.cls._fields):
        raise _NotDirect
      return v.items[v.cls._fields.index(node.attr)], node
    if isinstance(node, (ast.Name, ast.Attribute)):
      info = self._info(node)
      if info is None or info[0] == 'function':
        raise _NotDirect
      if info[0] == 'object':
        return _classified(info[1]), node
      return _Value(False, info[1], info[2], info[3]), node
    if isinstance(node, (ast.Tuple, ast.List)):
      if not isinstance(node.ctx, ast.Load) or any(
          isinstance(e, ast.Starred) for e in node.elts):
        raise _NotDirect
      pairs = [self.any_value(e) for e in node.elts]
      node.elts = [n for _, n in pairs]
      return _Pattern(tuple if isinstance(node, ast.Tuple) else list,
                      [v for v, _ in pairs]), node
    if isinstance(node, ast.ListComp):
      return self._unrolled(node)
    if isinstance(node, ast.IfExp):
      return self._chosen(node)
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
      return self._call_value(self._pm_call(
          'getitem', [node.value, python_primitives.member_key(
              self.prefix, node.slice, node)]))
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

  def _is_local(self, node):
    """Whether a name or attribute chain starts with a local or an input."""
    while isinstance(node, ast.Attribute):
      node = node.value
    return isinstance(node, ast.Name) and (
        node.id in self.local_names or
        python_primitives.input_position(node, self.prefix) is not None)

  def _pm_call(self, name, args, keywords=()):
    fn = ast.Attribute(ast.Name(self.prefix + python_primitives.MEMBER_OPS,
                                ast.Load()), name, ast.Load())
    return ast.Call(fn, args, list(keywords))

  def _is_pattern(self, node):
    """Whether `node` is a local or input that holds a tuple."""
    if not self._is_local(node):
      return False
    v, _ = self.any_value(copy.deepcopy(node))
    return isinstance(v, _Pattern)

  def _call_value(self, node):
    """A call: a helper, a ufunc, a join, a product or a reduction."""
    helper = python_primitives.helper_name(node, self.prefix,
                                           python_primitives.MEMBER_OPS)
    if helper == 'len' and len(node.args) == 1 and not node.keywords:
      v, x = self.value(node.args[0])
      if not v.member:
        raise _NotDirect
      return _Value(False, 0, 'i', False), self._call('length', [x])
    if helper == 'getitem' and len(node.args) in (2, 3) and (
        not node.keywords):
      shape = node.args[0]
      if (isinstance(shape, ast.Attribute) and shape.attr == 'shape' and
          self._is_value(shape.value)):
        return self._extent(shape.value, node.args[1])
      if len(node.args) == 3:
        return self._guarded_getitem(node)
      return self._getitem(node)
    if helper == 'setitem' and len(node.args) == 3 and not node.keywords:
      return self._setitem(node)
    if helper == 'in_place' and len(node.args) == 2 and not node.keywords:
      # `x op= v` (`member_ops.in_place`): a member's number is rebound,
      # the operation as it is; a member's array keeps its dtype and
      # shape, checked on the members' rows as on one member's.
      read, x = self.value(node.args[0])
      v, value = self.value(node.args[1])
      if read.rank == 0:
        return v, value
      if not (read.member and v.member and v.rank == read.rank):
        raise _NotDirect
      return (_Value(True, read.rank, read.kind),
              self._pm_call('in_place', [x, value]))
    if helper == 'matmul' and len(node.args) == 2 and not node.keywords:
      product = ast.copy_location(
          ast.BinOp(node.args[0], ast.MatMult(), node.args[1]), node)
      return self._matmul(product, product.left, product.right)
    if helper == 'power' and len(node.args) == 2 and not node.keywords:
      # `a ** b`: NumPy's operator, which raises where an integer meets a
      # negative integer power; the rules then name the members
      # (`member_ops.power`).
      power = ast.copy_location(
          ast.BinOp(node.args[0], ast.Pow(), node.args[1]), node)
      vs, (power.left, power.right) = self._elementwise([power.left,
                                                         power.right])
      return self._kind(vs, power.op), power
    if helper == 'weak_operator' and len(node.args) == 4 and (
        not node.keywords):
      # An operator of a Python number that the member computes and an
      # array (`member_ops.weak_operator`): on the rows, where an integer
      # out of the array's bounds raises, and the rules then name the
      # members.
      vs, node.args[1:3] = self._elementwise(node.args[1:3])
      return self._kind(vs, _WEAK_OPERATORS.get(node.args[0].value)), node
    if helper == 'asarray':
      return self._array(node)
    if helper in ('int', 'round', 'math_fn'):
      return self._checked_call(node, helper)
    if helper in ('all_of', 'any_of') and node.args and all(
        isinstance(t, ast.Lambda) for t in node.args):
      # `a and b`: of members' operands, `logical_and` of them all (each
      # guarded by those before it).
      bodies = [t.body for t in node.args]
      # An operand before the last that holds one value for every member
      # may decide alone, and skip the rest: the helper's.
      values = [self.any_value(copy.deepcopy(b))[0] for b in bodies]
      if not all(isinstance(v, _Value) for v in values) or not all(
          v.member for v in values[:-1]):
        raise _NotDirect
      return self._call_value(self._pm_call(
          'logical_and' if helper == 'all_of' else 'logical_or', bodies))
    if helper == 'choose' and len(node.args) == 3 and all(
        isinstance(t, ast.Lambda) for t in node.args[1:]):
      # `a if c else b`: a select on a member's `c`, only Python's side
      # on a shared one.
      return self._chosen(ast.IfExp(node.args[0], node.args[1].body,
                                    node.args[2].body))
    if helper == 'float' and len(node.args) == 1 and not node.keywords:
      return self._cast(node.args[0], ast.Attribute(
          ast.Name(self.prefix + _DIRECT, ast.Load()), 'float64',
          ast.Load()), 'f')
    if helper == 'call' and node.args:   # a function given a list display
      node = ast.Call(node.args[0], node.args[1:], node.keywords)
      helper = None
    if helper == 'attribute':   # `v.T`: the rules'
      raise _NotDirect
    if helper == 'method' and len(node.args) >= 2:   # `v.max()`, as written
      node = ast.Call(ast.Attribute(node.args[0], node.args[1].value,
                                    ast.Load()), node.args[2:], node.keywords)
      helper = None
    if helper is None and python_primitives.helper_name(
        node, self.prefix, 'ops') is None:
      method = self._method(node)
      if method is not None:
        return method
      called = self._object_call(node)
      if called is not None:
        return called
      info = self._info(node.func)
      if info == ('function', 'create'):
        return self._created(node)
      if info is not None and info[:2] == ('function', 'scalar'):
        return self._scalar(node, info[2])
      if info in (('function', 'solve'), ('function', 'norm'),
                  ('function', 'linalg')):
        return self._linalg(node, ast.unparse(node.func).rsplit('.', 1)[-1])
    if node.keywords and helper is None:
      info = self._info(node.func)
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
      if helper == 'logical_not' or (helper in _BOOLEAN_HELPERS and all(
          v.kind == 'b' for v in vs)):
        return _Value(any(v.member for v in vs), max(v.rank for v in vs),
                      'b'), node
      if helper in _BOOLEAN_HELPERS:   # Python's operand: of their kind
        return self._kind(vs, None), node
      if helper == 'where':   # the dtype is the values', not the test's
        kind = self._kind(vs[1:], None).kind
        return _Value(any(v.member for v in vs), max(v.rank for v in vs),
                      kind), node
      return self._kind(vs, ast.Add()), node
    if python_primitives.helper_name(node, self.prefix, 'ops') in (
        'mod', 'floordiv', 'lshift', 'rshift'):
      vs, node.args = self._elementwise(node.args)
      return self._kind(vs, ast.Mod()), node
    info = self._info(node.func)
    if info == ('function', 'ufunc'):
      vs, node.args = self._elementwise(node.args)
      return self._kind(vs, None), node
    if info == ('function', 'where') and len(node.args) == 3:
      vs, node.args = self._elementwise(node.args)
      kind = self._kind(vs[1:], None).kind   # the values', not the test's
      return _Value(any(v.member for v in vs), max(v.rank for v in vs),
                    kind), node
    if info == ('function', 'matmul') and len(node.args) == 2:
      return self._matmul(node, *node.args)
    if info is not None and info[0] == 'function':
      return self._axis_call(node, info[1])
    raise _NotDirect

  def _object_call(self, node):
    """A call of a static object: a user's function (its body rewritten
    for these values), a namedtuple class, `isinstance`, `type`, `len`,
    None where `node` calls no such object."""
    f = node.func
    if isinstance(f, ast.Call) or (isinstance(f, ast.Name) and
                                   f.id in self.local_names):
      fv, node.func = self.any_value(f)
      if not isinstance(fv, _Static):
        raise _NotDirect
      obj = fv.obj
    else:
      info = self._info(f)
      if info is None or info[0] != 'object':
        return None
      obj = info[1]
    if _is_namedtuple_class(obj):
      return self._constructed(node, obj)
    if any(isinstance(a, ast.Starred) for a in node.args):
      raise _NotDirect
    if obj is builtins.isinstance and len(node.args) == 2 and (
        not node.keywords):
      return self._isinstance(node)
    if obj in (builtins.type, builtins.len) and len(node.args) == 1 and (
        not node.keywords) and self._is_pattern(node.args[0]):
      v, x = self.any_value(node.args[0])
      if obj is builtins.type:
        return _Static(v.cls), ast.Call(f, [x], [])
      return _Value(False, 0, 'i', False), ast.Constant(len(v.items))
    name = member_helpers.member_call(obj, node)
    if name not in (None, 'call'):   # as the primitive's own calls of them
      return self._call_value(self._pm_call(
          name, member_helpers.call_arguments(name, obj, node),
          node.keywords))
    fn = member_functions.plain_function(obj)
    if fn is None:
      raise _NotDirect
    return self._helper_call(node, fn)

  def _chosen(self, node):
    """`a if c else b` in a helper: on a member's `c`, a select of values
    of one rank (`member_ops.where`, as in the primitive); on a shared
    `c`, as written."""
    (tv, _), (av, _), (bv, _) = (self.any_value(copy.deepcopy(n)) for n in
                                 (node.test, node.body, node.orelse))
    if not isinstance(tv, _Value):
      raise _NotDirect
    if tv.member:
      if not (isinstance(av, _Value) and isinstance(bv, _Value) and
              av.rank == bv.rank):
        raise _NotDirect
      return self._call_value(self._pm_call('where', [
          node.test, node.body, node.orelse]))
    if tv.rank:
      raise _NotDirect
    _, node.test = self.value(node.test)
    av, node.body = self.any_value(node.body)
    bv, node.orelse = self.any_value(node.orelse)
    return _merged(av, bv), node

  def _isinstance(self, node):
    """`isinstance(x, T)` of a pattern or a value, T tuple-like classes:
    known for the signature (a constant)."""
    v, _ = self.any_value(copy.deepcopy(node.args[0]))
    classes = node.args[1]
    parts = classes.elts if isinstance(classes, ast.Tuple) else [classes]
    types = []
    for part in parts:
      info = self._info(part)
      if info is None or info[0] != 'object' or not isinstance(info[1],
                                                               type):
        raise _NotDirect
      types.append(info[1])
    types = tuple(types)
    if isinstance(v, _Pattern):
      answer = issubclass(v.cls, types)
    elif isinstance(v, _Value) and all(issubclass(t, (tuple, list))
                                       for t in types):
      answer = False   # an array or a number is no tuple
    else:
      raise _NotDirect
    return _Value(False, 0, 'b', False), ast.Constant(answer)

  def _constructed(self, node, cls):
    """`Point(theta, r)`, `type(p)(*items)`: a namedtuple of values."""
    items = []
    args = []
    for a in node.args:
      if isinstance(a, ast.Starred):
        v, a.value = self.any_value(a.value)
        if not isinstance(v, _Pattern):
          raise _NotDirect
        items.extend(v.items)
      else:
        v, a = self.any_value(a)
        items.append(v)
      args.append(a)
    node.args = args
    fields = list(cls._fields)
    by_name = {}
    for kw in node.keywords:
      if kw.arg is None or kw.arg not in fields or kw.arg in by_name:
        raise _NotDirect
      by_name[kw.arg], kw.value = self.any_value(kw.value)
    if len(items) + len(by_name) != len(fields) or any(
        fields.index(k) < len(items) for k in by_name):
      raise _NotDirect
    items += [by_name[k] for k in fields[len(items):]]
    return _Pattern(cls, items), node

  def _pattern_method(self, node, v):
    """`p._replace(r=r0)` of a namedtuple `p`."""
    if not (node.func.attr == '_replace' and _is_namedtuple_class(v.cls)
            and not node.args):
      raise _NotDirect
    items = list(v.items)
    for kw in node.keywords:
      if kw.arg is None or kw.arg not in v.cls._fields:
        raise _NotDirect
      items[v.cls._fields.index(kw.arg)], kw.value = self.any_value(
          kw.value)
    return _Pattern(v.cls, items), node

  def _unrolled(self, node):
    """`[f(a, b) for a, b in zip(x, y)]` over tuples `x`, `y` (locals):
    one element per item, each rewritten for its items' values."""
    if len(node.generators) != 1:
      raise _NotDirect
    (g,) = node.generators
    if g.ifs or g.is_async or any(
        isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                       ast.GeneratorExp, ast.NamedExpr))
        for n in ast.walk(node.elt)):
      raise _NotDirect
    sources, targets = [g.iter], [g.target]
    if isinstance(g.iter, ast.Call) and self._info(g.iter.func) == (
        'object', builtins.zip):
      if g.iter.keywords or not isinstance(g.target, ast.Tuple):
        raise _NotDirect
      sources, targets = g.iter.args, g.target.elts
    if len(sources) != len(targets) or not all(
        isinstance(t, ast.Name) for t in targets) or not all(
            isinstance(x, ast.Name) and x.id in self.local_names
            for x in sources):
      raise _NotDirect
    values = [self.any_value(x)[0] for x in sources]
    if not all(isinstance(v, _Pattern) for v in values):
      raise _NotDirect
    names = {t.id: x.id for t, x in zip(targets, sources)}
    items, elts = [], []
    for k in range(min(len(v.items) for v in values)):
      elt = _Substituted(names, k).visit(copy.deepcopy(node.elt))
      v, elt = self.any_value(elt)
      items.append(v)
      elts.append(elt)
    return _Pattern(list, items), ast.List(elts, ast.Load())

  def _helper_call(self, node, fn):
    """A call of user function `fn`: a call of its body rewritten for the
    arguments' values (once per function and values)."""
    if any(kw.arg is None for kw in node.keywords):
      raise _NotDirect
    code = fn.__code__
    params = code.co_varnames[:code.co_argcount]
    if len(node.args) > len(params):
      raise _NotDirect
    bound = {}
    for k, a in enumerate(node.args):
      bound[params[k]], node.args[k] = self.any_value(a)
    for kw in node.keywords:
      if kw.arg not in params or kw.arg in bound:
        raise _NotDirect
      bound[kw.arg], kw.value = self.any_value(kw.value)
    defaults = fn.__defaults__ or ()
    first = len(params) - len(defaults)
    for k, p in enumerate(params):
      if p not in bound:
        if k < first:
          raise _NotDirect
        bound[p] = _classified(defaults[k - first])
    name, value = self._specialized(fn, [bound[p] for p in params])
    node.func = ast.Name(self.prefix + name, ast.Load())
    return value, node

  def _specialized(self, fn, values):
    """The name of `fn` rewritten for argument values `values`, and its
    value."""
    functions = self.functions
    key = (fn, tuple(v.key() for v in values))
    if key in functions.done:
      return functions.done[key]
    if key in functions.active:   # recursion: the rules run it
      raise _NotDirect
    tree = member_functions.function_tree(fn)
    if tree is None:
      raise _NotDirect
    if isinstance(tree, ast.Lambda):
      tree = ast.FunctionDef(name='lambda', args=tree.args,
                             body=[ast.Return(tree.body)], decorator_list=[],
                             returns=None, type_comment=None)
    if any(isinstance(n, ast.Name) and n.id.startswith(self.prefix)
           for n in ast.walk(tree)):
      raise _NotDirect
    names = member_helpers.local_names(tree)
    params = [a.arg for a in tree.args.args]
    body = _Rewrite([], {}, self.prefix, fn, functions,
                    dict(zip(params, values)), names)
    functions.active.add(key)
    try:
      tree.body, ends = body.statements(tree.body)
    finally:
      functions.active.discard(key)
    if not ends or not body.returns:
      raise _NotDirect
    value = body.returns[0]
    for v in body.returns[1:]:
      value = _merged(value, v)
    name = f'h{len(functions.helpers)}'
    helpers = {self.prefix + k: v for k, v in functions.helpers.items()}
    helpers[self.prefix + _DIRECT] = _Helpers
    helpers[self.prefix + python_primitives.MEMBER_OPS] = member_ops
    functions.helpers[name] = member_functions.compile_function(
        tree, fn, self.prefix + name, helpers)
    functions.done[key] = name, value
    return name, value

  def statements(self, body):
    """A helper's statements rewritten: `(statements, whether they always
    return)`.  Assignments to locals (names, tuples of names, items of a
    member's array copied here), `return`, `if` on a shared value or on
    the signature (`isinstance`), `with np.errstate(...)`."""
    out = []
    for s in body:
      if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
        continue   # a docstring
      if isinstance(s, ast.Pass):
        continue
      if isinstance(s, ast.Return):
        if s.value is None:
          raise _NotDirect
        v, s.value = self.any_value(s.value)
        self.returns.append(v)
        out.append(s)
        return out, True
      if isinstance(s, ast.Assign):
        out.append(self._assigned(s))
        continue
      if isinstance(s, ast.If):
        done, ends = self._if(s)
        out.extend(done)
        if ends:
          return out, True
        continue
      if isinstance(s, ast.With):
        for item in s.items:
          call = item.context_expr
          if item.optional_vars is not None or not isinstance(
              call, ast.Call) or self._info(call.func) != (
                  'object', np.errstate) or call.args or not all(
                      isinstance(kw.value, ast.Constant)
                      for kw in call.keywords):
            raise _NotDirect
        s.body, ends = self.statements(s.body)
        if not s.body:
          s.body = [ast.Pass()]
        out.append(s)
        if ends:
          return out, True
        continue
      raise _NotDirect
    return out, False

  def _assigned(self, s):
    """An assignment of a helper's body, rewritten."""
    if len(s.targets) != 1:
      raise _NotDirect
    (target,) = s.targets
    if isinstance(target, ast.Name):
      v, s.value = self.any_value(s.value)
      self.env[target.id] = v
      self.fresh.discard(target.id)
      if getattr(s.value, 'member_copy', False):
        self.fresh.add(target.id)
      return s
    if isinstance(target, (ast.Tuple, ast.List)):
      v, s.value = self.any_value(s.value)
      if not (isinstance(v, _Pattern) and len(v.items) == len(target.elts)
              and all(isinstance(t, ast.Name) for t in target.elts)):
        raise _NotDirect
      for t, item in zip(target.elts, v.items):
        self.env[t.id] = item
        self.fresh.discard(t.id)
      return s
    if (isinstance(target, ast.Subscript) and
        isinstance(target.value, ast.Name) and target.value.id in self.fresh):
      # An item write to a member's array copied in this helper: in place,
      # as one member's write to its own copy.
      xv = self.env[target.value.id]
      key = python_primitives.member_key(self.prefix, target.slice, target)
      parts, rank, member = self._key_parts(key, xv)
      vv, value = self.value(s.value)
      if vv.rank > rank:
        raise _NotDirect
      if vv.member and vv.rank < rank:
        value = self._call('align', [value, ast.Constant(rank)])
      key.slice = _index(parts)
      return ast.Expr(self._call('write' if member else 'write_items',
                                 [ast.Name(target.value.id, ast.Load()), key,
                                  value]))
    raise _NotDirect

  def _if(self, s):
    """An `if` of a helper's body: on the signature (`isinstance`), only
    its branch; on a shared value, both.  Returns `(statements, whether
    they always return)`."""
    tv, s.test = self.any_value(s.test)
    if isinstance(s.test, ast.Constant):
      return self.statements(s.body if s.test.value else s.orelse)
    if not isinstance(tv, _Value) or tv.member or tv.rank:
      raise _NotDirect
    env, fresh = dict(self.env), set(self.fresh)
    s.body, body_ends = self.statements(s.body)
    body_env, body_fresh = self.env, self.fresh
    self.env, self.fresh = env, fresh
    s.orelse, else_ends = self.statements(s.orelse)
    s.body = s.body or [ast.Pass()]
    if body_ends and else_ends:
      return [s], True
    if not else_ends and body_ends:
      return [s], False
    if else_ends:
      self.env, self.fresh = body_env, body_fresh
      return [s], False
    self.env = {k: v for k, v in self.env.items()
                if k in body_env and body_env[k].key() == v.key()}
    self.fresh &= body_fresh
    return [s], False

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
    xv, x = self.any_value(x)
    if isinstance(xv, _Pattern):   # an item of a tuple, by a constant
      k = _integer_constant(key.slice)
      if k is None or not -len(xv.items) <= k < len(xv.items):
        raise _NotDirect
      return xv.items[k], ast.Subscript(x, ast.Constant(k), ast.Load())
    if not isinstance(xv, _Value):
      raise _NotDirect
    parts, rank, member = self._key_parts(key, xv)
    if not xv.member:   # a shared table: one gather, as written
      return _Value(member, rank, xv.kind), ast.Subscript(
          x, _index(parts), ast.Load())
    if member:
      key.slice = _index(parts)
      return _Value(True, rank, xv.kind), self._call('take', [x, key])
    return _Value(True, rank, xv.kind), ast.Subscript(
        x, ast.Tuple([ast.Slice()] + parts, ast.Load()), ast.Load())

  def _guarded_getitem(self, node):
    """`getitem(x, key[index], guard)`: a member's `x` at a member's
    index, read where its guard holds (index 0 elsewhere).  Another read
    (a shared index, a shared table) is as without a guard: where it
    fails, it fails in the plain form, and the rules run the primitive,
    reading where the guard holds."""
    gv, guard = self.value(node.args[2])
    if gv.rank:
      raise _NotDirect
    node.args = node.args[:2]
    value, read = self._getitem(node)
    if (gv.member and isinstance(read, ast.Call) and isinstance(
        read.func, ast.Attribute) and read.func.attr == 'take'):
      read.func.attr = 'take_guarded'
      read.args.append(guard)
    return value, read

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
    if av.member and bv.member and av.rank == bv.rank == 1:
      return _Value(True, 0, None), self._call('inner', [a, b])
    if not av.member and bv.member and av.rank == 2 and bv.rank == 1:
      return _Value(True, 1, None), self._call('matvec', [a, b])
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
    v, f.value = self.any_value(f.value)
    if isinstance(v, _Pattern):
      return self._pattern_method(node, v)
    if not isinstance(v, _Value):
      raise _NotDirect
    if f.attr == 'astype' and len(node.args) == 1 and not node.keywords:
      if not v.member or self._reads_input(node.args[0]):
        raise _NotDirect
      return _Value(True, v.rank, _dtype_kind(self._info(node.args[0]))), node
    if f.attr == 'copy' and not node.args and not node.keywords:
      if not v.member:
        raise _NotDirect
      node.member_copy = True   # a new array: `_assigned` may write it
      return _Value(True, v.rank, v.kind, v.strong), node
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
    if parts is not getattr(shape, 'elts', None):
      node.args[0] = parts[0]   # the shape itself rewritten (`x.shape[0]`)
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
    if self._is_local(node):
      return True
    if isinstance(node, (ast.Name, ast.Attribute)):
      info = self._info(node)
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
    """Whether `node` reads an input or a local (a dtype must not)."""
    return any(python_primitives.input_position(n, self.prefix) is not None
               or (isinstance(n, ast.Name) and n.id in self.local_names)
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

  def _scalar(self, node, kind):
    """`np.float64(x)` (a NumPy scalar type) of a member's value: a cast;
    of a shared number: a strong NumPy scalar."""
    if len(node.args) != 1 or node.keywords or isinstance(node.args[0],
                                                          ast.Starred):
      raise _NotDirect
    v, arg = self.value(node.args[0])
    if v.member:
      return _Value(True, v.rank, kind), self._call('cast', [arg, node.func])
    if v.rank:
      raise _NotDirect
    node.args = [arg]
    return _Value(False, 0, kind, True), node

  def _checked_call(self, node, helper):
    """`int(x)`, `round(x[, n])` or `math.<name>(...)` of members' scalars:
    the helper's `_rows` form on the block's rows, elementwise, which
    fails the members that Python fails (`per_member.member_math`)."""
    math_name = None
    args = node.args
    if helper == 'math_fn':
      math_name, args = node.args[0].value, node.args[1:]
    values, nodes = [], []
    for a in list(args) + [k.value for k in node.keywords]:
      if isinstance(a, ast.Starred):
        raise _NotDirect
      v, n = self.value(a)
      if not isinstance(v, _Value) or v.rank != 0:
        raise _NotDirect   # Python refuses an array: the rules say so
      values.append(v)
      nodes.append(n)
    if not values or not any(v.member for v in values):
      raise _NotDirect
    keywords = [ast.keyword(k.arg, n) for k, n in
                zip(node.keywords, nodes[len(args):])]
    nodes = nodes[:len(args)]
    if helper == 'math_fn':
      kind = member_math.result_kind(math_name)
      nodes = [ast.Constant(math_name)] + nodes
    elif helper == 'int' or (len(args) == 1 and not any(
        k.arg == 'ndigits' for k in node.keywords)):
      kind = 'i'
    else:
      kind = 'i' if _integer(values[0]) else 'f'
    return (_Value(True, 0, kind),
            self._pm_call(f'{helper.replace("_fn", "")}_rows', nodes,
                          keywords))

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
    if len(ranks) != 1 or not any(v.member for v, _ in pairs):
      raise _NotDirect
    kinds = {v.kind for v, _ in pairs}
    value = _Value(True, ranks.pop() + 1,
                   kinds.pop() if len(kinds) == 1 else None)
    nodes = ast.List([n for _, n in pairs], ast.Load())
    if all(v.member for v, _ in pairs):
      return value, self._call('stack', [nodes])
    # Items the same for every member (a number) next to members' values.
    member = ast.Tuple([ast.Constant(v.member) for v, _ in pairs],
                       ast.Load())
    return value, self._call('stack_shared', [nodes, member])

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


class _Substituted(ast.NodeTransformer):
  """Reads of a comprehension's names as items `k` of their tuples."""

  def __init__(self, names, k):
    self.names = names
    self.k = k

  def visit_Name(self, node):
    if isinstance(node.ctx, ast.Load) and node.id in self.names:
      return ast.Subscript(ast.Name(self.names[node.id], ast.Load()),
                           ast.Constant(self.k), ast.Load())
    return node


def _dtype_kind(info):
  """The dtype kind of a static dtype argument (`np.float64`), or None."""
  if info is not None and info[:2] == ('function', 'scalar'):
    return info[2]
  if info is None or info[0] != 'object':
    return None
  try:
    return np.dtype(info[1]).kind
  except (TypeError, ValueError):
    return None


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
