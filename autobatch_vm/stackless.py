"""Stackless executor: Python's own call stack handles batched calls.

Runs a typed `Program` (before lowering).  Each batched call is a Python
call of `_Frame.run` with the mask of the members making it; inside, the
function's blocks run like the VM's (pick the lowest block that has
members, run it masked, move the PCs) until every member of the mask has
returned.  Variables live in the frame's dict, so no explicit stacks are
needed; depth is bounded by Python's recursion limit instead.  Results must
equal the stack VM's: the tests run every program both ways.

Cannot be staged (Python drives the calls), so with TensorFlow it runs
eagerly only.
"""

import sys
import time

import numpy as np

from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import virtual_machine

__all__ = ['execute']


class _Executor:

  def __init__(self, program, backend, batch, schedule, stats,
               max_steps=None):
    self.program = program
    self.max_steps = max_steps
    self.be = backend
    self.sanitize = getattr(backend, 'sanitize', None)
    self.batch = batch
    self.schedule = schedule
    self.stats = stats
    self.timed = 0.0   # profile=True: blocks' own seconds so far
    self.coerce = {}
    self.index = {}
    for fn in program.functions:
      self.index[fn.name] = {b.label: i for i, b in enumerate(fn.blocks)}
      for v, t in fn.var_defs.items():
        leaves = inst.pattern_flatten(t.tensors, inst.TensorType)
        self.coerce[(fn.name, v)] = [backend.coerce_fn(x, batch)
                                     for x in leaves]

  def write(self, fn, env, names, value, m):
    if not isinstance(names, str):
      for n, v in zip(names, tuple(value)):
        self.write(fn, env, n, v, m)
      return
    template = fn.var_defs[names].tensors
    leaves = virtual_machine._flatten_like(template, value)  # pylint: disable=protected-access
    coerced = [c(v) for c, v in zip(self.coerce[(fn.name, names)], leaves)]
    old = env.get(names)
    if old is None:
      old_leaves = [self.be.zeros(t, self.batch) for t in
                    inst.pattern_flatten(template, inst.TensorType)]
    else:
      old_leaves = inst.pattern_flatten(old, inst.TensorType)
    new = [self.be.write(o, n, m) for o, n in zip(old_leaves, coerced)]
    env[names] = inst.pattern_unflatten(template, new, inst.TensorType)

  def call(self, fn, args, active):
    env = {}
    full = self.be.mask_of(active, self.batch)
    for p, a in zip(fn.vars_in, args):
      self.write(fn, env, p, a, full)
    num_blocks = len(fn.blocks)
    pc = self.be.start_pc(active, num_blocks)
    index = self.index[fn.name]
    while True:
      b = self.be.next_block(pc, num_blocks, self.schedule)
      if b >= num_blocks:
        break
      block = fn.blocks[b]
      m = self.be.make_mask(pc, b, self.batch)
      if self.stats.steps == self.max_steps:
        raise virtual_machine.step_limit_error(
            self.max_steps, self.be.members(m), block.loc,
            '; they are at this line')
      self.stats.block_executions[block.label] = \
          self.stats.block_executions.get(block.label, 0) + 1
      self.stats.block_active[block.label] = \
          self.stats.block_active.get(block.label, 0) + m.count
      self.stats.block_loc.setdefault(block.label, block.loc)
      self.stats.steps += 1
      if self.stats.profile:
        self.stats.member_blocks += np.asarray(m.mask, bool)
        start, timed_before = time.perf_counter(), self.timed
      for op in block.instructions:
        self.op(fn, env, op, m)
      if self.stats.profile:
        # A block's own time: without the blocks of the calls it made,
        # which were timed (and added to self.timed) on their own.
        seconds = (time.perf_counter() - start) - (self.timed - timed_before)
        self.timed += seconds
        self.stats.block_time[block.label] = (
            self.stats.block_time.get(block.label, 0.0) + seconds)
      t = block.terminator
      if isinstance(t, inst.GotoOp):
        pc = self.be.goto(pc, m, index[t.block])
      elif isinstance(t, inst.BranchOp):
        pc = self.be.branch(pc, m, self.be.to_bool(env[t.cond]),
                            index[t.true_block], index[t.false_block])
      elif isinstance(t, inst.ReturnOp):
        pc = self.be.goto(pc, m, num_blocks)
      else:
        raise errors.InternalError(f'{inst.op_str(t)} in stackless mode')
    return env.get(fn.vars_out) if isinstance(fn.vars_out, str) else \
        inst.pattern_map(env.get, fn.vars_out)

  def op(self, fn, env, op, m):
    if isinstance(op, inst.PrimOp):
      args = virtual_machine.cast_args(op, [env[v] for v in op.vars_in],
                                       self.be)
      if self.sanitize is not None:   # see TensorFlowBackend.sanitize
        args = [inst.pattern_map(lambda x: self.sanitize(x, m), a)
                for a in args]
      try:
        result = op.function(*args)
      except errors.AutoBatchError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        result = virtual_machine.retry_on_live_data(e, op, args, self.be, m)
      self.write(fn, env, op.vars_out, result, m)
    elif isinstance(op, inst.FunctionCallOp):
      callee = self.program.function(op.function)
      try:
        result = self.call(callee, [env[v] for v in op.vars_in], m.mask)
      except RecursionError:
        raise errors.StackOverflowError(
            f'Recursion too deep for stackless mode (Python recursion limit '
            f'{sys.getrecursionlimit()}) calling {callee.name!r}',
            loc=op.loc, hint='Use the stack VM (stackless=False) with a '
            'suitable max_stack_depth, or check that the recursion '
            'terminates.') from None
      self.write(fn, env, op.vars_out, result, m)
    else:
      raise errors.InternalError(f'{inst.op_str(op)} in stackless mode')


def execute(program, args, backend, batch_size,
            schedule=virtual_machine.DEFAULT_SCHEDULE, max_steps=None,
            profile=False):
  """Runs typed `program` on batched `args`; returns (outputs, RunStats).

  `max_steps` bounds the blocks run, counted over all calls.  `profile`:
  also time each block and count the blocks each member runs.
  """
  if getattr(backend, 'staged', False) and backend.in_graph():
    raise errors.BackendError(
        'stackless=True cannot run inside tf.function: Python drives its '
        'calls, so it cannot be staged into a graph.',
        hint='Call it eagerly, or use the stack VM (stackless=False) inside '
        'tf.function.')
  stats = virtual_machine.RunStats(batch_size=batch_size, profile=profile)
  if profile:
    stats.member_blocks = np.zeros(batch_size, np.int64)
  ex = _Executor(program, backend, batch_size, schedule, stats, max_steps)
  if batch_size == 0:
    main = program.main_function
    t = main.var_defs[main.vars_out].tensors
    return inst.pattern_map(lambda x: backend.zeros(x, 0), t,
                            inst.TensorType), stats
  active = backend.to_bool(backend.asarray([True] * batch_size))
  with backend.error_context():
    out = ex.call(program.main_function, list(args), active)
  return out, stats
