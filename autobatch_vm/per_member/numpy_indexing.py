"""Batching rules of indexing: one member's `x[key]` and `x[key] = v`.

A per-member integer index (scalar or array) becomes an advanced index
next to a batch index `arange(B)`; the advanced block of the batched
result is then moved to where NumPy puts it for one member (in place when
a member's advanced indices are adjacent, else in front).  A None is an
inserted axis of length 1 indexed by a slice, which NumPy places the same
way.  `setitem` writes a copy (functional), the value laid out as the
batched `x[key]`.  A per-member boolean mask selects per-member integer
indices where every member selects as many elements (else
`PerMemberError`, pointing to padding); writing one value through a mask
is `np.where`, whatever the counts.

Also here: `ufunc.at`, `np.take`, `np.take_along_axis`, `np.searchsorted`,
`np.nonzero` and its relatives, `np.unique`, and `asarray` (a list mixing
per-member values and numbers, stacked per member).  Importing this
module gives `MemberArray` its `__getitem__` and `__setitem__`.
"""

import functools
import re

import numpy as np

from autobatch_vm import errors
from autobatch_vm.per_member import member_math
from autobatch_vm.per_member import numpy_array as core
from autobatch_vm.per_member import ragged
from autobatch_vm.per_member.numpy_array import MemberArray

__all__ = ['getitem', 'setitem', 'asarray']

# Indexing.

class _IndexPlan:
  """How one member's `x[key]` runs on the batched array.

  Attributes:
    source: `x`'s batched array, with an axis of length 1 for each None of
      the key (a None then indexes like a slice of that axis, which is
      where NumPy puts its axis, and the advanced block, for one member).
    key: The key of `source` (the batch axis first).
    rank: The member result's rank.
    move: None, or (block rank, position): the batched result holds the
      advanced block right after the batch axis, and one member's result
      holds it at this position among the sliced axes.
  """

  def __init__(self, x, key):
    self.shape = x.batched.shape
    batch = self.shape[0]
    key = _expanded_key(key if isinstance(key, tuple) else (key,), x.ndim)
    source = x.batched
    if any(k is None for k in key):
      shape = list(self.shape)
      for p, k in enumerate(key):
        if k is None:
          shape.insert(p + 1, 1)
      source = source.reshape(shape)
      key = tuple(slice(None) if k is None else k for k in key)
    self.source = source
    slices = sum(1 for k in key if isinstance(k, slice))
    advanced = [p for p, k in enumerate(key)
                if isinstance(k, (MemberArray, np.ndarray))]
    self.move = None
    if not advanced:
      self.key = (slice(None),) + key
      self.rank = slices
      return
    # With an array among them, integers index as advanced indices too.
    advanced = [p for p, k in enumerate(key) if not isinstance(k, slice)]
    shapes = [core.member_shape(key[p]) for p in advanced]
    block = shapes[0] if len(set(shapes)) == 1 else np.broadcast_shapes(
        *shapes)
    self.rank = slices + len(block)
    contiguous = advanced[-1] - advanced[0] == len(advanced) - 1
    if contiguous and not any(isinstance(key[p], MemberArray)
                              for p in advanced):
      # NumPy keeps the block in place, behind the batch axis's slice.
      self.key = (slice(None),) + key
      return
    batch_index = _batch_index(batch, len(block))
    self.key = (batch_index,) + tuple(
        core.aligned(k, len(block)) if isinstance(k, MemberArray) else k
        for k in key)
    if contiguous and advanced[0] > 0:
      self.move = (len(block), advanced[0])

  def _moved_axes(self):
    rank, at = self.move
    return range(1, 1 + rank), range(1 + at, 1 + at + rank)

  def result_of(self, batched):
    """The batched `source[key]` laid out as one member's `x[key]`."""
    if self.move is None:
      return batched
    return np.moveaxis(batched, *self._moved_axes())

  def value(self, value):
    """`value`, as each member writes it into `x[key]`, laid out as the
    batched `source[key]`."""
    v = core.ranked(value, self.rank)
    if self.move is None or v.ndim != self.rank + 1:
      return v
    destination, source = self._moved_axes()
    return np.moveaxis(v, source, destination)

  def written(self, value):
    """A copy of `x`'s batched array with `value` written at `key`."""
    out = self.source.copy()
    out[self.key] = self.value(value)
    return out.reshape(self.shape)

  def read(self):
    """The member's `x[key]`, batched."""
    return self.result_of(self.source[self.key])


