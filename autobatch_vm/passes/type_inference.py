"""Type inference: the dtype and per-member shape of every variable.

Expects a `Program` straight from the frontend (no `var_defs`), the types of
the main function's inputs, and a backend to run primitives with.

Guarantees: every variable of every function that the run can reach gets a
`Type`; primitives' results have the batch dimension; variables hold one
type throughout (`x = 1` then `x = x + 0.5` makes `x` float64, since a
Python literal is "weak" and takes the type it meets, as in NumPy); the
return type agrees with the user's `type_inference` callable where given.

Algorithm: a fixpoint over all functions.  Types only move up a small
lattice (unknown -> weak literal -> definite), so it terminates.  Each pass
walks every block of every function whose parameter types are known: a
`PrimOp` whose inputs are typed is run once on dummy zeros of batch size 1
and its results' types are joined into its outputs (a user primitive with
batched inputs also runs on two made-up members, and is refused where one
member's result reads the other's values: `member_mixing`); a
`FunctionCallOp` joins its argument types into the callee's parameters
and, once the callee's return type is known, gives it to its outputs.
Recursion converges because a base case (`return 1`) types the result
before the recursive case needs it; if a function's result is never
typed, the error suggests giving `type_inference`.

A parameter of main may be weak (a Python number passed as an argument,
`call_arguments.argument_types`): it is typed as a literal is.  Each
variable remembers which of main's arguments its dtype comes from, so that
a type clash names the argument (and the frontend its value), not only the
variable where two dtypes meet.

Limits: one signature per function (all call sites must agree); variables
cannot change dtype or shape.
"""

import ast
import dataclasses
import functools
import re
import threading
import warnings
import weakref

import numpy as np

from autobatch_vm import errors
from autobatch_vm import externals
from autobatch_vm import ops
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ir import liveness as ir_liveness
from autobatch_vm.passes import member_indexing
from autobatch_vm.passes import member_mixing
from autobatch_vm.passes import size_folding
from autobatch_vm.per_member import member_ops
from autobatch_vm.passes.declared_types import _PY_SCALARS
from autobatch_vm.passes.declared_types import checked_result
from autobatch_vm.passes.declared_types import declared_type_error
from autobatch_vm.passes.declared_types import Mismatch
from autobatch_vm.passes.made_up import _FailedOnEveryKind
from autobatch_vm.passes.made_up import _is_literal
from autobatch_vm.passes.made_up import _leaves
from autobatch_vm.passes.made_up import _made_up_error
from autobatch_vm.passes.made_up import MADE_UP
from autobatch_vm.passes.made_up import made_up
from autobatch_vm.passes.made_up import ones_arguments

__all__ = ['infer_types', 'join', 'type_of_value', 'normalize_declared']

RET = inst.RETURN_VAR
_MAX_ITERATIONS = 1000
_WEAK_TO = {'b': 'b', 'i': 'iufc', 'u': 'iufc', 'f': 'fc', 'c': 'c'}
_NUMERIC = 'biufc'


def _join_leaf(a, b):
  if a == b:
    return a
  if a.shape != b.shape:
    raise Mismatch(f'{a} vs {b} (different shapes)')
  if a.weak and b.weak:
    return inst.TensorType(np.result_type(a.dtype, b.dtype), a.shape, True)
  if a.weak or b.weak:
    weak, strong = (a, b) if a.weak else (b, a)
    if strong.dtype.kind in _WEAK_TO.get(weak.dtype.kind, ''):
      return strong
  if a.dtype == b.dtype:
    return a.strong()
  if a.dtype.kind in _NUMERIC and b.dtype.kind in _NUMERIC:
    # One path gives an int, another a float (`return n` / `return n *
    # 1.5`): the members' values together are what NumPy makes of them
    # (`np.stack`), as a dry run gives them; the VM casts each write to
    # the variable's dtype.
    return inst.TensorType(np.result_type(a.dtype, b.dtype), a.shape)
  raise Mismatch(f'{a.strong()} vs {b.strong()} (different dtypes)',
                 dtypes=True)


def join(a, b):
  """Computes the least upper bound of two type patterns.

  Args:
    a: A type pattern (of `TensorType`), or None (unknown).
    b: A type pattern (of `TensorType`), or None (unknown).

  Returns:
    The least upper bound: the known one if the other is None, else a
    pattern of the same structure whose leaves join `a`'s and `b`'s.

  Raises:
    Mismatch: If the structures, shapes or dtypes cannot be joined.
  """
  if a is None:
    return b
  if b is None:
    return a
  a_leaf = isinstance(a, inst.TensorType)
  b_leaf = isinstance(b, inst.TensorType)
  if a_leaf and b_leaf:
    return _join_leaf(a, b)
  if a_leaf or b_leaf or len(a) != len(b):
    raise Mismatch(f'{inst.type_str(a)} vs {inst.type_str(b)} '
                   '(different structures)')
  if type(a) is not type(b) and (inst.is_namedtuple(a) or
                                 inst.is_namedtuple(b)):
    # One class for every member: the batched result could not be each
    # member's own, as Python (and the dry run) give it.
    raise Mismatch(f'{type(a).__name__} vs {type(b).__name__} (different '
                   'classes: a variable, and a function\'s result, hold '
                   'values of one namedtuple class on every path)')
  items = [join(x, y) for x, y in zip(a, b)]
  return type(a)(*items) if inst.is_namedtuple(a) else type(a)(items)


def _leaf_pairs(got, expected):
  """The pairs of leaves (`TensorType`s) of two type patterns of one
  structure, or None where their structures differ."""
  try:
    return list(zip(inst.pattern_flatten(got, inst.TensorType),
                    inst.pattern_flatten(expected, inst.TensorType),
                    strict=True))
  except (ValueError, TypeError):
    return None


def _gains_the_batch(got, expected):
  """Whether type pattern `got` (run at batch size 1 with numbers as
  arrays) is `expected` with an axis of size 1 (the batch's) more in
  some leaf: one structure and dtypes."""
  leaves = _leaf_pairs(got, expected)
  if leaves is None:
    return False

  def one_more(x, y):
    return any(x[k] == 1 and x[:k] + x[k + 1:] == y for k in range(len(x)))
  return (all(x.dtype == y.dtype and (x.shape == y.shape or
                                      one_more(x.shape, y.shape))
              for x, y in leaves) and
          any(x.shape != y.shape for x, y in leaves))


def castable(value, declared):
  """Raises `Mismatch` unless values of type pattern `value` can be cast
  to `declared`: the same structure and shapes, and a numeric or boolean
  dtype (complex only to complex: a cast to a real dtype would drop the
  imaginary part).  Shapes are not broadcast: a per-member value and a
  member-independent one would broadcast differently."""
  if isinstance(declared, inst.TensorType):
    if not isinstance(value, inst.TensorType):
      raise Mismatch(f'{inst.type_str(value)} vs {declared} '
                     '(different structures)')
    if value.shape != declared.shape:
      raise Mismatch(f'{value.strong()} vs {declared} (different shapes)')
    if value.dtype.kind == 'c' and declared.dtype.kind != 'c':
      raise Mismatch(f'{value.strong()} vs {declared} (complex to real)')
    return
  if (isinstance(value, inst.TensorType) or len(value) != len(declared)):
    raise Mismatch(f'{inst.type_str(value)} vs {inst.type_str(declared)} '
                   '(different structures)')
  for v, d in zip(value, declared):
    castable(v, d)


