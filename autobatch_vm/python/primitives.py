"""From a pure expression of a batched function to its batched primitive.

A maximal sub-expression without calls of batched functions becomes one
`PrimOp`: `PrimitiveRewriter` turns the IR variables it reads into the
parameters of a function and the Python operators that would see the
whole batch (`and`, `or`, `not`, chained comparisons, `a if c else b`, `%`
and `//`) into calls of the per-member helpers of `autobatch_vm.ops`;
`make_function` compiles that body into a real Python function with the
user's globals and closure cells and the user's file and line.
"""

import ast
import builtins
import copy
import linecache
import types

from autobatch_vm import errors
from autobatch_vm import ops as ops_module
from autobatch_vm.per_member import member_helpers
from autobatch_vm.python import optional

__all__ = ['PrimitiveRewriter', 'make_function', 'closure_code',
           'expression_text',
           'helper_name', 'input_position', 'shorten', 'split_compare',
           'subscript_parts', 'tf_numpy', 'promotable', 'promoting',
           'batch_key', 'weak_operands']

# The names the generated code binds are `prefix + suffix`, with a prefix
# that no identifier of the user's function starts with
# (`source.generated_prefix`): `__ab_` unless the user's code uses
# such names itself.
_OPS = 'ops'
# Operators that become calls of `autobatch_vm.ops` helpers, in
# per-member functions too (`PrimitiveRewriter.visit_BinOp`).
_OPERATOR_HELPERS = {ast.Mod: 'mod', ast.FloorDiv: 'floordiv',
                     ast.LShift: 'lshift', ast.RShift: 'rshift'}
