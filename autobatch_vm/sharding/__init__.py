"""Sharding: one batched call split over workers or devices (`ab.shard`).

- `shard`: `shard()` and `ShardedFunction`: arguments, the split, one form;
- `split`: `split_indices`, the batch size, `Shard` and `ShardStats`, a
  shard's error naming members by their index in the batch;
- `executor`: the executor form: the program pickled and shipped once per
  signature, `run_shard` in the workers, the merge;
- `tf_shards`: the strategy form: shards on a `tf.distribute` strategy's
  devices, eager or staged (with XLA); TensorFlow is imported only there.

This layer sits above the public API's Context: it may import
`frontend`, `shipping` and everything below them, and nothing imports it
but the package's `__init__`.  A new way to run shards is a module here,
chosen in `shard`.
"""
