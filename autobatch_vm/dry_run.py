"""The dry run: each batch member run alone, as plain Python.

`f(x, dry_run=True)` calls the user's Python function once per member, on
that member's arguments as a batch of one, and stacks the results as the
batched call does (`DryRuns.run`); a batched function it calls runs as
plain Python too, with the arguments the batched call gives one member
(`DryRuns.call`).  It is the reference that a batched run is checked
against, and a member can be debugged in it with Python's own tools.  Each
`Context` hands its dry runs to a `DryRuns` of its own.

Every value that a primitive or a callee gets in the batched call is one
row per member; in the dry run it is that member's row, a batch of one.
So each variable assigned in the function (`prev = np.arange(4)`,
`i = 0`, a loop counter, a primitive's result) and each callee's result
is made a batch of one of its type in the batched program as it is
assigned (`DryRuns.member_value`, which the copy of the function made by
`python.source.dry_run_function` calls): a helper that reads
`row[:, j]` works alike in both.

A per-member function (`Context.batch(per_member=True)`) is run on each
member's values as they are, without a batch axis; where it calls a
batch-aware function, or one calls it, the values cross as batches of
one.  Its `x[i] = v` gives `x` a new value, as in the batched call.
"""

import collections.abc
import threading
import weakref

import numpy as np

from autobatch_vm import errors
from autobatch_vm import ops
from autobatch_vm.ir import instructions as inst
from autobatch_vm.per_member import member_ops
from autobatch_vm.python import call_arguments
from autobatch_vm.python import to_ir as python_to_ir
from autobatch_vm.python.call_arguments import _PY_NUMBERS

__all__ = ['DryRuns']


