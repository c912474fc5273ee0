"""`BatchedFunction`: a decorated function, called on a batch.

`Context.batch` (in `frontend`) makes one per decorated function; calling
it converts the arguments (`python.call_arguments`), and runs the batch
through its Context (`Context._run`), or each member alone as plain
Python (`dry_run=True`, `Context._dry_run`).  `frontend` re-exports it.
"""

import functools
import numbers

import numpy as np

from autobatch_vm import errors
from autobatch_vm.ir import instructions as inst
from autobatch_vm import shipping
from autobatch_vm.backends import base as backend_base
from autobatch_vm.backends import scheduler
from autobatch_vm.python import call_arguments
from autobatch_vm.python.call_arguments import _PY_NUMBERS
from autobatch_vm.vm import failures

__all__ = ['BatchedFunction', 'DEFAULT_MAX_STACK_DEPTH']

# The stack depth a call gets unless it passes `max_stack_depth`.
DEFAULT_MAX_STACK_DEPTH = 15


class BatchedFunction(shipping.FunctionPickling):
  """A decorated function: call it on a batch.

  `Context.batch` makes one; the undecorated function is its
  `.python_function`.

  Args:
    context: The `Context` it belongs to.
    fn: The user's Python function, the logic of one batch member.
    type_inference: The user's type-inference callable (normalized by the
      Context), or None.
    per_member: Whether `fn` is written for one member's values
      (`Context.batch(per_member=True)`).
    name: A variant's name (`Context.variant`); None: `fn`'s.
    static: A variant's parameters fixed to None; () for the function.

  Attributes:
    context: The `Context` it belongs to.
    python_function: The undecorated function.
    type_inference: The type-inference callable, or None.
    per_member: As given.
    static: As given.
    name: The function's name.
    last_stats: The `RunStats` of the last call (None before any).
  """

  # Marks it for TensorFlow's AutoGraph as one of its own artifacts, so a
  # `tf.function` calls it as is rather than converting autobatch_vm's code.
  autograph_info__ = frozenset()

  def __init__(self, context, fn, type_inference, per_member=False,
               name=None, static=()):
    self.context = context
    self.python_function = fn
    self.type_inference = type_inference
    self.per_member = per_member
    self.static = tuple(static)
    self.last_stats = None
    functools.update_wrapper(self, fn)
    self.name = name or fn.__name__

  def __repr__(self):
    return f'<batched function {self.name}>'

  def _check_current(self):
    """Refuses a call of a wrapper whose name the Context has since given
    to another function.

    A Context compiles its functions by name (calls between them are by
    name, as TFP's are), so a wrapper replaced by a later registration of
    another function of its name would run that function: say two
    closures made by one `def`.  Registering the same Python function
    again is no change.

    Raises:
      ArgumentError: If `self` is no longer the Context's function of its
        name, and that one was made from another Python function.
    """
    current = self.context._functions.get(self.name)  # pylint: disable=protected-access
    if current is self or (current is not None and
                           current.python_function is self.python_function):
      return
    code = getattr(current, 'python_function', None)
    code = getattr(code, '__code__', None)
    where = (f' ({code.co_filename}, line {code.co_firstlineno})'
             if code is not None else '')
    raise errors.ArgumentError(
        f'{self.name} was registered again in its Context, from another '
        f'function{where}, after this batched function was made: a Context '
        'holds one function of a name, and this one would run the other',
        loc=inst.SourceLoc(self.name, self.python_function.__code__.co_filename,
                           self.python_function.__code__.co_firstlineno),
        hint='Give the functions different names, or make each in its own '
        'ab.Context() (functions made by one def, such as closures, share '
        'its name); after redefining a function, call the new one.')

  def __call__(self, *args, dry_run=False, stackless=None,
               max_stack_depth=DEFAULT_MAX_STACK_DEPTH, backend=None,
               block_code_cache=None,
               schedule=scheduler.DEFAULT_SCHEDULE, profile=False,
               max_steps=None, on_error='raise', **kwargs):
    """Runs the function on a batch; `last_stats` then describes the run.

    Args:
      *args, **kwargs: The function's own arguments, each an array (or a
        tuple, list or namedtuple of arrays) whose axis 0 is the batch; a
        scalar or a batch of one is broadcast to the batch.  Defaulted
        parameters may be left out: the default is the same value for
        every member (an array default is not a batch).
      dry_run: Whether to run each member alone as plain Python (the
        reference), stacking the results as a batched call does.
      stackless: True: Python's stack handles calls, and independent calls
        of a function run together; False: the stack VM; None: stackless
        on NumPy for a branching recursion, the VM otherwise.
      max_stack_depth: The deepest recursion the run allows.
      backend: `NumpyBackend()` or `TensorFlowBackend(...)`; None picks
        the one the arguments' type calls for.
      block_code_cache: A dict of compiled blocks kept across calls; None
        uses the Context's.
      schedule: Which block runs next: `'most'` (the one with the most
        members) or `'lowest'` (the lowest-numbered one with members).
      profile: Whether to time every block (`last_stats.table()`).
      max_steps: The most VM steps the run may take, or None (no bound,
        or the backend's `while_maximum_iterations`).
      on_error: What a stack overflow, a failed `assert` or `max_steps`
        does: `'raise'` raises it; `'status'` returns `(results, ok)`,
        `ok` a boolean per member, False for those it stopped
        (`vm.failures`).

    Returns:
      The batched results, with the structure the function returns;
      with `on_error='status'`, `(results, ok)`.

    Raises:
      ArgumentError: If the arguments or options are wrong (count, names,
        batch sizes, dtypes).
      StackOverflowError: If a member recurses deeper than
        `max_stack_depth`.
      StepLimitError: If members have not finished after `max_steps`.
      AutoBatchError: Of another subclass, if the function cannot be
        compiled or typed, or a primitive or an `assert` fails for some
        members.
    """
    self._check_current()
    dry_runs = self.context._dry_runs
    if dry_runs.active():  # inside a dry run: plain Python
      return dry_runs.call(self, args, kwargs)
    given = args
    args = self.bind_arguments(args, kwargs, batched=True)
    loc = self.context.function_loc(self.name)
    failures.check_on_error(on_error, loc)
    max_stack_depth, max_steps = _checked_modes(max_stack_depth, max_steps,
                                                backend, loc)
    # Arguments that are None run the variant with those parameters
    # fixed (`Context.variant`).
    target, args = self.context._with_nones_fixed(self, args)
    try:
      if dry_run:
        out = self.context._dry_run(target, args, backend)
        if on_error == 'status':   # a dry run raises any error
          out = failures.finished(
              out, backend or call_arguments.default_backend(args))
        return out
      out = self.context._run(target, args, stackless=stackless,
                              max_stack_depth=max_stack_depth,
                              backend=backend,
                              block_code_cache=block_code_cache,
                              schedule=schedule, profile=profile,
                              max_steps=max_steps, on_error=on_error)
      self.last_stats = target.last_stats
      return out
    except errors.TypeInferenceError as e:
      better = call_arguments.name_argument_values(
          e, self.context._params_of(target.name), args)
      if better is e:
        raise
      raise better from e.__cause__
    except errors.PrimitiveError as e:
      better = self._explain_number_defaults(
          e, len(given), kwargs,
          backend or call_arguments.default_backend(args))
      if better is e:
        raise
      raise better from e.__cause__

  def _explain_number_defaults(self, error, n_given, kwargs, backend):
    """`error`, with a hint naming the parameters that took a Python number
    as their default at this call, where it is about inputs of different
    dtypes (TensorFlow): such a default is typed as a literal, NumPy's
    dtype for it (int64, float64) where it meets no typed data."""
    if errors.explain_dtype_mismatch(error) is error:
      return error
    params = self.context._params_of(self.name)
    taken = [(p, v) for p, v in self.context._defaults_of(self.name).items()
             if params.index(p) >= n_given and p not in kwargs and
             type(v) in _PY_NUMBERS]
    if not taken:
      return error
    described = ', '.join(
        f'{p}={v!r} (here {np.asarray(v).dtype.name})' for p, v in taken)
    p, v = taken[0]
    example = f'{p}=np.{np.asarray(v).dtype.name}({v!r})'
    return errors.PrimitiveError(
        error.message, loc=error.loc,
        hint=f'{error.hint}  This call took the default {described}: a '
        'Python number as a default of the called function is a literal: '
        'it takes the dtype of the typed data it meets, and is int64 or '
        'float64 where it meets none.  Give the default the dtype you mean '
        f'(`{example}`) or pass the argument.')

  def bind_arguments(self, args, kwargs, batched=False):
    """Binds a call's arguments to the parameters, as a call does.

    Defaulted parameters left out get their defaults.

    Args:
      args: The call's positional arguments.
      kwargs: The call's keyword arguments (the function's own, not its
        call modes).
      batched: Whether the arguments are a whole batch (a call from
        outside): a default is then the same value for every member, a
        batch of one (`call_arguments.shared_default`), which conversion
        broadcasts to the batch.  False: the default value itself (a call
        within a dry run).

    Returns:
      The list of arguments, one per parameter, in the parameters' order.

    Raises:
      ArgumentError: If there are too many, unknown, repeated or missing
        arguments.
    """
    params = self.context._params_of(self.name)
    positional = self.context._positional_of(self.name)
    loc = self.context.function_loc(self.name)
    if len(args) > positional:
      raise errors.ArgumentError(
          f'{self.name}() takes {positional} positional argument(s) '
          f'({", ".join(params[:positional])}) but {len(args)} were given',
          loc=loc)
    bound = dict(zip(params, args))
    for k, v in kwargs.items():
      if k not in params:
        raise errors.ArgumentError(
            f'{self.name}() got an unexpected keyword argument {k!r}',
            loc=loc, hint=f'Its parameters are: {", ".join(params)}; the '
            'modes are dry_run, stackless, max_stack_depth, backend, '
            'block_code_cache, schedule, profile, max_steps and on_error.')
      if k in bound:
        raise errors.ArgumentError(
            f'{self.name}() got multiple values for argument {k!r}', loc=loc)
      bound[k] = v
    defaults = self.context._defaults_of(self.name)
    for p in params:
      if p not in bound and p in defaults:
        bound[p] = (call_arguments.shared_default(defaults[p]) if batched
                    else defaults[p])
    missing = [p for p in params if p not in bound]
    if missing:
      raise errors.ArgumentError(
          f'{self.name}() is missing argument(s) {", ".join(missing)}',
          loc=loc)
    return [bound[p] for p in params]


