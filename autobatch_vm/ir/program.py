"""The IR's values: types, instructions, blocks, functions, programs.

`instructions` is the public face of these (with the grammar, the pattern
helpers and the reference interpreter); this module defines them and how
they print, which their `__str__` needs.  Every value is a frozen
dataclass: passes build new ones with `dataclasses.replace`.
"""

import collections
import dataclasses
import enum
from typing import Any, Callable, Optional, Tuple

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import patterns

__all__ = [
    'Block', 'BranchOp', 'CallBranchOp', 'ExitOp', 'Function',
    'FunctionCallOp',
    'GotoOp', 'GraphView', 'IndirectGotoOp', 'LoweredProgram', 'PopOp',
    'PrimOp', 'Program', 'PushBranchOp', 'PushGotoOp', 'PushOp', 'RestoreOp',
    'ReturnOp', 'SourceLoc', 'TensorType', 'Type', 'VariableAllocation',
    'FrozenDict', 'RETURN_VAR', 'print_program',
]


# Every function returns through this variable (the frontend and the DSL
# write it; lowering qualifies it per function, `fibonacci.%ret`).
RETURN_VAR = '%ret'


# ---------------------------------------------------------------------------
# Types.
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TensorType:
  """dtype and per-member shape (the batch dimension excluded).

  `weak` marks a type that comes from a Python literal (`1`, `0.5`, `True`):
  when such a value meets a value of a definite type in the same variable it
  takes that type, as NumPy does with Python scalars.
  """
  dtype: Any
  shape: Tuple[int, ...] = ()
  weak: bool = False

  def __post_init__(self):
    object.__setattr__(self, 'dtype', _as_dtype(self.dtype))
    object.__setattr__(self, 'shape', tuple(int(d) for d in self.shape))

  def strong(self):
    """Returns this type with `weak` cleared (itself if not weak)."""
    return dataclasses.replace(self, weak=False) if self.weak else self

  @property
  def nbytes(self):
    """Bytes of one member's value."""
    return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

  def __str__(self):
    shape = 'x'.join(str(d) for d in self.shape)
    base = f'{self.dtype.name}[{shape}]' if shape else self.dtype.name
    return base + ('~' if self.weak else '')


def _as_dtype(dtype):
  if hasattr(dtype, 'as_numpy_dtype'):  # a tf.DType, without importing TF
    dtype = dtype.as_numpy_dtype
  return np.dtype(dtype)


class Type(collections.namedtuple('Type', ['tensors'])):
  """The type of one variable: a pattern of `TensorType`s.

  `Type(None)` is an unknown type: a program lowered without an input
  signature (`Context.program_lowered(main)`) shows its structure only.
  """
  __slots__ = ()

  def __str__(self):
    return type_str(self.tensors)


def type_str(tensors):
  if isinstance(tensors, TensorType):
    return str(tensors)
  if tensors is None:
    return '?'
  inner = ', '.join(type_str(t) for t in tensors)
  if patterns.is_namedtuple(tensors):
    return f'{type(tensors).__name__}({inner})'
  if isinstance(tensors, list):
    return f'[{inner}]'
  return f'({inner}{"," if len(tensors) == 1 else ""})'


class VariableAllocation(enum.Enum):
  """Where the virtual machine keeps a variable.

  NULL: never read; its writes are dropped.
  TEMPORARY: lives inside one block; no masking and no storage needed.
  REGISTER: one value per member, written with a masked update.
  FULL: a register plus a per-member stack, because the variable is live
    across a call that may (recursively) overwrite it.
  """
  NULL = 0
  TEMPORARY = 1
  REGISTER = 2
  FULL = 3


