"""The whole compiler pipeline, in order, in one place.

    frontend (python_to_ir)  Python source -> untyped Program
    type_inference           -> every variable typed
    allocation_strategy      -> NULL / TEMPORARY / REGISTER / FULL
    lowering                 -> one flat CFG, explicit stacks and PC
    stack_optimization       -> fewer pushes and pops, tail calls
    block_order              -> sync-point blocks last (scheduled last)
    block_merge              -> fewer, larger blocks (fewer VM steps)
    return_inlining          -> constant base cases taken at the call
    leaf_returns             -> a leaf call goes on at its return site
    copy_propagation         -> fewer copies (temporaries sunk, forwarded)
    virtual_machine          runs it
  or, for stackless=True, from the typed Program:
    parallel_calls           -> independent calls of a function run as one
    allocation_strategy      -> again (instructions moved)
    stackless                runs it (Python's stack for calls)
"""

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

__all__ = ['typed', 'lowered', 'stackless']


def typed(program, input_types, backend, verify=False):
  """Untyped `Program` -> typed and allocated `Program`."""
  if verify:
    verifier.verify(program, 'frontend')
  program = type_inference.infer_types(program, input_types, backend)
  program = allocation_strategy.allocate(program)
  if verify:
    verifier.verify(program, 'allocation')
  return program


def lowered(program, verify=False,
            schedule=virtual_machine.DEFAULT_SCHEDULE):
  """Typed and allocated `Program` -> optimized `LoweredProgram`.

  `schedule`: the VM schedule the program is for (block merging differs).
  """
  program = lowering.lower(program)
  if verify:
    verifier.verify(program, 'lowering')
  program = stack_optimization.optimize(program)
  if verify:
    verifier.verify(program, 'stack_optimization')
  program = block_order.order_blocks(program)
  if verify:
    verifier.verify(program, 'block_order')
  program = block_merge.merge_blocks(program, schedule)
  if verify:
    verifier.verify(program, 'block_merge')
  program = return_inlining.inline_returns(program)
  if verify:
    verifier.verify(program, 'return_inlining')
  program = leaf_returns.merge_leaf_returns(program, schedule)
  if verify:
    verifier.verify(program, 'leaf_returns')
  program = copy_propagation.propagate_copies(program)
  if verify:
    verifier.verify(program, 'copy_propagation')
  return program


def stackless(program, verify=False):
  """Typed and allocated `Program` -> the `Program` the stackless executor
  runs (independent calls of one function grouped, `parallel_calls`)."""
  program = parallel_calls.parallelize_calls(program)
  # Moved instructions change which variables cross a call.
  program = allocation_strategy.allocate(program)
  if verify:
    verifier.verify(program, 'parallel_calls')
  return program
