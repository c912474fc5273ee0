"""A generator of random programs in the supported subset, for fuzzing.

`program_strategy()` is a hypothesis strategy of Python source text: 1-3
functions `f0..fk` over int state `a, b, c` and float state `x`, with
arithmetic (`+ - * % //`, conditional expressions, min/max, int -> float
conversion), calls of a sync-point primitive (`heavy`), `if/elif/else`,
`while` loops with bounded trip counts, `break` and `continue`,
`for ... in range(...)`, recursion on a decreasing depth argument `d`,
calls to earlier functions (also pairs of independent calls of one
function, which stackless mode runs together), and tuple returns.
Values stay small (`% 997`), so plain Python ints and NumPy/TF int32 and
int64 agree exactly; float operations are the same IEEE operations in
every backend.

`program_strategy(portable=True)` generates only what runs on NumPy arrays
*and* TensorFlow tensors (eagerly, in `tf.function` and under XLA): Python
operators and comparisons, `x if c else y` (which the compiler turns into
`ab.ops.where`), `%` and `//` (`ab.ops.mod` / `ab.ops.floordiv`) and the
generated `to_float` helper.  Without it, min/max may also be
`np.minimum`/`np.maximum`, which do not stage in TensorFlow.

The same text is loaded twice: once plain (the per-member reference) and
once with every function decorated by one `ab.Context().batch()`.
"""

import importlib.util
import os
import re
import tempfile
import textwrap

from hypothesis import strategies as st

import autobatch_vm as ab

INT_VARS = ('a', 'b', 'c')
MAX_FUNCTIONS = 3


# Defined at the top of every generated program: int -> float64 for Python
# ints (the reference), NumPy arrays and TF tensors alike (TensorFlow does
# not promote `int * float` by itself), and `heavy`, a primitive marked
# `ab.sync_point`, so that the passes' rules for sync blocks (numbered
# last, merged only with one way in, copied as leaves) meet random
# control flow.
TO_FLOAT = """\
def to_float(v):
    tf = sys.modules.get('tensorflow')
    if tf is not None and tf.is_tensor(v):
        return tf.cast(v, tf.float64)
    if isinstance(v, np.ndarray):
        return v.astype(np.float64)
    return float(v)


def _heavy(v):
    return (v * 7 + 3) % 997


heavy = ab.sync_point(_heavy)
"""


def _has_var(text):
  return re.search(r'\b[abc]\b', text) is not None


@st.composite
def int_expr(draw, depth=0, portable=False):
  """An int expression over a, b, c (and literals), in [-996, 996]."""
  if depth > 2 or draw(st.integers(0, 3)) == 0:
    if draw(st.booleans()):
      return draw(st.sampled_from(INT_VARS))
    return str(draw(st.integers(-9, 9)))
  op = draw(st.sampled_from(['+', '-', '*', 'min', 'max', '%', '//', '%v',
                             'ifexp']))
  left = draw(int_expr(depth + 1, portable))
  right = draw(int_expr(depth + 1, portable))
  if op in ('min', 'max', 'ifexp'):
    if not _has_var(left + right):
      return left  # a select of literals is an unbatched constant
  if op in ('min', 'max'):
    if not portable and draw(st.booleans()):
      return f'np.{"minimum" if op == "min" else "maximum"}({left}, {right})'
    cmp = '<' if op == 'min' else '>'
    return f'({left} if {left} {cmp} {right} else {right})'
  if op == 'ifexp':
    cmp = draw(st.sampled_from(['<', '>', '<=', '>=', '==', '!=']))
    var = draw(st.sampled_from(INT_VARS))
    return (f'({left} if {var} {cmp} {draw(st.integers(-5, 50))} '
            f'else {right})')
  if op == '%':
    return f'({left}) % {draw(st.integers(2, 7))}'
  if op == '//':
    return f'({left}) // {draw(st.integers(2, 7))}'
  if op == '%v':
    # A per-member divisor in [1, 7] (in every lane, active or not).
    if not _has_var(right):
      return f'({left}) % {draw(st.integers(2, 7))}'
    return f'({left}) % (({right}) % 7 + 1)'
  return f'({left} {op} {right}) % 997'