def type_of_value(value, backend, batched, describe):
  """Finds the type pattern of a primitive's result computed at batch size 1.

  Args:
    value: The result, a pattern of arrays or tensors (or Python scalars).
    backend: The backend whose `dtype` and `shape` read the leaves.
    batched: Whether leaves must carry the batch dimension (results of
      primitives with inputs) or are member-independent constants
      (primitives without inputs), which the VM broadcasts.
    describe: A callable with no arguments that names the primitive in
      error messages.

  Returns:
    A pattern of `TensorType`s, shapes without the batch dimension; Python
    scalars are weakly typed.

  Raises:
    TypeInferenceError: If a leaf is not a boolean or numeric array, or a
      batched leaf lacks the batch dimension of 1.
  """
  def leaf(v):
    if type(v) in _PY_SCALARS:  # not np.float64, a float subclass
      return inst.TensorType(np.asarray(v).dtype, (), weak=True)
    if (isinstance(v, np.ndarray) and v.dtype == object and v.size and
        isinstance(v.flat[0], (dict, set))):
      v = v.flat[0]   # one member's, as a per-member primitive stacked them
    one = (v.flat[0] if isinstance(v, np.ndarray) and v.dtype == object and
           v.size else v)
    if isinstance(one, errors.RANDOM_GENERATORS):
      raise errors.TypeInferenceError(
          f'{describe()} produced a random generator '
          f'({type(one).__name__}), not an array: an object that holds its '
          'stream\'s state, which a batched variable cannot hold',
          hint=errors.RANDOM_GENERATOR_HINT)
    if v is None or isinstance(v, (str, bytes, dict, set)):
      raise errors.TypeInferenceError(
          f'{describe()} produced a {type(v).__name__}, not an array',
          hint='Batched variables hold arrays (or tuples/namedtuples of '
          'arrays).' + ('  For named values use a namedtuple (R = '
                        'collections.namedtuple(\'R\', [\'a\', \'b\']), '
                        'then R(a=x, b=y)).' if isinstance(v, dict) else ''))
    try:
      dtype, shape = backend.dtype(v), backend.shape(v)
    except Exception as e:  # pylint: disable=broad-except
      raise errors.TypeInferenceError(
          f'{describe()} produced a value of type {type(v).__name__} that '
          f'is not an array: {e}') from e
    if dtype.kind not in 'biufc':
      raise errors.TypeInferenceError(
          f'{describe()} produced an array of dtype {dtype}',
          hint='Only boolean and numeric arrays can be batched.')
    if not batched:
      # A constant is one value for every member; a leading dimension of
      # 1 is a batch of one (TFP's convention: `tf.constant([0])`), as it is
      # when the member runs alone (`dry_run`).
      if shape and shape[0] == 1:
        return inst.TensorType(dtype, shape[1:])
      return inst.TensorType(dtype, shape)
    if not shape or shape[0] != 1:
      raise errors.TypeInferenceError(
          f'{describe()} returned shape {tuple(shape)} without the leading '
          'batch dimension', hint='Primitives work on whole batches: keep '
          'axis 0 as the batch (e.g. reduce with axis=-1, index with a '
          'constant, x[:, 0]); a per-member scalar (shape [batch]) needs no '
          'reduction: `assert x > 0`, not `assert np.all(x > 0)`.  A '
          'member-independent constant next to '
          'batched values (`return np.float32(0), x`) needs its own statement '
          '(`zero = np.float32(0)`), which is broadcast to the batch.')
    return inst.TensorType(dtype, shape[1:])
  return inst.pattern_map(leaf, value)


def normalize_declared(result, fn):
  """Turns what a `type_inference` callback declared into `TensorType`s.

  Args:
    result: The declared type: an `ab.Type`, a `TensorType`, or a tuple or
      list (or namedtuple) of them.
    fn: The `Function` whose result is declared, named in errors.

  Returns:
    A pattern of strong `TensorType`s with the structure of `result`.

  Raises:
    TypeInferenceError: If `result` holds something that is not a type.
  """
  if isinstance(result, inst.Type):
    return normalize_declared(result.tensors, fn)
  if isinstance(result, inst.TensorType):
    return result.strong()
  if isinstance(result, (tuple, list)):
    items = [normalize_declared(r, fn) for r in result]
    if inst.is_namedtuple(result):
      return type(result)(*items)
    return type(result)(items)
  raise errors.TypeInferenceError(
      f'type_inference of {fn.name!r} returned {result!r}', loc=fn.loc,
      hint='Return an ab.Type, an ab.TensorType(dtype, shape) or a tuple of '
      'them (e.g. `lambda arg_types: arg_types[0]`).')


def _conform(declared, computed):
  """Declared types, restructured like `computed` (list vs tuple, 1-lists)."""
  if computed is None:
    return declared
  if (isinstance(declared, (list, tuple)) and len(declared) == 1
      and not isinstance(computed, (list, tuple))):
    return _conform(declared[0], computed)
  if (isinstance(declared, (list, tuple)) and
      isinstance(computed, (list, tuple)) and len(declared) == len(computed)):
    items = [_conform(d, c) for d, c in zip(declared, computed)]
    return type(computed)(*items) if inst.is_namedtuple(computed) else \
        type(computed)(items)
  return declared


# A primitive's function -> what makes its form with promoting operators
# (`register_promoting`).  Held beside the function, not in it: a Context
# pickled to another process carries its primitives only (there a
# primitive that fails for mixed dtypes on TensorFlow fails as written).
_PROMOTING = weakref.WeakKeyDictionary()


def register_promoting(function, make):
  """Registers the promoting form of a primitive's function.

  On TensorFlow, whose operators do not promote dtypes, type inference
  takes `make()` (a function of the same arguments, or None) where
  `function` fails (`_Inference.prim`).

  Args:
    function: A `PrimOp`'s function.
    make: Makes its form whose operators promote as NumPy's do.
  """
  _PROMOTING[function] = make


# A batch-aware primitive's function -> what makes its form on TensorFlow
# (`register_tensorflow_form`), and the form once made.  Held beside the
# function, as `_PROMOTING` is.
_TENSORFLOW_FORM = weakref.WeakKeyDictionary()
_TENSORFLOW_MADE = weakref.WeakKeyDictionary()


def register_tensorflow_form(function, make):
  """Registers the form a primitive's function takes on TensorFlow.

  A batch-aware primitive that calls NumPy's functions (`np.sqrt(x)`),
  which take no symbolic tensor, runs on TensorFlow in a form that calls
  TensorFlow's NumPy API's functions of the same names where given a
  tensor (`python.primitives.tf_numpy`): type inference takes `make()`
  on TensorFlow, eagerly and in graphs alike (`_Inference.prim`).

  Args:
    function: A `PrimOp`'s function.
    make: Makes its TensorFlow form (a function of the same arguments).
  """
  _TENSORFLOW_FORM[function] = make


# A primitive's function -> what makes its forms where Python numbers that
# the members compute meet arrays (`register_weak_form`), and those made,
# by the positions of the weak inputs.  Held beside the function, as
# `_PROMOTING` is.
_WEAK_FORM = weakref.WeakKeyDictionary()
_WEAK_MADE = weakref.WeakKeyDictionary()


def register_weak_form(function, make):
  """Registers what makes a primitive's weak forms.

  Per member a Python number that the member computes (`300 if d else
  0`, `math.exp(-z)`, `k * 2` of a loop counter `k`) takes the dtype of
  the array it meets, as NumPy 2 takes Python numbers (NEP 50); batched
  it is an array.  `make(weak_inputs)`, given the positions of the inputs
  that hold Python numbers (weak variables), gives `(form, numbers)`:
  the primitive's function with such operators casting the number as
  NumPy does (`ops.weak_operator`), or None where it has none; and which
  of the primitive's values are such numbers (True or False, a tuple of
  those for a tuple), whose types are weak (`_Inference.prim`).

  Args:
    function: A `PrimOp`'s function.
    make: As above.
  """
  _WEAK_FORM[function] = make


def weak_form(function, weak_inputs):
  """`(form, numbers)` of `function` for weak inputs at `weak_inputs` (a
  frozenset), made once (`register_weak_form`); `(None, False)` where it
  has none registered."""
  try:
    make = _WEAK_FORM.get(function)
  except TypeError:
    return None, False
  if make is None:
    return None, False
  made = _WEAK_MADE.setdefault(function, {})
  if weak_inputs not in made:
    made[weak_inputs] = make(weak_inputs)
  return made[weak_inputs]


def tensorflow_form(function):
  """`function`'s form on TensorFlow (`register_tensorflow_form`), made
  once; `function` itself where it has none."""
  try:
    return _TENSORFLOW_MADE[function]
  except (KeyError, TypeError):
    pass
  make = _TENSORFLOW_FORM.get(function)
  unbound = getattr(function, 'unbound', None)
  if make is None and unbound is not None:
    # A primitive given the sizes it reads (`size_folding`): its
    # TensorFlow form given them too.
    form = tensorflow_form(unbound)
    make = None if form is unbound else functools.partial(
        size_folding.given_constants, form, function.constants)
  if make is None:
    return function
  made = make()
  _TENSORFLOW_MADE[function] = made
  return made


