"""Tests of the NumPy batching rules (`autobatch_vm.per_member.numpy_rules`).

Each rule is checked against a loop over members: a function written for
one member runs once through `vectorize` on a batch, and once per member
on that member's arrays; the two must agree in values, shapes and dtypes.
A property test (hypothesis; profile in tests/conftest.py) builds random
chains of ufuncs, reductions, indexing and index assignment and checks
them the same way.
"""

import contextlib
import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from autobatch_vm import errors
from autobatch_vm.per_member import numpy_rules as nr

BATCH_SIZES = (1, 3, 17)


def _spd(rng, batch):
  a = rng.normal(size=(batch, 4, 4))
  return a @ np.swapaxes(a, 1, 2) + 4 * np.eye(4)


# One member's inputs, by parameter name: a function's parameters say what
# it is given.
_INPUTS = {
    'v': lambda rng, b: rng.normal(size=(b, 5)),
    'w': lambda rng, b: rng.normal(size=(b, 5)),
    'm': lambda rng, b: rng.normal(size=(b, 3, 5)),
    't': lambda rng, b: rng.normal(size=(b, 2, 3, 5)),
    's': lambda rng, b: rng.normal(size=(b,)),
    'f': lambda rng, b: rng.normal(size=(b, 5)).astype(np.float32),
    'n': lambda rng, b: rng.integers(-9, 10, size=(b, 5)),
    'k': lambda rng, b: rng.integers(1, 9, size=(b,)).astype(np.int32),
    'i': lambda rng, b: rng.integers(-5, 5, size=(b,)),
    'j': lambda rng, b: rng.integers(0, 3, size=(b,)),
    'iv': lambda rng, b: rng.integers(-5, 5, size=(b, 3)),
    'im': lambda rng, b: rng.integers(0, 5, size=(b, 3, 5)),
    'p': lambda rng, b: rng.random(size=(b, 5)) < 0.5,
    'sq': _spd,
    'u': lambda rng, b: np.sort(rng.normal(size=(b, 5)), axis=1),
    # A mask selecting two elements in every member.
    'two': lambda rng, b: np.argsort(rng.random(size=(b, 5)), axis=1) < 2,
}

_PLAIN_V = np.linspace(-1.0, 1.0, 5)
_PLAIN_M = np.arange(15.0).reshape(3, 5) / 7
_PLAIN_SQ = np.eye(4) * 3 + 0.5


def _inputs(fn, batch, seed=0):
  rng = np.random.default_rng(seed)
  return [_INPUTS[name](rng, batch) for name in inspect.signature(fn).parameters]


def _looped(fn, args, batch):
  """`fn` run on each member's arrays, its results stacked.  Python numbers
  are weak (NEP 50) on every NumPy, as the library makes them."""
  with _weak_promotion():
    results = [fn(*[a[b] for a in args]) for b in range(batch)]
  flats = [nr.patterns.pattern_flatten(r) for r in results]
  leaves = [np.stack([np.asarray(x) for x in column])
            for column in zip(*flats)]
  return nr.patterns.pattern_unflatten(results[0], leaves)


@contextlib.contextmanager
def _weak_promotion():
  """NEP 50's promotion where NumPy (before 2) has it as an option."""
  state = getattr(np, '_get_promotion_state', lambda: 'weak')()
  if state == 'weak':
    yield
    return
  np._set_promotion_state('weak')  # pylint: disable=protected-access
  try:
    yield
  finally:
    np._set_promotion_state(state)  # pylint: disable=protected-access


def _assert_same(got, want):
  got = nr.patterns.pattern_flatten(got)
  want = nr.patterns.pattern_flatten(want)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert isinstance(g, np.ndarray), type(g)
    assert g.shape == w.shape
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    tolerance = 1e-5 if g.dtype in (np.float32, np.complex64) else 1e-10
    np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)


def check(fn, batch, fallback=None, seed=0):
  """`fn` through `vectorize` equals `fn` looped over members."""
  args = _inputs(fn, batch, seed)
  got = nr.vectorize(fn, batch, fallback)(*args)
  _assert_same(got, _looped(fn, args, batch))
  return got


