"""Pickling batched functions, Contexts and their state for other processes.

A batched function, its Context, a `ContextState` (`Context.export_state`)
and a staged function pickle with `pickle` and with cloudpickle, so that
`multiprocessing`, Dask's `client.submit` and Ray take them as they take
plain functions.  An object goes one of two ways:

- By name.  A batched function that its module holds under its qualified
  name (a `@ctx.batch` def at module level), in a module the other side
  can import by name, pickles as that name, as a plain function does; the
  other side imports the module and finds it (its Context compiles there,
  once).  A Context whose functions all go by name pickles as the Context
  of one of them.  Plain `pickle` needs this way.
- By value.  Any other batched function (in a script's `__main__`, defined
  inside a function, in a module loaded from a path, or registered with
  `cloudpickle.register_pickle_by_value`) pickles as its Context and its
  name; the Context as a payload: its `export_state()` (its functions and
  the programs compiled so far) pickled with cloudpickle by the shipping
  pickler below, functions by value.  The other side builds a fresh
  Context from it (`Context.install_state`), whose calls of the shipped
  signatures run without compiling.  A process keeps the payloads it
  loaded last (by digest), so a payload unpickled again, in a later task,
  gives the same Context, which compiles at most once (a payload of
  another Context, however equal, gives another).

What cannot travel is rebuilt on first use: compiled blocks (cached by the
identity of objects of this process), locks, thread-local state, last
statistics, a staged function's `tf.function`s.

`shard`'s executor form ships its payloads with the same pickler
(`dumps`, `load`).  This module reaches the frontend's classes through the
`ContextPickling`, `FunctionPickling` and `StatePickling` bases they
inherit, so it imports nothing above it.
"""

import hashlib
import importlib
import importlib.machinery
import io
import linecache
import pickle
import sys
import threading
import types
import uuid

from autobatch_vm import caches
from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['ContextPickling', 'FunctionPickling', 'StatePickling', 'dumps',
           'load', 'importable', 'name_of', 'by_name']


# ---------------------------------------------------------------------------
# By name.
# ---------------------------------------------------------------------------

def importable(module_name):
  """Tells whether another process can import `module_name` by name.

  A module found on `sys.path`, built in or frozen can; a module loaded
  from a file path under another name cannot.

  Args:
    module_name: A module's `__name__`.

  Returns:
    True or False.
  """
  top = module_name.split('.')[0]
  if top in sys.builtin_module_names:
    return True
  spec = getattr(sys.modules.get(top), '__spec__', None)
  if spec is not None and spec.origin == 'frozen':
    return True
  return importlib.machinery.PathFinder.find_spec(top, sys.path) is not None


def _cloudpickle():
  try:
    import cloudpickle  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return cloudpickle


def _registered_by_value(module_name):
  """Whether cloudpickle pickles `module_name` (or a package above it) by
  value (`cloudpickle.register_pickle_by_value`)."""
  cloudpickle = sys.modules.get('cloudpickle')
  registry = getattr(cloudpickle, 'list_registry_pickle_by_value', None)
  if registry is None:
    return False
  names = registry()
  parts = module_name.split('.')
  return any('.'.join(parts[:i]) in names for i in range(1, len(parts) + 1))


def by_name(module_name, qualname):
  """Finds an object by its module and qualified name (unpickling by name).

  Args:
    module_name: The module, imported if need be.
    qualname: The object's qualified name in it (dotted).

  Returns:
    The object.
  """
  obj = importlib.import_module(module_name)
  for part in qualname.split('.'):
    obj = getattr(obj, part)
  return obj


def name_of(obj):
  """Tells under which name another process finds `obj`, if any.

  A script's `__main__` goes by value where cloudpickle is installed (a
  Dask or Ray worker has another `__main__`); without cloudpickle by name,
  which `multiprocessing` resolves in its workers.

  Args:
    obj: A batched function (or any object with `__module__` and
      `__qualname__`).

  Returns:
    (module, qualified name), or None where `obj` must go by value.
  """
  module_name = getattr(obj, '__module__', None)
  qualname = getattr(obj, '__qualname__', None)
  if not isinstance(module_name, str) or not isinstance(qualname, str):
    return None
  if '<locals>' in qualname or module_name not in sys.modules:
    return None
  if module_name == '__main__':
    if _cloudpickle() is not None:
      return None
  elif _registered_by_value(module_name) or not importable(module_name):
    return None
  found = sys.modules[module_name]
  for part in qualname.split('.'):
    found = getattr(found, part, None)
  return (module_name, qualname) if found is obj else None


