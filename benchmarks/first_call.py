"""Where the first call under XLA goes: TFP's NUTS program on our VM
against TFP's hand-batched sampler, split into its stages.

    python benchmarks/first_call.py                      # both targets, 64 chains
    python benchmarks/first_call.py --targets=gaussian --rounds=3
    python benchmarks/first_call.py --systems=ours_xla --rounds=1

Each measurement is a fresh Python process (`--worker`) that builds one
system of `benchmarks/nuts_systems.py` (`ours_xla`: TFP's unchanged NUTS
program on autobatch_vm under XLA; `hand_xla`: `tfp.mcmc.NoUTurnSampler`
under XLA), traces its function, calls it once and then `--calls` more
times.  The systems are measured in turns, `--rounds` processes each, and
each figure is the median over rounds.  TensorFlow's and XLA's own timing
logs (`TF_CPP_VMODULE`: tf2xla's `xla_compiler`, XLA's
`hlo_pass_pipeline` and `cpu_compiler`) mark where each stage starts and
ends; a thread of the worker samples the process's CPU time (every
thread's) against the wall clock, so that each stage is given in CPU
seconds too, which other processes on a shared machine move much less
than wall time.  The stages:

- `trace`: Python tracing of the `tf.function` (`get_concrete_function`);
- `graph`: from the trace to XLA's compiler: TensorFlow's graph passes;
- `tf2xla`: the TensorFlow graph to HLO;
- `hlo`: XLA's HLO optimization passes;
- `codegen`: XLA's backend, from the HLO passes to the executable:
  buffer assignment, LLVM IR emission and LLVM's optimization and code
  generation (`kernels`: the kernels, where XLA logs them, and on
  TensorFlow 2.21 the seconds LLVM took on them, summed over its
  threads);
- `run`: the rest of the first call (sampling, and anything after the
  compile);
- `first`: all of the above; `compile`: `first` less a later call's
  time (`call`, the median of `--calls`).

Also printed: the traced graph's TensorFlow ops (every function of its
library counted), and its constants.  The ratio is ours over
hand-batched, of `first` and of `compile`, in CPU seconds.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STAGES = ('trace', 'graph', 'tf2xla', 'hlo', 'codegen', 'run')
SYSTEMS = {'ours_xla': 'autobatched_ours', 'hand_xla': 'unrolled'}
VMODULE = ('xla_compiler=1,hlo_pass_pipeline=1,cpu_compiler=2,'
           'device_compiler=1,ir_compiler=1')


# -- in the worker ------------------------------------------------------------

class CpuClock:
  """A thread sampling (wall, process CPU) every `period` seconds, so that
  a wall time read from a log line can be turned into CPU time."""

  def __init__(self, period=0.002):
    self.samples = []
    self._stop = threading.Event()
    self._period = period
    self._thread = threading.Thread(target=self._sample, daemon=True)

  def _sample(self):
    while not self._stop.is_set():
      self.samples.append((time.time(), time.process_time()))
      time.sleep(self._period)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    self.samples.append((time.time(), time.process_time()))


def graph_ops(graph_def):
  """(TensorFlow ops, of which constants) of a GraphDef and its library."""
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes.extend(function.node_def)
  return len(nodes), sum(n.op == 'Const' for n in nodes)


def worker(system, target_name, chains, iterations, calls, path):
  """Measures one system in this process; JSON to `path`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top
  target = nuts_systems.TARGETS[target_name]()
  theta = target.start(chains)
  marks = {}
  with CpuClock() as clock:
    run, out = tfp_baselines.nuts_runner(
        SYSTEMS[system], 'xla', target, theta,
        np.full(chains, target.step_size, np.float32), iterations,
        nuts_systems.MAX_TREE_DEPTH)
    marks['start'] = (time.time(), time.process_time())
    with tfp_baselines.quiet_logs():
      concrete = out['trace']()
    marks['traced'] = (time.time(), time.process_time())
    run()
    marks['first'] = (time.time(), time.process_time())
  times = []
  for _ in range(calls):
    start = time.process_time()
    run()
    times.append(time.process_time() - start)
  ops, constants = graph_ops(concrete.graph.as_graph_def())
  with open(path, 'w') as f:
    json.dump(dict(marks=marks, samples=clock.samples, call=statistics.median(
        times), ops=ops, constants=constants, tf=tf.__version__), f)


# -- reading the logs ----------------------------------------------------------

_ABSL_TIME = re.compile(r'^[IWE]\d{4} \d\d:\d\d:(\d+\.\d+)')
_TF_TIME = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): [IWE] ')


def log_time(line):
  """The wall time (seconds since the epoch) of a TF/XLA log line, or None."""
  m = _ABSL_TIME.match(line)
  if m:
    return float(m.group(1))
  m = _TF_TIME.match(line)
  if m:
    stamp, fraction = m.group(1).split('.')
    return time.mktime(time.strptime(stamp, '%Y-%m-%d %H:%M:%S')) + float(
        '0.' + fraction)
  return None


