"""Exceptions of autobatch_vm.

`AutoBatchError` and its subclasses are user mistakes: each message names the
user's function, file and line (when known), shows the source line and says
what to do.  `InternalError` is a bug in autobatch_vm itself.
"""

import contextlib
import os
import random
import re
import sys
import warnings

import numpy as np

from autobatch_vm.ir import patterns

__all__ = [
    'AutoBatchError', 'UnsupportedSyntaxError', 'NameResolutionError',
    'TypeInferenceError', 'ArgumentError', 'StackOverflowError',
    'PrimitiveError', 'AssertionFailedError', 'InternalError',
    'BackendError', 'StepLimitError', 'XlaErrorsWarning',
    'HelperAssertionError', 'XlaGradientWarning', 'FailedAssertion',
    'MemberMixingWarning', 'WorkerError', 'PerMemberError',
    'ArgumentWriteWarning', 'TypeCastWarning',
]


def member_indices(members):
  """Up to ten batch member indices, as ints, for an error message."""
  return [int(i) for i in np.asarray(members).reshape(-1)[:10]]


def _where(loc):
  if loc is None:
    return ''
  text = f'\n  in function {loc.function!r}, {loc.filename}, line {loc.line}'
  if loc.source_line:
    text += f'\n      {loc.source_line.strip()}'
  return text


# The fix for a value whose shape differs between members (`v[:n]`).
PAD_HINT = (
    'A batch holds one array per value, so every member\'s array must have '
    'the same shape.  Pad to a fixed size and carry the length: keep '
    'fixed-size arrays with a per-member count (np.where(np.arange(W) < n, '
    'x, 0)) instead of selecting or building arrays of per-member size.')

# One member's value where Python needs one integer (`range(n)`,
# `[0] * n` with a per-member `n`).
PYTHON_INTEGER = (
    'A per-member value used as one Python integer (a length, shape, range '
    'bound or index of a Python list): it holds an integer for each member.')
# What to write instead: a loop, or a reduction of a slice.
PYTHON_INTEGER_HINT = (
    'A `for i in range(n)` statement runs per member; a reduction over a '
    'member\'s first n items reduces a slice (np.any(v[:n] > t), '
    'np.sum(v[:n]), np.argmin(v[:n])) instead of a generator or list over '
    'range(n).  ' + PAD_HINT)

# Random generators: objects that hold a stream's state, which no batch
# holds one of per member.
RANDOM_GENERATORS = (np.random.Generator, np.random.RandomState,
                     np.random.SeedSequence, np.random.BitGenerator,
                     random.Random)

# What to write instead of a random generator made of a member's value.
RANDOM_GENERATOR_HINT = (
    'Use a counter-based generator: a pure function of a per-member seed '
    'and a counter you pass along and increment (splitmix64(seed, '
    'counter) in examples/nuts.py; docs/guide.md, section 5, '
    '"Randomness"), on TensorFlow also tf.random.stateless_normal(shape, '
    'seed) with such a seed; or draw the numbers outside and pass them in '
    '(an array with a row per member).  A generator made outside the '
    'function and closed over is one stream that every member draws from.')


class AutoBatchError(Exception):
  """A mistake in how autobatch_vm is used; the message says how to fix it.

  Args:
    message: What is wrong.
    loc: The `SourceLoc` of the user's code it concerns, or None; the
      message then names the function, file and line and shows the line.
    hint: What to do about it, or None.
    members: For an error that only data reveals (a failed `assert`, a
      stack overflow, `max_steps`), every member it stopped, where known.

  Attributes:
    message: What is wrong, as given.
    loc: The `SourceLoc` given, or None.
    hint: The hint given, or None.
    members: The members given, as a NumPy array of ints, or None.
  """

  # Inside a `tf.function`, TensorFlow's AutoGraph would re-raise this as a
  # generic StagingError; this attribute makes it pass through unchanged.
  ag_pass_through = True

  def __init__(self, message, loc=None, hint=None, members=None):
    self.message = message
    self.loc = loc
    self.hint = hint
    self.members = (None if members is None else
                    np.asarray(members, np.int64).reshape(-1))
    text = message + _where(loc)
    if hint:
      text += f'\n  {hint}'
    super().__init__(text)

  @property
  def function(self):
    """The name of the user's function the error concerns, or None."""
    return self.loc.function if self.loc else None

  @property
  def filename(self):
    """The file of the user's code the error concerns, or None."""
    return self.loc.filename if self.loc else None

  @property
  def lineno(self):
    """The line of the user's code the error concerns, or None."""
    return self.loc.line if self.loc else None


