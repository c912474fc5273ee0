"""A per-member function on a batch of TensorFlow tensors: pfor.

`vectorize(fn)` runs `fn`, written for one member, on batched tensors with
TensorFlow's own vectorizer (`tf.vectorized_map`, which is pfor): the
function is traced once on one member's symbolic values and each
operation is rewritten to its batched form.  An operation pfor has no
rule for, or whose rule refuses operands that differ between members (a
slice's bounds), runs in a `tf.while_loop` over the members
(`fallback_to_while_loop`), which is reported to the caller; under XLA
it is refused where the members' results have shapes unknown when traced
(`v[:n]`, `tf.math.bincount`), which XLA compiled to wrong values (a
slice of per-member bounds there is held masked instead, by
`member_ops`, for its statement to reduce: `per_member.ragged`); with
known shapes (a member's stateless random draw, `np.roll(v, k)`) XLA
compiles the loop.  Inside a graph (a
`tf.function`, the staged VM loop, XLA) the vectorized operations join
the graph; called eagerly, the function is a `tf.function` made once,
traced once with a batch axis of any size.  On one member (a batch axis
of one, as type inference calls it, eagerly or in a graph) it is just the
function on that member's values, with no conversion.
Gradients flow through the vectorized operations, inside an XLA function
too: there the operations are built in the compiled graph itself, and
pfor's rules for MatMul, ConcatV2, Transpose, TensorScatterUpdate, Tile,
the reductions (Sum, Mean, Max, Min, Prod, All, Any) and scans (Cumsum,
Cumprod) are replaced by ones whose axes, permutations, shapes and
multiples are constants where the member's are (`_STATIC`), as XLA needs
them in the gradient.  (pfor's own rules for Slice, StridedSlice and Pad compile
there as they are.)  pfor's rule for PadV2 is replaced everywhere: it
drops the fill value.
"""

import contextlib
import functools
import sys
import threading

import numpy as np

from autobatch_vm import errors
from autobatch_vm.per_member import member_ops
from autobatch_vm.per_member import numpy_array
from autobatch_vm.per_member import ragged

__all__ = ['vectorize']


def _tf():
  return sys.modules['tensorflow']