class FrozenDict(collections.abc.Mapping):
  """An immutable, hashable, insertion-ordered mapping."""
  __slots__ = ('_items', '_dict')

  def __init__(self, *args, **kwargs):
    """Makes the mapping as `dict(*args, **kwargs)` would.

    Args:
      *args, **kwargs: As for `dict`.
    """
    d = dict(*args, **kwargs)
    object.__setattr__(self, '_dict', d)
    object.__setattr__(self, '_items', tuple(d.items()))

  def __getitem__(self, key):
    return self._dict[key]

  def __iter__(self):
    return iter(self._dict)

  def __len__(self):
    return len(self._dict)

  def __hash__(self):
    return hash(tuple((k, _hashable(v)) for k, v in self._items))

  def __eq__(self, other):
    if isinstance(other, FrozenDict):
      return self._items == other._items
    return NotImplemented

  def __setattr__(self, name, value):
    raise AttributeError('FrozenDict is immutable')

  def __repr__(self):
    return f'FrozenDict({self._dict!r})'

  def set(self, key, value):
    """Returns a copy with `key` mapped to `value`.

    Args:
      key: The key, new or present.
      value: Its value in the copy.

    Returns:
      A new `FrozenDict`; this one is unchanged.
    """
    d = dict(self._dict)
    d[key] = value
    return FrozenDict(d)


def _hashable(v):
  try:
    hash(v)
    return v
  except TypeError:
    return id(v)


# ---------------------------------------------------------------------------
# Instructions.
# ---------------------------------------------------------------------------

def identity(x):
  """The function of a copy `PrimOp` (`a = b`); passes recognize it."""
  return x


def parallel_copy(*xs):
  """The function of a parallel copy `PrimOp` (`(a, b) = (c, d)`: every
  input is read before any output is written), which lowering makes for a
  call's arguments; passes recognize it."""
  return xs


def copy_op(vars_in, vars_out, loc=None):
  """A `PrimOp` that copies `vars_in` into `vars_out` in parallel: a plain
  copy (`identity`) for one variable, else a `parallel_copy`."""
  if len(vars_in) == 1:
    return PrimOp(tuple(vars_in), vars_out[0], identity, vars_in[0], loc)
  return PrimOp(tuple(vars_in), tuple(vars_out), parallel_copy,
                ', '.join(vars_in), loc)


@dataclasses.dataclass(frozen=True)
class SourceLoc:
  """Where a piece of IR came from in the user's code."""
  function: str
  filename: str
  line: int
  source_line: str = ''

  def __str__(self):
    return f'{self.filename}:{self.line} in {self.function}'


@dataclasses.dataclass(frozen=True, eq=False)
class PrimOp:
  """`vars_out = function(*vars_in)` on whole batched arrays.

  `text` is the readable form for the printer (e.g. `n - 1`).  A PrimOp with
  no inputs computes a member-independent value that is broadcast to the
  batch.  `sync` marks one that calls a `sync_point` primitive (expensive,
  worth waiting for): blocks holding one are scheduled last.  `casts` are
  `(input index, dtype)` pairs that type inference adds where an input
  holds a Python literal (a "weak" variable, e.g. a `range` counter) and
  meets typed arrays: the VM casts that input before the call, so the
  batched primitive computes in the dtype that the literal would take.
  `per_member` marks a primitive of a per-member function: `function` is
  then a `per_member.primitive.PerMemberFunction`, written for one
  member, which the VM runs through its backend's `vectorize_member`.
  `broadcast` marks a batch-aware primitive whose result may be one row
  that every member shares (`np.arange(x.shape[-1])[None, :]`): type
  inference found that no member's values change it
  (`member_mixing.shares_one_row`), so the VM broadcasts it to the
  members; elsewhere a result of one row for several members is refused
  (`x[:1]` is the first member's row).  `numbers` are the positions of
  inputs that hold Python literals which the primitive's operators take
  as NumPy 2 takes a Python number, uncast (its weak form:
  `ops.weak_operator`, `s + (k if d else 0)`); the dry run keeps them
  Python numbers.
  """
  vars_in: Tuple[str, ...]
  vars_out: Any
  function: Callable
  text: str = ''
  loc: Optional[SourceLoc] = None
  sync: bool = False
  casts: Tuple[Tuple[int, Any], ...] = ()
  per_member: bool = False
  broadcast: bool = False
  numbers: Tuple[int, ...] = ()

  def _key(self):
    return (self.vars_in, _freeze(self.vars_out), self.function, self.text,
            self.sync, self.casts, self.per_member, self.broadcast,
            self.numbers)

  @property
  def strict(self):
    """Whether a result of other rows than the members' is refused.

    That is a primitive of per-member inputs that is not `broadcast`.
    """
    return bool(self.vars_in) and not self.broadcast

  def __eq__(self, other):
    return isinstance(other, PrimOp) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())


