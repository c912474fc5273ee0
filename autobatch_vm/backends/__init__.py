"""Backends: the arrays of a run and its step loop (`base.Backend`).

`numpy` runs eagerly on NumPy; `tf` stages the run into one TensorFlow
loop.  The public faces are `autobatch_vm.numpy_backend` and
`autobatch_vm.tf_backend`.
"""
