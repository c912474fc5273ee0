"""The batched virtual machine: runs a `LoweredProgram` across a batch.

Every member has its own program counter (PC).  One step picks a block
(by default the one with the most members; `schedule='lowest'`: the
lowest-indexed one that has any) and runs its instructions for the
members whose PC is at that block: on NumPy on their rows only, on
TensorFlow on the whole batch with masked updates.  Then the terminator
moves those members' PCs.  A member whose PC reaches `len(program.blocks)`
has finished; the run ends when all have.

State is a flat list of arrays, so that a staged backend can carry it
through a `while_loop`:
  [pc, pc_stack, pc_sp, <register leaves>..., <stack leaves>..., <sps>...]
(on NumPy, plus the set of registers the run owns: see `_Layout`).
Registers hold one value per member.  A FULL variable also has a stack
`[max_stack_depth, batch, *shape]` and a stack pointer per member; only
`PushOp`/`PopOp` touch the stack.  TEMPORARY variables never enter the
state: they live for the duration of one block.

Blocks are compiled once per (program, backend, batch size, depth): on
NumPy into generated Python functions (`block_codegen`), on TensorFlow
into Python closures over their slots; `block_code_cache` lets a caller
keep them.
"""

import dataclasses
import numbers
import threading
from typing import Dict, Optional

import numpy as np

from autobatch_vm import block_codegen
from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import liveness
from autobatch_vm import vm_support

__all__ = ['execute', 'RunStats', 'SCHEDULES', 'DEFAULT_SCHEDULE']

VA = inst.VariableAllocation
SCHEDULES = ('lowest', 'most')
# Measured better on three of the four benchmark workloads (collatz,
# tree-RNN, NUTS) and about even on fibonacci: docs/guide.md, section 6.
DEFAULT_SCHEDULE = 'most'
_PC, _PC_STACK, _PC_SP = 0, 1, 2
# Terminators that push a return block on the PC stack.
_CALLS = (inst.PushGotoOp, inst.PushBranchOp, inst.CallBranchOp)


