"""Per-member forms against batch-aware forms of the same programs.

    python benchmarks/per_member_forms.py                 # B = 64 and 1,024
    python benchmarks/per_member_forms.py --quick         # B = 64, fewer rounds
    python benchmarks/per_member_forms.py --workloads=fibonacci,collatz
    python benchmarks/per_member_forms.py --clock=cpu     # CPU time per call
    python benchmarks/per_member_forms.py --workloads=nuts --backends=numpy

Each workload is written twice: batch-aware (its primitives see the batch:
`benchmarks/workloads.py`'s fibonacci and Collatz, the tree RNN of
`examples/tree_rnn.py`, NUTS of `examples/nuts.py`) and per member
(`per_member=True`: one member's values, its math included; NUTS's
per-member primitives are `nuts.numpy_member_lib` and `tf_member_lib`).
NUTS runs `run_chunk` (NUTS_CHUNK transitions of the logistic regression,
adapting, trees of depth at most NUTS_DEPTH) from the same initial state.
Both run on the same inputs on NumPy, `tf.function` and XLA; the two
forms are timed in turns (`workloads.interleaved_median_times`, medians of
warm calls), and a row per form gives seconds per call, with the
per-member form's ratio to the batch-aware one.  Results are checked equal
before timing.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

import autobatch_vm as ab  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position
from examples import nuts  # pylint: disable=g-import-not-at-top,wrong-import-position
from examples import tree_rnn  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
BACKENDS = ('numpy', 'tf.function', 'xla')
NUTS_CHUNK, NUTS_DEPTH = 5, 10

pm_ctx = ab.Context()


@pm_ctx.batch(per_member=True)
def fibonacci(n):
  if n > 2:
    return fibonacci(n - 1) + fibonacci(n - 2)
  return 1


# The same source as the batch-aware form (it reads as one member's).
collatz = pm_ctx.batch_uncurried(workloads.collatz.python_function,
                                 per_member=True)


def per_member_tree_rnn(forest, params, tensorflow):
  """The tree RNN written for one member: `encode(node)` of one tree."""
  ctx = ab.Context()
  if tensorflow:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    is_leaf, left, right, word = (tf.constant(getattr(forest, k)) for k in
                                  ('is_leaf', 'left', 'right', 'word'))
    embedding, w, b = (tf.constant(params.embedding), tf.constant(params.w),
                       tf.constant(params.b))

    @ctx.batch(per_member=True)
    def encode(node):
      if is_leaf[node]:
        return tf.gather(embedding, word[node])
      h_left = encode(left[node])
      h_right = encode(right[node])
      return tf.tanh(tf.linalg.matvec(w, tf.concat([h_left, h_right], 0),
                                      transpose_a=True) + b)
    return encode
  is_leaf, left, right, word = (forest.is_leaf, forest.left, forest.right,
                                forest.word)
  embedding, w, b = params.embedding, params.w, params.b

  @ctx.batch(per_member=True)
  def encode_numpy(node):
    if is_leaf[node]:
      return embedding[word[node]]
    h_left = encode_numpy(left[node])
    h_right = encode_numpy(right[node])
    return np.tanh(np.concatenate([h_left, h_right]) @ w + b)
  return encode_numpy


def _callers(batch_aware, per_member, args, backend, depth,
             pick=lambda out: out):
  """Two functions of no arguments, one per form, returning NumPy arrays
  (`pick` of the result)."""
  kwargs = {'max_stack_depth': depth}
  if backend == 'numpy':
    # The stack VM for both forms, so that the forms, not the modes, differ.
    return [lambda f=f: np.asarray(pick(f(*args, stackless=False, **kwargs)))
            for f in (batch_aware, per_member)]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tensors = ab.instructions.pattern_map(tf.constant, args)
  def staged(f):
    run = tf.function(lambda *a: f(*a, on_error='status', **kwargs),
                      jit_compile=backend == 'xla', autograph=False)
    return lambda: pick(run(*tensors)[0]).numpy()
  return [staged(f) for f in (batch_aware, per_member)]


def nuts_forms(batch, backend):
  """NUTS's `run_chunk` in both forms, its arguments (the initial state of
  `batch` chains of the logistic regression, adapting) and stack depth."""
  target = nuts.make_target('logistic')
  kind = {'numpy': 'numpy', 'tf.function': 'tf', 'xla': 'xla'}[backend]
  samplers = [nuts.Sampler(target, kind, NUTS_CHUNK, NUTS_DEPTH,
                           per_member=per_member)
              for per_member in (False, True)]
  state = nuts.Sampler(target, 'numpy', NUTS_CHUNK, NUTS_DEPTH).init(
      batch, seed=0)
  return ([s.fns.run_chunk for s in samplers],
          (*state, np.ones(batch, bool)), samplers[0].depth)


def workload_forms(name, batch, backend, rng):
  """(batch-aware function, per-member function, arguments, stack depth)."""
  if name == 'fibonacci':
    n = rng.integers(8, 16, batch)
    return workloads.fibonacci, fibonacci, (n,), 16
  if name == 'collatz':
    n = rng.integers(1, 10_000, batch)
    return workloads.collatz, collatz, (n,), 4
  forest = tree_rnn.random_forest(batch, 2, 16, 100, rng)
  params = tree_rnn.random_params(16, 100, rng)
  tensorflow = backend != 'numpy'
  lib = (tree_rnn.tf_lib if tensorflow else tree_rnn.numpy_lib)(forest,
                                                                params)
  _, batch_aware = tree_rnn.make_encoder(lib)
  return (batch_aware, per_member_tree_rnn(forest, params, tensorflow),
          (forest.roots,), int(forest.depths.max()) + 2)


def main(argv):
  del argv
  sizes = [64] if FLAGS.quick else [64, 1024]
  rounds = 3 if FLAGS.quick else FLAGS.repeats
  print('| workload | backend | B | form | seconds | per-member / '
        'batch-aware |')
  print('|---|---|---|---|---|---|')
  for name in FLAGS.workloads:
    for backend in FLAGS.backends:
      for batch in sizes:
        rng = np.random.default_rng(0)
        if name == 'nuts':   # its samples
          (batch_aware, per_member), args, depth = nuts_forms(batch,
                                                              backend)
          runs = _callers(batch_aware, per_member, args, backend, depth,
                          pick=lambda out: out[2])
        else:
          batch_aware, per_member, args, depth = workload_forms(
              name, batch, backend, rng)
          runs = _callers(batch_aware, per_member, args, backend, depth)
        a, b = runs[0](), runs[1]()
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        t_aware, t_member = workloads.interleaved_median_times(
            runs, rounds, min_seconds=FLAGS.min_seconds,
            clock=time.process_time if FLAGS.clock == 'cpu' else
            time.perf_counter)
        print(f'| {name} | {backend} | {batch} | batch-aware | '
              f'{t_aware:.4g} | |')
        print(f'| {name} | {backend} | {batch} | per-member | '
              f'{t_member:.4g} | {t_member / t_aware:.2f}x |', flush=True)


if __name__ == '__main__':
  flags.DEFINE_list('workloads', ['fibonacci', 'collatz', 'tree_rnn', 'nuts'],
                    'Workloads to time.')
  flags.DEFINE_list('backends', list(BACKENDS), 'numpy, tf.function, xla.')
  flags.DEFINE_boolean('quick', False, 'B = 64 only, 3 rounds.')
  flags.DEFINE_integer('repeats', 7, 'Timed rounds (at least).')
  flags.DEFINE_float('min_seconds', 0.5, 'Rounds until the batch-aware '
                     'form has run this long in all.')
  flags.DEFINE_enum('clock', 'wall', ['wall', 'cpu'], 'Time per call: wall '
                    'time, or the process\'s CPU time (steadier where other '
                    'processes load the machine).')
  app.run(main)
