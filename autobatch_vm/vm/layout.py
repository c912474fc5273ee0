"""The VM state's layout: which slot of the flat state holds what.

State is a flat list of arrays, so that a staged backend can carry it
through a `while_loop`:

  [pc, pc_stack, pc_sp, <register leaves>..., <stack leaves>..., <sps>...]

(on a compacting backend, plus the set of registers the run owns).  The
first three slots have names (`PC`, `PC_STACK`, `PC_SP`, defined by the
backends' interface, `backends.base`, and re-exported here); every
executor and backend indexes the state by these names, and `Layout`
assigns the others.  Registers hold one value per member.  A FULL
variable also has a stack `[max_stack_depth, batch, *shape]` and a stack
pointer per member; only `PushOp`/`PopOp` touch the stack.  TEMPORARY
variables never enter the state: they live for the duration of one block.
"""

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends.base import PC
from autobatch_vm.backends.base import PC_SP
from autobatch_vm.backends.base import PC_STACK
from autobatch_vm.ir import instructions as inst

__all__ = ['PC', 'PC_STACK', 'PC_SP', 'CALLS', 'Layout']

VA = inst.VariableAllocation
# The first slot after them (registers, then stacks and their pointers).
_FIRST_VARIABLE_SLOT = 3
# Terminators that push a return block on the PC stack.
CALLS = (inst.PushGotoOp, inst.PushBranchOp, inst.CallBranchOp)


class Layout:
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

  Args:
    program: The `LoweredProgram` whose variables get slots.
    backend: The backend that makes the state's arrays.
    batch: The batch size, or None: given to `initial_state` and `memory`
      at each call (a compacting backend's compiled blocks read it from
      the state's arrays, so one layout serves every batch size).
    depth: `max_stack_depth`, the frames of each stack.
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
    has_calls = any(isinstance(b.terminator, CALLS) for b in program.blocks)
    self.pc_depth = depth + 1 if has_calls else 1
    n = _FIRST_VARIABLE_SLOT
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
    self.owned_slot = n if backend.compacts else None
    self.size = n if self.owned_slot is None else n + 1

  def _batch(self, batch):
    batch = self.batch if batch is None else batch
    if batch is None:
      raise errors.InternalError('a layout without a batch size needs one')
    return batch

  def memory(self, batch=None):
    """Bytes the VM state takes: {'stacks': ..., 'registers': ..., 'pc': ...}.

    Only FULL variables (live across a call that may overwrite them) have
    stacks: `max_stack_depth * batch * size` bytes per leaf.

    Args:
      batch: The batch size; None: the layout's.
    """
    b, d = self._batch(batch), self.depth
    regs = sum(b * t.nbytes for v in self.regs for t in self.leaf_types[v])
    stacks = sum(d * b * t.nbytes for v in self.stacks
                 for t in self.leaf_types[v])
    stacks += 4 * b * len({sp for _, sp in self.stacks.values()})
    pc = self.pc_depth * b * 4 + 2 * b * 4
    return {'stacks': stacks, 'registers': regs, 'pc': pc,
            'total': stacks + regs + pc}

  def initial_state(self, batch=None):
    """The state before the first step: every PC at the entry block.

    Each PC stack holds the exit index as its base frame; registers and
    stacks are zeros.

    Args:
      batch: The batch size; None: the layout's.

    Returns:
      The state, a list of `size` arrays of the backend.
    """
    b, be = self._batch(batch), self.backend
    num_blocks = len(self.program.blocks)
    state = [None] * self.size
    state[PC] = be.sp_zeros(b)
    pc_type = inst.TensorType(np.int32, ())
    state[PC_STACK] = be.stack_zeros(pc_type, self.pc_depth, b)
    state[PC_SP] = be.sp_zeros(b)
    # The base frame of every PC stack is the exit index.
    full = be.make_mask(state[PC], 0, b)
    exit_pc = be.fill_like(state[PC], num_blocks)
    (state[PC_STACK],), state[PC_SP] = be.push(
        [state[PC_STACK]], state[PC_SP], [exit_pc], full, self.pc_depth,
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

  def _stack_slots(self, var):
    try:
      return self.stacks[var]
    except KeyError:
      raise errors.InternalError(f'push/pop of non-FULL variable {var}')

  def sp_groups(self, op):
    """The variables of a push or pop, grouped by stack pointer.

    All of a pointer's variables are in `op` (see above).

    Args:
      op: A `PushOp`, `PopOp` or `RestoreOp`.

    Returns:
      `[(vars, stack slots, register slots, sp slot)]`.
    """
    groups = {}
    for var in op.vars:
      stack_slots, sp_slot = self._stack_slots(var)
      names, stacks, regs = groups.setdefault(sp_slot, ([], [], []))
      names.append(var)
      stacks.extend(stack_slots)
      regs.extend(self.regs[var])
    return [(names, stacks, regs, sp) for sp, (names, stacks, regs)
            in groups.items()]

