"""The instruction language of autobatch_vm.

Grammar (a program before lowering is a set of functions; lowering flattens
them into one list of blocks and replaces calls and returns by explicit
stack operations):

    program    ::= Program(functions: function*, main: name)
    lowered    ::= LoweredProgram(blocks: block*, var_defs, var_alloc,
                                  vars_in: name*, vars_out: pattern(name))
    function   ::= Function(name, vars_in: name*, vars_out: pattern(name),
                            blocks: block*, var_defs, type_inference)
    block      ::= Block(label, instructions: op*, terminator)
    op         ::= PrimOp(vars_in: name*, vars_out: pattern(name), function,
                          per_member: bool)   # prints `member[...]` if set
                 | FunctionCallOp(function: name, vars_in: name*,
                                  vars_out: pattern(name),
                                  parallel: bool)             # before lowering
                 | PushOp(vars: name*)       # save registers on their stacks
                 | PopOp(vars: name*)        # restore registers, drop frame
                 | RestoreOp(vars: name*)    # restore registers, keep frame
                 | ExitOp(cond: name, when: bool,  # after lowering: members
                          block: label)    # with cond == when jump there
    terminator ::= GotoOp(label)
                 | BranchOp(cond: name, true: label, false: label)
                 | ReturnOp()                                 # before lowering
                 | PushGotoOp(push: label, goto: label)       # after lowering
                 | PushBranchOp(push: label, cond: name,      # after lowering
                                true: label, false: label)
                 | CallBranchOp(push: label, cond: name,      # after lowering
                                true: label, false: label, call_side: bool)
                 | IndirectGotoOp()                           # after lowering
    type       ::= Type(tensors: pattern(TensorType(dtype, shape)))
    pattern(x) ::= x | tuple(pattern(x)*) | list(pattern(x)*) | namedtuple

Every variable holds one value per batch member: an array whose leading
dimension is the batch.  `TensorType.shape` excludes that dimension.  A
`PrimOp` computes on whole batched arrays (a `per_member` one is written for
one member, and the backend vectorizes it); the virtual machine decides which
members' results are kept (the members whose program counter is at the
block).  All IR values are frozen dataclasses: passes build new values with
`dataclasses.replace` and never mutate their input.

This module is the public face of the IR, under the name TFP's package
gives it: the values and their printer are defined in `ir`, the pattern
helpers in `patterns`, the reference interpreter in `interpreter`.
"""

from autobatch_vm import errors
# Besides `__all__`, the package's passes and executors read the helpers
# (`op_str`, `identity`, `OPS`, `jump_targets`, ...) from here.
from autobatch_vm.ir.interpreter import interpret
from autobatch_vm.ir.patterns import is_namedtuple
from autobatch_vm.ir.patterns import pattern_flatten
from autobatch_vm.ir.patterns import pattern_map
from autobatch_vm.ir.patterns import pattern_map2
from autobatch_vm.ir.patterns import pattern_paths
from autobatch_vm.ir.patterns import pattern_traverse
from autobatch_vm.ir.patterns import pattern_unflatten
from autobatch_vm.ir.patterns import pattern_zip
from autobatch_vm.ir.program import Block
from autobatch_vm.ir.program import block_targets
from autobatch_vm.ir.program import BranchOp
from autobatch_vm.ir.program import CallBranchOp
from autobatch_vm.ir.program import copy_op
from autobatch_vm.ir.program import destinations
from autobatch_vm.ir.program import exit_targets
from autobatch_vm.ir.program import ExitOp
from autobatch_vm.ir.program import FrozenDict
from autobatch_vm.ir.program import Function
from autobatch_vm.ir.program import FunctionCallOp
from autobatch_vm.ir.program import GotoOp
from autobatch_vm.ir.program import GraphView
from autobatch_vm.ir.program import has_sync
from autobatch_vm.ir.program import identity
from autobatch_vm.ir.program import IndirectGotoOp
from autobatch_vm.ir.program import jump_targets
from autobatch_vm.ir.program import LoweredProgram
from autobatch_vm.ir.program import op_str
from autobatch_vm.ir.program import OPS
from autobatch_vm.ir.program import parallel_copy
from autobatch_vm.ir.program import pattern_str
from autobatch_vm.ir.program import PopOp
from autobatch_vm.ir.program import PrimOp
from autobatch_vm.ir.program import print_program
from autobatch_vm.ir.program import Program
from autobatch_vm.ir.program import PushBranchOp
from autobatch_vm.ir.program import PushGotoOp
from autobatch_vm.ir.program import PushOp
from autobatch_vm.ir.program import reachable_blocks
from autobatch_vm.ir.program import RestoreOp
from autobatch_vm.ir.program import RETURN_VAR
from autobatch_vm.ir.program import ReturnOp
from autobatch_vm.ir.program import SourceLoc
from autobatch_vm.ir.program import TensorType
from autobatch_vm.ir.program import TERMINATORS
from autobatch_vm.ir.program import Type
from autobatch_vm.ir.program import type_str
from autobatch_vm.ir.program import VariableAllocation

__all__ = [
    'Block', 'BranchOp', 'CallBranchOp', 'ExitOp', 'Function',
    'FunctionCallOp',
    'GotoOp', 'GraphView', 'IndirectGotoOp', 'LoweredProgram', 'PopOp',
    'PrimOp', 'Program', 'PushBranchOp', 'PushGotoOp', 'PushOp', 'RestoreOp',
    'ReturnOp', 'SourceLoc', 'TensorType', 'Type', 'VariableAllocation',
    'FrozenDict', 'RETURN_VAR',
    'pattern_map', 'pattern_map2', 'pattern_zip', 'pattern_flatten',
    'pattern_traverse', 'pattern_paths', 'pattern_unflatten',
    'is_namedtuple', 'interpret', 'print_program',
]


# ---------------------------------------------------------------------------
# TFP's module-level API (TFP's IR classes themselves are not provided).
# ---------------------------------------------------------------------------

__all__ += ['extract_referenced_variables']


def extract_referenced_variables(node):
  """Finds the variables a piece of IR reads or writes (TFP's function).

  Args:
    node: An instruction, terminator, block, function, program, or a list
      or tuple of them.

  Returns:
    The `frozenset` of variable names it reads or writes.

  Raises:
    ArgumentError: If `node` is none of these.
  """
  if isinstance(node, (PrimOp, FunctionCallOp)):
    return frozenset(node.vars_in) | frozenset(pattern_flatten(node.vars_out))
  if isinstance(node, (PushOp, PopOp, RestoreOp)):
    return frozenset(node.vars)
  if isinstance(node, (BranchOp, PushBranchOp, CallBranchOp, ExitOp)):
    return frozenset([node.cond])
  if isinstance(node, (GotoOp, ReturnOp, PushGotoOp, IndirectGotoOp)):
    return frozenset()
  if isinstance(node, Block):
    return extract_referenced_variables(
        list(node.instructions) + [node.terminator])
  if isinstance(node, Function):
    return (frozenset(node.vars_in) | frozenset(pattern_flatten(node.vars_out))
            | extract_referenced_variables(node.blocks))
  if isinstance(node, Program):
    return extract_referenced_variables(node.functions)
  if isinstance(node, LoweredProgram):
    return (frozenset(node.vars_in) | frozenset(pattern_flatten(node.vars_out))
            | extract_referenced_variables(node.blocks))
  if isinstance(node, (list, tuple)):
    return frozenset().union(*[extract_referenced_variables(n) for n in node])
  raise errors.ArgumentError(
      f'extract_referenced_variables: {node!r} is not an instruction, '
      'block, function or program')
