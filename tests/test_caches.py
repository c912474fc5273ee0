"""Compiled programs serve every batch size, and every cache is bounded.

On NumPy one compiled program (`'blocks'` in `Context.cache_info`) serves
every batch size, on the stack VM and stackless; results stay right at
every size.  A Context's cache keeps at most `cache_size` entries, the
least recently used dropped first; `clear_caches` empties it and the
process-wide caches (`caches.cache_info`), which are bounded too.
"""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import caches

SIZES = [1, 2, 3, 5, 8, 13, 64, 100, 257, 0, 7]


def _programs(ctx):
  @ctx.batch
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    return 1

  @ctx.batch
  def scaled_sum(v, k):
    # `v` (a vector per member) is saved across the call: a stack of
    # vectors, whose pops read the batch size from the stack.
    if k > 0:
      w = scaled_sum(v * 2.0, k - 1)
      return w + v
    return v

  @ctx.batch
  def empty_rows(e, k):
    # A stack of zero-sized vectors (no row to infer a reshape from).
    if k > 0:
      f = empty_rows(e, k - 1)
      return f + e
    return e
  return fib, scaled_sum, empty_rows


def _args(size, rng):
  return {
      'fib': (rng.integers(1, 10, size=size),),
      'scaled_sum': (rng.normal(size=(size, 3)),
                     rng.integers(0, 4, size=size)),
      'empty_rows': (np.zeros((size, 0)), rng.integers(0, 3, size=size))}


def _check(fn, args, **kwargs):
  out = fn(*args, **kwargs)
  expected = fn(*args, dry_run=True)
  assert np.shape(out) == np.shape(expected)
  np.testing.assert_allclose(out, expected)


@pytest.mark.parametrize('stackless', [False, True])
def test_numpy_compiles_once_for_every_batch_size(stackless):
  ctx = ab.Context()
  fns = _programs(ctx)
  rng = np.random.default_rng(0)
  counts = []
  for size in SIZES:
    args = _args(size, rng)
    for fn in fns:
      _check(fn, args[fn.name], stackless=stackless)
    counts.append(ctx.cache_info()['entries'])
  assert counts[1:] == counts[:1] * (len(SIZES) - 1), counts
  blocks = ctx.cache_info()['kinds'].get('blocks', 0)
  assert blocks == (0 if stackless else len(fns))


def test_numpy_block_code_cache_of_the_caller_stays_one_entry():
  ctx = ab.Context()
  fib = _programs(ctx)[0]
  cache = {}
  rng = np.random.default_rng(1)
  for size in SIZES:
    _check(fib, (rng.integers(1, 10, size=size),), stackless=False,
           block_code_cache=cache)
  assert len(cache) == 1


def test_context_cache_is_bounded_least_recently_used_first():
  ctx = ab.Context(cache_size=3)
  fib, scaled_sum, _ = _programs(ctx)
  rng = np.random.default_rng(2)
  for size in (4, 9):
    for dtype in (np.int32, np.int64, np.float64):
      _check(fib, (rng.integers(1, 10, size=size).astype(dtype),),
             stackless=False)
      assert ctx.cache_info()['entries'] <= 3
    _check(scaled_sum, _args(size, rng)['scaled_sum'], stackless=False)
  info = ctx.cache_info()
  assert info['entries'] == 3 and info['maxsize'] == 3
  # The last call's programs are the ones kept.
  assert set(info['kinds']) == {'typed', 'lowered', 'blocks'}


def test_clear_caches_empties_them():
  ctx = ab.Context()
  fib, scaled_sum, _ = _programs(ctx)
  rng = np.random.default_rng(3)
  n = rng.integers(1, 10, size=6)
  first = fib(n, stackless=True)
  _check(scaled_sum, _args(6, rng)['scaled_sum'], stackless=False)
  assert ctx.cache_info()['entries'] > 0
  assert caches.cache_info()['stackless program tables']['entries'] > 0
  ctx.clear_caches()
  assert ctx.cache_info()['entries'] == 0
  assert all(c['entries'] == 0 for c in caches.cache_info().values())
  np.testing.assert_array_equal(fib(n, stackless=True), first)


