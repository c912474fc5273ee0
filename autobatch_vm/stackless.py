"""Stackless executor: Python's own call stack handles batched calls.

The public face of `autobatch_vm.vm.stackless`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.stackless`), so
programs written for TFP and users' imports keep working.
"""

from autobatch_vm.vm.stackless import branching_recursion
from autobatch_vm.vm.stackless import execute
from autobatch_vm.vm.stackless import execute_batched
from autobatch_vm.vm.stackless import Fallback
from autobatch_vm.vm.stackless import is_running
from autobatch_vm.vm.stackless import MAX_GROUP_FRAME_BYTES

__all__ = ['execute', 'execute_batched', 'is_running', 'branching_recursion',
           'Fallback', 'MAX_GROUP_FRAME_BYTES']
