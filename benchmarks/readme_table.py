"""The README's benchmark section, generated from `benchmarks/results/`.

    python benchmarks/readme_table.py                 # print it
    python benchmarks/readme_table.py --write README.md

Reads each results directory written by `benchmarks/run.py --out=DIR`
(`results.json`, and the first lines of `results.md`, which say how and
where it ran) and renders one compact table per directory: ours, and each
baseline as its time over ours; the NUTS effective samples per second;
and how many of the run's targets it met.  A directory written by
`benchmarks/nuts_systems.py` gets its NUTS table instead: per system and
cell, the time per iteration, leapfrogs/s and their ratios to the
hand-batched sampler's and BlackJAX's (`nuts_systems_table`).  `--write`
replaces the text between the README's `<!-- benchmarks:start -->` and
`<!-- benchmarks:end -->` markers.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
# The headline first: TFP's own NUTS program on our VM beside the samplers
# users would pick instead (on the newest TensorFlow, then on TF 2.18),
# and on both VMs.
DEFAULT_DIRS = [os.path.join(HERE, 'results', 'nuts_systems'),
                os.path.join(HERE, 'results', 'nuts_systems_tf218'),
                os.path.join(HERE, 'results', 'tfp_nuts'),
                os.path.join(HERE, 'results')]
START, END = '<!-- benchmarks:start -->', '<!-- benchmarks:end -->'

WORKLOADS = {'fibonacci': 'fibonacci', 'collatz': 'Collatz',
             'tree_rnn': 'tree-RNN', 'nuts': 'NUTS (our example)',
             'tfp_nuts': "TFP's NUTS program"}
BACKENDS = {'numpy': 'NumPy', 'stackless': 'NumPy stackless',
            'function': 'tf.function', 'xla': 'XLA'}
# The rows shown: the batch sizes a reader compares at.
SHOWN_BATCHES = {'fibonacci': (64, 1024), 'collatz': (1024,),
                 'tree_rnn': (256,), 'nuts': (64,), 'tfp_nuts': (64, 256)}


def _ratio(theirs, ours):
  if theirs is None or not ours:
    return ''
  return f'{theirs / ours:,.1f}x' if theirs / ours < 100 else (
      f'{theirs / ours:,.0f}x')


def _seconds(x):
  return f'{x:.3g}'


def provenance(directory):
  """The results.md line that says what ran where."""
  path = os.path.join(directory, 'results.md')
  with open(path) as f:
    for line in f:
      if line.startswith('`python benchmarks/run.py'):
        return line.strip()
  return ''


def table(results):
  lines = ['| workload | backend | B | ours (s) | each member alone | '
           "TFP's VM | hand-batched |", '|---|---|---|---|---|---|---|']
  for r in results['rows']:
    if r['batch'] not in SHOWN_BATCHES.get(r['workload'], ()):
      continue
    lines.append(
        f'| {WORKLOADS.get(r["workload"], r["workload"])} | '
        f'{BACKENDS.get(r["backend"], r["backend"])} | {r["batch"]} | '
        f'{_seconds(r["seconds"])} | '
        f'{_ratio(r.get("alone_seconds"), r["seconds"])} | '
        f'{_ratio(r.get("tfp_seconds"), r["seconds"])} | '
        f'{_ratio(r.get("hand_seconds"), r["seconds"])} |')
  return '\n'.join(lines)


def ess_table(results):
  if not results.get('ess'):
    return ''
  lines = ['| system | backend | min ESS/s |', '|---|---|---|']
  for e in results['ess']:
    lines.append(f'| {e["system"]} | {BACKENDS.get(e["backend"], e["backend"])}'
                 f' | {e["ess_min"] / e["seconds"]:,.0f} |')
  return '\n'.join(lines)


def nuts_systems_table(results):
  """A `benchmarks/nuts_systems.py` run's table: a row per system, a column
  per cell (target, chains), each entry ms per iteration, leapfrogs/s (and
  per chain and iteration), and leapfrogs/s over the hand-batched
  sampler's and over BlackJAX's."""
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  cells = results['cells']
  names = {'gaussian': 'Gaussian', 'logistic': 'logistic'}
  lines = ['| system | ' + ' | '.join(
      f'{names.get(c["target"], c["target"])}, {c["chains"]} chains'
      for c in cells) + ' |', '|---|' + '---|' * len(cells)]
  systems = []
  for c in cells:
    systems += [n for n in [r['system'] for r in c['rows']] + list(
        c['skipped']) if n not in systems]
  for name in systems:
    entries = []
    for c in cells:
      row = [r for r in c['rows'] if r['system'] == name]
      if not row:
        entries.append(c['skipped'].get(name, '-'))
        continue
      r, (hand, bj) = row[0], nuts_systems.ratios(c)[name]
      ms = 1e3 * r['seconds_per_iteration']
      entries.append(
          (f'{ms:.3g}' if ms < 1000 else f'{ms:,.0f}') + ' ms, '
          f'{r["leapfrogs_per_second"]:,.0f}/s '
          f'({r["leapfrogs_per_chain_iteration"]:.0f} a chain and '
          f'iteration), {_times(hand)} hand, {_times(bj)} BlackJAX')
    label = nuts_systems.SYSTEMS[name][0]
    lines.append(f'| {label} | ' + ' | '.join(entries) + ' |')
  return '\n'.join(lines)


def _times(x):
  return '-' if x is None else f'{x:.2f}x'


def nuts_systems_part(rel, directory, results):
  """The README's text for a `nuts_systems.py` directory."""
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  with open(os.path.join(directory, 'results.md')) as f:
    head = f.read().split('\n\n')[1]   # the command, machine, versions
  text = [f'From [{rel}/results.md]({rel}/results.md): {head}',
          nuts_systems_table(results),
          'Each entry: ms per NUTS iteration; leapfrogs per second, summed '
          'over chains (and per chain and iteration: the samplers build '
          'trajectories of different lengths from the same start at the '
          'same step size); that over the hand-batched sampler\'s (the '
          'same TensorFlow mode; XLA for the JAX rows) and over '
          'BlackJAX\'s.  The systems of a cell are timed in turns in one '
          'process; on a shared machine absolute times move with its load, '
          'so compare within a column.  ' + nuts_systems.counts_markdown()]
  return text


