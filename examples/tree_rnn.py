"""A recursive tree encoder (tree RNN), batched over trees of different shapes.

As in DyNet's autobatching tutorial: every leaf of a binary tree is a word
embedding; every internal node combines its children with

    h = tanh(W [h_left; h_right] + b)

and the encoding of a tree is the vector at its root.  Trees differ in
shape and size, so a batch of them cannot be written as one fixed
computation graph.  Here the encoder is written for ONE tree, as ordinary
recursion, and autobatch_vm runs it for a whole batch of trees: each
`W [l; r] + b` executes as one matrix product over every tree whose
recursion is at that point.

The forest is a set of arrays shared by all members (child indices, leaf
word ids, an is-leaf flag); a member's argument is the index of its root.
Children of leaves point at node 0 rather than -1, so indexing stays valid
for the inactive members too (primitives run on the whole batch; lanes of
members that are elsewhere carry leftover data).

    python examples/tree_rnn.py
    python examples/tree_rnn.py --num_trees=1024 --max_leaves=64
    python examples/tree_rnn.py --schedule=lowest  # the other VM policy
    python examples/tree_rnn.py --backend=xla    # tf.function(jit_compile=True)
    python examples/tree_rnn.py --backend=vm     # NumPy's stack VM

On NumPy the default mode (`stackless=None`) runs this program stackless:
a tree recursion's two calls run as one call, a frame per tree level
(`--backend=stackless` asks for that explicitly).  `--backend=vm` forces the
stack VM (`stackless=False`), which walks each tree one path at a time.
"""

import os
# Small matrix products: one BLAS thread is faster, and timings on a shared
# machine steadier, than several (set the variable yourself to override).
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import time  # pylint: disable=g-import-not-at-top,wrong-import-position
import types  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab

FLAGS = flags.FLAGS


def define_flags():
  """Command-line flags (defined only when run as a script, so that the
  examples can be imported together, e.g. by the tests)."""
  flags.DEFINE_integer('num_trees', 256, 'Trees in the batch.')
  flags.DEFINE_integer('min_leaves', 2, 'Fewest leaves of a tree.')
  flags.DEFINE_integer('max_leaves', 32, 'Most leaves of a tree.')
  flags.DEFINE_integer('hidden', 64, 'Hidden (and embedding) size.')
  flags.DEFINE_integer('vocab', 1000, 'Vocabulary size (rows of the '
                       'embedding table).')
  flags.DEFINE_integer('seed', 0, 'Random seed for trees and parameters.')
  flags.DEFINE_integer('repeats', 3, 'Timed repetitions (best is reported).')
  flags.DEFINE_enum('schedule', 'most', ['most', 'lowest'],
                    'Which block the VM runs next: the one with the most '
                    'members (best here: siblings at different depths meet '
                    'at the same block), or the lowest-numbered one.')
  flags.DEFINE_enum('backend', 'all',
                    ['numpy', 'stackless', 'vm', 'tf', 'xla', 'all'],
                    'Batched backend(s) to time: numpy (the default mode, '
                    'which picks stackless for this tree recursion); '
                    'stackless (NumPy, stackless=True: the two recursive '
                    'calls run as one); vm (NumPy, stackless=False: the '
                    'stack VM); tf (tf.function); xla (tf.function with '
                    'jit_compile=True); all (numpy, vm, tf, xla).  Without '
                    'autobatch_vm.tf_backend only the NumPy ones run.')


# ---------------------------------------------------------------------------
# Data: a forest of random binary trees, flattened into index arrays.
# ---------------------------------------------------------------------------

class Forest(types.SimpleNamespace):
  """All trees' nodes in shared arrays.

  left, right: child node indices (0 for leaves: always a valid index).
  is_leaf: bool per node.  word: the word id of a leaf (0 for internal
  nodes).  roots: the root node of each tree.  depths: each tree's height.
  """