class UnsupportedSyntaxError(AutoBatchError):
  """The batched function uses Python outside the supported subset."""


class NameResolutionError(AutoBatchError):
  """A name in a batched function is not defined."""


class TypeInferenceError(AutoBatchError):
  """Types could not be determined, or disagree with `type_inference`."""


class ArgumentError(AutoBatchError):
  """Bad arguments: wrong count or names, batch sizes, dtypes or values."""


class StackOverflowError(AutoBatchError):
  """Recursion deeper than `max_stack_depth`."""


class StepLimitError(AutoBatchError):
  """Members had not finished after `max_steps` VM steps."""


class PrimitiveError(AutoBatchError):
  """A primitive computation raised; the original exception is chained."""


class AssertionFailedError(AutoBatchError):
  """An `assert` in a batched function failed for some members."""


class PerMemberError(AutoBatchError):
  """A per-member function does what one member's values cannot do.

  E.g. a shape that differs between members (`np.arange(n)` with a
  per-member `n`), or one member's value where Python needs a single bool.
  """


class BackendError(AutoBatchError):
  """A backend cannot do what was asked in this mode."""


class WorkerError(AutoBatchError):
  """A shard did not come back from its worker (the executor's error chained).

  Its worker process died (a primitive that crashes the process), or the
  task failed outside the batched call.
  """


class XlaErrorsWarning(UserWarning):
  """Warns that a batched run under bare `jit_compile=True` cannot raise.

  Issued while tracing: XLA cannot raise at run time, so a stack overflow
  or failed `assert` poisons the outputs of the members it stops instead;
  `autobatch_vm.xla.compile_nested_output` raises it, and
  `on_error='status'` returns which members finished.
  """


class _LocatedWarning(UserWarning):
  """A warning about the user's code, shown at its line (`warn`)."""

  @classmethod
  def warn(cls, message, loc):
    """Warns `message`, pointing at the user's line.

    Args:
      message: What may be wrong, and what to do.
      loc: The `SourceLoc` of the user's code, or None.
    """
    warnings.warn_explicit(
        message, cls, filename=loc.filename if loc else '<autobatch_vm>',
        lineno=loc.line if loc else 0)


class ArgumentWriteWarning(_LocatedWarning):
  """Items written to an array that another name, read later, holds too.

  In Python `v[0] = x` inside a function changes the caller's array too,
  and `b[0] = x` after `b = a` changes `a`; a batched function's arrays
  are values (each call gets its arguments' values, each assignment its
  own array), so the caller's array, or `a`, keeps its items.  The check
  cannot be exact (the write may never run), so it warns, naming the
  call or the write.
  """


class TypeCastWarning(_LocatedWarning):
  """A dry run's member result changed value when cast to the inferred type.

  The dry run gives each member's Python result the type type inference
  found for the batched run (a batch holds one dtype); where a member's
  value does not fit it (1.5 where the type is int64), the batched run
  holds the cast value too.  That is a type the function's code leaves
  open (a variable assigned an int and, later, a float), which the
  warning names with its function.
  """


class MemberMixingWarning(_LocatedWarning):
  """A primitive seems to read other members' values, but may draw at random.

  Type inference refuses a primitive whose first member's result follows
  another member's values (`TypeInferenceError`) where the comparison is
  exact.  Where the primitive draws at random in a way the check cannot
  hold fixed, or its ops cannot be seen, a difference may be chance: it
  warns instead, naming the user's line.
  """



