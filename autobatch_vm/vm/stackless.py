"""Stackless executor: Python's own call stack handles batched calls.

Runs a typed `Program` (before lowering).  Each batched call is a Python
call of `_Executor.call` on the rows of the members making it (a frame's
batch is its callers' members, not the whole batch); inside, the
function's blocks run like the VM's (pick a block that has members, run it
masked, move the PCs) until every member of the frame has returned.
Variables live in the frame's dict, so no explicit stacks are needed;
depth is bounded by Python's recursion limit instead.  Results must equal
the stack VM's: the tests run every program both ways.

Calls that `parallel_calls` marked (independent calls of one function in a
block, e.g. a tree recursion's two children) run as one call whose frame
holds the first call's rows followed by the second's: a recursion over
trees then takes one frame per level, every tree's nodes of that level
batched together, where the stack VM steps along each path.  A frame
knows which member of the run each of its rows belongs to (`owners`), for
errors and `profile=True`.

Cannot be staged (Python drives the calls), so with TensorFlow it runs
eagerly only.
"""

import sys
import threading
import time

import numpy as np

from autobatch_vm import caches
from autobatch_vm import errors
from autobatch_vm.backends import scheduler
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness
from autobatch_vm.vm import dispatch
from autobatch_vm.vm import errors as run_errors
from autobatch_vm.vm import machine
from autobatch_vm.vm import stats as stats_lib

__all__ = ['execute', 'execute_batched', 'is_running', 'branching_recursion',
           'Fallback', 'MAX_GROUP_FRAME_BYTES']

# A group of calls runs as one frame only while that frame's variables take
# at most this many bytes (estimated from their types); wider groups run
# their calls one after the other.  Grouping makes a recursion's memory
# grow with the width of the members' trees (fibonacci(30) has levels of
# hundreds of thousands of calls per member); the cap keeps it at most
# this much per frame, times the depth.  Fibonacci at B=1024 and the
# tree-RNN at B=1024 stay well below it.
MAX_GROUP_FRAME_BYTES = 64 << 20


class Fallback(Exception):
  """Raised by a run with `fallback=True` that should go to the stack VM.

  Its recursion went deeper than `max_depth`, it reached `max_steps`, or
  Python's recursion limit.  The VM then runs the call
  from its start and decides (it may succeed: tail calls and leaf calls
  take no stack there), so under the automatic choice (`stackless=None`)
  a call the VM completes completes, with the VM's errors otherwise."""