_ASSERT = 'helper_assertion'
# The per-member helpers (`per_member.member_ops`), in per-member
# primitives.
MEMBER_OPS = 'pm'
# `per_member.tf_numpy`, in a batch-aware primitive's TensorFlow form.
TF_NUMPY_OPS = 'tfnp'
# The helpers that fail some members as Python would (`member_math`):
# given the guards of the operand they are in (`guard=`).
_CHECKED_HELPERS = frozenset(('math_fn', 'int', 'round'))
class PrimitiveRewriter(ast.NodeTransformer):
  """Makes a pure expression batch: IR variables become lambda parameters.

  `and`/`or`/`not`, chained comparisons and `a if c else b` become calls of
  the per-member helpers in `autobatch_vm.ops`; `truthy(x)` becomes `x`.

  Those helpers compute every operand for every member.  In a per-member
  function an item read in an operand that Python would skip for a
  member (`i < len(x) and x[i] < t`, `x[i] if i < n else 0`) is given
  that operand's *guard*, the condition under which Python evaluates it
  (`i < len(x)`), as `getitem`'s third argument: members where it does
  not hold read a harmless item and raise no `IndexError`.

  Args:
    local_names: The names of the function's variables (its parameters
      and assignment targets).
    static_value: AST node -> the Python object a name or attribute chain
      of non-locals refers to (a sentinel where it is not static).
    unsupported: (node, what) -> raises the error for an unsupported
      construct.
    prefix: The prefix of generated names (`generated_prefix`).
    per_member: Whether the expression is one member's (a per-member
      function's): then the helpers are `per_member.member_ops`'s, and
      subscripts and the builtins `min`, `max`, `abs`, `len`, `int`,
      `float` call them too.
  """

  def __init__(self, local_names, static_value, unsupported,
               prefix='__ab_', per_member=False):
    self.local_names = local_names
    self.static_value = static_value
    self.unsupported = unsupported
    self.prefix = prefix
    self.per_member = per_member
    self.inputs = []
    # `(text, node, index_inputs, value_text, element_texts)` per
    # subscript of a variable by a variable: its source, its rewritten
    # node, the positions in `inputs` of the variables its index reads,
    # and the source of its value and of each element of its index
    # (`member_indexing`).
    self.subscripts = []
    # The guards of the operands being visited (rewritten conditions):
    # an item read there happens, in Python, only where all hold.
    self._guards = []
    # The names the comprehensions being visited bind: their own
    # variables there, not the function's of the same name.
    self._shadowed = []

  def rewrite(self, node):
    """Rewrites a copy of `node`.

    Args:
      node: A pure expression (no call of a batched function).

    Returns:
      `(body, inputs)`: the rewritten expression, reading `<prefix>v<i>`,
      and the variables it reads, `inputs[i]` for `<prefix>v<i>`.
    """
    node = self.visit(copy.deepcopy(node))
    return node, self.inputs

  def _ops(self, name, args, like, module=None, keywords=()):
    if module is None:
      module = MEMBER_OPS if self.per_member and name not in (
          _OPERATOR_HELPERS.values()) else _OPS
    fn = ast.Attribute(ast.Name(self.prefix + module, ast.Load()), name,
                       ast.Load())
    return ast.copy_location(ast.Call(fn, args, list(keywords)), like)

  def visit_Name(self, node):
    """A read of a variable becomes the parameter `<prefix>v<i>`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if isinstance(node.ctx, ast.Load) and self._is_variable(node.id):
      if node.id not in self.inputs:
        self.inputs.append(node.id)
      return ast.copy_location(
          ast.Name(f'{self.prefix}v{self.inputs.index(node.id)}',
                   ast.Load()), node)
    return node

  def visit_Subscript(self, node):
    """Rewrites a subscript, noting those that may index per member.

    A subscript whose value and index both read variables (`x[:, j]`,
    `x[j]`) is also noted in `subscripts`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    text, value_text = expression_text(node), expression_text(node.value)
    elements = (node.slice.elts if isinstance(node.slice, ast.Tuple)
                else [node.slice])
    element_texts = tuple(expression_text(e) for e in elements)
    if self.per_member and _is_member_key(node, self.prefix):
      return self.generic_visit(node)   # made by the frontend: a value
    node = self.generic_visit(node)
    if self.per_member and isinstance(node.ctx, ast.Load):
      args = [node.value, member_key(self.prefix, node.slice, node)]
      if self._guards:
        args.append(self._guard(node))
      return self._ops('getitem', args, node)
    if isinstance(node.ctx, ast.Load):
      value, index = self._inputs_read(node.value), self._inputs_read(
          node.slice)
      if value and index:
        self.subscripts.append((text, node, index, value_text,
                                element_texts))
    return node

  def _inputs_read(self, node):
    """The positions in `inputs` of the variables rewritten `node` reads
    (outside lambdas, which are kept as written)."""
    names = {f'{self.prefix}v{i}': i for i in range(len(self.inputs))}
    return sorted({names[n.id] for n in ast.walk(node)
                   if isinstance(n, ast.Name) and n.id in names})

  def visit_Attribute(self, node):
    """`v.T` of a member's value becomes `member_ops.attribute(v, 'T')`.

    In a per-member function only (a TensorFlow tensor has no `.T`);
    other attributes are kept.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if (isinstance(node.ctx, ast.Load) and not self.per_member and
        node.attr == 'shape' and self._reads_variables(node.value)):
      # A tensor's shape is a `TensorShape`: a tuple of Python ints in
      # the TensorFlow form, as NumPy gives (`tf_numpy.attribute`).
      node = self.generic_visit(node)
      node.ab_tf_numpy = 'attribute'
      return node
    if (isinstance(node.ctx, ast.Load) and
        node.attr in member_helpers.ATTRIBUTES and
        self._reads_variables(node.value)):
      if not self.per_member:
        # Marked for the primitive's TensorFlow form (`tf_numpy`).
        node = self.generic_visit(node)
        node.ab_tf_numpy = 'attribute'
        return node
      value = self.visit(node.value)
      return self._ops('attribute', [value, ast.Constant(node.attr)], node,
                       MEMBER_OPS)
    return self.generic_visit(node)

  def visit_Lambda(self, node):
    """A lambda is kept as written.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    # Lambda bodies are plain Python on whatever they are given; the
    # function's variables they read are the primitive's inputs, as
    # Python's closure reads them (`tf.map_fn(lambda r: r * n, x)`).
    reads = _LambdaReads(self, _bound_names(node))
    node = reads.generic_visit(node)
    if not reads.found:
      return node
    # Its closure is the primitive's now: TensorFlow's AutoGraph, which
    # `tf.map_fn` runs it through, would find it differs from the
    # source's and warn (it has no statements to convert).
    return self._ops('as_written', [node], node, _OPS)

  def visit_BoolOp(self, node):
    """`and`/`or` become `ops.logical_and`/`ops.logical_or`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    name = 'logical_and' if isinstance(node.op, ast.And) else 'logical_or'
    if not self.per_member:
      # Each operand a thunk: an operand that holds one value for every
      # member (`x.ndim == 2 and ...`) decides as in Python, and the
      # operands after it run only where Python runs them.
      return self._ops('all_of' if name == 'logical_and' else 'any_of',
                       [_thunk(self.visit(v)) for v in node.values], node)
    values = [self.visit(node.values[0])]
    for v in node.values[1:]:
      # Python evaluates `v` where the operands before it are all true
      # (`and`) or all false (`or`).
      before = [copy.deepcopy(x) for x in values]
      held = before[0] if len(before) == 1 else self._ops(name, before, node)
      if name == 'logical_or':
        held = self._ops('logical_not', [held], node)
      values.append(self._guarded(held, v))
    # Thunks: an operand the same for every member (a module flag, a
    # shape's test) decides as Python's does, and the operands after it
    # are not computed (`member_ops.all_of`).
    return self._ops('all_of' if name == 'logical_and' else 'any_of',
                     [_thunk(v) for v in values], node)

  def _is_method_call(self, node):
    """Whether call `node` calls an array method (`member_helpers.METHODS`)
    of a value the function computes (it reads the function's variables):
    not of a module or of an object the same for every member."""
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr in member_helpers.METHODS
            and (self._reads_variables(f.value) or
                 self._reads_comprehension_target(f.value)) and
            not any(isinstance(a, ast.Starred) for a in node.args) and
            all(k.arg is not None for k in node.keywords))

  def _is_variable(self, name):
    """Whether `name` is one of the function's variables (or the IR's),
    where a comprehension being visited does not bind it."""
    if any(name in names for names in self._shadowed):
      return False
    return name in self.local_names or name.startswith('%')

  def _comprehension_scope(self, node):
    """Visits a comprehension in its own scope.

    Its targets' names are its own (`sum(a[i] for i in range(n))` after
    a loop over `i` reads the comprehension's `i`, not the function's),
    except in its first iterable, which Python evaluates outside it.

    Args:
      node: The comprehension's AST node.

    Returns:
      Its replacement.
    """
    names = {n.id for g in node.generators for n in ast.walk(g.target)
             if isinstance(n, ast.Name)}
    first = node.generators[0]
    outer = self.visit(first.iter)
    first.iter = ast.copy_location(ast.Constant(None), outer)
    self._shadowed.append(names)
    try:
      node = self.generic_visit(node)
    finally:
      self._shadowed.pop()
    node.generators[0].iter = self._iterated(outer)
    return node

  visit_ListComp = _comprehension_scope
  visit_SetComp = _comprehension_scope
  visit_DictComp = _comprehension_scope
  visit_GeneratorExp = _comprehension_scope

  def _reads_comprehension_target(self, node):
    """Whether expression `node` reads a name that a comprehension being
    visited binds (`r.max() for r in rows`: an item of a member's value,
    `member_ops.method`'s on a tensor, as written on anything else)."""
    return any(isinstance(n, ast.Name) and
               any(n.id in names for names in self._shadowed)
               for n in ast.walk(node))

  def _reads_variables(self, node):
    """Whether expression `node` (not yet rewritten) reads a variable."""
    return any(isinstance(n, ast.Name) and self._is_variable(n.id)
               for n in ast.walk(node))

  def _guarded(self, guard, node):
    """`node` visited with `guard` (a rewritten condition) held."""
    self._guards.append(guard)
    try:
      return self.visit(node)
    finally:
      self._guards.pop()

  def _guard(self, like):
    """The conjunction of the guards held, as a new expression."""
    guards = [copy.deepcopy(g) for g in self._guards]
    if len(guards) == 1:
      return guards[0]
    return self._ops('logical_and', guards, like)

  def visit_UnaryOp(self, node):
    """`not` becomes `ops.logical_not`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    operand = self.visit(node.operand)
    if isinstance(node.op, ast.Not):
      return self._ops('logical_not', [operand], node)
    return ast.copy_location(ast.UnaryOp(node.op, operand), node)

  def visit_BinOp(self, node):
    """`%`, `//`, `<<` and `>>` become calls of `ops` helpers.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    # `%` and `//` go through helpers so that a zero divisor in a member not
    # at the block cannot fail a TensorFlow run (NumPy gives 0 there).
    # `<<` and `>>` too: a TensorFlow tensor has no such operators.
    name = _OPERATOR_HELPERS.get(type(node.op))
    if name is not None:
      return self._ops(name, [self.visit(node.left), self.visit(node.right)],
                       node)
    if self.per_member and isinstance(node.op, ast.Pow):
      # A member's integer to a negative integer power fails it, as
      # NumPy's does (`member_ops.power`); XLA's would be 0.
      return self._ops('power', [self.visit(node.left),
                                 self.visit(node.right)], node)
    if self.per_member and isinstance(node.op, ast.MatMult):
      # A member's `a @ v` with a vector: NumPy's product, which
      # TensorFlow's `@` (`tf.matmul`) refuses (`member_ops.matmul`).
      return self._ops('matmul', [self.visit(node.left),
                                  self.visit(node.right)], node)
    return self.generic_visit(node)

  def visit_Compare(self, node):
    """A chained comparison becomes `ops.logical_and` of each.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    if len(node.ops) > 1:
      return self.visit(split_compare(node))
    if isinstance(node.ops[0], (ast.In, ast.NotIn)):
      # Python's `in` asks `==` for one bool, which a member's value
      # (or the batch's) is not: `ops.contains`, `member_ops.contains`;
      # `x in range(lo, hi)` of a member's bounds, which make no Python
      # range, `ops.in_range`.
      where = node.comparators[0]
      if (isinstance(where, ast.Call) and not where.keywords and
          1 <= len(where.args) <= 3 and not any(
              isinstance(a, ast.Starred) for a in where.args) and
          self._is_range(where.func)):
        found = self._ops('in_range', [self.visit(node.left)] + [
            self.visit(a) for a in where.args], node)
      else:
        found = self._ops('contains', [self.visit(where),
                                       self.visit(node.left)], node)
      if isinstance(node.ops[0], ast.NotIn):
        return self._ops('logical_not', [found], node)
      return found
    return self.generic_visit(node)

  def visit_comprehension(self, node):
    """A per-member comprehension iterates `member_ops.iterate(...)`.

    That is a TensorFlow tensor's items, which Python cannot iterate
    inside a graph.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    node = self.generic_visit(node)
    if not (isinstance(node.iter, ast.Constant) and node.iter.value is None):
      node.iter = self._iterated(node.iter)   # (not the first: its scope's)
    return node

  def _iterated(self, it):
    """Iterable `it` of a comprehension, visited, as it iterates: per
    member `member_ops.iterate(it)`, and `zip(x, w)` or `enumerate(x)` of
    a member's tensors with each tensor iterated so (Python's `zip` would
    iterate the tensor itself)."""
    if not self.per_member:
      return it
    if (isinstance(it, ast.Call) and it.args and not any(
        isinstance(a, ast.Starred) for a in it.args) and
        self._zip_or_enumerate(it.func)):
      count = len(it.args) if self.static_value(it.func) is zip else 1
      it.args = [self._ops('iterate', [a], a, MEMBER_OPS) if k < count
                 else a for k, a in enumerate(it.args)]
      return it
    return self._ops('iterate', [it], it, MEMBER_OPS)

  def _is_range(self, func):
    """Whether `func` is Python's `range`."""
    try:
      return self.static_value(func) is range
    except TypeError:
      return False

  def _zip_or_enumerate(self, func):
    """Whether `func` is Python's `zip` or `enumerate`."""
    try:
      return self.static_value(func) in (zip, enumerate)
    except TypeError:   # unhashable
      return False

  def visit_IfExp(self, node):
    """`a if c else b` becomes `ops.where(c, a, b)`.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    test = self.visit(node.test)
    if not self.per_member:
      # The sides as thunks: a test with one value for every member
      # (`x[:, None] if x.ndim == 1 else x`) runs only its side, as in
      # Python (`ops.choose`).
      return self._ops('choose', [test, _thunk(self.visit(node.body)),
                                  _thunk(self.visit(node.orelse))], node)
    body = self._guarded(copy.deepcopy(test), node.body)
    orelse = self._guarded(
        self._ops('logical_not', [copy.deepcopy(test)], node), node.orelse)
    # Thunks too: a test the same for every member (a shape's, a module
    # flag's) runs only Python's side (`member_ops.choose`); a member's
    # test selects per member, each side guarded by it.
    return self._ops('choose', [test, _thunk(body), _thunk(orelse)], node)

  def visit_Call(self, node):
    """`truthy(x)` becomes `x`, `divmod(a, b)` `(a // b, a % b)`.

    The quotient and remainder go through the helpers of `visit_BinOp`.
    Other calls are kept.

    Args:
      node: The AST node.

    Returns:
      Its replacement.
    """
    callee = self.static_value(node.func)
    free = getattr(callee, '__ab_free__', None) if isinstance(
        callee, types.FunctionType) else None
    if free:
      # A helper defined in the batched function: the variables of the
      # function it reads, passed as they are now (`python.nested`).
      node = ast.Call(node.func, node.args, node.keywords + [
          ast.keyword(v, ast.copy_location(ast.Name(v, ast.Load()), node))
          for v in free])
      ast.copy_location(node, node.func)
    if callee is ops_module.optional_value:
      # A read of a local that may hold None (`python.optional`): checked
      # per member, where Python reads it.
      value, flag = (self.visit(a) for a in node.args)
      if not self.per_member:
        return value
      keywords = ([ast.keyword('guard', self._guard(node))] if self._guards
                  else [])
      return self._ops('optional_value', [value, flag], node, MEMBER_OPS,
                       keywords)
    if callee is ops_module.truthy:
      if len(node.args) != 1 or node.keywords:
        self.unsupported(node, 'truthy() with other than one argument')
      return self.visit(node.args[0])
    if callee is builtins.pow and (len(node.args) == 3 or any(
        k.arg == 'mod' for k in node.keywords)):
      operands = _pow_mod_operands(node)
      if self.per_member and operands is not None:
        # A member's `pow(a, e, m)` of integers: `member_ops.pow_mod`.
        keywords = ([ast.keyword('guard', self._guard(node))]
                    if self._guards else [])
        return self._ops('pow_mod', [self.visit(x) for x in operands],
                         node, MEMBER_OPS, keywords)
      # NumPy's and TensorFlow's powers take no modulus (the error named
      # the operator's internals).
      self.unsupported(
          node, 'pow() calls with a modulus in a batch-aware function' if (
              not self.per_member) else 'pow() calls with a modulus '
          'written with * or ** arguments',
          "NumPy has no modular power: write the function per member "
          "(Context().batch(per_member=True)), where pow(a, e, m) of "
          "integers runs, or the square-and-multiply loop: r = 1; "
          "while e > 0: (if e % 2 == 1: r = r * b % m); b = b * b % m; "
          "e = e // 2 (int64 holds the products while m < 3e9).")
    if callee is builtins.pow:
      operands = _pow_operands(node)
      if operands is not None:
        # `base ** exp`, with the operator's promotion of dtypes.
        return self.visit(ast.copy_location(
            ast.BinOp(operands[0], ast.Pow(), operands[1]), node))
    if (callee is builtins.divmod and len(node.args) == 2 and
        not node.keywords and
        not any(isinstance(a, ast.Starred) for a in node.args)):
      # `(a // b, a % b)`: a TensorFlow tensor has no `divmod`.
      a, b = (self.visit(x) for x in node.args)
      return ast.copy_location(ast.Tuple(
          [self._ops('floordiv', [a, b], node),
           self._ops('mod', [copy.deepcopy(a), copy.deepcopy(b)], node)],
          ast.Load()), node)
    if self.per_member and callee in _FILTER_FOLDS:
      node, callee = _unfiltered(node, callee)
    if self.per_member and self._is_method_call(node):
      # `v.max()`: a method of a value (an array's, which a TensorFlow
      # tensor may lack: `member_ops.method`).
      node = self.generic_visit(node)
      return self._ops('method', [node.func.value,
                                  ast.Constant(node.func.attr)] + node.args,
                       node, MEMBER_OPS, node.keywords)
    if self.per_member:
      name = member_helpers.member_call(callee, node)
      if name is not None:
        node = self.generic_visit(node)
        args = member_helpers.call_arguments(name, callee, node)
        keywords = list(node.keywords)
        if name in _CHECKED_HELPERS and self._guards:
          # Python calls it, and may raise, only where the guards hold.
          keywords.append(ast.keyword('guard', self._guard(node)))
        return self._ops(name, args, node, MEMBER_OPS, keywords)
      return self.generic_visit(node)
    # Marked for the primitive's TensorFlow form (`tf_numpy`), which calls
    # NumPy's functions and array methods through `per_member.tf_numpy`.
    method = self._is_method_call(node)
    node = self.generic_visit(node)
    if method:
      node.ab_tf_numpy = 'numpy_method'
    elif member_helpers.tf_numpy_call(callee, node):
      node.ab_tf_numpy = 'numpy_call'
    return node


def _pow_operands(node):
  """`(base, exp)` of a call `pow(base, exp)` (by position or keyword),
  else None."""
  if any(isinstance(a, ast.Starred) for a in node.args) or any(
      k.arg is None for k in node.keywords):
    return None
  given = dict(zip(('base', 'exp'), node.args))
  for k in node.keywords:
    if k.arg in given or k.arg not in ('base', 'exp'):
      return None
    given[k.arg] = k.value
  if len(node.args) > 2 or set(given) != {'base', 'exp'}:
    return None
  return given['base'], given['exp']


_PROMOTED_OPERATORS = {
    ast.Add: 'add', ast.Sub: 'sub', ast.Mult: 'mul', ast.Div: 'truediv',
    ast.Pow: 'pow', ast.BitAnd: 'and_', ast.BitOr: 'or_', ast.BitXor: 'xor',
    ast.Lt: 'lt', ast.LtE: 'le', ast.Gt: 'gt', ast.GtE: 'ge', ast.Eq: 'eq',
    ast.NotEq: 'ne'}


def _bound_names(node):
  """The names a lambda or comprehension `node` binds (its parameters,
  its targets)."""
  if isinstance(node, ast.Lambda):
    a = node.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {
        x.arg for x in (a.vararg, a.kwarg) if x is not None}
  return {n.id for g in node.generators for n in ast.walk(g.target)
          if isinstance(n, ast.Name)}


class _LambdaReads(ast.NodeTransformer):
  """The reads, in a user's lambda, of the batched function's variables
  that the lambda does not bind, as the primitive's inputs
  (`PrimitiveRewriter.visit_Name`); the rest as written.  `found` (shared
  by nested scopes) holds the names so read."""

  def __init__(self, rewriter, bound, found=None):
    self.rewriter = rewriter
    self.bound = bound
    self.found = [] if found is None else found

  def visit_Name(self, node):
    if node.id in self.bound:
      return node
    new = self.rewriter.visit_Name(node)
    if new is not node:
      self.found.append(node.id)
    return new

  def _scope(self, node):
    inner = _LambdaReads(self.rewriter, self.bound | _bound_names(node),
                         self.found)
    return inner.generic_visit(node)

  visit_Lambda = _scope
  visit_ListComp = _scope
  visit_SetComp = _scope
  visit_DictComp = _scope
  visit_GeneratorExp = _scope


class _FormRewriter(ast.NodeTransformer):
  """Rewrites a copy of a rewritten primitive into another of its forms
  (`rewrite`), leaving the user's own lambdas as written."""

  def __init__(self, prefix):
    self.prefix = prefix
    self.changed = False

  def rewrite(self, body):
    """The rewritten copy of `body`, or None where nothing changed."""
    new = self.visit(copy.deepcopy(body))
    return new if self.changed else None

  def visit_Lambda(self, node):
    if node.args.args or node.args.vararg:
      return node   # a lambda of the user's, kept as written
    return self.generic_visit(node)


def _pow_mod_operands(node):
  """`(base, exp, mod)` of a `pow()` call with a modulus, written by
  position or by Python's keywords; None for `*` or `**` arguments."""
  if any(isinstance(a, ast.Starred) for a in node.args) or any(
      k.arg is None for k in node.keywords):
    return None
  given = dict(zip(('base', 'exp', 'mod'), node.args))
  for k in node.keywords:
    if k.arg in given or k.arg not in ('base', 'exp', 'mod'):
      return None   # Python's TypeError, as written
    given[k.arg] = k.value
  if len(given) != 3:
    return None
  return given['base'], given['exp'], given['mod']


class _Promoting(_FormRewriter):
  """Python's arithmetic and comparison operators as `ops.promoted`."""

  def _promoted(self, op, left, right, like):
    self.changed = True
    fn = ast.Attribute(ast.Name(self.prefix + _OPS, ast.Load()), 'promoted',
                       ast.Load())
    return ast.copy_location(ast.Call(
        fn, [ast.Constant(_PROMOTED_OPERATORS[type(op)]), left, right], []),
                             like)

  def visit_BinOp(self, node):
    node = self.generic_visit(node)
    if type(node.op) not in _PROMOTED_OPERATORS:
      return node
    return self._promoted(node.op, node.left, node.right, node)

  def visit_UnaryOp(self, node):
    node = self.generic_visit(node)
    if not isinstance(node.op, ast.USub) or isinstance(node.operand,
                                                       ast.Constant):
      return node
    # `-v` of unsigned integers: `ops.negative` (TensorFlow has no
    # unsigned negation).
    self.changed = True
    fn = ast.Attribute(ast.Name(self.prefix + _OPS, ast.Load()), 'negative',
                       ast.Load())
    return ast.copy_location(ast.Call(fn, [node.operand], []), node)

  def visit_Compare(self, node):
    node = self.generic_visit(node)
    if len(node.ops) != 1 or type(node.ops[0]) not in _PROMOTED_OPERATORS:
      return node
    return self._promoted(node.ops[0], node.left, node.comparators[0], node)


# What an expression of a primitive is for one member (`_Weak`): an array
# or NumPy scalar, a Python number written in it (or computed from such
# numbers alone), or a Python number that each member computes.
_STRONG, _WRITTEN, _NUMBER = 0, 1, 2
# The operators, and the helpers `PrimitiveRewriter` makes of operators,
# that take a Python number as NumPy 2 takes it (`ops.weak_operator`).
_WEAK_OPERATORS = {
    ast.Add: 'add', ast.Sub: 'sub', ast.Mult: 'mul', ast.Div: 'truediv',
    ast.Pow: 'pow', ast.BitAnd: 'and_', ast.BitOr: 'or_', ast.BitXor: 'xor'}
_WEAK_HELPER_OPERATORS = {'mod': 'mod', 'floordiv': 'floordiv',
                          'lshift': 'lshift', 'rshift': 'rshift',
                          'power': 'power'}
# Per member, the helpers whose value is a Python number whatever their
# arguments (`math.exp(x)`, `float(x)`, `int(x)`; `round(x)` of one
# argument), and those whose value is one where all their arguments are.
_NUMBER_HELPERS = frozenset(('math_fn', 'float', 'int'))
_NUMBER_WHERE_ALL = frozenset(('min', 'max', 'abs', 'round'))


class _Weak(_FormRewriter):
  """An operator of an array and a Python number that each member
  computes (a weak value: an array at run time) as `weak_operator`;
  `kind(node)` says what an expression of the result is (`_STRONG` ...).

  The numbers a member computes are the weak inputs (their positions
  `weak_inputs`) and what Python's operators, `a if c else b`, and, per
  member, `math`'s functions, `float`, `int`, `round`, `min`, `max` and
  `abs` make of them or of numbers written in the primitive.  An operand
  that is a weak input itself is left as it is: the primitive's `casts`
  cast it (`PrimOp.casts`), and a number written in the primitive is one
  as it runs.
  """

  def __init__(self, prefix, weak_inputs, per_member, where):
    super().__init__(prefix)
    self.weak_inputs = frozenset(weak_inputs)
    self.per_member = per_member
    self.where = where
    self.kinds = {}

  def kind(self, node):
    """`_STRONG`, `_WRITTEN` or `_NUMBER` for expression `node` of the
    rewritten copy."""
    return self.kinds.get(id(node), _STRONG)

  def visit(self, node):
    new = super().visit(node)
    if isinstance(new, ast.expr) and id(new) not in self.kinds:
      self.kinds[id(new)] = self._kind_of(new)
    return new

  def _joined(self, nodes):
    kinds = [self.kind(n) for n in nodes]
    return _STRONG if _STRONG in kinds or not kinds else max(kinds)

  def _helper(self, node):
    for module in (MEMBER_OPS, _OPS):
      name = helper_name(node, self.prefix, module)
      if name is not None:
        return module, name
    return None, None

  def _kind_of(self, node):
    if isinstance(node, ast.Constant):
      return (_WRITTEN if type(node.value) in (bool, int, float, complex)
              else _STRONG)
    position = input_position(node, self.prefix)
    if position is not None:
      return _NUMBER if position in self.weak_inputs else _STRONG
    if isinstance(node, ast.UnaryOp) and isinstance(
        node.op, (ast.USub, ast.UAdd, ast.Invert)):
      return self.kind(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _WEAK_OPERATORS:
      return self._joined([node.left, node.right])
    if isinstance(node, ast.Compare):
      return self._joined([node.left] + node.comparators)
    if not isinstance(node, ast.Call):
      return _STRONG
    module, name = self._helper(node)
    if name == 'choose' and len(node.args) == 3 and all(
        isinstance(t, ast.Lambda) for t in node.args[1:]):
      # A member's condition: the side it takes, one number per member.
      return _NUMBER if self._joined(
          [t.body for t in node.args[1:]]) != _STRONG else _STRONG
    if name in _WEAK_HELPER_OPERATORS and len(node.args) == 2:
      return self._joined(node.args)
    if not self.per_member or module != MEMBER_OPS:
      return _STRONG
    if name in _NUMBER_HELPERS or (name == 'round' and len(node.args) == 1
                                   and all(k.arg == 'guard'
                                           for k in node.keywords)):
      return _NUMBER
    if name in _NUMBER_WHERE_ALL:
      return self._joined(node.args)
    return _STRONG

  def _weak_side(self, left, right):
    """0 or 1: the operand that is a member's computed Python number where
    the other is an array; else None."""
    kinds = (self.kind(left), self.kind(right))
    for side in (0, 1):
      node = (left, right)[side]
      if (kinds[side] == _NUMBER and kinds[1 - side] == _STRONG and
          input_position(node, self.prefix) is None):
        return side
    return None

  def _weak_call(self, name, left, right, side, like):
    self.changed = True
    module = MEMBER_OPS if self.per_member else _OPS
    fn = ast.Attribute(ast.Name(self.prefix + module, ast.Load()),
                       'weak_operator', ast.Load())
    args = [ast.Constant(name), left, right, ast.Constant(side)]
    if not self.per_member:
      args.append(ast.Constant(self.where))
    new = ast.copy_location(ast.Call(fn, args, []), like)
    self.kinds[id(new)] = _STRONG
    return new

  def visit_BinOp(self, node):
    node = self.generic_visit(node)
    name = _WEAK_OPERATORS.get(type(node.op))
    side = None if name is None else self._weak_side(node.left, node.right)
    if side is None:
      return node
    return self._weak_call(name, node.left, node.right, side, node)

  def visit_Call(self, node):
    node = self.generic_visit(node)
    _, name = self._helper(node)
    if name not in _WEAK_HELPER_OPERATORS or len(node.args) != 2 or (
        node.keywords):
      return node
    side = self._weak_side(*node.args)
    if side is None:
      return node
    return self._weak_call(_WEAK_HELPER_OPERATORS[name], *node.args, side,
                           node)


def weak_operands(body, prefix, weak_inputs, per_member, where=''):
  """`body` reading the Python numbers each member computes as NumPy 2.

  Per member, `300 if d else 0`, `math.exp(-z)` and `k * 2` of a Python
  number `k` are Python numbers, which take the dtype of the array they
  meet in an operator (NEP 50): `s + (300 if d else 0)` of an int8 `s`
  raises OverflowError, `z * math.exp(-z)` of a float32 `z` is float32.
  Batched they are arrays (int64, float64): such an operator becomes
  `ops.weak_operator` (per member `member_ops.weak_operator`), which
  casts the number to that dtype first (`_Weak`).

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.
    weak_inputs: The positions of the inputs that hold Python numbers
      (weak variables).
    per_member: Whether `body` is a per-member primitive's.
    where: The primitive's text and place, for the message of a check
      that a staged graph runs (batch-aware: `ops.weak_operator`).

  Returns:
    `(new, numbers)`: the new expression, or None where no operator
    changed; and which of the values are Python numbers each member
    computes (per member also those written in a tuple display: `lo, hi
    = 0.0, c`), True or False for the value, a tuple of those for a
    tuple display.
  """
  rewriter = _Weak(prefix, weak_inputs, per_member, where)
  new = rewriter.visit(copy.deepcopy(body))

  def numbers(node):
    if isinstance(node, ast.Tuple):
      return tuple(numbers(e) for e in node.elts)
    kind = rewriter.kind(node)
    # Per member a number written in a tuple display (`lo, hi = 0.0, c`,
    # `return n, 1`) is a Python number too, which the batched primitive
    # gives as an array.
    return kind == _NUMBER or (per_member and kind == _WRITTEN)
  return (new if rewriter.changed else None), numbers(new)


class _TfNumpy(_FormRewriter):
  """The calls `PrimitiveRewriter` marked (`ab_tf_numpy`) as calls of
  `per_member.tf_numpy`'s `numpy_call` and `numpy_method` (bound to
  `<prefix>` + `TF_NUMPY_OPS`), `a @ b` as its `matmul`, and items of a
  constant read at the function's values as its `table_item`."""

  def visit_BinOp(self, node):
    node = self.generic_visit(node)
    if not isinstance(node.op, ast.MatMult):
      return node
    self.changed = True
    return member_helpers.matmul_call(self.prefix + TF_NUMPY_OPS, node)

  def visit_Attribute(self, node):
    node = self.generic_visit(node)
    if getattr(node, 'ab_tf_numpy', None) != 'attribute':
      return node
    # `x.mT`, `x.real`: `tf_numpy.attribute` (a tensor lacks them).
    self.changed = True
    fn = ast.Attribute(ast.Name(self.prefix + TF_NUMPY_OPS, ast.Load()),
                       'attribute', ast.Load())
    return ast.copy_location(ast.Call(
        fn, [node.value, ast.Constant(node.attr)], []), node)

  def visit_Subscript(self, node):
    node = self.generic_visit(node)
    value = node.value
    if (isinstance(node.ctx, ast.Load) and any(
        input_position(n, self.prefix) is not None
        for n in ast.walk(value)) and not any(
            input_position(n, self.prefix) is not None
            for n in ast.walk(node.slice)) and any(
                isinstance(n, (ast.Name, ast.Attribute, ast.List))
                for n in ast.walk(node.slice))):
      # `x[:, ORDER]` at the user's constant array (or list):
      # `tf_numpy.getitem`, NumPy's advanced indexing (TensorFlow's
      # refuses an array, and reads a list as a tuple).
      return self._keyed('getitem', node)
    if not (isinstance(node.ctx, ast.Load) and not any(
        input_position(n, self.prefix) is not None or
        (isinstance(n, ast.Name) and n.id == self.prefix + _OPS)
        for n in ast.walk(value)) and any(
            input_position(n, self.prefix) is not None
            for n in ast.walk(node.slice))):
      return node
    # `TABLE[i]` of the user's constant array (a global, a closure's,
    # `np.array([1, 2, 5])` written in place) at a batch of indices:
    # `tf_numpy.table_item`, a gather (NumPy cannot take the symbolic
    # indices).
    return self._keyed('table_item', node)

  def _keyed(self, name, node):
    """`tf_numpy.<name>(value, ops.key[index])` for subscript `node`."""
    self.changed = True
    key = ast.Subscript(ast.Attribute(ast.Name(self.prefix + _OPS,
                                               ast.Load()), 'key',
                                      ast.Load()), node.slice, ast.Load())
    fn = ast.Attribute(ast.Name(self.prefix + TF_NUMPY_OPS, ast.Load()),
                       name, ast.Load())
    return ast.copy_location(ast.Call(fn, [node.value, key], []), node)

  def visit_Call(self, node):
    node = self.generic_visit(node)
    how = getattr(node, 'ab_tf_numpy', None)
    if how is None:
      return node
    self.changed = True
    if how == 'numpy_method':
      args = [node.func.value, ast.Constant(node.func.attr)] + node.args
    else:
      args = [node.func] + node.args
    fn = ast.Attribute(ast.Name(self.prefix + TF_NUMPY_OPS, ast.Load()),
                       how, ast.Load())
    return ast.copy_location(ast.Call(fn, args, node.keywords), node)


def tf_numpy(body, prefix):
  """A batch-aware primitive's form on TensorFlow.

  `body` with NumPy's functions (those TensorFlow's NumPy API or
  `tf.linalg` has), a user's helpers and array methods called through
  `per_member.tf_numpy`: TensorFlow's symbolic tensors reach no NumPy
  function.  Its code reads that module as `<prefix>` + `TF_NUMPY_OPS`.

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.

  Returns:
    The new expression, or None where it calls none of them.
  """
  return _TfNumpy(prefix).rewrite(body)


def promotable(body):
  """Whether `body` has an operator that `promoting` rewrites.

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.

  Returns:
    True or False.
  """
  return any((isinstance(n, ast.BinOp) and type(n.op) in _PROMOTED_OPERATORS)
             or (isinstance(n, ast.Compare) and len(n.ops) == 1 and
                 type(n.ops[0]) in _PROMOTED_OPERATORS)
             or (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub)
                 and not isinstance(n.operand, ast.Constant))
             for n in ast.walk(body))


def promoting(body, prefix):
  """`body` with its operators promoting TensorFlow's operands as NumPy's.

  `body` is a rewritten primitive; its arithmetic and comparison
  operators become `ops.promoted`: the form a primitive takes on
  TensorFlow where its own fails for mixed dtypes
  (`passes.type_inference`).

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.

  Returns:
    The new expression, or None where it has no such operator.
  """
  return _Promoting(prefix).rewrite(body)


# Python's builtins whose generator argument's `if` a per-member
# primitive folds into its items (`_unfiltered`).
_FILTER_FOLDS = (builtins.sum, builtins.len, builtins.any, builtins.all)


def _unfiltered(node, callee):
  """`sum(e for x in v if c)` as `sum((e if c else 0) for x in v)`, and
  `len([e for x in v if c])`, `any(...)`, `all(...)` likewise: a
  member's `c` decides item by item, where Python's `if` in the
  generator needs one bool (the items the filter drops count as 0,
  False or True).  Returns `(node, callee)`: the call and the builtin it
  calls (`sum` for `len`); `node` and `callee` as they are where there is
  no such filter."""
  if not (len(node.args) == 1 and not node.keywords and
          isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp)) and
          len(node.args[0].generators) == 1 and
          node.args[0].generators[0].ifs and
          not node.args[0].generators[0].is_async):
    return node, callee
  comp = copy.deepcopy(node.args[0])
  ifs = comp.generators[0].ifs
  cond = ifs[0] if len(ifs) == 1 else ast.BoolOp(ast.And(), ifs)
  comp.generators[0].ifs = []
  elt = comp.elt
  if callee is builtins.sum:
    comp.elt = ast.IfExp(cond, elt, ast.Constant(0))
  elif callee is builtins.len:
    comp.elt = ast.IfExp(cond, ast.Constant(1), ast.Constant(0))
  elif callee is builtins.any:
    comp.elt = ast.BoolOp(ast.And(), [cond, elt])
  else:
    comp.elt = ast.BoolOp(ast.Or(), [ast.UnaryOp(ast.Not(), cond), elt])
  func = node.func
  if callee is builtins.len:
    func = ast.Attribute(ast.Name('builtins', ast.Load()), 'sum', ast.Load())
    callee = builtins.sum
  new = ast.Call(func, [comp], [])
  ast.copy_location(new, node)
  for n in ast.walk(new):
    if 'lineno' in n._attributes and getattr(n, 'lineno', None) is None:  # pylint: disable=protected-access
      ast.copy_location(n, node)
  return new, callee


