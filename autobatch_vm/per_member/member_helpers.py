"""A user's function called from a per-member primitive, for one member.

The frontend rewrites a per-member primitive's calls that Python or NumPy
would not dispatch on one member's batched value (`float(x)`,
`np.float64(x)`, `min(a, b)`, `np.array([a, b])`: `member_call` says
which) into calls of `member_ops`.  A function of the user's that the
primitive calls (a helper) runs on the same values, so its calls need
the same rewrite: `member_call` also names such a helper, which the
primitive calls through `member_ops.call`, and `member_helper` gives the
helper with its own calls rewritten the same way (once per function,
recursively through the helpers it calls).

The calls change, and the binary operators and comparisons go through
`ops.promoted` (NumPy's dtypes where TensorFlow's operators do not
promote; Python's operator on anything else); the helper's statements
and indexing run as written (an `if` on one member's value inside it is
still the `PerMemberError` that asks to move the test into the
per-member function).
A helper is a plain Python function whose source is outside installed
libraries and this package, without decorators (a lambda too, where its
source tells which lambda it is: `_lambda_definition`); any other
function, and one whose source cannot be read, is called as it is.
"""

import ast
import builtins
import copy
import inspect
import math
import os
import sysconfig
import textwrap
import types
import weakref

import numpy as np

from autobatch_vm import errors
from autobatch_vm.per_member import member_math

__all__ = ['member_call', 'member_helper', 'local_names', 'static_value',
           'tf_numpy_call', 'tf_numpy_helper', 'helper_arguments',
           'matmul_call',
           'makes_generator']

# Builtins that mean for one member's arrays and tensors, as `member_ops`'s
# functions of the same name, what they mean for numbers.
_BUILTINS = {getattr(builtins, n): n for n in
             ('min', 'max', 'abs', 'len', 'int', 'float', 'round', 'sum',
              'all', 'any', 'sorted', 'bool', 'complex')}
# NumPy's arrays like another, which `member_ops.call` makes of one
# member's tensor too (TensorFlow's symbolic tensors reach no NumPy
# function).
LIKE = frozenset((np.zeros_like, np.ones_like, np.empty_like, np.full_like))
# NumPy functions TensorFlow's NumPy API lacks, which `member_ops`
# computes on one member's tensors by TensorFlow's own op
# (`member_ops.tf_<name>`).
TF_OWN = {np.searchsorted: 'searchsorted', np.digitize: 'digitize',
          np.arange: 'arange',
          np.eye: 'eye', np.identity: 'eye', np.interp: 'interp',
          np.polyval: 'polyval', np.median: 'median',
          np.percentile: 'percentile', np.quantile: 'quantile'}
# NumPy's NaN-skipping functions that TensorFlow's NumPy API lacks, which
# `member_ops.tf_nanmax` and its kin compute of floats (of integers,
# `member_ops.nan_free` makes them NumPy's plain ones, which it has).
NAN_SKIPPING = frozenset((np.nanmax, np.nanmin, np.nanargmax, np.nanargmin,
                          np.nancumsum, np.nancumprod, np.nanvar,
                          np.nanstd))
TF_OWN.update({f: f.__name__ for f in NAN_SKIPPING})
# NumPy's rounding functions, which `member_ops.tnp_call` computes on a
# tensor by its own forms (TensorFlow's NumPy API lacks `trunc` and
# `rint`, its `round` needs NumPy behavior enabled, and its `floor` and
# `ceil` of integers give floats, where NumPy 2 keeps the integers).
ROUNDING = frozenset((np.round, np.around, np.trunc, np.fix, np.rint,
                      np.floor, np.ceil))
