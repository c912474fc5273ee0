"""Declared types: checking values against a `type_inference` declaration.

A primitive whose result a `type_inference` callable declares does not run
during type inference (`type_inference`), so its first real run checks
the result's structure and per-member shapes here (`checked_result`).
"""

import dataclasses
from typing import Any

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst

__all__ = ['Mismatch', 'declared_type_error', 'checked_result']

_PY_SCALARS = (bool, int, float, complex)


class Mismatch(Exception):
  """Two types that cannot be joined.

  Args:
    message: What differs.
    dtypes: Whether they differ only in dtype (same structure and shapes).
  """

  def __init__(self, message, dtypes=False):
    super().__init__(message)
    self.dtypes = dtypes


def declared_type_error(message, loc):
  """The error for a value that does not fit its declared type.

  Args:
    message: What does not fit.
    loc: The user's source location to name.

  Returns:
    A `TypeInferenceError` with a hint to fix or drop `type_inference`.
  """
  return errors.TypeInferenceError(
      message, loc=loc, hint='Fix the type_inference callable, or omit it '
      'and let autobatch_vm infer the type.')


def checked_result(function, declared, op, fn_name):
  """`function`, checking its result against `declared` at each call.

  A primitive computing a declared result does not run during type
  inference, so its first real run checks what a run on made-up data
  would have (the VM would otherwise broadcast a wrong shape into the
  declared one).

  Args:
    function: The primitive's function.
    declared: The declared type pattern of its result.
    op: The `PrimOp` (its source text and location name the error).
    fn_name: The batched function whose `type_inference` declares it.

  Returns:
    A callable like `function` that raises `TypeInferenceError` where the
    result's structure or per-member shapes differ from `declared`.
  """
  return _CheckedResult(function, declared, op.text, op.loc, fn_name)


@dataclasses.dataclass(frozen=True)
class _CheckedResult:
  """A primitive with a check of its result (`checked_result`); equal to
  another made from the same parts, so that compiling twice gives equal
  programs."""
  function: Any
  declared: Any
  text: str
  loc: Any
  fn_name: str

  @property
  def __name__(self):
    return getattr(self.function, '__name__', 'prim')

  def __call__(self, *args):
    value = self.function(*args)
    try:
      _check_pattern(self.declared, value)
    except Mismatch as e:
      raise declared_type_error(
          f'`{self.text}` returns a value that does not match the type the '
          f'type_inference of {self.fn_name!r} declares: {e}',
          self.loc) from None
    return value


def _check_pattern(declared, value):
  if isinstance(declared, inst.TensorType):
    if isinstance(value, (tuple, list)):
      raise Mismatch(f'a {type(value).__name__} where {declared} is '
                     'declared (different structures)')
    _check_leaf(declared, value)
    return
  if not isinstance(value, (tuple, list)) or len(value) != len(declared):
    got = (f'a {type(value).__name__} of {len(value)}'
           if isinstance(value, (tuple, list)) else 'an array')
    raise Mismatch(f'{got} where {inst.type_str(declared)} is declared '
                   '(different structures)')
  for d, v in zip(declared, value):
    _check_pattern(d, v)


def _check_leaf(declared, value):
  if type(value) in _PY_SCALARS:
    return
  shape = tuple(value.shape if hasattr(value, 'shape') else np.shape(value))
  if len(shape) != len(declared.shape) + 1 or (
      shape[1:] != declared.shape and None not in shape[1:]):
    raise Mismatch(f'shape {shape}: members of shape {shape[1:]}, '
                   f'declared {declared.shape}')
  dtype = getattr(value, 'dtype', None)
  dtype = np.dtype(getattr(dtype, 'as_numpy_dtype', dtype))
  if dtype.kind == 'c' and declared.dtype.kind != 'c':
    raise Mismatch(f'{dtype} declared {declared.dtype} (complex to real)')
