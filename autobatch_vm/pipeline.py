"""The whole compiler pipeline, in order, in one place: tables of passes.

    frontend (python_to_ir)  Python source -> untyped Program
    TYPED_PASSES             (Program, signature, backend)
      type_inference           -> every variable typed
      allocation_strategy      -> NULL / TEMPORARY / REGISTER / FULL
    LOWERED_PASSES           (typed Program, schedule)
      lowering                 -> one flat CFG, explicit stacks and PC
      stack_optimization       -> fewer pushes and pops, tail calls
      block_order              -> sync-point blocks last (scheduled last)
      block_merge              -> fewer, larger blocks (fewer VM steps)
      return_inlining          -> constant base cases taken at the call
      leaf_returns             -> a leaf call goes on at its return site
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

from autobatch_vm import allocation_strategy
from autobatch_vm import block_merge
from autobatch_vm import block_order
from autobatch_vm import copy_propagation
from autobatch_vm import leaf_returns
from autobatch_vm import lowering
from autobatch_vm import parallel_calls
from autobatch_vm import return_inlining
from autobatch_vm import stack_optimization
from autobatch_vm import type_inference
from autobatch_vm import verifier
from autobatch_vm import virtual_machine

__all__ = ['Pass', 'TYPED_PASSES', 'LOWERED_PASSES', 'STACKLESS_PASSES',
           'run', 'typed', 'lowered', 'stackless']

# `apply(program, context)`: `context` holds what some passes need beyond
# the program (`input_types`, `backend`, `schedule`).
Pass = collections.namedtuple('Pass', ['name', 'apply'])

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
  """`program` through `passes` in order; with `verify`, the verifier
  checks the result of each (an `InternalError` names the pass)."""
  for p in passes:
    program = p.apply(program, context)
    if verify:
      verifier.verify(program, p.name)
  return program


def typed(program, input_types, backend, verify=False):
  """Untyped `Program` -> typed and allocated `Program`."""
  if verify:
    verifier.verify(program, 'frontend')
  return run(TYPED_PASSES, program, verify, input_types=input_types,
             backend=backend)


def lowered(program, verify=False,
            schedule=virtual_machine.DEFAULT_SCHEDULE):
  """Typed and allocated `Program` -> optimized `LoweredProgram`.

  `schedule`: the VM schedule the program is for (block merging differs).
  """
  return run(LOWERED_PASSES, program, verify, schedule=schedule)


def stackless(program, verify=False):
  """Typed and allocated `Program` -> the `Program` the stackless executor
  runs (independent calls of one function grouped, `parallel_calls`)."""
  return run(STACKLESS_PASSES, program, verify)
