"""The VM state packed into few tensors for the staged loop."""

import collections
import functools

import numpy as np
import tensorflow as tf

from autobatch_vm import errors
from autobatch_vm.backends.tf import knobs as knobs_lib
from autobatch_vm.backends.tf import masks
from autobatch_vm.backends.tf import ops

__all__ = ['Packing', 'BlockState']


class Packing:
  """The VM state packed into one tensor per (kind, dtype, shape).

  Several per kind outside XLA, where each pack is kept below
  `max_bytes`.

  Pack g stacks its slots' tensors `[len(slots) + 1, *shape]`; the last row
  is scratch.  A block's writes become ports, per pack, which are scattered
  into the packs: in its branch outside XLA, after its group's switch under
  XLA (there a block's ports are padded, with writes to the scratch row, to
  the most any block of its group writes in that pack):
  - a register pack's port is (values `[K, *shape]`, rows `[K]`);
  - a stack pack's port is a push (values `[K, batch, *event]`, rows `[K]`,
    targets `[K, batch]`): only the pushed members' frames are written.
  Under XLA a small pack is written whole instead (`whole`): its port is
  the pack after the block's writes, and it has no scratch row.

  Outside XLA a scatter copies its pack: a `Case` branch cannot update a
  tensor it was passed, nor can a scatter in the loop body (the loop keeps
  a reference).  For a stack pack of `inplace_bytes` or more (NUTS at 64
  chains: the saved subtree's nine `[8, 64, 25]` stacks, copied at every
  push) the branch returns the push instead,
  as flat row indices and rows, and the loop body writes those rows in
  place (`ops.update_rows`) after the switch.  That is safe because the pack
  is private to the loop: it starts as a fresh buffer (`ops.private_copy`),
  every read of it in a block is a gather, which copies, so no alias
  escapes, and the write follows the switch, whose block has then done
  all its reads.  Gradients only ever need the pack's shape, never its
  values (gathers' and pushes' gradients), so a loop that is
  differentiated stays correct.

  Args:
    state: The VM state's tensors.
    stack_slots: The slots that are stacks.
    packed: The slots to pack (the others are carried as they are).
    max_bytes: The most bytes of a pack (None: no limit, under XLA).
    writers: Outside XLA, per slot, the blocks that write it; None under
      XLA.
    inplace_bytes: Stack packs of this many bytes or more are pushed in
      place (None: never).
    knobs: The run's `knobs.TuningKnobs`.
    batch: The batch size the sizes above are reckoned at where the
      state's batch axis has no size when tracing (a loop serving every
      batch size); None where it has one.
  """

  def __init__(self, state, stack_slots, packed, max_bytes=None,
               writers=None, inplace_bytes=None, knobs=knobs_lib.CPU,
               batch=None):
    self.knobs = knobs
    self.batch = batch
    groups = collections.OrderedDict()
    chunk = collections.Counter()   # per (kind, dtype, shape): packs full
    self.flat = []                  # slots carried as they are
    # Under XLA values of one width share a pack (`ops.storage_dtype`); each
    # slot's own dtype is kept to read it back.
    self.dtypes = [x.dtype for x in state]
    merge = writers is None
    for slot, x in enumerate(state):
      if slot not in packed:
        self.flat.append(slot)
        continue
      stored = ops.storage_dtype(x.dtype) if merge else x.dtype
      kind = (slot in stack_slots, stored, tuple(x.shape.as_list()))
      size = nominal_bytes(x.dtype, x.shape, batch)
      if writers is not None and (
          size >= knobs.signature_bytes if slot not in stack_slots
          else 2 * size > max_bytes):
        # With the registers the same blocks write (`signature_bytes`),
        # or the stacks the same blocks push: a block writes all or none.
        groups.setdefault(kind + (frozenset(writers[slot]),), []).append(
            slot)
        continue
      key = kind + (chunk[kind],)
      if max_bytes is not None and key in groups:
        # A scatter copies its whole pack outside XLA: keep packs small.
        if (len(groups[key]) + 2) * size > max_bytes:
          chunk[kind] += 1
          key = kind + (chunk[kind],)
      groups.setdefault(key, []).append(slot)
    # Outside XLA a block writing every row of a pack builds it anew; XLA
    # updates packs in place.
    self.rewrite = writers is not None
    if self.rewrite:
      # A pack of one slot is carried as the slot itself: no unstack to
      # read it, no stack to write it (fibonacci at B=1024, where every
      # `[1024]` register is large enough to go by its writers, had 13
      # such nodes in a 45-node block; docs/performance.md).
      # Except a stack to push in place: that is done to packs only.
      for key in [k for k, slots in groups.items() if len(slots) == 1]:
        if not (key[0] and nominal_bytes(key[1], key[2], batch) >=
                (inplace_bytes or np.inf)):
          self.flat.append(groups.pop(key)[0])
    self.flat_index = {s: i for i, s in enumerate(self.flat)}
    self.keys = [key[:3] for key in groups]
    self.slots = list(groups.values())
    # Under XLA a pack's last row is scratch: for a padded port or a member
    # that does not push.  Outside XLA ports are not padded, and only the
    # members that push are scattered: no scratch row.  Nor in a pack
    # written whole (`whole`).
    self.scratch = not self.rewrite
    limit = knobs.whole_pack_bytes if self.scratch else 0
    self.wholes = frozenset(
        g for g, (key, slots) in enumerate(zip(self.keys, self.slots))
        if limit and len(slots) * nominal_bytes(key[1], key[2], batch)
        <= limit)
    self.inplace = []   # stack packs pushed in place, in order
    if inplace_bytes is not None and self.rewrite:
      for g, (key, slots) in enumerate(zip(self.keys, self.slots)):
        is_stack, dtype, shape = key
        if (is_stack and len(slots) * nominal_bytes(dtype, shape, batch)
            >= inplace_bytes):
          self.inplace.append(g)
    self.where = {}
    for g, slots in enumerate(self.slots):
      for row, slot in enumerate(slots):
        self.where[slot] = (g, row)
    self.size = len(state)

  def stored(self, slot, x):
    """`x`, a value of `slot`, as its pack holds it.

    Args:
      slot: A state slot.
      x: Its value.

    Returns:
      The value in the pack's dtype.
    """
    if slot not in self.where:
      return x
    dtype = self.keys[self.where[slot][0]][1]
    x = tf.convert_to_tensor(x)
    if x.dtype == dtype:
      return x
    return tf.cast(x, dtype) if x.dtype == tf.bool else tf.bitcast(x, dtype)

  def _loaded(self, slot, x):
    """`x`, read from `slot`'s pack, as the slot's own dtype."""
    dtype = self.dtypes[slot]
    if x.dtype == dtype:
      return x
    return tf.not_equal(x, 0) if dtype == tf.bool else tf.bitcast(x, dtype)

  def carry(self, state):
    """The loop variables: the packs, then the flat slots.

    Args:
      state: The VM state's tensors.

    Returns:
      The list of loop variables.
    """
    packs = []
    for slots in self.slots:
      rows = [self.stored(s, state[s]) for s in slots]
      packs.append(tf.stack(rows + [tf.zeros_like(rows[0])] *
                            self.scratch_rows(len(packs))))
    for g in self.inplace:
      packs[g] = ops.private_copy(packs[g], [state[s] for s in self.slots[g]])
    return packs + [state[s] for s in self.flat]

  def read(self, carried, slot, rows=None):
    """The slot's value, read from the loop variables.

    Args:
      carried: The loop variables.
      slot: A state slot.
      rows: A dict caching packs unstacked (one node per pack instead
        of a slice and its three constants per register), or None.

    Returns:
      The value (a `ops.PackRow` for a stack outside XLA).
    """
    if slot in self.where:
      g, row = self.where[slot]
      if rows is None:
        return self._loaded(slot, carried[g][row])
      if self.keys[g][0] and self.rewrite:
        # A stack: popped by a gather over its whole pack (`peek`).
        return ops.PackRow(carried[g], row)
      return self._loaded(slot, self.row(carried, g, row, rows))
    return carried[len(self.slots) + self.flat_index[slot]]

  def row(self, carried, g, row, rows):
    """Row `row` of pack g as the pack stores it.

    Args:
      carried: The loop variables.
      g: A pack.
      row: A row of it.
      rows: A dict caching packs unstacked (`read`).

    Returns:
      The row, from pack g's one unstack.
    """
    unstacked = rows.get(g)
    if unstacked is None:
      unstacked = rows[g] = tf.unstack(carried[g])
    return unstacked[row]

  def unpack(self, carried):
    """The VM state from the loop variables.

    Args:
      carried: The loop variables.

    Returns:
      The state's tensors.
    """
    state = [None] * self.size
    for slots, pack in zip(self.slots, carried):
      for slot, x in zip(slots, tf.unstack(pack)):
        state[slot] = self._loaded(slot, x)
    for slot, x in zip(self.flat, carried[len(self.slots):]):
      state[slot] = x
    return state

  def flat_values(self, st):
    """The flat slots' values at the end of a block (pushes applied).

    Args:
      st: The block's `BlockState`.

    Returns:
      The list of tensors.
    """
    out = []
    for slot in self.flat:
      out.append(tf.convert_to_tensor(_done(st.written(slot, masked=True))))
    return out

  def block_width(self, writes):
    """Per pack, how many of its slots a block with `writes` writes.

    Args:
      writes: The block's written slots.

    Returns:
      A list of ints, one per pack.
    """
    counts = collections.Counter(self.where[s][0] for s in writes
                                 if s in self.where)
    return [counts[g] for g in range(len(self.slots))]

  def carried_after(self, st, writes, carried):
    """All loop variables after a block, scattered in its branch.

    Only the packs the block writes are touched (outside XLA, where a
    scatter copies its pack and passing a tensor through a `Case` is
    free).

    Args:
      st: The block's `BlockState`.
      writes: The block's written slots.
      carried: The loop variables before the block.

    Returns:
      The branch's outputs (`after_switch` finishes them).
    """
    width = self.block_width(writes)
    copied = [0 if g in self.inplace else k for g, k in enumerate(width)]
    packs = self.scatter(list(carried[:len(self.slots)]),
                         self.ports(st, writes, copied, carried), copied)
    in_place = [k if g in self.inplace else 0 for g, k in enumerate(width)]
    pushes = iter(self.ports(st, writes, in_place))
    updates = []
    for g in self.inplace:
      updates.extend(self._flat_push(g, next(pushes)) if width[g]
                     else self._no_push(g))
    kept = [p for g, p in enumerate(packs) if g not in self.inplace]
    return kept + self.flat_values(st) + updates

  def after_switch(self, carried, outputs):
    """The loop variables after a step; the in-place pushes are done here.

    Args:
      carried: The loop variables before the step.
      outputs: The switch's outputs (`carried_after`'s).

    Returns:
      The loop variables.
    """
    outputs = list(outputs)
    if not self.inplace:
      return outputs
    num_packs = len(self.slots)
    kept = num_packs - len(self.inplace)
    updates = outputs[len(outputs) - 2 * len(self.inplace):]
    rest = iter(outputs[:kept])
    packs = []
    for g in range(num_packs):
      if g in self.inplace:
        k = self.inplace.index(g)
        index, rows = updates[2 * k], updates[2 * k + 1]
        pack = carried[g]
        row_shape = pack.shape.as_list()[3:]
        flat = tf.reshape(pack, [-1] + row_shape)
        packs.append(tf.reshape(ops.update_rows(flat, index, rows),
                                masks.reshape_shape(pack)))
      else:
        packs.append(next(rest))
    return packs + outputs[kept:len(outputs) - len(updates)]

  def _flat_push(self, g, port):
    """Pack g's push as (flat row indices `[n]`, rows `[n, *event]`) of
    the pack seen as `[slots * (depth + 1) * batch, *event]`."""
    values, rows, targets, full = port
    _, dtype, shape = self.keys[g]
    frames, batch, event = shape[0], shape[1], list(shape[2:])
    if batch is None:   # a batch axis of unknown size
      axis = masks.batch_axis()
      batch = tf.shape(values)[1] if axis is None else axis.size
      members = tf.range(batch) if axis is None else axis.members
    else:
      members = tf.range(batch, dtype=tf.int32)
    if full:
      # Every member pushes: every target is a frame.
      index = (rows * frames + targets) * batch + members
      return [tf.reshape(index, [-1]), tf.reshape(values, [-1] + event)]
    row, frame, member, pushed = ops.pushing_members(values, rows, targets)
    return [(row * frames + frame) * batch + member, pushed]

  def _selects_push(self, g, k):
    """Whether `k` ports of stack pack g are pushed by a select: outside
    XLA, pushes on every stack of a pack of scalar stacks, a select with
    the targets' one-hot (see `ops.StackWrite`); not one pushed in place.
    Against a scatter of the pushing members (a `where`, gathers of their
    rows, frames and values, their indices stacked: some ten kernels),
    the pack is as small as the scatter's copy of it."""
    return (not self.scratch and k == len(self.slots[g])
            and len(self.keys[g][2]) == 2 and g not in self.inplace)

  def _no_push(self, g):
    _, dtype, shape = self.keys[g]
    return [tf.zeros([0], tf.int32), tf.zeros([0] + list(shape[2:]), dtype)]

  def ports(self, st, writes, width, carried=None):
    """The values of `writes`, per pack: `width[g]` ports for pack g.

    Few graph nodes: a pack the block does not write gets constants only.

    Args:
      st: The block's `BlockState`.
      writes: The block's written slots.
      width: Per pack, the ports to return.
      carried: The loop variables, to select against a whole pack, or
        None.

    Returns:
      The ports of the packs with ports.
    """
    out = []
    for g, k in enumerate(width):
      if not k:
        continue
      if self.whole(g):
        out.append((self._whole_pack(st, writes, g),))
        continue
      is_stack, dtype, shape = self.keys[g]
      slots = self._port_slots(writes, g)
      pad = k - len(slots)
      rows = tf.constant(np.reshape(self._port_rows(g, slots, k), [k, 1]),
                         tf.int32)
      if not is_stack:
        values = _masked_rows([st.written(s, masked=not self.scratch)
                               for s in slots],
                              carried[g] if k == len(self.slots[g]) and
                              carried is not None else None,
                              [functools.partial(self.stored, s)
                               for s in slots])
        if values is None:
          values = _stack_padded([self.stored(s, st.written(s))
                                  for s in slots], pad, shape, dtype)
        out.append((values, rows))
        continue
      pushes = [st.written(s) for s in slots]
      if not all(isinstance(w, ops.StackWrite) for w in pushes):
        raise errors.InternalError('a stack was written other than by a '
                                   'push')
      batch = shape[1]
      values = None
      if self._selects_push(g, k):
        # Constants pushed (return blocks) stay scalars: the select
        # broadcasts them.
        values = _constant_rows([w.value for w in pushes],
                                [functools.partial(self.stored, s)
                                 for s in slots], 1)
      if values is None:
        values = _stack_padded([self.stored(s, w.value)
                                for s, w in zip(slots, pushes)], pad,
                               shape[1:], dtype)
      targets = _stack_padded([w.target for w in pushes], pad, [batch],
                              tf.int32, fill=-1)
      # Outside XLA (scattered in the branch): whether every member pushes.
      full = () if self.scratch else (all(w.full for w in pushes),)
      out.append((values, rows, targets) + full)
    return out

  def whole(self, g):
    """Under XLA, whether pack g is written whole.

    A pack of at most the knob `whole_pack_bytes`: each branch of a group
    writing it returns the pack after its block's writes (`_whole_pack`),
    and nothing is scattered after the switch.  XLA copies the pack out
    of the switch into the loop's buffer, which for a small pack costs
    less than ports: their values, the copies of their row indices out of
    the branch, and the scatter, a loop where XLA expands scatters
    (docs/performance.md).  Such a pack has no scratch row.

    Args:
      g: A pack.

    Returns:
      A bool.
    """
    return g in self.wholes

  def scratch_rows(self, g):
    """Pack g's scratch rows after its slots' rows.

    Args:
      g: A pack.

    Returns:
      1 or 0.
    """
    return int(self.scratch and g not in self.wholes)

  def pack_bytes(self, g):
    """The bytes of pack g, its scratch row included.

    Args:
      g: A pack.

    Returns:
      An int.
    """
    _, dtype, shape = self.keys[g]
    return nominal_bytes(dtype, [len(self.slots[g]) + self.scratch_rows(g)] +
                         list(shape), self.batch)

  def _whole_pack(self, st, writes, g):
    """Pack g after a block's writes, stacked anew from its rows: the
    rows the block writes (pushed onto, for stacks: a select against the
    targets' one-hot) and the others as they are (one unstack of the
    pack, which the block's reads share: `BlockState`).

    XLA makes each run of rows kept as they are one slice of the pack, so
    the stack is a concatenate of the written rows and the runs between
    them: `tf.stack` where those are at most 8 (XLA fuses it), else
    `ops.stack`."""
    is_stack, _, shape = self.keys[g]
    written = set(self._port_slots(writes, g))
    rows = []
    pieces = 0   # written rows, and runs of rows kept
    for row, slot in enumerate(self.slots[g]):
      old = st.row(g, row)
      if slot not in written:
        if row == 0 or self.slots[g][row - 1] in written:
          pieces += 1
        rows.append(old)
        continue
      pieces += 1
      w = st.written(slot)
      if not is_stack:
        rows.append(self.stored(slot, w))
        continue
      if not isinstance(w, ops.StackWrite):
        raise errors.InternalError('a stack was written other than by a '
                                   'push')
      hot = ops.hot(shape[0], w.target, len(shape) - 2)
      rows.append(tf.where(hot, self.stored(slot, w.value)[tf.newaxis],
                           old))
    return (tf.stack(rows) if pieces <= ops.FUSED_CONCAT_OPERANDS
            else ops.stack(rows))

  def written_bytes(self, width):
    """The bytes of the packs that ports of `width` scatter into.

    Args:
      width: Per pack, the ports.

    Returns:
      An int.
    """
    return sum(self.pack_bytes(g) for g, k in enumerate(width) if k)

  def no_ports(self, writes, width, carried):
    """What a branch returns that leaves the state as it is (under XLA).

    `(ports, flat)` shaped as `ports` and `flat_values` make them for a
    block with `writes` in a group of `width`: each register row written
    with its own value, no member pushing, the flat slots passed through.

    Args:
      writes: The block's written slots.
      width: Per pack, the group's ports.
      carried: The loop variables.

    Returns:
      `(ports, flat)`.
    """
    out = []
    for g, k in enumerate(width):
      if not k:
        continue
      if self.whole(g):
        out.append((tf.identity(carried[g]),))
        continue
      is_stack, dtype, shape = self.keys[g]
      rows = self._port_rows(g, self._port_slots(writes, g), k)
      index = tf.constant(np.reshape(rows, [k, 1]), tf.int32)
      if is_stack:
        out.append((tf.zeros([k] + list(shape[1:]), dtype), index,
                    tf.fill([k, shape[1]], tf.constant(-1, tf.int32))))
      else:
        out.append((tf.gather(carried[g], rows), index))
    num_packs = len(self.slots)
    return out, [carried[num_packs + i] for i in range(len(self.flat))]

  def _port_slots(self, writes, g):
    """The slots of pack g among `writes`, in the pack's order."""
    return sorted(s for s in writes
                  if s in self.where and self.where[s][0] == g)

  def _port_rows(self, g, slots, k):
    """Pack g's rows of `slots` (`_port_slots`), then the scratch row up
    to `k` ports."""
    return ([self.where[s][1] for s in slots] +
            [len(self.slots[g])] * (k - len(slots)))

  def push_window(self):
    """Under XLA, the frames of the windows that pushes select over.

    Pushes are selects (`ops.window_push`) instead of a scatter only where
    XLA expands scatters into loops (`ops.xla_cpu_expands_scatter`), with
    the knob `push_window_frames` (0 on a GPU): else 0.
    """
    frames = self.knobs.push_window_frames
    if (not frames or not ops.xla_cpu_expands_scatter() or
        not ops.has_xla_slices()):
      return 0
    return frames

  def scatter(self, packs, ports, width):
    """The packs with the ports written.

    Args:
      packs: The packs.
      ports: The ports of the packs with ports (`ports`).
      width: Per pack, the ports.

    Returns:
      The packs.
    """
    it = iter(ports)
    for g, k in enumerate(width):
      if not k:
        continue
      if self.whole(g):
        packs[g] = next(it)[0]
        continue
      if ops.no_elements(packs[g]):
        next(it)   # nothing to write (and a scatter would fail)
        continue
      if not self.keys[g][0]:
        values, rows = next(it)
        if k == len(self.slots[g]) and not self.scratch:
          # Every row (rows are in order): a new pack, no copy of the old.
          packs[g] = values
        elif self.scratch and self.push_window():
          # XLA that expands a scatter into a loop: a scatter of one row
          # per port, which XLA makes a dynamic-update-slice in place.
          for j in range(k):
            packs[g] = tf.tensor_scatter_nd_update(
                packs[g], rows[j:j + 1], values[j:j + 1])
        else:
          packs[g] = tf.tensor_scatter_nd_update(packs[g], rows, values)
        continue
      values, rows, targets, *full = next(it)
      batch = self.keys[g][2][1]
      if self._selects_push(g, k):
        packs[g] = tf.where(ops.hot(self.keys[g][2][0], targets),
                            values[:, tf.newaxis], packs[g])
        continue
      if self.scratch and self.push_window():
        # XLA that expands a scatter into a loop: selects per port.
        packs[g] = ops.window_push(
            packs[g], values, rows, targets,
            ops.window_frames(packs[g].shape.as_list(), packs[g].dtype,
                              self.push_window(),
                              self.knobs.push_window_bytes))
        continue
      if self.scratch:
        # Members that do not push write frame 0 of the scratch stack.
        index = tf.stack([
            tf.where(targets >= 0, rows, len(self.slots[g])),
            tf.maximum(targets, 0), _members(targets)], axis=-1)
      elif full[0]:
        # Outside XLA, every member pushes: every target is a frame.
        index = tf.stack([tf.broadcast_to(rows, tf.shape(targets)
                                          if batch is None else [k, batch]),
                          targets, _members(targets)], axis=-1)
      else:
        # Outside XLA a scatter costs per row: only the pushing members'.
        row, frame, member, values = ops.pushing_members(values, rows, targets)
        index = tf.stack([row, frame, member], axis=-1)
      packs[g] = tf.tensor_scatter_nd_update(packs[g], index, values)
    return packs


