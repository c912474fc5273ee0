"""The benchmark harness: its timing helper, and a short run end to end."""

import collections
import gc
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import workloads

ROOT = pathlib.Path(__file__).resolve().parent.parent


class _Clock:
  """Runs whose calls advance a fake `time.perf_counter` by set amounts."""

  def __init__(self):
    self.now = 0.0
    self.calls = {}

  def run(self, name, seconds):
    self.calls[name] = 0

    def call():
      self.calls[name] += 1
      self.now += seconds
    return call


@pytest.fixture
def clock(monkeypatch):
  c = _Clock()
  monkeypatch.setattr(workloads.time, 'perf_counter', lambda: c.now)
  return c


@pytest.fixture
def set_flags():
  """`set_flags(name=value, ...)`: benchmark flags for one test, restored
  after it.  Not `monkeypatch.setattr(FLAGS, ...)`: pytest 9.2 deletes on
  undo an attribute it did not find in the object's `__dict__`, and
  deleting an absl flag unregisters it for the tests that follow."""
  from benchmarks import options  # pylint: disable=g-import-not-at-top
  if not options.FLAGS.is_parsed():
    options.FLAGS.mark_as_parsed()
  saved = {}

  def set_(**values):
    for name, value in values.items():
      saved.setdefault(name, getattr(options.FLAGS, name))
      setattr(options.FLAGS, name, value)
  yield set_
  for name, value in saved.items():
    setattr(options.FLAGS, name, value)


def test_interleaved_times_each_run_in_turns(clock):
  fast, slow = clock.run('fast', 0.01), clock.run('slow', 0.5)
  times = workloads.interleaved_median_times([fast, None, slow], repeats=3)
  assert times[1] is None
  assert times[0] == pytest.approx(0.01) and times[2] == pytest.approx(0.5)
  # One warm-up call, then three timed rounds of each.
  assert clock.calls == {'fast': 4, 'slow': 4}


def test_interleaved_times_repeat_until_min_seconds(clock):
  fast, slow = clock.run('fast', 0.125), clock.run('slow', 1.0)
  workloads.interleaved_median_times([fast, slow], repeats=3, min_seconds=1.0)
  # The first run's timed calls add up to 1 s after 8 rounds.
  assert clock.calls == {'fast': 9, 'slow': 9}
  tiny = clock.run('tiny', 0.001)
  workloads.interleaved_median_times([tiny], repeats=3, min_seconds=1.0,
                                     max_repeats=25)
  assert clock.calls['tiny'] == 26


def test_timed_calls_run_without_garbage_collection(clock):
  seen = []
  run = clock.run('run', 0.01)

  def spy():
    seen.append(gc.isenabled())
    run()
  was = gc.isenabled()
  gc.enable()
  try:
    workloads.interleaved_median_times([spy], repeats=3)
    workloads.median_time(spy, repeats=2)
    assert gc.isenabled()          # restored afterwards
  finally:
    if not was:
      gc.disable()
  # Warm-up calls with the collector on; every timed call with it off.
  assert seen == [True, False, False, False, True, False, False]


def _quick_run(tmp_path, *flags, hide=()):
  """`benchmarks/run.py --quick` with `flags`, writing to `tmp_path`, with
  the modules named in `hide` failing to import; returns the finished
  process (asserted successful)."""
  env = dict(os.environ, OPENBLAS_NUM_THREADS='1', TF_CPP_MIN_LOG_LEVEL='2')
  if hide:
    shadow = tmp_path / 'hidden_modules'
    for name in hide:
      (shadow / name).mkdir(parents=True)
      (shadow / name / '__init__.py').write_text(
          f'raise ImportError("{name} hidden by the test")\n')
    env['PYTHONPATH'] = os.pathsep.join(
        [str(shadow)] + [p for p in [env.get('PYTHONPATH')] if p])
  proc = subprocess.run(
      [sys.executable, str(ROOT / 'benchmarks' / 'run.py'), '--quick',
       '--nuts_ess_samples=0', f'--out={tmp_path}', *flags],
      capture_output=True, text=True, timeout=600, env=env, check=False,
      cwd=ROOT)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc


@pytest.mark.parametrize('processes', [
    pytest.param('--one_process', marks=pytest.mark.slow), '--noone_process'])
def test_quick_run_writes_table_and_schedules(tmp_path, processes):
  """Each (workload, backend) measured in a process of its own, or all in
  one: the same tables.  Flags given on the command line keep their
  values under --quick (here the schedule table, processes and batch
  sizes)."""
  proc = _quick_run(tmp_path, '--workloads=fibonacci,collatz',
                    '--backends=numpy', '--schedule_batch=8',
                    '--batch_sizes=1,64', processes)
  text = (tmp_path / 'results.md').read_text()
  for workload in ('fibonacci', 'collatz'):
    for batch in (1, 64):
      assert f'| {workload} | numpy | {batch} |' in text, text
    assert f'| {workload} | numpy | 0.' in text   # the schedule table
  assert "'most'` is faster in" in text
  # The targets; a quick run at B <= 64 measures one of them.
  assert ('| fibonacci, NumPy: our time at B=1024 / at B=64 | <= 3 | - | - |'
          in text), text
  assert 'measured targets met.' in text
  # A progress line per cell while it runs.
  assert proc.stdout.count(' numpy    B=') >= 4, proc.stdout
  # The rows as measured, to re-plot or compare runs.
  rows = json.loads((tmp_path / 'results.json').read_text())['rows']
  assert {(r['workload'], r['batch']) for r in rows} == {
      (w, b) for w in ('fibonacci', 'collatz') for b in (1, 64)}


def test_quick_run_is_one_small_batch_per_cell_into_a_new_directory(
    tmp_path):
  """--quick alone: one batch per workload, no schedule table, no ESS
  comparison, a note saying so; --out may name a directory that does not
  exist yet."""
  out = tmp_path / 'new' / 'results'
  _quick_run(out, '--workloads=fibonacci,collatz,nuts',
             '--backends=numpy,stackless')
  results = json.loads((out / 'results.json').read_text())
  assert {(r['workload'], r['backend'], r['batch'])
          for r in results['rows']} == {
              ('fibonacci', 'numpy', 64), ('fibonacci', 'stackless', 64),
              ('collatz', 'numpy', 64), ('nuts', 'numpy', 16)}
  assert results['schedules'] == [] and results['ess'] == []
  text = (out / 'results.md').read_text()
  assert '`python benchmarks/run.py --quick`' in text
  assert 'A quick run (`--quick`) checks an install' in text
  assert 'Both schedules' not in text
  if importlib.util.find_spec('matplotlib'):
    assert (out / 'results.png').stat().st_size > 0