# Rules, each a function of one member's inputs.
CASES = {
    # Ufuncs and operators, member ranks aligned with plain arrays.
    'add': lambda v, w: v + w,
    'operators': lambda v, s: (v - s, s * v, v / 2, 2 ** v, -v, +v, abs(v),
                               v // 0.7, v % 0.3, 1 - v, 3 / (v + 9)),
    'int_operators': lambda n, k: (n & k, n | 3, n ^ k, ~n, n << 1, n >> 1,
                                   n // k, n % k, divmod(n, k)),
    'comparisons': lambda v, w: (v < w, v <= 0, v > w, v >= 0.5, v == w,
                                 v != 0.0),
    'plain_matrix_broadcast': lambda v: v + _PLAIN_M,
    'member_matrix_plain_vector': lambda m: m * _PLAIN_V,
    'scalar_and_matrix': lambda s, m: (s + m, np.maximum(m, s)),
    'ufuncs': lambda v: (np.exp(v), np.sin(v), np.sqrt(np.abs(v)),
                         np.log1p(v * v), np.tanh(v), np.sign(v),
                         np.floor(v), np.isfinite(v), np.isnan(v)),
    'binary_ufuncs': lambda v, w: (np.minimum(v, w), np.maximum(v, 0),
                                   np.arctan2(v, w), np.hypot(v, w),
                                   np.logaddexp(v, w), np.copysign(v, w)),
    'logical': lambda p, v: (np.logical_and(p, v > 0), np.logical_or(p, True),
                             np.logical_not(p), np.logical_xor(p, v < 0)),
    'two_outputs': lambda v: (np.modf(v), np.frexp(v), np.divmod(v, 0.3)),
    'ufunc_reduce_where': lambda m: (np.add.reduce(m, axis=1, where=m > 0),
                                     np.maximum.reduce(m, where=m < 0,
                                                       initial=-5.0)),
    'float32_weak_python_number': lambda f: (f * 2.5, f + 1, f / 3, f ** 2),
    'float32_strong_numpy_scalar': lambda f: f * np.float64(2.5),
    'int32_weak': lambda k: (k + 1, k * 2, k // 2),
    'scalar_left_numpy': lambda v: np.float64(2.0) + v,
    'ufunc_reduce': lambda m: (np.add.reduce(m), np.add.reduce(m, axis=1),
                               np.maximum.reduce(m, axis=None),
                               np.multiply.reduce(m, axis=(0, 1),
                                                  keepdims=True)),
    'ufunc_accumulate': lambda m: (np.add.accumulate(m),
                                   np.maximum.accumulate(m, axis=-1)),
    'ufunc_outer': lambda v, s: (np.multiply.outer(v, v), np.add.outer(
        s, v), np.subtract.outer(_PLAIN_V[:3], v)),
    'ufunc_at': lambda v, iv, w: _at(v, iv, w),
    'matmul_operator': lambda m, v: (m @ v, v @ v, m @ _PLAIN_M.T,
                                     _PLAIN_M @ v, v @ _PLAIN_M.T),
    'matmul_stacked': lambda t, m: (t @ m.T, np.matmul(m, t.swapaxes(1, 2))),
    # Reductions.
    'reductions': lambda m: (np.sum(m), np.mean(m, axis=0), np.prod(m, -1),
                             np.std(m, axis=(0, 1)), np.var(m, keepdims=True),
                             np.max(m, axis=1), np.min(m), np.amax(m, 0),
                             np.median(m, axis=1), np.ptp(m, axis=0)),
    'boolean_reductions': lambda p, m: (np.any(p), np.all(p), np.any(
        m > 0, axis=0), np.count_nonzero(p), np.count_nonzero(m > 0, axis=1)),
    'reduction_where': lambda v, p: (np.sum(v, where=p), np.max(
        v, where=p, initial=-10.0)),
    'reduction_dtype': lambda n: (np.sum(n, dtype=np.float32),
                                  np.mean(n, axis=0, dtype=np.float64)),
    'nan_reductions': lambda v: (np.nansum(np.where(v > 0, np.nan, v)),
                                 np.nanmax(np.where(v > 1, np.nan, v))),
    'arg_reductions': lambda m: (np.argmax(m), np.argmin(m, axis=0),
                                 np.argmax(m, axis=-1, keepdims=True),
                                 np.argmin(m, keepdims=True)),
    'scans': lambda m: (np.cumsum(m), np.cumprod(m, axis=0),
                        np.cumsum(m, axis=-1, dtype=np.float32)),
    'sorting': lambda m: (np.sort(m), np.sort(m, axis=0), np.sort(m, None),
                          np.argsort(m, axis=1), np.argsort(m, axis=None,
                                                            kind='stable')),
    'partition': lambda v: (np.partition(v, 2), np.argpartition(v, 2)[2]),
    'quantiles': lambda m: (np.percentile(m, 30), np.quantile(
        m, [0.2, 0.5], axis=1)),
    'methods': lambda m: (m.sum(), m.sum(axis=1), m.mean(0), m.max(-1),
                          m.min(), m.argmax(), m.argmin(1), m.cumsum(1),
                          m.prod(), m.std(), m.var(1), m.any(), m.all(0),
                          m.round(2), m.clip(-0.5, 0.5), m.T, m.ravel(),
                          m.flatten(), m.astype(np.float32), m.copy(),
                          m.reshape(5, 3), m.reshape((15,)), m.transpose(),
                          m.transpose(1, 0), m.swapaxes(0, 1), m.conj()),
    'other_methods': lambda v: v.searchsorted(0.0) * 0 + np.sort(v)[
        v.argsort()],
    'shape_queries': lambda m: (m.shape, m.ndim, m.size, len(m),
                                np.shape(m), np.ndim(m), np.size(m),
                                np.size(m, 1), nr.member_shape(m),
                                nr.member_len(m), m.dtype.itemsize,
                                m.itemsize, m.nbytes),
    # Indexing.
    'index_scalar': lambda v, i: (v[i], v[-1], v[i // 2], v[0]),
    'index_matrix': lambda m, j, i: (m[j], m[j, i], m[:, i], m[j, 1:4],
                                     m[..., i], m[1, i], m[-1]),
    'index_arrays': lambda m, iv, j: (m[j, iv], m[iv % 3], m[:, iv],
                                      m[[0, 2, 1], iv], m[np.array([1, 0]), j]),
    'index_slices': lambda t: (t[:, 1:, ::2], t[1], t[..., 0], t[None],
                               t[:, None, 1], t[..., None, 2], t[::-1, 0]),
    'index_separated': lambda t, j, i: (t[j % 2, :, i], t[0, :, i],
                                        t[:, j, i], t[j % 2, None, i % 3],
                                        t[j % 2, 1:, i, None]),
    'index_member_array_in_middle': lambda t, iv: (t[:, iv % 3], t[:, iv % 3, 1:3],
                                                   t[1, :, iv]),
    'index_plain_array_with_member': lambda i, j, iv, k: (
        nr.getitem(_PLAIN_V, i), nr.getitem(_PLAIN_M, (j, i)),
        nr.getitem(_PLAIN_M, (slice(None), i)), nr.getitem(_PLAIN_M, j),
        nr.getitem(_PLAIN_M, iv % 3), nr.getitem(_PLAIN_V, k % 5)),
    'index_masks': lambda v, two, m: (v[two], m[:, two], m[m[:, 0] > -100]),
    'index_plain_mask': lambda m: (m[:, _PLAIN_V > 0], m[_PLAIN_M > 1]),
    'iterate': lambda m: [row.sum() for row in m],
    # setitem.
    'setitem_scalar': lambda v, i, s: (nr.setitem(v, i, s), nr.setitem(
        v, 0, s), nr.setitem(v, i, 7.5)),
    'setitem_matrix': lambda m, j, i, v: (
        nr.setitem(m, (j, i), 0.0), nr.setitem(m, j, v), nr.setitem(
            m, (slice(None), i), v[:3]), nr.setitem(m, (j, slice(1, 3)), -1.0),
        nr.setitem(m, (Ellipsis, i), 2.0)),
    'setitem_arrays': lambda m, iv, v: (
        nr.setitem(m, (1, iv), v[:3]), nr.setitem(m, (slice(None), iv), 5.0)),
    'setitem_separated': lambda t, j, i, s: (
        nr.setitem(t, (j % 2, slice(None), i), s), nr.setitem(
            t, (j % 2, slice(None), i), np.arange(3.0)), nr.setitem(
                t, (0, slice(1, 3), i), nr.asarray([s, 2 * s]))),
    'setitem_masks': lambda v, p, two, s: (
        nr.setitem(v, p, 0.0), nr.setitem(v, two, s), nr.setitem(
            v, _PLAIN_V > 0, s), nr.setitem(v, two, v[:2] * 2),
        nr.setitem(v, (two,), -v[two])),
    'setitem_plain_target': lambda i, s: (
        nr.setitem(np.zeros(5), i, s), nr.setitem(_PLAIN_M, (1, i), 9.0),
        nr.setitem(np.zeros(4, np.int32), 2, s)),
    'setitem_casts': lambda n, i, v: nr.setitem(n, i, v[0]),
    'setitem_add': lambda v, iv, w: nr.setitem(v, iv, v[iv] + w[:3]),
    'setitem_none': lambda m, j, i: (nr.setitem(m, (j, None, i), 4.0),
                                     nr.setitem(m, (None, j), 1.0)),
    'wrapper_setitem': lambda v, i: _assigned(v, i),
    # Linear algebra.
    'dot': lambda m, v, s: (np.dot(m, v), np.dot(v, v), np.dot(m.T, m),
                            np.dot(s, v), np.dot(_PLAIN_M, v),
                            np.dot(v, _PLAIN_M.T), m.dot(v)),
    'dot_nd': lambda t, m: (np.dot(t, m.T), np.dot(t, _PLAIN_V)),
    'products': lambda v, w, m: (np.inner(v, w), np.inner(m, v), np.outer(
        v, w), np.vdot(v, w), np.outer(v, _PLAIN_V), np.tensordot(m, m, 2),
                                 np.tensordot(m, v, axes=([1], [0])),
                                 np.tensordot(m, m.T, axes=1)),
    'einsum': lambda m, v, t: (np.einsum('ij,j->i', m, v), np.einsum(
        'ij,ij', m, m), np.einsum('ii', m[:, :3]), np.einsum(
            '...j,j', t, v), np.einsum('i,j', v, _PLAIN_V), np.einsum(
                'ij,kj->ik', _PLAIN_M, m)),
    'trace_diag': lambda m, v: (np.trace(m), np.trace(m, 1), np.diagonal(
        m), np.diag(v), np.diag(v, 1), np.diag(v, -2), np.diag(m),
                                np.tril(m), np.triu(m, 1)),
    'linalg': lambda sq, v: (np.linalg.solve(sq, v[:4]), np.linalg.solve(
        sq, sq), np.linalg.inv(sq), np.linalg.det(sq), np.linalg.slogdet(sq),
                             np.linalg.cholesky(sq), np.linalg.eigvalsh(sq),
                             np.linalg.norm(v), np.linalg.norm(sq),
                             np.linalg.norm(sq, axis=1), np.linalg.norm(
                                 v, ord=1), np.linalg.norm(sq, ord='fro'),
                             np.linalg.solve(_PLAIN_SQ, v[:4]),
                             np.linalg.solve(sq, _PLAIN_V[:4]),
                             np.linalg.matrix_power(sq, 2)),
    'linalg_decompositions': lambda sq: _decompositions(sq),
    'cross': lambda v, w: np.cross(v[:3], w[:3]),
    # Elementwise functions, joining, reshaping, creation.
    'where': lambda p, v, s: (np.where(p, v, s), np.where(p, 1.0, 0.0),
                              np.where(v > 0, v, _PLAIN_M)),
    'select': lambda v, s, m: (np.select([v < -0.5, v > 0.5], [v * 2, s]),
                               np.select([m > 0], [m], default=s),
                               np.select([v > 0, _PLAIN_V > 0],
                                         [1.0, _PLAIN_M], v)),
    'clip_round': lambda v, s: (np.clip(v, -0.5, 0.5), np.clip(v, s, None),
                                np.clip(v, s - 1, s + 1), np.round(v, 2),
                                np.around(v), np.nan_to_num(v)),
    'isclose': lambda v, w: (np.isclose(v, w, atol=0.5), np.allclose(
        v, v + 1e-12), np.allclose(v, w), np.array_equal(v, v),
                             np.array_equal(v, w), np.array_equal(v, v[:3])),
    'join': lambda v, w, m, s: (np.concatenate([v, w]), np.concatenate(
        [m, v[None]]), np.concatenate([v, _PLAIN_V]), np.concatenate(
            [m, m], axis=1), np.concatenate([m, m], axis=None), np.stack(
                [v, w]), np.stack([v, _PLAIN_V], axis=1), np.stack(
                    [s, s * 2]), np.hstack([v, w]), np.hstack([m, m]),
                                np.vstack([v, w]), np.vstack([m, v]),
                                np.column_stack([v, w]), np.append(v, s),
                                np.append(m, m, axis=0)),
    'reshape': lambda m, v: (np.reshape(m, (5, 3)), np.reshape(m, -1),
                             np.ravel(m), np.transpose(m), np.transpose(
                                 m[None], (2, 0, 1)), np.swapaxes(m, 0, 1),
                             np.moveaxis(m, 0, -1), np.expand_dims(v, 0),
                             np.expand_dims(v, (0, 2)), np.squeeze(m[None]),
                             np.squeeze(m[:, :1], axis=1), np.broadcast_to(
                                 v, (2, 5)), np.atleast_1d(v[0]),
                             np.atleast_2d(v), np.atleast_3d(m),
                             np.flip(v), np.flip(m, 1), np.roll(v, 2),
                             np.roll(m, 1, axis=1), np.roll(m, 1),
                             np.diff(v), np.diff(m, axis=0), np.diff(
                                 v, prepend=0.0), np.tile(v, 2),
                             np.tile(v, (2, 1)), np.repeat(v, 2),
                             np.repeat(m, 2, axis=0), np.pad(v, 1),
                             np.pad(m, ((0, 1), (2, 0)), mode='edge')),
    'creation_like': lambda m, s, n: (np.zeros_like(m), np.ones_like(
        m, dtype=np.int32), np.full_like(m, 3.0), np.full_like(m, s),
                                      np.full_like(n, 2.7), np.zeros_like(
                                          m, shape=(2,)), np.copy(m),
                                      np.empty_like(m).shape,
                                      np.linspace(s, s + 1, 4),
                                      np.linspace(0.0, s, 3)),
    'take': lambda v, iv, m, j: (np.take(v, iv), np.take(m, iv, axis=1),
                                 np.take(m, j), np.take(v, iv + 7, mode='wrap'),
                                 np.take(v, iv, mode='clip'), v.take(iv)),
    'take_along_axis': lambda m, im: (np.take_along_axis(
        m, np.argsort(m, axis=1), axis=1), np.take_along_axis(
            m, im % 3, axis=0)[:1], np.take_along_axis(
                m, np.zeros((3, 1), np.intp), axis=1)),
    'searchsorted': lambda u, v, s: (np.searchsorted(u, s), np.searchsorted(
        u, v, side='right'), np.searchsorted(_PLAIN_V, v), np.searchsorted(
            u, 0.1)),
    'selection': lambda two, m: (np.nonzero(two), np.argwhere(two),
                                 np.flatnonzero(two), np.where(two),
                                 np.unique(np.floor(m * 0) + [0, 1, 2, 3, 4])),
    'isin': lambda n, k: (np.isin(n, [1, 2, 3]), np.isin(n, n[:2]),
                          np.isin(k, n, invert=True)),
    'interp': lambda v: np.interp(v, [-1.0, 0.0, 1.0], [0.0, 2.0, 1.0]),
    'asarray_mixed': lambda s, v: (nr.asarray([s, 1.0, s * 2]), nr.asarray(
        [v, v + 1]), nr.asarray((s, 2)), nr.asarray(v, np.float32)),
    'call_casts_and_lists': lambda s, v, k, i: (
        nr.call(np.float32, s), nr.call(np.int64, k), nr.call(np.float64, v),
        nr.call(np.sum, [s, v[0], 1.0]), nr.call(np.max, (s, 0.5)),
        nr.call(np.mean, [v, v * 2], axis=0), nr.call(np.concatenate, [v, [s]]),
        nr.call(np.concatenate, [v, v[:2]]), nr.call(np.float64, 2),
        nr.call(np.abs, s), nr.call(np.linalg.norm, [s, 1.0])),
    'call_creation': lambda s, v: (nr.call(np.full, 3, s), nr.call(
        np.full, (2, 5), v, np.float32), nr.call(np.zeros, 3) + s,
                                   nr.call(np.full, (2,), s, dtype=int)),
    'copyto': lambda v, w, p: _copied(v, w, p),
    'constants_broadcast': lambda s: (np.arange(6), 2.5, 3, True, s),
    # Slices with per-member bounds, of one length in every member.
    'member_windows': lambda v, j: (v[j:j + 2], v[j:j + 3:2],
                                    v[j + 1:j - 5:-1], np.sum(v[j:j + 2])),
    'member_windows_2d': lambda m, j: (m[j:j + 1, j:j + 3], m[1, j:j + 2],
                                       m[..., j:j + 2], m[j, j:j + 1],
                                       m[:, -j - 2:5 - j]),
    'member_windows_written': lambda v, m, j: (_windows_written(v, j),
                                               _windows_written_2d(m, j)),
    'result_type': lambda f: np.result_type(f, 1.0) == np.float32,
}


def _at(v, iv, w):
  np.add.at(v, iv, w[:3])
  np.negative.at(v, 0)
  return v


def _copied(v, w, p):
  np.copyto(v, w, where=p)
  out = np.zeros_like(v)
  np.copyto(out, 2.0)
  return v, out


def _windows_written(v, j):
  v[j:j + 2] = v[:2] * 2
  v[:j] = -1.0          # windows of different lengths, one value
  v[j::2] = j
  v[-1:j:-2] = 0.5
  return v


def _windows_written_2d(m, j):
  m[j, j:j + 2] = 3.0
  m[1:, j:] = m[0, 0]
  m[:2, j:j + 3] = m[2, :3]
  return m


def _assigned(v, i):
  v[i] = 5.0
  v[0] = v[i] + 1
  return v


def _decompositions(sq):
  w, u = np.linalg.eigh(sq)
  q, r = np.linalg.qr(sq)
  s = np.linalg.svd(sq, compute_uv=False)
  # Eigen- and singular vectors are fixed up to sign: compare products.
  return w, (u * w[None, :]) @ u.T, q @ r, np.abs(np.diagonal(r)), s, (
      np.linalg.inv(sq) @ sq)


@pytest.mark.parametrize('batch', BATCH_SIZES)
@pytest.mark.parametrize('name', sorted(CASES))
def test_rule_matches_loop(name, batch):
  calls = []
  check(CASES[name], batch, fallback=calls.append)
  assert not calls, f'{name} ran per member: {calls}'


def test_outputs_have_member_dtype_and_batch():
  out = nr.vectorize(lambda s: (np.arange(3), 2.5, 3, True, None), 4)(
      np.zeros(4))
  assert [x.shape for x in out[:4]] == [(4, 3), (4,), (4,), (4,)]
  assert [x.dtype for x in out[:4]] == [np.arange(3).dtype, np.float64,
                                        np.asarray(3).dtype, np.bool_]
  assert out[4] is None


def test_inputs_are_not_written():
  v = np.arange(12.0).reshape(3, 4)
  before = v.copy()
  nr.vectorize(lambda v: (_assigned(v, 1), nr.setitem(v, 0, 9.0),
                          _at(v, np.array([0, 1, 1]), np.ones(4))), 3)(v)
  np.testing.assert_array_equal(v, before)


def test_nested_patterns():
  def fn(pair, rest):
    (a, b), c = pair, rest[0]
    return {'no': None} and [(a + b, c * 2), [a.sum()]]
  batch = 3
  args = ((np.ones((batch, 2)), np.arange(batch * 2.0).reshape(batch, 2)),
          [np.arange(batch)])
  out = nr.vectorize(fn, batch)(*args)
  assert isinstance(out, list) and isinstance(out[0], tuple)
  np.testing.assert_array_equal(out[0][1], 2 * np.arange(batch))
  np.testing.assert_array_equal(out[1][0], [2.0, 2.0, 2.0])


# Fallback: a NumPy function without a rule runs per member, counted.

def test_function_without_rule_runs_per_member_and_is_counted():
  calls = []
  got = check(lambda v, w: np.polyfit(v, w, 1), 5, fallback=calls.append)
  assert got.shape == (5, 2)
  assert calls == ['np.polyfit']


def test_user_function_over_lists_runs_per_member():
  def median_of_list(row):
    values = sorted(list(row))
    return values[len(values) // 2]
  calls = []
  check(lambda m: np.apply_along_axis(median_of_list, 1, m), 4,
        fallback=calls.append)
  assert calls == ['np.apply_along_axis']


def test_method_without_rule_runs_per_member():
  calls = []
  check(lambda m: m.cumsum(0) + m.nonzero()[0].sum() * 0, 3)
  check(lambda v: v.byteswap().byteswap(), 3, fallback=calls.append)
  assert calls == ['ndarray.byteswap'] * 2


def test_fallback_writing_in_place_writes_the_member_not_the_input():
  def fn(m):
    np.fill_diagonal(m, -1.0)   # no rule: runs per member, in place
    return m
  calls = []
  m = np.arange(2 * 9.0).reshape(2, 3, 3)
  before = m.copy()
  got = nr.vectorize(fn, 2, calls.append)(m)
  np.testing.assert_array_equal(m, before)
  np.testing.assert_array_equal(got, _looped(fn, [before.copy()], 2))
  assert calls == ['np.fill_diagonal']


def test_fallback_result_of_differing_shapes_says_pad():
  def fn(v):
    return np.trim_zeros(np.where(v > 0, v, 0.0))
  v = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 1.0]])
  with pytest.raises(errors.PerMemberError, match='np.trim_zeros.*shape'
                     ) as info:
    nr.vectorize(fn, 2)(v)
  assert 'Pad' in str(info.value)


# Errors.

def test_mask_selecting_different_counts_says_pad():
  v = np.array([[1.0, -1.0, 2.0], [1.0, 2.0, 3.0]])
  for fn, name in ((lambda v: v[v > 0], 'mask'),
                   (lambda v: np.nonzero(v > 0), 'np.nonzero'),
                   (lambda v: np.unique(np.sign(v)), 'np.unique'),
                   (lambda v: nr.setitem(v, v > 0, v[v > 0]), 'mask')):
    with pytest.raises(errors.PerMemberError, match=name) as info:
      nr.vectorize(fn, 2)(v)
    assert 'differ' in str(info.value) and 'Pad' in str(info.value)


def test_slices_of_different_lengths_say_pad():
  # Kept, sorted or written through, a slice of members' own lengths is
  # refused; reduced in its statement it is not (`ragged`).
  v = np.arange(8.0).reshape(2, 4)
  n = np.array([1, 3])
  for fn in (lambda v, n: v[:n], lambda v, n: np.sort(v[n:]),
             lambda v, n: nr.setitem(v, slice(None, n), v[:2])):
    with pytest.raises(errors.PerMemberError, match='differ') as info:
      nr.vectorize(fn, 2)(v, n)
    assert 'Pad' in str(info.value)
  np.testing.assert_array_equal(
      nr.vectorize(lambda v, n: np.sum(v[n:]), 2)(v, n), [6.0, 7.0])


def test_creation_of_per_member_size_names_the_function_and_says_pad():
  for func in (np.zeros, np.arange, np.eye):
    with pytest.raises(errors.PerMemberError, match=func.__name__) as info:
      nr.vectorize(lambda n, f=func: nr.call(f, n), 2)(np.array([2, 3]))
    assert 'Pad' in str(info.value)
  with pytest.raises(errors.PerMemberError, match='np.full'):
    nr.vectorize(lambda n: nr.call(np.full, (n, 2), 1.0), 2)(np.array([2, 3]))


def test_copyto_into_a_plain_array_refused():
  with pytest.raises(errors.PerMemberError, match='copyto'):
    nr.vectorize(lambda v: np.copyto(np.zeros(3), v), 2)(np.ones((2, 3)))


def test_per_member_size_refused_with_padding_hint():
  n = np.array([2, 3])
  for fn in (lambda n: np.arange(n), lambda n: np.zeros(n),
             lambda n: range(n), lambda n: np.ones(3)[n]):
    with pytest.raises((errors.PerMemberError, TypeError)) as info:
      nr.vectorize(fn, 2)(n)
    if isinstance(info.value, errors.PerMemberError):
      assert 'Pad' in str(info.value)


@pytest.mark.parametrize('convert', [bool, int, float, lambda x: x.item(),
                                     lambda x: x.tolist(), complex])
def test_python_scalar_of_member_refused(convert):
  with pytest.raises(errors.PerMemberError, match='each member') as info:
    nr.vectorize(convert, 2)(np.array([1.0, 2.0]))
  assert 'np.where' in str(info.value)


def test_out_argument_refused():
  with pytest.raises(errors.PerMemberError, match='out='):
    nr.vectorize(lambda v: np.add(v, 1, out=v), 2)(np.zeros((2, 3)))
  with pytest.raises(errors.PerMemberError, match='out='):
    nr.vectorize(lambda v: np.sum(v, out=np.zeros(())), 2)(np.zeros((2, 3)))


def test_errors_are_the_users_kind():
  assert issubclass(errors.PerMemberError, errors.AutoBatchError)


def test_out_of_bounds_index_raises_index_error():
  with pytest.raises(IndexError):
    nr.vectorize(lambda v, i: v[i], 2)(np.zeros((2, 3)), np.array([0, 3]))


def test_memory_attributes_refused():
  with pytest.raises(AttributeError, match='strides'):
    nr.vectorize(lambda m: m.strides, 2)(np.zeros((2, 3)))


def test_len_of_scalar_and_repr():
  with pytest.raises(TypeError, match='unsized'):
    nr.vectorize(len, 2)(np.zeros(2))
  x = nr.MemberArray(np.zeros((4, 3)))
  assert 'member shape (3,)' in repr(x) and 'batch of 4' in repr(x)
  assert nr.is_member(x) and not nr.is_member(np.zeros(3))


def test_plain_values_stay_plain():
  assert nr.setitem([1, 2], 0, 5) == [5, 2]
  a = np.zeros(3)
  b = nr.setitem(a, 1, 2.0)
  assert b[1] == 2.0 and a[1] == 0.0 and not nr.is_member(b)
  assert nr.getitem(a, 1) == 0.0
  assert nr.asarray([1, 2]).dtype == np.asarray([1, 2]).dtype


def test_batch_of_no_members():
  out = nr.vectorize(lambda v: (v.sum(), np.convolve(v, v), v[0]), 0)(
      np.zeros((0, 3)))
  assert [x.shape for x in out] == [(0,), (0, 5), (0,)]


# The property test: random chains of operations against the loop.

_UNARY = [np.exp, np.negative, np.abs, np.tanh, np.floor, np.square]
_BINARY = [np.add, np.subtract, np.multiply, np.maximum, np.minimum]
_REDUCE = [np.sum, np.max, np.min, np.mean, np.prod, np.argmax, np.cumsum,
           np.sort, np.any]


def _like(y, shape):
  """Member value `y` (shape (3, 4)) cut to `shape`."""
  size = int(np.prod(shape, dtype=int))
  return np.reshape(np.ravel(y)[:size], shape)


def _operation(data, shape):
  """One random step on a member value of `shape`, as (function of
  (x, i, y), shape after): x the value, i a per-member index in [0, 3), y a
  per-member (3, 4) array."""
  rank = len(shape)
  kinds = ['unary', 'binary', 'plain', 'where']
  if rank:
    kinds += ['reduce', 'index', 'setitem', 'reverse', 'dot']
  kind = data.draw(st.sampled_from(kinds))
  if kind == 'unary':
    f = data.draw(st.sampled_from(_UNARY))
    return (lambda x, i, y: f(x)), shape
  if kind == 'binary':
    f = data.draw(st.sampled_from(_BINARY))
    other = data.draw(st.sampled_from(['y', 'scalar', 'plain_row']))
    if other == 'plain_row':
      row = _PLAIN_M.reshape(-1)[:shape[-1] if rank else 4]
      return (lambda x, i, y: f(x, row)), shape if rank else row.shape
    operand = ((lambda y: _like(y, shape)) if other == 'y' else
               (lambda y: 0.5))
    if data.draw(st.booleans()):
      return (lambda x, i, y: f(operand(y), x)), shape
    return (lambda x, i, y: f(x, operand(y))), shape
  if kind == 'plain':
    return (lambda x, i, y: x * np.float64(1.5) + 1), shape
  if kind == 'where':
    return (lambda x, i, y: np.where(x > 0, x, _like(y, shape) - i)), shape
  if kind == 'dot':
    # A plain matrix, or the member's own y, on the right.
    k = shape[-1]
    if data.draw(st.booleans()):
      matrix = np.linspace(-1.0, 1.0, 2 * k).reshape(k, 2)
      return (lambda x, i, y: np.dot(x, matrix)), shape[:-1] + (2,)
    return (lambda x, i, y: x @ _like(y, (k, 1))), shape[:-1] + (1,)
  if kind == 'reduce':
    f = data.draw(st.sampled_from(_REDUCE))
    axis = data.draw(st.sampled_from([None, 0, -1]))
    if f in (np.cumsum, np.sort):
      after = (int(np.prod(shape)),) if axis is None else shape
      return (lambda x, i, y: f(x, axis=axis).astype(float)), after
    keep = data.draw(st.booleans()) and f not in (np.argmax, np.any)
    if keep:
      after = (1,) * rank if axis is None else tuple(
          1 if a == axis % rank else n for a, n in enumerate(shape))
    else:
      after = () if axis is None else tuple(
          n for a, n in enumerate(shape) if a != axis % rank)
    if f in (np.argmax, np.any):
      return (lambda x, i, y: f(x, axis=axis).astype(float)), after
    return (lambda x, i, y: f(x, axis=axis, keepdims=keep)), after
  if kind == 'index':
    axes = [a for a, n in enumerate(shape) if n >= 3]
    if not axes:
      return (lambda x, i, y: x[..., 0]), shape[:-1]
    axis = data.draw(st.sampled_from(axes))
    return (lambda x, i, y: x[(slice(None),) * axis + (i,)]), shape[
        :axis] + shape[axis + 1:]
  if kind == 'reverse':
    return (lambda x, i, y: x[..., ::-1]), shape
  # setitem at a per-member index with a per-member or plain value.
  value = data.draw(st.sampled_from(['y', 'scalar']))
  at = (lambda i: (i,)) if shape[0] >= 3 else (lambda i: (0,))
  def assign(x, i, y):
    v = y[0, 0] if value == 'y' else -2.0
    return nr.setitem(x, at(i), v)
  return assign, shape


@given(st.data())
def test_random_operation_chains_match_loop(data):
  _check_random_chain(data)


@pytest.mark.slow
@settings(max_examples=max(500, settings().max_examples))
@given(st.data())
def test_many_random_operation_chains_match_loop(data):
  _check_random_chain(data)


def _check_random_chain(data):
  """A random chain of operations, vectorized, equals the loop."""
  batch = data.draw(st.sampled_from([1, 2, 5]))
  shape = (3, 4)
  steps = []
  for _ in range(data.draw(st.integers(1, 5))):
    step, shape = _operation(data, shape)
    steps.append(step)
  def fn(x, i, y):
    for step in steps:
      x = step(x, i, y)
    return x
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
  args = [rng.normal(size=(batch, 3, 4)), rng.integers(0, 3, size=batch),
          rng.normal(size=(batch, 3, 4))]
  with np.errstate(all='ignore'):
    want = _looped(fn, args, batch)
    got = nr.vectorize(fn, batch)(*args)
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
