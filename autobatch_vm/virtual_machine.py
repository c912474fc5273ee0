"""The batched virtual machine: runs a `LoweredProgram` across a batch.

The public face of `autobatch_vm.vm`, under the name TFP's package gives
it (`tfp.experimental.auto_batching.virtual_machine`), so programs
written for TFP and users' imports keep working: `execute` in TFP's form
and ours, `is_staging`, the statistics of a run and the schedules.
"""

from autobatch_vm.backends.scheduler import check_schedule
from autobatch_vm.backends.scheduler import DEFAULT_SCHEDULE
from autobatch_vm.backends.scheduler import SCHEDULES
from autobatch_vm.vm.closures import compile_blocks
from autobatch_vm.vm.closures import CompiledProgram
from autobatch_vm.vm.machine import batched_inputs
from autobatch_vm.vm.machine import execute
from autobatch_vm.vm.machine import execute_batched
from autobatch_vm.vm.machine import is_staging
from autobatch_vm.vm.stats import RunStats

__all__ = ['execute', 'execute_batched', 'is_staging', 'batched_inputs',
           'RunStats', 'SCHEDULES', 'DEFAULT_SCHEDULE', 'check_schedule',
           'CompiledProgram', 'compile_blocks']
