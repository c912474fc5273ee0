"""The whole compiler pipeline, in order, in one place: tables of passes.

    frontend (python.to_ir)  Python source -> untyped Program
    TYPED_PASSES             (Program, signature, backend)
      type_inference           -> every variable typed; a per-member
                                  function's sizes folded into constants
                                  (size_folding)
      allocation_strategy      -> NULL / TEMPORARY / REGISTER / FULL
      (`untyped`: no signature, every type unknown, allocation only;
      lowered, it shows the program's structure but cannot run)
    LOWERED_PASSES           (typed Program, schedule)
      lowering                 -> one flat CFG, explicit stacks and PC
      stack_optimization       -> fewer pushes and pops, tail calls
      block_order              -> sync-point blocks last (scheduled last)
      block_merge              -> fewer, larger blocks (fewer VM steps)
      return_inlining          -> constant base cases taken at the call
      leaf_returns             -> a leaf call goes on at its return site
      block_exits              -> a branch's likely side runs in the
                                  branching block's step (exits; only
                                  with `exits=True`)
      copy_propagation         -> fewer copies (temporaries sunk, forwarded)
      virtual_machine          runs it
    STACKLESS_PASSES         (typed Program), for stackless=True
      parallel_calls           -> independent calls of a function run as
                                  one, then allocated again
      stackless                runs it (Python's stack for calls)

Each pass is a pure function of a program (and, where a pass needs it, the
input signature, the backend or the VM schedule); `run` applies a table in
order and, with `verify=True`, runs the IR verifier after each pass, under
the pass's name.  Tests iterate over these tables rather than writing the
pipeline out again.
"""

import collections
import dataclasses

from autobatch_vm.backends import scheduler
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import verifier
from autobatch_vm.passes import allocation_strategy
from autobatch_vm.passes import block_exits
from autobatch_vm.passes import block_merge
from autobatch_vm.passes import block_order
from autobatch_vm.passes import copy_propagation
from autobatch_vm.passes import leaf_returns
from autobatch_vm.passes import lowering
from autobatch_vm.passes import parallel_calls
from autobatch_vm.passes import return_inlining
from autobatch_vm.passes import stack_optimization
from autobatch_vm.passes import type_inference

__all__ = ['Pass', 'TYPED_PASSES', 'LOWERED_PASSES', 'STACKLESS_PASSES',
           'run', 'typed', 'untyped', 'lowered', 'stackless']

Pass = collections.namedtuple('Pass', ['name', 'apply'])
Pass.__doc__ = """One pass of a table: its name and how to apply it.

Attributes:
  name: The pass's name, which the verifier's errors give.
  apply: `apply(program, context)` returns the new program; `context` is a
    dict of what some passes need beyond the program (`input_types`,
    `backend`, `schedule`, `exits`).
"""

TYPED_PASSES = (
    Pass('type_inference', lambda p, c: type_inference.infer_types(
        p, c['input_types'], c['backend'])),
    Pass('allocation', lambda p, c: allocation_strategy.allocate(p)),
)

LOWERED_PASSES = (
    Pass('lowering', lambda p, c: lowering.lower(p)),
    Pass('stack_optimization', lambda p, c: stack_optimization.optimize(p)),
    Pass('block_order', lambda p, c: block_order.order_blocks(p)),
    Pass('block_merge', lambda p, c: block_merge.merge_blocks(
        p, c['schedule'])),
    Pass('return_inlining', lambda p, c: return_inlining.inline_returns(p)),
    Pass('leaf_returns', lambda p, c: leaf_returns.merge_leaf_returns(
        p, c['schedule'])),
    # Off unless asked for (`exits`): docs/performance.md.
    Pass('block_exits', lambda p, c: block_exits.add_exits(
        p, c['schedule']) if c.get('exits') else p),
    Pass('copy_propagation', lambda p, c: copy_propagation.propagate_copies(
        p)),
)

STACKLESS_PASSES = (
    # Moved instructions change which variables cross a call: allocated
    # again before the program is whole.
    Pass('parallel_calls', lambda p, c: allocation_strategy.allocate(
        parallel_calls.parallelize_calls(p))),
)


def run(passes, program, verify=False, **context):
  """Runs `program` through `passes` in order.

  Args:
    passes: A table of `Pass`es, e.g. `LOWERED_PASSES`.
    program: The program the first pass takes.
    verify: Whether the verifier checks the result of each pass.
    **context: What some passes need beyond the program (`input_types`,
      `backend`, `schedule`), handed to each pass as a dict.

  Returns:
    The last pass's result.

  Raises:
    InternalError: If `verify` and a pass's result breaks an invariant;
      the message names the pass.
  """
  for p in passes:
    program = p.apply(program, context)
    if verify:
      verifier.verify(program, p.name)
  return program


def typed(program, input_types, backend, verify=False):
  """Types and allocates an untyped `Program` (`TYPED_PASSES`).

  Args:
    program: An untyped `Program`, from the frontend.
    input_types: One type pattern (of `TensorType`) per main parameter.
    backend: The backend that runs primitives on dummy values.
    verify: Whether the verifier checks the input and each pass's result.

  Returns:
    The typed and allocated `Program`.
  """
  if verify:
    verifier.verify(program, 'frontend')
  return run(TYPED_PASSES, program, verify, input_types=input_types,
             backend=backend)


def untyped(program, verify=False):
  """Allocates an untyped `Program` with every type unknown (`Type(None)`).

  Allocation and the lowered passes read which variables a program has
  and where they are read and written, not their types, so lowering the
  result shows the structure the VM would run -- the blocks, the
  allocations, the pushes -- for any input signature.  It cannot run: the
  VM needs the types.

  Args:
    program: An untyped `Program`, from the frontend.
    verify: Whether the verifier checks the input and the result.

  Returns:
    The `Program` with `var_defs` mapping every variable to `Type(None)`,
    allocated.
  """
  if verify:
    verifier.verify(program, 'frontend')
  functions = []
  for fn in program.functions:
    names = sorted(inst.extract_referenced_variables(fn))
    functions.append(dataclasses.replace(fn, var_defs=inst.FrozenDict(
        {v: inst.Type(None) for v in names})))
  program = dataclasses.replace(program, functions=tuple(functions))
  return run([p for p in TYPED_PASSES if p.name != 'type_inference'],
             program, verify)


def lowered(program, verify=False,
            schedule=scheduler.DEFAULT_SCHEDULE, exits=False):
  """Lowers and optimizes a typed, allocated `Program` (`LOWERED_PASSES`).

  Args:
    program: A typed and allocated `Program`.
    verify: Whether the verifier checks each pass's result.
    schedule: The VM schedule the program is for, `'most'` or `'lowest'`
      (block merging, leaf returns and block exits differ).
    exits: Whether `block_exits` inlines branches' likely sides after
      exits (`Context(block_exits=True)`).

  Returns:
    The optimized `LoweredProgram`.
  """
  return run(LOWERED_PASSES, program, verify, schedule=schedule,
             exits=exits)


def stackless(program, verify=False):
  """Prepares a typed, allocated `Program` for stackless mode.

  Args:
    program: A typed and allocated `Program`.
    verify: Whether the verifier checks each pass's result.

  Returns:
    The `Program` the stackless executor runs: independent calls of one
    function grouped (`parallel_calls`), allocated again.
  """
  return run(STACKLESS_PASSES, program, verify)