@dataclasses.dataclass
class RunStats:
  """What one batched run did.

  steps: VM steps (blocks executed, each on the whole batch).
  block_executions: label -> times the block ran.
  block_active: label -> members active, summed over its executions.
  block_loc: label -> source location (function, file, line) it came from.
  block_time: label -> seconds spent in the block (only with profile=True).
  member_blocks: blocks each member executed, a NumPy int array [batch]
    (only with profile=True): what it would execute alone.
  block_rows: label -> rows the block ran on, summed over its executions,
    where that is not `batch_size` per execution: in stackless mode a
    call's frame holds its callers' rows only (fewer than the batch, or
    more when calls run together).  Empty for the VM.
  stackless: whether stackless mode ran the call (`stackless=True`, or
    chosen by `stackless=None`, the default): then `steps` counts blocks
    run, each on a frame of rows, not VM steps.
  """
  batch_size: int
  steps: int = 0
  block_executions: Dict[str, int] = dataclasses.field(default_factory=dict)
  block_active: Dict[str, int] = dataclasses.field(default_factory=dict)
  block_loc: Dict[str, object] = dataclasses.field(default_factory=dict)
  block_time: Dict[str, float] = dataclasses.field(default_factory=dict)
  profile: bool = False
  stackless: bool = False
  member_blocks: Optional[np.ndarray] = dataclasses.field(default=None,
                                                          compare=False)
  block_rows: Dict[str, int] = dataclasses.field(default_factory=dict)

  @property
  def longest_member_blocks(self):
    """Blocks of the member that executes the most (profile=True only,
    else None).  On the VM a step moves each member by at most one block,
    so no schedule can finish in fewer steps than this (stackless mode,
    which runs a member's independent calls together, can)."""
    if self.member_blocks is None:
      return None
    self.require_numbers('longest_member_blocks')
    if not self.member_blocks.size:
      return None
    return int(self.member_blocks.max())

  @property
  def schedule_overhead(self):
    """`steps / longest_member_blocks` (profile=True only, else None): 1.0
    means the run took no more steps than its longest member alone; the
    excess is divergence, which a schedule or a sync point can reduce."""
    longest = self.longest_member_blocks
    if not longest:
      return None
    return self.steps / longest

  def rows(self, label):
    """Rows block `label` ran on, summed over its executions (the batch
    per execution, except in stackless mode: see `block_rows`)."""
    if self.block_rows:
      return self.block_rows.get(label, 0)
    return self.block_executions.get(label, 0) * self.batch_size

  @property
  def utilization(self):
    """Mean fraction of the rows a block ran on that were active (of the
    batch, except in stackless mode: see `block_rows`)."""
    self.require_numbers('utilization')
    total = sum(self.rows(l) for l in self.block_executions)
    if not total:
      return 0.0
    return sum(self.block_active.values()) / total

  @property
  def member_block_executions(self):
    """Block executions summed over members: the unbatched block count."""
    return sum(self.block_active.values())

  @property
  def symbolic(self):
    """Whether the counts are tensors of a `tf.function` being traced
    (read them after the call with `counts()` and `with_counts`)."""
    return not isinstance(self.steps, (int, np.integer))

  def counts(self):
    """The run's numbers as a dict of arrays, to read a staged run's
    statistics after the call (`with_counts`):
    - 'counts': executions and active members per block, `[blocks, 2]`
      int32, rows in the order of `block_executions`;
    - with `profile=True`: 'member_blocks', the blocks each member ran,
      `[batch]`, and (not under XLA, which has no clock) 'seconds', the
      time per block, `[blocks]` float64.

    NumPy arrays after an eager run.  Inside a `tf.function` (XLA
    included) the statistics are tensors of the traced graph, which cannot
    be read once the function returns: return `fn.last_stats.counts()`
    from the function along with its result, then
    `fn.last_stats.with_counts(value)` gives the statistics with numbers.
    """
    labels = list(self.block_executions)
    runs = [self.block_executions[l] for l in labels]
    active = [self.block_active.get(l, 0) for l in labels]
    seconds = ([self.block_time.get(l, 0.0) for l in labels]
               if self.block_time else [])
    if not self.symbolic:
      out = {'counts': np.array([runs, active], np.int32).reshape(2, -1).T}
      if seconds:
        out['seconds'] = np.array(seconds, np.float64)
      if self.member_blocks is not None:
        out['member_blocks'] = np.asarray(self.member_blocks)
      return out
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    as_int = lambda xs: [tf.cast(x, tf.int32) for x in xs]
    out = {'counts': tf.stack([tf.stack(as_int(runs)),
                               tf.stack(as_int(active))], axis=1)}
    if seconds:
      out['seconds'] = tf.stack([tf.cast(t, tf.float64) for t in seconds])
    if self.member_blocks is not None:
      out['member_blocks'] = self.member_blocks
    return out

  def require_numbers(self, what):
    """Raises `ArgumentError` naming `what` if the counts are tensors."""
    if self.symbolic:
      raise errors.ArgumentError(
          f'RunStats.{what} needs numbers, but these statistics are tensors '
          'of a tf.function being traced',
          hint='Stage the batched function with ab.stage(fn, ...), whose '
          'last_stats has each call\'s numbers; or return '
          'fn.last_stats.counts() from the tf.function along with its '
          'result, and call fn.last_stats.with_counts(value) on the value '
          'after the call.')

  def with_counts(self, counts):
    """These statistics with the numbers `counts()` returned (its value:
    NumPy arrays or eager tensors): the way to read a staged run's
    statistics."""
    labels = list(self.block_executions)
    hint = ('Return fn.last_stats.counts() from the tf.function that calls '
            'fn, and pass its value here.')
    if not isinstance(counts, dict) or 'counts' not in counts:
      raise errors.ArgumentError(
          'with_counts() expects the dict that counts() returned, got '
          f'{type(counts).__name__}', hint=hint)
    value = np.asarray(counts['counts'])
    if value.shape != (len(labels), 2) or value.dtype.kind not in 'iu':
      raise errors.ArgumentError(
          f'with_counts() expects counts of shape [{len(labels)}, 2] and an '
          f'integer dtype for this run, got {value.dtype}'
          f'{list(value.shape)}', hint=hint)
    block_time = dict(self.block_time)
    if 'seconds' in counts:
      block_time = {l: float(t) for l, t in
                    zip(labels, np.asarray(counts['seconds']))}
    member_blocks = self.member_blocks
    if 'member_blocks' in counts:
      member_blocks = np.asarray(counts['member_blocks']).astype(np.int64)
    return dataclasses.replace(
        self, steps=int(value[:, 0].sum()),
        block_executions={l: int(r) for l, r in zip(labels, value[:, 0])},
        block_active={l: int(a) for l, a in zip(labels, value[:, 1])},
        block_loc=dict(self.block_loc), block_time=block_time,
        member_blocks=member_blocks)

  def table(self):
    """The per-block profile as text (see `autobatch_vm.profiler`)."""
    self.require_numbers('table()')
    from autobatch_vm import profiler  # pylint: disable=g-import-not-at-top
    return profiler.format_table(self)

  def __str__(self):
    if self.symbolic:
      return (f'RunStats of a staged run (batch {self.batch_size}): counts '
              'are tensors; see RunStats.counts()')
    what = 'blocks run (stackless)' if self.stackless else 'steps'
    lines = [f'{what}: {self.steps}   batch: {self.batch_size}   '
             f'utilization: {self.utilization:.1%}']
    lines.append(f'{"block":<24}{"runs":>8}{"active/run":>12}  source')
    for label, runs in self.block_executions.items():
      if not runs:
        continue
      active = self.block_active[label] / runs
      loc = self.block_loc.get(label)
      where = f'{loc.filename.rsplit("/", 1)[-1]}:{loc.line}' if loc else ''
      lines.append(f'{label:<24}{runs:>8}{active:>12.1f}  {where}')
    return '\n'.join(lines)