def test_cache_size_is_checked():
  with pytest.raises(ab.errors.ArgumentError, match='cache size'):
    ab.Context(cache_size=0)
  assert ab.Context(cache_size=None).cache_info()['maxsize'] is None


def test_lru_cache():
  cache = caches.LRUCache(2)
  cache['a'], cache['b'] = 1, 2
  assert cache['a'] == 1          # 'a' is now the most recently used
  cache['c'] = 3
  assert list(cache) == ['a', 'c'] and cache.evictions == 1
  assert 'b' not in cache and cache.get('b') is None
  cache.maxsize = 1
  assert list(cache) == ['c']
  cache.maxsize = None
  for k in range(100):
    cache[k] = k
  assert len(cache) == 101
  cache.clear()
  assert not cache
  with pytest.raises(ValueError):
    caches.LRUCache(-1)


def test_tensorflow_eager_results_at_every_size_and_staged_loops_bounded():
  tf = pytest.importorskip('tensorflow')
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()
  fib, scaled_sum, _ = _programs(ctx)
  rng = np.random.default_rng(4)
  staged = caches.cache_info()['staged loops']
  saved = loop._eager_cache.maxsize  # pylint: disable=protected-access
  loop._eager_cache.maxsize = 2  # pylint: disable=protected-access
  try:
    for size in (1, 5, 17):
      args = _args(size, rng)
      n = args['fib'][0].astype(np.int32)
      out = fib(tf.constant(n))
      np.testing.assert_array_equal(out.numpy(), fib(n, dry_run=True))
      v, k = args['scaled_sum']
      out = scaled_sum(tf.constant(v), tf.constant(k.astype(np.int32)))
      np.testing.assert_allclose(out.numpy(), scaled_sum(v, k, dry_run=True))
      assert caches.cache_info()['staged loops']['entries'] <= 2
  finally:
    loop._eager_cache.maxsize = saved  # pylint: disable=protected-access
  assert staged['maxsize'] == saved
  ctx.clear_caches()
  assert caches.cache_info()['staged loops']['entries'] == 0


def test_xla_trace_records_are_freed_with_their_compiled_function():
  tf = pytest.importorskip('tensorflow')
  import gc  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import xla  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  @ctx.batch
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    return 1

  before = len(xla._traces)  # pylint: disable=protected-access
  compiled = xla.compile_nested_output(lambda n: fib(n, max_stack_depth=10))
  assert compiled(tf.constant([5, 6])).numpy().tolist() == [5, 8]
  assert len(xla._traces) == before + 1  # pylint: disable=protected-access
  del compiled
  gc.collect()
  assert len(xla._traces) == before  # pylint: disable=protected-access


def _count_staged_loop_traces(monkeypatch):
  """A list whose length counts the staged loops traced from now on."""
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  traced = []
  staged_loop = loop.staged_loop

  def counted(*args, **kwargs):
    # The batch size the plan is made at (None: a tensor, in a graph
    # whose batch axis has no size).
    traced.append(args[5] if isinstance(args[5], int) else None)
    return staged_loop(*args, **kwargs)
  monkeypatch.setattr(loop, 'staged_loop', counted)
  return traced


