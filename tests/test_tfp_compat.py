"""Programs written in the style of `tfp.experimental.auto_batching`.

They use only names TFP's package exports (`Context`, `truthy`, `Type`,
`TensorType`, `NumpyBackend`, `TensorFlowBackend`, `instructions.pattern_map2`,
the module names...), TFP-style `type_inference` callables returning lists
of `Type`s, namedtuples of arrays, and the keyword modes, so a TFP user's
program runs by changing only its import.
"""

import collections

import numpy as np
import pytest

import autobatch_vm as ab  # a TFP user wrote: from tfp.experimental import auto_batching as ab

TFP_NAMES = ['Context', 'truthy', 'Type', 'TensorType', 'NumpyBackend',
             'TensorFlowBackend', 'instructions', 'dsl', 'frontend',
             'type_inference', 'liveness', 'lowering', 'allocation_strategy',
             'stack_optimization', 'stackless', 'virtual_machine',
             'numpy_backend', 'tf_backend', 'xla']


def test_public_names_match_tfp():
  for name in TFP_NAMES:
    assert hasattr(ab, name), name
  for name in ['pattern_map', 'pattern_map2', 'pattern_zip',
               'pattern_flatten', 'pattern_traverse']:
    assert callable(getattr(ab.instructions, name))
  assert ab.frontend.Context is ab.Context
  assert ab.frontend.truthy is ab.truthy


State = collections.namedtuple('State', ['position', 'momentum'])


def _make_program():
  ctx = ab.Context()

  def _state_type(arg_types):
    # TFP style: each argument's type is a pattern of TensorTypes; return a
    # list of Types.
    position = arg_types[0].position
    momentum = arg_types[0].momentum
    assert isinstance(position, ab.TensorType)
    return [ab.Type(State(position, momentum))]

  def leapfrog(state, step):
    momentum = state.momentum - 0.5 * step[:, None] * state.position
    position = state.position + step[:, None] * momentum
    momentum = momentum - 0.5 * step[:, None] * position
    return State(position, momentum)

  def build_tree(state, step, depth):
    if ab.truthy(depth == 0):
      return leapfrog(state, step)
    else:
      left = build_tree(state, step, depth - 1)
      right = build_tree(left, step, depth - 1)
      merged = ab.instructions.pattern_map2(
          lambda a, b: 0.5 * (a + b), left, right)
      return merged

  build_tree = ctx.batch_uncurried(build_tree, _state_type)

  @ctx.batch(type_inference=lambda types: [types[0]])
  def count_steps(n, limit):
    if ab.truthy(n >= limit):
      return n
    else:
      return count_steps(n + 1, limit)

  return ctx, build_tree, count_steps, leapfrog


def _tree_ref(leapfrog, state, step, depth):
  if depth == 0:
    return leapfrog(state, step)
  left = _tree_ref(leapfrog, state, step, depth - 1)
  right = _tree_ref(leapfrog, left, step, depth - 1)
  return State(0.5 * (left.position + right.position),
               0.5 * (left.momentum + right.momentum))


@pytest.mark.parametrize('stackless', [False, True])
def test_tfp_style_tree_program(stackless):
  ctx, build_tree, _, leapfrog = _make_program()
  rng = np.random.default_rng(0)
  b = 9
  state = State(rng.normal(size=(b, 4)), rng.normal(size=(b, 4)))
  step = rng.uniform(0.05, 0.2, size=b)
  depth = rng.integers(0, 5, size=b)
  out = build_tree(state, step, depth, max_stack_depth=10,
                   backend=ab.NumpyBackend(), block_code_cache={},
                   stackless=stackless)
  assert isinstance(out, State)
  for i in range(b):
    one = State(state.position[i:i + 1], state.momentum[i:i + 1])
    ref = _tree_ref(leapfrog, one, step[i:i + 1], depth[i])
    np.testing.assert_allclose(out.position[i], ref.position[0])
    np.testing.assert_allclose(out.momentum[i], ref.momentum[0])
    alone = build_tree(one, step[i:i + 1], depth[i:i + 1], dry_run=True)
    np.testing.assert_allclose(out.position[i], alone.position[0])
  assert 'build_tree' in ctx.function_names()


def test_tfp_style_inspection_api():
  ctx, build_tree, count_steps, _ = _make_program()
  sig = [ab.Type(ab.TensorType(np.int64, ())),
         ab.Type(ab.TensorType(np.int64, ()))]
  compiled = ctx.program_compiled('count_steps', sig, ab.NumpyBackend())
  lowered = ctx.program_lowered('count_steps', sig, ab.NumpyBackend())
  assert 'count_steps' in str(compiled) and 'goto' in str(lowered)
  out = count_steps(np.array([0, 3, 7]), np.array([5, 5, 5]),
                    max_stack_depth=3)
  np.testing.assert_array_equal(out, [5, 5, 7])
  del build_tree


def test_tf_backend_keyword_names():
  tf = pytest.importorskip('tensorflow')
  ctx, build_tree, count_steps, _ = _make_program()
  backend = ab.TensorFlowBackend(while_parallel_iterations=1)
  out = count_steps(tf.constant([0, 3, 7]), tf.constant([5, 5, 5]),
                    backend=backend, max_stack_depth=3)
  np.testing.assert_array_equal(np.asarray(out), [5, 5, 7])
  b = 3
  rng = np.random.default_rng(1)
  state = State(tf.constant(rng.normal(size=(b, 2))),
                tf.constant(rng.normal(size=(b, 2))))
  out = build_tree(state, tf.constant([0.1, 0.2, 0.1], tf.float64),
                   tf.constant([0, 2, 3]), backend=backend,
                   max_stack_depth=6)
  ref = build_tree(State(state.position.numpy(), state.momentum.numpy()),
                   np.array([0.1, 0.2, 0.1]), np.array([0, 2, 3]),
                   max_stack_depth=6)
  np.testing.assert_allclose(np.asarray(out.position), ref.position)
  del ctx