def _member_index_error(e):
  """NumPy's IndexError `e` without the batched array's axis number, which
  is one more than the member's (or more, with inserted axes)."""
  return IndexError(re.sub(r'for axis \d+ with size', 'for an axis with size',
                           str(e)))


def _index_failure(e, x, index, guard=None):
  """The error of NumPy's IndexError `e` for one member's `x[index]`: a
  `MemberIndexError` naming the members whose integer index lies outside
  its axis (where the `guard` holds), for the VM to fail those alone as
  Python would (`vm.errors.member_error`, `on_error='status'`); else
  `e` without the batched array's axis number."""
  try:
    rows = _out_of_range(x, index)
  except Exception:  # pylint: disable=broad-except
    rows = None   # an index these checks do not follow: NumPy's error
  if rows is not None and guard is not None:
    held = (guard.batched if isinstance(guard, MemberArray) else
            np.asarray(guard))
    rows = rows & (np.broadcast_to(held, rows.shape) != 0)
  e = _member_index_error(e)
  if rows is None or not rows.any():
    return e
  return member_math.MemberIndexError(str(e), np.flatnonzero(rows))


def _out_of_range(x, index):
  """Each member's flag: whether an integer of `index` (a per-member one,
  or a plain one: then every member's) lies outside the axis of `x` it
  indexes; None where `index` has no per-member value."""
  key = index if isinstance(index, tuple) else (index,)
  batch = core.batch_of((x,) + key)
  if batch is None or _has_member_bounds(key):
    return None
  shape = core.member_shape(x)
  bad = np.zeros(batch, np.bool_)
  axis = 0
  for k in _expanded_key(key, len(shape)):
    if k is None:
      continue
    if not isinstance(k, slice):
      v = k.batched if isinstance(k, MemberArray) else np.asarray(k)
      if v.dtype.kind in 'iu':
        outside = (v < -shape[axis]) | (v >= shape[axis])
        if isinstance(k, MemberArray):
          bad |= outside.reshape(batch, -1).any(axis=1)
        elif outside.any():
          bad[:] = True
    axis += 1
  return bad


@functools.lru_cache(maxsize=64)
def _batch_index(batch, rank):
  """`arange(batch)` with `rank` axes of length 1 behind, read-only."""
  index = np.arange(batch).reshape((batch,) + (1,) * rank)
  index.flags.writeable = False
  return index


def _expanded_key(key, ndim):
  """`key` with lists as arrays, boolean masks as integer indices and the
  Ellipsis (or the end) spelled out as slices."""
  out = []
  for k in key:
    if isinstance(k, list):
      k = asarray(k)
    if isinstance(k, MemberArray) and k.dtype == np.bool_:
      out.extend(_member_mask_indices(k))
    elif isinstance(k, np.ndarray) and k.dtype == np.bool_ and k.ndim:
      out.extend(np.nonzero(k))
    else:
      out.append(k)
  used = sum(1 for k in out if k is not None and k is not Ellipsis)
  ellipsis = [p for p, k in enumerate(out) if k is Ellipsis]
  if ellipsis:
    out[ellipsis[0]:ellipsis[0] + 1] = [slice(None)] * (ndim - used)
  else:
    out.extend([slice(None)] * (ndim - used))
  return tuple(out)


def _member_mask_indices(mask):
  """The integer indices selecting where a per-member boolean mask holds,
  as `MemberArray`s; every member must select as many elements."""
  b = mask.batched
  if b.ndim == 1:
    raise member_math.boolean_scalar_index()
  counts = b.reshape(b.shape[0], -1).sum(axis=1)
  if counts.size and np.any(counts != counts[0]):
    raise errors.PerMemberError(
        'A per-member boolean mask selects a different number of elements '
        f'in different members ({int(counts.min())} to {int(counts.max())}): '
        'the result\'s shape differs between members.', hint=core.PAD_HINT +
        '  For a masked reduction, write np.sum(np.where(mask, x, 0)).')
  count = int(counts[0]) if counts.size else 0
  return [MemberArray(i.reshape(b.shape[0], count)) for i in np.nonzero(b)[1:]]


