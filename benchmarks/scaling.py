"""How the cost of a run grows with the batch size and `max_stack_depth`.

    python benchmarks/scaling.py [--out=benchmarks/results/scaling] [--quick]
        [--batch_sizes=64,256,1024,4096,16384,65536] [--batch_depth=20]
        [--depths=16,64,256,1000] [--depth_batch=1024]
        [--backends=numpy,stackless,eager,function,xla] [--tfp=function,xla]
        [--repeats=5] [--cell_seconds=60] [--note=TEXT]

Fibonacci, n ~ U[8, 16), on each backend: NumPy (the stack VM and the
stackless executor), TensorFlow eagerly, under `tf.function` and under XLA,
and TFP's `auto_batching` VM on the same program when TFP imports.  Two
sweeps: the batch size at a fixed stack capacity, and the stack capacity
(`max_stack_depth`) at a fixed batch size; stackless mode has no stack, so
it is in the first only.

Every cell is run and checked against plain Python, then timed once, in
order of size; then all the cells of both sweeps are timed in turns
(`workloads.interleaved_median_times`: each round calls every cell once),
so that they meet the same machine conditions and a table's columns can be
compared, and each figure is a median.  A cell whose calls would take over
`--cell_seconds`, its time extrapolated linearly from its system's call at
the size before, is skipped and marked so, as are that system's larger
sizes.

With `--out=DIR` it writes DIR/scaling.md (the tables, and the machine
they ran on), DIR/scaling.json (the cells, to re-plot or compare runs) and
DIR/scaling.png (with matplotlib installed).  `--quick` checks an install
in well under a minute: small sizes, few rounds, no TFP.
"""

import datetime
import json
import os
import platform
import shlex
import sys
import time
import warnings

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS

# The rows of both tables, in order: (system, backend).  TFP's NumPy VM is
# left out: it compiles the program at every call and takes seconds a call
# at B=64 (benchmarks/results/results.md).
OURS, TFP = 'autobatch_vm', 'TFP VM'
BACKENDS = {'numpy': 'NumPy (stack VM)', 'stackless': 'NumPy stackless',
            'eager': 'TF eager', 'function': 'tf.function', 'xla': 'XLA'}
TF_BACKENDS = ('eager', 'function', 'xla')

# --quick: the values of the flags the command line did not give.
# The depth sweep's first cell is the batch sweep's first (B=64 at depth
# 16), so that it reuses that cell's traced functions.
QUICK = dict(batch_sizes=['64', '256'], batch_depth=16, depths=['16', '64'],
             depth_batch=64, repeats=2, tfp=[])


def define_flags():
  """The command line's flags; defined when the script runs, not when it
  is imported, so that importing it beside `benchmarks.options` (which
  defines `--repeats`, `--quick` and `--out` for run.py) clashes with
  nothing."""
  flags.DEFINE_string('out', None, 'Directory for scaling.md, scaling.json '
                      'and scaling.png; none: print the tables only.')
  flags.DEFINE_boolean('quick', False, 'A check in well under a minute: '
                       'every flag not given on the command line at its '
                       'value in `QUICK` (two small sizes per sweep, two '
                       'rounds, no TFP).')
  flags.DEFINE_list('batch_sizes',
                    ['64', '256', '1024', '4096', '16384', '65536'],
                    'Batch sizes of the batch-size sweep.')
  flags.DEFINE_integer('batch_depth', 20, 'max_stack_depth of the '
                       'batch-size sweep.')
  flags.DEFINE_list('depths', ['16', '64', '256', '1000'],
                    'max_stack_depth of the depth sweep.')
  flags.DEFINE_integer('depth_batch', 1024, 'Batch size of the depth sweep.')
  flags.DEFINE_list('backends', list(BACKENDS), 'Our backends: ' +
                    ', '.join(f'{k} ({v})' for k, v in BACKENDS.items()) +
                    '.')
  flags.DEFINE_list('tfp', ['function', 'xla'], 'Backends of TFP\'s VM '
                    '(function, xla); empty: none.')
  flags.DEFINE_string('note', '', 'A sentence for scaling.md about the '
                      'conditions of the run (other work on the machine).')
  flags.DEFINE_integer('repeats', 5, 'Timed rounds, each calling every cell '
                       'once (median).')
  flags.DEFINE_float('cell_seconds', 60.0, 'Skip a cell whose calls (a '
                     'check, an estimate, a warm-up and --repeats timed '
                     'ones) would take longer, extrapolated from its '
                     'system\'s previous size.')


