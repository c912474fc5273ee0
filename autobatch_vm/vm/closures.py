"""Compiles a lowered program's blocks for one backend, batch and depth.

Each block becomes a function `run(state, m)` that runs its instructions
and terminator for the members of mask `m`.  On a compacting backend
(NumPy, which steps in Python) a block is one generated function
(`vm.codegen`); otherwise (TensorFlow, whose primitives take the whole
batch and whose runs are mostly staged) a chain of closures, one per
instruction.  Blocks are compiled once per (program, backend, depth) and
serve every batch size: a generated block reads the batch size from the
state's arrays; a closure from the mask (`m.batch`, a tensor where a
staged loop's batch axis is unknown) or the PCs' shape.
`block_code_cache` lets a caller keep them.
"""

import functools

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends import scheduler
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness
from autobatch_vm.ir import loops
from autobatch_vm.vm import codegen
from autobatch_vm.vm import dispatch
from autobatch_vm.vm import errors as run_errors
from autobatch_vm.vm import failures
from autobatch_vm.vm.layout import CALLS
from autobatch_vm.vm.layout import Layout
from autobatch_vm.vm.layout import PC
from autobatch_vm.vm.layout import PC_SP
from autobatch_vm.vm.layout import PC_STACK

__all__ = ['BlockCompiler', 'CompiledProgram', 'compile_blocks']

VA = inst.VariableAllocation


