"""Tests of `ab.shard`: a batched call split over devices or workers.

Differential: a sharded call returns what the unsharded call returns
(values, shapes, dtypes), for fib, collatz, the tree RNN and NUTS chains;
each shard's statistics are those of its members run as a batch alone;
errors name the members of the whole batch.

The NumPy form runs on a `dask.distributed.LocalCluster` of two worker
processes (and a process pool).  The TensorFlow form needs logical CPU
devices, which must be configured before TensorFlow initializes its
devices: `test_tensorflow_on_logical_devices` runs this file again in a
subprocess with AB_SHARD_DEVICES set (2, then 4), where the `tf_` tests
run and the others are skipped.  A `MultiWorkerMirroredStrategy` has to be
made before TensorFlow initializes its devices and collective ops, and
not beside other strategies: `test_multi_worker_mirrored_strategy` runs
the `multi_worker` tests in a subprocess of their own
(AB_SHARD_STRATEGY=multi_worker), which makes it on import.
"""

import concurrent.futures
import importlib.util
import multiprocessing
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

DEVICES = int(os.environ.get('AB_SHARD_DEVICES', '0'))
MULTI_WORKER = os.environ.get('AB_SHARD_STRATEGY') == 'multi_worker'
if DEVICES:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices('CPU')[0],
      [tf.config.LogicalDeviceConfiguration()] * DEVICES)
  if MULTI_WORKER:
    # One worker (no TF_CONFIG), made before TensorFlow initializes its
    # devices and collective ops.
    MULTI_WORKER_STRATEGY = tf.distribute.MultiWorkerMirroredStrategy()

import autobatch_vm as ab  # pylint: disable=g-import-not-at-top,wrong-import-position
from autobatch_vm import errors  # pylint: disable=g-import-not-at-top,wrong-import-position

shard_lib = sys.modules['autobatch_vm.sharding.shard']
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / 'examples'

in_device_process = pytest.mark.skipif(
    not DEVICES or MULTI_WORKER, reason='run by '
    'test_tensorflow_on_logical_devices, in a subprocess with logical CPU '
    'devices')
in_multi_worker_process = pytest.mark.skipif(
    not MULTI_WORKER, reason='run by test_multi_worker_mirrored_strategy, in '
    'a subprocess of its own')
in_main_process = pytest.mark.skipif(
    bool(DEVICES), reason='runs in the main test process')


