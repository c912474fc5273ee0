"""Patterns: nested tuples, lists and namedtuples with leaves of any kind.

A variable's value, a function's result and an instruction's outputs are
patterns (`x | tuple(pattern*) | list(pattern*) | namedtuple`); these
functions map, zip, flatten and rebuild them.  They know nothing of the
IR; `instructions` re-exports them.
"""

__all__ = [
    'pattern_map', 'pattern_map2', 'pattern_zip', 'pattern_flatten',
    'pattern_traverse', 'pattern_paths', 'pattern_unflatten',
    'is_namedtuple',
]


def is_namedtuple(x):
  """Tells whether `x` is a namedtuple (a pattern node rebuilt by field).

  Args:
    x: Any value.

  Returns:
    True if `x` is a tuple whose type has `_fields`.
  """
  return isinstance(x, tuple) and hasattr(type(x), '_fields')


def _is_node(x, leaf_type):
  if leaf_type is not None and isinstance(x, leaf_type):
    return False
  return isinstance(x, (tuple, list))


def _rebuild(template, items):
  if is_namedtuple(template):
    return type(template)(*items)
  if isinstance(template, list):
    return list(items)
  return tuple(items)


def pattern_map(f, pattern, leaf_type=None):
  """Applies `f` to every leaf of `pattern`, keeping its structure.

  Args:
    f: A function of one leaf.
    pattern: A leaf, or a tuple, list or namedtuple of patterns.
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Returns:
    A pattern of the same structure holding `f` of each leaf.
  """
  if _is_node(pattern, leaf_type):
    return _rebuild(pattern, [pattern_map(f, p, leaf_type) for p in pattern])
  return f(pattern)


def pattern_map2(f, pattern1, pattern2, leaf_type=None):
  """Applies `f` to corresponding leaves of two same-structured patterns.

  Args:
    f: A function of two leaves.
    pattern1: A pattern; its structure is kept.
    pattern2: A pattern of the same structure (down to `pattern1`'s
      leaves, which may face subpatterns here).
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Returns:
    A pattern of `pattern1`'s structure holding `f(leaf1, leaf2)`.

  Raises:
    ValueError: If the structures differ.
  """
  if _is_node(pattern1, leaf_type):
    if not _is_node(pattern2, leaf_type) or len(pattern1) != len(pattern2):
      raise ValueError(
          f'Patterns do not match: {pattern1!r} vs {pattern2!r}')
    return _rebuild(pattern1, [pattern_map2(f, a, b, leaf_type)
                               for a, b in zip(pattern1, pattern2)])
  return f(pattern1, pattern2)


def pattern_zip(pattern1, pattern2, leaf_type=None):
  """Yields the corresponding leaves of two patterns, pair by pair (TFP's).

  The pairs come flat, in depth-first order of `pattern1`; where
  `pattern1` has a leaf, the pair holds whatever `pattern2` has there (a
  leaf or a subpattern).  Use `pattern_map2(lambda a, b: (a, b), ...)` for
  the pairs in `pattern1`'s structure.

  Args:
    pattern1: A pattern.
    pattern2: A pattern of the same structure (down to `pattern1`'s
      leaves, which may face subpatterns here).
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Yields:
    `(leaf1, item2)`: a leaf of `pattern1` and what `pattern2` holds at
    its place.

  Raises:
    ValueError: If the structures differ (as the pairs are taken).
  """
  if _is_node(pattern1, leaf_type):
    if not _is_node(pattern2, leaf_type) or len(pattern1) != len(pattern2):
      raise ValueError(
          f'Patterns do not match: {pattern1!r} vs {pattern2!r}')
    for a, b in zip(pattern1, pattern2):
      yield from pattern_zip(a, b, leaf_type)
  else:
    yield pattern1, pattern2


def pattern_flatten(pattern, leaf_type=None):
  """Lists the leaves of `pattern` in depth-first order.

  Args:
    pattern: A leaf, or a tuple, list or namedtuple of patterns.
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Returns:
    A list of the leaves.
  """
  if _is_node(pattern, leaf_type):
    out = []
    for p in pattern:
      out.extend(pattern_flatten(p, leaf_type))
    return out
  return [pattern]


def pattern_unflatten(template, leaves, leaf_type=None):
  """Refills `template`'s structure with `leaves` (`pattern_flatten`'s inverse).

  Args:
    template: A pattern whose structure the result takes.
    leaves: An iterable of as many leaves as `template` has.
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Returns:
    A pattern of `template`'s structure holding `leaves` in order.

  Raises:
    ValueError: If leaves are left over (`StopIteration` if too few).
  """
  it = iter(leaves)
  result = pattern_map(lambda _: next(it), template, leaf_type)
  remaining = list(it)
  if remaining:
    raise ValueError(f'{len(remaining)} leaves left over unflattening.')
  return result


def pattern_traverse(pattern, leaf_type=None):
  """Walks the leaves of `pattern` in depth-first order (TFP's).

  Args:
    pattern: A leaf, or a tuple, list or namedtuple of patterns.
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Yields:
    Every leaf, in the order `pattern_flatten` lists them.
  """
  for _, leaf in pattern_paths(pattern, leaf_type):
    yield leaf


def pattern_paths(pattern, leaf_type=None):
  """Walks the leaves of `pattern` in depth-first order, with their places.

  Args:
    pattern: A leaf, or a tuple, list or namedtuple of patterns.
    leaf_type: A type (or tuple of types) whose instances are leaves even
      where they are tuples or lists, or None.

  Yields:
    `(path, leaf)` for every leaf; `path` is a tuple of indices.
  """
  if _is_node(pattern, leaf_type):
    for i, p in enumerate(pattern):
      for path, leaf in pattern_paths(p, leaf_type):
        yield (i,) + path, leaf
  else:
    yield (), pattern
