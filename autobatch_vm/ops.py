"""Array-generic helpers that compiled primitives call.

The frontend rewrites Python constructs that do not batch (`and`, `or`,
`not`, chained comparisons, `a if c else b`) into calls of these helpers.
They work on NumPy arrays, Python scalars and TensorFlow tensors, and
import TensorFlow only when they are given a tensor.
"""

import functools
import operator
import sys
import threading

import numpy as np

from autobatch_vm import errors

__all__ = ['logical_and', 'logical_or', 'logical_not', 'where', 'mod',
           'floordiv', 'promoted', 'fail', 'sync_point', 'SYNC_ATTRIBUTE',
           'truthy', 'key', 'batch_setitem', 'list_setitem', 'tf_setitem',
           'static_item',
           'optional_value', 'weak_operator', 'weak_dtype', 'in_place',
           'dtype_of', 'negative', 'tf_in_int64', 'tf_unsigned_gap']

SYNC_ATTRIBUTE = '__autobatch_sync_point__'


def sync_point(fn):
  """Marks primitive `fn` as expensive: worth waiting for more members.

  Blocks that call a sync point are numbered last.  Under
  `schedule='lowest'` the virtual machine runs them only when no other
  block has members; under `'most'` when they have the most members, ties
  going to other blocks.  Members then gather there, and the expensive
  primitive runs on as many of them at once as the program allows (NUTS:
  the gradient of every chain at a leaf of its tree in one evaluation).

      leapfrog = ab.sync_point(leapfrog)      # or @ab.sync_point

  The call must name the marked function statically (a global, a closed
  over name, or an attribute of one, e.g. `lib.leapfrog(...)`).

  Args:
    fn: The primitive to mark.

  Returns:
    A wrapper that calls `fn` and carries the mark; `fn` itself is
    unchanged.
  """
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    return fn(*args, **kwargs)
  setattr(wrapper, SYNC_ATTRIBUTE, True)
  return wrapper


def _is_tf(*xs):
  tf = sys.modules.get('tensorflow')
  if tf is None:  # not imported (or blocked with sys.modules[...] = None)
    return False
  return any(tf.is_tensor(x) or isinstance(x, tf.Variable) for x in xs)


def _tf():
  return sys.modules['tensorflow']


def _as_bool(x):
  if _is_tf(x):
    tf = _tf()
    x = tf.convert_to_tensor(x)
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros_like(x))
  x = np.asarray(x)
  return x if x.dtype == np.bool_ else x != 0


def logical_and(*xs):
  """Per-member `and` of conditions (the frontend's rewrite of `and`).

  Args:
    *xs: Conditions: arrays, tensors or Python values; nonzero is true.

  Returns:
    A boolean array (or tensor, if any input is one) true where all are.
  """
  result = _as_bool(xs[0])
  for x in xs[1:]:
    x = _as_bool(x)
    if _is_tf(result, x):
      result = _tf().logical_and(result, x)
    else:
      result = np.logical_and(result, x)
  return result


def logical_or(*xs):
  """Per-member `or` of conditions (the frontend's rewrite of `or`).

  Args:
    *xs: Conditions: arrays, tensors or Python values; nonzero is true.

  Returns:
    A boolean array (or tensor, if any input is one) true where any is.
  """
  result = _as_bool(xs[0])
  for x in xs[1:]:
    x = _as_bool(x)
    if _is_tf(result, x):
      result = _tf().logical_or(result, x)
    else:
      result = np.logical_or(result, x)
  return result


def contains(container, x):
  """Python's `x in container` (the frontend's rewrite of `in`).

  A tuple, list, set or range holds `x` where `x` equals one of its items:
  per member, where `x` (or an item) is a member's array, tensor or
  `MemberArray`, which Python's `in` cannot take (its `==` gives no
  single bool).  Any other container: Python's `in`, as written.

  Args:
    container: What `in` looks in.
    x: What it looks for.

  Returns:
    Python's bool, or a boolean per member.
  """
  if not isinstance(container, (tuple, list, set, frozenset, range)):
    return x in container
  items = list(container)
  if all(_is_number(v) or isinstance(v, (str, bytes, type(None)))
         for v in items + [x]):
    return x in container
  found = False
  for item in items:
    equal = promoted('eq', x, item) if _is_tf(x, item) else x == item
    found = equal if found is False else found | equal
  return found


def in_range(x, *bounds):
  """Python's `x in range(*bounds)` (the frontend's rewrite of it).

  Where a bound is a member's value (an array, a tensor or a
  `MemberArray`), Python's `range` cannot be made: `x` is in it where
  `start <= x < stop` (`stop < x <= start` for a negative step) and
  `x - start` is a multiple of the step, member by member.

  Args:
    x: What `in` looks for.
    *bounds: `range`'s arguments: `stop`, or `start, stop[, step]`.

  Returns:
    Python's bool, or a boolean per member.

  Raises:
    TypeError: A bound is not an integer, as Python's `range` raises.
    ValueError: The step is a zero the same for every member, as `range`
      raises.
  """
  if not 1 <= len(bounds) <= 3:
    return x in range(*bounds)   # Python's TypeError
  if all(_is_number(b) or isinstance(b, np.integer) for b in bounds):
    return contains(range(*bounds), x)
  for b in bounds:
    if getattr(b, 'dtype', None) is None:
      range(b)   # Python's TypeError for a float, None, ...
    elif not _integer_kind(b):
      raise TypeError(f"'{dtype_of(b)}' object cannot be interpreted "
                      'as an integer')
  def both(a, b):   # (of booleans, a member's too)
    return promoted('and_', a, b)
  start, stop, step = ((0, bounds[0], 1) if len(bounds) == 1 else
                       (bounds + (1,))[:3])
  if _is_number(step) or isinstance(step, np.integer):
    if step == 0:
      raise ValueError('range() arg 3 must not be zero')
    if step > 0:
      inside = both(promoted('le', start, x), promoted('lt', x, stop))
    else:
      inside = both(promoted('lt', stop, x), promoted('le', x, start))
    if step in (1, -1) and _integer_kind(x):
      return inside   # (a float `x` is in only at a whole number)
    return both(inside, promoted('eq', mod(promoted('sub', x, start), step),
                                 0))
  # A member's zero step (where Python raises) finds nothing: members not
  # at the block compute too, so it cannot be refused here.
  up = both(promoted('gt', step, 0),
            both(promoted('le', start, x), promoted('lt', x, stop)))
  down = both(promoted('lt', step, 0),
              both(promoted('lt', stop, x), promoted('le', x, start)))
  on_step = promoted('eq', mod(promoted('sub', x, start), step), 0)
  return both(promoted('or_', up, down), on_step)