def _load(name):
  """examples/<name>.py as module `examples_<name>` (as test_examples
  loads it): a module that worker processes cannot import by name, so the
  executor form ships its functions by value."""
  module_name = f'examples_{name}'
  if module_name not in sys.modules:
    spec = importlib.util.spec_from_file_location(module_name,
                                                  EXAMPLES / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
  return sys.modules[module_name]


fib_module = _load('fibonacci')
collatz = _load('collatz')
tree_rnn = _load('tree_rnn')
nuts = _load('nuts')
fibonacci = fib_module.fibonacci


def assert_same(actual, expected, rtol=0.0, atol=0.0):
  """Same structure, shapes, dtypes and values (to rtol/atol)."""
  flat_a = ab.instructions.pattern_flatten(actual)
  flat_e = ab.instructions.pattern_flatten(expected)
  assert type(actual) is type(expected)
  assert len(flat_a) == len(flat_e)
  for a, e in zip(flat_a, flat_e):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype,
                                                       e.shape, e.dtype)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def skewed_n(size, seed=0):
  """fib arguments, mostly small with a few large, the large ones first."""
  rng = np.random.default_rng(seed)
  n = rng.integers(3, 9, size=size)
  n[:max(size // 8, 1)] = rng.integers(14, 17, size=max(size // 8, 1))
  return n


def error_members(err):
  return [int(i) for i in re.search(r'members \[([0-9, ]*)\]', str(err))
          .group(1).replace(',', ' ').split()]


# -- splits -----------------------------------------------------------------------

@in_main_process
@pytest.mark.parametrize('split', ['interleaved', 'contiguous'])
@pytest.mark.parametrize('batch, k', [(10, 3), (7, 2), (2, 4), (1, 1),
                                      (64, 4)])
def test_split_covers_every_member_once(split, batch, k):
  parts = shard_lib.split_indices(batch, k, split)
  assert len(parts) == min(k, batch)
  joined = np.concatenate(parts)
  assert sorted(joined.tolist()) == list(range(batch))
  sizes = [p.size for p in parts]
  assert max(sizes) - min(sizes) <= 1
  for p in parts:
    assert p.dtype == np.int64 and np.all(np.diff(p) > 0)
  if split == 'contiguous':
    assert joined.tolist() == list(range(batch))
  else:
    assert parts[0].tolist() == list(range(0, batch, len(parts)))


@in_main_process
def test_cost_split_balances_a_skewed_cost():
  cost = np.ones(100)
  cost[:10] = 50.0        # the expensive members sit together
  contiguous = shard_lib.split_indices(100, 2, 'contiguous')
  by_cost = shard_lib.split_indices(100, 2, cost=cost)
  sums = lambda parts: [cost[p].sum() for p in parts]
  assert sums(contiguous) == [50 * 10 + 40, 50]
  assert sums(by_cost) == [295, 295]
  assert sorted(np.concatenate(by_cost).tolist()) == list(range(100))
  assert [p.size for p in by_cost] == [50, 50]


@in_main_process
def test_split_mistakes_raise():
  with pytest.raises(errors.ArgumentError, match='Unknown split'):
    shard_lib.split_indices(4, 2, 'random')
  with pytest.raises(errors.ArgumentError, match='positive int'):
    shard_lib.split_indices(4, 0)
  with pytest.raises(errors.ArgumentError, match='3 costs for a batch of 4'):
    shard_lib.split_indices(4, 2, cost=[1, 2, 3])


@in_main_process
def test_shard_argument_mistakes_raise():
  pool = concurrent.futures.ThreadPoolExecutor(1)
  with pytest.raises(errors.ArgumentError, match='strategy= .* or'):
    ab.shard(fibonacci)
  with pytest.raises(errors.ArgumentError, match='expects a batched'):
    ab.shard(lambda n: n, executor=pool)
  with pytest.raises(errors.ArgumentError, match='unknown keyword'):
    ab.shard(fibonacci, executor=pool, dry_run=True)
  with pytest.raises(errors.ArgumentError, match='submit'):
    ab.shard(fibonacci, executor=object())
  sharded = ab.shard(fibonacci, executor=pool, max_stack_depth=8)
  with pytest.raises(errors.ArgumentError, match='to shard'):
    sharded(np.array([3, 4]), max_stack_depth=9)
  with pytest.raises(errors.ArgumentError, match='takes 1 positional argument'):
    sharded(np.array([3, 4]), np.array([1, 2]))
  pool.shutdown()


_defaults_ctx = ab.Context()


@_defaults_ctx.batch()
def power(x, k=3):
  return x ** k


@_defaults_ctx.batch(per_member=True)
def weighted_sum(v, w=np.array([1.0, 0.5])):  # pylint: disable=dangerous-default-value
  return np.dot(v, w)


def test_shard_fills_in_default_arguments():
  x = np.arange(7.0)
  v = np.arange(14.0).reshape(7, 2)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    sharded = ab.shard(power, executor=pool)
    assert_same(sharded(x), power(x))
    assert_same(sharded(x, k=2), power(x, k=2))
    # An array default is the same for every member of every shard.
    assert_same(ab.shard(weighted_sum, executor=pool)(v), v @ [1.0, 0.5])


def test_shard_status_is_the_unsharded_calls():
  # on_error='status' goes to each shard's call: the sharded call returns
  # (outputs, ok) in the batch's order, as the unsharded one does.
  n = skewed_n(11)
  out, ok = fibonacci(n, max_stack_depth=8, on_error='status')
  assert not ok.all() and ok.any()
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    sharded = ab.shard(fibonacci, executor=pool, max_stack_depth=8,
                       on_error='status')
    got, got_ok = sharded(n)
  np.testing.assert_array_equal(got_ok, ok)
  assert_same(got, out)


# -- rebuilding a Context (what the executor form ships) ------------------------------

@in_main_process
def test_context_state_round_trip_runs_without_compiling():
  ctx = ab.Context()

  @ctx.batch()
  def one(n):
    return n * 0 + 1

  @ctx.batch()
  def tribonacci(n):
    if n < 3:
      return one(n)
    return tribonacci(n - 1) + tribonacci(n - 2) + tribonacci(n - 3)

  n = np.array([1, 7, 4, 9, 3, 0])
  assert not ctx.compiled
  expected = tribonacci(n, max_stack_depth=12)
  assert ctx.compiled
  steps = tribonacci.last_stats.steps
  tribonacci(n.astype(np.int32), max_stack_depth=12)   # another signature
  state = ctx.export_state(tribonacci, [ab.TensorType(np.int64, ())])
  assert list(state.functions) == ['one', 'tribonacci']
  assert state.functions['one'] == (one.python_function, None, False)
  assert state.programs and all(key[1] == 'tribonacci' and 'int64' in key[2]
                                for key in state.programs)
  assert len(ctx.export_state().programs) > len(state.programs)

  rebuilt = ab.Context()
  functions = rebuilt.install_state(state)
  assert list(functions) == ['one', 'tribonacci']
  assert all(bf.context is rebuilt for bf in functions.values())
  assert not rebuilt.compiled
  out = functions['tribonacci'](n, max_stack_depth=12)
  assert not rebuilt.compiled          # ran the installed programs
  assert_same(out, expected)
  assert functions['tribonacci'].last_stats.steps == steps
  assert tribonacci.context is ctx and ctx.compiled
  # A signature the state does not hold compiles from the functions, whose
  # calls name the original Context's batched functions: they are calls
  # of the rebuilt Context's, not primitives running the original.
  original_stats = tribonacci.last_stats
  out = functions['tribonacci'](n.astype(np.int32), max_stack_depth=12)
  assert rebuilt.compiled and tribonacci.last_stats is original_stats
  assert [f.name for f in rebuilt.program('tribonacci').functions] == [
      'tribonacci', 'one']
  assert_same(out, tribonacci(n.astype(np.int32), max_stack_depth=12))


@in_main_process
def test_context_state_mistakes_raise():
  with pytest.raises(errors.ArgumentError, match='needs main='):
    power.context.export_state(sig=[ab.TensorType(np.float64, ())])
  with pytest.raises(errors.ArgumentError, match='not a batched function'):
    power.context.export_state('nothing')
  with pytest.raises(errors.ArgumentError, match='expects a ContextState'):
    ab.Context().install_state(({}, {}))


# -- NumPy on a Dask cluster --------------------------------------------------------

@pytest.fixture(scope='module')
def client():
  distributed = pytest.importorskip('distributed')
  cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                     processes=True, dashboard_address=None)
  dask_client = distributed.Client(cluster)
  yield dask_client
  dask_client.close()
  cluster.close()


@in_main_process
@pytest.mark.parametrize('split', ['interleaved', 'contiguous'])
@pytest.mark.parametrize('stackless', [None, False, True])
def test_dask_fibonacci_matches_the_unsharded_call(client, split, stackless):
  n = skewed_n(37)
  expected = fibonacci(n, max_stack_depth=18, stackless=stackless)
  sharded = ab.shard(fibonacci, executor=client, split=split,
                     max_stack_depth=18, stackless=stackless)
  assert_same(sharded(n), expected)
  stats = sharded.last_stats
  assert stats.num_shards == 2 and stats.batch_size == 37
  workers = {s.where for s in stats.shards}
  assert len(workers) == 2 and all(w.startswith('tcp://') for w in workers)
  # Each shard's statistics are those of its members as a batch alone;
  # the program was compiled here, not on the workers.
  for s in stats.shards:
    fibonacci(n[s.members], max_stack_depth=18, stackless=stackless)
    assert s.stats.steps == fibonacci.last_stats.steps
    assert s.stats.block_active == fibonacci.last_stats.block_active
    assert not s.compiled and s.seconds > 0
  assert sorted(np.concatenate([s.members for s in stats.shards])
                .tolist()) == list(range(37))


@in_main_process
@pytest.mark.parametrize('batch, shards', [(1, None), (5, None), (5, 3),
                                           (9, 4)])
def test_dask_uneven_and_more_shards_than_workers(client, batch, shards):
  n = skewed_n(batch, seed=batch)
  sharded = ab.shard(fibonacci, executor=client, shards=shards,
                     max_stack_depth=18)
  assert_same(sharded(n), fibonacci(n, max_stack_depth=18))
  expected_shards = min(shards or 2, batch)
  assert sharded.last_stats.num_shards == expected_shards
  assert [s.size for s in sharded.last_stats.shards] == [
      p.size for p in shard_lib.split_indices(batch, expected_shards)]


@in_main_process
def test_dask_cost_split_balances_work(client):
  n = skewed_n(64)
  cost = lambda n: 1.618 ** n
  contiguous = ab.shard(fibonacci, executor=client, split='contiguous',
                        max_stack_depth=18)
  balanced = ab.shard(fibonacci, executor=client, cost=cost,
                      max_stack_depth=18)
  expected = fibonacci(n, max_stack_depth=18)
  assert_same(contiguous(n), expected)
  assert_same(balanced(n), expected)
  assert balanced.last_stats.split == 'cost'
  assert contiguous.last_stats.imbalance > 1.5
  assert balanced.last_stats.imbalance < 1.1
  assert 'imbalance' in str(balanced.last_stats)


@in_main_process
def test_dask_collatz_and_tree_rnn(client):
  n = np.random.default_rng(1).integers(1, 200, size=23)
  sharded = ab.shard(collatz.collatz_steps, executor=client)
  out = sharded(n)
  assert_same(out, collatz.collatz_steps(n))
  assert out.tolist() == [collatz.collatz_plain(int(k)) for k in n]
  rng = np.random.default_rng(3)
  forest = tree_rnn.random_forest(9, 1, 9, 20, rng)
  params = tree_rnn.random_params(6, 20, rng)
  _, encode = tree_rnn.make_encoder(tree_rnn.numpy_lib(forest, params))
  depth = int(forest.depths.max()) + 2
  sharded = ab.shard(encode, executor=client, max_stack_depth=depth)
  out = sharded(forest.roots)
  assert_same(out, encode(forest.roots, max_stack_depth=depth))
  np.testing.assert_allclose(out, tree_rnn.encode_each_alone(forest, params),
                             rtol=1e-5, atol=1e-6)


@in_main_process
def test_dask_nuts_chains(client):
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  sampler = nuts.Sampler(target, 'numpy', chunk=3, max_tree_depth=4)
  point, da, seeds, counter = sampler.init(7, seed=5)
  args = (point, da, seeds, counter, np.ones(7, bool))
  expected = sampler.fns.run_chunk(*args, max_stack_depth=sampler.depth)
  sharded = ab.shard(sampler.fns.run_chunk, executor=client,
                     max_stack_depth=sampler.depth)
  out = sharded(*args)
  assert_same(out, expected)
  assert type(out[0]) is type(point)     # the caller's namedtuple class
  assert [s.size for s in sharded.last_stats.shards] == [4, 3]


@in_main_process
def test_dask_error_names_global_members(client):
  n = np.array([3, 4, 12, 5, 3, 13, 4, 14, 3])
  with pytest.raises(errors.StackOverflowError) as unsharded:
    fibonacci(n, max_stack_depth=8, stackless=False)
  sharded = ab.shard(fibonacci, executor=client, max_stack_depth=8,
                     stackless=False)
  with pytest.raises(errors.StackOverflowError, match=r'in shard \d of 2') \
      as info:
    sharded(n)
  assert set(error_members(info.value)) <= set(error_members(unsharded.value))
  assert info.value.members == error_members(info.value)
  assert info.value.loc.function == 'fibonacci'
  assert info.value.members, info.value


@in_main_process
def test_dask_primitive_error_names_global_members(client):
  ctx = ab.Context()

  def check(x):
    if np.any(x == 7):
      raise ValueError('seven')
    return x + 1

  @ctx.batch()
  def bump(x):
    return check(x)

  x = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
  sharded = ab.shard(bump, executor=client)
  with pytest.raises(errors.PrimitiveError, match='seven') as info:
    sharded(x)
  assert info.value.members == [1, 3, 5, 7, 9]   # shard 1's, interleaved
  # The worker's own error is the cause, its cause the primitive's.
  worker = info.value.__cause__
  assert type(worker) is errors.PrimitiveError and worker is not info.value
  assert worker.loc.function == 'bump'
  assert isinstance(worker.__cause__, ValueError)
  assert str(worker.__cause__) == 'seven'
  assert 'Raised on worker tcp://' in '\n'.join(
      getattr(worker, '__notes__', ['Raised on worker tcp://']))
  assert_same(sharded(x[:7]), bump(x[:7]))


def _exit_at_seven(x):
  if np.any(x == 7):
    os._exit(3)   # pylint: disable=protected-access
  return x + 1


def _crashing_function():
  ctx = ab.Context()

  @ctx.batch()
  def crash(x):
    return _exit_at_seven(x)

  return crash


@in_main_process
def test_a_worker_that_dies_names_the_shard_process_pool():
  crash = _crashing_function()
  x = np.array([7, 1, 2, 3, 4, 5])
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
    sharded = ab.shard(crash, executor=pool, shards=2)
    with pytest.raises(errors.WorkerError, match=r'Shard 0 of 2 of crash '
                       r'\(members \[0, 2, 4\]\)') as info:
      sharded(x)
  assert info.value.members == [0, 2, 4] and info.value.shard == 0
  assert info.value.loc.function == 'crash'
  assert type(info.value.__cause__).__name__ == 'BrokenProcessPool'
  assert 'shards [1] had not come back either' in str(info.value)
  assert 'dry_run=True' in info.value.hint


@in_main_process
@pytest.mark.slow    # a Dask cluster of processes; the process pool's is fast
def test_a_worker_that_dies_names_the_shard_dask():
  distributed = pytest.importorskip('distributed')
  dask = pytest.importorskip('dask')
  crash = _crashing_function()
  # Dask holds both tasks on its one worker, and may report the death
  # for both: the culprit is the first shard.
  x = np.array([7, 1, 2, 3, 4, 5])
  with dask.config.set({'distributed.scheduler.allowed-failures': 0}), \
      distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                               processes=True,
                               dashboard_address=None) as cluster, \
      distributed.Client(cluster) as dask_client:
    sharded = ab.shard(crash, executor=dask_client, shards=2)
    with pytest.raises(errors.WorkerError, match=r'Shard 0 of 2 of crash '
                       r'\(members \[0, 2, 4\]\)') as info:
      sharded(x)
  assert info.value.members == [0, 2, 4] and info.value.shard == 0
  assert type(info.value.__cause__).__name__ == 'KilledWorker'