class _Inference:
  """State of the fixpoint."""

  def __init__(self, program, backend):
    self.program = program
    self.backend = backend
    self.env = {f.name: {} for f in program.functions}
    self.declared = {}       # fn -> (param types, declared return pattern)
    self.prim_cache = {}
    self.changed = False
    self.origins = {}        # (fn, var) -> main's arguments its dtype is from
    self.arguments = {}      # main's parameter -> its type
    # `_prim_key` -> the input types with empty axes grown that a
    # primitive was typed on (`grown_empty_axes`).
    self.grown = {}
    # `_prim_key` -> whether the ops a primitive built into the graph being
    # traced draw at random or keep state (`Backend.ops_drawn`; None where
    # they do not tell), for `check_apart`.
    self.ops_draw = {}
    self.sizes = size_folding.SizeFolding(program)
    # id(op) -> the op with its promoting form (`promoted`).
    self.promoted = {}
    # id() of each op in its TensorFlow form: one that calls NumPy (taken
    # in its promoting form, `prim`).
    self.calls_numpy = set()
    # The prim keys (`_prim_key`) of batch-aware primitives whose result
    # may be one row every member shares (`member_mixing.shares_one_row`).
    self.shared_rows = set()
    # The inputs that `run_made_up` last ran a primitive on.
    self.made_up_inputs = None
    # The ids of primitives of no inputs that assign None (`best = None`).
    self.none_values = set()
    # Function name -> its `ir.liveness.Liveness`, for `none_read`.
    self.liveness = {}
    # id(op) of the ops whose promoting form failed where NumPy's math
    # takes it first (`prim`).
    self.unpromoted = set()
    # (id(op), weak input positions) -> `(op in its weak form, which of
    # its values are Python numbers the members compute)` (`weak_form`).
    self.weak_forms = {}
    self.on_tensorflow = getattr(backend, 'name', None) == 'tensorflow'

  # -- where dtypes come from --------------------------------------------------

  def origin(self, fn, var):
    """The arguments of main that `var` of `fn` takes its dtype from."""
    return self.origins.get((fn.name, var), frozenset())

  def result_origin(self, fn, vars_in, result):
    """The arguments a result of type `result` computed from `vars_in`
    takes its dtype from: those of the inputs whose dtype it has."""
    dtypes = {l.dtype for l in _leaves([result])}
    return frozenset(
        a for v in vars_in for a in self.origin(fn, v)
        if any(l.dtype in dtypes for l in _leaves([self.arguments[a]])))

  def explain_origin(self, old, new, old_origin, new_origin):
    """Names the arguments of main behind a clash of `old` and `new`."""
    main = self.program.main_function.name
    parts = []
    for t, origin in ((new, new_origin), (old, old_origin)):
      if t is None:
        continue
      for a in sorted(origin):
        arg = self.arguments[a]
        if not {l.dtype for l in _leaves([arg])} & {
            l.dtype for l in _leaves([t])}:
          continue
        what = ('a Python number, which takes the dtype it meets where it '
                'can' if isinstance(arg, inst.TensorType) and arg.weak
                else f'of type {inst.type_str(_strip(arg))}')
        parts.append(f'the {inst.type_str(_strip(t))} comes from argument '
                     f'{a!r} of {main}() ({what})')
    return ('; ' + '; '.join(dict.fromkeys(parts))) if parts else ''

  # -- helpers ---------------------------------------------------------------

  def set_type(self, fn, var, t, loc, origin=frozenset()):
    env = self.env[fn.name]
    old = env.get(var)
    if var == RET and fn.name in self.declared:
      # The declared result type wins: what is returned is cast to it.
      declared = self.declared[fn.name][1]
      try:
        castable(t, declared)
      except Mismatch as e:
        raise declared_type_error(
            f'{fn.name!r} returns a value that cannot be cast to the type '
            f'its type_inference declares: {e}', loc) from None
      return
    try:
      new = join(old, t)
    except Mismatch as e:
      dtypes = e.dtypes
      hint = ('A variable keeps one dtype and shape in every branch and '
              'iteration; convert explicitly (e.g. with .astype) so they '
              'agree.')
      because = ''
      if dtypes:
        because = self.explain_origin(old, t, self.origin(fn, var), origin)
      if because:
        hint = ('Pass the argument as an array of the dtype you mean (e.g. '
                'np.float32(0.5)), or convert explicitly (e.g. with '
                '.astype) so that the dtypes agree.')
      elif not dtypes:
        hint = ('A variable, and a function\'s result, keep one shape and '
                'structure in every branch and iteration: make every path '
                'give the same (broadcast or pad a value to one shape, '
                'return tuples of one length).')
      if var == RET and fn.type_inference is not None:
        hint = ('The type_inference callable of this function declares a '
                'different type; fix it, or omit it to infer the type.')
      what = ('the result' if var == RET else
              f'parameter {var!r}' if var in fn.vars_in else
              f'variable {var!r}')
      error = errors.TypeInferenceError(
          f'{what} of {fn.name!r} gets inconsistent types: {e}{because}',
          loc=loc, hint=hint)
      error.arguments = tuple(sorted(origin | self.origin(fn, var)))
      raise error from None
    if origin - self.origin(fn, var):
      self.origins[(fn.name, var)] = origin | self.origin(fn, var)
    if new != old:
      env[var] = new
      self.changed = True

  def bind(self, fn, names, t, loc, origin=frozenset()):
    if isinstance(names, str):
      self.set_type(fn, names, t, loc, origin)
      return
    if isinstance(t, inst.TensorType) or len(t) != len(names):
      raise errors.TypeInferenceError(
          f'cannot unpack a value of type {inst.type_str(t)} into '
          f'{len(names)} names', loc=loc,
          hint='Unpack only tuples; a batched array cannot be unpacked.')
    for n, sub in zip(names, t):
      self.bind(fn, n, sub, loc, origin)

  # -- ops -------------------------------------------------------------------

  def weak_form(self, fn, op):
    """`(op, numbers)`: `op` in its form for the weak inputs it has
    (`register_weak_form`; `op` itself where it needs none, or its input
    types are not all known), and which of its values are Python numbers
    that the members compute (None: none)."""
    in_types = [self.env[fn.name].get(v) for v in op.vars_in]
    if any(t is None for t in in_types):
      return op, None
    weak = frozenset(i for i, t in enumerate(in_types)
                     if isinstance(t, inst.TensorType) and _is_literal(t))
    key = (id(op), weak)
    if key not in self.weak_forms:
      function, constants = op.function, None
      form, numbers = weak_form(function, weak)
      unbound = getattr(function, 'unbound', None)
      if form is None and not numbers and unbound is not None:
        # A primitive given the sizes it reads (`size_folding`).
        form, numbers = weak_form(unbound, weak)
        constants = function.constants
      if form is not None and constants:
        form = size_folding.given_constants(form, constants)
      new = op if form is None else dataclasses.replace(op, function=form)
      # (`op` too: its id stays its own while the entry lives.)
      self.weak_forms[key] = (new, numbers or None, op)
    return self.weak_forms[key][:2]

  def prim(self, fn, op):
    """Types primitive `op` of `fn`, in the form that runs on the backend.

    On TensorFlow a primitive that calls NumPy's functions runs in its
    TensorFlow form (`register_tensorflow_form`).  There too, whose
    operators do not promote dtypes, a primitive that
    fails (`x * n` of a float64 and an int64) and has a form whose
    operators promote as NumPy's do (`register_promoting`: the frontend's
    `python.primitives.promoting`) is typed, and run, in that form if it
    works there; otherwise its own error stands.

    Where Python numbers that the members compute meet arrays, it is
    typed, and runs, in its weak form (`register_weak_form`), and the
    values that are such numbers get weak types.

    Args:
      fn: The function.
      op: The `PrimOp`.
    """
    op, numbers = self.weak_form(fn, op)
    key = id(op)
    if self.on_tensorflow and key not in self.promoted:
      form = tensorflow_form(op.function)
      if form is not op.function:
        self.promoted[key] = dataclasses.replace(op, function=form)
        self.calls_numpy.add(id(self.promoted[key]))
    op = self.promoted.get(key, op)
    if (self.on_tensorflow and key not in self.unpromoted and
        (op.per_member or id(op) in self.calls_numpy or
         self.departs_from_numpy(fn, op))):
      # NumPy's math on TensorFlow: promoted as NumPy promotes from the
      # start, where TensorFlow's operators would cast a NumPy operand to
      # the tensor's dtype (`np.full(3, 0.5) + n` of an int64 `n` gave
      # int64 ones; `n * SCALE[1]` read 1.5 as 1) or take `*` of booleans
      # for a logical and, rather than fail.
      new = self.promoting_form(op)
      if new is not None:
        if id(op) in self.calls_numpy:
          self.calls_numpy.add(id(new))
        try:
          self._prim(fn, new, numbers)
        except errors.AutoBatchError as e:
          if isinstance(e, (errors.TypeInferenceError,
                            errors.PerMemberError)) or (
                                member_ops.refuses_in_every_form(
                                    e.__cause__)) or (
                                not op.per_member and _literal_outside(
                                    op.text, [self.env[fn.name].get(v)
                                              for v in op.vars_in])):
            # The user's code's, whatever its form; or NumPy's refusal
            # of an integer its dtype cannot hold (`n + 200` of an int8),
            # which TensorFlow's form would wrap.
            raise
          self.unpromoted.add(key)
        else:
          self.promoted[key] = new
          return
    try:
      self._prim(fn, op, numbers)
    except errors.PrimitiveError as first:
      # (A promoting form has none of its own: it is taken once.)
      new = self.promoting_form(op)
      if new is None:
        raise
      try:
        self._prim(fn, new, numbers)
      except errors.AutoBatchError as e:
        if isinstance(e.__cause__, (ops.InPlaceCastError,
                                    ops.InPlaceShapeError)):
          raise   # `x op= v` refused as NumPy refuses it, past the dtypes
        raise first from None
      self.promoted[key] = new

  def departs_from_numpy(self, fn, op):
    """Whether batch-aware `op`, run by TensorFlow's operators, departs in
    kind from NumPy's reading of the same code, where it has integer or
    boolean inputs and a promoting form: a boolean where NumPy gives a
    number (TensorFlow's `*` of a boolean tensor is a logical and:
    `(x > 0) * 2` was a boolean), or integers where NumPy gives floats
    (TensorFlow casts a NumPy float to the tensor's integer dtype:
    `n * np.float64(0.5)` reads 0.5 as 0); or integers or booleans from
    NumPy floats it reads from outside (`externals.reads_numpy_floats`:
    `n >= SCALE[1]` reads 1.5 as 1, a boolean either way)."""
    if op.per_member or id(op) in self.calls_numpy:
      return False
    in_types = [self.env[fn.name].get(v) for v in op.vars_in]
    if any(t is None for t in in_types):
      return False
    if not any(np.dtype(t.dtype).kind in 'iub'
               for t in inst.pattern_flatten(in_types, inst.TensorType)) and (
                   not _MAKES_BOOLS_OR_FLOATS.search(op.text or '') or
                   not _ARITHMETIC.search(op.text or '')):
      return False   # no integer or boolean meets an operator
    if self.promoting_form(op) is None:
      return False
    if _literal_outside(op.text, in_types):
      # `n > -1` of a uint8: TensorFlow wraps the number into the dtype,
      # NumPy compares the number itself (and refuses it in arithmetic).
      return True
    try:
      value = self.run_made_up(op, in_types)
    except Exception:  # pylint: disable=broad-except
      return False   # typed, and refused, as it is
    dtypes = [np.dtype(self.backend.dtype(leaf))
              for leaf in inst.pattern_flatten(value)]
    kinds = [d.kind for d in dtypes]
    if any(k in 'iub' for k in kinds) and externals.reads_numpy_floats(
        op.function):
      return True   # `n >= SCALE[1]` is a boolean either way
    numpy_dtypes = _numpy_dtypes(op, in_types)
    if numpy_dtypes is None or len(numpy_dtypes) != len(kinds):
      return False
    # Or narrower floats: TensorFlow divides int8 and int16 in float32,
    # NumPy every integer in float64 (`n / 2`).
    return any((k == 'b' and n.kind != 'b') or
               (k in 'iu' and n.kind in 'fc') or
               (k == 'f' and n.kind == 'f' and n.itemsize > d.itemsize)
               for k, d, n in zip(kinds, dtypes, numpy_dtypes))

  def _prim(self, fn, op, numbers=None):
    env = self.env[fn.name]
    in_types = [env.get(v) for v in op.vars_in]
    if any(t is None for t in in_types):
      return
    key = _prim_key(op, in_types)
    # A per-member primitive cannot mix members or index across them:
    # the checks for batch-aware code do not apply to it.
    batch_aware = not op.per_member
    if key not in self.prim_cache:
      if batch_aware:
        member_indexing.check(op, in_types, self.backend)
      weak = self.prim_with_literals(op, in_types)
      if weak is not None:
        if op.per_member and any(
            t.shape for t in inst.pattern_flatten(weak, inst.TensorType)):
          # Typed on Python numbers (`v[k:]` of a loop counter `k`),
          # which are arrays at run time.
          self.check_member_shapes(op, in_types, None)
        self.prim_cache[key] = weak
        if batch_aware:
          # (Where it was typed with its empty axes grown, it is checked
          # so too: `grown_empty_axes`.)
          checked = self.grown.get(key, in_types)
          # A count of the batch's rows among them (`s + len(x)`).
          member_mixing.check_rows_uncounted(op, checked)
          # At run time those numbers are arrays, one per member.
          self.check_apart(op, checked, member_mixing.check_broadcasting)
          # And a reduction over the batch axis among them
          # (`np.any(x > c) and k < n`) still mixes members.
          self.check_apart(op, checked)
    if key not in self.prim_cache and self.declares_result(fn, op):
      # The declared type is the result's: nothing runs on made-up data.
      self.prim_cache[key] = None
    if key not in self.prim_cache:
      failed, reads = False, None
      try:
        value = self.run_made_up(op, in_types)
        reads = self.backend.reads_values(value, self.made_up_inputs)
      except errors.AutoBatchError:
        raise
      except AssertionError:
        value, failed = None, True  # an `assert` failure block: no result
      except _FailedOnEveryKind as failure:
        raise _made_up_error(op, in_types, failure) from failure.first
      checked = self.grown.get(key, in_types)
      if value is not None and op.vars_in and batch_aware:
        member_mixing.check_batch_independent(
            op, checked, value,
            lambda batch: self.run_made_up(op, checked, batch=batch))
      if value is not None and op.per_member:
        self.check_member_shapes(op, in_types, value)
      if failed or (value is None and not op.vars_in):
        self.prim_cache[key] = None
        if not failed:
          self.none_values.add(id(op))   # `best = None`
      else:
        try:
          self.prim_cache[key] = type_of_value(
              value, self.backend, batched=bool(op.vars_in),
              describe=lambda: f'`{op.text}`')
        except errors.TypeInferenceError as e:
          raise errors.TypeInferenceError(e.message, loc=op.loc,
                                          hint=e.hint) from None
      if self.prim_cache[key] is not None and batch_aware:
        self.check_apart(op, checked)
        if op.vars_in and not reads and not _keeps_rows(op.text) and (
            member_mixing.shares_one_row(op, checked, self.backend)):
          self.shared_rows.add(key)
    result = self.prim_cache[key]
    if result is not None:
      if numbers is not None:
        result = _as_numbers(result, numbers)
      self.bind(fn, op.vars_out, result, op.loc,
                self.result_origin(fn, op.vars_in, result))

  def promoting_form(self, op):
    """`op` in its form whose operators promote dtypes as NumPy's do
    (`register_promoting`), on TensorFlow; None where it has none."""
    if not self.on_tensorflow:
      return None
    function, constants = op.function, None
    unbound = getattr(function, 'unbound', None)
    if function not in _PROMOTING and unbound is not None:
      # A per-member primitive given the sizes it reads (`size_folding`):
      # its promoting form given them too.
      function, constants = unbound, op.function.constants
    make = _PROMOTING.get(function)
    alt = make() if make is not None else None
    if alt is not None and constants:
      alt = size_folding.given_constants(alt, constants)
    return None if alt is None else dataclasses.replace(op, function=alt)

  def check_apart(self, op, in_types, check=None):
    """`check` (`member_mixing.check_members_apart` by default) of
    batch-aware `op`.  Where the backend stages a graph (the user's
    `tf.function`, XLA), the primitive is checked as it is eagerly, on
    made-up values out of the graph (`Backend.eager_scope`): types give
    the made-up values' shapes and dtypes, and the graph's symbolic
    tensors would show nothing.  There a primitive whose ops draw at
    random or keep state (`Backend.draws_at_random`, which traces it) is
    not run: run eagerly while tracing, it would advance a generator or
    update a variable of the user's, and the check says nothing of such a
    primitive anyway."""
    check = check or member_mixing.check_members_apart
    if not self.backend.in_graph():
      check(op, in_types, self.backend)
      return
    if member_mixing.unchecked_inputs(op, in_types):
      return
    with self.backend.eager_scope():
      # Where type inference ran it into the graph, its ops there tell.
      draws = self.ops_draw.get(_prim_key(op, in_types))
      if draws is None:
        try:
          draws = self.backend.draws_at_random(
              op.function, self.dummies(in_types, batch=2))
        except Exception:  # pylint: disable=broad-except
          draws = None
      if draws:
        return
      check(op, in_types, self.backend)

  def check_member_shapes(self, op, in_types, value):
    """Refuses a per-member `op` whose result's shape follows its inputs'
    values (`w = v[:n]`), where the backend stages a graph.

    There made-up inputs are constants, so such a result's shape is known
    (`v[:0]`: no elements) and would type the value; the members' own
    shapes differ from it, and from each other, at run time.  Traced
    symbolically, as eagerly, the per-member layer finds the shape unknown
    and raises its `PerMemberError`.  Only results with an axis per member
    are traced: a scalar's shape does not follow the data.  `value` None:
    a result typed on Python numbers (weak inputs), which are arrays at
    run time, eagerly too.
    """
    if not self.on_tensorflow or (value is not None and (
        not self.backend.in_graph() or self.backend.traces_symbolically() or
        not any(len(self.backend.shape(leaf)) > 1
                for leaf in inst.pattern_flatten(value)))):
      return
    try:
      self.backend.trace(op.function, self.dummies(in_types, literals=False))
    except errors.AutoBatchError:
      raise
    except Exception:  # pylint: disable=broad-except
      pass   # as in `run_made_up`: code that runs only on values

  def declares_result(self, fn, op):
    """Whether `op` computes from batched inputs nothing but `fn`'s
    declared result (copies and constants are typed as usual: they run
    on no user math)."""
    return (fn.name in self.declared and op.vars_in and
            op.function is not inst.identity and
            all(v == RET for v in inst.pattern_flatten(op.vars_out)))

  def run_made_up(self, op, in_types, batch=1):
    """`op`'s result on made-up inputs of `in_types` at batch size `batch`.

    Traced symbolically where the backend can (TensorFlow, eagerly: no
    values are computed, so no domain can be violated); otherwise run on
    each kind of `MADE_UP` inputs in turn until one does not raise (a
    primitive valid on the user's data may not be on zeros: a linear
    solve, a Cholesky factor, a logarithm).  If every kind raises, the
    first kind's `AssertionError` is raised as it is, and any other error
    as `_FailedOnEveryKind`, holding every kind's.
    """
    self.made_up_inputs = None
    if self.backend.traces_symbolically():
      try:
        inputs = []
        value = self.backend.trace(op.function, self.dummies(
            in_types, literals=False, batch=batch), batch, inputs)
        self.made_up_inputs = inputs
        return value
      except errors.AutoBatchError as e:
        raise _at_line(e, op) from e.__cause__
      except Exception as e:  # pylint: disable=broad-except
        if (self.promoting_form(op) is not None and
            errors.mixes_dtypes(e)):
          # Operands of two dtypes where the values are symbolic, as at
          # run time (`len(v[:n])`, an int64 tensor, plus a float): run
          # on values, `len` would give a Python int and hide it.  The
          # promoting form is taken (`prim`).
          raise errors.PrimitiveError(
              f'{type(e).__name__} while inferring the type of '
              f'`{op.text}`: {e}', loc=op.loc) from e
        # Eager-only code in the primitive: run it on values.
    failures = []
    for kind in MADE_UP:
      try:
        # Made-up values may be outside a function's domain (a log of
        # zero): NumPy's warnings about it would be about no user data.
        with self.backend.error_context(), np.errstate(all='ignore'), (
            warnings.catch_warnings()):
          # (`np.var` of no items warns, not through errstate.)
          warnings.simplefilter('ignore', RuntimeWarning)
          inputs = self.dummies(in_types, literals=False, kind=kind,
                                batch=batch)
          with self.backend.ops_drawn() as drawn:
            value = self.backend.call_for_types(op.function, inputs, batch)
          self.made_up_inputs = inputs
          self.ops_draw[_prim_key(op, in_types)] = drawn[0]
          return value
      except errors.AutoBatchError as e:
        raise _at_line(e, op) from e.__cause__
      except Exception as e:  # pylint: disable=broad-except
        failures.append(e)
    if isinstance(failures[0], AssertionError):
      raise failures[0]   # an `assert` failure block
    grown = self.grown_empty_axes(failures, in_types)
    if grown:
      self.grown[_prim_key(op, in_types)] = grown
      return self.run_made_up(op, grown, batch)
    raise _FailedOnEveryKind(failures)

  def grown_empty_axes(self, failures, in_types):
    """`in_types` with each axis of length 0 made 1, where a primitive
    failed to index such an input on every kind of made-up values and an
    argument of the user's call has such an axis; else None.

    A member whose array has no items never runs code that indexes an
    item (`for i in range(len(v))` does not run its body), so that code's
    types are those it has where the axis has items: an item's type does
    not depend on how many there are.  Where no argument has an empty
    axis, the empty input's shape came from made-up values (`v[:n]` at
    n = 0), and the failure is explained as such (`_made_up_error`).
    """
    if not all(_out_of_range(e) for e in failures):
      return None
    if not any(0 in leaf.shape for leaf in _leaves(in_types)):
      return None
    if not any(0 in leaf.shape for leaf in _leaves(
        list(self.arguments.values()))):
      return None
    def grow(t):
      return dataclasses.replace(
          t, shape=tuple(1 if n == 0 else n for n in t.shape))
    return [inst.pattern_map(grow, t, inst.TensorType) for t in in_types]

  def dummies(self, in_types, literals=True, as_arrays=None, kind='zeros',
              batch=1, literal=0):
    """Arguments to run a primitive on at batch size `batch`: arrays of
    `kind` (`made_up`), with each weak scalar the Python scalar `literal`
    if `literals`, or (input `i` in `as_arrays`) an array of `kind` of dtype
    `as_arrays[i]`."""
    as_arrays = as_arrays or {}
    positions = iter(range(1 << 30))

    def leaf(t):
      position = next(positions)
      if literals and _is_literal(t):
        return t.dtype.type(literal).item()
      if kind == 'zeros':
        return self.backend.dummy(t, batch)
      return self.backend.asarray(made_up(t, kind, batch, position))
    return [leaf(inst.TensorType(as_arrays[i], ())) if i in as_arrays
            else inst.pattern_map(leaf, t, inst.TensorType)
            for i, t in enumerate(in_types)]

  def prim_with_literals(self, op, in_types):
    """Result types when literal-typed (weak) scalars meet typed inputs,
    or meet only each other (`i = i + 1` with `i = 0` stays a literal:
    weak, if the op gives a Python scalar).

    Dummy arrays would make a weak `1` an int64 array, and `acc + x` with
    float32 `x` float64; NumPy (like Python run per member) keeps float32.
    So weak scalar inputs are passed as Python scalars, which NumPy and TF
    promote as they would the literal itself.  None where there are no
    weak or no strong inputs, or where this run fails (the caller then
    runs the primitive on arrays for every input, as usual).
    """
    leaves = _leaves(in_types)
    if not any(_is_literal(l) for l in leaves):
      return None
    only_weak = all(_is_literal(l) for l in leaves)
    try:
      with self.backend.error_context():
        value = op.function(*self.dummies(in_types))
      if value is None:
        return None
      if op.per_member and _has_empty_axis(value, self.backend):
        value = self.literals_apart(op, in_types, value)
      # A result computed from literals only is a literal: a Python scalar,
      # or NumPy's default dtype for one (`np.where(c, 0, 1)` on Python
      # scalars is an int64 scalar).
      raw = inst.pattern_flatten(value)
      value = inst.pattern_map(_as_literal, value)
      converted = [a is not b for a, b in zip(raw, inst.pattern_flatten(value))]
      if only_weak and not all(type(v) in _PY_SCALARS
                               for v in inst.pattern_flatten(value)):
        return None   # typed by running on arrays, as usual
      typed = type_of_value(value, self.backend, batched=True,
                            describe=lambda: f'`{op.text}`')
      if any(converted) and not only_weak:
        # Next to arrays, such a scalar must still be one value per member
        # when the literals are arrays too (not, say, a sum over the batch).
        with self.backend.error_context():
          per_member = type_of_value(
              op.function(*self.dummies(in_types, literals=False)),
              self.backend, batched=True, describe=lambda: '')
        flat = inst.pattern_flatten(typed, inst.TensorType)
        strong = inst.pattern_flatten(per_member, inst.TensorType)
        if len(flat) != len(strong) or any(
            c and (s.shape != () or s.dtype != t.dtype)
            for c, t, s in zip(converted, flat, strong)):
          return None
      return typed
    except Exception:  # pylint: disable=broad-except
      return None

  def literals_apart(self, op, in_types, value):
    """`value`, per-member `op`'s result on literals 0 with an empty axis,
    or its result on the literals among 1 to 4 that give none, where at
    least two do and they agree in shape (`w = x[i - 1:i + 2]` of a
    counter `i = 1`: Python's `x[-1:2]` is empty, every other
    `x[i - 1:i + 2]` three long; `x[:i]` differs with `i` and stays
    empty)."""
    shapes, found = set(), []
    for literal in (1, 2, 3, 4):
      try:
        with self.backend.error_context():
          other = op.function(*self.dummies(in_types, literal=literal))
      except Exception:  # pylint: disable=broad-except
        continue
      if other is None or _has_empty_axis(other, self.backend):
        continue
      shapes.add(tuple(tuple(self.backend.shape(leaf))
                       for leaf in inst.pattern_flatten(other)))
      found.append(other)
    return found[0] if len(found) > 1 and len(shapes) == 1 else value

  def weak_casts(self, op, in_types, fn, typed=None):
    """`PrimOp.casts` for an op whose inputs mix weak variables and arrays.

    Inference runs such an op with each weak scalar as a Python scalar (as
    the member's own Python code would see it), but at run time a weak
    variable (`i = 0`, a `range` counter, a literal argument of a call) is
    an array of its default dtype (int64, float64), which NumPy promotes
    differently and TensorFlow refuses to mix.  Each such input is cast to
    the first dtype, among its own and the other inputs' dtypes, with which
    the op gives the inferred result types.
    """
    expected = self.prim_cache.get(_prim_key(typed or op, in_types))
    weak = [i for i, t in enumerate(in_types)
            if isinstance(t, inst.TensorType) and _is_literal(t)]
    leaves = _leaves(in_types)
    # Weak numbers alone are arrays of NumPy's default dtypes at run
    # time, which NumPy mixes as Python mixes numbers; TensorFlow does not
    # mix an int64 and a float64 (`s + math.factorial(k)`).
    mixed = self.on_tensorflow and len({l.dtype.kind for l in leaves}) > 1
    only_weak = all(l.weak for l in leaves) and not mixed
    if expected is None or not weak or (only_weak and
                                        not self.on_tensorflow):
      return ()
    expected = _strip(expected)
    candidates = []
    for leaf in leaves:
      if (not leaf.weak or mixed) and leaf.dtype not in candidates:
        candidates.append(leaf.dtype)

    # A user's mistake the primitive shows on arrays only (a per-member
    # value where Python needs one bool, in a function it calls), which
    # no dtype for the literal avoids: that is the error to report.
    mistakes = []
    gots = []
    # What the runs that gave no value raised.
    failures = []

    def gives_expected(as_arrays, near=False):
      for kind in MADE_UP:
        try:
          with self.backend.error_context():
            value = op.function(*self.dummies(in_types, as_arrays=as_arrays,
                                              kind=kind))
          got = type_of_value(value, self.backend, batched=True,
                              describe=lambda: '')
        except errors.PerMemberError as e:
          mistakes.append(e)
          continue
        except Exception as e:  # pylint: disable=broad-except
          failures.append(errors.scalar_conversion_error(e))
          continue
        gots.append(_strip(got))
        if gots[-1] == expected or (near and _wider(gots[-1], expected)):
          return True
        # Another kind may give it: a slice around a counter
        # (`x[i - 1:i + 2]`) is empty at 0 only.
      return False

    own = {i: in_types[i].dtype for i in weak}
    grown = self.grown.get(_prim_key(typed or op, in_types))
    if grown is None:
      grown = self.grown_empty_axes([IndexError()], in_types)
    if grown is not None and not gives_expected(own) and not (
        gots or mistakes):
      # It runs on no made-up values of its empty axes: where they have
      # items, as it was typed (`grown_empty_axes`).
      in_types = grown
    gots.clear()
    mistakes.clear()
    if gives_expected(own):
      return ()
    if only_weak and not mistakes and not gots:
      # On TensorFlow, weak numbers alone as arrays fail where the op's
      # own Python numbers meet them (`2.0 * j` of an int64 counter: the
      # operator casts 2.0 to int64 and refuses): no dtype of theirs
      # helps, the promoting form may (`with_casts`).
      raise errors.TypeInferenceError(
          f'`{op.text}` fails on TensorFlow where its inputs are arrays of '
          'their dtypes, as at run time', loc=op.loc,
          hint='TensorFlow\'s operators do not mix dtypes: cast the '
          'number first (np.float64(j)).')
    chosen = {}
    for i in weak:
      # (Or the dtype NumPy gives the number next to an array's: a
      # complex beside float32 is complex64.)
      met = [np.result_type(d, in_types[i].dtype.type(0).item())
             for d in candidates]
      for dtype in [in_types[i].dtype] + candidates + [
          d for d in met if d not in candidates]:
        if gives_expected({i: dtype}):
          chosen[i] = dtype
          break
      else:
        chosen = None
        break
    if chosen is None or not gives_expected(chosen):
      if mistakes:
        raise mistakes[0]
      near = self.near_casts(weak, in_types, candidates, gives_expected)
      if near is not None:
        return near
      names = ', '.join(repr(op.vars_in[i]) for i in weak)
      if gots and _gains_the_batch(gots[0], expected):
        # Not a dtype: the number, one per member, indexes or gathers
        # across the batch (`tf.gather(x, i, axis=1)`).
        raise errors.TypeInferenceError(
            f'`{op.text}` gives {inst.type_str(gots[0])} per member where '
            f'{names} is one number per member (an array [batch], as the '
            f'VM holds it), but {inst.type_str(expected)} for one member\'s '
            'Python number: it indexes or gathers across the batch, every '
            "member's position from every member", loc=op.loc,
            hint='In a batch-aware function a loop counter, or a variable '
            'that holds a number and changes, is an array [batch].  Gather '
            "each member's own item: np.take_along_axis(x, "
            'np.expand_dims(i, -1), axis=1)[:, 0] or tf.gather(x, i, '
            'batch_dims=1); or write the function for one member '
            '(per_member=True), where x[i] is the member\'s.')
      if not gots and any(
          isinstance(e, TypeError) and _SCALAR_ONLY.search(str(e))
          for e in failures):
        # No dtype is the cause: the op needs one Python number (math.*,
        # float()) where the counter or number is one per member (the
        # dtypes that got that far failed there; on TensorFlow others
        # fail before, at an operator that does not mix dtypes).
        raise errors.TypeInferenceError(
            f'`{op.text}` needs one Python number where {names} holds a '
            'number for each member (an array [batch], as the VM holds a '
            'loop counter or a number that changes): '
            f'{failures[0]}', loc=op.loc,
            hint='In a batch-aware function Python\'s math.*, float(), '
            'int() and round() take no batch: use NumPy on arrays '
            '(np.sqrt, np.exp; a factorial as scipy.special.factorial or '
            'a running product carried through the loop), or write the '
            'function for one member (per_member=True), where such a '
            'counter is one member\'s number.')
      origin = frozenset().union(*(self.origin(fn, op.vars_in[i])
                                   for i in weak))
      main = self.program.main_function.name
      because = ''.join(f'; {op.vars_in[i]!r} is argument {a!r} of '
                        f'{main}(), a Python number' for i in weak
                        for a in sorted(self.origin(fn, op.vars_in[i])))
      error = errors.TypeInferenceError(
          f'`{op.text}` mixes {names}, which holds a Python literal, with '
          f'typed arrays, and no dtype for it gives the type it has per '
          f'member ({inst.type_str(expected)}){because}', loc=op.loc,
          hint=('Pass the argument as an array of the dtype you mean, e.g. '
                'np.int32(3).' if origin else
                'Give the literal a dtype where it is assigned, e.g. '
                '`i = np.int32(0)`.'))
      error.arguments = tuple(sorted(origin))
      raise error
    return tuple((i, np.dtype(d)) for i, d in sorted(chosen.items())
                 if np.dtype(d) != np.dtype(in_types[i].dtype))

  @staticmethod
  def near_casts(weak, in_types, candidates, gives_expected):
    """`PrimOp.casts` with which an op computes its inferred result in
    wider dtypes of the same kinds, or None where none does.

    A weak number's own arithmetic inside the op gives, per member, a
    Python number, which takes the array's dtype where it meets it; where
    it meets it in an operator the op's weak form casts it there
    (`register_weak_form`), but where it meets it in a function
    (`np.maximum(s, d * 2)`) it is, at run time, an array of int64,
    float64 or complex128, whichever dtype the weak inputs are cast to.
    The VM casts each result to its variable's dtype as it writes it
    (`Backend.coerce_fn`): the member's values, computed in the wider
    dtype.  The inputs are cast to the arrays' dtypes where that gives
    such a result, else kept in their own.
    """
    chosen = {}
    for i in weak:
      own = np.dtype(in_types[i].dtype)
      # (Not to a kind that loses the number's: a float to an int.)
      kept = [d for d in candidates
              if np.dtype(d).kind in _WEAK_TO.get(own.kind, '')]
      for dtype in kept + [own]:
        if gives_expected({**chosen, i: dtype}, near=True):
          chosen[i] = dtype
          break
      else:
        return None
    return tuple((i, np.dtype(d)) for i, d in sorted(chosen.items())
                 if np.dtype(d) != np.dtype(in_types[i].dtype))

  def call(self, fn, op):
    env = self.env[fn.name]
    callee = self.program.function(op.function)
    for arg, param in zip(op.vars_in, callee.vars_in):
      if env.get(arg) is not None:
        self.set_type(callee, param, env[arg], op.loc, self.origin(fn, arg))
    ret = self.env[callee.name].get(RET)
    if ret is not None:
      self.bind(fn, op.vars_out, ret, op.loc, self.origin(callee, RET))

  def declare(self, fn):
    """Seeds the result type from the user's type_inference callable."""
    if fn.type_inference is None:
      return
    env = self.env[fn.name]
    params = tuple(env.get(p) for p in fn.vars_in)
    if any(p is None for p in params):
      return
    if fn.name in self.declared and self.declared[fn.name][0] == params:
      return
    # As TFP passes them: one pattern of `TensorType`s per argument.
    arg_types = [_strip(p) for p in params]
    try:
      result = fn.type_inference(arg_types)
    except errors.AutoBatchError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise errors.TypeInferenceError(
          f'type_inference of {fn.name!r} raised {type(e).__name__}: {e}',
          loc=fn.loc, hint='It is called with a list with one type per '
          'argument: an ab.TensorType (with .dtype and .shape, the batch '
          'dimension left out), or a tuple/list/namedtuple of them.') from e
    declared = _conform(normalize_declared(result, fn), env.get(RET))
    if env.get(RET) is not None:
      try:
        castable(env[RET], declared)
      except Mismatch as e:
        raise declared_type_error(
            f'{fn.name!r} returns a value that cannot be cast to the type '
            f'its type_inference declares: {e}', fn.loc) from None
    self.declared[fn.name] = (params, declared)
    if declared != env.get(RET):
      env[RET] = declared
      self.changed = True

  def function(self, fn):
    self.declare(fn)
    env = self.env[fn.name]
    for block in fn.blocks:
      for op in block.instructions:
        if isinstance(op, inst.PrimOp):
          self.prim(fn, self.sizes.bound(fn, op))
          self.sizes.learn(fn, op, [env.get(v) for v in op.vars_in])
        elif isinstance(op, inst.FunctionCallOp):
          self.call(fn, op)
        else:
          raise errors.InternalError(f'{inst.op_str(op)} before lowering')

  # -- driver ----------------------------------------------------------------

  def run(self, input_types):
    main = self.program.main_function
    if len(input_types) != len(main.vars_in):
      raise errors.InternalError('input types do not match main parameters')
    for p, t in zip(main.vars_in, input_types):
      self.arguments[p] = t
      self.set_type(main, p, t, main.loc, frozenset([p]))
    for _ in range(_MAX_ITERATIONS):
      self.changed = False
      for fn in self.program.functions:
        if all(p in self.env[fn.name] for p in fn.vars_in):
          self.function(fn)
      if not self.changed:
        break
    else:
      raise errors.InternalError('type inference did not converge')
    return self.finish()

  def with_casts(self, block, env, fn):
    """`block` with `casts` on the PrimOps that need them, and a check of
    the shapes of the results that were declared, not run on made-up
    data (`checked_result`)."""
    ops = []
    for index, op in enumerate(block.instructions):
      if isinstance(op, inst.PrimOp) and id(op) in self.none_values:
        if not self.none_read(fn, block, index, op):
          continue   # `r = None` that every path writes over: no write
        self.refuse_none(op, env)
      if isinstance(op, inst.PrimOp):
        bound = self.sizes.bound(fn, op)
        weak, _ = self.weak_form(fn, bound)
        numbers = ()
        if weak is not bound:
          numbers = tuple(
              i for i, v in enumerate(bound.vars_in)
              if isinstance(env[v], inst.TensorType) and _is_literal(env[v]))
        if id(weak) in self.promoted:
          # (A per-member primitive given its sizes, typed in a form of
          # its own: `promoting_form`; or a weak form, `weak_form`.)
          op = self.promoted[id(weak)]
        elif weak is not bound:
          op = weak
        else:
          op = self.sizes.bound(fn, self.promoted.get(id(op), op), at=op)
        in_types = [env[v] for v in op.vars_in]
        shared = _prim_key(op, in_types) in self.shared_rows
        try:
          casts = self.weak_casts(op, in_types, fn)
        except errors.TypeInferenceError as first:
          # On TensorFlow, a weak number that is an integer array at run
          # time can meet a float where Python's number met it as an int
          # (`s + math.factorial(k)`): the promoting form, if it gives
          # the type.
          promoted = self.promoting_form(op)
          if promoted is None:
            raise
          try:
            casts = self.weak_casts(promoted, in_types, fn, typed=op)
          except errors.TypeInferenceError:
            raise first from None
          op = promoted
        if self.on_tensorflow and _narrows(casts, in_types):
          # A weak integer cast to a narrower one wraps there (`i <= n` of
          # a counter `i = 128` and an int8 `n`); NumPy compares the
          # number itself: the promoting form, in the joint dtype, where
          # it gives the type without the cast.
          promoted = self.promoting_form(op)
          if promoted is not None:
            try:
              if not self.weak_casts(promoted, in_types, fn, typed=op):
                op, casts = promoted, ()
            except errors.TypeInferenceError:
              pass
        if casts:
          op = dataclasses.replace(op, casts=casts)
        numbers = tuple(i for i in numbers if i not in dict(casts))
        if numbers:
          op = dataclasses.replace(op, numbers=numbers)
        if shared:
          op = dataclasses.replace(op, broadcast=True)
        if self.declares_result(fn, op):
          op = dataclasses.replace(op, function=checked_result(
              op.function, self.declared[fn.name][1], op, fn.name))
      ops.append(op)
    ops = tuple(ops)
    if ops == tuple(block.instructions):
      return block
    return dataclasses.replace(block, instructions=ops)

  def none_read(self, fn, block, index, op):
    """Whether the None that `op`, instruction `index` of `block`, assigns
    can be read: a variable it writes is live after it."""
    if fn.name not in self.liveness:
      self.liveness[fn.name] = ir_liveness.analyze(fn)
    after = dataclasses.replace(block,
                                instructions=block.instructions[index + 1:])
    live = ir_liveness.transfer(
        after, fn, self.liveness[fn.name].live_out[block.label])
    return any(v in live for v in inst.pattern_flatten(op.vars_out))

  def refuse_none(self, op, env):
    """Raises where `op` assigns None to a variable that holds an array
    elsewhere (`best_i = None`, then `best_i = i`): a variable holds one
    dtype and shape for every member, and None is no array."""
    for var in inst.pattern_flatten(op.vars_out):
      t = env.get(var)
      if t is None:
        continue
      raise errors.TypeInferenceError(
          f'{var.split(".")[-1]!r} is None here and '
          f'{inst.type_str(_strip(t))} elsewhere: a batched variable holds an '
          'array of one dtype for every member, and None is none',
          loc=op.loc,
          hint='Start it as a value of its type that marks "none yet" '
          '(best_i = -1, best = np.inf), or keep a separate flag '
          '(found = False).')

  def finish(self):
    self.sizes.settle()
    functions = []
    for fn in self.program.functions:
      env = self.env[fn.name]
      if not all(p in env for p in fn.vars_in):
        continue  # never called with typed arguments: not reachable
      if RET not in env:
        raise errors.TypeInferenceError(
            f'Cannot determine the return type of {fn.name!r}: no return '
            'path ends without first needing the result itself (is there a '
            'base case?)', loc=fn.loc,
            hint=f'Give it explicitly: @ctx.batch(type_inference=lambda '
            'arg_types: ...) returning the result type.')
      for block in fn.blocks:
        for op in block.instructions:
          for v in op.vars_in:
            if v not in env:
              raise errors.TypeInferenceError(
                  f'variable {v!r} is used but never gets a value',
                  loc=op.loc, hint='Assign it on every path before use.')
        t = block.terminator
        if isinstance(t, inst.BranchOp):
          ct = env.get(t.cond)
          if not isinstance(ct, inst.TensorType) or ct.shape != ():
            raise errors.TypeInferenceError(
                f'condition has type {inst.type_str(ct) if ct else "?"}; a '
                'condition must be one boolean per member', loc=t.loc,
                hint='Reduce it per member, e.g. np.all(x, axis=-1).')
      var_defs = inst.FrozenDict(
          (v, inst.Type(_strip(env[v]))) for v in sorted(env))
      functions.append(dataclasses.replace(
          fn, var_defs=var_defs, blocks=tuple(
              self.with_casts(block, env, fn) for block in fn.blocks)))
    return dataclasses.replace(self.program, functions=tuple(functions))