def vectorize(fn, batched_leaf, fallback=None):
  """Makes `fn`, written for one member, run on batched tensors.

  Args:
    fn: The per-member function.
    batched_leaf: leaf -> whether an argument leaf is batched (others are
      the same for every member: Python numbers while types are inferred).
    fallback: Called with `'tf.<op type>'` for each operation that pfor
      has no rule for and runs in a loop over the members (while the
      function is traced), or None.

  Returns:
    `batched(*args)`: `args` patterns of tensors with a leading batch
    axis (or constants); the result pattern with a leading batch axis on
    every leaf, or None where no leaf of `args` is batched.
  """
  _register_resource_gather()
  _register_ragged_conversion()

  def in_graph(*args):
    result, bad = checked(*args)
    if bad is not None:
      member_ops.report_failures(bad)
    return result

  def checked(*args):
    """`(result, bad)`: the batched result and, where the member function
    may fail for some members as Python would (an item index out of
    range, a math domain error: `member_ops.out_of_range_checks`),
    `{kind: each member's flag}`, else None."""
    tf = _tf()
    leaves = tf.nest.flatten(args)
    where = [k for k, x in enumerate(leaves) if batched_leaf(x)]
    if not where:
      return None, None
    tensors = tuple(tf.convert_to_tensor(leaves[k]) for k in where)
    checks_made = []

    def member(xs):
      full = list(leaves)
      for k, x in zip(where, xs):
        full[k] = x
      with member_ops.out_of_range_checks() as checks:
        out = fn(*tf.nest.pack_sequence_as(args, full))
      for leaf in tf.nest.flatten(out):
        if ragged.is_ragged(leaf):
          leaf.refuse()   # a slice of members' own lengths, kept
      out = tf.nest.map_structure(_numpy_typed, out)
      kinds = sorted({kind for kind, _ in checks})
      checks_made[:] = [kinds]
      if not checks:
        return out
      return out, tuple(
          tf.reduce_any(tf.stack([f for k, f in checks if k == kind]))
          for kind in kinds)

    def split(result):
      kinds = checks_made[0]
      if not kinds:
        return result, None
      return result[0], dict(zip(kinds, result[1]))
    if tensors[0].shape[0] == 1:
      # One member (type inference, eagerly or in a graph; a batch of
      # one): the function on its values, which is what pfor would make
      # of it.
      result = tf.nest.map_structure(
          lambda v: tf.expand_dims(tf.convert_to_tensor(v), 0),
          member([t[0] for t in tensors]))
      if (all(t.shape[1:].is_fully_defined() for t in tensors) and
          not all(leaf.shape[1:].is_fully_defined()
                  for leaf in tf.nest.flatten(result))):
        raise _ragged_result()
      return split(result)
    looped = []

    def report(op, cause, refused):
      looped.append((op, cause, refused))
      if fallback is not None:
        shaped = _member_shaped(op, cause, refused)
        if shaped:
          fallback(f'tf.{op}', shaped=shaped)
        else:
          fallback(f'tf.{op}')
    with _fallbacks_reported(report):
      result = _vectorized_map(member, tensors)
    refused = [(op, cause) for op, cause, refused in looped if refused]
    if refused and _in_xla_context():
      raise _refusal_under_xla(refused)
    value, bad = split(result)
    one_shape = all(leaf.shape[1:].is_fully_defined()
                    for leaf in tf.nest.flatten(value))
    if _in_xla_context() or not one_shape or not (
        refused or (bad and 'window' in bad)):
      return value, bad
    # A value of a shape of its own per member inside (`v[:n]`), or a
    # window `v[j:j + 3]` that some member's slice shortens, and results
    # of one shape (`np.sum(v[:n])`): pfor's loop runs that operation
    # alone and stacks its members' values, which fails where they
    # differ in shape (`TensorListStack`: "Incompatible shapes during
    # merge").  The whole function in one loop over the members keeps
    # each member's values within its trip: always where pfor refused,
    # else only where a member's window does not lie within its axis.
    # (A result of a shape unknown when traced, `w = v[:n]`, stays
    # pfor's: it runs where the members' shapes agree.)
    kinds = sorted(k for k in (bad or {}) if k != 'window') + ['window']
    shapes = [leaf.shape[1:] for leaf in tf.nest.flatten(value)]

    def exact(xs):
      with member_ops.exact_slices():
        out = member(xs)
      traced_kinds = checks_made[0]
      out, flags = (out, ()) if not traced_kinds else out
      flags = dict(zip(traced_kinds, flags))
      # A member whose own slice gives a value of another shape (a
      # window `w = v[j:j + 3]` that the array's end shortens) fails, as
      # no batch holds it; its value is zeros.
      leaves, fits = [], []
      for leaf, shape in zip(tf.nest.flatten(out), shapes):
        leaf = tf.convert_to_tensor(leaf)
        if leaf.shape.is_fully_defined():
          leaves.append(leaf)
          continue
        fit = tf.reduce_all(tf.equal(tf.shape(leaf, out_type=tf.int64),
                                     tf.constant(shape.as_list(), tf.int64)))
        fits.append(fit)
        leaves.append(tf.cond(
            fit, lambda leaf=leaf, shape=shape: tf.reshape(leaf, shape),
            lambda leaf=leaf, shape=shape: tf.zeros(shape, leaf.dtype)))
      flags['window'] = tf.logical_not(tf.reduce_all(fits)) if fits else (
          tf.constant(False))
      return (tf.nest.pack_sequence_as(out, leaves),
              tuple(flags.get(k, tf.constant(False)) for k in kinds))

    def member_loop():
      return tf.map_fn(
          tf.autograph.experimental.do_not_convert(exact), tensors,
          fn_output_signature=(
              tf.nest.map_structure(
                  lambda r: tf.TensorSpec(r.shape[1:], r.dtype), value),
              tuple(tf.TensorSpec([], tf.bool) for _ in kinds)))
    if refused:
      value, flags = member_loop()
    else:
      value, flags = tf.cond(
          tf.reduce_any(bad['window']), member_loop,
          lambda: (value, tuple(tf.zeros_like(bad['window']) if k == 'window'
                                else bad[k] for k in kinds)))
    return value, dict(zip(kinds, flags))

  eager = []
  traced = set()

  def batched(*args):
    tf = _tf()
    if not tf.executing_eagerly() or _one_member(args):
      return in_graph(*args)
    if not eager:   # made once: pfor would make a tf.function per call
      eager.append(tf.function(checked, autograph=False,
                               reduce_retracing=True))
    leaves = tf.nest.flatten(args)
    key = tuple((x.dtype, tuple(x.shape[1:])) if tf.is_tensor(x) else
                repr(x) for x in leaves)
    if key not in traced:
      # Traced once for any number of members (the stackless executor
      # runs a block on those at it: a new count at nearly every call).
      eager[0].get_concrete_function(*tf.nest.map_structure(
          lambda x: tf.TensorSpec([None] + x.shape[1:], x.dtype)
          if tf.is_tensor(x) else x, args))
      traced.add(key)
    result, bad = eager[0](*args)
    if bad is not None:
      member_ops.report_failures(bad)
    return result
  return batched