class _Layout:
  """Assigns state slots to variables and builds the initial state.

  On a compacting backend (NumPy) the last slot holds the set of register
  slots whose array the run owns: made by the run (a copy on a masked
  write, a restore from a stack) and never seen outside it.  A masked
  write to an owned register changes its rows in place instead of copying
  the whole array.  A register stops being owned when it is read for the
  whole batch (the array itself goes to a primitive, which may keep or
  return it) or written for the whole batch (it then holds a primitive's
  result).  A masked read gathers rows into a new array, so it cannot
  leak the register.
  """

  def __init__(self, program, backend, batch, depth):
    self.program = program
    self.backend = backend
    self.batch = batch
    self.depth = depth
    self.regs = {}     # var -> [slot per leaf]
    self.stacks = {}   # var -> ([slot per leaf], sp slot)
    self.leaf_types = {}
    # The PC stack holds the exit frame plus one frame per active call; a
    # program without calls (only loops) needs just the exit frame.
    has_calls = any(isinstance(b.terminator, _CALLS) for b in program.blocks)
    self.pc_depth = depth + 1 if has_calls else 1
    n = 3
    for var, alloc in program.var_alloc.items():
      if alloc in (VA.REGISTER, VA.FULL):
        leaves = inst.pattern_flatten(program.var_defs[var].tensors,
                                      inst.TensorType)
        self.leaf_types[var] = leaves
        self.regs[var] = list(range(n, n + len(leaves)))
        n += len(leaves)
    # Variables that the same push and pop instructions save and restore
    # share a stack pointer: their pointers would move together anyway, and
    # each costs a register and its own index arithmetic per push and pop
    # (NUTS's recursion pops 5 variables at once).
    saved_by = {}
    for b, block in enumerate(program.blocks):
      for i, op in enumerate(block.instructions):
        if isinstance(op, (inst.PushOp, inst.PopOp)):
          for var in op.vars:
            saved_by.setdefault(var, []).append((b, i))
    sp_of = {}
    for var, alloc in program.var_alloc.items():
      if alloc == VA.FULL:
        k = len(self.regs[var])
        slots = list(range(n, n + k))
        n += k
        key = tuple(saved_by.get(var, ()))
        if key not in sp_of:
          sp_of[key] = n
          n += 1
        self.stacks[var] = (slots, sp_of[key])
    self.owned_slot = n if getattr(backend, 'compacts', False) else None
    self.size = n if self.owned_slot is None else n + 1

  def memory(self):
    """Bytes the VM state takes: {'stacks': ..., 'registers': ..., 'pc': ...}.

    Only FULL variables (live across a call that may overwrite them) have
    stacks: `max_stack_depth * batch * size` bytes per leaf.
    """
    b, d = self.batch, self.depth
    regs = sum(b * t.nbytes for v in self.regs for t in self.leaf_types[v])
    stacks = sum(d * b * t.nbytes for v in self.stacks
                 for t in self.leaf_types[v])
    stacks += 4 * b * len({sp for _, sp in self.stacks.values()})
    pc = self.pc_depth * b * 4 + 2 * b * 4
    return {'stacks': stacks, 'registers': regs, 'pc': pc,
            'total': stacks + regs + pc}

  def initial_state(self):
    b, be = self.batch, self.backend
    num_blocks = len(self.program.blocks)
    state = [None] * self.size
    state[_PC] = be.asarray(np.zeros((b,), np.int32))
    pc_type = inst.TensorType(np.int32, ())
    state[_PC_STACK] = be.stack_zeros(pc_type, self.pc_depth, b)
    state[_PC_SP] = be.sp_zeros(b)
    # The base frame of every PC stack is the exit index.
    full = be.make_mask(state[_PC], 0, b)
    exit_pc = be.asarray(np.full((b,), num_blocks, np.int32))
    (state[_PC_STACK],), state[_PC_SP] = be.push(
        [state[_PC_STACK]], state[_PC_SP], [exit_pc], full, self.pc_depth,
        None)
    for var, slots in self.regs.items():
      for slot, t in zip(slots, self.leaf_types[var]):
        state[slot] = be.zeros(t, b)
    for var, (slots, sp_slot) in self.stacks.items():
      for slot, t in zip(slots, self.leaf_types[var]):
        state[slot] = be.stack_zeros(t, self.depth, b)
      state[sp_slot] = be.sp_zeros(b)
    if self.owned_slot is not None:
      state[self.owned_slot] = set()
    return state