def apply_quick():
  """Under --quick, sets each flag of `QUICK` that the command line did not
  give."""
  workloads.apply_quick(FLAGS, QUICK)


def predicted_seconds(times, system, sizes, k):
  """A call's seconds at `sizes[k]`, extrapolated linearly from `system`'s
  time at the size before (`times[(system, size)]`); None at the first
  size; inf when the size before was skipped.

  A batched run's cost per member falls as the batch grows, so a linear
  guess mostly overstates the time: it errs towards skipping.
  """
  if k == 0:
    return None
  before = times.get((system, sizes[k - 1]))
  if before is None:
    return float('inf')
  return before * sizes[k] / sizes[k - 1]


def batch_n(size):
  """The n of a batch of `size`: the same at every call."""
  return np.random.default_rng(size).integers(8, 16, size=size)


def _expected(n):
  table = np.array([workloads.fibonacci_ref(k)
                    for k in range(int(n.max()) + 1)])
  return table[n]


def runner(system, backend, n, depth):
  """A call running fibonacci(n) on `system` and `backend` at stack
  capacity `depth`, returning the result as a NumPy array; None for TFP's
  VM without TFP."""
  fib = workloads.fibonacci
  if system == TFP:
    run = tfp_baselines.fibonacci_runner(backend, n, max_stack_depth=depth)
    return None if run is None else (lambda: np.asarray(run()))
  if backend == 'numpy':
    return lambda: fib(n, max_stack_depth=depth, stackless=False)
  if backend == 'stackless':
    return lambda: fib(n, stackless=True)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n_tf = tf.constant(n)
  if backend == 'eager':
    return lambda: fib(n_tf, max_stack_depth=depth, stackless=False).numpy()
  staged = tf.function(
      lambda x: fib(x, max_stack_depth=depth, stackless=False),
      jit_compile=(backend == 'xla'))
  return lambda: staged(n_tf).numpy()


def build(name, systems, sizes, batch_of, depth_of, calls, cell_seconds,
          traced):
  """The cells of one sweep, each run and checked, then timed once, in
  order of size; returns `{(system, size): call}` and, for the cells
  skipped, `{(system, size): predicted seconds of a call}`.

  batch_of(size), depth_of(size): the batch size and max_stack_depth at
  `size`.  calls: how many calls a cell makes in all; a cell whose calls
  would take over `cell_seconds` (`predicted_seconds`) is skipped.
  traced: `{(system, batch, depth): (call, seconds)}`, the cells built so
  far, which this sweep reuses and adds to.
  """
  cells, once, skipped = {}, {}, {}
  for k, size in enumerate(sizes):
    n = batch_n(batch_of(size))
    want = _expected(n)
    for system in systems:
      guess = predicted_seconds(once, system, sizes, k)
      if guess is not None and guess * calls > cell_seconds:
        skipped[(system, size)] = guess
        print(f'{name}={size}: {system[0]} on {system[1]} skipped '
              f'(~{guess:.3g} s a call)', flush=True)
        continue
      key = (system, len(n), depth_of(size))
      if key not in traced:
        run = runner(*system, n, depth_of(size))
        if run is None:
          continue
        start = time.perf_counter()
        if not np.array_equal(run(), want):
          raise AssertionError(f'{system} wrong at {name}={size}')
        checked = time.perf_counter() - start
        start = time.perf_counter()
        run()
        traced[key] = (run, time.perf_counter() - start)
        print(f'{name}={size}: {system[0]} on {system[1]} checked in '
              f'{checked:.2f} s, a call {traced[key][1]:.3g} s', flush=True)
      cells[(system, size)], once[(system, size)] = traced[key]
  return cells, skipped


