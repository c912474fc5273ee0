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


# -- reading lowered programs as TFP's code does -----------------------------

def _iota_sum_context():
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda types: types[0])
  def iota_sum(n, acc):
    if n <= 0:
      return acc
    else:
      return iota_sum(n - 1, acc + n)

  @ctx.batch(type_inference=lambda types: types[0])
  def fib(n):
    if n > 1:
      return fib(n - 1) + fib(n - 2)
    return n

  return ctx, iota_sum, fib


def test_lowered_program_reads_as_tfp_graph():
  ctx, _, _ = _iota_sum_context()
  prog = ctx.lowered_for_args('fib', [np.array([3, 5])])
  graph = prog.graph
  assert graph.exit_index() == len(prog.blocks) > 1
  assert [graph.block(i) for i in range(graph.exit_index())] == list(
      prog.blocks)
  assert graph.enter_block() is prog.blocks[0]
  assert graph.blocks == prog.blocks
  for i, block in enumerate(graph.blocks):
    assert graph.block_index(block) == i
    assert graph.block_index(block.label) == i
    assert isinstance(block.terminator, ab.instructions.TERMINATORS)
  assert graph.block_index(None) == graph.exit_index()
  with pytest.raises(KeyError):
    graph.block_index('no_such_block')
  fn = ctx.program('fib').main_function
  assert fn.graph.blocks == fn.blocks
  assert fn.graph.exit_index() == len(fn.blocks)
  assert str(graph).splitlines()[0] == f'  {prog.blocks[0].label}:'


def test_graph_view_is_read_only():
  ctx, _, _ = _iota_sum_context()
  prog = ctx.lowered_for_args('fib', [np.array([3, 5])])
  with pytest.raises(AttributeError):
    prog.graph.blocks = ()
  with pytest.raises(AttributeError):
    prog.graph = None
  with pytest.raises(TypeError):
    prog.var_alloc['fib.n'] = ab.instructions.VariableAllocation.NULL
  assert not hasattr(prog.graph, 'append') and not hasattr(
      prog.graph, 'set_blocks')


def test_self_tail_call_pushes_nothing():
  # TFP's frontend_test.testSelfTailCallOptimization, through `graph` and
  # `var_alloc` as it reads them.
  ctx, iota_sum, _ = _iota_sum_context()
  inputs = [np.array([12, -13, 100], dtype=np.int32),
            np.array([0, 0, 0], dtype=np.int32)]
  prog = ctx.lowered_for_args('iota_sum', inputs)
  for i in range(prog.graph.exit_index()):
    assert not isinstance(prog.graph.block(i).terminator,
                          ab.instructions.PushGotoOp)
  assert all(alloc != ab.instructions.VariableAllocation.FULL
             for _, alloc in prog.var_alloc.items())
  np.testing.assert_array_equal(iota_sum(*inputs, max_stack_depth=3),
                                [78, 0, 5050])


def _structure(prog):
  return ([(b.label, [ab.instructions.op_str(o) for o in b.instructions],
            ab.instructions.op_str(b.terminator)) for b in prog.blocks],
          dict(prog.var_alloc), prog.vars_in, prog.vars_out)


@pytest.mark.parametrize('name, sig', [
    ('fib', [ab.TensorType(np.int64, ())]),
    ('iota_sum', [ab.TensorType(np.int32, ())] * 2),
    ('build_tree', [State(ab.TensorType(np.float64, (4,)),
                          ab.TensorType(np.float64, (4,))),
                    ab.TensorType(np.float64, ()),
                    ab.TensorType(np.int64, ())]),
    ('count_steps', [ab.TensorType(np.int64, ())] * 2),
])
@pytest.mark.parametrize('debug', [False, True])
def test_program_lowered_without_signature(name, sig, debug):
  # TFP: without a signature type inference is skipped and the program is
  # for reading.  Its structure is the one a typed lowering has.
  ctx = (_make_program() if name in ('build_tree', 'count_steps')
         else _iota_sum_context())[0]
  ctx.debug = debug   # the IR verifier checks each pass
  untyped = ctx.program_lowered(name)
  assert untyped is ctx.program_lowered(name)
  assert untyped.var_defs and all(
      t == ab.Type(None) for t in untyped.var_defs.values())
  assert set(untyped.var_defs) == set(untyped.var_alloc)
  typed = ctx.program_lowered(name, sig)
  assert _structure(untyped) == _structure(typed)
  compiled = ctx.program_compiled(name)
  assert all(t == ab.Type(None) for f in compiled.functions
             for t in f.var_defs.values())
  assert ': ? ' in str(untyped) and ': ? ' in str(compiled)


