"""Tests of autobatch_vm.python."""

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm.ir import instructions as inst


def per_member_primitive(ctx, fn):
  """The per-member primitive of `fn` (a function of `ctx` with one), and
  the names of the parameters it reads, in its order."""
  (function,) = ctx.program(fn).functions
  ops = [op for b in function.blocks for op in b.instructions
         if isinstance(op, inst.PrimOp) and op.per_member]
  assert len(ops) == 1, ops
  return ops[0].function, [v.split('.')[-1] for v in ops[0].vars_in]


def _loop(fn, args, batch):
  """The members' values, one call of the plain function each, stacked."""
  outs = [fn.python_function(*[np.copy(a[k]) for a in args])
          for k in range(batch)]
  if isinstance(outs[0], tuple):
    return type(outs[0])(*[np.stack([np.asarray(o[f]) for o in outs])
                           for f in range(len(outs[0]))])
  return np.stack([np.asarray(o) for o in outs])


def check_batched_equals_a_loop_and_the_dry_run(ctx, fn, names, plain,
                                                values, batch):
  """`fn` batched (stack VM, stackless) and dry run equals a plain loop
  over its `batch` members (values, shapes, dtypes; its arguments left as
  they were), and its primitive takes `member_direct`'s plain form
  exactly where `plain` says."""
  args = [values[n] for n in names]
  expected = _loop(fn, args, batch)
  before = [np.copy(a) for a in args]
  for out in (fn(*args, stackless=False), fn(*args, stackless=True),
              fn(*args, dry_run=True)):
    for a, b in zip(args, before):
      np.testing.assert_array_equal(a, b)   # item writes copy
    assert type(out) is type(expected)  # pylint: disable=unidiomatic-typecheck
    for got, want in zip(ab.instructions.pattern_flatten(out),
                         ab.instructions.pattern_flatten(expected)):
      got = np.asarray(got)
      assert got.shape == want.shape and got.dtype == want.dtype
      np.testing.assert_allclose(got, want, rtol=1e-12)
  pm, read = per_member_primitive(ctx, fn)
  key = tuple((values[n].ndim, values[n].dtype.char) for n in read)
  assert (pm.direct.form(key, pm.member_function, pm.loc) is not None) == (
      plain)


def run_everywhere(fn, args, check=None, **kwargs):
  """`fn`'s batched results against its dry run: NumPy (stack VM,
  stackless) and TensorFlow (eager, `tf.function`, XLA)."""
  alone = fn(*args, dry_run=True, **kwargs)
  if check is not None:
    check(alone)
  outs = {f'numpy stackless={s}': fn(*args, stackless=s, **kwargs)
          for s in (False, True)}
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) for a in args]
  outs['eager'] = fn(*targs, **kwargs)
  for jit in (False, True):
    outs[f'tf.function jit={jit}'] = tf.function(
        lambda *a: fn(*a, **kwargs), jit_compile=jit)(*targs)
  for mode, out in outs.items():
    out = ab.instructions.pattern_map(np.asarray, out)
    for got, want in zip(ab.instructions.pattern_flatten(out),
                         ab.instructions.pattern_flatten(alone)):
      assert got.dtype == want.dtype, mode
      np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=mode)


def refused_everywhere(fn, args, error, match):
  """`fn(*args)` refused with `error` (its message matching `match`, its
  `loc` in the file that defines `fn`) on NumPy (stack VM, stackless) and
  TensorFlow (eager, `tf.function`, XLA)."""
  calls = [lambda s=s: fn(*args, stackless=s) for s in (False, True)]
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) for a in args]
  calls.append(lambda: fn(*targs))
  calls += [lambda jit=jit: tf.function(fn, jit_compile=jit)(*targs)
            for jit in (False, True)]
  for call in calls:
    with pytest.raises(error, match=match) as info:
      call()
    assert info.value.loc.filename == fn.python_function.__code__.co_filename


def call_on(backend, fn, *args):
  """`fn(*args)` on NumPy, or on TensorFlow eagerly or under XLA, as
  NumPy values."""
  if backend == 'numpy':
    return fn(*args)
  tf = pytest.importorskip('tensorflow')
  targs = [tf.constant(a) for a in args]
  out = (fn(*targs) if backend == 'eager' else
         tf.function(fn, jit_compile=True)(*targs))
  return ab.instructions.pattern_map(np.asarray, out)