class _Executor:

  def __init__(self, program, backend, schedule, stats, max_steps=None,
               max_depth=None, fallback=False):
    self.program = program
    self.max_steps = max_steps
    self.max_depth = max_depth
    self.fallback = fallback
    self.depth = 0   # nested calls now running (main is 1)
    self.be = backend
    self.sanitize = backend.sanitize if backend.sanitizes else None
    self.schedule = schedule
    self.stats = stats
    self.timed = 0.0   # profile=True: blocks' own seconds so far
    self._coerce = {}
    self._row_bytes = {}
    self.tally = {}   # block label -> [runs, active rows, rows]
    self.compacts = backend.compacts
    self.index, self.local = _program_info(program)

  def row_bytes(self, fn):
    """Bytes a row of a frame of `fn` takes, over all its variables."""
    out = self._row_bytes.get(fn.name)
    if out is None:
      out = self._row_bytes[fn.name] = sum(
          t.nbytes for d in fn.var_defs.values()
          for t in inst.pattern_flatten(d.tensors, inst.TensorType))
    return out

  def coerce(self, fn, var, strict=False):
    """`var`'s type, its leaves' types, per leaf `coerce(x, rows)`, and
    whether it is a single tensor (no pattern); `strict`: see
    `numpy_backend.coercer`."""
    key = (fn.name, var, strict)
    out = self._coerce.get(key)
    if out is None:
      template = fn.var_defs[var].tensors
      types = inst.pattern_flatten(template, inst.TensorType)
      out = self._coerce[key] = (
          template, types, [self.be.coercer(t, strict) for t in types],
          isinstance(template, inst.TensorType))
    return out

  def coerced(self, fn, var, value, rows, strict=False):
    """`value` as variable `var` of `fn` holds it, on `rows` rows."""
    template, _, coercers, single = self.coerce(fn, var, strict)
    if single:
      return coercers[0](value, rows)
    leaves = dispatch.flatten_like(template, value)
    return inst.pattern_unflatten(
        template, [c(v, rows) for c, v in zip(coercers, leaves)],
        inst.TensorType)

  def write(self, fn, frame, names, value, m, rows=False, strict=False):
    """Stores `value` into variable `names` for the members of `m`: a
    whole-frame value, or (`rows`) one row per member of `m`.  Returns the
    value as given, coerced to the variable's type (`strict`: see
    `numpy_backend.coercer`)."""
    template, types, _, single = self.coerce(fn, names)
    value = self.coerced(fn, names, value, m.count if rows else frame.batch,
                         strict)
    owned = frame.owned.pop(names, ())
    if m.full:   # every row: the value itself
      frame.env[names] = value
      return value
    coerced = [value] if single else inst.pattern_flatten(value,
                                                          inst.TensorType)
    old = frame.env.get(names)
    if old is None:
      old_leaves = owned = [self.be.zeros(t, frame.batch) for t in types]
    else:
      old_leaves = [old] if single else inst.pattern_flatten(
          old, inst.TensorType)
    if rows and self.compacts:
      # Into the frame's own arrays in place; others are copied first
      # (a primitive may have returned an array that another variable,
      # or its caller, holds).
      idx = m.idx
      new = []
      for o, v, mine in zip(old_leaves, coerced, owned or [None] * len(
          old_leaves)):
        if o is not mine:
          o = o.copy()
        o[idx] = v
        new.append(o)
      frame.owned[names] = new
    else:
      put = self.be.scatter if rows else self.be.write
      new = [put(o, v, m) for o, v in zip(old_leaves, coerced)]
    frame.env[names] = new[0] if single else inst.pattern_unflatten(
        template, new, inst.TensorType)
    return value

  def call(self, fn, args, batch, owners):
    """Runs `fn` on a frame of `batch` rows, all active: row `i` belongs
    to member `owners()[i]` of the run."""
    if self.max_depth is not None and self.depth >= self.max_depth:
      raise Fallback()
    self.depth += 1
    try:
      return self._call(fn, args, batch, owners)
    finally:
      self.depth -= 1

  def _call(self, fn, args, batch, owners):
    frame = _Frame(batch, owners, self.be)
    sched = (scheduler.RowQueue if self.compacts else
             scheduler.ProgramCounter)(
        self.be, batch, len(fn.blocks), self.schedule)
    for p, a in zip(fn.vars_in, args):
      self.write(fn, frame, p, a, sched.full)
    index = self.index[fn.name]
    stats = self.stats
    while True:
      b, m = sched.next()
      if m is None:
        break
      block = fn.blocks[b]
      if stats.steps == self.max_steps:
        if self.fallback:
          raise Fallback()
        raise run_errors.step_limit_error(
            self.max_steps, frame.members(m), block.loc,
            '; they are at this line')
      counts = self.tally.get(block.label)
      if counts is None:
        counts = self.tally[block.label] = [0, 0, 0]
        stats.block_loc.setdefault(block.label, block.loc)
      counts[0] += 1             # runs,
      counts[1] += m.count       # active rows,
      counts[2] += batch         # rows (see RunStats.block_rows)
      stats.steps += 1
      if stats.profile:
        np.add.at(stats.member_blocks, frame.owners[frame.indices(m)], 1)
        start, timed_before = time.perf_counter(), self.timed
      rows = self.run_block(fn, frame, block, m)
      if stats.profile:
        # A block's own time: without the blocks of the calls it made,
        # which were timed (and added to self.timed) on their own.
        seconds = (time.perf_counter() - start) - (self.timed - timed_before)
        self.timed += seconds
        stats.block_time[block.label] = (
            stats.block_time.get(block.label, 0.0) + seconds)
      t = block.terminator
      if isinstance(t, inst.GotoOp):
        sched.goto(m, index[t.block])
      elif isinstance(t, inst.BranchOp):
        # A bool per member of m on a compacting backend (where a full
        # frame's rows are its members, in order), else per frame row.
        cond = self.be.to_bool(rows.read(t.cond))
        sched.branch(m, cond, index[t.true_block], index[t.false_block])
      elif isinstance(t, inst.ReturnOp):
        sched.finish(m)
      else:
        raise errors.InternalError(f'{inst.op_str(t)} in stackless mode')
    env = frame.env
    return env.get(fn.vars_out) if isinstance(fn.vars_out, str) else \
        inst.pattern_map(env.get, fn.vars_out)

  def run_block(self, fn, frame, block, m):
    """The block's instructions for the members of `m`.  On a compacting
    backend (NumPy) they see the rows of those members only (`_Rows`)."""
    rows = _Rows(self, fn, frame, m)
    ops = block.instructions
    i = 0
    while i < len(ops):
      op = ops[i]
      if isinstance(op, inst.FunctionCallOp):
        j = i + 1
        while ops[j - 1].parallel:
          j += 1
        self.calls(frame, ops[i:j], m, rows)
        i = j
      elif isinstance(op, inst.PrimOp):
        self.prim(frame, op, m, rows)
        i += 1
      else:
        raise errors.InternalError(f'{inst.op_str(op)} in stackless mode')
    return rows

  def calls(self, frame, calls, m, rows):
    """Calls `calls` (one, or a group marked parallel) for the members of
    `m`: one frame of the callee holding each call's rows in turn."""
    callee = self.program.function(calls[0].function)
    idx = frame.indices(m)
    if len(calls) > 1 and (len(idx) * len(calls) * self.row_bytes(callee)
                           > MAX_GROUP_FRAME_BYTES):
      # One frame for the group would be too large (a wide recursion's
      # level grows with its width): the calls run one after the other,
      # as written, each on a frame of these members' rows only.
      for c in calls:
        self.calls(frame, [c], m, rows)
      return
    if len(calls) == 1:
      args = [rows.read(v, compact=True) for v in calls[0].vars_in]
    else:
      # Each call's arguments as the callee's parameters hold them (one
      # call may pass an int64 constant where the other passes an int32
      # variable), then one row block per call.
      arg_sets = [[self.coerced(callee, p, rows.read(v, compact=True),
                                m.count)
                   for p, v in zip(callee.vars_in, c.vars_in)]
                  for c in calls]
      args = [_concat_patterns(self.be, same) for same in zip(*arg_sets)]
    # Which member each row of the callee's frame is (made when needed:
    # for errors and profile=True only).
    owners = lambda: np.tile(frame.owners[idx], len(calls))
    try:
      result = self.call(callee, args, len(idx) * len(calls), owners)
    except RecursionError:
      if self.fallback:
        raise Fallback() from None
      raise errors.StackOverflowError(
          f'Recursion too deep for stackless mode (Python recursion limit '
          f'{sys.getrecursionlimit()}) calling {callee.name!r}',
          loc=calls[0].loc, hint='Use the stack VM (stackless=False) with a '
          'suitable max_stack_depth, or check that the recursion '
          'terminates.') from None
    k = len(idx)
    for i, c in enumerate(calls):
      part = result if len(calls) == 1 else inst.pattern_map(
          lambda x, i=i: x[i * k:(i + 1) * k], result)
      rows.write(c.vars_out, part, compact=True)

  def prim(self, frame, op, m, rows):
    args = [rows.read(v) for v in op.vars_in]
    if self.sanitize is not None:   # see TensorFlowBackend.sanitize
      args = [inst.pattern_map(lambda x: self.sanitize(x, m), a)
              for a in args]
    try:
      # (In the `try`: a weak number's cast raises as NumPy's operator
      # does, `Backend.cast_weak`.)
      args = dispatch.cast_args(op, args, self.be)
      fn = dispatch.primitive(op, self.be)
      if op.per_member and self.be.reports_out_of_range:
        result = run_errors.reporting_member_errors(
            op, self.be, m, lambda: fn(*args))
      else:
        result = fn(*args)
    except errors.AutoBatchError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise run_errors.primitive_failure(
          e, op, frame.backend, m,
          compacted=rows.local and rows.idx is not None) from e
    try:
      rows.write(op.vars_out, result, strict=op.strict)
    except ValueError as e:
      raise run_errors.result_shape_error(e, op, frame.backend, m) from e


