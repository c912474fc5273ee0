"""Hand-built IR programs shared by the interpreter, pass and VM tests.

Each `Case` holds an untyped `Program` built with `autobatch_vm.dsl`, the
types of its inputs, a plain-Python reference for ONE member, a generator of
batched inputs and the stack depth those inputs need.  Together they
exercise: double recursion (fibonacci), mutual recursion in tail position
(even/odd) and with values live across the calls (hofstadter), a loop
written with labels and gotos (collatz), a function returning a tuple
(divmod3), a variable live across two consecutive calls (fib_plus_n: pop +
push fusion), a self tail call (gcd), a call from a recursive function into
a non-recursive helper (sum_squares), helpers called once in a loop and
twice (helpers), and the structured `while_` / `if_`
without `else_` (popcount).
"""

import dataclasses
from typing import Any, Callable, Tuple

import numpy as np

from autobatch_vm import dsl
from autobatch_vm import instructions as inst

INT = inst.TensorType(np.int64, ())


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  program: inst.Program
  input_types: Tuple[Any, ...]
  reference: Callable          # one member's Python ints -> its result
  make_args: Callable          # (rng, batch) -> list of batched arrays
  max_stack_depth: int         # enough for every input make_args makes

  def member_args(self, args, i):
    """Member `i`'s inputs as Python ints."""
    return [int(np.asarray(a)[i]) for a in args]

  def expected(self, args, i):
    return self.reference(*self.member_args(args, i))

  def __repr__(self):
    return f'Case({self.name})'


def member_result(out, i):
  """Member `i` of a batched result pattern, as Python scalars."""
  return inst.pattern_map(lambda a: np.asarray(a)[i].item(), out)


def scalar(value):
  """A single member's result (interpreter output) as Python scalars."""
  return inst.pattern_map(lambda a: np.asarray(a).item(), value)


def _ints(low, high):
  def make(rng, batch):
    return [rng.integers(low, high, size=batch).astype(np.int64)]
  return make


# -- fibonacci -----------------------------------------------------------------

def _fib_ref(n):
  return _fib_ref(n - 1) + _fib_ref(n - 2) if n > 2 else 1


def fibonacci():
  pb = dsl.ProgramBuilder()
  with pb.function('fibonacci', ['n'], type_inference=lambda ts: ts[0]):
    with pb.if_(lambda n: n > 2):
      a = pb.call('fibonacci', [pb.primop(lambda n: n - 1)])
      b = pb.call('fibonacci', [pb.primop(lambda n: n - 2)])
      pb.return_(pb.primop(lambda a, b: a + b, [a, b]))
    with pb.else_():
      pb.return_(pb.const(1))
  return Case('fibonacci', pb.program(), (INT,), _fib_ref, _ints(0, 13), 13)


# -- even / odd: mutual recursion ----------------------------------------------

def _even_ref(n):
  return True if n == 0 else _odd_ref(n - 1)


def _odd_ref(n):
  return False if n == 0 else _even_ref(n - 1)


def even_odd():
  pb = dsl.ProgramBuilder()
  for name, other, base in (('is_even', 'is_odd', True),
                            ('is_odd', 'is_even', False)):
    with pb.function(name, ['n']):
      with pb.if_(lambda n: n == 0):
        pb.return_(pb.const(base))
      with pb.else_():
        pb.return_(pb.call(other, [pb.primop(lambda n: n - 1)]))
  return Case('even_odd', pb.program('is_even'), (INT,), _even_ref,
              _ints(0, 20), 21)


# -- Hofstadter female/male: mutual recursion with values live across calls -----

def _female_ref(n):
  return 1 if n == 0 else n - _male_ref(_female_ref(n - 1))


def _male_ref(n):
  return 0 if n == 0 else n - _female_ref(_male_ref(n - 1))


def hofstadter():
  pb = dsl.ProgramBuilder()
  for name, other, base in (('female', 'male', 1), ('male', 'female', 0)):
    with pb.function(name, ['n']):
      with pb.if_(lambda n: n == 0):
        pb.return_(pb.const(base))
      inner = pb.call(name, [pb.primop(lambda n: n - 1)])
      pb.primop(lambda n: 2 * n, out='twice')
      # `n` is live across both calls; `twice` only across the call of the
      # other function, which can call this one back: both need saving.
      outer = pb.call(other, [inner])
      pb.return_(pb.primop(lambda twice, n, r: twice - n - r,
                           ['twice', 'n', outer]))
  return Case('hofstadter', pb.program('female'), (INT,), _female_ref,
              _ints(0, 12), 20)


# -- collatz: a loop written with labels, goto and branch ------------------------

def _collatz_ref(n):
  steps = 0
  while n != 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
  return steps


