"""The workloads, each a `Cell`: one workload at one batch size on one
backend, with the baselines doing the same work.

`WORKLOADS[name](backend, batch)` builds a cell: fibonacci and Collatz
(`benchmarks/workloads.py`), the tree-RNN and NUTS examples
(`examples/`), and TFP's own NUTS program on our VM.  `measured` says
which (workload, backend) pairs a run measures, `batch_sizes` at which
sizes.
"""

import functools
import importlib.util
import os
import sys
import time
import warnings

import numpy as np

import autobatch_vm as ab
from benchmarks import options
from benchmarks import tfp_baselines
from benchmarks import workloads

FLAGS = options.FLAGS
ROOT = options.ROOT

# Timed like TFP's runs, under a bare jit_compile=True (where an overflow
# would poison outputs, not raise): the tracing-time warning is known here.
warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)


@functools.lru_cache(maxsize=None)
def example(name):
  """Imports examples/NAME.py (examples are scripts, not a package)."""
  path = os.path.join(ROOT, 'examples', f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'ab_example_{name}', path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


# -- workloads: make(backend, batch) -> Cell ----------------------------------

class Cell:
  """One workload at one batch size on one backend."""

  def __init__(self, run, units, unit, stats=None, alone=None, tfp=None,
               hand=None, floor=None):
    self.run = run          # () -> None, the timed call
    self.units = units      # work units per call (members, trees, leapfrogs)
    self.unit = unit
    self.stats = stats      # () -> RunStats or None
    self.alone = alone      # () -> seconds to do the same work unbatched
    # () -> a call doing the same work by TFP's auto_batching, or by
    # hand-batched code; None where there is none (timed with `run`, in
    # turns: `workloads.interleaved_median_times`).
    self.tfp = tfp
    self.hand = hand
    # () -> a call doing only the workload's expensive primitive, as often
    # as any batched run of the same work must (NUTS: the gradients), or
    # None (see `nuts_gradient_floor`).
    self.floor = floor


def _staged(fn, backend, **kwargs):
  """`fn` on the backend: NumPy as is, TF staged by `ab.stage` (XLA too).

  Returns (call, stats): `stats()` is the RunStats of the last call, with
  numbers on every backend.
  """
  if backend in NUMPY_BACKENDS:
    # 'numpy' is the stack VM, whatever the default mode would pick.
    stackless = backend == 'stackless'
    return (lambda *a: fn(*a, stackless=stackless, **kwargs)), (
        lambda: fn.last_stats)
  staged = ab.stage(fn, jit_compile=(backend == 'xla'), **kwargs)
  return staged.numpy, lambda: staged.last_stats


def _on(backend, x):
  """`x` as the backend's array: NumPy, or an eager TF tensor."""
  if backend in NUMPY_BACKENDS:
    return x
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.nest.map_structure(tf.convert_to_tensor, x)


def _alone_seconds(fn, inputs, batch, backend, sample=8):
  """Time to run every member alone (the dry-run loop: plain Python per
  member, on NumPy or eager TensorFlow).

  Every member is run when that fits in `--alone_seconds` (estimated from
  the first `sample`); otherwise as many as fit, from the first, and the
  time is scaled to the batch.  Members differ in work (a tree's size, a
  fibonacci argument), so a few first members misstate the whole batch:
  the first 16 trees of the B=1024 forest have 15.5 leaves on average, the
  forest 17.0.
  """
  done, spent = 0, 0.0
  k = max(1, min(batch, sample))
  with workloads.no_garbage_collection():
    while done < batch:
      args = [_on(backend, x[done:done + k]) for x in inputs]
      start = time.perf_counter()
      fn(*args, dry_run=True)
      spent += time.perf_counter() - start
      done += k
      left = FLAGS.alone_seconds - spent
      if left <= 0:
        break
      k = min(batch - done, max(1, int(left / (spent / done))))
  return spent * batch / done


fibonacci = workloads.fibonacci


def make_fibonacci(backend, batch):
  n = np.random.default_rng(batch).integers(8, 16, size=batch)
  run, stats = _staged(fibonacci, backend, max_stack_depth=20,
                       schedule=FLAGS.schedule)

  def tfp():
    if backend in NUMPY_BACKENDS and batch > FLAGS.tfp_numpy_max_batch:
      return None
    return tfp_baselines.fibonacci_runner(
        'numpy' if backend in NUMPY_BACKENDS else backend, n)
  return Cell(lambda: run(n), batch, 'members/s', stats,
              lambda: _alone_seconds(fibonacci, [n], batch, backend),
              tfp=tfp)


def make_collatz(backend, batch):
  collatz = workloads.collatz
  n = np.random.default_rng(batch).integers(1, 10**4, size=batch)
  run, stats = _staged(collatz, backend, schedule=FLAGS.schedule)
  return Cell(lambda: run(n), batch, 'members/s', stats,
              lambda: _alone_seconds(collatz, [n], batch, backend))


def make_tree_rnn(backend, batch):
  tr = example('tree_rnn')
  rng = np.random.default_rng(batch)
  forest = tr.random_forest(batch, 2, 32, 100, rng)
  params = tr.random_params(64, 100, rng)
  tf_name = {'numpy': 'vm', 'stackless': 'stackless', 'function': 'tf',
             'xla': 'xla'}[backend]
  fn, encode, stats = tr.encode_batched(forest, params, tf_name,
                                        FLAGS.schedule)

  alone = lambda: _alone_seconds(encode, [forest.roots], batch, backend)
  return Cell(fn, batch, 'trees/s', stats, alone)


NUTS_TRANSITIONS = 5
NUTS_MAX_TREE_DEPTH = 6
NUTS_WARMUP = 100
NUTS_CHAINS = 64   # the chains of the ESS comparison and the targets
# The ESS row of TFP's autobatched NUTS program run on our VM.
TFP_NUTS_OURS = 'TFP autobatched NUTS on autobatch_vm'


@functools.lru_cache(maxsize=None)
def nuts_warm_state(batch):
  """Chains after NUTS_WARMUP adapting iterations (NumPy, not timed), so
  that every backend samples from the typical set at adapted step sizes."""
  nuts = example('nuts')
  sampler = nuts.Sampler(nuts.make_target('logistic'), 'numpy', chunk=25,
                         max_tree_depth=NUTS_MAX_TREE_DEPTH)
  return sampler.warmup(batch, NUTS_WARMUP, seed=batch)


def make_nuts(backend, batch):
  nuts = example('nuts')
  target = nuts.make_target('logistic')
  kind = {'numpy': 'numpy', 'function': 'tf', 'xla': 'xla'}[backend]
  sampler = nuts.Sampler(target, kind, chunk=NUTS_TRANSITIONS,
                         max_tree_depth=NUTS_MAX_TREE_DEPTH,
                         schedule=FLAGS.schedule)
  state = nuts_warm_state(batch)
  adapt = np.zeros(batch, bool)
  leapfrogs = []
  most = []   # the most leapfrogs any chain took in a call
  if backend == 'numpy':
    call = functools.partial(sampler._call, 'run_chunk', *state, adapt)  # pylint: disable=protected-access
    stats = lambda: sampler.last_stats
  else:
    # As TFP's samplers are run (tfp_baselines.nuts_runner): the inputs
    # made tensors once, the samples and leapfrog counts read as NumPy.
    # (Through `Sampler`, which takes and returns NumPy state, a call took
    # 0.7 ms more under XLA, 3% of it.)
    staged = ab.stage(sampler.fns.run_chunk, jit_compile=backend == 'xla',
                      max_stack_depth=sampler.depth,
                      schedule=sampler.schedule)
    call = functools.partial(staged, *_on(backend, (*state, adapt)))
    stats = lambda: staged.last_stats

  def run():
    out = call()
    np.asarray(out[2])   # the samples
    counts = np.asarray(out[3])
    leapfrogs.append(float(np.sum(counts)))
    most.append(int(np.max(counts)))

  run()   # warm-up also measures the work (leapfrogs) per call
  cell = Cell(run, leapfrogs[-1], 'leapfrogs/s', stats)
  cell.floor = lambda: nuts_gradient_floor(nuts, backend, target, state,
                                           most[-1])

  def alone():
    point, da, seeds, counter = state
    k = min(batch, 2)
    first = lambda x: x[:k]
    args = [_on(backend, ab.instructions.pattern_map(first, a))
            for a in (point, da, seeds, counter, adapt)]
    with workloads.no_garbage_collection():
      start = time.perf_counter()
      out = sampler.fns.run_chunk(*args, dry_run=True)
      seconds = time.perf_counter() - start
    return seconds / max(float(np.sum(out[3])), 1.0) * cell.units
  cell.alone = alone
  if backend != 'numpy':
    cell.tfp = lambda: tfp_nuts_baseline('autobatched', backend, batch)
    cell.hand = lambda: tfp_nuts_baseline('unrolled', backend, batch)
  return cell


_QUICK_BASELINES = {}


def tfp_nuts_baseline(kind, backend, batch):
  """A call of TFP's NUTS (`tfp_baselines.nuts_runner` kind 'autobatched',
  on TFP's VM, or 'unrolled', hand-batched) doing a NUTS cell's work: from
  the warmed-up chains at their step sizes, NUTS_TRANSITIONS transitions.
  None where TFP is missing, and for 'autobatched' under --notfp_vm_nuts.
  Under --quick, the nuts and tfp_nuts cells share one (traced once)."""
  if kind == 'autobatched' and not FLAGS.tfp_vm_nuts:
    return None
  key = (kind, backend, batch)
  if FLAGS.quick and key in _QUICK_BASELINES:
    return _QUICK_BASELINES[key]
  target = example('nuts').make_target('logistic')
  point, da = nuts_warm_state(batch)[:2]
  run = tfp_baselines.nuts_runner(kind, backend, target, point.theta,
                                  np.exp(da.log_eps_bar), NUTS_TRANSITIONS,
                                  NUTS_MAX_TREE_DEPTH)[0]
  if FLAGS.quick:
    _QUICK_BASELINES[key] = run
  return run


def make_tfp_nuts(backend, batch):
  """TFP's own NUTS program (`NoUTurnSampler` of TFP's
  `nuts_autobatching.py`, loaded from the installed wheel with only its
  `auto_batching` import rebound: `tfp_baselines.tfp_nuts_on_autobatch_vm`)
  on our VM, against the same program on TFP's VM ("TFP VM") and the
  hand-batched sampler, from the warmed-up chains at their step sizes."""
  nuts = example('nuts')
  target = nuts.make_target('logistic')
  point, da = nuts_warm_state(batch)[:2]
  eps = np.exp(da.log_eps_bar)
  run, out = tfp_baselines.nuts_runner(
      'autobatched_ours', backend, target, point.theta, eps,
      NUTS_TRANSITIONS, NUTS_MAX_TREE_DEPTH)
  run()   # warm-up also measures the work (leapfrogs) per call
  return Cell(run, out['leapfrogs'], 'leapfrogs/s',
              tfp=lambda: tfp_nuts_baseline('autobatched', backend, batch),
              hand=lambda: tfp_nuts_baseline('unrolled', backend, batch))


def nuts_gradient_floor(nuts, backend, target, state, evaluations):
  """A call that runs `evaluations` leapfrog steps of every chain, back
  to back in a plain loop on `backend` (NumPy, or a `tf.function`, under
  XLA for 'xla'): the example's own `leapfrog`, one gradient of the
  target per step, from the chains of `state` at their step sizes.

  Given the most leapfrogs that any chain takes in a call of ours (35
  over 5 transitions at 64 chains), this is the least time in which any
  sampler evaluates those gradients batched over the chains: it must
  wait for that chain.  Our time over it is what our sampler's own
  arithmetic and our VM cost beyond the gradients, and a baseline's time
  over it is the most any sampler could beat that baseline by.
  """
  point, da = state[0], state[1]
  step = np.exp(np.asarray(da.log_eps_bar))
  if backend == 'numpy':
    leapfrog = nuts.numpy_lib(target).leapfrog

    def run():
      p = point
      for _ in range(evaluations):
        p = leapfrog(p, step)
      np.asarray(p.theta)
    return run
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  leapfrog = nuts.tf_lib(target).leapfrog
  start = _on(backend, point)
  step = tf.constant(step)

  def loop(p):
    def body(i, p):
      return i + 1, leapfrog(p, step)
    return tf.while_loop(lambda i, p: i < evaluations, body,
                         (tf.constant(0), p))[1]
  staged = tf.function(loop, jit_compile=backend == 'xla', autograph=False)

  def run_tf():
    np.asarray(staged(start).theta)
  return run_tf


WORKLOADS = {'fibonacci': make_fibonacci, 'collatz': make_collatz,
             'tree_rnn': make_tree_rnn, 'nuts': make_nuts,
             'tfp_nuts': make_tfp_nuts}
NUTS_WORKLOADS = ('nuts', 'tfp_nuts')
# The NumPy backends (no TensorFlow needed).  Stackless mode is measured
# where it changes the batching: recursions whose calls run together
# (collatz has no calls, NUTS's two subtree calls depend on each other).
NUMPY_BACKENDS = ('numpy', 'stackless')
STACKLESS_WORKLOADS = ('fibonacci', 'tree_rnn')


def measured(workload, backend):
  """Whether the run measures `workload` on `backend`."""
  if workload == 'tfp_nuts':   # TFP's program: TensorFlow, with TFP
    return backend not in NUMPY_BACKENDS and tfp_baselines.available()
  return backend != 'stackless' or workload in STACKLESS_WORKLOADS


# --quick: one small batch per workload (NUTS: chains).
QUICK_BATCH = {'fibonacci': 64, 'collatz': 64, 'tree_rnn': 64, 'nuts': 16,
               'tfp_nuts': 16}


def batch_sizes(workload):
  """The batch sizes (NUTS: chains) at which a run measures `workload`."""
  if FLAGS.batch_sizes:
    return [int(b) for b in FLAGS.batch_sizes]
  if FLAGS.quick:
    return [QUICK_BATCH[workload]]
  if workload == 'tfp_nuts':
    return [NUTS_CHAINS, 256]
  if workload == 'tree_rnn':   # the target is at B=256
    return [1, 64, 256, 1024]
  return [1, 64, 256] if workload == 'nuts' else [1, 64, 1024]