def stage_marks(log, after):
  """Wall times of the compile's milestones in a worker's log, from wall
  time `after` on (the end of the trace): tf2xla's start, the first HLO
  pass, XLA's backend (after the HLO passes), the executable; and the
  kernels LLVM compiled and LLVM's seconds on them (TensorFlow 2.18's
  XLA logs a count per module, 2.21's each kernel's module and its time;
  else None)."""
  order = (('tf2xla', 'XlaCompiler::CompileFunction'),
           ('hlo', 'HLO pass: '), ('codegen', 'cpu_compiler'),
           ('executable', 'Compilation of XLA executable'))
  marks, kernels, llvm = {}, None, None
  for line in log.splitlines():
    t = log_time(line)
    if t is None or t < after:
      continue
    for key, text in order[len(marks):len(marks) + 1]:
      if text in line and (key != 'codegen' or 'Compiling: ' in line):
        marks[key] = t
    m = re.search(r'Compile LLVM module with (\d+) kernels', line)
    if m:
      kernels = (kernels or 0) + int(m.group(1))
    m = re.search(r'Compiled LLVM module: \S+ time: '
                  r'([\d.]+) (m?s) ', line)
    if m:
      kernels = (kernels or 0) + 1
      llvm = (llvm or 0.0) + float(m.group(1)) / (1e3 if m.group(2) == 'ms'
                                                   else 1.0)
  missing = [key for key, _ in order if key not in marks]
  if missing:
    raise RuntimeError(f'no {missing} in the log: is TF_CPP_VMODULE read?')
  return marks, kernels, llvm


def cpu_at(samples, t):
  """The process's CPU time at wall time `t`, interpolated."""
  for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
    if t0 <= t <= t1:
      return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
  return samples[-1][1] if t > samples[-1][0] else samples[0][1]


def split(result, log):
  """{stage: (wall s, CPU s)} of one worker's measurement."""
  marks, kernels, llvm = stage_marks(log, result['marks']['traced'][0])
  bounds = [result['marks']['start'], result['marks']['traced']]
  for key in ('tf2xla', 'hlo', 'codegen', 'executable'):
    t = marks[key]
    bounds.append((t, cpu_at(result['samples'], t)))
  bounds.append(result['marks']['first'])
  out = {}
  for stage, (a, b) in zip(STAGES, zip(bounds, bounds[1:])):
    out[stage] = (b[0] - a[0], b[1] - a[1])
  first = (bounds[-1][0] - bounds[0][0], bounds[-1][1] - bounds[0][1])
  out['first'] = first
  out['compile'] = (None, first[1] - result['call'])
  out['call'] = (None, result['call'])
  return dict(stages=out, kernels=kernels, llvm=llvm, ops=result['ops'],
              constants=result['constants'], tf=result['tf'])


def measure(system, target, chains, iterations, calls):
  """One fresh worker process; its `split`."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'out.json')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='0', TF_CPP_VMODULE=VMODULE)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), f'--worker={path}',
         f'--systems={system}', f'--targets={target}', f'--chains={chains}',
         f'--iterations={iterations}', f'--calls={calls}'],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, check=False)
    if proc.returncode:
      sys.stderr.write(proc.stderr[-4000:])
      raise RuntimeError(f'{system} worker failed ({proc.returncode})')
    with open(path) as f:
      return split(json.load(f), proc.stderr)


# -- the table -----------------------------------------------------------------

def summary(runs):
  """The median over rounds of each stage's (wall, CPU) and counts."""
  def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
  stages = {s: tuple(med([r['stages'][s][i] for r in runs]) for i in (0, 1))
            for s in runs[0]['stages']}
  return dict(stages=stages, kernels=med([r['kernels'] for r in runs]),
              llvm=med([r['llvm'] for r in runs]), ops=runs[0]['ops'],
              constants=runs[0]['constants'], tf=runs[0]['tf'])


def table(target, chains, results):
  cols = STAGES + ('first', 'compile', 'call')
  lines = [f'{target}, {chains} chains, TF {next(iter(results.values()))["tf"]}'
           ' (CPU s; wall s in brackets; median over rounds):', '',
           '| system | ' + ' | '.join(cols) +
           ' | kernels (LLVM s) | TF ops (const) |',
           '|---' * (len(cols) + 3) + '|']
  for system, s in results.items():
    cells = []
    for c in cols:
      wall, cpu = s['stages'][c]
      cells.append(f'{cpu:.2f}' + (f' ({wall:.2f})' if wall is not None
                                   else ''))
    kernels = '-' if s['kernels'] is None else f'{s["kernels"]:.0f}'
    if s['llvm'] is not None:
      kernels += f' ({s["llvm"]:.2f} s)'
    lines.append(f'| {system} | ' + ' | '.join(cells) +
                 f' | {kernels} | {s["ops"]} ({s["constants"]}) |')
  if len(results) == 2:
    ours, hand = results['ours_xla'], results['hand_xla']
    lines.append('')
    for c in ('first', 'compile'):
      lines.append(f'ours / hand-batched, {c}: '
                   f'{ours["stages"][c][1] / hand["stages"][c][1]:.2f}x')
  return '\n'.join(lines)


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--targets', default='gaussian,logistic')
  parser.add_argument('--chains', type=int, default=64)
  parser.add_argument('--systems', default=','.join(SYSTEMS))
  parser.add_argument('--iterations', type=int, default=10,
                      help='NUTS iterations per call')
  parser.add_argument('--calls', type=int, default=3,
                      help='calls after the first, timed (median)')
  parser.add_argument('--rounds', type=int, default=1,
                      help='fresh processes per system, in turns')
  parser.add_argument('--worker', default=None, help='internal')
  args = parser.parse_args(argv)
  systems = [s for s in args.systems.split(',') if s]
  if args.worker:
    worker(systems[0], args.targets, args.chains, args.iterations,
           args.calls, args.worker)
    return
  for target in [t for t in args.targets.split(',') if t]:
    runs = {s: [] for s in systems}
    for _ in range(args.rounds):
      for s in systems:
        runs[s].append(measure(s, target, args.chains, args.iterations,
                               args.calls))
    print(table(target, args.chains,
                {s: summary(r) for s, r in runs.items()}), flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])
