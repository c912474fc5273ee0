"""Stack optimization of a lowered program: fewer pushes, pops and steps.

The public face of `autobatch_vm.passes.stack_optimization`, under the
name TFP's package gives it
(`tfp.experimental.auto_batching.stack_optimization`), so programs written
for TFP and users' imports keep working.
"""

from autobatch_vm.passes.stack_optimization import fuse_pop_push
from autobatch_vm.passes.stack_optimization import optimize

__all__ = ['optimize', 'fuse_pop_push']