class _BlockCompiler:
  """Turns each block into a function `run(state, m)`.

  On a compacting backend (NumPy, which steps in Python) a block becomes
  one generated function (`block_codegen`); otherwise (TensorFlow, whose
  primitives take the whole batch and whose runs are mostly staged) a
  chain of closures, one per instruction.  The run's inputs and outputs
  are read and written here, for the whole batch, on either.
  """

  def __init__(self, program, layout):
    self.p = program
    self.layout = layout
    self.be = layout.backend
    self.batch = layout.batch
    self.compact = getattr(self.be, 'compacts', False)
    self.stack_slots = frozenset(
        [_PC_STACK] + [s for slots, _ in layout.stacks.values()
                       for s in slots])
    self.index = program.block_index()
    self.num_blocks = len(program.blocks)
    self._live_out = None
    # While a block's instruction is compiled: the variables whose writes
    # there are stored (`stored`); None (outside blocks): all are.
    self._stored = None

  def live_out(self):
    """Variables live on exit from each block (computed once)."""
    if self._live_out is None:
      self._live_out = liveness.lowered_live_out(self.p)
    return self._live_out

  def stored(self, block):
    """Per instruction of `block`, the variables whose writes there are
    stored in the state: a write that nothing reads is not, when the
    variable is written again later in the block (reads in the block take
    the value as computed) or is dead when the block ends."""
    live_out = self.live_out()[block.label]
    out, written = [], set()
    for op in reversed(block.instructions):
      out.append(frozenset(live_out - written))
      written |= liveness.writes(op)
    return out[::-1]

  # -- reading and writing variables ---------------------------------------

  def reader(self, var):
    """A function `(state, temps, m)` returning `var`'s value, for the whole
    batch.  `m=None` reads it outside a block (the run's outputs).
    """
    alloc = self.p.var_alloc.get(var, VA.NULL)
    if alloc == VA.TEMPORARY:
      return lambda state, temps, m: temps[var]
    if alloc not in (VA.REGISTER, VA.FULL):
      raise errors.InternalError(f'read of {alloc.name} variable {var}')
    slots = self.layout.regs[var]
    template = self.p.var_defs[var].tensors
    single = isinstance(template, inst.TensorType)
    # Whole-batch primitives must not see leftover data in the lanes of
    # members not at the block (TensorFlow's `sanitize`): read once per
    # block run and cached in `temps` until the variable is written.  A
    # value computed in the block is in `temps` too (its write may not be
    # stored: see `stored`).
    fetch = getattr(self.be, 'sanitize', None) or _as_is
    if single:
      slot = slots[0]

      def read(state, temps, m):
        value = temps.get(var, _MISSING)
        if value is _MISSING:
          value = temps[var] = fetch(state[slot], m)
        return value
      return read

    def read_pattern(state, temps, m):
      value = temps.get(var, _MISSING)
      if value is _MISSING:
        value = temps[var] = inst.pattern_unflatten(
            template, [fetch(state[s], m) for s in slots], inst.TensorType)
      return value
    return read_pattern

  def writer(self, var, strict=False):
    """A function `(state, temps, value, m)` storing `value` into `var`
    (a whole-batch value, written for the members in `m`); `strict`: the
    value is a primitive's result on per-member inputs, see
    `numpy_backend.coercer`."""
    alloc = self.p.var_alloc.get(var, VA.NULL)
    if alloc == VA.NULL:
      return lambda state, temps, value, m: None
    template = self.p.var_defs[var].tensors
    leaves = inst.pattern_flatten(template, inst.TensorType)
    coerces = [_ignore_mask(self.be.coerce_fn(t, self.batch, strict))
               for t in leaves]
    single = isinstance(template, inst.TensorType)
    if alloc == VA.TEMPORARY or (self._stored is not None and
                                 var not in self._stored):
      # A temporary, or a register write that nothing reads from the state
      # (see `stored`): reads and pushes later in the block take it from
      # `temps`.  On a staged backend that saves a step the write's select
      # and scatter (NUTS: a leaf's tree, 9 vectors per member, is pushed
      # and is then dead).
      if single:
        coerce = coerces[0]

        def write_temp(state, temps, value, m):
          temps[var] = coerce(value, m)
        return write_temp

      def write_temp_pattern(state, temps, value, m):
        values = vm_support.flatten_like(template, value)
        temps[var] = inst.pattern_unflatten(
            template, [c(v, m) for c, v in zip(coerces, values)],
            inst.TensorType)
      return write_temp_pattern
    slots = self.layout.regs[var]
    write = self.be.write
    # Later reads in the block take the value as computed, before the
    # masked write: a primitive's inputs are sanitized (see `reader`), so
    # its result is clean in every lane, and needs no second sanitizing.
    if single:
      slot, coerce = slots[0], coerces[0]

      def write_reg(state, temps, value, m):
        value = coerce(value, m)
        state[slot] = write(state[slot], value, m)
        temps[var] = value
      return write_reg

    def write_reg_pattern(state, temps, value, m):
      leaves = vm_support.flatten_like(template, value)
      rows = [c(v, m) for c, v in zip(coerces, leaves)]
      for slot, v in zip(slots, rows):
        state[slot] = write(state[slot], v, m)
      temps[var] = inst.pattern_unflatten(template, rows, inst.TensorType)
    return write_reg_pattern

  def binder(self, pattern, strict=False):
    """A writer for a pattern of variable names (tuple unpacking)."""
    if isinstance(pattern, str):
      return self.writer(pattern, strict)
    subs = [self.binder(p, strict) for p in pattern]
    n = len(subs)

    def bind(state, temps, value, m):
      for w, v in zip(subs, vm_support.unpack(value, n)):
        w(state, temps, v, m)
    return bind

  # -- instructions ----------------------------------------------------------

  def instruction(self, op):
    return vm_support.dispatch(self, op)

  def prim(self, op):
    readers = [self.reader(v) for v in op.vars_in]
    for i, dtype in op.casts:   # weak variables: see PrimOp.casts
      readers[i] = _cast_reader(readers[i], self.be.cast, dtype)
    bind = self.binder(op.vars_out, strict=bool(op.vars_in))
    fn = op.function
    be = self.be

    def run_prim(state, temps, m):
      args = [r(state, temps, m) for r in readers]
      try:
        result = fn(*args)
      except errors.AutoBatchError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        result = vm_support.retry_on_live_data(e, op, args, be, m)
      try:
        bind(state, temps, result, m)
      except ValueError as e:
        raise vm_support.result_shape_error(e, op, be, m) from e
    return run_prim

  def _stack_slots(self, var):
    try:
      return self.layout.stacks[var]
    except KeyError:
      raise errors.InternalError(f'push/pop of non-FULL variable {var}')

  def _sp_groups(self, op):
    """`op.vars` by stack pointer: [(vars, stack slots, register slots,
    sp slot)] (see `_Layout`: all of a pointer's variables are in `op`)."""
    groups = {}
    for var in op.vars:
      stack_slots, sp_slot = self._stack_slots(var)
      names, stacks, regs = groups.setdefault(sp_slot, ([], [], []))
      names.append(var)
      stacks.extend(stack_slots)
      regs.extend(self.layout.regs[var])
    return [(names, stacks, regs, sp) for sp, (names, stacks, regs)
            in groups.items()]

  def push(self, op):
    be, depth = self.be, self.layout.depth
    groups = []
    for names, stack_slots, _, sp_slot in self._sp_groups(op):
      what = vm_support.saving_what(self.p, names)
      # Each variable's value: as computed in this block if it was (its
      # write may not be stored: see `stored`), else its registers.  Only
      # the members' rows are pushed, so either serves.
      sources = [(var, self.layout.regs[var], self.p.var_defs[var].tensors)
                 for var in names]
      groups.append((stack_slots, sources, sp_slot,
                     vm_support.overflow(what, op.loc, depth)))

    def values(state, temps, sources):
      out = []
      for var, slots, template in sources:
        value = temps.get(var, _MISSING)
        if value is _MISSING:
          out.extend(state[s] for s in slots)
        else:
          out.extend(vm_support.flatten_like(template, value))
      return out

    def run_push(state, temps, m):
      for stack_slots, sources, sp_slot, overflow in groups:
        stacks, state[sp_slot] = be.push(
            [state[s] for s in stack_slots], state[sp_slot],
            values(state, temps, sources), m, depth, overflow)
        for s, st in zip(stack_slots, stacks):
          state[s] = st
    return run_push

  def pop(self, op, keep):
    be = self.be
    fetch = getattr(be, 'sanitize', None) or _as_is   # as `reader` reads
    groups = []
    for names, stack_slots, reg_slots, sp_slot in self._sp_groups(op):
      # A restored variable that nothing reads from the state afterwards
      # (see `stored`) is kept in `temps` only, as a read would see it.
      kept = [(var, len(self.layout.regs[var]),
               self.p.var_defs[var].tensors,
               self._stored is None or var in self._stored) for var in names]
      groups.append((names, stack_slots, reg_slots, sp_slot, kept))

    def run_pop(state, temps, m):
      for names, stack_slots, reg_slots, sp_slot, kept in groups:
        for var in names:
          temps.pop(var, None)   # drop values cached before the restore
        stacks = [state[s] for s in stack_slots]
        values = [state[s] for s in reg_slots]
        if keep:
          values = be.peek(stacks, state[sp_slot], values, m)
        else:
          values, state[sp_slot] = be.pop(stacks, state[sp_slot], values, m)
        k = 0
        for var, n, template, stored in kept:
          slots, leaves, k = reg_slots[k:k + n], values[k:k + n], k + n
          if stored:
            for s, v in zip(slots, leaves):
              state[s] = v
            continue
          temps[var] = inst.pattern_unflatten(
              template, [fetch(v, m) for v in leaves], inst.TensorType)
    return run_pop

  # -- terminators -----------------------------------------------------------

  def terminator(self, t):
    be = self.be
    if isinstance(t, inst.GotoOp):
      target = self.index[t.block]

      def run_goto(state, temps, m):
        state[_PC] = be.goto(state[_PC], m, target)
      return run_goto
    if isinstance(t, inst.BranchOp):
      cond = self.reader(t.cond)
      tt, ff = self.index[t.true_block], self.index[t.false_block]

      def run_branch(state, temps, m):
        c = be.to_bool(cond(state, temps, m))
        state[_PC] = be.branch(state[_PC], m, c, tt, ff)
      return run_branch
    if isinstance(t, _CALLS):
      ret = self.index[t.push_block]
      # A NumPy constant, not a backend array: compiled blocks are cached
      # and may be traced into several graphs.
      ret_pc = np.full((self.batch,), ret, np.int32)
      depth = self.layout.pc_depth
      # Labels are `<function>.<n>[.<k>]`; the jump lands in the callee.
      callee = (t.goto_block if isinstance(t, inst.PushGotoOp) else
                t.call_block if isinstance(t, inst.CallBranchOp)
                else t.true_block).split('.', 1)[0]
      overflow = vm_support.overflow(f'call stack, calling {callee!r}', t.loc,
                           depth - 1)
      if isinstance(t, inst.CallBranchOp):
        cond = self.reader(t.cond)
        tt, ff = self.index[t.true_block], self.index[t.false_block]
        negate = not t.call_side

        def run_call_branch(state, temps, m):
          # Only the members going to the callee push the return block.
          c = be.to_bool(cond(state, temps, m))
          calls = be.submask(m, c, negate=negate)
          (state[_PC_STACK],), state[_PC_SP] = be.push(
              [state[_PC_STACK]], state[_PC_SP], [ret_pc], calls, depth,
              overflow)
          state[_PC] = be.branch(state[_PC], m, c, tt, ff)
        return run_call_branch
      if isinstance(t, inst.PushGotoOp):
        jump = self.terminator(inst.GotoOp(t.goto_block, t.loc))
      else:
        jump = self.terminator(inst.BranchOp(t.cond, t.true_block,
                                             t.false_block, t.loc))

      def run_push_goto(state, temps, m):
        (state[_PC_STACK],), state[_PC_SP] = be.push(
            [state[_PC_STACK]], state[_PC_SP], [ret_pc], m, depth, overflow)
        jump(state, temps, m)
      return run_push_goto
    if isinstance(t, inst.IndirectGotoOp):
      def run_return(state, temps, m):
        (state[_PC],), state[_PC_SP] = be.pop(
            [state[_PC_STACK]], state[_PC_SP], [state[_PC]], m)
      return run_return
    raise errors.InternalError(f'Unexpected terminator {t!r}')

  def writes(self, block, stored):
    """The state slots that running `block` may write (always the PC);
    `stored`: `self.stored(block)`."""
    regs, stacks = self.layout.regs, self.layout.stacks
    out = {_PC}
    for op, stored in zip(block.instructions, stored):
      if isinstance(op, inst.PrimOp):
        for var in inst.pattern_flatten(op.vars_out):
          if var in stored:
            out.update(regs.get(var, ()))
      elif isinstance(op, inst.PushOp):
        for var in op.vars:
          stack_slots, sp_slot = stacks[var]
          out.update(stack_slots)
          out.add(sp_slot)
      elif isinstance(op, (inst.PopOp, inst.RestoreOp)):
        for var in op.vars:
          if var in stored:
            out.update(regs[var])
          if isinstance(op, inst.PopOp):
            out.add(stacks[var][1])
    if isinstance(block.terminator, _CALLS):
      out.update((_PC_STACK, _PC_SP))
    elif isinstance(block.terminator, inst.IndirectGotoOp):
      out.add(_PC_SP)
    return frozenset(out)

  def block(self, block):
    stored = self.stored(block)
    if self.compact:   # NumPy: one generated function per block
      run_block = block_codegen.compile_block(self, block, stored)
    else:
      steps = []
      for op, self._stored in zip(block.instructions, stored):
        steps.append(self.instruction(op))
      self._stored = None
      steps.append(self.terminator(block.terminator))
      steps = tuple(steps)

      def run_block(state, m):
        temps = {}
        for s in steps:
          s(state, temps, m)
    # For staged backends, which carry only what a block may change: the
    # slots it may write, and which slots are stacks (written by pushes).
    run_block.writes = self.writes(block, stored)
    run_block.stack_slots = self.stack_slots
    return run_block


