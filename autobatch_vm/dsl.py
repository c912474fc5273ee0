"""A builder for writing autobatch_vm IR by hand: `ProgramBuilder`.

The public face of `autobatch_vm.ir.dsl`, under the name TFP's package
gives it (`tfp.experimental.auto_batching.dsl`), so programs written for
TFP and users' imports keep working.
"""

from autobatch_vm.ir.dsl import DslError
from autobatch_vm.ir.dsl import FunctionHandle
from autobatch_vm.ir.dsl import Label
from autobatch_vm.ir.dsl import ProgramBuilder
from autobatch_vm.ir.dsl import RETURN_VAR

__all__ = ['ProgramBuilder', 'FunctionHandle', 'Label', 'DslError',
           'RETURN_VAR']
