"""NumPy batching rules: one member's NumPy code, run once on a whole batch.

The entry point of the NumPy side of per-member math (the NumPy backend
calls `vectorize`; the frontend's helpers call `getitem`, `setitem`,
`asarray`, `member_shape` and `member_len`).  A `MemberArray` wraps a
batched array (leading axis: the batch) and shows one member's array: its
`shape`, `len()`, indexing, reductions and every NumPy function see the
member's axes only.  Each operation is mapped to one operation on the
batched array (a batching rule, as `jax.vmap` has one per primitive).
The rules, by family:

- `numpy_array`: `MemberArray`, ufuncs and Python's operators (member
  ranks aligned by axes inserted after the batch axis), ufunc methods, the
  rule table `RULES` that `__array_function__` reads, and the fallback;
- `numpy_indexing`: indexing, index assignment, `take`, `nonzero`, ...;
- `numpy_functions`: reductions and scans over member axes, shapes,
  joining, elementwise functions, creation (`*_like`, `linspace`);
- `numpy_linalg`: products, `einsum`, `matmul` and `np.linalg`.

A new rule goes in the module of its family, registered with
`numpy_array.rule`, with a case in tests/per_member/test_per_member_numpy_rules.py
that compares it with a loop over members.

A value the same for every member stays a plain NumPy array or number.
A NumPy function without a rule runs once per member and its results are
stacked: right, slower, and reported to the `fallback` callback of
`vectorize`.  That loop is the only one over members; every rule costs
the same Python work at any batch size.

A shape that differs between members (a boolean mask selecting different
counts, `np.nonzero`, `np.unique`, a per-member length) cannot be one
batched array: `PerMemberError` says so and points to padding, unless every
member agrees.  A per-member value is not one Python number: `bool()`,
`int()`, `float()` and `.item()` refuse and say what to write instead.

Dtypes follow NEP 50 on every NumPy (Python numbers are weak), as NumPy 2
gives them for one member.
"""

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import patterns
from autobatch_vm.per_member import numpy_array as core
from autobatch_vm.per_member import numpy_functions  # pylint: disable=unused-import
from autobatch_vm.per_member import numpy_indexing
from autobatch_vm.per_member import numpy_linalg  # pylint: disable=unused-import
from autobatch_vm.per_member import ragged

__all__ = ['MemberArray', 'vectorize', 'getitem', 'setitem', 'asarray',
           'call', 'member_shape', 'member_len', 'is_member']

MemberArray = core.MemberArray
is_member = core.is_member
member_shape = core.member_shape
member_len = core.member_len
getitem = numpy_indexing.getitem
setitem = numpy_indexing.setitem
setitem_with = numpy_indexing.setitem_with
asarray = numpy_indexing.asarray


def call(func, *args, **kwargs):
  """One member's `func(*args, **kwargs)` for a NumPy function or type.

  NumPy's protocols cannot see two things a member's code may do: call a
  scalar type (`np.float64(x)`, a cast) and pass a list holding
  per-member values where NumPy makes an array of it (`np.sum([a, b])`,
  `np.max((a, 1.0))`).  Here a scalar type casts, and such a list is
  stacked per member (`asarray`) unless `func` joins a sequence of arrays
  itself (`np.concatenate`, `np.stack`, ...).  Any other call is `func`'s
  own.

  Args:
    func: The function (or type) called.
    *args, **kwargs: Its arguments, as one member gives them.

  Returns:
    What `func` returns for one member (batched where per member).
  """
  if func in CREATION and core.batch_of(
      list(args) + list(kwargs.values())) is not None:
    return _created(func, *args, **kwargs)
  if isinstance(func, type) and issubclass(func, np.generic):
    if len(args) == 1 and not kwargs and core.batch_of(args) is not None:
      return asarray(args[0], dtype=func)
    return func(*args, **kwargs)
  if func not in _SEQUENCE_FUNCTIONS:
    args = [_stacked(a) for a in args]
    kwargs = {k: _stacked(v) for k, v in kwargs.items()}
  return func(*args, **kwargs)


