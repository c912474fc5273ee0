"""Under XLA: blocks in groups of similar writes, each its own switch.

All branches of a switch return the same shapes, so with one switch
every step would pay for the widest block's writes.  `write_groups` cuts
the blocks into groups, and `run_groups` runs a step: the group of the
block, in a `while_loop` of at most one trip (updated in place, unlike a
conditional), and the scatter of its ports into the packs.  A heavy
block (`knobs.TuningKnobs.heavy_block_elements`) is a group of its own
that runs its block outside any conditional: TensorFlow 2.18's XLA:CPU
splits a large loop over threads only outside conditionals' branches.
"""

import numpy as np
import tensorflow as tf

from autobatch_vm.backends.tf import masks

try:  # The functional Case without lowering (see switch); TF >= 2.2.
  from tensorflow.python.ops.cond_v2 import indexed_case as _indexed_case  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
except ImportError:  # pragma: no cover
  _indexed_case = None

__all__ = ['switch', 'write_groups', 'run_groups', 'run_group', 'bind']


def switch(b, branches):
  """`tf.switch_case(b, branches)`, kept as one `Case` op outside XLA.

  By default TensorFlow lowers a `Case` in a graph to `Switch`/`Merge`
  nodes, and the executor then visits every node of every branch at each
  step (the untaken ones with dead tensors), so a step costs the size of
  the whole program.  Kept as a functional `Case`, a step runs only the
  taken block's function (docs/performance.md).  XLA compiles the `Case`
  as a conditional either way.

  Args:
    b: The branch index, a scalar int32 tensor.
    branches: The branch functions.

  Returns:
    The taken branch's outputs.
  """
  if masks.in_xla_context() or _indexed_case is None:
    return tf.switch_case(b, branches)
  return _indexed_case(b, branches, lower_using_switch_merge=False)


def write_groups(packing, block_writes, heavy=frozenset()):
  """Splits the blocks into groups for XLA's step (see `loop.staged_loop`).

  A step of a block costs its group's ports, in bytes, plus the knob
  `group_step_bytes` per group; with blocks sorted by the bytes they
  write, the groups are the contiguous runs that minimize that cost summed
  over all blocks (each block counted once: which run most is not known
  when tracing).  Each heavy block is a group of its own, after those.

  Args:
    packing: The run's `packing.Packing`.
    block_writes: Each block's written slots.
    heavy: The heavy blocks.

  Returns:
    `[(members, width)]`: block indices and, per pack, the ports their
    switch returns (the most any member writes).
  """
  row_bytes = []
  for g, (is_stack, dtype, shape) in enumerate(packing.keys):
    row = shape[1:] if is_stack else shape
    row_bytes.append(packing.pack_bytes(g) if packing.whole(g) else
                     int(np.prod(row, dtype=np.int64)) * dtype.size)
  # A pack written whole costs its bytes to each block of a group that
  # writes it, whatever the rows.
  widths = [[min(k, 1) if packing.whole(g) else k
             for g, k in enumerate(packing.block_width(w))]
            for w in block_writes]
  step_bytes = packing.knobs.group_step_bytes

  def cost(width):
    return sum(r * w for r, w in zip(row_bytes, width))
  order = sorted((k for k in range(len(widths)) if k not in heavy),
                 key=lambda k: (cost(widths[k]), k))
  n = len(order)
  # best[j]: the cheapest split of order[:j], whose last group is
  # order[cut[j]:j] with ports last_width[j].  For each end j the start i
  # goes down, so the group's ports grow by one block's writes at a time;
  # ties keep the earliest start.
  best = [0] + [None] * n
  cut = [0] * (n + 1)
  last_width = [None] * (n + 1)
  for j in range(1, n + 1):
    width = [0] * len(row_bytes)
    for i in range(j - 1, -1, -1):
      width = [max(a, b) for a, b in zip(width, widths[order[i]])]
      total = best[i] + (j - i) * cost(width) + n * step_bytes
      if best[j] is None or total <= best[j]:
        best[j], cut[j], last_width[j] = total, i, width
  groups = []
  while n:
    groups.append((tuple(order[cut[n]:n]), last_width[n]))
    n = cut[n]
  return groups[::-1] + [((k,), widths[k]) for k in sorted(heavy)]