def time_in_turns(sweeps, repeats):
  """`[{(system, size): seconds}]`, the median seconds of the cells of
  each of `sweeps` (`[{(system, size): call}]`), all timed in turns: each
  round calls every distinct cell once."""
  runs = list({id(run): run for cells in sweeps
               for run in cells.values()}.values())
  print(f'timing {len(runs)} cells in turns, {repeats} rounds', flush=True)
  medians = dict(zip(map(id, runs),
                     workloads.interleaved_median_times(runs, repeats)))
  return [{cell: medians[id(run)] for cell, run in cells.items()}
          for cells in sweeps]


def machine(tf):
  """What the run ran on, and how busy the machine was as it started;
  tf: the TensorFlow module, or None."""
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          cpu = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  tfp = tf and tfp_baselines._tfp()  # pylint: disable=protected-access
  return dict(cpus=os.cpu_count(), cpu=cpu, python=platform.python_version(),
              numpy=np.__version__, tensorflow=tf and tf.__version__,
              tfp=tfp.__version__ if tfp else None,
              date=datetime.date.today().isoformat(),
              load_before=list(os.getloadavg()))


def _label(system):
  return f'| {system[0]} | {BACKENDS[system[1]]} |'


def _cell(times, skipped, system, size, per=None):
  t = times.get((system, size))
  if t is not None:
    x = t * 1e6 / per if per else t * 1000
    return f'{x:,.0f}' if x >= 100 else f'{x:.3g}'
  guess = skipped.get((system, size))
  if guess is None:
    return '-'
  return 'skipped' if guess == float('inf') else f'skipped (~{guess:.2g} s)'


