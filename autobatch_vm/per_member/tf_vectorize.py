"""A per-member function on a batch of TensorFlow tensors: pfor.

`vectorize(fn)` runs `fn`, written for one member, on batched tensors with
TensorFlow's own vectorizer (`tf.vectorized_map`, which is pfor): the
function is traced once on one member's symbolic values and each
operation is rewritten to its batched form.  An operation pfor has no
rule for runs in a `tf.while_loop` over the members
(`fallback_to_while_loop`), which is reported to the caller and refused
under XLA, which cannot compile that loop.  Inside a graph (a
`tf.function`, the staged VM loop, XLA) the vectorized operations join
the graph; called eagerly, the function is a `tf.function` made once (and
on one member, as type inference calls it, just the function on that
member's values).
Gradients flow through the vectorized operations.
"""

import contextlib
import logging
import sys

from autobatch_vm import errors

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
  def in_graph(*args):
    tf = _tf()
    leaves = tf.nest.flatten(args)
    where = [k for k, x in enumerate(leaves) if batched_leaf(x)]
    if not where:
      return None
    tensors = tuple(tf.convert_to_tensor(leaves[k]) for k in where)

    def member(xs):
      full = list(leaves)
      for k, x in zip(where, xs):
        full[k] = x
      return fn(*tf.nest.pack_sequence_as(args, full))
    if tf.executing_eagerly() and tensors[0].shape[0] == 1:
      # One member, eagerly (type inference): the function on its values.
      return tf.nest.map_structure(
          lambda v: tf.expand_dims(tf.convert_to_tensor(v), 0),
          member([t[0] for t in tensors]))
    looped = []

    def report(name):
      looped.append(name)
      if fallback is not None:
        fallback(name)
    with _fallbacks_reported(report):
      result = tf.vectorized_map(member, tensors,
                                 fallback_to_while_loop=True, warn=True)
    if looped and _in_xla_context():
      raise errors.PerMemberError(
          f'TensorFlow\'s vectorizer (pfor) has no rule for '
          f'{", ".join(sorted(set(looped)))}, so it runs in a loop over '
          'the members, which XLA does not compile',
          hint='Write the computation with operations pfor vectorizes '
          '(elementwise ops, tf.gather, tf.reduce_*, tf.linalg.*, '
          'tf.where), or run it without jit_compile.')
    return result

  eager = []

  def batched(*args):
    tf = _tf()
    if not tf.executing_eagerly() or _one_member(args):
      return in_graph(*args)
    if not eager:   # made once: pfor would make a tf.function per call
      eager.append(tf.function(in_graph, autograph=False,
                               reduce_retracing=True))
    return eager[0](*args)
  return batched


def _one_member(args):
  tf = _tf()
  return any(tf.is_tensor(x) and x.shape.rank and x.shape[0] == 1
             for x in tf.nest.flatten(args))


class _FallbackLog(logging.Handler):
  """Reports pfor's "Using a while_loop for converting <op>" records."""

  def __init__(self, report):
    super().__init__()
    self.report = report

  def emit(self, record):
    words = str(record.msg).split()
    if words[:5] == ['Using', 'a', 'while_loop', 'for', 'converting']:
      self.report('tf.' + (words[5] if len(words) > 5 else '?'))


def _in_xla_context():
  """Whether ops are being traced for XLA (the backend's test, which this
  layer does not import)."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  graph = _tf().compat.v1.get_default_graph()
  return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


@contextlib.contextmanager
def _fallbacks_reported(fallback):
  """Calls `fallback` for pfor's fallbacks logged inside the block."""
  logger = logging.getLogger('tensorflow')
  handler = _FallbackLog(fallback)
  logger.addHandler(handler)
  try:
    yield
  finally:
    logger.removeHandler(handler)


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