# NumPy's creation functions that one member's tensor reaches (a size
# `np.zeros(n)`, the value of `np.full(3, v)`), by TensorFlow's NumPy
# API's function of the name.
TF_CREATION = frozenset((np.zeros, np.ones, np.empty, np.full))
# NumPy's functions that TensorFlow's NumPy API (`tf.experimental.numpy`)
# has by the same name: `member_ops.call` runs that one on one member's
# tensors, which no NumPy function takes.
TF_NUMPY = frozenset(getattr(np, n) for n in (
    'sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'amax', 'amin',
    'argmax', 'argmin', 'cumsum', 'cumprod', 'all', 'any', 'count_nonzero',
    'sqrt', 'square', 'exp', 'exp2', 'expm1', 'log', 'log1p', 'log2',
    'log10', 'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'arctan2',
    'sinh', 'cosh', 'tanh', 'arcsinh', 'arccosh', 'arctanh', 'abs',
    'absolute', 'fabs', 'sign', 'floor', 'ceil', 'round', 'rint', 'trunc',
    'clip', 'where', 'maximum', 'minimum', 'power', 'hypot', 'isnan',
    'isinf', 'isfinite', 'logical_and', 'logical_or', 'logical_not',
    'logical_xor', 'dot', 'matmul', 'outer', 'inner', 'vdot', 'sort',
    'argsort', 'concatenate', 'stack', 'hstack', 'vstack', 'transpose',
    'reshape', 'ravel', 'flip', 'roll', 'diff', 'take', 'linspace', 'tile',
    'repeat', 'diag', 'trace', 'cross', 'einsum', 'allclose', 'isclose',
    'array_equal', 'nonzero', 'triu', 'tril', 'kron', 'ptp', 'average',
    'vander', 'nanmean', 'nansum') if hasattr(np, n))
# More of them, which a batch-aware primitive's TensorFlow form calls by
# TensorFlow's NumPy API (`tf_numpy_call`), and `member_ops.call` on one
# member's tensors too.
TF_NUMPY_BATCH = TF_NUMPY | frozenset(getattr(np, n) for n in (
    'add', 'subtract', 'multiply', 'divide', 'true_divide', 'floor_divide',
    'mod', 'remainder', 'negative', 'positive', 'reciprocal', 'equal',
    'not_equal', 'less', 'less_equal', 'greater', 'greater_equal',
    'bitwise_and', 'bitwise_or', 'bitwise_xor', 'bitwise_not', 'logaddexp',
    'logaddexp2', 'cbrt', 'deg2rad', 'rad2deg', 'float_power', 'heaviside',
    'sinc', 'signbit', 'isneginf', 'isposinf', 'fix', 'around', 'conj',
    'conjugate', 'real', 'imag', 'angle', 'expand_dims', 'squeeze',
    'swapaxes', 'moveaxis', 'take_along_axis', 'tensordot', 'kron',
    'broadcast_to', 'atleast_1d', 'atleast_2d', 'atleast_3d', 'tril',
    'triu', 'average', 'ptp', 'nansum', 'nanmean', 'nanprod', 'append',
    'pad', 'polyval', 'diagonal', 'select', 'fliplr', 'flipud', 'rot90',
    'vander', 'diagflat', 'gcd', 'lcm', 'dstack', 'split', 'hsplit',
    'vsplit', 'dsplit', 'meshgrid', 'broadcast_arrays', 'copy', 'array',
    'asarray') if hasattr(np, n))
# NumPy's linear algebra that runs by `tf.linalg` on TensorFlow
# (`member_ops.tf_linalg`): in a per-member primitive, and in a
# batch-aware primitive's TensorFlow form (`tf_numpy.numpy_call`).
LINALG = frozenset(getattr(np.linalg, n) for n in (
    'solve', 'inv', 'det', 'slogdet', 'cholesky', 'eigh', 'eigvalsh', 'qr',
    'pinv', 'norm', 'svd', 'matrix_power'))
# Array methods that `member_ops.method` runs on one member's tensors too
# (as NumPy's function of the name, `member_ops.tnp_call`, or a cast, a
# copy).
METHODS = frozenset((
    'sum', 'prod', 'mean', 'std', 'var', 'max', 'min', 'argmax', 'argmin',
    'cumsum', 'cumprod', 'all', 'any', 'astype', 'copy', 'reshape',
    'flatten', 'ravel', 'transpose', 'dot', 'clip', 'round', 'argsort',
    'nonzero', 'trace', 'diagonal', 'squeeze', 'swapaxes', 'repeat', 'conj',
    'conjugate'))   # not `sort`: in place