# ---------------------------------------------------------------------------
# The reductions of the frontend's classes.
# ---------------------------------------------------------------------------

class FunctionPickling:
  """The pickling of a `BatchedFunction`, its base class.

  By name where `name_of` finds it, else as its Context and its name.
  """

  def __reduce__(self):
    name = name_of(self)
    if name is not None:
      return by_name, name
    return batched_of, (self.context, self.name)


class ContextPickling:
  """The pickling of a `Context`, its base class.

  As the Context of one of its functions where they all go by name, else
  by value: a payload of its `export_state()`.
  """

  def __reduce__(self):
    functions = list(self._functions.values())
    if functions and all(name_of(f) is not None for f in functions):
      return context_of, (functions[0],)
    # The same payload from another Context makes another Context there.
    token = self.__dict__.setdefault('_pickle_token', uuid.uuid4().bytes)
    return context_from_payload, (_context_payload(self), token)


class StatePickling:
  """The pickling of a `ContextState`, its base class.

  A payload of the shipping pickler: its programs hold primitives that
  only cloudpickle pickles.
  """

  def __reduce__(self):
    try:
      payload = dumps(pack_state(self), state=self)
    except ImportError:
      raise errors.ArgumentError(
          'A ContextState pickles with cloudpickle, which is not installed',
          hint='pip install cloudpickle (or autobatch_vm[distributed]).'
      ) from None
    return state_from_payload, (payload,)


def batched_of(context, name):
  """Batched function `name` of `context` (a batched function unpickled by
  value)."""
  return context._functions[name]  # pylint: disable=protected-access


def context_of(fn):
  """`fn`'s Context (a Context unpickled by name)."""
  return fn.context


def context_from_payload(payload, token=b''):
  """The Context a payload rebuilds: the same one for a payload of the
  same Context (`token`) loaded before in this process."""
  return load(payload, token)[0]


def state_from_payload(payload):
  """The `ContextState` a payload rebuilds."""
  return unpack_state(pickle.loads(payload))


def _context_payload(context):
  functions = list(context._functions)  # pylint: disable=protected-access
  loc = context.function_loc(functions[0]) if functions else None
  what = (f'{functions[0]} (its Context)' if functions else 'A Context')
  try:
    return dumps(context, context, context.export_state())
  except errors.AutoBatchError:
    raise
  except ImportError:
    raise errors.ArgumentError(
        f'{what} pickles by value, with cloudpickle, which is not '
        'installed', loc=loc,
        hint='pip install cloudpickle (or autobatch_vm[distributed]), or '
        'define the batched functions at the top level of a module that '
        'the other process can import: they then pickle by name.') from None
  except Exception as e:  # pylint: disable=broad-except
    raise errors.ArgumentError(
        f'{what} cannot be pickled: {type(e).__name__}: {e}', loc=loc,
        hint='Values that the batched functions and their primitives '
        'refer to must pickle (cloudpickle): module-level NumPy arrays '
        'and functions do; open files, locks and TensorFlow objects do '
        'not.') from e


# ---------------------------------------------------------------------------
# The shipping pickler.
# ---------------------------------------------------------------------------

_pickle_lock = threading.RLock()


def _new_context(cls, debug, cache_size, block_exits=False):
  return cls(debug=debug, cache_size=cache_size, block_exits=block_exits)


def _install_state(context, packed):
  context.install_state(unpack_state(packed))


def pack_state(state):
  """A `ContextState` as the shipping pickler sends it: its class,
  functions, programs, and the source lines of its functions' files.

  cloudpickle pickles a function's code without its file name, which the
  other side needs to compile the function from its source (a signature
  not shipped) and to name the file in its errors; `unpack_state` puts
  the names back, and the lines in `linecache` where the file cannot be
  read there.
  """
  sources = {}
  for name, (fn, *_) in state.functions.items():
    code = getattr(fn, '__code__', None)
    if code is None:
      continue
    lines = linecache.getlines(code.co_filename,
                               getattr(fn, '__globals__', None))
    sources[name] = (code.co_filename, tuple(lines))
  return type(state), state.functions, state.programs, sources