_MISSING = object()


def _as_is(x, m):
  del m
  return x


def _cast_reader(read, cast, dtype):
  return lambda state, temps, m: cast(read(state, temps, m), dtype)


def _ignore_mask(coerce):
  return lambda x, m: coerce(x)


def _step_limit(program, max_steps):
  """`make(members, block=None) -> StepLimitError` for this program."""
  locs = [b.loc for b in program.blocks]

  def make(members, block=None):
    if block is None:   # staged: where each member is is not known
      return vm_support.step_limit_error(max_steps, members, locs[0],
                                         ' (started here)')
    return vm_support.step_limit_error(max_steps, members, locs[block],
                            '; the block due next is at this line')
  return make


class CompiledProgram:
  """A lowered program bound to a backend, batch size and stack depth."""

  def __init__(self, program, backend, batch, depth):
    self.program = program
    self.backend = backend
    self.batch = batch
    self.depth = depth
    self.layout = _Layout(program, backend, batch, depth)
    bc = _BlockCompiler(program, self.layout)
    self.blocks = [bc.block(b) for b in program.blocks]
    self.inputs = [bc.writer(v) for v in program.vars_in]
    self.outputs = inst.pattern_map(bc.reader, program.vars_out)


def compile_blocks(program, backend, batch, depth, cache=None):
  key = (id(program), backend, batch, depth)
  if cache is not None and key in cache and cache[key].program is program:
    return cache[key]
  compiled = CompiledProgram(program, backend, batch, depth)
  if cache is not None:
    cache[key] = compiled
  return compiled


