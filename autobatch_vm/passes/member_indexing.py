"""Indexing a batched value by a per-member index: `x[:, j]`, `x[j]`.

In a primitive, axis 0 of every batched value is the batch, and every
variable holds one value per member: a loop counter `j` is an array of
shape `[batch]`.  So `x[:, j]` is NumPy's outer indexing, every member's
row at every member's index (`[batch, batch]`), and `x[j]` gives member
`b` the row of member `j[b]`.  Batches of one, as type inference and a
dry run see them, look right, and the batched results can be silently
wrong (`x[:, j].sum(axis=-1)` keeps the batch shape).  A constant index
(`x[:, 0]`, `x[:, k]` with a closed-over `k`) is right; so is the gather
`x[np.arange(len(x)), j]`, which pairs each member's row with its index.

The frontend notes every subscript of a variable by an index that reads
variables (`note`, from `python.primitives.subscript_parts`).  Type
inference (`check`) evaluates the subscripted value and the index on
made-up inputs at batch sizes 2 and 3; where the value has the batch
axis and an element of the index is an integer array with the batch axis
(a per-member index) that is not that gather's `arange`, at position 0
(`x[j]`) or after a full slice or `...` (`x[:, j]`), it runs the whole
primitive on two made-up members together and on each alone, as a dry
run would.  A primitive whose results differ (deterministically) is
refused with a `TypeInferenceError` that names the subscript and says
what works; one that agrees is left alone (never refusing a correct
program, e.g. `np.diagonal(x[:, j])`).  Where the primitive fails on
made-up inputs, the subscript alone is compared the same way: where it
fails as written but runs with a constant index (TensorFlow refuses an
index tensor of shape `[batch]`), it is refused; where it differs, a
`MemberMixingWarning` says so.
"""

import contextlib
import sys

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.passes.made_up import MADE_UP
from autobatch_vm.passes.made_up import made_up

__all__ = ['check', 'note']

_ATTRIBUTE = 'member_subscripts'


def note(fn, subscripts):
  """Marks primitive `fn` for `check`.

  Args:
    fn: A primitive (a Python function) that the frontend made.
    subscripts: `python.primitives.subscript_parts` of it: one
      `(text, parts, index_inputs, value_text, element_texts)` per
      subscript of a variable by an index that reads variables.
  """
  if subscripts:
    setattr(fn, _ATTRIBUTE, tuple(subscripts))


def check(op, in_types, backend):
  """Raises if `op` indexes a batched value by a per-member index.

  See the module's docstring.  Nothing runs for a primitive without such
  a subscript; inside the user's `tf.function` the made-up inputs run
  eagerly (`_eagerly`).

  Args:
    op: The `PrimOp`.
    in_types: The type pattern of each of its inputs.
    backend: The backend of the call.

  Raises:
    TypeInferenceError: If a subscript gives members other members'
      values, or cannot run, where a per-member gather would.
  """
  subscripts = getattr(op.function, _ATTRIBUTE, ())
  if not subscripts:
    return
  for text, parts, index_inputs, value_text, element_texts in subscripts:
    # Inside the user's `tf.function` the made-up inputs run eagerly,
    # outside the graph being traced: their values are compared.
    with _eagerly(backend), backend.error_context(), np.errstate(
        all='ignore'):
      made = _Inputs(in_types, index_inputs, backend)
      form = _form(parts, made)
      if form is None:
        continue
      kind, position, axis = form
      verdict, cause = _primitive_verdict(op.function, made)
      if verdict is None:
        verdict, cause = _subscript_verdict(parts, made, position)
    if verdict in (None, 'right', 'unknown'):
      continue
    message, hint = _explain(text, kind, axis, value_text, element_texts,
                             position)
    if verdict == 'suspect':
      errors.MemberMixingWarning.warn(
          f'{message}; the primitive fails on made-up inputs, so whether '
          f'its result is each member\'s own could not be checked.  {hint}',
          op.loc)
      continue
    if verdict == 'fails':
      message += f' ({type(cause).__name__}: {cause})'
    raise errors.TypeInferenceError(message, loc=op.loc, hint=hint) from (
        cause if verdict == 'fails' else None)


def _eagerly(backend):
  """Where ops are being staged into a graph (the user's `tf.function`),
  `tf.init_scope()`: the made-up inputs run eagerly, outside it."""
  if not backend.in_graph():
    return contextlib.nullcontext()
  return sys.modules['tensorflow'].init_scope()


