"""The staged VM loop: one `tf.while_loop`, a step per iteration."""

import collections
import functools
import threading
import time

import numpy as np
import tensorflow as tf

from autobatch_vm import caches
from autobatch_vm import errors
from autobatch_vm import externals
from autobatch_vm.backends.base import PC
from autobatch_vm.backends.scheduler import Scheduler
from autobatch_vm.backends.tf import errors as tf_errors
from autobatch_vm.backends.tf import groups as groups_lib
from autobatch_vm.backends.tf import masks
from autobatch_vm.backends.tf import ops
from autobatch_vm.backends.tf import packing as packing_lib
from autobatch_vm.backends.tf import work

__all__ = ['staged_loop', 'branch_fn', 'fail_in_graph', 'run_eagerly',
           'step_eagerly', 'next_block_tensor', 'loop_test', 'FORCED_BLOCK',
           'differentiable', 'differentiable_loop', 'traceable', 'StagedRun',
           'planned_batch']

_EAGER_CACHE_SIZE = 16
# The batch size a loop plans its packing for where the batch size is
# unknown when tracing and no call says it (a `tf.function` whose input
# signature has no batch size).
NOMINAL_BATCH = 256


class _Planned(threading.local):
  """Per thread: the batch size `planned_batch` gives, or None."""
  size = None


_PLANNED = _Planned()


class planned_batch:  # pylint: disable=invalid-name
  """Context manager: loops traced inside plan at `size` members.

  A loop whose batch size is unknown when tracing plans its packing at
  `size` members inside.  `ab.stage` traces with its first call's size, as an eager call's loop
  is planned at its first call's (`StagedRun`).

  Args:
    size: An int.
  """

  def __init__(self, size):
    self.size = size
    self._outer = None

  def __enter__(self):
    self._outer, _PLANNED.size = _PLANNED.size, self.size

  def __exit__(self, *exc):
    _PLANNED.size = self._outer