# NumPy's array attributes that `member_ops.attribute` gives of a
# tensor too (a TensorFlow tensor has none of them).
ATTRIBUTES = frozenset(('T', 'mT', 'real', 'imag'))
# Python's `math` functions that `member_ops.math_fn` computes for one
# member's numbers (`member_math`), by the function.
MATH = {getattr(math, n): n for n in member_math.NAMES}
# NumPy's array constructors, which cannot dispatch on a list of
# per-member values: `member_ops.asarray` stacks them.
_ARRAYS = {np.array: 'asarray', np.asarray: 'asarray'}
# Where the source of a function that is not a user's lies.
_LIBRARIES = tuple(sorted({
    os.path.abspath(p) + os.sep for p in (
        sysconfig.get_paths().get(k) for k in ('stdlib', 'platstdlib',
                                               'purelib', 'platlib'))
    if p} | {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
             + os.sep}))
_NOT_PLAIN = (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
              inspect.CO_ASYNC_GENERATOR)
_OPS = '__ab_member_ops'

# A helper's operators that go through `ops.promoted` (its `_BINARY`; an
# integer to a negative power fails as TensorFlow's kernel fails it, where
# `member_ops.power` notes the members in the primitive itself).
_PROMOTED = {
    ast.Add: 'add', ast.Sub: 'sub', ast.Mult: 'mul', ast.Div: 'truediv',
    ast.Pow: 'pow',
    ast.BitAnd: 'and_', ast.BitOr: 'or_', ast.BitXor: 'xor',
    ast.LShift: 'lshift', ast.RShift: 'rshift', ast.Lt: 'lt',
    ast.LtE: 'le', ast.Gt: 'gt', ast.GtE: 'ge', ast.Eq: 'eq', ast.NotEq: 'ne'}


def member_call(obj, node):
  """How a per-member primitive calls `obj` (the callee of call `node`).

  Args:
    obj: The object the call's function refers to (anything, where it is
      not static).
    node: The `ast.Call`.

  Returns:
    The name of the `member_ops` function called instead (`'min'`,
    `'asarray'`, `'math_fn'` for a function of `math` ...), `'call'` where the call goes through
    `member_ops.call(obj, ...)` (a NumPy scalar type, a creation
    function, a NumPy function given a list or tuple display, a user's
    helper), or None where the call stays as written.
  """
  starred = any(isinstance(a, ast.Starred) for a in node.args)
  if makes_generator(obj):
    return 'random_generator'
  if _draws_with_numpy(obj):
    return 'random_draw'
  for table in (_BUILTINS, _ARRAYS):
    for fn, name in table.items():
      if obj is fn:
        if starred or (node.keywords and
                       name not in ('asarray', 'round', 'sorted', 'min',
                                    'max')):
          return None
        return name
  try:
    if obj in MATH:
      return None if starred else 'math_fn'
  except TypeError:   # unhashable
    return None
  if isinstance(obj, type) and issubclass(obj, np.generic):
    return 'call'
  if obj is np.finfo or obj is np.iinfo:
    return None if starred else 'call'
  # The rules load with the first per-member function, not at start-up.
  from autobatch_vm.per_member import numpy_rules  # pylint: disable=g-import-not-at-top
  try:
    if (obj in numpy_rules.CREATION or obj in LIKE or
        obj in TF_NUMPY_BATCH or obj in LINALG or obj in TF_OWN or
        obj in ROUNDING):
      return 'call'
  except TypeError:   # unhashable
    return None
  if (getattr(obj, '__module__', None) or '').startswith('numpy') and any(
      isinstance(a, (ast.List, ast.Tuple)) for a in node.args):
    return 'call'
  return 'call' if is_helper(obj) else None


