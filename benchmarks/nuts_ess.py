"""NUTS effective samples per second: ours on each backend, and TFP's
samplers from the same chains, drawn in turns (`nuts_ess`), and its
table (`ess_markdown`)."""

import numpy as np

from benchmarks import cells
from benchmarks import options
from benchmarks import tfp_baselines
from benchmarks import workloads

FLAGS = options.FLAGS


def nuts_ess(backends, chains=cells.NUTS_CHAINS):
  """Effective samples per second at the cells' NUTS_MAX_TREE_DEPTH, from
  the warmed chains: ours per backend, and TFP's two samplers when installed.

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
  nuts = cells.example('nuts')
  target = nuts.make_target('logistic')
  num = FLAGS.nuts_ess_samples
  chunk = ess_chunk()
  state = cells.nuts_warm_state(chains)
  eps = np.exp(state[1].log_eps_bar)
  rows = []

  for backend in backends:
    if not cells.measured('nuts', backend):
      continue
    kind = {'numpy': 'numpy', 'function': 'tf', 'xla': 'xla'}[backend]
    # In calls of --nuts_ess_chunk transitions, as a user would run it:
    # the samples array of one call is part of the VM state (a step
    # under XLA costs in proportion to what the blocks write, and `put`
    # writes it whole), so not all the samples in one call.
    sampler = nuts.Sampler(target, kind, chunk=chunk,
                           max_tree_depth=cells.NUTS_MAX_TREE_DEPTH)
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
            cells.NUTS_MAX_TREE_DEPTH)

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
                    ('autobatched_ours', cells.TFP_NUTS_OURS),
                    ('unrolled', 'TFP NoUTurnSampler'))


def ess_chunk():
  """Transitions per call of our sampler in the ESS comparison."""
  return max(1, min(FLAGS.nuts_ess_chunk, FLAGS.nuts_ess_samples))


def ess_markdown(rows, chains=cells.NUTS_CHAINS):
  runs = max((r.get('runs', 1) for r in rows), default=1)
  processes = max((r.get('processes', 1) for r in rows), default=1)
  lines = [f'NUTS, logistic regression, {chains} chains, '
           f'{FLAGS.nuts_ess_samples} samples per chain after '
           f'{cells.NUTS_WARMUP} warm-up iterations, same start and step '
           'sizes; '
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
