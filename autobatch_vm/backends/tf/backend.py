"""TensorFlow backend: the whole VM run stages as one `tf.while_loop`.

One loop iteration is one VM step: pick the next block (the lowest PC, or
the most populated block), count the members there, and run that block
through a `tf.switch_case` over all blocks.  Every shape but the batch
axis is static, and under `tf.function` and `tf.function(jit_compile=
True)` (XLA) the batch axis is too; `tf.GradientTape` differentiates
through it.

Stacks are preallocated `[depth + 1, batch, *shape]` tensors: one spare
row above the capacity; a member writing the spare row has overflowed.  A
pop reads every member's top with one `tf.gather` and keeps it where the
mask says.  The VM caches the top of each stack in its register, so reads
never touch the stack.

The loop carries the state packed, one tensor per (kind, dtype, shape), and
each block's branch returns only what the block writes: register values,
and pushes as `[batch, *shape]` rows with each member's target frame.
These are scattered into the packs after the switch (in place under XLA).
A step therefore costs what its block computes and writes, not the size of
the state: XLA copies every value that a conditional merely passes through,
which made a step of a program with large state (NUTS) several times
slower.

Errors that only data can reveal (recursion deeper than `max_stack_depth`,
a failing `assert`) cannot raise in a graph.  Instead the members involved
are *parked*: their PC is set to an error code (`num_blocks + 1 + site`),
which stops them and lets the others finish.  After the loop:
- eagerly: the error is raised as `StackOverflowError` /
  `AssertionFailedError` naming the members;
- in a graph (`tf.function`): a `tf.debugging.Assert` fails the run with
  the same message (`tf.errors.InvalidArgumentError`);
- under XLA, which drops asserts (the run adds none there),
  `autobatch_vm.xla.compile_nested_output` turns the error into an
  exception after the compiled function returns; under a bare
  `jit_compile=True` the failed members' outputs are poisoned (NaN for
  floats, the dtype's minimum for integers) and a boolean output is
  refused while tracing (`vm.failures`);
- with `on_error='status'` nothing is raised: the call returns which
  members finished.

Eager mode runs the same staged loop through an internal `tf.function`
per compiled program, cached (it is tens of times faster than stepping
eagerly): traced for the first call's batch size and, at a call at
another size, once more with a batch axis of unknown size, whose ops
read the size at run time, for every other size; both are planned for
the first call's batch size (`loop.StagedRun`).  As with any
`tf.function`, primitives run when it is traced: a Python side effect
happens at a trace, and a closed-over Python or NumPy value is frozen at
its value then (a `tf.Variable` is read at every call).  If a primitive
cannot be staged (say it calls NumPy on the tensor), the program steps
eagerly from then on; if the staged run fails inside TensorFlow, that
run is repeated step by step eagerly, which raises the error naming the
members.

RunStats: eagerly, ints as on NumPy (with `profile=True` the run steps
eagerly so that each block can be timed).  In a graph, `steps` and the
per-block counts are scalar int32 tensors of that graph, and with
`profile=True` the loop also carries blocks per member and (outside XLA)
seconds per block from timestamps around each step: return
`stats.counts()` from your `tf.function` and read it with
`stats.with_counts(value)`; `utilization` and tables need numbers.
"""

import collections
import contextlib
import itertools

import numpy as np
import tensorflow as tf

from autobatch_vm import errors
from autobatch_vm.backends import base
from autobatch_vm.backends.tf import errors as tf_errors
from autobatch_vm.backends.tf import knobs as knobs_lib
from autobatch_vm.backends.tf import loop
from autobatch_vm.backends.tf import masks
from autobatch_vm.backends.tf import ops
from autobatch_vm.backends.tf import randomness
from autobatch_vm.backends.tf import work
from autobatch_vm.per_member import member_ops

__all__ = ['TensorFlowBackend']