def collatz():
  pb = dsl.ProgramBuilder()
  with pb.function('collatz', ['n']):
    pb.const(0, out='steps')
    head, body, done = pb.label(), pb.label(), pb.label()
    halve, triple, step = pb.label(), pb.label(), pb.label()
    pb.place(head)                       # the entry falls through to it
    pb.branch(pb.primop(lambda n: n != 1), body, done)
    pb.place(body)
    pb.branch(pb.primop(lambda n: n % 2 == 0), halve, triple)
    pb.place(halve)
    pb.primop(lambda n: n // 2, out='n')
    pb.goto(step)
    pb.place(triple)
    pb.primop(lambda n: 3 * n + 1, out='n')
    pb.place(step)                       # falls through from `triple`
    pb.primop(lambda steps: steps + 1, out='steps')
    pb.goto(head)
    pb.place(done)
    pb.return_('steps')
  return Case('collatz', pb.program(), (INT,), _collatz_ref, _ints(1, 30), 1)


# -- divmod3: a function returning a tuple, unpacked by its caller -----------------

def _tuple_ref(n):
  q, r = n // 3, n % 3
  return (r, (q + r) * 0.5)


def tuple_return():
  pb = dsl.ProgramBuilder()
  with pb.function('tuple_main', ['n']):
    pb.call('divmod3', ['n'], out=('q', 'r'))
    pb.primop(lambda q, r: (q + r) * 0.5, out='half')
    pb.return_(('r', 'half'))
  with pb.function('divmod3', ['n']):
    pb.return_(lambda n: (n // 3, n % 3))
  return Case('tuple_return', pb.program(), (INT,), _tuple_ref,
              _ints(0, 100), 1)


# -- fib_plus_n: `n` is live across two consecutive calls ------------------------

def _fib_plus_ref(n):
  return _fib_plus_ref(n - 1) + _fib_plus_ref(n - 2) + n if n > 1 else n


def fib_plus_n():
  pb = dsl.ProgramBuilder()
  with pb.function('fib_plus_n', ['n']):
    with pb.if_(lambda n: n > 1):
      pb.call('fib_plus_n', [pb.primop(lambda n: n - 1)], out='a')
      pb.call('fib_plus_n', [pb.primop(lambda n: n - 2)], out='b')
      pb.return_(lambda a, b, n: a + b + n)
    with pb.else_():
      pb.return_('n')
  return Case('fib_plus_n', pb.program(), (INT,), _fib_plus_ref,
              _ints(0, 12), 12)


# -- gcd: a self tail call ---------------------------------------------------------

def _gcd_ref(a, b):
  return a if b == 0 else _gcd_ref(b, a % b)


def gcd():
  pb = dsl.ProgramBuilder()
  with pb.function('gcd', ['a', 'b']):
    with pb.if_(lambda b: b == 0):
      pb.return_('a')
    with pb.else_():
      pb.return_(pb.call('gcd', ['b', pb.primop(lambda a, b: a % b)]))

  def make(rng, batch):
    return [rng.integers(0, 150, size=batch).astype(np.int64),
            rng.integers(0, 150, size=batch).astype(np.int64)]
  # The recursion is a tail call: after stack optimization it needs no
  # stack at all (the inputs above recurse up to ~10 deep).
  return Case('gcd', pb.program(), (INT, INT), _gcd_ref, make, 1)


# -- sum_squares: a recursive function calling a non-recursive helper --------------

def _sum_squares_ref(n):
  return 0 if n <= 0 else n * n + _sum_squares_ref(n - 1)


def sum_squares():
  pb = dsl.ProgramBuilder()
  with pb.function('sum_squares', ['n']):
    with pb.if_(lambda n: n <= 0):
      pb.return_(pb.const(0))
    pb.call('square', ['n'], out='sq')
    pb.call('sum_squares', [pb.primop(lambda n: n - 1)], out='rest')
    pb.return_(lambda sq, rest: sq + rest)
  with pb.function('square', ['x']):
    pb.return_(lambda x: x * x)
  return Case('sum_squares', pb.program(), (INT,), _sum_squares_ref,
              _ints(0, 15), 16)


# -- popcount: structured while_ and if_ without else_ -----------------------------

def _popcount_ref(n):
  return bin(n).count('1')


def popcount():
  pb = dsl.ProgramBuilder()
  with pb.function('popcount', ['n']):
    pb.const(0, out='count')
    with pb.while_(lambda n: n > 0):
      with pb.if_(lambda n: n % 2 == 1):
        pb.primop(lambda count: count + 1, out='count')
      pb.primop(lambda n: n // 2, out='n')
    pb.return_('count')
  return Case('popcount', pb.program(), (INT,), _popcount_ref,
              _ints(0, 1000), 1)


# -- helpers: a helper called once, in a loop, and one called twice -------------

def _helpers_ref(n):
  count = 0
  while n > 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    count += 1
  return (count + 1) + (n + 1)


def helpers():
  pb = dsl.ProgramBuilder()
  with pb.function('helpers', ['n']):
    pb.const(0, out='count')
    with pb.while_(lambda n: n > 1):
      pb.call('collatz_next', ['n'], out='n')    # the only call: direct
      pb.primop(lambda count: count + 1, out='count')
    pb.call('plus_one', ['count'], out='a')      # two calls: pushed
    pb.call('plus_one', ['n'], out='b')
    pb.return_(lambda a, b: a + b)
  with pb.function('collatz_next', ['m']):       # returns in two places
    with pb.if_(lambda m: m % 2 == 0):
      pb.return_(lambda m: m // 2)
    pb.return_(lambda m: 3 * m + 1)
  with pb.function('plus_one', ['x']):
    pb.return_(lambda x: x + 1)
  return Case('helpers', pb.program(), (INT,), _helpers_ref, _ints(1, 30), 2)


BUILDERS = (fibonacci, even_odd, hofstadter, collatz, tuple_return, fib_plus_n, gcd,
            sum_squares, popcount, helpers)


def all_cases():
  """Every case, freshly built (programs are immutable; sharing is fine)."""
  return [b() for b in BUILDERS]


CASES = all_cases()
BY_NAME = {c.name: c for c in CASES}