def _integer_kind(x):
  """Whether `x` (an array, a tensor or a Python number) holds integers
  (or booleans)."""
  dtype = dtype_of(x)
  return (np.dtype(type(x)) if dtype is None else dtype).kind in 'iub'


def logical_not(x):
  """Per-member `not` of a condition (the frontend's rewrite of `not`).

  Args:
    x: A condition: an array, a tensor or a Python value; nonzero is true.

  Returns:
    A boolean array (or tensor, if `x` is one) true where `x` is false;
    Python's bool where `x` is a Python value (`not ('a' == 'b' and c)`
    of a written-out loop's item, every member's).
  """
  if x is None or type(x) in (bool, int, float, complex, str, bytes):
    return not x
  x = _as_bool(x)
  if _is_tf(x):
    return _tf().logical_not(x)
  return np.logical_not(x)


def _shared_truth(x):
  """The truth of `x` where it is one value for every member (a Python or
  NumPy scalar, a 0-d array, an eager 0-d tensor), else None (a member's
  value has the batch axis; a symbolic tensor has no value to test)."""
  if isinstance(x, (bool, int, float, np.generic)):
    return bool(x)
  if isinstance(x, np.ndarray):
    return bool(x) if x.ndim == 0 else None
  if _is_tf(x):
    tf = _tf()
    if tf.is_tensor(x) and x.shape.rank == 0 and hasattr(x, 'numpy'):
      return bool(x.numpy())
  return None


def all_of(*thunks):
  """Python's `a and b and ...` (the frontend's rewrite of `and` in a
  batched function), each operand a thunk.

  Per member the result is the first false operand, else the last, as in
  Python (`n and 7` is 7 where n is not 0, else n).  An operand with one
  value for every member (a shape, a module flag, a number) decides as
  Python's does: where it is false, the operands after it do not run;
  where it is true and not the last, it drops out.  Every operand a
  member's runs (in a per-member function, item reads have guards).

  Args:
    *thunks: Functions of no arguments giving the operands.

  Returns:
    Of Python numbers, Python's result; of booleans, `logical_and` of
    the operands that ran; else the per-member selection of them (a
    tensor if any is one).
  """
  return _short_circuit(thunks, True)


def any_of(*thunks):
  """Python's `a or b or ...` in a batched function, each operand a thunk.

  Per member the result is the first true operand, else the last, as in
  Python (`SCALE or 2.0` is 2.0 where SCALE is 0); see `all_of`.

  Args:
    *thunks: Functions of no arguments giving the operands.

  Returns:
    Of Python numbers, Python's result; of booleans, `logical_or` of the
    operands that ran; else the per-member selection of them.
  """
  return _short_circuit(thunks, False)


def _short_circuit(thunks, is_and):
  ran = []   # the members' operands that ran so far

  def guarded(thunk):
    def run():
      # An operand counts for the members whose operands before it did
      # not decide (`_guards`).
      guards = _guards()
      guards.append((tuple(ran), is_and))
      try:
        value = thunk()
      finally:
        guards.pop()
      if _shared_truth(value) is None:
        ran.append(value)
      return value
    return run
  return short_circuit([guarded(t) for t in thunks], is_and, _shared_truth,
                       logical_and if is_and else logical_or, where)


_local = threading.local()


def _guards():
  """The conditions of the operands being computed, in this thread.

  Each is `(values, truth)`: the members for which every one of the
  members' values `values` has truth `truth` are those for which Python
  computes the operand (a side of `a if c else b`, an operand of `and`
  after the first); the checks of `weak_operator` count only for them
  (`_held`).
  """
  guards = getattr(_local, 'guards', None)
  if guards is None:
    guards = _local.guards = []
  return guards


def _held(like):
  """Where the conditions of the operands being computed hold
  (`_guards`), shaped to broadcast against `like` (a member's condition
  over its vector's items holds for the member where any item's does), or
  None where there are none."""
  held = [_as_bool(v) if truth else logical_not(v)
          for values, truth in _guards() for v in values]
  if not held:
    return None
  held = logical_and(*held)
  rank = len(like.shape)
  extra = len(held.shape) - rank
  if extra > 0:
    axes = tuple(range(rank, len(held.shape)))
    held = (_tf().reduce_any(held, axis=axes) if _is_tf(held)
            else np.any(held, axis=axes))
  return _expand_to(held, rank)


def short_circuit(thunks, is_and, shared_truth, logical, select):
  """Python's `and` (`or` where not `is_and`) of thunks of the operands.

  An operand with one value for every member decides as Python's does:
  where it decides (false for `and`), the operands after it do not run;
  where it does not and is not the last, it drops out.  The operands that
  ran are then combined per member (`python_bool_op`).

  Args:
    thunks: Functions of no arguments giving the operands.
    is_and: Whether the operator is `and`.
    shared_truth: `value -> bool`, the truth of an operand with one value
      for every member, else None.
    logical: The per-member logical operation, for booleans.
    select: The per-member `where(cond, x, y)`.

  Returns:
    Python's result of the operands that ran, per member.
  """
  ran = []
  for k, thunk in enumerate(thunks):
    value = thunk()
    truth = shared_truth(value)
    if truth is not None and isinstance(value, (np.generic, np.ndarray)):
      # A NumPy scalar for every member (`np.all(TABLE > 0)`): a Python
      # value, as Python's would be (the VM broadcasts it to the batch).
      value = value.item()
    if truth is None or truth != is_and or k == len(thunks) - 1:
      ran.append(value)
    if truth is not None and truth != is_and:
      break   # it decides for every member that reaches it
  return python_bool_op(ran, is_and, logical, select)


def python_bool_op(values, is_and, logical, select):
  """Python's `values[0] and values[1] and ...` (`or` where not
  `is_and`), per member: the first operand that decides (false for `and`,
  true for `or`), else the last.

  Args:
    values: The operands.
    is_and: Whether the operator is `and`.
    logical: The per-member logical operation, for booleans.
    select: The per-member `where(cond, x, y)`.

  Returns:
    Python's result of Python numbers; `logical(*values)` of booleans;
    else the operands selected per member.
  """
  if all(_is_number(v) for v in values):
    return next((v for v in values[:-1] if bool(v) != is_and), values[-1])
  if len(values) == 1:
    return values[0]
  if all(_is_boolean(v) for v in values):
    return logical(*values)
  result = values[-1]
  for v in reversed(values[:-1]):
    result = select(v, result, v) if is_and else select(v, v, result)
  return result


def _is_number(x):
  return type(x) in (bool, int, float)


def _is_boolean(x):
  if isinstance(x, (bool, np.bool_)):
    return True
  dtype = getattr(x, 'dtype', None)
  if dtype is None:
    return False
  if _is_tf(x):
    return dtype == _tf().bool
  return np.dtype(dtype) == np.bool_


