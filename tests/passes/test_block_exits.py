"""Block exits (`passes.block_exits`, `ExitOp`): the rewrite and every
executor that runs it.

A branch's likely side is inlined into the branching block after an exit;
members for which the branch goes the other way leave there.  Checked: the
rewrite on a recursion shaped like NUTS's `_build_tree` and on a loop whose
body starts with a test, against the reference interpreter and the
members run alone (`dry_run`), in fewer steps; then batched runs on NumPy
(stack and stackless) and TensorFlow (eagerly, `tf.function`, XLA) where
members take both sides of an exit in one step, where none stays, and
where a primitive after an exit fails (only the members that stayed are
named).
"""

import pickle

import cloudpickle
import numpy as np
import pytest
import tensorflow as tf

import autobatch_vm as ab
from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import virtual_machine
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.passes import block_exits
from autobatch_vm.passes import pipeline

CTX = ab.Context(block_exits=True)
TABLE = np.arange(5) * 10
TF_TABLE = tf.constant(TABLE)


@CTX.batch(type_inference=lambda t: t[1])
def build(depth, x):
  """Shaped like NUTS's `_build_tree`: a subtree, then a test whether to
  build the second one."""
  if depth > 0:
    r = build(depth - 1, x)
    if r % 3 != 0:
      return build(depth - 1, r + 1)
    return r
  return x + 1


@CTX.batch()
def loop(n):
  """A loop whose body starts with a test."""
  s = 0
  i = 0
  while i < n:
    if i % 3 == 0:
      s = s + i
    else:
      s = s - 1
    i = i + 1
  return s