def check_schedule(schedule):
  if schedule not in SCHEDULES:
    raise errors.ArgumentError(
        f'Unknown schedule {schedule!r}; choose one of {SCHEDULES}')


def execute(program, args, backend, batch_size, max_stack_depth=15,
            schedule=DEFAULT_SCHEDULE, block_code_cache=None, profile=False,
            max_steps=None):
  """Runs `program` on batched `args`; returns (outputs, RunStats).

  `max_steps`: fail with `StepLimitError` if members have not finished
  after that many VM steps (None: no limit).  On TensorFlow it also gives
  the loop a static trip count, which XLA needs to differentiate it.
  """
  check_schedule(schedule)
  c = compile_blocks(program, backend, batch_size, max_stack_depth,
                     block_code_cache)
  state = c.layout.initial_state()
  full = backend.make_mask(state[_PC], 0, batch_size)
  for write, arg in zip(c.inputs, args):
    write(state, {}, arg, full)
  stats = RunStats(batch_size=batch_size, profile=profile)
  for b in program.blocks:
    stats.block_executions[b.label] = 0
    stats.block_active[b.label] = 0
    stats.block_loc[b.label] = b.loc
  with backend.error_context():
    state = backend.run(c.blocks, state, len(program.blocks), schedule,
                        stats, [b.label for b in program.blocks],
                        max_steps=max_steps,
                        step_limit_error=_step_limit(program, max_steps))
  out = inst.pattern_map(lambda read: read(state, {}, None), c.outputs)
  return out, stats