def choose(cond, x, y):
  """Per-member `x if cond else y` (the frontend's rewrite in a batched
  function), the sides as thunks.

  A condition with one value for every member runs only its side, as in
  Python (the other could fail: `x[:, None] if x.ndim == 1 else x`);
  where that side is one value (a number, a scalar array), the other runs
  too if it can, and gives the batch's shape and the joint type, as
  `where` does.  A member's condition runs both sides and selects
  (`where`).

  Args:
    cond: The condition.
    x: A function of no arguments giving the value where `cond` holds.
    y: One giving the value where it does not.

  Returns:
    The selected values.
  """
  truth = _shared_truth(cond)
  if truth is None:
    # Each side counts for the members that take it (`_guards`).
    guards = _guards()
    guards.append(((cond,), True))
    try:
      a = x()
    finally:
      guards.pop()
    guards.append(((cond,), False))
    try:
      b = y()
    finally:
      guards.pop()
    return selected(cond, a, b, where)
  value = x() if truth else y()
  if isinstance(value, (tuple, list)) or _rank(value) != 0:
    return value
  # One value (a number, a scalar array): the other side, where it runs,
  # gives the type and the batch's shape, as `where` does.
  try:
    other = y() if truth else x()
  except Exception:  # pylint: disable=broad-except
    return value     # Python would not run it
  if _promotion_dtype(other) is None:
    return value     # no number to join (`-1 if y is None else y`)
  return where(truth, value if truth else other, other if truth else value)


def selected(cond, x, y, select):
  """`select(cond, x, y)` (a `where`), item by item of tuples or lists
  of the same structure (`(a, 1) if a >= 0 else (-a, -1)`).

  Raises:
    UnsupportedSyntaxError: The sides' structures differ.
  """
  if not isinstance(x, (tuple, list)) and not isinstance(y, (tuple, list)):
    return select(cond, x, y)
  if not (type(x) is type(y) and len(x) == len(y)):  # pylint: disable=unidiomatic-typecheck
    raise errors.UnsupportedSyntaxError(
        'a conditional expression (`a if c else b`) of a member\'s '
        'condition chooses between values of different structures '
        f'({_structure(x)} and {_structure(y)}): one member\'s value is '
        'chosen item by item, which needs the same structure on both sides',
        hint='Write an if/else statement, which runs each member\'s side '
        'alone, or give both sides the same structure.')
  items = [selected(cond, p, q, select) for p, q in zip(x, y)]
  return type(x)(*items) if hasattr(x, '_fields') else type(x)(items)


def _structure(x):
  if isinstance(x, (tuple, list)):
    return f'a {type(x).__name__} of {len(x)}'
  return 'a value'


def _rank(x):
  if _is_tf(x):
    return _tf().convert_to_tensor(x).shape.rank
  return np.ndim(x)


def _expand_to(cond, rank):
  extra = rank - len(cond.shape)
  if extra <= 0:
    return cond
  if _is_tf(cond):
    return _tf().reshape(cond, list(cond.shape) + [1] * extra)
  return cond.reshape(cond.shape + (1,) * extra)


_BINARY = {'add': operator.add, 'sub': operator.sub, 'mul': operator.mul,
           'truediv': operator.truediv, 'pow': operator.pow,
           'and_': operator.and_, 'or_': operator.or_, 'xor': operator.xor,
           'lshift': operator.lshift, 'rshift': operator.rshift,
           'lt': operator.lt, 'le': operator.le, 'gt': operator.gt,
           'ge': operator.ge, 'eq': operator.eq, 'ne': operator.ne}


def promoted(name, a, b):
  """`a <op> b` with NumPy's promotion of TensorFlow tensors' dtypes.

  `name` is `'add'`, `'lt'` ...: TensorFlow's operators do not promote.
  The form of a primitive that fails on TensorFlow for mixed dtypes
  (`x * n` of a float64 and an int64): both operands take their joint
  dtype, NumPy's (a Python number stays weak), and a true division of
  integers is float64; a NumPy operand becomes a tensor, and `<<` and
  `>>` are `tf.bitwise`'s shifts (a tensor has no such operator).
  Operands that are not both numeric, or not TensorFlow's, go to the
  operator as they are.

  Args:
    name: The operator's name (a key of `_BINARY`).
    a: The left operand.
    b: The right operand.

  Returns:
    The result.
  """
  op = _BINARY[name]
  if not _is_tf(a, b):
    return op(a, b)
  da, db = _promotion_dtype(a), _promotion_dtype(b)
  if da is None or db is None:
    return op(a, b)
  outside = _int_outside(da, db) or _int_outside(db, da)
  if outside is not None:
    number, dtype = outside
    if name not in _COMPARISONS:
      raise OverflowError(f'Python integer {number} out of bounds for '
                          f'{dtype}')
    # NumPy compares the number itself, which the integer dtype cannot
    # hold (`n > -1` of a uint8 is true; TensorFlow wrapped -1 to 255).
    wide = np.dtype(np.int64)
    return op(_cast_to(a, wide) if _is_tf(a) else a,
              _cast_to(b, wide) if _is_tf(b) else b)
  joint = np.result_type(da, db)
  if name == 'truediv' and joint.kind in 'iub':
    joint = np.dtype(np.float64)
  # A NumPy operand becomes a tensor: NumPy's reflected operator
  # (`np.uint64(3) ^ z`, `z >> np.uint64(3)`) would read the tensor's
  # values, which a graph's have none of.
  a, b = (x if type(x) in (bool, int, float, complex) or _is_tf(x) else
          _tf().convert_to_tensor(x) for x in (
              _cast_to(a, joint), _cast_to(b, joint)))
  if joint.kind == 'b' and name in _OF_BOOLEANS:
    # TensorFlow has no sum, power or order of booleans: NumPy's `+` is
    # a logical or, `*` a logical and, `**` an int8 power, and `<` ...
    # compare False and True as 0 and 1.
    tf = _tf()
    if name == 'add':
      return tf.logical_or(a, b)
    if name == 'mul':
      return tf.logical_and(a, b)
    return op(tf.cast(a, tf.int8), tf.cast(b, tf.int8))
  if name in _SHIFTS:
    return _shift(op, _SHIFTS[name], a, b)
  if name == 'pow' and joint.kind == 'u':
    # TensorFlow has no unsigned power: in int64, wrapping as NumPy's.
    return tf_in_int64(op, (a, b), joint)
  return op(a, b)


def negative(x):
  """`-x`, the promoting form of a primitive's unary minus.

  Of an unsigned tensor it is NumPy's wrapped value (TensorFlow has no
  unsigned negation), computed in the signed integer of its width, bit
  for bit.

  Args:
    x: The operand.

  Returns:
    `-x`.
  """
  if _is_tf(x) and _tf().as_dtype(x.dtype).is_unsigned:
    return tf_unsigned_gap(np.negative, x)
  return -x