def _members(targets):
  """Each member's index, shaped as the targets `[K, batch]`."""
  k, batch = targets.shape.as_list()
  if batch is None:   # a batch axis of unknown size
    axis = masks.batch_axis()
    if axis is not None and k == 1:
      return axis.members_row
    return tf.broadcast_to(tf.range(tf.shape(targets)[1]), tf.shape(targets))
  return tf.constant(np.broadcast_to(np.arange(batch, dtype=np.int32),
                                     [k, batch]))


def nominal_bytes(dtype, shape, batch=None):
  """The bytes of a tensor of `dtype` and static `shape`, its unknown
  axis (the batch axis) reckoned at `batch` members.

  Args:
    dtype: A `tf.DType`.
    shape: A `tf.TensorShape` or list, None only for the batch axis.
    batch: The batch size to reckon with (None: the shape is known).

  Returns:
    An int.
  """
  dims = [batch if d is None else d for d in tf.TensorShape(shape).as_list()]
  return ops.nbytes(dtype, dims)


def _masked_rows(writes, old_pack, stored):
  """Stacked values of a pack's `writes` (the pack's rows in order), if
  they are all masked writes with one mask: one select over the stacked
  new values and the old ones (the whole `old_pack` when every row is
  written).  None otherwise.  `stored`: per write, its value as the pack
  holds it."""
  if not writes or not all(isinstance(w, ops.MaskedWrite) for w in writes):
    return None
  m = writes[0].m
  if any(w.m is not m for w in writes):
    return None
  shape = writes[0].new.shape.as_list()
  # Constants written stay scalars: the select broadcasts them.
  new = _constant_rows([w.new for w in writes], stored, len(shape))
  if new is None:
    new = tf.stack([f(w.new) for f, w in zip(stored, writes)])
  old = old_pack if old_pack is not None else tf.stack(
      [f(ops.value(w.old)) for f, w in zip(stored, writes)])
  return masks.select(m.like_rows(len(writes), shape), new, old)