class TensorFlowBackend(base.Backend):
  """Runs autobatch_vm programs on TensorFlow tensors, staged."""

  name = 'tensorflow'
  staged = True
  sanitizes = True

  def __init__(self, safety_checks=True, while_parallel_iterations=10,
               while_maximum_iterations=None, basic_block_xla_device=None,
               knobs=None):
    """TFP's constructor arguments, with TFP's meanings, and our knobs.

    Args:
      safety_checks: detect stack overflow at run time.  The check is part
        of every push (one comparison per member), so it stays on either
        way: `False` is accepted for TFP's programs and changes nothing.
      while_parallel_iterations: `parallel_iterations` of the VM's
        `tf.while_loop`.
      while_maximum_iterations: at most this many VM steps: a run that has
        not finished by then raises `StepLimitError` (TFP's loop stopped
        silently).  The default for the call's `max_steps`.
      basic_block_xla_device: if set (e.g. `'/device:CPU:0'`), every
        basic block is compiled with XLA on that device, inside a loop
        that is not (useful when the whole run cannot be `jit_compile`d).
      knobs: The staged loop's `TuningKnobs` (`backends.tf.knobs`), or None
        for the defaults of the device a run is traced on.
    """
    self.safety_checks = bool(safety_checks)
    self.while_parallel_iterations = while_parallel_iterations
    if while_maximum_iterations is not None and (
        isinstance(while_maximum_iterations, bool)
        or not isinstance(while_maximum_iterations, int)
        or while_maximum_iterations < 1):
      raise errors.ArgumentError(
          'while_maximum_iterations must be None or a positive int, got '
          f'{while_maximum_iterations!r}')
    self.while_maximum_iterations = while_maximum_iterations
    self.basic_block_xla_device = basic_block_xla_device
    if knobs is not None and not isinstance(knobs, knobs_lib.TuningKnobs):
      raise errors.ArgumentError(
          f'knobs must be None or a TuningKnobs, got {knobs!r}')
    self.knobs = knobs

  def _key(self):
    return (self.while_parallel_iterations, self.while_maximum_iterations,
            self.basic_block_xla_device, self.knobs)

  def device_knobs(self):
    """The knobs of a run traced now: the given ones, else the device's."""
    if self.knobs is not None:
      return self.knobs
    return knobs_lib.for_device(masks.on_gpu())

  def __repr__(self):
    return (f'TensorFlowBackend(safety_checks={self.safety_checks}, '
            f'while_parallel_iterations={self.while_parallel_iterations}, '
            f'while_maximum_iterations={self.while_maximum_iterations}, '
            f'basic_block_xla_device={self.basic_block_xla_device!r}'
            + (f', knobs={self.knobs!r})' if self.knobs is not None else ')'))

  def __eq__(self, other):
    return isinstance(other, TensorFlowBackend) and self._key() == other._key()

  def __hash__(self):
    return hash((TensorFlowBackend,) + self._key())

  def in_graph(self):
    """Whether ops are being staged into a graph (tf.function, XLA)."""
    return not tf.executing_eagerly()

  # -- values --------------------------------------------------------------

  def asarray(self, x):
    if isinstance(x, tf.Variable):
      return x.read_value()
    return tf.convert_to_tensor(x)

  def shape(self, x, batched=False):
    if not (tf.is_tensor(x) or isinstance(x, tf.Variable)):
      return tuple(np.shape(x))
    shape = x.shape
    batch_only = (batched and shape.rank and shape[0] is None and
                  None not in shape.as_list()[1:])
    if batch_only and not masks.in_xla_context():
      # A batch axis of unknown size (a tf.function's input signature
      # leaving it None): the run reads the size at run time.
      return tuple(shape.as_list())
    if batch_only:
      raise errors.BackendError(
          f'a tensor of shape {shape} has a batch axis of unknown size '
          'under jit_compile=True; the run under XLA is planned for its '
          'batch size (XLA compiles each size anyway)',
          hint='Give the tf.function an input_signature with a batch '
          'size, or none; or stage the batched function with '
          'ab.stage(fn, jit_compile=True), whose batch_buckets= pads '
          'calls to a few sizes.')
    if shape.rank is None or None in shape.as_list():
      raise errors.BackendError(
          f'a tensor of shape {shape} has unknown dimensions; autobatch_vm '
          'needs static shapes but for the batch axis (stacks are '
          'preallocated)',
          hint='Give tf.function an input_signature with fixed sizes but '
          'for the batch axis, or tf.ensure_shape the arguments.  A value '
          'whose size follows the data (a boolean mask\'s selection '
          'v[v > 0], tf.where(c), tf.unique) has a size of its own in each '
          'member: pad to a fixed size and carry the count (np.where(v > '
          '0, v, 0)).')
    return tuple(shape.as_list())

  def batch_size(self, x):
    if tf.is_tensor(x) and x.shape.rank and x.shape[0] is None:
      return tf.shape(x)[0]
    return self.shape(x)[0]

  def dtype(self, x):
    if tf.is_tensor(x) or isinstance(x, tf.Variable):
      return np.dtype(x.dtype.as_numpy_dtype)
    return np.asarray(x).dtype

  def cast(self, x, dtype):
    return tf.cast(x, tf.as_dtype(np.dtype(dtype)))

  def cast_weak(self, x, dtype, where=''):
    dtype = np.dtype(dtype)
    x = tf.convert_to_tensor(x)
    own = np.dtype(x.dtype.as_numpy_dtype)
    if own.kind not in 'iu' or dtype.kind not in 'iu' or (
        np.result_type(own, dtype) == dtype):
      return self.cast(x, dtype)
    if tf.executing_eagerly():
      outside = base.ints_outside(x.numpy(), dtype)
      if outside is not None:
        raise OverflowError(f'Python integer {outside} out of bounds for '
                            f'{dtype}')
      return self.cast(x, dtype)
    # Staged: a failed check stops the run where it is executed (XLA
    # drops the check).
    info = np.iinfo(dtype)
    wide = tf.cast(x, tf.int64) if own != np.uint64 else x
    low = max(info.min, 0) if own == np.uint64 else info.min
    check = tf.debugging.Assert(
        tf.reduce_all((wide >= low) & (wide <= min(info.max, 2**63 - 1))),
        [f'OverflowError: Python integer out of bounds for {dtype}{where}:',
         x])
    with tf.control_dependencies([check]):
      return self.cast(tf.identity(x), dtype)

  def dummy(self, tensor_type, batch):
    return tf.zeros((batch,) + tuple(tensor_type.shape),
                    tf.as_dtype(tensor_type.dtype))

  zeros = dummy

  def draws_at_random(self, fn, args):
    """Whether `fn(*args)` traces to ops that draw or keep state.

    Args:
      fn: A primitive.
      args: Values like its arguments.

    Returns:
      `randomness.draws_at_random`'s answer: None where `fn` does not
      trace.
    """
    return randomness.draws_at_random(fn, args)

  def call_for_types(self, fn, args, batch):
    if tf.executing_eagerly():
      return fn(*args)
    graph = tf.compat.v1.get_default_graph()
    before = graph.version   # the ops made so far, in order
    result = fn(*args)
    if graph.version > before:
      work.note(fn, graph.get_operations()[before:], args, batch)
    return result

  def traces_symbolically(self):
    """Whether `trace` finds a primitive's result type without values.

    True when running eagerly (inside a graph, primitives build ops and
    compute nothing anyway).
    """
    return tf.executing_eagerly()

  def trace(self, fn, args, batch=1, inputs=None):
    """`fn(*args)` traced in a scratch graph on `tf.TensorSpec`s like `args`.

    Python scalars stay constants.

    Args:
      fn: A primitive.
      args: Values like its arguments.
      batch: Their batch size.
      inputs: None, or a list that gets the symbolic arguments `fn` was
        traced on (for `reads_values`).

    Returns:
      Its result with symbolic tensors, of static dtypes and shapes, and
      no value computed.
    """
    names = itertools.count()

    def spec(x):
      if tf.is_tensor(x):   # named: the primitive's own names may not be
        return tf.TensorSpec(x.shape, x.dtype, name=f'arg{next(names)}')
      return x
    specs = tf.nest.map_structure(spec, list(args))
    results = []

    def keep(*a):
      # What `fn` returns as Python sees it: a Python scalar stays one
      # (a weak literal), where the function's outputs would be tensors.
      if inputs is not None:
        inputs[:] = a
      results.append(self.call_for_types(fn, a, batch))
      return results[-1]
    tf.function(keep, autograph=False).get_concrete_function(*specs)
    return results[0]

  def reads_values(self, value, inputs):
    """Whether graph tensors `value` read the values of tensors `inputs`.

    Through any op but those that take a shape (`Shape`, `Size`,
    `Rank`).

    Args:
      value: A primitive's result, traced.
      inputs: The tensors it was traced on.

    Returns:
      True or False; None where a leaf is not a graph tensor.
    """
    sources = {id(x.op) for x in tf.nest.flatten(list(inputs))
               if tf.is_tensor(x) and hasattr(x, 'op')}
    stack = []
    for leaf in tf.nest.flatten(value):
      if isinstance(leaf, (bool, int, float, complex, np.generic)):
        continue
      if not (tf.is_tensor(leaf) and hasattr(leaf, 'op')):
        return None   # a value (eager), not a graph's tensor
      stack.append(leaf.op)
    seen = set()
    while stack:
      node = stack.pop()
      if id(node) in seen:
        continue
      seen.add(id(node))
      if id(node) in sources:
        return True
      if node.type in _SHAPE_OPS:
        continue
      stack.extend(t.op for t in node.inputs)
    return False

  @contextlib.contextmanager
  def ops_drawn(self):
    """A context manager telling whether the graph ops built inside it draw.

    Yields:
      A list that gets, on leaving the block, `randomness.ops_draw` of the
      ops built in it in the graph being traced (None eagerly).
    """
    found = []
    if tf.executing_eagerly():
      try:
        yield found
      finally:
        found.append(None)
      return
    graph = tf.compat.v1.get_default_graph()
    mark = len(graph.get_operations())
    try:
      yield found
    finally:
      found.append(randomness.ops_draw(graph.get_operations()[mark:]))

  def eager_scope(self):
    """`tf.init_scope()`: ops run eagerly, outside the graph being traced.

    Returns:
      The context manager.
    """
    return tf.init_scope()

  def coerce_fn(self, tensor_type, batch, strict=False):
    """A function making a value `[batch, *shape]` of the type's dtype.

    Args:
      tensor_type: The `TensorType` of one member's value.
      batch: The leading dimension of the result.
      strict: Whether the value is a primitive's result on per-member
        inputs: its rows are checked where its shape is known while
        tracing (`backends.numpy.coercer`).

    Returns:
      `coerce(x)`.
    """
    np_dtype = np.dtype(tensor_type.dtype)
    dtype = tf.as_dtype(np_dtype)
    if tf.is_tensor(batch):
      # A staged loop's batch axis of unknown size: the size read at run
      # time.
      return _dynamic_coerce(np_dtype, dtype, batch, tensor_type.shape,
                             strict)
    full_shape = [batch] + list(tensor_type.shape)

    def coerce(x):
      x = _as_tensor(x, np_dtype, dtype)
      if x.shape.as_list() != full_shape:
        if (strict and x.shape.rank == len(full_shape) and
            x.shape[0] is not None and x.shape[0] != batch):
          raise ValueError(errors.row_count_message(x.shape[0],
                                                           batch))
        x = tf.broadcast_to(x, full_shape)
      return x
    return coerce

  def coercer(self, tensor_type, strict=False):
    return lambda x, rows: self.coerce_fn(tensor_type, rows, strict)(x)

  def fill_like(self, pc, value):
    """`value` for every member, an int32 tensor of `pc`'s shape.

    A constant where `pc`'s batch size is known when tracing, else a
    broadcast to the size read at run time.

    Args:
      pc: The PCs.
      value: An int.

    Returns:
      The tensor.
    """
    if pc.shape[0] is not None:
      return tf.constant(np.full([pc.shape[0]], value, np.int32))
    axis = masks.batch_axis()
    if axis is None:
      return tf.broadcast_to(tf.constant(value, tf.int32), tf.shape(pc))
    return axis.broadcast(tf.constant(value, tf.int32))

  def take_rows(self, x, idx):
    if ops.no_elements(x):
      return tf.zeros([len(idx)] + x.shape.as_list()[1:], x.dtype)
    return tf.gather(x, idx)

  def scatter(self, x, rows, m):
    if m.full:
      return tf.convert_to_tensor(rows)
    if ops.no_elements(x):
      return x
    return tf.tensor_scatter_nd_update(x, m.idx[:, np.newaxis], rows)

  def concat(self, xs):
    return tf.concat(xs, axis=0)

  def slice(self, x, i):
    return x[i:i + 1]

  def expand(self, x):
    return tf.expand_dims(self.asarray(x), 0)

  def to_bool(self, x):
    x = self.asarray(x)
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros_like(x))

  def error_context(self):
    # A Python scalar of a batch raises on every NumPy, as on the newest
    # (`errors.scalar_conversions_raise`): an eager tensor converts
    # through NumPy.
    return errors.scalar_conversions_raise()

  # -- masks ---------------------------------------------------------------

  def make_mask(self, pc, block, batch):
    if tf.executing_eagerly():
      return self.mask_of(tf.equal(pc, block), batch)
    static = tf.get_static_value(pc)
    if static is not None:  # e.g. the initial PC, to write the inputs
      mask = static == block
      return masks.Mask(tf.constant(mask), int(mask.sum()), bool(mask.all()),
                   batch)
    return masks.Mask(tf.equal(pc, block), None, False, batch)

  def mask_of(self, mask, batch):
    if tf.executing_eagerly():
      count = int(np.count_nonzero(mask.numpy()))
      return masks.Mask(mask, count, count == batch, batch)
    return masks.Mask(mask, None, False, batch)

  def when_any(self, m, run, types):
    """`run()`, or zeros where no member is in `m`.

    In a graph, a `tf.cond`: outside XLA a primitive checks its inputs
    (`tf.gather` its indices, on CPU), and the lanes it would see with no
    member in `m` hold data of members it is not for; in a loop that can
    be differentiated a derivative that is inf there would make gradients
    NaN (see `sanitize`).  Eagerly the VM skips the rest of a block no
    member stays at, and under XLA without a gradient no primitive fails
    at run time (indices are clamped): `run()`.

    Args:
      m: A `masks.Mask`.
      run: A function returning a list of whole-batch tensors, one per
        `TensorType` of `types`.
      types: Their types.

    Returns:
      The list of tensors.
    """
    if m.count is not None or (masks.in_xla_context() and
                               not loop.differentiable()):
      return run()
    # The members it fails for, as flags computed inside the cond (what
    # vectorized primitives report, `member_ops.report_failures`, and the
    # members `_stop` parks), leave it as outputs, false where it skips.
    step = tf_errors.current_step()
    start = len(step.park) if step is not None else 0
    escaped = []   # ('report', kind) or ('park', code), one per flag

    def run_and_report():
      with member_ops.out_of_range_reports() as reports:
        out = list(run())
      flags = [(('report', kind), flag) for report in reports
               for kind, flag in report.items()]
      if step is not None:
        flags += [(('park', code), where)
                  for where, code in step.park[start:]]
        del step.park[start:]
      escaped[:] = [what for what, _ in flags]
      return out + [flag for _, flag in flags]

    def zeros():
      batch = m.batch
      return [tf.zeros(tf.concat([tf.reshape(batch, [1]),
                                  tf.constant(list(t.shape), tf.int32)], 0)
                       if tf.is_tensor(batch) else [batch] + list(t.shape),
                       tf.as_dtype(t.dtype)) for t in types] + [
                           tf.zeros_like(m.mask) for _ in escaped]
    out = tf.cond(tf.reduce_any(m.mask), run_and_report, zeros)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    flags = out[len(types):]
    for (how, what), flag in zip(escaped, flags):
      if how == 'report':
        member_ops.report_failures({what: flag})
      else:
        step.park.append((flag, what))
    return out[:len(types)]

  def submask(self, m, cond, negate=False):
    if negate:
      cond = tf.logical_not(cond)
    return self.mask_of(cond if m.full else tf.logical_and(m.mask, cond),
                        m.batch)

  def start_pc(self, active, num_blocks):
    return tf.where(active, tf.constant(0, tf.int32),
                    tf.constant(num_blocks, tf.int32))

  def fill_inactive(self, x, m):
    """`x` with the lanes outside `m` copied from the first lane inside.

    Args:
      x: A whole-batch value.
      m: A `masks.Mask`.

    Returns:
      The filled tensor.
    """
    x = self.asarray(x)
    if len(x.shape) == 0 or ops.no_elements(x):
      return x
    if masks.in_xla_context():
      # XLA fuses the broadcast of one row into the select.
      return tf.where(m.like(x.shape.as_list()), x, tf.gather(x, m.first))
    if x.dtype.is_floating or x.dtype.is_complex:
      # Not `tf.gather`, nor `tf.gather_nd` with `[batch, 1]` indices,
      # whose gradients are `IndexedSlices`: tape.gradient would return
      # those as the gradient of the run's inputs.  With `[1, batch, 1]`
      # indices the gradient is dense.  One gather and a reshape cost less
      # than a gather and a select (docs/performance.md).
      filled = tf.gather_nd(x, m.fill_index_nd)
      return tf.reshape(filled, masks.reshape_shape(x))
    return tf.gather(x, m.fill_index)

  def sanitize(self, x, m):
    """A register as a block's primitives see it (`fill_inactive`).

    The lanes of members not at the block hold a copy of a member's that
    is.

    Primitives run on the whole batch here, and leftover data in the other
    lanes must not matter: an index out of range there would fail the run
    (`tf.gather` checks indices on CPU), and a derivative that is inf there
    would make gradients NaN (0 * inf through the masked write).  With a
    live member's data, those lanes compute what it computes.  Under XLA,
    which clamps indices and defines integer division by zero, registers
    are filled only in a loop that can be differentiated
    (`loop.differentiable`: with `max_steps`), integers too (a leftover
    `n = 0` in `x * log(n)` made the copied `x`'s gradient NaN); without,
    a block costs a gather and a select less per register it reads, and
    XLA compiles fewer kernels (docs/performance.md, "Lanes left unfilled
    under XLA").

    Args:
      x: A register's value (a pending write included).
      m: The mask of the members at the block, or None outside a block.

    Returns:
      The value the primitives get.
    """
    return masks.member_rows(self._sanitized(x, m))

  def _sanitized(self, x, m):
    if m is None or m.full:
      return ops.value(x)
    if isinstance(x, ops.MaskedWrite):
      # Written (say popped) in this block for the members in `m`: their
      # lanes are `new`, and the others' are filled from them anyway.
      x = x.for_members(m)
    dtype = getattr(x, 'dtype', None)   # None: a Python scalar, left as is
    if (dtype is not None and masks.in_xla_context() and
        not loop.differentiable()):
      return x
    if m.filled_rows is not None:
      filled = m.filled_rows(x)
      if filled is not None:
        return filled
    return self.fill_inactive(x, m)

  def members(self, m):
    if not tf.executing_eagerly():
      return None
    return m.idx

  def write(self, old, new, m):
    # In a block of the staged loop outside XLA the select waits
    # (`ops.MaskedWrite`): the registers a block writes into one pack then
    # take one select over the pack instead of one each
    # (`packing.Packing.ports`).
    if m.full:
      return new
    if tf_errors.current_step() is not None and not masks.in_xla_context():
      if isinstance(old, ops.MaskedWrite) and old.m is m:
        old = old.old   # written twice in the block: the last one counts
      return ops.MaskedWrite(old, new, m)
    return m.select(new, ops.value(old))

  # -- program counter -----------------------------------------------------

  def goto(self, pc, m, target):
    target = tf.constant(target, tf.int32)
    if m.full:
      return tf.fill(tf.shape(pc), target)
    return tf.where(m.mask, target, pc)

  def branch(self, pc, m, cond, true_target, false_target):
    to = tf.where(cond, tf.constant(true_target, tf.int32),
                  tf.constant(false_target, tf.int32))
    if m.full:
      return to
    return masks.select(m.mask, to, pc)

  # -- stacks --------------------------------------------------------------
  # A stack of capacity `depth` has `depth + 1` rows; the last is scratch.

  def stack_zeros(self, tensor_type, depth, batch):
    return tf.zeros((depth + 1, batch) + tuple(tensor_type.shape),
                    tf.as_dtype(tensor_type.dtype))

  def sp_zeros(self, batch):
    return tf.zeros((batch,), tf.int32)

  def push(self, stacks, sp, values, m, depth, overflow_error):
    # Members not in `m`, and members parked after an overflow (sp >
    # depth), target row -1: no row.
    target = sp if m.full else tf.where(m.mask, sp, -1)
    out = []
    for s, v in zip(stacks, values):
      if isinstance(v, ops.MaskedWrite):
        # Only the members in `m` push: their lanes are enough.
        v = v.for_members(m)
      v = tf.convert_to_tensor(v, s.dtype)
      out.append(ops.StackWrite(s, target, v, m.full))
    if tf_errors.current_step() is None:   # not in the staged loop: now
      out = [w.materialize() for w in out]
    new_sp = sp + 1 if m.full else sp + m.as_int
    if overflow_error is not None:
      # Members in `m` writing the spare row `depth` overflowed.
      self._check_overflow(tf.equal(target, depth), overflow_error)
    return out, new_sp

  reports_out_of_range = True

  def fail_members(self, flags, m, make_error, kind='index'):
    # In the staged loop the flagged members are parked (their error
    # raised after the loop, or their status false), as for an overflow.
    step = tf_errors.current_step()
    bad = flags[0] if len(flags) == 1 else tf.reduce_any(
        tf.stack(flags), axis=0)
    if not m.full:
      bad = tf.logical_and(m.mask, bad)
    # Where nothing reports an index out of range, its members stop
    # quietly (`errors.Sites.reports_indices`); a math failure
    # (`int(nan)`) stops them too, and the trace warns (`vm.failures`).
    self._stop(bad, make_error, quiet=(
        kind == 'index' and step is not None and
        not step.sites.reports_indices))

  def _check_overflow(self, over, overflow_error):
    self._stop(over, tf_errors.overflow_maker(overflow_error))

  def _stop(self, failed, make_error, quiet=False):
    """Stops the members in `failed` with `make_error(members)`'s error:
    raised at once eagerly; in the staged loop they are parked (the error
    raised after the loop, or their status false; at a `quiet` site,
    `errors.Sites.add`); elsewhere in a graph an assertion fails."""
    if tf.executing_eagerly():
      if bool(tf.reduce_any(failed)):
        raise make_error(np.flatnonzero(failed.numpy()))
      return
    step = tf_errors.current_step()
    if step is None:  # not inside our loop: fall back on an assertion
      tf.debugging.Assert(tf.logical_not(tf.reduce_any(failed)),
                          [tf_errors.without_members(make_error(None))])
      return
    step.park.append((failed, step.sites.add(make_error, quiet)))

  def pop(self, stacks, sp, values, m):
    out = self.peek(stacks, sp, values, m)
    return out, (sp - 1 if m.full else sp - m.as_int)

  def peek(self, stacks, sp, values, m):
    batch = m.batch
    axis = masks.batch_axis() if tf.is_tensor(batch) else None
    members = (tf.range(batch, dtype=tf.int32) if axis is None
               else axis.members)
    # Row-major flat index of (top, member); a member with an empty stack
    # (only ever one not in `m`) reads row 0, which `write` discards.
    flat = tf.maximum(sp - 1, 0) * batch + members
    tops = {}
    packs = collections.defaultdict(list)
    for s in stacks:
      if isinstance(s, ops.PackRow):
        packs[id(s.pack)].append(s)
    for key, rows_of in packs.items():
      pack = rows_of[0].pack
      shape = pack.shape.as_list()
      if (len(rows_of) < 2 or 2 * len(rows_of) < shape[0]
          or ops.no_elements(pack)):
        continue   # a gather per stack: the pack is mostly other stacks
      # Most stacks of one pack (NUTS: the nine `[25]` stacks of a
      # subtree): one gather of every row's top frames, then an unstack.
      rows = tf.reshape(pack, [shape[0], -1] + shape[3:])
      tops[key] = tf.unstack(tf.gather(rows, flat, axis=1))
    out = []
    for s, v in zip(stacks, values):
      if isinstance(s, ops.PackRow) and id(s.pack) in tops:
        top = tops[id(s.pack)][s.row]
      else:
        s = ops.value(s)
        shape = s.shape.as_list()
        if ops.no_elements(s):   # a gather from no elements fails
          top = tf.zeros(tf.stack([batch] + shape[2:]) if tf.is_tensor(batch)
                         else [batch] + shape[2:], s.dtype)
        else:
          rows = tf.reshape(s, [-1] + shape[2:])
          top = tf.gather(rows, flat)
      out.append(self.write(v, top, m))
    return out

  # -- members stopped by an error (`vm.failures`) --------------------------

  def poison_members(self, x, failed):
    return tf_errors.poison(tf.convert_to_tensor(x), failed)

  def members_ok(self, failed, batch):
    if failed is None:
      return tf.ones([batch], tf.bool)
    return tf.logical_not(failed)

  # -- the loop ------------------------------------------------------------

  def run(self, blocks, state, num_blocks, schedule, stats, labels,
          max_steps=None, step_limit_error=None, on_error='raise'):
    # `stats` gets ints eagerly, tensors in a graph.  `max_steps` is the
    # loop's `maximum_iterations` (members left then fail with
    # `step_limit_error(members)`); a static trip count also lets XLA
    # differentiate the loop.
    batch = stats.batch_size
    if not tf.is_tensor(batch) and not batch:
      loop.fill_stats(stats, labels, 0, [0] * num_blocks, [0] * num_blocks)
      return state
    limit = (max_steps, step_limit_error)
    if tf.executing_eagerly():
      return loop.run_eagerly(self, blocks, state, num_blocks, schedule,
                              stats, labels, limit, on_error)
    sites = tf_errors.Sites(num_blocks)
    sites.reports_indices = not (masks.in_xla_context() and
                                on_error != 'status' and
                                not tf_errors.collecting())
    with loop.differentiable_loop(not masks.in_xla_context() or
                                  max_steps is not None):
      state, acc, profiled = loop.staged_loop(
          self, blocks, state, num_blocks, schedule, batch, sites, limit,
          profile=stats.profile)
    state = loop.fail_in_graph(self, state, num_blocks, sites, stats,
                               on_error)
    runs, active = tf.unstack(acc, axis=1)
    loop.fill_stats(stats, labels, tf.reduce_sum(runs), tf.unstack(runs),
                    tf.unstack(active))
    if profiled is not None:
      seconds, stats.member_blocks = profiled
      if seconds is not None:
        stats.block_time.update(zip(labels, tf.unstack(seconds)))
    return state