def staged_loop(backend, blocks, state, num_blocks, schedule, batch, sites,
                step_limit=(None, None), profile=False):
  """Builds the `tf.while_loop` of a run.

  The loop carries the state partly packed by dtype and shape
  (`packing_lib.Packing`).

  In a plain graph, the step is one `Case` over the blocks, and each
  branch scatters into the packs its block writes and passes the others
  through (free outside XLA).  There a step's cost is mostly graph nodes
  (about a microsecond each), and every loop variable costs several (the
  loop's and the `Case`'s plumbing), so the state is packed:
  - small registers and stacks by dtype and shape, in packs of at most
    the knob `pack_bytes`, since a scatter copies its pack (registers of
    `flat_register_bytes` or more go alone);
  - large registers (rows of `signature_bytes` or more) with those that
    the same blocks write, so that a block writing one writes the whole
    pack, stacked anew (no copy of the old pack, no scatter).
  A block reads a pack's rows by one unstack.  The `Case` has two
  branches per block: one for a step with every member at the block,
  which reads and writes without masks, and one for the others (a
  select per register written, a gather per register read, see
  `sanitize`).

  Under XLA everything is packed, and no pack goes through a
  conditional: XLA copies every value a conditional returns, so a step
  would cost the size of the whole state.  A branch returns instead, per
  pack, rows to scatter after the switch, in place (ports).  All branches
  of a switch return the same shapes, so a step costs the widest block's
  ports; the blocks are therefore split into groups of similar writes
  (`groups_lib.write_groups`), each a switch with its own ports run in a
  single-trip `while_loop` (which, unlike a conditional, updates its
  state in place) taken only when the block is one of its own.  The
  figures behind these choices are in docs/performance.md.

  Args:
    backend: The `TensorFlowBackend`.
    blocks: The compiled blocks.
    state: The VM state.
    num_blocks: The number of blocks.
    schedule: `'most'` or `'lowest'`.
    batch: The batch size; where the state's batch axis has no size when
      tracing (a loop serving every batch size), the size the packing's
      thresholds are reckoned at.
    sites: The run's `errors.Sites`.
    step_limit: `(max_steps, step_limit_error)`.
    profile: Whether to count blocks per member and time blocks.

  Returns:
    `(state, counts, profiled)`: counts `[num_blocks, 2]`; with `profile`,
    `profiled` is (seconds per block, or None under XLA, which has no
    clock; blocks run per member), else None.
  """
  state = [tf.convert_to_tensor(s) for s in state]
  stack_slots = blocks[0].stack_slots if blocks else frozenset()
  xla = masks.in_xla_context()
  knobs = backend.device_knobs()
  # The packing's plan is made at `batch` members; where the batch size
  # has none when tracing, the ops read it in the graph they are in (the
  # body's from the PCs, a branch's from its mask: `masks.BatchAxis`), so
  # that nothing more is carried through the loop and the switch.
  nominal = None
  if state[PC].shape[0] is None:
    nominal = (int(batch) if isinstance(batch, (int, np.integer))
               else _PLANNED.size or NOMINAL_BATCH)
    batch = None
  if xla:
    packed, limit = range(len(state)), None
  else:
    # Stacks are all packed: large ones with those the same blocks push.
    # A register of `flat_register_bytes` or more is carried by itself.
    def packs(slot, x):
      size = packing_lib.nominal_bytes(x.dtype, x.shape, nominal)
      if slot in stack_slots:
        return True
      if (knobs.flat_register_bytes is not None
          and size >= knobs.flat_register_bytes):
        return False
      return 2 * size <= knobs.pack_bytes
    packed = [i for i, x in enumerate(state) if packs(i, x)]
    limit = knobs.pack_bytes
  writers = None
  if not xla:
    writers = collections.defaultdict(set)
    for k, blk in enumerate(blocks):
      for slot in blk.writes:
        writers[slot].add(k)
  # Large stacks are pushed in place where that is safe and supported:
  # not under XLA (which updates in place itself), not in blocks compiled
  # by XLA one at a time, and on CPU.
  inplace = (None if xla or backend.basic_block_xla_device is not None
             or masks.on_gpu() else knobs.inplace_stack_bytes)
  packing = packing_lib.Packing(state, stack_slots, frozenset(packed), limit,
                                writers, inplace, knobs, nominal)
  writes = [blk.writes for blk in blocks]
  heavy = frozenset()
  if xla and knobs.heavy_block_elements is not None:
    # Blocks whose values are large enough for XLA to split its loops over
    # threads (`work`), where it runs thunks and splits none in a
    # conditional (`groups`; docs/performance.md).  Run inline, a block's
    # group copies the packs it writes twice a step: those must be at
    # most four times its largest value (of 4-byte elements).
    size = nominal or state[PC].shape[0] or 1

    def is_heavy(k, blk):
      largest = work.block_elements(blk) * size
      return (largest >= knobs.heavy_block_elements and
              packing.written_bytes(packing.block_width(writes[k]))
              <= 16 * largest)
    heavy = frozenset(k for k, blk in enumerate(blocks) if is_heavy(k, blk))
    if heavy and not (ops.xla_cpu_runs_thunks() and
                      ops.xla_cpu_splits_outside_conditionals_only()):
      heavy = frozenset()
  groups = groups_lib.write_groups(packing, writes, heavy) if xla else None
  widths = {}
  for members, width in groups or ():
    widths.update((k, width) for k in members)
  branch_fns = [branch_fn(backend, blk, batch, sites, packing, widths.get(k))
                for k, blk in enumerate(blocks)]
  # Outside XLA, a block whose registers written are large
  # (`full_block_bytes`) also gets a variant for a step where every member
  # is at the block: it reads and writes registers without masks (their
  # fills and selects cost with the bytes; the variant costs a trace, and
  # the test for it kernels at every step).  A batch of one is always
  # full: every block runs its full variant.
  full_fns = full_index = None
  if groups is None:
    if nominal is None and batch == 1:
      branch_fns = [branch_fn(backend, blk, batch, sites, packing, None,
                              full=True) for blk in blocks]
    elif knobs.full_block_bytes is not None:
      large = [k for k, blk in enumerate(blocks)
               if _written_register_bytes(blk, state, stack_slots, nominal)
               >= knobs.full_block_bytes]
      if large:
        full_fns = [branch_fn(backend, blocks[k], batch, sites, packing,
                              None, full=True) for k in large]
        # Block k's branch in a full step: its full variant's, else its
        # own (the switch's branches: the blocks', then the variants).
        index = list(range(num_blocks))
        for position, k in enumerate(large):
          index[k] = num_blocks + position
        full_index = tf.constant(index, tf.int32)

  # profile=True: blocks per member and, outside XLA (which has no
  # clock op), seconds per block between timestamps around the step's
  # switch, as loop variables.
  timed = profile and not xla
  extra0 = []
  if profile:
    extra0 = [tf.zeros_like(state[PC])]
    if timed:
      extra0.append(tf.zeros([num_blocks], tf.float64))
  num_extra = len(extra0)

  # `staging.StagedFunction.profile_blocks` traces loops that run one
  # block at every step, to time it (XLA has no clock op in the loop):
  # the block whose index a variable holds, read at run time, so one
  # trace times every block (and XLA cannot inline the block's switch
  # for a constant index, which would make a different step).
  forced = FORCED_BLOCK[-1] if FORCED_BLOCK else None
  # Under XLA the `'most'` schedule finds the next block's count of
  # members with the block, and the loop carries it beside the block's
  # index (`[block, count]`) for the step's statistics: no reduction of
  # the mask at the top of every step.
  carry_count = xla and schedule == 'most' and forced is None

  def next_block(pc):
    if forced is None:
      return next_block_tensor(pc, num_blocks, schedule, knobs.one_hot_max,
                               with_count=carry_count)
    return tf.identity(forced.read_value())

  def read_pc(carried):
    # Outside XLA by an unstack of its pack, not a slice (a kernel and
    # three constants less, twice a step).
    return packing.read(carried, PC, None if xla else {})

  def carried_block(b):
    # Under XLA the block index is carried as `[1]` (`loop_test`), or as
    # `[block, count]`.
    if carry_count:
      return tf.stack(b)
    return tf.reshape(b, [1]) if xla else b

  def cond(b, acc, *rest):
    del acc, rest
    return loop_test(b, num_blocks, xla)

  def body(b, acc, *rest):
    count = None
    if carry_count:
      b, count = b[0], b[1]
    elif xla:
      b = tf.reshape(b, [])
    extra, carried = list(rest[:num_extra]), rest[num_extra:]
    pc = read_pc(carried)
    with masks.tracing_axis(None if nominal is None else masks.BatchAxis(pc)):
      return step(b, count, acc, extra, carried, pc)

  def step(b, count, acc, extra, carried, pc):
    mask = tf.equal(pc, b)
    if count is None:
      count = tf.reduce_sum(tf.cast(mask, tf.int32))
    run = tf.stack([tf.constant(1, tf.int32), count])
    if xla:
      # A one-hot sum fuses into one loop; XLA makes the scatter a
      # bounds check, an index and an update (docs/performance.md, "Few
      # thunks per step under XLA on CPU").
      hot = tf.cast(tf.equal(tf.range(num_blocks), b), tf.int32)
      acc += hot[:, tf.newaxis] * run[tf.newaxis]
    else:
      acc = tf.tensor_scatter_nd_add(acc, tf.reshape(b, [1, 1]),
                                     tf.reshape(run, [1, 2]))
    if profile:
      extra[0] += tf.cast(mask, tf.int32)
    start = None
    if timed:
      with tf.control_dependencies([mask]):
        start = tf.timestamp()
    with tf.control_dependencies([] if start is None else [start]):
      if full_fns is not None:
        full = (tf.equal(count, batch) if nominal is None
                else tf.reduce_all(mask))
        index = tf.where(full, tf.gather(full_index, b), b)
        carried = packing.after_switch(carried, groups_lib.switch(
            index,
            [groups_lib.bind(f, mask, carried) for f in branch_fns + full_fns]))
      elif groups is None:
        carried = packing.after_switch(carried, groups_lib.switch(
            b, [groups_lib.bind(f, mask, carried) for f in branch_fns]))
      else:
        carried = groups_lib.run_groups(b, mask, groups, branch_fns, packing,
                              list(carried), writes, differentiable(), heavy)
    if timed:
      with tf.control_dependencies(tf.nest.flatten(carried)):
        elapsed = tf.timestamp() - start
      extra[1] = tf.tensor_scatter_nd_add(
          extra[1], tf.reshape(b, [1, 1]), tf.reshape(elapsed, [1]))
    return [carried_block(next_block(read_pc(carried))),
            acc] + extra + list(carried)

  b0 = carried_block(next_block(state[PC]))
  acc0 = tf.zeros([num_blocks, 2], tf.int32)
  max_steps, step_limit_error = step_limit
  out = tf.while_loop(cond, body,
                      [b0, acc0] + extra0 + packing.carry(state),
                      parallel_iterations=backend.while_parallel_iterations,
                      maximum_iterations=max_steps)
  profiled = None
  if profile:
    profiled = (out[3] if timed else None, out[2])
  state = packing.unpack(out[2 + num_extra:])
  if max_steps is not None and forced is None:
    # Members still running after max_steps: parked at the limit's site
    # (not in a loop that times one block: there they never finish).
    # Those in a loop (or recursion) at a site of their loop, which the
    # error names; the others at one that names the program's start.
    code = sites.add(tf_errors.overflow_maker(step_limit_error))
    loop_of = (step_limit_error.loops()
               if hasattr(step_limit_error, 'loops') else [])
    loops = {}
    for loop in loop_of:
      if loop is not None and loop not in loops:
        loops[loop] = sites.add(tf_errors.overflow_maker(
            functools.partial(step_limit_error, loop=loop)))
    pc = state[PC]
    if loops:
      codes = tf.constant([code if loop is None else loops[loop]
                           for loop in loop_of] + [code], tf.int32)
      parked = tf.gather(codes, tf.minimum(pc, num_blocks))
    else:
      parked = tf.constant(code, tf.int32)
    state[PC] = tf.where(pc < num_blocks, parked, pc)
  return state, out[1], profiled

