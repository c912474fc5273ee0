"""The interface every backend implements, with its capabilities.

A backend holds the arrays of a run (NumPy arrays, TensorFlow tensors)
and runs the VM's step loop over them.  Executors ask a backend what it
can do through the attributes and methods declared here, never by probing
for a name:

- `compacts`: blocks run on the rows of the members at the block only
  (NumPy): the VM generates each block's code (`vm.codegen`), which does
  its own stack and PC updates, and the stackless executor queues rows
  instead of keeping PCs.  A backend that does not compact runs
  primitives on the whole batch with masked writes, through the methods
  under "Masked lanes" below.
- `staged`: the run may be staged into a graph (TensorFlow); `in_graph()`
  says whether it is being staged now.
- `sanitizes`: primitives on the whole batch must not see leftover data
  in the lanes of members not at the block; `sanitize` fills them.
- `prepare_run()`: called before a stackless run.

Methods that every backend implements raise `NotImplementedError` here;
those of the masked-lane protocol are needed only where `compacts` is
false.

A backend's `run` is handed the VM's state as a flat list whose first
three slots are named here (`PC`, `PC_STACK`, `PC_SP`); `vm.layout`
assigns the others.
"""

import contextlib

import numpy as np

__all__ = ['Backend', 'PC', 'PC_STACK', 'PC_SP', 'ints_outside']

# The state slots of the program counter, its stack and the stack's pointer.
PC, PC_STACK, PC_SP = 0, 1, 2



def ints_outside(x, dtype):
  """The first value of integer array `x` that integer `dtype` cannot hold.

  None where there is none, or where either is no integer.

  Args:
    x: A NumPy array.
    dtype: A NumPy dtype.

  Returns:
    The value, a Python int, or None.
  """
  dtype = np.dtype(dtype)
  if x.dtype.kind not in 'iu' or dtype.kind not in 'iu' or (
      np.result_type(x.dtype, dtype) == dtype) or not x.size:
    return None
  info = np.iinfo(dtype)
  outside = (x < info.min) | (x > info.max)
  return int(x[outside].flat[0]) if outside.any() else None