def _as_tensor(x, np_dtype, dtype):
  """`x` as a tensor of `dtype` (a variable read, a Python or NumPy value
  converted)."""
  if isinstance(x, tf.Variable):
    x = x.read_value()
  elif not tf.is_tensor(x):
    if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex,
                      list)):
      x = np.asarray(x, np_dtype)
    x = tf.convert_to_tensor(x)
  if x.dtype != dtype:
    x = tf.cast(x, dtype)
  return x


# Ops that read a tensor's shape, not its values (`reads_values`).
_SHAPE_OPS = frozenset({'Shape', 'ShapeN', 'Size', 'Rank'})


def _dynamic_coerce(np_dtype, dtype, batch, shape, strict=False):
  """`coerce_fn`'s function for a batch size `batch` that is a scalar
  tensor: a value of rank `1 + len(shape)` whose first axis is unknown
  when tracing is taken as a batch; anything else is broadcast to
  `[batch, *shape]` (a row count other than 1 or the batch fails there,
  at run time).  With `strict`, a value of that rank whose row count is
  known when tracing is checked at run time to have one row per member
  (`x[:1]` is the first member's row: it fails where the batch is not
  one, rather than being broadcast)."""
  shape = list(shape)

  def coerce(x):
    x = _as_tensor(x, np_dtype, dtype)
    if (x.shape.rank == len(shape) + 1 and
        x.shape.as_list()[1:] == shape):
      axis = masks.batch_axis()
      if x.shape[0] is None:
        if not strict or axis is None or masks.has_member_rows(x):
          return x
        # Its rows are checked by a reshape to the batch's (one kernel):
        # `x[:1]` fails there rather than being broadcast by later ops.
        return tf.reshape(x, axis.shape_of(shape))
      if strict:
        rows = x.shape[0]
        check = tf.debugging.assert_equal(
            batch, rows, message=errors.row_count_message(rows, 'the batch'))
        with tf.control_dependencies([check]):
          return tf.broadcast_to(x, tf.stack([batch] + shape))
    axis = masks.batch_axis()
    if not shape and axis is not None:
      return axis.broadcast(x)
    return tf.broadcast_to(x, tf.stack([batch] + shape))
  return coerce
