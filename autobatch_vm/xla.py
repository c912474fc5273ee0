"""XLA: compiling a batched TensorFlow function, and gradients through it.

The public face of `autobatch_vm.backends.tf.xla`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.xla`), so programs
written for TFP and users' imports keep working.  TensorFlow is imported
when this module is.
"""

from autobatch_vm.backends.tf.xla import compile_nested_output
from autobatch_vm.backends.tf.xla import outer_gradient_error
from autobatch_vm.backends.tf.xla import refuse_gradient_from_outside
from autobatch_vm.backends.tf.xla import warn_if_gradient_needs_max_steps

__all__ = ['compile_nested_output', 'warn_if_gradient_needs_max_steps',
           'refuse_gradient_from_outside', 'outer_gradient_error']