@in_main_process
def test_dask_program_is_shipped_once_per_worker(client):
  n = skewed_n(20, seed=4)
  sharded = ab.shard(fibonacci, executor=client, max_stack_depth=17)
  sharded(n)
  sharded(n + 1)        # same signature: the same payload
  assert len(sharded._payloads) == 1  # pylint: disable=protected-access
  assert not any(s.loaded or s.compiled for s in sharded.last_stats.shards)
  sharded(n.astype(np.int32))   # a new signature, compiled here once
  assert len(sharded._payloads) == 2  # pylint: disable=protected-access
  assert all(s.loaded and not s.compiled
             for s in sharded.last_stats.shards)


@in_main_process
def test_process_pool_executor():
  n = skewed_n(11, seed=2)
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
    sharded = ab.shard(fibonacci, executor=pool, max_stack_depth=18)
    assert_same(sharded(n), fibonacci(n, max_stack_depth=18))
    assert sharded.last_stats.num_shards == 2


# -- TensorFlow on logical devices ---------------------------------------------------

def _run_in_subprocess(select, marks, **env):
  """Runs the tests of this file that `select` (-k) and `marks` (-m) pick
  in a new Python process with environment variables `env` added."""
  pytest.importorskip('tensorflow')
  env = dict(os.environ, OPENBLAS_NUM_THREADS='1', TF_CPP_MIN_LOG_LEVEL='2',
             **env)
  env.pop('TF_CONFIG', None)
  proc = subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:cacheprovider',
       __file__, '-k', select, '-m', marks],
      capture_output=True, text=True, env=env, timeout=900, check=False,
      cwd=pathlib.Path(__file__).resolve().parents[2])
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
  assert ' passed' in proc.stdout, proc.stdout[-2000:]


