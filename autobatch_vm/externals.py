"""The values from outside a program that its primitives read.

A primitive reads the user's globals and closure variables when it runs
(`TABLE[i]`, `x + OFFSET`).  A run staged into a graph that is cached
across calls (the TensorFlow backend's eager path runs a `tf.function`
traced once per program) holds their values as of its trace: a NumPy
array or a number changed afterwards (rebound, or written in place) would
be read stale.  `fingerprint(program)` identifies those values now, and
the cached run is keyed by it (`current`, a context variable set around
the run), so a changed value retraces.

Only what the primitives' own code names is seen (a helper's globals,
an object's attribute are not); arrays of up to `_HASHED_BYTES` are
compared by their bytes, larger ones by identity, shape and dtype.
"""

import contextvars
import hashlib
import numbers
import weakref

import numpy as np

from autobatch_vm.ir import instructions as inst

__all__ = ['fingerprint', 'current']

# The fingerprint of the run in progress (None: none taken), which a
# cached staged run is keyed by.
current = contextvars.ContextVar('autobatch_vm_external_values',
                                 default=None)

_HASHED_BYTES = 1 << 20
# id(program) -> (a weak reference to it, the (namespace, name) and
# closure cells its primitives read); programs need not be hashable.
_SOURCES = {}


def fingerprint(program):
  """What identifies the arrays and numbers `program`'s primitives read
  from outside it, now: a hashable tuple.

  Args:
    program: A `Program` or a `LoweredProgram`.

  Returns:
    The tuple (empty where they read none).
  """
  key = id(program)
  entry = _SOURCES.get(key)
  if entry is None or entry[0]() is not program:
    entry = (weakref.ref(program, lambda _: _SOURCES.pop(key, None)),
             _sources(program))
    _SOURCES[key] = entry
  sources = entry[1]
  out = []
  for kind, where, name in sources:
    if kind == 'global':
      value = where.get(name, None)
    else:
      try:
        value = where.cell_contents
      except ValueError:   # an empty cell
        continue
    key = _value_key(value)
    if key is not None:
      out.append((name, key))
  return tuple(out)


def _sources(program):
  """The globals (namespace, name) and closure cells that `program`'s
  primitives' own code reads."""
  seen, out = set(), []
  blocks = getattr(program, 'blocks', None)
  if blocks is None:   # a `Program`: its functions' blocks
    blocks = [b for fn in program.functions for b in fn.blocks]
  for block in blocks:
    for op in block.instructions:
      if not isinstance(op, inst.PrimOp):
        continue
      code_fn = getattr(op.function, 'member_function', op.function)
      code = getattr(code_fn, '__code__', None)
      if code is None:
        continue
      namespace = getattr(code_fn, '__globals__', {})
      for name in code.co_names:
        if name in namespace and (id(namespace), name) not in seen:
          seen.add((id(namespace), name))
          out.append(('global', namespace, name))
      for name, cell in zip(code.co_freevars,
                            getattr(code_fn, '__closure__', None) or ()):
        if id(cell) not in seen:
          seen.add(id(cell))
          out.append(('cell', cell, name))
  return out


def _value_key(value):
  """What identifies an array or a number's value; None for anything
  else (modules, functions, tensors)."""
  if isinstance(value, np.ndarray):
    if value.nbytes <= _HASHED_BYTES:
      digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(),
                               digest_size=16).digest()
      return ('array', value.shape, value.dtype.str, digest)
    return ('array', id(value), value.shape, value.dtype.str)
  if isinstance(value, (bool, numbers.Number, np.generic)):
    return ('number', type(value).__name__, repr(value))   # NaN too
  return None
