"""XLA utilities: `compile_nested_output` (named after TFP's).

XLA cannot raise an error at run time: it drops `tf.debugging.Assert`.  A
batched run inside `tf.function(jit_compile=True)` that overflows its stack
(or fails an `assert`) therefore cannot stop the computation; it poisons
its outputs instead (NaN for floats, the dtype's minimum for integers).
`compile_nested_output` compiles a function with XLA *and* returns, next to
its outputs, the error codes of every batched run inside; after the
compiled function returns, outside XLA, it raises the error the run would
have raised eagerly (`errors.StackOverflowError`, naming the members, or
`errors.AssertionFailedError`).  Called inside a `tf.function`, the check is
a `tf.debugging.Assert` that fails the call with the same message.
"""

import functools
import itertools
import threading
import warnings
import weakref

import numpy as np
import tensorflow as tf

from autobatch_vm import errors
from autobatch_vm import tf_backend
from autobatch_vm.backends.tf import masks

__all__ = ['compile_nested_output', 'warn_if_gradient_needs_max_steps']

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


def _explain(error):
  """A clear error for TensorFlow's `error` where it is a known failure of
  a batched run under XLA; None for others."""
  if 'requires a fixed tensor list size' in str(error):
    return errors.BackendError(
        'XLA cannot compile the gradient of a batched run without '
        'max_steps (TensorFlow: "XLA compilation requires a fixed tensor '
        'list size")', hint=_MAX_STEPS_HINT)
  return None

_traces = {}                 # trace id -> [sites of each batched run]
_trace_ids = itertools.count(1)
_lock = threading.Lock()


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
  last = []

  def with_errors(*args, **kwargs):
    sink = []
    with tf_backend.collect_errors(sink):
      out = f(*args, **kwargs)
    with _lock:
      trace_id = next(_trace_ids)
      _traces[trace_id] = [sites for _, _, sites in sink]
    graph = tf.compat.v1.get_default_graph()
    try:
      trace_of_graph[graph] = trace_id
    except TypeError:
      pass
    last[:] = [trace_id]
    codes = [code for code, _, _ in sink]
    failed = [members for _, members, _ in sink]
    return out, (tf.constant(trace_id, tf.int32), codes, failed)

  compiled = compile_fn(tf_backend.traceable(
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
  return wrapper


def _raise_first_error(all_sites, codes, failed):
  for code, members, sites in zip(codes, failed, all_sites):
    code = int(code)
    if code >= sites.base:
      raise sites.error(code, np.flatnonzero(np.asarray(members)))
