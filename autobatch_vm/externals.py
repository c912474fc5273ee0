"""The values from outside a program that its primitives read.

A primitive reads the user's globals and closure variables when it runs
(`TABLE[i]`, `x + OFFSET`).  A run staged into a graph that is cached
across calls (the TensorFlow backend's eager path runs a `tf.function`
traced once per program) holds their values as of its trace: a NumPy
array or a number changed afterwards (rebound, or written in place) would
be read stale.  `fingerprint(program)` identifies those values now, and
the cached run is keyed by it (`current`, a context variable set around
the run), so a changed value retraces.

What is seen: the globals and closure variables that the primitives'
code names, in its nested code too (comprehensions, lambdas); the same of
the plain Python functions it calls (helpers, and theirs, `_MAX_CODES`
code objects at most), outside the libraries of `_LIBRARIES`; an
object's attributes that the code names (`cfg.scale`); and the numbers and
arrays in lists, tuples and dicts (`PARAMS['a']`).  Arrays of up to
`_HASHED_BYTES` are compared by their bytes, larger ones by identity,
shape and dtype; eager tensors, immutable, by identity.
"""

import contextvars
import hashlib
import numbers
import types as pytypes
import weakref

import numpy as np

from autobatch_vm.ir import instructions as inst

__all__ = ['fingerprint', 'types', 'reads_numpy_floats', 'current']

# The fingerprint of the run in progress (None: none taken), which a
# cached staged run is keyed by.
current = contextvars.ContextVar('autobatch_vm_external_values',
                                 default=None)

_HASHED_BYTES = 1 << 20
# Code objects followed from one program's primitives, at most.
_MAX_CODES = 256
# Items of a list, tuple or dict keyed, at most (beyond: by identity).
_MAX_ITEMS = 1024
# Top-level packages whose functions are not followed: their globals are
# the libraries' own.
_LIBRARIES = frozenset({
    'numpy', 'tensorflow', 'keras', 'tf_keras', 'jax', 'jaxlib', 'scipy',
    'autobatch_vm', 'absl', 'builtins', 'math', 'functools', 'typing'})
# id(owner) -> (a weak reference to it, the sources its code reads: see
# `_Reader`), for a program or a primitive's function; programs need not
# be hashable.
_SOURCES = {}


def fingerprint(program):
  """What identifies the arrays and numbers `program`'s primitives read
  from outside it, now: a hashable tuple.

  Args:
    program: A `Program` or a `LoweredProgram`.

  Returns:
    The tuple (empty where they read none).
  """
  return _keyed(_program_sources(program), _value_key)


def types(program):
  """The types (dtype and shape, or a number's type) of the arrays,
  numbers and tensors `program`'s primitives read from outside it, now: a
  hashable tuple, which type inference's results depend on.

  Args:
    program: A `Program` or a `LoweredProgram`.

  Returns:
    The tuple (empty where they read none).
  """
  return _keyed(_program_sources(program), _type_key)


def reads_numpy_floats(function):
  """Whether `function` (a primitive's) reads, from outside it, a NumPy
  array or scalar of floats or complex numbers, now (TensorFlow's
  operators cast such a value to an integer tensor's dtype, truncating).

  Args:
    function: A Python function.

  Returns:
    A bool.
  """
  try:
    sources = _sources_of(function, lambda: [
        getattr(function, 'member_function', function)])
  except TypeError:   # no weak references to it
    return False
  return any(_holds_numpy_floats(value) for _, value in _values(sources))


def _keyed(sources, key_of):
  """`(name, key_of(value))` of each source's value now that has a key."""
  out = []
  for name, value in _values(sources):
    key = key_of(value)
    if key is not None:
      out.append((name, key))
  return tuple(out)


def _holds_numpy_floats(value, depth=0):
  if isinstance(value, (np.ndarray, np.generic)):
    return value.dtype.kind in 'fc'
  if isinstance(value, (list, tuple, dict)) and depth <= 4 and (
      len(value) <= _MAX_ITEMS):
    items = value.values() if isinstance(value, dict) else value
    return any(_holds_numpy_floats(v, depth + 1) for v in items)
  return False


def _sources_of(owner, functions):
  """`_Reader().read` of `functions()`, cached while `owner` lives.

  Raises:
    TypeError: `owner` takes no weak reference.
  """
  key = id(owner)
  entry = _SOURCES.get(key)
  if entry is None or entry[0]() is not owner:
    ref = weakref.ref(owner, lambda _: _SOURCES.pop(key, None))
    entry = (ref, _Reader().read(functions()))
    _SOURCES[key] = entry
  return entry[1]


def _program_sources(program):
  """The sources of `program`'s primitives (`_sources_of`)."""
  return _sources_of(program, lambda: _primitive_functions(program))


def _values(sources):
  """(name, value now) of each source."""
  for kind, where, name in sources:
    if kind == 'global':
      yield name, where.get(name, None)
    elif kind == 'attribute':
      yield name, getattr(where, name, None)
    else:
      try:
        yield name, where.cell_contents
      except ValueError:   # an empty cell
        continue


