"""Liveness analysis: which variables are live where, and across calls.

The public face of `autobatch_vm.ir.liveness`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.liveness`), so programs
written for TFP and users' imports keep working.
"""

from autobatch_vm.ir.liveness import analyze
from autobatch_vm.ir.liveness import crossing
from autobatch_vm.ir.liveness import Liveness
from autobatch_vm.ir.liveness import liveness_analysis
from autobatch_vm.ir.liveness import LivenessInfo
from autobatch_vm.ir.liveness import lowered_live_out
from autobatch_vm.ir.liveness import reads
from autobatch_vm.ir.liveness import transfer
from autobatch_vm.ir.liveness import writes

__all__ = ['Liveness', 'analyze', 'crossing', 'lowered_live_out', 'reads',
           'transfer', 'writes', 'LivenessInfo', 'liveness_analysis']