def markdown(results):
  """scaling.md's text from `results` (what `main` writes as JSON)."""
  m, f = results['machine'], results['flags']
  systems = [tuple(s) for s in results['systems']]
  batch = {tuple(c['system']) + (c['size'],): c for c in results['batch']}
  depth = {tuple(c['system']) + (c['size'],): c for c in results['depth']}

  def unpack(cells):
    times = {(k[:2], k[2]): c['seconds'] for k, c in cells.items()
             if c['seconds'] is not None}
    skipped = {(k[:2], k[2]): c['skipped_estimate'] for k, c in cells.items()
               if c['seconds'] is None}
    return times, skipped
  b_times, b_skipped = unpack(batch)
  d_times, d_skipped = unpack(depth)
  sizes, depths = f['batch_sizes'], f['depths']
  load = ', '.join(f'{x:.2f}' for x in m['load_before'])
  load_after = ', '.join(f'{x:.2f}' for x in m['load_after'])
  lines = [
      '# Scaling: batch size and stack depth', '',
      f'`python benchmarks/scaling.py{results["command"]}`, {m["date"]}: '
      f'{m["cpus"]} CPUs ({m["cpu"]}), Python {m["python"]}, numpy '
      f'{m["numpy"]}, TensorFlow {m["tensorflow"] or "-"}, TFP '
      f'{m["tfp"] or "-"}. '
      f'Load average (1, 5, 15 min) {load} at the start and {load_after} at '
      'the end (the run itself keeps about one CPU busy).' +
      (f'  {results["note"]}' if results.get('note') else ''), '',
      'Fibonacci, n ~ U[8, 16), in one process.  Every cell is checked '
      'against plain Python and timed once, in order of size; then all '
      'cells of both tables are timed in turns, each round calling every '
      f'cell once, {f["repeats"]} rounds after a warm-up call, so that '
      'every cell meets the same machine conditions; figures are medians.  '
      'A cell whose calls (these and its check and estimate) would have '
      f'taken over {f["cell_seconds"]:g} s, its time extrapolated linearly '
      'from its system\'s call at the size before, was skipped ("skipped '
      '(~s)": that estimate of a call), as were its system\'s larger '
      'sizes.  TF eager runs the same staged loop as `tf.function` through '
      'an internal `tf.function`.', '',
      f'## Time against batch size (max_stack_depth={f["batch_depth"]})', '',
      'Milliseconds per call:', '',
      '| system | backend | ' + ' | '.join(f'B={b}' for b in sizes) + ' |',
      '|---|---|' + '---|' * len(sizes)]
  rows = [s for s in systems if any((s, b) in b_times or (s, b) in b_skipped
                                    for b in sizes)]
  for s in rows:
    lines.append(_label(s) + ' ' + ' | '.join(
        _cell(b_times, b_skipped, s, b) for b in sizes) + ' |')
  lines += ['', 'Microseconds per member (time per call / B):', '',
            '| system | backend | ' + ' | '.join(f'B={b}' for b in sizes) +
            ' |', '|---|---|' + '---|' * len(sizes)]
  for s in rows:
    lines.append(_label(s) + ' ' + ' | '.join(
        _cell(b_times, b_skipped, s, b, per=b) for b in sizes) + ' |')
  lines += [
      '', f'## Time against max_stack_depth (B={f["depth_batch"]})', '',
      'Milliseconds per call, and in brackets the time over the same '
      f'system\'s at max_stack_depth={depths[0]}.  Stackless mode has no '
      'stack (no `max_stack_depth`): it is not in this table.', '',
      '| system | backend | ' + ' | '.join(f'depth={d}' for d in depths) +
      ' |', '|---|---|' + '---|' * len(depths)]
  for s in systems:
    if not any((s, d) in d_times or (s, d) in d_skipped for d in depths):
      continue
    cells = []
    for d in depths:
      cell = _cell(d_times, d_skipped, s, d)
      base = d_times.get((s, depths[0]))
      if (s, d) in d_times and base:
        cell += f' ({d_times[(s, d)] / base:.2f}x)'
      cells.append(cell)
    lines.append(_label(s) + ' ' + ' | '.join(cells) + ' |')
  if results.get('plot'):
    lines += ['', f'![time against batch size and depth]({results["plot"]})']
  elif results.get('plot') is False:
    lines += ['', 'No plot: matplotlib is not installed (`pip install '
              'matplotlib`, or the `bench` extra).']
  return '\n'.join(lines) + '\n'


def plot(results, path):
  """Time per call and per member against B, and time against depth;
  False when matplotlib is missing."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print('matplotlib is not installed: no plot (pip install matplotlib)')
    return False
  fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
  systems = [tuple(s) for s in results['systems']]
  for k, s in enumerate(systems):
    style = dict(color=f'C{k}', marker='o' if s[0] == OURS else 's',
                 linestyle='-' if s[0] == OURS else ':',
                 label=f'{s[0]}, {BACKENDS[s[1]]}')
    pts = sorted((c['size'], c['seconds']) for c in results['batch']
                 if tuple(c['system']) == s and c['seconds'] is not None)
    if pts:
      axes[0].plot([b for b, _ in pts], [t * 1000 for _, t in pts], **style)
      axes[1].plot([b for b, _ in pts], [t * 1e6 / b for b, t in pts],
                   **style)
    pts = sorted((c['size'], c['seconds']) for c in results['depth']
                 if tuple(c['system']) == s and c['seconds'] is not None)
    if pts:
      axes[2].plot([d for d, _ in pts], [t * 1000 for _, t in pts], **style)
  f = results['flags']
  titles = [f'time per call (max_stack_depth={f["batch_depth"]})',
            'time per member', f'time per call (B={f["depth_batch"]})']
  for ax, title, xlabel, ylabel, ticks in zip(
      axes, titles, ['batch size', 'batch size', 'max_stack_depth'],
      ['ms per call', 'µs per member', 'ms per call'],
      [f['batch_sizes'], f['batch_sizes'], f['depths']]):
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xticks(ticks, [str(x) for x in ticks])
    ax.tick_params(axis='x', which='minor', bottom=False,
                   labelbottom=False)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which='both', alpha=0.3)
  axes[0].legend(fontsize=7)
  fig.suptitle('fibonacci, n ~ U[8, 16)')
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return True


def _cells(times, skipped, sizes, systems):
  return [dict(system=list(s), size=size, seconds=times.get((s, size)),
               skipped_estimate=skipped.get((s, size)))
          for s in systems for size in sizes
          if (s, size) in times or (s, size) in skipped]


def _command(args):
  """The command line's arguments but `--out` and `--note`, quoted."""
  out, skip = [], False
  for a in args:
    if skip:
      skip = False
    elif a in ('--out', '--note'):
      skip = True
    elif not a.startswith(('--out=', '--note=')):
      out.append(' ' + shlex.quote(a))
  return ''.join(out)


