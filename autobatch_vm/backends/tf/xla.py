"""XLA utilities: `compile_nested_output` (named after TFP's).

XLA cannot raise an error at run time: it drops `tf.debugging.Assert`.  A
batched run inside `tf.function(jit_compile=True)` that overflows its stack
(or fails an `assert`) therefore cannot stop the computation; it poisons
the outputs of the members that failed instead (NaN for floats, the
dtype's minimum for integers), and refuses, while tracing, to return a
boolean that could be wrong (`vm.failures`, the call's `on_error=`).
`compile_nested_output` compiles a function with XLA *and* returns, next to
its outputs, the error codes of every batched run inside; after the
compiled function returns, outside XLA, it raises the error the run would
have raised eagerly (`errors.StackOverflowError`, naming the members, or
`errors.AssertionFailedError`).  Called inside a `tf.function`, the check is
a `tf.debugging.Assert` that fails the call with the same message.

A batched run traced for XLA can be differentiated only inside its
compiled function: `refuse_gradient_from_outside` makes a tape outside
that records it raise a clear `errors.ArgumentError` instead of
TensorFlow's error about TensorLists crossing the XLA/TF boundary.
"""

import functools
import itertools
import threading
import warnings
import weakref

import numpy as np
import tensorflow as tf

from autobatch_vm import errors
from autobatch_vm.backends.tf import errors as tf_errors
from autobatch_vm.backends.tf import loop as tf_loop
from autobatch_vm.backends.tf import masks

__all__ = ['compile_nested_output', 'warn_if_gradient_needs_max_steps',
           'refuse_gradient_from_outside', 'outer_gradient_error']

_MAX_STEPS_HINT = (
    'Pass max_steps= to the batched function (a bound on the VM steps the '
    'run takes; a run that needs more raises StepLimitError), or set '
    'TensorFlowBackend(while_maximum_iterations=...).  XLA needs it to '
    'size the values the loop keeps for the gradient.')


def warn_if_gradient_needs_max_steps(name):
  """Warns if a batched function's XLA trace may be recorded for a gradient.

  Without `max_steps` XLA cannot compile the gradient of the batched run's
  loop, so a run traced for XLA while a gradient tape may record it gets an
  `errors.XlaGradientWarning`, reported at the user's call.

  Args:
    name: The batched function's name, for the message.
  """
  from tensorflow.python.eager import record  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if not (masks.in_xla_context() and record.could_possibly_record()):
    return
  warnings.warn(
      f'{name}() runs under tf.function(jit_compile=True) while a gradient '
      'tape is recording, without max_steps: XLA cannot compile the '
      'gradient of its loop ("XLA compilation requires a fixed tensor list '
      f'size").  {_MAX_STEPS_HINT}', errors.XlaGradientWarning,
      stacklevel=errors.user_stacklevel())


def outer_gradient_error(what, loc, hint):
  """The error for a tape outside a compiled function recording its run.

  TensorFlow differentiates a compiled function from outside by having it
  return the values its loops save for the backward pass, as TensorLists,
  which XLA cannot hand out ("Support for TensorList crossing the XLA/TF
  boundary is not implemented").

  Args:
    what: What the user did, naming their function.
    loc: The `SourceLoc` of the user's function.
    hint: What to do instead.

  Returns:
    An `errors.ArgumentError`.
  """
  return errors.ArgumentError(
      f'{what}: TensorFlow cannot differentiate an XLA-compiled loop from '
      'outside the compiled function (TensorFlow: "Support for TensorList '
      'crossing the XLA/TF boundary is not implemented")', loc=loc,
      hint=hint)


def _xla_root(graph):
  """The function graph that XLA compiles as a whole around `graph`.

  TensorFlow marks a `tf.function(jit_compile=True)` being traced (or
  called) by an XLA context on the graph it is called from, the eager
  context's or an outer function's; functions traced inside it are
  compiled with it.  The root is therefore the graph traced under the
  outermost such mark: the one just inside the outermost graph in an XLA
  context (that graph itself where it is `graph`: the eager context's,
  while a compiled function is called).  None outside XLA.
  """
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  chain = []
  while graph is not None:
    chain.append(graph)
    graph = getattr(graph, 'outer_graph', None)
  marked = [j for j, g in enumerate(chain)
            if control_flow_util.InXlaContext(g)]
  if not marked:
    return None
  return chain[max(marked[-1] - 1, 0)]


def refuse_gradient_from_outside(values, name, loc):
  """`values` of a batched run, whose gradient must be built under XLA.

  A tape outside a `tf.function(jit_compile=True)` that records its call
  makes TensorFlow build the compiled function's gradient as a function
  of its own, outside the compilation; the compiled function then has to
  return what the run's `while_loop` saved, which XLA cannot do, and the
  call fails with TensorFlow's error, naming neither the batched function
  nor the remedy.  Traced for XLA, the run's floating inputs and outputs
  therefore go through an identity whose gradient raises
  `outer_gradient_error` when it is built outside the XLA compilation
  that holds the run.  Inside it (a tape within the compiled function)
  the gradient goes through the same identity, so that a tape outside
  that differentiates the gradient taken inside is refused as well.
  Outside XLA, `values` are returned as they are.

  Args:
    values: The run's inputs or outputs, a nested structure of tensors.
    name: The batched function's name, for the message.
    loc: Its `SourceLoc`.

  Returns:
    `values`, the floating tensors behind that identity under XLA.
  """
  if not masks.in_xla_context():
    return values
  root = _xla_root(tf.compat.v1.get_default_graph())
  if root is None:
    return values
  # A weak reference: TensorFlow keeps the gradient function (in its
  # global registry of gradients), which must not keep the graph alive.
  return _guard(values, weakref.ref(root), name, loc)