@pytest.mark.parametrize('stackless', [False, True])
def test_tensorflow_eager_traces_once_for_every_batch_size(monkeypatch,
                                                           stackless):
  tf = pytest.importorskip('tensorflow')
  from autobatch_vm.backends.tf import loop  # pylint: disable=g-import-not-at-top
  traced = _count_staged_loop_traces(monkeypatch)
  before = {id(e) for e in loop._eager_cache.values()}  # pylint: disable=protected-access
  ctx = ab.Context()
  fns = _programs(ctx)
  rng = np.random.default_rng(5)
  for size in SIZES:
    args = _args(size, rng)
    for fn in fns:
      values = [np.asarray(a, np.int32) if a.dtype.kind == 'i' else a
                for a in args[fn.name]]
      out = fn(*[tf.constant(a) for a in values], stackless=stackless)
      expected = fn(*values, dry_run=True)
      assert tuple(out.shape) == np.shape(expected)
      np.testing.assert_allclose(out.numpy(), expected)
  if stackless:   # op by op: nothing traced, nothing kept per size
    assert not traced, traced
    assert 'blocks' not in ctx.cache_info()['kinds']
    return
  # One staged loop per program, traced once, at its first size (1), with
  # a batch axis of unknown size that serves every size.
  assert traced == [1] * len(fns), traced
  assert ctx.cache_info()['kinds']['blocks'] == len(fns)
  runs = [e for e in loop._eager_cache.values()  # pylint: disable=protected-access
          if id(e) not in before]
  assert len(runs) == len(fns)
  assert [r._function.experimental_get_tracing_count()  # pylint: disable=protected-access
          for r in runs] == [1] * len(fns)


