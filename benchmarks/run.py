"""All benchmarks side by side: workloads x backends x batch sizes.

    python benchmarks/run.py            # full: B = 1, 64, 1024 (NUTS 1, 64, 256)
    python benchmarks/run.py --quick    # B = 1, 64 (NUTS 1, 16), fewer repeats
    python benchmarks/run.py --workloads=fibonacci,collatz --backends=numpy

For each cell (under --schedule, the library's default 'most'): median
wall time of at least `--repeats` calls after a warm-up call (more, up to
`--max_repeats`, until they add up to `--min_seconds`), ours and the TFP
baselines of the cell timed in turns (a call of each per round),
throughput in the workload's unit, peak memory (NumPy: traced
allocations; TensorFlow: the CPU allocator's bytes in use, measured in a
separate process, see `measure_memory_in_a_process`), VM steps and mean
utilization (a staged call returns its counts), and baselines measured
in the same run: every member run alone on the same backend (the dry-run
loop: plain Python per member on NumPy arrays or eager TF tensors; every
member where that takes under --alone_seconds, else the first ones that
fit, scaled) and, when tensorflow_probability is installed (TFP 0.25 with
TensorFlow 2.18, or 2.21 with tf-keras 2.21: see
benchmarks/tfp_baselines.py), TFP's
auto_batching VM on the same fibonacci, TFP's autobatched NUTS and its
hand-batched NUTS (`tfp.mcmc.NoUTurnSampler`) from the same chains and
step sizes.  For NUTS it also compares effective samples per second
(--nuts_ess_samples), and every workload and backend runs under both
schedules at one batch size (--schedule_batch).  Each (workload, backend)
is measured in a fresh Python process (--one_process: all in this one).
Writes benchmarks/results/results.md (with the targets the benchmarks are
held to, met or not as this run measured them: `targets`), results.json
and results.png.
"""

import functools
import importlib.util
import json
import os
import platform

# Multi-threaded OpenBLAS is pathological on small shared machines (a
# [64,25]@[25,1000] product: 31 ms with 2 threads, 0.7 ms with 1).
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings

from absl import app
from absl import flags
import numpy as np

import autobatch_vm as ab
from autobatch_vm import virtual_machine

# Timed like TFP's runs, under a bare jit_compile=True (where an overflow
# would poison outputs, not raise): the tracing-time warning is known here.
warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_boolean('quick', False, 'Small batch sizes and repeats.')
flags.DEFINE_list('workloads', ['fibonacci', 'collatz', 'tree_rnn', 'nuts',
                               'tfp_nuts'],
                  'Workloads to run.')
flags.DEFINE_list('backends', ['numpy', 'stackless', 'function', 'xla'],
                  'numpy (the stack VM: stackless=False), stackless '
                  '(NumPy with stackless=True: fibonacci and tree-RNN '
                  'only, the programs NumPy\'s default mode runs '
                  'stackless), function (tf.function), xla '
                  '(jit_compile=True).')
flags.DEFINE_integer('repeats', 3, 'Timed repeats per cell (median).')
flags.DEFINE_integer('nuts_repeats', 7, 'Least timed repeats per NUTS cell '
                     '(a call takes 0.02-0.6 s, and this machine\'s speed '
                     'drifts).')
flags.DEFINE_float('min_seconds', 1.0, 'More repeats (up to --max_repeats) '
                   'until our timed calls of a cell add up to this.')
flags.DEFINE_integer('max_repeats', 25, 'Most timed repeats per cell.')
flags.DEFINE_float('alone_seconds', 2.0, 'Time for the "alone" baseline of '
                   'a cell: every member runs alone if that fits, else as '
                   'many as fit (the time scaled to the batch).')
flags.DEFINE_enum('schedule', 'most', ['lowest', 'most'],
                  'VM schedule of the main table (the library default).')
flags.DEFINE_integer('schedule_batch', 64, 'Batch size (NUTS: chains) of '
                     'the table comparing both schedules; 0: no table.')
flags.DEFINE_integer('nuts_ess_samples', 500, 'Samples per chain for the '
                     'NUTS effective-samples-per-second comparison at 64 '
                     'chains (0: skip).  Fewer make a noisy estimate: over '
                     'ten windows of 100 samples, the ratio of our min ESS '
                     'to the hand-batched sampler\'s ranged 0.88-1.06 '
                     '(0.96-0.97 over 500 or 1,000 samples).')
flags.DEFINE_integer('nuts_ess_chunk', 25, 'Transitions per call of our '
                     'sampler in the NUTS ESS comparison: the NUTS '
                     'example\'s default chunk.  Within a call each chain '
                     'runs its own transitions, and the chains wait for '
                     'each other only at its end (TFP\'s samplers draw all '
                     'the samples in one call).  The draws are the same for '
                     'any chunk; 50 transitions at 64 chains took 442 ms in '
                     'calls of 5 and 420 ms in calls of 25 on tf.function, '
                     '268 and 229 ms under XLA.')
flags.DEFINE_integer('nuts_processes', 3, 'Fresh processes measuring NUTS '
                     'on each TensorFlow backend; each figure is the median '
                     'over them.  In one process in four or five, graph-'
                     'mode steps run at a slower speed for its whole life '
                     '(the guide\'s "Two speeds per process"), and ours, '
                     'many small ops per step, slow more than the hand-'
                     'batched sampler: its time over ours went from 0.70 '
                     'to 0.63 in such a process.')