class _Rows:
  """A block's view of its frame's variables, for the members of `m`.

  On a compacting backend (NumPy) primitives get the rows of those members
  only: each variable read is gathered once, results stay in the block as
  rows, and only variables that outlive the block (not `_block_local`)
  are scattered into the frame.  Elsewhere (TensorFlow, eagerly) reads are
  whole-frame values and writes are masked.  Calls always get rows
  (`compact=True`): a callee's frame holds its callers' rows only.
  """

  def __init__(self, executor, fn, frame, m):
    self.ex = executor
    self.fn = fn
    self.frame = frame
    self.m = m
    self.local = executor.compacts
    self.idx = None if m.full else frame.indices(m)
    self._values = {}   # compacting: variable -> its rows in this block

  def _env(self, var):
    """The frame's array of `var`; zeros where no member has written it
    (a local that holds None for every member there, `python.optional`,
    whose reads those members do not use)."""
    value = self.frame.env.get(var)
    if value is None:
      template, types, _, single = self.ex.coerce(self.fn, var)
      zeros = [self.ex.be.zeros(t, self.frame.batch) for t in types]
      value = self.frame.env[var] = zeros[0] if single else (
          inst.pattern_unflatten(template, zeros, inst.TensorType))
    return value

  def read(self, var, compact=False):
    if self.local:
      value = self._values.get(var)
      if value is None:
        value = self._env(var)
        if self.idx is None:
          # Handed out whole: no longer written in place (see `write`).
          self.frame.owned.pop(var, None)
        else:
          value = self._values[var] = self._take(value)
      return value
    value = self._env(var)
    return self._take(value) if compact and self.idx is not None else value

  def _take(self, value):
    be, idx = self.ex.be, self.idx
    if not isinstance(value, (tuple, list)):   # one array: no pattern
      return be.take_rows(value, idx)
    return inst.pattern_map(lambda x: be.take_rows(x, idx), value)

  def write(self, names, value, compact=False, strict=False):
    if not isinstance(names, str):
      for n, v in zip(names, tuple(value)):
        self.write(n, v, compact, strict)
      return
    if not self.local:
      self.ex.write(self.fn, self.frame, names, value, self.m,
                    rows=compact and self.idx is not None, strict=strict)
      return
    if names in self.ex.local[self.fn.name]:
      self._values[names] = self.ex.coerced(self.fn, names, value,
                                            self.m.count, strict)
      return
    self._values[names] = self.ex.write(self.fn, self.frame, names, value,
                                        self.m, rows=self.idx is not None,
                                        strict=strict)