# The signed integer of each unsigned one's width.
_SIGNED_TWIN = {np.dtype(np.uint8): np.int8, np.dtype(np.uint16): np.int16,
                np.dtype(np.uint32): np.int32, np.dtype(np.uint64): np.int64}


def tf_in_int64(fn, args, want):
  """`fn(*args)` of integers TensorFlow has no kernel for, computed in int64.

  For integer or boolean operands (tensors, arrays, Python numbers)
  whose TensorFlow kernels lack their dtype (a product of int8, uint8 or
  uint64 matrices, a power of unsigned integers), as NumPy computes it in
  `want`: the operands as int64 (uint64's bits as int64's) and the result
  back in `want`.  Exact, wrapping as NumPy's: two's complement sums and
  products agree with NumPy's modulo 2**64, hence modulo 2**bits of the
  narrower dtype that the cast back keeps; a boolean result is whether
  the int64 one is not 0 (NumPy's sum of booleans is a logical or).

  Args:
    fn: The TensorFlow function.
    args: Its operands.
    want: NumPy's result dtype.

  Returns:
    The result, a tensor of dtype `want`.
  """
  tf = _tf()
  want = np.dtype(want)
  def wide(x):
    if type(x) in (bool, int):
      return x
    if not _is_tf(x):
      if not isinstance(x, (np.ndarray, np.generic)) or (
          np.dtype(x.dtype).kind not in 'iub'):
        return x
      x = tf.convert_to_tensor(x)
    if x.dtype == tf.uint64:
      return tf.bitcast(x, tf.int64)
    return tf.cast(x, tf.int64) if x.dtype != tf.int64 else x
  out = fn(*[wide(x) for x in args])
  if want.kind == 'b':
    return tf.not_equal(out, tf.zeros_like(out))
  if want == np.uint64:
    return tf.bitcast(tf.cast(out, tf.int64), tf.uint64)
  return tf.cast(out, want)


def tf_unsigned_gap(func, x):
  """NumPy's ufunc `func` of an unsigned tensor `x`, which TF has no kernel for.

  `func` is `np.abs`, `np.absolute`, `np.sign` or `np.negative`: the
  value itself, 0 or 1, the negation in the signed integer of `x`'s
  width (bit for bit, wrapping as NumPy's).

  Args:
    func: The NumPy ufunc.
    x: The unsigned tensor.

  Returns:
    `func(x)` as NumPy computes it, a tensor.
  """
  tf = _tf()
  if func in (np.abs, np.absolute):
    return x
  if func is np.sign:
    return tf.cast(tf.not_equal(x, tf.zeros_like(x)), x.dtype)
  signed = _SIGNED_TWIN[dtype_of(x)]
  return tf.bitcast(-tf.bitcast(x, signed), x.dtype)


_SHIFTS = {'lshift': 'left_shift', 'rshift': 'right_shift'}


_COMPARISONS = frozenset({'lt', 'le', 'gt', 'ge', 'eq', 'ne'})
# The operators whose NumPy forms take booleans and TensorFlow's do not
# (`promoted`).
_OF_BOOLEANS = frozenset({'add', 'mul', 'pow', 'lt', 'le', 'gt', 'ge'})


_PYTHON_NUMBERS = (bool, int, float, complex)
# NumPy's kinds in the order of promotion: a Python number of a kind no
# higher than an array's takes the array's dtype (NEP 50).
_KIND_ORDER = {'b': 0, 'i': 1, 'u': 1, 'f': 2, 'c': 3}
_KIND_DEFAULT = {'b': np.bool_, 'i': np.int64, 'u': np.int64,
                 'f': np.float64, 'c': np.complex128}


def weak_dtype(kind, dtype):
  """The dtype NumPy 2 gives a Python number beside an array (NEP 50).

  Args:
    kind: The number's kind, NumPy's (`'b'`, `'i'`, `'f'`, `'c'`).
    dtype: The array's dtype.

  Returns:
    The array's dtype where its kind is as high (an int beside uint8:
    uint8; a float beside float32: float32); a complex beside a float
    the complex dtype of its precision (complex64 beside float32); else
    NumPy's dtype for the number (an int beside booleans: int64; a float
    beside int8: float64).
  """
  dtype = np.dtype(dtype)
  if _KIND_ORDER[kind] <= _KIND_ORDER[dtype.kind]:
    return dtype
  if kind == 'c' and dtype.kind == 'f':
    return np.result_type(dtype, np.complex64)
  return np.dtype(_KIND_DEFAULT[kind])


def weak_target(name, number, other):
  """The dtype `weak_operator` casts `number` to beside `other`, or None
  where it is taken as it is: where either is a Python number (NumPy's
  and `promoted`'s operators take it so), or not numeric, and for a true
  division of integers (float64, as NumPy's)."""
  if type(number) in _PYTHON_NUMBERS or type(other) in _PYTHON_NUMBERS:
    return None
  own, dtype = _operand_dtype(number), _operand_dtype(other)
  if not (isinstance(own, np.dtype) and isinstance(dtype, np.dtype) and
          own.kind in _KIND_ORDER and dtype.kind in _KIND_ORDER):
    return None
  target = weak_dtype(own.kind, dtype)
  if name == 'truediv' and target.kind in 'iub':
    return None
  return target


def narrowing_bounds(own, dtype):
  """`(low, high)`: the bounds of integer `dtype` that values of integer
  dtype `own` can pass (None for a bound they cannot), or None where
  `dtype` holds every value of `own` or either is no integer."""
  own, dtype = np.dtype(own), np.dtype(dtype)
  if own.kind not in 'iu' or dtype.kind not in 'iu' or (
      np.result_type(own, dtype) == dtype):
    return None
  mine, info = np.iinfo(own), np.iinfo(dtype)
  return (info.min if info.min > mine.min else None,
          info.max if info.max < mine.max else None)


