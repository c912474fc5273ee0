"""Batching rules of linear algebra: products, `einsum`, `np.linalg`.

Products (`dot`, `inner`, `outer`, `vdot`, `tensordot`) are one `einsum`
each, written for one member; `einsum` gives each per-member operand a
batch letter.  `matmul` (the `@` operator) stacks vectors as rows or
columns and aligns the members' loop axes.  The routines of `np.linalg`
broadcast over leading axes, so the batch axis is one of them; `solve`
and `norm` map their vector and axis conventions.
"""

import string

import numpy as np

from autobatch_vm.per_member import numpy_array as core
from autobatch_vm.per_member.numpy_array import MemberArray

__all__ = []

def _matrix(x, left, loop):
  """A `matmul` operand as a batched stack of matrices with `loop` loop axes
  per member: a vector is a row (`left`) or a column matrix."""
  vector = core.member_rank(x) == 1
  if not isinstance(x, MemberArray):
    x = np.asarray(x)
    return (x[None, :] if left else x[:, None]) if vector else x
  b = x.batched
  if vector:
    b = b[:, None, :] if left else b[:, :, None]
  return b.reshape(b.shape[:1] + (1,) * (loop + 3 - b.ndim) + b.shape[1:])


def _matmul(a, b, **kwargs):
  na, nb = core.member_rank(a), core.member_rank(b)
  if na == 0 or nb == 0:
    raise ValueError('matmul: Input operand does not have enough dimensions '
                     '(a per-member scalar; use * for a product)')
  if (type(b) is np.ndarray and b.ndim == 2) and type(a) is MemberArray:
    # A member's vector or stack of matrices times one plain matrix: NumPy
    # broadcasts the batch axis (a member's vector is a row of the batch).
    return MemberArray(np.matmul(a.batched, b, **kwargs))
  if (type(a) is np.ndarray and a.ndim == 2 and type(b) is MemberArray
      and nb == 1 and not kwargs):
    # One plain matrix times a member's vector: the members' vectors as
    # the rows of one product (a broadcast matmul would make one matrix
    # product per member).
    return MemberArray(np.matmul(b.batched, a.T))
  loop = max(na, nb, 2) - 2
  a, b = _matrix(a, True, loop), _matrix(b, False, loop)
  result = np.matmul(a, b, **kwargs)
  if nb == 1:
    result = result[..., 0]
  if na == 1:
    result = result[..., 0, :] if nb > 1 else result[..., 0]
  return core.wrap(result)


# Linear algebra.

def _einsum(subscripts, *operands, **kwargs):
  """One member's `np.einsum(subscripts, *operands)`: per-member operands
  get a batch letter."""
  spec = subscripts.replace(' ', '')
  inputs, _, output = spec.partition('->')
  inputs = inputs.split(',')
  if '->' not in spec:
    letters = [c for c in ''.join(inputs) if c.isalpha()]
    output = ('...' if '...' in spec else '') + ''.join(
        sorted(c for c in set(letters) if letters.count(c) == 1))
  letter = next(c for c in string.ascii_letters if c not in spec)
  inputs = [letter + s if isinstance(x, MemberArray) else s
            for s, x in zip(inputs, operands)]
  operands = [x.batched if isinstance(x, MemberArray) else x
              for x in operands]
  return core.wrap(np.einsum(f'{",".join(inputs)}->{letter}{output}', *operands,
                         **kwargs))


@core.rule(np.einsum)
def _einsum_rule(func, subscripts, *operands, out=None, **kwargs):
  del func
  core.refuse_out('np.einsum', out)
  if not isinstance(subscripts, str):
    return core.NO_RULE
  return _einsum(subscripts, *operands, **kwargs)


def _letters(count, start=0):
  return string.ascii_lowercase[start:start + count]


@core.rule(np.dot)
def _dot(func, a, b, out=None):
  del func
  core.refuse_out('np.dot', out)
  na, nb = core.member_rank(a), core.member_rank(b)
  if na == 0 or nb == 0:
    return np.multiply(a, b)
  sa = _letters(na)
  if nb == 1:
    return _einsum(f'{sa},{sa[-1]}->{sa[:-1]}', a, b)
  sb = _letters(nb, na)
  sb = sb[:-2] + sa[-1] + sb[-1]
  return _einsum(f'{sa},{sb}->{sa[:-1]}{sb[:-2]}{sb[-1]}', a, b)


@core.rule(np.inner)
def _inner(func, a, b):
  del func
  na, nb = core.member_rank(a), core.member_rank(b)
  if na == 0 or nb == 0:
    return np.multiply(a, b)
  sa, sb = _letters(na), _letters(nb, na)
  sb = sb[:-1] + sa[-1]
  return _einsum(f'{sa},{sb}->{sa[:-1]}{sb[:-1]}', a, b)