def _thunk(node):
  """`lambda: node`."""
  arguments = ast.arguments(posonlyargs=[], args=[], vararg=None,
                            kwonlyargs=[], kw_defaults=[], kwarg=None,
                            defaults=[])
  return ast.copy_location(ast.Lambda(args=arguments, body=node), node)


# The nodes of an expression that computes member by member, element by
# element: on one member's scalars it is the same code as on the batch's
# vectors (`is_elementwise`).
_ELEMENTWISE_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare,
                      ast.Name, ast.Load, ast.Constant, ast.operator,
                      ast.unaryop, ast.cmpop, ast.Attribute, ast.Call,
                      ast.Lambda, ast.arguments)
# The helpers that do: elementwise where every argument is (the sides of
# `choose` and the operands of `all_of`, `any_of` are thunks of
# elementwise expressions).
_ELEMENTWISE_HELPERS = {(MEMBER_OPS, n) for n in (
    'min', 'max', 'abs', 'where', 'choose', 'logical_and', 'logical_or',
    'logical_not', 'all_of', 'any_of', 'weak_operator')} | {
        (_OPS, n) for n in _OPERATOR_HELPERS.values()}


def is_elementwise(body, prefix, static_value):
  """Whether rewritten primitive `body` computes element by element.

  True where it is built of Python's operators, comparisons, names,
  constants and the elementwise helpers only (`n - 1`, `a if c else b`,
  `min(x, y)` with two or more arguments): on members whose values are
  scalars it then means the same on the batch's vectors, and a
  per-member primitive may run it on them as it is.

  Args:
    body: The expression, as `PrimitiveRewriter` rewrote it.
    prefix: The prefix of generated names.
    static_value: AST node -> the object a name of the user's refers to
      (as for `PrimitiveRewriter`); other names than the inputs must be
      Python numbers (an array would broadcast against the batch).

  Returns:
    True or False.
  """
  for n in ast.walk(body):
    if not isinstance(n, _ELEMENTWISE_NODES):
      return False
    if isinstance(n, ast.Lambda) and (n.args.args or n.args.vararg):
      return False   # only `choose`'s thunks, which take nothing
    if isinstance(n, ast.Name) and not n.id.startswith(prefix) and (
        type(static_value(n)) not in (int, float, bool)):
      return False
    if isinstance(n, ast.Attribute) and not (
        isinstance(n.value, ast.Name) and n.value.id.startswith(prefix)):
      return False
    if isinstance(n, ast.Call):
      f = n.func
      if n.keywords or not (
          isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
          and (f.value.id[len(prefix):], f.attr) in _ELEMENTWISE_HELPERS):
        return False
      if f.attr in ('min', 'max') and len(n.args) < 2:
        return False
  return True