def _checked_weak_cast(x, dtype, where):
  """`x`, the members' computed Python integers, cast to integer `dtype`;
  one that `dtype` cannot hold raises OverflowError as NumPy 2 does
  (staged on TensorFlow, a failed check stops the run, its message
  naming the primitive, `where`)."""
  own = _operand_dtype(x)
  bounds = narrowing_bounds(own, dtype)
  if bounds is None:
    return _cast_to(x, dtype)
  low, high = bounds
  held = _held(x)
  if _is_tf(x):
    tf = _tf()
    if not tf.executing_eagerly():
      outside = tf.zeros_like(x, tf.bool)
      if low is not None:
        outside = outside | (x < low)
      if high is not None:
        outside = outside | (x > high)
      if held is not None:
        outside = outside & tf.cast(held, tf.bool)
      check = tf.debugging.Assert(
          tf.logical_not(tf.reduce_any(outside)),
          [f'OverflowError: Python integer out of bounds for {dtype}'
           f'{where}:', x])
      with tf.control_dependencies([check]):
        return _cast_to(tf.identity(x), dtype)
    values = x.numpy()
    held = None if held is None else np.asarray(held)
  else:
    values = np.asarray(x)
  outside = np.zeros(values.shape, bool)
  if low is not None:
    outside |= values < low
  if high is not None:
    outside |= values > high
  if held is not None:
    outside &= np.broadcast_to(np.asarray(held, bool), outside.shape)
  if outside.any():
    raise OverflowError(f'Python integer {int(values[outside].flat[0])} '
                        f'out of bounds for {dtype}')
  return _cast_to(x, dtype)


def weak_operator(name, a, b, side, where=''):
  """`a <op> b` where one operand is a Python number each member computes.

  Operand `side` (0: `a`, 1: `b`) is such a number (`300 if d else 0`,
  `k * 2` of a loop counter `k`), an array of NumPy's dtype for it at run
  time, and the other an array or tensor: as NumPy 2 reads the member's
  Python number (NEP 50), it takes the dtype `weak_dtype` gives it beside
  the other's, and an integer that the other's integer dtype cannot hold
  raises OverflowError (`s + 300` of an int8 `s`; staged on TensorFlow a
  failed check stops the run, and XLA drops the check).  The frontend's
  form of such an operator (`python.primitives.weak_operands`).

  Args:
    name: The operator: a key of `_BINARY` that is no comparison, or
      `'mod'`, `'floordiv'`, `'lshift'`, `'rshift'`.
    a: The left operand.
    b: The right operand.
    side: Which is the number.
    where: The primitive's text and place, for the message of a staged
      check.

  Returns:
    The result, as `promoted` (or the helper of the name) gives it.
  """
  number, other = (a, b) if side == 0 else (b, a)
  target = weak_target(name, number, other)
  if target is not None:
    number = (_checked_weak_cast(number, target, where)
              if target.kind in 'iu' else _cast_to(number, target))
  a, b = (number, other) if side == 0 else (other, number)
  return operate(name, a, b)


def operate(name, a, b):
  """`a <op> b`: `promoted`, or the helper of `%`, `//`, `<<`, `>>`.

  Args:
    name: A key of `_BINARY`, or `'mod'`, `'floordiv'`, `'lshift'`,
      `'rshift'`.
    a: The left operand.
    b: The right operand.

  Returns:
    The result.
  """
  helper = _WEAK_HELPERS.get(name)
  return helper(a, b) if helper is not None else promoted(name, a, b)


def int_outside(number, dtype):
  """Whether Python integer `number` is outside integer `dtype`'s range.

  Args:
    number: A Python number, or anything else.
    dtype: A NumPy dtype, or anything else.

  Returns:
    True only for a Python int (not a bool) and an integer dtype that
    cannot hold it.
  """
  if type(number) is not int or not isinstance(dtype, np.dtype) or (
      dtype.kind not in 'iu'):
    return False
  info = np.iinfo(dtype)
  return not info.min <= number <= info.max


def _int_outside(number, dtype):
  """`(number, dtype)` where `int_outside(number, dtype)`, else None."""
  return (number, dtype) if int_outside(number, dtype) else None


class _Key:
  """`key[index]` is `index`: a subscript's index as a value."""

  def __getitem__(self, index):
    return index


key = _Key()


def batch_setitem(x, index, value):
  """A batch-aware function's `x[index] = value`, as a new array.

  The frontend lets through indices that start with `:` or `...`, and
  single indices read from the function's variables, which must be a
  boolean mask of the whole array: here an index whose `...` would
  cover axis 0 (the batch), or a single index that is not such a mask,
  raises `IndexError`.  NumPy casts `value` to `x`'s dtype; so does
  TensorFlow's form, a scatter into the flat items.

  Args:
    x: The batched array or tensor.
    index: The index (`key[...]`'s value).
    value: What to write, broadcast to the items.

  Returns:
    The new array; `x` is unchanged.
  """
  if isinstance(x, (list, tuple)):
    return list_setitem(x, index, value)
  parts = index if isinstance(index, tuple) else (index,)
  ndim = len(x.shape)
  if parts and parts[0] is Ellipsis:
    explicit = sum(1 for p in parts[1:] if p is not None)
    if explicit >= ndim:
      raise IndexError(
          f'`...` in an item assignment of an array of {ndim} axes covers '
          'no axis, so the index would write axis 0, the batch: write '
          '`x[:, i] = v`')
  elif not (isinstance(parts[0], slice) and parts[0] == slice(None)):
    mask = parts[0]
    dtype = getattr(mask, 'dtype', None)
    is_bool = dtype is not None and (
        dtype == bool or getattr(dtype, 'is_bool', False))
    if len(parts) != 1 or not is_bool or len(mask.shape) != ndim:
      raise IndexError(
          'an item assignment in a batch-aware function indexes by one '
          'array only where it is a boolean mask of the whole array '
          '(x[x > 0] = 0); axis 0 is the batch: write `x[:, i] = v`, or '
          'write the function for one member (per_member=True)')
  if _is_tf(x, value, *parts):
    return tf_setitem(x, index, value)
  x = np.array(x, copy=True)
  x[index] = value
  return x


def _list_index(index):
  """`index` as a Python int where it is one index the same for every
  member (a Python or NumPy integer, or a 0-d NumPy integer array), else
  None."""
  if isinstance(index, (bool, np.bool_)):
    return None
  if isinstance(index, (int, np.integer)):
    return int(index)
  if (type(index) is np.ndarray and index.ndim == 0 and
      index.dtype.kind in 'iu'):
    return int(index)
  return None