class DryRuns:
  """The dry runs of one `Context`: which run, in each thread, and how.

  A batched function called while a dry run of its Context runs in this
  thread is itself run as plain Python (`active`, `call`).  The Python
  function a dry run calls for a batched function (the copy that
  `python.to_ir.dry_run_function` makes) is made once per batched
  function.
  """

  def __init__(self):
    self._local = threading.local()
    self._functions = weakref.WeakKeyDictionary()

  def active(self):
    """Tells whether a dry run of this Context runs in this thread.

    Returns:
      True inside a dry run, where a batched call runs as plain Python.
    """
    return self._depth() > 0

  def _depth(self):
    return getattr(self._local, 'depth', 0)

  def run(self, bf, args, batch, backend, given=None):
    """Runs `bf`'s plain Python function once per member (batches of one).

    The results are stacked as the batched call's are: each leaf gets the
    batch axis where a member returned it without one (a leaf whose shape
    is the per-member shape of the batched call's result type; one of
    shape `[1, *that]` is already a batch of one), and is cast to that
    type's dtype.  An empty batch gives empty arrays of that type.  Where
    the result type cannot be found (the batched call fails to compile,
    e.g. over a `print`), a scalar gets the batch axis and anything else
    is taken as a batch of one.  A per-member function's leaves are one
    member's values, whatever their shape: each gets the batch axis.

    Each member gets its rows of the arguments, each a batch of one of
    its parameter's type (`_member_types`: a Python number argument has
    the dtype the batched call casts it to where it is used; where its
    uses are cast to different dtypes, it is the Python number, which
    takes each of them as it meets it).

    Args:
      bf: The `BatchedFunction`.
      args: Its arguments, converted (`call_arguments.convert_arguments`).
      batch: Their batch size.
      backend: The backend of the arrays.
      given: The arguments before conversion (bound to the parameters),
        or None.

    Returns:
      The members' results, stacked.

    Raises:
      ArgumentError: If the batch is empty and the result type unknown.
    """
    scalars = None if given is None else call_arguments.python_scalars(
        given)
    program = _typed_or_none(bf, args, backend, scalars)
    result_type = (None if program is None else
                   program.main_function.var_defs[python_to_ir.RETURN_VAR]
                   .tensors)
    run = self._python_function(bf)
    results = []
    outer = getattr(self._local, 'program', None)
    outer_mode = self._per_member()
    self._local.depth = self._depth() + 1
    self._local.program = (program, backend, {})
    self._local.per_member = bf.per_member
    try:
      params = self._types(bf.name)
      params = params and [params.get(p) for p in
                           program.main_function.vars_in]
      for i in range(batch):
        # A copy: the member's code may update a variable in place
        # (`a += 1` on an array), which must not write through to the
        # caller's arguments.
        member = [inst.pattern_map(lambda x: _own(backend.slice(x, i)), a)
                  for a in args]
        if bf.per_member:
          member = [g if given is not None and type(g) in _PY_NUMBERS
                    else _one_member(a)
                    for a, g in zip(member, given or member)]
        elif params:
          # A Python number that the dtype its uses take cannot hold
          # stays one: the member's operators refuse it, as NumPy's do.
          member = [g if (given is not None and type(g) in _PY_NUMBERS and
                          (t is None or _int_outside(g, t)))
                    else _converted(backend, a, t, a)
                    for a, t, g in zip(member, params, given or params)]
        results.append(run(*member))
    finally:
      self._local.depth -= 1
      self._local.program = outer
      self._local.per_member = outer_mode
    _check_classes(bf, results)
    if not results:
      if result_type is None:
        raise errors.ArgumentError(
            f'dry run of {bf.name}() on an empty batch: the result type is '
            'unknown', loc=bf.context.function_loc(bf.name),
            hint='The batched call on the same arguments says why.')
      return inst.pattern_map(lambda t: backend.zeros(t, 0), result_type,
                              inst.TensorType)
    types_ = (inst.pattern_flatten(result_type, inst.TensorType)
              if result_type is not None else None)
    leaves = [inst.pattern_flatten(r) for r in results]
    if types_ is not None and any(len(l) != len(types_) for l in leaves):
      types_ = None
    columns = list(zip(*leaves))
    merged = []
    changed = []
    for k, column in enumerate(columns):
      t = types_[k] if types_ is not None else None
      rows = [_member_rows(backend, x, t, one_member=bf.per_member)
              for x in column]
      if t is not None:
        changed.extend(m for m, (x, row) in enumerate(zip(column, rows))
                       if _cast_changed(x, row))
      merged.append(backend.concat(rows))
    if changed:
      errors.TypeCastWarning.warn(
          f'In the dry run of {bf.name}(), the result of members '
          f'{sorted(set(changed))} changed when cast to the batched '
          "run's type for it (declared by type_inference=, or inferred): "
          'a float where that type is an integer, say.  The batched run '
          'holds that type too, so it gives those members the cast '
          'values.  Give the value its dtype in the function (float(x), '
          'np.float64(0)), or declare the type it has.',
          bf.context.function_loc(bf.name))
    return inst.pattern_unflatten(results[0], merged)

  def call(self, bf, args, kwargs):
    """Runs a call of batched function `bf` inside a dry run, as plain Python.

    The callee gets the arguments that the batched call gives one member.
    There a callee's parameters are per-member values, as at the top
    level: each argument leaf becomes a batch of one of its parameter's
    type in the batched program (`_member_types`), so that a literal
    `f(v, 1)` is `array([1])` (not `1`) and a constant `np.zeros(3)` gets
    the batch axis.  Its result reaches the caller so too, a batch of one
    of the type the caller's variable for it has.  Where the program does
    not compile, a scalar argument leaf becomes a batch of one of its own
    dtype, and the result is what the callee's Python returns.

    Args:
      bf: The called `BatchedFunction`.
      args: The call's positional arguments.
      kwargs: Its keyword arguments.

    Returns:
      What the callee's Python returns, as a batch of one.

    Raises:
      ArgumentError: If the arguments do not bind to its parameters.
    """
    # As the batched call runs it: None arguments, the variant with those
    # fixed.
    bf, args = bf.context._with_nones_fixed(
        bf, bf.bind_arguments(args, kwargs))
    program, backend, _ = self._local.program
    caller = self._per_member()
    if caller and bf.per_member:
      return self._call_in_mode(bf, args, True)
    if bf.per_member:   # batches of one in, one member's values out
      args = [g if type(g) in _PY_NUMBERS else _one_member(g) for g in args]
      result = self._call_in_mode(bf, args, True)
      return _converted(backend, result, self._result_type(bf.name),
                        _batch_of_one(backend, result))
    if caller:   # one member's values in: batches of one
      args = [_batch_of_one(backend, a) for a in args]
      return _one_member(self._call_in_mode(bf, args, False))
    types_ = self._types(bf.name)
    params = (program.function(bf.name).vars_in if types_ is not None
              else [None] * len(args))
    converted = []
    for a, p in zip(args, params):
      if types_ is not None:
        converted.append(_converted(backend, a, types_.get(p), a))
        continue
      try:
        converted.append(call_arguments.map_arguments(
            lambda x: _member_rows(backend, x, None), a))
      except Exception:  # pylint: disable=broad-except
        converted.append(a)   # as written, for the callee to fail on
    result = self._python_function(bf)(*converted)
    if types_ is None:
      return result
    return _converted(backend, result, self._result_type(bf.name), result)

  def _per_member(self):
    return getattr(self._local, 'per_member', False)

  def _call_in_mode(self, bf, args, per_member):
    """`bf`'s dry-run function on `args`, its calls made as from a
    function of its kind."""
    outer = self._per_member()
    self._local.per_member = per_member
    try:
      return self._python_function(bf)(*args)
    finally:
      self._local.per_member = outer

  def member_value(self, function, var, value):
    """Gives one member's value of a variable as the batched call has it.

    That is a batch of one of the variable's type there.  The copy of the function that a dry run calls
    (`python.source.dry_run_function`) calls this at each assignment
    and at the start of each iteration of a `for` loop.

    Args:
      function: The batched function's name.
      var: The variable's name.
      value: What the member's Python computed for it.

    Returns:
      `value` as a batch of one of the variable's type (`_member_rows`), or
      as it is where no dry run of a typed program runs, the variable is
      not in it, or the value does not fit its type (the batched call
      would refuse it or compute otherwise; Python shows it as it is).
    """
    if self._depth() == 0 or self._per_member():
      return value
    types_ = self._types(function)
    if types_ is None or var not in types_:
      return value
    return _converted(self._local.program[1], value, types_[var], value)

  def _result_type(self, callee):
    """The type a call of `callee` gives its caller's variable for one
    member (the `_member_types` of the callers' variables for it, where
    they agree), else the callee's result type; None where unknown."""
    program, _, known = self._local.program
    if program is None:
      return None
    key = ('result', callee)
    if key not in known:   # once per function and dry run
      found = []
      for fn in program.functions:
        for block in fn.blocks:
          for op in block.instructions:
            if (isinstance(op, inst.FunctionCallOp) and
                op.function == callee):
              types_ = self._types(fn.name) or {}
              t = inst.pattern_map(types_.get, op.vars_out)
              if t not in found:
                found.append(t)
      if len(found) == 1:
        known[key] = found[0]
      elif any(f.name == callee for f in program.functions):
        known[key] = program.function(callee).var_defs[
            python_to_ir.RETURN_VAR].tensors
      else:   # called as variants only, which disagree
        known[key] = None
    return known[key]

  def _types(self, function):
    """The member type of each variable of `function` in the program the
    running dry run agrees with (`_member_types`), or None."""
    program, _, known = self._local.program
    if function not in known:   # once per function and dry run
      known[function] = None
      if program is not None and any(
          f.name == function for f in program.functions):
        known[function] = _member_types(program.function(function))
    return known[function]

  def _python_function(self, bf):
    """The Python function a dry run calls for `bf` (see
    `python.to_ir.dry_run_function`), made once."""
    fn = self._functions.get(bf)
    if fn is None:
      name = bf.name
      try:
        fn = python_to_ir.dry_run_function(
            bf.python_function,
            None if bf.per_member else (
                lambda var, value: self.member_value(name, var, value)),
            member_ops if bf.per_member else None)
      except errors.AutoBatchError:
        fn = bf.python_function  # no readable source: run it as it is
      code = bf.python_function.__code__
      if code.co_kwonlyargcount:
        # Called with an argument per parameter, in their order: the
        # keyword-only ones by name.
        fn = _keywords_after(fn, code.co_argcount, code.co_varnames[
            code.co_argcount:code.co_argcount + code.co_kwonlyargcount])
      if bf.static:
        # A variant (`Context.variant`): its arguments, with None for the
        # parameters it fixes.
        fn = _with_none(fn, code.co_varnames[
            :code.co_argcount + code.co_kwonlyargcount], bf.static)
      self._functions[bf] = fn
    return fn