def _is_member_key(node, prefix):
  """Whether subscript `node` is a `member_key` (the frontend's)."""
  v = node.value
  return (isinstance(v, ast.Attribute) and v.attr == 'key' and
          isinstance(v.value, ast.Name) and v.value.id == prefix + MEMBER_OPS)


def member_key(prefix, index, like):
  """`<prefix>pm.key[index]`: a subscript's index as a value (slices and
  all), for `member_ops.getitem` and `setitem`.

  Args:
    prefix: The prefix of generated names.
    index: The subscript's index (an AST node, possibly a slice).
    like: The node whose location it takes.

  Returns:
    The AST expression.
  """
  holder = ast.Attribute(ast.Name(prefix + MEMBER_OPS, ast.Load()), 'key',
                         ast.Load())
  return ast.copy_location(ast.Subscript(holder, index, ast.Load()), like)


def batch_key(prefix, index, like):
  """`<prefix>ops.key[index]`, for `ops.batch_setitem`.

  A batch-aware subscript's index as a value (slices and all).

  Args:
    prefix: The prefix of generated names.
    index: The subscript's index (an AST node, possibly a slice).
    like: The node whose location it takes.

  Returns:
    The AST expression.
  """
  holder = ast.Attribute(ast.Name(prefix + _OPS, ast.Load()), 'key',
                         ast.Load())
  return ast.copy_location(ast.Subscript(holder, index, ast.Load()), like)