def test_quick_run_without_tensorflow_measures_numpy_only(tmp_path):
  """With TensorFlow (and so TFP) missing, the TensorFlow backends are
  left out and the NumPy rows are measured, without TFP baselines."""
  proc = _quick_run(tmp_path, '--workloads=fibonacci,collatz',
                    '--backends=numpy,function,xla',
                    hide=('tensorflow', 'tensorflow_probability'))
  assert 'TensorFlow is not installed: NumPy only.' in proc.stdout
  results = json.loads((tmp_path / 'results.json').read_text())
  assert {(r['workload'], r['backend']) for r in results['rows']} == {
      ('fibonacci', 'numpy'), ('collatz', 'numpy')}
  assert all(r['tfp_seconds'] is None for r in results['rows'])
  assert 'TensorFlow' not in (tmp_path / 'results.md').read_text().split(
      '\n')[2]


def test_quick_sets_the_flags_the_command_line_did_not_give(
    monkeypatch, set_flags):
  """--quick: each flag of `options.QUICK` takes its quick value unless
  the command line gave it; without --quick, none changes."""
  from benchmarks import options  # pylint: disable=g-import-not-at-top
  before = {name: getattr(options.FLAGS, name) for name in options.QUICK}
  set_flags(quick=False, **before)   # restored after the test
  options.apply_quick()
  assert {name: getattr(options.FLAGS, name)
          for name in options.QUICK} == before
  set_flags(quick=True, repeats=5)
  monkeypatch.setattr(options.FLAGS['repeats'], 'present', 1)
  options.apply_quick()
  for name, value in options.QUICK.items():
    want = 5 if name == 'repeats' else value
    assert getattr(options.FLAGS, name) == want, name
  assert options.QUICK['one_process'] and not options.QUICK[
      'memory_processes']


def test_quick_nuts_cells_share_tfps_samplers_and_run_without_tfp(
    monkeypatch, set_flags):
  """Under --quick the nuts and tfp_nuts cells share TFP's hand-batched
  sampler (traced once) and leave out its autobatched one; without TFP
  both are None, as is TFP's fibonacci, and TFP's NUTS program is not
  measured."""
  pytest.importorskip('tensorflow')
  from benchmarks import cells, tfp_baselines  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(cells, 'NUTS_WARMUP', 5)
  monkeypatch.setattr(cells, '_QUICK_BASELINES', {})
  cells.nuts_warm_state.cache_clear()
  try:
    set_flags(quick=True, tfp_vm_nuts=False)
    if tfp_baselines.available():
      hand = cells.tfp_nuts_baseline('unrolled', 'function', 2)
      assert hand is not None
      assert cells.tfp_nuts_baseline('unrolled', 'function', 2) is hand
      assert cells.tfp_nuts_baseline('unrolled', 'xla', 2) is not hand
      assert cells.tfp_nuts_baseline('autobatched', 'function', 2) is None
    monkeypatch.setattr(tfp_baselines, '_tfp', lambda: None)
    monkeypatch.setattr(cells, '_QUICK_BASELINES', {})
    set_flags(tfp_vm_nuts=True)
    for kind in ('unrolled', 'autobatched'):
      assert cells.tfp_nuts_baseline(kind, 'function', 2) is None
    assert cells.make_fibonacci('function', 4).tfp() is None
    assert not cells.measured('tfp_nuts', 'function')
  finally:
    cells.nuts_warm_state.cache_clear()


@pytest.mark.slow    # a benchmark subprocess; two more run by default
def test_stackless_rows_only_where_calls_run_together(tmp_path):
  """The stackless backend (NumPy, stackless=True) is measured for the
  recursions whose calls it runs together, not for collatz (no calls),
  and stays out of the VM schedules' table."""
  _quick_run(tmp_path, '--workloads=fibonacci,collatz',
             '--backends=numpy,stackless', '--schedule_batch=8',
             '--one_process')
  results = json.loads((tmp_path / 'results.json').read_text())
  cells = {(r['workload'], r['backend']) for r in results['rows']}
  assert cells == {('fibonacci', 'numpy'), ('fibonacci', 'stackless'),
                   ('collatz', 'numpy')}
  assert {r['backend'] for r in results['schedules']} == {'numpy'}
  stackless = [r for r in results['rows'] if r['backend'] == 'stackless']
  numpy = {r['batch']: r for r in results['rows']
           if r['backend'] == 'numpy' and r['workload'] == 'fibonacci'}
  for r in stackless:   # one frame per level: far fewer blocks
    assert r['steps'] < numpy[r['batch']]['steps']
    assert 0 < r['utilization'] <= 1
    assert r['alone_seconds'] and r['peak_mib'] is not None


def _has_tf():
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


@pytest.mark.slow
@pytest.mark.skipif(not _has_tf(), reason='needs TensorFlow')
def test_tensorflow_rows_report_steps_utilization_and_peak_memory(tmp_path):
  """Staged runs report their VM steps and utilization (the call returns
  its counts) and their peak memory (a process with the BFC allocator):
  the same steps as on NumPy."""
  _quick_run(tmp_path, '--workloads=collatz',
             '--backends=numpy,function,xla', '--batch_sizes=1,64',
             '--memory_processes')
  rows = json.loads((tmp_path / 'results.json').read_text())['rows']
  by = {(r['backend'], r['batch']): r for r in rows}
  for batch in (1, 64):
    want = by['numpy', batch]['steps']
    for backend in ('function', 'xla'):
      r = by[backend, batch]
      assert r['steps'] == want > 0, r
      assert r['utilization'] == by['numpy', batch]['utilization']
      assert r['peak_mib'] is not None and r['peak_mib'] > 0, r
  # More members hold more memory.
  assert by['xla', 64]['peak_mib'] > by['xla', 1]['peak_mib']


def test_plot_draws_a_line_per_system_and_backend(tmp_path):
  """Ours, members alone, TFP's VM and hand-batched code: each a line
  per backend (not one line zig-zagging across backends)."""
  pytest.importorskip('matplotlib')
  from benchmarks import report  # pylint: disable=g-import-not-at-top
  rows = [dict(workload='w', backend=backend, batch=batch, seconds=1.0,
               throughput=10.0 * batch, unit='members/s',
               alone_seconds=2.0, tfp_seconds=tfp, hand_seconds=None)
          for backend, tfp in (('numpy', 4.0), ('xla', None))
          for batch in (1, 64)]
  lines = []
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  original = plt.Axes.plot

  def spy(ax, *args, **kwargs):
    lines.append((kwargs['label'], list(args[1])))
    return original(ax, *args, **kwargs)
  plt.Axes.plot = spy
  try:
    report.plot(rows, tmp_path / 'results.png')
  finally:
    plt.Axes.plot = original
  assert (tmp_path / 'results.png').stat().st_size > 0
  assert dict(lines) == {
      'autobatch_vm, numpy': [10.0, 640.0],
      'each member alone, numpy': [5.0, 320.0],
      'TFP auto_batching, numpy': [2.5, 160.0],
      'autobatch_vm, xla': [10.0, 640.0],
      'each member alone, xla': [5.0, 320.0]}