def _numpy_typed(value):
  """A Python number in a member's result as a tensor of NumPy's dtype
  for it (float64, int64), which the VM's types give a literal; TensorFlow
  would make a float a float32."""
  if isinstance(value, (bool, int, float, complex)):
    return _tf().constant(value, np.asarray(value).dtype)
  return value


def _one_member(args):
  tf = _tf()
  return any(tf.is_tensor(x) and x.shape.rank and x.shape[0] == 1
             for x in tf.nest.flatten(args))


def _in_xla_context():
  """Whether ops are being traced for XLA (the backend's test, which this
  layer does not import)."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = _tf().compat.v1.get_default_graph()
  return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


# The innermost conversion's `report(op_type, cause, refused)`: pfor's
# fallback (`_fallback_converter`, swapped in `_static_rules`) calls it for
# each operation it runs in a loop over the members, whether pfor has no
# rule for the operation or its rule refused the operands (a slice's
# bounds that differ between members), which pfor logs only at debug
# level.  `refused`: whether XLA must not compile the loop: the member
# results' shapes are not known when traced (`v[:n]`: XLA pads such a
# shape to a bound and stacks the members' padded results, which gave
# wrong values; with known shapes, `np.roll(v, k)` or a stateless random
# draw, the loop compiles and gives each member's value alone).
_reporters = []


@contextlib.contextmanager
def _fallbacks_reported(report):
  """Calls `report(op_type, cause, refused)` for pfor's fallbacks inside
  the block (held under `_SWAP_LOCK`, which the conversion holds too)."""
  with _SWAP_LOCK:
    _reporters.append(report)
    try:
      yield
    finally:
      _reporters.pop()


def _reported_fallback(own, pfor_input, root_cause='', warn=False):
  """pfor's `_fallback_converter` (`own`), reported to the innermost
  `_fallbacks_reported` first."""
  if _reporters:
    known = all(x.shape.is_fully_defined() for x in pfor_input.op.outputs)
    _reporters[-1](pfor_input.op_type, str(root_cause), not known)
  return own(pfor_input, root_cause=root_cause, warn=warn)


# Operations whose rule refuses bounds or sizes that differ between
# members: one member's result would have a shape of its own.
_MEMBER_SHAPED = {'StridedSlice': 'a slice', 'Slice': 'a slice',
                  'Range': 'a range', 'Fill': 'an array',
                  'Reshape': 'a reshape', 'Tile': 'a tile',
                  'Pad': 'a pad', 'PadV2': 'a pad', 'OneHot': 'a one-hot'}


def _member_shaped(op, cause, refused=True):
  """What operation `op` makes (`'a slice'`) where pfor's rule for it
  refused bounds or sizes that differ between members (its `cause`), or
  pfor has none and its result's shape is unknown when traced
  (`refused`: `np.arange(n)`), else None."""
  if op in _MEMBER_SHAPED and (refused or 'loop invariant' in cause):
    return _MEMBER_SHAPED[op]
  if op == 'Where':   # a mask's items (`v[v > 0]`): a count per member
    return 'a boolean mask\'s selection (v[v > 0])'
  return None


def _refusal_under_xla(looped):
  """The `PerMemberError` for operations pfor runs in a loop over the
  members (`looped`: `(op type, pfor's cause)` pairs) under XLA, which
  cannot compile that loop (and where the members' results differ in
  shape, no batch holds them)."""
  shaped = sorted({_member_shaped(op, cause) for op, cause in looped} -
                  {None})
  if shaped:
    return errors.PerMemberError(
        f'{" and ".join(shaped).capitalize()} whose bounds or size differ '
        'between members (v[:n], v[k:], np.arange(n), np.zeros(n) with a '
        'per-member n or k): one member\'s result has a shape of its own, '
        'and TensorFlow\'s vectorizer (pfor) runs it in a loop over the '
        'members, which XLA does not compile',
        hint=numpy_array.PAD_HINT)
  ops = sorted({op for op, _ in looped})
  return errors.PerMemberError(
      f'TensorFlow\'s vectorizer (pfor) has no rule for '
      f'{", ".join("tf." + op for op in ops)}, so it runs in a loop over '
      'the members, which XLA does not compile',
      hint='Write the computation with operations pfor vectorizes '
      '(elementwise ops, tf.gather, tf.reduce_*, tf.linalg.*, '
      'tf.where), or run it without jit_compile.')


def _ragged_conversion(value, dtype=None, name=None, as_ref=False):
  """TensorFlow's conversion of a `ragged.Ragged` to a tensor: refused,
  as a `TypeError` (which TensorFlow's operators take as a cue to try the
  slice's own reflected operator) holding the slice's message."""
  del dtype, name, as_ref
  raise TypeError(str(value.refusal()))


_registered = []


def _register_ragged_conversion():
  if not _registered:
    _tf().register_tensor_conversion_function(ragged.Ragged,
                                              _ragged_conversion)
    _registered.append(True)


def _ragged_result():
  """The `PerMemberError` for a member's result whose shape TensorFlow
  does not know when tracing (`w = v[:n]`): its size follows the data,
  and no batch holds members' values of different shapes."""
  return errors.PerMemberError(
      'A value whose shape TensorFlow does not know when tracing is kept '
      'or returned: its size follows the member\'s data (v[:n] or v[k:] '
      'with a per-member n or k, v[v > 0], np.arange(n), '
      'tf.math.segment_sum without num_segments, tf.unique), so one '
      'member\'s value may have a shape of its own, and a batch holds one '
      'array per value.  Within one statement such a value may be reduced '
      'on TensorFlow outside XLA (s = np.sum(v[:n]))',
      hint=numpy_array.PAD_HINT)


def _register_resource_gather():
  """Gives pfor a rule for `tf.gather` of a `tf.Variable` (ResourceGather)
  by a per-member index, where TensorFlow has none: the variable's value
  read once, gathered by the batch of indices.  (Without it, a tree RNN's
  embedding lookup from a variable runs in a loop over the members, which
  XLA does not compile.)"""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  registry = pfor_lib._pfor_converter_registry  # pylint: disable=protected-access
  if 'ResourceGather' not in registry:
    registry['ResourceGather'] = _resource_gather


def _resource_gather(pfor_input):
  """pfor's rule for ResourceGather with an unbatched variable and
  batch_dims 0; other forms take pfor's loop over the members."""
  from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if pfor_input.inputs[0].is_stacked or pfor_input.get_attr('batch_dims'):
    return pfor_lib._fallback_converter(  # pylint: disable=protected-access
        pfor_input, root_cause='a batched variable or batch_dims',
        warn=True)
  value = resource_variable_ops.read_variable_op(
      pfor_input.unstacked_input(0), pfor_input.get_attr('dtype'))
  return pfor_lib.wrap(_tf().gather(value, pfor_input.stacked_input(1)),
                       True)


def _vectorized_map(member, tensors):
  """`tf.vectorized_map(member, tensors)`, with the rules of `_STATIC`,
  its operations built in the graph being built, under XLA too.

  Under XLA `tf.vectorized_map` builds its operations in a `tf.function`
  of their own.  A gradient through that function's call gets each value
  it needs from the forward pass as an input, constants included (a
  transpose's permutation, a concatenation's axis), which XLA needs as
  compile-time constants: inside a loop or a branch, the gradient does
  not compile.  Built in the graph itself, those constants are copied
  into the gradient's branches and loops as constants.
  """
  tf = _tf()
  from tensorflow.python.ops.parallel_for import control_flow_ops  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  with _static_rules():
    if tf.executing_eagerly() or not _in_xla_context():
      return tf.vectorized_map(member, tensors, fallback_to_while_loop=True,
                               warn=True)
    size = tensors[0].shape[0]
    if size is None:
      size = tf.shape(tensors[0])[0]
    # pfor hands its loop body to AutoGraph where the trace has it on (a
    # `tf.function` under XLA), which cannot read the generated code's
    # source and warns that it "could not transform" it; it is plain
    # tensor code, with nothing for AutoGraph to convert.
    return control_flow_ops._pfor_impl(  # pylint: disable=protected-access
        tf.autograph.experimental.do_not_convert(
            lambda i: member([tf.gather(t, i) for t in tensors])), size,
        fallback_to_while_loop=True, warn=True)


# pfor's registry is global: one thread at a time swaps its rules, and a
# conversion inside another (a nested block) keeps the outer one's.
_SWAP_LOCK = threading.RLock()
_swap_depth = [0]


@contextlib.contextmanager
def _static_rules():
  """pfor's rules replaced, inside the block, by those of `_STATIC`."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  with _SWAP_LOCK:
    registry = pfor_lib._pfor_converter_registry  # pylint: disable=protected-access
    saved = {}
    own_fallback = None
    added = {}
    if not _swap_depth[0]:
      saved = {name: registry[name] for name in _STATIC if name in registry}
      for name, own in saved.items():
        registry[name] = functools.partial(_STATIC[name], own)
      added = {name: rule for name, rule in _added_rules().items()
               if name not in registry}
      registry.update(added)
      own_fallback = pfor_lib._fallback_converter  # pylint: disable=protected-access
      pfor_lib._fallback_converter = functools.partial(  # pylint: disable=protected-access
          _reported_fallback, own_fallback)
    _swap_depth[0] += 1
    try:
      yield
    finally:
      _swap_depth[0] -= 1
      registry.update(saved)
      for name in added:
        del registry[name]
      if own_fallback is not None:
        pfor_lib._fallback_converter = own_fallback  # pylint: disable=protected-access


def _shared_constant(pfor_input, k):
  """The value of input `k` of the operation pfor converts where it is the
  same for every member and known when traced (an axis, multiples), else
  None."""
  operand = pfor_input.inputs[k]
  return None if operand.is_stacked else _tf().get_static_value(operand.t)


def _concat(own, pfor_input):
  """pfor's rule for ConcatV2 (`own`), with a constant axis where the
  member's axis is one (pfor's computes the batched axis in the graph,
  and XLA needs the gradient's axis as a constant)."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  tf = _tf()
  n = pfor_input.num_inputs
  axis = _shared_constant(pfor_input, n - 1)
  if axis is None:
    return own(pfor_input)
  pfor_input.stack_inputs(stack_indices=range(n - 1))
  axis = int(axis)
  return pfor_lib.wrap(tf.concat([x.t for x in pfor_input.inputs[:n - 1]],
                                 axis=axis + 1 if axis >= 0 else axis), True)


def _matmul(own, pfor_input):
  """pfor's rule for MatMul (`own`), where only the right operand is
  batched (`tf.linalg.matvec(w, h)`, `w @ x` with a shared `w`), with
  constant permutations (pfor's picks one in the graph from the operand's
  shape, and XLA needs the gradient's as a constant), and none where each
  member's operand is a vector."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  a, b = pfor_input.inputs[0], pfor_input.inputs[1]
  if a.is_stacked or not b.is_stacked:
    return own(pfor_input)
  tf = _tf()
  transpose_b = pfor_input.get_attr('transpose_b')
  k = b.t.shape[2 if transpose_b else 1]
  if b.t.shape[1 if transpose_b else 2] == 1 and k is not None:
    # A member's vector (matvec): the members' vectors as the rows of one
    # product, [members, k] by a's transpose, with no transposes.
    rows = tf.reshape(b.t, [-1, k])
    product = tf.linalg.matmul(
        rows, a.t, transpose_b=not pfor_input.get_attr('transpose_a'))
    return pfor_lib.wrap(product[:, :, None], True)
  # b: [members, k, m] ([members, m, k] transposed) to [k, members, m]:
  # one product with a gives every member's.
  right = tf.transpose(b.t, [2, 0, 1] if transpose_b else [1, 0, 2])
  k, n, m = [d if d is not None else tf.shape(right)[i]
             for i, d in enumerate(right.shape)]
  product = tf.linalg.matmul(a.t, tf.reshape(right, [k, n * m]),
                             transpose_a=pfor_input.get_attr('transpose_a'))
  return pfor_lib.wrap(
      tf.transpose(tf.reshape(product, [-1, n, m]), [1, 0, 2]), True)


def _scatter_update(own, pfor_input):
  """pfor's rule for TensorScatterUpdate (`own`), with constant shapes
  where the indices' shape is known (pfor's computes them in the graph,
  where XLA needs constants), and the members' numbers of the indices'
  dtype (pfor's are int32, which int64 indices refuse), for a batch of
  known or unknown size."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  tf = _tf()
  pfor_input.stack_inputs([0, 1, 2])
  tensor, indices, updates = [pfor_input.stacked_input(k) for k in range(3)]
  shape = indices.shape
  if shape.rank is None:
    return own(pfor_input)
  # Each member's index vectors get the member's number in front.  The
  # batch size may be unknown (an eager call's trace); the other sizes are
  # a member's.
  dynamic = tf.shape(indices, out_type=indices.dtype)
  member = tf.reshape(tf.range(dynamic[0] if shape[0] is None else shape[0],
                               dtype=indices.dtype),
                      [-1] + [1] * (shape.rank - 1))
  if shape[:-1].is_fully_defined():
    member = tf.broadcast_to(member, shape[:-1].concatenate([1]))
  else:
    member = tf.broadcast_to(member, tf.concat(
        [dynamic[:-1], tf.ones([1], indices.dtype)], 0))
  return pfor_lib.wrap(tf.tensor_scatter_nd_update(
      tensor, tf.concat([member, indices], axis=-1), updates), True)


def _transpose(own, pfor_input):
  """pfor's rule for Transpose (`own`), with a constant permutation where
  the member's is one (pfor's computes the batched one in the graph)."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  perm = pfor_input.inputs[1]
  value = None if perm.is_stacked else _tf().get_static_value(perm.t)
  if value is None or not pfor_input.inputs[0].is_stacked:
    return own(pfor_input)
  return pfor_lib.wrap(_tf().transpose(
      pfor_input.stacked_input(0), [0] + [int(p) + 1 for p in value]), True)


def _tile(own, pfor_input):
  """pfor's rule for Tile (`own`), with constant multiples where the
  member's are constants (pfor's are computed in the graph, and the
  gradient reshapes by them, which XLA needs as constants)."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  value = _shared_constant(pfor_input, 1)
  if value is None or not pfor_input.inputs[0].is_stacked:
    return own(pfor_input)
  value = np.asarray(value)
  return pfor_lib.wrap(_tf().tile(
      pfor_input.stacked_input(0),
      np.concatenate([np.ones(1, value.dtype), value])), True)