@in_main_process
@pytest.mark.parametrize('devices, marks', [
    (2, 'not slow'),
    pytest.param(4, 'not slow', marks=pytest.mark.slow),
    pytest.param(2, 'slow', marks=pytest.mark.slow)])
def test_tensorflow_on_logical_devices(devices, marks):
  """The `tf_` tests, in a process with `devices` logical CPU devices (on
  4 devices those named `four`)."""
  _run_in_subprocess('tf_' if devices == 2 else 'tf_ and four', marks,
                     AB_SHARD_DEVICES=str(devices))


@in_main_process
@pytest.mark.parametrize('marks', [
    'not slow', pytest.param('slow', marks=pytest.mark.slow)])
def test_multi_worker_mirrored_strategy(marks):
  """The `multi_worker` tests, in a process whose one-worker
  `MultiWorkerMirroredStrategy` is made on import."""
  _run_in_subprocess('multi_worker', marks, AB_SHARD_DEVICES='2',
                     AB_SHARD_STRATEGY='multi_worker')


def _strategy():
  names = [d.name for d in tf.config.list_logical_devices('CPU')]
  return tf.distribute.MirroredStrategy(names)


@in_device_process
@pytest.mark.parametrize('jit_compile', [None, False, True])
def test_tf_fibonacci_matches_the_unsharded_call(jit_compile):
  n = skewed_n(7)
  expected = fibonacci(tf.constant(n), max_stack_depth=18)
  sharded = ab.shard(fibonacci, strategy=_strategy(),
                     jit_compile=jit_compile, max_stack_depth=18)
  out = sharded(tf.constant(n))
  assert_same(out.numpy(), expected.numpy())
  assert out.numpy().tolist() == [int(fibonacci(np.array([k]),
                                                dry_run=True)[0]) for k in n]
  stats = sharded.last_stats
  assert stats.num_shards == DEVICES
  assert len({s.where for s in stats.shards}) == DEVICES
  if jit_compile is False:
    # Each shard's statistics are those of its members as a batch alone.
    for s in stats.shards:
      fibonacci(tf.constant(n[s.members]), max_stack_depth=18)
      assert s.stats.steps == fibonacci.last_stats.steps
      assert s.stats.block_active == fibonacci.last_stats.block_active