class FailedAssertion(AssertionError):
  """A batched function's own `assert` failed, inside its primitive.

  Raised by `ops.fail`; the VM turns it into an `AssertionFailedError`
  naming the members.  Its text is the message where the message is a
  constant, else the message's source: what the message computes depends
  on a member's values, which only the VM knows the rows of.

  Args:
    text: The message, or the source text of the message expression.
    message: None for a constant message; else the function computing the
      message from one member's rows (batches of one) of `inputs`.
    inputs: The batched values `message` reads, one row per input row.
    one_member: Whether the function is written for one member
      (`per_member=True`): `message` then gets the member's values
      without the batch axis, as NumPy values.

  Attributes:
    text, message, inputs, one_member: As given.
  """

  def __init__(self, text, message=None, inputs=(), one_member=False):
    super().__init__(text)
    self.text = text
    self.message = message
    self.inputs = inputs
    self.one_member = one_member

  def member_message(self, row):
    """The message as input row `row`'s member computes it alone.

    The member sees its values as a dry run gives them, batches of one
    (a per-member function's: the member's values, NumPy's), so the text
    is the one Python's own `assert` gives there.

    Args:
      row: The row of `inputs` holding the member.

    Returns:
      The message, or the source text with the error computing it raised.
    """
    if self.message is None:
      return self.text
    def one_row(x):
      shape = getattr(x, 'shape', None)
      if shape is None or not len(shape):
        return x
      if not self.one_member:
        return x[row:row + 1]
      if not isinstance(x, np.ndarray) and hasattr(x, 'numpy'):
        x = x.numpy()   # a tensor: as the member's NumPy value
      return x[row]
    try:
      return str(self.message(*patterns.pattern_map(one_row,
                                                    list(self.inputs))))
    except Exception as e:  # pylint: disable=broad-except
      return (f'{self.text} (computing the message raised '
              f'{type(e).__name__}: {e})')


class HelperAssertionError(Exception):
  """An `assert` failed inside a helper that a primitive calls.

  A helper is a function that a primitive of a batched function calls.
  This is not an `AssertionError`, so that it is not taken for a batched
  function's own `assert`; the VM reports it as an `AssertionFailedError` at the
  calling line, type inference as a `PrimitiveError` there.
  """


# Errors of backends that say two inputs of one operation have different
# dtypes: a mistake in the user's inputs or code, whatever the values.
_DTYPE_MISMATCH = (
    re.compile(r'expected to be an? \w+ tensor but is an? \w+ tensor'),
    re.compile(r'Expected \w+ passed to parameter'),
    re.compile(r'has type \w+ that does not match type \w+'),
    re.compile(r'Tensor conversion requested dtype \w+ for Tensor with '
               r'dtype \w+'),
    re.compile(r'must have the same dtype|cannot compute \w+ as input'),
)


def mixes_dtypes(cause):
  """Whether exception `cause` (a backend's) says that two inputs of one
  operation have different dtypes."""
  return any(p.search(str(cause)) for p in _DTYPE_MISMATCH)


def explain_dtype_mismatch(error):
  """`error` (a `PrimitiveError` raised while inferring a type), with a
  hint about dtypes where its cause says that two inputs of an operation
  have different dtypes; else `error` itself.  Such an error does not
  depend on the values the primitive ran on."""
  cause = error.__cause__
  if cause is None or not mixes_dtypes(cause):
    return error
  return PrimitiveError(
      error.message, loc=error.loc,
      hint='TensorFlow does not promote dtypes: the inputs of one operation '
      'need the same dtype.  Convert explicitly (tf.cast(x, tf.float32), '
      'x.astype(np.int32)), or pass arguments of matching dtypes (a NumPy '
      'int64 array next to an int32 tensor, a Python float next to an '
      'int32 tensor, are different dtypes).')


