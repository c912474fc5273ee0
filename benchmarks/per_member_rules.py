"""The NumPy batching rules' cost per primitive, at two batch sizes.

    python benchmarks/per_member_rules.py [--batch_sizes=64,4096]
        [--calls=2000] [--repeats=5]

Each row is one per-member operation run through the rules
(`per_member.numpy_rules`, on `MemberArray`s) and the same operation
written by hand on the batched arrays.  The time is CPU time per call
(`time.process_time`, the least of `--repeats` runs of `--calls` calls),
so other processes on the machine count less; the overhead is the rules'
time less the hand-written one.  It should not grow with the batch size:
the rules do the same Python work for any number of members.
"""

import os
import sys
import time
import timeit

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from autobatch_vm.per_member import numpy_rules as nr  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_list('batch_sizes', ['64', '4096'], 'Batch sizes.')
flags.DEFINE_integer('calls', 2000, 'Calls per timed run.')
flags.DEFINE_integer('repeats', 5, 'Timed runs; the least counts.')
FLAGS = flags.FLAGS

# (name, the rules' statement, the hand-written batched statement).
CASES = (
    ('v + w', 'V + W', 'v + w'),
    ('v * 2.5', 'V * 2.5', 'v * 2.5'),
    ('v[i]', 'V[I]', 'v[rows, i]'),
    ('setitem(v, i, s)', 'nr.setitem(V, I, S)',
     'x = v.copy(); x[rows, i] = s'),
    ('np.sum(m, axis=1)', 'np.sum(M, axis=1)', 'np.sum(m, axis=2)'),
    ('np.dot(m, v)', 'np.dot(M, V)', "np.einsum('zij,zj->zi', m, v)"),
    ('np.linalg.solve(a, b)', 'np.linalg.solve(A, B)',
     'np.linalg.solve(a, b[..., None])[..., 0]'),
    ('np.where(v > 0, v, s)', 'np.where(V > 0, V, S)',
     'np.where(v > 0, v, s[:, None])'),
)


def namespace(batch):
  """The batched inputs, and their `MemberArray`s (capitalized)."""
  rng = np.random.default_rng(0)
  arrays = {
      'v': rng.normal(size=(batch, 5)), 'w': rng.normal(size=(batch, 5)),
      'm': rng.normal(size=(batch, 3, 5)), 'i': rng.integers(0, 5, batch),
      's': rng.normal(size=batch),
      'a': rng.normal(size=(batch, 4, 4)) + 4 * np.eye(4),
      'b': rng.normal(size=(batch, 4)),
  }
  names = dict(arrays, np=np, nr=nr, rows=np.arange(batch))
  names.update({k.upper(): nr.MemberArray(x) for k, x in arrays.items()})
  return names


def per_call(statement, names, calls, repeats):
  """CPU microseconds per run of `statement`, the least of `repeats`."""
  best = min(timeit.repeat(statement, globals=names, number=calls,
                           repeat=repeats, timer=time.process_time))
  return best / calls * 1e6


def main(argv):
  del argv
  print(f'{"operation":24s} {"batch":>6s} {"rules us":>9s} {"hand us":>8s} '
        f'{"overhead us":>11s}')
  for batch in [int(b) for b in FLAGS.batch_sizes]:
    names = namespace(batch)
    for name, rules, hand in CASES:
      t_rules = per_call(rules, names, FLAGS.calls, FLAGS.repeats)
      t_hand = per_call(hand, names, FLAGS.calls, FLAGS.repeats)
      print(f'{name:24s} {batch:6d} {t_rules:9.2f} {t_hand:8.2f} '
            f'{t_rules - t_hand:11.2f}')


if __name__ == '__main__':
  app.run(main)
