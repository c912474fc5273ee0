"""TensorFlow backend stacks and masked writes against a plain-Python model.

The model keeps, per batch member, a Python list (its stack) and a register
value.  Hypothesis draws random sequences of masked push / pop / peek
(restore) operations with random masks; after every step the backend's
arrays must agree with the model for every member, and members outside the
mask must be untouched.  Two stacks (an int scalar and a float vector) are
driven together, as the VM does for a variable whose type is a pattern.
These are the backend methods that the VM's closures call on TensorFlow,
eagerly here (the NumPy backend's blocks are generated code, which does
its own pushes and pops: the end-to-end tests cover it).
"""

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from autobatch_vm.instructions import TensorType

tf = pytest.importorskip('tensorflow')
from autobatch_vm.tf_backend import TensorFlowBackend  # pylint: disable=g-import-not-at-top,wrong-import-position

BACKEND = TensorFlowBackend()
# At least 150 examples; more under the `--long` profile (tests/conftest.py).
EXAMPLES = max(150, hypothesis.settings().max_examples)
TYPES = [TensorType(np.int32, ()), TensorType(np.float64, (2,))]


class Overflow(Exception):

  def __init__(self, members):
    super().__init__(members)
    self.members = sorted(int(i) for i in members)


class Model:
  """Per-member stacks as lists of lists; registers as lists."""

  def __init__(self, batch):
    self.stacks = [[] for _ in range(batch)]
    self.regs = [[0, (0.0, 0.0)] for _ in range(batch)]


def _value(batch, seed):
  rng = np.random.default_rng(seed)
  return [rng.integers(-100, 100, size=batch).astype(np.int32),
          rng.normal(size=(batch, 2))]


def _check(model, regs, sp, stacks):
  regs, sp, stacks = ([np.asarray(x) for x in regs], np.asarray(sp),
                      [np.asarray(x) for x in stacks])
  for i, frames in enumerate(model.stacks):
    assert sp[i] == len(frames)
    for k, (a, b) in enumerate(frames):
      assert stacks[0][k, i] == a
      assert tuple(stacks[1][k, i]) == b
    assert regs[0][i] == model.regs[i][0]
    assert tuple(regs[1][i]) == model.regs[i][1]


OPS = st.lists(st.tuples(st.sampled_from(['push', 'pop', 'peek']),
                         st.lists(st.booleans(), min_size=12, max_size=12),
                         st.integers(0, 2**31)), max_size=40)


@hypothesis.settings(max_examples=EXAMPLES, deadline=None)
@hypothesis.given(batch=st.integers(1, 12), depth=st.integers(1, 5), ops=OPS)
def test_masked_stack_ops_match_the_model(batch, depth, ops):
  model = Model(batch)
  stacks = [BACKEND.stack_zeros(t, depth, batch) for t in TYPES]
  sp = BACKEND.sp_zeros(batch)
  regs = [BACKEND.zeros(t, batch) for t in TYPES]
  for kind, bits, seed in ops:
    mask = np.array(bits[:batch])
    if kind != 'push':  # popping an empty stack is not defined: never asked
      mask &= np.asarray(sp) > 0
    m = BACKEND.mask_of(tf.constant(mask), batch)
    members = np.flatnonzero(mask)
    if kind == 'push':
      values = _value(batch, seed)
      full = [i for i in members if len(model.stacks[i]) >= depth]
      try:
        stacks, new_sp = BACKEND.push(stacks, sp, values, m, depth, Overflow)
      except Overflow as e:
        assert e.members == full
        _check(model, regs, sp, stacks)   # raised before pushing anything
        continue
      assert not full
      sp = new_sp
      for i in members:
        model.stacks[i].append((values[0][i], tuple(values[1][i])))
    else:
      old_sp = np.asarray(sp)
      before = [np.asarray(r) for r in regs]
      if kind == 'pop':
        new_regs, sp = BACKEND.pop(stacks, sp, regs, m)
        np.testing.assert_array_equal(old_sp, np.asarray(sp) + mask)
      else:
        new_regs = BACKEND.peek(stacks, sp, regs, m)
        np.testing.assert_array_equal(old_sp, np.asarray(sp))
      for old, b in zip(regs, before):
        np.testing.assert_array_equal(np.asarray(old), b)   # not changed
      regs = new_regs
      for i in members:
        top = (model.stacks[i].pop() if kind == 'pop'
               else model.stacks[i][-1])
        model.regs[i] = [top[0], top[1]]
    _check(model, regs, sp, stacks)


@hypothesis.settings(max_examples=EXAMPLES, deadline=None)
@hypothesis.given(batch=st.integers(1, 10),
                  bits=st.lists(st.booleans(), min_size=10, max_size=10),
                  seed=st.integers(0, 2**31), vector=st.booleans())
def test_masked_write_and_goto(batch, bits, seed, vector):
  mask = np.array(bits[:batch])
  m = BACKEND.mask_of(tf.constant(mask), batch)
  assert m.count == int(mask.sum()) and m.full == bool(mask.all())
  rng = np.random.default_rng(seed)
  shape = (batch, 3) if vector else (batch,)
  old, new = rng.normal(size=shape), rng.normal(size=shape)
  out = np.asarray(BACKEND.write(tf.constant(old), tf.constant(new), m))
  for i in range(batch):
    np.testing.assert_array_equal(out[i], new[i] if mask[i] else old[i])
  pc = rng.integers(0, 5, size=batch).astype(np.int32)
  cond = rng.integers(0, 2, size=batch).astype(bool)
  moved = np.asarray(BACKEND.goto(tf.constant(pc), m, 7))
  branched = np.asarray(BACKEND.branch(tf.constant(pc), m, tf.constant(cond),
                                       8, 9))
  for i in range(batch):
    assert moved[i] == (7 if mask[i] else pc[i])
    assert branched[i] == ((8 if cond[i] else 9) if mask[i] else pc[i])