def main(argv):
  del argv
  apply_quick()
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  # Timed like TFP's runs, under a bare jit_compile=True.
  warnings.filterwarnings('ignore', category=ab.errors.XlaErrorsWarning)
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError:
    tf = None
  if tf is not None:
    # Each cell stages a new function from the same line of `runner`, which
    # TensorFlow's warning about frequent retracing counts as retraces.
    tf.get_logger().setLevel('ERROR')
  for b in FLAGS.backends:
    if b not in BACKENDS:
      raise app.UsageError(f'--backends: unknown {b!r}')
  for b in FLAGS.tfp:
    if b not in ('function', 'xla'):
      raise app.UsageError(f'--tfp: unknown {b!r} (function, xla)')
  info = machine(tf)
  systems = [(OURS, b) for b in FLAGS.backends
             if tf is not None or b not in TF_BACKENDS]
  if tf is None:
    print('TensorFlow is not installed: NumPy only.')
  elif tfp_baselines.available():
    systems += [(TFP, b) for b in FLAGS.tfp]
  elif FLAGS.tfp:
    print('TFP does not import: no TFP rows.')
  sizes = [int(b) for b in FLAGS.batch_sizes]
  depths = [int(d) for d in FLAGS.depths]
  # A cell's calls: its check, one to estimate the next size's, the
  # warm-up of the timing, and the timed rounds.
  calls = FLAGS.repeats + 3
  traced = {}
  b_cells, b_skipped = build('B', systems, sizes, lambda b: b,
                             lambda _: FLAGS.batch_depth, calls,
                             FLAGS.cell_seconds, traced)
  d_systems = [s for s in systems if s[1] != 'stackless']
  d_cells, d_skipped = build('depth', d_systems, depths,
                             lambda _: FLAGS.depth_batch, lambda d: d, calls,
                             FLAGS.cell_seconds, traced)
  b_times, d_times = time_in_turns([b_cells, d_cells], FLAGS.repeats)
  del traced, b_cells, d_cells
  info['load_after'] = list(os.getloadavg())
  results = dict(
      command=_command(sys.argv[1:]), note=FLAGS.note, machine=info,
      systems=[list(s) for s in systems],
      flags=dict(batch_sizes=sizes, batch_depth=FLAGS.batch_depth,
                 depths=depths, depth_batch=FLAGS.depth_batch,
                 repeats=FLAGS.repeats, cell_seconds=FLAGS.cell_seconds),
      batch=_cells(b_times, b_skipped, sizes, systems),
      depth=_cells(d_times, d_skipped, depths, d_systems))
  if FLAGS.out:
    os.makedirs(FLAGS.out, exist_ok=True)
    drawn = plot(results, os.path.join(FLAGS.out, 'scaling.png'))
    results['plot'] = 'scaling.png' if drawn else False
    with open(os.path.join(FLAGS.out, 'scaling.json'), 'w') as f:
      json.dump(results, f, indent=1)
    with open(os.path.join(FLAGS.out, 'scaling.md'), 'w') as f:
      f.write(markdown(results))
    print(f'wrote {FLAGS.out}/scaling.md')
  else:
    print(markdown(results))


if __name__ == '__main__':
  define_flags()
  app.run(main)
