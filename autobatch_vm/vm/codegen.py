"""Blocks as generated Python functions, for the NumPy backend.

The VM's generic block compiler (`vm.closures.BlockCompiler`) makes
each block a chain of closures: every read, write and primitive is a few
Python calls and dict look-ups.  On NumPy, which runs a Python loop over
steps, that overhead is paid at every step.  Here each block becomes one
straight-line Python function instead, written out as source and compiled
once per (program, stack depth), for every batch size (the batch size is
the stacks' second axis):

    def block_encode_2_2(state, m):
      # block encode.2.2
      idx, full = m.idx, m.full
      own = state[10]
      # pop encode.h_left
      top = state[7][idx] - 1
      frame = top * state[6].shape[1] + idx
      x1 = state[6].reshape((-1, 64)).take(frame, axis=0)
      state[7][idx] = top
      # encode.%ret = prim[lib.cell(h_left, h_right)](encode.h_left, ...)
      if full:
        own.discard(3)
        x2 = state[3]
      else:
        x2 = take(state[3], idx)
      try:
        r7 = FN_3(x1, x2)
      ...

A block's reads, writes and temporaries are Python locals (the block is
straight-line code, so which variables already have their rows here is
known when generating it); constants, primitives and error builders are
bound in the function's globals.  The semantics are the closure
compiler's, compacted (see `numpy_backend`): primitives get the rows of
the members at the block, results are scattered into registers, in place
where the run owns the register (`vm.layout.Layout`).  A store
that nothing reads is left out: above, `h_left` is dead after its pop, so
its rows stay in `x1` and never reach its register.

`source(compiled)` returns the generated code of a
`vm.closures.CompiledProgram`, for debugging; each block function
also has it as its `source` attribute.
"""

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends import numpy as numpy_backend
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness
from autobatch_vm.vm import dispatch
from autobatch_vm.vm import errors as run_errors
from autobatch_vm.vm.layout import PC
from autobatch_vm.vm.layout import PC_SP
from autobatch_vm.vm.layout import PC_STACK

__all__ = ['compile_block', 'source']


def _ident(label):
  """The name of a block's function, from its label (deterministic).

  A label starts with the user's function name (`FN.2`), which may be any
  identifier, so the name starts with `block_`: no name `_Gen` binds in
  the function's globals (`np`, `take`, `BE`, `AutoBatchError`, the
  constants `FN_2`, `COERCE_7`, ...: upper case) or uses as a local
  (`idx`, `x1`, ...) does, and a function's own name never replaces a
  constant it calls.
  """
  return 'block_' + ''.join(c if c.isalnum() else '_' for c in label)


