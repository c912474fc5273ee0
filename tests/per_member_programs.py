"""Per-member programs: each written for one member, as a scientist would.

Every function here is decorated with `batch(per_member=True)`: its
values are one member's, without a batch axis, and its math is plain
NumPy (or TensorFlow) on them.  `PROGRAMS` lists each program with a
maker of random inputs and the backends it is written for: `'both'`
programs use only Python's operators, indexing, the builtins and arrays
made without inputs, so the same source runs on NumPy and TensorFlow;
`'numpy'` ones call NumPy functions.  `tensorflow_programs()` makes the
TensorFlow forms of those that need `tf.*` (importing TensorFlow only
then).  `tests/per_member/test_per_member.py` runs them all against a plain Python
loop over members and `dry_run=True`.
"""

import collections

import numpy as np

import autobatch_vm as ab

Program = collections.namedtuple('Program', 'name fn inputs backends')

# -- dynamic programming over strings ---------------------------------------

W = 6   # the padded length of a string

edit_ctx = ab.Context()


@edit_ctx.batch(per_member=True)
def edit_distance(a, b, la, lb):
  """Levenshtein distance of a[:la] and b[:lb] (int arrays of length W)."""
  prev = np.arange(W + 1)
  i = 1
  while i <= la:
    cur = np.zeros(W + 1, dtype=prev.dtype)
    cur[0] = i
    j = 1
    while j <= lb:
      cost = 0 if a[i - 1] == b[j - 1] else 1
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      j += 1
    prev = cur
    i += 1
  return prev[lb]


def edit_inputs(rng, batch):
  return (rng.integers(0, 3, (batch, W)), rng.integers(0, 3, (batch, W)),
          rng.integers(0, W + 1, batch), rng.integers(0, W + 1, batch))


# -- number theory -----------------------------------------------------------

prime_ctx = ab.Context()
WITNESSES = np.array([2, 3, 5, 7, 11])


@prime_ctx.batch(per_member=True)
def is_probable_prime(n):
  """Miller-Rabin with the first five primes as witnesses."""
  if n < 2:
    return False
  if n < 4:
    return True
  if n % 2 == 0:
    return False
  d = n - 1
  s = 0
  while d % 2 == 0:
    d //= 2
    s += 1
  for k in range(len(WITNESSES)):
    a = WITNESSES[k]
    if a % n == 0:
      continue
    x = power_mod(a, d, n)
    if x == 1 or x == n - 1:
      continue
    composite = True
    r = 1
    while r < s:
      x = x * x % n
      if x == n - 1:
        composite = False
        break
      r += 1
    if composite:
      return False
  return True


@prime_ctx.batch(per_member=True)
def power_mod(base, exp, mod):
  """base ** exp % mod by repeated squaring."""
  result = 1
  base = base % mod
  while exp > 0:
    if exp % 2 == 1:
      result = result * base % mod
    base = base * base % mod
    exp //= 2
  return result


def prime_inputs(rng, batch):
  return (rng.integers(0, 5000, batch),)


gcd_ctx = ab.Context()


@gcd_ctx.batch(per_member=True)
def gcd(a, b):
  """Euclid's algorithm, by recursion."""
  if b == 0:
    return a
  return gcd(b, a % b)


def gcd_inputs(rng, batch):
  return rng.integers(0, 400, batch), rng.integers(0, 400, batch)


# -- recursion and loops -------------------------------------------------------

fib_ctx = ab.Context()


@fib_ctx.batch(per_member=True)
def fib(n):
  if n < 2:
    return n
  return fib(n - 1) + fib(n - 2)


def fib_inputs(rng, batch):
  return (rng.integers(0, 12, batch),)


collatz_ctx = ab.Context()


@collatz_ctx.batch(per_member=True)
def collatz_steps(n):
  steps = 0
  while n != 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
  return steps


def collatz_inputs(rng, batch):
  return (rng.integers(1, 60, batch),)


# -- root finding ----------------------------------------------------------------

bisect_ctx = ab.Context()
TOL = 1e-9


@bisect_ctx.batch(per_member=True)
def cube_root(c):
  """The real cube root of c >= 0, by bisection."""
  lo = 0.0
  hi = max(1.0, c)
  while hi - lo > TOL * hi:
    mid = (lo + hi) / 2
    if mid * mid * mid < c:
      lo = mid
    else:
      hi = mid
  return (lo + hi) / 2


def bisect_inputs(rng, batch):
  return (rng.uniform(0.0, 30.0, batch),)


newton_ctx = ab.Context()


@newton_ctx.batch(per_member=True)
def newton(p):
  """Solves x**2 + y**2 = p[0], x * y = p[1] by Newton's method."""
  x = np.array([2.0, 0.1])
  for _ in range(50):
    f = np.array([x[0] ** 2 + x[1] ** 2 - p[0], x[0] * x[1] - p[1]])
    jacobian = np.array([[2 * x[0], 2 * x[1]], [x[1], x[0]]])
    step = np.linalg.solve(jacobian, f)
    x = x - step
    if np.linalg.norm(step) < 1e-12:
      break
  return x


