"""A per-member primitive: one member's function, callable on a batch.

The frontend compiles each primitive of a per-member function into a
`PerMemberFunction` (the `function` of a `PrimOp` with `per_member=True`).
The VM asks its backend for the batched form (`Backend.vectorize_member`,
which calls `batched(backend.name)`): on NumPy the batching rules of
`numpy_rules`, on TensorFlow pfor (`tf_vectorize`).  Called directly on
batched values (type inference, the checks that run primitives) it picks
the form by the values' kind.

Arguments that are the same for every member (Python numbers, which type
inference passes for literals) are not batched: the member function gets
them as they are.  A primitive whose arguments are all such values
computes one member's value; where it has arguments, that value gets a
batch axis of one (a Python number stays one, a literal, and so does an
item of a table of Python numbers: `_with_batch_axis`).

A user's mistake inside the member function (`errors.PerMemberError`, or
a tensor used where Python needs one bool) is raised at the primitive's
line.
"""

import linecache
import os
import sys
import warnings

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import patterns
from autobatch_vm.per_member import member_ops

__all__ = ['PerMemberFunction']

_NUMBERS = (int, float, bool, complex)
# NumPy's dtypes of Python numbers.
_LITERAL_DTYPES = frozenset(np.dtype(t) for t in _NUMBERS)