flags.DEFINE_integer('nuts_ess_repeats', 3, 'Timed runs per system of the '
                     'NUTS ESS comparison, in turns, each drawing new '
                     'numbers (median time, median ESS).')
flags.DEFINE_integer('tfp_numpy_max_batch', 64, 'Largest B for TFP\'s NumPy '
                     'VM (228 s at B=1024).')
flags.DEFINE_string('out', os.path.join(os.path.dirname(__file__), 'results'),
                    'Directory for results.md and results.png.')
flags.DEFINE_boolean('one_process', False, 'Measure every workload and '
                     'backend in this process, instead of each (workload, '
                     'backend) in a fresh one.  Faster to start, but one '
                     'backend\'s leftovers slow the next: after graph-mode '
                     'runs, XLA runs of every system here took 20% longer, '
                     'and after a full run TFP\'s autobatched NUTS 5x.')
flags.DEFINE_string('worker', None, 'Internal: measure --workloads on '
                    '--backends in this process and write the rows as JSON '
                    'to this path.')
flags.DEFINE_string('memory_worker', None, 'Internal: measure the peak '
                    'memory of the first of --workloads on the first of '
                    '--backends at --memory_batch in this process (started '
                    'with TF_CPU_ALLOCATOR_USE_BFC=true) and write it as '
                    'JSON to this path.')
flags.DEFINE_integer('memory_batch', 1, 'Internal: see --memory_worker.')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def _example(name):
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
  tr = _example('tree_rnn')
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
  nuts = _example('nuts')
  sampler = nuts.Sampler(nuts.make_target('logistic'), 'numpy', chunk=25,
                         max_tree_depth=NUTS_MAX_TREE_DEPTH)
  return sampler.warmup(batch, NUTS_WARMUP, seed=batch)


def make_nuts(backend, batch):
  nuts = _example('nuts')
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
    point, da = state[0], state[1]
    eps = np.exp(da.log_eps_bar)

    def tfp_nuts(kind):
      return tfp_baselines.nuts_runner(kind, backend, target, point.theta,
                                       eps, NUTS_TRANSITIONS,
                                       NUTS_MAX_TREE_DEPTH)[0]
    cell.tfp = lambda: tfp_nuts('autobatched')
    cell.hand = lambda: tfp_nuts('unrolled')
  return cell


def make_tfp_nuts(backend, batch):
  """TFP's own NUTS program (`NoUTurnSampler` of TFP's
  `nuts_autobatching.py`, loaded from the installed wheel with only its
  `auto_batching` import rebound: `tfp_baselines.tfp_nuts_on_autobatch_vm`)
  on our VM, against the same program on TFP's VM ("TFP VM") and the
  hand-batched sampler, from the warmed-up chains at their step sizes."""
  nuts = _example('nuts')
  target = nuts.make_target('logistic')
  point, da = nuts_warm_state(batch)[:2]
  eps = np.exp(da.log_eps_bar)

  def runner(kind):
    return tfp_baselines.nuts_runner(kind, backend, target, point.theta, eps,
                                     NUTS_TRANSITIONS, NUTS_MAX_TREE_DEPTH)
  run, out = runner('autobatched_ours')
  run()   # warm-up also measures the work (leapfrogs) per call
  return Cell(run, out['leapfrogs'], 'leapfrogs/s',
              tfp=lambda: runner('autobatched')[0],
              hand=lambda: runner('unrolled')[0])


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


def batch_sizes(workload):
  if workload == 'tfp_nuts':
    return [16] if FLAGS.quick else [NUTS_CHAINS, 256]
  if FLAGS.quick:
    return [1, 16] if workload == 'nuts' else [1, 64]
  if workload == 'tree_rnn':   # the issue's target is at B=256
    return [1, 64, 256, 1024]
  return [1, 64, 256] if workload == 'nuts' else [1, 64, 1024]


