"""TFP's documented semantics of `Context.batch`, on every backend.

The spec is the `Context.batch` docstring of TFP 0.25: every argument has
a leading batch dimension; a scalar is promoted to shape [1]; an argument
of batch size 1 is broadcast to the batch; results have the batch size.
Lists and tuples of arrays are structure (a list of plain numbers is one
array).  A name registered in the Context is a batched call wherever it is
called from; declared `type_inference` results win; `type_inference` gets
one pattern of `TensorType`s per argument.  Each case runs on NumPy and on
TensorFlow (eager, `tf.function`, XLA), in both VM modes where they apply,
and is compared with `dry_run` and with plain NumPy, values, shapes and
dtypes.  The last tests run TFP's own NUTS sampler from the installed
wheel, its one `auto_batching` import rebound to autobatch_vm.
"""

import collections
import os
import sys

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position

MODES = ['numpy', 'numpy_stackless', 'eager', 'function', 'xla']


def _tf():
  return pytest.importorskip('tensorflow')


def _to_tf(x):
  """Leaves as tensors; lists and tuples stay structure, as given."""
  tf = _tf()
  if isinstance(x, (list, tuple)) and not _numbers(x):
    items = [_to_tf(e) for e in x]
    return type(x)(*items) if hasattr(x, '_fields') else type(x)(items)
  return tf.constant(x)


def _numbers(x):
  return isinstance(x, list) and all(type(e) in (bool, int, float) for e in x)


def _to_np(x):
  if isinstance(x, (list, tuple)):
    items = [_to_np(e) for e in x]
    return type(x)(*items) if hasattr(x, '_fields') else type(x)(items)
  return np.asarray(x)


def call(fn, args, mode, **kwargs):
  """`fn(*args)` in `mode`; the result as NumPy, with its structure."""
  if mode in ('numpy', 'numpy_stackless'):
    return _to_np(fn(*args, backend=ab.NumpyBackend(),
                     stackless=mode == 'numpy_stackless', **kwargs))
  tf = _tf()
  backend = ab.TensorFlowBackend()
  targs = [_to_tf(a) for a in args]
  if mode == 'eager':
    return _to_np(fn(*targs, backend=backend, stackless=False, **kwargs))
  staged = tf.function(lambda *a: fn(*a, backend=backend, **kwargs),
                       jit_compile=mode == 'xla', autograph=False)
  return _to_np(staged(*targs))