# id(program) -> (program, info)
_info_cache = caches.register('stackless program tables',
                              caches.LRUCache(64))


def _program_info(program):
  """Per function: block label -> index, and its block-local variables
  (computed once per program)."""
  hit = _info_cache.get(id(program))
  if hit is not None and hit[0] is program:
    return hit[1]
  index = {fn.name: {b.label: i for i, b in enumerate(fn.blocks)}
           for fn in program.functions}
  local = {fn.name: _block_local(fn) for fn in program.functions}
  _info_cache[id(program)] = (program, (index, local))
  return index, local


def _block_local(fn):
  """The variables of `fn` that never leave the block writing them (not
  live into or out of any block, not a parameter or the result): in a
  block they are read as computed, without entering the frame."""
  return frozenset(set(fn.var_defs)
                   - liveness.crossing(fn, liveness.analyze(fn)))


def _concat_patterns(be, values):
  """Same-structured patterns of arrays, concatenated leaf by leaf."""
  flat = [inst.pattern_flatten(v) for v in values]
  return inst.pattern_unflatten(
      values[0], [be.concat(list(xs)) for xs in zip(*flat)])


class _Frame:
  """One call's variables, on `batch` rows; row `i` is member `owners[i]`
  (`owners`: a function making that array, called when first needed)."""

  def __init__(self, batch, owners, backend):
    self.batch = batch
    self._owners = owners
    self.env = {}
    # Variable -> its leaves, where they are arrays this frame made and
    # handed to no primitive: those can be written in place.
    self.owned = {}
    self._be = backend

  @property
  def backend(self):
    """The backend naming this frame's members in errors (made on demand:
    a proxy kept on the frame would make a reference cycle, leaving every
    frame's arrays to the garbage collector instead of freeing them when
    the call returns)."""
    return _OwnedRows(self._be, self)

  @property
  def owners(self):
    if callable(self._owners):
      self._owners = self._owners()
    return self._owners

  def indices(self, m):
    """The rows of the members of `m`, as a NumPy array."""
    return np.asarray(m.idx, np.int64)

  def members(self, m):
    """The run's members (not the frame's rows) of mask `m`, sorted."""
    return np.unique(self.owners[self.indices(m)])

  def row_members(self, m):
    """The run's member of each row of mask `m`, in the rows' order."""
    return self.owners[self.indices(m)]