def newton_inputs(rng, batch):
  return (np.stack([rng.uniform(2.0, 5.0, batch),
                    rng.uniform(0.1, 0.8, batch)], axis=1),)


# -- sampling --------------------------------------------------------------------

slice_ctx = ab.Context()


def log_density(x):
  """An unnormalized log density, narrower than a normal in its tails."""
  return -0.5 * x * x - 0.1 * x ** 4


@slice_ctx.batch(per_member=True)
def uniform(state):
  """The next state of a linear congruential generator and its uniform."""
  state = (1103515245 * state + 12345) % 2147483648
  return state, (state + 0.5) / 2147483648


@slice_ctx.batch(per_member=True)
def slice_sample(x, seed, width):
  """The mean of 8 slice-sampling steps (stepping out, then shrinking)."""
  state = seed
  total = 0.0
  for _ in range(8):
    state, u = uniform(state)
    level = log_density(x) + np.log(u)
    state, u = uniform(state)
    lo = x - width * u
    hi = lo + width
    while log_density(lo) > level:
      lo -= width
    while log_density(hi) > level:
      hi += width
    while True:
      state, u = uniform(state)
      proposal = lo + u * (hi - lo)
      if log_density(proposal) > level:
        break
      if proposal < x:
        lo = proposal
      else:
        hi = proposal
    x = proposal
    total += x
  return total / 8


def slice_inputs(rng, batch):
  return (rng.normal(size=batch), rng.integers(1, 2 ** 30, batch),
          rng.uniform(0.2, 2.0, batch))


# -- trees and graphs ------------------------------------------------------------

tree_ctx = ab.Context()
TREE_NODES = 15   # a complete binary tree of depth 3, stored as a heap


@tree_ctx.batch(per_member=True)
def evaluate(ops, values, i):
  """The value of the expression tree under heap node i (op 0: a leaf,
  1: +, 2: -, 3: *)."""
  op = ops[i]
  if op == 0:
    return values[i]
  a = evaluate(ops, values, 2 * i + 1)
  b = evaluate(ops, values, 2 * i + 2)
  if op == 1:
    return a + b
  if op == 2:
    return a - b
  return a * b


