"""The executors: the stack VM, its compilers, and the stackless executor.

Modules, from the bottom of the import graph up: `layout` (the state's
layout over the backends' named slots), `stats` (`RunStats`), `dispatch`
and `errors` (what every executor shares), `failures` (what a run does
with members that fail), `codegen` (NumPy blocks as generated functions),
`closures` (blocks as closures, and `CompiledProgram`), `machine`
(`execute`), `stackless`.  The public faces are
`autobatch_vm.virtual_machine` and `autobatch_vm.stackless`.

This layer imports the backends (`autobatch_vm.backends`: the interface,
the scheduler, the NumPy helpers the generated code calls), the IR
(`autobatch_vm.ir`) and the leaf modules `errors`, `caches`,
`profiler`; never the passes, the frontend or the public API.  A new
executor is a module here that takes a `LoweredProgram` (or a typed
`Program`) and a backend, with its faces' names added to
`virtual_machine` or `stackless`.
"""
