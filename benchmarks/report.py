"""The run's report: results.md (the main table, its notes, the targets,
NUTS's gradient floor, both schedules, the ESS comparison, the NUTS
comparisons process by process), results.json and results.png."""

import json
import os
import statistics

import numpy as np

from autobatch_vm import virtual_machine
from benchmarks import cells
from benchmarks import nuts_ess
from benchmarks import options
from benchmarks import targets
from benchmarks import tfp_baselines
from benchmarks import workloads
from benchmarks.targets import fmt
from benchmarks.targets import ratio

FLAGS = options.FLAGS


def write(results, backends):
  """Writes results.md, results.json and results.png to --out (made if
  missing) from `results` (`measure.measure_here`'s dict, the TensorFlow
  rows' peak memory filled in or not), and prints the tables."""
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
    ess = '\n\n' + nuts_ess.ess_markdown(
        sorted(results['ess'], key=lambda r: order[r['backend']]))
  rows = results['rows']
  os.makedirs(FLAGS.out, exist_ok=True)
  table = markdown(rows)
  results['targets'] = targets.targets(rows, results['ess'])
  goals = '\n\n' + targets.targets_markdown(results['targets'])
  notes = NOTES + (' ' + QUICK_NOTE if FLAGS.quick else '')
  with open(os.path.join(FLAGS.out, 'results.md'), 'w') as f:
    f.write(f'# Benchmark results\n\n`python benchmarks/run.py'
            f'{" --quick" if FLAGS.quick else ""}`, schedule '
            f'{FLAGS.schedule}, {os.cpu_count()} CPUs ({workloads.cpu_model()}), '
            f'{_versions()}.\n\n'
            f'{table}\n\n{notes}{goals}{floors}{schedules}{ess}'
            f'{processes}\n')
  with open(os.path.join(FLAGS.out, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1)   # to re-plot or compare runs
  plot(rows, os.path.join(FLAGS.out, 'results.png'))
  print(table + goals + floors + schedules + ess + processes)


def markdown(rows):
  lines = ['| workload | backend | B | time (s) | throughput | peak MiB | '
           'steps | util | alone (s) | speed-up vs alone | TFP VM (s) | '
           'vs TFP VM | hand-batched (s) | vs hand |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    speedup = ratio(r['alone_seconds'], r['seconds'])
    vs_tfp = ratio(r['tfp_seconds'], r['seconds'])
    vs_hand = ratio(r['hand_seconds'], r['seconds'])
    lines.append(
        f'| {r["workload"]} | {r["backend"]} | {r["batch"]} | '
        f'{r["seconds"]:.4f} | {r["throughput"]:,.0f} {r["unit"]} | '
        f'{fmt(r["peak_mib"], ".1f")} | {fmt(r["steps"], "d")} | '
        f'{fmt(r["utilization"], ".2f")} | '
        f'{fmt(r["alone_seconds"], ".3f")} | {fmt(speedup, ".1f")} | '
        f'{fmt(r["tfp_seconds"], ".3f")} | {fmt(vs_tfp, ".2f")} | '
        f'{fmt(r["hand_seconds"], ".3f")} | {fmt(vs_hand, ".2f")} |')
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


def per_process_markdown(results):
  """The NUTS comparisons measured in several processes, process by
  process: there the systems ran in turns, under the same machine
  conditions, while the medians above pair each system's middle process
  with another system's.  Empty when nothing was measured so."""
  lines = []
  for r in results['rows']:
    if r.get('processes', 1) < 2 or r['workload'] not in cells.NUTS_WORKLOADS:
      continue
    for key, name in (('tfp_seconds', 'TFP autobatched time / ours'),
                      ('hand_seconds', 'hand-batched time / ours')):
      theirs = r.get(key + '_each') or []
      ratios = [ratio(t, s) for t, s in zip(theirs, r['seconds_each'])]
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
        ratios = [ratio(a, b) for a, b in zip(ours, _ess_rates(theirs))]
        lines.append(_process_line(
            f'NUTS, {cells.NUTS_CHAINS} chains, {backend}: our min ESS/s / '
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
        f'{fmt(ratio(r.get("tfp_seconds"), floor), ".2f")} | '
        f'{fmt(ratio(r.get("hand_seconds"), floor), ".2f")} |')
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
         f'{cells.NUTS_TRANSITIONS} transitions at max tree depth '
         f'{cells.NUTS_MAX_TREE_DEPTH} from the same warmed-up chains and step '
         'sizes for every system; leapfrogs are counted by the row\'s '
         'sampler: our example\'s, or on "tfp_nuts" TFP\'s program, whose '
         '`leapfrogs_taken` is a running total taken here as differences, '
         'per transition (`tfp_baselines.leapfrogs_per_iteration`); the '
         'samplers count differently, so compare NUTS systems by time and '
         'by ESS/s.  "vs": their time / ours.  '
         '"peak MiB": the most memory a call of ours holds beyond what was '
         'held before it: NumPy\'s allocations (tracemalloc), or the bytes '
         'TensorFlow\'s CPU allocator has in use, XLA\'s buffers included '
         '(each cell measured after a warm-up call in a process of its own '
         'with TF_CPU_ALLOCATOR_USE_BFC=true, the timed runs keeping the '
         'default allocator; it counts the chunks it hands out, rounded '
         'up).  "steps", "util": VM steps and mean fraction of the '
         'batch active per step (a staged call returns its counts: '
         '`RunStats.counts()`).')


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


QUICK_NOTE = ('A quick run (`--quick`) checks an install: one small batch '
              'per workload, by default every cell in one process and few '
              'repeats, so its figures are rough; the TensorFlow rows\' '
              'peak memory is measured only with `--memory_processes`, '
              'TFP\'s autobatched NUTS only with `--tfp_vm_nuts`.')