@st.composite
def float_expr(draw):
  """A float expression in [0, 50), over x and (converted) a, b, c.

  Rounded the same way by Python, NumPy, TF graphs and XLA: TensorFlow's
  graph optimizer reassociates constants (`(x - 1.25) + 0.5` becomes
  `x + -0.75`, `x * x * 0.01` is regrouped) and XLA fuses multiply-adds,
  which changes the last bit, and iterated `x + x * x * k` amplifies that
  (see test_tf_float_rounding_differs_only_by_reassociation in
  tests/test_fuzz.py).  So constants that multiply are powers of two or
  small ints (exact products) and no two constants meet in one sum.
  """
  a = draw(st.sampled_from(['x', 'x * 0.5', 'x - 1.25',
                            'to_float(a % 5) * 0.75',
                            '(x * 0.25 if a % 3 == 0 else x + 1.5)']))
  b = draw(st.sampled_from(['x', '0.5', 'to_float(b) * 0.125',
                            'x * x * 0.0078125', 'to_float(b % 3) * 0.5',
                            '(x if x < 10.5 else to_float(c % 9))']))
  if a == 'x - 1.25' and b == '0.5':
    b = 'x'
  return f'({a} + {b}) % 50.0'


@st.composite
def condition(draw, portable=False):
  kind = draw(st.integers(0, 4))
  cmp = draw(st.sampled_from(['<', '>', '<=', '>=', '==', '!=']))
  left = draw(int_expr(1, portable))
  right = draw(int_expr(1, portable))
  base = f'{left} {cmp} {right}'
  if kind == 0:
    return f'{base} and {draw(st.sampled_from(INT_VARS))} % 2 == 0'
  if kind == 1:
    return f'{base} or x > {draw(st.integers(0, 40))}.5'
  if kind == 2:
    return f'not ({base})'
  if kind == 3:
    return f'0 <= {left} < {draw(st.integers(1, 500))}'
  return base