@core.rule(np.outer)
def _outer_rule(func, a, b, out=None):
  del func
  core.refuse_out('np.outer', out)
  return _einsum('i,j->ij', np.ravel(a), np.ravel(b))


@core.rule(np.vdot)
def _vdot(func, a, b):
  del func
  return _einsum('i,i->', np.ravel(np.conj(a)), np.ravel(b))


@core.rule(np.tensordot)
def _tensordot(func, a, b, axes=2):
  del func
  na, nb = core.member_rank(a), core.member_rank(b)
  if isinstance(axes, (int, np.integer)):
    axes_a, axes_b = list(range(na - axes, na)), list(range(axes))
  else:
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else axes_a
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else axes_b
  axes_a = [x % na for x in axes_a]
  axes_b = [x % nb for x in axes_b]
  sa, sb = list(_letters(na)), list(_letters(nb, na))
  for x, y in zip(axes_a, axes_b):
    sb[y] = sa[x]
  out = ([c for i, c in enumerate(sa) if i not in axes_a] +
         [c for i, c in enumerate(sb) if i not in axes_b])
  return _einsum(f'{"".join(sa)},{"".join(sb)}->{"".join(out)}', a, b)


@core.rule(np.matmul)
def _matmul_rule(func, x1, x2, out=None, **kwargs):
  del func
  core.refuse_out('np.matmul', out)
  return _matmul(x1, x2, **kwargs)


@core.rule(np.trace, np.diagonal)
def _trace(func, a, offset=0, axis1=0, axis2=1, *args, **kwargs):
  a = core.as_member(a)
  if func is np.trace:
    core.refuse_out('np.trace', kwargs.pop('out', None))
  return core.wrap(func(a.batched, offset, core.axis_of(axis1, a.ndim),
                    core.axis_of(axis2, a.ndim), *args, **kwargs))


@core.rule(np.diag)
def _diag(func, v, k=0):
  del func
  v = core.as_member(v)
  b = v.batched
  if v.ndim == 2:
    return MemberArray(np.diagonal(b, k, 1, 2).copy())
  if v.ndim != 1:
    raise ValueError('Input must be 1- or 2-d.')
  n = v.shape[0]
  size = n + abs(k)
  out = np.zeros((b.shape[0], size, size), b.dtype)
  steps = np.arange(n)
  out[:, steps + max(-k, 0), steps + max(k, 0)] = b
  return MemberArray(out)


@core.rule(np.tril, np.triu)
def _tri(func, m, k=0):
  m = core.as_member(m)
  if m.ndim < 2:
    return core.NO_RULE
  return core.wrap(func(m.batched, k))


@core.rule(*core.numpy_functions('linalg.inv', 'linalg.det', 'linalg.slogdet', 'linalg.cholesky',
            'linalg.eigh', 'linalg.eigvalsh', 'linalg.eig', 'linalg.eigvals',
            'linalg.qr', 'linalg.svd', 'linalg.pinv', 'linalg.matrix_power',
            'linalg.matrix_rank', 'linalg.cond', 'linalg.svdvals'))
def _linalg_stacked(func, a, *args, **kwargs):
  # These broadcast over leading axes: the batch axis is one of them.
  if not isinstance(a, MemberArray) or any(
      isinstance(v, MemberArray) for v in list(args) + list(kwargs.values())):
    return core.NO_RULE
  return core.wrap(func(a.batched, *args, **kwargs))


@core.rule(np.linalg.solve)
def _solve(func, a, b):
  na, nb = core.member_rank(a), core.member_rank(b)
  if na < 2:
    raise np.linalg.LinAlgError(f'{na}-dimensional array given. Array must '
                                'be at least two-dimensional')
  vector = nb == 1
  rank = max(na, nb + vector)
  a, b = core.ranked(a, rank), core.ranked(b, rank - vector)
  x = func(a, b[..., None] if vector else b)
  return core.wrap(x[..., 0] if vector else x)


@core.rule(np.linalg.norm)
def _norm(func, x, ord=None, axis=None, keepdims=False):  # pylint: disable=redefined-builtin
  x = core.as_member(x)
  ndim = x.ndim
  if axis is None:
    if ord is None and ndim != 2:
      result = func(core.flat(x), None, 1)
      if keepdims:
        result = result.reshape((-1,) + (1,) * ndim)
      return core.wrap(result)
    axis = tuple(range(ndim)) if ndim == 2 else 0
  batched_axis = core.axes_of(axis, ndim)
  return core.wrap(func(x.batched, ord, batched_axis, keepdims))