def input_position(node, prefix):
  """The position of the input that `node` names, or None.

  Args:
    node: An AST node of a rewritten primitive's expression.
    prefix: The `PrimitiveRewriter`'s prefix of generated names.

  Returns:
    `i` where `node` is the input `<prefix>v<i>`, else None.
  """
  if isinstance(node, ast.Name) and node.id.startswith(prefix + 'v'):
    return int(node.id[len(prefix) + 1:])
  return None


def helper_name(node, prefix, module):
  """The name of the helper of `module` that call `node` calls, or None.

  Args:
    node: An `ast.Call` of a rewritten primitive's expression.
    prefix: The `PrimitiveRewriter`'s prefix of generated names.
    module: The helpers' module as the generated code names it, after the
      prefix (`MEMBER_OPS`, `'ops'`).

  Returns:
    `name` where `node` calls `<prefix><module>.<name>`, else None.
  """
  f = node.func
  if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
      and f.value.id == prefix + module):
    return f.attr
  return None


def make_function(body, arity, loc, text, closure, fn_globals, name,
                  prefix='__ab_', helpers=None):
  """Builds `lambda <prefix>v0, ...: body` with the user's globals/closure.

  Where `body` calls functions of the user's or a library's, it is a
  `def` instead, which turns an AssertionError raised in the callee into
  `errors.HelperAssertionError` (see `_helper_assertion`): inference
  and the VM then report the assertion, not a missing result.

  Args:
    body: The expression (an AST), reading its inputs as `<prefix>v<i>`.
    arity: The number of inputs.
    loc: The `SourceLoc` of the expression: the function's code object
      carries its file and line.
    text: The expression's text, for the assertion's message, or None.
    closure: The user's function's closure cells, by name.
    fn_globals: The user's function's globals.
    name: The user's function's name (the primitive is `<name>_line<l>`).
    prefix: The prefix of the names it binds (`generated_prefix`), the
      `PrimitiveRewriter`'s.
    helpers: More objects that `body` reads, by name after the prefix.

  Returns:
    The primitive, a Python function of `arity` batched arguments.
  """
  ops_name, assert_name = prefix + _OPS, prefix + _ASSERT
  error, prim = prefix + 'e', prefix + 'prim'
  args = [ast.arg(f'{prefix}v{i}') for i in range(arity)]
  arguments = ast.arguments(posonlyargs=[], args=args, vararg=None,
                            kwonlyargs=[], kw_defaults=[], kwarg=None,
                            defaults=[])
  if _calls_outside_ops(body, ops_name):
    handler = ast.ExceptHandler(
        type=ast.Name('AssertionError', ast.Load()), name=error,
        body=[ast.Raise(
            exc=ast.Call(ast.Name(assert_name, ast.Load()),
                         [ast.Name(error, ast.Load()),
                          ast.Constant(text or expression_text(body))], []),
            cause=ast.Name(error, ast.Load()))])
    made = ast.FunctionDef(
        name=prim, args=arguments,
        body=[ast.Try(body=[ast.Return(body)], handlers=[handler],
                      orelse=[], finalbody=[])],
        decorator_list=[], returns=None, type_comment=None,
        type_params=[])
    result = ast.Name(prim, ast.Load())
  else:
    made = None
    result = ast.Lambda(args=arguments, body=body)
  helpers = {prefix + k: v for k, v in (helpers or {}).items()}
  free = sorted(set(closure) | {ops_name, assert_name} | set(helpers))
  lam_code = closure_code([made] if made is not None else [], result, free,
                          loc.filename, prefix + 'make', line=loc.line)
  cells = []
  for name in lam_code.co_freevars:
    if name == ops_name:
      cells.append(types.CellType(ops_module))
    elif name == assert_name:
      cells.append(types.CellType(_helper_assertion))
    elif name in helpers:
      cells.append(types.CellType(helpers[name]))
    else:
      cells.append(closure[name])
  fn = types.FunctionType(lam_code, fn_globals, f'{name}_line{loc.line}',
                          None, tuple(cells))
  return fn