def _written_register_bytes(block_fn, state, stack_slots, nominal):
  """The bytes of the registers (not stacks) block `block_fn` writes, its
  batch axis reckoned at `nominal` members where it has no size."""
  return sum(packing_lib.nominal_bytes(state[s].dtype, state[s].shape,
                                       nominal)
             for s in block_fn.writes if s not in stack_slots)


def branch_fn(backend, block_fn, batch, sites, packing, width, full=False):
  """One block as a switch branch `f(mask, *carried)`.

  Args:
    backend: The `TensorFlowBackend`.
    block_fn: The compiled block.
    batch: The batch size.
    sites: The run's `errors.Sites`.
    packing: The run's `packing.Packing`.
    width: Under XLA, its group's ports per pack; None outside XLA.
    full: For a step with every member at the block (`mask` all true).

  Returns:
    `f`, returning the loop variables after the block (outside XLA) or
    `(ports, flat)` (under XLA).
  """

  def run_block(mask, *carried):
    axis = masks.BatchAxis(mask) if batch is None else None
    with masks.tracing_axis(axis):
      return block_step(mask, carried, batch if axis is None else axis)

  def block_step(mask, carried, batch):
    st = packing_lib.BlockState(carried, packing, block_fn.writes)
    m = masks.Mask(mask, batch if full else None, full, batch)
    if not full and width is None:
      m.filled_rows = functools.partial(st.filled, m)
    step = tf_errors.Step(sites)
    with tf_errors.tracing_step(step):
      try:
        block_fn(st, m)
      except errors.AssertionFailedError as e:
        # An `assert` that fails for every member reaching this block:
        # park them all (it raised while tracing, not at run time).
        step.park.append((mask, sites.add(tf_errors.assert_maker(e))))
      except errors.PrimitiveError as e:
        raise tf_errors.explain_symbolic(e) from e.__cause__
    pc = st[PC]
    if step.park:
      # The PC's write done (outside XLA it may be pending, `MaskedWrite`).
      pc = ops.value(pc)
    # Reversed, so that the block's first failure names the error.
    for where, code in reversed(step.park):
      pc = tf.where(where, tf.constant(code, tf.int32), pc)
    st[PC] = pc
    if width is None:
      return packing.carried_after(st, block_fn.writes, carried)
    return (packing.ports(st, block_fn.writes, width, carried),
            packing.flat_values(st))

  if backend.basic_block_xla_device is None:
    return run_block
  device = backend.basic_block_xla_device
  compiled = tf.function(traceable(run_block), jit_compile=True,
                         autograph=False)

  def run_on_device(mask, *carried):
    with tf.device(device):
      return compiled(mask, *carried)
  return run_on_device

