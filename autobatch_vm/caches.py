"""Bounded caches: the least recently used entry goes first.

Everything compiled is cached so that a repeated call costs nothing to
prepare: a Context's programs (typed, lowered, stackless) and compiled
blocks (`Context(cache_size=...)`), and, process-wide, the TensorFlow
backend's staged loops (`tf.function`s run for eager calls) and the
stackless executor's per-program tables.  Each is an `LRUCache` with a
bound, so a process that calls with ever new signatures keeps a fixed
number of them.

`Context.clear_caches()` empties a Context's cache and the process-wide
ones; `clear_caches()` here the process-wide ones only; `cache_info()`
counts their entries.  A process-wide cache registers itself
(`register`) where its module defines it, so only the caches of the parts
in use are listed.
"""

import collections
import threading

__all__ = ['LRUCache', 'register', 'clear_caches', 'cache_info']


class LRUCache(collections.abc.MutableMapping):
  """A dict that keeps at most `maxsize` entries, dropping the least used.

  Reading an entry (`cache[key]`, `get`) or writing it makes it the most
  recently used; `key in cache` does not.  Safe to share between threads.

  Args:
    maxsize: The most entries kept; None: no bound.
    items: Optional initial entries (a mapping or pairs), in order.
  """

  def __init__(self, maxsize=None, items=()):
    if maxsize is not None and (isinstance(maxsize, bool) or
                                not isinstance(maxsize, int) or maxsize < 1):
      raise ValueError(f'cache size must be a positive int or None, got '
                       f'{maxsize!r}')
    self._data = collections.OrderedDict()
    self._lock = threading.RLock()
    self._maxsize = maxsize
    self.evictions = 0
    self.update(items)

  @property
  def maxsize(self):
    """The most entries kept (None: no bound); setting it drops the excess."""
    return self._maxsize

  @maxsize.setter
  def maxsize(self, maxsize):
    with self._lock:
      LRUCache(maxsize)   # checks it
      self._maxsize = maxsize
      self._evict()

  def _evict(self):
    if self._maxsize is None:
      return
    while len(self._data) > self._maxsize:
      self._data.popitem(last=False)
      self.evictions += 1

  def __getitem__(self, key):
    with self._lock:
      value = self._data[key]
      self._data.move_to_end(key)
      return value

  def __setitem__(self, key, value):
    with self._lock:
      self._data[key] = value
      self._data.move_to_end(key)
      self._evict()

  def __delitem__(self, key):
    with self._lock:
      del self._data[key]

  def __contains__(self, key):
    return key in self._data

  def __iter__(self):
    with self._lock:
      return iter(list(self._data))

  def __len__(self):
    return len(self._data)

  def clear(self):
    with self._lock:
      self._data.clear()

  def __repr__(self):
    return (f'LRUCache(maxsize={self._maxsize}, entries={len(self._data)})')


_registry = {}   # name -> a process-wide LRUCache


def register(name, cache):
  """Lists a process-wide cache for `clear_caches` and `cache_info`.

  Args:
    name: Its name in `cache_info`.
    cache: The `LRUCache`.

  Returns:
    `cache`.
  """
  _registry[name] = cache
  return cache


def clear_caches():
  """Empties the process-wide caches (not a Context's: see
  `Context.clear_caches`)."""
  for cache in list(_registry.values()):
    cache.clear()


def cache_info():
  """The process-wide caches: name -> `{'entries': n, 'maxsize': m}`."""
  return {name: {'entries': len(c), 'maxsize': c.maxsize}
          for name, c in _registry.items()}
