"""Type inference: the dtype and per-member shape of every variable.

The public face of `autobatch_vm.passes.type_inference`, under the name
TFP's package gives it (`tfp.experimental.auto_batching.type_inference`),
so programs written for TFP and users' imports keep working.
"""

from autobatch_vm.passes.type_inference import infer_types
from autobatch_vm.passes.type_inference import infer_types_from_signature
from autobatch_vm.passes.type_inference import is_inferring
from autobatch_vm.passes.type_inference import join
from autobatch_vm.passes.type_inference import normalize_declared
from autobatch_vm.passes.type_inference import signature
from autobatch_vm.passes.type_inference import type_of_pattern
from autobatch_vm.passes.type_inference import type_of_value

__all__ = ['infer_types', 'join', 'type_of_value', 'normalize_declared',
           'infer_types_from_signature', 'is_inferring', 'signature',
           'type_of_pattern']
