"""The batched virtual machine: runs a `LoweredProgram` across a batch.

Every member has its own program counter (PC).  One step picks a block
(`backends.scheduler`) and runs its instructions for the members whose PC
is at that block: on NumPy on their rows only, on TensorFlow on the whole
batch with masked updates.  Then the terminator moves those members' PCs.  A
member whose PC reaches `len(program.blocks)` has finished; the run ends
when all have.  The state's layout is `vm.layout`'s; blocks are compiled
by `vm.closures` (and `vm.codegen` on NumPy); the step loop is the
backend's `run`.
"""

import functools
import numbers
import threading

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends.scheduler import check_schedule
from autobatch_vm.backends.scheduler import DEFAULT_SCHEDULE
from autobatch_vm.ir import instructions as inst
from autobatch_vm.vm import closures
from autobatch_vm.vm import errors as run_errors
from autobatch_vm.vm import failures
from autobatch_vm.vm import stats as stats_lib
from autobatch_vm.vm.layout import PC

__all__ = ['execute', 'execute_batched', 'is_staging', 'batched_inputs',
           'active_members']


def execute(program, args, backend, batch_size, max_stack_depth=15,
            schedule=DEFAULT_SCHEDULE, block_code_cache=None, profile=False,
            max_steps=None, on_error='raise'):
  """Runs `program` on batched `args`; returns (outputs, RunStats).

  Args:
    program: The `LoweredProgram`.
    args: The batched inputs, one per input variable.
    backend: The backend.
    batch_size: The batch size.
    max_stack_depth: The frames of each stack.
    schedule: `'most'` or `'lowest'` (`backends.scheduler`).
    block_code_cache: A dict keeping compiled blocks across calls, or
      None.
    profile: Also time each block and count the blocks each member runs.
    max_steps: Fail with `StepLimitError` if members have not finished
      after that many VM steps (None: no limit).  On TensorFlow it also
      gives the loop a static trip count, which XLA needs to
      differentiate it.
    on_error: `'raise'`, or `'status'`: the outputs are then `(outputs,
      ok)` (`vm.failures`).

  Returns:
    `(outputs, RunStats)`.
  """
  check_schedule(schedule)
  loc = program.blocks[0].loc if program.blocks else None
  failures.check_on_error(on_error, loc)
  active = getattr(_running, 'active', None)
  if active is not None:   # for this run only (`active_members`)
    _running.active = None
  run = functools.partial(_execute, program, args, backend, batch_size,
                          max_stack_depth, schedule, block_code_cache,
                          profile, max_steps, loc)
  if on_error != 'status' or backend.staged:
    return run(on_error, active)
  # A backend that raises an error at once (NumPy): the call runs again
  # without the members each error stops, until one run finishes.  Each
  # member runs alone in effect, so the others' results are those of one
  # run; only an error at a later step costs another run.
  failed = np.zeros((batch_size,), np.bool_)
  while True:
    members = None if active is None else np.asarray(active, np.bool_)
    if failed.any():
      members = ~failed if members is None else members & ~failed
    try:
      out, stats = run('raise', members)
      break
    except _STOPPING as e:
      if (e.members is None or not e.members.size or
          failed[e.members].all()):
        raise
      failed[e.members] = True
  stats.failed = failed if failed.any() else None
  return failures.settle(out, stats, on_error, backend, loc), stats


# The errors that stop members (`on_error`), naming them: also a
# primitive's failure for some members (`vm.errors.member_error`: Python
# raises there, as for a failed `assert`).
_STOPPING = (errors.AssertionFailedError, errors.StackOverflowError,
             errors.StepLimitError, errors.PrimitiveError,
             errors.PerMemberError)


def _execute(program, args, backend, batch_size, max_stack_depth, schedule,
             block_code_cache, profile, max_steps, loc, on_error, active):
  """`execute`'s one run, of the members in `active` (None: all)."""
  c = closures.compile_blocks(program, backend, batch_size, max_stack_depth,
                     block_code_cache)
  state = c.layout.initial_state(batch_size)
  full = backend.make_mask(state[PC], 0, batch_size)
  for write, arg in zip(c.inputs, args):
    write(state, {}, arg, full)
  if active is not None:
    state[PC] = backend.start_pc(active, len(program.blocks))
  stats = stats_lib.RunStats(batch_size=batch_size, profile=profile)
  for b in program.blocks:
    stats.block_executions[b.label] = 0
    stats.block_active[b.label] = 0
    stats.block_loc[b.label] = b.loc
  schedule = c.schedule(schedule)
  with backend.error_context():
    state = backend.run(c.blocks, state, len(program.blocks), schedule,
                        stats, [b.label for b in program.blocks],
                        max_steps=max_steps,
                        step_limit_error=run_errors.step_limit(program,
                                                                max_steps),
                        on_error=on_error)
  out = inst.pattern_map(lambda read: read(state, {}, None), c.outputs)
  if stats.failed is not None or on_error == 'status':
    out = failures.settle(out, stats, on_error, backend, loc)
  return out, stats