def _primitive_functions(program):
  """The Python functions of `program`'s primitives."""
  blocks = getattr(program, 'blocks', None)
  if blocks is None:   # a `Program`: its functions' blocks
    blocks = [b for fn in program.functions for b in fn.blocks]
  return [getattr(op.function, 'member_function', op.function)
          for block in blocks for op in block.instructions
          if isinstance(op, inst.PrimOp)]


class _Reader:
  """Walks functions' code for the values from outside it reads."""

  def __init__(self):
    self.seen = set()
    self.codes = 0
    self.out = []

  def read(self, functions):
    pending = list(functions)
    while pending and self.codes < _MAX_CODES:
      fn = pending.pop(0)
      if id(fn) in self.seen:
        continue
      self.seen.add(id(fn))
      code = getattr(fn, '__code__', None)
      if code is None:
        continue
      namespace = getattr(fn, '__globals__', None) or {}
      cells = dict(zip(code.co_freevars,
                       getattr(fn, '__closure__', None) or ()))
      for code in _nested(code):
        self.codes += 1
        attributes = set(code.co_names)
        for name in code.co_names:
          if name in namespace:
            self._add(('global', namespace, name), (id(namespace), name),
                      namespace[name], attributes, pending)
        for name in code.co_freevars:
          cell = cells.get(name)
          if cell is None:
            continue
          try:
            value = cell.cell_contents
          except ValueError:   # an empty cell
            value = None
          self._add(('cell', cell, name), id(cell), value, attributes,
                    pending)
    return self.out

  def _add(self, source, key, value, attributes, pending):
    if key not in self.seen:
      self.seen.add(key)
      self.out.append(source)
    if _followed(value):
      pending.append(value)
    elif _has_attributes(value):
      for name in attributes & set(vars(value)):
        if (id(value), name) not in self.seen:
          self.seen.add((id(value), name))
          self.out.append(('attribute', value, name))


def _nested(code):
  """`code` and the code objects nested in it (comprehensions, lambdas,
  inner functions)."""
  out, pending = [], [code]
  while pending:
    code = pending.pop()
    out.append(code)
    pending.extend(c for c in code.co_consts if isinstance(c, pytypes.CodeType))
  return out


def _followed(value):
  """Whether `value` is a plain Python function outside the libraries."""
  if not isinstance(value, pytypes.FunctionType):
    return False
  module = (getattr(value, '__module__', None) or '').split('.')[0]
  return module not in _LIBRARIES


def _has_attributes(value):
  """Whether `value` is an object whose attributes the code may read
  (not a module, class or function)."""
  return (hasattr(value, '__dict__') and not isinstance(
      value, (pytypes.ModuleType, type, pytypes.FunctionType,
              pytypes.BuiltinFunctionType, pytypes.MethodType)))


def _value_key(value, depth=0):
  """What identifies an array or a number's value, or a list's, tuple's
  or dict's holding some; None for anything else (modules, functions,
  tensors)."""
  if isinstance(value, np.ndarray):
    if value.nbytes <= _HASHED_BYTES:
      digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(),
                               digest_size=16).digest()
      return ('array', value.shape, value.dtype.str, digest)
    return ('array', id(value), value.shape, value.dtype.str)
  if isinstance(value, (bool, numbers.Number, np.generic)):
    return ('number', type(value).__name__, repr(value))   # NaN too
  if _is_eager_tensor(value):
    # Immutable, and held by the staged run that captured it: a rebound
    # name is a new identity.
    return ('tensor', id(value))
  if isinstance(value, (list, tuple, dict)):
    return _container_key(value, depth, _value_key)
  return None


def _type_key(value, depth=0):
  """What identifies the type of an array, number or tensor (or of a
  list's, tuple's or dict's holding some); None for anything else."""
  if isinstance(value, np.ndarray):
    return ('array', value.shape, value.dtype.str)
  if isinstance(value, np.generic):
    return ('scalar', value.dtype.str)
  if isinstance(value, (bool, numbers.Number)):
    return ('number', type(value).__name__)
  if _is_eager_tensor(value):
    return ('tensor', tuple(value.shape), value.dtype.name)
  if isinstance(value, (list, tuple, dict)):
    return _container_key(value, depth, _type_key, named=False)
  return None


def _container_key(value, depth, key_of, named=True):
  """A list's, tuple's or dict's key from `key_of` of its items (and, if
  `named`, a dict's keys), or None where no item has one; beyond
  `_MAX_ITEMS` items or nested deeper than 4, its identity and length."""
  if len(value) > _MAX_ITEMS or depth > 4:
    return ('container', id(value), len(value))
  items = value.values() if isinstance(value, dict) else value
  keys = [key_of(v, depth + 1) for v in items]
  if all(k is None for k in keys):
    return None
  if named and isinstance(value, dict):
    keys = zip(map(repr, value), keys)
  return (type(value).__name__, tuple(keys))


def _is_eager_tensor(value):
  """Whether `value` is an eager TensorFlow tensor (without importing
  TensorFlow: this module is below the backends)."""
  kind = type(value)
  return (kind.__name__ == 'EagerTensor'
          and kind.__module__.startswith('tensorflow'))
