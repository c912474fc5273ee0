"""A batched call's arguments: their structure, conversion and types.

A call's arguments are patterns (tuples, lists, namedtuples) of arrays
whose axis 0 is the batch; a (nested) list of plain numbers is one array
(`map_arguments`).  `convert_arguments` turns them into the backend's
arrays of one batch size, following TFP's calling convention (a scalar is
a batch of one, a batch of one is broadcast); `argument_types` and
`batch_size` read the converted arguments; `default_backend` picks the
backend their type calls for.  The batched call and the dry run
(`dry_run`) both take their arguments so.

A plain Python number given as an argument (or taken as a default) is a
literal, as it is written in the function: weak (`python_scalars`,
`argument_types`), it takes the dtype of the data it meets (float32 data
stays float32, NumPy 2's rule for Python scalars, NEP 50), and alone it
is NumPy's dtype for it (int64, float64) on every backend.
"""

import numpy as np

from autobatch_vm import errors
from autobatch_vm.backends import numpy as numpy_backend
from autobatch_vm.ir import instructions as inst

__all__ = ['argument_types', 'batch_size', 'convert_arguments',
           'default_backend', 'map_arguments', 'name_argument_values',
           'python_scalars', 'shared_default']

_PY_NUMBERS = (bool, int, float, complex)


def _is_tf_value(x):
  mod = type(x).__module__ or ''
  return mod.startswith('tensorflow') or mod.startswith('tf_keras') or \
      mod.startswith('keras')


def default_backend(args):
  """Picks the backend a call's arguments call for.

  Args:
    args: The call's arguments (patterns of arrays or tensors).

  Returns:
    A `TensorFlowBackend()` if any leaf is a TensorFlow (or Keras) value,
    else a `NumpyBackend()`.
  """
  leaves = inst.pattern_flatten(args)
  if any(_is_tf_value(x) for x in leaves):
    from autobatch_vm.backends.tf import backend as tf_backend  # pylint: disable=g-import-not-at-top
    return tf_backend.TensorFlowBackend()
  return numpy_backend.NumpyBackend()


def convert_arguments(name, params, args, backend, loc):
  """Converts a call's arguments to backend arrays of one batch size.

  TFP's calling convention: every argument has a leading batch
  dimension; a scalar is promoted to shape `[1]`; an argument of batch
  size 1 is broadcast to the batch.  Tuples, namedtuples and lists are
  structure, except a (nested) list of plain numbers, which is one array
  (`_is_number_list`).  A plain Python number gets NumPy's dtype for it
  (int64, float64) on every backend: it is typed as a literal
  (`python_scalars`), which the program casts where it meets typed data.

  Args:
    name: The called function's name, for error messages.
    params: Its parameters' names, one per argument.
    args: The arguments, bound to the parameters (`bind_arguments`).
    backend: The backend whose arrays they become.
    loc: The function's `SourceLoc`, for error messages, or None.

  Returns:
    The list of converted arguments, each leaf a backend array whose axis
    0 is the batch, all of one batch size (or all of batch size 1).

  Raises:
    ArgumentError: If a leaf is not a boolean or numeric array, or the
      batch sizes differ.
  """
  out = []
  for p, a in zip(params, args):
    def convert(x, p=p):
      if x is None or isinstance(x, (str, bytes, dict, set)):
        raise errors.ArgumentError(
            f'argument {p!r} of {name}() is {type(x).__name__}, not an '
            'array', loc=loc, hint='Pass arrays whose axis 0 is the batch '
            '(or tuples/lists/namedtuples of them).')
      try:
        # NumPy's dtype for a Python number, the dtype of its weak type.
        v = backend.asarray(np.asarray(x) if type(x) in _PY_NUMBERS else x)
      except Exception as e:  # pylint: disable=broad-except
        raise errors.ArgumentError(
            f'argument {p!r} of {name}() cannot be converted to an array: '
            f'{e}', loc=loc, hint='Ragged lists are not arrays; pad them '
            'to a common shape.') from e
      if backend.dtype(v).kind not in 'biufc':
        raise errors.ArgumentError(
            f'argument {p!r} of {name}() has dtype {backend.dtype(v)}',
            loc=loc, hint='Only boolean and numeric arrays can be '
            'batched.')
      if len(backend.shape(v, batched=True)) == 0:
        v = backend.expand(v)  # a scalar is a batch of one
      return v
    out.append(map_arguments(convert, a))
  sizes = {}
  for p, a in zip(params, out):
    for leaf in inst.pattern_flatten(a):
      sizes.setdefault(backend.shape(leaf, batched=True)[0], p)
  wide = {s: p for s, p in sizes.items() if s != 1}
  # (None: a batch axis of unknown size while a graph is traced, which
  # the run reads at run time and coerces the other arguments to.)
  if len([s for s in wide if s is not None]) > 1:
    detail = ', '.join(f'{p!r}: {s}' for s, p in wide.items())
    raise errors.ArgumentError(
        f'arguments of {name}() have different batch sizes ({detail})',
        loc=loc, hint='Every argument needs the same leading (batch) '
        'dimension, or a batch dimension of 1 (or none: a scalar), which '
        'is broadcast to the batch.')
  if wide and 1 in sizes and None not in wide:
    (batch,) = wide
    rows = np.zeros(batch, np.int64)
    out = [inst.pattern_map(
        lambda v: backend.take_rows(v, rows)
        if backend.shape(v)[0] == 1 else v, a) for a in out]
  return out