@in_device_process
def test_tf_batch_of_one():
  sharded = ab.shard(fibonacci, strategy=_strategy(), max_stack_depth=18)
  assert_same(sharded(tf.constant([9])).numpy(), np.array([34], np.int32))
  assert sharded.last_stats.num_shards == 1


@in_device_process
def test_tf_inside_tf_function_and_xla():
  n = skewed_n(13)
  expected = fibonacci(tf.constant(n), max_stack_depth=18).numpy()
  sharded = ab.shard(fibonacci, strategy=_strategy(), split='contiguous',
                     max_stack_depth=18)
  staged = tf.function(lambda x: (sharded(x), sharded.last_stats.counts()))
  out, counts = staged(tf.constant(n))
  assert_same(out.numpy(), expected)
  stats = sharded.last_stats.with_counts(
      tf.nest.map_structure(lambda t: t.numpy(), counts))
  assert sum(s.stats.member_block_executions for s in stats.shards) > 0
  # Inside the caller's XLA function the shards compile as one computation.
  xla = tf.function(sharded, jit_compile=True)
  assert_same(xla(tf.constant(n)).numpy(), expected)


@in_device_process
@pytest.mark.slow
def test_tf_cost_split_and_more_shards_than_devices():
  n = skewed_n(10)
  strategy = _strategy()
  expected = fibonacci(tf.constant(n), max_stack_depth=18).numpy()
  for kwargs in (dict(cost=lambda n: 1.618 ** n), dict(shards=DEVICES + 2),
                 dict(split='contiguous', jit_compile=True)):
    sharded = ab.shard(fibonacci, strategy=strategy, max_stack_depth=18,
                       **kwargs)
    assert_same(sharded(tf.constant(n)).numpy(), expected)
  assert sharded.last_stats.num_shards == DEVICES


