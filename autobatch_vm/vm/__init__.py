"""The execution half: the stack VM, its compilers, and the stackless executor.

Modules, from the bottom of the import graph up: `layout` (the state's
named slots), `stats` (`RunStats`), `scheduler` (which block runs next),
`dispatch` and `errors` (what every executor shares), `codegen` (NumPy
blocks as generated functions), `closures` (blocks as closures, and
`CompiledProgram`), `machine` (`execute`), `stackless`.  The public faces
are `autobatch_vm.virtual_machine` and `autobatch_vm.stackless`.
"""