def assert_same(got, want):
  """Equal values, shapes, dtypes and structure."""
  if isinstance(want, (list, tuple)):
    assert type(got) is type(want), (type(got), type(want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
      assert_same(g, w)
    return
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  np.testing.assert_allclose(got, want, rtol=1e-6)


# -- the calling convention ------------------------------------------------------


def _affine_ctx():
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda args: [args[0]])
  def affine(x, scale, shift):
    if ab.truthy(x > 0):
      return x * scale + shift
    return shift - x
  return affine


@pytest.mark.parametrize('mode', MODES)
def test_scalars_and_batch_size_one_broadcast(mode):
  affine = _affine_ctx()
  x = np.array([1.5, -2.0, 3.0, 0.5])
  scale = np.float64(2.0)             # a scalar: a batch of one
  shift = np.array([0.25])            # batch size 1: broadcast
  want = np.where(x > 0, x * 2.0 + 0.25, 0.25 - x)
  assert_same(call(affine, [x, scale, shift], mode), want)
  assert_same(affine(x, scale, shift, dry_run=True), want)


@pytest.mark.parametrize('mode', ['numpy', 'eager'])
def test_every_argument_of_batch_size_one_gives_a_batch_of_one(mode):
  affine = _affine_ctx()
  got = call(affine, [np.float64(2.0), np.float64(3.0), np.float64(1.0)],
             mode)
  assert_same(got, np.array([7.0]))


Pair = collections.namedtuple('Pair', ['a', 'b'])


def _add_parts(state, sizes):
  # Each step size has one value per member: aligned with the batch axis.
  return [s + d[(...,) + (None,) * (len(s.shape) - len(d.shape))]
          for s, d in zip(state, sizes)]


def _structure_ctx():
  ctx = ab.Context()

  def step_type(args):
    state_type, _ = args
    return [state_type]

  @ctx.batch(type_inference=step_type)
  def step(state, sizes):
    # TFP's NUTS style: the state is a list of arrays of different shapes,
    # the step sizes a list with one (broadcast) entry per part.
    moved = _add_parts(state, sizes)
    if ab.truthy(moved[1] > 1.0):
      return step([moved[0], moved[1] - 2.0], sizes)
    return moved
  return step


@pytest.mark.parametrize('mode', MODES)
def test_lists_of_arrays_are_structure(mode):
  step = _structure_ctx()
  rng = np.random.default_rng(0)
  state = [rng.normal(size=(5, 3)), rng.uniform(0, 6, size=5)]
  sizes = [np.float64(0.5), np.float64(0.25)]   # 0-d: broadcast
  got = call(step, [state, sizes], mode, max_stack_depth=40)
  want = []
  for i in range(5):
    p, q = state[0][i], state[1][i]
    while True:
      p, q = p + 0.5, q + 0.25
      if q > 1.0:
        q = q - 2.0
        continue
      break
    want.append((p, q))
  assert isinstance(got, list) and len(got) == 2
  assert_same(got, [np.stack([w[0] for w in want]),
                    np.array([w[1] for w in want])])
  alone = step(state, sizes, dry_run=True, max_stack_depth=40)
  assert_same(_to_np(alone), got)


@pytest.mark.parametrize('mode', ['numpy', 'eager'])
def test_a_list_of_numbers_is_one_array(mode):
  ctx = ab.Context()

  @ctx.batch()
  def double(x, pair):
    return Pair(x * 2, pair.a + pair.b)

  # Lists of Python numbers are converted as the backend converts them
  # (NumPy: int64 and float64; TensorFlow: int32 and float32); [1.0] is a
  # batch of one, broadcast.
  if mode == 'numpy':
    got = double([1, 2, 3], Pair([1.0, 2.0, 3.0], [1.0]))
    ints, floats = np.int64, np.float64
  else:
    got = _to_np(double([1, 2, 3], Pair([1.0, 2.0, 3.0], [1.0]),
                        backend=ab.TensorFlowBackend()))
    ints, floats = np.int32, np.float32
  assert isinstance(got, Pair)
  assert_same(got.a, np.array([2, 4, 6], ints))
  assert_same(got.b, np.array([2.0, 3.0, 4.0], floats))


def test_bad_inputs_still_get_clear_errors():
  affine = _affine_ctx()
  x = np.array([1.0, 2.0, 3.0])
  cases = [
      ((x, np.ones(4), np.ones(1)), 'different batch sizes'),
      ((x, 'two', np.ones(1)), 'not an array'),
      ((x, [[1.0, 2.0], [3.0]], np.ones(1)), 'Ragged'),
      ((x, np.array(['a', 'b', 'c']), np.ones(1)), 'dtype'),
  ]
  for args, message in cases:
    with pytest.raises(errors.ArgumentError, match=message) as e:
      affine(*args)
    assert e.value.function == 'affine'
    assert e.value.filename == __file__


# -- Context semantics -------------------------------------------------------------


def _countdown_impl(n, acc):
  if ab.truthy(n > 0):
    # Calls itself by its plain name, as TFP programs registered with
    # batch_uncurried do.
    return _countdown_impl(n - 1, acc + n)
  return acc


@pytest.mark.parametrize('mode', MODES)
def test_batch_uncurried_function_calling_itself_by_its_plain_name(mode):
  ctx = ab.Context()
  countdown = ctx.batch_uncurried(_countdown_impl,
                                  lambda args: [args[1]])
  n = np.array([0, 3, 7, 1])
  got = call(countdown, [n, np.zeros(4, np.int64)], mode,
             max_stack_depth=10)
  assert_same(got, n * (n + 1) // 2)
  assert ctx.function_names() == ['_countdown_impl']
  # The stack VM really recursed (a primitive would not have).
  program = str(ctx.program('_countdown_impl'))
  assert 'call _countdown_impl' in program


@pytest.mark.parametrize('mode', MODES)
def test_declared_result_types_win(mode):
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda args: [ab.TensorType(np.int32, ())])
  def positive(x):
    if ab.truthy(x > 0):
      return True         # a Python bool, declared int32
    return x * 0          # int64, declared int32

  @ctx.batch(type_inference=lambda args: [
      ab.TensorType(np.float32 if args[0].dtype == np.int64 else np.float64,
                    args[0].shape)])   # reads .dtype and .shape
  def shifted(x):
    return x + 1          # int64, declared float32

  x = np.array([3, -1, 0, 8])
  got = call(positive, [x], mode)
  assert_same(got, (x > 0).astype(np.int32))
  got = call(shifted, [x], mode)
  assert_same(got, (x + 1).astype(np.float32))


@pytest.mark.parametrize('mode', MODES)
def test_literal_flag_and_batch_of_one_constants_join(mode):
  # As in TFP's NUTS: a parameter gets a literal `True` at one call site
  # and a per-member bool at another; a constant `[0]` is a batch of one.
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda args: [args[2]])
  def walk(x, go, depth):
    if ab.truthy(go):
      return walk(x - 1.0, (x > 1.0) & (depth < 5), depth + 1)
    return depth

  @ctx.batch(type_inference=lambda args: [ab.TensorType(np.int64, ())])
  def start(x):
    return walk(x, True, np.array([0], np.int64))

  x = np.array([0.5, 2.5, 9.0, 4.0])
  got = call(start, [x], mode, max_stack_depth=12)
  want = []
  for v in x:
    d, go = 0, True
    while go:
      go = v > 1.0 and d < 5
      v, d = v - 1.0, d + 1
    want.append(d)
  assert_same(got, np.array(want, np.int64))
  assert_same(start(x, dry_run=True), got)