class _Inputs:
  """Made-up inputs of a primitive, per member.

  Member 0 is `made_up` of its kind; member 1 differs from it in every
  float, complex and integer element (floats `1.5 x + 0.25`, integers
  `+ 1`), except in the inputs an index reads (`index_inputs`), which
  stay the same (zeros, ones: valid indices); booleans stay the same.
  Weak (literal) inputs are arrays too, as at run time.
  """

  def __init__(self, in_types, index_inputs, backend):
    self.in_types = in_types
    self.index_inputs = frozenset(index_inputs)
    self.backend = backend

  def batch(self, kind, members):
    """The inputs for `members` (a list of 0s and 1s), stacked."""
    def leaf(i):
      def one(t):
        rows = [self._member(t, kind, m, i) for m in members]
        return self.backend.asarray(np.concatenate(rows))
      return one
    return [inst.pattern_map(leaf(i), t, inst.TensorType)
            for i, t in enumerate(self.in_types)]

  def _member(self, t, kind, member, i):
    x = made_up(t, kind, 1)
    if member == 0 or i in self.index_inputs or x.dtype.kind not in 'iufc':
      return x
    if x.dtype.kind in 'fc':
      return (x * 1.5 + 0.25).astype(x.dtype)
    return (x + 1).astype(x.dtype)


def _form(parts, made):
  """`(kind, position, axis)` of a subscript that indexes a batched value
  by a per-member index: kind `'rows'` (`x[j]`: position and axis 0) or
  `'outer'` (`x[:, j]`, `x[..., j]`: the position of the first such
  element of the index, and the axis of the value it indexes); None
  where the subscript is not one (or cannot be evaluated)."""
  for kind in MADE_UP:
    try:
      two = parts(*made.batch(kind, [0, 1]))
      three = parts(*made.batch(kind, [0, 1, 0]))
    except Exception:  # pylint: disable=broad-except
      continue
    break
  else:
    return None
  (v2, k2), (v3, k3) = two, three
  e2, e3 = _elements(k2), _elements(k3)
  if (len(e2) != len(e3) or not _batched(v2, 2) or not _batched(v3, 3)):
    return None
  per_member = [p for p in range(len(e2)) if _member_index(e2[p], 2)
                and _member_index(e3[p], 3)]
  if not per_member:
    return None
  if per_member[0] == 0:
    if _is_arange(e2[0], 2) and _is_arange(e3[0], 3):
      return None   # x[np.arange(len(x)), j]: each member's own row
    return 'rows', 0, 0
  first, p = e2[0], per_member[0]
  if first is Ellipsis or (isinstance(first, slice) and
                           first == slice(None)):
    if any(e is Ellipsis for e in e2[:p]):   # an axis from the end
      return 'outer', p, -sum(e is not None for e in e2[p:])
    return 'outer', p, sum(e is not None for e in e2[:p])
  return None


def _elements(key):
  return key if isinstance(key, tuple) else (key,)


def _shape(x):
  shape = getattr(x, 'shape', None)
  if shape is None:
    return None
  try:
    return tuple(int(d) for d in shape)
  except (TypeError, ValueError):
    return None


def _batched(x, batch):
  shape = _shape(x)
  return bool(shape) and shape[0] == batch


def _member_index(x, batch):
  """Whether `x` is an integer array with the batch axis."""
  if not _batched(x, batch):
    return False
  dtype = getattr(x, 'dtype', None)
  try:
    return np.dtype(getattr(dtype, 'as_numpy_dtype', dtype)).kind in 'iu'
  except TypeError:
    return False


def _is_arange(x, batch):
  """Whether index `x` is each member's own position (`np.arange(len(x))`,
  possibly with axes after the first)."""
  x = np.asarray(x)
  rows = np.arange(batch).reshape((batch,) + (1,) * (x.ndim - 1))
  return bool(np.all(x == rows))


def _primitive_verdict(fn, made):
  """Whether `fn` on two made-up members together gives what it gives
  each alone: `'right'`, `'wrong'`, `'unknown'` where it ran but that
  cannot be told (a result without a batch axis; two runs on the same
  inputs that differ: it may draw at random), None where it raised on
  every kind of made-up input; and None (no exception)."""
  for kind in MADE_UP:
    try:
      together = fn(*made.batch(kind, [0, 1]))
      alone = [fn(*made.batch(kind, [m])) for m in (0, 1)]
      agree = _agree(together, alone)
      if agree is False and _agree(fn(*made.batch(kind, [0, 1])),
                                   None, together) is not True:
        agree = None
    except Exception:  # pylint: disable=broad-except
      continue
    if agree is None:
      return 'unknown', None
    return ('right' if agree else 'wrong'), None
  return None, None


