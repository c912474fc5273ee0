"""Batched programs written as users write them, with plain-Python references.

Shared by the end-to-end tests of every backend and mode.  Each `Case` has
the batched function, a generator of batched inputs, and a reference that
computes ONE member's result in plain Python (scalars and small arrays).
"""

import collections
import dataclasses
import sys
from typing import Callable

import numpy as np

import autobatch_vm as ab

ctx = ab.Context()


# -- recursion ---------------------------------------------------------------

@ctx.batch(type_inference=lambda arg_types: arg_types[0])
def fibonacci(n):
  if n > 2:
    return fibonacci(n - 1) + fibonacci(n - 2)
  else:
    return 1


@ctx.batch()
def fibonacci_untyped(n):
  if n > 2:
    return fibonacci_untyped(n - 1) + fibonacci_untyped(n - 2)
  return 1


def fibonacci_ref(n):
  return fibonacci_ref(n - 1) + fibonacci_ref(n - 2) if n > 2 else 1


@ctx.batch()
def fibonacci_base_first(n):
  # The base case on the test's true side: a call whose members that fail
  # the test push (return_inlining's call_branch, the other way round).
  if n <= 2:
    return 1
  return fibonacci_base_first(n - 1) + fibonacci_base_first(n - 2)


@ctx.batch()
def reset_sum(n):
  # The base case writes the parameter, which the recursive path reads on
  # entry: it must not run in the caller's block for the members calling.
  if n <= 1:
    n = 0
    return n
  return reset_sum(n - 1) + reset_sum(n - 2) + n


def reset_sum_ref(n):
  return 0 if n <= 1 else reset_sum_ref(n - 1) + reset_sum_ref(n - 2) + n


@ctx.batch()
def is_even(n):
  if n == 0:
    return True
  return is_odd(n - 1)


@ctx.batch()
def is_odd(n):
  if n == 0:
    return False
  return is_even(n - 1)


def is_even_ref(n):
  return n % 2 == 0