# ---------------------------------------------------------------------------
# TFP's module-level API: `execute(program, args, max_stack_depth, backend,
# block_code_cache=None)`, returning the outputs alone, and `is_staging`.
# `execute` below takes both that form and the one above (renamed
# `execute_batched`): TFP's third argument is an int, ours a backend.
# ---------------------------------------------------------------------------

execute_batched = execute
_running = threading.local()


class active_members:  # pylint: disable=invalid-name
  """Context manager: the next run in this thread runs only some members.

  The next run started inside, in this thread, runs only the members
  where `active` holds.  The others start at the program's exit: they take no step, count in
  no statistic but the batch size, and cannot fail; their outputs are
  the registers' zeros.  For padding a batch to a size compiled before
  (`staging.stage`'s `batch_buckets` under XLA).

  Args:
    active: A boolean array `[batch]` of the run's backend.
  """

  def __init__(self, active):
    self.active = active

  def __enter__(self):
    _running.active = self.active

  def __exit__(self, *exc):
    _running.active = None


def is_staging():
  """Whether the virtual machine is running (or staging) a program.

  True while `execute` runs, so a primitive can tell the VM's calls from
  type inference's (`type_inference.is_inferring`) and from a dry run.
  """
  return getattr(_running, 'depth', 0) > 0


def execute(program, args, *rest, **kwargs):  # pylint: disable=function-redefined
  """Runs a lowered program on batched `args`, in either of two forms.

  - `execute(program, args, backend, batch_size, max_stack_depth=15,
    schedule=DEFAULT_SCHEDULE, block_code_cache=None, profile=False,
    max_steps=None, on_error='raise')` returns `(outputs, RunStats)`
    (`execute_batched`).
  - TFP's `execute(program, args, max_stack_depth, backend,
    block_code_cache=None)` returns the outputs alone.  The batch size
    comes from the inputs (TFP's calling convention: a scalar is a batch
    of one; an input of batch size 1 is broadcast to the batch).

  The forms differ in the third argument: an int (TFP's
  `max_stack_depth`) or a backend; without it, in whether `batch_size` is
  given.

  Args:
    program: The `LoweredProgram`.
    args: The batched inputs.
    *rest, **kwargs: The other arguments of either form.

  Returns:
    `(outputs, RunStats)`, or the outputs alone in TFP's form.
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


# TensorFlow's AutoGraph calls an artifact of its own as it is: a user's
# `tf.function` (AutoGraph on, TFP's `tf.function(lambda: execute(...))`)
# then runs this code, not a conversion of the whole library.
execute.autograph_info__ = frozenset()


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
  """TFP's calling convention for a program's inputs.

  Every leaf becomes a backend array with a leading batch dimension (a
  scalar is a batch of one) of its declared dtype; leaves of batch size 1
  are broadcast to the batch; other sizes must agree.

  Args:
    names: The input variables.
    types: The declared `Type` (or pattern of `TensorType`) of each.
    args: The values given.
    backend: The backend.
    where: The function's name, for messages.

  Returns:
    `(arrays, batch)`.

  Raises:
    ArgumentError: An input does not fit its type, or the batch sizes
      differ.
  """
  args = list(args)
  if len(args) != len(names):
    raise errors.ArgumentError(
        f'{where} takes {len(names)} input(s) ({", ".join(names)}), got '
        f'{len(args)}')
  out, sizes = [], {}
  for name, t, a in zip(names, types, args):
    t = t.tensors if isinstance(t, inst.Type) else t
    if t is None:
      raise errors.ArgumentError(
          f'{where} is untyped (input {name!r} has no type): it was lowered '
          'without an input signature, to be read, not run',
          hint='Lower it for the inputs\' types: program_lowered(main, '
          'sig) or lowered_for_args(name, args).')

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