def test_untyped_program_is_not_run():
  ctx, _, _ = _iota_sum_context()
  backend = ab.NumpyBackend()
  with pytest.raises(ab.errors.ArgumentError, match='untyped'):
    ab.virtual_machine.execute(ctx.program_lowered('fib'),
                               [np.array([3, 5])], 15, backend)
  with pytest.raises(ab.errors.ArgumentError, match='untyped'):
    ab.stackless.execute(ctx.program_compiled('fib'), backend, None,
                         np.array([3, 5]))


def test_tfp_nuts_program_reads_as_tfps_test_reads_it():
  # TFP's nuts_autobatching_test.testProgramProperties: evolve_trajectory
  # lowered without a signature, read through `graph` and `var_alloc`.
  # TFP's compiler had 9 FULL variables besides the PC and 20 pushes (a
  # write to a FULL variable pushes there); here pushes are `PushOp`s and
  # the terminators that push a return block.
  pytest.importorskip('tensorflow_probability')
  from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top
  nuts = tfp_baselines.tfp_nuts_on_autobatch_vm()
  kernel = nuts.NoUTurnSampler(lambda x: x, step_size=0,
                               use_auto_batching=True)
  program = kernel.autobatch_context.program_lowered('evolve_trajectory')
  full = {v for v, a in program.var_alloc.items()
          if a == ab.instructions.VariableAllocation.FULL}
  assert 0 < len(full) <= 9
  pushes = 0
  for i in range(program.graph.exit_index()):
    block = program.graph.block(i)
    for op in block.instructions:
      for var in ab.instructions.pattern_traverse(getattr(op, 'vars_out',
                                                          ())):
        assert var in program.var_alloc
      if isinstance(op, ab.instructions.PushOp):
        assert set(op.vars) <= full
        pushes += len(op.vars)
    pushes += isinstance(block.terminator, (
        ab.instructions.PushGotoOp, ab.instructions.PushBranchOp,
        ab.instructions.CallBranchOp))
  assert 0 < pushes <= 20


def test_tfp_nuts_latents_of_mixed_rank_in_a_graph():
  # TFP's nuts_autobatching_test.testLatentsOfMixedRank in graph mode (the
  # stack VM in a TF1 graph run by a Session): latents [4, 3, 2] and [4, 7] put stacks of
  # scalars and of vectors in the program's packs.  (Its random draws
  # differ from an eager run's, so the step is checked, not compared.)
  pytest.importorskip('tensorflow_probability')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top
  nuts = tfp_baselines.tfp_nuts_on_autobatch_vm()

  def log_prob(x, y):
    return tf.reduce_sum(x, axis=[-1, -2]) + tf.reduce_sum(y, axis=-1)

  def step():
    import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
    kernel = nuts.NoUTurnSampler(
        log_prob, step_size=0.3, use_auto_batching=True, stackless=False,
        unrolled_leapfrog_steps=2, max_tree_depth=4, seed=1)
    init = [tf.ones([4, 3, 2]), tf.zeros([4, 7])]
    state, results = tfp.mcmc.sample_chain(
        num_results=1, num_burnin_steps=0, current_state=init,
        kernel=kernel, parallel_iterations=1)
    return [s[0] for s in state], results.leapfrogs_taken[0]

  with tf.Graph().as_default():   # TFP's test runs it so, in a Session
    out = step()
    with tf.compat.v1.Session() as session:
      (x, y), leapfrogs = session.run(out)
  assert x.shape == (4, 3, 2) and y.shape == (4, 7)
  assert np.all(np.isfinite(x)) and np.all(np.isfinite(y))
  # Trees of depth at most 4, two leapfrogs a leaf.
  assert np.all((leapfrogs >= 2) & (leapfrogs <= 2 * 2**4))
