"""Primitives that mix batch members: a member's result from others' values.

Axis 0 of every input of a primitive is the batch, so a primitive can
compute one member's result from the other members' values without
failing: a reduction over axis 0 (`v - v.sum()`) gives every member the
batch's value, and `len(x)` counts the members.  Type inference
(`type_inference`) runs primitives on batches of one, where such a
primitive looks right, as it does in a dry run; so it also runs each user
primitive with batched inputs on two made-up members and refuses one where
either member's result follows the other member's values
(`check_members_apart`), or a Python integer that changes with the batch
size (`check_batch_independent`).
"""

import contextlib
import re

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm.passes import randomness
from autobatch_vm.passes.made_up import _is_literal
from autobatch_vm.passes.made_up import _leaves
from autobatch_vm.passes.made_up import MADE_UP
from autobatch_vm.passes.made_up import made_up
from autobatch_vm.passes.made_up import ones_arguments

__all__ = ['check_batch_independent', 'check_broadcasting',
           'check_members_apart', 'check_rows_uncounted', 'shares_one_row',
           'unchecked_inputs']


def check_batch_independent(op, in_types, value, run_at):
  """Raises if a Python integer that `op` computes counts the members.

  That is one it computes from batched inputs that changes with the batch
  size.  Such a result (`len(x)`, `x.shape[0]`, `x.size`) is taken for a
  literal, which the VM broadcasts: it would be the batch size in every
  member at run time, silently, and 1 in a dry run.  A per-member count
  (`x.shape[-1]`) stays the same at batch size 2.

  Args:
    op: The `PrimOp`, whose inputs are batched.
    in_types: The type pattern of each of its inputs.
    value: Its result at batch size 1.
    run_at: A callable that takes a batch size and returns `op`'s result
      on made-up inputs of that batch size (or raises).

  Raises:
    TypeInferenceError: If such an integer differs at batch size 2.
  """
  ints = [v for v in inst.pattern_flatten(value) if type(v) is int]
  if all(_is_literal(t) for t in _leaves(in_types)):
    return
  if not ints:
    if _COUNTS_ROWS.search(op.text or ''):
      _check_rows_independent(op, in_types, value, run_at)
    return
  try:
    again = run_at(2)
  except Exception:  # pylint: disable=broad-except
    return   # not run at batch size 2: nothing to compare
  twice = [v for v in inst.pattern_flatten(again) if type(v) is int]
  if len(twice) != len(ints) or twice == ints:
    return
  # A count follows the batch size every time; a number that differs
  # between two runs at one size (a random draw, a counter) does not.
  try:
    ints_again = [v for v in inst.pattern_flatten(run_at(1))
                  if type(v) is int]
    twice_again = [v for v in inst.pattern_flatten(run_at(2))
                   if type(v) is int]
  except Exception:  # pylint: disable=broad-except
    return
  if ints_again != ints or twice_again != twice:
    return
  one, two = ints[0], twice[0]
  if len(ints) > 1:
    one, two = tuple(ints), tuple(twice)
  message = (f'`{op.text}` gives {one} at batch size 1 and {two} at batch '
             'size 2: a Python number that counts the members, not one '
             "member's value (at run time every member would get the batch "
             'size)')
  hint = ('Axis 0 of every batched value is the batch: len(x), x.shape[0] '
          'and x.size count members.  For a per-member length use '
          'x.shape[-1] (or x.shape[1:]); reduce with axis=-1.')
  drawn, generators = randomness.python_randomness(op.function)
  if drawn:
    pin = randomness.RngPin(generators)

    def pinned(batch):
      pin.reset()
      return [v for v in inst.pattern_flatten(run_at(batch))
              if type(v) is int]
    try:
      if pinned(1) == pinned(2):
        return   # the same draws at both sizes: the same number
    except Exception:  # pylint: disable=broad-except
      return
    finally:
      pin.restore()
    errors.MemberMixingWarning.warn(
        f'{message}; it draws at random, so this may be chance.  {hint}',
        op.loc)
    return
  raise errors.TypeInferenceError(message, loc=op.loc, hint=hint)