def list_setitem(x, index, value):
  """`x[index] = value` of a variable that holds a Python list, as a new list.

  The new list holds `x`'s items with item `index` replaced by `value`.

  A list of values is structure, the same for every member (its length,
  its items' types), so the item written is chosen by an index the same
  for every member (`parts[0] = parts[0] + x`); each member's value of
  the item is written.  Both styles (and their dry runs) call it.

  Args:
    x: The list (of arrays, tensors, one member's values, numbers or
      structures).
    index: The index (`key[...]`'s value).
    value: The new item.

  Returns:
    The new list; `x` is unchanged.

  Raises:
    UnsupportedSyntaxError: If `x` is a tuple (Python cannot assign its
      items), the index is a slice, or it is one index per member.
    IndexError: If the index is out of the list's range, as Python's.
  """
  if isinstance(x, tuple):
    rebuilt = ('`t = t._replace(name=v)`' if hasattr(x, '_fields') else
               '`t = (v, t[1])` or `t = t[:k] + (v,) + t[k + 1:]`')
    raise errors.UnsupportedSyntaxError(
        f'item assignment to a {type(x).__name__} (Python cannot assign '
        'items of a tuple: TypeError) is not supported in batched '
        'functions', hint=f'Build a new tuple and assign it: {rebuilt}.')
  if isinstance(index, tuple) or index is Ellipsis:
    raise errors.UnsupportedSyntaxError(
        'item assignment to a Python list at an index of several parts '
        '(`v[i, j] = ...`, `v[...] = ...`) is not supported: a list takes '
        'one index', hint='Assign an item at a constant index (`v[0] = '
        'a`); for an item of an array in the list, take it into a '
        'variable, assign its item, and put it back (`a = v[0]`, '
        '`a[..., j] = b`, `v[0] = a`).')
  if isinstance(index, slice):
    raise errors.UnsupportedSyntaxError(
        'slice assignment to a Python list (`v[i:j] = ...`) is not '
        'supported in batched functions: a list is structure, of one '
        'length for every member',
        hint='Assign its items one by one at constant indices '
        '(`v[0] = a`), or build the new list (`v = [a, b] + v[2:]`).')
  k = _list_index(index)
  if k is None:
    raise errors.UnsupportedSyntaxError(
        'item assignment to a Python list at an index that is a '
        'per-member value (a variable\'s, `v[i] = a`) is not supported '
        'in batched functions: a list is structure, the same for every '
        'member, and its item is picked by a constant index (`v[0] = a`)',
        hint='Write the index as a constant (`v[0] = a`, `v[-1] = b`), or '
        'keep the values in an array instead of a list (`v = np.stack([a, '
        'b], axis=-1)`: per member `v[i] = a` then writes member i\'s item; '
        'batch-aware, select with np.where(np.arange(2) == i[:, None], '
        'a[:, None], v)).')
  if not -len(x) <= k < len(x):
    raise IndexError('list assignment index out of range')
  out = list(x)
  out[k] = value
  return out


def dtype_of(x):
  """The NumPy dtype of an array, a tensor or one member's array.

  Args:
    x: Any value.

  Returns:
    The dtype, or None where `x` has none (a Python number, a list).
  """
  if isinstance(x, (bool, int, float, complex)):
    return None
  dtype = getattr(x, 'dtype', None)
  if dtype is None:
    return None
  if _is_tf(x):
    return np.dtype(_tf().as_dtype(dtype).as_numpy_dtype)
  try:
    return np.dtype(dtype)
  except TypeError:
    return None


def _static_shape(x):
  shape = getattr(x, 'shape', None)
  if shape is None:
    return None
  if _is_tf(x):
    return None if shape.rank is None else tuple(shape.as_list())
  return tuple(shape)


class InPlaceCastError(TypeError):
  """NumPy's refusal of `x op= v` whose result x's dtype cannot hold.

  NumPy's own `UFuncTypeError` is a TypeError too.
  """


class InPlaceShapeError(ValueError):
  """NumPy's refusal of `x op= v` whose result has another shape."""


def in_place(read, result):
  """What `x op= v` leaves in `x`, as NumPy's in-place operator writes.

  `read` is `x` (or the items `x[i]` written) and `result` is `read op
  v`.

  An array (rank 1 or more) keeps its dtype and shape: `result` is cast
  to its dtype, where NumPy's `same_kind` rule allows (an int64 beside a
  float64 result does not: NumPy raises, and so does this), and a
  result of another shape is refused, as NumPy refuses to broadcast the
  array written.  A number (rank 0: one member's `x[i]` of a vector,
  `s += 0.5`) is rebound, as Python rebinds it: `result` as it is.

  Args:
    read: The value written (an array, a tensor, one member's array, a
      number).
    result: `read op v`.

  Returns:
    `result`, or it cast to `read`'s dtype.

  Raises:
    InPlaceCastError: Where NumPy cannot cast the result to the array's
      dtype.
    InPlaceShapeError: Where the result's shape is not the array's.
  """
  dtype, out = dtype_of(read), dtype_of(result)
  if dtype is None or out is None or _rank(read) == 0:
    return result
  if not np.can_cast(out, dtype, 'same_kind'):
    raise InPlaceCastError(
        f'x op= v of an array x of dtype {dtype} gives {out}, which NumPy '
        f'cannot write into x (its in-place operator raises '
        f'UFuncTypeError: cannot cast {out} to {dtype} with casting rule '
        "'same_kind'); the batched call refuses it too")
  shape, got = _static_shape(read), _static_shape(result)
  if shape is not None and got is not None and (
      len(shape) != len(got) or any(
          a is not None and b is not None and a != b
          for a, b in zip(shape, got))):
    raise InPlaceShapeError(
        f'x op= v of an array x of shape {shape} gives shape {got}: NumPy\'s '
        'in-place operator cannot broadcast x ("non-broadcastable output '
        'operand")')
  if out == dtype:
    return result
  if _is_tf(result):
    return _tf().cast(result, dtype)
  return result.astype(dtype)


def tf_setitem(x, index, value, read=None):
  """`x` with `x[index] = value`, as a new tensor.

  A number under a boolean mask of the whole tensor is a select, of
  static shape (XLA, gradients under it, and pfor take no mask's count
  of items); anything else a scatter into the flat items that
  `read(positions, index)` picks (by default `positions[index]`, a
  boolean mask by `tf.boolean_mask`).  `value` is cast to `x`'s dtype,
  as NumPy casts it.

  Args:
    x: A tensor (or array).
    index: The index, as `__setitem__` takes it.
    value: What to write, broadcast to the items.
    read: `(positions, index) -> ` the chosen positions, or None.

  Returns:
    The new tensor.
  """
  tf = _tf()
  x = tf.convert_to_tensor(x)
  value = (tf.cast(value, x.dtype) if _is_tf(value) else
           tf.constant(np.asarray(value), x.dtype))
  mask = (_is_tf(index) and index.dtype == tf.bool and
          index.shape.rank == x.shape.rank)
  if mask and value.shape.rank == 0:
    return tf.where(index, value, x)
  if x.shape.is_fully_defined():
    shape, size = x.shape, x.shape.num_elements()
  else:
    shape, size = tf.shape(x), tf.size(x)
  positions = tf.reshape(tf.range(size), shape)
  if read is not None:
    chosen = read(positions, index)
  elif mask:
    chosen = tf.boolean_mask(positions, index)
  else:
    chosen = positions[index]
  value = tf.broadcast_to(value, tf.shape(chosen))
  flat = tf.tensor_scatter_nd_update(tf.reshape(x, [size]),
                                     tf.reshape(chosen, [-1, 1]),
                                     tf.reshape(value, [-1]))
  return tf.reshape(flat, shape)


