"""Random ops in a traced TensorFlow primitive.

A TensorFlow primitive can draw at random through ops that no Python
name in its code need mention (TFP's samplers, a seed handed in as
data).  `draws_at_random` traces the primitive into a scratch graph and
looks at every op, in nested functions too (loop and branch bodies):
an op that draws (stateful or stateless random ops) or another stateful
op (a variable update, a Python function, I/O) means its results may
differ from run to run, or follow a seed rather than the data.
"""

import re

import tensorflow as tf
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-direct-tensorflow-import

__all__ = ['draws_at_random', 'ops_draw']

# Stateless random ops and random ops' helpers; stateful ones are also
# caught by their op definition (is_stateful).
_RANDOM_OP = re.compile(
    r'Random|Stateless|Stateful|Rng|Multinomial|TruncatedNormal|Seed|'
    r'Shuffle|Categorical|Poisson|Gamma|Binomial')

# Stateful ops that do not make a primitive's results vary between runs
# on the same inputs: reading variables and the like.
_HARMLESS_STATEFUL = frozenset({
    'VarHandleOp', 'ReadVariableOp', 'VarIsInitializedOp', 'Placeholder',
    'NoOp', 'PartitionedCall', 'StatefulPartitionedCall', 'While',
    'StatelessWhile', 'If', 'StatelessIf', 'Case', 'StatelessCase',
    'Assert', 'PrintV2', 'Print', 'ResourceGather', 'VariableShape',
    'DestroyResourceOp'})


def draws_at_random(fn, args):
  """Whether `fn(*args)`, traced, contains an op that draws or has state.

  Args:
    fn: A TensorFlow primitive.
    args: Values like its arguments (tensors become specs; Python values
      stay constants).

  Returns:
    True or False; None where the primitive does not trace (it runs
    Python on values), so its ops cannot be seen.
  """
  def spec(x):
    if tf.is_tensor(x):
      return tf.TensorSpec(x.shape, x.dtype)
    return x
  specs = tf.nest.map_structure(spec, list(args))
  try:
    concrete = tf.function(lambda *a: fn(*a), autograph=False)  # pylint: disable=unnecessary-lambda
    graph_def = concrete.get_concrete_function(*specs).graph.as_graph_def()
  except Exception:  # pylint: disable=broad-except
    return None
  op_types = {node.op for node in graph_def.node}
  for function in graph_def.library.function:
    op_types.update(node.op for node in function.node_def)
  return any(_draws(op_type) for op_type in op_types)


# Ops that call functions of their own (loop and branch bodies, nested
# functions), whose ops `ops_draw` does not see.
_CALLS_FUNCTIONS = frozenset({
    'While', 'StatelessWhile', 'If', 'StatelessIf', 'Case',
    'StatelessCase', 'PartitionedCall', 'StatefulPartitionedCall'})


def ops_draw(ops):
  """Whether graph ops `ops` (a primitive's, built into a graph) draw.

  Args:
    ops: `tf.Operation`s.

  Returns:
    True or False as `draws_at_random`; None where an op calls a function
    of its own, whose ops are not looked at here.
  """
  op_types = {op.type for op in ops}
  if op_types & _CALLS_FUNCTIONS:
    return None
  return any(_draws(op_type) for op_type in op_types)


def _draws(op_type):
  """Whether ops of type `op_type` draw at random or carry state."""
  if _RANDOM_OP.search(op_type):
    return True
  if op_type in _HARMLESS_STATEFUL:
    return False
  try:
    op_def = op_def_registry.get(op_type)
  except Exception:  # pylint: disable=broad-except
    return False
  return bool(op_def is not None and op_def.is_stateful)