def test_alone_baseline_runs_every_member_that_fits_else_scales(
    clock, set_flags):
  """The "alone" baseline runs all members when they fit in
  --alone_seconds (members differ in work, so a few first ones misstate
  the batch); otherwise the first ones that fit, scaled to the batch."""
  np = pytest.importorskip('numpy')
  from benchmarks import cells  # pylint: disable=g-import-not-at-top
  set_flags(alone_seconds=1.0)
  seen = []

  def member_cost(x, dry_run):
    assert dry_run
    seen.extend(int(v) for v in x)
    clock.now += 0.001 * float(np.sum(x))   # member v costs v ms

  # 0 + 1 + ... + 39 ms = 0.78 s: every member runs, nothing is scaled.
  n = np.arange(40)
  assert cells._alone_seconds(member_cost, [n], 40, 'numpy') == (  # pylint: disable=protected-access
      pytest.approx(0.78))
  assert seen == list(range(40))
  # Members of 10 ms each, 1000 of them: the first 100 fill the second.
  seen.clear()
  n = np.full(1000, 10)
  assert cells._alone_seconds(member_cost, [n], 1000, 'numpy') == (  # pylint: disable=protected-access
      pytest.approx(10.0))
  assert len(seen) == 100


def test_targets_table_states_each_target_met_missed_or_not_measured():
  """results.md lists the issue's targets as the run measured them: times
  as theirs / ours, ESS/s as ours / theirs, "within 1.5x" of the
  hand-batched sampler as at least 1/1.5 of it, B=1024 / B=64 as at most
  3; cells the run did not measure are "-", not passes."""
  from benchmarks import targets  # pylint: disable=g-import-not-at-top

  def row(workload, backend, batch, seconds, **others):
    return dict(workload=workload, backend=backend, batch=batch,
                seconds=seconds, **others)
  rows = [
      row('fibonacci', 'numpy', 64, 0.02, tfp_seconds=0.3),      # 15x
      row('fibonacci', 'numpy', 1024, 0.07),                     # 3.5
      row('nuts', 'xla', 64, 0.025, tfp_seconds=0.045,           # 1.8x
          hand_seconds=0.02),                                    # 0.8
      row('tree_rnn', 'stackless', 256, 0.005, alone_seconds=0.11),  # 22x
      # The stack VM's row (stackless=False): in the table, but NumPy's
      # default mode runs the tree-RNN stackless, so not a target.
      row('tree_rnn', 'numpy', 256, 0.011, alone_seconds=0.11),  # 10x
  ]
  ess = [dict(system='autobatch_vm', backend='xla', seconds=0.5,
              ess_min=7000.0),
         dict(system='TFP autobatched NUTS', backend='xla', seconds=1.0,
              ess_min=7000.0),                                   # 2x
         dict(system='TFP NoUTurnSampler', backend='xla', seconds=0.25,
              ess_min=7000.0)]                                   # 0.5
  found = {t['target']: t for t in targets.targets(rows, ess)}
  at = 'NUTS, 64 chains, XLA'

  def check(target, measured, met):
    t = found[target]
    assert t['met'] is met, t
    if measured is None:
      assert t['measured'] is None, t
    else:
      assert t['measured'] == pytest.approx(measured), t
  check('fibonacci, NumPy, B=64: TFP VM time / ours', 15.0, True)
  check('fibonacci, NumPy: our time at B=1024 / at B=64', 3.5, False)
  check(f'{at}: TFP autobatched time / ours', 1.8, False)
  check(f'{at}: our min ESS/s / TFP autobatched\'s', 2.0, True)
  check(f'{at}: hand-batched time / ours', 0.8, True)
  check(f'{at}: our min ESS/s / hand-batched\'s', 0.5, False)
  check('tree-RNN, NumPy (default mode: stackless), B=256: each tree alone '
        '/ ours', 22.0, True)
  check('fibonacci, XLA, B=1024: TFP VM time / ours', None, None)
  check('tree-RNN, XLA, B=256: each tree alone / ours', None, None)
  assert not [t for t in found if t.startswith('tree-RNN, NumPy,')]
  text = targets.targets_markdown(targets.targets(rows, ess))
  assert ('| NUTS, 64 chains, XLA: TFP autobatched time / ours | >= 2 | '
          '1.80 | **no** |') in text, text
  assert ('| fibonacci, XLA, B=1024: TFP VM time / ours | >= 2 | - | - |'
          in text), text
  assert '4 of 7 measured targets met.' in text, text


def test_nuts_ess_times_systems_in_turns_and_reports_medians(monkeypatch,
                                                            set_flags):
  """The ESS comparison draws the samples of each system after a warm-up
  draw, --nuts_ess_repeats times in turns (`interleaved_median_times`),
  and reports the median time and the median ESS of the timed draws (a
  single timed draw moved by 1.5x between runs on a shared machine)."""
  np = pytest.importorskip('numpy')
  from benchmarks import cells, nuts_ess  # pylint: disable=g-import-not-at-top
  set_flags(nuts_ess_samples=7, nuts_ess_repeats=2)
  monkeypatch.setattr(cells, 'NUTS_WARMUP', 5)
  calls = []
  interleaved = workloads.interleaved_median_times

  def spy(runs, repeats, **kwargs):
    calls.append((len(runs), repeats))
    return interleaved(runs, repeats, **kwargs)
  monkeypatch.setattr(workloads, 'interleaved_median_times', spy)
  cells.nuts_warm_state.cache_clear()
  try:
    rows = nuts_ess.nuts_ess(['numpy'], chains=3)
  finally:
    cells.nuts_warm_state.cache_clear()
  assert calls == [(1, 2)]   # NumPy: ours only, two timed rounds
  (row,) = rows
  assert row['system'] == 'autobatch_vm' and row['backend'] == 'numpy'
  assert row['runs'] == 2 and row['seconds'] > 0
  assert np.isfinite(row['ess_min']) and 0 < row['ess_min'] <= (
      row['ess_median'])
  assert 'medians of 2 runs per system' in nuts_ess.ess_markdown(rows)


def _spying_sampler(sampler_cls, seen, made=None):
  """A subclass of the NUTS example's `Sampler` that reports each call,
  `seen(sampler, name, args, out)`, and appends each sampler's chunk to
  `made`."""

  class Spy(sampler_cls):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      if made is not None:
        made.append(self.chunk)
      call = self._call

      def counted(name, *call_args):
        out = call(name, *call_args)
        seen(self, name, call_args, out)
        return out
      self._call = counted
  return Spy