def _classes(value):
  """The namedtuple classes of a result's structure, nested as it is
  (None for a plain tuple or list, and for a leaf)."""
  if isinstance(value, (tuple, list)):
    return (type(value) if inst.is_namedtuple(value) else None,
            tuple(_classes(v) for v in value))
  return None


def _check_classes(bf, results):
  """Raises where members' results hold a dict (or a set), or
  namedtuples of different classes at one place, which no batched result
  holds (the batched call refuses them too, when typed)."""
  for m, r in enumerate(results):
    for leaf in inst.pattern_flatten(r):
      if isinstance(leaf, (collections.abc.Mapping, collections.abc.Set)):
        raise errors.TypeInferenceError(
            f'member {m} of {bf.name}() returns a '
            f'{type(leaf).__name__}, not an array: a batched function '
            'returns arrays, or tuples, lists or namedtuples of them (the '
            'batched call refuses it too)',
            loc=bf.context.function_loc(bf.name),
            hint='Return a namedtuple for named results '
            '(R = collections.namedtuple(\'R\', [\'a\', \'b\']), then '
            'return R(a=x, b=y)), or a tuple.')
  if not results:
    return
  first = _classes(results[0])
  for m, r in enumerate(results[1:], 1):
    if _classes(r) != first:
      names = [type(x).__name__ for x in (results[0], r)]
      raise errors.TypeInferenceError(
          f'the members of {bf.name}() return values of different '
          f'classes or structures (member 0: {names[0]}, member {m}: '
          f'{names[1]}): a batched result holds one class for every member',
          loc=bf.context.function_loc(bf.name),
          hint='Return one namedtuple class on every path (the same fields '
          'in the same order), with a field that tells the kinds apart if '
          'you need to.')