@dataclasses.dataclass(frozen=True, eq=False)
class FunctionCallOp:
  """`vars_out = function(*vars_in)` for a batched function of the program.

  `parallel`: the next instruction is a call of the same function that
  does not depend on this one (`parallel_calls`); the stackless executor
  runs the two as one call over both calls' members.  Either way the
  meaning is that of the two calls in sequence.
  """
  function: str
  vars_in: Tuple[str, ...]
  vars_out: Any
  loc: Optional[SourceLoc] = None
  parallel: bool = False

  def _key(self):
    return (self.function, self.vars_in, _freeze(self.vars_out),
            self.parallel)

  def __eq__(self, other):
    return isinstance(other, FunctionCallOp) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())


@dataclasses.dataclass(frozen=True)
class PushOp:
  """Saves the current value of each variable on its own per-member stack."""
  vars: Tuple[str, ...]
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class PopOp:
  """Restores each variable from the top of its stack and drops that frame."""
  vars: Tuple[str, ...]
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class RestoreOp:
  """Restores each variable from the top of its stack, keeping the frame.

  Made by fusing a `PopOp` with a later `PushOp` of the same variable.
  """
  vars: Tuple[str, ...]
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class ExitOp:
  """An early exit from a block, among its instructions (after lowering).

  The members at the block for which `cond` equals `when` jump to `block`
  (a plain jump: nothing is pushed or popped) and run nothing more of
  this block in this step; the others run the rest of the block, its
  terminator included.  Made by `passes.block_exits`, which inlines the
  likely side of a branch into the branching block.

  Attributes:
    cond: The condition variable, a per-member scalar.
    when: The value of `cond` for which members leave.
    block: The label the leaving members go to.
    loc: Where in the user's source it came from, or None.
  """
  cond: str
  when: bool
  block: str
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class GotoOp:
  """Jump to `block`.

  Attributes:
    block: The label of the block every member at this one goes to.
    loc: Where in the user's source it came from, or None.
  """
  block: str
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class BranchOp:
  """Branch on the per-member boolean `cond`.

  Attributes:
    cond: The condition variable, a per-member scalar.
    true_block: The label members go to where `cond` holds.
    false_block: The label the others go to.
    loc: Where in the user's source it came from, or None.
  """
  cond: str
  true_block: str
  false_block: str
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class ReturnOp:
  """Return from the current function (its `vars_out` hold the result)."""
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class PushGotoOp:
  """Push `push_block` on the program-counter stack and jump to `goto_block`."""
  push_block: str
  goto_block: str
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class PushBranchOp:
  """Push `push_block` on the program-counter stack, then branch on `cond`.

  A call whose callee's entry block (a base-case test) was merged into the
  caller's block by `block_merge`.
  """
  push_block: str
  cond: str
  true_block: str
  false_block: str
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class CallBranchOp:
  """Branch on `cond`, pushing `push_block` only for the calling side.

  Only the members going to the `call_side` block (True: `true_block`)
  push `push_block` first.  A call on one side, a plain jump on the other:
  made by `return_inlining` from `push_branch R, c ? T : F` whose `F` (the
  callee's base case) only sets constants and returns.  `F`'s code then
  runs in the caller's block and its members jump straight back to `R`,
  with no push, no pop and no step at `F`.
  """
  push_block: str
  cond: str
  true_block: str
  false_block: str
  call_side: bool = True
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)

  @property
  def call_block(self):
    """The label of the side that calls (pushes `push_block`)."""
    return self.true_block if self.call_side else self.false_block


@dataclasses.dataclass(frozen=True)
class IndirectGotoOp:
  """Pop the program-counter stack and jump there (a lowered return)."""
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