def fail_in_graph(backend, state, num_blocks, sites, stats,
                  on_error='raise'):
  """Makes a run with parked members fail: Assert, collectors.

  Sets `stats.failed` (the members parked) where any can be, and, under a
  bare `tf.function(jit_compile=True)` that nothing raises the errors of,
  `stats.unreported`; `vm.machine.execute` then poisons the failed
  members' outputs (`errors.settle`).

  Args:
    backend: The `TensorFlowBackend`.
    state: The state after the loop.
    num_blocks: The number of blocks.
    sites: The run's `errors.Sites`.
    stats: The run's `RunStats`.
    on_error: `'raise'`, or `'status'` (nothing fails the run).

  Returns:
    The state, after the assertions (in a graph outside XLA).
  """
  del backend
  if not sites.makers:
    return state
  pc = state[PC]
  failed = pc > num_blocks
  stats.failed = failed
  if on_error == 'status':
    return state
  code = tf.reduce_max(pc)
  # One assertion per site, with a constant message.  Not under XLA,
  # which drops assertions (logging "Ignoring Assert operator" for each
  # at every compile): there the error code reaches a collector
  # (`xla.compile_nested_output`), or nothing can raise it.
  checks = [] if masks.in_xla_context() else [
      tf.debugging.Assert(tf.not_equal(code, sites.base + k), [msg],
                          summarize=1)
      for k, msg in enumerate(sites.graph_messages())]
  if (not tf_errors.report_to_collector(code, failed, sites)
      and masks.in_xla_context()):
    stats.unreported = tf_errors.error_names(sites)
  if not checks:
    return state
  with tf.control_dependencies(checks):
    return [tf.identity(s) for s in state]