# ---------------------------------------------------------------------------
# TFP's module-level API: `execute(program, args, max_stack_depth, backend,
# block_code_cache=None)`, returning the outputs alone, and `is_staging`.
# `execute` below takes both that form and the one above (renamed
# `execute_batched`): TFP's third argument is an int, ours a backend.
# ---------------------------------------------------------------------------

__all__ += ['execute_batched', 'is_staging', 'batched_inputs']

execute_batched = execute
_running = threading.local()


def is_staging():
  """Whether the virtual machine is running (or, on TensorFlow, staging) a
  program: true while `execute` runs, so a primitive can tell the VM's
  calls from type inference's (`type_inference.is_inferring`) and from a
  dry run."""
  return getattr(_running, 'depth', 0) > 0


def execute(program, args, *rest, **kwargs):  # pylint: disable=function-redefined
  """Runs a lowered program on batched `args`, in either of two forms.

  - `execute(program, args, backend, batch_size, max_stack_depth=15,
    schedule=DEFAULT_SCHEDULE, block_code_cache=None, profile=False,
    max_steps=None)` returns `(outputs, RunStats)` (`execute_batched`).
  - TFP's `execute(program, args, max_stack_depth, backend,
    block_code_cache=None)` returns the outputs alone.  The batch size
    comes from the inputs (TFP's calling convention: a scalar is a batch
    of one; an input of batch size 1 is broadcast to the batch).

  The forms differ in the third argument: an int (TFP's
  `max_stack_depth`) or a backend; without it, in whether `batch_size` is
  given.
  """
  depth = rest[0] if rest else None
  tfp_form = (isinstance(depth, numbers.Integral) and
              not isinstance(depth, bool)) or (
                  len(rest) < 2 and 'batch_size' not in kwargs)
  _running.depth = getattr(_running, 'depth', 0) + 1
  try:
    if tfp_form:
      return _execute_tfp(program, args, *rest, **kwargs)
    return execute_batched(program, args, *rest, **kwargs)
  finally:
    _running.depth -= 1


