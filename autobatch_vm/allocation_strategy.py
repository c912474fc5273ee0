"""Allocation: where the VM keeps each variable.

The public face of `autobatch_vm.passes.allocation_strategy`, under the
name TFP's package gives it
(`tfp.experimental.auto_batching.allocation_strategy`), so programs
written for TFP and users' imports keep working.
"""

from autobatch_vm.passes.allocation_strategy import allocate
from autobatch_vm.passes.allocation_strategy import call_graph_closure
from autobatch_vm.passes.allocation_strategy import optimize

__all__ = ['allocate', 'call_graph_closure', 'optimize']