def test_tensorflow_eager_overflow_and_status_at_new_sizes(monkeypatch):
  tf = pytest.importorskip('tensorflow')
  traced = _count_staged_loop_traces(monkeypatch)
  ctx = ab.Context()
  fib = _programs(ctx)[0]
  for size in (3, 6, 11):
    n = np.full(size, 5, np.int32)
    n[size // 2] = 40
    with pytest.raises(ab.errors.StackOverflowError,
                       match=rf'members \[{size // 2}\]'):
      fib(tf.constant(n), max_stack_depth=6)
    out, ok = fib(tf.constant(n), max_stack_depth=6, on_error='status')
    expected_ok = np.arange(size) != size // 2
    np.testing.assert_array_equal(ok.numpy(), expected_ok)
    np.testing.assert_array_equal(out.numpy()[expected_ok], 5)
  assert len(traced) <= 2, traced   # per on_error mode at most


def _graph_args(size, rng, tf):
  """Tensors of `_args` for fib and scaled_sum (int32 counts)."""
  args = _args(size, rng)
  n = args['fib'][0].astype(np.int32)
  v, k = args['scaled_sum']
  return n, v, k.astype(np.int32), [tf.constant(n), tf.constant(v),
                                    tf.constant(k.astype(np.int32))]


@pytest.mark.parametrize('how', ['input_signature', 'reduce_retracing'])
def test_tf_function_with_a_batch_axis_of_unknown_size(monkeypatch, how):
  tf = pytest.importorskip('tensorflow')
  traced = _count_staged_loop_traces(monkeypatch)
  ctx = ab.Context()
  fib, scaled_sum, _ = _programs(ctx)
  traces = []

  def user(n, v, k):
    traces.append(n.shape)
    out, ok = fib(n, max_stack_depth=6, on_error='status')
    return out, ok, scaled_sum(v, k)
  if how == 'input_signature':
    user = tf.function(user, input_signature=[
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 3], tf.float64),
        tf.TensorSpec([None], tf.int32)])
  else:
    user = tf.function(user, reduce_retracing=True)
  rng = np.random.default_rng(6)
  staged = caches.cache_info()['staged loops']['entries']
  entries = None
  for size in (3, 1, 8, 0, 17, 3):
    n, v, k, tensors = _graph_args(size, rng, tf)
    n = np.minimum(n, 7)
    n[size // 2:size // 2 + 1] = 12   # deeper than max_stack_depth
    out, ok, summed = user(tf.constant(n), *tensors[1:])
    expected_ok = n < 12
    np.testing.assert_array_equal(ok.numpy(), expected_ok)
    np.testing.assert_array_equal(out.numpy()[expected_ok],
                                  fib(n[expected_ok], dry_run=True))
    np.testing.assert_allclose(summed.numpy(), scaled_sum(v, k, dry_run=True))
    entries = entries or ctx.cache_info()['entries']
    assert ctx.cache_info()['entries'] == entries
  # input_signature: one trace; reduce_retracing: the first size, then
  # one with the batch axis of unknown size.
  assert len(traces) == (1 if how == 'input_signature' else 2), traces
  assert len(traced) == 2 * len(traces), traced   # two loops a trace
  # (The eager path's staged loops are not used.)
  assert caches.cache_info()['staged loops']['entries'] == staged


def test_tf_function_unknown_batch_size_raises_a_run_error():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()
  fib = _programs(ctx)[0]

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def user(n):
    return fib(n, max_stack_depth=6)
  np.testing.assert_array_equal(user(tf.constant([5, 6])).numpy(), [5, 8])
  with pytest.raises(tf.errors.InvalidArgumentError, match='fib'):
    user(tf.constant([5, 12, 3]))
  # Stackless mode cannot be staged, whatever the batch size.
  stackless = tf.function(lambda n: fib(n, stackless=True),
                          input_signature=[tf.TensorSpec([None], tf.int32)])
  with pytest.raises(ab.errors.BackendError, match='stackless=True cannot'):
    stackless(tf.constant([5, 6]))
  dry = tf.function(lambda n: fib(n, dry_run=True),
                    input_signature=[tf.TensorSpec([None], tf.int32)])
  with pytest.raises(ab.errors.ArgumentError, match='dry_run=True'):
    dry(tf.constant([5, 6]))
  # XLA plans a run for its batch size: the error says what to do.
  xla = tf.function(fib, jit_compile=True,
                    input_signature=[tf.TensorSpec([None], tf.int32)])
  with pytest.raises(ab.errors.BackendError,
                     match='unknown size under jit_compile') as e:
    xla(tf.constant([5, 6]))
  assert 'batch_buckets' in str(e.value)


def test_plain_tf_function_retracing_per_size_keeps_caches(monkeypatch):
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()
  fib, scaled_sum, _ = _programs(ctx)

  @tf.function
  def user(n, v, k):
    return fib(n), scaled_sum(v, k)
  rng = np.random.default_rng(7)
  counts = set()
  for size in (2, 5, 9, 4):
    n, v, k, tensors = _graph_args(size, rng, tf)
    out, summed = user(*tensors)
    np.testing.assert_array_equal(out.numpy(), fib(n, dry_run=True))
    np.testing.assert_allclose(summed.numpy(), scaled_sum(v, k, dry_run=True))
    counts.add(ctx.cache_info()['entries'])
  assert len(counts) == 1, counts


def test_stage_traces_once_more_for_every_other_batch_size(monkeypatch):
  tf = pytest.importorskip('tensorflow')
  traced = _count_staged_loop_traces(monkeypatch)
  ctx = ab.Context()
  _, scaled_sum, _ = _programs(ctx)
  staged = ab.stage(scaled_sum, max_stack_depth=6)
  rng = np.random.default_rng(8)
  for size in (4, 4, 7, 1, 30, 4, 7):
    _, v, k, tensors = _graph_args(size, rng, tf)
    out = staged(*tensors[1:])
    np.testing.assert_allclose(out.numpy(), scaled_sum(v, k, dry_run=True))
    stats = staged.last_stats
    assert stats.batch_size == size
    assert stats.member_block_executions == sum(
        scaled_sum(v, k, max_stack_depth=6).shape and
        [scaled_sum.last_stats.member_block_executions])
  # The first size's trace (TensorFlow folds its size), then one with a
  # batch axis of unknown size for every other size.
  assert traced == [4, None], traced
  assert len(staged._concrete) == 2   # pylint: disable=protected-access
  assert staged.fast_calls == 6


def test_stage_broadcasts_a_batch_of_one_given_first():
  """A first argument with one row beside a batch (TFP's NUTS passes its
  step count so) is broadcast, not taken for the batch: the one trace
  for any size keeps its row."""
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: [t[1]])
  def scaled_fib(k, n):
    if n <= 1:
      return n * k
    return scaled_fib(k, n - 1) + scaled_fib(k, n - 2)

  staged = ab.stage(scaled_fib, max_stack_depth=8)
  k = np.array([3], np.int64)
  for size in (5, 7, 1, 3):
    n = np.arange(size, dtype=np.int64) % 6 + 1
    want = [scaled_fib(k, n[i:i + 1], dry_run=True)[0] for i in range(size)]
    np.testing.assert_array_equal(
        staged(tf.constant(k), tf.constant(n)).numpy(), want)
    np.testing.assert_array_equal(
        scaled_fib(tf.constant(k), tf.constant(n)).numpy(), want)