def _pad_v2(own, pfor_input):
  """pfor's rule for PadV2 (`tf.pad` with `constant_values`), which pads
  with zeros whatever the fill value (TensorFlow 2.16 to 2.21), with the
  fill value kept; a fill value that differs between members takes pfor's
  loop over the members."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  del own
  tf = _tf()
  if pfor_input.inputs[2].is_stacked:
    return pfor_lib._fallback_converter(  # pylint: disable=protected-access
        pfor_input, root_cause='a per-member fill value', warn=True)
  paddings = pfor_input.unstacked_input(1)
  paddings = tf.concat([tf.zeros([1, 2], paddings.dtype), paddings], 0)
  return pfor_lib.wrap(tf.pad(pfor_input.stacked_input(0), paddings,
                              constant_values=pfor_input.unstacked_input(2)),
                       True)


def _reduction(name):
  """pfor's rule for the reduction `tf.<name>` (`own`), with constant
  axes where the member's are constants: pfor's shifts them past the
  batch axis in the graph, and the gradient (`_SumGrad`'s reduced shape,
  a DynamicStitch of them) needs them as constants under XLA."""
  def rule(own, pfor_input):
    from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    tf = _tf()
    value = _shared_constant(pfor_input, 1)
    x = pfor_input.inputs[0]
    if value is None or not x.is_stacked or x.t.shape.rank is None:
      return own(pfor_input)
    rank = x.t.shape.rank - 1
    if rank == 0:
      return own(pfor_input)
    shifted = sorted({int(a) % rank + 1 for a in np.ravel(value)})
    return pfor_lib.wrap(getattr(tf, name)(
        x.t, shifted, keepdims=pfor_input.get_attr('keep_dims')), True)
  return rule


def _scan(name):
  """pfor's rule for the scan `tf.math.<name>` (`own`), with a constant
  axis where the member's is one (the gradient scans along it, which XLA
  needs as a constant)."""
  def rule(own, pfor_input):
    from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    tf = _tf()
    value = _shared_constant(pfor_input, 1)
    x = pfor_input.inputs[0]
    if value is None or not x.is_stacked or not x.t.shape.rank or (
        x.t.shape.rank < 2):
      return own(pfor_input)
    shifted = int(value) % (x.t.shape.rank - 1) + 1
    return pfor_lib.wrap(getattr(tf.math, name)(
        x.t, shifted, exclusive=pfor_input.get_attr('exclusive'),
        reverse=pfor_input.get_attr('reverse')), True)
  return rule


_STATIC = {'ConcatV2': _concat, 'MatMul': _matmul,
           'TensorScatterUpdate': _scatter_update, 'Transpose': _transpose,
           'Tile': _tile, 'PadV2': _pad_v2,
           'Sum': _reduction('reduce_sum'), 'Prod': _reduction('reduce_prod'),
           'Max': _reduction('reduce_max'), 'Min': _reduction('reduce_min'),
           'Mean': _reduction('reduce_mean'), 'All': _reduction('reduce_all'),
           'Any': _reduction('reduce_any'), 'Cumsum': _scan('cumsum'),
           'Cumprod': _scan('cumprod')}


def _batched_matrices(op):
  """A rule for an operation on the last two axes of its one input that
  takes any leading axes (`tf.linalg.det`), which pfor lacks: the same
  operation on the members' stacked matrices."""
  def rule(pfor_input):
    from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    x = pfor_input.stacked_input(0)
    return [pfor_lib.wrap(y, True) for y in tf_op(x)]
  def tf_op(x):
    out = op(x)
    return out if isinstance(out, (tuple, list)) else [out]
  return rule