OPS = (PrimOp, FunctionCallOp, PushOp, PopOp, RestoreOp, ExitOp)
TERMINATORS = (GotoOp, BranchOp, ReturnOp, PushGotoOp, PushBranchOp,
               CallBranchOp, IndirectGotoOp)


def has_sync(block):
  """Whether `block` calls a primitive marked with `sync_point`."""
  return any(isinstance(op, PrimOp) and op.sync for op in block.instructions)


def jump_targets(t):
  """The labels terminator `t` names (a pushed return block included)."""
  if isinstance(t, GotoOp):
    return [t.block]
  if isinstance(t, BranchOp):
    return [t.true_block, t.false_block]
  if isinstance(t, PushGotoOp):
    return [t.push_block, t.goto_block]
  if isinstance(t, (PushBranchOp, CallBranchOp)):
    return [t.push_block, t.true_block, t.false_block]
  return []


def destinations(t):
  """Where members go after a block ending in `t` (not the block a call
  pushes to return to); None for a return: any pushed block, or the exit."""
  if isinstance(t, GotoOp):
    return [t.block]
  if isinstance(t, (BranchOp, PushBranchOp, CallBranchOp)):
    return [t.true_block, t.false_block]
  if isinstance(t, PushGotoOp):
    return [t.goto_block]
  return None


def exit_targets(block):
  """The labels the exits (`ExitOp`) among `block`'s instructions name."""
  return [op.block for op in block.instructions if isinstance(op, ExitOp)]


def block_targets(block):
  """Every label `block` names: its exits' targets, then its terminator's
  (`jump_targets`)."""
  return exit_targets(block) + jump_targets(block.terminator)


def reachable_blocks(blocks):
  """`blocks` without those no jump from the entry (`blocks[0]`) reaches."""
  by_label = {b.label: b for b in blocks}
  seen, stack = set(), [blocks[0].label]
  while stack:
    label = stack.pop()
    if label not in seen:
      seen.add(label)
      stack += block_targets(by_label[label])
  return [b for b in blocks if b.label in seen]


def _freeze(pattern):
  if isinstance(pattern, (list, tuple)):
    return (type(pattern).__name__,) + tuple(_freeze(p) for p in pattern)
  return pattern


@dataclasses.dataclass(frozen=True)
class Block:
  """A basic block: straight-line instructions and one terminator.

  Attributes:
    label: Its name, unique in its function (or lowered program).
    instructions: The ops (`OPS`) it runs in order.
    terminator: Where its members go next (`TERMINATORS`).
    loc: Where in the user's source it starts, or None.
  """
  label: str
  instructions: Tuple[Any, ...]
  terminator: Any
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class GraphView:
  """A read-only view of a block list, read as TFP's `ControlFlowGraph`.

  `program.graph` and `function.graph` give one, so code written against
  TFP's programs (`prog.graph.exit_index()`, `prog.graph.block(i)`) reads
  these.  Block `i` is the one a program counter of `i` runs; the exit
  index, one past the last block, means finished.

  Attributes:
    blocks: The `Block`s, the entry first.
  """
  blocks: Tuple[Block, ...]

  def block(self, index):
    """The block at `index` (a program counter value).

    Args:
      index: An int in `range(exit_index())`.

    Returns:
      The `Block`.
    """
    return self.blocks[index]

  def block_index(self, block):
    """The index (program counter value) of a block.

    Args:
      block: A `Block` of this graph, its label, or None for the exit.

    Returns:
      The int index; `exit_index()` for None.

    Raises:
      KeyError: If the graph has no such block.
    """
    if block is None:
      return self.exit_index()
    label = block.label if isinstance(block, Block) else block
    for i, b in enumerate(self.blocks):
      if b.label == label:
        return i
    raise KeyError(f'No block {label!r} in this graph')

  def exit_index(self):
    """The index that means "finished": one past the last block."""
    return len(self.blocks)

  def enter_block(self):
    """The entry block, `block(0)`."""
    return self.blocks[0]

  def __len__(self):
    return len(self.blocks)

  def __str__(self):
    return '\n'.join(_blocks_str(self.blocks))