def _checked_modes(max_stack_depth, max_steps, backend, loc):
  """A call's `max_stack_depth` and `max_steps` as Python ints (any
  integral number is taken: `np.int64(20)`), after checking them and
  `backend`.

  Raises:
    ArgumentError: Naming the mode and what it takes, at the user's
      function.
  """
  def count(name, value, what):
    if not isinstance(value, numbers.Integral) or isinstance(
        value, (bool, np.bool_)) or value < 1:
      raise errors.ArgumentError(
          f'{name} must be {what}, got {value!r}', loc=loc,
          hint=f'Pass a whole number of at least 1 ({name}=64); any '
          'integer type is taken (int, np.int64).')
    return int(value)
  max_stack_depth = count('max_stack_depth', max_stack_depth,
                          'a positive int')
  if max_steps is not None:
    max_steps = count('max_steps', max_steps, 'None or a positive int')
  if backend is not None and not isinstance(backend, backend_base.Backend):
    raise errors.ArgumentError(
        f'backend must be a backend object or None, got {backend!r}',
        loc=loc, hint='Pass backend=ab.NumpyBackend() or '
        'backend=ab.TensorFlowBackend() (not the name as a string), or '
        'leave it out: the arguments\' type picks one (TensorFlow for '
        'tensors, NumPy otherwise).')
  return max_stack_depth, max_steps