def _constant_rows(values, stored, rank):
  """`values` stacked as `[len(values), 1, ...]` (`rank` ones), where each
  is a constant broadcast to the batch (`masks.broadcast_constant`), for a
  select to broadcast; else None.  `stored`: per value, its value as the
  pack holds it."""
  scalars = [masks.broadcast_constant(v) for v in values]
  if any(c is None for c in scalars):
    return None
  return tf.reshape(
      tf.stack([f(tf.constant(c, v.dtype))
                for f, c, v in zip(stored, scalars, values)]),
      [len(values)] + [1] * rank)


def _done(value):
  """A slot's value at the end of a block, a pending write done: a
  select of a scalar where the value written is a constant broadcast to
  the batch (a register, or a stack of scalars outside XLA)."""
  if isinstance(value, ops.MaskedWrite):
    scalar = masks.broadcast_constant(value.new)
    if scalar is None:
      return value.materialize()
    old = ops.value(value.old)
    return tf.where(value.m.like(old.shape.as_list()),
                    tf.constant(scalar, value.new.dtype), old)
  if isinstance(value, ops.StackWrite):
    scalar = masks.broadcast_constant(value.value)
    if (scalar is None or len(value.base.shape) != 2 or
        ops.no_elements(value.base)):
      return value.materialize()
    return tf.where(ops.hot(value.base.shape[0], value.target),
                    tf.constant(scalar, value.value.dtype), value.base)
  return value