def closure_code(definitions, result, free, filename, maker, line=None,
                 prelude=()):
  """The code of a function made inside another, whose names are cells.

  Args:
    definitions: Statements before the result (a `def` it names).
    result: An expression: a lambda, or the name of a `def` among
      `definitions`.
    free: The names of the enclosing function's parameters: read in
      `result`, they are its free variables (a closure's cells).
    filename: The file the code says it is from.
    maker: The enclosing function's name (the code's qualified name
      starts with it).
    line: Where given, the line of every node; else the nodes' own.
    prelude: Statements of the module before the enclosing function.

  Returns:
    The code object of `result` (the first one the enclosing function
    holds).
  """
  outer = ast.FunctionDef(
      name=maker,
      args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in free],
                         vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[]),
      body=list(definitions) + [ast.Return(result)],
      decorator_list=[], returns=None, type_comment=None, type_params=[])
  module = ast.Module(body=list(prelude) + [outer], type_ignores=[])
  ast.fix_missing_locations(module)
  if line is not None:
    _set_lines(module, line)
  code = compile(module, filename, 'exec')
  outer_code = [c for c in code.co_consts if isinstance(c, types.CodeType)][-1]
  return next(c for c in outer_code.co_consts
              if isinstance(c, types.CodeType))


class _Key:
  """`key[index]` is `index`: a subscript's index as a value, slices and
  all (`key[:, j]` is `(slice(None), j)`)."""

  def __getitem__(self, index):
    return index


