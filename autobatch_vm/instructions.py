"""The instruction language: the IR's values, patterns and interpreter.

The public face of `autobatch_vm.ir.instructions`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.instructions`), so
programs written for TFP and users' imports keep working: the IR's
classes, the pattern helpers, the reference interpreter, the printer and
TFP's `extract_referenced_variables` (`__all__`), and the helpers the
passes use.  The grammar is in `autobatch_vm.ir.instructions`.
"""

from autobatch_vm.ir.instructions import Block
from autobatch_vm.ir.instructions import BranchOp
from autobatch_vm.ir.instructions import CallBranchOp
from autobatch_vm.ir.instructions import block_targets
from autobatch_vm.ir.instructions import copy_op
from autobatch_vm.ir.instructions import destinations
from autobatch_vm.ir.instructions import exit_targets
from autobatch_vm.ir.instructions import ExitOp
from autobatch_vm.ir.instructions import extract_referenced_variables
from autobatch_vm.ir.instructions import FrozenDict
from autobatch_vm.ir.instructions import Function
from autobatch_vm.ir.instructions import FunctionCallOp
from autobatch_vm.ir.instructions import GotoOp
from autobatch_vm.ir.instructions import GraphView
from autobatch_vm.ir.instructions import has_sync
from autobatch_vm.ir.instructions import identity
from autobatch_vm.ir.instructions import IndirectGotoOp
from autobatch_vm.ir.instructions import interpret
from autobatch_vm.ir.instructions import is_namedtuple
from autobatch_vm.ir.instructions import jump_targets
from autobatch_vm.ir.instructions import LoweredProgram
from autobatch_vm.ir.instructions import op_str
from autobatch_vm.ir.instructions import OPS
from autobatch_vm.ir.instructions import parallel_copy
from autobatch_vm.ir.instructions import pattern_flatten
from autobatch_vm.ir.instructions import pattern_map
from autobatch_vm.ir.instructions import pattern_map2
from autobatch_vm.ir.instructions import pattern_paths
from autobatch_vm.ir.instructions import pattern_str
from autobatch_vm.ir.instructions import pattern_traverse
from autobatch_vm.ir.instructions import pattern_unflatten
from autobatch_vm.ir.instructions import pattern_zip
from autobatch_vm.ir.instructions import PopOp
from autobatch_vm.ir.instructions import PrimOp
from autobatch_vm.ir.instructions import print_program
from autobatch_vm.ir.instructions import Program
from autobatch_vm.ir.instructions import PushBranchOp
from autobatch_vm.ir.instructions import PushGotoOp
from autobatch_vm.ir.instructions import PushOp
from autobatch_vm.ir.instructions import reachable_blocks
from autobatch_vm.ir.instructions import RestoreOp
from autobatch_vm.ir.instructions import RETURN_VAR
from autobatch_vm.ir.instructions import ReturnOp
from autobatch_vm.ir.instructions import SourceLoc
from autobatch_vm.ir.instructions import TensorType
from autobatch_vm.ir.instructions import TERMINATORS
from autobatch_vm.ir.instructions import Type
from autobatch_vm.ir.instructions import type_str
from autobatch_vm.ir.instructions import VariableAllocation

__all__ = ['Block', 'BranchOp', 'CallBranchOp', 'ExitOp', 'Function',
           'FunctionCallOp',
           'GotoOp', 'GraphView', 'IndirectGotoOp', 'LoweredProgram', 'PopOp',
           'PrimOp', 'Program', 'PushBranchOp', 'PushGotoOp', 'PushOp',
           'RestoreOp', 'ReturnOp', 'SourceLoc', 'TensorType', 'Type',
           'VariableAllocation', 'FrozenDict', 'RETURN_VAR', 'pattern_map',
           'pattern_map2', 'pattern_zip', 'pattern_flatten',
           'pattern_traverse', 'pattern_paths', 'pattern_unflatten',
           'is_namedtuple', 'interpret', 'print_program',
           'extract_referenced_variables']