def getitem(x, index, guard=None):
  """One member's `x[index]`, for per-member or plain `x` and `index`.

  Args:
    x: A `MemberArray`, or a plain array (indexed by per-member indices).
    index: What one member indexes with: ints, slices, None, Ellipsis,
      integer or boolean arrays, per-member or plain, or a tuple of them.
    guard: None, or each member's condition for reading at all
      (`member_ops.getitem`): members where it does not hold get zeros,
      and their indices are not checked.

  Returns:
    The member's `x[index]` (plain where `x` and `index` are plain).
  """
  try:
    try:
      return _getitem(x, index)
    except IndexError:
      if guard is None:
        raise
      return _guarded_getitem(x, index, guard)
  except IndexError as e:
    raise _index_failure(e, x, index, guard) from None


def _guarded_getitem(x, index, guard):
  """`getitem` where some members' indices may be out of range: the read
  of the members whose guard holds (an `IndexError` there is theirs),
  zeros for the others."""
  parts = (x,) + (index if isinstance(index, tuple) else (index,))
  batch = core.batch_of(parts + (guard,))
  held = (guard.batched if isinstance(guard, MemberArray)
          else np.broadcast_to(np.asarray(guard), (batch,)))
  held = np.asarray(held != 0) if held.dtype != np.bool_ else held
  if held.all():
    return _getitem(x, index)
  rows = np.flatnonzero(held)

  def some(v):
    return MemberArray(v.batched[rows]) if isinstance(v, MemberArray) else v
  key = (tuple(some(e) for e in index) if isinstance(index, tuple)
         else some(index))
  if len(rows):
    read = _getitem(some(x), key)
  else:
    # No member reads: the item's shape, from a read at index 0.
    def zeroed(e):
      if isinstance(e, MemberArray) and e.dtype.kind in 'iu':
        return MemberArray(np.zeros_like(e.batched))
      if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return 0
      return e
    key = (tuple(zeroed(e) for e in key) if isinstance(key, tuple)
           else zeroed(key))
    read = _getitem(some(x), key)
  read = read.batched if isinstance(read, MemberArray) else np.broadcast_to(
      np.asarray(read), (len(rows),) + np.shape(read))
  out = np.zeros((batch,) + read.shape[1:], read.dtype)
  out[rows] = read
  return MemberArray(out)


def _member_bound(k):
  """Whether key entry `k` is a slice with a per-member bound or step."""
  return isinstance(k, slice) and any(
      isinstance(b, MemberArray) for b in (k.start, k.stop, k.step))


