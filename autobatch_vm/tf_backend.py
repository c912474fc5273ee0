"""TensorFlow backend: the whole VM run stages as one `tf.while_loop`.

The public face of `autobatch_vm.backends.tf`, under the name TFP's
package gives it (`tfp.experimental.auto_batching.tf_backend`), so
programs written for TFP and users' imports keep working.
`TuningKnobs` are the staged loop's thresholds
(`TensorFlowBackend(knobs=...)`).
"""

from autobatch_vm.backends.tf.backend import TensorFlowBackend
from autobatch_vm.backends.tf.errors import collect_errors
from autobatch_vm.backends.tf.knobs import TuningKnobs
from autobatch_vm.backends.tf.loop import traceable

__all__ = ['TensorFlowBackend', 'TuningKnobs', 'collect_errors', 'traceable']