def _stack_padded(values, pad, shape, dtype, fill=0):
  """`tf.stack(values)` followed by `pad` rows of `fill`."""
  filler = tf.constant(np.full([pad] + list(shape), fill,
                               dtype.as_numpy_dtype)) if pad else None
  if not values:
    return filler
  stacked = ops.stack(values)
  return stacked if filler is None else tf.concat([stacked, filler], 0)


class BlockState:
  """The state as a block sees it inside a branch.

  Reads slice the packs; writes are kept (and must be among the block's
  declared writes).

  Args:
    carried: The loop variables.
    packing: The run's `Packing`.
    writes: The block's declared writes.
  """

  def __init__(self, carried, packing, writes):
    self._carried = carried
    self._packing = packing
    self._writes = writes
    self._values = {}
    self._rows = {}
    self._row_of = {}    # a register pack's row as read -> its slot
    self._fills = {}     # pack -> reads filled one at a time
    self._filled = {}    # pack -> its rows, filled

  def __getitem__(self, slot):
    value = self._values.get(slot)
    if value is None:
      value = self._values[slot] = self._packing.read(self._carried, slot,
                                                      self._rows)
      where = self._packing.where.get(slot)
      if (self._packing.rewrite and where is not None and
          not self._packing.keys[where[0]][0]):
        self._row_of[value.ref()] = slot   # a register's row of its pack
    if isinstance(value, ops.StackWrite):
      raise errors.InternalError('a block read a stack after pushing it')
    # A masked write stays pending: the backend's `sanitize`, `push` and
    # `write` take it as it is, or do it (`ops.value`).
    return value

  def row(self, g, row):
    """Row `row` of pack g as it was before the block.

    Args:
      g: A pack.
      row: A row of it.

    Returns:
      The row, from pack g's one unstack (`Packing.row`).
    """
    return self._packing.row(self._carried, g, row, self._rows)

  def filled(self, m, x):
    """Register `x` with the lanes outside `m` filled, or None.

    Outside XLA a block fills each register it reads for the members at
    it (`TensorFlowBackend.fill_inactive`: a gather, and for a floating
    one a reshape, with their constants).  From the second floating
    register (the third integer one) read from a pack, the whole pack is
    filled by one gather along the members and unstacked, where it has at
    most the knob `fill_pack_bytes` or the block has read half its rows;
    that and the later reads of the pack take its rows.  The gather along
    the second axis has a dense gradient.  None: `x` is filled by itself.

    Args:
      m: The block's `masks.Mask`.
      x: A register's value as `__getitem__` gave it.

    Returns:
      The filled value, or None.
    """
    slot = self._row_of.get(x.ref()) if tf.is_tensor(x) else None
    if slot is None:
      return None
    g, row = self._packing.where[slot]
    rows = self._filled.get(g)
    if rows is None:
      reads = self._fills[g] = self._fills.get(g, 0) + 1
      first = 2 if x.dtype.is_floating or x.dtype.is_complex else 3
      if reads < first or not (
          self._packing.pack_bytes(g) <= self._packing.knobs.fill_pack_bytes
          or 2 * reads >= len(self._packing.slots[g])):
        return None
      rows = self._filled[g] = tf.unstack(
          tf.gather(self._carried[g], m.fill_index, axis=1))
    return self._packing._loaded(slot, rows[row])  # pylint: disable=protected-access

  def written(self, slot, masked=False):
    """The slot's value at the end of the block.

    Args:
      slot: A state slot.
      masked: Whether a masked write stays pending (a push always does).

    Returns:
      The value.
    """
    value = self._values.get(slot)
    if value is None:
      value = self._packing.read(self._carried, slot, self._rows)
    if isinstance(value, ops.MaskedWrite) and not masked:
      value = self._values[slot] = value.materialize()
    return value

  def __setitem__(self, slot, value):
    if slot not in self._writes:
      raise errors.InternalError(
          f'a block wrote state slot {slot} outside its declared writes')
    if isinstance(self._values.get(slot), ops.StackWrite):
      raise errors.InternalError('a block pushed the same stack twice')
    self._values[slot] = value