@in_device_process
@pytest.mark.parametrize('jit_compile', [None, True])
def test_tf_error_names_global_members_four(jit_compile):
  if DEVICES == 2 and jit_compile is None:
    pytest.skip('the eager path is checked on four devices')
  n = np.array([3, 4, 12, 5, 3, 13, 4, 14, 3])
  with pytest.raises(errors.StackOverflowError) as unsharded:
    fibonacci(tf.constant(n), max_stack_depth=8)
  sharded = ab.shard(fibonacci, strategy=_strategy(),
                     jit_compile=jit_compile, max_stack_depth=8)
  with pytest.raises(errors.StackOverflowError,
                     match=rf'in shard \d of {DEVICES}') as info:
    sharded(tf.constant(n))
  assert info.value.members
  assert set(info.value.members) <= set(error_members(unsharded.value))


@in_device_process
def test_tf_four_devices_place_one_shard_each():
  n = skewed_n(10)
  sharded = ab.shard(fibonacci, strategy=_strategy(), jit_compile=True,
                     max_stack_depth=18)
  assert_same(sharded(tf.constant(n)).numpy(),
              fibonacci(n, max_stack_depth=18))
  assert [s.size for s in sharded.last_stats.shards] == [
      p.size for p in shard_lib.split_indices(10, DEVICES)]
  assert len({s.where for s in sharded.last_stats.shards}) == DEVICES


