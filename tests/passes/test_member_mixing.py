"""The member-mixing check: exact where it refuses, never a false alarm.

Type inference runs each user primitive on two made-up members and
refuses one whose first member's result follows the second member's
values (`autobatch_vm.member_mixing`).  A primitive that draws at random
gives different results from run to run, which agree by chance often
enough (a random sign agrees half the time) to look like mixing.  These
tests run random primitives, of every kind a user writes, many times in
fresh Contexts and require that none is refused, and that a reduction
over the batch is still refused where nothing is random.
"""

import random
import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm.passes import randomness
from tests.python import run_everywhere

try:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
except ImportError:
  tf = None


def _tf():
  if tf is None:
    pytest.skip('TensorFlow is not installed')
  return tf


def _line_of(tag):
  with open(__file__) as f:
    for number, line in enumerate(f, 1):
      if f'# MIX:{tag}' in line:
        return number
  raise AssertionError(tag)


def _no_mixing_alarm(run):
  """Runs `run()`; fails on a refusal or a mixing warning."""
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.MemberMixingWarning)
    return run()


# -- TensorFlow: random ops of every kind ---------------------------------------


def _direction(x):
  return tf.sign(tf.random.uniform([tf.shape(x)[0]]) - 0.5)


def _stateless(x, seed):
  return x + tf.random.stateless_uniform(tf.shape(x), seed=seed[-1])


def _generator_draw(gen):
  def draw(x):
    return x * gen.uniform(tf.shape(x), dtype=x.dtype)
  return draw


def test_a_random_sign_on_tensorflow_is_never_refused():
  # The primitive of TFP's NUTS that picks each chain's direction: two runs
  # agree by chance half the time, and it was refused in about a third of
  # fresh Contexts.
  _tf()
  x = tf.constant([1.0, 2.0, 3.0])
  for _ in range(200):
    ctx = ab.Context()

    def sign(x):
      d = _direction(x)
      return x * d
    fn = ctx.batch_uncurried(sign, None)
    program = _no_mixing_alarm(lambda: ctx.program_compiled(  # pylint: disable=cell-var-from-loop
        'sign', [ab.TensorType(np.float32, ())], ab.TensorFlowBackend()))
    assert program is not None
  out = fn(x)
  assert set(np.abs(out.numpy() / x.numpy()).tolist()) == {1.0}


def test_stateless_and_generator_draws_on_tensorflow_are_never_refused():
  _tf()
  # Seeds handed in as data: member 0's draw follows the last member's seed,
  # which the user chose; a generator object's draws.
  seeds = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int32)
  x = tf.zeros([3, 2])
  gen = tf.random.Generator.from_seed(1)
  for _ in range(8):
    ctx = ab.Context()
    stateless = ctx.batch_uncurried(_stateless, None)
    drawn = ctx.batch_uncurried(_generator_draw(gen), None)
    _no_mixing_alarm(lambda: stateless(x, seeds))  # pylint: disable=cell-var-from-loop
    _no_mixing_alarm(lambda: drawn(x + 1.0))  # pylint: disable=cell-var-from-loop


def centered_noisy(v):
  return v - tf.reduce_mean(v) + 0.0 * tf.random.normal(tf.shape(v))


def centered_numpy_on_tf(v):
  return tf.constant(v.numpy() - v.numpy().mean())


def test_tensorflow_mixing_is_refused_exactly_or_said_unsure():
  _tf()
  ctx = ab.Context()

  @ctx.batch
  def centered(v):
    return v - tf.reduce_mean(v)  # MIX:tfmean

  with pytest.raises(errors.TypeInferenceError) as e:
    centered(tf.constant([1.0, 2.0, 4.0]))
  assert e.value.lineno == _line_of('tfmean')
  assert 'mixes batch members' in str(e.value)
  # Random ops: the check cannot hold the draws fixed, and says nothing.
  noisy = ctx.batch_uncurried(centered_noisy, None)
  _no_mixing_alarm(lambda: noisy(tf.constant([1.0, 2.0, 4.0])))

  # Python on values: the ops cannot be seen, so a warning, not a refusal.
  @ctx.batch
  def centered_py(v):
    return centered_numpy_on_tf(v)  # MIX:tfpy

  with pytest.warns(errors.MemberMixingWarning, match='could not be traced') \
      as caught:
    centered_py(tf.constant([1.0, 2.0, 4.0]))
  assert caught[0].lineno == _line_of('tfpy')
  assert caught[0].filename == __file__