_LITERAL_DTYPES = frozenset(np.dtype(t) for t in (bool, int, float, complex))


def _as_numbers(t, numbers):
  """Type pattern `t` with the leaves that `numbers` marks (True, or a
  tuple of marks for a tuple) weak: scalars of NumPy's dtypes for Python
  numbers, which a primitive gives one per member."""
  if numbers is True:
    if (isinstance(t, inst.TensorType) and not t.shape and
        t.dtype in _LITERAL_DTYPES):
      return dataclasses.replace(t, weak=True)
    return t
  if (isinstance(numbers, tuple) and type(t) is tuple and  # pylint: disable=unidiomatic-typecheck
      len(t) == len(numbers)):
    return tuple(_as_numbers(a, b) for a, b in zip(t, numbers))
  return t


def _as_literal(v):
  """`v` as a Python scalar if it is what NumPy makes of literals."""
  if (isinstance(v, (np.ndarray, np.generic)) and v.ndim == 0
      and v.dtype in _LITERAL_DTYPES):
    return v.item()
  return v


@functools.lru_cache(maxsize=4096)
def _keeps_rows(text):
  """Whether a primitive's source `text` is arithmetic, comparisons and
  logic of names and numbers alone (`depth - 1`, `n > 0 and k < m`,
  `a if c else b`): on inputs of one row per member, or numbers, it
  gives one row per member, never one row for all."""
  try:
    tree = ast.parse(text or '', mode='eval')
  except SyntaxError:
    return False
  return all(isinstance(node, _ROW_KEEPING) for node in ast.walk(tree))