def test_tensorflow_backend_takes_tfps_constructor_arguments():
  tf = _tf()
  backend = ab.TensorFlowBackend(safety_checks=False,
                                 while_parallel_iterations=1,
                                 while_maximum_iterations=4,
                                 basic_block_xla_device=None)
  assert 'while_maximum_iterations=4' in repr(backend)
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda args: [args[0]])
  def count(n):
    i = 0
    while i < n:
      i += 1
    return i

  # TFP's loop stopped after while_maximum_iterations steps; here a run
  # that has not finished by then raises.
  with pytest.raises(errors.StepLimitError):
    count(tf.constant([100, 2]), backend=backend)
  np.testing.assert_array_equal(
      count(tf.constant([1, 2]), backend=ab.TensorFlowBackend(
          while_maximum_iterations=50)), [1, 2])
  with pytest.raises(errors.ArgumentError):
    ab.TensorFlowBackend(while_maximum_iterations=0)


# -- TFP's NUTS sampler, unchanged ---------------------------------------------


@pytest.fixture(scope='module')
def tfp_nuts():
  pytest.importorskip('tensorflow_probability')
  module = tfp_baselines.tfp_nuts_on_autobatch_vm()
  assert module.ab is ab
  return module


@pytest.mark.parametrize('mode', [
    'eager', 'graph', pytest.param('xla', marks=pytest.mark.slow)])
def test_tfps_nuts_sampler_runs_unchanged(tfp_nuts, mode):
  tf = _tf()
  dim, chains = 5, 128

  def log_prob(x):   # standard normal
    return -0.5 * tf.reduce_sum(x * x, axis=-1)

  kernel = tfp_nuts.NoUTurnSampler(log_prob, step_size=[tf.constant(0.7)],
                                   max_tree_depth=4, seed=7)
  # Far from the target, so that a sampler that does not move fails.
  x0 = tf.constant(np.random.default_rng(1).normal(
      3.0, 0.2, size=(chains, dim)), tf.float32)
  results = kernel.bootstrap_results(x0)

  one_step = kernel.one_step
  if mode != 'eager':   # traced (and compiled) once, called 8 times
    one_step = tf.function(one_step, jit_compile=mode == 'xla',
                           autograph=False)
  x, draws = x0, []
  for _ in range(8):
    x, results = one_step(x, results)
    draws.append(x)
  leapfrogs = results.leapfrogs_taken
  draws = np.asarray(draws)
  assert draws.shape == (8, chains, dim) and draws.dtype == np.float32
  assert np.all(np.asarray(leapfrogs) > 0)
  last = draws[-4:].reshape(-1)   # 4 x 128 x 5 values
  assert abs(last.mean()) < 0.25, last.mean()
  assert 0.7 < last.var() < 1.3, last.var()


# -- names -----------------------------------------------------------------------

# TFP's IR classes and VM internals, which are not provided
# (docs/migrating_from_tfp.md, "TFP's IR classes are not provided").
NOT_PROVIDED = {
    'instructions': {'ControlFlowGraph', 'Environment', 'Module',
                     'NullVariable', 'PythonBackend', 'PythonVMVariable',
                     'TemporaryVariable', 'detect_batch_size', 'halt',
                     'halt_op', 'is_return_op', 'prim_op', 'push_op',
                     'single_type'},
    'lowering': {'ControlFlowGraphBuilder', 'DefinedInfo'},
    'numpy_backend': {'FullNumpyVariable', 'RegisterNumpyVariable', 'Stack'},
    'stackless': {'ExecutionQueue'},
    'tf_backend': {'FullTensorFlowVariable', 'RegisterTensorFlowVariable',
                   'Stack', 'UnsafeStack'},
    'virtual_machine': {'select_block_priority'},
}


def test_every_public_name_of_tfps_package_exists():
  pytest.importorskip('tensorflow_probability')
  import importlib  # pylint: disable=g-import-not-at-top
  theirs = importlib.import_module(
      'tensorflow_probability.python.experimental.auto_batching')
  for name in dir(theirs):
    if not name.startswith('_'):
      assert hasattr(ab, name), name
  for module in ('allocation_strategy', 'dsl', 'frontend', 'instructions',
                 'liveness', 'lowering', 'numpy_backend',
                 'stack_optimization', 'stackless', 'tf_backend',
                 'type_inference', 'virtual_machine', 'xla'):
    tfp_module, ours = getattr(theirs, module), getattr(ab, module)
    for name in dir(tfp_module):
      value = getattr(tfp_module, name)
      if (name.startswith('_') or not callable(value) or
          getattr(value, '__module__', '') != tfp_module.__name__):
        continue   # private, a constant, or imported from elsewhere
      if name in NOT_PROVIDED.get(module, ()):
        assert not hasattr(ours, name), f'{module}.{name} is now provided'
        continue
      assert callable(getattr(ours, name, None)), f'{module}.{name}'