# -- NumPy and Python generators ------------------------------------------------

_RNG = np.random.default_rng(3)
_LEGACY = np.random.RandomState(4)
_PY = random.Random(5)


def np_sign(x):
  return np.sign(np.random.uniform(size=x.shape[0]) - 0.5)


def gen_sign(x):
  return np.sign(_RNG.uniform(size=x.shape[0]) - 0.5)


def legacy_sign(x):
  return np.sign(_LEGACY.uniform(size=x.shape[0]) - 0.5)


def py_sign(x):
  return np.array([_PY.choice([-1.0, 1.0]) for _ in range(x.shape[0])])


def module_sign(x):
  return np.array([random.choice([-1.0, 1.0]) for _ in range(x.shape[0])])


def own_draws(seed, shape):
  return np.stack([np.random.default_rng(int(s)).normal(size=shape)
                   for s in seed])


def seeded_by_data(x, seed):
  # Each member's draws from its own seed.
  return x + own_draws(seed, x.shape[1:])


def seeded_by_the_first_member(x, seed):
  # Every member's draws from the batch's first seed: `seed[0]` is member
  # 0's, where a dry run gives each member its own.
  return x + np.random.default_rng(int(seed[0])).normal(size=x.shape)


def random_count(x):
  return random.randint(0, 1) + 0 * x.shape[-1]


@pytest.mark.parametrize('stackless', [False, True])
@pytest.mark.parametrize('draw', [np_sign, gen_sign, legacy_sign, py_sign,
                                  module_sign])
def test_random_signs_on_numpy_are_never_refused(draw, stackless):
  x = np.array([1.0, 2.0, 3.0])
  for _ in range(40):
    ctx = ab.Context()

    def walk(x, k):
      while k > 0:
        x = x * draw(x)
        k = k - 1
      return x
    fn = ctx.batch_uncurried(walk, None)
    out = _no_mixing_alarm(
        lambda: fn(x, np.array([1, 2, 3]), stackless=stackless))  # pylint: disable=cell-var-from-loop
    np.testing.assert_array_equal(np.abs(out), x)


def test_the_check_leaves_the_users_generators_where_they_were():
  # Pinned while compared, restored after: the check draws nothing.
  ctx = ab.Context()
  fn = ctx.batch_uncurried(lambda x: x * gen_sign(x) - np.sum(x, 0) * 0, None)
  state = _RNG.bit_generator.state
  global_state = np.random.get_state()
  pin = randomness.RngPin(randomness.python_randomness(gen_sign)[1])
  assert _RNG in randomness.python_randomness(gen_sign)[1]
  pin.restore()
  assert _RNG.bit_generator.state == state
  assert str(np.random.get_state()) == str(global_state)
  del fn


def test_a_seed_handed_in_as_data_is_never_refused():
  x = np.zeros((4, 2))
  seed = np.array([3, 1, 4, 1])
  for _ in range(20):
    ctx = ab.Context()
    fn = ctx.batch_uncurried(seeded_by_data, None)
    # Each member's draw follows its own seed only: nothing to say.
    assert _no_mixing_alarm(lambda: fn(x, seed)).shape == (4, 2)  # pylint: disable=cell-var-from-loop


def test_a_seed_read_from_the_first_member_is_warned_not_refused():
  # The second member's draws follow the first member's seed: mixing,
  # which a draw could explain, so a warning (it runs).
  ctx = ab.Context()
  fn = ctx.batch_uncurried(seeded_by_the_first_member, None)
  with pytest.warns(errors.MemberMixingWarning, match='draws at random'):
    out = fn(np.zeros((4, 2)), np.array([3, 1, 4, 1]))
  assert out.shape == (4, 2)


def first_row(x, y):
  return x + y[0]