def _window(k, size, batch):
  """Each member's `(start, step, length)` of slice `k` of an axis of
  `size` elements (Python's `slice.indices`, per member): `[batch]`
  integer arrays."""
  def bound(b, name):
    if b is None:
      return None
    v = b.batched if isinstance(b, MemberArray) else np.asarray(b)
    if v.ndim > (1 if isinstance(b, MemberArray) else 0) or (
        v.dtype.kind not in 'iub'):
      raise TypeError('slice indices must be integers or None or have an '
                      f'__index__ method (the {name} is '
                      f'{core.member_shape(b)} {v.dtype} per member)')
    return np.broadcast_to(v.astype(np.int64), (batch,))
  step = bound(k.step, 'step')
  step = np.ones(batch, np.int64) if step is None else step
  if np.any(step == 0):
    raise ValueError('slice step cannot be zero')
  up = step > 0

  def clipped(b, default_up, default_down):
    if b is None:
      return np.where(up, default_up, default_down)
    b = np.where(b < 0, b + size, b)
    return np.where(up, np.clip(b, 0, size), np.clip(b, -1, size - 1))
  start = clipped(bound(k.start, 'start'), 0, size - 1)
  stop = clipped(bound(k.stop, 'stop'), size, -1)
  length = np.maximum(0, (stop - start + np.where(up, step - 1, step + 1))
                      // step)
  return start, step, length


def _has_member_bounds(index):
  """Whether some slice of `index` has a per-member bound or step."""
  return any(_member_bound(k) for k in (
      index if isinstance(index, tuple) else (index,)))


def _positions(window, refusal):
  """`[batch, length]` positions of a slice's per-member `window`
  (`_window`), whose length must be one in every member: else
  `refusal(lengths)` is raised."""
  start, step, length = window
  if length.size and np.any(length != length[0]):
    raise refusal(length)
  count = int(length[0]) if length.size else 0
  return start[:, None] + step[:, None] * np.arange(count)


def _batch_of_key(key):
  """The batch size of the per-member values in `key`, slices' bounds
  included."""
  return core.batch_of([(k.start, k.stop, k.step) if isinstance(k, slice)
                        else k for k in key])


def _member_windows(x, key):
  """`x[key]` where slices of `key` have per-member bounds (`v[:n]`,
  `v[j:j + 3]`): `x` indexed with those slices whole, then each member's
  window gathered along their axes.  Every member's window along an axis
  must have the same length."""
  batch = x.batched.shape[0]
  key = _expanded_key(key, x.ndim)
  if any(isinstance(k, (MemberArray, np.ndarray)) and core.member_rank(k)
         for k in key):
    raise errors.PerMemberError(
        'A slice with per-member bounds next to an array index '
        '(x[idx, lo:hi]): NumPy\'s placement of the axes is not supported '
        'there.', hint='Index in two steps: y = x[idx], then y[:, lo:hi].')
  whole = tuple(slice(None) if _member_bound(k) else k for k in key)
  y = _getitem(x, whole).batched
  sliced = [k for k in key if _member_bound(k)]
  axis = 0
  for k in key:
    if _member_bound(k):
      window = _window(k, y.shape[axis + 1], batch)
      start, step, length = window
      if (len(sliced) == 1 and length.size and np.any(length != length[0])
          and np.all(step == 1)):
        # Lengths that differ: the slice held masked, for what its
        # statement does with it (a reduction: `per_member.ragged`).
        return ragged.Ragged(
            MemberArray(y), axis, MemberArray(start),
            MemberArray(start + length),
            lambda length=length: _differing_lengths(length))
      if len(sliced) == 1 and length.size and np.any(length != length[0]):
        # A step (`v[lo:hi:2]`): each member's items gathered to the
        # front, as many as the longest window has (the positions past
        # a member's own length clipped into the axis), held masked.
        count = int(length.max())
        taken = np.clip(start[:, None] + step[:, None] * np.arange(count),
                        0, y.shape[axis + 1] - 1)
        shape = [batch] + [1] * (y.ndim - 1)
        shape[axis + 1] = count
        y = np.take_along_axis(y, taken.reshape(shape), axis=axis + 1)
        return ragged.Ragged(
            MemberArray(y), axis, MemberArray(np.zeros_like(length)),
            MemberArray(length),
            lambda length=length: _differing_lengths(length))
      taken = _positions(window, _differing_lengths)
      shape = [batch] + [1] * (y.ndim - 1)
      shape[axis + 1] = taken.shape[1]
      y = np.take_along_axis(y, taken.reshape(shape), axis=axis + 1)
    if isinstance(k, slice) or k is None:
      axis += 1
  return MemberArray(y)


def _differing_lengths(length):
  """The `PerMemberError` of a slice whose members' `length`s differ,
  used as an array of its own (kept, returned, indexed)."""
  return errors.PerMemberError(
      'A slice whose bounds differ between members selects a different '
      f'number of elements in different members ({int(length.min())} to '
      f'{int(length.max())}), and is used as an array of its own (kept in '
      'a variable, returned, indexed or passed on): the result\'s shape '
      'differs between members.',
      hint=core.PAD_HINT + '  Within one statement such a slice may be '
      'reduced (np.sum(v[:n]), np.max(a[k:, k]), np.dot(u[i, i + 1:], '
      'x[i + 1:]), len(v[lo:hi])), or combined item by item with numbers '
      'and slices of the same bounds first.')


def _held(windows, shape, batch):
  """`[batch, *shape]` booleans: where each member's windows (`_window`s,
  `(position, None, None)` for an integer) hold."""
  held = True
  for axis, ((start, step, length), size) in enumerate(zip(windows, shape)):
    at = np.arange(size)
    if step is None:
      inside = at == start[:, None]
    else:
      offset = at - start[:, None]
      inside = ((offset % step[:, None] == 0) &
                (offset // step[:, None] >= 0) &
                (offset // step[:, None] < length[:, None]))
    layout = [batch] + [1] * len(shape)
    layout[axis + 1] = size
    held = held & inside.reshape(layout)
  return held


def setitem_with(x, index, value, op):
  """One member's `x` with `x[index] = op(x[index], value)` where `index`
  has slices with per-member bounds and `value` is one number per member
  (`w[:n] += 1`): `op` where each member's window holds, whatever its
  length.  None for any other index or value (then the caller reads and
  writes the window)."""
  if not _has_member_bounds(index) or core.member_rank(value):
    return None
  key = index if isinstance(index, tuple) else (index,)
  batch = core.batch_of((x, value)) or _batch_of_key(key)
  if not isinstance(x, MemberArray):
    x = MemberArray(core.full(x, batch))
  windows = _windows_of(x, _expanded_key(key, x.ndim), batch)
  if windows is None:
    return None
  updated = op(x.batched, core.aligned(value, x.ndim))
  written = np.where(_held(windows, x.shape, batch), updated, x.batched)
  return MemberArray(written.astype(x.dtype, copy=False))


def _windows_of(x, key, batch):
  """Each axis's windows of expanded `key` (`_window`s, or `(position,
  None, None)` for an integer), or None where it has an array index or
  None."""
  if any(k is None or (isinstance(k, (MemberArray, np.ndarray)) and
                       core.member_rank(k)) for k in key):
    return None
  windows = []
  for k, size in zip(key, x.shape):
    if isinstance(k, slice):
      windows.append(_window(k, size, batch))
    else:
      i = (k.batched if isinstance(k, MemberArray) else
           np.broadcast_to(np.asarray(k), (batch,))).astype(np.int64)
      if np.any((i < -size) | (i >= size)):
        raise IndexError(f'index out of range for an axis with size {size}')
      windows.append((np.where(i < 0, i + size, i), None, None))
  return windows


def _member_windows_written(x, key, value):
  """A copy of `x` with each member's `x[key] = value`, where slices of
  `key` have per-member bounds (`x[lo:hi] = 0`).  Each axis is indexed by
  each member's positions, laid out as `np.ix_` lays them out; a slice's
  positions are the member's window, an integer's its one position (its
  axis then absent from the value's layout).  Windows of different
  lengths take one value per member (a scalar); a value with axes needs
  windows of one length in every member."""
  batch = x.batched.shape[0]
  windows = _windows_of(x, _expanded_key(key, x.ndim), batch)
  if windows is None:
    raise errors.PerMemberError(
        'A slice with per-member bounds next to an array index or None '
        '(x[idx, lo:hi] = v): not supported.', hint='Write the window with '
        'np.where: i = np.arange(len(x)); x = np.where((lo <= i) & (i < hi), '
        'v, x).')
  if core.member_rank(value) == 0:
    # One value per member: where each member's window holds.
    written = np.where(_held(windows, x.shape, batch),
                       core.aligned(value, x.ndim), x.batched)
    return MemberArray(written.astype(x.dtype, copy=False))
  index = [_batch_index(batch, x.ndim)]
  shape, counts = [], []   # the value's axes; each indexed axis's count
  for axis, window in enumerate(windows):
    if window[1] is None:   # an integer's one position
      positions = window[0][:, None]
    else:
      positions = _positions(window, lambda length: errors.PerMemberError(
          'A slice whose bounds differ between members is assigned an '
          f'array, and the windows\' lengths differ ({int(length.min())} '
          f'to {int(length.max())})', hint=core.PAD_HINT))
      shape.append(positions.shape[1])
    counts.append(positions.shape[1])
    layout = [batch] + [1] * x.ndim
    layout[axis + 1] = positions.shape[1]
    index.append(positions.reshape(layout))
  v = np.broadcast_to(core.ranked(value, len(shape)),
                      (batch,) + tuple(shape))
  out = x.batched.copy()
  out[tuple(index)] = v.reshape([batch] + counts)
  return MemberArray(out)


def _getitem(x, index):
  if _has_member_bounds(index):
    key = index if isinstance(index, tuple) else (index,)
    if not isinstance(x, MemberArray):
      x = MemberArray(core.full(x, _batch_of_key(key)))
    return _member_windows(x, key)
  if not isinstance(x, MemberArray):
    if type(index) is MemberArray and index.dtype.kind in 'iu':
      # A plain array read at per-member integers: one gather.
      return MemberArray(np.asarray(x)[index.batched])
    batch = core.batch_of(index if isinstance(index, tuple) else (index,))
    if batch is None:
      return x[index]
    x = MemberArray(core.full(x, batch))
  if _is_scalar_index(x, index):   # x[i], the common case, directly
    return MemberArray(x.batched[_batch_index(len(x.batched), 0),
                                 index.batched])
  return MemberArray(_IndexPlan(x, index).read())


def _is_scalar_index(x, index):
  """Whether `index` is one per-member integer indexing `x`'s first axis."""
  return (type(index) is MemberArray and index.batched.ndim == 1 and
          index.batched.dtype.kind in 'iu' and x.batched.ndim > 1)


def setitem(x, index, value):
  """`x` with one member's `x[index] = value`, as a new value.

  Functional: `x` is not written.  `x`, `index` and `value` may each be
  per-member or plain; a plain `x` is broadcast over the batch when the
  index or the value is per member.

  Args:
    x: The array written.
    index: As for `getitem`.
    value: What each member writes; cast to `x`'s dtype as NumPy does.

  Returns:
    The new array: a `MemberArray`, or plain where all three are plain.
  """
  try:
    return _setitem(x, index, value)
  except IndexError as e:
    raise _index_failure(e, x, index) from None


def _setitem(x, index, value):
  parts = (x, value) + (index if isinstance(index, tuple) else (index,))
  batch = core.batch_of(parts)
  if batch is None:
    if isinstance(x, list):
      out = list(x)
    else:
      out = np.array(x, copy=True)
    out[index] = value
    return out
  if not isinstance(x, MemberArray):
    x = MemberArray(core.full(x, batch))
  if _has_member_bounds(index):
    return _member_windows_written(
        x, index if isinstance(index, tuple) else (index,), value)
  if _is_scalar_index(x, index):   # x[i] = v, the common case, directly
    out = x.batched.copy()
    out[_batch_index(batch, 0), index.batched] = core.ranked(
        value, x.ndim - 1)
    return MemberArray(out)
  mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
  if (isinstance(mask, (MemberArray, np.ndarray)) and mask.dtype == np.bool_
      and core.member_rank(mask) and core.member_rank(value) == 0):
    # Each member writes one value where its mask holds, whatever the count.
    ndim = x.ndim
    written = np.where(core.aligned(mask, ndim) if isinstance(
        mask, MemberArray) else np.reshape(
            mask, mask.shape + (1,) * (ndim - mask.ndim)),
                       core.aligned(value, ndim), x.batched)
    return MemberArray(written.astype(x.dtype, copy=False))
  return MemberArray(_IndexPlan(x, index).written(value))


def asarray(value, dtype=None):
  """One member's `np.asarray(value, dtype)`.

  A list or tuple mixing per-member values and numbers is stacked per
  member.

  Args:
    value: A `MemberArray`, a plain value, or nested lists/tuples of both.
    dtype: The dtype, or None for NumPy's.

  Returns:
    A `MemberArray`, or a plain array where nothing is per member.
  """
  if isinstance(value, MemberArray):
    return value if dtype is None else value.astype(dtype)
  if not isinstance(value, (list, tuple)):
    return np.asarray(value, dtype=dtype)
  batch = core.batch_of(value)
  if batch is None:
    return np.asarray(value, dtype=dtype)
  items = [asarray(v) for v in value]
  if any(core.member_shape(v) != core.member_shape(items[0]) for v in items):
    raise ValueError('setting an array element with a sequence: the '
                     'per-member parts have different shapes '
                     f'{[core.member_shape(v) for v in items]}')
  result_dtype = np.result_type(*[
      v.dtype if isinstance(v, MemberArray) else v for v in items])
  if dtype is not None:
    result_dtype = dtype
  stacked = np.stack([core.full(v, batch) for v in items], axis=1)
  return MemberArray(stacked.astype(result_dtype, copy=False))


def _at(ufunc, a, indices, b=None):
  if not isinstance(a, MemberArray):
    raise errors.PerMemberError(
        f'np.{ufunc.__name__}.at on a plain array with per-member indices or '
        'values: each member would change the one shared array.',
        hint='Make the array per member first (x = np.zeros_like(...) of a '
        'per-member value), or compute the update with np.where.')
  plan = _IndexPlan(a, indices)
  out = plan.source.copy()
  ufunc.at(out, plan.key, *(() if b is None else (plan.value(b),)))
  # The wrapper takes the result: its batched array may be a caller's.
  a.batched = out.reshape(plan.shape)


# Selecting by value: the shape must agree between members.

def _agreed_count(mask, name):
  """The number of True elements of each member of the batched `mask`,
  which must agree."""
  counts = mask.reshape(mask.shape[0], -1).sum(axis=1)
  if counts.size and np.any(counts != counts[0]):
    raise errors.PerMemberError(
        f'{name} gives a different number of elements in different members '
        f'({int(counts.min())} to {int(counts.max())}): the result\'s shape '
        'differs between members.', hint=core.PAD_HINT)
  return int(counts[0]) if counts.size else 0


@core.rule(np.nonzero)
def _nonzero(func, a):
  a = core.as_member(a)
  if a.ndim == 0:
    a = np.atleast_1d(a)
  mask = a.batched != 0
  count = _agreed_count(mask, 'np.nonzero')
  batch = mask.shape[0]
  return tuple(MemberArray(i.reshape(batch, count))
               for i in func(mask)[1:])


@core.rule(np.argwhere)
def _argwhere(func, a):
  del func
  a = core.as_member(a)
  if a.ndim == 0:
    raise errors.PerMemberError(
        'np.argwhere of a per-member scalar: its result has 1 or 0 rows, '
        'which differs between members.', hint=core.PAD_HINT)
  return np.stack(np.nonzero(a), axis=-1)


@core.rule(np.flatnonzero)
def _flatnonzero(func, a):
  del func
  return np.nonzero(np.ravel(a))[0]


@core.rule(np.unique)
def _unique(func, ar, *args, **kwargs):
  del func
  if args or any(kwargs.get(k) for k in (
      'return_index', 'return_inverse', 'return_counts', 'axis')):
    return core.NO_RULE
  ar = core.as_member(ar)
  ordered = np.sort(core.flat(ar), axis=1)
  new = np.ones(ordered.shape, bool)
  new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
  if kwargs.get('equal_nan', True) and ordered.dtype.kind in 'fc':
    new[:, 1:] &= ~(np.isnan(ordered[:, 1:]) & np.isnan(ordered[:, :-1]))
  count = _agreed_count(new, 'np.unique')
  return MemberArray(ordered[new].reshape(ordered.shape[0], count))


# Indexing functions.

@core.rule(np.take)
def _take(func, a, indices, axis=None, out=None, mode='raise'):
  del func
  core.refuse_out('np.take', out)
  if axis is None:
    a, axis = np.ravel(a), 0
  size = core.member_shape(a)[axis]
  if mode == 'wrap':
    indices = np.mod(indices, size)
  elif mode == 'clip':
    indices = np.clip(indices, 0, size - 1)
  axis = core.axis_of(axis, core.member_rank(a)) - 1
  return getitem(a, (slice(None),) * axis + (indices,))


@core.rule(np.take_along_axis)
def _take_along_axis(func, arr, indices, axis=-1):
  batch = core.batch_of((arr, indices))
  if axis is None:
    arr, axis = np.ravel(arr), 0
  ndim = core.member_rank(arr)
  return core.wrap(func(core.full(arr, batch), core.full(indices, batch, ndim),
                    core.axis_of(axis, ndim)))


@core.rule(np.searchsorted)
def _searchsorted(func, a, v, side='left', sorter=None):
  if sorter is not None:
    return core.NO_RULE
  if not isinstance(a, MemberArray):
    return core.wrap(func(a, v.batched, side))
  # Each member's insertion point is how many of its elements precede v.
  batch = a.batched.shape[0]
  v = core.full(v, batch)
  elements = a.batched.reshape((batch,) + (1,) * (v.ndim - 1) + (-1,))
  before = elements < v[..., None] if side == 'left' else (
      elements <= v[..., None])
  return MemberArray(np.sum(before, axis=-1, dtype=np.intp))


def _member_getitem(self, key):
  return getitem(self, key)


def _member_setitem(self, key, value):
  # The wrapper takes the updated array; the batched array it held is not
  # written, since it may be a caller's input.
  self.batched = setitem(self, key, value).batched


MemberArray.__getitem__ = _member_getitem
MemberArray.__setitem__ = _member_setitem
core.UFUNC_METHODS['at'] = _at