class _Gen:
  """Writes one block's function: `lines` of source, `env` its globals."""

  def __init__(self, bc, block, stored):
    self.bc = bc          # the VM's BlockCompiler: program, layout, backend
    self.block = block
    self.p = bc.p
    self.layout = bc.layout
    self.be = bc.be
    self.lines = []
    self.env = {'np': np, 'take': numpy_backend.take_rows, 'AutoBatchError':
                errors.AutoBatchError, 'BE': self.be}
    self.local = {}       # var -> local name holding its rows in this block
    self.names = 0
    self.indent = 1
    # A register write that nothing reads is not stored: the variable is
    # written again later in the block (reads here use the rows in a
    # local), or is dead when the block ends.
    self.stored = stored  # per instruction: the writes stored
    self.i = 0            # the instruction being generated

  # -- plumbing --------------------------------------------------------------

  def emit(self, line):
    self.lines.append('  ' * self.indent + line)

  def fresh(self, prefix='x'):
    self.names += 1
    return f'{prefix}{self.names}'

  def const(self, value, prefix='k'):
    """A global name bound to `value` in the generated function."""
    name = self.fresh(prefix.upper() + '_')
    self.env[name] = value
    return name

  def alloc(self, var):
    return self.p.var_alloc.get(var, inst.VariableAllocation.NULL)

  def template(self, var):
    return self.p.var_defs[var].tensors

  # -- reads -------------------------------------------------------------------

  def read(self, var):
    """An expression (a local name) holding `var`'s rows in this block."""
    if var in self.local:
      return self.local[var]
    alloc = self.alloc(var)
    va = inst.VariableAllocation
    if alloc == va.TEMPORARY:
      raise errors.InternalError(f'read of temporary {var} before a write')
    if alloc not in (va.REGISTER, va.FULL):
      raise errors.InternalError(f'read of {alloc.name} variable {var}')
    slots = self.layout.regs[var]
    template = self.template(var)
    leaves = [self.fresh() for _ in slots]
    if not slots:   # a pattern of no tensors (`()`)
      name = self.fresh()
      self.emit(f'{name} = {self.unflatten(template)}([])')
      self.local[var] = name
      return name
    # A whole-batch read hands out the register's array: the run no longer
    # owns it (see vm.layout.Layout).  A masked one gathers a copy.
    self.emit('if full:')
    self.indent += 1
    for s, x in zip(slots, leaves):
      self.emit(f'own.discard({s})')
      self.emit(f'{x} = state[{s}]')
    self.indent -= 1
    self.emit('else:')
    self.indent += 1
    for s, x in zip(slots, leaves):
      self.emit(f'{x} = take(state[{s}], idx)')
    self.indent -= 1
    if isinstance(template, inst.TensorType):
      name = leaves[0]
    else:
      name = self.fresh()
      self.emit(f'{name} = {self.unflatten(template)}([{", ".join(leaves)}])')
    self.local[var] = name
    return name

  def flatten(self, template):
    """A global: a function from a value of `template` to its leaves."""
    return self.const(
        lambda v: dispatch.flatten_like(template, v), 'flat')

  def unflatten(self, template):
    return self.const(
        lambda leaves: inst.pattern_unflatten(template, leaves,
                                              inst.TensorType), 'unflat')

  # -- writes ------------------------------------------------------------------

  def write(self, names, value, strict=False):
    """Stores expression `value` into the variable pattern `names`
    (`strict`: a primitive's result on per-member inputs, whose rows are
    checked, see `numpy_backend.coercer`)."""
    if not isinstance(names, str):
      if not names:
        return   # an empty pattern: nothing to store
      parts = [self.fresh() for _ in names]
      unpack = self.const(dispatch.unpack, 'unpack')
      self.emit(f'{", ".join(parts)}, = {unpack}({value}, {len(parts)})')
      for n, part in zip(names, parts):
        self.write(n, part, strict)
      return
    var = names
    alloc = self.alloc(var)
    va = inst.VariableAllocation
    if alloc == va.NULL:
      return
    template = self.template(var)
    leaf_types = inst.pattern_flatten(template, inst.TensorType)
    single = isinstance(template, inst.TensorType)
    if single:
      leaves = [value]
    elif leaf_types:
      leaves = [self.fresh() for _ in leaf_types]
      self.emit(f'{", ".join(leaves)}, = {self.flatten(template)}({value})')
    else:
      leaves = []   # a pattern of no tensors (`()`)
    rows = []
    for leaf, t in zip(leaves, leaf_types):
      coerce = self.const(numpy_backend.coercer(t, strict),
                          'strict' if strict else 'coerce')
      x = self.fresh()
      self.emit(f'{x} = {coerce}({leaf}, m.count)')
      rows.append(x)
    if alloc in (va.REGISTER, va.FULL) and var in self.stored[self.i]:
      for s, x in zip(self.layout.regs[var], rows):
        self.store(s, x)
    if single:
      self.local[var] = rows[0]
    else:
      name = self.fresh()
      self.emit(f'{name} = {self.unflatten(template)}([{", ".join(rows)}])')
      self.local[var] = name

  def store(self, slot, x):
    """Scatters rows `x` into register `slot` (in place if owned)."""
    self.emit('if full:')
    self.emit(f'  own.discard({slot})')
    self.emit(f'  state[{slot}] = {x}')
    self.emit(f'elif {slot} in own:')
    self.emit(f'  state[{slot}][idx] = {x}')
    self.emit('else:')
    self.emit(f'  t = state[{slot}].copy()')
    self.emit(f'  t[idx] = {x}')
    self.emit(f'  state[{slot}] = t')
    self.emit(f'  own.add({slot})')

  # -- instructions ------------------------------------------------------------

  def instruction(self, op):
    self.emit(f'# {inst.op_str(op)}'.replace('\n', ' '))
    return dispatch.dispatch(self, op)

  def prim(self, op):
    args = [self.read(v) for v in op.vars_in]
    casts = []
    if op.casts:
      # Inside the `try`: a weak number's cast raises as NumPy's operator
      # does (`Backend.cast_weak`).
      cast = self.const(self.be.cast_weak, 'cast')
      args = list(args)
      for i, dtype in op.casts:
        x = self.fresh()
        place = self.const(dispatch.weak_cast_place(op), 'place')
        casts.append(f'  {x} = {cast}({args[i]}, '
                     f'{self.const(dtype, "dtype")}, {place})')
        args[i] = x
    fn = self.const(dispatch.primitive(op, self.be), 'fn')
    opname = self.const(op, 'op')
    failure = self.const(run_errors.primitive_failure, 'failure')
    shape_error = self.const(run_errors.result_shape_error, 'shape_error')
    r = self.fresh('r')
    arglist = ', '.join(args)
    self.emit('try:')
    for line in casts:
      self.emit(line)
    self.emit(f'  {r} = {fn}({arglist})')
    self.emit('except AutoBatchError:')
    self.emit('  raise')
    self.emit('except Exception as e:  # raises, naming the members')
    self.emit(f'  raise {failure}(e, {opname}, BE, m, True) from e')
    self.emit('try:')
    self.indent += 1
    start = len(self.lines)
    self.write(op.vars_out, r, strict=op.strict)
    if len(self.lines) == start:   # the result is not used
      self.emit('pass')
    self.indent -= 1
    self.emit('except ValueError as e:')
    self.emit(f'  raise {shape_error}(e, {opname}, BE, m) from e')

  def leaf_rows(self, var):
    """Expressions for the rows of each leaf of `var`, for a push: its
    locals if the block has them, else gathered from the registers (not
    kept: a push copies them, so the registers stay the run's own)."""
    if var in self.local:
      template = self.template(var)
      if isinstance(template, inst.TensorType):
        return [self.local[var]]
      leaves = [self.fresh() for _ in inst.pattern_flatten(template,
                                                           inst.TensorType)]
      self.emit(f'{", ".join(leaves)}, = '
                f'{self.flatten(template)}({self.local[var]})')
      return leaves
    if self.read_later(var):   # the block needs the rows anyway
      self.read(var)
      return self.leaf_rows(var)
    return [f'(state[{s}] if full else take(state[{s}], idx))'
            for s in self.layout.regs[var]]

  def read_later(self, var):
    """Whether an instruction after the current one, or the terminator,
    reads `var` before any writes it."""
    for op in self.block.instructions[self.i + 1:]:
      if var in liveness.reads(op):
        return True
      if var in liveness.writes(op):
        return False
    return var in liveness.reads(self.block.terminator)

  def push(self, op):
    """Writes the rows into each stack at the members' pointers (stacks
    belong to the run: in place) and moves the pointers up."""
    depth = self.layout.depth
    for names, stack_slots, _, sp_slot in self.layout.sp_groups(op):
      what = run_errors.saving_what(self.bc.p, names)
      fail = self.const(_push_failure(
          run_errors.overflow(what, op.loc, depth), depth), 'overflow')
      values = [x for var in names for x in self.leaf_rows(var)]
      self.emit(f'top = state[{sp_slot}][idx]')
      self.emit('try:   # a full stack has no row `top`')
      for s, x in zip(stack_slots, values):
        self.emit(f'  state[{s}][top, idx] = {x}')
      self.emit('except IndexError:')
      self.emit(f'  raise {fail}(idx, top) from None')
      self.emit(f'state[{sp_slot}][idx] = top + 1')

  def pop(self, op, keep):
    """Reads the top frames as the members' rows; `pop` also moves the
    pointers down."""
    for names, stack_slots, _, sp_slot in self.layout.sp_groups(op):
      types = [t for var in names for t in self.layout.leaf_types[var]]
      rows = [self.fresh() for _ in stack_slots]
      self.emit(f'top = state[{sp_slot}][idx] - 1')
      shaped = [s for s, t in zip(stack_slots, types) if t.shape]
      if shaped:   # the batch size: a stack's second axis
        self.emit(f'frame = top * state[{shaped[0]}].shape[1] + idx')
      for s, t, x in zip(stack_slots, types, rows):
        if t.shape:   # frames of vectors: `take` on flattened frames
          # (frames x batch rows, by name where a row holds nothing:
          # NumPy cannot infer the -1 of a reshape of no elements)
          rows_of = (f'(state[{s}].shape[0] * state[{s}].shape[1],) + '
                     f'{tuple(t.shape)}' if 0 in t.shape
                     else (-1,) + tuple(t.shape))
          self.emit(f'{x} = state[{s}].reshape({rows_of}).take(frame, axis=0)')
        else:
          self.emit(f'{x} = state[{s}][top, idx]')
      if not keep:
        self.emit(f'state[{sp_slot}][idx] = top')
      k = 0
      for var in names:   # the restored rows are the variable's here
        template = self.template(var)
        n = len(self.layout.regs[var])
        leaves, k = rows[k:k + n], k + n
        if var in self.stored[self.i]:
          for s, x in zip(self.layout.regs[var], leaves):
            self.store(s, x)
        if isinstance(template, inst.TensorType):
          self.local[var] = leaves[0]
        else:
          name = self.fresh()
          self.emit(f'{name} = {self.unflatten(template)}'
                    f'([{", ".join(leaves)}])')
          self.local[var] = name

  def exit(self, op):
    """Sends the members for which `op.cond` is `op.when` to `op.block`,
    and narrows what the rest of the block sees to the others: the
    indices, the mask and every local's rows.  Where none stay, the
    function returns."""
    c = self.condition(op.cond)
    leave = self.fresh('leave')
    self.emit(f'{leave} = {c}' if op.when else f'{leave} = ~{c}')
    self.emit(f'if {leave}.any():')
    self.indent += 1
    self.emit(f'state[{PC}][idx[{leave}]] = {self.bc.index[op.block]}')
    self.emit(f'keep = ~{leave}')
    self.emit('idx, full = idx[keep], False')
    self.emit(f'm = {self.const(_Narrowed, "narrowed")}(m, idx)')
    self.emit('if not idx.size:')
    self.emit('  return')
    for var, x in sorted(self.local.items()):
      template = self.template(var)
      if isinstance(template, inst.TensorType):
        self.emit(f'{x} = {x}[keep]')
      else:
        self.emit(f'{x} = {self.const(_narrow_pattern(template), "narrow")}'
                  f'({x}, keep)')
    self.indent -= 1

  # -- terminators -------------------------------------------------------------

  # The PC, its stack and stack pointer (slots PC, PC_STACK, PC_SP) belong to
  # the run: updated in place, for the members' indices.

  def goto(self, target):
    self.emit('if full:')
    self.emit(f'  state[{PC}].fill({target})')
    self.emit('else:')
    self.emit(f'  state[{PC}][idx] = {target}')

  def condition(self, var):
    """A local holding `var`'s rows as bools."""
    x = self.read(var)
    template = self.template(var)
    if (isinstance(template, inst.TensorType)
        and np.dtype(template.dtype) == np.bool_):
      return x   # already coerced to bool
    c = self.fresh('c')
    self.emit(f'{c} = {self.const(self.be.to_bool, "to_bool")}({x})')
    return c

  def branch(self, c, true_target, false_target):
    # The PC's two targets indexed by the condition's bytes: half the cost
    # of `np.where`, whose int64 result the int32 PC would also cast.
    targets = self.const(np.array([false_target, true_target], np.int32),
                         'targets')
    self.emit(f'state[{PC}][idx] = {targets}.take({c}.view(np.uint8))')

  def push_pc(self, t, members):
    """Pushes `t`'s return block on the PC stack for the members with
    indices `members` (an expression)."""
    depth = self.layout.pc_depth
    callee = (t.goto_block if isinstance(t, inst.PushGotoOp) else
              t.call_block if isinstance(t, inst.CallBranchOp)
              else t.true_block).split('.', 1)[0]
    overflow = self.const(_push_failure(
        run_errors.overflow(f'call stack, calling {callee!r}', t.loc,
                          depth - 1), depth), 'pc_overflow')
    self.emit(f'calls = {members}')
    self.emit(f'top = state[{PC_SP}][calls]')
    self.emit('try:   # a full stack has no row `top`')
    ret = self.bc.index[t.push_block]
    self.emit(f'  state[{PC_STACK}][top, calls] = {ret}')
    self.emit('except IndexError:')
    self.emit(f'  raise {overflow}(calls, top) from None')
    self.emit(f'state[{PC_SP}][calls] = top + 1')

  def terminator(self, t):
    self.emit(f'# {inst.op_str(t)}')
    index = self.bc.index
    if isinstance(t, inst.GotoOp):
      return self.goto(index[t.block])
    if isinstance(t, inst.BranchOp):
      c = self.condition(t.cond)
      return self.branch(c, index[t.true_block], index[t.false_block])
    if isinstance(t, inst.CallBranchOp):
      # Only the members going to the callee push the return block.
      c = self.condition(t.cond)
      self.push_pc(t, f'idx[{c}]' if t.call_side else f'idx[~{c}]')
      return self.branch(c, index[t.true_block], index[t.false_block])
    if isinstance(t, inst.PushGotoOp):
      self.push_pc(t, 'idx')
      return self.goto(index[t.goto_block])
    if isinstance(t, inst.PushBranchOp):
      self.push_pc(t, 'idx')
      c = self.condition(t.cond)
      return self.branch(c, index[t.true_block], index[t.false_block])
    if isinstance(t, inst.IndirectGotoOp):
      # Pops the return block into the PC.
      self.emit(f'top = state[{PC_SP}][idx] - 1')
      self.emit(f'state[{PC_SP}][idx] = top')
      self.emit(f'state[{PC}][idx] = state[{PC_STACK}][top, idx]')
      return None
    raise errors.InternalError(f'Unexpected terminator {t!r}')

  # -- the function ------------------------------------------------------------

  def function(self):
    name = _ident(self.block.label)
    self.emit('idx, full = m.idx, m.full')
    self.emit(f'own = state[{self.layout.owned_slot}]')
    for self.i, op in enumerate(self.block.instructions):
      self.instruction(op)
    self.terminator(self.block.terminator)
    source = '\n'.join([f'def {name}(state, m):',
                        f'  # block {self.block.label}'] + self.lines) + '\n'
    code = compile(source, f'<autobatch_vm block {self.block.label}>',
                   'exec')
    namespace = dict(self.env)
    exec(code, namespace)  # pylint: disable=exec-used
    fn = namespace[name]
    fn.source = source
    return fn


