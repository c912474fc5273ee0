"""The helpers a per-member primitive calls: Python's meaning for one member.

The frontend rewrites a per-member function's primitives to call these
where plain Python would not mean the same thing on a batch:

- `getitem(x, key[...])` and `setitem(x, key[...], v)`: reading and
  writing items (`x[i]`, `x[i, j] = v`, `x[1:3] += v`); `setitem` is
  functional (the frontend assigns its result to `x`);
- `asarray`: `np.array` and `np.asarray` of a list of one member's values;
- `min`, `max`, `abs`, `len`, `int`, `float`, `round`: the builtins on
  one member's values;
- `math_fn(name, ...)`: Python's `math` functions (`member_math`), which
  with `int` and `round` fail the members Python fails
  (`note_failure`); the `*_rows` forms take the rows of the members at a
  block (`python.member_direct`'s NumPy code);
- `choose` (`where` where its condition is a member's), `all_of`,
  `any_of` (`logical_and`, `logical_or` of the operands computed),
  `logical_not`: `a if c else b`, `and`, `or`, `not` on one member's
  conditions, the sides and operands as thunks.

Each works on a member's NumPy value (a `numpy_rules.MemberArray` while
the rules run a batch, a plain array or number in a dry run) and on a
TensorFlow tensor (one member's, inside `tf.vectorized_map`).  On
TensorFlow, an index that differs between members is a gather (pfor
vectorizes `tf.gather` and `tf.tensor_scatter_nd_update`; it cannot
vectorize a slice whose start differs between members, which `x[i]`
becomes by default), and an index out of range is clipped into it, as
members not at a block compute on leftover values.  Each such index also
gives a flag per member, true where it is out of range and read
(`out_of_range_checks`), which the vectorizer returns and the VM turns
into an `IndexError` of the members at the block that raised it.
"""

import builtins
import contextlib
import functools
import inspect
import operator
import random
import sys
import threading
import types

import numpy as np

from autobatch_vm import errors
from autobatch_vm import ops
from autobatch_vm.per_member import member_helpers
from autobatch_vm.per_member import member_math
from autobatch_vm.per_member import ragged

__all__ = ['key', 'getitem', 'setitem', 'asarray', 'min', 'max', 'sum', 'all',
           'any', 'abs', 'sorted',
           'len', 'int', 'iterate',
           'float', 'round', 'math_fn', 'math_rows', 'int_rows',
           'round_rows', 'where', 'choose', 'all_of', 'any_of',
           'logical_and', 'logical_or', 'method', 'attribute',
           'logical_not', 'is_tf', 'note_failure', 'tnp_call', 'tf_like',
           'tf_linalg', 'tf_searchsorted', 'tf_digitize', 'leaves',
           'constant_array_item', 'optional_value', 'promoted', 'in_place',
           'bool', 'complex', 'nan_free', 'pow_mod']

# pylint: disable=redefined-builtin


class _Key:
  """`key[index]` is `index`: a subscript's index as a value."""

  def __getitem__(self, index):
    return index


key = _Key()


def is_tf(*xs):
  """Whether any of `xs` is a TensorFlow tensor or variable.

  Args:
    *xs: Values.

  Returns:
    True if TensorFlow is imported and one of them is its tensor.
  """
  tf = sys.modules.get('tensorflow')
  if tf is None:
    return False
  return builtins.any(tf.is_tensor(x) or isinstance(x, tf.Variable)
                      for x in xs)


def _tf():
  return sys.modules['tensorflow']


def _numpy_rules():
  from autobatch_vm.per_member import numpy_rules  # pylint: disable=g-import-not-at-top
  return numpy_rules


_RULES = 'autobatch_vm.per_member.numpy_rules'


def _is_member_array(x):
  rules = sys.modules.get(_RULES)
  return rules is not None and isinstance(x, rules.MemberArray)


# -- items ----------------------------------------------------------------

_local = threading.local()


@contextlib.contextmanager
def _collected(name):
  """A fresh list in this thread's `name` while the block runs."""
  old = getattr(_local, name, None)
  setattr(_local, name, [])
  try:
    yield getattr(_local, name)
  finally:
    setattr(_local, name, old)


def out_of_range_checks():
  """Collects the flags of tensor indices out of range, while one member's
  function is traced for TensorFlow's vectorizer.

  Returns:
    A context manager yielding a list that gets `(kind, flag)` for each
    item read or write by a tensor index (kind `'index'`: whether the
    index is out of range where the member reads it, its guard held) and
    for each call of `math_fn`, `int` or `round` that Python may fail
    (`note_failure`); the flag a boolean scalar tensor.
  """
  return _collected('checks')


def _check_range(i, n, guard):
  """Notes whether tensor index `i` (a number, or an array of them) is
  out of an axis of `n`, where read."""
  checks = getattr(_local, 'checks', None)
  if checks is None:
    return
  tf = _tf()
  bad = tf.logical_or(i < -n, i >= n)
  if bad.shape.rank:
    bad = tf.reduce_any(bad)
  if guard is not None:
    bad = tf.logical_and(bad, _as_bool(guard))
  checks.append(('index', bad))


def note_failure(kind, bad, guard=None):
  """The members for which Python raises `kind` (`member_math.FAILURES`).

  On TensorFlow (one member's flag, inside the vectorizer) the flag goes
  with those of item indices (`out_of_range_checks`), for the VM to stop
  those members; on NumPy (a `MemberArray`, or the block's rows) the
  primitive raises `member_math.MemberFailure` naming the rows flagged.

  Args:
    kind: The failure's kind.
    bad: Each member's flag.
    guard: The condition under which Python evaluates the call, or None.
  """
  for condition in getattr(_local, 'guards', None) or ():
    # An operand Python evaluates only under a member's condition
    # (`choose`, `all_of`, `any_of`): that condition too.
    held = condition()
    guard = held if guard is None or (_plain(guard) and guard) else (
        _logical_and(guard, held))
  if guard is not None and not _plain(guard):
    bad = _logical_and(bad, guard)
  elif guard is not None and not guard:
    return
  if is_tf(bad):
    checks = getattr(_local, 'checks', None)
    if checks is not None:
      checks.append((kind, _tf().convert_to_tensor(bad)))
    return
  flags = bad.batched if _is_member_array(bad) else np.asarray(bad)
  if flags.any():
    raise member_math.MemberFailure(
        kind, np.flatnonzero(flags) if flags.ndim else None)


@contextlib.contextmanager
def _guarded_by(condition):
  """Failures noted while the block runs (`note_failure`) count only
  for the members where `condition()` holds: the block computes an
  operand that Python evaluates only under it (`v[:k].max() if k > 0
  else 0`), for every member.  `condition` runs only where a failure is
  noted, once."""
  held = getattr(_local, 'guards', None)
  if held is None:
    held = _local.guards = []
  held.append(functools.lru_cache(maxsize=None)(condition))
  try:
    yield
  finally:
    held.pop()


def out_of_range_reports():
  """Collects what vectorized primitives report (`report_failures`)
  while the VM runs one.

  Returns:
    A context manager yielding a list of dicts `{kind: boolean tensor
    [batch]}`: the members for which Python raises (`'index'`: an item
    index out of range; else a key of `member_math.FAILURES`).
  """
  return _collected('reports')


def report_failures(bad):
  """Hands the VM each member's flags of the failures of one primitive
  (dropped where nothing collects: type inference's runs on made-up
  values).

  Args:
    bad: `{kind: boolean tensor [batch]}`.
  """
  reports = getattr(_local, 'reports', None)
  if reports is not None:
    reports.append(bad)


def _parts(index):
  return index if isinstance(index, tuple) else (index,)


def _tensor_index(index):
  """Whether TensorFlow `index` holds a tensor element (an index that may
  differ between members)."""
  return builtins.any(
      is_tf(e) or (isinstance(e, slice) and is_tf(e.start, e.stop, e.step))
      for e in _parts(index))


def _lists_as_arrays(x, index):
  """`index` with each list of integers in it (NumPy's integer array
  index: `a[[k, p]]`, `a[[0, 2], j]`), and each integer array, a tensor
  where `x` or an item is one: TensorFlow reads a list as a tuple
  (`a[[k, p]]` as `a[k, p]`) and takes no NumPy array.  NumPy's own rules
  take them as they are."""
  def array(e):
    if (isinstance(e, np.ndarray) and e.ndim and e.dtype.kind in 'iu'
        and is_tf(x)):
      return _tf().constant(e)   # `a[ORDER]` of a tensor: a gather
    if not isinstance(e, builtins.list):
      return e
    items = leaves(e)
    if is_tf(*items):
      return asarray(e)
    if is_tf(x) and _plain(*items) and items and builtins.all(
        not isinstance(v, builtins.bool) for v in items):
      return _tf().constant(e, _tf().int64)
    return e
  if isinstance(index, tuple):
    return tuple(array(e) for e in index)
  return array(index)


def _advanced(e):
  """Whether index part `e` is an integer or an integer array or tensor
  (NumPy's advanced index, with an integer among them)."""
  if isinstance(e, (builtins.int, np.integer)) and not isinstance(
      e, builtins.bool):
    return True
  if is_tf(e):
    return e.dtype.is_integer
  return isinstance(e, np.ndarray) and e.dtype.kind in 'iu'


def _tf_leading_gather(x, parts, guard):
  """`x[parts]` where integer arrays (and integers) lead the index, the
  rest slices (`a[perm, 0]`, `a[rows, cols]`, `a[i, order, :]`): one
  `gather_nd` of their broadcast, as NumPy's advanced indexing places
  the broadcast axes first.  None for any other index."""
  tf = _tf()
  count = 0
  while count < builtins.len(parts) and _advanced(parts[count]):
    count += 1
  rest = parts[count:]
  if count < 2 or not builtins.all(isinstance(e, slice) for e in rest):
    return None
  indices = []
  for axis, e in enumerate(parts[:count]):
    n = x.shape[axis]
    i = tf.cast(e, tf.int64) if is_tf(e) else tf.constant(e, tf.int64)
    _check_range(i, n, guard)
    i = tf.where(i < 0, i + n, i)
    indices.append(tf.clip_by_value(i, 0, builtins.max(n - 1, 0)))
  shape = indices[0].shape
  for i in indices[1:]:
    shape = tf.broadcast_static_shape(shape, i.shape)
  out = tf.gather_nd(x, tf.stack([tf.broadcast_to(i, shape)
                                  for i in indices], axis=-1))
  if builtins.all(e == slice(None) for e in rest):
    return out
  return getitem(out, (slice(None),) * shape.rank + tuple(rest), guard)


def _tf_getitem(x, index, guard=None):
  """`x[index]` on one member's tensor, with tensor indices as gathers."""
  tf = _tf()
  parts = _parts(index)
  arrays = [k for k, e in enumerate(parts) if is_tf(e) and e.shape.rank and
            e.dtype.is_integer]
  if arrays and not (builtins.len(arrays) == 1 and builtins.all(
      isinstance(e, slice) for k, e in enumerate(parts) if k != arrays[0])):
    out = _tf_leading_gather(x, parts, guard)
    if out is not None:
      return out
  if len(arrays) == 1 and builtins.all(
      isinstance(e, slice) for k, e in enumerate(parts) if k != arrays[0]):
    # `v[order]`, `m[:, idx]`: one integer array among slices, whose
    # items take the indexed axis's place, as NumPy places them.
    at = arrays[0]
    x = x[tuple(parts[:at]) + (slice(None),) + tuple(parts[at + 1:])]
    axis = builtins.sum(1 for e in parts[:at] if isinstance(e, slice))
    return _checked_gather(x, parts[at], axis, guard)
  if builtins.any(e is Ellipsis or e is None for e in parts) or not (
      builtins.all(isinstance(e, (builtins.int, np.integer, slice)) or
                   (is_tf(e) and e.shape.rank == 0) for e in parts)):
    return x[index]
  # The static parts first (integers and slices with Python bounds), each
  # tensor index kept as a whole axis; then a gather per tensor index,
  # from the last axis back (a gather drops its axis).
  static, gathers, axis = [], [], 0
  masked = _masked_slice(parts)
  for e in parts:
    window = _window(e) if isinstance(e, slice) else None
    if e is masked:
      static.append(slice(None))
      masked_axis = axis
      axis += 1
    elif is_tf(e) or window is not None:
      static.append(slice(None))
      gathers.append((axis, e if window is None else window))
      axis += 1
    elif isinstance(e, slice):
      static.append(e)
      axis += 1
    else:
      static.append(e)
  x = x[tuple(static)] if builtins.any(
      not (isinstance(s, slice) and s == slice(None)) for s in static) else x
  for axis, i in reversed(gathers):
    if isinstance(i, tuple):
      x = _window_gathered(x, axis, *i, guard)
      continue
    i = tf.cast(i, tf.int32) if i.dtype not in (tf.int32, tf.int64) else i
    x = _checked_gather(x, i, axis, guard)
  if masked is not None:
    # The axes before it that gathers dropped.
    masked_axis -= builtins.sum(1 for a, i in gathers
                                if a < masked_axis and not isinstance(i, tuple))
    return _ragged_slice(x, masked_axis, masked)
  return x


def _checked_gather(x, i, axis, guard=None):
  """`tf.gather(x, i, axis=axis)` of one member's index tensor `i` as
  Python reads it: negative indices from the end, one out of the axis
  noted for the member where read (`_check_range`) and clipped into it."""
  tf = _tf()
  n = x.shape[axis]
  if n is None:   # an axis of unknown size
    n = tf.shape(x, out_type=i.dtype)[axis]
    top = tf.maximum(n - 1, 0)
  else:
    top = builtins.max(n - 1, 0)
  _check_range(i, n, guard)
  i = tf.clip_by_value(tf.where(i < 0, i + n, i), 0, top)
  return tf.gather(x, i, axis=axis)


def _masked_slice(parts):
  """The one slice of `parts` whose bounds differ between members and
  whose length is not known when traced (`v[:n]`, `a[i, i + 1:]`), where
  it is held masked (`per_member.ragged`): under XLA, which compiles no
  slice of such a length; else None (outside XLA a statement reducing it
  runs in a loop over the members, `tf_vectorize`)."""
  found = [e for e in parts if isinstance(e, slice) and
           is_tf(e.start, e.stop) and _constant_step(e) and
           (e.step in (None, 1) or not getattr(_local, 'writing', False))
           and _window(e) is None]
  if builtins.len(found) != 1 or getattr(_local, 'exact', False) or (
      not _in_xla_context()):
    return None
  return found[0]


@contextlib.contextmanager
def _flag(name):
  """Inside the block, thread-local flag `name` of this module is set."""
  old = getattr(_local, name, False)
  setattr(_local, name, True)
  try:
    yield
  finally:
    setattr(_local, name, old)


def _reading_to_write():
  """Inside the block, a strided slice of member bounds read is never
  held masked (`_masked_slice`): its items gathered to the front have no
  place in the array they would be written back into."""
  return _flag('writing')


def _constant_step(e):
  """Whether slice `e` has no step or a nonzero Python integer one."""
  return e.step is None or (isinstance(e.step, (builtins.int, np.integer))
                            and not isinstance(e.step, builtins.bool) and
                            e.step != 0)