# Functions that make an array of a given size, which NumPy's protocols do
# not see: a per-member argument there is a size (refused) or, for
# np.full, the value to fill with.
CREATION = frozenset((np.zeros, np.ones, np.empty, np.full, np.arange,
                       np.eye, np.identity, np.tri, np.indices))


def _created(func, *args, **kwargs):
  """`func` of a per-member argument: `np.full` of a per-member value; any
  per-member size is refused."""
  if func is np.full:
    shape = kwargs.pop('shape', args[0] if args else None)
    fill = kwargs.pop('fill_value', args[1] if len(args) > 1 else None)
    dtype = kwargs.pop('dtype', args[2] if len(args) > 2 else None)
    sizes = shape if isinstance(shape, (tuple, list)) else (shape,)
    if core.batch_of(sizes) is None and len(args) <= 3 and not kwargs:
      fill = asarray(fill)
      shape = tuple(sizes)
      batch = core.batch_of((fill,))
      filled = np.broadcast_to(core.aligned(fill, len(shape)),
                               (batch,) + shape)
      return MemberArray(np.array(filled, dtype=dtype))
  raise errors.PerMemberError(
      f'{core.name_of(func)} of a per-member size: a size must be the '
      'same for every member and known when the function compiles: a '
      'constant, a closure or global value, len(x), x.shape, x.ndim or '
      'x.size of this function\'s arrays, or integer arithmetic on them '
      '(here or in an earlier statement), also passed as an argument that '
      'every call of the function gives the same such size; an argument of '
      'your call, one that calls give different sizes, or a value computed '
      'from the data, is one per member, and the array\'s shape could '
      'differ between members.',
      hint=core.PAD_HINT)


# Functions whose rules read a sequence of arrays of any shapes themselves.
_SEQUENCE_FUNCTIONS = frozenset(
    (np.concatenate, np.stack, np.hstack, np.vstack, np.column_stack))


def _stacked(value):
  """A list or tuple holding per-member values, as one member's array."""
  if isinstance(value, (list, tuple)) and core.batch_of(value) is not None:
    return asarray(value)
  return value


def vectorize(fn, batch_size, fallback=None):
  """`fn`, written for one member, as a function of batched arrays.

  Args:
    fn: A function of one member's values (NumPy arrays without a batch
      axis, and patterns of them), returning a pattern of them.
    batch_size: The number of members.
    fallback: Called with a NumPy function's name each time it runs once
      per member for want of a batching rule; or None.

  Returns:
    `batched(*args)`: `args` are patterns whose leaves are NumPy arrays with
    a leading batch axis of `batch_size`; `fn` runs once, on `MemberArray`
    views of them.  Returns `fn`'s result pattern with every leaf a NumPy
    array with a leading batch axis: a leaf the same for every member (a
    plain array or number) is broadcast to the batch with the dtype NumPy
    gives it for one member.
  """
  def member(leaf):
    if isinstance(leaf, np.ndarray) and leaf.ndim:
      if leaf.shape[0] != batch_size:
        raise errors.InternalError(
            f'vectorize got an input of shape {leaf.shape} for a batch of '
            f'{batch_size}')
      return MemberArray(leaf)
    return leaf

  def batched_leaf(leaf):
    if isinstance(leaf, MemberArray):
      return leaf.batched
    if type(leaf) is ragged.Ragged:  # pylint: disable=unidiomatic-typecheck
      leaf.refuse()   # a slice of members' own lengths, kept or returned
    if leaf is None:
      return None
    value = np.asarray(leaf)
    return np.array(np.broadcast_to(value, (batch_size,) + value.shape))

  def batched(*args):
    # Arrays and results that are no patterns skip the pattern walk.
    members = [member(a) if not isinstance(a, (tuple, list)) else
               patterns.pattern_map(member, a) for a in args]
    callbacks = core.ACTIVE.callbacks
    callbacks.append(fallback)
    try:
      result = fn(*members)
    finally:
      callbacks.pop()
    if type(result) is MemberArray:
      return result.batched
    return patterns.pattern_map(batched_leaf, result, leaf_type=MemberArray)

  return batched