def tf_numpy_call(obj, node):
  """How a batch-aware primitive's TensorFlow form calls `obj` (the
  callee of call `node`): `'numpy_call'` (`tf_numpy.numpy_call(obj, ...)`)
  for a NumPy function that TensorFlow's NumPy API has by its name
  (`TF_NUMPY_BATCH`), `np.zeros_like` and its kin, NumPy's linear
  algebra that `tf.linalg` has (`LINALG`), `len` (which a symbolic
  tensor refuses), a user's helper, and NumPy's
  other functions (called as written, with a tensor's dtype among their
  arguments as NumPy's); else None (the call stays as written).

  Args:
    obj: The object the call's function refers to.
    node: The `ast.Call`.

  Returns:
    `'numpy_call'` or None.
  """
  del node
  try:
    if (obj in TF_NUMPY_BATCH or obj in LIKE or obj in LINALG or
        obj is builtins.len):
      return 'numpy_call'
  except TypeError:   # unhashable
    return None
  if is_helper(obj):
    return 'numpy_call'
  # Any other of NumPy's functions (`np.ones(3, dtype=v.dtype)`): as
  # written, a tensor's dtype among its arguments made NumPy's.
  if obj is np.finfo or obj is np.iinfo:   # of a tensor's dtype too
    return 'numpy_call'
  if makes_generator(obj):   # refused of a tensor (`tf_numpy.numpy_call`)
    return 'numpy_call'
  module = getattr(obj, '__module__', None) or ''
  return ('numpy_call' if callable(obj) and not isinstance(obj, type) and
          (module == 'numpy' or module.startswith('numpy.')) and
          not _draws_with_numpy(obj) else None)


def makes_generator(obj):
  """Whether calling `obj` makes a random generator, an object that
  holds a stream's state: NumPy's `np.random.default_rng`, `Generator`,
  `RandomState`, `SeedSequence` or a bit generator (`PCG64`), or
  Python's `random.Random`."""
  if obj is np.random.default_rng:
    return True
  return isinstance(obj, type) and issubclass(obj, errors.RANDOM_GENERATORS)


def _draws_with_numpy(obj):
  """Whether `obj` draws NumPy random numbers: a function of `np.random`
  (`np.random.normal`, a method of its global `RandomState`) or a method
  of a `Generator` or `RandomState` (`rng.normal`)."""
  owner = getattr(obj, '__self__', None)
  if isinstance(owner, (np.random.Generator, np.random.RandomState)):
    return True
  return (callable(obj) and not isinstance(obj, type) and
          (getattr(obj, '__module__', None) or '').startswith('numpy.random'))


def call_arguments(name, obj, node):
  """The arguments of the `member_ops` call that replaces call `node` of
  `obj`, for `member_call`'s `name`: the callee first for `'call'`, the
  `math` function's name first for `'math_fn'`, else the call's own.

  Args:
    name: What `member_call(obj, node)` returned.
    obj: The callee.
    node: The `ast.Call`.

  Returns:
    A list of AST nodes.
  """
  if name in ('call', 'numpy_call', 'random_draw', 'random_generator'):
    return [node.func] + list(node.args)
  if name == 'math_fn':
    return [ast.Constant(MATH[obj])] + list(node.args)
  return list(node.args)


def is_helper(obj):
  """Whether `obj` is a user's helper (see the module docstring).

  Args:
    obj: Any object.

  Returns:
    True for a plain Python function of the user's, or a method of one
    bound to an object.
  """
  if isinstance(obj, types.MethodType):   # a method of the user's object
    obj = obj.__func__
  if type(obj) is not types.FunctionType:  # pylint: disable=unidiomatic-typecheck
    return False
  code = obj.__code__
  if code.co_flags & _NOT_PLAIN or code.co_filename.startswith('<'):
    return False
  return not os.path.abspath(code.co_filename).startswith(_LIBRARIES)


_REWRITTEN = weakref.WeakKeyDictionary()
_TF_NUMPY_REWRITTEN = weakref.WeakKeyDictionary()


def member_helper(fn, ops):
  """`fn` with its calls rewritten as a per-member primitive's are.

  Args:
    fn: A user's helper (`is_helper`), or any other callable.
    ops: The `member_ops` module, which the rewritten calls call.

  Returns:
    A function with `fn`'s globals, closure, defaults and source lines;
    `fn` itself where no call needs the rewrite, or where `fn` is not a
    helper or its source cannot be read.
  """
  return _rewritten(fn, ops, member_call, _REWRITTEN)


def tf_numpy_helper(fn, ops):
  """`fn` with its calls rewritten as a batch-aware primitive's
  TensorFlow form's are (`tf_numpy_call`: NumPy functions through
  `tf_numpy.numpy_call`).

  Args:
    fn: A user's helper (`is_helper`), or any other callable.
    ops: The `tf_numpy` module, which the rewritten calls call.

  Returns:
    As for `member_helper`.
  """
  return _rewritten(fn, ops, tf_numpy_call, _TF_NUMPY_REWRITTEN)