def _subscript_verdict(parts, made, position):
  """Like `_primitive_verdict`, for the subscript alone: `'right'`,
  `'suspect'` (it differs), `'fails'` with the exception (it raises as
  written, but not with 0 for the per-member index), or None."""
  for kind in MADE_UP:
    try:
      together = parts(*made.batch(kind, [0, 1]))
      alone = [parts(*made.batch(kind, [m])) for m in (0, 1)]
    except Exception:  # pylint: disable=broad-except
      continue
    try:
      results = [v[k] for v, k in [together] + alone]
    except Exception as e:  # pylint: disable=broad-except
      value, key = alone[0]
      constant = list(_elements(key))
      constant[position] = 0
      try:
        value[tuple(constant) if isinstance(key, tuple) else 0]
      except Exception:  # pylint: disable=broad-except
        return None, None
      return 'fails', e
    agree = _agree(results[0], results[1:])
    if agree is None:
      return None, None
    return ('right' if agree else 'suspect'), None
  return None, None


def _agree(together, alone, same_as=None):
  """Whether result `together` (two members) is the results `alone` (one
  member each) stacked, or (`same_as`) equals that result; None where a
  leaf has no batch axis to compare."""
  flat = inst.pattern_flatten(together)
  if same_as is not None:
    others = [inst.pattern_flatten(same_as)]
  else:
    others = [inst.pattern_flatten(a) for a in alone]
  if any(len(o) != len(flat) for o in others):
    return False
  for i, leaf in enumerate(flat):
    got = _array(leaf)
    parts = [_array(o[i]) for o in others]
    if got is None or any(p is None for p in parts):
      return None
    want = parts[0] if same_as is not None else np.concatenate(parts)
    if got.shape != want.shape or got.dtype != want.dtype:
      return False
    if not _close(got, want):
      return False
  return True


def _array(x):
  """`x` as a NumPy array with a leading (batch) axis, or None."""
  if not hasattr(x, 'shape'):
    return None
  try:
    x = np.asarray(x)
  except Exception:  # pylint: disable=broad-except
    return None
  if x.ndim == 0 or x.dtype.kind not in 'biufc':
    return None
  return x


def _close(a, b):
  if a.dtype.kind in 'fc':
    tol = max(1e-6, 1000 * float(np.finfo(a.dtype).eps))
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0,
                                  where=np.isfinite(b))))
    return bool(np.all((np.abs(a - b) <= tol * scale) |
                       (np.isnan(a) & np.isnan(b)) | (a == b)))
  return bool(np.array_equal(a, b))


def _explain(text, kind, axis, value_text, element_texts, position):
  """The message and hint for subscript `text`, whose element `position`
  is a per-member index into axis `axis` of the value."""
  x = value_text
  j = (element_texts[position] if position < len(element_texts)
       else 'the index')
  if kind == 'rows':
    message = (
        f'`{text}` indexes the batch axis of `{x}` with `{j}`, which holds '
        'one value per member: member b gets the value of member '
        f'{j}[b], not its own')
    hint = (
        f'Axis 0 of every batched value is the batch, and `{j}` is an '
        'array of one index per member.  Index a member\'s own axes, '
        f'after the batch: {x}[:, i] with an i that is the same in every '
        f'member (a literal or a closed-over constant); with a per-member '
        f'index, {_gather(x, j, 1)}.')
    return message, hint
  message = (
      f'`{text}` indexes `{x}` with `{j}`, which holds one index per '
      'member: batched, that reads every member\'s row at every member\'s '
      'index (one more axis, of the batch size), not each member\'s own '
      'row at its own index')
  hint = (
      f'Axis 0 of every batched value is the batch, and `{j}` is an array '
      f'of one index per member.  `{text}` is right where the index is the '
      'same in every member (a literal or a closed-over constant); with a '
      f'per-member index, {_gather(x, j, axis)}.')
  return message, hint


def _gather(x, j, axis):
  """What gathers `x[b, ..., j[b], ...]` (`j` into axis `axis`) per
  member, in words."""
  if axis == 1:
    return (f'use a per-member gather: np.take_along_axis({x}, {j}[:, None], '
            f'axis=1)[:, 0] or {x}[np.arange(len({x})), {j}] on NumPy '
            f'(np.take_along_axis({x}, {j}, axis=1) where {j} holds k indices '
            f'per member), tf.gather({x}, {j}, batch_dims=1) on TensorFlow')
  return (f'use a per-member gather: np.take_along_axis({x}, {j} with an '
          f'axis of 1 for each other axis of {x}, axis={axis}) on NumPy, '
          f'tf.gather({x}, {j}, axis={axis}, batch_dims=1) on TensorFlow')