def _ragged_slice(x, axis, e):
  """One member's `x[..., start:stop:step]` along `axis` (slice `e`, a
  constant step), held masked: a `ragged.Ragged` of `x` with Python's
  bounds; with a step other than 1, of the items it takes gathered to
  the front (as many as the longest slice of the axis can have, those
  past the member's own count clipped into the axis), from 0 to that
  count."""
  tf = _tf()
  n = x.shape[axis]
  step = 1 if e.step is None else builtins.int(e.step)

  def bound(b, default, low, high):
    if b is None:
      return tf.constant(default, tf.int64)
    b = tf.cast(b, tf.int64)
    return tf.clip_by_value(tf.where(b < 0, b + n, b), low, high)
  if step == 1:
    start = bound(e.start, 0, 0, n)
    stop = tf.maximum(bound(e.stop, n, 0, n), start)
    return ragged.Ragged(x, axis, start, stop, ragged.xla_refusal,
                         bounds=(e.start, e.stop))
  # Python's `slice.indices`: a negative step counts down from n - 1.
  if step > 0:
    start, stop = bound(e.start, 0, 0, n), bound(e.stop, n, 0, n)
  else:
    start = bound(e.start, n - 1, -1, n - 1)
    stop = bound(e.stop, -1, -1, n - 1)
  size = builtins.abs(step)
  count = tf.maximum((stop - start + step - (1 if step > 0 else -1))
                     // step, 0)
  longest = -(-n // size)
  at = tf.clip_by_value(start + step * tf.range(longest, dtype=tf.int64),
                        0, builtins.max(n - 1, 0))
  return ragged.Ragged(tf.gather(x, at, axis=axis), axis,
                       tf.constant(0, tf.int64), count, ragged.xla_refusal)


def exact_slices():
  """Inside the block, a slice of member bounds is the slice itself,
  never a window's gather (`_window`): for a member function run in a
  loop over the members, where each member's slice may have a length of
  its own."""
  return _flag('exact')


def _window(e):
  """`(start, length)` of slice `e` of one member's tensors whose bounds
  differ between members but whose length is known when traced
  (`v[j:j + 3]`: the stop is the start plus a constant; step 1), else
  None.  pfor runs a slice of member bounds in a loop over the members,
  which XLA does not compile; the window is a gather."""
  if (e.step not in (None, 1) or not is_tf(e.start, e.stop) or
      getattr(_local, 'exact', False)):
    return None
  if not (hasattr(e.start, 'op') and hasattr(e.stop, 'op')):
    return None   # eager values: the slice itself
  length = _offset(e.stop, e.start)
  if length is None or length < 0:
    return None
  return e.start, length


def _offset(stop, start):
  """The constant `c` with `stop == start + c` where the graph shows it
  (`j + 3` against `j`, `k // 2 + 3` against `k // 2 + 1`, `-j` against
  `-j - 2`), else None."""
  base_stop, c_stop = _split(stop)
  base_start, c_start = _split(start)
  if not _same_value(base_stop, base_start):
    return None
  return c_stop - c_start


def _split(t):
  """`(base, c)` with `t == base + c`, `c` the integer constants added to
  or subtracted from `base` in the graph (0 where none)."""
  tf = _tf()
  c = 0
  while hasattr(t, 'op') and t.op.type in ('AddV2', 'Add', 'Sub'):
    op = t.op
    right = tf.get_static_value(op.inputs[1])
    left = tf.get_static_value(op.inputs[0])
    if right is not None and np.ndim(right) == 0:
      c += builtins.int(right) * (-1 if op.type == 'Sub' else 1)
      t = op.inputs[0]
    elif left is not None and np.ndim(left) == 0 and op.type != 'Sub':
      c += builtins.int(left)
      t = op.inputs[1]
    else:
      break
  return t, c


# Operations whose result is a function of their inputs and attributes
# alone: two of one type, attributes and inputs give one value.
_PURE = frozenset(('AddV2', 'Add', 'Sub', 'Mul', 'FloorDiv', 'FloorMod',
                   'Neg', 'Cast', 'Identity', 'Maximum', 'Minimum'))


def _same_value(a, b, depth=0):
  """Whether tensors `a` and `b` hold one value, as the graph shows
  (one tensor, equal constants, or one pure operation of such inputs)."""
  tf = _tf()
  if a is b:
    return True
  if not (is_tf(a) and is_tf(b)) or depth > 8:
    return False
  ca, cb = tf.get_static_value(a), tf.get_static_value(b)
  if ca is not None or cb is not None:
    return ca is not None and cb is not None and np.array_equal(ca, cb)
  if not (hasattr(a, 'op') and hasattr(b, 'op')):
    return False
  oa, ob = a.op, b.op
  return (oa.type == ob.type and oa.type in _PURE and
          a.value_index == b.value_index and
          oa.node_def.attr == ob.node_def.attr and
          len(oa.inputs) == len(ob.inputs) and builtins.all(
              _same_value(p, q, depth + 1)
              for p, q in zip(oa.inputs, ob.inputs)))


def _window_gathered(x, axis, start, length, guard):
  """`x`'s items `start` to `start + length` along `axis`, as one member's
  slice `x[start:start + length]` gives them where it lies within the
  axis (a negative start counting from its end, as the stop does); a
  member whose slice Python would shorten or wrap is noted as failing
  (`'window'`)."""
  tf = _tf()
  n = x.shape[axis]
  start = tf.cast(start, tf.int64)
  first = tf.where(start < 0, start + n, start)
  stop = start + length
  last = tf.where(stop < 0, stop + n, stop)
  bad = tf.logical_or(tf.logical_or(first < 0, last > n),
                      tf.not_equal(last - first, length))
  if n == 0 or length == 0:
    bad = tf.logical_and(bad, tf.not_equal(last, first))
  note_failure('window', bad, guard)
  at = tf.clip_by_value(first + tf.range(length, dtype=tf.int64), 0,
                        builtins.max(n - 1, 0))
  return tf.gather(x, at, axis=axis)


def getitem(x, index, guard=None):
  """One member's `x[index]`.

  Args:
    x: One member's value (array, tensor, tuple, shape).
    index: The index as Python gives it to `__getitem__`.
    guard: Where the read is in an operand that Python evaluates only
      under a condition (`i < len(x) and x[i] > 0`: `i < len(x)`), that
      condition; a member for which it does not hold never reads the
      item in Python, so it reads a harmless one here (its value is
      discarded) and raises no `IndexError`.  None: always read.

  Returns:
    The item, as Python indexing gives it for one member; on TensorFlow
    an index that is a tensor is a gather.
  """
  if ragged.is_ragged(x, *_parts(index)):
    next(v for v in (x,) + _parts(index) if ragged.is_ragged(v)).refuse()
  index = _lists_as_arrays(x, index)
  parts = _parts(index)
  # A slice's bounds count as the index's values (`TABLE[i:i + 2]`).
  values = [b for e in parts for b in (
      (e.start, e.stop, e.step) if isinstance(e, slice) else (e,))]
  rules = sys.modules.get(_RULES)
  if rules is not None:   # NumPy's rules run: their values first
    member = rules.MemberArray
    if type(x) is member or type(guard) is member or builtins.any(  # pylint: disable=unidiomatic-typecheck
        type(e) is member for e in values):  # pylint: disable=unidiomatic-typecheck
      return rules.getitem(x, index, guard)
  if not is_tf(x, *values) and guard is not None and is_tf(guard):
    # A static read (a shape's item) under a member's condition.
    try:
      return x[index]
    except (IndexError, KeyError):
      return _harmless_item(x, index)
  if is_tf(x, *values):
    if builtins.any(is_tf(e) and e.dtype == _tf().bool and
                    e.shape.rank == 0 for e in parts):
      # TensorFlow reads it as 0 or 1.
      raise member_math.boolean_scalar_index()
    _refuse_inexact_index(parts)
    if not is_tf(x):   # a constant array indexed per member
      x = _constant_table(x)
    if guard is not None and not _plain(guard):
      # Unguarded members may hold any index: clip integers too.
      index = tuple(_tf().constant(e) if isinstance(
          e, (builtins.int, np.integer)) and not isinstance(e, builtins.bool)
                    else e for e in parts)
    return (_tf_getitem(x, index, guard) if _tensor_index(index)
            else x[index])
  if guard is not None and not _as_bool(guard):
    return _harmless_item(x, index)
  return x[index]


def _constant_table(x):
  """A constant (a NumPy array, or a tuple or list of Python numbers such
  as `TRANS = ((1, 0, 2), ...)`) as a tensor of the dtype NumPy gives it:
  TensorFlow's own conversion makes Python ints int32 and floats float32,
  where NumPy, and so the dry run, makes them int64 and float64."""
  if isinstance(x, (builtins.list, tuple)) and not is_tf(*leaves(x)):
    try:
      array = np.asarray(x)
    except ValueError:   # ragged: TensorFlow's own error follows
      array = None
    if array is not None and array.dtype != object:
      return _tf().constant(array)
  return _tf().convert_to_tensor(x)


_INVALID_INDEX = ('only integers, slices (`:`), ellipsis (`...`), '
                  'numpy.newaxis (`None`) and integer or boolean arrays are '
                  'valid indices')
_INVALID_SLICE = ('slice indices must be integers or None or have an '
                  '__index__ method')


def _refuse_inexact_index(parts):
  """NumPy's IndexError (TypeError for a slice's bound) where a member's
  index is a float or complex tensor (`v[n / 2]`), which TensorFlow would
  truncate: its dtype is known when its type is inferred, so it fails
  there, on every backend, as NumPy's does."""
  def inexact(e):
    if isinstance(e, (builtins.float, builtins.complex, np.inexact)):
      return True   # `v[1.0]`: TensorFlow's TypeError otherwise
    return is_tf(e) and (e.dtype.is_floating or e.dtype.is_complex)
  for e in parts:
    if isinstance(e, slice):
      if builtins.any(inexact(b) for b in (e.start, e.stop, e.step)):
        raise _standing(TypeError(_INVALID_SLICE))
    elif inexact(e):
      raise _standing(IndexError(_INVALID_INDEX))


def _standing(error):
  """`error`, marked as NumPy's refusal of the user's code whatever form
  of the primitive runs (`refuses_in_every_form`): type inference tries
  the primitive's promoting form first, and that it fails there is the
  answer (`T[n * 0.5]`: the plain form fails earlier, in `n * 0.5`)."""
  error.refuses_in_every_form = True
  return error


def refuses_in_every_form(error):
  """Whether `error` is NumPy's refusal of the user's code in any form of
  the primitive (`_standing`)."""
  return builtins.bool(getattr(error, 'refuses_in_every_form', False))


def _harmless_item(x, index):
  """Some item of `x` shaped as `x[index]` (integer indices at 0), for a
  read that Python would skip; its value is discarded."""
  try:
    return x[index]
  except (IndexError, KeyError, TypeError):
    pass
  def zeroed(e):
    if isinstance(e, (builtins.int, np.integer)) and not isinstance(
        e, builtins.bool):
      return 0
    if isinstance(e, np.ndarray) and e.dtype.kind in 'iu':
      return np.zeros_like(e)
    return e
  try:
    return x[tuple(zeroed(e) for e in _parts(index)) if isinstance(
        index, tuple) else zeroed(index)]
  except (IndexError, KeyError, TypeError):
    return 0


def numpy_dtype(x):
  """`x`, or NumPy's dtype where it is a TensorFlow `DType` (a tensor's
  `.dtype`) or a tensor (as NumPy's `np.finfo(a)` reads an array's)."""
  tf = sys.modules.get('tensorflow')
  if tf is None:
    return x
  if isinstance(x, tf.dtypes.DType):
    return np.dtype(x.as_numpy_dtype)
  if is_tf(x):
    return np.dtype(x.dtype.as_numpy_dtype)
  return x


# NumPy's facts of a dtype, given a tensor's (`np.finfo(x.dtype).eps`).
DTYPE_INFO = (np.finfo, np.iinfo)


def dtype_info(func, *args, **kwargs):
  """`np.finfo` or `np.iinfo` (`func`) of a dtype, a tensor's included."""
  return func(*[numpy_dtype(a) for a in args],
              **{k: numpy_dtype(v) for k, v in kwargs.items()})


def asarray(value, dtype=None):
  """One member's `np.array(value, dtype)` / `np.asarray`: nested lists of
  one member's values and numbers stacked.

  Args:
    value: An array, a tensor, or nested lists or tuples of values.
    dtype: The dtype, or None.

  Returns:
    A tensor where any value is one, else a NumPy (per-member) array.
  """
  if is_tf(*leaves(value)):
    tf = _tf()
    def stack(v):
      if isinstance(v, (list, tuple)):
        items = [stack(e) for e in v]
        joint = np.result_type(*[i.dtype.as_numpy_dtype for i in items])
        return tf.stack([tf.cast(i, joint) for i in items])
      return tf.convert_to_tensor(v)
    result = stack(value)
    return result if dtype is None else tf.cast(result, dtype)
  if dtype is not None and not isinstance(dtype, str):
    dtype = numpy_dtype(dtype)
  return _numpy_rules().asarray(value, dtype)


def call(func, *args, **kwargs):
  """One member's call of a NumPy scalar type, creation function, or NumPy
  function given a list (`np.float64(x)`, `np.zeros(n, dtype=x.dtype)`,
  `np.sum([a, b])`), which NumPy's protocols do not dispatch, or of a
  user's helper (`member_helpers.member_helper`: its own such calls
  rewritten).

  On TensorFlow a scalar type casts the tensor, and a tensor's dtype
  passed to NumPy is its NumPy dtype (`np.zeros(W, dtype=x.dtype)` makes a
  constant); a tensor passed to any other NumPy function reaches it as
  it is (TensorFlow users write TensorFlow ops).  On NumPy it is
  `numpy_rules.call`.

  Args:
    func: The NumPy function or type called.
    *args, **kwargs: Its arguments, as one member gives them.

  Returns:
    What `func` gives for one member.
  """
  if member_helpers.is_helper(func):
    ops = sys.modules[__name__]
    args, kwargs = member_helpers.helper_arguments(
        args, kwargs, lambda f: member_helpers.member_helper(f, ops))
    return member_helpers.member_helper(func, ops)(*args, **kwargs)
  if func in DTYPE_INFO:
    return dtype_info(func, *args, **kwargs)
  values = leaves(list(args)) + leaves(list(kwargs.values()))
  if ragged.is_ragged(*values):
    if not ragged.is_ragged(*args, *kwargs.values()):
      next(v for v in values if ragged.is_ragged(v)).refuse()
    return ragged.call(func, args, kwargs)
  if is_tf(*values):
    func = nan_free(func, args)
    if (isinstance(func, type) and issubclass(func, np.generic)
        and len(args) == 1 and not kwargs):
      return _tf().cast(args[0], func)
    if func in member_helpers.LIKE and args and is_tf(args[0]):
      return tf_like(func, *args, **kwargs)
    if (func in member_helpers.TF_NUMPY_BATCH or
        func in member_helpers.ROUNDING):
      return tnp_call(func, args, kwargs)
    if func in member_helpers.TF_CREATION:
      return getattr(_tnp(), func.__name__)(*args, **kwargs)
    if func in member_helpers.LINALG:
      return tf_linalg(func, *args, **kwargs)
    if func in member_helpers.TF_OWN:
      return getattr(sys.modules[__name__],
                     'tf_' + member_helpers.TF_OWN[func])(*args, **kwargs)
    return func(*args, **kwargs)
  if func in member_helpers.LINALG:
    return func(*args, **kwargs)   # NumPy's own rules (`numpy_linalg`)
  tf = sys.modules.get('tensorflow')
  if tf is not None:
    def numpy_dtype(x):
      return x.as_numpy_dtype if isinstance(x, tf.dtypes.DType) else x
    args = [numpy_dtype(a) for a in args]
    kwargs = {k: numpy_dtype(v) for k, v in kwargs.items()}
  return _numpy_rules().call(func, *args, **kwargs)


def tf_searchsorted(a, v, side='left', sorter=None):
  """One member's `np.searchsorted(a, v, side)` of a sorted vector `a`
  on TensorFlow (`tf.searchsorted`): int64 positions of `v`'s shape.

  Args:
    a: The sorted vector.
    v: A value or an array of values to place.
    side: `'left'` or `'right'`, as NumPy's.
    sorter: Unsupported on TensorFlow (NumPy's then refuses the tensor).

  Returns:
    The positions.
  """
  tf = _tf()
  a = tf.convert_to_tensor(a)
  if sorter is not None or a.shape.rank != 1 or side not in ('left',
                                                             'right'):
    return np.searchsorted(a, v, side=side, sorter=sorter)
  v = tf.convert_to_tensor(v)
  if v.dtype != a.dtype:
    joint = tf.as_dtype(np.result_type(a.dtype.as_numpy_dtype,
                                       v.dtype.as_numpy_dtype))
    a, v = tf.cast(a, joint), tf.cast(v, joint)
  out = tf.searchsorted(a, tf.reshape(v, [-1]), side=side,
                        out_type=tf.int64)
  return tf.reshape(out, tf.shape(v))


def tf_digitize(x, bins, right=False):
  """`np.digitize(x, bins, right)` on TensorFlow: int64 bin indices of
  `x`'s shape, as NumPy's.

  Bins known when traced (a table, `np.linspace` of numbers) search by
  `tf.searchsorted`, on the side NumPy's `right` names, from the end for
  decreasing bins.  Bins of a member's values count the edges below `x`
  (increasing bins) or above it (decreasing), each member's direction
  read from its bins; a member whose bins are neither fails with NumPy's
  `ValueError` (`note_failure`).

  Args:
    x: A value or an array of values to place.
    bins: A vector of increasing or decreasing bin edges.
    right: Whether each bin holds its right edge, as NumPy's.

  Returns:
    The bin indices.
  """
  tf = _tf()
  static = tf.get_static_value(bins) if is_tf(bins) else np.asarray(bins)
  rank = static.ndim if static is not None else bins.shape.rank
  if rank != 1:
    raise ValueError('object too deep for desired array' if rank else
                     'object of too small depth for desired array')
  if (static is not None and np.iscomplexobj(static)) or (
      is_tf(x) and x.dtype.is_complex) or np.iscomplexobj(
          x if not is_tf(x) else 0):
    raise TypeError('x may not be complex')
  side = 'left' if right else 'right'
  if static is not None:
    steps = np.diff(static)
    if np.all(steps >= 0):
      return tf_searchsorted(static, x, side=side)
    if np.all(steps <= 0):
      return tf.cast(len(static), tf.int64) - tf_searchsorted(
          static[::-1].copy(), x, side=side)
    raise ValueError('bins must be monotonically increasing or decreasing')
  x = tf.convert_to_tensor(x)
  if x.dtype != bins.dtype:
    joint = tf.as_dtype(np.result_type(x.dtype.as_numpy_dtype,
                                       bins.dtype.as_numpy_dtype))
    x, bins = tf.cast(x, joint), tf.cast(bins, joint)
  steps = bins[1:] - bins[:-1]
  rising = tf.reduce_all(steps >= 0)
  falling = tf.reduce_all(steps <= 0)
  note_failure('digitize_bins', tf.logical_not(tf.logical_or(rising,
                                                             falling)))
  edges = tf.reshape(bins, [1] * x.shape.rank + [-1])
  at = x[..., None]
  below = (edges < at) if right else (edges <= at)
  above = (edges >= at) if right else (edges > at)
  def count(flags):
    return tf.reduce_sum(tf.cast(flags, tf.int64), axis=-1)
  return tf.where(rising, count(below), count(above))


def tf_interp(x, xp, fp, left=None, right=None, period=None):
  """One member's `np.interp(x, xp, fp)` on TensorFlow: linear between
  the points of increasing `xp`, `fp[0]` (or `left`) below them and
  `fp[-1]` (or `right`) above, float64 as NumPy's."""
  if period is not None:
    raise TypeError('np.interp with period= is not supported on TensorFlow')
  if ragged.is_ragged(xp, fp):
    # Points of a member's bound, under XLA (`XS[:n]`): searched masked.
    return ragged.interp(x, xp, fp, left, right)
  tf = _tf()
  x, xp, fp = (tf.cast(tf.convert_to_tensor(v), tf.float64)
               for v in (x, xp, fp))
  # The points' count, known only when run where a slice of a member's
  # bound gave them (`XS[:i + 1]` in a loop over the members).
  n = xp.shape[0] if xp.shape[0] is not None else tf.shape(xp)[0]
  y = ragged.tf_line(tf.reshape(x, [-1]), xp, xp, fp,
                     tf.constant(0, tf.int64),
                     tf.maximum(tf.cast(n, tf.int64), 1), left, right)
  return tf.reshape(y, tf.shape(x))


def _tf_sorted(a, axis):
  """`a` as float64 sorted along `axis` (all of it, flattened, for None),
  with that axis last, and its length."""
  tf = _tf()
  a = _floating(a)
  if axis is None:
    a = tf.reshape(a, [-1])
    axis = 0
  axis = builtins.int(axis) % a.shape.rank
  a = tf.experimental.numpy.moveaxis(a, axis, -1)
  return tf.sort(a, axis=-1), a.shape[-1]


def tf_quantile(a, q, axis=None, keepdims=False, method='linear'):
  """One member's `np.quantile(a, q, axis)` on TensorFlow: the sorted
  values interpolated linearly at q (n - 1), NumPy's default method;
  `q` a number or a vector."""
  if keepdims or method != 'linear':
    raise TypeError('np.quantile/percentile/median with keepdims= or a '
                    'method other than linear is not supported on '
                    'TensorFlow')
  tf = _tf()
  s, n = _tf_sorted(a, axis)
  q = (tf.cast(q, s.dtype) if is_tf(q) else
       tf.constant(np.asarray(q, np.float64), s.dtype))
  at = q * (n - 1)
  lo = tf.clip_by_value(tf.math.floor(at), 0, n - 1)
  hi = tf.clip_by_value(tf.math.ceil(at), 0, n - 1)
  below = tf.gather(s, tf.cast(lo, tf.int64), axis=-1)
  above = tf.gather(s, tf.cast(hi, tf.int64), axis=-1)
  out = below + (above - below) * (at - lo)
  if q.shape.rank:   # the quantiles first, as NumPy puts them
    out = tf.experimental.numpy.moveaxis(out, -1, 0)
  return out


def tf_percentile(a, q, axis=None, keepdims=False, method='linear'):
  """One member's `np.percentile(a, q, axis)` on TensorFlow."""
  q = (_tf().cast(q, _tf().float64) if is_tf(q) else
       np.asarray(q, np.float64)) / 100
  return tf_quantile(a, q, axis, keepdims, method)


def tf_median(a, axis=None, keepdims=False):
  """One member's `np.median(a, axis)` on TensorFlow."""
  return tf_quantile(a, 0.5, axis, keepdims)


def _tf_nan_filled(a, fill):
  """`(a with its NaNs made fill, where a is NaN)` of a float tensor."""
  tf = _tf()
  a = tf.convert_to_tensor(a)
  nan = tf.math.is_nan(a)
  return tf.where(nan, tf.cast(fill, a.dtype), a), nan


def _tf_nan_extreme(reduce, fill, a, axis=None, out=None, keepdims=False):
  """NumPy's `np.nanmax`/`np.nanmin` of a float tensor: NaN where a
  slice is all NaN (where NumPy warns)."""
  tf = _tf()
  if out is not None:
    raise TypeError('out= is not supported on TensorFlow')
  filled, nan = _tf_nan_filled(a, fill)
  axis = _tf_axis(axis)
  value = reduce(filled, axis=axis, keepdims=keepdims)
  empty = tf.reduce_all(nan, axis=axis, keepdims=keepdims)
  return tf.where(empty, tf.constant(np.nan, value.dtype), value)


def _tf_axis(axis):
  """NumPy's `axis` as TensorFlow's reductions take it."""
  return builtins.list(axis) if isinstance(axis, builtins.tuple) else axis


def tf_nanmax(a, axis=None, out=None, keepdims=False):
  """One member's `np.nanmax` of a float tensor on TensorFlow (of
  integers, `nan_free` makes it `np.max`)."""
  return _tf_nan_extreme(_tf().reduce_max, -np.inf, a, axis, out, keepdims)


def tf_nanmin(a, axis=None, out=None, keepdims=False):
  """One member's `np.nanmin` of a float tensor on TensorFlow."""
  return _tf_nan_extreme(_tf().reduce_min, np.inf, a, axis, out, keepdims)


def _tf_nan_arg(arg, fill, a, axis=None, out=None, keepdims=False):
  """NumPy's `np.nanargmax`/`np.nanargmin` of a float tensor: a member
  with an all-NaN slice fails with NumPy's ValueError (`note_failure`)."""
  tf = _tf()
  if out is not None or keepdims:
    raise TypeError('out= and keepdims= of np.nanargmax/np.nanargmin are '
                    'not supported on TensorFlow')
  filled, nan = _tf_nan_filled(a, fill)
  if axis is None:
    filled, nan, axis = tf.reshape(filled, [-1]), tf.reshape(nan, [-1]), 0
  note_failure('all_nan', tf.reduce_any(tf.reduce_all(nan, axis=axis)))
  return arg(filled, axis=axis, output_type=tf.int64)


def tf_nanargmax(a, axis=None, out=None, keepdims=False):
  """One member's `np.nanargmax` of a float tensor on TensorFlow."""
  return _tf_nan_arg(_tf().argmax, -np.inf, a, axis, out, keepdims)


def tf_nanargmin(a, axis=None, out=None, keepdims=False):
  """One member's `np.nanargmin` of a float tensor on TensorFlow."""
  return _tf_nan_arg(_tf().argmin, np.inf, a, axis, out, keepdims)


def tf_nancumsum(a, axis=None, dtype=None, out=None):
  """One member's `np.nancumsum` of a float tensor on TensorFlow: NaN
  counts as 0."""
  if out is not None:
    raise TypeError('out= is not supported on TensorFlow')
  return _tnp().cumsum(_tf_nan_filled(a, 0)[0], axis=axis, dtype=dtype)


def tf_nancumprod(a, axis=None, dtype=None, out=None):
  """One member's `np.nancumprod` of a float tensor on TensorFlow: NaN
  counts as 1."""
  if out is not None:
    raise TypeError('out= is not supported on TensorFlow')
  return _tnp().cumprod(_tf_nan_filled(a, 1)[0], axis=axis, dtype=dtype)


def tf_nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
  """One member's `np.nanvar` of a float tensor on TensorFlow: over the
  values that are not NaN; NaN where fewer than `ddof + 1` are (where
  NumPy warns)."""
  tf = _tf()
  if out is not None:
    raise TypeError('out= is not supported on TensorFlow')
  filled, nan = _tf_nan_filled(a, 0)
  if dtype is not None:
    filled = tf.cast(filled, tf.as_dtype(np.dtype(dtype)))
  axis = _tf_axis(axis)
  count = tf.reduce_sum(tf.cast(tf.logical_not(nan), filled.dtype),
                        axis=axis, keepdims=True)
  mean = tf.reduce_sum(filled, axis=axis, keepdims=True) / count
  deviation = tf.where(nan, tf.zeros_like(filled), filled - mean)
  total = tf.reduce_sum(deviation * deviation, axis=axis,
                        keepdims=keepdims)
  if not keepdims:
    count = tf.reduce_sum(tf.cast(tf.logical_not(nan), filled.dtype),
                          axis=axis)
  left = count - tf.cast(ddof, filled.dtype)
  return tf.where(left > 0, total / tf.where(left > 0, left, 1),
                  tf.constant(np.nan, filled.dtype))


def tf_nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
  """One member's `np.nanstd` of a float tensor on TensorFlow."""
  return _tf().sqrt(tf_nanvar(a, axis, dtype, out, ddof, keepdims))


def tf_polyval(p, x):
  """One member's `np.polyval(p, x)` on TensorFlow (Horner's rule over
  the coefficients, highest power first), in NumPy's dtype: a list of
  Python numbers is NumPy's array of them (int64, float64), not
  TensorFlow's (int32, float32)."""
  return _tf_polyval(p, x)


def tf_arange(start, stop=None, step=1, dtype=None):
  """One member's `np.arange` with a tensor among its bounds (`tf.range`):
  NumPy's default int where all are integers, else float64, as NumPy
  gives them."""
  tf = _tf()
  if stop is None:
    start, stop = 0, start
  bounds = [start, stop, step]
  if dtype is None:
    integral = all(
        np.dtype(b.dtype.as_numpy_dtype).kind in 'iub' if is_tf(b) else
        isinstance(b, (builtins.int, np.integer)) for b in bounds)
    dtype = np.dtype(np.int_ if integral else np.float64)
  dtype = tf.as_dtype(np.dtype(dtype))
  bounds = [tf.cast(b, dtype) for b in bounds]
  return tf.range(*bounds, dtype=dtype)


def tf_eye(n, m=None, k=0, dtype=np.float64):
  """One member's `np.eye(n)` / `np.identity(n)` of a tensor size."""
  if k:
    raise errors.PerMemberError(
        'np.eye with k= of a per-member size is not supported on '
        'TensorFlow', hint='Build the matrix from np.arange: '
        '(np.arange(n)[:, None] + k == np.arange(m)).astype(float).')
  tf = _tf()
  return tf.eye(n, m, dtype=tf.as_dtype(np.dtype(dtype)))


def _tnp():
  return _tf().experimental.numpy


def tf_linalg(func, *args, **kwargs):
  """NumPy's linear algebra function `func` (`member_helpers.LINALG`) on
  TensorFlow tensors, by `tf.linalg`, as NumPy computes it.

  `solve`'s right side is a vector where it has one axis, `norm`'s
  vector and matrix norms as `_tf_norm` lists them, `qr` reduced.  Other
  arguments than NumPy's defaults go to NumPy, which refuses the tensors.

  Args:
    func: The NumPy function.
    *args, **kwargs: Its arguments.

  Returns:
    Its result, as tensors.
  """
  tf = _tf()
  name = func.__name__
  a = tf.convert_to_tensor(args[0]) if args else None
  if name == 'solve' and builtins.len(args) == 2 and not kwargs:
    b = tf.convert_to_tensor(args[1])
    if b.dtype != a.dtype:
      joint = tf.as_dtype(np.result_type(a.dtype.as_numpy_dtype,
                                         b.dtype.as_numpy_dtype))
      a, b = tf.cast(a, joint), tf.cast(b, joint)
    if b.shape.rank == 1:
      return tf.linalg.solve(a, b[:, None])[:, 0]
    return tf.linalg.solve(a, b)
  if name == 'norm' and builtins.len(args) <= 4 and set(kwargs) <= {
      'ord', 'axis', 'keepdims'}:
    given = builtins.dict(builtins.zip(('ord', 'axis', 'keepdims'),
                                       args[1:]))
    if not set(given) & set(kwargs):
      given.update(kwargs)
      out = _tf_norm(a, given.get('ord'), given.get('axis'),
                     builtins.bool(given.get('keepdims', False)))
      if out is not None:
        return out
  if name == 'qr' and builtins.len(args) == 1 and not kwargs:
    return tf.linalg.qr(a)
  if name == 'svd' and builtins.len(args) == 1 and set(kwargs) <= {
      'compute_uv', 'full_matrices'}:
    if a.dtype.is_integer:
      a = tf.cast(a, tf.float64)
    if not kwargs.get('compute_uv', True):
      return tf.linalg.svd(a, compute_uv=False)
    s, u, v = tf.linalg.svd(a, full_matrices=kwargs.get('full_matrices',
                                                       True))
    # NumPy's order and its V^H.
    return u, s, tf.linalg.adjoint(v)
  if (name == 'matrix_power' and builtins.len(args) == 2 and not kwargs and
      isinstance(args[1], (builtins.int, np.integer)) and args[1] >= 0):
    # By squaring, as NumPy computes it (a power known when traced); of
    # integers TensorFlow's products lack in int64 (`ops.tf_in_int64`).
    def by_squaring(a):
      n, power = builtins.int(args[1]), tf.eye(a.shape[-1], dtype=a.dtype)
      square = a
      while n:
        if n & 1:
          power = tf.linalg.matmul(power, square)
        n >>= 1
        if n:
          square = tf.linalg.matmul(square, square)
      return power
    dtype = np.dtype(a.dtype.as_numpy_dtype)
    if dtype.kind in 'iub' and dtype not in _NATIVE_PRODUCTS:
      return ops.tf_in_int64(by_squaring, (a,), dtype)
    return by_squaring(a)
  if builtins.len(args) == 1 and not kwargs and name != 'norm':
    if a.dtype.is_integer:
      a = tf.cast(a, tf.float64)
    if name in ('det', 'slogdet') and _in_xla_context():
      # TensorFlow's determinant kernels have no XLA form.
      sign, log = _slogdet_by_elimination(a)
      return (sign, log) if name == 'slogdet' else sign * tf.exp(log)
    return {'inv': tf.linalg.inv, 'det': tf.linalg.det,
            'slogdet': tf.linalg.slogdet, 'cholesky': tf.linalg.cholesky,
            'eigh': tf.linalg.eigh, 'eigvalsh': tf.linalg.eigvalsh,
            'pinv': tf.linalg.pinv}[name](a)
  return func(*args, **kwargs)


def _tf_norm(a, ord_, axis, keepdims):
  """`np.linalg.norm(a, ord_, axis, keepdims)` of a tensor: vector norms
  (`ord_` None, a number, +-inf, 0) along one axis, matrix norms (None,
  'fro', +-1, +-inf) over two, the 2-norm of every element without
  `axis` and `ord_`; None for the others (2-norms of matrices: singular
  values), which go to NumPy."""
  tf = _tf()
  rank = a.shape.rank
  if a.dtype.is_integer or a.dtype.is_bool:
    a = tf.cast(a, tf.float64)
  mag = tf.abs(a)
  if axis is None:
    if ord_ is None:
      axes = builtins.list(builtins.range(rank))
      return _reduced(tf.sqrt(tf.reduce_sum(mag * mag, axis=axes,
                                            keepdims=True)), axes, keepdims)
    if rank not in (1, 2):
      return None
    axis = 0 if rank == 1 else (0, 1)
  if isinstance(axis, builtins.int):
    ax = [axis % rank]
    if ord_ is None or ord_ == 2:
      out = tf.sqrt(tf.reduce_sum(mag * mag, axis=ax, keepdims=True))
    elif ord_ == 1:
      out = tf.reduce_sum(mag, axis=ax, keepdims=True)
    elif ord_ == np.inf:
      out = tf.reduce_max(mag, axis=ax, keepdims=True)
    elif ord_ == -np.inf:
      out = tf.reduce_min(mag, axis=ax, keepdims=True)
    elif ord_ == 0:
      out = tf.reduce_sum(tf.cast(mag != 0, mag.dtype), axis=ax,
                          keepdims=True)
    elif isinstance(ord_, (builtins.int, builtins.float)):
      out = tf.reduce_sum(mag ** ord_, axis=ax, keepdims=True) ** (
          1.0 / ord_)
    else:
      return None
    return _reduced(out, ax, keepdims)
  if (isinstance(axis, builtins.tuple) and builtins.len(axis) == 2 and
      builtins.all(isinstance(x, builtins.int) for x in axis)):
    rows, cols = (x % rank for x in axis)
    if rows == cols:
      return None
    if ord_ is None or ord_ == 'fro':
      out = tf.sqrt(tf.reduce_sum(mag * mag, axis=[rows, cols],
                                  keepdims=True))
    elif ord_ in (1, -1):      # the largest (smallest) column sum
      sums = tf.reduce_sum(mag, axis=rows, keepdims=True)
      out = (tf.reduce_max if ord_ == 1 else tf.reduce_min)(
          sums, axis=cols, keepdims=True)
    elif ord_ in (np.inf, -np.inf):   # the largest (smallest) row sum
      sums = tf.reduce_sum(mag, axis=cols, keepdims=True)
      out = (tf.reduce_max if ord_ == np.inf else tf.reduce_min)(
          sums, axis=rows, keepdims=True)
    else:
      return None
    return _reduced(out, [rows, cols], keepdims)
  return None


def _reduced(out, axes, keepdims):
  return out if keepdims else _tf().squeeze(out, axis=axes)


def _in_xla_context():
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = _tf().compat.v1.get_default_graph()
  return (not _tf().executing_eagerly() and
          builtins.bool(control_flow_util.GraphOrParentsInXlaContext(graph)))


def _slogdet_by_elimination(a):
  """`np.linalg.slogdet(a)` of real matrices (any leading axes, a static
  size) by Gaussian elimination with partial pivoting, unrolled over the
  columns, in operations XLA compiles: the sign is the pivots' signs
  times each row swap's -1, the log the sum of the pivots' logs of
  magnitudes; a matrix with a zero pivot has sign 0 and log -inf."""
  tf = _tf()
  n = a.shape[-1]
  batch = a.shape.rank - 2
  sign = tf.ones(tf.shape(a)[:-2], a.dtype)
  log = tf.zeros(tf.shape(a)[:-2], a.dtype)
  singular = tf.zeros(tf.shape(a)[:-2], tf.bool)
  rows = tf.range(n)
  for k in range(n):
    p = tf.argmax(tf.abs(a[..., k:, k]), axis=-1, output_type=tf.int32) + k
    swap = tf.where(rows == k, p[..., None],
                    tf.where(rows == p[..., None], k, rows))
    a = tf.gather(a, swap, axis=batch, batch_dims=batch)
    sign = tf.where(p == k, sign, -sign)
    pivot = a[..., k, k]
    zero = tf.equal(pivot, 0)
    singular = singular | zero
    sign = sign * tf.sign(pivot)
    log = log + tf.math.log(tf.abs(tf.where(zero, tf.ones_like(pivot),
                                            pivot)))
    if k + 1 < n:
      factors = a[..., k + 1:, k] / tf.where(zero, tf.ones_like(pivot),
                                             pivot)[..., None]
      a = tf.concat([a[..., :k + 1, :], a[..., k + 1:, :] -
                     factors[..., None] * a[..., k:k + 1, :]], axis=-2)
  return (tf.where(singular, tf.zeros_like(sign), sign),
          tf.where(singular, tf.fill(tf.shape(log), tf.constant(
              -np.inf, a.dtype)), log))


def _tf_round(a, decimals=0, out=None):
  """`np.round(a, decimals)` of a tensor: half to even, as NumPy's (scaled
  by 10 ** decimals where it is not 0), an integer unchanged where
  `decimals >= 0`, a boolean NumPy's float16.  (TensorFlow's NumPy API's
  `round` calls `astype`, which a tensor lacks without NumPy behavior
  enabled.)"""
  _refuse_out('round', out)
  tf = _tf()
  a = tf.convert_to_tensor(a)
  decimals = builtins.int(decimals)
  if a.dtype == tf.bool:
    if decimals:
      raise TypeError('np.round of booleans with decimals: NumPy cannot '
                      'cast its float16 product back to bool')
    return tf.cast(a, tf.float16)
  if a.dtype.is_integer:
    if decimals >= 0:
      return a
    scale = 10 ** -decimals
    return tf.cast(tf.math.round(tf.cast(a, tf.float64) / scale) * scale,
                   a.dtype)
  if not decimals:
    return tf.math.round(a)
  scale = tf.constant(10.0 ** builtins.abs(decimals), a.dtype)
  if decimals > 0:
    return tf.math.round(a * scale) / scale
  return tf.math.round(a / scale) * scale


def _floating(x):
  """`x` as a tensor of its float dtype, or float64 where it has none."""
  tf = _tf()
  x = tf.convert_to_tensor(x)
  return x if x.dtype.is_floating else tf.cast(x, tf.float64)


def _refuse_out(name, out):
  if out is not None:
    raise TypeError(f'np.{name} with out= is not supported on TensorFlow')


def _tf_whole(func, x, out=None):
  """`np.floor`, `np.ceil`, `np.trunc` or `np.fix` (`func`) of a tensor:
  an integer or boolean one unchanged, in the dtype the installed NumPy
  gives (its own from NumPy 2.1, a float before); a float's rounded
  toward minus or plus infinity, or zero."""
  _refuse_out(func.__name__, out)
  tf = _tf()
  x = tf.convert_to_tensor(x)
  if x.dtype.is_integer or x.dtype == tf.bool:
    dtype = np.asarray(func(np.zeros((), x.dtype.as_numpy_dtype))).dtype
    return x if dtype == x.dtype.as_numpy_dtype else tf.cast(x, dtype)
  if func is np.floor:
    return tf.math.floor(x)
  if func is np.ceil:
    return tf.math.ceil(x)
  return tf.where(x < 0, tf.math.ceil(x), tf.math.floor(x))


def _tf_rint(x, out=None):
  """`np.rint(x)` of a tensor: half to even, of the float dtype NumPy
  gives (float16 for a boolean or int8, float64 for an int64)."""
  _refuse_out('rint', out)
  tf = _tf()
  x = tf.convert_to_tensor(x)
  if not x.dtype.is_floating:
    x = tf.cast(x, np.rint(np.zeros((), x.dtype.as_numpy_dtype)).dtype)
  return tf.math.round(x)


# The forms of `member_helpers.ROUNDING`.
_TF_ROUNDING = {np.round: _tf_round, np.around: _tf_round,
                np.trunc: functools.partial(_tf_whole, np.trunc),
                np.fix: functools.partial(_tf_whole, np.fix),
                np.floor: functools.partial(_tf_whole, np.floor),
                np.ceil: functools.partial(_tf_whole, np.ceil),
                np.rint: _tf_rint}


def tnp_call(func, args, kwargs):
  """NumPy function `func` by TensorFlow's NumPy API, on one member's
  tensors (or a batch-aware primitive's): a ufunc's integer or boolean
  tensors first cast to the dtype NumPy gives it (`np.sqrt` of int32 is
  float64, `np.square` of booleans int8), which the API does not do;
  NumPy's arguments that the API lacks (`initial=`, `where=`,
  `prepend=`, `pad`'s default mode) by forms of their own."""
  rounded = _TF_ROUNDING.get(func)
  if rounded is not None:
    return rounded(*args, **kwargs)
  func = nan_free(func, args)
  tensor = builtins.bool(args) and is_tf(args[0])
  narrow = _tf_narrow_integers(func, args, kwargs)
  if narrow is not None:
    return narrow
  if tensor and func in _REDUCTIONS and ('where' in kwargs or
                                         'initial' in kwargs):
    return _tf_reduction(func, *args, **kwargs)
  extreme = _EXTREMES.get(func)
  if extreme is not None and tensor:
    return _tf_extreme(func, extreme, *args, **kwargs)
  if func in (np.var, np.std) and kwargs.get('ddof') and tensor:
    return _tf_spread(func, *args, **kwargs)
  if func is np.diff and tensor and ('prepend' in kwargs or
                                     'append' in kwargs):
    return _tf_diff(*args, **kwargs)
  if func is np.pad and tensor:
    return _tf_pad(*args, **kwargs)
  if func is np.take and tensor:
    return _tf_take(*args, **kwargs)
  if func is np.clip and tensor and args[0].dtype.is_integer:
    # A bound its integer dtype cannot hold is no bound there (NumPy's
    # `np.clip(n, -5, 300)` of an int8); TensorFlow would wrap it.
    info = np.iinfo(args[0].dtype.as_numpy_dtype)
    args = (args[0],) + tuple(
        builtins.min(builtins.max(b, info.min), info.max)
        if type(b) is builtins.int else b for b in args[1:])
    kwargs = {k: (builtins.min(builtins.max(b, info.min), info.max)
                  if type(b) is builtins.int else b)
              for k, b in kwargs.items()}
  if func is np.polyval and is_tf(*leaves(list(args) + list(
      kwargs.values()))):
    return _tf_polyval(*args, **kwargs)
  if func in _ACCUMULATIONS and tensor and inspect.signature(func).bind(
      *args, **kwargs).arguments.get('dtype') is None:
    # A sum of booleans or narrow integers is NumPy's default integer.
    a = _tf().convert_to_tensor(args[0])
    kind = np.dtype(a.dtype.as_numpy_dtype).kind
    if kind == 'b' or (kind in 'iu' and a.dtype.size < 8):
      args = (_tf().cast(a, np.uint if kind == 'u' else np.int_),) + tuple(
          args[1:])
  if func in _SCANS and tensor:
    a = _tf().convert_to_tensor(args[0])
    dtype = inspect.signature(func).bind(*args, **kwargs).arguments.get(
        'dtype')
    if (a.dtype.is_unsigned if dtype is None else
        np.dtype(getattr(dtype, 'as_numpy_dtype', dtype)).kind == 'u'):
      return _tf_unsigned_scan(func, *args, **kwargs)
  if func in (np.sort, np.argsort) and tensor and args[0].dtype == (
      _tf().bool):
    # TensorFlow sorts no booleans: as integers.
    out = getattr(_tnp(), func.__name__)(_tf().cast(args[0], _tf().int8),
                                         *args[1:], **kwargs)
    return _tf().cast(out, _tf().bool) if func is np.sort else out
  if isinstance(func, np.ufunc) and not kwargs:
    tf = _tf()
    dummies = [np.zeros((), x.dtype.as_numpy_dtype) if is_tf(x) else x
               for x in args]
    try:
      with np.errstate(all='ignore'):
        out = func(*dummies)
    except Exception:  # pylint: disable=broad-except
      out = None   # TensorFlow's API says why
    if out is not None:
      dtype = np.asarray(out[0] if isinstance(out, tuple) else out).dtype
      if dtype.kind in 'fc':
        args = [tf.cast(x, dtype) if is_tf(x) and np.dtype(
            x.dtype.as_numpy_dtype).kind in 'iub' else x for x in args]
      elif dtype.kind in 'iu':
        args = [tf.cast(x, dtype) if is_tf(x) and x.dtype == tf.bool else x
                for x in args]
      elif func in _SAME_FOR_BOOLEANS and len(args) == 1 and is_tf(
          args[0]) and args[0].dtype == tf.bool:
        return args[0]
  return getattr(_tnp(), _TNP_NAMES.get(func, func.__name__))(*args,
                                                              **kwargs)


# NumPy's functions that TensorFlow's NumPy API has by another of their
# names (`np.invert` is `np.bitwise_not`).
_TNP_NAMES = {np.invert: 'bitwise_not'}


# NumPy's NaN-skipping functions, by the function they are of integers
# and booleans (which hold no NaN).
_NAN_FREE = {getattr(np, n): getattr(np, n[3:]) for n in (
    'nansum', 'nanprod', 'nanmean', 'nanmax', 'nanmin', 'nanargmax',
    'nanargmin', 'nancumsum', 'nancumprod', 'nanvar', 'nanstd',
    'nanmedian', 'nanpercentile', 'nanquantile') if hasattr(np, n)}


def nan_free(func, args):
  """`func`, or for a NaN-skipping one (`np.nansum`) of an integer or
  boolean tensor the plain one, which NumPy computes there: TensorFlow's
  NumPy API's `nansum` of integers calls `astype`, which a tensor lacks,
  and it has no `nanmax`."""
  plain = _NAN_FREE.get(func)
  if plain is None or not args or not is_tf(args[0]):
    return func
  dtype = _tf().as_dtype(args[0].dtype)
  return plain if dtype.is_integer or dtype.is_bool else func


# NumPy's products, whose TensorFlow kernels lack integers but int32 and
# int64 (and booleans), computed in int64 (`ops.tf_in_int64`).
_PRODUCTS = frozenset((np.dot, np.matmul, np.einsum, np.inner, np.outer,
                       np.vdot, np.tensordot, np.kron))
# NumPy's ufuncs that TensorFlow lacks for unsigned integers
# (`ops.tf_unsigned_gap`).
_UNSIGNED_GAPS = frozenset((np.abs, np.absolute, np.sign, np.negative))
# The integer dtypes whose products every TensorFlow kernel has.
_NATIVE_PRODUCTS = frozenset((np.dtype(np.int32), np.dtype(np.int64)))


def _tf_narrow_integers(func, args, kwargs):
  """NumPy's `func(*args, **kwargs)` where TensorFlow has no kernel for
  its tensors' integer (or boolean) dtype, or None where it has: a
  product (`np.dot`, `@`, `np.einsum` ...) of int8, int16 or unsigned
  integers, or of booleans, in int64 and cast back to NumPy's dtype,
  wrapping as NumPy's; `np.abs`, `np.sign`, `np.negative` and
  `np.power` of unsigned integers; `np.average` of integers (as
  float64); a sort of uint16 (which XLA lacks) by int32 keys; `np.tile`
  of uint16 by its int16 bits."""
  tf = _tf()
  values = [a for a in builtins.list(args) + builtins.list(kwargs.values())
            if is_tf(a) or isinstance(a, (np.ndarray, np.generic))]
  if not values or not is_tf(*values):
    return None
  dtypes = [np.dtype(tf.as_dtype(a.dtype).as_numpy_dtype) if is_tf(a)
            else np.dtype(a.dtype) for a in values]
  if builtins.any(d.kind not in 'iub' for d in dtypes):
    return None
  want = np.result_type(*dtypes)
  if func in _PRODUCTS and want not in _NATIVE_PRODUCTS:
    tnp = _tnp()
    return ops.tf_in_int64(
        lambda *a: getattr(tnp, func.__name__)(*a, **kwargs), args, want)
  if func is np.power and want.kind == 'u' and not kwargs:
    return ops.tf_in_int64(_tnp().power, args, want)
  if func in (np.gcd, np.lcm) and want.kind in 'iu' and (
      want not in _NATIVE_PRODUCTS) and not kwargs:
    if want == np.uint64:
      raise TypeError(f'np.{func.__name__} of uint64 on TensorFlow: it '
                      'has no unsigned gcd, and int64 cannot hold every '
                      'uint64; cast to int64 first where the values fit')
    return ops.tf_in_int64(getattr(_tnp(), func.__name__), args, want)
  first = args[0] if args else None
  if not is_tf(first):
    return None
  dtype = np.dtype(tf.as_dtype(first.dtype).as_numpy_dtype)
  if func in _UNSIGNED_GAPS and dtype.kind == 'u' and builtins.len(
      args) == 1 and not kwargs:
    return ops.tf_unsigned_gap(func, first)
  if func is np.average:
    return _tnp().average(tf.cast(first, tf.float64), *args[1:], **kwargs)
  if func in (np.sort, np.argsort) and dtype == np.uint16:
    out = getattr(_tnp(), func.__name__)(tf.cast(first, tf.int32),
                                         *args[1:], **kwargs)
    return tf.cast(out, first.dtype) if func is np.sort else out
  if func is np.tile and dtype == np.uint16:
    return tf.bitcast(_tnp().tile(tf.bitcast(first, tf.int16), *args[1:],
                                  **kwargs), tf.uint16)
  return None


# NumPy's ufuncs that give a boolean array itself (TensorFlow refuses
# booleans).
_SAME_FOR_BOOLEANS = frozenset((np.abs, np.absolute))
# NumPy's sums and products, of NumPy's default integer for booleans
# and narrower integers.
_ACCUMULATIONS = frozenset((np.sum, np.prod, np.cumsum, np.cumprod,
                            np.nansum, np.nanprod, np.trace))
def _tf_polyval(p, x):
  """`np.polyval(p, x)` with a tensor among `p` and `x`: Horner's rule
  over `p`'s first axis, as NumPy's, in the dtype NumPy gives for arrays
  of theirs (TensorFlow's NumPy API makes a list of Python ints int32
  and a batch of int8s times them int8, which overflows)."""
  tf = _tf()
  def dummy(v):
    if is_tf(v):
      v = tf.convert_to_tensor(v)
      return np.ones((1,) * v.shape.rank, v.dtype.as_numpy_dtype)
    return np.asarray(v)
  with np.errstate(all='ignore'):
    want = tf.as_dtype(np.asarray(np.polyval(dummy(p), dummy(x))).dtype)
  p = tf.cast(p if is_tf(p) else np.asarray(p), want)
  x = tf.cast(x if is_tf(x) else np.asarray(x), want)
  if p.shape.rank is None or p.shape.rank == 0 or p.shape[0] is None:
    raise TypeError('np.polyval() on TensorFlow takes coefficients of a '
                    'length known when traced')
  y = tf.zeros_like(x)
  for pv in tf.unstack(p):
    y = y * x + pv
  return y


# NumPy's running sums and products.
_SCANS = {np.cumsum: 'cumsum', np.cumprod: 'cumprod'}


def _tf_unsigned_scan(func, a, axis=None, dtype=None, out=None):
  """`np.cumsum` / `np.cumprod` of a tensor into an unsigned dtype (an
  unsigned tensor's is uint64 unless `dtype` says otherwise), as NumPy
  gives it: TensorFlow's NumPy API makes uint64 float64, and XLA has no
  unsigned running sum or product, so it runs in the signed integer of
  the same width, bit for bit (two's complement sums and products wrap
  as unsigned ones do, modulo 2**bits)."""
  tf = _tf()
  _refuse_out(func.__name__, out)
  a = tf.convert_to_tensor(a)
  want = tf.uint64 if dtype is None else tf.as_dtype(np.dtype(
      getattr(dtype, 'as_numpy_dtype', dtype)))
  a = tf.cast(a, want)
  if axis is None:
    a = tf.reshape(a, [-1])
    axis = 0
  signed = {tf.uint8: tf.int8, tf.uint16: tf.int16, tf.uint32: tf.int32,
            tf.uint64: tf.int64}[want]
  scan = tf.math.cumsum if _SCANS[func] == 'cumsum' else tf.math.cumprod
  return tf.bitcast(scan(tf.bitcast(a, signed), axis=axis), want)


# NumPy's reductions that `_tf_reduction` computes with `where=` or
# `initial=`, by what they compute.
_REDUCTIONS = {np.sum: 'sum', np.prod: 'prod', np.max: 'max',
               np.amax: 'max', np.min: 'min', np.amin: 'min',
               np.all: 'all', np.any: 'any', np.mean: 'mean', np.var: 'var',
               np.std: 'std'}
_NO_IDENTITY = ("reduction operation '{}' does not have an identity, so to "
                "use a where mask one has to specify 'initial'")


def _tf_reduction(func, *args, **kwargs):
  """NumPy's reduction `func` (`_REDUCTIONS`) of a tensor with `where=`
  (the values it masks out as the reduction's identity, or `initial`,
  and out of a mean's count) or `initial=` (reduced with the result), of
  the dtype NumPy gives."""
  tf = _tf()
  name = func.__name__
  params = dict(inspect.signature(func).bind(*args, **kwargs).arguments)
  a = tf.convert_to_tensor(params.pop('a'))
  _refuse_out(name, params.pop('out', None))
  where = params.pop('where', True)
  initial = params.pop('initial', None)
  axis = params.pop('axis', None)
  keepdims = builtins.bool(params.pop('keepdims', False))
  ddof = params.pop('ddof', 0)
  dtype = params.pop('dtype', None)
  if params or is_tf(axis, ddof, dtype):
    raise TypeError(f'np.{name}() with {", ".join(params) or "a tensor"} '
                    'and where= or initial= of a tensor')
  kind = _REDUCTIONS[func]
  if kind in ('max', 'min') and initial is None and where is not True:
    raise ValueError(_NO_IDENTITY.format(
        'maximum' if kind == 'max' else 'minimum'))
  # NumPy's dtype for it, from a made-up array of the tensor's.
  given = {'axis': axis, 'keepdims': keepdims}
  if dtype is not None:
    given['dtype'] = dtype
  if ddof:
    given['ddof'] = ddof
  if initial is not None and not is_tf(initial):
    given['initial'] = initial
  with np.errstate(all='ignore'):
    want = tf.as_dtype(np.asarray(func(np.ones(
        (2,) * a.shape.rank, a.dtype.as_numpy_dtype), **given)).dtype)
  if kind in ('var', 'std'):
    x = a if a.dtype.is_floating or a.dtype.is_complex else tf.cast(a, want)
  else:
    x = tf.cast(a, want)
  axis = builtins.list(axis) if isinstance(axis, (tuple, builtins.list)) else (
      axis)
  mask = None
  if where is not True:
    mask = tf.broadcast_to(tf.cast(where, tf.bool), tf.shape(x))
  if initial is not None:
    initial = tf.cast(initial, want)
  if kind in ('sum', 'prod', 'all', 'any'):
    identity = {'sum': 0, 'prod': 1, 'all': True, 'any': False}[kind]
    if mask is not None:
      x = tf.where(mask, x, tf.cast(identity, want))
    reduce = {'sum': tf.reduce_sum, 'prod': tf.reduce_prod,
              'all': tf.reduce_all, 'any': tf.reduce_any}[kind]
    value = reduce(x, axis=axis, keepdims=keepdims)
    if initial is not None:
      value = (value + initial if kind == 'sum' else value * initial)
    return value
  if kind in ('max', 'min'):
    if mask is not None:
      x = tf.where(mask, x, tf.broadcast_to(initial, tf.shape(x)))
    reduce = tf.reduce_max if kind == 'max' else tf.reduce_min
    value = reduce(x, axis=axis, keepdims=keepdims)
    if initial is not None:
      value = (tf.maximum if kind == 'max' else tf.minimum)(value, initial)
    if want.is_floating:   # NaN wins, as NumPy's (XLA's reductions skip it)
      nan = tf.reduce_any(tf.math.is_nan(x), axis=axis, keepdims=keepdims)
      if initial is not None:
        nan = tf.logical_or(nan, tf.math.is_nan(initial))
      value = tf.where(nan, tf.constant(np.nan, want), value)
    return value
  # mean, var, std: the values masked in over their count.
  if mask is None:
    mask = tf.ones_like(x, tf.bool)
  count = tf.reduce_sum(tf.cast(mask, x.dtype), axis=axis, keepdims=True)
  mean = tf.reduce_sum(tf.where(mask, x, tf.zeros_like(x)), axis=axis,
                       keepdims=True) / count
  if kind == 'mean':
    return tf.cast(mean if keepdims else tf.squeeze(
        mean, axis=axis), want)
  squares = tf.square(tf.abs(x - mean))
  squares = tf.where(mask, squares, tf.zeros_like(squares))
  count = tf.cast(tf.math.real(count) if count.dtype.is_complex else count,
                  squares.dtype)
  var = tf.reduce_sum(squares, axis=axis, keepdims=True) / (count - ddof)
  if not keepdims:
    var = tf.squeeze(var, axis=axis)
  return tf.cast(tf.sqrt(var) if kind == 'std' else var, want)


_UNSET = object()


def _tf_diff(a, n=1, axis=-1, prepend=_UNSET, append=_UNSET):
  """`np.diff(a, n, axis, prepend, append)` of a tensor: the values
  prepended and appended along `axis` first (a number's across the
  other axes), in the dtype NumPy joins them in; TensorFlow's NumPy API
  takes neither."""
  tf = _tf()
  a = tf.convert_to_tensor(a)
  rank = a.shape.rank
  at = builtins.int(axis) % rank
  parts = [v if is_tf(v) else np.asarray(v)
           for v in (prepend, a, append) if v is not _UNSET]
  joint = tf.as_dtype(np.result_type(*[
      v.dtype.as_numpy_dtype if is_tf(v) else v.dtype for v in parts]))
  shape = tf.shape(a)
  joined = []
  for v in parts:
    v = tf.cast(v, joint)
    if v.shape.rank == 0:
      v = tf.broadcast_to(v, tf.concat([shape[:at], [1], shape[at + 1:]],
                                       0))
    joined.append(v)
  return _tnp().diff(tf.concat(joined, axis=at), n=n, axis=at)


def _tf_take(a, indices, axis=None, out=None, mode='raise'):
  """NumPy's `np.take` of tensor `a`: TensorFlow's NumPy API clips every
  index, so `[0, -1]` took the first item twice.  Negative indices count
  from the end; under `mode='raise'` (NumPy's default) an index out of
  range raises NumPy's `IndexError` where it is known when tracing, and
  fails its member where it is a member's value (`_check_range`), as a
  read of `x[i]` does; `'wrap'` and `'clip'` are NumPy's."""
  if out is not None:
    raise TypeError('np.take(..., out=) writes into an array, which a '
                    'TensorFlow tensor is not: assign its result')
  tf = _tf()
  a = tf.convert_to_tensor(a)
  if axis is None:
    a, axis = tf.reshape(a, [-1]), 0
  axis = axis + a.shape.rank if axis < 0 else axis
  n = a.shape[axis]
  if n is None:
    n = tf.shape(a, out_type=tf.int64)[axis]
  if is_tf(indices):
    i = tf.cast(indices, tf.int64)
  else:
    known = np.asarray(indices)
    if known.dtype.kind not in 'iub' or (known.dtype.kind == 'b' and
                                         known.ndim):
      raise IndexError('arrays used as indices must be of integer type')
    if mode == 'raise' and isinstance(n, builtins.int):
      wrong = known[(known < -n) | (known >= n)]
      if wrong.size:
        raise IndexError(f'index {builtins.int(wrong.flat[0])} is out of '
                         f'bounds for axis {axis} with size {n}')
    i = tf.constant(known.astype(np.int64))
  if mode == 'wrap':
    i = tf.math.floormod(i, n)
  elif mode == 'clip':
    i = tf.clip_by_value(i, 0, n - 1)
  else:
    return _checked_gather(a, i, axis)
  return tf.gather(a, i, axis=axis)


def _tf_pad(array, pad_width, mode='constant', **kwargs):
  """`np.pad(array, pad_width, mode, ...)` of a tensor, `mode` NumPy's
  default ('constant'): its `constant_values` (0, or a number or pair
  per axis, cast to the array's dtype) around each axis, from the first
  (a later axis's values in the corners, as NumPy's); other modes as
  TensorFlow's NumPy API's `pad`."""
  tf = _tf()
  array = tf.convert_to_tensor(array)
  values = kwargs.get('constant_values', 0)
  if (mode != 'constant' or set(kwargs) - {'constant_values'} or
      is_tf(pad_width) or (is_tf(values) and values.shape.rank)):
    return _tnp().pad(array, pad_width, mode, **kwargs)
  rank = array.shape.rank
  widths = np.broadcast_to(np.asarray(pad_width), (rank, 2))
  if widths.dtype.kind not in 'iu':
    raise TypeError('`pad_width` must be of integral type.')
  if (widths < 0).any():
    raise ValueError("index can't contain negative values")
  if is_tf(values) or np.ndim(values) == 0:
    return tf.pad(array, widths.astype(np.int64),
                  constant_values=tf.cast(values, array.dtype))
  values = np.broadcast_to(np.asarray(values), (rank, 2))
  for axis in builtins.range(rank):
    for side, (width, value) in enumerate(zip(widths[axis], values[axis])):
      if not width:
        continue
      around = np.zeros((rank, 2), np.int64)
      around[axis, side] = width
      array = tf.pad(array, around, constant_values=tf.cast(value,
                                                            array.dtype))
  return array


# NumPy's extremes, which `_tf_extreme` computes as NumPy does.
_EXTREMES = {np.max: 'max', np.amax: 'max', np.min: 'min', np.amin: 'min',
             np.argmax: 'argmax', np.argmin: 'argmin'}
_EMPTY = {'max': 'zero-size array to reduction operation maximum which has '
                 'no identity',
          'min': 'zero-size array to reduction operation minimum which has '
                 'no identity',
          'argmax': 'attempt to get argmax of an empty sequence',
          'argmin': 'attempt to get argmin of an empty sequence'}


_EXTREMES_BY_NAME = {'max': np.max, 'min': np.min, 'argmax': np.argmax,
                     'argmin': np.argmin}


def _tf_extreme(func, kind, a, axis=None, out=None, keepdims=False,
                **rest):
  """`np.max`, `min`, `argmax` or `argmin` (`kind`) of a tensor as NumPy
  computes it: NaN where the values reduced hold one (the first NaN's
  position for an arg), which XLA's reductions and TensorFlow's argmax
  skip; and NumPy's `ValueError` for no values, where TensorFlow gives
  an infinity (a member whose length is known only at run time fails
  then, `note_failure`)."""
  tf = _tf()
  if out is not None or rest or (kind.startswith('arg') and keepdims):
    return getattr(_tnp(), func.__name__)(a, axis=axis, out=out,
                                          keepdims=keepdims, **rest)
  a = tf.convert_to_tensor(a)
  rank = a.shape.rank
  axes = (list(builtins.range(rank)) if axis is None else
          [axis % rank] if isinstance(axis, (builtins.int, np.integer))
          else [k % rank for k in axis])
  sizes = [a.shape[k] for k in axes]
  if builtins.any(n == 0 for n in sizes):
    raise ValueError(_EMPTY[kind])
  if builtins.any(n is None for n in sizes):
    shape = tf.shape(a)
    note_failure('empty_reduction', tf.reduce_any(
        [tf.equal(shape[k], 0) for k in axes]))
  reduce = {'max': tf.reduce_max, 'min': tf.reduce_min}
  if kind in reduce:
    value = reduce[kind](a, axis=axis, keepdims=keepdims)
  else:
    flat = a if axis is not None else tf.reshape(a, [-1])
    at = builtins.int(axis) % rank if axis is not None else 0
    if builtins.any(n is None for n in sizes) and (
        flat.dtype.is_floating or flat.dtype.is_integer):
      # An empty axis fails TensorFlow's kernel, also for a member that
      # Python does not reduce (`np.argmax(v[:k]) if k else -1`): one
      # item more at its end, the lowest (highest), which a tie leaves
      # to the items before it.
      shape = tf.shape(flat)
      edge = ((-np.inf if kind == 'argmax' else np.inf)
              if flat.dtype.is_floating else
              (flat.dtype.min if kind == 'argmax' else flat.dtype.max))
      flat = tf.concat([flat, tf.fill(tf.concat(
          [shape[:at], [1], shape[at + 1:]], 0), tf.constant(
              edge, flat.dtype))], axis=at)
    value = (tf.argmax if kind == 'argmax' else tf.argmin)(
        flat, axis=at, output_type=tf.int64)
  if not (a.dtype.is_floating or a.dtype.is_complex):
    return value
  if kind in reduce:
    nan = tf.math.is_nan(tf.math.real(a) if a.dtype.is_complex else a)
    return tf.where(tf.reduce_any(nan, axis=axis, keepdims=keepdims),
                    tf.constant(np.nan, a.dtype), value)
  # Of `flat`, which holds the item added at the end of an empty axis.
  nan = tf.math.is_nan(tf.math.real(flat) if flat.dtype.is_complex
                       else flat)
  first = tf.argmax(tf.cast(nan, tf.int32), axis=at, output_type=tf.int64)
  return tf.where(tf.reduce_any(nan, axis=at), first, value)


def _tf_spread(func, a, axis=None, dtype=None, out=None, ddof=0,
               keepdims=False):
  """`np.var` or `np.std` of a tensor with `ddof` (TensorFlow's NumPy API
  takes none): the squared deviations' sum over the count less `ddof`."""
  tf = _tf()
  if dtype is not None or out is not None:
    raise TypeError(f'np.{func.__name__}() with dtype= or out= of a '
                    'member\'s tensor')
  a = tf.convert_to_tensor(a)
  if not (a.dtype.is_floating or a.dtype.is_complex):
    a = tf.cast(a, tf.float64)
  mean = tf.reduce_mean(a, axis=axis, keepdims=True)
  squares = tf.square(tf.abs(a - mean))
  count = tf.cast(tf.size(a) if axis is None else tf.shape(a)[axis],
                  squares.dtype)
  var = tf.reduce_sum(squares, axis=axis, keepdims=keepdims) / (
      count - ddof)
  return tf.sqrt(var) if func is np.std else var


def method(obj, name, *args, **kwargs):
  """One member's `obj.name(*args, **kwargs)`: an array method
  (`member_helpers.METHODS`), which a TensorFlow tensor lacks: on one
  member's tensor TensorFlow's NumPy function of the name (`v.max()` is
  `tnp.max(v)`), a cast (`astype`) or a copy; on anything else the
  method itself.

  Args:
    obj: The object whose method is called.
    name: The method's name.
    *args, **kwargs: Its arguments.

  Returns:
    What the method gives for one member.
  """
  if ragged.is_ragged(obj):
    return ragged.method(obj, name, *args, **kwargs)
  if not is_tf(obj) or isinstance(obj, _tf().Variable):
    return getattr(obj, name)(*args, **kwargs)
  tf = _tf()
  if name == 'astype':
    dtype = args[0] if args else kwargs['dtype']
    return tf.cast(obj, tf.as_dtype(np.dtype(getattr(
        dtype, 'as_numpy_dtype', dtype))))
  if name == 'copy':
    return tf.identity(obj)
  if name in ('flatten', 'ravel'):
    return tf.reshape(obj, [-1])
  if name == 'reshape' and len(args) > 1:
    args = (args,)    # v.reshape(2, 3) is v.reshape((2, 3))
  if name == 'transpose' and args:
    args = (args[0] if len(args) == 1 else args,)
  func = _EXTREMES_BY_NAME.get(name) or getattr(np, name, None)
  if callable(func):   # `v.round(2)` is `np.round(v, 2)`
    return tnp_call(func, (obj,) + args, kwargs)
  return getattr(_tnp(), name)(obj, *args, **kwargs)


def attribute(obj, name):
  """One member's `obj.T`, `obj.mT`, `obj.real` or `obj.imag` (`name`):
  NumPy's transpose (all axes reversed), matrix transpose (the last two
  swapped), real or imaginary part of a TensorFlow tensor, which has no
  such attribute; else the attribute itself.

  Args:
    obj: The object.
    name: The attribute's name.

  Returns:
    The attribute's value for one member.
  """
  if name not in _TENSOR_ATTRIBUTES or not is_tf(obj) or isinstance(
      obj, _tf().Variable):
    return getattr(obj, name)
  tf = _tf()
  if name == 'T':
    return tf.transpose(obj)
  if name == 'mT':
    rank = obj.shape.rank
    if rank < 2:
      raise ValueError('matrix transpose with ndim < 2 is undefined')
    return tf.transpose(obj, builtins.list(builtins.range(rank - 2)) +
                        [rank - 1, rank - 2])
  if obj.dtype.is_complex:
    return (tf.math.real if name == 'real' else tf.math.imag)(obj)
  return obj if name == 'real' else tf.zeros_like(obj)


_TENSOR_ATTRIBUTES = frozenset(('T', 'mT', 'real', 'imag'))


def constant_array_item(x, parts):
  """`x[parts]` of a tensor by NumPy's advanced indexing, where the
  index's arrays are the user's constants (NumPy arrays and lists of
  integers or booleans; a boolean one is the integer arrays of its true
  items), with slices, integers and an ellipsis: the slices first, then
  one gather of the arrays' and integers' broadcast, its axes where
  NumPy places them (in place of the indexed axes where those are
  adjacent, else first).  An index out of its axis is NumPy's
  `IndexError`, when traced.

  Args:
    x: A tensor.
    parts: The index's parts (a tuple).

  Returns:
    The items.
  """
  tf = _tf()
  def boolean(p):
    return isinstance(p, (builtins.list, np.ndarray)) and (
        np.asarray(p).dtype.kind == 'b')
  if builtins.any(p is Ellipsis for p in parts):
    at = next(k for k, p in enumerate(parts) if p is Ellipsis)
    used = builtins.sum(np.ndim(p) if boolean(p) else 1
                        for p in parts if p is not Ellipsis)
    parts = (tuple(parts[:at]) + (slice(None),) * (x.shape.rank - used) +
             tuple(parts[at + 1:]))
  rest = []
  for p in parts:
    if boolean(p):
      p = np.asarray(p)
      n = tuple(x.shape[builtins.len(rest):builtins.len(rest) + p.ndim])
      if p.shape != n:
        raise IndexError(
            f'boolean index did not match indexed array along axis '
            f'{builtins.len(rest)}; size of axis is {n} but size of '
            f'corresponding boolean axis is {p.shape}')
      rest.extend(p.nonzero())
    elif isinstance(p, (builtins.list, np.ndarray)):
      p = np.asarray(p)
      if p.dtype.kind not in 'iu' and p.size:
        raise IndexError('arrays used as indices must be of integer (or '
                         'boolean) type')
      rest.append(p.astype(np.int64))
    elif isinstance(p, slice) or (isinstance(p, (
        builtins.int, np.integer)) and not isinstance(p, builtins.bool)):
      rest.append(p)
    else:
      raise TypeError(
          f'an index of {type(p).__name__} with a constant array index of '
          'a TensorFlow tensor: index it with slices, integers and '
          'arrays alone')
  if builtins.len(rest) > x.shape.rank:
    raise IndexError(f'too many indices for array: array is '
                     f'{x.shape.rank}-dimensional, but {builtins.len(rest)} '
                     'were indexed')
  rest.extend([slice(None)] * (x.shape.rank - builtins.len(rest)))
  x = x[tuple(p if isinstance(p, slice) else slice(None) for p in rest)]
  at = [k for k, p in enumerate(rest) if not isinstance(p, slice)]
  indices = []
  for k in at:
    p, n = np.asarray(rest[k]), x.shape[k]
    if n is not None and p.size and (p.max() >= n or p.min() < -n):
      bad = next(builtins.int(i) for i in p.ravel() if i >= n or i < -n)
      raise IndexError(f'index {bad} is out of bounds for axis {k} with '
                       f'size {n}')
    indices.append(p if n is None else np.where(p < 0, p + n, p))
  indices = np.broadcast_arrays(*indices)
  others = [k for k in builtins.range(x.shape.rank) if k not in at]
  if builtins.len(at) == 1:
    return tf.gather(x, indices[0], axis=at[0])
  out = tf.gather_nd(tf.transpose(x, at + others),
                     np.stack(indices, axis=-1))
  if at != builtins.list(builtins.range(at[0], at[0] + builtins.len(at))):
    return out   # not adjacent: the broadcast's axes first
  rank = indices[0].ndim
  order = builtins.list(builtins.range(rank, rank + at[0]))
  order += builtins.list(builtins.range(rank)) + builtins.list(
      builtins.range(rank + at[0], out.shape.rank))
  return tf.transpose(out, order)


def tf_like(func, a, *args, **kwargs):
  """`np.zeros_like(a)`, `ones_like`, `empty_like` (zeros) or
  `full_like(a, fill_value)` of one member's tensor, with NumPy's `dtype`
  argument; NumPy's other arguments go to NumPy, which refuses the
  tensor."""
  tf = _tf()
  names = (('fill_value', 'dtype') if func is np.full_like else ('dtype',))
  given = dict(zip(names, args))
  given.update(kwargs)
  if len(args) > len(names) or set(given) - set(names) or (
      func is np.full_like and 'fill_value' not in given):
    return func(a, *args, **kwargs)
  dtype = given.get('dtype')
  dtype = a.dtype if dtype is None else tf.as_dtype(np.dtype(getattr(
      dtype, 'as_numpy_dtype', dtype)))
  if func is np.full_like:
    fill = given['fill_value']
    if not is_tf(fill):
      fill = np.asarray(fill).astype(dtype.as_numpy_dtype)
    return tf.fill(tf.shape(a), tf.cast(fill, dtype))
  if func is np.ones_like:
    return tf.ones_like(a, dtype=dtype)
  return tf.zeros_like(a, dtype=dtype)


def leaves(value):
  """The values in nested lists and tuples `value`, in order."""
  if isinstance(value, (list, tuple)):
    return [x for v in value for x in leaves(v)]
  return [value]


def setitem(x, index, value):
  """One member's `x` with `x[index] = value`, as a new value.

  Args:
    x: One member's array (or tensor), or a list of values (structure:
      `ops.list_setitem`).
    index: The index as Python gives it to `__setitem__`.
    value: The value to write (broadcast to the items).

  Returns:
    A new array (list); `x` is unchanged.
  """
  if isinstance(x, (list, tuple)):   # a list of values: structure
    return ops.list_setitem(x, index, value)
  # The positions written are read as they lie (a strided window never
  # gathered to the front, `_reading_to_write`).
  with _reading_to_write():
    return _setitem(x, index, value)


def _setitem(x, index, value):
  items = leaves(value) if isinstance(value, (list, tuple)) else ()
  if is_tf(*items) or builtins.any(_is_member_array(v) for v in items):
    # `stack[sp] = (r, c)`: a row of one member's values.
    value = asarray(value)
  if ragged.is_ragged(value) and not ragged.is_ragged(x):
    written = _ragged_write(x, index, value)
    if written is not None:
      return written
  if ragged.is_ragged(x, value):
    next(v for v in (x, value) if ragged.is_ragged(v)).refuse()
  if is_tf(x, value) or (is_tf(*_parts(index)) and not _is_member_array(x)):
    stepped = _tf_stepped_write(x, index, value)
    if stepped is not None:
      return stepped
    filled = _tf_window_fill(x, index, value)
    if filled is not None:
      return filled
    # A member's index of a tensor is a gather (`getitem`); a number
    # under a mask a select, which pfor vectorizes.
    return ops.tf_setitem(x, index, value, read=getitem)
  return _numpy_rules().setitem(x, index, value)


def _tf_window_fill(x, index, value):
  """One member's `x[lo:hi] = number` (`w[:n] = 0`) where the window
  read is a slice of the members' own lengths (`ragged.Ragged`, under
  XLA): the number written where the window lies in each member, as
  `w[lo:hi] += d` is.  None for any other write."""
  if _rank(value) != 0 or isinstance(value, (list, tuple)) or not (
      builtins.any(isinstance(e, slice) and is_tf(e.start, e.stop, e.step)
                   for e in _parts(index))):
    return None
  with _reading_to_write():
    read = getitem(x, index)
  if not ragged.is_ragged(read):
    return None
  tf = _tf()
  data = tf.convert_to_tensor(read.data)
  number = (tf.cast(value, data.dtype) if is_tf(value) else
            tf.constant(value, data.dtype))
  return _ragged_write(x, index, read.with_data(
      tf.broadcast_to(number, tf.shape(data))))


def _tf_stepped_write(x, index, value):
  """One member's `x[start:stop:step] = number` of a vector, the step a
  member's (`is_prime[i * i::i] = False`, a sieve): a select of the
  positions Python's slice picks, whatever their count.  None for any
  other write (a step of 0, which Python refuses, picks nothing)."""
  parts = _parts(index)
  if builtins.len(parts) != 1 or not isinstance(parts[0], slice):
    return None
  e = parts[0]
  if e.step is None or not is_tf(e.step) or _rank(value) != 0:
    return None
  tf = _tf()
  x = tf.convert_to_tensor(x)
  if x.shape.rank != 1 or x.shape[0] is None:
    return None
  n = x.shape[0]
  step = tf.cast(e.step, tf.int64)
  at = tf.range(n, dtype=tf.int64)
  up = step > 0

  def bound(b, default_up, default_down):
    # Python's slice.indices: clipped into the axis, for either direction.
    if b is None:
      return tf.where(up, tf.constant(default_up, tf.int64),
                      tf.constant(default_down, tf.int64))
    b = tf.cast(b, tf.int64)
    b = tf.where(b < 0, b + n, b)
    return tf.where(up, tf.clip_by_value(b, 0, n),
                    tf.clip_by_value(b, -1, n - 1))
  start = bound(e.start, 0, n - 1)
  stop = bound(e.stop, n, -1)
  size = tf.where(tf.equal(step, 0), tf.ones_like(step), tf.abs(step))
  inside = tf.where(up, tf.logical_and(at >= start, at < stop),
                    tf.logical_and(at <= start, at > stop))
  on_step = tf.equal(tf.math.floormod(tf.abs(at - start), size), 0)
  picked = tf.logical_and(tf.logical_and(inside, on_step),
                          tf.not_equal(step, 0))
  value = (tf.cast(value, x.dtype) if is_tf(value)
           else tf.constant(value, x.dtype))
  return tf.where(picked, value, x)


def _ragged_write(x, index, value):
  """`x` with `x[index] = value` where `value` is a slice of per-member
  bounds (`ragged.Ragged`) and `x[index]` one too (`a[i, k:] -= f *
  a[k, k:]`, the elimination step): the value's items written where the
  target's slice lies in each member, the rest of its axis as it was.
  Slices of different lengths fail their members as Python fails them.
  None where `x[index]` is no such slice, or the index is not integers
  and slices."""
  with _reading_to_write():
    target = getitem(x, index)
  if not ragged.is_ragged(target):
    return None
  parts = _parts(index)
  axis, at = 0, None
  for k, e in enumerate(parts):
    if isinstance(e, slice):
      if axis == target.axis:
        at = k
        break
      axis += 1
    elif e is None or e is Ellipsis or _rank(e) != 0:
      return None
  if at is None:
    return None
  items, data = target.aligned(value), target.data
  if is_tf(data, items):
    tf = _tf()
    written = tf.where(target.mask(), tf.cast(items, data.dtype), data)
  else:
    written = np.where(target.mask(), items, data)
  whole = tuple(parts[:at]) + (slice(None),) + tuple(parts[at + 1:])
  return setitem(x, whole if isinstance(index, tuple) else whole[0],
                 written)


def random_generator(make, *args, **kwargs):
  """A random generator made in a function written for one member
  (`np.random.default_rng(seed)`, `member_helpers.makes_generator`): as
  written from values every member shares; from a member's own values
  (its seed) refused, as no batch holds one generator per member.

  Raises:
    PerMemberError: Where an argument is a member's value.
  """
  if builtins.any(_is_member_array(x) or is_tf(x) or ragged.is_ragged(x)
                  for x in leaves(builtins.list(args) +
                                  builtins.list(kwargs.values()))):
    name = getattr(make, '__qualname__', None) or getattr(
        make, '__name__', 'generator')
    module = 'random' if make is random.Random or (
        isinstance(make, type) and issubclass(make, random.Random)) else (
            'np.random')
    raise errors.PerMemberError(
        f'{module}.{name}() of a member\'s value makes a random generator '
        'for each member, an object that holds its stream\'s state: '
        'NumPy\'s and Python\'s stateful generators cannot be batched '
        '(a batched variable holds arrays, one row per member)',
        hint=errors.RANDOM_GENERATOR_HINT)
  return make(*args, **kwargs)


def random_draw(draw, *args, **kwargs):
  """One member's NumPy random draw (`np.random.normal(size=3)`,
  `rng.uniform()`): NumPy's on NumPy.  On TensorFlow a per-member
  function is traced, so NumPy would draw once, when traced, and every
  member and every trip would get that one draw: refused.

  Raises:
    PerMemberError: On TensorFlow.
  """
  if getattr(_local, 'checks', None) is not None or is_tf(
      *leaves(builtins.list(args) + builtins.list(kwargs.values()))):
    name = getattr(draw, '__name__', 'draw')
    raise errors.PerMemberError(
        f'NumPy\'s random {name}() in a function written for one member '
        'runs once on TensorFlow, when the function is traced: every '
        'member, and every trip of a loop, would get that one draw',
        hint='On TensorFlow draw with TensorFlow: tf.random.stateless_'
        'normal(shape, seed) with a per-member seed (an argument, and a '
        'counter for loops), or draw the numbers outside and pass them in '
        '(an array with a row per member).  On the NumPy backend '
        'np.random draws anew for each member.')
  return draw(*args, **kwargs)


def helper_setitem(x, index, value):
  """A helper's `x[index] = value`, giving `x` as written: in place where
  `x` takes item assignment (NumPy, as Python writes it: the caller's
  array too, where it is an argument); a new tensor on TensorFlow.

  Args:
    x: One member's array (or tensor).
    index: The index as Python gives it to `__setitem__`.
    value: The value to write.

  Returns:
    `x` written.
  """
  if is_tf(x, value, *_parts(index)):
    return setitem(x, index, value)
  if not _is_member_array(x) and builtins.any(
      _is_member_array(v) for v in (value,) + _parts(index)):
    # A plain array (`g = np.zeros(2)`) given a member's values: one
    # array per member now (NumPy's rules).
    return setitem(x, index, value)
  x[index] = value
  return x


def power(a, b):
  """One member's `a ** b`.  An integer to a negative integer power fails
  the member, as NumPy's does (`note_failure`): TensorFlow's kernel fails
  the whole run, and under XLA it gave 0.  On TensorFlow the operands
  take NumPy's joint dtype (`ops.promoted`)."""
  if ragged.is_ragged(a, b):
    return a ** b
  if _integer(a) and _integer(b):
    note_failure('negative_power', b < 0)
    if is_tf(b):
      tf = _tf()
      b = tf.where(b < 0, tf.zeros_like(b), b)   # where it fails anyway
  if is_tf(a, b):
    return ops.promoted('pow', a, b)
  return a ** b


def weak_operator(name, a, b, side):
  """One member's `a <op> b` where operand `side` is a Python number the
  member computes (`math.exp(-z)`, `300 if d else 0`): `ops.weak_operator`,
  except that an integer the other's integer dtype cannot hold fails the
  member with NumPy's OverflowError (`note_failure`).

  Args:
    name: The operator (`ops.weak_operator`'s, or `'power'`: `power`).
    a: The left operand.
    b: The right operand.
    side: Which is the number (0: `a`).

  Returns:
    The result.
  """
  number, other = (a, b) if side == 0 else (b, a)
  target = ops.weak_target(name, number, other)
  if target is not None:
    own = np.dtype(number.dtype) if not is_tf(number) else np.dtype(
        number.dtype.as_numpy_dtype)
    bounds = ops.narrowing_bounds(own, target)
    if bounds is not None:
      low, high = bounds
      flags = [f for f in (None if low is None else number < low,
                           None if high is None else number > high)
               if f is not None]
      note_failure(f'int_bounds_{target.name}',
                   flags[0] if len(flags) == 1 else _logical_or(*flags))
    number = _as_dtype(number, target)
  a, b = (number, other) if side == 0 else (other, number)
  if name == 'power':
    return power(a, b)
  return ops.operate(name, a, b)


def _as_dtype(x, dtype):
  """One member's value (a tensor, a `MemberArray`, an array) as `dtype`."""
  if is_tf(x):
    return _tf().cast(x, dtype)
  if _is_member_array(x):
    return x.astype(dtype)
  return np.asarray(x).astype(dtype)


def _integer(x):
  """Whether `x` is an integer tensor, array or number."""
  if isinstance(x, (builtins.bool, np.bool_)):
    return False
  if isinstance(x, (builtins.int, np.integer)):
    return True
  dtype = getattr(x, 'dtype', None)
  if dtype is None:
    return False
  if is_tf(x):
    return x.dtype.is_integer
  try:
    return np.dtype(dtype).kind in 'iu'
  except TypeError:
    return False


def matmul(a, b):
  """One member's `a @ b`: on TensorFlow, where an operand is a vector,
  NumPy's product (`tf.matmul` refuses vectors), a NumPy operand taking
  the tensor's dtype as TensorFlow's `@` gives it; else the operator."""
  if ragged.is_ragged(a, b):
    return ragged.product(np.matmul, a, b)
  if is_tf(a) and is_tf(b) and a.dtype != b.dtype:
    # NumPy's promotion (float32 @ float64 is float64), where TensorFlow's
    # product refuses mixed dtypes.
    tf = _tf()
    joint = tf.as_dtype(np.result_type(a.dtype.as_numpy_dtype,
                                       b.dtype.as_numpy_dtype))
    a, b = tf.cast(a, joint), tf.cast(b, joint)
  if is_tf(a, b) and (1 in (_rank(a), _rank(b)) or builtins.any(
      is_tf(x) and _narrow_product(x) for x in (a, b))):
    # (A product of integers TensorFlow's kernels lack, in int64 too.)
    tf = _tf()
    if not is_tf(a):
      a = tf.convert_to_tensor(a, dtype_hint=b.dtype)
    elif not is_tf(b):
      b = tf.convert_to_tensor(b, dtype_hint=a.dtype)
    return tnp_call(np.matmul, (a, b), {})
  return a @ b


def _narrow_product(x):
  """Whether tensor `x`'s dtype is an integer (or boolean) one that
  TensorFlow's products lack."""
  dtype = np.dtype(_tf().as_dtype(x.dtype).as_numpy_dtype)
  return dtype.kind in 'iub' and dtype not in _NATIVE_PRODUCTS


def _rank(x):
  return x.shape.rank if is_tf(x) else np.ndim(x)


def setitem_with(x, index, value, operation):
  """One member's `x` with `x[index] op= value` (`operation`: the name of
  `operator`'s function for `op`), as a new value.

  Where the index has slices with per-member bounds and `value` is one
  number per member (`w[:n] += 1`), the items are updated where they lie
  in each member's window, whatever its length; otherwise it is
  `x[index] = x[index] op value`.
  """
  if isinstance(x, (list, tuple)):   # structure: refused as a slice
    return ops.list_setitem(x, index, value)
  op = getattr(operator, operation)
  _check_in_place_dtype(x, value, op)
  if not (is_tf(x, value) or is_tf(*_parts(index)) or
          ragged.is_ragged(value)):
    written = _numpy_rules().setitem_with(x, index, value, op)
    if written is not None:
      return written
  with _reading_to_write():
    read = getitem(x, index)
  # TensorFlow's operators do not promote (a float32 window plus a
  # float64): NumPy's dtypes, as the operator's own primitive takes them.
  result = (getattr(ops, operation)(read, value)
            if operation in ('mod', 'floordiv') else
            ops.promoted(operation, read, value))
  return setitem(x, index, result)


def _check_in_place_dtype(x, value, op):
  """Refuses `x[window] op= value` where NumPy's in-place operator
  cannot cast `x[window] op value` to `x`'s dtype (a window is an array,
  `ops.in_place`); the dtypes are found on arrays of one item."""
  dtype = ops.dtype_of(x)
  if dtype is None or ragged.is_ragged(value):
    return
  if isinstance(value, (builtins.bool, builtins.int, builtins.float,
                        builtins.complex)):
    other = type(value)(1)
  else:
    other_dtype = ops.dtype_of(value)
    if other_dtype is None:
      return
    other = np.ones(1, other_dtype)
  with np.errstate(all='ignore'):
    try:
      result = op(np.ones(1, dtype), other)
    except Exception:  # pylint: disable=broad-except
      return   # the operation itself fails, as it will below
  ops.in_place(np.ones(1, dtype), result)


def in_place(read, result):
  """One member's `x op= v`, `result` being `read op v` (`read` is `x` or
  the items written): an array keeps its dtype and shape, or is refused
  where NumPy's in-place operator refuses the cast; a number is rebound
  (`ops.in_place`)."""
  if ragged.is_ragged(read) or ragged.is_ragged(result):
    return result
  return ops.in_place(read, result)


# -- builtins -------------------------------------------------------------


def _plain(*xs):
  """Whether all of `xs` are plain Python values (no array, no tensor)."""
  return builtins.all(isinstance(x, (builtins.int, builtins.float,
                                     builtins.bool)) for x in xs)


def _combine(xs, python, tf_name, np_op):
  """`python(xs)` of plain values, else `xs` folded pairwise with
  TensorFlow's `tf_name` or `np_op`."""
  if _plain(*xs):
    return python(xs)
  result = xs[0]
  for x in xs[1:]:
    if is_tf(result, x):
      result = getattr(_tf(), tf_name)(*_tf_pair(result, x))
    else:
      result = np_op(result, x)
  return result


def _tf_pair(a, b):
  """`a` and `b` as tensors of one dtype, NumPy's (a Python number is
  weak: it takes the tensor's where that holds it)."""
  tf = _tf()
  if not is_tf(a):
    b, a = _tf_pair(b, a)
    return a, b
  a = tf.convert_to_tensor(a)
  if not is_tf(b):
    if isinstance(b, (builtins.int, builtins.float, builtins.bool)):
      # A Python number is weak, as NumPy takes it (an int64 beside 1.5:
      # float64).
      joint = ops.with_number(a, b)
      if joint != a.dtype.as_numpy_dtype:
        a = tf.cast(a, joint)
    return a, tf.constant(b, a.dtype)
  b = tf.convert_to_tensor(b)
  if a.dtype != b.dtype:
    dtype = np.result_type(a.dtype.as_numpy_dtype, b.dtype.as_numpy_dtype)
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
  return a, b


_NO_DEFAULT = object()


def min(*xs, key=None, default=_NO_DEFAULT):
  """One member's `min(a, b, ...)`, or `min(x)` over one array's items;
  with `key=`, the first item of least key (`min(range(n), key=lambda i:
  d[i])`: the index of the first least `d[i]`).

  Args:
    *xs: Values, or one array.
    key: As Python's.
    default: As Python's: the result for no items.

  Returns:
    The least.
  """
  return _extreme('min', xs, key, default)


def max(*xs, key=None, default=_NO_DEFAULT):
  """One member's `max(a, b, ...)`, or `max(x)` over one array's items;
  with `key=`, the first item of greatest key.

  Args:
    *xs: Values, or one array.
    key: As Python's.
    default: As Python's: the result for no items.

  Returns:
    The greatest.
  """
  return _extreme('max', xs, key, default)


def sorted(values, key=None, reverse=False):
  """One member's `sorted(values)`: of one member's vector, its items in
  order as an array (`np.sort`; Python's gives a list of them); else
  Python's.

  Args:
    values: An iterable.
    key: As Python's (only with a list or tuple).
    reverse: Whether the order is descending.

  Returns:
    The items in order.
  """
  if ragged.is_ragged(values):
    values.refuse()
  items = leaves(values) if isinstance(values, (list, tuple)) else ()
  if key is None and (is_tf(*items) or builtins.any(
      _is_member_array(v) for v in items)):
    values = asarray(values)   # `sorted([a, b])` of one member's numbers
  if key is None and (is_tf(values) or _is_member_array(values)) and (
      builtins.len(values.shape) == 1):
    out = call(np.sort, values)
    return out[::-1] if reverse else out
  return builtins.sorted(values, key=key, reverse=reverse)


def _extreme(name, xs, key=None, default=_NO_DEFAULT):
  """Python's `min` or `max` (`name`) of one member's values `xs`: of
  several values, folded pairwise; of one array, its least or greatest
  item; of a generator or list of values (`max(a[i] for i in
  range(n))`), its items folded pairwise, as Python compares them; with
  `key`, the items of a range, list, tuple or generator (or the values)
  folded by their keys."""
  python = getattr(builtins, name)
  better = operator.lt if name == 'min' else operator.gt
  extra = {} if default is _NO_DEFAULT else {'default': default}
  if key is not None:
    if builtins.len(xs) != 1:
      items = builtins.list(xs)
    elif isinstance(xs[0], (builtins.range, list, tuple,
                            types.GeneratorType)):
      items = builtins.list(xs[0])
    else:
      return python(*xs, key=key, **extra)
    if not items:
      return python(items, key=key, **extra)
    return _fold_by_key(items, key, python, better)
  if extra and not (builtins.len(xs) == 1 and _iterable_of_values(xs[0])):
    return python(*xs, **extra)
  if builtins.len(xs) != 1:
    return _fold_extreme(xs, python, better)
  x = xs[0]
  if ragged.is_ragged(x):
    return ragged.builtin(name, x)
  if _iterable_of_values(x):
    items = builtins.list(x)
    if not items:
      if extra:
        return default
      raise ValueError(f'{name}() arg is an empty sequence')
    return _fold_extreme(items, python, better)
  if is_tf(x):
    return getattr(_tf(), f'reduce_{name}')(x)
  return getattr(np, name)(x)


def _fold_by_key(items, key, python, better):
  """Python's `min` or `max` of `items` by `key`: the first item whose
  key compares `better` than every earlier one's, member by member (a
  later item of an equal key does not replace it, a NaN key is passed
  over but first, as Python's builtin compares)."""
  keys = [key(item) for item in items]
  if _plain(*keys) and _plain(*leaves(items)):
    return python(items, key=key)
  best, best_key = items[0], keys[0]
  for item, k in zip(items[1:], keys[1:]):
    take = better(k, best_key)
    best_key = _select(take, k, best_key)
    best = _select(take, item, best)
  return best


def _select(take, a, b):
  """`a` where one member's `take` holds, else `b`: of tuples, lists and
  namedtuples item by item (`ops.selected`), of numbers and arrays by
  `tf.where` or `np.where`."""
  try:
    return ops.selected(take, a, b, _select_value)
  except errors.UnsupportedSyntaxError:
    raise TypeError('min() or max() with key= of items of different '
                    'structures (per member, the result must have one '
                    'structure)') from None


def _select_value(take, a, b):
  if _plain(take):
    return a if take else b
  if is_tf(take, a, b):
    tf = _tf()
    if not is_tf(a) and not is_tf(b):
      a = tf.constant(np.asarray(a))
    a, b = _tf_pair(a, b)
    return tf.where(tf.convert_to_tensor(take), a, b)
  result = np.where(take, a, b)
  if isinstance(result, np.ndarray) and result.ndim == 0:
    result = result[()]
  return result


def _fold_extreme(xs, python, better):
  """Python's `min` or `max` of values `xs`, pairwise: each value taken
  where it compares `better` than the one so far, as Python's builtin
  does (`min(1.0, nan)` is 1.0 and `min(nan, 1.0)` nan, where NumPy's
  `minimum` gives nan for both)."""
  if _plain(*xs):
    return python(xs)
  result = xs[0]
  for x in xs[1:]:
    if is_tf(result, x):
      tf = _tf()
      result, x = _tf_pair(result, x)
      result = tf.where(better(x, result), x, result)
    else:
      result = np.where(better(x, result), x, result)
      if isinstance(result, np.ndarray) and result.ndim == 0:
        result = result[()]   # a NumPy scalar, as `np.minimum` gives
  return result


def _iterable_of_values(x):
  """Whether `x` is a generator, list or tuple (not one array): what
  Python's `min` and `max` take item by item."""
  return isinstance(x, (list, tuple, types.GeneratorType))


def unpacked(value, count):
  """One member's `a, b = value`: a tuple or list as it is, an array's (or
  tensor's) items along its first axis, which must number `count`."""
  if isinstance(value, (tuple, list)):
    if builtins.len(value) != count:
      raise ValueError(_unpack_count(builtins.len(value), count))
    return tuple(value)
  if is_tf(value) or _is_member_array(value) or isinstance(value,
                                                            np.ndarray):
    shape = value.shape
    if not builtins.len(shape):
      raise TypeError(f'cannot unpack non-iterable {type(value).__name__} '
                      'object (a number)')
    if shape[0] != count:
      raise ValueError(_unpack_count(shape[0], count))
    return tuple(getitem(value, k) for k in builtins.range(count))
  return tuple(value)


def _unpack_count(got, count):
  """Python's message for unpacking `got` items into `count` names."""
  return (f'{"too many" if got > count else "not enough"} values to unpack '
          f'(expected {count}, got {got})')


def iterate(values):
  """What a per-member comprehension iterates: a TensorFlow tensor's items
  along its first axis (`tf.unstack`: Python iterates no tensor inside a
  graph), anything else as it is.

  Args:
    values: The comprehension's iterable.

  Returns:
    An iterable.
  """
  if ragged.is_ragged(values):
    values.refuse()
  if (is_tf(values) and not isinstance(values, _tf().Variable) and
      values.shape.rank and values.shape[0] is not None):
    return _tf().unstack(values)
  return values


def sum(values, start=0):
  """One member's `sum(values[, start])`: on a TensorFlow tensor, whose
  items Python cannot iterate inside a graph, the sum along its first
  axis, as Python's of its items; else Python's.

  Args:
    values: An iterable (one member's array or tensor, a list).
    start: Added to the sum.

  Returns:
    The sum.
  """
  if ragged.is_ragged(values):
    return ragged.builtin('sum', values, start)
  if is_tf(values) and not isinstance(values, _tf().Variable):
    tf = _tf()
    if values.dtype == tf.bool:
      # Python's sum of NumPy booleans counts in int64 (TensorFlow sums
      # no booleans).
      values = tf.cast(values, tf.int64)
    return tf.reduce_sum(values, axis=0) + start
  if (_is_member_array(values) or isinstance(values, np.ndarray)) and (
      values.ndim):
    # The sum along the first axis, in the array's dtype: Python's sum of
    # no items is the int 0, which typed `sum(v[lo:hi])` of floats an
    # int where type inference's slice was empty.  Integers too (Python
    # adds a uint8's items in uint8), not in NumPy's default integer.
    return np.sum(values, axis=0, dtype=values.dtype if (
        values.dtype.kind in 'iu') else None) + start
  items = list(values)
  if is_tf(*items):
    # Python adds NumPy's booleans as int64 (`sum([x > 0, y > 0])`, a
    # count); TensorFlow adds no booleans.
    tf = _tf()
    items = [tf.cast(v, tf.int64) if is_tf(v) and v.dtype == tf.bool
             else v for v in items]
  return builtins.sum(items, start)


def all(values):
  """One member's `all(values)`: whether every item is true.

  Args:
    values: An iterable of one member's values (a generator, a list, one
      member's vector).

  Returns:
    A bool: Python's, or one member's boolean value.
  """
  return _every(values, True)


def any(values):
  """One member's `any(values)`: whether some item is true.

  Args:
    values: An iterable of one member's values (see `all`).

  Returns:
    A bool: Python's, or one member's boolean value.
  """
  return _every(values, False)


def _every(values, conjunction):
  """`all` (`conjunction`) or `any` of `values`' items, whose truth is
  one member's value (Python's `all` would call `bool` on it)."""
  if ragged.is_ragged(values):
    return ragged.builtin('all' if conjunction else 'any', values)
  if (is_tf(values) and not isinstance(values, _tf().Variable) and
      values.shape.rank == 1):
    tf = _tf()
    return (tf.reduce_all if conjunction else tf.reduce_any)(
        tf.cast(values, tf.bool), axis=0)
  items = builtins.list(values)
  if _plain(*items):
    return (builtins.all if conjunction else builtins.any)(items)
  items = [builtins.bool(x) if _plain(x) else
           _tf().cast(x, _tf().bool) if is_tf(x) else x for x in items]
  if conjunction:
    return _combine(items, builtins.all, 'logical_and', np.logical_and)
  return _combine(items, builtins.any, 'logical_or', np.logical_or)


def abs(x):
  """One member's `abs(x)`.

  Args:
    x: A value.

  Returns:
    Its absolute value.
  """
  if _plain(x):
    return builtins.abs(x)
  if ragged.is_ragged(x):
    return x.with_data(abs(x.data))
  if is_tf(x):
    if _tf().as_dtype(x.dtype).is_unsigned:
      return x   # TensorFlow has no unsigned `abs`
    return _tf().abs(x)
  return np.abs(x)


def len(x):
  """One member's `len(x)`: the length of its first axis.

  Args:
    x: A member's array, tensor, tuple or list.

  Returns:
    A Python int; on TensorFlow, for a tensor whose length follows the
    member's data (`len(v[lo:hi])`, reduced in its statement), an int64
    tensor.
  """
  if ragged.is_ragged(x):
    return ragged.builtin('len', x)
  if is_tf(x):
    if x.shape.rank == 0:
      raise TypeError('len() of unsized object')
    n = x.shape[0]
    if n is None:
      return _tf().shape(x, out_type=_tf().int64)[0]
    return n
  if _is_member_array(x):
    return _numpy_rules().member_len(x)
  return builtins.len(x)


def int(x=0, guard=None):
  """One member's `int(x)`: truncated toward zero, as an int64 value.

  NaN, an infinity or a float beyond int64 fails its members
  (`member_math.to_int`).

  Args:
    x: A number or a member's scalar.
    guard: The condition under which Python evaluates the call, or None.

  Returns:
    A Python int for a Python number, else an int64 scalar.
  """
  return member_math.to_int(note_failure, x, guard)


def int_rows(x=0, guard=None):
  """`int` of the rows of the members at a block (`member_direct`).

  Args:
    x: The members' scalars, or a shared number.
    guard: As `int`'s.

  Returns:
    An int64 for each.
  """
  return member_math.to_int(note_failure, x, guard, rows=True)


def round(x, ndigits=None, guard=None):
  """One member's `round(x)` (an int64, half to even) or `round(x,
  ndigits)`.

  Args:
    x: A number or a member's scalar.
    ndigits: The digits, or None.
    guard: The condition under which Python evaluates the call, or None.

  Returns:
    The rounded value.
  """
  return member_math.round_half_even(note_failure, x, ndigits, guard)


def round_rows(x, ndigits=None, guard=None):
  """`round` of the rows of the members at a block (`member_direct`).

  Args:
    x: The members' scalars, or a shared number.
    ndigits: The digits, or None.
    guard: As `round`'s.

  Returns:
    The rounded values.
  """
  return member_math.round_half_even(note_failure, x, ndigits, guard,
                                     rows=True)


def math_fn(name, *args, guard=None, **keywords):
  """One member's `math.<name>(*args)` (`member_math.math_fn`).

  Args:
    name: The function's name in `math`.
    *args: Its arguments.
    guard: The condition under which Python evaluates the call, or None.
    **keywords: Its keyword arguments (`isclose`'s tolerances).

  Returns:
    Its value.
  """
  return member_math.math_fn(note_failure, name, *args, guard=guard,
                             **keywords)


def pow_mod(base, exp, mod, guard=None):
  """One member's `pow(base, exp, mod)` of integers
  (`member_math.pow_mod`).

  Args:
    base, exp, mod: Its arguments.
    guard: The condition under which Python evaluates the call, or None.

  Returns:
    Its value, an int64 (of `mod`'s sign).
  """
  if ragged.is_ragged(base, exp, mod):
    next(v for v in (base, exp, mod) if ragged.is_ragged(v)).refuse()
  return member_math.pow_mod(note_failure, base, exp, mod, guard)


def math_rows(name, *args, guard=None, **keywords):
  """`math_fn` of the rows of the members at a block (`member_direct`).

  Args:
    name: The function's name in `math`.
    *args: The members' scalars, or shared numbers.
    guard: As `math_fn`'s.
    **keywords: As `math_fn`'s.

  Returns:
    Its values.
  """
  return member_math.math_fn(note_failure, name, *args, guard=guard,
                             rows=True, **keywords)


def float(x=0.0):
  """One member's `float(x)`, as a float64 value.

  Args:
    x: A number or a member's scalar.

  Returns:
    A Python float for a Python number, else a float64 scalar.
  """
  return _convert(x, builtins.float, np.float64)


def bool(x=False):
  """One member's `bool(x)`, as a bool value (`float` and `int` alike).

  Args:
    x: A number or a member's value.

  Returns:
    A Python bool for a Python number, else a bool scalar.

  Raises:
    ValueError: For a member's array of more than one item, as NumPy's.
  """
  if not (is_tf(x) or _is_member_array(x)):
    return builtins.bool(x)
  shape = _member_shape(x)
  if shape:
    if builtins.int(np.prod(shape)) != 1:
      raise ValueError(
          'The truth value of an array with more than one element is '
          'ambiguous. Use a.any() or a.all()')
    x = _tf().reshape(x, []) if is_tf(x) else x.reshape(())
  return _as_bool(x)


def complex(real=0, imag=0):
  """One member's `complex(real, imag)` of its numbers, as a complex128
  value (Python's complex of floats: the parts exactly, an infinite
  imaginary part too).

  Args:
    real: A number or a member's scalar.
    imag: A number or a member's scalar.

  Returns:
    A Python complex of Python numbers, else a complex128 scalar.

  Raises:
    TypeError: For a member's array of one or more axes (Python's complex()
      takes numbers), or a part that is not a real number.
  """
  parts = (real, imag)
  if not builtins.any(is_tf(p) or _is_member_array(p) for p in parts):
    return builtins.complex(real, imag)
  for p in parts:
    if not (is_tf(p) or _is_member_array(p)):
      continue
    if _member_shape(p):
      raise TypeError('complex() of a member\'s array of shape '
                      f'{_member_shape(p)}: only a number converts')
    dtype = ops.dtype_of(p)
    if dtype is not None and dtype.kind not in 'biuf':
      raise TypeError(f'complex() of a member\'s {dtype} value: '
                      'only real parts are supported')
  if is_tf(real, imag):
    tf = _tf()
    return tf.complex(tf.cast(real, tf.float64), tf.cast(imag, tf.float64))
  re, im = (p.batched if _is_member_array(p) else np.asarray(p)
            for p in parts)
  re, im = np.broadcast_arrays(re, im)
  out = np.empty(re.shape, np.complex128)
  out.real, out.imag = re, im
  return type(real if _is_member_array(real) else imag)(out)


def _member_shape(x):
  """One member's shape of a tensor or a member's array."""
  if is_tf(x):
    return tuple(_tf().convert_to_tensor(x).shape.as_list())
  return tuple(x.shape)


def _convert(x, python_type, dtype):
  """`python_type(x)` for a number; one member's value cast to `dtype`."""
  if is_tf(x):
    return _tf().cast(x, dtype)
  if _is_member_array(x):
    return x.astype(dtype)
  return python_type(x)


# -- conditions -----------------------------------------------------------


def _as_bool(x):
  if is_tf(x):
    tf = _tf()
    x = tf.convert_to_tensor(x)
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros_like(x))
  if _plain(x):
    return builtins.bool(x)
  return np.not_equal(x, 0) if getattr(x, 'dtype', None) != np.bool_ else x


def where(cond, a, b):
  """One member's `a if cond else b`.

  Args:
    cond: The member's condition (a scalar).
    a: The value where it holds.
    b: The value where it does not.

  Returns:
    `a` or `b`: the side a Python condition (one for every member: a
    shape's test, a flag) takes, as Python's (`x[:2] if x.shape[0] > 2
    else x`: the sides' shapes may differ); else an array or a tensor of
    their joint dtype.
  """
  if _plain(cond):
    return a if cond else b
  cond = _as_bool(cond)
  if is_tf(cond, a, b):
    tf = _tf()
    if _plain(a, b):
      dtype = np.result_type(a, b)
      a, b = tf.constant(a, dtype), tf.constant(b, dtype)
    else:
      a, b = _tf_pair(a, b)
    shape = tf.broadcast_static_shape(a.shape, b.shape)
    return tf.where(cond, tf.broadcast_to(a, shape), tf.broadcast_to(b, shape))
  return np.where(cond, a, b)


def promoted(name, a, b):
  """`a <op> b` in a helper a per-member primitive calls: `ops.promoted`
  (NumPy's dtypes for TensorFlow's operands; others as Python's operator).

  Args:
    name: The operator's name (`'add'`, `'lt'` ...).
    a: The left operand.
    b: The right operand.

  Returns:
    The result.
  """
  return ops.promoted(name, a, b)


def optional_value(x, flag, guard=None):
  """One member's read of a local that may hold None (`python.optional`).

  The members whose `flag` is true there fail with Python's `TypeError`
  (None used as a value), where the guard holds (Python reads the local
  only there: `best is None or v[i] < best`).

  Args:
    x: The local's value (what its array holds where it is None).
    flag: Whether it is None: a member's bool.
    guard: The condition under which Python reads it, or None.

  Returns:
    `x`.
  """
  note_failure('none', flag, guard)
  return x


def choose(cond, a, b):
  """One member's `a() if cond else b()`, `a` and `b` thunks of the sides.

  Args:
    cond: The condition: a member's (a `MemberArray`, a tensor) or one
      value for every member (a shape's test, a module flag).
    a: The side where it holds, a function of no arguments.
    b: The side where it does not.

  Returns:
    For a condition the same for every member, only Python's side,
    computed alone (the other may fail there: `x[:2] if len(x) > 2 else
    x`, `math.trunc(y) if FLAG else 0`); for a member's, `where` of both.
  """
  if _shared(cond):
    return a() if cond else b()
  # A member's: a `MemberArray`, a tensor, or the batch's rows (a
  # primitive of scalars run on them as it is, `is_elementwise`).  Each
  # side fails only the members Python computes it for.
  with _guarded_by(lambda: _as_bool(cond)):
    x = a()
  with _guarded_by(lambda: logical_not(cond)):
    y = b()
  return ops.selected(cond, x, y, where)


def _shared(x):
  """Whether `x` is one value for every member: a Python number, a NumPy
  scalar (not a `MemberArray`, a tensor, or the batch's rows)."""
  return _plain(x) or isinstance(x, np.generic) or (
      isinstance(x, np.ndarray) and x.ndim == 0)


def all_of(*thunks):
  """One member's `a and b and ...`, each operand a thunk.

  An operand the same for every member decides as Python's does: where
  it is false, the operands after it are not computed (they may fail:
  `FLAG and math.trunc(y)`); where true and not the last, it drops out.
  A member's operand is computed, and the ones after it too, each guarded
  by the operands before it (the frontend's guards); then `logical_and`.

  Args:
    *thunks: Functions of no arguments giving the operands.

  Returns:
    As `logical_and` of the operands computed.
  """
  return _short_circuit(thunks, True)


def any_of(*thunks):
  """One member's `a or b or ...`, each operand a thunk (see `all_of`).

  Args:
    *thunks: Functions of no arguments giving the operands.

  Returns:
    As `logical_or` of the operands computed.
  """
  return _short_circuit(thunks, False)


def _short_circuit(thunks, is_and):
  # An operand after a member's one runs only where that one does not
  # decide (Python's short circuit): its failures count only there.
  before = []

  def guarded(thunk):
    def run():
      members = [v for v in before if not _shared(v)]
      if not members:
        value = thunk()
      else:
        def condition(members=members):
          held = [_as_bool(v) if is_and else logical_not(v)
                  for v in members]
          return held[0] if len(held) == 1 else _logical_and(*held)
        with _guarded_by(condition):
          value = thunk()
      before.append(value)
      return value
    return run
  return ops.short_circuit(
      [guarded(t) for t in thunks], is_and,
      lambda x: builtins.bool(x) if _shared(x) else None,
      _logical_and if is_and else _logical_or, where)


def logical_and(*xs):
  """One member's `a and b and ...`: the first false operand, else the
  last, as in Python (`OFFSET and 5` is 5).

  Args:
    *xs: The operands.

  Returns:
    Python's result of Python values; `and` of booleans; else the operand
    selected (`where`).
  """
  return ops.python_bool_op(list(xs), True, _logical_and, where)


def logical_or(*xs):
  """One member's `a or b or ...`: the first true operand, else the
  last, as in Python (`SCALE or 2.0` is 2.0 where SCALE is 0).

  Args:
    *xs: The operands.

  Returns:
    Python's result of Python values; `or` of booleans; else the operand
    selected (`where`).
  """
  return ops.python_bool_op(list(xs), False, _logical_or, where)


def _logical_and(*xs):
  return _combine([_as_bool(x) for x in xs], builtins.all, 'logical_and',
                  np.logical_and)


def _logical_or(*xs):
  return _combine([_as_bool(x) for x in xs], builtins.any, 'logical_or',
                  np.logical_or)


def contains(container, x):
  """One member's `x in container`: a tuple, list, set or range as
  `ops.contains`; one member's array (or a constant one) holds `x` where
  an item equals it (NumPy's `in`: `(container == x).any()`).

  Args:
    container: What `in` looks in.
    x: What it looks for.

  Returns:
    The member's bool.
  """
  if ragged.is_ragged(container, x):
    return any(container == x)
  if is_tf(container) or (is_tf(x) and isinstance(container, np.ndarray)):
    tf = _tf()
    return tf.reduce_any(tf.convert_to_tensor(
        ops.promoted('eq', container, x)))
  if _is_member_array(container) or (
      isinstance(container, np.ndarray) and container.ndim):
    return np.any(container == x)
  return ops.contains(container, x)


def in_range(x, *bounds):
  """One member's `x in range(*bounds)`: `ops.in_range` (a member's
  bounds make no Python `range`).

  Args:
    x: What `in` looks for.
    *bounds: `range`'s arguments.

  Returns:
    The member's bool; a member whose step is zero fails with Python's
    ValueError (`note_failure`).
  """
  if len(bounds) == 3 and getattr(bounds[2], 'dtype', None) is not None:
    note_failure('range_step_zero', ops.promoted('eq', bounds[2], 0))
  return ops.in_range(x, *bounds)


def logical_not(x):
  """One member's `not x`.

  Args:
    x: A condition.

  Returns:
    True where it does not hold.
  """
  x = _as_bool(x)
  if _plain(x):
    return not x
  return _tf().logical_not(x) if is_tf(x) else np.logical_not(x)


ragged.use_ops(sys.modules[__name__])