# -- eager ---------------------------------------------------------------

def run_eagerly(backend, blocks, state, num_blocks, schedule, stats, labels,
                limit, on_error='raise'):
  """Runs the staged loop via a cached tf.function; steps eagerly if not.

  Args:
    backend: The `TensorFlowBackend`.
    blocks: The compiled blocks.
    state: The VM state.
    num_blocks: The number of blocks.
    schedule: `'most'` or `'lowest'`.
    stats: The `RunStats` to fill.
    labels: The blocks' labels.
    limit: `(max_steps, step_limit_error)`.
    on_error: `'raise'`, or `'status'`: members parked by an error are
      set in `stats.failed` instead (stepping eagerly still raises).

  Returns:
    The state after the run.
  """
  batch = stats.batch_size
  staged = _eager_cache_get(backend, blocks, num_blocks, schedule, batch,
                            limit)
  if not staged.stageable or stats.profile:
    # profile=True times each block, which only stepping can do.
    return step_eagerly(backend, blocks, state, num_blocks, schedule, stats,
                        labels, limit)
  try:
    out_state, acc = staged(state)
  except tf.errors.OpError:
    # Failed at run time (say a primitive's own check): step eagerly to
    # report it with the members and the user's line.
    return step_eagerly(backend, blocks, state, num_blocks, schedule, stats,
                        labels, limit)
  except Exception:  # pylint: disable=broad-except
    # Could not be traced (say a primitive calls NumPy on the tensor):
    # from now on this program steps eagerly, which works or raises.
    staged.stageable = False
    return step_eagerly(backend, blocks, state, num_blocks, schedule, stats,
                        labels, limit)
  pc = out_state[PC].numpy()
  if on_error == 'status' and staged.sites.makers:
    stats.failed = tf.constant(pc > num_blocks)
  elif (pc > num_blocks).any():
    code = int(pc.max())
    error = staged.sites.error(code, np.flatnonzero(pc == code))
    if staged.sites.computes_message(code):
      # A failed assert whose message reads the members' values, which the
      # traced loop never had: stepping eagerly from the start runs the
      # failing primitive on them, and raises with the members' messages.
      # (Unless the run draws random numbers and does not fail again.)
      step_eagerly(backend, blocks, state, num_blocks, schedule, stats,
                   labels, limit)
    raise error
  acc = acc.numpy()
  fill_stats(stats, labels, int(acc[:, 0].sum()),
             [int(r) for r in acc[:, 0]], [int(a) for a in acc[:, 1]])
  return out_state