def run_groups(b, mask, groups, branch_fns, packing, carried, writes,
               bounded=True, heavy=frozenset()):
  """XLA's step: block `b`'s group switches to it and scatters its ports.

  Args:
    b: The block to run, a scalar int32 tensor.
    mask: The members at it, a bool tensor `[batch]`.
    groups: `write_groups`'s groups.
    branch_fns: Each block's branch function (`loop.branch_fn`).
    packing: The run's `packing.Packing`.
    carried: The loop variables.
    writes: Each block's written slots.
    bounded: Whether each group's loop states its one trip to TensorFlow
      (`maximum_iterations`), which a gradient through it needs under XLA
      (`_run_once`).
    heavy: The heavy blocks, each run outside any conditional.

  Returns:
    The loop variables after the step.
  """
  num_packs = len(packing.slots)
  if len(groups) == 1:
    return run_group(b, mask, groups[0], branch_fns, packing, writes,
                      *carried, heavy=heavy)
  # One lookup for all groups, not one per group (each a step's thunk
  # that XLA may hand to another thread when many are ready at once, see
  # `ops.storage_dtype`).
  case = _group_position(b, groups)
  for group in groups:
    members, width = group
    taken = tf.reduce_any(tf.equal(b, tf.constant(members, tf.int32)))
    # The group's loop carries only what it writes: the packs its blocks
    # scatter into (and the flat slots); it reads the others from here.
    # Carrying every pack, with three groups or more and a pack no block
    # writes (gcd's unused stack), tf2xla failed to compile the run
    # ("Propagate: Cannot find body function ..._const_0").  Same speed.
    live = [g for g in range(num_packs) if width[g]] + list(
        range(num_packs, len(carried)))
    before = list(carried)

    def run(*values, before=before, live=live, group=group):
      full = list(before)
      for g, v in zip(live, values):
        full[g] = v
      out = run_group(b, mask, group, branch_fns, packing, writes, *full,
                       case=case, heavy=heavy)
      return [out[g] for g in live]
    after = _run_once(taken, run, [carried[g] for g in live], bounded)
    carried = list(carried)
    for g, v in zip(live, after):
      carried[g] = v
  return carried


def run_group(b, mask, group, branch_fns, packing, writes, *carried,
               case=None, heavy=frozenset()):
  """A group's switch to block `b`, and the scatter of its ports.

  A group of one block has no switch, unless the packs it writes are
  large (the knob `guarded_group_bytes`) and the block is not heavy:
  then its block runs in a conditional with a branch that writes nothing
  (never taken, as the group runs only for its block).  Inline, the
  block's reads of a pack and the scatter into it are in one computation,
  and XLA copies the pack there, twice per step.  In a conditional the
  reads are done when the scatter runs, and XLA updates the pack in
  place; but TensorFlow 2.18's XLA:CPU splits no loop of a
  conditional's branch over threads, which a heavy block's work needs
  more.

  Args:
    b: The block to run (one of the group's members).
    mask: The members at it.
    group: `(members, width)`.
    branch_fns: Each block's branch function.
    packing: The run's `packing.Packing`.
    writes: Each block's written slots.
    *carried: The loop variables.
    case: `b`'s position among the group's members, if known.
    heavy: The heavy blocks.

  Returns:
    The loop variables after the step.
  """
  members, width = group
  num_packs = len(packing.slots)
  if len(members) == 1:
    k = members[0]
    if (k in heavy or packing.written_bytes(width)
        < packing.knobs.guarded_group_bytes):
      ports, flat = branch_fns[k](mask, *carried)
    else:
      ports, flat = tf.switch_case(
          tf.cast(tf.not_equal(b, k), tf.int32),
          [bind(branch_fns[k], mask, carried),
           lambda: packing.no_ports(writes[k], width, carried)])
  else:
    if case is None:
      case = _group_position(b, [group])
    ports, flat = tf.switch_case(
        case, [bind(branch_fns[k], mask, carried) for k in members])
  packs = packing.scatter(list(carried[:num_packs]), list(ports), width)
  return packs + list(flat)


def _group_position(b, groups):
  """Block `b`'s position among its group's members, for `groups`
  (`[(members, width)]`) that together hold it."""
  position = np.zeros(max(max(m) for m, _ in groups) + 1, np.int32)
  for members, _ in groups:
    position[list(members)] = np.arange(len(members), dtype=np.int32)
  return tf.gather(tf.constant(position), tf.minimum(b, len(position) - 1))


def _run_once(taken, fn, carried, bounded=True):
  """`fn(*carried)` if `taken`, else `carried`: a `while_loop` of at most
  one trip, which XLA runs in place, unlike a conditional.

  With `bounded`, the loop also has TensorFlow's trip counter
  (`maximum_iterations=1`), which a gradient under XLA needs; without,
  `taken` alone ends it, and XLA's step has no counter per group to copy
  in, add to and test (docs/performance.md, "Few thunks per step under
  XLA on CPU")."""

  def body(go, *values):
    del go
    return [tf.constant(False)] + list(fn(*values))
  return tf.while_loop(lambda go, *values: go, body, [taken] + list(carried),
                       maximum_iterations=1 if bounded else None)[1:]


def bind(f, mask, carried):
  """`f(mask, *carried)` as a function of no arguments (a branch).

  Args:
    f: A branch function.
    mask: The members at the block.
    carried: The loop variables.

  Returns:
    The bound function.
  """
  return lambda: f(mask, *carried)