@dataclasses.dataclass(frozen=True)
class Function:
  """One batched function: parameters, result pattern and a CFG of blocks.

  `blocks[0]` is the entry.  `var_defs` maps each variable to its `Type`
  (empty before type inference); `var_alloc` to its `VariableAllocation`
  (empty before allocation).
  """
  name: str
  vars_in: Tuple[str, ...]
  vars_out: Any
  blocks: Tuple[Block, ...]
  var_defs: FrozenDict = FrozenDict()
  var_alloc: FrozenDict = FrozenDict()
  type_inference: Optional[Callable] = dataclasses.field(
      default=None, compare=False)
  loc: Optional[SourceLoc] = dataclasses.field(default=None, compare=False)
  python_function: Optional[Callable] = dataclasses.field(
      default=None, compare=False)

  def block(self, label):
    """Finds the block labelled `label`.

    Args:
      label: A block label of this function.

    Returns:
      The `Block`.

    Raises:
      InternalError: If the function has no such block.
    """
    for b in self.blocks:
      if b.label == label:
        return b
    raise errors.InternalError(f'No block {label!r} in function {self.name}')

  @property
  def graph(self):
    """The blocks as a read-only `GraphView` (TFP's `Function.graph`)."""
    return GraphView(self.blocks)


@dataclasses.dataclass(frozen=True)
class Program:
  """A main function and every batched function reachable from it."""
  functions: Tuple[Function, ...]
  main: str

  def function(self, name):
    """Finds the function named `name`.

    Args:
      name: A function name of this program.

    Returns:
      The `Function`.

    Raises:
      InternalError: If the program has no such function.
    """
    for f in self.functions:
      if f.name == name:
        return f
    raise errors.InternalError(f'No function {name!r} in program')

  @property
  def main_function(self):
    """The `Function` named `main`."""
    return self.function(self.main)

  def replace_function(self, fn):
    """Returns this program with the function of `fn`'s name replaced.

    Args:
      fn: The new `Function`.

    Returns:
      A new `Program`; this one is unchanged.
    """
    return dataclasses.replace(
        self, functions=tuple(fn if f.name == fn.name else f
                              for f in self.functions))

  def __str__(self):
    return print_program(self)


@dataclasses.dataclass(frozen=True)
class LoweredProgram:
  """One flat CFG: calls and returns are explicit stack operations.

  Variable names are qualified by their function (`fibonacci.n`).  Block
  `blocks[0]` is the entry; a program counter equal to `len(blocks)` means
  the member has finished.  A block's label starts with the name of the
  user's function it came from (`fibonacci.1.1`); `main` names the entry
  function.
  """
  blocks: Tuple[Block, ...]
  var_defs: FrozenDict
  var_alloc: FrozenDict
  vars_in: Tuple[str, ...]
  vars_out: Any
  main: str = ''

  def block_index(self):
    """Maps each block's label to its index (its program counter value).

    Returns:
      A dict from label to index in `blocks`.
    """
    return {b.label: i for i, b in enumerate(self.blocks)}

  @property
  def graph(self):
    """The blocks as a read-only `GraphView` (TFP's `Program.graph`).

    `graph.block(i)` is the block a program counter of `i` runs;
    `graph.exit_index()` is `len(blocks)`.
    """
    return GraphView(self.blocks)

  def __str__(self):
    return print_program(self)


# ---------------------------------------------------------------------------
# Printer.
# ---------------------------------------------------------------------------

def pattern_str(pattern):
  if isinstance(pattern, (tuple, list)):
    inner = ', '.join(pattern_str(p) for p in pattern)
    if patterns.is_namedtuple(pattern):
      return f'{type(pattern).__name__}({inner})'
    return f'[{inner}]' if isinstance(pattern, list) else f'({inner})'
  return str(pattern)