def shared_default(value):
  """A parameter's default, taken by a call from outside, as a call argument.

  A default is the same value for every member, as each member called
  alone in plain Python takes it: each array leaf gets a leading batch
  axis of 1, which conversion broadcasts to the batch (a `[3]` weight
  vector is `[3]` per member, not a batch of 3 scalars).  Python numbers
  stay literals (already a scalar per member), `None` stays `None` (the
  variant without the parameter).

  Args:
    value: The parameter's default.

  Returns:
    `value` with each array leaf (`map_arguments`) a batch of one.
  """
  def leaf(x):
    if x is None or type(x) in _PY_NUMBERS or isinstance(
        x, (str, bytes, dict, set)):
      return x
    if _is_number_list(x):
      return [x]
    if isinstance(x, (np.ndarray, np.generic)):
      return np.expand_dims(x, 0)
    if hasattr(x, 'shape') and hasattr(x, '__getitem__'):
      return x[None]   # a tensor
    return x
  return map_arguments(leaf, value)


def python_scalars(args):
  """Marks the leaves of a call's arguments that are plain Python numbers.

  Args:
    args: The call's arguments, before conversion, one per parameter.

  Returns:
    One pattern per argument (`map_arguments`'s structure) of bools: True
    where the leaf is a Python `bool`, `int`, `float` or `complex`.
  """
  return [map_arguments(lambda x: type(x) in _PY_NUMBERS, a) for a in args]


def argument_types(args, backend, scalars=None):
  """Finds the input types of converted arguments.

  Args:
    args: Converted arguments (`convert_arguments`).
    backend: The backend whose `dtype` and `shape` read them.
    scalars: `python_scalars` of the arguments before conversion, or
      None (no Python numbers).

  Returns:
    One pattern of `TensorType` per argument, shapes without the batch
    dimension; the type of a Python number is weak, as a literal's.
  """
  def leaf(v, scalar=False):
    return inst.TensorType(backend.dtype(v), backend.shape(v, True)[1:],
                           weak=bool(scalar))
  if scalars is None:
    return [inst.pattern_map(leaf, a) for a in args]
  out = []
  for a, s in zip(args, scalars):
    try:
      out.append(inst.pattern_map2(leaf, a, s))
    except Exception:  # pylint: disable=broad-except
      out.append(inst.pattern_map(leaf, a))   # not of one structure
  return out


def batch_size(args, backend):
  """Reads the batch size of converted arguments.

  Args:
    args: Converted arguments (`convert_arguments`).
    backend: The backend whose `shape` reads them.

  Returns:
    The leading dimension of the arguments: an int, or a scalar tensor
    read at run time where it has no size while a graph is traced
    (`Backend.batch_size`); None where there is no leaf.
  """
  leaves = [leaf for a in args for leaf in inst.pattern_flatten(a)]
  sizes = [backend.shape(leaf, batched=True)[0] for leaf in leaves]
  if not leaves:
    return None
  for size in sizes:
    if size not in (None, 1):
      return size
  if None in sizes:
    return backend.batch_size(leaves[sizes.index(None)])
  return sizes[0]


def _is_number_list(x):
  """Whether `x` is a (nested) list of plain Python numbers (`bool`,
  `int`, `float`, `complex`): one array, not structure.  A list holding
  anything else -- arrays, tensors, NumPy scalars -- is structure, as in
  TFP (its NUTS passes the chain state and the step sizes so)."""
  if not isinstance(x, list) or not x:
    return False
  return all(_is_number_list(e) if isinstance(e, list)
             else type(e) in _PY_NUMBERS for e in x)


def map_arguments(f, arg):
  """Applies `f` to each leaf of a call argument.

  Tuples, namedtuples and lists are structure; a (nested) list of plain
  numbers (`_is_number_list`) is a leaf.

  Args:
    f: The function applied to each leaf.
    arg: A call argument.

  Returns:
    `arg` with each leaf replaced by `f` of it.
  """
  if _is_number_list(arg):
    return f(arg)
  if isinstance(arg, (tuple, list)):
    items = [map_arguments(f, a) for a in arg]
    if inst.is_namedtuple(arg):
      return type(arg)(*items)
    return type(arg)(items)
  return f(arg)


def name_argument_values(error, params, args):
  """`error`, with the values of the Python number arguments it names.

  Type inference names the arguments of main a type clash comes from
  (`error.arguments`); the call knows their values.

  Args:
    error: A `TypeInferenceError`.
    params: The called function's parameters.
    args: Its bound arguments, before conversion.

  Returns:
    A new error whose message ends with each named Python number
    argument's value, or `error` where it names none.
  """
  values = dict(zip(params, args))
  named = [f'{p}={values[p]!r}' for p in getattr(error, 'arguments', ())
           if p in values and type(values[p]) in _PY_NUMBERS]
  if not named:
    return error
  better = type(error)(f'{error.message} (this call: {", ".join(named)})',
                       loc=error.loc, hint=error.hint)
  better.arguments = error.arguments
  return better
