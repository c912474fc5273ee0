"""Per-member math: one member's operations, run on the whole batch.

A function decorated with `Context.batch(per_member=True)` is written for
one member: its values have no batch axis.  Its control flow runs on the VM
like any batched function's; its primitives (the pure expressions between
calls and branches) are written for one member, and this layer runs them
on a batch:

- `numpy_rules`: NumPy has no vectorizer, so a per-member array is a
  wrapper over the batched array (`MemberArray`) with batching rules for
  ufuncs, reductions, indexing and index assignment, shape queries, linear
  algebra, joining and reshaping; a NumPy function without a rule runs
  once per member and is counted.  `vectorize(fn, batch_size)` turns a
  per-member function into a batched one.  The rules live by family in
  `numpy_array` (the wrapper, ufuncs, the rule table, the fallback),
  `numpy_indexing`, `numpy_functions` and `numpy_linalg`.
- On TensorFlow a per-member primitive is vectorized with TensorFlow's own
  vectorizer (pfor, as `tf.vectorized_map`).

This layer imports NumPy, `autobatch_vm.errors`, `autobatch_vm.ir.patterns`
and (for TensorFlow) TensorFlow only; the frontend marks per-member
primitives and the backends call into it.  A new batching rule goes in
the module of its family, with a test against a loop over members.
"""