def op_str(op):
  """One instruction or terminator as a line of text."""
  if isinstance(op, PrimOp):
    ins = ', '.join(op.vars_in)
    text = op.text or getattr(op.function, '__name__', 'prim')
    sync = ' sync' if op.sync else ''
    casts = ''.join(f' cast({op.vars_in[i]}:{np.dtype(d).name})'
                    for i, d in op.casts) + ''.join(
                        f' number({op.vars_in[i]})' for i in op.numbers)
    kind = 'member' if op.per_member else 'prim'
    shared = ' broadcast' if op.broadcast else ''
    return (f'{pattern_str(op.vars_out)} = {kind}[{text}]({ins}){sync}{casts}'
            f'{shared}')
  if isinstance(op, FunctionCallOp):
    together = ' parallel' if op.parallel else ''
    return (f'{pattern_str(op.vars_out)} = call {op.function}'
            f'({", ".join(op.vars_in)}){together}')
  if isinstance(op, PushOp):
    return f'push {", ".join(op.vars)}'
  if isinstance(op, PopOp):
    return f'pop {", ".join(op.vars)}'
  if isinstance(op, RestoreOp):
    return f'restore {", ".join(op.vars)}'
  if isinstance(op, ExitOp):
    return f'exit_{"if" if op.when else "unless"} {op.cond}, {op.block}'
  if isinstance(op, GotoOp):
    return f'goto {op.block}'
  if isinstance(op, BranchOp):
    return f'branch {op.cond} ? {op.true_block} : {op.false_block}'
  if isinstance(op, ReturnOp):
    return 'return'
  if isinstance(op, PushGotoOp):
    return f'push_goto {op.push_block}, {op.goto_block}'
  if isinstance(op, PushBranchOp):
    return (f'push_branch {op.push_block}, {op.cond} ? {op.true_block} : '
            f'{op.false_block}')
  if isinstance(op, CallBranchOp):
    sides = [op.true_block, op.false_block]
    sides[0 if op.call_side else 1] = 'call ' + op.call_block
    return (f'call_branch {op.push_block}, {op.cond} ? {sides[0]} : '
            f'{sides[1]}')
  if isinstance(op, IndirectGotoOp):
    return 'indirect_goto'
  raise errors.InternalError(f'Unknown instruction {op!r}')


def _blocks_str(blocks, indent='  '):
  lines = []
  for b in blocks:
    lines.append(f'{indent}{b.label}:')
    for op in b.instructions:
      lines.append(f'{indent}  {op_str(op)}')
    lines.append(f'{indent}  {op_str(b.terminator)}')
  return lines


def _vars_str(var_defs, var_alloc, indent='  '):
  lines = []
  for name in sorted(set(var_defs) | set(var_alloc)):
    parts = []
    if name in var_defs:
      parts.append(str(var_defs[name]))
    if name in var_alloc:
      parts.append(var_alloc[name].name)
    lines.append(f'{indent}{name}: {" ".join(parts)}')
  return lines


def print_program(program):
  """Prints a program as a stable, readable listing.

  Args:
    program: A `Program`, `LoweredProgram` or `Function`.

  Returns:
    The listing, a string (the same for equal programs).

  Raises:
    InternalError: If `program` is none of these.
  """
  lines = []
  if isinstance(program, Function):
    fns = [program]
  elif isinstance(program, Program):
    fns = list(program.functions)
  elif isinstance(program, LoweredProgram):
    lines.append(f'lowered program ({", ".join(program.vars_in)}) -> '
                 f'{pattern_str(program.vars_out)}')
    if program.var_defs or program.var_alloc:
      lines.append(' vars:')
      lines.extend(_vars_str(program.var_defs, program.var_alloc))
    lines.append(' blocks:')
    lines.extend(_blocks_str(program.blocks))
    return '\n'.join(lines)
  else:
    raise errors.InternalError(f'Cannot print {type(program).__name__}')
  for fn in fns:
    lines.append(f'def {fn.name}({", ".join(fn.vars_in)}) -> '
                 f'{pattern_str(fn.vars_out)}:')
    if fn.var_defs or fn.var_alloc:
      lines.append(' vars:')
      lines.extend(_vars_str(fn.var_defs, fn.var_alloc))
    lines.append(' blocks:')
    lines.extend(_blocks_str(fn.blocks))
  return '\n'.join(lines)
