"""NumPy backend: eager, a Python loop over VM steps, array work inside.

The public face of `autobatch_vm.backends.numpy`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.numpy_backend`), so
programs written for TFP and users' imports keep working.
"""

from autobatch_vm.backends.numpy import coercer
from autobatch_vm.backends.numpy import NumpyBackend
from autobatch_vm.backends.numpy import take_rows

__all__ = ['NumpyBackend', 'coercer', 'take_rows']