def static_item(table, index, weak=True):
  """`table[index]`, a `tf.gather` where `index` is a TensorFlow tensor.

  The items of an array the same for every member at each member's
  index (a batch-aware `for x in SEQUENCE:`).

  Args:
    table: A NumPy array.
    index: The members' integer indices (an array or tensor), or one
      Python int for every member (as type inference passes a counter).
    weak: Whether the items are Python numbers (a tuple or list of them
      made `table`), which take the dtype of the arrays they meet.
      Else they are NumPy scalars, whose dtype is theirs: at one Python
      int they are an array of one member, not a Python number.

  Returns:
    The items, with the batch axis of `index`.
  """
  if _is_tf(index):
    tf = _tf()
    return tf.gather(tf.constant(table), index)
  if not weak and type(index) is int:  # pylint: disable=unidiomatic-typecheck
    return table[[index]]
  return table[index]


def _promotion_dtype(x):
  """What `np.result_type` takes for operand `x`: a tensor's or array's
  dtype, a Python number itself (weak); None for anything else."""
  if type(x) in (bool, int, float, complex):
    return x
  if _is_tf(x):
    dtype = _tf().as_dtype(x.dtype)
    if not (dtype.is_floating or dtype.is_integer or dtype.is_bool or
            dtype.is_complex):
      return None
    return np.dtype(dtype.as_numpy_dtype)
  dtype = getattr(x, 'dtype', None)
  return np.dtype(dtype) if isinstance(x, (np.ndarray, np.generic)) else None


def _operand_dtype(x):
  """The NumPy dtype of an array, tensor, NumPy scalar or array-like
  operand (a per-member value), or None."""
  dtype = _promotion_dtype(x)
  if dtype is None and not _is_tf(x) and getattr(x, 'dtype', None) is not None:
    try:
      dtype = np.dtype(x.dtype)
    except TypeError:
      return None
  return dtype if isinstance(dtype, np.dtype) else None


def _cast_to(x, dtype):
  """`x` as `dtype`: a tensor or array cast, a Python number as it is."""
  if type(x) in (bool, int, float, complex):
    return x
  if _is_tf(x):
    tf = _tf()
    return x if x.dtype == tf.as_dtype(dtype) else tf.cast(x, dtype)
  return np.asarray(x, dtype)


def where(cond, x, y):
  """Per-member select (the frontend's rewrite of `x if cond else y`).

  Args:
    cond: The per-member condition, `[B]` (or a Python bool).
    x: The values where `cond` is true, `[B, ...]` or a Python scalar.
    y: The values where `cond` is false, `[B, ...]` or a Python scalar.

  Returns:
    `x` where `cond` holds, else `y`, `cond` broadcast over the trailing
    dimensions; a Python scalar of the joint type if all three are Python
    scalars, a tensor if any input is one.
  """
  scalars = (bool, int, float)
  if (type(x) in scalars and type(y) in scalars
      and isinstance(cond, (bool, np.bool_))):
    # All literals (type inference runs literals as Python scalars): a
    # literal, as `x if cond else y` is in Python, of the joint type.
    return np.asarray(x if cond else y, np.result_type(x, y)).item()
  cond = _as_bool(cond)
  if _is_tf(cond, x, y):
    tf = _tf()
    scalars = (bool, int, float)
    if isinstance(x, scalars) and isinstance(y, scalars):
      # Two literals: NumPy's dtype (int64/float64), as on the NumPy backend.
      dtype = np.result_type(x, y)
      x, y = tf.constant(x, dtype), tf.constant(y, dtype)
    elif isinstance(x, scalars):
      y = tf.convert_to_tensor(y)
      y = _cast_to(y, with_number(y, x))
      x = tf.convert_to_tensor(x, dtype=y.dtype)
    else:
      x = tf.convert_to_tensor(x)
      if not isinstance(y, scalars):
        y = tf.convert_to_tensor(y)
      else:
        # A Python number beside a tensor: NumPy's joint dtype (`x or
        # 2.5` of an int64 `x` is float64), the number weak.
        x = _cast_to(x, with_number(x, y))
      if tf.is_tensor(y) and y.dtype == tf.bool != x.dtype:
        y = tf.cast(y, x.dtype)   # as NumPy and Python take a boolean
      elif x.dtype == tf.bool and tf.is_tensor(y) and y.dtype != tf.bool:
        x = tf.cast(x, y.dtype)
      elif tf.is_tensor(y) and y.dtype != x.dtype:
        # Both sides' joint dtype, as NumPy's (int8 and int16: int16).
        joint = np.result_type(x.dtype.as_numpy_dtype, y.dtype.as_numpy_dtype)
        x, y = tf.cast(x, joint), tf.cast(y, joint)
      y = tf.convert_to_tensor(y, dtype=x.dtype)
    rank = max(len(x.shape), len(y.shape))
    return tf.where(_expand_to(cond, rank), x, y)
  # A Python scalar stays one: np.where promotes it as a literal (weakly:
  # `0 if c else a` with int32 `a` is int32), where np.asarray would make
  # it an int64 array, which NumPy >= 2 promotes like any array.
  rank = max(np.ndim(x), np.ndim(y))
  return np.where(_expand_to(cond, rank), x, y)


def as_written(fn):
  """A user's lambda that reads the batched function's variables, run as
  written: TensorFlow's AutoGraph (`tf.map_fn` converts the functions it
  is given) would compare its closure, now the primitive's inputs, with
  its source's and warn.  A lambda has no statements to convert."""
  tf = sys.modules.get('tensorflow')
  if tf is None:
    return fn
  return tf.autograph.experimental.do_not_convert(fn)


def with_number(x, number):
  """The dtype NumPy gives tensor `x` beside a Python number.

  The number is weak: int32 beside 2 stays int32, beside 2.5 is float64;
  a bool tensor keeps its dtype beside a bool.

  Args:
    x: A tensor.
    number: A Python bool, int or float.

  Returns:
    A NumPy dtype; `x`'s own where it is not numeric.
  """
  dtype = np.dtype(x.dtype.as_numpy_dtype)
  if not (dtype.kind in 'biufc'):
    return dtype
  return np.result_type(dtype, number)


