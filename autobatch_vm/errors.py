"""Exceptions of autobatch_vm.

`AutoBatchError` and its subclasses are user mistakes: each message names the
user's function, file and line (when known), shows the source line and says
what to do.  `InternalError` is a bug in autobatch_vm itself.
"""

import numpy as np

__all__ = [
    'AutoBatchError', 'UnsupportedSyntaxError', 'NameResolutionError',
    'TypeInferenceError', 'ArgumentError', 'StackOverflowError',
    'PrimitiveError', 'AssertionFailedError', 'InternalError',
    'BackendError', 'StepLimitError', 'XlaErrorsWarning',
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


class AutoBatchError(Exception):
  """A mistake in how autobatch_vm is used; the message says how to fix it."""

  # Inside a `tf.function`, TensorFlow's AutoGraph would re-raise this as a
  # generic StagingError; this attribute makes it pass through unchanged.
  ag_pass_through = True

  def __init__(self, message, loc=None, hint=None):
    self.message = message
    self.loc = loc
    self.hint = hint
    text = message + _where(loc)
    if hint:
      text += f'\n  {hint}'
    super().__init__(text)

  @property
  def function(self):
    return self.loc.function if self.loc else None

  @property
  def filename(self):
    return self.loc.filename if self.loc else None

  @property
  def lineno(self):
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


class BackendError(AutoBatchError):
  """A backend cannot do what was asked in this mode."""


class XlaErrorsWarning(UserWarning):
  """Issued while tracing a batched run under bare `jit_compile=True`: XLA
  cannot raise at run time, so a stack overflow or failed `assert` poisons
  the outputs instead; `autobatch_vm.xla.compile_nested_output` raises it."""


class InternalError(Exception):
  """An invariant of autobatch_vm broke: this is a bug in autobatch_vm."""

  def __init__(self, message):
    super().__init__(
        f'{message}\n  This is a bug in autobatch_vm; please report it with '
        'the program that triggered it.')