def step_eagerly(backend, blocks, state, num_blocks, schedule, stats,
                 labels, limit):
  """The NumPy backend's loop, on eager tensors (for diagnostics).

  Args:
    backend: The `TensorFlowBackend`.
    blocks: The compiled blocks.
    state: The VM state (eager tensors).
    num_blocks: The number of blocks.
    schedule: `'most'` or `'lowest'`.
    stats: The `RunStats` to fill.
    labels: The blocks' labels.
    limit: `(max_steps, step_limit_error)`.

  Returns:
    The state after the run.
  """
  max_steps, step_limit_error = limit
  batch = stats.batch_size
  runs = [0] * num_blocks
  active = [0] * num_blocks
  seconds = [0.0] * num_blocks
  member_blocks = np.zeros(batch, np.int64)
  steps = 0
  next_block = Scheduler(schedule, num_blocks).next_block
  while True:
    pc = state[PC].numpy()
    b = next_block(pc)
    if b >= num_blocks:
      break
    if steps == max_steps:
      raise step_limit_error(np.flatnonzero(pc < num_blocks), b,
                             pcs=pc)
    mask = pc == b
    count = int(mask.sum())
    m = masks.Mask(tf.constant(mask), count, count == batch, batch)
    m._idx = np.flatnonzero(mask)  # pylint: disable=protected-access
    start = time.perf_counter()
    blocks[b](state, m)
    seconds[b] += time.perf_counter() - start
    member_blocks[m._idx] += 1  # pylint: disable=protected-access
    runs[b] += 1
    active[b] += count
    steps += 1
  fill_stats(stats, labels, steps, runs, active)
  if stats.profile:
    stats.block_time.update(zip(labels, seconds))
    stats.member_blocks = member_blocks
  return state


def fill_stats(stats, labels, steps, runs, active):
  """Writes a run's counts into `stats`.

  Args:
    stats: The `RunStats`.
    labels: The blocks' labels.
    steps: The steps run.
    runs: Per block, its runs.
    active: Per block, its active members summed over its runs.
  """
  stats.steps = steps
  for label, r, a in zip(labels, runs, active):
    stats.block_executions[label] = r
    stats.block_active[label] = a


# While not empty, `staged_loop`s traced run, at every step, the block
# whose index the last of these int32 `tf.Variable`s holds (the schedule
# is not consulted).  See `StagedFunction.profile_blocks`.
FORCED_BLOCK = []


# Per staged loop being traced (innermost last): whether a gradient can
# run through it (`differentiable`).
_DIFFERENTIABLE = []


def differentiable():
  """Whether a gradient can run through the staged loop being traced.

  Not under XLA without `max_steps` (XLA cannot compile the gradient of a
  loop without a bound on its trips, `xla.warn_if_gradient_needs_max_steps`);
  there the blocks leave the lanes of members not at the block unfilled
  (`TensorFlowBackend.sanitize`).  True outside `differentiable_loop`.
  """
  return _DIFFERENTIABLE[-1] if _DIFFERENTIABLE else True


class differentiable_loop:  # pylint: disable=invalid-name
  """Context manager: `differentiable()` is `value` inside.

  Args:
    value: Whether a gradient can run through the loop traced inside.
  """

  def __init__(self, value):
    self.value = bool(value)

  def __enter__(self):
    _DIFFERENTIABLE.append(self.value)

  def __exit__(self, *exc):
    _DIFFERENTIABLE.pop()


def loop_test(b, num_blocks, xla):
  """The staged loop's condition: whether block `b` is one to run.

  Under XLA the loop carries `b` as `[1]`, not as a scalar.  XLA
  (TensorFlow 2.21 on CPU) asks of every loop, in each of the many rounds
  of its simplification passes (loop-invariant code motion and the
  while-loop simplifier), how many trips it makes: given a condition that
  compares one scalar variable with a constant, it copies the body's
  whole computation of that variable to see whether it is a counter, and
  `b` is computed from every block.  A variable that is not a scalar is
  no counter: the question stops at the condition (docs/performance.md,
  "The loop's condition under XLA").

  Args:
    b: The block to run next, an int32 tensor: a scalar, `[1]` under XLA
      (`num_blocks`: none).
    num_blocks: The number of blocks.
    xla: Whether the loop is traced for XLA.

  Returns:
    A scalar bool tensor.
  """
  if not xla:
    return b < num_blocks
  return tf.reshape(b[:1] < num_blocks, [])


