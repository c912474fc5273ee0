"""Batched functions, Contexts and staged functions travel between processes.

`tests/pickle_programs.py` holds batched functions at the top level of an
importable module, which pickle by name (plain `pickle` too), and one
defined inside a function, which pickles by value (its Context's functions
and compiled programs, with cloudpickle).  Round trips in this process,
through a `multiprocessing` pool started with spawn, through Dask's
`client.submit` on a `LocalCluster` of one worker process, through Ray's
tasks (slow tier, where Ray is installed), and from a script's
`__main__`; what cannot travel (caches, locks, statistics,
`tf.function`s) is rebuilt on the other side, which compiles at most once.
"""

import concurrent.futures
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import cloudpickle
import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests import pickle_programs as programs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PICKLERS = [pytest.param(pickle, id='pickle'),
            pytest.param(cloudpickle, id='cloudpickle')]


@pytest.mark.parametrize('pickler', PICKLERS)
def test_module_level_functions_and_context_pickle_by_name(pickler):
  n = np.arange(1, 9)
  expected = programs.fib(n)
  data = pickler.dumps(programs.fib)
  assert len(data) < 200          # a name, not the program
  assert pickle.loads(data) is programs.fib
  assert pickle.loads(pickler.dumps(programs.ctx)) is programs.ctx
  fib, ctx = pickle.loads(pickler.dumps((programs.fib, programs.ctx)))
  assert fib is programs.fib and ctx is programs.ctx
  np.testing.assert_array_equal(fib(n), expected)


@pytest.mark.parametrize('pickler', PICKLERS)
def test_round_trip_by_value_gives_the_same_values_without_compiling(
    pickler):
  tribonacci = programs.make_tribonacci()
  n = np.arange(0, 12)
  expected = tribonacci(n, max_stack_depth=14)
  assert tribonacci.last_stats is not None
  data = pickler.dumps(tribonacci)
  copy = pickle.loads(data)
  assert copy is not tribonacci and copy.context is not tribonacci.context
  assert copy.last_stats is None and not copy.context.compiled
  np.testing.assert_array_equal(copy(n, max_stack_depth=14), expected)
  assert not copy.context.compiled       # ran the shipped program
  assert copy.last_stats.steps == tribonacci.last_stats.steps
  # The same payload again (a later task in a worker) is the same
  # Context; a function and its Context pickled together share it.
  assert pickle.loads(data) is copy
  again, ctx = pickle.loads(pickler.dumps((tribonacci, tribonacci.context)))
  assert again.context is ctx
  # A signature not shipped compiles from the source, which travelled
  # with the program: errors name the function's file.
  np.testing.assert_array_equal(
      copy(n.astype(np.int32), max_stack_depth=14),
      tribonacci(n.astype(np.int32), max_stack_depth=14))
  assert copy.context.compiled
  loc = copy.context.function_loc('tribonacci')
  assert loc.filename == programs.__file__
  with pytest.raises(errors.StackOverflowError) as info:
    copy(n, max_stack_depth=3, stackless=False)
  assert info.value.loc.function == 'tribonacci'


def test_context_state_round_trip_with_plain_pickle():
  tribonacci = programs.make_tribonacci()
  n = np.arange(0, 10)
  expected = tribonacci(n)
  state = pickle.loads(pickle.dumps(tribonacci.context.export_state()))
  assert isinstance(state, ab.frontend.ContextState)
  assert list(state.functions) == ['tribonacci']
  rebuilt = ab.Context()
  functions = rebuilt.install_state(state)
  np.testing.assert_array_equal(functions['tribonacci'](n), expected)
  assert not rebuilt.compiled


@pytest.mark.slow     # imports TensorFlow and traces
def test_staged_function_round_trip_traces_once():
  tf = pytest.importorskip('tensorflow')
  staged = ab.stage(programs.fib, max_stack_depth=12)
  n = tf.constant(np.arange(1, 9))
  expected = staged.numpy(n)
  copy = pickle.loads(cloudpickle.dumps(staged))
  assert isinstance(copy, ab.staging.StagedFunction)
  copy = pickle.loads(pickle.dumps(staged))
  assert isinstance(copy, ab.staging.StagedFunction)
  assert copy.fn is programs.fib and copy.call_kwargs == {
      'max_stack_depth': 12}
  assert copy.last_stats is None
  np.testing.assert_array_equal(copy.numpy(n), expected)
  np.testing.assert_array_equal(copy.numpy(n + 1), staged.numpy(n + 1))
  assert len(copy._traced) == 1      # pylint: disable=protected-access
  assert copy.fast_calls == 1 and copy.last_stats.steps > 0


def test_a_sharded_function_says_to_pickle_the_batched_function():
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    sharded = ab.shard(programs.fib, executor=pool)
    for pickler in (pickle, cloudpickle):
      with pytest.raises(errors.ArgumentError, match='sharded function') \
          as info:
        pickler.dumps(sharded)
      assert info.value.loc.function == 'fib'
      assert 'sharded.fn' in info.value.hint