@ctx.batch()
def collatz_rec(n, steps):
  if n <= 1:
    return steps
  if n % 2 == 0:
    return collatz_rec(n // 2, steps + 1)
  return collatz_rec(3 * n + 1, steps + 1)


def collatz_ref(n, steps=0):
  while n > 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
  return steps


@ctx.batch()
def gcd(a, b):
  if b == 0:
    return a
  return gcd(b, a % b)


def gcd_ref(a, b):
  while b:
    a, b = b, a % b
  return a


@ctx.batch()
def power(x, k):
  if k == 0:
    return x * 0.0 + 1.0
  half = power(x, k // 2)
  if k % 2 == 0:
    return half * half
  return half * half * x


def power_ref(x, k):
  return x ** k


@ctx.batch()
def divmod_rec(a, b):
  """Returns a tuple: (quotient, remainder) by repeated subtraction."""
  if a < b:
    return 0, a
  q, r = divmod_rec(a - b, b)
  return q + 1, r


def divmod_ref(a, b):
  return (a // b, a % b)


@ctx.batch()
def add_one(x):
  return x + 1


@ctx.batch()
def nested_calls(x, y):
  return add_one(add_one(x) * 2 + gcd(x + 1, y + 1)) - add_one(y)


def nested_calls_ref(x, y):
  return ((x + 1) * 2 + gcd_ref(x + 1, y + 1)) + 1 - (y + 1)


# A forest stored in module-level arrays: node i has children LEFT[i],
# RIGHT[i] (-1 for a leaf) and a value.  Members start at different roots.
_rng = np.random.default_rng(1234)
_NODES = 63
LEFT = np.full(_NODES, -1)
RIGHT = np.full(_NODES, -1)
for _i in range(_NODES):
  if 2 * _i + 2 < _NODES and _rng.random() < 0.8:
    LEFT[_i], RIGHT[_i] = 2 * _i + 1, 2 * _i + 2
VALUE = _rng.integers(-5, 10, size=_NODES)


@ctx.batch()
def tree_sum(node):
  left = LEFT[node]
  if left < 0:
    return VALUE[node]
  return VALUE[node] + 2 * tree_sum(left) + tree_sum(RIGHT[node])


def tree_sum_ref(node):
  if LEFT[node] < 0:
    return VALUE[node]
  return VALUE[node] + 2 * tree_sum_ref(LEFT[node]) + tree_sum_ref(
      RIGHT[node])


Particle = collections.namedtuple('Particle', ['x', 'v'])


@ctx.batch()
def simulate(p, n):
  if n <= 0:
    return p
  return simulate(Particle(p.x + p.v, p.v * 0.5 - 0.25 * p.x), n - 1)


def simulate_ref(p, n):
  x, v = p
  for _ in range(n):
    x, v = x + v, v * 0.5 - 0.25 * x
  return Particle(x, v)


@ctx.batch()
def vec_halve(v, count):
  if np.max(np.abs(v), axis=-1) > 1.0:
    return vec_halve(v * 0.5, count + 1)
  return v, count


@ctx.batch()
def empty_rows(x, n):
  # `x` (`[batch, 0, 2]`) holds nothing, live across the recursive call:
  # stacks of empty frames.
  if n <= 0:
    return x, n
  y, k = empty_rows(x * 2.0, n - 1)
  return y + x, k + 1


def empty_rows_ref(x, n):
  return np.zeros_like(x), n


def vec_halve_ref(v, count):
  while np.max(np.abs(v)) > 1.0:
    v, count = v * 0.5, count + 1
  return v, count


# -- loops and the language beyond the predecessor --------------------------

@ctx.batch()
def collatz_loop(n):
  steps = 0
  while n > 1:
    if n % 2 == 0:
      n = n // 2
    else:
      n = 3 * n + 1
    steps += 1
  return steps


@ctx.batch()
def break_continue(n):
  total = 0
  i = 0
  while True:
    i += 1
    if i > n:
      break
    if i % 3 == 0:
      continue
    total += i * i
    if total > 500:
      break
  return total


def break_continue_ref(n):
  total, i = 0, 0
  while True:
    i += 1
    if i > n:
      break
    if i % 3 == 0:
      continue
    total += i * i
    if total > 500:
      break
  return total


@ctx.batch()
def nested_loops(n):
  count = 0
  i = 0
  while i < n:
    j = 0
    while j < i:
      if (i + j) % 2 == 0:
        count += j
      j += 1
    i += 1
  return count


def nested_loops_ref(n):
  return sum(j for i in range(n) for j in range(i) if (i + j) % 2 == 0)


@ctx.batch()
def loop_of_calls(n):
  acc = 0
  for i in range(ab.truthy(n)):
    acc += fibonacci_untyped(i + 1)
  return acc


def loop_of_calls_ref(n):
  return sum(fibonacci_ref(i + 1) for i in range(n))


@ctx.batch()
def range_forms(n, k):
  s = 0
  for i in range(2, ab.truthy(n), 3):
    s += i
  for j in range(ab.truthy(n), 0, -2):
    s -= j
  last = -1
  for m in range(ab.truthy(k)):
    if m == 4:
      break
    s += 10
    last = m
  return s * 100 + last


def range_forms_ref(n, k):
  s = 0
  for i in range(2, n, 3):
    s += i
  for j in range(n, 0, -2):
    s -= j
  last = -1
  for m in range(k):
    if m == 4:
      break
    s += 10
    last = m
  return s * 100 + last


@ctx.batch()
def classify(x):
  if x < -10:
    return -2
  elif x < 0:
    return -1
  elif x == 0:
    return 0
  if x > 100 and x % 2 == 0:
    return 3
  if not (x > 5 or x == 3):
    return 1
  return 2


def classify_ref(x):
  if x < -10:
    return -2
  elif x < 0:
    return -1
  elif x == 0:
    return 0
  if x > 100 and x % 2 == 0:
    return 3
  if not (x > 5 or x == 3):
    return 1
  return 2


@ctx.batch()
def conditional_expr(x, y):
  a = x if x > y else y
  b = 0 < x < 10
  c = -1 if b else 2
  d = fibonacci_untyped(x) if x < 12 else 0
  return a + c + d


def conditional_expr_ref(x, y):
  a = x if x > y else y
  c = -1 if 0 < x < 10 else 2
  d = fibonacci_ref(x) if x < 12 else 0
  return a + c + d


@ctx.batch()
def short_circuit(n):
  # fibonacci is only evaluated where n < 15: the `and` must short-circuit.
  if n < 15 and fibonacci_untyped(n) > 20:
    return 1
  if n > 30 or is_even(n):
    return 2
  return 3


def short_circuit_ref(n):
  if n < 15 and fibonacci_ref(n) > 20:
    return 1
  if n > 30 or n % 2 == 0:
    return 2
  return 3


@ctx.batch()
def early_return_in_loop(n):
  """Returns the first divisor >1 of n, or n (a prime), from inside a loop."""
  d = 2
  while d * d <= n:
    if n % d == 0:
      return d
    d += 1
  return n


def early_return_in_loop_ref(n):
  d = 2
  while d * d <= n:
    if n % d == 0:
      return d
    d += 1
  return n


# -- sync points -------------------------------------------------------------

def _mix(v):
  return (v * 7 + 3) % 997


mix = ab.sync_point(_mix)


@ctx.batch()
def mixed_once(a, b):
  c = (a + b) % 997
  return mix(a + c)   # in the entry block: a sync block


@ctx.batch()
def sync_after_loop(a, b):
  c = (a + b) % 997
  while c < 500:
    c = c + 100
  # The only call of mixed_once: the loop's exit block jumps to its sync
  # entry block, which has no other way in, and takes it (block_merge).
  return (mixed_once(a, c) + 1) % 997


def sync_after_loop_ref(a, b):
  c = (a + b) % 997
  while c < 500:
    c += 100
  return (_mix(a + (a + c) % 997) + 1) % 997


# -- Python literals meeting int32 / float32 state ------------------------------
# A literal is "weak" (it takes the dtype it meets, as in NumPy 2 and in the
# member's own Python code), also when it sits in a variable: a `range`
# counter, a literal argument of a call, `t = 0; t += 1`.

@ctx.batch()
def literal_weighted(x, k, n):
  """int32 `n`/`k`, float32 `x`: every result keeps the inputs' dtypes."""
  acc = k % 7
  total = x * 0
  t = 0
  for i in range(ab.truthy(n)):
    acc = (acc + i) % 997           # int32 + counter
    total = total + x * i           # float32 * counter
    t += 1
  capped = 0 if acc > 5 else acc    # select with a literal side
  return literal_add(capped, 3) + t, total + literal_scale(x, 2)


@ctx.batch()
def literal_add(a, b):
  return a + b                      # b: a literal argument


@ctx.batch()
def literal_scale(x, s):
  return x * s


def literal_weighted_ref(x, k, n):
  acc = k % 7
  total = x * 0
  t = 0
  for i in range(n):
    acc = (acc + i) % 997
    total = total + x * i
    t += 1
  capped = 0 if acc > 5 else acc
  return capped + 3 + t, total + x * 2


# -- five programs of the kinds users write -----------------------------------
#
# Each keeps per-member state in arrays and runs a data-dependent number of
# iterations; the references are plain Python on one member's values.

def pick(rows, i):
  """`rows[i]` for each member: `rows` is `[batch, n]`, `i` one index per
  member (or one for all).  NumPy or TensorFlow; an index outside the row
  (a member not at this line carries leftover data) is clipped."""
  if ab.ops._is_tf(rows, i):  # pylint: disable=protected-access
    tf = sys.modules['tensorflow']
    i = tf.cast(tf.convert_to_tensor(i), tf.int32)
    i = tf.clip_by_value(i, 0, tf.shape(rows)[1] - 1)
    if i.shape.rank == 0:
      i = tf.fill(tf.shape(rows)[:1], i)
    return tf.gather(rows, i, batch_dims=1)
  i = np.clip(np.asarray(i), 0, rows.shape[1] - 1)
  i = np.broadcast_to(i, rows.shape[:1])
  return np.take_along_axis(rows, i[:, None], axis=1)[:, 0]


# A solver: Newton's method for the cube root of `a`, to a relative
# tolerance with a default; members need different numbers of steps.  The
# default is converted as a passed argument would be: a NumPy float64, so
# that TensorFlow too makes it a float64 (a Python float would be float32).
@ctx.batch()
def cube_root(a, tol=np.float64(1e-12)):
  x = a * 0.5 + 1.0
  steps = 0
  while abs(x * x * x - a) > tol * a and steps < 100:
    x = x - (x * x * x - a) / (3.0 * x * x)
    steps += 1
  return x, steps


def cube_root_ref(a, tol=1e-12):
  x = a * 0.5 + 1.0
  steps = 0
  while abs(x * x * x - a) > tol * a and steps < 100:
    x = x - (x * x * x - a) / (3.0 * x * x)
    steps += 1
  return x, steps


# A sampler: rejection sampling of the density 3 x^2 on [0, 1) with a
# counter-based generator (a linear congruential step per draw, as a
# batched function called twice per attempt).
_LCG_M = 2147483648


@ctx.batch()
def lcg(h):
  return (h * 1103515245 + 12345) % 2147483648


def unit(h):
  """A draw in [0, 1) from the generator's state (TensorFlow does not
  divide an int64 tensor by a float: it is cast first)."""
  if ab.ops._is_tf(h):  # pylint: disable=protected-access
    h = sys.modules['tensorflow'].cast(h, 'float64')
  return h / 2147483648.0


@ctx.batch()
def rejection_sample(seed, budget):
  h = seed
  tries = 0
  x = 0.0
  while tries < budget:
    h = lcg(h)
    x = unit(h)
    h = lcg(h)
    u = unit(h)
    tries += 1
    if u < x * x:
      return x, tries
  return -1.0, tries


def lcg_ref(h):
  return (h * 1103515245 + 12345) % _LCG_M


def rejection_sample_ref(seed, budget):
  h, tries = int(seed), 0
  x = 0.0
  while tries < budget:
    h = lcg_ref(h)
    x = h / float(_LCG_M)
    h = lcg_ref(h)
    u = h / float(_LCG_M)
    tries += 1
    if u < x * x:
      return x, tries
  return -1.0, tries


# A search: the first position of a sorted per-member row whose value is
# at least the target (lower bound), by recursive bisection.
@ctx.batch()
def lower_bound(row, target, lo, hi):
  if lo >= hi:
    return lo
  mid = (lo + hi) // 2
  if pick(row, mid) < target:
    return lower_bound(row, target, mid + 1, hi)
  return lower_bound(row, target, lo, mid)


@ctx.batch()
def search(row, target):
  return lower_bound(row, target, 0, 16)


def search_ref(row, target):
  return int(np.searchsorted(row, target, side='left'))


def _search_args(rng, b):
  rows = np.sort(rng.integers(0, 40, size=(b, 16)), axis=1)
  return rows, rng.integers(-2, 45, size=b)


# A parser: a state machine reading per-member text held in an array of
# codes (digits 0-9, 10 a separator, 11 the end), counting the numbers,
# their sum and the largest.
SEP, END = 10, 11


@ctx.batch()
def parse_numbers(text):
  i = 0
  count = 0
  total = 0
  largest = -1
  current = 0
  in_number = False
  c = pick(text, i)
  while c != END:
    if c == SEP:
      if in_number:
        count += 1
        total += current
        largest = current if current > largest else largest
        in_number = False
    else:
      current = current * 10 + c if in_number else c
      in_number = True
    i += 1
    c = pick(text, i)
  if in_number:
    count += 1
    total += current
    largest = current if current > largest else largest
  return count, total, largest


def parse_numbers_ref(text):
  words = ''.join(' ' if c == SEP else str(c) for c in
                  text[:list(text).index(END)]).split()
  numbers = [int(w) for w in words]
  return len(numbers), sum(numbers), max(numbers, default=-1)


def _text_args(rng, b):
  text = rng.integers(0, 14, size=(b, 24))
  text = np.where(text > 10, SEP, text)  # more separators than digits
  ends = rng.integers(0, 24, size=b)
  text[np.arange(b), ends] = END
  text[:, -1] = END
  # Numbers of at most four digits: a separator after every fourth one.
  text[:, 4::5] = np.where(text[:, 4::5] == END, END, SEP)
  return (text,)


# A simulation with events: a single-server queue; arrivals and service
# times come from `lcg`; it runs until `customers` have been served and
# reports the events handled, the total waiting time and the longest
# queue.
@ctx.batch()
def queue(seed, customers):
  h = lcg(seed)
  next_arrival = 1 + h % 5
  next_departure = -1      # no one in service
  waiting = 0              # in the queue, not in service
  served = 0
  events = 0
  total_wait = 0
  longest = 0
  t = 0
  while served < customers:
    events += 1
    if next_departure < 0 or (next_arrival >= 0 and
                              next_arrival < next_departure):
      t = next_arrival
      h = lcg(h)
      next_arrival = t + 1 + h % 5
      if next_departure < 0:
        h = lcg(h)
        next_departure = t + 1 + h % 4
      else:
        waiting += 1
        longest = waiting if waiting > longest else longest
    else:
      t = next_departure
      served += 1
      total_wait += waiting
      if waiting > 0:
        waiting -= 1
        h = lcg(h)
        next_departure = t + 1 + h % 4
      else:
        next_departure = -1
  return events, total_wait, longest


def queue_ref(seed, customers):
  h = lcg_ref(int(seed))
  next_arrival, next_departure = 1 + h % 5, -1
  waiting = served = events = total_wait = longest = t = 0
  while served < customers:
    events += 1
    if next_departure < 0 or (next_arrival >= 0 and
                              next_arrival < next_departure):
      t = next_arrival
      h = lcg_ref(h)
      next_arrival = t + 1 + h % 5
      if next_departure < 0:
        h = lcg_ref(h)
        next_departure = t + 1 + h % 4
      else:
        waiting += 1
        longest = max(longest, waiting)
    else:
      t = next_departure
      served += 1
      total_wait += waiting
      if waiting > 0:
        waiting -= 1
        h = lcg_ref(h)
        next_departure = t + 1 + h % 4
      else:
        next_departure = -1
  return events, total_wait, longest


# -- what dry_run and the batched call must agree on --------------------------

@ctx.batch()
def constant_row(n):
  # A constant with a shape of its own: one row per member.
  z = np.zeros(3)
  if n > 2:
    z = z + 1.0
  return z


def constant_row_ref(n):
  return np.zeros(3) + (1.0 if n > 2 else 0.0)


@ctx.batch()
def triangle(n):
  # `range` of a per-member bound, written plainly (no truthy()).
  t = 0
  for i in range(n):
    t = t + i
  return t


def triangle_ref(n):
  return sum(range(n))


# -- cases -------------------------------------------------------------------

@dataclasses.dataclass
class Case:
  name: str
  fn: Callable
  make_args: Callable          # (rng, batch) -> tuple of batched arrays
  reference: Callable          # one member's plain values -> result
  depth: int = 40
  dry_run: bool = True         # whether `dry_run=True` works for it
  rtol: float = 1e-9
  numpy_primitives: bool = False   # NumPy calls: TF runs it eagerly only
  # The result leaves' dtypes where the plain-Python reference's are not
  # the batched call's (a float32 member run in Python may give float64);
  # else those of the reference.  dry_run's always are the batched call's.
  dtypes: tuple = ()


def _ints(low, high):
  return lambda rng, b: (rng.integers(low, high, size=b),)


CASES = [
    Case('empty_rows', empty_rows,
         lambda rng, b: (np.zeros((b, 0, 2)), rng.integers(-1, 6, size=b)),
         empty_rows_ref),
    Case('fibonacci', fibonacci, _ints(1, 14), fibonacci_ref),
    Case('fibonacci_untyped', fibonacci_untyped, _ints(1, 14), fibonacci_ref),
    Case('fibonacci_base_first', fibonacci_base_first, _ints(1, 14),
         fibonacci_ref),
    Case('reset_sum', reset_sum, _ints(0, 14), reset_sum_ref),
    Case('even_odd', is_even, _ints(0, 30), is_even_ref),
    Case('collatz_rec', collatz_rec,
         lambda rng, b: (rng.integers(1, 60, size=b), np.zeros(b, np.int64)),
         collatz_ref),
    Case('gcd', gcd, lambda rng, b: (rng.integers(0, 500, size=b),
                                     rng.integers(0, 500, size=b)), gcd_ref),
    Case('power_f64', power, lambda rng, b: (rng.uniform(-2, 2, size=b),
                                             rng.integers(0, 12, size=b)),
         power_ref, rtol=1e-12),
    Case('power_f32', power,
         lambda rng, b: (rng.uniform(-2, 2, size=b).astype(np.float32),
                         rng.integers(0, 12, size=b).astype(np.int32)),
         power_ref, rtol=1e-5, dtypes=('float32',)),
    Case('divmod_tuple', divmod_rec,
         lambda rng, b: (rng.integers(0, 40, size=b),
                         rng.integers(1, 7, size=b)), divmod_ref),
    Case('nested_calls', nested_calls,
         lambda rng, b: (rng.integers(0, 50, size=b),
                         rng.integers(0, 50, size=b)), nested_calls_ref),
    Case('tree_sum', tree_sum, _ints(0, 31), tree_sum_ref,
         numpy_primitives=True),
    Case('namedtuple_state', simulate,
         lambda rng, b: (Particle(rng.normal(size=b), rng.normal(size=b)),
                         rng.integers(0, 10, size=b)), simulate_ref,
         rtol=1e-12),
    Case('vector_state', vec_halve,
         lambda rng, b: (rng.normal(scale=20, size=(b, 3)),
                         np.zeros(b, np.int64)), vec_halve_ref,
         numpy_primitives=True),
    Case('collatz_loop', collatz_loop, _ints(1, 60), collatz_ref),
    Case('break_continue', break_continue, _ints(0, 20), break_continue_ref),
    Case('nested_loops', nested_loops, _ints(0, 9), nested_loops_ref),
    Case('loop_of_calls', loop_of_calls, _ints(0, 9), loop_of_calls_ref),
    Case('range_forms', range_forms,
         lambda rng, b: (rng.integers(0, 12, size=b),
                         rng.integers(0, 7, size=b)), range_forms_ref),
    Case('elif_fallthrough', classify, _ints(-20, 120), classify_ref),
    Case('conditional_expr', conditional_expr,
         lambda rng, b: (rng.integers(-5, 20, size=b),
                         rng.integers(-5, 20, size=b)), conditional_expr_ref),
    Case('short_circuit', short_circuit, _ints(0, 40), short_circuit_ref),
    Case('early_return_in_loop', early_return_in_loop, _ints(2, 200),
         early_return_in_loop_ref),
    Case('sync_after_loop', sync_after_loop,
         lambda rng, b: (rng.integers(0, 997, size=b),
                         rng.integers(0, 997, size=b)),
         sync_after_loop_ref),
    Case('literals_int32_float32', literal_weighted,
         lambda rng, b: (rng.uniform(-2, 2, size=b).astype(np.float32),
                         rng.integers(0, 50, size=b).astype(np.int32),
                         rng.integers(0, 6, size=b).astype(np.int32)),
         literal_weighted_ref, rtol=1e-5, dtypes=('int32', 'float32')),
    Case('literals_int64_float64', literal_weighted,
         lambda rng, b: (rng.uniform(-2, 2, size=b),
                         rng.integers(0, 50, size=b),
                         rng.integers(0, 6, size=b)),
         literal_weighted_ref, rtol=1e-12, dtypes=('int64', 'float64')),
    Case('newton_cube_root', cube_root,
         lambda rng, b: (rng.uniform(0.01, 1000.0, size=b),), cube_root_ref,
         rtol=1e-12, dtypes=('float64', 'int64')),
    Case('newton_cube_root_tol', cube_root,
         lambda rng, b: (rng.uniform(0.01, 1000.0, size=b),
                         10.0 ** -rng.integers(2, 14, size=b)),
         cube_root_ref, rtol=1e-12, dtypes=('float64', 'int64')),
    Case('rejection_sampler', rejection_sample,
         lambda rng, b: (rng.integers(0, 2 ** 31, size=b),
                         rng.integers(1, 12, size=b)), rejection_sample_ref,
         rtol=1e-12, dtypes=('float64', 'int64')),
    Case('binary_search', search, _search_args, search_ref,
         dtypes=('int64',)),
    Case('parse_numbers', parse_numbers, _text_args, parse_numbers_ref,
         dtypes=('int64', 'int64', 'int64')),
    Case('queue_events', queue,
         lambda rng, b: (rng.integers(0, 2 ** 31, size=b),
                         rng.integers(0, 12, size=b)), queue_ref,
         dtypes=('int64', 'int64', 'int64')),
    Case('constant_row', constant_row, _ints(0, 6), constant_row_ref,
         dtypes=('float64',)),
    Case('range_of_member', triangle, _ints(0, 12), triangle_ref,
         dtypes=('int64',)),
]


def member(args, i):
  """Member i's plain values (no batch dimension)."""
  return tuple(ab.instructions.pattern_map(lambda a: a[i], a) for a in args)


def reference_batch(case, args, batch):
  """Stacks the reference results of every member."""
  results = [case.reference(*member(args, i)) for i in range(batch)]
  leaves = [ab.instructions.pattern_flatten(r) for r in results]
  if not results:
    return None
  stacked = [np.stack([np.asarray(x) for x in col]) for col in zip(*leaves)]
  return ab.instructions.pattern_unflatten(results[0], stacked)