_KEY = _Key()


def subscript_parts(rewriter, arity, loc, closure, fn_globals, name):
  """What `member_indexing` checks of each subscript `rewriter` noted.

  For each (`x[:, j]`): `(text, parts, index_inputs, value_text,
  element_texts)`, where `parts(*inputs)` is the pair `(x, (slice(None), j))` of the
  primitive's inputs (the value subscripted, and the index as Python
  gives it to `__getitem__`) and `index_inputs` the positions of the
  inputs the index reads (the texts as `PrimitiveRewriter.subscripts`).

  Args:
    rewriter: The `PrimitiveRewriter` that rewrote the primitive.
    arity: The primitive's number of inputs.
    loc, closure, fn_globals, name: As for `make_function`.

  Returns:
    The list of triples.
  """
  out = []
  for text, node, index, value_text, element_texts in rewriter.subscripts:
    key = ast.Subscript(ast.Name(rewriter.prefix + 'key', ast.Load()),
                        node.slice, ast.Load())
    body = ast.Tuple([node.value, key], ast.Load())
    parts = make_function(body, arity, loc, text, closure, fn_globals, name,
                          rewriter.prefix, helpers={'key': _KEY})
    out.append((text, parts, tuple(index), value_text, element_texts))
  return out


def expression_text(node):
  """The source text of `node`, shortened to 60 characters.

  Args:
    node: An AST expression.

  Returns:
    Its text, as a primitive prints.
  """
  return shorten(optional.unparse(node))


