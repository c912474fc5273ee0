"""Backends: the arrays of a run and its step loop (`base.Backend`).

`base` declares the interface every backend implements (and the state's
named slots, `PC`, `PC_STACK`, `PC_SP`); `scheduler` the rule for which
block runs next, which every backend's loop applies; `numpy` runs
eagerly on NumPy; `tf` stages the run into one TensorFlow loop.  The
public faces are `autobatch_vm.numpy_backend`, `autobatch_vm.tf_backend`
and `autobatch_vm.xla`.

This layer imports the IR (`autobatch_vm.ir`), `per_member` and the leaf
modules `errors` and `caches`; never the VM (`autobatch_vm.vm`), the
passes or the frontend.  A new backend is a subclass of `base.Backend`
in a module (or subpackage) here, declaring its capabilities; it
imports its array library at its top, and the package imports it only
when a user names it (as `autobatch_vm.__init__` does for TensorFlow).
"""