class _Gen:
  """Generates statement lists; tracks loop nesting and callable functions."""

  def __init__(self, draw, index, n_functions, portable):
    self.draw = draw
    self.index = index
    self.n_functions = n_functions
    self.portable = portable

  def int_expr(self, depth=0):
    return self.draw(int_expr(depth, self.portable))

  def condition(self):
    return self.draw(condition(self.portable))

  def call(self, target=None):
    """A call of an earlier function, or of ourselves with d - 1."""
    if target is None:
      choices = list(range(self.index))
      target = self.draw(st.sampled_from(choices + [self.index]))
    # An argument with no variable in it would give the parameter a
    # literal's type (int64) where the inputs may be int32: a function
    # whose results then meet the inputs' dtype fails type inference, as
    # documented ("one signature per function").  Tie it to a variable.
    args = ', '.join(e if _has_var(e) else f'(({e}) + a - a) % 997'
                     for e in (self.int_expr(1) for _ in range(2)))
    fx = self.draw(float_expr())
    if target == self.index:
      return f'f{target}({args}, {fx}, d - 1)', True
    return f'f{target}({args}, {fx}, d)', False

  def pair(self):
    """Two calls of one function, the second not reading the first's
    results (stackless mode runs them as one call), then combined."""
    target = self.draw(st.sampled_from(list(range(self.index + 1))))
    first, recursive = self.call(target)
    second, _ = self.call(target)
    var = self.draw(st.sampled_from(INT_VARS))
    body = [f'g0, y0 = {first}', f'g1, y1 = {second}',
            f'{var} = (g0 + g1) % 997', 'x = y0 if g0 % 2 == 0 else y1']
    return ['if d > 0:'] + _indent(body) if recursive else body

  def statements(self, depth, in_loop):
    n = self.draw(st.integers(1, 3 if depth < 2 else 2))
    lines = []
    for _ in range(n):
      lines.extend(self.statement(depth, in_loop))
    return lines

  def statement(self, depth, in_loop):
    draw = self.draw
    kinds = ['assign', 'assign', 'float', 'aug', 'heavy']
    if depth < 2:
      kinds += ['if', 'while', 'for', 'call', 'pair']
    if in_loop:
      kinds += ['break', 'continue']
    kind = draw(st.sampled_from(kinds))
    if kind == 'assign':
      return [f'{draw(st.sampled_from(INT_VARS))} = {self.int_expr()}']
    if kind == 'float':
      return [f'x = {draw(float_expr())}']
    if kind == 'heavy':
      var = draw(st.sampled_from(INT_VARS))
      return [f'{var} = heavy({var})']
    if kind == 'aug':
      var = draw(st.sampled_from(INT_VARS))
      return [f'{var} += {draw(st.integers(1, 5))}', f'{var} = {var} % 997']
    if kind == 'break':
      return [f'if {self.condition()}:', '    break']
    if kind == 'continue':
      return [f'if {self.condition()}:', '    continue']
    if kind == 'call':
      call, recursive = self.call()
      lhs = draw(st.sampled_from(['a, x', 'b, x', 'c, x']))
      body = [f'{lhs} = {call}', f'{lhs.split(",")[0]} = '
              f'{lhs.split(",")[0]} % 997']
      if recursive:
        return ['if d > 0:'] + _indent(body)
      return body
    if kind == 'pair':
      return self.pair()
    if kind == 'if':
      lines = [f'if {self.condition()}:']
      lines += _indent(self.statements(depth + 1, in_loop))
      if draw(st.booleans()):
        lines += [f'elif {self.condition()}:']
        lines += _indent(self.statements(depth + 1, in_loop))
      if draw(st.booleans()):
        lines += ['else:'] + _indent(self.statements(depth + 1, in_loop))
      if draw(st.integers(0, 3)) == 0:
        lines += [f'if {self.condition()}:',
                  f'    return {self.int_expr()}, x']
      return lines
    if kind == 'while':
      t = f't{depth}'
      limit = draw(st.integers(0, 6))
      body = [f'{t} += 1'] + self.statements(depth + 1, True)
      return [f'{t} = 0', f'while {t} < {limit} and ({self.condition()}):'] + \
          _indent(body)
    if kind == 'for':
      var = f'i{depth}'
      stop = draw(st.sampled_from(['a % 5', 'b % 4', '3', 'c % 6']))
      body = [f'c = (c + {var}) % 997'] + self.statements(depth + 1, True)
      return [f'for {var} in range(ab.truthy({stop})):'] + _indent(body)
    raise AssertionError(kind)


def _indent(lines):
  return ['    ' + l for l in lines]


@st.composite
def program_strategy(draw, portable=False):
  """Source text of a random program; the last function is main.

  portable=True: only operations that also stage in TensorFlow.
  """
  n = draw(st.integers(1, MAX_FUNCTIONS))
  parts = ['import sys', 'import numpy as np', 'import autobatch_vm as ab',
           '', TO_FLOAT]
  for i in range(n):
    gen = _Gen(draw, i, n, portable)
    body = ['c = (a + b) % 997'] + gen.statements(0, False)
    body += [f'return {gen.int_expr()}, x']
    parts.append(f'@DECORATOR\ndef f{i}(a, b, x, d):')
    parts.extend(_indent(body))
    parts.append('')
  return '\n'.join(parts) + '\n'


def load(source, batched):
  """Imports `source` from a real file; batched=True decorates functions."""
  header = ('ctx = ab.Context()\nDECORATOR = ctx.batch()\n' if batched else
            'def DECORATOR(f):\n    return f\n')
  text = source.replace('import autobatch_vm as ab\n',
                        'import autobatch_vm as ab\n' + header, 1)
  fd, path = tempfile.mkstemp(suffix='.py', prefix='abfuzz_')
  with os.fdopen(fd, 'w') as f:
    f.write(text)
  spec = importlib.util.spec_from_file_location(
      os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.__path_to_remove__ = path
  return module


def main_name(source):
  return [l for l in source.splitlines() if l.startswith('def f')][-1][4:6]


def describe(source):
  return textwrap.indent(source, '    ')
