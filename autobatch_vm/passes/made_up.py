"""Made-up inputs: what type inference runs a primitive on, on NumPy.

NumPy has no symbolic tracer, so type inference (`type_inference`) runs a
primitive on made-up inputs of its argument types to find its result
type, each kind in `MADE_UP` in turn until one does not raise, and
explains a primitive that fails on all of them (`_made_up_error`).
"""

import re

import numpy as np

from autobatch_vm import errors
from autobatch_vm import ops
from autobatch_vm.ir import instructions as inst

__all__ = ['MADE_UP', 'made_up', 'ones_arguments']


# The made-up inputs a primitive runs on to find its result type, in the
# order tried: each kind where the ones before it raised.
MADE_UP = ('zeros', 'ones', 'eye', 'uniform', 'count', 'count_down')


# Kind 'count_down' starts here: the count from the other end, for bounds
# read in the other order (`v[lo:n]` where `n` comes first).
_COUNT_DOWN = 4


def made_up(tensor_type, kind, batch=1, position=0):
  """A made-up NumPy array `[batch, *shape]` of the type's dtype.

  Zeros; ones; identity matrices in the last two axes where they are
  square (else ones); values in (0.25, 0.75), fixed, different per
  element, for floats and complex numbers (ones for integers, True for
  booleans); or those, with each integer input the next count (`position`
  + 1: `lo` 2 and `hi` 3 in `f(v, lo, hi)`, whose `v[lo:hi]` then has an
  item, where equal bounds make every slice empty and its maximum fail)
  and `position` added to each float input (`(v - lo) / (hi - lo)` then
  divides by no zero); or the count from the other end, 4 down to 1
  (`v[lo:n]` where `n` comes first in the primitive's inputs).
  Together they are valid inputs for the usual restricted domains:
  logarithms, roots, arc-cosines, divisions, solves, inverses, Cholesky
  factors and the extremes of slices.

  Args:
    tensor_type: The `TensorType` of one member's value.
    kind: One of `MADE_UP`.
    batch: The leading (batch) dimension.
    position: The input's position among the primitive's inputs (for
      kind 'count').

  Returns:
    The array.
  """
  shape = (batch,) + tuple(tensor_type.shape)
  dtype = np.dtype(tensor_type.dtype)
  if kind == 'zeros':
    return np.zeros(shape, dtype)
  if kind == 'eye' and len(shape) >= 3 and shape[-1] == shape[-2]:
    return np.broadcast_to(np.eye(shape[-1], dtype=dtype), shape).copy()
  if kind == 'count' and dtype.kind in 'iu':
    return np.full(shape, position + 1, dtype)
  if kind == 'count_down' and dtype.kind in 'iu':
    return np.full(shape, max(_COUNT_DOWN - position, 1), dtype)
  if kind in ('uniform', 'count', 'count_down') and dtype.kind in 'fc':
    values = np.random.default_rng(0).uniform(0.25, 0.75, size=shape)
    if kind == 'count':   # inputs that differ (`(v - lo) / (hi - lo)`)
      values = values + position
    elif kind == 'count_down':
      values = values + max(_COUNT_DOWN - position, 1)
    return values.astype(dtype)
  return np.ones(shape, dtype)


def ones_arguments(in_types, batch=1):
  """A primitive's arguments of `in_types`, as NumPy arrays of ones.

  At batch size `batch` (`made_up` kind 'ones'), each weak scalar the
  Python number 1: how NumPy reads the primitive, where the backend traces
  it symbolically (TensorFlow).

  Args:
    in_types: The type pattern of each input.
    batch: The leading (batch) dimension.

  Returns:
    The list of arguments.
  """
  def leaf(t):
    if _is_literal(t):
      return t.dtype.type(1).item()
    return made_up(t, 'ones', batch)
  return [inst.pattern_map(leaf, t, inst.TensorType) for t in in_types]


def _is_literal(t):
  """Whether leaf type `t` is a weak scalar (a Python literal): an input
  that a primitive gets as a Python scalar, not as a made-up array."""
  return t.weak and not t.shape


def _leaves(in_types):
  """The `TensorType` leaves of a primitive's input types, in order."""
  return [leaf for t in in_types
          for leaf in inst.pattern_flatten(t, inst.TensorType)]


_CODE_ERRORS = (TypeError, IndexError, AttributeError)


class _FailedOnEveryKind(Exception):
  """A primitive raised on every kind of made-up input (`MADE_UP`).

  Attributes:
    errors: The exceptions, one per kind, in `MADE_UP`'s order.
    first: The first of them.
  """

  def __init__(self, failures):
    super().__init__(str(failures[0]))
    self.errors = failures
    self.first = failures[0]