def helper_arguments(args, kwargs, rewrite):
  """`(args, kwargs)` of a helper's call with each argument that is a
  helper itself rewritten by `rewrite` (`member_helper` or
  `tf_numpy_helper`, given the function): a function passed to the helper
  that calls it (`integrate(g, a, b)`) runs on the same values as the
  helper, and needs its calls rewritten the same way."""
  if not any(map(is_helper, args)) and not any(
      map(is_helper, kwargs.values())):
    return args, kwargs
  return ([rewrite(a) if is_helper(a) else a for a in args],
          {k: rewrite(v) if is_helper(v) else v for k, v in kwargs.items()})


def _rewritten(fn, ops, decide, cache):
  if isinstance(fn, types.MethodType):   # rewritten, bound to its object
    return types.MethodType(_rewritten(fn.__func__, ops, decide, cache),
                            fn.__self__)
  try:
    return cache[fn]
  except (KeyError, TypeError):
    pass
  made = fn
  if is_helper(fn):
    try:
      made = _rewrite(fn, ops, decide)
    except (OSError, SyntaxError, TypeError, ValueError):
      made = fn   # no source to read: as written
    cache[fn] = made
  return made


def _rewrite(fn, ops, decide):
  code = fn.__code__
  # A helper lifted out of a batched function (`python.nested`) carries
  # its definition: its source lacks the parameters it was given.
  definition = copy.deepcopy(getattr(fn, '__ab_definition__', None))
  if definition is None and code.co_name == '<lambda>':
    definition = _lambda_definition(fn)
    if definition is None:
      return fn
  if definition is None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
      return fn
    definition = tree.body[0]
  if definition.name != fn.__name__ or definition.decorator_list:
    return fn
  cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
  rewriter = _CallRewriter(local_names(definition), cells, fn.__globals__,
                           decide)
  definition = rewriter.visit(definition)
  if not rewriter.changed:
    return fn
  ast.increment_lineno(definition, code.co_firstlineno - 1)
  # Renamed inside the maker, so that the function's own name in its body
  # (a recursive call) is what it is in `fn` (a global or closure cell),
  # not a name of the maker's that no cell holds.
  definition.name = _OPS + '_helper'
  new = inner_code(definition, sorted(set(cells) | {_OPS}),
                   code.co_filename)
  # Its own name again, for tracebacks.
  new = new.replace(co_name=code.co_name, **(
      {'co_qualname': code.co_qualname} if hasattr(code, 'co_qualname')
      else {}))
  closure = tuple(types.CellType(ops) if n == _OPS else cells[n]
                  for n in new.co_freevars)
  made = types.FunctionType(new, fn.__globals__, fn.__name__,
                            fn.__defaults__, closure)
  made.__kwdefaults__ = fn.__kwdefaults__
  made.__qualname__ = fn.__qualname__
  made.__doc__ = fn.__doc__
  return made