def next_block_tensor(pc, num_blocks, schedule, one_hot_max,
                      with_count=False):
  """`backends.scheduler.Scheduler`'s choice, as tensor ops in the staged loop.

  Args:
    pc: The PCs, an int32 tensor `[batch]`.
    num_blocks: The number of blocks (the exit PC).
    schedule: `'most'` or `'lowest'`.
    one_hot_max: The knob `one_hot_max`.
    with_count: Under XLA with `'most'`, also return the members at the
      block (0 where none is to run).

  Returns:
    The block to run, a scalar int32 tensor (`num_blocks`: none); with
    `with_count`, `(block, count)`.
  """
  if schedule == 'most':
    waits = getattr(schedule, 'waits', None)
    xla = masks.in_xla_context()
    if not xla:
      return _most_by_bincount(pc, num_blocks, waits)
    if (pc.shape[0] is not None and
        pc.shape[0] * num_blocks <= one_hot_max):
      # Compare-and-sum fuses into one loop; a segment sum is a scatter.
      # Summed along the members, the minor axis, which XLA of
      # TensorFlow 2.18 on CPU sums faster (docs/performance.md).
      hits = tf.equal(tf.range(num_blocks, dtype=pc.dtype)[:, tf.newaxis],
                      pc[tf.newaxis])
      counts = tf.reduce_sum(tf.cast(hits, tf.int32), axis=1)
    else:
      counts = tf.math.unsorted_segment_sum(
          tf.ones_like(pc), tf.minimum(pc, num_blocks), num_blocks + 1)
      counts = counts[:num_blocks]
    if waits is not None:
      counts = _eligible(counts, waits)
    return _most_by_key(counts, num_blocks, pc.shape[0], with_count)
  return tf.reduce_min(pc)


def _eligible(counts, waits):
  """`scheduler.eligible_counts` in tensor ops: `counts` (int32
  `[num_blocks]`) with 0 for each block that waits for a block with
  members (`waits`, a NumPy bool array), or as they are where every block
  with members waits."""
  held = tf.reduce_any(tf.logical_and(tf.constant(waits),
                                      (counts > 0)[tf.newaxis]), axis=1)
  out = tf.where(held, tf.zeros_like(counts), counts)
  return tf.where(tf.reduce_any(out > 0), out, counts)


def _most_by_bincount(pc, num_blocks, waits=None):
  """Outside XLA, the lowest-numbered block with the most members (or
  `num_blocks` if none has any): the members counted per block by one
  `Bincount` (no broadcast; finished and parked members, `pc >=
  num_blocks`, count in its last bin or nowhere), and one argmax over
  `2 * count` with a 1 in place of the last bin, which wins only where
  every block counts 0.  Five kernels and their constants a step fewer
  than a one-hot sum, an argmax, a max and a select (docs/performance.md,
  "The `'most'` schedule's counts outside XLA")."""
  counts = tf.raw_ops.Bincount(arr=pc, size=tf.constant(num_blocks + 1),
                               weights=tf.zeros([0], tf.int32))
  if waits is not None:   # loops' exits wait (`_eligible`)
    counts = tf.concat([_eligible(counts[:num_blocks], waits),
                        counts[num_blocks:]], 0)
  scale = tf.constant([2] * num_blocks + [0], tf.int32)
  last = tf.constant([0] * num_blocks + [1], tf.int32)
  return tf.argmax(counts * scale + last, output_type=tf.int32)