def _guard(values, root, name, loc):
  flat = tf.nest.flatten(values)
  picked = [i for i, x in enumerate(flat) if isinstance(x, tf.Tensor)
            and (x.dtype.is_floating or x.dtype.is_complex)]
  if not picked:
    return values

  @tf.autograph.experimental.do_not_convert
  def grad(*upstream):
    # The gradient belongs to the run's compilation where its graph has
    # the same root: the compiled function's own graph, or one traced
    # inside it.
    if _xla_root(tf.compat.v1.get_default_graph()) is not root():
      raise outer_gradient_error(
          f'{name}() runs inside tf.function(jit_compile=True), and a '
          'gradient tape outside that function records its call', loc,
          hint='Take the gradient inside the compiled function (a '
          'tf.GradientTape within it, with max_steps= for a static trip '
          'count), or compile the function without jit_compile to take '
          'the gradient from outside.')
    return _guard(list(upstream), root, name, loc)

  @tf.custom_gradient
  def guarded(*xs):
    return list(xs), grad

  for i, x in zip(picked, guarded(*[flat[i] for i in picked])):
    flat[i] = x
  return tf.nest.pack_sequence_as(values, flat)


def _explain(error):
  """A clear error for TensorFlow's `error` where it is a known failure of
  a batched run under XLA; None for others."""
  if 'requires a fixed tensor list size' in str(error):
    return errors.BackendError(
        'XLA cannot compile the gradient of a batched run without '
        'max_steps (TensorFlow: "XLA compilation requires a fixed tensor '
        'list size")', hint=_MAX_STEPS_HINT)
  return None

# Trace id -> [sites of each batched run], for every live compiled
# function: a trace's record is dropped when the wrapper that made it is
# collected (`_forget`).  One registry, not one per wrapper: a caller may
# finish one wrapper's result with another's `finish` (`ab.shard` compiles
# one wrapper per device and finishes with the first).
_traces = {}
_trace_ids = itertools.count(1)
_lock = threading.Lock()


def _forget(trace_ids):
  """Drops the records of `trace_ids` (a collected wrapper's traces)."""
  with _lock:
    for trace_id in trace_ids:
      _traces.pop(trace_id, None)


def compile_nested_output(f, compile_fn=None):
  """Wraps `f` so that it runs XLA-compiled and returns nested outputs.

  Args:
    f: The callable to compile; it may take and return nested structures
      (tuples, lists, namedtuples, dicts) of tensors.
    compile_fn: Turns a Python callable into a compiled one; default
      `functools.partial(tf.function, jit_compile=True)`.  (TFP's version
      took `xla.compile`-style functions of `(f, inputs)`; TF 2 compiles
      with `tf.function(jit_compile=True)`, which keeps nested outputs.)

  Returns:
    A callable with `f`'s signature returning `f`'s outputs, which raises
    the error of any batched run inside that failed (see module doc).
  """
  compile_fn = compile_fn or functools.partial(tf.function, jit_compile=True)
  trace_of_graph = weakref.WeakKeyDictionary()
  own_traces = []   # this wrapper's trace ids, forgotten with it
  last = []

  def with_errors(*args, **kwargs):
    sink = []
    with tf_errors.collect_errors(sink):
      out = f(*args, **kwargs)
    with _lock:
      trace_id = next(_trace_ids)
      _traces[trace_id] = [sites for _, _, sites in sink]
      own_traces.append(trace_id)
    graph = tf.compat.v1.get_default_graph()
    try:
      trace_of_graph[graph] = trace_id
    except TypeError:
      pass
    last[:] = [trace_id]
    codes = [code for code, _, _ in sink]
    failed = [members for _, members, _ in sink]
    return out, (tf.constant(trace_id, tf.int32), codes, failed)

  compiled = compile_fn(tf_loop.traceable(
      with_errors, name=getattr(f, '__name__', None)))

  def graph_trace_id(args, kwargs):
    get = getattr(compiled, 'get_concrete_function', None)
    if get is not None:
      trace_id = trace_of_graph.get(get(*args, **kwargs).graph)
      if trace_id is not None:
        return trace_id
    return last[0]

  # Plain Python around the compiled function: AutoGraph need not convert it.
  @tf.autograph.experimental.do_not_convert
  @functools.wraps(f)
  def wrapper(*args, **kwargs):
    try:
      result = compiled(*args, **kwargs)
    except tf.errors.InvalidArgumentError as e:
      clear = _explain(e)
      if clear is None:
        raise
      raise clear from e
    if tf.executing_eagerly():
      return finish(result)
    out, (trace_id, codes, failed) = result
    if not codes:
      return out
    all_sites = _traces[graph_trace_id(args, kwargs)]
    checks = [tf.debugging.Assert(tf.not_equal(code, sites.base + k), [msg],
                                  summarize=1)
              for code, sites in zip(codes, all_sites)
              for k, msg in enumerate(sites.graph_messages())]
    with tf.control_dependencies(checks):
      return tf.nest.map_structure(
          lambda x: tf.identity(x) if tf.is_tensor(x) else x, out)

  def finish(result):
    """`f`'s outputs from an eager call's result, raising its error."""
    out, (trace_id, codes, failed) = result
    if codes:
      _raise_first_error(_traces[int(trace_id)], codes, failed)
    return out
  # For callers that call the compiled function themselves (`stage`, by
  # its concrete functions): the compiled function and the eager check.
  wrapper.compiled = compiled
  wrapper.finish = finish
  weakref.finalize(wrapper, _forget, own_traces)
  return wrapper


def _raise_first_error(all_sites, codes, failed):
  for code, members, sites in zip(codes, failed, all_sites):
    code = int(code)
    if code >= sites.base:
      raise sites.error(code, np.flatnonzero(np.asarray(members)))