# What counts a batch's rows in a batch-aware primitive's text.
_COUNTS_ROWS = re.compile(r'\blen\(|\.shape\[0\]|\.size\b|\bnp\.size\(|'
                          r'\bshape\(')


def _first_rows(value):
  """The first row of each array leaf of `value` (a scalar leaf, a
  Python number for the batch, as it is)."""
  rows = []
  for leaf in inst.pattern_flatten(value):
    a = np.asarray(getattr(leaf, 'numpy', lambda: leaf)())
    if a.dtype == object:
      raise TypeError('not a value')   # a symbolic tensor
    rows.append(a[0] if a.ndim else a)
  return rows


def _on_numpy_ones(op, in_types):
  """`batch -> op`'s result on NumPy arrays of ones of `in_types`
  (`made_up.ones_arguments`): what a symbolic trace cannot show."""
  return lambda batch: op.function(*ones_arguments(in_types, batch))


def _check_rows_independent(op, in_types, value, run_at):
  """Raises where `op`'s array result, whose code counts rows (`s +
  len(x)`), changes in the first member between batch sizes 1 and 2 on
  the same made-up values per member (each run twice, so a random draw
  is not taken for it): every member would get the batch size at run
  time, silently, and 1 in a dry run.  On NumPy arrays of ones where
  the code takes them, else by `run_at`."""
  del value
  # Ones (zeros would hide `x.sum(axis=-1) / len(x)`), on NumPy arrays;
  # on the backend's made-up values where the code takes no NumPy array.
  for run in (_on_numpy_ones(op, in_types), run_at):
    if run is None:
      return
    try:
      with np.errstate(all='ignore'):
        one, two = _first_rows(run(1)), _first_rows(run(2))
        one_again, two_again = _first_rows(run(1)), _first_rows(run(2))
      break
    except Exception:  # pylint: disable=broad-except
      continue
  else:
    return
  def same(a, b):
    return a.shape == b.shape and bool(np.all(
        (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind in 'fc'
        else a == b))
  if len(one) != len(two) or not all(
      same(a, b) for a, b in zip(one, one_again)) or not all(
          same(a, b) for a, b in zip(two, two_again)):
    return
  if all(same(a, b) for a, b in zip(one, two)):
    return
  raise errors.TypeInferenceError(
      f'`{op.text}` gives the first member another value at batch size 2 '
      'than at batch size 1 on the same values: it counts the members '
      '(len(x), x.shape[0] or x.size of a batched value is the batch '
      'size, every member would get it at run time)', loc=op.loc,
      hint='Axis 0 of every batched value is the batch: len(x), '
      'x.shape[0] and x.size count members.  For a per-member length use '
      'x.shape[-1] (or x.shape[1:]); reduce with axis=-1.')


def check_rows_uncounted(op, in_types):
  """Raises where batch-aware `op`, typed on Python numbers, counts rows.

  That is `_check_rows_independent` of an `op` typed on Python numbers
  (weak inputs: `s + len(x)` of a counter `s`), which the checks of its
  result's values do not reach: on NumPy arrays of ones.

  Args:
    op: The `PrimOp`.
    in_types: The type pattern of each of its inputs.

  Raises:
    TypeInferenceError: If `op`'s code counts the batch's rows.
  """
  if _COUNTS_ROWS.search(op.text or '') and not all(
      _is_literal(t) for t in _leaves(in_types)):
    _check_rows_independent(op, in_types, None, None)


def check_members_apart(op, in_types, backend):
  """Raises if one member's result of `op` reads another member's values.

  Axis 0 of a primitive's inputs is the batch, so a reduction over it
  (`v - v.sum()`) gives each member the batch's value: silently wrong
  results, and batch-of-one dry runs and inference see nothing.  At
  batch size 2 neither member's result may change when only the other
  member's inputs change (`_mixes`).  Floating-point rows are
  compared with a tolerance.  Skipped for the compiler's own primitives
  (copies, loop counters), primitives of literals only, and in a graph,
  where nothing runs on values.

  A refusal must never stop a correct program, and a primitive that
  draws at random can differ between two runs by chance.  So before it
  refuses, the check asks whether the primitive draws (`randomness`):
  - ops the backend sees draw at random or keep state (TensorFlow's
    random ops, stateless ones with seeds as data included): nothing is
    said, since those draws cannot be held fixed;
  - its Python code draws (NumPy's or Python's generators): the
    comparison runs again with every generator found pinned to one
    state, and a difference that remains is reported as a
    `MemberMixingWarning`, since a generator the walk did not find could
    still explain it;
  - the backend cannot see its ops (a TensorFlow primitive that runs
    Python on values): a `MemberMixingWarning`;
  - none of these: `TypeInferenceError`.

  Args:
    op: The `PrimOp`, whose inputs are batched.
    in_types: The type pattern of each of its inputs.
    backend: The backend that runs it (eagerly).

  Raises:
    TypeInferenceError: If the first member's result follows the second
      member's values, and the primitive draws nothing at random.
  """
  if _unchecked(op, in_types, backend):
    return
  with backend.error_context(), np.errstate(all='ignore'):
    _check_runs_on_two(op, in_types, backend)
    kind = _mixes(op, in_types, backend)
    if kind is None:
      return
    drawn, generators = randomness.python_randomness(op.function)
    ops_draw = backend.draws_at_random(
        op.function, _member_pair(in_types, kind, None, backend))
    if ops_draw:
      return
    if drawn:
      pin = randomness.RngPin(generators)
      try:
        kind = _mixes(op, in_types, backend, pin)
      finally:
        pin.restore()
      if kind is None:
        return
  message = (f'`{op.text}` mixes batch members: run on two members, '
             "one member's result changes when only the other one's values "
             'change')
  if drawn or ops_draw is None:
    why = ('it draws at random' if drawn else
           'its TensorFlow ops could not be traced to be checked')
    errors.MemberMixingWarning.warn(
        f'{message}; {why}, so this may be chance.  {_MIXING_HINT}', op.loc)
    return
  raise errors.TypeInferenceError(message, loc=op.loc, hint=_MIXING_HINT)


def shares_one_row(op, in_types, backend):
  """Whether batch-aware `op`'s result is one row that every member shares.

  That is a result with a leaf of one row at batch size 2 (where each
  member would have a row of its own) that neither member's values
  change: `np.arange(x.shape[-1])[None, :]`, `W[None]` of a constant
  `W`, `np.zeros((1, x.shape[-1]))`.  NumPy's broadcasting lines such a
  row up with every member's, and so does the VM, which broadcasts it to
  the members (`PrimOp.broadcast`).  A row that follows a member's values
  (`x[:1]`, the first member's; `x.sum(0, keepdims=True)`, the batch's)
  is not shared: the VM refuses it at run time, where it has one row for
  several members.  A result that differs from run to run (a random
  draw) is not taken for shared either.

  Args:
    op: The `PrimOp`, whose inputs are batched.
    in_types: The type pattern of each of its inputs.
    backend: The backend that runs it.

  Returns:
    True where every leaf of one row is the same whatever either member's
    values, on two runs.
  """
  if unchecked_inputs(op, in_types):
    return False
  context = backend.eager_scope() if backend.in_graph() else (
      contextlib.nullcontext())
  with context, backend.error_context(), np.errstate(all='ignore'):
    for kind in MADE_UP:
      try:
        first = _one_rows(op.function(*_member_pair(in_types, kind, None,
                                                    backend)))
      except Exception:  # pylint: disable=broad-except
        continue
      break
    else:
      return False
    if not first:
      return False
    for changed, change in ((None, None), (1, 'up'), (0, 'up'),
                            (1, 'down'), (0, 'down')):
      try:
        again = _one_rows(op.function(*_member_pair(
            in_types, kind, change, backend,
            1 if changed is None else changed)))
      except Exception:  # pylint: disable=broad-except
        return False
      if again is None or not _rows_agree(first, again):
        return False
  return True


def _one_rows(value):
  """The leaves of one row of a primitive's result at batch size 2, as
  NumPy arrays; None where a leaf is no value."""
  rows = []
  for leaf in inst.pattern_flatten(value):
    try:
      a = np.asarray(leaf)
    except Exception:  # pylint: disable=broad-except
      return None
    if a.dtype.kind not in 'biufc':
      return None
    if a.ndim and a.shape[0] == 1:
      rows.append(a)
  return rows


def unchecked_inputs(op, in_types):
  """Whether `op` is the compiler's own or reads literals only.

  Args:
    op: The primitive instruction.
    in_types: Its inputs' types.

  Returns:
    True where the checks of this module have nothing to check in `op`.
  """
  module = getattr(op.function, '__module__', None) or ''
  return (op.function is inst.identity or module.startswith('autobatch_vm.')
          or all(_is_literal(t) for t in _leaves(in_types)))


def _unchecked(op, in_types, backend):
  """Whether the checks of this module leave `op` alone: the compiler's
  own primitives (copies, loop counters), primitives of literals only,
  and any in a graph, where nothing runs on values."""
  return unchecked_inputs(op, in_types) or backend.in_graph()


def check_broadcasting(op, in_types, backend):
  """Raises where `op` broadcasts on one member but not on two or three.

  That is `_check_runs_on_two`, for a primitive that
  `check_members_apart` does not run: one that reads variables holding
  Python numbers, typed by running it with those numbers.

  Args:
    op: The `PrimOp`, whose inputs are batched.
    in_types: The type pattern of each of its inputs.
    backend: The backend that runs it (eagerly).

  Raises:
    TypeInferenceError: As `_check_runs_on_two`.
  """
  if _unchecked(op, in_types, backend):
    return
  with backend.error_context(), np.errstate(all='ignore'):
    _check_runs_on_two(op, in_types, backend)


# What NumPy's and TensorFlow's broadcasting errors say.
_SHAPE_ERRORS = ('could not be broadcast', 'Incompatible shapes',
                 'Dimensions must be equal', 'shape mismatch',
                 'must be broadcastable')   # TensorFlow's select (where)


def _check_runs_on_two(op, in_types, backend):
  """Raises where `op`, which ran on one member, fails on two or three
  with a broadcasting error on every made-up kind.

  A variable holding a Python number that can change (a loop counter,
  `h = h * 0.5`) runs as the array of one number per member that the VM
  holds (one assigned a literal once is that constant:
  `python.source.literal_constants`).  Per member
  the inputs have the same shapes at every batch size, so a
  batch-aware primitive that broadcasts on one member but not on two or
  three
  lines its operands up by their last axes across the batch axis:
  `y * s` of `y` `[batch, 3]` and a per-member scalar `s` `[batch]`.
  At a batch size equal to the other axis (3 members) it would run and
  silently give each member the others' values.  Only broadcasting
  errors count: a primitive that fails on two members for any other
  reason is left to run.
  """
  first = None
  for count in (2, 3):
    first = None
    for kind in MADE_UP:
      try:
        op.function(*_members(in_types, kind, backend, count))
        break
      except Exception as e:  # pylint: disable=broad-except
        if not any(m in str(e) for m in _SHAPE_ERRORS):
          return
        first = first or e
    else:
      break
  if first is None:
    return
  shapes = ', '.join(
      f'{"a temporary" if v.startswith("%") else repr(v)}: '
      f'{inst.type_str(t)} per member'
      for v, t in zip(op.vars_in, in_types))
  hint = ('Axis 0 of every batched value is the batch: a per-member '
          'scalar (a loop counter, a variable that holds a number and is '
          'assigned more than once) is an array [batch], and against a '
          'per-member vector ([batch, n]) it needs an axis of its own: '
          'np.expand_dims(s, -1) * v (or tf.expand_dims(s, -1); s[:, None] '
          'where s is an array).  Or write the function for one member '
          '(per_member=True), where s * v is one member\'s.')
  grown = [v for v, t in zip(op.vars_in, in_types)
           if v == op.vars_out and isinstance(t, inst.TensorType)
           and t.weak and not t.shape]
  if grown:
    # `out = 0.0` then `out = out + w * x`: a number that would become a
    # vector.
    hint = (f'{grown[0]!r} starts as a number and would hold a per-member '
            'vector after this line; a variable keeps one shape, so start '
            f'it as an array of that shape ({grown[0]} = np.zeros_like(x) '
            f'or tf.zeros_like(x), x the vector).  ' + hint)
  raise errors.TypeInferenceError(
      f'`{op.text}` runs on one member but not on {count} '
      f'({type(first).__name__}: {str(first).strip().splitlines()[0]}); '
      f'{shapes}.  Its operands line up by their last axes across the '
      'batch axis, so at a batch size equal to another axis it would run '
      'and give each member other members\' values',
      loc=op.loc, hint=hint)


_MIXING_HINT = (
    'Axis 0 of every batched value is the batch, so a reduction over it '
    '(x.sum(), x.max(), np.mean(x, axis=0)) gives every member the whole '
    "batch's value.  Reduce over axis=-1 or the member's own axes "
    '(x.sum(axis=-1), x.sum(axis=tuple(range(1, x.ndim))).  Index a '
    "member's own axes after the batch: x[:, 0] for a constant index; with "
    'a per-member index j (a loop counter, an argument), '
    'np.take_along_axis(x, j[:, None], axis=1)[:, 0] on NumPy or '
    'tf.gather(x, j, batch_dims=1) on TensorFlow.')


def _mixes(op, in_types, backend, pin=None):
  """The made-up kind on which `op` mixes members, or None.

  The primitive runs on two members that are made-up inputs of one kind
  (`MADE_UP`, the first where it runs, then `_GENERIC` where that one
  shows nothing and it runs there), then with one member's changed
  (`_other_member`: up, then down where up changes nothing): the second
  (a reduction over the batch, `x - x.sum()`), then the first (a read of
  the batch's first row, `x + y[0]`, which the first member's own
  result does not show).  It mixes where the other member's result
  changes, and the difference is reproducible: a third run on the first
  inputs gives the first result again, and a fourth on the changed
  inputs the changed result again.  A primitive whose results differ
  from run to run (random draws, a counter it keeps) is thereby not
  taken for one that mixes members.

  Args:
    op: The `PrimOp`.
    in_types: The type pattern of each of its inputs.
    backend: The backend that runs it.
    pin: A `randomness.RngPin` reset before each run, or None.

  Returns:
    The kind in `MADE_UP`, or None where nothing shows mixing.
  """
  def call(kind, change, changed=1):
    if pin is not None:
      pin.reset()
    return op.function(*_member_pair(in_types, kind, change, backend,
                                     changed))
  tried = 0
  for kind in MADE_UP:
    if tried and kind != _GENERIC:
      continue
    try:
      unchanged = call(kind, None)
    except Exception:  # pylint: disable=broad-except
      continue
    tried += 1
    for changed in (1, 0):
      watched = 1 - changed
      if _mixes_when_changed(
          lambda change: _rows(call(kind, change, changed), watched),  # pylint: disable=cell-var-from-loop
          _rows(unchanged, watched)):
        return kind
    if kind == _GENERIC:
      break
  return None


# The made-up kind `_mixes` also runs on where the first kind that runs
# shows nothing: values that differ per element and are neither 0 nor 1,
# since zeros and ones hide a product with another member's values (`x *
# x[-1]` of zeros is zeros whatever the last member's `x`).
_GENERIC = 'uniform'


def _mixes_when_changed(run, first):
  """Whether one member's result follows the other's inputs, reproducibly
  (`_mixes`): `run(change)` gives its rows with the other's inputs
  changed by `change` (None: unchanged), `first` those unchanged."""
  if first is None:
    return False
  for change in _CHANGES:
    try:
      other = run(change)
    except Exception:  # pylint: disable=broad-except
      continue
    if other is not None and not _rows_agree(first, other):
      break
  else:
    return False
  try:
    again = run(None)
    other_again = run(change)
  except Exception:  # pylint: disable=broad-except
    return False
  # Not the same result twice on the same inputs: no evidence.
  return not (again is None or not _rows_agree(first, again) or
              other_again is None or not _rows_agree(other, other_again))


def _members(in_types, kind, backend, count):
  """Inputs of `count` members, each a made-up input of `kind`; a
  variable holding a Python number an array of one per member, as the VM
  holds it."""
  def leaf(t):
    return backend.asarray(np.concatenate([made_up(t, kind, 1)] * count))
  return [inst.pattern_map(leaf, t, inst.TensorType) for t in in_types]


def _member_pair(in_types, kind, change, backend, changed=1):
  """Inputs of two members at batch size 2: each a made-up input of
  `kind`, member `changed` changed (`_other_member(x, change)`) unless
  `change` is None; literals stay Python scalars."""
  count = [0]

  def leaf(t):
    if _is_literal(t):
      return t.dtype.type(0).item()
    one = made_up(t, kind, 1)
    count[0] += 1
    other = one if change is None else _other_member(one, change, count[0])
    pair = [one, other] if changed == 1 else [other, one]
    return backend.asarray(np.concatenate(pair))
  return [inst.pattern_map(leaf, t, inst.TensorType) for t in in_types]


# How `check_members_apart` changes the second member: up, then (where
# that changes nothing) down, since a minimum over the batch follows a
# member only below the other, a maximum only above.
_CHANGES = ('up', 'down')


def _other_member(x, change, position=1):
  """Made-up input `x` of one member, changed in every element: up
  (floats to 1.5 x + 0.25 p, which keeps identity matrices positive
  definite; integers plus p) or down (0.5 x - 0.25 p; minus p);
  booleans flipped either way.  `p` is the input's position among the
  primitive's array inputs (from 1), so that two inputs made up alike
  change apart (`x - c` of inputs both made up as zeros)."""
  up = change == 'up'
  step = 0.25 * position
  if x.dtype.kind in 'fc':
    return (x * 1.5 + step if up else x * 0.5 - step).astype(x.dtype)
  if x.dtype.kind == 'b':
    return ~x
  return (x + position if up else x - position).astype(x.dtype)


def _rows(value, member):
  """Member `member`'s row of each leaf of a primitive's result at batch
  size 2, as NumPy arrays; None where a leaf has no such row (another
  leading dimension: nothing to compare).  A number (a leaf of no axes)
  is every member's: the VM gives it to each (`np.any(x > c) and k < n`
  with no axis, where a literal `k` kept the batch axis from the
  result), so where it follows the other member's inputs, it mixes."""
  rows = []
  for leaf in inst.pattern_flatten(value):
    if leaf is None:
      return None
    try:
      leaf = np.asarray(leaf)
    except Exception:  # pylint: disable=broad-except
      return None   # not a value (a symbolic tensor): nothing to compare
    if leaf.dtype.kind not in 'biufc':
      return None
    if leaf.ndim == 0:
      rows.append(leaf)
      continue
    if leaf.shape[0] != 2:
      return None
    rows.append(leaf[member])
  return rows


def _rows_agree(a, b):
  """Whether two `_rows` agree: exactly for integers and booleans,
  within rounding for floating point (a batched matrix product may sum in
  another order), NaN where both are NaN."""
  if len(a) != len(b):
    return False
  for x, y in zip(a, b):
    if x.shape != y.shape or x.dtype != y.dtype:
      return False
    if x.dtype.kind in 'fc':
      tol = max(1e-6, 1000 * float(np.finfo(x.dtype).eps))
      scale = max(1.0, float(np.max(np.abs(x), initial=0.0,
                                    where=np.isfinite(x))))
      if not np.allclose(x, y, rtol=tol, atol=tol * scale, equal_nan=True):
        return False
    elif not np.array_equal(x, y):
      return False
  return True