OFFSET = np.array([1.0, 2.0])


def test_an_eager_run_reads_a_changed_global_array_anew():
  # The eager path's staged loop is traced once per program: a global
  # array the primitives read, rebound or written in place since, was
  # read as of the trace, silently (NumPy and the dry run read it anew).
  tf = pytest.importorskip('tensorflow')
  global OFFSET
  ctx = ab.Context()

  @ctx.batch
  def shift(x):
    return x + OFFSET
  x = tf.zeros((2, 2), tf.float64)
  saved = OFFSET
  try:
    np.testing.assert_allclose(shift(x)[0], [1.0, 2.0])
    OFFSET = np.array([10.0, 20.0])
    np.testing.assert_allclose(shift(x)[0], [10.0, 20.0])
    OFFSET[:] = [5.0, 6.0]
    np.testing.assert_allclose(shift(x)[0], [5.0, 6.0])
  finally:
    OFFSET = saved


SCALES = np.array([1.0, 2.0, 3.0])
SETTINGS = {'shift': 1.0}
WEIGHT = None


class _Config:
  pass


CONFIG = _Config()
CONFIG.gain = 2.0


def _scaled(x):
  return x * SCALES[1]


def test_an_eager_run_reads_what_helpers_objects_and_dicts_hold_anew():
  # Beyond the function's own names: a helper's global, an object's
  # attribute, a dict's item, a global read in a comprehension, and an
  # eager tensor rebound were read as of the eager path's one trace.
  tf = pytest.importorskip('tensorflow')
  global WEIGHT
  ctx = ab.Context()
  WEIGHT = tf.constant(1.0, tf.float64)

  @ctx.batch
  def f(x):
    y = _scaled(x)
    return (y + CONFIG.gain + SETTINGS['shift']
            + sum([SCALES[0] for _ in range(2)]) + x * WEIGHT)

  x = tf.constant([1.0, 2.0], tf.float64)

  def want():
    return f(x.numpy(), dry_run=True)

  saved = SCALES.copy(), CONFIG.gain, dict(SETTINGS)
  try:
    np.testing.assert_allclose(f(x), want())
    SCALES[1] = 10.0
    np.testing.assert_allclose(f(x), want())
    CONFIG.gain = 100.0
    np.testing.assert_allclose(f(x), want())
    SETTINGS['shift'] = 1000.0
    np.testing.assert_allclose(f(x), want())
    SCALES[0] = 7.0
    np.testing.assert_allclose(f(x), want())
    WEIGHT = tf.constant(3.0, tf.float64)
    np.testing.assert_allclose(f(x), want())
    np.testing.assert_allclose(want(), [1127.0, 1140.0])
  finally:
    SCALES[:] = saved[0]
    CONFIG.gain = saved[1]
    SETTINGS.clear()
    SETTINGS.update(saved[2])
    WEIGHT = None


STEP = np.array([1, 2, 3])


def test_a_global_rebound_to_another_dtype_is_typed_anew():
  # The typed program was cached by the arguments' types alone: after
  # `STEP` became a float array, `x * STEP[1]` still wrote an int64
  # register (1.5 read as 1), silently, on every backend and in the dry
  # run, which casts to the inferred dtype.
  global STEP
  ctx = ab.Context()

  @ctx.batch
  def scale(x):
    return x * STEP[1]

  x = np.array([1, 2])
  saved = STEP
  try:
    np.testing.assert_array_equal(scale(x), [2, 4])
    STEP = np.array([0.5, 1.5, 2.5])
    for out in (scale(x), scale(x, dry_run=True),
                scale(x, stackless=True)):
      assert out.dtype == np.float64
      np.testing.assert_allclose(out, [1.5, 3.0])
    tf = pytest.importorskip('tensorflow')
    np.testing.assert_allclose(scale(tf.constant(x)), [1.5, 3.0])
  finally:
    STEP = saved
