"""Tests of autobatch_vm.per_member."""

import contextlib

from autobatch_vm import frontend


@contextlib.contextmanager
def plain_python(module):
  """`module`'s batched functions as their Python functions, so that a
  call between them in a plain run over members stays plain.

  Args:
    module: The module whose globals hold the batched functions.

  Yields:
    None; the batched functions are put back on exit.
  """
  saved = {k: v for k, v in vars(module).items()
           if isinstance(v, frontend.BatchedFunction)}
  for k, v in saved.items():
    setattr(module, k, v.python_function)
  try:
    yield
  finally:
    for k, v in saved.items():
      setattr(module, k, v)
