"""VM steps of TFP's unchanged NUTS program on our VM, per NUTS iteration.

    python benchmarks/nuts_steps.py                    # Gaussian, 64 and 256
    python benchmarks/nuts_steps.py --targets=logistic --chains=64 --blocks

Where a NUTS iteration's steps go, as the figures to watch when changing
the passes or the schedule.  For each target (`nuts_systems.TARGETS`) and
number of chains, TFP's `NoUTurnSampler` of `nuts_autobatching.py`
(`tfp_baselines.tfp_nuts_on_autobatch_vm`, unchanged) draws `--iterations`
iterations from the start `nuts_systems.py` uses, each one run of its
batched `many_steps` called as its `one_step` calls it, here staged with
`tf.function` and `profile=True` (`ab.stage`; XLA runs the same blocks
and steps).  Per iteration, averaged:

- the VM steps;
- the blocks that the longest-running chain ran
  (`RunStats.longest_member_blocks`): no schedule takes fewer steps, so
  steps over it is what the schedule loses;
- leapfrogs per chain (mean, and the most), and blocks per leapfrog of
  the chain that ran the most leapfrogs;
- the mean utilization;

then the blocks' runs in the last iteration (`profiler.format_table`,
with their seconds under `tf.function`).
With `--blocks`, the iteration is also run under XLA (`ab.stage`): its
call time (median of `--repeats` calls) and each block's cost per step
(`StagedFunction.profile_blocks`, which times each block in loops of its
own, so under load its sum can exceed the call).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position


def iteration_call(target, chains, seed=0):
  """TFP's sampler on our VM, as `one_step` calls its batched program.

  Args:
    target: A `nuts_systems.Target`.
    chains: The number of chains.
    seed: The sampler's seed.

  Returns:
    `(many_steps, args, kwargs)`: the `BatchedFunction` and the arguments
    of one NUTS iteration from the target's start, or None without TFP.
  """
  module = tfp_baselines.tfp_nuts_on_autobatch_vm()
  if module is None:
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  step = tf.constant(np.full((chains, 1), target.step_size, np.float32))
  kernel = module.NoUTurnSampler(
      target.tf_log_prob, step_size=step,
      max_tree_depth=nuts_systems.MAX_TREE_DEPTH, seed=seed)
  x = tf.constant(target.start(chains))
  results = kernel.bootstrap_results(x)
  args = (tf.constant([1], tf.int64), [x], results.target_log_prob,
          results.grads_target_log_prob, [step],
          tf.zeros_like(results.leapfrogs_taken))
  # As `one_step` passes them, for a sampler given a seed.
  kwargs = dict(backend=ab.TensorFlowBackend(while_parallel_iterations=1),
                max_stack_depth=nuts_systems.MAX_TREE_DEPTH + 4)
  return kernel.many_steps, args, kwargs


def next_args(args, out):
  """The next iteration's arguments: `args` moved to the state of `out`."""
  (state, log_prob, grads), _ = out
  return (args[0], state, log_prob, grads) + tuple(args[4:])


def iteration_figures(stats, leapfrogs):
  """One iteration's figures from its `RunStats` (run with `profile=True`)
  and each chain's leapfrogs in it."""
  leapfrogs = np.asarray(leapfrogs, np.float64)
  longest = stats.longest_member_blocks
  return dict(steps=stats.steps, longest=longest,
              utilization=stats.utilization,
              leapfrogs_mean=float(leapfrogs.mean()),
              leapfrogs_max=float(leapfrogs.max()),
              blocks_per_leapfrog=longest / max(float(leapfrogs.max()), 1.0))


def mean_figures(iterations):
  """The per-iteration figures averaged over iterations, with
  `schedule_overhead` (steps over the longest chain's blocks)."""
  out = {k: float(np.mean([it[k] for it in iterations]))
         for k in iterations[0]}
  out['schedule_overhead'] = out['steps'] / out['longest']
  return out


def measure(target_name, chains, iterations, blocks=False, repeats=7,
            block_exits=False):
  """Runs one cell; returns (mean figures, the last run's table, XLA
  lines) or None without TFP.  `block_exits`: the program's Context lets
  members leave blocks early (`Context.block_exits`)."""
  from autobatch_vm import profiler  # pylint: disable=g-import-not-at-top
  call = iteration_call(nuts_systems.TARGETS[target_name](), chains)
  if call is None:
    return None
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  fn, args, kwargs = call
  fn.context.block_exits = block_exits
  profiled = ab.stage(fn, profile=True, **kwargs)
  figures = []
  for _ in range(iterations):
    out = profiled(*args)
    figures.append(iteration_figures(profiled.last_stats, out[1]))
    args = next_args(args, out)
  table = profiler.format_table(profiled.last_stats)
  xla = []
  if blocks:
    staged = ab.stage(fn, jit_compile=True, **kwargs)
    start = time.perf_counter()
    staged(*args)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      staged(*args)
      times.append(time.perf_counter() - start)
    call_s = statistics.median(times)
    steps = staged.last_stats.steps
    xla.append(f'XLA: first call {first:.1f} s; a call {1e3 * call_s:.2f} ms'
               f' (median of {repeats}), {steps} steps, '
               f'{1e6 * call_s / steps:.1f} us a step')
    xla.append(profiler.format_table(staged.profile_blocks(*args)))
  return mean_figures(figures), table, xla


def markdown(cells):
  """The cells' mean figures as a markdown table."""
  lines = ['| target | chains | steps | longest chain\'s blocks | steps / '
           'longest | leapfrogs a chain (mean, most) | blocks a leapfrog | '
           'utilization |', '|---|---|---|---|---|---|---|---|']
  for (target, chains), f in cells:
    lines.append(
        f'| {target} | {chains} | {f["steps"]:.0f} | {f["longest"]:.0f} | '
        f'{f["schedule_overhead"]:.3f} | {f["leapfrogs_mean"]:.1f}, '
        f'{f["leapfrogs_max"]:.0f} | {f["blocks_per_leapfrog"]:.2f} | '
        f'{f["utilization"]:.1%} |')
  return '\n'.join(lines)


def parse(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--targets', default='gaussian')
  parser.add_argument('--chains', default='64,256')
  parser.add_argument('--iterations', type=int, default=5,
                      help='NUTS iterations, each one run of the program')
  parser.add_argument('--blocks', action='store_true',
                      help='also time the call and each block under XLA')
  parser.add_argument('--repeats', type=int, default=7,
                      help='timed XLA calls (median), with --blocks')
  parser.add_argument('--block-exits', action='store_true',
                      help='run with Context.block_exits on')
  args = parser.parse_args(argv)
  args.targets = [t for t in args.targets.split(',') if t]
  args.chains = [int(c) for c in args.chains.split(',') if c]
  unknown = set(args.targets) - set(nuts_systems.TARGETS)
  if unknown:
    parser.error(f'unknown targets {sorted(unknown)}; known: '
                 f'{list(nuts_systems.TARGETS)}')
  return args


def main(argv):
  args = parse(argv)
  if not tfp_baselines.available():
    print('TensorFlow Probability is not installed: nothing to measure.')
    return
  cells = []
  with tfp_baselines.quiet_logs():
    for target in args.targets:
      for chains in args.chains:
        figures, table, xla = measure(target, chains, args.iterations,
                                      args.blocks, args.repeats,
                                      args.block_exits)
        cells.append(((target, chains), figures))
        print(f'\n{target}, {chains} chains: the last iteration\'s blocks')
        print(table)
        for line in xla:
          print(line)
  print()
  print(markdown(cells))


if __name__ == '__main__':
  main(sys.argv[1:])