def _most_by_key(counts, num_blocks, batch, with_count=False):
  """Under XLA, the lowest-numbered block with the most members (or
  `num_blocks` if none has any) by one max over `count * K + K - 1 - k`
  (K = num_blocks) instead of an argmax (a two-valued reduction) and a
  max, which cost more per step (docs/performance.md); with
  `with_count`, also its count, `top // K`."""
  k = num_blocks
  wide = batch is None or (batch + 1) * k >= 2**31
  dtype = tf.int64 if wide else tf.int32
  key = (tf.cast(counts, dtype) * k +
         tf.range(k - 1, -1, -1, dtype=dtype))
  top = tf.reduce_max(key)
  best = tf.cast((k - 1) - top % k, tf.int32)
  block = tf.where(top >= k, best, tf.constant(num_blocks, tf.int32))
  if not with_count:
    return block
  return block, tf.cast(top // k, tf.int32)


def traceable(fn, name=None):
  """`fn` as the Python function of a `tf.function` of its own.

  A `functools.partial` of it, named `name` (default: `fn`'s name), the
  name of the traced graphs and of TensorFlow's messages.

  TensorFlow counts a `tf.function`'s traces by its Python function's
  code (`__code__`) and warns of "excessive retracing" after five traces
  in a row.  All the closures made by one `def` share their code, so each
  `tf.function` over such a closure (one per staged function, per program
  run eagerly, per sampler of the NUTS example) added to one count:
  staging five functions, each traced once, warned.  A partial has no
  code and is counted on its own, so the warning keeps its meaning: one
  function traced for five signatures in a row.

  Args:
    fn: A function.
    name: Its name for TensorFlow.

  Returns:
    The partial.
  """
  out = _Traceable(fn)
  out.__name__ = name or getattr(fn, '__name__', 'function')
  return out


class _Traceable(functools.partial):
  """`traceable`'s partial, shown by its name in TensorFlow's messages
  ("... calls to <function fibonacci> triggered tf.function retracing")."""

  def __repr__(self):
    return f'<function {self.__name__}>'


# -- the eager path's cache of staged loops --------------------------------

class StagedRun:
  """The `tf.function` running one compiled program's loop, and its sites.

  Traced once, whatever the batch sizes: its input signature leaves the
  batch axis without a size (the state's first axis, a stack's second),
  and its ops read the size at run time (`masks.BatchAxis`).  The
  packing's thresholds (`knobs`) are reckoned at the first call's batch
  size.

  Args:
    backend: The `TensorFlowBackend`.
    blocks: The compiled blocks.
    num_blocks: The number of blocks.
    schedule: `'most'` or `'lowest'`.
    batch: The batch size of the first call.
    limit: `(max_steps, step_limit_error)`.
  """

  def __init__(self, backend, blocks, num_blocks, schedule, batch, limit):
    self.blocks = blocks      # keeps id(blocks) unique while cached
    self.batch = batch
    self.stageable = True
    self.sites = None         # the trace's `errors.Sites`

    def loop(state):
      self.sites = tf_errors.Sites(num_blocks)
      out, acc, _ = staged_loop(backend, blocks, state, num_blocks, schedule,
                                batch, self.sites, limit)
      return out, acc
    self._loop = loop
    self._function = None
    self._lock = threading.Lock()

  def __call__(self, state):
    """Runs the loop on `state`; returns `(state, counts)`.

    Args:
      state: The VM state.
    """
    state = list(state)
    with self._lock:   # one function, whichever thread calls first
      if self._function is None:
        stacks = self.blocks[0].stack_slots if self.blocks else ()
        signature = [tf.TensorSpec(
            _without_batch(x.shape, 1 if i in stacks else 0), x.dtype)
                     for i, x in enumerate(state)]
        # Counted alone (`traceable`).
        self._function = tf.function(traceable(self._loop, 'loop'),
                                     input_signature=[signature],
                                     autograph=False)
    return self._function(state)


def _without_batch(shape, axis):
  """`shape` with its batch axis, `axis`, of unknown size."""
  dims = shape.as_list()
  dims[axis] = None
  return tf.TensorShape(dims)


# Each entry holds its traced graphs (megabytes for a large program).
_eager_cache = caches.register('staged loops',
                               caches.LRUCache(_EAGER_CACHE_SIZE))
_eager_lock = threading.Lock()


def _eager_cache_get(backend, blocks, num_blocks, schedule, batch, limit):
  # The values from outside that the trace holds (`externals`): one
  # changed since, the loop is traced anew.
  key = (id(blocks), backend, schedule, limit[0], externals.current.get())
  with _eager_lock:
    entry = _eager_cache.get(key)
    if entry is not None and entry.blocks is blocks:
      return entry
    entry = StagedRun(backend, blocks, num_blocks, schedule, batch, limit)
    _eager_cache[key] = entry
    return entry