def _lambda_definition(fn):
  """Lambda `fn` as an `ast.FunctionDef` of its name returning its body,
  its lines its source file's less `fn`'s first line (as `_rewrite` reads
  a `def`), or None where its source does not tell which lambda it is.

  The lambda is found in the parsed file (a lambda inside a call or a
  literal spanning lines, in a default argument, a class body or a
  decorator), among those of its parameters that start on its first
  line; several there are told apart by the columns of its code (Python
  >= 3.11).  Any failure to read or parse the source gives None: the
  lambda is called as written.
  """
  code = fn.__code__
  try:
    lines = inspect.findsource(fn)[0]
    by_line = _lambdas_by_line(code.co_filename, ''.join(lines))
  except Exception:  # pylint: disable=broad-except
    return None   # (inspect and tokenize raise many kinds)
  params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
  positions = getattr(code, 'co_positions', lambda: ())()
  spans = [(p[0], p[2], p[1], p[3]) for p in positions
           if None not in p and (p[2], p[3]) != (0, 0)]
  found = [n for n in by_line.get(code.co_firstlineno, ()) if
           tuple(a.arg for a in n.args.posonlyargs + n.args.args +
                 n.args.kwonlyargs) == params and
           (n.args.vararg is None) == (not code.co_flags &
                                       inspect.CO_VARARGS) and
           (n.args.kwarg is None) == (not code.co_flags &
                                      inspect.CO_VARKEYWORDS) and
           all((n.lineno, n.col_offset) <= (l, c) and
               (el, ec) <= (n.end_lineno, n.end_col_offset)
               for l, c, el, ec in spans)]
  if len(found) != 1:
    return None
  node = found[0]
  # The names its body reads are those its code reads (a lambda of code
  # made from another source, a primitive's, reads names of its own).
  bound = set(params) | {a.arg for a in (node.args.vararg,
                                         node.args.kwarg) if a}
  read = {n.id for n in ast.walk(node.body)
          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
  if not set(code.co_freevars) <= read or not (read - bound) <= (
      _names_read(code)):
    return None
  body = copy.deepcopy(node.body)   # the parsed file's, shared
  definition = ast.FunctionDef(
      name=fn.__name__, args=copy.deepcopy(node.args),
      body=[ast.copy_location(ast.Return(body), body)],
      decorator_list=[], returns=None, type_comment=None)
  ast.copy_location(definition, node)
  ast.fix_missing_locations(definition)
  ast.increment_lineno(definition, 1 - code.co_firstlineno)
  return definition


def _names_read(code):
  """The names code object `code` and those nested in it (a lambda's or
  comprehension's) may read."""
  names = set(code.co_freevars) | set(code.co_names) | set(code.co_varnames)
  for c in code.co_consts:
    if isinstance(c, types.CodeType):
      names |= _names_read(c)
  return names


_LAMBDAS = {}   # file name -> (its source, line -> its lambdas)


def _lambdas_by_line(filename, source):
  """line -> the `ast.Lambda` nodes starting there, of file `filename`
  whose text is `source` (parsed once while the text is the same)."""
  held = _LAMBDAS.get(filename)
  if held is not None and held[0] == source:
    return held[1]
  by_line = {}
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Lambda):
      by_line.setdefault(node.lineno, []).append(node)
  _LAMBDAS[filename] = (source, by_line)
  return by_line


def inner_code(definition, names, filename, line_offset=0):
  """The code object of function `definition` compiled inside a function
  whose parameters are `names`: those it reads are its free variables,
  for closure cells of the caller's (`types.FunctionType(code, globals,
  name, defaults, cells)`).

  Args:
    definition: An `ast.FunctionDef` (its lines the file's, less
      `line_offset`).
    names: The names it may read from cells.
    filename: The file its code names.
    line_offset: Added to its lines.

  Returns:
    Its `types.CodeType`.
  """
  maker = ast.FunctionDef(
      name=_OPS + '_make',
      args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                         vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[]),
      body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))],
      decorator_list=[], returns=None, type_comment=None, type_params=[])
  module = ast.Module(body=[maker], type_ignores=[])
  ast.fix_missing_locations(module)
  ast.increment_lineno(module, line_offset)
  compiled = compile(module, filename, 'exec')
  maker_code = next(c for c in compiled.co_consts
                    if isinstance(c, types.CodeType))
  return next(c for c in maker_code.co_consts if isinstance(
      c, types.CodeType) and c.co_name == definition.name)


def local_names(definition):
  """Every name a function binds anywhere (its own or a nested scope's:
  such a name is not resolved, so its calls stay as written).

  Args:
    definition: An `ast.FunctionDef` or `ast.Lambda`.

  Returns:
    The set of names (its parameters included).
  """
  names = set()
  for n in ast.walk(definition):
    if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
      names.add(n.id)
    elif isinstance(n, ast.arg):
      names.add(n.arg)
    elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                        ast.ClassDef)) and n is not definition:
      names.add(n.name)
    elif isinstance(n, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split('.')[0] for a in n.names)
    elif isinstance(n, (ast.Global, ast.Nonlocal)):
      names.update(n.names)
  return names


_UNKNOWN = object()