class PerMemberFunction:
  """A primitive written for one member, run on a batch.

  Args:
    member_function: The function of one member's values.
    loc: The `SourceLoc` of the primitive, or None.
    text: The primitive's source text.
    elementwise: Whether it computes element by element
      (`python_primitives.is_elementwise`): where every batched argument
      is a vector (each member's value a scalar), it then runs on them as
      it is, which costs what the batch-aware primitive costs.
    direct: On NumPy, what builds the primitive's plain NumPy form for
      a signature of batched arguments (`python.member_direct.DirectForms`:
      `form(key, member_function, loc)`, a function or None), run instead
      of the rules where it exists; or None.
    sizes: Where the primitive computes a size (`len(x)`, `x.shape[0]`,
      integer arithmetic on such sizes: `python.member_sizes`), per input
      `'shape'` (only its shape is read) or `'value'`; else None.

  Attributes:
    member_function: As given.
    loc: As given.
    text: As given.
    elementwise: As given.
    direct: As given.
    sizes: As given.
    constants: Input position -> the Python int every member has there
      (`with_constants`), passed instead of the batched input.
    fallbacks: Function name -> how many times it ran once per member
      (a NumPy function without a batching rule; a TensorFlow operation
      pfor has no rule for, counted when traced).
  """

  def __init__(self, member_function, loc=None, text='', elementwise=False,
               direct=None, sizes=None):
    self.member_function = member_function
    self.loc = loc
    self.text = text
    self.elementwise = elementwise
    self.direct = direct
    self.sizes = sizes
    self.constants = {}
    self.__name__ = getattr(member_function, '__name__', 'per_member')
    self.fallbacks = {}
    self._forms = {}
    self._warned = set()

  def __getstate__(self):
    state = dict(self.__dict__)
    state['_forms'] = {}
    return state

  def __repr__(self):
    return f'<per-member primitive {self.text or self.__name__}>'

  def __call__(self, *args):
    kind = 'tensorflow' if member_ops.is_tf(*_leaves(args)) else 'numpy'
    return self.batched(kind)(*args)

  def batched(self, backend_name):
    """The batched form of the primitive on a backend.

    Args:
      backend_name: `'numpy'` or `'tensorflow'`.

    Returns:
      A function of batched arguments (leading axis the batch) that
      returns the members' results with a leading batch axis.
    """
    form = self._forms.get(backend_name)
    if form is None:
      make = _tensorflow_form if backend_name == 'tensorflow' else (
          _numpy_form)
      form = self._located(make(self))
      if self.elementwise:
        form = _on_scalars(self.member_function, form, _rank)
      if self.constants:
        form = _given(form, self.constants, backend_name)
      self._forms[backend_name] = form
    return form

  def with_constants(self, constants):
    """This primitive with some inputs the same Python int for every member.

    A size computed in an earlier statement (`n = len(x)`) is one value
    for the signature (`passes.size_folding`); given as a Python int, not
    as a batched array, it can size an array (`np.zeros(n)`), as it does
    when one member runs alone.

    Args:
      constants: Input position -> its value, a Python int.

    Returns:
      A new `PerMemberFunction` that passes those values in place of the
      batched inputs at their positions (which it still takes).
    """
    bound = PerMemberFunction(self.member_function, self.loc, self.text,
                              self.elementwise, self.direct, self.sizes)
    bound.constants = {**self.constants, **constants}
    # The primitive as the frontend made it, which type inference's
    # registries know (its promoting form).
    bound.unbound = getattr(self, 'unbound', None) or self
    return bound

  def fallback(self, name, shaped=None):
    """Counts a function that ran once per member; warns once.

    Args:
      name: The function's name: a NumPy function without a batching
        rule, or a TensorFlow operation pfor runs in a loop (`tf.<op>`,
        counted when traced).
      shaped: What the operation makes (`'a slice'`) where it runs once
        per member because its bounds or sizes differ between members,
        else None.
    """
    self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
    _FALLBACKS[name] = _FALLBACKS.get(name, 0) + 1
    if name in self._warned:
      return
    self._warned.add(name)
    where = (f' at {self.loc.filename}, line {self.loc.line}'
             if self.loc is not None else '')
    if shaped:
      what = (f'{shaped.capitalize()} whose bounds or size differ between members in '
              f'`{self.text}`{where} ({name}): the primitive runs once '
              'per member (slower).  Kept or returned, a result whose shape '
              'differs between members is refused, as no batch holds it; a '
              'slice reduced in its statement (np.sum(v[:n])) is computed '
              'masked under XLA and on NumPy.  Pad to a fixed size and carry '
              'the length')
    else:
      what = (f'{name} has no per-member batching rule, so `{self.text}`'
              f'{where} runs it once per member (correct, slower)')
    warnings.warn_explicit(
        f'{what}; last_stats.per_member_fallbacks counts such runs',
        PerMemberFallbackWarning,
        filename=self.loc.filename if self.loc else '<autobatch_vm>',
        lineno=self.loc.line if self.loc else 0)

  def _helper_line(self, tb):
    """`' (in helper(), file, line N: ...)'`: where in a function the
    primitive calls (a user's helper) the mistake is, if it is not the
    primitive's own line; else ''."""
    where = None
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while tb is not None:
      code = tb.tb_frame.f_code
      if not os.path.abspath(code.co_filename).startswith(package):
        where = (code.co_name, code.co_filename, tb.tb_lineno)
      tb = tb.tb_next
    if where is None or self.loc is None or (
        where[1], where[2]) == (self.loc.filename, self.loc.line):
      return ''
    name, filename, line = where
    if name.startswith('__ab_') or filename.startswith('<'):
      return ''   # the primitive's own generated code
    text = linecache.getline(filename, line).strip()
    return (f' (in {name}(), {filename}, line {line}' +
            (f': {text})' if text else ')'))

  def _located(self, batched):
    """`batched`, raising a user's mistake at the primitive's line."""
    def run(*args):
      try:
        return batched(*args)
      except errors.PerMemberError as e:
        if e.loc is not None:
          raise
        raise errors.PerMemberError(
            e.message + self._helper_line(e.__traceback__), loc=self.loc,
            hint=e.hint) from None
      except errors.UnsupportedSyntaxError as e:
        if e.loc is not None:
          raise
        raise errors.UnsupportedSyntaxError(e.message, loc=self.loc,
                                            hint=e.hint) from None
      except (TypeError, NotImplementedError) as e:
        if ('Tensor' in str(e) and
            'cannot be interpreted as an integer' in str(e)):
          # `range(n)` of one member's `n`: TensorFlow's words for what
          # a per-member value's `__index__` refuses on NumPy.
          raise errors.PerMemberError(
              errors.PYTHON_INTEGER + self._helper_line(e.__traceback__),
              loc=self.loc, hint=errors.PYTHON_INTEGER_HINT) from e
        if 'symbolic' in str(e) and 'numpy' in str(e).lower():
          raise errors.PerMemberError(
              f'`{self.text}` passes one member\'s TensorFlow value to a '
              'NumPy function, which cannot take the symbolic tensors '
              'that TensorFlow vectorizes the primitive with',
              loc=self.loc,
              hint='On TensorFlow write TensorFlow ops for one example '
              '(tf.reduce_sum, tf.gather, tf.linalg.*); NumPy functions '
              'run on the NumPy backend.') from e
        if 'as a Python `bool`' not in str(e) and (
            'OperatorNotAllowedInGraphError' not in type(e).__name__):
          raise
        raise errors.PerMemberError(
            f'`{self.text}` uses one member\'s value where Python needs a '
            'single bool (an `if`, `while`, `and`, `or` or `not` on it '
            'inside a function it calls); TensorFlow traces the function '
            'once for all members, so the value is not known there',
            loc=self.loc,
            hint='Write the condition in the per-member function itself '
            '(its `if` and `while` are per member), or use tf.where / '
            'np.where in the helper.') from e
    return run


