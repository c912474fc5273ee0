"""The IR and its tools: the bottom layer of the compiler.

- `instructions`: the instruction language in one namespace (the grammar,
  the values, the pattern helpers, the interpreter, TFP's
  `extract_referenced_variables`); the package's passes and executors
  import it as `inst`.
- `program`: the values (types, ops, terminators, blocks, functions,
  programs), frozen dataclasses, and their printer.
- `patterns`: nested tuples, lists and namedtuples: map, zip, flatten.
- `interpreter`: the one-member reference interpreter, the tests' oracle.
- `liveness`: which variables are live where (an analysis, used by the
  passes, the verifier and the executors).
- `loops`: a lowered program's loops and the blocks that wait for them
  (an analysis, for the `'most'` schedule).
- `verifier`: each stage's invariants, checked between passes.
- `dsl`, `dsl_tfp`, `dsl_function`: `ProgramBuilder`, for writing IR by
  hand (TFP's vocabulary and ours).

This layer imports NumPy and `autobatch_vm.errors` only (and `errors`
imports `patterns`).  A new instruction goes in `program` (its class, its
line in `OPS` or `TERMINATORS`, its printer), with its meaning in
`interpreter` and its invariants in `verifier`; `instructions` re-exports
it.
"""
