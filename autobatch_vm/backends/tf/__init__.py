"""The TensorFlow backend, by concern.

`backend` (`TensorFlowBackend`: element ops, masks, stacks), `loop` (the
staged `tf.while_loop` and eager stepping), `packing` (the state packed
into few tensors), `groups` (XLA's step in groups of blocks), `ops`
(pending writes and in-place updates), `masks`, `errors` (parked members
and their errors), `knobs` (`TuningKnobs`) and `xla` (a batched function
compiled by XLA, gradients through it; face: `autobatch_vm.xla`).  Only
this subpackage imports TensorFlow among the backends.
"""