def test_what_does_not_pickle_is_named():
  lock = threading.Lock()
  ctx = ab.Context()

  def locked_increment(x):
    with lock:
      return x + 1

  @ctx.batch
  def bump(x):
    return locked_increment(x)

  with pytest.raises(errors.ArgumentError, match='cannot be pickled') as info:
    pickle.dumps(bump)
  assert info.value.loc.function == 'bump'
  assert 'lock' in str(info.value)


def test_multiprocessing_spawn_pool():
  tribonacci = programs.make_tribonacci()   # by value, compiled here
  n = np.arange(1, 9)
  expected = tribonacci(n)
  with multiprocessing.get_context('spawn').Pool(1) as pool:
    outs = pool.map(programs.fib, [n, n + 1])
    np.testing.assert_array_equal(outs[0], programs.fib(n))
    np.testing.assert_array_equal(outs[1], programs.fib(n + 1))
    reports = pool.starmap(programs.report, [
        (tribonacci, n), (tribonacci, n), (programs.fib, n),
        (programs.fib, n + 1)])
  pids = {r[1] for r in reports}
  assert len(pids) == 1 and os.getpid() not in pids
  np.testing.assert_array_equal(reports[0][0], expected)
  np.testing.assert_array_equal(reports[1][0], expected)
  # By value: one Context in the worker for both tasks, which ran the
  # shipped program.  By name: the worker's module-level Context, which
  # compiled once.
  assert reports[0][2] == reports[1][2]
  assert not reports[0][3] and not reports[1][3]
  assert reports[2][2] == reports[3][2] and reports[2][3]
  np.testing.assert_array_equal(reports[3][0], programs.fib(n + 1))


def test_dask_client_submit():
  distributed = pytest.importorskip('distributed')
  tribonacci = programs.make_tribonacci()
  n = np.arange(1, 9)
  expected = tribonacci(n)
  with distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                processes=True,
                                dashboard_address=None) as cluster, \
      distributed.Client(cluster) as client:
    np.testing.assert_array_equal(client.submit(programs.fib, n).result(),
                                  programs.fib(n))
    first, second = client.gather([
        client.submit(programs.report, tribonacci, n, pure=False),
        client.submit(programs.report, tribonacci, n, pure=False)])
  np.testing.assert_array_equal(first[0], expected)
  assert first[1] != os.getpid()
  assert first[2] == second[2] and not first[3] and not second[3]


@pytest.mark.slow     # starts a Ray instance (about 15 s)
def test_ray_remote_task_takes_batched_functions():
  """Ray's tasks take batched functions as arguments (`ray.remote` itself
  takes plain functions and classes only): by name, and by value with the
  programs compiled here, which the worker runs without compiling."""
  ray = pytest.importorskip('ray')
  tribonacci = programs.make_tribonacci()
  n = np.arange(1, 9)
  expected = tribonacci(n)
  ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
           runtime_env={'env_vars': {'PYTHONPATH': ROOT}})
  try:
    call = ray.remote(_call)
    report = ray.remote(programs.report)
    np.testing.assert_array_equal(ray.get(call.remote(programs.fib, n)),
                                  programs.fib(n))
    first, second = ray.get([report.remote(tribonacci, n),
                             report.remote(tribonacci, n)])
  finally:
    ray.shutdown()
  np.testing.assert_array_equal(first[0], expected)
  assert first[1] != os.getpid()
  assert first[2] == second[2] and not first[3] and not second[3]


def _call(fn, *args):
  return fn(*args)


def test_functions_of_a_script_travel(tmp_path):
  """A script's `__main__` functions pickle by value (a Dask worker has
  another `__main__`): a spawn pool and Dask's workers both take them."""
  script = tmp_path / 'script.py'
  script.write_text(textwrap.dedent('''
      import multiprocessing
      import numpy as np
      import autobatch_vm as ab

      ctx = ab.Context()

      @ctx.batch
      def fib(n):
        if n > 2:
          return fib(n - 1) + fib(n - 2)
        return n * 0 + 1

      if __name__ == '__main__':
        from distributed import Client, LocalCluster
        n = np.arange(1, 9)
        expected = fib(n)
        with multiprocessing.get_context('spawn').Pool(1) as pool:
          out = pool.map(fib, [n])[0]
        assert (out == expected).all(), out
        with LocalCluster(n_workers=1, threads_per_worker=1,
                          processes=True, dashboard_address=None) as c, \\
            Client(c) as client:
          out = client.submit(fib, n).result()
        assert (out == expected).all(), out
        print('travelled')
      '''))
  proc = subprocess.run([sys.executable, str(script)], capture_output=True,
                        text=True, timeout=300, check=False,
                        env=dict(os.environ, PYTHONPATH=ROOT),
                        cwd=tmp_path)
  assert proc.returncode == 0 and 'travelled' in proc.stdout, (
      proc.stdout[-3000:] + proc.stderr[-3000:])