def section(directories):
  parts = []
  for d in directories:
    if not os.path.exists(os.path.join(d, 'results.json')):
      continue
    with open(os.path.join(d, 'results.json')) as f:
      results = json.load(f)
    rel = os.path.relpath(d, os.path.dirname(HERE))
    if 'cells' in results:
      parts += nuts_systems_part(rel, d, results)
      continue
    parts.append(f'From [{rel}/results.md]({rel}/results.md): '
                 f'{provenance(d)}')
    parts.append(table(results))
    ess = ess_table(results)
    if ess:
      parts.append('NUTS at 64 chains, effective samples per second (min '
                   'over coordinates; more is better):')
      parts.append(ess)
    measured = [t for t in results.get('targets', [])
                if t.get('met') is not None]
    if measured:
      met = sum(t['met'] for t in measured)
      parts.append(f'{met} of {len(measured)} targets measured in this run '
                   'met (listed in its results.md).')
  return '\n\n'.join(parts)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('dirs', nargs='*', default=DEFAULT_DIRS)
  parser.add_argument('--write', metavar='README', default=None)
  args = parser.parse_args()
  text = section(args.dirs)
  if not args.write:
    print(text)
    return
  with open(args.write) as f:
    readme = f.read()
  head, rest = readme.split(START, 1)
  _, tail = rest.split(END, 1)
  with open(args.write, 'w') as f:
    f.write(f'{head}{START}\n{text}\n{END}{tail}')


if __name__ == '__main__':
  main()