def random_forest(num_trees, min_leaves, max_leaves, vocab, rng):
  """Random binary trees; each split of k leaves is uniform in 1..k-1."""
  left, right, is_leaf, word = [], [], [], []

  def build(k):
    node = len(left)
    left.append(0)
    right.append(0)
    is_leaf.append(k == 1)
    word.append(int(rng.integers(vocab)) if k == 1 else 0)
    if k == 1:
      return node, 0
    split = int(rng.integers(1, k))
    l, dl = build(split)
    r, dr = build(k - split)
    left[node], right[node] = l, r
    return node, 1 + max(dl, dr)

  roots, depths, sizes = [], [], []
  for _ in range(num_trees):
    k = int(rng.integers(min_leaves, max_leaves + 1))
    root, depth = build(k)
    roots.append(root)
    depths.append(depth)
    sizes.append(k)
  return Forest(left=np.array(left, np.int32), right=np.array(right, np.int32),
                is_leaf=np.array(is_leaf), word=np.array(word, np.int32),
                roots=np.array(roots, np.int32), depths=np.array(depths),
                leaves=np.array(sizes))


def random_params(hidden, vocab, rng):
  scale = 1.0 / np.sqrt(2 * hidden)
  return types.SimpleNamespace(
      embedding=rng.normal(size=(vocab, hidden)).astype(np.float32),
      w=(rng.normal(size=(2 * hidden, hidden)) * scale).astype(np.float32),
      b=np.zeros((hidden,), np.float32))


# ---------------------------------------------------------------------------
# The batched encoder.  `lib` holds the array library's versions of the two
# primitives, so the same source runs on NumPy and TensorFlow.
# ---------------------------------------------------------------------------

def numpy_lib(forest, params):
  return types.SimpleNamespace(
      is_leaf=lambda node: forest.is_leaf[node],
      left=lambda node: forest.left[node],
      right=lambda node: forest.right[node],
      embed=lambda node: params.embedding[forest.word[node]],
      cell=lambda l, r: np.tanh(np.concatenate([l, r], axis=-1) @ params.w
                                + params.b))


def tf_lib(forest, params):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  c = {k: tf.constant(v) for k, v in vars(forest).items()}
  emb, w, b = (tf.constant(params.embedding), tf.constant(params.w),
               tf.constant(params.b))
  return types.SimpleNamespace(
      is_leaf=lambda node: tf.gather(c['is_leaf'], node),
      left=lambda node: tf.gather(c['left'], node),
      right=lambda node: tf.gather(c['right'], node),
      embed=lambda node: tf.gather(emb, tf.gather(c['word'], node)),
      cell=lambda l, r: tf.tanh(tf.concat([l, r], axis=-1) @ w + b))


def make_encoder(lib):
  """A Context whose batched `encode(node)` encodes the subtree at `node`."""
  ctx = ab.Context()

  @ctx.batch()
  def encode(node):
    if ab.truthy(lib.is_leaf(node)):
      return lib.embed(node)
    else:
      h_left = encode(lib.left(node))
      h_right = encode(lib.right(node))
      return lib.cell(h_left, h_right)

  return ctx, encode


# ---------------------------------------------------------------------------
# The reference: each tree alone, plain recursive NumPy on vectors.
# ---------------------------------------------------------------------------

def encode_alone(forest, params, node):
  if forest.is_leaf[node]:
    return params.embedding[forest.word[node]]
  l = encode_alone(forest, params, forest.left[node])
  r = encode_alone(forest, params, forest.right[node])
  return np.tanh(np.concatenate([l, r]) @ params.w + params.b)


def encode_each_alone(forest, params):
  return np.stack([encode_alone(forest, params, int(r)) for r in forest.roots])


def tf_available():
  try:
    from autobatch_vm import tf_backend  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


def best_time(fn, repeats):
  """(result, best seconds) over `repeats` calls after one untimed call."""
  out = fn()
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - start)
  return out, best


# NumPy modes: the `stackless=` each passes (None: the default choice).
NUMPY_MODES = {'numpy': None, 'stackless': True, 'vm': False}