def test_nuts_ess_draws_new_numbers_in_each_run(monkeypatch, set_flags):
  """Each run of our sampler in the ESS comparison (the warm-up one
  included) draws with its own seeds: the warm chains' seeds plus the
  run's index, so the median ESS is over different draws."""
  np = pytest.importorskip('numpy')
  from benchmarks import cells, nuts_ess  # pylint: disable=g-import-not-at-top
  nuts = cells.example('nuts')
  monkeypatch.setattr(cells, 'NUTS_WARMUP', 5)
  seeds_used, samples = [], []

  def seen(unused_sampler, unused_name, call_args, out):
    seeds_used.append(np.array(call_args[2]))
    samples.append(np.asarray(out[2]))
  spy = _spying_sampler(nuts.Sampler, seen)
  cells.nuts_warm_state.cache_clear()
  try:
    warm_seeds = cells.nuts_warm_state(2)[2]
    monkeypatch.setattr(nuts, 'Sampler', spy)
    set_flags(nuts_ess_samples=4, nuts_ess_repeats=2, nuts_ess_chunk=4)
    (row,) = nuts_ess.nuts_ess(['numpy'], chains=2)
  finally:
    cells.nuts_warm_state.cache_clear()
  assert row['runs'] == 2
  assert len(seeds_used) == 3   # one call per run: warm-up, then two
  for k, seeds in enumerate(seeds_used):
    np.testing.assert_array_equal(seeds, warm_seeds + np.uint64(k))
  assert not np.allclose(samples[1], samples[2])


def test_nuts_ess_draws_ours_in_calls_of_the_chunk(monkeypatch, set_flags):
  """Our sampler draws the ESS comparison's samples in calls of
  --nuts_ess_chunk transitions (the last call's extra samples dropped),
  and the table says so; a chunk above the samples is one call."""
  np = pytest.importorskip('numpy')
  from benchmarks import cells, nuts_ess  # pylint: disable=g-import-not-at-top
  nuts = cells.example('nuts')
  monkeypatch.setattr(cells, 'NUTS_WARMUP', 5)
  made, drawn = [], []

  def seen(unused_sampler, name, unused_call_args, out):
    drawn.append((name, np.asarray(out[2]).shape))
  spy = _spying_sampler(nuts.Sampler, seen, made=made)
  cells.nuts_warm_state.cache_clear()
  try:
    cells.nuts_warm_state(2)   # its sampler is not the one spied on
    monkeypatch.setattr(nuts, 'Sampler', spy)
    set_flags(nuts_ess_samples=7, nuts_ess_repeats=1, nuts_ess_chunk=3)
    (row,) = nuts_ess.nuts_ess(['numpy'], chains=2)
    assert made == [3]
    # A warm-up draw and a timed one, each of ceil(7 / 3) calls.
    assert drawn == [('run_chunk', (2, 3, 25))] * 6
    assert np.isfinite(row['ess_min'])
    assert 'ours in calls of 3 transitions' in nuts_ess.ess_markdown([row])
    set_flags(nuts_ess_chunk=25)
    made.clear()
    nuts_ess.nuts_ess(['numpy'], chains=2)
    assert made == [7]
  finally:
    cells.nuts_warm_state.cache_clear()


def test_nuts_on_tensorflow_is_the_median_over_fresh_processes(
    monkeypatch, set_flags, tmp_path):
  """NUTS cells on a TensorFlow backend are measured in --nuts_processes
  fresh processes (a process may run graph steps at a slower speed for
  its whole life), each figure the median over them; other cells in one."""
  from benchmarks import nuts_ess, processes, report, run  # pylint: disable=g-import-not-at-top
  set_flags()   # parsed

  def worker(k, backend):
    """One worker's results: times that differ per process `k`."""
    return {'rows': [dict(workload='nuts', backend=backend, batch=64,
                          seconds=[0.05, 0.06, 0.04][k],
                          throughput=100.0 / [0.05, 0.06, 0.04][k],
                          unit='leapfrogs/s', peak_mib=None, steps=107,
                          utilization=1.0,
                          tfp_seconds=[0.2, 0.3, 0.25][k],
                          hand_seconds=[0.03, 0.04, 0.035][k],
                          alone_seconds=None)],
            'schedules': [dict(workload='nuts', backend=backend,
                               lowest=[1.0, 3.0, 2.0][k],
                               most=[0.5, 0.7, 0.6][k])],
            'ess': [dict(system='autobatch_vm', backend=backend,
                         seconds=[5.0, 6.0, 4.0][k], ess_min=100.0,
                         ess_median=[1.0, 2.0, 3.0][k], runs=3)]}
  merged = processes.median_over_processes([worker(k, 'function')
                                            for k in range(3)])
  (row,) = merged['rows']
  assert row['seconds'] == 0.05 and row['tfp_seconds'] == 0.25
  assert row['hand_seconds'] == 0.035 and row['alone_seconds'] is None
  assert row['throughput'] == pytest.approx(100.0 / 0.05)
  assert row['processes'] == 3
  (sched,) = merged['schedules']
  assert (sched['lowest'], sched['most']) == (2.0, 0.6)
  (ess,) = merged['ess']
  assert (ess['seconds'], ess['ess_median']) == (5.0, 2.0)
  assert 'the medians over 3 fresh processes' in nuts_ess.ess_markdown([ess])
  # Each process's figures are kept, in order, and compared process by
  # process: 0.2/0.05, 0.3/0.06, 0.25/0.04.
  assert row['tfp_seconds_each'] == [0.2, 0.3, 0.25]
  assert ess['seconds_each'] == [5.0, 6.0, 4.0]
  text = report.per_process_markdown(merged)
  assert ('| NUTS, 64 chains, function: TFP autobatched time / ours | '
          '4.00, 5.00, 6.25 | 5.00 |') in text, text
  theirs = [processes.median_over_processes(
      [dict(rows=[], schedules=[], ess=[dict(
          system=name, backend='function', seconds=[5.0, 6.0, 4.0][k]
          * factor, ess_min=100.0, ess_median=1.0, runs=3)])
       for k in range(3)])['ess'][0]
            for name, factor in (('autobatch_vm', 1.0), ('hand', 0.5))]
  text = report.per_process_markdown(dict(rows=[], ess=theirs))
  assert ('| NUTS, 64 chains, function: our min ESS/s / hand\'s | 0.50, '
          '0.50, 0.50 | 0.50 |') in text, text
  assert report.per_process_markdown(dict(rows=[], ess=[])) == ''
  # One worker: its results as they are.
  one = worker(0, 'xla')
  assert processes.median_over_processes([one]) is one

  # The driver: three processes for NUTS on TensorFlow, one elsewhere.
  spawned = []

  def fake_process(workload, backend):
    spawned.append((workload, backend))
    k = sum(s == (workload, backend) for s in spawned) - 1
    return worker(k, backend) if workload == 'nuts' else {
        'rows': [], 'schedules': [], 'ess': []}
  monkeypatch.setattr(processes, 'measure_in_a_process', fake_process)
  monkeypatch.setattr(processes, 'add_tf_memory', lambda rows: None)
  monkeypatch.setattr(report, 'plot', lambda rows, path: None)
  set_flags(workloads=['collatz', 'nuts'], backends=['numpy', 'function'],
            nuts_processes=3, out=str(tmp_path))
  run.main([])
  assert spawned.count(('nuts', 'function')) == 3
  assert spawned.count(('nuts', 'numpy')) == 1
  assert spawned.count(('collatz', 'function')) == 1
  text = (tmp_path / 'results.md').read_text()
  assert '| nuts | function | 64 | 0.0500 | 2,000 leapfrogs/s |' in text, text


