"""The compiler passes: pure functions from a program to a new program.

`pipeline` lists them in order, as tables of named passes
(`TYPED_PASSES`, `LOWERED_PASSES`, `STACKLESS_PASSES`) that one loop runs,
verifying after each pass on request:

- typed: `type_inference`, `allocation_strategy`;
- lowered: `lowering`, `stack_optimization`, `block_order`, `block_merge`,
  `return_inlining`, `leaf_returns`, `copy_propagation`;
- stackless: `parallel_calls` (then allocation again).

Type inference runs the user's primitives; its checks of them are
modules of their own: `made_up` (the inputs a primitive runs on, on
NumPy), `declared_types` (a declared result checked at its first run),
`member_mixing` (a primitive that mixes batch members), with
`randomness` (whether a primitive draws at random), and
`member_indexing` (a per-member index used as a batch index).

This layer imports the IR (`autobatch_vm.ir`), the VM and the backends
(the schedule a pass targets, the backend type inference runs
primitives on), and the leaf modules `errors`, `caches`, `ops`; never the
Python frontend or the public API.  A new pass is a module here with one
public function `Program -> Program` (or `LoweredProgram ->
LoweredProgram`), a line in a table of `pipeline`, and its invariants in
`ir.verifier`.
"""