def _execute_tfp(program, args, max_stack_depth, backend,
                 block_code_cache=None):
  if not isinstance(program, inst.LoweredProgram):
    raise errors.ArgumentError(
        f'virtual_machine.execute runs a lowered program, got a '
        f'{type(program).__name__}',
        hint='Lower it first: lowering.lower_function_calls('
        'allocation_strategy.optimize(type_inference.infer_types(program, '
        'args, backend))), or pipeline.lowered(...).')
  if (not isinstance(max_stack_depth, numbers.Integral)
      or isinstance(max_stack_depth, bool) or max_stack_depth < 1):
    raise errors.ArgumentError(
        f'max_stack_depth must be a positive int, got {max_stack_depth!r}')
  types = [program.var_defs[v] for v in program.vars_in]
  args, batch = batched_inputs(program.vars_in, types, args, backend,
                               program.main or 'main')
  out, _ = execute_batched(program, args, backend, batch,
                           max_stack_depth=int(max_stack_depth),
                           block_code_cache=block_code_cache)
  return out


def batched_inputs(names, types, args, backend, where):
  """TFP's calling convention for a program's inputs: `(arrays, batch)`.

  `types`: the declared `Type` (or pattern of `TensorType`) of each input
  (`names`).  Every leaf becomes a backend array with a leading batch
  dimension (a scalar is a batch of one) of its declared dtype; leaves of
  batch size 1 are broadcast to the batch; other sizes must agree.
  """
  args = list(args)
  if len(args) != len(names):
    raise errors.ArgumentError(
        f'{where} takes {len(names)} input(s) ({", ".join(names)}), got '
        f'{len(args)}')
  out, sizes = [], {}
  for name, t, a in zip(names, types, args):
    t = t.tensors if isinstance(t, inst.Type) else t

    def convert(tt, x, name=name):
      if x is None or isinstance(x, (str, bytes, dict, set)):
        raise errors.ArgumentError(
            f'input {name!r} of {where} is {type(x).__name__}, not an array')
      try:
        v = backend.asarray(x)
      except Exception as e:  # pylint: disable=broad-except
        raise errors.ArgumentError(
            f'input {name!r} of {where} cannot be converted to an array: '
            f'{e}', hint='Ragged lists are not arrays; pad them to a '
            'common shape.') from e
      if not backend.shape(v):
        v = backend.expand(v)   # a scalar is a batch of one
      if backend.dtype(v) != tt.dtype or backend.shape(v)[1:] != tt.shape:
        raise errors.ArgumentError(
            f'input {name!r} of {where} is {backend.dtype(v)} of shape '
            f'{backend.shape(v)}; the program was typed for '
            f'{tt.dtype} of per-member shape {tt.shape}',
            hint='Pass inputs of the types the program was inferred for '
            '(type_inference.infer_types(program, inputs, backend)).')
      sizes.setdefault(backend.shape(v)[0], name)
      return v
    try:
      out.append(inst.pattern_map2(convert, t, a, inst.TensorType))
    except ValueError as e:
      raise errors.ArgumentError(
          f'input {name!r} of {where} does not have the structure of its '
          f'type {inst.type_str(t)}: {e}') from None
  wide = {s: n for s, n in sizes.items() if s != 1}
  if len(wide) > 1:
    detail = ', '.join(f'{n!r}: {s}' for s, n in wide.items())
    raise errors.ArgumentError(
        f'inputs of {where} have different batch sizes ({detail})',
        hint='Every input needs the same leading (batch) dimension, or a '
        'batch dimension of 1 (or none: a scalar), which is broadcast.')
  batch = next(iter(wide)) if wide else 1
  if wide and 1 in sizes:
    rows = np.zeros(batch, np.int64)
    out = [inst.pattern_map(
        lambda v: backend.take_rows(v, rows)
        if backend.shape(v)[0] == 1 else v, a) for a in out]
  return out, batch