def test_a_read_of_the_first_members_row_is_refused():
  # `y[0]` is the batch's first row: every member gets member 0's `y`
  # (the first member's own result shows nothing).
  ctx = ab.Context()
  fn = ctx.batch_uncurried(first_row, None)
  with pytest.raises(errors.TypeInferenceError, match='mixes batch members'):
    fn(np.arange(3.0), np.arange(3.0) * 10)


def test_a_random_python_number_is_not_taken_for_a_count():
  # A Python int computed from batched inputs that differs between batch
  # sizes 1 and 2 by chance is not `len(x)`.
  x = np.zeros((3, 4))
  for _ in range(40):
    ctx = ab.Context()

    def pick(x):
      k = random_count(x)
      return k
    fn = ctx.batch_uncurried(pick, None)
    out = _no_mixing_alarm(lambda: fn(x))  # pylint: disable=cell-var-from-loop
    assert np.shape(out) in ((), (3,)) and set(np.ravel(out)) <= {0, 1}


def noisy_center(x):
  return x - x.mean(axis=0) + 0.0 * np.random.normal(size=x.shape)


def test_numpy_mixing_is_still_refused_or_warned():
  ctx = ab.Context()

  @ctx.batch
  def center(x):
    return x - x.mean(axis=0)  # MIX:npmean

  with pytest.raises(errors.TypeInferenceError) as e:
    center(np.array([1.0, 2.0, 4.0]))
  assert e.value.lineno == _line_of('npmean')
  assert e.value.function == 'center'

  # Random and mixing: with the generators pinned the difference remains,
  # but a generator the walk missed could explain it: a warning.
  @ctx.batch
  def center_noisy(x):
    return noisy_center(x)  # MIX:npnoisy

  with pytest.warns(errors.MemberMixingWarning, match='draws at random') \
      as caught:
    center_noisy(np.array([1.0, 2.0, 4.0]))
  assert caught[0].lineno == _line_of('npnoisy')


def test_python_randomness_sees_generators_through_closures_and_methods():
  rng = np.random.default_rng(0)

  class Sampler:

    def __init__(self):
      self.rng = np.random.RandomState(1)

    def __call__(self, x):
      return x + self.rng.normal()

  def plain(x):
    return np.sqrt(x) + x.sum(axis=-1)

  def closure(x):
    return x + rng.normal()

  sampler = Sampler()
  assert randomness.python_randomness(plain) == (False, [])
  assert randomness.python_randomness(np.sort) == (False, [])
  drawn, gens = randomness.python_randomness(closure)
  assert drawn and rng in gens
  drawn, gens = randomness.python_randomness(sampler)
  assert drawn and sampler.rng in gens
  drawn, gens = randomness.python_randomness(np.random.normal)
  assert drawn


def test_tensorflow_sees_random_ops_in_nested_functions():
  _tf()
  backend = ab.TensorFlowBackend()
  x = tf.zeros([2, 3])

  def in_loop(x):
    return tf.while_loop(lambda i, y: i < 2,
                         lambda i, y: (i + 1, y + tf.random.normal([2, 3])),
                         (0, x))[1]

  assert backend.draws_at_random(in_loop, [x])
  assert backend.draws_at_random(lambda x: x + tf.random.stateless_normal(
      [2, 3], seed=[1, 2]), [x])
  assert not backend.draws_at_random(lambda x: tf.reduce_sum(x, 0), [x])
  assert backend.draws_at_random(lambda x: x.numpy(), [x]) is None
  assert ab.NumpyBackend().draws_at_random(np.sort, [np.zeros(3)]) is False