def shorten(text):
  """`text`, cut to 60 characters with `...` if longer.

  Args:
    text: A string.

  Returns:
    `text`, or its first 57 characters and `...`.
  """
  return text if len(text) <= 60 else text[:57] + '...'


def _calls_outside_ops(node, ops_name):
  """Whether expression `node` calls anything but `autobatch_vm.ops`
  (bound to `ops_name`)."""
  for n in ast.walk(node):
    if isinstance(n, ast.Call):
      f = n.func
      if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
              and f.value.id == ops_name):
        return True
  return False


def _helper_assertion(error, text):
  """`errors.HelperAssertionError` for AssertionError `error`, raised in a
  function that primitive `text` calls: names that function, its file and
  the line of the assert."""
  tb = error.__traceback__
  while tb.tb_next is not None:
    tb = tb.tb_next
  code = tb.tb_frame.f_code
  line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
  where = f'{code.co_name}() ({code.co_filename}, line {tb.tb_lineno}'
  where += f': {line})' if line else ')'
  detail = f': {error}' if str(error) else ''
  return errors.HelperAssertionError(
      f'an assert in {where}, called by `{text}`, failed{detail}')


def _set_lines(tree, line):
  for n in ast.walk(tree):
    if 'lineno' in n._attributes:
      n.lineno = line
      n.end_lineno = line
      n.col_offset = 0
      n.end_col_offset = 0


def split_compare(node):
  """`a < b < c` -> `a < b and b < c` (as a BoolOp).

  Args:
    node: An `ast.Compare` of several comparisons.

  Returns:
    The `ast.BoolOp` of one comparison per operator.
  """
  parts = []
  left = node.left
  for op, right in zip(node.ops, node.comparators):
    parts.append(ast.copy_location(
        ast.Compare(left=left, ops=[op], comparators=[right]), node))
    left = right
  return ast.copy_location(ast.BoolOp(op=ast.And(), values=parts), node)