_grad_ctx = ab.Context()


@_grad_ctx.batch()
def halve(x, n):
  if n <= 0:
    return x
  if x > 0:
    return halve(x * 0.5 - 1.0, n - 1) * 2.0
  return halve(x * x + 0.3, n - 1) + x


if DEVICES:
  SCALE = tf.Variable(1.5, dtype=tf.float64)

  @_grad_ctx.batch()
  def scaled(x, n):
    if n <= 0:
      return x
    return scaled(x * SCALE, n - 1) + SCALE


def _gradients(fn, x, n, variables, **kwargs):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.reduce_sum(fn(x, n, **kwargs))
  grads = tape.gradient(y, [x] + variables)
  return [y.numpy()] + [tf.convert_to_tensor(g).numpy() for g in grads]


@in_device_process
@pytest.mark.parametrize('jit_compile, name', [
    pytest.param(None, 'halve', marks=pytest.mark.slow), (False, 'scaled')])
def test_tf_gradients_through_the_sharded_call(jit_compile, name):
  fn = globals()[name]
  x = tf.constant([0.5, -1.0, 2.0, 0.25, -0.7], tf.float64)
  n = tf.constant([1, 2, 3, 0, 4])
  variables = [SCALE] if name == 'scaled' else []
  expected = _gradients(fn, x, n, variables, max_stack_depth=8)
  sharded = ab.shard(fn, strategy=_strategy(), jit_compile=jit_compile,
                     max_stack_depth=8)
  for got, want in zip(_gradients(sharded, x, n, variables), expected):
    np.testing.assert_allclose(got, want, rtol=1e-12)


@in_device_process
def test_tf_tape_outside_compiled_shards_is_refused_clearly():
  # TensorFlow cannot differentiate an XLA-compiled loop from outside the
  # compiled function (its raw error: "TensorList crossing the XLA/TF
  # boundary"); the sharded call says so and what to do, and runs as
  # usual under a tape that does not record it.
  x = tf.constant([0.5, -1.0, 2.0, 0.25, -0.7], tf.float64)
  n = tf.constant([1, 2, 3, 0, 4])
  sharded = ab.shard(halve, strategy=_strategy(), jit_compile=True,
                     max_stack_depth=8, max_steps=200)
  with tf.GradientTape() as tape:
    tape.watch(x)
    with pytest.raises(errors.ArgumentError, match='jit_compile=None'):
      sharded(x, n)
  with tf.GradientTape():
    np.testing.assert_allclose(sharded(x, n).numpy(),
                               halve(x, n, max_stack_depth=8).numpy())


@in_device_process
@pytest.mark.slow
def test_tf_gradients_inside_an_xla_function():
  # XLA differentiates the VM's loop with the tape inside the compiled
  # function, and a static trip count (max_steps).
  x = tf.constant([0.5, -1.0, 2.0, 0.25, -0.7], tf.float64)
  n = tf.constant([1, 2, 3, 0, 4])
  expected = _gradients(halve, x, n, [], max_stack_depth=8)
  sharded = ab.shard(halve, strategy=_strategy(), max_stack_depth=8,
                     max_steps=200)
  compiled = tf.function(
      lambda x, n: tf.gradients(tf.reduce_sum(sharded(x, n)), x)[0],
      jit_compile=True)
  np.testing.assert_allclose(tf.convert_to_tensor(compiled(x, n)).numpy(),
                             expected[1],
                             rtol=1e-12)