class PerMemberFallbackWarning(UserWarning):
  """A function without a per-member batching rule ran once per member."""


# Function name -> runs once per member, over every primitive; the
# VM reports the change over a run in `RunStats`.
_FALLBACKS = {}


def fallback_counts():
  """How many times each function ran once per member, so far.

  Returns:
    A new dict: function name -> count.
  """
  return dict(_FALLBACKS)


def fallbacks_since(before):
  """The functions that ran once per member since `before`.

  Args:
    before: A dict from `fallback_counts()`.

  Returns:
    Function name -> runs since then (only those that ran).
  """
  return {name: n - before.get(name, 0) for name, n in _FALLBACKS.items()
          if n > before.get(name, 0)}


def _leaves(args):
  out = []
  stack = list(args)
  while stack:
    x = stack.pop()
    if isinstance(x, (tuple, list)):
      stack.extend(x)
    else:
      out.append(x)
  return out


def _is_constant(x):
  """Whether argument leaf `x` is the same for every member (a Python
  number, or a 0-d value while types are inferred)."""
  if member_ops.is_tf(x):
    return x.shape.rank == 0
  return isinstance(x, _NUMBERS) or np.ndim(x) == 0


def _with_batch_axis(value, expand):
  """Each leaf of `value` but numbers, with a batch axis of one.

  A number is a Python number or a NumPy scalar of the dtype NumPy gives
  one (`np.int64`, `np.float64`, `np.bool_`, `np.complex128`: an item of
  a table of Python numbers), which type inference takes as a literal.
  """
  if isinstance(value, tuple) and hasattr(value, '_fields'):
    return type(value)(*[_with_batch_axis(v, expand) for v in value])
  if isinstance(value, (tuple, list)):
    return type(value)(_with_batch_axis(v, expand) for v in value)
  if isinstance(value, _NUMBERS) or (isinstance(value, np.generic) and
                                     value.dtype in _LITERAL_DTYPES):
    return value
  return expand(value)


def _on_scalars(member_function, form, rank):
  """`form`, except on arguments that are each a vector or a constant
  (each member's value a scalar), where `member_function`, elementwise,
  runs on them as it is."""
  def run(*args):
    vector = False
    for x in args:
      if type(x) is np.ndarray:  # pylint: disable=unidiomatic-typecheck
        n = x.ndim   # NumPy's arrays first: the usual case
      else:
        n = rank(x)
      if n == 1:
        vector = True
      elif n:
        return form(*args)
    if vector:
      return member_function(*args)
    return form(*args)
  return run


def _given(form, constants, backend_name):
  """`form`, with the inputs at `constants`' positions replaced by their
  values; where no batched input is left, the result (one member's, with
  a batch axis of one) is broadcast to the batch of those inputs."""
  positions = tuple(sorted(constants.items()))
  tensorflow = backend_name == 'tensorflow'

  def run(*args):
    args = list(args)
    batched = args[positions[0][0]]
    for k, value in positions:
      args[k] = value
    result = form(*args)
    if not all(_is_constant(x) for x in _leaves(args)):
      return result
    if tensorflow:
      tf = sys.modules['tensorflow']
      batch = tf.shape(batched)[:1]

      def broadcast(v):
        if isinstance(v, _NUMBERS):
          # A Python number, of NumPy's dtype for it (int64, float64),
          # as the member's value is elsewhere (TensorFlow's is int32).
          v = tf.constant(v, np.asarray(v).dtype)
        return tf.broadcast_to(v, tf.concat([batch, tf.shape(v)[1:]], 0))
      return patterns.pattern_map(broadcast, result)
    batch = np.shape(batched)[0]
    return patterns.pattern_map(lambda v: np.array(np.broadcast_to(
        v, (batch,) + np.shape(v)[1:])), result)
  return run


