"""autobatch_vm: batch programs whose control flow differs per member.

Write the logic of one batch member -- recursion, branches, loops -- decorate
it with `Context().batch(...)`, and call it on a whole batch.  The public
names match `tfp.experimental.auto_batching`, so a program written for it
runs here by changing its import.
"""

from autobatch_vm import allocation_strategy
from autobatch_vm import caches
from autobatch_vm import dsl
from autobatch_vm import errors
from autobatch_vm import frontend
from autobatch_vm import instructions
from autobatch_vm import liveness
from autobatch_vm import lowering
from autobatch_vm import numpy_backend
from autobatch_vm import stack_optimization
from autobatch_vm import stackless
from autobatch_vm import type_inference
from autobatch_vm import virtual_machine
from autobatch_vm.errors import AutoBatchError
from autobatch_vm.errors import InternalError
from autobatch_vm.frontend import Context
from autobatch_vm.frontend import truthy
from autobatch_vm.instructions import TensorType
from autobatch_vm.instructions import Type
from autobatch_vm.ir import verifier
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.ops import sync_point
from autobatch_vm.passes import block_order
from autobatch_vm.passes import pipeline
from autobatch_vm.python import to_ir as python_to_ir
from autobatch_vm.sharding.shard import shard
from autobatch_vm.virtual_machine import RunStats

__version__ = '0.1.0'

__all__ = [
    'AutoBatchError', 'Context', 'InternalError', 'NumpyBackend', 'RunStats',
    'TensorFlowBackend', 'TensorType', 'Type', 'allocation_strategy',
    'block_order', 'caches', 'dsl',
    'errors', 'frontend', 'instructions', 'liveness', 'lowering',
    'numpy_backend', 'pipeline', 'shard', 'stack_optimization', 'stackless',
    'stage', 'staging', 'sync_point', 'tf_backend', 'truthy',
    'type_inference', 'verifier', 'virtual_machine', 'xla',
]


def __getattr__(name):
  # TensorFlow is imported only when a TF name is first used.
  modules = {'TensorFlowBackend': 'tf_backend', 'tf_backend': 'tf_backend',
             'xla': 'xla', 'stage': 'staging', 'staging': 'staging'}
  if name in modules:
    import importlib  # pylint: disable=g-import-not-at-top
    module = importlib.import_module('autobatch_vm.' + modules[name])
    if name in ('TensorFlowBackend', 'stage'):
      return getattr(module, name)
    return module
  raise AttributeError(f'module autobatch_vm has no attribute {name!r}')