def _int_division(op, a, b):
  """`op(a, b)`; with TF integer tensors a zero divisor gives 0, as in NumPy.

  TensorFlow's CPU kernels raise on integer division by zero, and batched
  primitives also compute for members not at the block, whose leftover
  values may well be zero.
  """
  if not _is_tf(a, b):
    return op(a, b)
  tf = _tf()
  da, db = _promotion_dtype(a), _promotion_dtype(b)
  if da is not None and db is not None:
    # NumPy's promotion (`n // 0.5` of an int64 `n` is float64), where
    # TensorFlow's operator casts a Python float to the integer dtype
    # and fails.
    joint = np.result_type(da, db)
    a, b = _cast_to(a, joint), _cast_to(b, joint)
    if joint.kind == 'f' and op is operator.floordiv:
      return _float_floordiv(tf.convert_to_tensor(a, joint),
                             tf.convert_to_tensor(b, joint))
  if not (tf.is_tensor(b) or isinstance(b, tf.Variable)):
    return op(a, b)  # a constant divisor: the user's own division
  b = tf.convert_to_tensor(b)
  if not b.dtype.is_integer:
    return op(a, b)
  zero = tf.equal(b, 0)
  result = op(a, tf.where(zero, tf.ones_like(b), b))
  return tf.where(zero, tf.zeros_like(result), result)


def _float_floordiv(a, b):
  """Python's and NumPy's `a // b` of floats: the floor of the exact
  quotient, from the remainder (`fmod`).  TensorFlow's is the floor of the
  rounded quotient (`-0.9 // 0.3` is -3.0 there, -4.0 in Python: the
  quotient of the two doubles is just below -3)."""
  tf = _tf()
  a, b = tf.broadcast_to(a, tf.broadcast_dynamic_shape(
      tf.shape(a), tf.shape(b))), b
  rem = tf.truncatemod(a, b)
  div = (a - rem) / b
  div = tf.where(tf.logical_and(tf.not_equal(rem, 0),
                                tf.not_equal(b < 0, rem < 0)), div - 1, div)
  whole = tf.math.floor(div)
  whole = tf.where(div - whole > 0.5, whole + 1, whole)
  # A zero quotient takes the exact quotient's sign; a zero divisor gives
  # NumPy's inf or nan.
  quotient = a / b
  whole = tf.where(tf.equal(div, 0), quotient * 0, whole)
  return tf.where(tf.equal(b, 0), quotient, whole)


def mod(a, b):
  """Computes `a % b`, giving 0 for an integer tensor divisor of zero.

  TensorFlow's CPU kernels raise on integer division by zero, and batched
  primitives also compute for members not at the block (see
  `_int_division`).

  Args:
    a: The dividend: an array, a tensor or a Python number.
    b: The divisor: an array, a tensor or a Python number.

  Returns:
    `a % b`, with 0 where an integer tensor `b` is zero.
  """
  return _int_division(operator.mod, a, b)


def floordiv(a, b):
  """Computes `a // b`, giving 0 for an integer tensor divisor of zero.

  See `mod` for why.

  Args:
    a: The dividend: an array, a tensor or a Python number.
    b: The divisor: an array, a tensor or a Python number.

  Returns:
    `a // b`, with 0 where an integer tensor `b` is zero.
  """
  return _int_division(operator.floordiv, a, b)


def _shift(op, name, a, b):
  """`op(a, b)` (`<<` or `>>`); on TensorFlow, `tf.bitwise`'s shift.

  A TensorFlow tensor has no `<<` or `>>` operator.  A Python integer
  next to a tensor takes the tensor's dtype; two tensors of different
  integer dtypes shift in the dtype NumPy promotes them to.
  """
  if not _is_tf(a, b):
    return op(a, b)
  tf = _tf()
  if isinstance(a, (bool, int, np.integer)) and not tf.is_tensor(a):
    b = tf.convert_to_tensor(b)
    a = tf.convert_to_tensor(a, b.dtype)
  elif isinstance(b, (bool, int, np.integer)) and not tf.is_tensor(b):
    a = tf.convert_to_tensor(a)
    b = tf.convert_to_tensor(b, a.dtype)
  else:
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    if a.dtype != b.dtype:
      dtype = np.result_type(a.dtype.as_numpy_dtype, b.dtype.as_numpy_dtype)
      a, b = tf.cast(a, dtype), tf.cast(b, dtype)
  return getattr(tf.bitwise, name)(a, b)


def lshift(a, b):
  """Computes `a << b` (the frontend's rewrite of `<<`), also of tensors.

  Args:
    a: An integer array, tensor or Python integer.
    b: The shift: an integer array, tensor or Python integer.

  Returns:
    `a << b`; a tensor if either is one (`tf.bitwise.left_shift`).
  """
  return _shift(operator.lshift, 'left_shift', a, b)


def rshift(a, b):
  """Computes `a >> b` (the frontend's rewrite of `>>`), also of tensors.

  Args:
    a: An integer array, tensor or Python integer.
    b: The shift: an integer array, tensor or Python integer.

  Returns:
    `a >> b`; a tensor if either is one (`tf.bitwise.right_shift`,
    arithmetic for signed integers as Python's and NumPy's).
  """
  return _shift(operator.rshift, 'right_shift', a, b)


# The operators that `weak_operator` runs by a helper of theirs.
_WEAK_HELPERS = {'mod': mod, 'floordiv': floordiv, 'lshift': lshift,
                 'rshift': rshift}


def fail(message, compute=None, *inputs, one_member=False):
  """Fails a user's `assert`; the VM attaches the members and the line.

  Args:
    message: The assertion's message, or the source text of the message
      where `compute` computes it.
    compute: None, or the function computing the message from one member's
      rows of `inputs`; it runs only for the members the VM reports, once
      they are known (a message is text, which no primitive can return
      per member).
    *inputs: The batched values `compute` reads.
    one_member: Whether `compute` is written for one member's values
      (`per_member=True`), without the batch axis.

  Raises:
    errors.FailedAssertion: Always (an `AssertionError`).
  """
  raise errors.FailedAssertion(message, compute, inputs, one_member)


def optional_value(x, flag):
  """A read of a local that may hold None (`python.optional`): `x`.

  The rewritten source calls this name; the frontend reads `x` itself in
  a batch-aware function (whatever its array holds where `flag` is true),
  and in a per-member one calls `member_ops.optional_value`, which fails
  the members whose `flag` is true as Python does.

  Args:
    x: The local's array.
    flag: Whether it is None, per member.

  Returns:
    `x`.
  """
  del flag
  return x


def truthy(x):
  """Normalizes a condition for use in `if` in both batched and dry runs.

  In batched code the compiler removes the call (conditions are per-member
  already).  In a dry run, where each member runs alone with a batch of
  one, it strips that size-1 batch dimension so Python's `if` sees a scalar.

  Args:
    x: A condition: an array or tensor, or a Python value.

  Returns:
    `x[0]` where `x` has a leading dimension of 1, else `x`.
  """
  shape = getattr(x, 'shape', None)
  if shape is not None and len(shape) >= 1 and shape[0] == 1:
    return x[0]
  return x