def _with_none(fn, params, static):
  """`fn` called with an argument per parameter not in `static`, and
  None for those."""
  def call(*args):
    it = iter(args)
    return fn(*[None if p in static else next(it) for p in params])
  return call


def _typed_or_none(bf, args, backend, scalars=None):
  """The typed program of `bf` on converted `args`, as the batched
  call has it; None where the program does not compile."""
  try:
    return bf.context.program_compiled(
        bf.name, call_arguments.argument_types(args, backend, scalars),
        backend)
  except errors.AutoBatchError:
    return None


def _one_member(value):
  """The member's values of batch-of-one leaves of `value`."""
  def strip(x):
    shape = getattr(x, 'shape', None)
    return x[0] if shape is not None and len(shape) and shape[0] == 1 else x
  return inst.pattern_map(strip, value)


def _own(x):
  """`x`, copied if it is a NumPy array (a view of the caller's data)."""
  return x.copy() if isinstance(x, np.ndarray) else x


def _member_types(fn):
  """The type of each variable of typed `Function` `fn` as the batched call
  gives it to one member's primitives and callees.

  That is the variable's type, except for a literal (a weak variable:
  `i = 0`, a `range` counter, `f(v, 1)`'s parameter, a Python number
  argument), which the batched call keeps in its default dtype (int64,
  float64) and casts, where it meets a typed array, to the dtype a Python
  number would take there (`PrimOp.casts`): the dtype its uses agree on.
  Where they are cast to different dtypes (a counter compared with int64
  data and dividing float64 data), no one array is what every use gets:
  the type is None, and the dry run leaves the value as the member's
  Python computes it (a Python number, which each use promotes as the
  batched call's cast does).  So it does where a use takes the number
  uncast, as NumPy takes a Python number (`PrimOp.numbers`: `s + (k if d
  else 0)`).

  A size that a primitive gets as a Python int (`n = x.shape[1]`, then
  `np.zeros((len(x), n))`: `passes.size_folding`) is None too: the
  member's Python int, as the primitive gets it.

  Returns:
    A dict: variable name -> pattern of `TensorType`, or None.
  """
  seen = {}
  sizes = set()
  for block in fn.blocks:
    for op in block.instructions:
      if not isinstance(op, inst.PrimOp) or op.function is inst.identity:
        continue
      casts = dict(op.casts)
      sizes.update(op.vars_in[k] for k in getattr(op.function, 'constants',
                                                  None) or ())
      for i, v in enumerate(op.vars_in):
        t = fn.var_defs[v].tensors
        if isinstance(t, inst.TensorType):
          seen.setdefault(v, set()).add(
              None if i in op.numbers else np.dtype(casts.get(i, t.dtype)))
  out = {}
  for v, d in fn.var_defs.items():
    t = d.tensors
    uses = seen.get(v, set())
    if isinstance(t, inst.TensorType) and len(uses) == 1 and None not in uses:
      t = inst.TensorType(next(iter(uses)), t.shape)
    out[v] = None if len(uses) > 1 or None in uses or v in sizes else t
  return out