# NumPy's error for a Python scalar made of an array of ndim > 0
# (`float(x)`, `int(x)`, `math.sqrt(x)`), even of one element.  NumPy
# from 1.25 until the deprecation expired only warns, and converts, where
# the array has one element; its warning's message starts as below.
SCALAR_CONVERSION_MESSAGE = (
    'only 0-dimensional arrays can be converted to Python scalars')
_SCALAR_CONVERSION_WARNING = 'Conversion of an array with ndim > 0 to a scalar'


def _scalar_conversion_warns():
  """Whether this NumPy only warns when it makes a Python scalar of an
  array of one element and ndim > 0 (where newer NumPy raises)."""
  with warnings.catch_warnings():
    warnings.simplefilter('error', DeprecationWarning)
    try:
      float(np.zeros(1))
    except DeprecationWarning:
      return True
    except TypeError:
      return False
  return False


_SCALAR_CONVERSION_WARNS = _scalar_conversion_warns()


def scalar_conversion_error(e):
  """`e`, or, for NumPy's warning that a Python scalar is made of an
  array of ndim > 0 (raised under `scalar_conversions_raise`), the
  `TypeError` that newer NumPy raises instead."""
  if (isinstance(e, DeprecationWarning) and
      str(e).startswith(_SCALAR_CONVERSION_WARNING)):
    return TypeError(SCALAR_CONVERSION_MESSAGE)
  return e


@contextlib.contextmanager
def scalar_conversions_raise():
  """A context in which NumPy refuses a Python scalar of an array of
  ndim > 0, as newer NumPy does, whatever the NumPy installed.

  Type inference runs a primitive at batch size 1, where NumPy that only
  warns would make `math.sqrt(x)` of a batch a number; the error that
  says the code is the cause would come only at run time, on another
  batch size, or never (a batch of one).  Here that warning is a
  `TypeError` with newer NumPy's message; code that catches inside the
  context turns it into one with `scalar_conversion_error`.  Nothing
  changes on NumPy that raises.
  """
  if not _SCALAR_CONVERSION_WARNS:
    yield
    return
  with warnings.catch_warnings():
    warnings.filterwarnings('error', message=_SCALAR_CONVERSION_WARNING,
                            category=DeprecationWarning)
    try:
      yield
    except DeprecationWarning as e:
      converted = scalar_conversion_error(e)
      if converted is e:
        raise
      raise converted.with_traceback(e.__traceback__) from None


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_MARKERS = (os.sep + 'tensorflow' + os.sep, os.sep + 'keras' + os.sep,
                    os.sep + 'tf_keras' + os.sep,
                    '__autograph_generated_file')


def user_stacklevel():
  """The `stacklevel` for `warnings.warn`, called from autobatch_vm, that
  points at the first frame outside autobatch_vm, TensorFlow and the code
  AutoGraph generates: the user's call (of the batched function, or of the
  `tf.function` tracing it)."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  level = 1
  while frame is not None:
    filename = os.path.abspath(frame.f_code.co_filename)
    internal = (filename.startswith(_PACKAGE_DIR + os.sep) or
                any(m in filename for m in _LIBRARY_MARKERS))
    if not internal:
      return level
    frame = frame.f_back
    level += 1
  return 1


class XlaGradientWarning(UserWarning):
  """Warns that XLA cannot compile the gradient of a run without `max_steps`.

  Issued while tracing a batched run under `jit_compile=True` with a
  gradient tape recording and no `max_steps`: XLA cannot compile the
  gradient of a loop without a bound on its iterations
  (`autobatch_vm.xla.warn_if_gradient_needs_max_steps`).
  """


class InternalError(Exception):
  """An invariant of autobatch_vm broke: this is a bug in autobatch_vm.

  Args:
    message: The invariant that broke; the error adds that this is a bug
      to report.
  """

  def __init__(self, message):
    super().__init__(
        f'{message}\n  This is a bug in autobatch_vm; please report it with '
        'the program that triggered it.')


def row_count_message(got, rows):
  """Why a primitive's result with `got` rows does not fit `rows` members."""
  return (f'{got} row{"s" if got != 1 else ""} for {rows} members: a '
          'primitive given per-member inputs returns one row per member')