class Backend:
  """Base class of backends: the interface and its defaults.

  Attributes:
    name: The backend's name in messages (`'numpy'`, `'tensorflow'`).
    compacts: Whether primitives get the active members' rows only.
    staged: Whether a run can be staged into a graph.
    sanitizes: Whether reads for whole-batch primitives go through
      `sanitize`.
    while_maximum_iterations: The default `max_steps` of a call (None: no
      limit).
  """

  name = 'backend'
  compacts = False
  staged = False
  sanitizes = False
  while_maximum_iterations = None
  # Whether per-member primitives report item indices out of range
  # (`per_member.member_ops.out_of_range_checks`) for `fail_members`,
  # rather than raise: where they run on lanes of members not at a block.
  reports_out_of_range = False

  # -- capabilities ----------------------------------------------------------

  def in_graph(self):
    """Whether ops are being staged into a graph now (False by default)."""
    return False

  def eager_scope(self):
    """A context manager inside which ops run on values, not into a graph.

    Where this backend stages a graph (`in_graph`), checks that need
    values (`passes.member_mixing`) run a primitive on made-up values in
    it, out of the graph being traced.

    Returns:
      The context manager (none by default: nothing is staged).
    """
    return contextlib.nullcontext()

  def prepare_run(self):
    """Called by the stackless executor before a run (nothing by default)."""

  def error_context(self):
    """A context manager around a run (none by default)."""
    return contextlib.nullcontext()

  def sanitize(self, x, m):
    """`x` as a block's primitives see it (`x` itself by default).

    Args:
      x: A register's value, for the whole batch.
      m: The mask of the members at the block, or None outside a block.

    Returns:
      `x`, with the lanes outside `m` made harmless where the backend
      needs that (`sanitizes`).
    """
    del m
    return x

  def call_for_types(self, fn, args, batch):
    """`fn(*args)`, on made-up values of `batch` members, for type inference.

    A backend may note what the call does (the TensorFlow backend: how
    large the values it makes are, `backends.tf.work`).

    Args:
      fn: A primitive.
      args: Its arguments.
      batch: Their batch size.

    Returns:
      `fn(*args)`.
    """
    del batch
    return fn(*args)

  def draws_at_random(self, fn, args):
    """Whether `fn(*args)` runs backend ops that draw at random.

    Python-level draws (NumPy's generators, Python's `random`) are found
    by `randomness.python_randomness`; this is what only the backend can
    see.

    Args:
      fn: A primitive.
      args: Values like its arguments.

    Returns:
      True, False, or None where the backend cannot tell.  False by
      default: a backend without ops of its own draws nothing beyond
      what Python code does.
    """
    del fn, args
    return False

  def reads_values(self, value, inputs):
    """Whether a primitive's traced result reads its inputs' values.

    Not only their shapes: `value`, traced on `inputs`.

    Args:
      value: The result, as `trace` or a run in a graph gives it.
      inputs: The arguments it was traced on.

    Returns:
      True, False, or None where the backend cannot tell (None by
      default: nothing is traced).
    """
    del value, inputs
    return None

  @contextlib.contextmanager
  def ops_drawn(self):
    """A context manager telling whether the graph ops built inside it draw.

    Where a primitive is run into the graph being traced (`in_graph`), the
    ops it builds there show whether it draws at random or keeps state
    (`draws_at_random`) without tracing it again.

    Yields:
      A list that gets, on leaving the block, True or False where the ops
      built in it show that, or None where they do not (nothing staged,
      as here, or ops that call functions of their own).
    """
    found = []
    try:
      yield found
    finally:
      found.append(None)

  def traces_symbolically(self):
    """Whether `trace` finds a primitive's result type without values."""
    return False

  def trace(self, fn, args, batch=1, inputs=None):
    """`fn(*args)` traced symbolically (where `traces_symbolically()`).

    Args:
      fn: A primitive.
      args: Values like its arguments.
      batch: Their batch size.
      inputs: None, or a list that gets the symbolic arguments `fn` was
        traced on (for `reads_values`).

    Returns:
      Its result, with dtypes and shapes and no values computed.
    """
    raise NotImplementedError(f'{type(self).__name__} cannot trace')

  def vectorize_member(self, fn):
    """The batched form of a per-member primitive on this backend.

    Args:
      fn: A `per_member.primitive.PerMemberFunction` (a `PrimOp` with
        `per_member` set), written for one member.

    Returns:
      A function of batched arrays (leading axis the batch): on NumPy the
      batching rules (`numpy_rules.vectorize`), on TensorFlow pfor.
    """
    return fn.batched(self.name)

  # -- values ----------------------------------------------------------------

  def asarray(self, x):
    """`x` as the backend's array.

    Args:
      x: An array-like value.

    Returns:
      The backend's array.
    """
    raise NotImplementedError

  def shape(self, x, batched=False):
    """The shape of `x` as a tuple of ints.

    Args:
      x: An array of the backend, or an array-like value.
      batched: Whether axis 0 of `x` is a batch axis, which may then have
        no size while a graph is traced (None in the tuple).

    Returns:
      Its shape.
    """
    raise NotImplementedError

  def batch_size(self, x):
    """The size of axis 0 of `x`, read at run time where it has none.

    An int, or where a graph being traced has no size for it
    (`shape(x, batched=True)[0]` is None), a scalar tensor of the size.

    Args:
      x: An array of the backend.

    Returns:
      The size.
    """
    return self.shape(x)[0]

  def dtype(self, x):
    """The dtype of `x` as a NumPy dtype.

    Args:
      x: An array of the backend, or an array-like value.

    Returns:
      Its `np.dtype`.
    """
    raise NotImplementedError

  def cast(self, x, dtype):
    """`x` cast to `dtype`.

    Args:
      x: An array.
      dtype: A NumPy dtype.

    Returns:
      The cast array.
    """
    raise NotImplementedError

  def cast_weak(self, x, dtype, where=''):
    """A weak variable's values cast where a primitive meets arrays.

    The values are Python numbers, one per member; `PrimOp.casts` casts
    them to the dtype the number takes there.  An integer that integer `dtype` cannot hold raises OverflowError, as
    NumPy 2 refuses a Python int out of bounds for the array's dtype
    (`x + 300` of an int8 `x`), where a cast would wrap it.

    Args:
      x: An array: the members' values, in the variable's own dtype.
      dtype: A NumPy dtype.
      where: The primitive's text and place, for the message of a check
        that a staged graph runs.

    Returns:
      The cast array.

    Raises:
      OverflowError: Where an integer is out of `dtype`'s bounds.
    """
    return self.cast(x, dtype)

  def dummy(self, tensor_type, batch):
    """Zeros of a type, for type inference to run a primitive on.

    Args:
      tensor_type: The `TensorType` of one member's value.
      batch: The leading dimension.

    Returns:
      An array `[batch, *shape]` of zeros.
    """
    raise NotImplementedError

  def zeros(self, tensor_type, batch):
    """A register's initial value: zeros `[batch, *shape]`.

    Args:
      tensor_type: The `TensorType` of one member's value.
      batch: The leading dimension.

    Returns:
      An array of zeros.
    """
    raise NotImplementedError

  def coerce_fn(self, tensor_type, batch, strict=False):
    """A function making a value `[batch, *shape]` of the type's dtype.

    Args:
      tensor_type: The `TensorType` of one member's value.
      batch: The leading dimension of the result.
      strict: Whether the value is a primitive's result on per-member
        inputs, whose number of rows is checked
        (`backends.numpy.coercer`).

    Returns:
      `coerce(x)`.
    """
    raise NotImplementedError

  def coercer(self, tensor_type, strict=False):
    """`coerce(x, rows)`, as `coerce_fn(tensor_type, rows, strict)(x)`.

    Args:
      tensor_type: The `TensorType` of one member's value.
      strict: As for `coerce_fn`.

    Returns:
      `coerce(x, rows)`.
    """
    raise NotImplementedError

  def take_rows(self, x, idx):
    """The rows `idx` (member indices) of `x`.

    Args:
      x: An array `[batch, ...]`.
      idx: Row indices, a NumPy int array.

    Returns:
      `x[idx]`.
    """
    raise NotImplementedError

  def concat(self, xs):
    """`xs` concatenated along the rows.

    Args:
      xs: A list of arrays.

    Returns:
      The concatenation.
    """
    raise NotImplementedError

  def slice(self, x, i):
    """Row `i` of `x`, keeping the leading dimension (`x[i:i + 1]`).

    Args:
      x: An array.
      i: A row index.

    Returns:
      The row as an array `[1, ...]`.
    """
    raise NotImplementedError

  def expand(self, x):
    """`x` with a leading dimension of 1.

    Args:
      x: An array-like value.

    Returns:
      The array `[1, *shape]`.
    """
    raise NotImplementedError

  def to_bool(self, x):
    """`x` as booleans (`x != 0` unless already boolean).

    Args:
      x: An array.

    Returns:
      A boolean array.
    """
    raise NotImplementedError

  # -- masks -----------------------------------------------------------------

  def make_mask(self, pc, block, batch):
    """The mask of the members whose PC is `block`.

    Args:
      pc: The PCs `[batch]`.
      block: A block index.
      batch: The batch size.

    Returns:
      The backend's mask object (`mask`, `count`, `full`, ...).
    """
    raise NotImplementedError

  def members(self, m):
    """The indices of the members in mask `m` (None if unknown).

    Args:
      m: A mask.

    Returns:
      A NumPy int array, or None (inside a graph).
    """
    raise NotImplementedError

  def write(self, old, new, m):
    """`new` for the members in `m`, `old` for the rest.

    Args:
      old: A register's value.
      new: The value written.
      m: A mask.

    Returns:
      The register's new value.
    """
    raise NotImplementedError

  # -- stacks ----------------------------------------------------------------

  def stack_zeros(self, tensor_type, depth, batch):
    """An empty stack of `depth` frames.

    Args:
      tensor_type: The `TensorType` of one member's value.
      depth: The frames the stack holds.
      batch: The batch size.

    Returns:
      The stack array (`[depth, batch, *shape]`, or more frames).
    """
    raise NotImplementedError

  def sp_zeros(self, batch):
    """Stack pointers of empty stacks: int32 zeros `[batch]`.

    Args:
      batch: The batch size.

    Returns:
      The array.
    """
    raise NotImplementedError

  def push(self, stacks, sp, values, m, depth, overflow_error):
    """Pushes each of `values` on its stack for the members in `m`.

    Args:
      stacks: The stacks, one per value, sharing stack pointer `sp`.
      sp: The stack pointers `[batch]`.
      values: Whole-batch values, one per stack.
      m: The mask of the members that push.
      depth: The stacks' capacity.
      overflow_error: `overflow_error(members)` makes the error for
        members whose stack is full (None: no check).

    Returns:
      `(stacks, sp)` after the push.
    """
    raise NotImplementedError

  def fail_members(self, flags, m, make_error, kind='index'):
    """Fails the members of `m` that a primitive flagged.

    Only a backend with `reports_out_of_range` gets flags.

    Args:
      flags: Boolean arrays `[batch]`, one per check.
      m: The mask of the members at the block.
      make_error: `make_error(members)` makes the error (members None:
        unknown, in a graph).
      kind: What failed: `'index'` (an item index out of range) or one of
        `member_math.FAILURES` (a math domain error, an empty reduction).
    """
    raise NotImplementedError

  # -- the loop --------------------------------------------------------------

  def run(self, blocks, state, num_blocks, schedule, stats, labels,
          max_steps=None, step_limit_error=None, on_error='raise'):
    """The VM loop: pick a block, run it for its members, until all exit.

    Args:
      blocks: The compiled blocks, `run(state, m)` each.
      state: The VM state (`vm.layout`).
      num_blocks: The number of blocks (the exit PC).
      schedule: `'most'` or `'lowest'` (`backends.scheduler`).
      stats: The `RunStats` to fill.
      labels: The blocks' labels.
      max_steps: Fail after this many steps (None: no limit).
      step_limit_error: `step_limit_error(members, block=None, pcs=None)`
        makes that failure's error (`vm.errors.step_limit`).
      on_error: `'raise'`, or `'status'`: a backend that stops failed
        members rather than raising at once sets `stats.failed` and
        raises nothing (`vm.failures`); others raise as with `'raise'`.

    Returns:
      The state after the run.
    """
    raise NotImplementedError

  def poison_members(self, x, failed):
    """`x` with the rows of the failed members marked (`vm.failures`).

    Only backends that stop failed members rather than raising set
    `RunStats.failed`, and need this.

    Args:
      x: An output, axis 0 the batch.
      failed: A boolean array `[batch]`.

    Returns:
      NaN for floats, the dtype's minimum for signed integers (its
      maximum for unsigned ones), False for booleans, in the failed
      members' rows.
    """
    raise NotImplementedError

  def members_ok(self, failed, batch):
    """`on_error='status'`'s `ok`: True for the members that finished.

    Args:
      failed: `RunStats.failed`, or None (none failed).
      batch: The batch size.

    Returns:
      A boolean array `[batch]`.
    """
    if failed is None:
      return self.asarray(np.ones((batch,), np.bool_))
    raise NotImplementedError

  # -- masked lanes (backends that do not compact) ---------------------------

  def mask_of(self, mask, batch):
    """A mask object for a boolean array.

    Args:
      mask: A boolean array `[batch]`.
      batch: The batch size.

    Returns:
      The backend's mask object.
    """
    raise NotImplementedError

  def when_any(self, m, run, types):
    """`run()`, or zeros where no member is in `m` (see a backend's own).

    A primitive after an exit (`ExitOp`) runs so: where every member at
    the block has left, the lanes it sees hold no staying member's data.

    Args:
      m: A mask: the members that stayed at a block after an exit.
      run: A function returning a list of whole-batch values, one per
        `TensorType` of `types`.
      types: Their types.

    Returns:
      `run()` here: a backend that runs primitives only for the members
      at a block never runs one for none.
    """
    del m, types
    return run()

  def submask(self, m, cond, negate=False):
    """The members of `m` where `cond` holds (fails, if `negate`).

    Args:
      m: A mask.
      cond: A boolean array `[batch]`.
      negate: Whether to take the members where `cond` fails.

    Returns:
      The mask.
    """
    raise NotImplementedError

  def start_pc(self, active, num_blocks):
    """PCs at the entry (0) for `active` members, the exit for the rest.

    Args:
      active: A boolean array `[batch]`.
      num_blocks: The exit PC.

    Returns:
      The int32 PCs.
    """
    raise NotImplementedError

  def scatter(self, x, rows, m):
    """`x` with the members of `m` set to `rows`.

    Args:
      x: An array `[batch, ...]`.
      rows: One row per member of `m`.
      m: A mask.

    Returns:
      The new array.
    """
    raise NotImplementedError

  def fill_like(self, pc, value):
    """An int32 array of `pc`'s shape holding `value`.

    A call's return block, pushed for every member.

    Args:
      pc: The PCs.
      value: An int.

    Returns:
      The array.
    """
    return np.full(np.shape(pc), value, np.int32)

  def goto(self, pc, m, target):
    """The PCs with the members of `m` at `target`.

    Args:
      pc: The PCs.
      m: A mask.
      target: A block index.

    Returns:
      The new PCs.
    """
    raise NotImplementedError

  def branch(self, pc, m, cond, true_target, false_target):
    """The PCs with each member of `m` at one of two blocks.

    Args:
      pc: The PCs.
      m: A mask.
      cond: A bool per member of the batch.
      true_target: The block where `cond` holds.
      false_target: The block where it fails.

    Returns:
      The new PCs.
    """
    raise NotImplementedError

  def pop(self, stacks, sp, values, m):
    """Restores `values` from the top of their stacks and drops the frame.

    Args:
      stacks: The stacks, sharing stack pointer `sp`.
      sp: The stack pointers.
      values: The registers restored, one per stack.
      m: The mask of the members that pop.

    Returns:
      `(values, sp)` after the pop.
    """
    raise NotImplementedError

  def peek(self, stacks, sp, values, m):
    """Restores `values` from the top of their stacks, keeping the frame.

    Args:
      stacks: The stacks, sharing stack pointer `sp`.
      sp: The stack pointers.
      values: The registers restored, one per stack.
      m: The mask of the members that restore.

    Returns:
      The restored values.
    """
    raise NotImplementedError
