"""Whether a primitive may draw random numbers, and pinning what it draws.

The member-mixing check (`member_mixing`) runs a primitive several times
and compares results; a primitive whose results differ from run to run
(random draws) can agree by chance and look as if it read another
member's values.  Before it refuses a primitive the check asks this
module:

- `python_randomness(fn)` walks the Python objects a function reaches
  (its code's global and attribute names, closures, defaults, bound
  objects, the functions those reach, a few levels deep) and reports
  whether any of them draws at random: names such as `random`, `rng`,
  `seed` or `sample`, NumPy `Generator` / `RandomState` / `BitGenerator`,
  Python's `random.Random`, TensorFlow's `tf.random.Generator`, TFP's
  `SeedStream`.  It errs towards "random": a wrong "random" only
  downgrades a refusal to a warning.
- `RngPin` holds the states of the generators found that can be read
  and restored (NumPy's global and Python's global generators, and each
  NumPy or Python generator object found), so that a primitive runs on
  the same draws each time it is compared, and the user's generators are
  left where they were.

The TensorFlow backend adds what its traced graph shows
(`Backend.draws_at_random`): stateful and stateless random ops, which no
Python name need mention.
"""

import random as _py_random
import types

import numpy as np

__all__ = ['RngPin', 'python_randomness']

# Substrings of a code's global or attribute names that suggest a random
# draw (`np.random.normal`, `rng.integers`, `seed_stream()`,
# `dist.sample()`, `tfp.random.rademacher`).
_RANDOM_WORDS = ('random', 'rng', 'seed', 'sample', 'rademacher', 'shuffle',
                 'permutation', 'choice', 'randint', 'randn', 'urandom',
                 'stateless', 'stateful', 'bernoulli', 'multinomial',
                 'categorical', 'dropout', 'generator')

# Types whose state can be pinned, with how to read and restore it.
_PINNABLE = (
    (np.random.Generator,
     lambda g: g.bit_generator.state,
     lambda g, s: setattr(g.bit_generator, 'state', s)),
    (np.random.BitGenerator,
     lambda g: g.state,
     lambda g, s: setattr(g, 'state', s)),
    (np.random.RandomState,
     lambda g: g.get_state(),
     lambda g, s: g.set_state(s)),
    (_py_random.Random,
     lambda g: g.getstate(),
     lambda g, s: g.setstate(s)),
)

# How far the walk goes from the function, and how many objects it visits.
_MAX_DEPTH = 4
_MAX_OBJECTS = 2000
_MAX_ITEMS = 64


class _Walk:
  """The objects reachable from a function, and what they show."""

  def __init__(self):
    self.seen = set()
    self.random = False
    self.generators = []

  def visit(self, obj, depth):
    if depth > _MAX_DEPTH or id(obj) in self.seen or (
        len(self.seen) > _MAX_OBJECTS):
      return
    self.seen.add(id(obj))
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes,
                                       np.ndarray, np.generic, type(...))):
      return
    for kind, _, _ in _PINNABLE:
      if isinstance(obj, kind):
        self.random = True
        self.generators.append(obj)
        return
    if isinstance(obj, np.random.SeedSequence):
      self.random = True
      return
    if isinstance(obj, types.ModuleType):
      name = obj.__name__.lower()
      if any(word in name for word in _RANDOM_WORDS):
        self.random = True
      return
    kind = type(obj)
    if _random_class(kind):
      self.random = True   # tf.random.Generator, TFP's SeedStream
      return
    if isinstance(obj, types.FunctionType):
      self.function(obj, depth)
    elif isinstance(obj, (types.MethodType, types.BuiltinMethodType)):
      self.visit(getattr(obj, '__func__', None), depth)
      self.visit(getattr(obj, '__self__', None), depth + 1)
    elif isinstance(obj, (tuple, list, set, frozenset)):
      for item in list(obj)[:_MAX_ITEMS]:
        self.visit(item, depth + 1)
    elif isinstance(obj, dict):
      for item in list(obj.values())[:_MAX_ITEMS]:
        self.visit(item, depth + 1)
    elif isinstance(obj, type):
      if _random_class(obj) or any(
          word in obj.__name__.lower() for word in ('random', 'seed')):
        self.random = True
    else:
      func = getattr(obj, 'func', None)   # functools.partial
      if callable(func):
        self.visit(func, depth)
        self.visit(getattr(obj, 'args', ()), depth + 1)
        self.visit(getattr(obj, 'keywords', None) or {}, depth + 1)
      fields = getattr(obj, '__dict__', None)
      if isinstance(fields, dict):
        for item in list(fields.values())[:_MAX_ITEMS]:
          self.visit(item, depth + 1)
      call = getattr(kind, '__call__', None)
      if isinstance(call, types.FunctionType):
        self.function(call, depth + 1)

  def function(self, fn, depth):
    names = set()
    _code_names(fn.__code__, names)
    lowered = {n.lower() for n in names}
    if any(word in name for name in lowered for word in _RANDOM_WORDS):
      self.random = True
    for cell in fn.__closure__ or ():
      try:
        self.visit(cell.cell_contents, depth + 1)
      except ValueError:   # an empty cell
        pass
    self.visit(fn.__defaults__, depth + 1)
    self.visit(fn.__kwdefaults__, depth + 1)
    globs = fn.__globals__
    for name in sorted(names):
      if name in globs:
        value = globs[name]
        if not isinstance(value, types.ModuleType) or (
            any(word in value.__name__.lower() for word in _RANDOM_WORDS)):
          self.visit(value, depth + 1)


def _random_class(kind):
  """Whether `kind` is a generator class of a library (TensorFlow's
  `tf.random.Generator`, TFP's `SeedStream`), by its name and module."""
  module = (getattr(kind, '__module__', None) or '').split('.')[0]
  name = getattr(kind, '__name__', '')
  return (name == 'SeedStream' or
          (name == 'Generator' and module in ('tensorflow', 'keras')))


def _code_names(code, names):
  """Adds the global and attribute names of `code` and its nested code."""
  names.update(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      _code_names(const, names)


def python_randomness(fn):
  """What the Python objects reachable from `fn` say about random draws.

  Args:
    fn: A primitive (a function, method, builtin or callable object).

  Returns:
    `(random, generators)`: whether anything reachable draws at random
    (or is named as if it did), and the generator objects found whose
    state can be pinned (see `RngPin`).
  """
  walk = _Walk()
  walk.visit(fn, 0)
  return walk.random, walk.generators


class RngPin:
  """Pins generators to the states they had when it was made.

  `reset()` puts every generator back to that state (so that each run of
  a primitive draws the same numbers); `restore()` does the same at the
  end, so that the user's generators are where they were before.
  NumPy's and Python's global generators are always included.

  Args:
    generators: Generator objects (`python_randomness`).
  """

  def __init__(self, generators=()):
    objects = [np.random.mtrand._rand, _py_random._inst] + list(generators)  # pylint: disable=protected-access
    self._states = []
    ids = set()
    for g in objects:
      if id(g) in ids:
        continue
      ids.add(id(g))
      for kind, get, put in _PINNABLE:
        if isinstance(g, kind):
          self._states.append((g, get(g), put))
          break

  def reset(self):
    """Puts every pinned generator back to its first state."""
    for g, state, put in self._states:
      put(g, state)

  restore = reset