def _made_up_error(op, in_types, failure):
  """The `PrimitiveError` for a primitive that failed on every kind of
  made-up input: the inputs' types, and whether the values can be the
  cause.  A type or index error on every kind says that they are not:
  such errors come from the code (`float()` of an array, indexing a
  Python scalar), where a domain error (a singular matrix, a value a
  helper refuses) is a `ValueError`, `LinAlgError` or the like.  (Their
  messages may differ only in the names of the made-up tensors.)"""
  e = failure.first
  same = isinstance(e, _CODE_ERRORS) and all(
      type(x) is type(e) for x in failure.errors)
  inputs = ', '.join(f'{_shown(v)}: {inst.type_str(t)}'
                     for v, t in zip(op.vars_in, in_types))
  empty = [_shown(v) for v, t in zip(op.vars_in, in_types)
           if any(0 in leaf.shape
                  for leaf in inst.pattern_flatten(t, inst.TensorType))]
  symbolic = all(isinstance(x, NotImplementedError) and
                 'symbolic' in str(x) and 'numpy' in str(x)
                 for x in failure.errors)
  if empty and isinstance(e, IndexError):
    names = ' and '.join(v[1:-1] if v[0] == '<' else
                         v if v == 'a temporary' else f'`{v}`' for v in empty)
    hint = (f'{names[0].upper() + names[1:]} had no elements when typed: '
            'its size follows the member\'s data (v[:n] or v[k:] with a per-member n '
            'or k, v[v > 0], np.arange(n)), and type inference ran on '
            'made-up values (n = 0).  ' + errors.PAD_HINT)
  elif isinstance(e, (ops.InPlaceCastError, ops.InPlaceShapeError)):
    hint = ('An augmented assignment writes into the array, as NumPy\'s '
            'does, so the array keeps its dtype and shape: cast what you '
            'add (x += v.astype(x.dtype)), or make a new array of the '
            'result\'s dtype (x = x + v).')
  elif symbolic:
    hint = ('Inside tf.function (or XLA) primitives get symbolic tensors, '
            'which a NumPy function that TensorFlow\'s NumPy API '
            '(tf.experimental.numpy) lacks cannot take: use TensorFlow ops '
            '(operators, tf.math, tf.gather, ...), or call the batched '
            'function eagerly.')
  elif not same:
    hint = ('To find its result type, a primitive runs once on made-up '
            'inputs of batch size 1 (zeros, ones, identity matrices, '
            'values in (0.25, 0.75), then integers counting up and down) '
            'and failed '
            'on each.  Declare the result with type_inference= so that it '
            'does not run, or guard the domain (e.g. np.maximum(x, tiny)).')
  elif op.per_member:
    hint = ('It fails the same way on every made-up input (zeros, ones, '
            'identity matrices, values in (0.25, 0.75)), so the values are '
            'not the likely cause: the code is.  This function is written '
            'for one member (per_member=True): its values have no batch '
            'axis.  On TensorFlow write TensorFlow ops for one example '
            '(tf.gather, tf.reduce_sum, tf.linalg.*): NumPy functions '
            'cannot take the symbolic tensors pfor traces with.  '
            'dry_run=True runs each member alone, as plain Python, to '
            'debug it.')
  else:
    hint = ('It fails the same way on every made-up input (zeros, ones, '
            'identity matrices, values in (0.25, 0.75)), so the values are '
            'not the likely cause: the code is.  A primitive runs on whole '
            'batches: each input has the batch as axis 0, a number written '
            'in the call stays a Python scalar, and a tuple or list '
            'argument is structure.  Python\'s float(), int(), round(), '
            'math.* and min()/max() need one value: use NumPy on arrays '
            '(np.sqrt, np.minimum, x.astype), or write the function for '
            'one member (ctx.batch(per_member=True)), where they take '
            'that member\'s numbers.  dry_run=True runs each member '
            'alone, as plain Python, to debug it.')
  per_member = f' (per member: {inputs})' if inputs else ''
  text = _GENERATED.sub(lambda m: _GENERATED_NAMES[m.group(1)], op.text)
  return errors.PrimitiveError(
      f'{type(e).__name__} while inferring the type of `{text}`'
      f'{per_member}: {e}', loc=op.loc, hint=hint)


# Names of the frontend's generated code (`python.to_ir`): the sequence a
# `for` loop iterates and its counter, shown as what they stand for.
_GENERATED = re.compile(r'\b__ab\d*_(seq|it|table)\d+\b')
_GENERATED_NAMES = {'seq': '<the for loop\'s sequence>',
                    'it': '<the for loop\'s counter>',
                    'table': '<the for loop\'s table>'}


def _shown(var):
  """A variable's name as an error shows it: a temporary's and the
  generated code's described."""
  if var.startswith('%'):
    return 'a temporary'
  return _GENERATED.sub(lambda m: _GENERATED_NAMES[m.group(1)], var)