_ROW_KEEPING = (ast.Expression, ast.Name, ast.Load, ast.Constant, ast.BinOp,
                ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
                ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _out_of_range(e):
  """Whether exception `e` is an index out of an axis's range: Python's
  `IndexError`, or TensorFlow's refusal of one (eagerly an
  `InvalidArgumentError`, traced a `ValueError`: 'slice index 0 of
  dimension 1 out of bounds')."""
  if isinstance(e, IndexError):
    return True
  return (type(e).__name__ in ('InvalidArgumentError', 'ValueError') and
          ('out of bounds' in str(e) or 'out of range' in str(e)))


def _at_line(e, op):
  """User error `e` that a library helper raised inside primitive `op`
  without a line (`member_ops.random_generator` in a batch-aware
  primitive), at `op`'s line; else `e`."""
  if e.loc is not None or op.loc is None:
    return e
  return type(e)(e.message, loc=op.loc, hint=e.hint, members=e.members)


# NumPy's refusals of an array where Python needs one number (`math.*`,
# `float()`, an index).
_SCALAR_ONLY = re.compile(
    r'can be converted to (a scalar index|Python scalars)|'
    r'cannot be interpreted as an integer')


def _prim_key(op, in_types):
  return (id(op), tuple(inst.type_str(t) + repr(t) for t in in_types))


def _wider(got, expected):
  """Whether type pattern `got` is `expected` with some leaves' dtypes
  wider ones of the same kind (int64 for int32, float64 for float32): one
  structure and shapes."""
  leaves = _leaf_pairs(got, expected)
  return leaves is not None and all(
      x.shape == y.shape and x.dtype.kind == y.dtype.kind and
      x.dtype.itemsize >= y.dtype.itemsize for x, y in leaves)


def _narrows(casts, in_types):
  """Whether `PrimOp.casts` `casts` cast an integer input to an integer
  dtype that cannot hold all of its own."""
  for i, dtype in casts:
    own = np.dtype(in_types[i].dtype)
    if (own.kind in 'iu' and dtype.kind in 'iu' and
        np.result_type(own, dtype) != dtype):
      return True
  return False


def _strip(t):
  return inst.pattern_map(lambda x: x.strong(), t, inst.TensorType)


def infer_types(program, input_types, backend):
  """Types every variable of every function of `program`.

  Args:
    program: An untyped `Program`.
    input_types: One type pattern (of `TensorType`) per main parameter.
    backend: The backend that runs primitives on dummy values.

  Returns:
    `program` with `var_defs` filled in for every function.
  """
  return _Inference(program, backend).run(list(input_types))


# ---------------------------------------------------------------------------
# TFP's module-level API.  `infer_types` below takes TFP's form
# `infer_types(program, inputs, backend)` (batched input values) as well as
# the form above (input types, `infer_types_from_signature`); the inputs
# are types when every leaf is a `TensorType` or `Type`.
# ---------------------------------------------------------------------------

__all__ += ['infer_types_from_signature', 'is_inferring', 'signature',
            'type_of_pattern']

_infer_from_types = infer_types
_running = threading.local()


def is_inferring():
  """Tells whether type inference is running.

  A primitive can tell the calls it gets on dummy values from those of the
  VM (`virtual_machine.is_staging`) and of a dry run.

  Returns:
    True while type inference runs primitives in this thread.
  """
  return getattr(_running, 'depth', 0) > 0


def infer_types_from_signature(program, sig, backend):
  """Types `program` for inputs of the types `sig`.

  Args:
    program: An untyped `Program`.
    sig: One type per parameter of main: a pattern of `TensorType`, or a
      `Type`; shapes exclude the batch dimension.  A weak scalar type
      stands for a Python number passed as the argument (typed as a
      literal); other types are taken as strong.
    backend: The backend that runs primitives on dummy values.

  Returns:
    `program` with `var_defs` filled in for every function.
  """
  # A weak scalar is a Python number passed as an argument: a literal.
  sig = [inst.pattern_map(
      lambda t: t.strong() if isinstance(t, inst.TensorType) and t.shape
      else t, t.tensors if isinstance(t, inst.Type) else t, inst.TensorType)
         for t in sig]
  _running.depth = getattr(_running, 'depth', 0) + 1
  try:
    return _infer_from_types(program, sig, backend)
  finally:
    _running.depth -= 1


def infer_types(program, inputs, backend):  # pylint: disable=function-redefined
  """Types `program` for `inputs`, given as values (TFP's form) or types.

  Args:
    program: An untyped `Program`.
    inputs: A list with one entry per parameter of main: batched input
      values (arrays with a leading batch dimension, or patterns of them),
      or input types (as `infer_types_from_signature` takes them).
    backend: The backend that runs primitives on dummy values.

  Returns:
    `program` with `var_defs` filled in for every function.

  Raises:
    ArgumentError: If the number of inputs is not main's.
  """
  inputs = list(inputs)
  leaves = inst.pattern_flatten(inputs, (inst.Type, inst.TensorType))
  if all(isinstance(x, (inst.Type, inst.TensorType)) for x in leaves):
    return infer_types_from_signature(program, inputs, backend)
  return infer_types_from_signature(
      program, signature(program, inputs, backend), backend)


def type_of_pattern(val, backend, preferred_type=None):
  """Finds the pattern of `TensorType`s of the value pattern `val`.

  Args:
    val: A pattern of arrays, tensors or Python numbers.
    backend: The backend whose `asarray`, `dtype` and `shape` read them.
    preferred_type: A `Type` or pattern of `TensorType` whose dtypes the
      Python numbers of `val` take, or None.

  Returns:
    The pattern of `TensorType`s, shapes including the leading batch
    dimension.
  """
  if isinstance(preferred_type, inst.Type):
    preferred_type = preferred_type.tensors

  def leaf(v, preferred=None):
    if type(v) in _PY_SCALARS and isinstance(preferred, inst.TensorType):
      return inst.TensorType(preferred.dtype, ())
    v = backend.asarray(v)
    return inst.TensorType(backend.dtype(v), backend.shape(v))
  if preferred_type is None:
    return inst.pattern_map(leaf, val)
  return inst.pattern_map2(leaf, val, preferred_type, inst.TensorType)


def signature(program, inputs, backend):
  """Finds the input types of batched `inputs` for main's parameters.

  A scalar is a batch of one (TFP's calling convention).

  Args:
    program: A `Program`, whose main function's parameters `inputs` are.
    inputs: A list of batched values (or patterns of them), one per
      parameter.
    backend: The backend whose `asarray`, `dtype` and `shape` read them.

  Returns:
    A list of `TensorType` patterns, shapes without the batch dimension.

  Raises:
    ArgumentError: If the number of inputs is not main's.
  """
  params = program.main_function.vars_in
  if len(inputs) != len(params):
    raise errors.ArgumentError(
        f'{program.main} takes {len(params)} input(s) ({", ".join(params)}),'
        f' got {len(inputs)}')
  return [inst.pattern_map(
      lambda t: inst.TensorType(t.dtype, t.shape[1:]),
      type_of_pattern(x, backend), inst.TensorType) for x in inputs]


def _has_empty_axis(value, backend):
  """Whether a leaf of `value` has an axis of length 0."""
  return any(0 in tuple(backend.shape(leaf))
             for leaf in inst.pattern_flatten(value))


# A primitive's text that may make a boolean (a comparison) or a NumPy
# float (`np.float64(0.5)`) from float inputs, and an arithmetic operator
# that may meet it (`departs_from_numpy`).
_MAKES_BOOLS_OR_FLOATS = re.compile(r'[<>]|==|!=|bool|float|complex')
_ARITHMETIC = re.compile(r'[-+*/%]')


def _literal_outside(text, in_types):
  """Whether primitive source `text` holds an integer written as a
  constant (`-1`, `2**31`) that some integer input's dtype cannot hold."""
  if any(t is None for t in in_types):
    return False
  dtypes = {np.dtype(t.dtype) for t in inst.pattern_flatten(
      in_types, inst.TensorType) if np.dtype(t.dtype).kind in 'iu' and (
          not t.weak)}
  if not dtypes or not text:
    return False
  return any(ops.int_outside(n, d) for n in _constant_ints(text)
             for d in dtypes)


@functools.lru_cache(maxsize=4096)
def _constant_ints(text):
  """The Python integers the constant subexpressions of `text` make."""
  try:
    tree = ast.parse(text, mode='eval')
  except SyntaxError:
    return ()
  found = []

  def constant(node):
    if isinstance(node, ast.Constant):
      return type(node.value) in (int, float)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub,
                                                              ast.UAdd)):
      return constant(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow, ast.LShift)):
      return constant(node.left) and constant(node.right)
    return False

  def walk(node):
    if constant(node):
      try:
        value = eval(compile(ast.Expression(node), '<constant>', 'eval'),  # pylint: disable=eval-used
                     {'__builtins__': {}})
      except Exception:  # pylint: disable=broad-except
        return
      if type(value) is int and abs(value) < 2**200:
        found.append(value)
      return
    for child in ast.iter_child_nodes(node):
      walk(child)
  walk(tree.body)
  return tuple(found)


def _numpy_dtypes(op, in_types):
  """The dtypes of batch-aware `op`'s result on NumPy arrays of ones of
  `in_types` (weak scalars as Python numbers), or None where it does not
  run on them."""
  try:
    with np.errstate(all='ignore'), warnings.catch_warnings():
      warnings.simplefilter('ignore')
      value = op.function(*ones_arguments(in_types))
    dtypes = []
    for x in inst.pattern_flatten(value):
      dtype = getattr(x, 'dtype', None)
      dtype = getattr(dtype, 'as_numpy_dtype', dtype)   # a tensor's
      dtypes.append(np.dtype(dtype if dtype is not None else
                             np.asarray(x).dtype))
    return dtypes
  except Exception:  # pylint: disable=broad-except
    return None
