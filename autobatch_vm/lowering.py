"""Lowering: calls and returns become explicit stack operations.

The public face of `autobatch_vm.passes.lowering`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.lowering`), so programs
written for TFP and users' imports keep working.
"""

from autobatch_vm.passes.lowering import lower
from autobatch_vm.passes.lowering import lower_function_calls

__all__ = ['lower', 'lower_function_calls']