def unpack_state(packed):
  """The `ContextState` that `pack_state` packed, its functions' code
  named by their files again."""
  cls, functions, programs, sources = packed
  for name, (filename, lines) in sources.items():
    fn = functions[name][0]
    if fn.__code__.co_filename != filename:
      fn.__code__ = _named(fn.__code__, filename)
    if lines and not linecache.getlines(filename):
      linecache.cache[filename] = (sum(map(len, lines)), None, list(lines),
                                   filename)
  return cls(functions=functions, programs=programs)


def _named(code, filename):
  """`code`, and the code objects in it, with file name `filename`."""
  consts = tuple(_named(c, filename) if isinstance(c, types.CodeType)
                 else c for c in code.co_consts)
  return code.replace(co_filename=filename, co_consts=consts)


def _new_batched(cls):
  return cls.__new__(cls)


def shipping_pickler(context=None, state=None):
  """A cloudpickle `Pickler` class for payloads of `context`.

  `context` pickles as `state`, its `ContextState` (a fresh Context of the
  same class is made on the other side and the state installed in it);
  its batched functions without their last statistics; other Contexts and
  their functions by their own reductions (by name or as a payload).

  Args:
    context: The Context shipped, or None.
    state: Its `export_state(...)`, with `context`.

  Returns:
    The `Pickler` class.
  """
  import cloudpickle  # pylint: disable=g-import-not-at-top

  class Pickler(cloudpickle.Pickler):

    def reducer_override(self, obj):
      if context is not None:
        if obj is context:
          size = obj._cache.maxsize  # pylint: disable=protected-access
          return (_new_context, (type(obj), bool(obj.debug), size,
                                 bool(getattr(obj, 'block_exits', False))),
                  pack_state(state), None, None, _install_state)
        if (isinstance(obj, FunctionPickling) and
            getattr(obj, 'context', None) is context):
          return (_new_batched, (type(obj),),
                  dict(obj.__dict__, last_stats=None))
      if isinstance(obj, inst.FrozenDict):   # immutable: rebuilt from items
        return (inst.FrozenDict, (dict(obj),))
      return super().reducer_override(obj)

  return Pickler


def dumps(obj, context=None, state=None):
  """Pickles `obj` for another process, with cloudpickle.

  The pickler is `shipping_pickler`'s; the modules of the functions of
  `state` go by value where the other side cannot import them by name.

  Args:
    obj: What to pickle.
    context: A Context that pickles as `state`, or None.
    state: Its `ContextState` (`export_state(...)`), or None.

  Returns:
    The pickled bytes.

  Raises:
    ImportError: If cloudpickle is not installed.
  """
  by_value = []
  if state is not None:
    names = {getattr(fn, '__module__', None)
             for fn, *_ in state.functions.values()}
    for name in sorted(n for n in names if n):
      if name != '__main__' and name in sys.modules and not importable(name):
        by_value.append(sys.modules[name])
  pickler = shipping_pickler(context, state)
  import cloudpickle  # pylint: disable=g-import-not-at-top
  with _pickle_lock:
    registered = []
    try:
      for module in by_value:
        if not _registered_by_value(module.__name__):
          cloudpickle.register_pickle_by_value(module)
          registered.append(module)
      buffer = io.BytesIO()
      pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
      return buffer.getvalue()
    finally:
      for module in registered:
        cloudpickle.unregister_pickle_by_value(module)


# Payload digest -> what it unpickled to: a process keeps the few payloads
# it loaded last.
_LOADED = caches.register('unpickled payloads', caches.LRUCache(8))


def load(payload, token=b''):
  """Unpickles a payload of `dumps`, once per process while it is kept.

  Args:
    payload: The pickled bytes.
    token: Bytes that tell equal payloads of different senders apart.

  Returns:
    (the object, whether this call unpickled it).
  """
  key = token + hashlib.sha1(payload).digest()
  found = _LOADED.get(key, _LOADED)
  if found is not _LOADED:
    return found, False
  obj = pickle.loads(payload)
  _LOADED[key] = obj
  return obj, True