@pytest.mark.slow
def test_tfps_nuts_in_eager_mode_is_never_refused_over_many_seeds():
  # TFP's own sampler, unchanged: each kernel builds a fresh Context, whose
  # type inference runs the random primitives (direction, momentum, slice).
  _tf()
  pytest.importorskip('tensorflow_probability')
  from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top
  module = tfp_baselines.tfp_nuts_on_autobatch_vm()

  def log_prob(x):
    return -0.5 * tf.reduce_sum(x * x, axis=-1)

  x0 = tf.constant(np.random.default_rng(1).normal(size=(4, 2)), tf.float32)
  # 10 seeds here; tests/run_tfp_suite.py --seeds=50 runs TFP's own tests.
  for seed in range(10):
    kernel = module.NoUTurnSampler(log_prob, step_size=[tf.constant(0.5)],
                                   max_tree_depth=3, seed=seed)
    results = kernel.bootstrap_results(x0)
    state, _ = _no_mixing_alarm(lambda: kernel.one_step(x0, results))  # pylint: disable=cell-var-from-loop
    assert np.all(np.isfinite(state.numpy()))


# -- operands that line up across the batch axis --------------------------------


def test_a_per_member_scalar_against_a_vector_is_refused_not_mixed():
  # `y * s` of y [batch, 3] and s [batch] runs on one member, fails on two,
  # and at 3 members ran, giving each member the others' scales.
  ctx = ab.Context()

  @ctx.batch
  def scale(y, s, n):
    while n > 0:
      y = y * s  # MIX:align
      n -= 1
    return y

  y = np.arange(9.0).reshape(3, 3) + 1
  for make in (np.asarray, lambda a: _tf().constant(a)):
    with pytest.raises(errors.TypeInferenceError,
                       match='runs on one member but not on') as info:
      scale(make(y), make(np.array([1.0, 2.0, 3.0])), make(np.ones(3, int)))
    assert info.value.lineno == _line_of('align')

  @ctx.batch
  def scale_right(y, s, n):
    while n > 0:
      y = y * s[:, None]
      n -= 1
    return y
  args = (y, np.array([1.0, 2.0, 3.0]), np.ones(3, int))
  np.testing.assert_allclose(scale_right(*args),
                             scale_right(*args, dry_run=True))


def test_a_number_variable_against_a_vector_is_refused():
  # `h` is typed as a Python number, but the VM holds a variable that
  # changes as one number per member, [batch]: against v [batch, 2] it
  # broadcasts along v's last axis (at 2 members silently, else a
  # run-time error).
  ctx = ab.Context()

  @ctx.batch
  def grow(v, n):
    h = 0.1
    k = 0
    while k < n:
      v = v + h * v  # MIX:number
      h = h * 0.5
      k += 1
    return v

  with pytest.raises(errors.TypeInferenceError,
                     match='runs on one member but not on') as info:
    grow(np.ones((4, 2)), np.array([0, 1, 2, 1]))
  assert info.value.lineno == _line_of('number')

  @ctx.batch
  def grow_right(v, n):
    h = 0.1
    k = 0
    while k < n:
      v = v + np.expand_dims(h, -1) * v
      h = h * 0.5
      k += 1
    return v
  args = (np.ones((4, 2)), np.array([0, 1, 2, 1]))
  np.testing.assert_allclose(grow_right(*args), grow_right(*args,
                                                           dry_run=True))


def test_a_local_assigned_one_literal_is_that_constant():
  # `h = 0.1`, assigned once at the top level and never again, is read as
  # the number itself, as Python reads it for one member: `h * v` scales
  # each member's vector, at any batch size (2 members included, where
  # an array [batch] would line up with v's last axis).
  ctx = ab.Context()

  @ctx.batch
  def grow(v, n):
    h = 0.1
    eps: float = 1e-3
    scale = (2.0, 0.5)
    k = 0
    while k < n:
      v = v + h * v + eps * np.asarray(scale)
      k += 1
    return v

  for batch in (2, 3, 4):
    args = (np.arange(2.0 * batch).reshape(batch, 2),
            np.arange(batch) % 3)
    run_everywhere(grow, args)


def test_a_number_that_would_become_a_vector_is_named():
  # `out = 0.0`, then `out = out + s * x`: per member Python makes `out` a
  # vector; a variable keeps one shape, and the hint says how to start it.
  ctx = ab.Context()

  @ctx.batch
  def accumulate(x):
    out = 0.0
    for s in (0.5, 1.0):
      out = out + s * x
    return out

  with pytest.raises(errors.TypeInferenceError,
                     match='runs on one member but not on') as info:
    accumulate(np.ones((3, 2)))
  assert "'out' starts as a number" in str(info.value)
  assert 'np.zeros_like(x)' in str(info.value)

  @ctx.batch
  def accumulate_right(x):
    out = np.zeros_like(x)
    for s in (0.5, 1.0):
      out = out + s * x
    return out
  run_everywhere(accumulate_right, [np.arange(6.0).reshape(3, 2)])