@CTX.batch()
def spiral(n):
  """A tuple-valued variable live across the loop's and the if's exits."""
  s = (n, n * 0)
  while s[0] > 0:
    if s[0] % 2 == 0:
      s = (s[0] // 2, s[1] + 1)
    else:
      s = (s[0] - 1, s[1] + 3)
  return s


PROGRAMS = {'build': build, 'loop': loop, 'spiral': spiral}


@CTX.batch()
def failing(i):
  """Fails for the members that go on past the test (`i > 2`)."""
  if i > 2:
    return TABLE[i * 10]
  return i


@CTX.batch()
def tf_lookup(i):
  """`lookup` by a TensorFlow gather, which checks indices on CPU."""
  if i < 5:
    return tf.gather(TF_TABLE, i)
  return -i


def _args(name, batch, rng):
  if name == 'build':
    return [rng.integers(0, 5, batch), rng.integers(0, 10, batch)]
  if name in ('loop', 'spiral'):
    return [rng.integers(0, 9, batch)]
  return [rng.integers(0, 5, batch)]


def _typed(name, args):
  return CTX.program_compiled(name, [inst.TensorType(a.dtype) for a in args])


def _without_exits(program):
  return pipeline.lowered(program, verify=True)


def _exits(program):
  return [op for b in program.blocks for op in b.instructions
          if isinstance(op, inst.ExitOp)]


@pytest.mark.parametrize('name', ['build', 'loop'])
def test_rewrite_keeps_the_meaning_in_fewer_steps(name):
  fn = PROGRAMS[name]
  args = _args(name, 12, np.random.default_rng(3))
  typed = _typed(name, args)
  with_exits = pipeline.lowered(typed, verify=True, exits=True)
  without = _without_exits(typed)
  assert _exits(with_exits) and not _exits(without)
  alone = fn(*args, dry_run=True)
  for i in range(12):
    member = [np.int64(a[i]) for a in args]
    assert inst.interpret(with_exits, *member) == alone[i]
  runs = [virtual_machine.execute(p, args, NumpyBackend(), 12,
                                  max_stack_depth=8)
          for p in (without, with_exits)]
  np.testing.assert_array_equal(runs[0][0], alone)
  np.testing.assert_array_equal(runs[1][0], alone)
  assert runs[1][1].steps < runs[0][1].steps
  # The lowest-first schedule gathers members by block order: unchanged.
  names = [p.name for p in pipeline.LOWERED_PASSES]
  lowest = pipeline.run(
      pipeline.LOWERED_PASSES[:names.index('block_exits')], typed,
      schedule='lowest')
  assert block_exits.add_exits(lowest, 'lowest') is lowest


def test_off_unless_the_context_asks():
  plain = ab.Context()
  assert not plain.block_exits
  twice = plain.batch()(loop.python_function)
  args = [np.array([0, 4])]
  assert not _exits(plain.lowered_for_args(twice, args))
  plain.block_exits = True
  assert _exits(plain.lowered_for_args(twice, args))


def test_the_knob_travels_with_a_pickled_context():
  local = ab.Context(block_exits=True)
  counted = local.batch()(loop.python_function)
  n = np.array([0, 3, 5])
  copy = pickle.loads(cloudpickle.dumps(counted))
  assert copy.context is not local and copy.context.block_exits
  np.testing.assert_array_equal(copy(n), loop(n, dry_run=True))


def test_the_side_that_goes_on_is_inlined():
  """`build`'s test after the first subtree: the side that builds the
  second one is inlined, the side that returns is the exit's target."""
  args = _args('build', 6, np.random.default_rng(0))
  program = _typed('build', args)
  lowered = pipeline.lowered(program, verify=True, exits=True)
  by_label = {b.label: b for b in lowered.blocks}
  exits = _exits(lowered)
  assert exits and all(
      isinstance(by_label[e.block].terminator, inst.IndirectGotoOp)
      for e in exits)
  for b in lowered.blocks:   # no block inlines itself or the entry
    assert b.label not in inst.exit_targets(b)
  # Each member runs the same instructions as without exits.
  without = _without_exits(program)
  for i in range(6):
    member = [np.int64(a[i]) for a in args]
    assert inst.interpret(lowered, *member) == inst.interpret(without,
                                                              *member)


def test_members_take_both_sides_of_an_exit_in_one_step():
  """All members start at `loop`'s entry, which tests `i < n` and exits:
  a member with `n == 0` leaves there while the others stay."""
  lowered = CTX.lowered_for_args('loop', [np.array([0, 4])])
  assert any(isinstance(op, inst.ExitOp)
             for op in lowered.blocks[0].instructions)
  n = np.array([0, 4, 0, 7, 2])
  expected = loop(n, dry_run=True)
  for stackless in (False, True):
    np.testing.assert_array_equal(loop(n, stackless=stackless), expected)


def _on_tf(fn, args, mode):
  targs = [tf.constant(a) for a in args]
  as_numpy = lambda out: inst.pattern_map(np.asarray, out)
  if mode == 'eager':
    return as_numpy(fn(*targs))
  if mode == 'xla':
    out, ok = tf.function(lambda *a: fn(*a, on_error='status'),
                          jit_compile=True)(*targs)
    assert np.asarray(ok).all()
    return as_numpy(out)
  return as_numpy(tf.function(fn)(*targs))


@pytest.mark.parametrize('stackless', [False, True])
@pytest.mark.parametrize('name', sorted(PROGRAMS))
def test_numpy_matches_members_alone(name, stackless):
  fn = PROGRAMS[name]
  args = _args(name, 9, np.random.default_rng(7))
  expected = fn(*args, dry_run=True)
  for got, want in zip(inst.pattern_flatten(fn(*args, stackless=stackless)),
                       inst.pattern_flatten(expected)):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('mode', ['eager', 'graph', 'xla'])
@pytest.mark.parametrize('name', sorted(PROGRAMS))
def test_tensorflow_matches_members_alone(name, mode):
  fn = PROGRAMS[name]
  args = _args(name, 7, np.random.default_rng(11))
  for got, want in zip(inst.pattern_flatten(_on_tf(fn, args, mode)),
                       inst.pattern_flatten(fn(*args, dry_run=True))):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('mode', ['eager', 'graph', 'xla'])
@pytest.mark.parametrize('i', [[0, 7, 3, 9, 4], [7, 9]],
                         ids=['some_stay', 'none_stay'])
def test_lanes_of_members_that_left_reach_no_primitive(i, mode):
  """After the exit, the gather runs on the lanes of the members that
  stayed only: a member that left (`i >= 5`) would fail it."""
  i = np.array(i)
  np.testing.assert_array_equal(_on_tf(tf_lookup, [i], mode),
                                tf_lookup(i, dry_run=True))


@CTX.batch()
def log_or_keep(x):
  """Its derivative is inf at 0 on the side that takes the log."""
  if x > 0:
    return tf.math.log(x)
  return x


@pytest.mark.parametrize('mode', ['graph', 'xla'])
def test_gradients_where_no_member_stays(mode):
  """Every member leaves at the exit (`x <= 0`, one at 0): the log's inf
  derivative there must not reach the gradient."""
  x = tf.constant([0.0, -1.0], tf.float64)

  def grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      total = tf.reduce_sum(log_or_keep(x, max_steps=50))
    return tape.gradient(total, x)
  got = tf.function(grad, jit_compile=(mode == 'xla'))(x)
  np.testing.assert_array_equal(got.numpy(), [1.0, 1.0])


@pytest.mark.parametrize('backend', ['numpy', 'tf'])
def test_a_failure_after_an_exit_names_the_members_that_stayed(backend):
  program = CTX.lowered_for_args('failing', [np.array([1])])
  assert _exits(program)
  i = np.array([0, 5, 1, 3])   # members 1 and 3 stay, and fail
  with pytest.raises(errors.PrimitiveError, match=r'block: \[1, 3\]'):
    failing(tf.constant(i) if backend == 'tf' else i)


@CTX.batch(per_member=True)
def sum_above(v, n):
  """A member's item read at a member's index after an exit: the
  vectorized read reports the members it fails for."""
  s = 0.0
  i = 0
  while i < n:
    if v[i] > 3:
      s += v[i]
    i += 1
  return s


@pytest.mark.parametrize('mode', ['eager', 'graph', 'xla'])
def test_member_index_reads_after_an_exit(mode):
  # Under tf.function the read's flags of members out of range, made
  # inside the cond that runs the rest of the block, were read outside
  # it: TensorFlow's InaccessibleTensorError.
  v = np.arange(20.).reshape(4, 5)
  n = np.array([4, 0, 2, 5])
  want = sum_above(v, n, dry_run=True)
  np.testing.assert_array_equal(want, [0.0, 0.0, 21.0, 85.0])
  for stackless in (False, True):
    np.testing.assert_array_equal(sum_above(v, n, stackless=stackless), want)
  np.testing.assert_array_equal(_on_tf(sum_above, [v, n], mode), want)


def test_a_member_index_out_of_range_after_an_exit_in_a_graph():
  v = np.arange(20.).reshape(4, 5)
  n = np.array([4, 0, 6, 5])   # member 2 reads v[5]
  with pytest.raises(IndexError):
    sum_above(v, n, dry_run=True)
  run = tf.function(lambda a, b: sum_above(a, b, on_error='status'))
  _, ok = run(tf.constant(v), tf.constant(n))
  np.testing.assert_array_equal(ok, [True, True, False, True])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"IndexError in `v\[i\] > 3`.*sum_above"):
    tf.function(sum_above)(tf.constant(v), tf.constant(n))