class BlockCompiler:
  """Turns each block into a function `run(state, m)`.

  On a compacting backend (NumPy, which steps in Python) a block becomes
  one generated function (`vm.codegen`); otherwise (TensorFlow, whose
  primitives take the whole batch and whose runs are mostly staged) a
  chain of closures, one per instruction.  The run's inputs and outputs
  are read and written here, for the whole batch, on either.

  Args:
    program: The `LoweredProgram`.
    layout: Its `vm.layout.Layout` for one backend and depth.
  """

  def __init__(self, program, layout):
    self.p = program
    self.layout = layout
    self.be = layout.backend
    self.batch = layout.batch
    self.compact = self.be.compacts
    self.stack_slots = frozenset(
        [PC_STACK] + [s for slots, _ in layout.stacks.values()
                       for s in slots])
    self.index = program.block_index()
    self.num_blocks = len(program.blocks)
    self._liveness = None
    # A program whose calls do not recurse, and fit the depth, cannot
    # overflow: its pushes check nothing (on TensorFlow a check is an op
    # per push, and a place where the run may fail).
    self.checks_overflow = self.compact or failures.can_overflow(
        program, layout.depth)
    # While a block's instruction is compiled: the variables whose writes
    # there are stored (`stored`); None (outside blocks): all are.  Also
    # its block's label, and the variables it and the rest of the block
    # read (an exit fills those again for the members that stay).
    self._stored = None
    self._label = None
    self._read_later = frozenset()
    self._after_exit = False   # the instruction follows an exit

  def liveness(self):
    """The variables live on entry to and exit from each block.

    Returns:
      `(live_in, live_out)`, dicts by block label (computed once).
    """
    if self._liveness is None:
      self._liveness = liveness.lowered_liveness(self.p)
    return self._liveness

  def stored(self, block):
    """Per instruction of `block`, the variables whose writes are stored.

    A write that nothing reads is not stored in the state: when the
    variable is written again later in the block (reads in the block take
    the value as computed) or is dead when the block ends.  Members that
    leave at an exit (`ExitOp`) read what is live at its target: a write
    before the exit of such a variable is stored.

    Args:
      block: A block of the program.

    Returns:
      A list of frozensets, one per instruction.
    """
    live_in, live_out = self.liveness()
    out, needed = [], set(live_out[block.label])
    for op in reversed(block.instructions):
      if isinstance(op, inst.ExitOp):
        needed |= live_in[op.block]
      out.append(frozenset(needed))
      needed -= liveness.writes(op)
    return out[::-1]

  # -- reading and writing variables ---------------------------------------

  def reader(self, var):
    """A function `(state, temps, m)` returning `var`'s whole-batch value.

    `m=None` reads it outside a block (the run's outputs).

    Args:
      var: A REGISTER, FULL or TEMPORARY variable.

    Returns:
      The reader.
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
    fetch = self.be.sanitize
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
    """A function `(state, temps, value, m)` storing `value` into `var`.

    The value is a whole-batch one, written for the members in `m`.

    Args:
      var: A variable.
      strict: Whether the value is a primitive's result on per-member
        inputs, whose rows are checked (`backends.numpy.coercer`).

    Returns:
      The writer.
    """
    alloc = self.p.var_alloc.get(var, VA.NULL)
    if alloc == VA.NULL:
      return lambda state, temps, value, m: None
    template = self.p.var_defs[var].tensors
    leaves = inst.pattern_flatten(template, inst.TensorType)
    if self.batch is None:   # compiled for every batch size: the mask's
      rows_of = _rows_of_mask if self.compact else _batch_of_mask
      coerces = [rows_of(self.be.coercer(t, strict)) for t in leaves]
    else:
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
        values = dispatch.flatten_like(template, value)
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
      leaves = dispatch.flatten_like(template, value)
      rows = [c(v, m) for c, v in zip(coerces, leaves)]
      for slot, v in zip(slots, rows):
        state[slot] = write(state[slot], v, m)
      temps[var] = inst.pattern_unflatten(template, rows, inst.TensorType)
    return write_reg_pattern

  def binder(self, pattern, strict=False):
    """A writer for a pattern of variable names (tuple unpacking).

    Args:
      pattern: A variable name, or a tuple of patterns.
      strict: As for `writer`.

    Returns:
      The writer.
    """
    if isinstance(pattern, str):
      return self.writer(pattern, strict)
    subs = [self.binder(p, strict) for p in pattern]
    n = len(subs)

    def bind(state, temps, value, m):
      for w, v in zip(subs, dispatch.unpack(value, n)):
        w(state, temps, v, m)
    return bind

  # -- instructions ----------------------------------------------------------

  def instruction(self, op):
    """The closure `run(state, temps, m)` of instruction `op`.

    Args:
      op: A lowered instruction.

    Returns:
      The closure.
    """
    return dispatch.dispatch(self, op)

  def prim(self, op):
    """The closure of `PrimOp` `op`: read, call, write.

    Args:
      op: The `PrimOp`.

    Returns:
      The closure.
    """
    readers = [self.reader(v) for v in op.vars_in]
    for i, dtype in op.casts:   # weak variables: see PrimOp.casts
      readers[i] = _cast_reader(readers[i], self.be.cast_weak, dtype,
                                dispatch.weak_cast_place(op))
    bind = self.binder(op.vars_out, strict=op.strict)
    fn = dispatch.primitive(op, self.be)
    be = self.be
    if self._after_exit:
      fn = self._guarded(op, fn)

    guarded = self._after_exit
    # A per-member primitive on TensorFlow reports the members whose item
    # index is out of range (`member_ops.out_of_range_checks`).
    checked = op.per_member and be.reports_out_of_range

    def run_prim(state, temps, m):
      try:
        # (In the `try`: a weak number's cast raises as NumPy's operator
        # does, `Backend.cast_weak`.)
        args = [r(state, temps, m) for r in readers]
        if checked:
          result = run_errors.reporting_member_errors(
              op, be, m, lambda: fn(m, *args) if guarded else fn(*args))
        else:
          result = fn(m, *args) if guarded else fn(*args)
      except errors.AutoBatchError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        raise run_errors.primitive_failure(e, op, be, m) from e
      try:
        bind(state, temps, result, m)
      except ValueError as e:
        raise run_errors.result_shape_error(e, op, be, m) from e
    return run_prim

  def _guarded(self, op, fn):
    """`fn` for a primitive after an exit: `fn(m, *args)`, run only where
    a member stays (`Backend.when_any`).

    Where none stays, the lanes the primitive would see are those of
    members that left, or of no member at the block: data it may fail on
    (a gather's index out of range).  Its result is made the outputs'
    leaves, of their types, so that both ways give one structure.
    """
    templates = {v: self.p.var_defs[v].tensors
                 for v in inst.pattern_flatten(op.vars_out)}
    types = [t for v in inst.pattern_flatten(op.vars_out)
             for t in inst.pattern_flatten(templates[v], inst.TensorType)]
    coerces = [self.be.coercer(t, op.strict) for t in types]
    be = self.be

    def guarded(m, *args):
      def run():
        leaves = _result_leaves(op.vars_out, fn(*args), templates)
        return [c(x, m.batch) for c, x in zip(coerces, leaves)]
      return _result_of(op.vars_out, be.when_any(m, run, types), templates)
    return guarded

  def push(self, op):
    """The closure of `PushOp` `op`.

    Args:
      op: The `PushOp`.

    Returns:
      The closure.
    """
    be, depth = self.be, self.layout.depth
    groups = []
    for names, stack_slots, _, sp_slot in self.layout.sp_groups(op):
      what = run_errors.saving_what(self.p, names)
      # Each variable's value: as computed in this block if it was (its
      # write may not be stored: see `stored`), else its registers.  Only
      # the members' rows are pushed, so either serves.
      sources = [(var, self.layout.regs[var], self.p.var_defs[var].tensors)
                 for var in names]
      groups.append((stack_slots, sources, sp_slot,
                     run_errors.overflow(what, op.loc, depth)
                     if self.checks_overflow else None))

    def values(state, temps, sources):
      out = []
      for var, slots, template in sources:
        value = temps.get(var, _MISSING)
        if value is _MISSING:
          out.extend(state[s] for s in slots)
        else:
          out.extend(dispatch.flatten_like(template, value))
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
    """The closure of a `PopOp`, or of a `RestoreOp` (`keep`).

    Args:
      op: The instruction.
      keep: Whether the frame stays on the stack (a restore).

    Returns:
      The closure.
    """
    be = self.be
    fetch = be.sanitize   # as `reader` reads
    groups = []
    for names, stack_slots, reg_slots, sp_slot in self.layout.sp_groups(op):
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

  def exit(self, op):
    """The closure of `ExitOp` `op`: it moves the leaving members' PCs.

    It returns the mask of the members that stay, which the rest of the
    block runs for (`_NONE_STAY` where none stay, known eagerly: the rest
    is skipped).  The values the block has read or computed so far are
    filled again for those members (`Backend.sanitize`) where the rest
    reads them: the lanes of the members that left must not reach the
    rest's primitives, as the lanes of members not at a block do not.

    Args:
      op: The `ExitOp`.

    Returns:
      The closure.
    """
    be = self.be
    cond = self.reader(op.cond)
    here, target = self.index[self._label], self.index[op.block]
    tt, ff = (target, here) if op.when else (here, target)
    later = self._read_later

    def refill(value, stay):
      return inst.pattern_map(lambda x: be.sanitize(x, stay), value)

    def run_exit(state, temps, m):
      c = be.to_bool(cond(state, temps, m))
      state[PC] = be.branch(state[PC], m, c, tt, ff)
      stay = be.submask(m, c, negate=op.when)
      if stay.count == 0:
        return _NONE_STAY
      for var in later & temps.keys():
        temps[var] = refill(temps[var], stay)
      return stay
    return run_exit

  # -- terminators -----------------------------------------------------------

  def terminator(self, t):
    """The closure of terminator `t`: it moves the members' PCs.

    Args:
      t: A lowered terminator.

    Returns:
      The closure.
    """
    be = self.be
    if isinstance(t, inst.GotoOp):
      target = self.index[t.block]

      def run_goto(state, temps, m):
        state[PC] = be.goto(state[PC], m, target)
      return run_goto
    if isinstance(t, inst.BranchOp):
      cond = self.reader(t.cond)
      tt, ff = self.index[t.true_block], self.index[t.false_block]

      def run_branch(state, temps, m):
        c = be.to_bool(cond(state, temps, m))
        state[PC] = be.branch(state[PC], m, c, tt, ff)
      return run_branch
    if isinstance(t, CALLS):
      ret = self.index[t.push_block]
      # Made per run (compiled blocks are cached and may be traced into
      # several graphs): a NumPy constant where the batch size is known
      # when tracing, else the block index broadcast to the PCs' shape.
      ret_pc = functools.partial(be.fill_like, value=np.int32(ret))
      depth = self.layout.pc_depth
      # Labels are `<function>.<n>[.<k>]`; the jump lands in the callee.
      callee = (t.goto_block if isinstance(t, inst.PushGotoOp) else
                t.call_block if isinstance(t, inst.CallBranchOp)
                else t.true_block).split('.', 1)[0]
      overflow = run_errors.overflow(f'call stack, calling {callee!r}', t.loc,
                           depth - 1) if self.checks_overflow else None
      if isinstance(t, inst.CallBranchOp):
        cond = self.reader(t.cond)
        tt, ff = self.index[t.true_block], self.index[t.false_block]
        negate = not t.call_side

        def run_call_branch(state, temps, m):
          # Only the members going to the callee push the return block.
          c = be.to_bool(cond(state, temps, m))
          calls = be.submask(m, c, negate=negate)
          (state[PC_STACK],), state[PC_SP] = be.push(
              [state[PC_STACK]], state[PC_SP], [ret_pc(state[PC])], calls,
              depth, overflow)
          state[PC] = be.branch(state[PC], m, c, tt, ff)
        return run_call_branch
      if isinstance(t, inst.PushGotoOp):
        jump = self.terminator(inst.GotoOp(t.goto_block, t.loc))
      else:
        jump = self.terminator(inst.BranchOp(t.cond, t.true_block,
                                             t.false_block, t.loc))

      def run_push_goto(state, temps, m):
        (state[PC_STACK],), state[PC_SP] = be.push(
            [state[PC_STACK]], state[PC_SP], [ret_pc(state[PC])], m, depth,
            overflow)
        jump(state, temps, m)
      return run_push_goto
    if isinstance(t, inst.IndirectGotoOp):
      def run_return(state, temps, m):
        (state[PC],), state[PC_SP] = be.pop(
            [state[PC_STACK]], state[PC_SP], [state[PC]], m)
      return run_return
    raise errors.InternalError(f'Unexpected terminator {t!r}')

  def writes(self, block, stored):
    """The state slots that running `block` may write (always the PC).

    Args:
      block: A block of the program.
      stored: `self.stored(block)`.

    Returns:
      A frozenset of slots.
    """
    regs, stacks = self.layout.regs, self.layout.stacks
    out = {PC}
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
    if isinstance(block.terminator, CALLS):
      out.update((PC_STACK, PC_SP))
    elif isinstance(block.terminator, inst.IndirectGotoOp):
      out.add(PC_SP)
    return frozenset(out)

  def block(self, block):
    """`block` as a function `run(state, m)`.

    Its `writes` and `stack_slots` attributes tell a staged backend what
    the block may change, and `prims` which primitives it runs.

    Args:
      block: A block of the program.

    Returns:
      The function.
    """
    stored = self.stored(block)
    if self.compact:   # NumPy: one generated function per block
      run_block = codegen.compile_block(self, block, stored)
    else:
      steps = []
      self._label = block.label
      for i, (op, self._stored) in enumerate(zip(block.instructions,
                                                 stored)):
        self._read_later = (_read_after(block, i + 1)
                            if isinstance(op, inst.ExitOp) else frozenset())
        steps.append(self.instruction(op))
        self._after_exit |= isinstance(op, inst.ExitOp)
      self._stored, self._after_exit = None, False
      steps.append(self.terminator(block.terminator))
      steps = tuple(steps)

      def run_block(state, m):
        temps = {}
        for s in steps:
          s(state, temps, m)

      def run_block_with_exits(state, m):
        temps = {}
        for s in steps:
          stay = s(state, temps, m)
          if stay is _NONE_STAY:
            return
          if stay is not None:   # an exit
            m = stay

      if any(isinstance(op, inst.ExitOp) for op in block.instructions):
        run_block = run_block_with_exits
    # For staged backends, which carry only what a block may change: the
    # slots it may write, and which slots are stacks (written by pushes).
    run_block.writes = self.writes(block, stored)
    run_block.stack_slots = self.stack_slots
    # And its primitives' functions (`backends.tf.work`).
    run_block.prims = tuple(op.function for op in block.instructions
                            if isinstance(op, inst.PrimOp))
    return run_block


_MISSING = object()
# What an exit's closure returns where no member stays (known eagerly).
_NONE_STAY = object()


def _result_leaves(pattern, value, templates):
  """The leaves of primitive result `value` bound to variable pattern
  `pattern` (`templates`: each variable's type pattern)."""
  if isinstance(pattern, str):
    return dispatch.flatten_like(templates[pattern], value)
  return [x for p, v in zip(pattern, dispatch.unpack(value, len(pattern)))
          for x in _result_leaves(p, v, templates)]


def _result_of(pattern, leaves, templates):
  """`_result_leaves` undone: the value to bind to `pattern`."""
  leaves = iter(leaves)

  def build(p):
    if isinstance(p, str):
      t = templates[p]
      return inst.pattern_unflatten(
          t, [next(leaves) for _ in inst.pattern_flatten(t, inst.TensorType)],
          inst.TensorType)
    return tuple(build(q) for q in p)
  return build(pattern)


def _read_after(block, i):
  """The variables that the instructions of `block` from the `i`-th on, or
  its terminator, read."""
  return frozenset().union(
      liveness.reads(block.terminator),
      *[liveness.reads(op) for op in block.instructions[i:]])


def _cast_reader(read, cast, dtype, where):
  return lambda state, temps, m: cast(read(state, temps, m), dtype, where)


def _ignore_mask(coerce):
  return lambda x, m: coerce(x)


def _rows_of_mask(coerce):
  return lambda x, m: coerce(x, m.count)


def _batch_of_mask(coerce):
  return lambda x, m: coerce(x, m.batch)


class CompiledProgram:
  """A lowered program bound to a backend and stack depth.

  Args:
    program: The `LoweredProgram`.
    backend: The backend.
    batch: The batch size, or None: the blocks then serve every batch
      size, given to `layout.initial_state(batch)` at each run.
    depth: `max_stack_depth`.
  """

  def __init__(self, program, backend, batch, depth):
    self.program = program
    self.backend = backend
    self.batch = batch
    self.depth = depth
    self.layout = Layout(program, backend, batch, depth)
    bc = BlockCompiler(program, self.layout)
    self.blocks = [bc.block(b) for b in program.blocks]
    self.inputs = [bc.writer(v) for v in program.vars_in]
    self.outputs = inst.pattern_map(bc.reader, program.vars_out)
    self._schedules = {}

  def schedule(self, name):
    """The schedule `name` for this program's runs.

    Args:
      name: `'most'` or `'lowest'`.

    Returns:
      Under `'most'`, a `scheduler.Schedule` with the program's loops'
      exits (`ir.loops`) where it has any; else `name`.
    """
    out = self._schedules.get(name)
    if out is None:
      waits = loops.exit_waits(self.program.blocks) if name == 'most' else None
      out = self._schedules[name] = (
          name if waits is None else scheduler.Schedule(name, waits))
    return out


def compile_blocks(program, backend, batch, depth, cache=None):
  """The `CompiledProgram` of `program`, from `cache` if it is there.

  One compiled program serves every batch size: it is compiled and
  cached without one (`batch` is the run's, for `layout.initial_state`).

  Args:
    program: The `LoweredProgram`.
    backend: The backend.
    batch: The batch size.
    depth: `max_stack_depth`.
    cache: A dict (or `caches.LRUCache`) keeping compiled programs across
      calls, or None.

  Returns:
    The `CompiledProgram`.
  """
  del batch   # read at run time
  key = ('blocks', id(program), backend, depth)
  if cache is not None and key in cache and cache[key].program is program:
    return cache[key]
  compiled = CompiledProgram(program, backend, None, depth)
  if cache is not None:
    cache[key] = compiled
  return compiled