def encode_batched(forest, params, backend='numpy', schedule='most'):
  """Encodes every tree of the forest in one batched call.

  `backend` is 'numpy' (NumPy, the default mode: stackless for this
  program), 'stackless' (NumPy with stackless=True, where the two recursive
  calls of a node run as one call: one frame per tree level), 'vm' (NumPy
  with stackless=False: the stack VM), 'tf' (tf.function) or 'xla'
  (tf.function with jit_compile=True).
  Returns (a function that does so and returns a NumPy array, the batched
  function, and a function returning the statistics of the last call as
  numbers on every backend).
  """
  depth = int(forest.depths.max()) + 2
  if backend in NUMPY_MODES:
    _, encode = make_encoder(numpy_lib(forest, params))
    stackless = NUMPY_MODES[backend]
    return (lambda: encode(forest.roots, max_stack_depth=depth,
                           schedule=schedule, stackless=stackless)), encode, (
                               lambda: encode.last_stats)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _, encode = make_encoder(tf_lib(forest, params))
  roots = tf.constant(forest.roots)
  # tf.function, or XLA (where a stack overflow is raised after the call);
  # `staged.last_stats` are the call's statistics, as numbers.
  staged = ab.stage(encode, jit_compile=backend == 'xla',
                    max_stack_depth=depth, schedule=schedule)
  return (lambda: staged(roots).numpy()), encode, (
      lambda: staged.last_stats)


def main(argv):
  del argv
  rng = np.random.default_rng(FLAGS.seed)
  forest = random_forest(FLAGS.num_trees, FLAGS.min_leaves, FLAGS.max_leaves,
                         FLAGS.vocab, rng)
  params = random_params(FLAGS.hidden, FLAGS.vocab, rng)
  n = FLAGS.num_trees
  print(f'{n} trees, {forest.leaves.min()}..{forest.leaves.max()} leaves '
        f'(mean {forest.leaves.mean():.1f}), heights '
        f'{forest.depths.min()}..{forest.depths.max()}, hidden size '
        f'{FLAGS.hidden}')

  expected, t_alone = best_time(lambda: encode_each_alone(forest, params),
                                FLAGS.repeats)
  print(f'each tree alone (recursive NumPy): {n / t_alone:10.1f} trees/s')

  backends = (['numpy', 'vm', 'tf', 'xla'] if FLAGS.backend == 'all'
              else [FLAGS.backend])
  if not set(backends) <= set(NUMPY_MODES) and not tf_available():
    print('autobatch_vm.tf_backend is not available: skipping TensorFlow.')
    backends = [b for b in backends if b in NUMPY_MODES]
  for backend in backends:
    fn, encode, stats = encode_batched(forest, params, backend,
                                       FLAGS.schedule)
    got, t = best_time(fn, FLAGS.repeats)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    label = {'numpy': 'batched, NumPy (default mode)',
             'stackless': 'batched, NumPy stackless',
             'vm': 'batched, NumPy stack VM',
             'tf': 'batched, TF tf.function',
             'xla': 'batched, TF XLA'}[backend]
    print(f'{label + ":":35s}{n / t:10.1f} trees/s  '
          f'({t_alone / t:.1f}x; matches each tree alone)')
    st = stats()
    what = 'stackless mode, blocks run' if st.stackless else 'VM steps'
    print(f'  {what}: {st.steps}, utilization {st.utilization:.1%}, cell '
          f'evaluations: {int(forest.leaves.sum() - n)} unbatched in '
          f'{cell_runs(encode, forest, FLAGS.schedule, st)} batched matrix '
          'products')


def cell_runs(encode, forest, schedule='most', stats=None):
  """How many times a run (under `schedule`; its `stats`, by default the
  last NumPy run's) executed a block holding `lib.cell` (the one after the
  second call, and under 'most' its copy that follows a leaf: see
  autobatch_vm/passes/leaf_returns.py)."""
  stats = stats or encode.last_stats
  if stats.stackless:   # a stackless run: the typed program's blocks
    blocks = encode.context.program_stackless(
        'encode', [ab.TensorType(forest.roots.dtype, ())]).function(
            'encode').blocks
  else:
    blocks = encode.context.lowered_for_args(
        'encode', [forest.roots], schedule=schedule).blocks
  return sum(stats.block_executions.get(block.label, 0)
             for block in blocks
             if any('lib.cell' in getattr(op, 'text', '')
                    for op in block.instructions))


if __name__ == '__main__':
  define_flags()
  app.run(main)