class _Narrowed:
  """The mask of the members that stay at a block after an exit: `m`
  without the members that left (`idx`: the indices of those that stay)."""
  __slots__ = ('mask', 'idx', 'count', 'full')

  def __init__(self, m, idx):
    self.mask = np.zeros_like(m.mask)
    self.mask[idx] = True
    self.idx = idx
    self.count = idx.size
    self.full = False


def _narrow_pattern(template):
  """`narrow(value, keep)`: the rows `keep` of each leaf of a value of
  type pattern `template`."""
  def narrow(value, keep):
    return inst.pattern_unflatten(
        template, [x[keep] for x in dispatch.flatten_like(template, value)],
        inst.TensorType)
  return narrow


def _push_failure(overflow, depth):
  """`fail(members, top)`: the error for a push that did not fit (an
  IndexError writing row `top` of the stack, for these members)."""
  def fail(members, top):
    full = top >= depth
    if full.any():
      return overflow(members[full])
    return errors.InternalError('a push on a stack failed')
  return fail


def compile_block(bc, block, stored):
  """`block` of `bc`'s program as a generated function `run(state, m)`.

  Args:
    bc: The VM's `BlockCompiler` (program, layout, backend).
    block: A block of the lowered program.
    stored: `bc.stored(block)`: per instruction, the writes stored.

  Returns:
    The function; its `source` attribute is its code.
  """
  return _Gen(bc, block, stored).function()


def source(compiled):
  """The generated code of every block of `compiled`, in block order.

  Args:
    compiled: A `vm.closures.CompiledProgram` on NumPy.

  Returns:
    The source text.
  """
  return '\n'.join(b.source for b in compiled.blocks)