def test_a_reduction_over_the_batch_beside_a_counter_is_refused():
  # `np.any(...)` without an axis reduces over the batch; `and k < 50`
  # with a counter `k` (a Python number when typed) gave the result a
  # batch axis back, so the check for a missing batch axis passed it and
  # every member ran while any did: silently more iterations.
  ctx = ab.Context()

  @ctx.batch
  def newton(x, c):
    k = 0
    while np.any(np.abs(x * x - c) > 1e-10) and k < 50:
      x = x - (x * x - c) / (2 * x)
      k += 1
    return x, k

  @ctx.batch
  def newton_per_member(x, c):
    k = 0
    while np.any(np.abs(x * x - c) > 1e-10, axis=-1) and k < 50:
      x = x - (x * x - c) / (2 * x)
      k += 1
    return x, k
  x = np.ones((4, 3))
  c = np.random.default_rng(2).uniform(1, 9, (4, 3))
  with pytest.raises(errors.TypeInferenceError, match='mixes batch members'):
    newton(x, c)
  # In a graph too: the primitive's NumPy form is checked on NumPy.
  tf = pytest.importorskip('tensorflow')
  for jit in (False, True):
    with pytest.raises(errors.TypeInferenceError,
                       match='mixes batch members'):
      tf.function(newton, jit_compile=jit)(tf.constant(x), tf.constant(c))
  run_everywhere(newton_per_member, [x, c])


def test_a_select_of_a_scalar_and_a_vector_is_refused_on_tensorflow():
  # tf.where(mask [B, 3], v [B, 3], s [B]) lines s up with the last axis:
  # at 3 members it ran, each member taking the others' s, silently.
  # TensorFlow's select says 'must be broadcastable', which the check
  # did not take for a broadcasting error.
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  @ctx.batch
  def pick(mask, v, k):
    s = tf.zeros_like(k, tf.float32)
    for _ in range(k):
      s = s + 1.0
    return tf.where(mask, v, s)

  mask = tf.constant([[True, False, False]] * 3)
  with pytest.raises(errors.TypeInferenceError,
                     match='runs on one member but not on'):
    pick(mask, tf.zeros((3, 3)), tf.constant([1, 2, 3]))


def test_a_count_of_the_batch_inside_an_expression_is_refused():
  # `s + len(x)` and `x.sum(axis=-1) / len(x)`: len(x) of a batched value
  # is the batch size (the members at the block), so each member got it,
  # silently, on NumPy and TensorFlow; only `n = len(x)` in a statement
  # of its own was refused.
  ctx = ab.Context()

  @ctx.batch
  def counted(x, n):
    s = 0
    i = 0
    while i < n:
      s = s + 1
      i += 1
    return s + len(x)

  @ctx.batch
  def averaged(x):
    return x.sum(axis=-1) / len(x)

  x = np.ones((4, 3))
  with pytest.raises(errors.TypeInferenceError, match='counts the members'):
    counted(x, np.array([1, 2, 3, 4]))
  with pytest.raises(errors.TypeInferenceError, match='counts the members'):
    averaged(x)
  tf = pytest.importorskip('tensorflow')
  with pytest.raises(errors.TypeInferenceError, match='counts the members'):
    counted(tf.constant(x), tf.constant([1, 2, 3, 4]))

  @ctx.batch
  def indexed(x, j):
    # The guide's NumPy idiom: each member's row, whatever the batch.
    return x[np.arange(len(x)), j] + x.shape[-1]
  np.testing.assert_allclose(indexed(np.arange(12.0).reshape(4, 3),
                                     np.array([0, 2, 1, 0])),
                             [3.0, 8.0, 10.0, 12.0])


# -- another member's value read by index or product, in every mode ------------