def nuts_ess(backends, chains=NUTS_CHAINS):
  """Effective samples per second, NUTS_MAX_TREE_DEPTH, from the warmed
  chains: ours per backend, and TFP's two samplers when installed.

  Each system draws the same number of samples from the same start; after
  a warm-up call of each, the systems of a backend are run in turns,
  --nuts_ess_repeats times, and a row has the median time and the median
  ESS of its runs.  (A single timed run was not enough: on a shared
  2-core machine, our XLA run of 500 samples took 3.74 s once and 2.52 s
  the next time.)  Every run of every system draws new numbers (ours: the
  chains' seeds plus the run's index; the hand-batched sampler: its
  stateless seed; TFP's autobatched sampler does so at each call anyway).
  The min ESS of one draw is a noisy figure: over 14 seeds of our sampler
  it ranged from 33.2k to 37.5k for 64 chains x 500 samples.
  """
  nuts = _example('nuts')
  target = nuts.make_target('logistic')
  num = FLAGS.nuts_ess_samples
  chunk = ess_chunk()
  state = nuts_warm_state(chains)
  eps = np.exp(state[1].log_eps_bar)
  rows = []

  for backend in backends:
    if not measured('nuts', backend):
      continue
    kind = {'numpy': 'numpy', 'function': 'tf', 'xla': 'xla'}[backend]
    # In calls of --nuts_ess_chunk transitions, as a user would run it:
    # the samples array of one call is part of the VM state (a step
    # under XLA costs in proportion to what the blocks write, and `put`
    # writes it whole), so not all the samples in one call.
    sampler = nuts.Sampler(target, kind, chunk=chunk,
                           max_tree_depth=NUTS_MAX_TREE_DEPTH)
    adapt = np.zeros(chains, bool)

    def ours(draw, sampler=sampler, adapt=adapt):
      point, da, seeds, counter = state
      seeds = seeds + np.uint64(draw)   # draw k's numbers (k = 0: warm-up)
      chunks = []
      for _ in range(-(-num // chunk)):
        point, da, samples, _, counter = sampler._call(  # pylint: disable=protected-access
            'run_chunk', point, da, seeds, counter, adapt)
        chunks.append(np.asarray(samples))
      return np.concatenate(chunks, axis=1)[:, :num]
    systems = {'autobatch_vm': ours}     # name -> () -> [chains, n, dim]
    if backend != 'numpy' and tfp_baselines.available():
      for tfp_kind, name in TFP_NUTS_SYSTEMS:
        run, out = tfp_baselines.nuts_runner(
            tfp_kind, backend, target, state[0].theta, eps, num,
            NUTS_MAX_TREE_DEPTH)

        def theirs(draw, run=run, out=out):
          run(draw=draw)
          return np.swapaxes(out['samples'], 0, 1)
        systems[name] = theirs
    names = list(systems)
    drawn = {name: [] for name in names}   # samples per call, warm-up first
    # Each call of a system draws new numbers (call k: draw k), so its
    # median ESS is over different draws, ours and the hand-batched
    # sampler's as much as the autobatched one's, which draws anew anyway.
    times = workloads.interleaved_median_times(
        [lambda name=name: drawn[name].append(
            systems[name](len(drawn[name]))) for name in names],
        max(FLAGS.nuts_ess_repeats, 1))
    seconds = dict(zip(names, times))
    ess = {name: [nuts.effective_sample_size(x) for x in drawn[name][1:]]
           for name in names}
    for name in names:
      row = dict(system=name, backend=backend, seconds=seconds[name],
                 ess_min=float(np.median([e.min() for e in ess[name]])),
                 ess_median=float(np.median([np.median(e)
                                             for e in ess[name]])),
                 runs=len(ess[name]))
      rows.append(row)
      print(f'  ESS {name:<26} {backend:<8} {row["seconds"]:7.2f} s  min '
            f'ESS/s {row["ess_min"] / row["seconds"]:8.1f}', flush=True)
  return rows


# TFP's samplers in the ESS comparison: (nuts_runner kind, row name).
TFP_NUTS_SYSTEMS = (('autobatched', 'TFP autobatched NUTS'),
                    ('autobatched_ours', TFP_NUTS_OURS),
                    ('unrolled', 'TFP NoUTurnSampler'))


def ess_chunk():
  """Transitions per call of our sampler in the ESS comparison."""
  return max(1, min(FLAGS.nuts_ess_chunk, FLAGS.nuts_ess_samples))


def ess_markdown(rows, chains=NUTS_CHAINS):
  runs = max((r.get('runs', 1) for r in rows), default=1)
  processes = max((r.get('processes', 1) for r in rows), default=1)
  lines = [f'NUTS, logistic regression, {chains} chains, '
           f'{FLAGS.nuts_ess_samples} samples per chain after '
           f'{NUTS_WARMUP} warm-up iterations, same start and step sizes; '
           f'time and ESS are medians of {runs} runs per system, each '
           'drawing new numbers, the systems of a backend run in turns' + (
               f' (TensorFlow: then the medians over {processes} fresh '
               'processes)' if processes > 1 else '') +
           f'; ours in calls of {ess_chunk()} transitions, TFP\'s samplers '
           'in one call:',
           '', '| system | backend | time (s) | min ESS | min ESS/s | '
           'median ESS/s |', '|---|---|---|---|---|---|']
  for r in rows:
    lines.append(f'| {r["system"]} | {r["backend"]} | {r["seconds"]:.2f} | '
                 f'{r["ess_min"]:.0f} | {r["ess_min"] / r["seconds"]:.1f} | '
                 f'{r["ess_median"] / r["seconds"]:.1f} |')
  return '\n'.join(lines)


def per_process_markdown(results):
  """The NUTS comparisons measured in several processes, process by
  process: there the systems ran in turns, under the same machine
  conditions, while the medians above pair each system's middle process
  with another system's.  Empty when nothing was measured so."""
  lines = []
  for r in results['rows']:
    if r.get('processes', 1) < 2 or r['workload'] not in NUTS_WORKLOADS:
      continue
    for key, name in (('tfp_seconds', 'TFP autobatched time / ours'),
                      ('hand_seconds', 'hand-batched time / ours')):
      theirs = r.get(key + '_each') or []
      ratios = [_ratio(t, s) for t, s in zip(theirs, r['seconds_each'])]
      if any(x is not None for x in ratios):
        lines.append(_process_line(
            f'NUTS, {r["batch"]} chains, {r["backend"]}: {name}', ratios))
  by_backend = {}
  for r in results['ess']:
    if r.get('processes', 1) >= 2:
      by_backend.setdefault(r['backend'], {})[r['system']] = r
  for backend, systems in by_backend.items():
    if 'autobatch_vm' not in systems:
      continue
    ours = _ess_rates(systems['autobatch_vm'])
    for name, theirs in systems.items():
      if name != 'autobatch_vm':
        ratios = [_ratio(a, b) for a, b in zip(ours, _ess_rates(theirs))]
        lines.append(_process_line(
            f'NUTS, {NUTS_CHAINS} chains, {backend}: our min ESS/s / '
            f'{name}\'s', ratios))
  if not lines:
    return ''
  return '\n'.join(['Per process (the targets above use the medians '
                    'over processes of each system):', '',
                    '| comparison | each process | median |', '|---|---|---|']
                   + lines)


def floor_markdown(rows):
  """NUTS's time beside its gradient floor (`nuts_gradient_floor`), per
  row that measured it; empty if none did."""
  measured_rows = [r for r in rows if r.get('floor_seconds')]
  if not measured_rows:
    return ''
  lines = [
      'NUTS\'s gradients alone: as many batched leapfrog steps as the '
      'chain with the most leapfrogs in our call took, back to back in a '
      'plain loop on the same backend, timed in turns with the row\'s '
      'systems.  Every sampler of the row evaluates at least those '
      'gradients, so "ours - gradients" is what our sampler\'s arithmetic '
      'and our VM cost beyond them, '
      'and "TFP autobatched / gradients" is the most by which any sampler '
      'could beat TFP\'s autobatched NUTS by time:', '',
      '| backend | chains | ours (s) | gradients alone (s) | ours - '
      'gradients (s) | gradients / ours | TFP autobatched / gradients | '
      'hand-batched / gradients |', '|---|---|---|---|---|---|---|---|']
  for r in measured_rows:
    floor = r['floor_seconds']
    lines.append(
        f'| {r["backend"]} | {r["batch"]} | {r["seconds"]:.4f} | '
        f'{floor:.4f} | {r["seconds"] - floor:.4f} | '
        f'{floor / r["seconds"]:.2f} | '
        f'{_fmt(_ratio(r.get("tfp_seconds"), floor), ".2f")} | '
        f'{_fmt(_ratio(r.get("hand_seconds"), floor), ".2f")} |')
  return '\n'.join(lines)


def _ess_rates(row):
  """Min ESS per second of an ESS row, process by process."""
  return [None if s is None or e is None else e / s
          for e, s in zip(row['ess_min_each'], row['seconds_each'])]


def _process_line(what, ratios):
  known = [x for x in ratios if x is not None]
  each = ', '.join('-' if x is None else f'{x:.2f}' for x in ratios)
  middle = f'{statistics.median(known):.2f}' if known else '-'
  return f'| {what} | {each} | {middle} |'


# The targets the benchmarks are held to (issue 6), as ratios above 1
# where ours is better: times as theirs / ours, ESS/s as ours / theirs.


def _ratio(num, den):
  """num / den, or None where either was not measured (None or 0)."""
  return num / den if num and den else None


def _seconds(rows, workload, backend, batch, key='seconds'):
  """The cell's time under `key` (ours, or a baseline's), or None."""
  for r in rows:
    if (r['workload'], r['backend'], r['batch']) == (workload, backend,
                                                     batch):
      return r.get(key)
  return None


def _time_ratio(rows, workload, backend, batch, key):
  """A baseline's time (`key`) over ours in the cell, or None."""
  return _ratio(_seconds(rows, workload, backend, batch, key),
                _seconds(rows, workload, backend, batch))


def _ess_ratio(ess, backend, system, ours='autobatch_vm'):
  """`ours`'s min ESS/s over `system`'s on `backend`, or None."""
  per = {(e['system'], e['backend']): _ratio(e['ess_min'], e['seconds'])
         for e in ess}
  return _ratio(per.get((ours, backend)), per.get((system, backend)))


def targets(rows, ess):
  """Issue 6's targets as this run measured them: a list of dicts
  (target, bound, at_least, measured, met); `measured` and `met` are None
  where the run did not measure the cell (a --quick run, no TFP)."""
  out = []

  def add(target, at_least, bound, measured):
    met = None
    if measured is not None:
      met = measured >= bound if at_least else measured <= bound
    out.append(dict(target=target, bound=bound, at_least=at_least,
                    measured=measured, met=met))
  add('fibonacci, NumPy, B=64: TFP VM time / ours', True, 10,
      _time_ratio(rows, 'fibonacci', 'numpy', 64, 'tfp_seconds'))
  add('fibonacci, NumPy: our time at B=1024 / at B=64', False, 3,
      _ratio(_seconds(rows, 'fibonacci', 'numpy', 1024),
             _seconds(rows, 'fibonacci', 'numpy', 64)))
  for backend, name in (('function', 'tf.function'), ('xla', 'XLA')):
    add(f'fibonacci, {name}, B=1024: TFP VM time / ours', True, 2,
        _time_ratio(rows, 'fibonacci', backend, 1024, 'tfp_seconds'))
  for backend, name in (('function', 'tf.function'), ('xla', 'XLA')):
    at = f'NUTS, {NUTS_CHAINS} chains, {name}'
    add(f'{at}: TFP autobatched time / ours', True, 2,
        _time_ratio(rows, 'nuts', backend, NUTS_CHAINS, 'tfp_seconds'))
    add(f'{at}: our min ESS/s / TFP autobatched\'s', True, 2,
        _ess_ratio(ess, backend, 'TFP autobatched NUTS'))
    # "Within 1.5x of the hand-batched sampler": at least 1/1.5 of it.
    add(f'{at}: hand-batched time / ours', True, 1 / 1.5,
        _time_ratio(rows, 'nuts', backend, NUTS_CHAINS, 'hand_seconds'))
    add(f'{at}: our min ESS/s / hand-batched\'s', True, 1 / 1.5,
        _ess_ratio(ess, backend, 'TFP NoUTurnSampler'))
  for backend, name in (('function', 'tf.function'), ('xla', 'XLA')):
    at = f'TFP\'s NUTS program, {NUTS_CHAINS} chains, {name}'
    add(f'{at}: on TFP\'s VM / on ours, time', True, 2,
        _time_ratio(rows, 'tfp_nuts', backend, NUTS_CHAINS, 'tfp_seconds'))
    add(f'{at}: min ESS/s on ours / on TFP\'s VM', True, 2,
        _ess_ratio(ess, backend, 'TFP autobatched NUTS', TFP_NUTS_OURS))
  # NumPy's default mode runs the tree-RNN stackless (a branching
  # recursion); the stack VM (stackless=False, the 'numpy' rows) is in the
  # table but is not what a call gets by default here.
  for backend, name in (('stackless', 'NumPy (default mode: stackless)'),
                        ('function', 'tf.function'), ('xla', 'XLA')):
    add(f'tree-RNN, {name}, B=256: each tree alone / ours', True, 20,
        _time_ratio(rows, 'tree_rnn', backend, 256, 'alone_seconds'))
  return out


def targets_markdown(found):
  lines = ['Targets, as measured in this run ("-": not measured here):', '',
           '| target | required | measured | met |', '|---|---|---|---|']
  for t in found:
    bound = ('>= ' if t['at_least'] else '<= ') + f'{t["bound"]:.3g}'
    met = {None: '-', True: 'yes', False: '**no**'}[t['met']]
    lines.append(f'| {t["target"]} | {bound} | '
                 f'{_fmt(t["measured"], ".2f")} | {met} |')
  measured = [t for t in found if t['met'] is not None]
  lines += ['', f'{sum(t["met"] for t in measured)} of {len(measured)} '
            'measured targets met.']
  return '\n'.join(lines)


# -- driver ---------------------------------------------------------------------

def measure(workload, backend, batch):
  cell = WORKLOADS[workload](backend, batch)
  # Ours and the baselines doing the same work, timed in turns.
  tfp_run = cell.tfp() if cell.tfp else None
  hand_run = cell.hand() if cell.hand else None
  floor_run = cell.floor() if cell.floor else None
  repeats = FLAGS.repeats
  if workload in NUTS_WORKLOADS:
    repeats = max(repeats, FLAGS.nuts_repeats)
  seconds, tfp, hand, floor = workloads.interleaved_median_times(
      [cell.run, tfp_run, hand_run, floor_run], repeats, FLAGS.min_seconds,
      max(repeats, FLAGS.max_repeats))
  peak = peak_bytes(cell.run, backend)
  stats = cell.stats() if cell.stats else None
  steps = util = None
  if stats is not None:
    steps, util = stats.steps, stats.utilization
  alone = cell.alone() if cell.alone else None
  return dict(workload=workload, backend=backend, batch=batch,
              seconds=seconds, throughput=cell.units / seconds,
              unit=cell.unit,
              peak_mib=(None if peak is None else peak / 2**20),
              steps=steps, utilization=util, alone_seconds=alone,
              tfp_seconds=tfp, hand_seconds=hand, floor_seconds=floor)


def peak_bytes(run, backend):
  """The most memory `run()` holds at once beyond what was held before it,
  in bytes: NumPy's allocations (tracemalloc), or TensorFlow's on the CPU
  device (XLA's buffers included) where its allocator counts them, that
  is in a process started with TF_CPU_ALLOCATOR_USE_BFC=true (see
  `measure_memory_in_a_process`); else None."""
  if backend in NUMPY_BACKENDS:
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    before = tf.config.experimental.get_memory_info('CPU:0')
  except ValueError:   # the default CPU allocator keeps no statistics
    return None
  if not before['current']:   # or counts nothing
    return None
  tf.config.experimental.reset_memory_stats('CPU:0')
  run()
  return tf.config.experimental.get_memory_info('CPU:0')['peak'] - (
      before['current'])


def measure_memory_here(workload, backend, batch):
  """Peak bytes of one call of a cell, after a warm-up call."""
  cell = WORKLOADS[workload](backend, batch)
  cell.run()
  return peak_bytes(cell.run, backend)


def _fmt(x, spec):
  return '-' if x is None else format(x, spec)


def markdown(rows):
  lines = ['| workload | backend | B | time (s) | throughput | peak MiB | '
           'steps | util | alone (s) | speed-up vs alone | TFP VM (s) | '
           'vs TFP VM | hand-batched (s) | vs hand |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    speedup = _ratio(r['alone_seconds'], r['seconds'])
    vs_tfp = _ratio(r['tfp_seconds'], r['seconds'])
    vs_hand = _ratio(r['hand_seconds'], r['seconds'])
    lines.append(
        f'| {r["workload"]} | {r["backend"]} | {r["batch"]} | '
        f'{r["seconds"]:.4f} | {r["throughput"]:,.0f} {r["unit"]} | '
        f'{_fmt(r["peak_mib"], ".1f")} | {_fmt(r["steps"], "d")} | '
        f'{_fmt(r["utilization"], ".2f")} | '
        f'{_fmt(r["alone_seconds"], ".3f")} | {_fmt(speedup, ".1f")} | '
        f'{_fmt(r["tfp_seconds"], ".3f")} | {_fmt(vs_tfp, ".2f")} | '
        f'{_fmt(r["hand_seconds"], ".3f")} | {_fmt(vs_hand, ".2f")} |')
  return '\n'.join(lines)


def plot(rows, path):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print('matplotlib not installed: no plot (pip install matplotlib)')
    return
  workloads = sorted({r['workload'] for r in rows})
  fig, axes = plt.subplots(1, len(workloads),
                           figsize=(4.5 * len(workloads), 4), squeeze=False)
  # One line per system and backend: the backend's colour, the system's
  # style.  Others' throughput: the same work in their time.
  systems = [('seconds', 'autobatch_vm', '-', 'o'),
             ('alone_seconds', 'each member alone', '--', 'x'),
             ('tfp_seconds', 'TFP auto_batching', ':', 's'),
             ('hand_seconds', 'TFP hand-batched', '-.', '^')]
  for ax, w in zip(axes[0], workloads):
    mine = [r for r in rows if r['workload'] == w]
    for k, backend in enumerate(sorted({r['backend'] for r in mine})):
      of_backend = [r for r in mine if r['backend'] == backend]
      for key, name, style, marker in systems:
        pts = sorted((r['batch'], r['throughput'] * r['seconds'] / r[key])
                     for r in of_backend if r.get(key))
        if pts:
          ax.plot(*zip(*pts), color=f'C{k}', linestyle=style, marker=marker,
                  label=f'{name}, {backend}')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('batch size')
    ax.set_ylabel(mine[0]['unit'])
    ax.set_title(w)
    ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def compare_schedules(backends, batch):
  """Each workload on each backend under both schedules: our time, VM
  steps and utilization."""
  rows = []
  chosen = FLAGS.schedule
  try:
    for workload in FLAGS.workloads:
      # The VM's schedules (stackless frames are scheduled alike, but the
      # question is the VM's default).
      for backend in backends:
        if backend == 'stackless':
          continue
        row = {'workload': workload, 'backend': backend}
        cells = []
        for schedule in virtual_machine.SCHEDULES:
          FLAGS.schedule = schedule
          cell = WORKLOADS[workload](backend, batch)
          cell.run()   # (stats are the function's last run's)
          stats = cell.stats() if cell.stats else None
          if stats is not None:
            row[schedule + '_steps'] = (stats.steps, stats.utilization)
          cells.append(cell)
        times = workloads.interleaved_median_times(
            [cell.run for cell in cells], FLAGS.repeats, FLAGS.min_seconds,
            max(FLAGS.repeats, FLAGS.max_repeats))
        row.update(zip(virtual_machine.SCHEDULES, times))
        rows.append(row)
        print(f'schedules {workload:<10} {backend:<8} B={batch:<5} ' +
              '  '.join(f'{s} {row[s]:.4f} s'
                        for s in virtual_machine.SCHEDULES), flush=True)
  finally:
    FLAGS.schedule = chosen
  return rows


def schedules_markdown(rows, batch):
  lines = [f'Both schedules at B={batch} (NUTS: chains), median seconds; '
           'VM steps and utilization:', '',
           '| workload | backend | lowest (s) | most (s) | lowest / most | '
           'steps lowest | steps most |', '|---|---|---|---|---|---|---|']
  for r in rows:
    steps = []
    for s in virtual_machine.SCHEDULES:
      st = r.get(s + '_steps')
      steps.append(f'{st[0]} ({st[1]:.0%})' if st else '-')
    lines.append(f'| {r["workload"]} | {r["backend"]} | {r["lowest"]:.4f} | '
                 f'{r["most"]:.4f} | {r["lowest"] / r["most"]:.2f} | '
                 f'{steps[0]} | {steps[1]} |')
  better = sum(r['most'] < r['lowest'] for r in rows)
  lines += ['', f"`'most'` is faster in {better} of {len(rows)} cells."]
  return '\n'.join(lines)


def measure_here(backends):
  """Every cell of --workloads on `backends`, in this process: the main
  table's rows, the schedule table's and the ESS table's."""
  rows = []
  for workload in FLAGS.workloads:
    for backend in backends:
      if not measured(workload, backend):
        continue
      for batch in batch_sizes(workload):
        start = time.perf_counter()
        r = measure(workload, backend, batch)
        rows.append(r)
        print(f'[{time.perf_counter() - start:6.1f}s] {workload:<10} '
              f'{backend:<8} B={batch:<5} {r["seconds"]:.4f} s  '
              f'{r["throughput"]:,.0f} {r["unit"]}', flush=True)
  schedules = (compare_schedules(backends, FLAGS.schedule_batch)
               if FLAGS.schedule_batch else [])
  ess = (nuts_ess(backends) if 'nuts' in FLAGS.workloads and
         FLAGS.nuts_ess_samples else [])
  return {'rows': rows, 'schedules': schedules, 'ess': ess}


def measure_in_a_process(workload, backend):
  """`measure_here` for one workload and backend in a fresh Python process
  (same flags), so that no other cell's leftovers (thread pools, a large
  heap, caches) weigh on it."""
  return _in_a_process([f'--workloads={workload}', f'--backends={backend}'],
                       '--worker')


def _in_a_process(args, output_flag, env=None):
  """Runs this script in a fresh process with this run's flags plus
  `args`; the worker writes JSON to the path given to `output_flag`,
  which is returned loaded."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'out.json')
    subprocess.run(
        [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + args +
        [f'{output_flag}={path}'], check=True, env=env)
    with open(path) as f:
      return json.load(f)


# Per table, the keys naming a row, and its numbers (the rest is copied).
_ROW_KEYS = {'rows': ('workload', 'backend', 'batch'),
             'schedules': ('workload', 'backend'),
             'ess': ('system', 'backend')}
_ROW_NUMBERS = {'rows': ('seconds', 'tfp_seconds', 'hand_seconds',
                         'alone_seconds', 'floor_seconds'),
                'schedules': tuple(virtual_machine.SCHEDULES),
                'ess': ('seconds', 'ess_min', 'ess_median')}


def median_over_processes(results):
  """One worker's results (`measure_here`'s dict) from several: per row,
  each timing and ESS the median over the workers (None where none
  measured it); throughput follows the median time.  Rows are matched by
  their keys, in the first worker's order; `processes` counts them."""
  if len(results) == 1:
    return results[0]
  out = {}
  for table, keys in _ROW_KEYS.items():
    merged = []
    for first in results[0].get(table, []):
      key = tuple(first[k] for k in keys)
      same = [r for res in results for r in res.get(table, [])
              if tuple(r[k] for k in keys) == key]
      row = dict(first, processes=len(same))
      for name in _ROW_NUMBERS[table]:
        # Each process's value too, in process order: systems timed in
        # turns inside a process are best compared there (see
        # per_process_markdown).
        row[name + '_each'] = [r.get(name) for r in same]
        values = [r[name] for r in same if r.get(name) is not None]
        row[name] = statistics.median(values) if values else None
      if table == 'rows' and row['seconds']:
        row['throughput'] = first['throughput'] * first['seconds'] / (
            row['seconds'])
      merged.append(row)
    out[table] = merged
  return out


def measure_memory_in_a_process(workload, backend, batch):
  """Peak memory of a TensorFlow cell, measured in a fresh process whose
  CPU allocator counts its bytes (TF_CPU_ALLOCATOR_USE_BFC=true; the
  default allocator keeps no statistics).  Timings are not taken there, so
  that the timed runs use TensorFlow's default allocator, as users do.
  One process per cell: the allocator counts the chunks it hands out,
  which depend on what ran before (NUTS at 64 chains under XLA: 4.1 MiB
  alone, 5.0-7.1 MiB after the graph-mode cells).  Returns bytes or None.
  """
  return _in_a_process(
      [f'--workloads={workload}', f'--backends={backend}',
       f'--memory_batch={batch}'], '--memory_worker',
      env=dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC='true'))


def add_tf_memory(rows):
  """Fills the TensorFlow rows' peak memory (`measure_memory_in_a_process`)."""
  for r in rows:
    if r['backend'] in NUMPY_BACKENDS:
      continue
    start = time.perf_counter()
    peak = measure_memory_in_a_process(r['workload'], r['backend'],
                                       r['batch'])
    if peak is not None:
      r['peak_mib'] = peak / 2**20
    print(f'[{time.perf_counter() - start:6.1f}s] {r["workload"]:<10} '
          f'{r["backend"]:<8} B={r["batch"]:<5} peak memory '
          f'{_fmt(r["peak_mib"], ".2f")} MiB', flush=True)


def main(argv):
  del argv
  if FLAGS.quick:
    FLAGS.repeats = min(FLAGS.repeats, 2)
    FLAGS.nuts_repeats = min(FLAGS.nuts_repeats, 2)
    FLAGS.min_seconds = 0.0
    FLAGS.alone_seconds = min(FLAGS.alone_seconds, 0.3)
  backends = list(FLAGS.backends)
  if any(b not in NUMPY_BACKENDS for b in backends):
    try:
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      print('TensorFlow is not installed: NumPy only.')
      backends = [b for b in backends if b in NUMPY_BACKENDS]
  if FLAGS.memory_worker:
    with open(FLAGS.memory_worker, 'w') as f:
      json.dump(measure_memory_here(FLAGS.workloads[0], backends[0],
                                    FLAGS.memory_batch), f)
    return
  if FLAGS.worker or FLAGS.one_process:
    results = measure_here(backends)
    if FLAGS.worker:
      with open(FLAGS.worker, 'w') as f:
        json.dump(results, f)
      return
  else:
    results = {'rows': [], 'schedules': [], 'ess': []}
    for workload in FLAGS.workloads:
      for backend in backends:
        if not measured(workload, backend):
          continue
        times = 1
        if workload in NUTS_WORKLOADS and backend not in NUMPY_BACKENDS:
          times = max(FLAGS.nuts_processes, 1)
        runs = [measure_in_a_process(workload, backend)
                for _ in range(times)]
        for key, value in median_over_processes(runs).items():
          results[key] += value
  schedules = ''
  if FLAGS.schedule_batch:
    schedules = '\n\n' + schedules_markdown(results['schedules'],
                                            FLAGS.schedule_batch)
  processes = per_process_markdown(results)
  processes = '\n\n' + processes if processes else ''
  floors = floor_markdown(results['rows'])
  floors = '\n\n' + floors if floors else ''
  ess = ''
  if results['ess']:
    # Each backend's rows were measured in its own process.
    order = {b: i for i, b in enumerate(backends)}
    ess = '\n\n' + ess_markdown(
        sorted(results['ess'], key=lambda r: order[r['backend']]))
  rows = results['rows']
  add_tf_memory(rows)
  os.makedirs(FLAGS.out, exist_ok=True)
  table = markdown(rows)
  results['targets'] = targets(rows, results['ess'])
  goals = '\n\n' + targets_markdown(results['targets'])
  versions = _versions()
  with open(os.path.join(FLAGS.out, 'results.md'), 'w') as f:
    f.write(f'# Benchmark results\n\n`python benchmarks/run.py'
            f'{" --quick" if FLAGS.quick else ""}`, schedule '
            f'{FLAGS.schedule}, {os.cpu_count()} CPUs ({_cpu()}), '
            f'{versions}.\n\n'
            f'{table}\n\n{NOTES}{goals}{floors}{schedules}{ess}'
            f'{processes}\n')
  with open(os.path.join(FLAGS.out, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1)   # to re-plot or compare runs
  plot(rows, os.path.join(FLAGS.out, 'results.png'))
  print(table + goals + floors + schedules + ess + processes)


NOTES = ('Times are medians of calls after a warm-up call: at least '
         '`--repeats` (NUTS: `--nuts_repeats`), and more, up to '
         '`--max_repeats`, until ours add up to `--min_seconds`; ours and '
         'the TFP systems of a row (and both schedules of a workload) are '
         'timed in turns, a call of each per round.  Python\'s garbage '
         'collector is run before and off during timed calls, as `timeit` '
         'does (a full collection in this process takes ~0.2 s).  '
         '"alone": every '
         'member run alone with `dry_run=True` on the same backend\'s arrays '
         '(NumPy, or eager TensorFlow for the TF rows): all members where '
         'that takes under `--alone_seconds`, else as many as fit, from '
         'the first, scaled to the batch (NUTS: two chains, scaled by '
         'leapfrogs).  NUTS on TensorFlow: each figure the median over '
         '`--nuts_processes` fresh processes (a process may run graph-mode '
         'steps at a slower speed for its whole life).  '
         '"TFP VM": TensorFlow Probability\'s `auto_batching` on the same '
         'program (fibonacci) or its autobatched NUTS '
         '(`tfp.experimental.mcmc.NoUTurnSampler`); "hand-batched": '
         '`tfp.mcmc.NoUTurnSampler`.  "tfp_nuts": that autobatched NUTS '
         'program of TFP\'s, loaded from the installed wheel with only its '
         '`auto_batching` import rebound to autobatch_vm, run on our VM; '
         '"TFP VM" is the same program on TFP\'s VM.  NUTS cells time '
         f'{NUTS_TRANSITIONS} transitions at max tree depth '
         f'{NUTS_MAX_TREE_DEPTH} from the same warmed-up chains and step '
         'sizes for every system; leapfrogs are counted by our sampler '
         '(TFP\'s samplers count theirs differently), so compare NUTS '
         'systems by time and by ESS/s.  "vs": their time / ours.  '
         '"peak MiB": the most memory a call of ours holds beyond what was '
         'held before it: NumPy\'s allocations (tracemalloc), or the bytes '
         'TensorFlow\'s CPU allocator has in use, XLA\'s buffers included '
         '(each cell measured after a warm-up call in a process of its own '
         'with TF_CPU_ALLOCATOR_USE_BFC=true, the timed runs keeping the '
         'default allocator; it counts the chunks it hands out, rounded '
         'up).  "steps", "util": VM steps and mean fraction of the '
         'batch active per step (a staged call returns its counts: '
         '`RunStats.counts()`).')


def _cpu():
  """The CPU model, and whether it has AVX-512, for the record: results
  differ between machines and sessions, and not by one factor (TFP's
  autobatched NUTS at 64 chains under XLA took 0.059 s in one session and
  0.088 s in another, with the same versions, where ours took 0.039 and
  0.040 s)."""
  model, avx512 = platform.processor() or 'unknown CPU', False
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key.strip() == 'model name':
          model = value.strip()
        elif key.strip() == 'flags':
          avx512 = 'avx512f' in value.split()
          break
  except OSError:
    pass
  return model + (', AVX-512' if avx512 else '')


def _versions():
  out = [f'numpy {np.__version__}']
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    out.append(f'TensorFlow {tf.__version__}')
  except ImportError:
    pass
  if tfp_baselines.available():
    import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
    out.append(f'TFP {tfp.__version__}')
  return ', '.join(out)


if __name__ == '__main__':
  app.run(main)