class _OwnedRows:
  """The backend, but naming the run's members rather than a frame's rows
  in errors (`members`, the frame's)."""

  def __init__(self, backend, frame):
    self._be = backend
    self.members = frame.members
    self.row_members = frame.row_members

  def __getattr__(self, name):
    return getattr(self._be, name)


def execute(program, args, backend, batch_size,
            schedule=scheduler.DEFAULT_SCHEDULE, max_steps=None,
            profile=False, max_depth=None, fallback=False):
  """Runs typed `program` on batched `args`; returns (outputs, RunStats).

  Args:
    program: The typed, allocated `Program` (`pipeline.stackless`).
    args: The batched inputs of its main function.
    backend: The backend (eager only).
    batch_size: The batch size.
    schedule: `'most'` or `'lowest'` (`backends.scheduler`), within a frame.
    max_steps: Bounds the blocks run, counted over all calls.
    profile: Also time each block and count the blocks each member runs.
    max_depth: Raise `Fallback` when calls nest deeper than this (main is
      depth 1).
    fallback: Raise `Fallback` instead of the step-limit and recursion
      errors (the caller then runs the stack VM).

  Returns:
    `(outputs, RunStats)`.

  Raises:
    BackendError: Called inside a graph (`tf.function`).
  """
  if backend.in_graph():
    raise errors.BackendError(
        'stackless=True cannot run inside tf.function: Python drives its '
        'calls, so it cannot be staged into a graph.',
        hint='Call it eagerly, or use the stack VM (stackless=False) inside '
        'tf.function.')
  backend.prepare_run()
  stats = stats_lib.RunStats(batch_size=batch_size, profile=profile,
                                   stackless=True)
  if profile:
    stats.member_blocks = np.zeros(batch_size, np.int64)
  ex = _Executor(program, backend, schedule, stats, max_steps, max_depth,
                 fallback)
  if batch_size == 0:
    main = program.main_function
    t = main.var_defs[main.vars_out].tensors
    return inst.pattern_map(lambda x: backend.zeros(x, 0), t,
                            inst.TensorType), stats
  try:
    with backend.error_context():
      out = ex.call(program.main_function, list(args), batch_size,
                    lambda: np.arange(batch_size))
  finally:
    for label, (runs, active, rows) in ex.tally.items():
      stats.block_executions[label] = runs
      stats.block_active[label] = active
      stats.block_rows[label] = rows
  return out, stats