def _added_rules():
  """Rules pfor has none for, added while it converts (`_static_rules`)."""
  tf = _tf()
  return {'MatrixDeterminant': _batched_matrices(tf.linalg.det),
          'LogMatrixDeterminant': _batched_matrices(tf.linalg.slogdet),
          'Svd': _svd, 'Bitcast': _bitcast}


def _bitcast(pfor_input):
  """pfor's missing rule for Bitcast (an unsigned running sum's signed
  twin, `member_ops._tf_unsigned_scan`): the members' stacked values
  bitcast, which keeps their leading axis."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  return pfor_lib.wrap(_tf().bitcast(pfor_input.stacked_input(0),
                                     pfor_input.get_attr('type')), True)


def _svd(pfor_input):
  """pfor's missing rule for Svd: the members' stacked matrices, with
  the operation's own `compute_uv` and `full_matrices`."""
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  tf = _tf()
  compute_uv = pfor_input.get_attr('compute_uv')
  out = tf.raw_ops.Svd(input=pfor_input.stacked_input(0),
                       compute_uv=compute_uv,
                       full_matrices=pfor_input.get_attr('full_matrices'))
  if not compute_uv:   # u and v are empty: the member's own, unbatched
    return [pfor_lib.wrap(out[0], True)] + [
        pfor_lib.wrap(y, False) for y in pfor_input.op.outputs[1:]]
  return [pfor_lib.wrap(y, True) for y in out]