def tree_inputs(rng, batch):
  ops = rng.integers(0, 4, (batch, TREE_NODES))
  ops[:, TREE_NODES // 2:] = 0        # the last level holds leaves
  return ops, rng.uniform(-2.0, 2.0, (batch, TREE_NODES)), np.zeros(
      batch, np.int64)


bfs_ctx = ab.Context()
NODES = 6


@bfs_ctx.batch(per_member=True)
def bfs_distances(adjacency, source):
  """Hops from source to every node (-1: unreachable), breadth first."""
  n = len(adjacency)
  dist = np.full(NODES, -1)
  dist[source] = 0
  queue = np.zeros(NODES, dtype=np.int64)
  queue[0] = source
  head, tail = 0, 1
  while head < tail:
    u = queue[head]
    head += 1
    for v in range(n):
      if adjacency[u, v] and dist[v] < 0:
        dist[v] = dist[u] + 1
        queue[tail] = v
        tail += 1
  return dist


def bfs_inputs(rng, batch):
  adjacency = rng.uniform(size=(batch, NODES, NODES)) < 0.3
  adjacency = adjacency | adjacency.transpose(0, 2, 1)
  return adjacency, rng.integers(0, NODES, batch)


sort_ctx = ab.Context()


@sort_ctx.batch(per_member=True)
def insertion_sort(x, n):
  """x with its first n items sorted."""
  i = 1
  while i < n:
    item = x[i]
    j = i - 1
    while j >= 0 and x[j] > item:
      x[j + 1] = x[j]
      j -= 1
    x[j + 1] = item
    i += 1
  return x


def sort_inputs(rng, batch):
  return rng.uniform(size=(batch, 7)), rng.integers(0, 8, batch)


horner_ctx = ab.Context()


@horner_ctx.batch(per_member=True)
def horner(coefficients, x):
  """The polynomial with these coefficients (highest first) at x."""
  total = 0.0
  for k in range(len(coefficients)):
    total = total * x + coefficients[k]
  return total


def horner_inputs(rng, batch):
  return rng.uniform(-1.0, 1.0, (batch, 5)), rng.uniform(-2.0, 2.0, batch)


search_ctx = ab.Context()


@search_ctx.batch(per_member=True)
def merge_rank(a, b, t):
  """How many items of the sorted a and b are below t, by a merge walk
  that reads past neither end: Python evaluates each `x[i]` only where
  the `and` or `if` before it lets it."""
  i = 0
  j = 0
  while (i < len(a) and a[i] < t) or (j < len(b) and b[j] < t):
    take_a = j >= len(b) or (i < len(a) and a[i] <= b[j])
    if take_a:
      i += 1
    else:
      j += 1
  last = a[i - 1] if i > 0 else (b[j - 1] if j > 0 else t)
  return 100.0 * (i + j) + last   # the count, and the last item taken


def merge_inputs(rng, batch):
  return (np.sort(rng.normal(size=(batch, 4)), axis=1),
          np.sort(rng.normal(size=(batch, 3)), axis=1),
          rng.normal(scale=1.5, size=batch))


rnn_ctx = ab.Context()
HIDDEN = 3
_params = np.random.default_rng(7)
EMBEDDING = _params.normal(size=(5, HIDDEN))
WEIGHTS = _params.normal(size=(2 * HIDDEN, HIDDEN)) * 0.5
MAX_NODES = 7


@rnn_ctx.batch(per_member=True)
def encode(left, right, word, node):
  """A tree RNN: a leaf's embedding, or tanh([h_left; h_right] @ W)."""
  if left[node] < 0:
    return EMBEDDING[word[node]]
  h_left = encode(left, right, word, left[node])
  h_right = encode(left, right, word, right[node])
  return np.tanh(np.concatenate([h_left, h_right]) @ WEIGHTS)


def random_tree(rng, leaves):
  """A random binary tree of `leaves` leaves in arrays of MAX_NODES nodes
  (-1: no child), the root at node 0."""
  left, right, word = [], [], []

  def build(k):
    node = len(left)
    left.append(-1)
    right.append(-1)
    word.append(int(rng.integers(len(EMBEDDING))))
    if k > 1:
      split = int(rng.integers(1, k))
      left[node] = build(split)
      right[node] = build(k - split)
    return node
  build(leaves)
  pad = MAX_NODES - len(left)
  return (np.array(left + [-1] * pad), np.array(right + [-1] * pad),
          np.array(word + [0] * pad))


def rnn_inputs(rng, batch):
  trees = [random_tree(rng, int(rng.integers(1, 5))) for _ in range(batch)]
  left, right, word = (np.stack(t) for t in zip(*trees))
  return left, right, word, np.zeros(batch, np.int64)


PROGRAMS = [
    Program('edit_distance', edit_distance, edit_inputs, 'both'),
    Program('miller_rabin', is_probable_prime, prime_inputs, 'both'),
    Program('gcd', gcd, gcd_inputs, 'both'),
    Program('fib', fib, fib_inputs, 'both'),
    Program('collatz', collatz_steps, collatz_inputs, 'both'),
    Program('bisection', cube_root, bisect_inputs, 'both'),
    Program('newton', newton, newton_inputs, 'numpy'),
    Program('slice_sampler', slice_sample, slice_inputs, 'numpy'),
    Program('expression_tree', evaluate, tree_inputs, 'both'),
    Program('bfs', bfs_distances, bfs_inputs, 'both'),
    Program('insertion_sort', insertion_sort, sort_inputs, 'both'),
    Program('horner', horner, horner_inputs, 'both'),
    Program('merge_rank', merge_rank, merge_inputs, 'both'),
    Program('tree_rnn', encode, rnn_inputs, 'numpy'),
]


def tensorflow_programs():
  """The TensorFlow forms of the programs that call NumPy functions.

  Returns:
    A list of `Program`s (backends `'tensorflow'`), each in a Context of
    its own; the tree RNN's parameters are `tf.Variable`s
    (`tf_encode.variables`), for gradients.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()
  embedding = tf.Variable(EMBEDDING)
  weights = tf.Variable(WEIGHTS)

  @ctx.batch(per_member=True)
  def tf_encode(left, right, word, node):
    if left[node] < 0:
      return tf.gather(embedding, word[node])
    h_left = tf_encode(left, right, word, left[node])
    h_right = tf_encode(left, right, word, right[node])
    return tf.tanh(tf.linalg.matvec(
        weights, tf.concat([h_left, h_right], 0), transpose_a=True))
  tf_encode.variables = (embedding, weights)

  newton_tf_ctx = ab.Context()

  @newton_tf_ctx.batch(per_member=True)
  def tf_newton(p):
    x = tf.constant([2.0, 0.1], tf.float64)
    for _ in range(50):
      f = tf.stack([x[0] ** 2 + x[1] ** 2 - p[0], x[0] * x[1] - p[1]])
      jacobian = tf.stack([tf.stack([2 * x[0], 2 * x[1]]),
                           tf.stack([x[1], x[0]])])
      step = tf.linalg.solve(jacobian, f[:, None])[:, 0]
      x = x - step
      if tf.norm(step) < 1e-12:
        break
    return x

  return [Program('tree_rnn_tf', tf_encode, rnn_inputs, 'tensorflow'),
          Program('newton_tf', tf_newton, newton_inputs, 'tensorflow')]