def branching_recursion(program):
  """Whether some function of `program` calls its own recursion in groups.

  A group of parallel calls into the function's own recursion is a tree
  recursion (fibonacci, a tree encoder), whose calls multiply with depth.
  The stack VM walks such a recursion one root-to-leaf path per member at a
  time; here each level of every member's tree is one batched call.  A
  linear recursion (one call per level) gains nothing from that and pays
  Python's recursion per call, so it is not counted.

  Args:
    program: A typed `Program` as `pipeline.stackless` returns it.

  Returns:
    Whether stackless mode batches a branching recursion in it.
  """
  calls = {fn.name: {op.function for b in fn.blocks for op in b.instructions
                     if isinstance(op, inst.FunctionCallOp)}
           for fn in program.functions}

  def reaches(src, dst):
    seen, todo = set(), [src]
    while todo:
      f = todo.pop()
      for g in calls.get(f, ()):
        if g == dst:
          return True
        if g not in seen:
          seen.add(g)
          todo.append(g)
    return False

  for fn in program.functions:
    for b in fn.blocks:
      for op in b.instructions:
        if (isinstance(op, inst.FunctionCallOp) and op.parallel
            and (op.function == fn.name or reaches(op.function, fn.name))):
          return True
  return False


# ---------------------------------------------------------------------------
# TFP's module-level API: `execute(program, backend, block_code_cache,
# *inputs)`, returning the outputs alone, and `is_running`.  `execute`
# below takes both that form and the one above (renamed
# `execute_batched`): TFP's second argument is the backend, ours the list
# of inputs.
# ---------------------------------------------------------------------------

execute_batched = execute
_running = threading.local()


def is_running():
  """Whether the stackless executor is running a program.

  A primitive can tell its calls from the stack VM's
  (`virtual_machine.is_staging`).
  """
  return getattr(_running, 'depth', 0) > 0


def execute(program, *rest, **kwargs):  # pylint: disable=function-redefined
  """Runs a typed, allocated `Program` stackless, in either of two forms.

  - `execute(program, args, backend, batch_size, schedule=..., ...)`
    returns `(outputs, RunStats)` (`execute_batched`).
  - TFP's `execute(program, backend, block_code_cache, *inputs)` returns
    the outputs alone; the batch size comes from the inputs (TFP's
    calling convention, as `virtual_machine.execute`).
    `block_code_cache` is accepted for TFP's signature: this executor
    runs blocks eagerly and keeps no compiled code.

  Args:
    program: The typed, allocated `Program`.
    *rest, **kwargs: The other arguments of either form.

  Returns:
    `(outputs, RunStats)`, or the outputs alone in TFP's form.
  """
  tfp_form = not (rest and isinstance(rest[0], (list, tuple))
                  or 'args' in kwargs)
  _running.depth = getattr(_running, 'depth', 0) + 1
  try:
    if tfp_form:
      return _execute_tfp(program, *rest, **kwargs)
    return execute_batched(program, *rest, **kwargs)
  finally:
    _running.depth -= 1


# TensorFlow's AutoGraph calls an artifact of its own as it is: a user's
# `tf.function` (AutoGraph on, TFP's `tf.function(lambda: execute(...))`)
# then runs this code, not a conversion of the whole library.
execute.autograph_info__ = frozenset()


def _execute_tfp(program, backend, block_code_cache=None, *inputs):  # pylint: disable=keyword-arg-before-vararg
  del block_code_cache
  if not isinstance(program, inst.Program) or not all(
      f.var_defs and f.var_alloc for f in program.functions):
    raise errors.ArgumentError(
        'stackless.execute runs a typed, allocated Program',
        hint='Compile it first: allocation_strategy.optimize('
        'type_inference.infer_types(program, inputs, backend)).')
  main = program.main_function
  args, batch = machine.batched_inputs(
      main.vars_in, [main.var_defs[v] for v in main.vars_in], inputs,
      backend, main.name)
  out, _ = execute_batched(program, args, backend, batch)
  return out