def times_last(x):
  return x * x[-1]  # MIX:last


def times_dot(x):
  return x * (x @ x)  # MIX:dot


def times_first_row(v):
  return v * v[0]  # MIX:row


def minus_first(x):
  return x - x[0]  # MIX:first


def reversed_members(x):
  return x[::-1] + 0.0  # MIX:reversed


def scaled_by_a_counter(v, k):
  s = 0.0
  for _ in range(k):
    s = s + 1.0
  return s * v  # MIX:trap


def _refused_in_every_mode(fn, args, tag, match):
  """`fn` (batch-aware, in a fresh Context) refused with a
  TypeInferenceError at its line tagged `tag`: NumPy (stack VM,
  stackless), TensorFlow eagerly, under tf.function and under XLA."""
  calls = [lambda s=s: ab.Context().batch()(fn)(*args, stackless=s)
           for s in (False, True)]
  tf = _tf()
  targs = [tf.constant(a) for a in args]
  calls.append(lambda: ab.Context().batch()(fn)(*targs))
  calls += [lambda jit=jit: tf.function(ab.Context().batch()(fn),
                                        jit_compile=jit)(*targs)
            for jit in (False, True)]
  for call in calls:
    with pytest.raises(errors.TypeInferenceError, match=match) as info:
      call()
    assert info.value.lineno == _line_of(tag)
    assert info.value.loc.filename == __file__
    assert info.value.function == fn.__name__


@pytest.mark.parametrize('fn, tag', [
    (times_last, 'last'), (times_dot, 'dot'), (minus_first, 'first'),
    (reversed_members, 'reversed')])
def test_a_members_scalar_times_another_members_is_refused_everywhere(
    fn, tag):
  # `x[-1]` is the last member's value and `x @ x` the batch's dot product;
  # on made-up members of zeros the product with them hid it (0 * anything),
  # and inside a graph nothing ran: each member got others' values, silently.
  x = np.array([1.0, 4.0, 2.0, 3.0])
  _refused_in_every_mode(fn, [x], tag, 'mixes batch members')


def test_a_members_vector_times_the_first_members_is_refused_everywhere():
  # `v[0]` of v [batch, 3] is the first member's vector (meant: v[:, :1]).
  v = np.arange(12.0).reshape(4, 3) + 1
  _refused_in_every_mode(times_first_row, [v], 'row', 'mixes batch members')


def test_a_counters_scalar_against_a_vector_is_refused_in_a_graph_too():
  # `s * v` of a loop's per-member s [B] and v [B, n] with n == B ran
  # under tf.function and XLA, each member taking the other's s.
  v = np.array([[1.0, 2.0], [3.0, 4.0]])
  _refused_in_every_mode(scaled_by_a_counter, [v, np.array([1, 2])], 'trap',
                         'runs on one member but not on')


_TABLE = np.array([0.5, 2.0, 3.0, -1.0])
_MATRIX = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0], [0.0, 1.0, 1.0]])
_WEIGHTS = np.array([0.25, -0.5, 2.0])


def tables_and_constants(x, v, j):
  # Lookalikes of the mistakes above that read no other member.
  a = x * _TABLE[-1] + x * _TABLE[0]
  b = v * v[:, :1] + v[:, -1:] * v
  c = v[:, 0] * x
  d = _TABLE[j] * x
  e = v @ _MATRIX
  f = (v @ _WEIGHTS) * x
  g = np.sum(v * v, axis=-1) * x
  h = np.einsum('bi,bi->b', v, v) + x * x
  return a, b, c, d, e + _MATRIX[1], f + g + h + _WEIGHTS @ _WEIGHTS


def test_lookalikes_that_read_constants_or_their_own_member_run_everywhere():
  x = np.array([1.0, 4.0, 2.0])
  v = np.arange(9.0).reshape(3, 3) + 1
  j = np.array([3, 0, 2])
  for batch in (2, 3):
    fn = ab.Context().batch()(tables_and_constants)
    _no_mixing_alarm(lambda: run_everywhere(  # pylint: disable=cell-var-from-loop
        fn, [x[:batch], v[:batch], j[:batch]]))