def _rank(x):
  """The rank of an argument (2 for a pattern: not a vector)."""
  if isinstance(x, _NUMBERS):
    return 0
  if isinstance(x, (tuple, list)):
    return 2
  if member_ops.is_tf(x):
    return x.shape.rank if x.shape.rank is not None else 2
  return np.ndim(x)


def _numpy_expand(x):
  return np.asarray(x)[None]


def _tf_expand(x):
  tf = sys.modules['tensorflow']
  return tf.expand_dims(tf.convert_to_tensor(x), 0)


def _numpy_form(pm):
  """The NumPy form: the primitive's plain NumPy form for the arguments'
  ranks and dtypes where `pm.direct` makes one (an error there left to
  the rules to report), else `numpy_rules.vectorize` (which takes numbers
  and 0-d arrays as the same for every member)."""
  rules = [None, None]   # the last batch size and its rules' form
  direct = {}   # signature -> plain NumPy form, or None

  def batched(*args):
    if pm.direct is not None:
      try:   # arrays, the usual case
        key = tuple([(a.ndim, a.dtype.char) for a in args])
      except AttributeError:
        key = _signature(args)
      form = direct.get(key, _UNKNOWN)
      if form is _UNKNOWN:
        form = direct[key] = key and pm.direct.form(key, pm.member_function,
                                                    pm.loc)
      if form is not None:
        try:
          return form(*args)
        except Exception:  # pylint: disable=broad-except
          pass   # the rules run it, and say what is wrong
    batch = _numpy_batch(args)
    if batch is None:   # see the module docstring
      value = pm.member_function(*args)
      return _with_batch_axis(value, _numpy_expand) if args else value
    if rules[0] != batch:
      from autobatch_vm.per_member import numpy_rules  # pylint: disable=g-import-not-at-top
      rules[:] = batch, numpy_rules.vectorize(pm.member_function, batch,
                                              fallback=pm.fallback)
    return rules[1](*args)
  return batched


_UNKNOWN = object()


def _signature(args):
  """The ranks and dtypes of NumPy arguments, for `direct.form`: per
  argument `(ndim, dtype char)` (an array), its type (a Python number),
  or `(type, keys of its items)` (a tuple, list or namedtuple of such);
  None where one is none of these, or none has a batch axis."""
  found = _keys(args)
  return found[0] if found is not None and found[1] else None


def _keys(args):
  """`(keys of args, whether one has a batch axis)`, or None."""
  key = []
  batched = False
  for a in args:
    if type(a) is np.ndarray:  # pylint: disable=unidiomatic-typecheck
      key.append((a.ndim, a.dtype.char))
      batched = batched or a.ndim > 0
    elif type(a) in _NUMBERS[:3]:
      key.append(type(a))
    elif type(a) in (tuple, list) or patterns.is_namedtuple(a):
      found = _keys(a)
      if found is None:
        return None
      key.append((type(a), found[0]))
      batched = batched or found[1]
    else:
      return None
  return tuple(key), batched


def _numpy_batch(args):
  """The batch size of NumPy arguments: axis 0 of the first array leaf
  that has axes; None where none has."""
  for a in args:
    if type(a) is np.ndarray:  # pylint: disable=unidiomatic-typecheck
      if a.ndim:
        return a.shape[0]
    elif isinstance(a, (tuple, list)):
      found = _numpy_batch(a)
      if found is not None:
        return found
    elif not isinstance(a, _NUMBERS) and np.ndim(a):
      return np.shape(a)[0]
  return None


def _tensorflow_form(pm):
  """The TensorFlow form: pfor (`tf_vectorize`)."""
  from autobatch_vm.per_member import tf_vectorize  # pylint: disable=g-import-not-at-top
  vectorized = tf_vectorize.vectorize(
      pm.member_function, lambda x: not _is_constant(x), pm.fallback)

  def batched(*args):
    result = vectorized(*args)
    if result is None:   # no batched argument: see the module docstring
      value = pm.member_function(*args)
      return _with_batch_axis(value, _tf_expand) if args else value
    return result
  return batched