def static_value(node, names, cells, fn_globals, unknown):
  """The object a name or attribute chain of a function's non-locals
  refers to when the function compiles.

  Args:
    node: An `ast.Name` or `ast.Attribute` chain (any other node is not
      static).
    names: The function's local names (not static).
    cells: The function's closure cells, by name.
    fn_globals: The function's globals.
    unknown: What to return where the value is not static.

  Returns:
    The object (a closure cell's contents, a global, a builtin, an
    attribute of one), or `unknown`.
  """
  if isinstance(node, ast.Name):
    if node.id in names:
      return unknown
    if node.id in cells:
      try:
        return cells[node.id].cell_contents
      except ValueError:   # an empty cell
        return unknown
    if node.id in fn_globals:
      return fn_globals[node.id]
    return getattr(builtins, node.id, unknown)
  if isinstance(node, ast.Attribute):
    base = static_value(node.value, names, cells, fn_globals, unknown)
    if base is unknown:
      return unknown
    return getattr(base, node.attr, unknown)
  return unknown


def matmul_call(module, node):
  """`a @ b` (BinOp `node`) as `<module>.matmul(a, b)`: `tf_numpy.matmul`,
  NumPy's product where a tensor meets a vector, in a batch-aware
  primitive's TensorFlow form and in the helpers it calls.

  Args:
    module: The name the generated code reads `tf_numpy` by.
    node: The `ast.BinOp` of `ast.MatMult`.

  Returns:
    The `ast.Call`.
  """
  fn = ast.Attribute(ast.Name(module, ast.Load()), 'matmul', ast.Load())
  return ast.copy_location(ast.Call(fn, [node.left, node.right], []), node)


def _located(new, like):
  """`new`, and every node in it without a location, at `like`'s."""
  for n in ast.walk(new):
    if getattr(n, 'lineno', None) is None and 'lineno' in n._attributes:  # pylint: disable=protected-access
      ast.copy_location(n, like)
  return new