def _int_outside(number, tensor_type):
  """Whether Python number `number` is an int that the dtype of
  `tensor_type` (a type pattern) cannot hold."""
  return isinstance(tensor_type, inst.TensorType) and ops.int_outside(
      number, np.dtype(tensor_type.dtype))


def _converted(backend, value, tensor_type, otherwise):
  """`value` as a batch of one of type pattern `tensor_type`
  (`_member_rows` per leaf; a list of numbers may be a leaf); `otherwise`
  where the type is unknown or `value` does not fit it."""
  def convert(x, t):
    if isinstance(t, inst.TensorType):
      return _member_rows(backend, x, t)
    if not isinstance(x, (tuple, list)) or len(x) != len(t):
      raise ValueError('not of the structure of the type')
    items = [convert(a, b) for a, b in zip(x, t)]
    return type(x)(*items) if inst.is_namedtuple(x) else type(x)(items)
  if tensor_type is None:
    return otherwise
  try:
    return convert(value, tensor_type)
  except Exception:  # pylint: disable=broad-except
    return otherwise


def _batch_of_one(backend, value):
  """A per-member function's value `value` (a pattern of one member's
  leaves) as batches of one; as it is where a leaf is no array."""
  try:
    return call_arguments.map_arguments(
        lambda x: _member_rows(backend, x, None, one_member=True), value)
  except Exception:  # pylint: disable=broad-except
    return value   # as written, for the caller to fail on


def _member_rows(backend, x, tensor_type, one_member=False):
  """One member's result leaf `x` as a batch of one of `tensor_type`
  (None: unknown; then a scalar gets the batch axis).

  With `one_member` (a per-member function's value, which never has the
  batch axis: `x`, `x[:]`, a row of `x` alike) it always gets the batch
  axis, and the type's dtype where the type is known."""
  if tensor_type is None:
    v = backend.asarray(x)
    return v if len(backend.shape(v)) and not one_member else (
        backend.expand(v))
  if type(x) in _PY_NUMBERS:  # a literal: the type's dtype, as batched
    x = np.asarray(x, tensor_type.dtype)
  v = backend.asarray(x)
  shape = tuple(backend.shape(v))
  if one_member or shape == tuple(tensor_type.shape):
    v = backend.expand(v)  # the member's value: give it the batch axis
  elif shape != (1,) + tuple(tensor_type.shape) and not shape:
    v = backend.expand(v)  # not the batched call's type: a scalar is one row
  if backend.dtype(v) != np.dtype(tensor_type.dtype):
    v = backend.cast(v, tensor_type.dtype)
  return v


def _keywords_after(fn, positional, keyword_only):
  """`fn` called with all its arguments by position: the first
  `positional` passed so, the rest by their names `keyword_only`."""

  def call(*args):
    return fn(*args[:positional], **dict(zip(keyword_only, args[positional:])))
  return call


def _cast_changed(x, row):
  """Whether one member's concrete result `x` changed value as `row`,
  cast to the inferred dtype (`_member_rows`); False where either is
  symbolic (inside a graph) or they do not line up."""
  try:
    before = np.asarray(x.numpy() if hasattr(x, 'numpy') else x)
    after = np.asarray(row.numpy() if hasattr(row, 'numpy') else row)
  except Exception:  # pylint: disable=broad-except
    return False
  if (before.dtype == after.dtype or before.size != after.size or
      before.dtype.kind not in 'biufc' or after.dtype.kind not in 'biufc'):
    return False
  joint = np.complex128 if 'c' in (before.dtype.kind,
                                   after.dtype.kind) else np.float64
  with np.errstate(all='ignore'):
    a = before.ravel().astype(joint)
    b = after.ravel().astype(joint)
  same = (a == b) | (np.isnan(a) & np.isnan(b))
  return not bool(np.all(same))