@in_device_process
@pytest.mark.slow
def test_tf_collatz_tree_rnn_nuts():
  n = np.random.default_rng(1).integers(1, 100, size=9)
  sharded = ab.shard(collatz.collatz_steps, strategy=_strategy(),
                     jit_compile=True)
  assert_same(sharded(tf.constant(n)).numpy(),
              collatz.collatz_steps(tf.constant(n)).numpy())
  rng = np.random.default_rng(3)
  forest = tree_rnn.random_forest(5, 1, 7, 20, rng)
  params = tree_rnn.random_params(4, 20, rng)
  _, encode = tree_rnn.make_encoder(tree_rnn.tf_lib(forest, params))
  depth = int(forest.depths.max()) + 2
  roots = tf.constant(forest.roots)
  sharded = ab.shard(encode, strategy=_strategy(), jit_compile=False,
                     max_stack_depth=depth)
  assert_same(sharded(roots).numpy(),
              encode(roots, max_stack_depth=depth).numpy(), rtol=1e-6)
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  sampler = nuts.Sampler(target, 'tf', chunk=2, max_tree_depth=3)
  point, da, seeds, counter = sampler.init(5, seed=5)
  args = tf.nest.map_structure(tf.convert_to_tensor,
                               (point, da, seeds, counter, np.ones(5, bool)))
  expected = sampler.fns.run_chunk(*args, max_stack_depth=sampler.depth)
  sharded = ab.shard(sampler.fns.run_chunk, strategy=_strategy(),
                     jit_compile=False, max_stack_depth=sampler.depth)
  out = sharded(*args)
  assert_same(tf.nest.map_structure(lambda t: t.numpy(), out),
              tf.nest.map_structure(lambda t: t.numpy(), expected),
              rtol=1e-9, atol=1e-12)


# -- MultiWorkerMirroredStrategy, one worker (in a subprocess of its own) ------------

@in_multi_worker_process
@pytest.mark.parametrize('jit_compile, shards', [
    (None, 2),
    pytest.param(None, None, marks=pytest.mark.slow),
    pytest.param(False, 3, marks=pytest.mark.slow),
    pytest.param(True, None, marks=pytest.mark.slow)])
def test_multi_worker_fibonacci_matches_the_unsharded_call(jit_compile,
                                                           shards):
  # On a host without GPUs the strategy has one replica, the worker's CPU
  # (logical CPU devices are not replicas of it); shards= splits an uneven
  # batch over it.
  strategy = MULTI_WORKER_STRATEGY
  n = np.array([9, 3, 12, 5, 1, 7, 4])
  expected = fibonacci(tf.constant(n), max_stack_depth=14).numpy()
  sharded = ab.shard(fibonacci, strategy=strategy, shards=shards,
                     jit_compile=jit_compile, max_stack_depth=14)
  assert_same(sharded(tf.constant(n)).numpy(), expected)
  assert expected.tolist() == [34, 2, 144, 5, 1, 13, 3]
  stats = sharded.last_stats
  num_shards = shards or strategy.num_replicas_in_sync
  assert [s.size for s in stats.shards] == [
      p.size for p in shard_lib.split_indices(7, num_shards)]
  assert ({s.where for s in stats.shards} ==
          set(strategy.extended.worker_devices))
  if jit_compile is None:
    # Inside the caller's tf.function the shards are staged with it.
    staged = tf.function(sharded)
    assert_same(staged(tf.constant(n)).numpy(), expected)


@in_multi_worker_process
@pytest.mark.slow
@pytest.mark.parametrize('jit_compile, name', [(None, 'halve'),
                                               (False, 'scaled')])
def test_multi_worker_gradients_through_the_sharded_call(jit_compile, name):
  # The strategy form's gradient path is MirroredStrategy's (checked on
  # every run by test_tf_gradients_through_the_sharded_call); this checks
  # it on this strategy's replica.
  fn = globals()[name]
  x = tf.constant([0.5, -1.0, 2.0, 0.25, -0.7], tf.float64)
  n = tf.constant([1, 2, 3, 0, 4])
  variables = [SCALE] if name == 'scaled' else []
  expected = _gradients(fn, x, n, variables, max_stack_depth=8)
  sharded = ab.shard(fn, strategy=MULTI_WORKER_STRATEGY, shards=2,
                     jit_compile=jit_compile, max_stack_depth=8)
  for got, want in zip(_gradients(sharded, x, n, variables), expected):
    np.testing.assert_allclose(got, want, rtol=1e-12)
