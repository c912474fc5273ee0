"""How the cost of a run grows with `max_stack_depth`, per backend.

    python benchmarks/scaling.py [--depths=16,64,256,1000] [--batch=1024]
                                 [--modes=function,xla] [--repeats=5]
                                 [--no_tfp]

Fibonacci, n ~ U[8, 16), at each stack capacity: ours under `tf.function`
and under XLA, and TFP's `auto_batching` VM at the same capacity when TFP
imports.  Every cell is traced and checked against plain Python first,
then all are timed in turns (`workloads.interleaved_median_times`), so
they meet the same machine conditions; the table gives medians and each
cell's time against its mode's smallest depth.
"""

import os
import sys
import warnings

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list('depths', ['16', '64', '256', '1000'], 'max_stack_depth.')
flags.DEFINE_integer('batch', 1024, 'Batch size.')
flags.DEFINE_list('modes', ['function', 'xla'], 'function, xla.')
flags.DEFINE_integer('repeats', 5, 'Timed rounds (median reported).')
flags.DEFINE_boolean('no_tfp', False, 'Skip TFP\'s VM.')


def cells(modes, depths, batch, with_tfp):
  """{(mode, system, depth): call}, each checked once."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(batch)
  n_np = rng.integers(8, 16, size=batch)
  n_tf = tf.constant(n_np)
  expected = [workloads.fibonacci_ref(int(k)) for k in n_np]
  out = {}
  for mode in modes:
    for depth in depths:
      ours = tf.function(
          lambda x, d=depth: workloads.fibonacci(x, max_stack_depth=d),
          jit_compile=(mode == 'xla'))
      systems = [('ours', lambda fn=ours: fn(n_tf).numpy())]
      if with_tfp:
        # TFP's VM at the same depth; its first call (the trace) is quiet.
        theirs = tfp_baselines.fibonacci_runner(mode, n_np,
                                                max_stack_depth=depth)
        if theirs is not None:
          systems.append(('TFP VM', lambda fn=theirs: np.asarray(fn())))
      for name, fn in systems:
        if fn().tolist() != expected:
          raise AssertionError(f'{name} wrong in {mode} at depth {depth}')
        out[(mode, name, depth)] = fn
      print(f'traced {mode} at depth {depth}', flush=True)
  return out


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  # Timed like TFP's runs, under a bare jit_compile=True.
  warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)
  depths = [int(d) for d in FLAGS.depths]
  runs = cells(FLAGS.modes, depths, FLAGS.batch, not FLAGS.no_tfp)
  keys = list(runs)
  times = dict(zip(keys, workloads.interleaved_median_times(
      [runs[k] for k in keys], FLAGS.repeats)))
  print(f'TensorFlow {tf.__version__}; fibonacci, n ~ U[8, 16), '
        f'B={FLAGS.batch}, medians of {FLAGS.repeats} rounds in turns')
  print(f'{"mode":>9} {"system":>7} {"depth":>6} {"time (ms)":>10} '
        f'{"vs depth " + str(depths[0]):>12} {"ours faster":>12}')
  for mode, name, depth in keys:
    t = times[(mode, name, depth)]
    base = times[(mode, name, depths[0])]
    theirs = times.get((mode, 'TFP VM', depth))
    ratio = f'{theirs / t:.2f}x' if name == 'ours' and theirs else '-'
    print(f'{mode:>9} {name:>7} {depth:>6} {t * 1000:>10.1f} '
          f'{t / base:>11.2f}x {ratio:>12}', flush=True)


if __name__ == '__main__':
  app.run(main)