def test_hand_batched_nuts_draws_by_the_runs_index():
  """`nuts_runner`'s hand-batched sampler draws with seed `[seed + k, 1]`
  for `run(draw=k)`: the same samples for the same k, new ones for a new
  k (the ESS comparison's runs each draw new numbers)."""
  np = pytest.importorskip('numpy')
  from benchmarks import cells, tfp_baselines  # pylint: disable=g-import-not-at-top
  if not tfp_baselines.available():
    pytest.skip('needs TensorFlow Probability')
  target = cells.example('nuts').make_target('gaussian')  # pylint: disable=protected-access
  sampler, out = tfp_baselines.nuts_runner(
      'unrolled', 'function', target, np.zeros((3, target.dim)),
      np.full(3, 0.3), 4, 3)
  drawn = []
  for draw in (0, 0, 1):
    sampler(draw=draw)
    drawn.append(out['samples'].copy())
  assert out['leapfrogs_each'].shape == (4, 3)
  assert out['leapfrogs'] == np.sum(out['leapfrogs_each']) > 0
  np.testing.assert_array_equal(drawn[0], drawn[1])
  assert not np.allclose(drawn[0], drawn[2])


def test_tfp_nuts_leapfrogs_are_counted_per_transition():
  """TFP's autobatched NUTS program (here on our VM, run member by member
  in eager mode) keeps `leapfrogs_taken` as a running total, the
  hand-batched `tfp.mcmc.NoUTurnSampler` per transition;
  `leapfrogs_per_iteration` turns either into each transition's own count
  per chain: the leapfrogs of that chain's own trajectory.  Run member by
  member, TFP's program takes a gradient per leapfrog of each chain; the
  hand-batched sampler steps every chain while any goes on, and counts for
  each chain only the leapfrogs before its tree stopped."""
  np = pytest.importorskip('numpy')
  from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top
  if not tfp_baselines.available():
    pytest.skip('needs TensorFlow Probability')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
  calls = [0]

  def log_prob(x):
    calls[0] += 1
    return -0.5 * tf.reduce_sum(x * x, -1)

  x = tf.constant([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1]])
  step = tf.constant([[0.5]])
  kernels = {
      'autobatched_ours': tfp_baselines.tfp_nuts_on_autobatch_vm()
                          .NoUTurnSampler(log_prob, step_size=step,
                                          max_tree_depth=4, seed=1,
                                          use_auto_batching=False),
      'unrolled': tfp.mcmc.NoUTurnSampler(log_prob, step_size=step,
                                          max_tree_depth=4)}
  for kind, kernel in kernels.items():
    seeds = {} if kind != 'unrolled' else {'seed': tf.constant([3, 1])}
    kernel.one_step(x, kernel.bootstrap_results(x), **seeds)  # first call
    results = kernel.bootstrap_results(x)
    state, trace, gradients = x, [], []
    for _ in range(4):
      before = calls[0]
      state, results = kernel.one_step(state, results, **seeds)
      gradients.append(calls[0] - before)
      trace.append(results.leapfrogs_taken.numpy())
    each = tfp_baselines.leapfrogs_per_iteration(kind, np.stack(trace))
    assert each.shape == (4, 3)
    # Some chain stopped before another: its count is its own.
    assert np.any(each.min(axis=1) < each.max(axis=1)), each
    if kind == 'autobatched_ours':   # one gradient per leapfrog and chain
      np.testing.assert_array_equal(each.sum(axis=1), gradients)
    else:   # in lock step, evaluating the target twice per leapfrog eagerly
      np.testing.assert_array_equal(2 * each.max(axis=1), gradients)
    # A previous count of 1000 is carried on by the running total only.
    carried = results._replace(
        leapfrogs_taken=results.leapfrogs_taken + 1000)
    after = kernel.one_step(state, carried, **seeds)[1].leapfrogs_taken
    assert (after.numpy()[0] >= 1000) == (
        kind in tfp_baselines.CUMULATIVE_LEAPFROGS)


def test_nuts_gradient_floor_runs_the_leapfrogs_back_to_back():
  """The floor of a NUTS cell: `evaluations` leapfrog steps of every chain,
  one gradient of the target each, from the chains at their step sizes."""
  from benchmarks import cells  # pylint: disable=g-import-not-at-top
  nuts = cells.example('nuts')
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  seen = []

  def counted(theta):
    seen.append(np.array(theta))
    return target.log_prob_and_grad(theta)
  sampler = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=4)
  state = sampler.warmup(4, 2, seed=3)
  cells.nuts_gradient_floor(
      nuts, 'numpy', target._replace(log_prob_and_grad=counted), state, 7)()
  assert len(seen) == 7 and all(t.shape == (4, 3) for t in seen)
  # The first step moves each chain by its own step size.
  point, step = state[0], np.exp(state[1].log_eps_bar)[:, None]
  np.testing.assert_allclose(
      seen[0], point.theta + step * (point.r + 0.5 * step * point.grad))


def test_floor_table_sets_each_time_beside_the_gradients_alone():
  from benchmarks import report  # pylint: disable=g-import-not-at-top
  rows = [dict(workload='nuts', backend='xla', batch=64, seconds=0.025,
               floor_seconds=0.020, tfp_seconds=0.050, hand_seconds=None),
          dict(workload='fibonacci', backend='xla', batch=64, seconds=0.01,
               floor_seconds=None)]
  text = report.floor_markdown(rows)
  assert ('| xla | 64 | 0.0250 | 0.0200 | 0.0050 | 0.80 | 2.50 | - |'
          in text), text
  assert 'fibonacci' not in text and text.count('\n| xla') == 1
  assert report.floor_markdown(rows[1:]) == ''