class _CallRewriter(ast.NodeTransformer):
  """Rewrites a helper's calls as `decide` (`member_call`,
  `tf_numpy_call`) says."""

  def __init__(self, local_names, cells, fn_globals, decide):
    self.local_names = local_names
    self.cells = cells
    self.globals = fn_globals
    self.decide = decide
    self.changed = False

  def visit_BinOp(self, node):
    node = self.generic_visit(node)
    if type(node.op) in _PROMOTED:
      # TensorFlow's operators do not promote (an int64 times 0.5, a
      # float32 times a float64 array): NumPy's dtypes, as the calling
      # primitive's own operators get them (`ops.promoted`).
      return self._promoted(_PROMOTED[type(node.op)], node.left, node.right,
                            node)
    if not isinstance(node.op, ast.MatMult):
      return node
    # `a @ v` with a vector: `tf_numpy.matmul` or `member_ops.matmul`.
    self.changed = True
    return matmul_call(_OPS, node)

  def visit_Compare(self, node):
    node = self.generic_visit(node)
    if len(node.ops) != 1 or type(node.ops[0]) not in _PROMOTED:
      return node
    return self._promoted(_PROMOTED[type(node.ops[0])], node.left,
                          node.comparators[0], node)

  def _promoted(self, name, left, right, like):
    self.changed = True
    fn = ast.Attribute(ast.Name(_OPS, ast.Load()), 'promoted', ast.Load())
    return _located(ast.Call(fn, [ast.Constant(name), left, right], []),
                    like)

  # In a per-member helper, a member's tensor is iterated and indexed as
  # in the per-member function itself: Python iterates no tensor inside
  # a graph, and an index that differs between members is a gather.

  def _iterated(self, node):
    self.changed = True
    fn = ast.Attribute(ast.Name(_OPS, ast.Load()), 'iterate', ast.Load())
    return _located(ast.Call(fn, [node], []), node)

  def visit_comprehension(self, node):
    node = self.generic_visit(node)
    if self.decide is member_call:
      node.iter = self._iterated(node.iter)
    return node

  def visit_For(self, node):
    node = self.generic_visit(node)
    if self.decide is member_call:
      node.iter = self._iterated(node.iter)
    return node

  def _item_written(self, node, target, value):
    """`v = ops.helper_setitem(v, key[index], value)` for a helper's
    `v[index] = value` of a local `v`: in place on NumPy, as Python
    writes it; a new tensor on TensorFlow, whose tensors take no item
    assignment."""
    self.changed = True
    ops = ast.Name(_OPS, ast.Load())
    key = ast.Subscript(ast.Attribute(ops, 'key', ast.Load()), target.slice,
                        ast.Load())
    call = ast.Call(ast.Attribute(ops, 'helper_setitem', ast.Load()),
                    [ast.Name(target.value.id, ast.Load()), key, value], [])
    return _located(ast.Assign(
        targets=[ast.Name(target.value.id, ast.Store())],
        value=_located(call, node)), node)

  def _local_item(self, target):
    """Whether `target` is an item of one of the helper's own variables
    (a global's or a closure's, `COUNTS[0] += 1`, is written as it is)."""
    return (isinstance(target, ast.Subscript) and
            isinstance(target.value, ast.Name) and
            target.value.id in self.local_names)

  def visit_AugAssign(self, node):
    node = self.generic_visit(node)
    if self.decide is not member_call or not self._local_item(node.target):
      return node
    read = ast.Subscript(copy.deepcopy(node.target.value),
                         copy.deepcopy(node.target.slice), ast.Load())
    read = self.visit_Subscript(_located(read, node.target))
    value = _located(ast.BinOp(read, node.op, node.value), node)
    return self._item_written(node, node.target, value)

  def visit_Assign(self, node):
    node = self.generic_visit(node)
    target = node.targets[0]
    if (self.decide is member_call and len(node.targets) == 1 and
        self._local_item(target)):
      return self._item_written(node, target, node.value)
    if (self.decide is member_call and len(node.targets) == 1 and
        isinstance(target, (ast.Tuple, ast.List)) and not any(
            isinstance(e, ast.Starred) for e in target.elts) and
        not isinstance(node.value, (ast.Tuple, ast.List))):
      # `x, y = v` of a member's vector: `member_ops.unpacked(v, 2)`
      # (Python iterates no tensor inside a graph).
      self.changed = True
      node.value = _located(ast.Call(
          ast.Attribute(ast.Name(_OPS, ast.Load()), 'unpacked', ast.Load()),
          [node.value, ast.Constant(len(target.elts))], []), node.value)
    return node

  def visit_Subscript(self, node):
    node = self.generic_visit(node)
    if not isinstance(node.ctx, ast.Load):
      return node
    if self.decide is not member_call and not any(
        isinstance(n, (ast.Name, ast.Attribute, ast.List))
        for n in ast.walk(node.slice)):
      # Batch-aware, only `x[:, ORDER]` of a constant array goes to
      # `tf_numpy.getitem`.
      return node
    self.changed = True
    ops = ast.Name(_OPS, ast.Load())
    key = ast.Subscript(ast.Attribute(ops, 'key', ast.Load()), node.slice,
                        ast.Load())
    return _located(ast.Call(
        ast.Attribute(ops, 'getitem', ast.Load()), [node.value, key], []),
                    node)

  def visit_Attribute(self, node):
    node = self.generic_visit(node)
    if node.attr in ATTRIBUTES and isinstance(node.ctx, ast.Load):
      # `v.T`, `v.real` (a tensor has neither): `member_ops.attribute`,
      # `tf_numpy.attribute`.
      self.changed = True
      return _located(ast.Call(
          ast.Attribute(ast.Name(_OPS, ast.Load()), 'attribute',
                        ast.Load()), [node.value, ast.Constant(node.attr)],
          []), node)
    return node

  def visit_Call(self, node):
    node = self.generic_visit(node)
    callee = static_value(node.func, self.local_names, self.cells,
                          self.globals, _UNKNOWN)
    if (callee is _UNKNOWN and isinstance(node.func, ast.Attribute) and
        node.func.attr in METHODS):
      # An array method (`v[1:3].sum()`, `x.max(axis=-1)`):
      # `member_ops.method` or `tf_numpy.numpy_method`, which run it on a
      # tensor too.
      self.changed = True
      name = 'method' if self.decide is member_call else 'numpy_method'
      return _located(ast.Call(
          ast.Attribute(ast.Name(_OPS, ast.Load()), name, ast.Load()),
          [node.func.value, ast.Constant(node.func.attr)] + list(node.args),
          node.keywords), node)
    if callee is _UNKNOWN:
      return node
    name = self.decide(callee, node)
    if name is None:
      return node
    self.changed = True
    fn = ast.Attribute(ast.Name(_OPS, ast.Load()), name, ast.Load())
    return ast.copy_location(ast.Call(
        fn, call_arguments(name, callee, node), node.keywords), node)
