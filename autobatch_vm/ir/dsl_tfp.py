"""TFP's `ProgramBuilder` vocabulary, which `dsl.ProgramBuilder` speaks too.

A program written for `tfp.experimental.auto_batching.dsl` builds here
unchanged (see `dsl`'s module docstring for both vocabularies): functions
declared ahead (`declare_function`, `define_function`) with parameters
declared in their body (`param`), fresh names (`local`, `locals_`),
variables by attribute (`var.x = <op>`), unpacking (`builder(p).pattern =
<op>`) and `module()`.
"""

import contextlib
import dataclasses

from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir.dsl_function import caller_loc
from autobatch_vm.ir.dsl_function import DslError
from autobatch_vm.ir.dsl_function import FunctionHandle

__all__ = ['TfpVocabulary']


class TfpVocabulary:
  """The methods of `dsl.ProgramBuilder` that only TFP's builder has.

  A base class of `ProgramBuilder`, whose state these methods read and
  write (the function being built, the declared functions) and whose
  instructions they emit (`assign`, `primop`).
  """

  def __init__(self):
    self._magic_vars = _MagicVars(self)

  def declare_function(self, name=None, type_inference=None):
    """Declares a function to define later (`define_function`).

    Functions defined before it can then call it (mutual recursion).

    Args:
      name: Labels the function (made unique: `f`, `f_1`, ...); None:
        `function_<k>`.
      type_inference: The function's type-inference callable, or None.

    Returns:
      Its `FunctionHandle`.

    Raises:
      DslError: If `name` is not a string.
    """
    if name is not None and not isinstance(name, str):
      raise DslError(f'function names are strings, got {name!r}')
    base = name or f'function_{len(self._declared)}'
    unique, k = base, 0
    while unique in self._declared:
      k += 1
      unique = f'{base}_{k}'
    handle = FunctionHandle(unique, type_inference)
    self._declared[unique] = handle
    return handle

  @contextlib.contextmanager
  def define_function(self, function):
    """Builds the body of a function from `declare_function`; yields it.

    Its parameters are declared in the body with `param`.

    Args:
      function: The `FunctionHandle` (or name) `declare_function` returned.

    Yields:
      The function's `FunctionHandle`.

    Raises:
      DslError: If `function` was not declared by this builder, or the
        function is malformed.
    """
    if not isinstance(function, str) or self._declared.get(function) is None:
      raise DslError(f'define_function expects a function from this '
                     f'builder\'s declare_function, got {function!r}')
    with self._building(self._declared[function], (),
                        self._declared[function].type_inference) as handle:
      yield handle

  def module(self):
    """Collects every function defined so far (as `Context.module()`).

    Returns:
      A `Program` of them, whose main is the first.

    Raises:
      DslError: If called inside a function being built.
    """
    if self._fn is not None:
      raise DslError(f'module() inside function {self._fn.name!r}')
    functions = tuple(self._functions.values())
    return inst.Program(functions, functions[0].name if functions else '')

  def param(self, name=None):
    """Adds a parameter to the function being built.

    Args:
      name: The parameter's name, made unique as by `local`.

    Returns:
      Its variable name (`local(name)`).
    """
    fn = self._state('param', settle=False)
    var = self.local(name)
    fn.params.append(var)
    return var

  def local(self, name=None, define=True):
    """Makes a fresh variable name of the function being built.

    The first variable made for `name` is the one `var.<name>` and a lambda
    parameter `name` read.

    Args:
      name: The wanted name, or None.
      define: Accepted for TFP's signature and ignored; whether a variable
        is written is checked when the function ends.

    Returns:
      `name` if no variable has it yet, else `name_1`, `name_2`, ...
      (`var_<k>` without a name).

    Raises:
      DslError: If `name` is not a non-empty string.
    """
    del define
    fn = self._state('local', settle=False)
    if name is not None and (not isinstance(name, str) or not name):
      raise DslError(f'variable names are non-empty strings, got {name!r}',
                     loc=caller_loc(fn.name))
    base = name or 'var'
    var, k = base, 0
    while var in fn.used or name is None and k == 0:
      k += 1
      var = f'{base}_{k}'
    fn.used.add(var)
    if name is not None:
      fn.locals.setdefault(name, var)
    return var

  def locals_(self, count, name=None):
    """Makes `count` fresh variable names.

    Args:
      count: How many.
      name: The wanted name of each, as for `local`.

    Returns:
      A list of `count` names, `local(name)` each.
    """
    return [self.local(name) for _ in range(count)]

  @property
  def var(self):
    """The variables of the function being built, by attribute.

    `var.x = <op>` writes `x` (see the module docstring), `var.x` is `x`.
    """
    return self._magic_vars

  def __call__(self, pattern):
    """Unpacks the instruction just emitted: `builder(p).pattern = <op>`.

    Args:
      pattern: A pattern (tuple or list, nested) of variables to unpack
        the result into.

    Returns:
      An object whose `pattern` attribute, when set to the instruction's
      output, makes the instruction write `pattern`.
    """
    return _MagicPattern(self, pattern)

  def _bind(self, target, value, what):
    """`target = value` for `var.x = value` and `builder(p).pattern =
    value`: the output of the instruction just emitted is renamed; any
    other variable (or pattern of variables) is copied."""
    fn = self._state(what)
    for v in inst.pattern_flatten(target):
      self._check_name(v)
    if isinstance(value, str) and self._just_emitted(value):
      fn.current.ops[-1] = dataclasses.replace(fn.current.ops[-1],
                                               vars_out=target)
      # The number is not reused: a later read of the stale temporary
      # is then reported as never written.
      fn.temps.discard(value)
    elif isinstance(value, str):
      self.assign(target, value)
    elif isinstance(value, (tuple, list)) and all(
        isinstance(v, str) for v in inst.pattern_flatten(value)):
      self._pack_into(value, target)
    else:
      raise DslError(
          f'{what} expects the result of primop, const or call, or a '
          f'variable, got {value!r}', loc=caller_loc(fn.name),
          hint='Constants go through const: var.x = builder.const(5).')


class _MagicVars:
  """`builder.var`: the variables of the function being built, by
  attribute (see `dsl`'s module docstring)."""

  def __init__(self, builder):
    object.__setattr__(self, '_builder', builder)

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    builder = object.__getattribute__(self, '_builder')
    fn = builder._state(f'var.{name}', settle=False)  # pylint: disable=protected-access
    var = fn.locals.setdefault(name, name)
    fn.used.add(var)
    return var

  def __setattr__(self, name, value):
    builder = object.__getattribute__(self, '_builder')
    target = getattr(self, name)
    if value is not None:   # `var.x = None` only declares `x` (TFP)
      builder._bind(target, value, f'var.{name} =')  # pylint: disable=protected-access


class _MagicPattern:
  """`builder(pattern)`: its `.pattern = value` unpacks `value`."""

  def __init__(self, builder, pattern):
    self._builder = builder
    self._pattern = pattern

  @property
  def pattern(self):
    return self._pattern

  @pattern.setter
  def pattern(self, value):
    if value is not None:
      self._builder._bind(self._pattern, value, 'builder(...).pattern =')  # pylint: disable=protected-access
