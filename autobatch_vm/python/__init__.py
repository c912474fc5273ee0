"""Python source -> IR: a decorated function's source into an untyped Program.

- `to_ir`: `compile_function`, statements and expressions into blocks;
- `source`: the function's source and locations, the dry run's copy;
- `primitives`: a pure expression into its batched primitive (the
  rewrite to `ops` helpers, the function made with the user's globals,
  closure, file and line);
- `cfg`: unreachable blocks dropped, fall-off ends and possibly
  unassigned reads rejected, labels renumbered;
- `call_arguments`: a call's arguments: their structure, conversion to
  backend arrays of one batch size, their types, the default backend.

This layer imports the passes, the VM, the backends, the IR and the leaf
modules `errors`, `caches`, `ops`; never the public API (`frontend`,
`dry_run`, `staging`) or sharding.  A new Python construct is compiled in
`to_ir` (a statement or an expression), and refused there, with the
user's line, where it cannot be batched.
"""