def test_tfp_baselines_quiet_only_their_own_tracing():
  """TFP's VM warns at every program it traces; the baselines trace under
  `quiet_logs` (errors only), which restores the log levels after, even on
  an exception, and only the first call of a staged baseline is quiet."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import tfp_baselines
  before = (absl_logging.get_verbosity(), tf.get_logger().level)
  seen = []

  def levels():
    seen.append((absl_logging.get_verbosity(), tf.get_logger().level))
    return len(seen)

  run = tfp_baselines._first_call_quiet(levels)  # pylint: disable=protected-access
  assert (run(), run()) == (1, 2)
  assert seen == [(absl_logging.ERROR, 40), before]
  with pytest.raises(ValueError):
    with tfp_baselines.quiet_logs():
      raise ValueError('inside')
  assert (absl_logging.get_verbosity(), tf.get_logger().level) == before


@pytest.mark.slow    # a subprocess timing every backend
def test_scaling_quick_run_writes_both_tables(tmp_path):
  """`benchmarks/scaling.py --quick --out=DIR`: scaling.md holds the
  batch-size table (time per call and per member) with a row per backend
  and a column per size, and the depth table with a row per backend that
  has a stack (not stackless); scaling.json the same cells."""
  env = dict(os.environ, OPENBLAS_NUM_THREADS='1', TF_CPP_MIN_LOG_LEVEL='2')
  proc = subprocess.run(
      [sys.executable, str(ROOT / 'benchmarks' / 'scaling.py'), '--quick',
       f'--out={tmp_path}', '--note=A test run.'],
      capture_output=True, text=True, timeout=600, env=env, check=False,
      cwd=ROOT)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  text = (tmp_path / 'scaling.md').read_text()
  assert '`python benchmarks/scaling.py --quick`' in text, text
  assert 'A test run.' in text and 'Load average' in text
  batch_part, depth_part = text.split('## Time against max_stack_depth')
  assert '## Time against batch size (max_stack_depth=16)' in batch_part
  assert '| system | backend | B=64 | B=256 |' in batch_part
  assert '| system | backend | depth=16 | depth=64 |' in depth_part
  backends = ['NumPy (stack VM)', 'NumPy stackless']
  if _has_tf():
    backends += ['TF eager', 'tf.function', 'XLA']
  for backend in backends:
    # Twice: milliseconds per call, and microseconds per member.
    assert batch_part.count(f'| autobatch_vm | {backend} | ') == 2, backend
    want = 0 if backend == 'NumPy stackless' else 1
    assert depth_part.count(f'| autobatch_vm | {backend} | ') == want
  assert 'TFP VM' not in text        # --quick leaves TFP out
  assert 'skipped' not in text.split('|', 1)[1]
  results = json.loads((tmp_path / 'scaling.json').read_text())
  assert len(results['batch']) == 2 * len(backends)
  assert len(results['depth']) == 2 * (len(backends) - 1)
  assert all(c['seconds'] > 0 for c in results['batch'] + results['depth'])
  if importlib.util.find_spec('matplotlib'):
    assert (tmp_path / 'scaling.png').stat().st_size > 0
    assert '](scaling.png)' in text


def test_scaling_skips_cells_predicted_over_budget():
  """A cell is skipped when its system's time at the size before, scaled
  linearly, says its calls would exceed the budget; the system's larger
  sizes after a skip are skipped too, and the tables mark both.  The
  module imports beside `benchmarks.options` (whose flags it shares names
  with) without a flag clash."""
  from benchmarks import options  # pylint: disable=g-import-not-at-top,unused-import
  from benchmarks import scaling  # pylint: disable=g-import-not-at-top
  fast, slow = (scaling.OURS, 'xla'), (scaling.TFP, 'function')
  sizes = [64, 256, 1024]
  times = {(fast, 64): 0.01, (slow, 64): 2.0}
  assert scaling.predicted_seconds(times, fast, sizes, 0) is None
  assert scaling.predicted_seconds(times, slow, sizes, 1) == 8.0
  assert scaling.predicted_seconds(times, slow, sizes, 2) == float('inf')
  results = dict(
      command=' --tfp=function', machine=dict(
          cpus=2, cpu='cpu', python='3', numpy='2', tensorflow='2.21',
          tfp='0.25', date='today', load_before=[1.0, 1.0, 1.0],
          load_after=[2.0, 2.0, 2.0]),
      systems=[list(fast), list(slow)],
      flags=dict(batch_sizes=sizes, batch_depth=20, depths=[16],
                 depth_batch=1024, repeats=7, cell_seconds=60.0),
      batch=[dict(system=list(fast), size=b, seconds=0.01 * b / 64,
                  skipped_estimate=None) for b in sizes] + [
                      dict(system=list(slow), size=64, seconds=2.0,
                           skipped_estimate=None),
                      dict(system=list(slow), size=256, seconds=None,
                           skipped_estimate=8.0),
                      dict(system=list(slow), size=1024, seconds=None,
                           skipped_estimate=float('inf'))],
      depth=[dict(system=list(fast), size=16, seconds=0.5,
                  skipped_estimate=None)])
  text = scaling.markdown(results)
  assert '| TFP VM | tf.function | 2,000 | skipped (~8 s) | skipped |' in text
  assert '| autobatch_vm | XLA | 10 | 40 | 160 |' in text
  assert '| autobatch_vm | XLA | 156 | 156 | 156 |' in text   # µs/member
  assert '| autobatch_vm | XLA | 500 (1.00x) |' in text
  # No depth cells of TFP's VM: no row for it in the depth table.
  assert 'TFP VM' not in text.split('## Time against max_stack_depth')[1]


def _fake_system(offset, leapfrogs):
  """A `nuts_systems` system drawing the target's start plus `offset` at
  every iteration, counting `leapfrogs` per chain and iteration."""
  def make(target, theta, iterations):
    def run():
      samples = np.broadcast_to(theta + offset,
                                (iterations,) + theta.shape).copy()
      return samples, np.full((iterations, theta.shape[0]), leapfrogs, float)
    return run
  return make


def test_nuts_systems_warms_the_process_up_before_first_calls(monkeypatch):
  """The process's one-time costs are paid before any system's first call
  is timed (else the system called first pays them), for the systems
  that run."""
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  target = nuts_systems.gaussian(dim=4)
  monkeypatch.setattr(nuts_systems, 'TARGETS', {'gaussian': lambda: target})
  events = []

  def made(name):
    def make(*args):
      events.append(name)
      return _fake_system(0 * target.sd, 3)(*args)
    return make
  monkeypatch.setattr(nuts_systems, 'SYSTEMS', {
      'hand_xla': ('hand', 'numpy', made('hand_xla')),
      'ours_xla': ('ours', 'numpy', made('ours_xla')),
      'numpyro': ('np', 'numpyro_missing', made('numpyro'))})
  monkeypatch.setattr(nuts_systems, 'warm_up',
                      lambda names: events.append(('warm', tuple(names))))
  nuts_systems.measure_cell('gaussian', 4, list(nuts_systems.SYSTEMS),
                            iterations=2, repeats=1)
  assert events == [('warm', ('hand_xla', 'ours_xla')), 'hand_xla',
                    'ours_xla']


def test_nuts_systems_cell_times_in_turns_and_skips_missing_systems(
    monkeypatch, clock):
  """A cell of `benchmarks/nuts_systems.py`: each installed system timed
  in turns, its leapfrogs/s from its own per-iteration counts, the ratios
  to the hand-batched sampler and to BlackJAX, the mean check; a system
  whose package is missing (here NumPyro) is skipped with a note, the
  others still run."""
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  target = nuts_systems.gaussian(dim=4)
  monkeypatch.setattr(nuts_systems, 'TARGETS', {'gaussian': lambda: target})
  sd = target.sd

  def timed(seconds, make):
    def built(*args):
      run = make(*args)

      def call():
        clock.now += seconds
        return run()
      return call
    return built
  monkeypatch.setattr(nuts_systems, 'SYSTEMS', {
      'hand_xla': ('hand', 'numpy', timed(2.0, _fake_system(0 * sd, 10))),
      'blackjax': ('bj', 'numpy', timed(1.0, _fake_system(0 * sd, 4))),
      'ours_xla': ('ours', 'numpy', timed(4.0, _fake_system(2 * sd, 20))),
      'numpyro': ('np', 'numpyro_missing', _fake_system(0, 1))})
  monkeypatch.setattr(nuts_systems.time, 'perf_counter', lambda: clock.now)
  cell = nuts_systems.measure_cell('gaussian', 16, list(
      nuts_systems.SYSTEMS), iterations=5, repeats=3)
  rows = {r['system']: r for r in cell['rows']}
  assert list(rows) == ['hand_xla', 'blackjax', 'ours_xla']
  assert 'numpyro_missing is not installed' in cell['skipped']['numpyro']
  assert rows['ours_xla']['seconds_per_iteration'] == pytest.approx(0.8)
  # 20 leapfrogs x 16 chains x 5 iterations in 4 s.
  assert rows['ours_xla']['leapfrogs_per_second'] == pytest.approx(400)
  assert nuts_systems.ratios(cell)['ours_xla'] == pytest.approx((1.0, 1.25))
  assert rows['blackjax']['agree'] and rows['hand_xla']['agree']
  # The start (16 draws of the target) plus two sd: 8 standard errors off.
  assert not rows['ours_xla']['agree']
  text = nuts_systems.cell_markdown(cell)
  assert '| np | skipped: numpyro_missing is not installed' in text, text
  assert '| ours | 800.0 | 400 | 1.00x | 1.25x |' in text, text


def test_nuts_systems_without_jax_skips_only_the_jax_rows(monkeypatch):
  """Without JAX, BlackJAX's and NumPyro's rows are skipped with a note
  naming the extra to install; the TensorFlow rows stay (with TFP)."""
  from benchmarks import nuts_systems, tfp_baselines  # pylint: disable=g-import-not-at-top
  for name in ('jax', 'blackjax', 'numpyro'):   # importing them fails
    monkeypatch.setitem(sys.modules, name, None)
  ok, notes = nuts_systems.available(list(nuts_systems.SYSTEMS))
  assert sorted(notes) == ['blackjax', 'numpyro']
  assert all('bench-jax' in why for why in notes.values())
  assert ok == ([s for s in nuts_systems.SYSTEMS if s not in notes]
                if tfp_baselines.available() else [])


def test_nuts_systems_readme_table_is_a_row_per_system():
  """readme_table renders a nuts_systems run: a row per system, a column
  per cell, each entry time, leapfrogs/s and both ratios."""
  import importlib  # pylint: disable=g-import-not-at-top
  readme_table = importlib.import_module('benchmarks.readme_table')
  row = lambda name, s, lf: dict(system=name, seconds_per_iteration=s,
                                 leapfrogs_per_second=lf,
                                 leapfrogs_per_chain_iteration=12.0)
  cell = lambda chains: dict(target='gaussian', chains=chains, skipped={
      'numpyro': 'numpyro is not installed'}, rows=[
          row('ours_xla', 0.02, 1000.0), row('hand_xla', 0.01, 2000.0),
          row('blackjax', 0.01, 4000.0)])
  text = readme_table.nuts_systems_table({'cells': [cell(64), cell(256)]})
  lines = text.splitlines()
  assert lines[0] == '| system | Gaussian, 64 chains | Gaussian, 256 chains |'
  assert lines[2].endswith(
      '| 20 ms, 1,000/s (12 a chain and iteration), 0.50x hand, 0.25x '
      'BlackJAX | 20 ms, 1,000/s (12 a chain and iteration), 0.50x hand, '
      '0.25x BlackJAX |'), lines[2]
  assert lines[-1].endswith(
      '| numpyro is not installed | numpyro is not installed |')


def test_nuts_systems_jax_rows_count_the_gradients_they_take():
  """BlackJAX's `num_integration_steps` and NumPyro's `num_steps`, as the
  benchmark reads them, are the leapfrogs each iteration took: one
  gradient each (a run-time callback counts them; one more at the start),
  per iteration, not a running total."""
  jax = pytest.importorskip('jax')
  pytest.importorskip('blackjax')
  pytest.importorskip('numpyro')
  from benchmarks import nuts_systems  # pylint: disable=g-import-not-at-top
  calls = [0]

  def bump():
    calls[0] += 1

  def log_prob(theta):
    jax.debug.callback(bump)
    return -0.5 * jax.numpy.sum(theta * theta)
  target = nuts_systems.Target(
      'standard normal', 2, 0.3, np.zeros(2), np.ones(2),
      lambda chains: np.full((chains, 2), 0.3, np.float32), None, log_prob)
  for name in ('blackjax', 'numpyro'):
    calls[0] = 0
    samples, leapfrogs = nuts_systems.SYSTEMS[name][2](
        target, target.start(1), 3)()
    jax.effects_barrier()
    assert samples.shape == (3, 1, 2) and leapfrogs.shape == (3, 1)
    assert np.sum(leapfrogs) + 1 == calls[0], name
    assert np.all(leapfrogs < 2**nuts_systems.MAX_TREE_DEPTH), name


@pytest.mark.slow    # a subprocess compiling three samplers
def test_nuts_systems_quick_run_writes_its_table(tmp_path):
  """`benchmarks/nuts_systems.py --quick` end to end, on the systems
  installed here among three (the JAX ones need the bench-jax extra):
  results.md and results.json with a row per system, or its note."""
  subprocess.run(
      [sys.executable, str(ROOT / 'benchmarks' / 'nuts_systems.py'),
       '--quick', '--systems=hand_function,blackjax,numpyro',
       f'--out={tmp_path}'], check=True, cwd=ROOT)
  results = json.loads((tmp_path / 'results.json').read_text())
  [cell] = results['cells']
  assert (cell['target'], cell['chains'], cell['iterations']) == (
      'gaussian', 8, 2)
  seen = [r['system'] for r in cell['rows']] + list(cell['skipped'])
  assert sorted(seen) == ['blackjax', 'hand_function', 'numpyro']
  for r in cell['rows']:
    assert r['leapfrogs_per_second'] > 0 and r['agree'], r
  assert 'ms / iteration' in (tmp_path / 'results.md').read_text()


@pytest.mark.slow
def test_per_member_forms_nuts_rows_run_the_same_chains():
  """per_member_forms' NUTS rows: both forms' `run_chunk` from one state,
  on NumPy, draw the same samples (three chains)."""
  from benchmarks import per_member_forms  # pylint: disable=g-import-not-at-top
  (aware, member), args, depth = per_member_forms.nuts_forms(3, 'numpy')
  assert member.per_member and not aware.per_member
  runs = per_member_forms._callers(aware, member, args, 'numpy', depth,  # pylint: disable=protected-access
                                   pick=lambda out: out[2])
  want = runs[0]()
  assert want.shape == (3, per_member_forms.NUTS_CHUNK, 25)
  np.testing.assert_allclose(runs[1](), want, rtol=0, atol=1e-10)


def test_nuts_steps_figures_bound_steps_by_the_longest_chain():
  """nuts_steps' figures per iteration and their means: steps over the
  longest chain's blocks (what the schedule loses), and blocks per
  leapfrog of the chain that ran the most leapfrogs."""
  from benchmarks import nuts_steps  # pylint: disable=g-import-not-at-top
  stats = collections.namedtuple(
      'Stats', ['steps', 'longest_member_blocks', 'utilization'])
  its = [nuts_steps.iteration_figures(stats(520, 500, 0.35), [10, 125, 40]),
         nuts_steps.iteration_figures(stats(480, 480, 0.25), [20, 120, 61])]
  assert its[0]['blocks_per_leapfrog'] == 4.0
  assert its[1]['leapfrogs_mean'] == 67.0
  figures = nuts_steps.mean_figures(its)
  assert (figures['steps'], figures['longest']) == (500, 490)
  assert figures['utilization'] == pytest.approx(0.3)
  assert figures['schedule_overhead'] == pytest.approx(500 / 490)
  table = nuts_steps.markdown([(('gaussian', 64), figures)])
  assert '| gaussian | 64 | 500 | 490 | 1.020 | 62.7, 122 | 4.00 | 30.0% |' in (
      table), table


@pytest.mark.slow
def test_nuts_steps_runs_tfps_program_on_our_vm():
  """nuts_steps on TFP's NUTS program (4 chains, 2 iterations): no
  schedule beats the longest chain's own blocks, and each of its
  leapfrogs takes at least one block."""
  pytest.importorskip('tensorflow_probability')
  from benchmarks import nuts_steps  # pylint: disable=g-import-not-at-top
  figures, table, xla = nuts_steps.measure('gaussian', 4, 2)
  assert figures['steps'] >= figures['longest'] > 0
  assert figures['blocks_per_leapfrog'] >= 1
  assert 0 < figures['utilization'] <= 1
  assert '_build_tree' in table and not xla


def test_first_call_splits_the_compile_at_the_logs_milestones():
  """`first_call.split` reads each stage's end from TensorFlow's and XLA's
  log lines (both of their time formats), after the trace only, and
  turns wall times into the sampled CPU times."""
  from benchmarks import first_call  # pylint: disable=g-import-not-at-top
  log = '\n'.join([
      'I0000 00:00:5.000000 1 xla_compiler.cc:820] XlaCompiler::'
      'CompileFunction __inference_probe',   # during the trace: ignored
      'I0000 00:00:11.000000 1 xla_compiler.cc:820] XlaCompiler::'
      'CompileFunction __inference_sample',
      'I0000 00:00:13.000000 1 hlo_pass_pipeline.cc:169] HLO pass: dce',
      'I0000 00:00:14.000000 1 hlo_pass_pipeline.cc:169] HLO pass: dce',
      'I0000 00:00:16.000000 1 cpu_compiler.cc:2060] Compiling: a_sample',
      time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(26)) + '.000000: I '
      'device_compiler.h:468] Compilation of XLA executable time: 10 s',
  ])
  # CPU time runs at half the wall clock's speed from wall time 0.
  samples = [(float(t), t / 2.0) for t in range(40)]
  result = dict(marks=dict(start=(0.0, 0.0), traced=(10.0, 5.0),
                           first=(30.0, 15.0)),
                samples=samples, call=1.0, ops=7, constants=3, tf='x')
  out = first_call.split(result, log)
  wall = {k: v[0] for k, v in out['stages'].items()}
  cpu = {k: v[1] for k, v in out['stages'].items()}
  assert wall == dict(trace=10.0, graph=1.0, tf2xla=2.0, hlo=3.0,
                      codegen=10.0, run=4.0, first=30.0, compile=None,
                      call=None)
  assert cpu['codegen'] == 5.0 and cpu['first'] == 15.0
  assert cpu['compile'] == 14.0 and out['kernels'] is None
  assert out['llvm'] is None
  with pytest.raises(RuntimeError, match='TF_CPP_VMODULE'):
    first_call.split(result, log.split('\n', 2)[0])
  # TensorFlow 2.21's XLA logs each kernel's LLVM module and its time.
  log += '\n' + '\n'.join([
      'I0000 00:00:17.000000 1 ir_compiler.cc:256] Compiled LLVM module: '
      '__compute_module_a_kernel_module time: 20.5 ms (20500 us) '
      '(cumulative: 20.5 ms, max: 20.5 ms, #called: 1)',
      'I0000 00:00:18.000000 1 ir_compiler.cc:256] Compiled LLVM module: '
      '__compute_module_wrapped_scatter time: 1.5 s (1500000 us) '
      '(cumulative: 1.52 s, max: 1.5 s, #called: 2)'])
  out = first_call.split(result, log)
  assert out['kernels'] == 2 and out['llvm'] == pytest.approx(1.5205)
