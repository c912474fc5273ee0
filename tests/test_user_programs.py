"""Scientific programs as a new user writes them, batched on every backend.

Sixteen per-member programs in the style of the README and docs/guide.md
(root finding, Newton on a 2x2 system, power iteration, conjugate
gradient, gradient descent with an Armijo line search, an adaptive ODE
integrator, a Gillespie simulation and Metropolis-Hastings with per-member
random state, binary search, extended Euclid and modular powers by
recursion, BFS and a recursive DFS, quicksort, an expression tree, and
Ackermann's function), each written once against a small `lib` namespace
with a NumPy and a TensorFlow version (as `examples/tree_rnn.py` does), so
that the same function runs on both.  Each program runs at a small batch
whose members take different paths, and is compared with `dry_run=True`
(each member alone, as plain Python) in values, shapes and dtypes: on NumPy
on the stack VM and stackless; on TensorFlow eagerly, under `tf.function`
and under XLA.  Each dry run is also checked against facts computed
without autobatch_vm (NumPy's solvers, Python's `pow`, a plain BFS ...).
"""

import collections
import dataclasses
import functools
import math
import types
import warnings
from typing import Callable

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors
from tests.python import run_everywhere

N_NODES = 6                       # nodes of every member's graph
LEAF, ADD, MUL, SUB = 0, 1, 2, 3  # expression tree node kinds


# -- the two libraries -------------------------------------------------------
# Helpers run as primitives on whole batches: axis 0 is the batch.  An index
# may be a Python int (a literal written in the call), so the
# helpers broadcast it.

def numpy_lib():
  """The helpers on NumPy arrays."""

  def take(x, i):
    return x[np.arange(len(x)), i]

  def onehot(i, n):
    return np.arange(n) == np.expand_dims(i, -1)

  def set_at(a, i, v):
    return np.where(onehot(i, a.shape[-1]), np.expand_dims(v, -1),
                    a).astype(a.dtype)

  return types.SimpleNamespace(
      solve=lambda a, b: np.linalg.solve(a, b[..., None])[..., 0],
      matvec=lambda a, v: np.einsum('...ij,...j->...i', a, v),
      dot=lambda a, b: np.sum(a * b, axis=-1),
      norm=lambda v: np.sqrt(np.sum(v * v, axis=-1)),
      col=lambda v: np.expand_dims(v, -1),
      stack=np.stack, sqrt=np.sqrt, log=np.log, exp=np.exp, sin=np.sin,
      abs=np.abs, minimum=np.minimum, clip=np.clip, where=np.where,
      to_float=lambda x: x.astype(np.float64),
      take=take, row=take, onehot=onehot, set_at=set_at,
      count=lambda b: np.sum(b, axis=-1, dtype=np.int32))


def tf_lib():
  """The same helpers on TensorFlow tensors."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def take(x, i):
    return tf.gather(x, tf.broadcast_to(i, tf.shape(x)[:1]), batch_dims=1)

  def onehot(i, n):
    i = tf.convert_to_tensor(i)
    return tf.range(n, dtype=i.dtype) == tf.expand_dims(i, -1)

  def set_at(a, i, v):
    return tf.where(onehot(i, a.shape[-1]),
                    tf.expand_dims(tf.cast(v, a.dtype), -1), a)

  return types.SimpleNamespace(
      solve=lambda a, b: tf.linalg.solve(a, b[..., None])[..., 0],
      matvec=tf.linalg.matvec,
      dot=lambda a, b: tf.reduce_sum(a * b, axis=-1),
      norm=lambda v: tf.sqrt(tf.reduce_sum(v * v, axis=-1)),
      col=lambda v: tf.expand_dims(v, -1),
      stack=tf.stack, sqrt=tf.sqrt, log=tf.math.log, exp=tf.exp,
      sin=tf.sin, abs=tf.abs, minimum=tf.minimum, clip=tf.clip_by_value,
      where=tf.where, to_float=lambda x: tf.cast(x, tf.float64),
      take=take, row=take, onehot=onehot, set_at=set_at,
      count=lambda b: tf.reduce_sum(tf.cast(b, tf.int32), axis=-1))


# -- the programs --------------------------------------------------------------

def build(lib):
  """The programs on `lib`, in a Context of their own."""
  ctx = ab.Context()

  # Bisection for the cube root of c >= 0, with a batched helper.
  @ctx.batch
  def cubic(x, c):
    return x * x * x - c

  @ctx.batch
  def cube_root(c, tol=np.float64(1e-10), max_iter=np.int32(200)):
    lo = c * 0.0
    hi = c + 1.0
    it = np.int32(0)
    while hi - lo > tol and it < max_iter:
      mid = 0.5 * (lo + hi)
      if cubic(mid, c) > 0:
        hi = mid
      else:
        lo = mid
      it += 1
    return 0.5 * (lo + hi), it

  # Newton's method on x^2 + y^2 = r^2, x = a y: a 2x2 solve per step.
  def residual(x, r, a):
    return lib.stack([x[:, 0] ** 2 + x[:, 1] ** 2 - r * r,
                      x[:, 0] - a * x[:, 1]], axis=-1)

  def jacobian(x, a):
    one = x[:, 0] * 0.0 + 1.0
    return lib.stack([lib.stack([2.0 * x[:, 0], 2.0 * x[:, 1]], axis=-1),
                      lib.stack([one, -a], axis=-1)], axis=-2)

  @ctx.batch
  def newton_system(r, a, x, tol=np.float64(1e-12), max_iter=50):
    it = 0
    while it < max_iter:
      f = residual(x, r, a)
      if lib.norm(f) < tol:
        break
      x = x + lib.solve(jacobian(x, a), -f)
      it += 1
    return x, it

  # Power iteration for the dominant eigenpair; a for loop with break.
  @ctx.batch
  def power_iteration(a, v, tol=np.float64(1e-10), max_iter=500):
    v = v / lib.norm(v)[:, None]
    lam = lib.dot(v, lib.matvec(a, v))
    iters = 0
    for _ in range(max_iter):
      w = lib.matvec(a, v)
      w = w / lib.norm(w)[:, None]
      new_lam = lib.dot(w, lib.matvec(a, w))
      iters += 1
      v = w
      if lib.abs(new_lam - lam) < tol * lib.abs(new_lam):
        lam = new_lam
        break
      lam = new_lam
    return lam, v, iters

  # Conjugate gradient in float32 on a per-member SPD matrix.
  @ctx.batch
  def conjugate_gradient(a, b, rel_tol=np.float32(1e-4)):
    x = b * 0.0
    r = b - lib.matvec(a, x)
    p = r
    rs = lib.dot(r, r)
    stop = rel_tol * lib.norm(b)
    n_iter = np.int32(0)
    for _ in range(2 * b.shape[-1]):
      if lib.sqrt(rs) < stop:
        break
      ap = lib.matvec(a, p)
      alpha = rs / lib.dot(p, ap)
      x = x + alpha[:, None] * p
      r = r - alpha[:, None] * ap
      rs_new = lib.dot(r, r)
      p = r + (rs_new / rs)[:, None] * p
      rs = rs_new
      n_iter += 1
    return x, n_iter

  # Gradient descent with a backtracking (Armijo) line search on the
  # function of Boyd & Vandenberghe's 9.3 example.
  def boyd(x, s):
    return (lib.exp(x[:, 0] + s * x[:, 1] - 0.1) +
            lib.exp(x[:, 0] - s * x[:, 1] - 0.1) + lib.exp(-x[:, 0] - 0.1))

  def boyd_grad(x, s):
    e1 = lib.exp(x[:, 0] + s * x[:, 1] - 0.1)
    e2 = lib.exp(x[:, 0] - s * x[:, 1] - 0.1)
    e3 = lib.exp(-x[:, 0] - 0.1)
    return lib.stack([e1 + e2 - e3, s * (e1 - e2)], axis=-1)

  @ctx.batch
  def backtrack(x, g, fx, s, t=np.float64(1.0), beta=0.5, c=1e-4):
    gg = lib.dot(g, g)
    halvings = 0
    while boyd(x - lib.col(t) * g, s) > fx - c * t * gg:
      t = t * beta
      halvings += 1
    return t, halvings

  @ctx.batch
  def gradient_descent(x, s, max_iter=np.int32(30), gtol=np.float64(1e-3)):
    total = 0
    it = np.int32(0)
    while it < max_iter:
      g = boyd_grad(x, s)
      if lib.norm(g) < gtol:
        return x, it, total
      t, nb = backtrack(x, g, boyd(x, s), s, beta=0.7)
      x = x - lib.col(t) * g
      total += nb
      it += 1
    return x, it, total

  # An adaptive Heun-Euler integrator of y' = -k y + sin(t): a per-member
  # number of accepted and rejected steps.
  def rhs(t, y, k):
    return -k * y + lib.sin(t)

  @ctx.batch
  def integrate(y0, k, t_end, rtol=np.float64(1e-4), h0=np.float64(0.1)):
    t = y0 * 0.0
    y = y0
    h = h0 + t
    accepted = np.int32(0)
    rejected = np.int32(0)
    while t < t_end:
      h = lib.minimum(h, t_end - t)
      k1 = rhs(t, y, k)
      k2 = rhs(t + h, y + h * k1, k)
      y_new = y + 0.5 * h * (k1 + k2)
      err = lib.abs(0.5 * h * (k2 - k1))
      scale = rtol * (1.0 + lib.abs(y_new))
      if err <= scale:
        t = t + h
        y = y_new
        accepted += 1
      else:
        rejected += 1
      h = h * lib.clip(0.9 * lib.sqrt(scale / (err + 1e-300)), 0.2, 5.0)
    return y, accepted, rejected

  # A linear congruential generator: per-member random state as a value.
  def lcg(state):
    state = (1103515245 * state + 12345) % 2147483648
    return state, (state + 1) / 2147483649

  # Gillespie's direct method for a birth-death process.
  @ctx.batch
  def gillespie(birth, death, n0, seed, t_end=np.float64(5.0),
                max_events=np.int32(400)):
    t = birth * 0.0
    n = n0
    state = seed
    events = np.int32(0)
    while t < t_end and events < max_events:
      total = birth + death * lib.to_float(n)
      state, u1 = lcg(state)
      state, u2 = lcg(state)
      t = t - lib.log(u1) / total
      if t >= t_end:
        break
      if u2 * total < birth:
        n = n + 1
      else:
        n = n - 1
      events += 1
    return n, events, state

  # Binary search in the first n entries of a sorted row.
  @ctx.batch
  def binary_search(sorted_vals, n, target):
    lo = 0
    hi = n - 1
    while lo <= hi:
      mid = (lo + hi) // 2
      v = lib.take(sorted_vals, mid)
      if v == target:
        return mid
      elif v < target:
        lo = mid + 1
      else:
        hi = mid - 1
    return -1

  # Extended Euclid (a tuple from a non-tail recursion) and modular powers.
  @ctx.batch
  def ext_gcd(a, b):
    if b == 0:
      return a, 1, 0
    g, x, y = ext_gcd(b, a % b)
    return g, y, x - (a // b) * y

  @ctx.batch
  def mod_pow(base, exp, mod):
    if exp == 0:
      return 1 % mod
    half = mod_pow(base, exp // 2, mod)
    result = half * half % mod
    if exp % 2 == 1:
      result = result * base % mod
    return result

  @ctx.batch
  def modular(a, m, e):
    g, x, _ = ext_gcd(a, m)
    return g, x % m, mod_pow(a % m, e, m)

  # Breadth-first search with an explicit queue, on a boolean adjacency
  # matrix per member.
  @ctx.batch
  def bfs_distance(adj, source, target):
    dist = lib.where(lib.onehot(source, N_NODES), 0, -1)
    queue = lib.set_at(dist * 0, 0, source)
    head = 0
    tail = 1
    while head < tail:
      u = lib.take(queue, head)
      du = lib.take(dist, u)
      if u == target:
        return du
      for v in range(N_NODES):
        if lib.take(lib.row(adj, u), v) and lib.take(dist, v) < 0:
          dist = lib.set_at(dist, v, du + 1)
          queue = lib.set_at(queue, tail, v)
          tail += 1
      head += 1
    return -1

  # Depth-first search by recursion from inside a loop.
  @ctx.batch
  def dfs(adj, u, visited):
    visited = lib.set_at(visited, u, True)
    for v in range(N_NODES):
      if lib.take(lib.row(adj, u), v) and not lib.take(visited, v):
        visited = dfs(adj, v, visited)
    return visited

  @ctx.batch
  def reachable(adj, source):
    seen = dfs(adj, source, lib.onehot(source, N_NODES) & False)
    return lib.count(seen), seen

  # Metropolis-Hastings for a normal target, until n_accept acceptances.
  def log_density(x, mu, sigma):
    z = (x - mu) / sigma
    return -0.5 * z * z

  @ctx.batch
  def metropolis(mu, sigma, x0, seed, n_accept=20, step=np.float64(1.5)):
    x = x0
    state = seed
    accepted = 0
    proposals = 0
    total = x0 * 0.0
    while accepted < n_accept:
      state, u = lcg(state)
      state, w = lcg(state)
      prop = x + step * (2.0 * u - 1.0)
      if lib.log(w) < log_density(prop, mu, sigma) - log_density(x, mu,
                                                                 sigma):
        x = prop
        accepted += 1
        total = total + x
      proposals += 1
    return total / accepted, proposals

  # Quicksort (Lomuto) of arr[lo..hi], counting comparisons.
  def swap(arr, i, j):
    ai = lib.take(arr, i)
    aj = lib.take(arr, j)
    return lib.set_at(lib.set_at(arr, i, aj), j, ai)

  @ctx.batch
  def quicksort(arr, lo, hi):
    if lo >= hi:
      return arr, 0
    pivot = lib.take(arr, hi)
    i = lo
    comparisons = 0
    for j in range(lo, hi):
      comparisons += 1
      if lib.take(arr, j) < pivot:
        arr = swap(arr, i, j)
        i += 1
    arr = swap(arr, i, hi)
    arr, c1 = quicksort(arr, lo, i - 1)
    arr, c2 = quicksort(arr, i + 1, hi)
    return arr, comparisons + c1 + c2

  # An arithmetic expression tree stored as arrays (int8 kinds, float32
  # leaves, int32 children): a tree recursion.
  @ctx.batch
  def evaluate(ops, vals, left, right, node):
    op = lib.take(ops, node)
    if op == LEAF:
      return lib.take(vals, node)
    a = evaluate(ops, vals, left, right, lib.take(left, node))
    b = evaluate(ops, vals, left, right, lib.take(right, node))
    if op == ADD:
      return a + b
    elif op == MUL:
      return a * b
    return a - b

  @ctx.batch
  def ackermann(m, n):
    if m == 0:
      return n + 1
    if n == 0:
      return ackermann(m - 1, 1)
    return ackermann(m - 1, ackermann(m, n - 1))

  # Heron's square root in float32, with a keyword tolerance.
  @ctx.batch
  def newton_sqrt(a, rel_tol=np.float32(1e-6)):
    x = a * 0.5 + 0.5
    steps = 0
    while lib.abs(x * x - a) > rel_tol * a:
      x = 0.5 * (x + a / x)
      steps += 1
    return x, steps

  return types.SimpleNamespace(**{
      name: value for name, value in locals().items()
      if isinstance(value, ab.frontend.BatchedFunction)})


# -- inputs and facts ----------------------------------------------------------

def _spd(rng, b, n, dtype=np.float64):
  m = rng.normal(size=(b, n, n))
  return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def _clustered_spd(rng, b, n):
  """float32 SPD matrices with 1 to n distinct eigenvalues: conjugate
  gradient takes as many iterations as a matrix has."""
  q, _ = np.linalg.qr(rng.normal(size=(b, n, n)))
  distinct = rng.integers(1, n + 1, b)
  lam = np.stack([rng.choice(np.arange(1.0, 9.0), n) for _ in range(b)])
  lam = np.where(np.arange(n) < distinct[:, None], lam, lam[:, :1])
  return ((q * lam[:, None, :]) @ np.swapaxes(q, -1, -2)).astype(np.float32)


def _graphs(rng, b):
  adj = rng.random((b, N_NODES, N_NODES)) < 0.3
  adj = adj | np.swapaxes(adj, 1, 2)
  return adj & ~np.eye(N_NODES, dtype=bool)


def _trees(rng, b, size=15):
  """Random binary expression trees, node 0 the root, children after
  their parent."""
  ops = np.zeros((b, size), np.int8)
  vals = rng.uniform(-2, 2, size=(b, size)).astype(np.float32)
  left = np.zeros((b, size), np.int32)
  right = np.zeros((b, size), np.int32)
  for k in range(b):
    free, frontier = 1, [0]
    while frontier:
      node = frontier.pop(0)
      if free + 2 <= size and rng.random() < 0.6:
        ops[k, node] = rng.integers(1, 4)
        left[k, node], right[k, node] = free, free + 1
        frontier += [free, free + 1]
        free += 2
  return ops, vals, left, right, np.zeros(b, np.int32)


def _i32(x):
  return np.asarray(x, np.int32)


def _check_cube_root(args, out):
  np.testing.assert_allclose(out[0] ** 3, args[0], rtol=1e-8, atol=1e-8)


def _check_newton(args, out):
  r, a, _ = args
  x, it = out
  np.testing.assert_allclose(np.hypot(x[:, 0], x[:, 1]), r, rtol=1e-10)
  np.testing.assert_allclose(x[:, 0], a * x[:, 1], atol=1e-10)
  assert len(set(it.tolist())) > 1   # members take different paths


def _check_power(args, out):
  np.testing.assert_allclose(out[0], np.linalg.eigvalsh(args[0])[:, -1],
                             rtol=1e-7)


def _check_cg(args, out):
  a, b = args
  x = np.linalg.solve(a.astype(np.float64), b[..., None])[..., 0]
  np.testing.assert_allclose(out[0], x, rtol=1e-3, atol=1e-4)
  assert len(set(out[1].tolist())) > 1


def _check_descent(args, out):
  x, it, _ = out
  # The minimizer: x1 = 0, exp(x0 - 0.1) * 2 = exp(-x0 - 0.1).
  done = it < 30
  assert done.sum() >= 2 and len(set(it.tolist())) > 1
  np.testing.assert_allclose(x[done, 0], -0.5 * np.log(2), atol=1e-3)
  np.testing.assert_allclose(x[done, 1], 0, atol=1e-3)


def _check_integrate(args, out):
  assert np.all(out[1] > 0) and len(set(out[1].tolist())) > 1


def _check_gillespie(args, out):
  n, events, _ = out
  assert np.all(n >= 0) and np.all(events < 400)
  np.testing.assert_array_equal(n % 2, (args[2] + events) % 2)


def _check_binary_search(args, out):
  vals, n, target = args
  for k in range(len(n)):
    row = vals[k, :n[k]].tolist()
    if target[k] in row:
      assert row[out[k]] == target[k]
    else:
      assert out[k] == -1


def _check_modular(args, out):
  a, m, e = args
  g, inv, p = out
  np.testing.assert_array_equal(g, np.gcd(a, m))
  ok = g == 1
  np.testing.assert_array_equal(a[ok] * inv[ok] % m[ok], 1 % m[ok])
  np.testing.assert_array_equal(
      p, [pow(int(x), int(y), int(z)) for x, y, z in zip(a, e, m)])


def _bfs(adj, s, t):
  dist = {s: 0}
  queue = collections.deque([s])
  while queue:
    u = queue.popleft()
    if u == t:
      return dist[u]
    for v in range(N_NODES):
      if adj[u, v] and v not in dist:
        dist[v] = dist[u] + 1
        queue.append(v)
  return -1


def _check_bfs(args, out):
  adj, s, t = args
  np.testing.assert_array_equal(
      out, [_bfs(adj[k], s[k], t[k]) for k in range(len(s))])


def _check_reachable(args, out):
  adj, s = args
  count, seen = out
  expected = [[_bfs(adj[k], s[k], v) >= 0 for v in range(N_NODES)]
              for k in range(len(s))]
  np.testing.assert_array_equal(seen, expected)
  np.testing.assert_array_equal(count, seen.sum(axis=-1))


def _check_metropolis(args, out):
  assert np.all(out[1] >= 20) and np.all(np.isfinite(out[0]))


def _quicksort_ref(a, lo, hi):
  if lo >= hi:
    return 0
  i, count = lo, 0
  for j in range(lo, hi):
    count += 1
    if a[j] < a[hi]:
      a[i], a[j] = a[j], a[i]
      i += 1
  a[i], a[hi] = a[hi], a[i]
  return count + _quicksort_ref(a, lo, i - 1) + _quicksort_ref(a, i + 1, hi)


def _check_quicksort(args, out):
  arr, lo, hi = args
  for k in range(len(lo)):
    a = arr[k].tolist()
    count = _quicksort_ref(a, int(lo[k]), int(hi[k]))
    assert out[0][k].tolist() == a and out[1][k] == count, k


def _tree_ref(ops, vals, left, right, node):
  if ops[node] == LEAF:
    return float(vals[node])
  a = _tree_ref(ops, vals, left, right, left[node])
  b = _tree_ref(ops, vals, left, right, right[node])
  return a + b if ops[node] == ADD else a * b if ops[node] == MUL else a - b


def _check_evaluate(args, out):
  expected = [_tree_ref(*(x[k] for x in args[:4]), 0)
              for k in range(len(out))]
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _ackermann_ref(m, n):
  return {0: n + 1, 1: n + 2, 2: 2 * n + 3, 3: 2 ** (n + 3) - 3}[m]


def _check_ackermann(args, out):
  np.testing.assert_array_equal(
      out, [_ackermann_ref(m, n) for m, n in zip(*args)])


def _check_sqrt(args, out):
  np.testing.assert_allclose(out[0], np.sqrt(args[0]), rtol=2e-6)


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  make_args: Callable       # (rng, batch) -> tuple of NumPy arrays
  check: Callable           # (args, NumPy dry-run result) -> None
  depth: int = 15
  rtol: float = 1e-9        # batched vs dry run (float32: round-off)


CASES = [
    Case('cube_root', lambda rng, b: (rng.uniform(0, 30, b),),
         _check_cube_root),
    Case('newton_system',
         lambda rng, b: (rng.uniform(0.5, 3, b), rng.uniform(-2, 2, b),
                         rng.uniform(0.5, 2, (b, 2))), _check_newton),
    Case('power_iteration',
         lambda rng, b: (_spd(rng, b, 3), rng.normal(size=(b, 3))),
         _check_power),
    Case('conjugate_gradient',
         lambda rng, b: (_clustered_spd(rng, b, 4),
                         rng.normal(size=(b, 4)).astype(np.float32)),
         _check_cg, rtol=1e-5),
    Case('gradient_descent',
         lambda rng, b: (rng.uniform(-0.5, 0.5, (b, 2)), rng.uniform(0.5, 1.5, b)),
         _check_descent),
    Case('integrate',
         lambda rng, b: (rng.normal(size=b), rng.uniform(0.1, 3, b),
                         rng.uniform(0.5, 3, b)), _check_integrate),
    Case('gillespie',
         lambda rng, b: (rng.uniform(1, 5, b), rng.uniform(0.1, 1, b),
                         _i32(rng.integers(0, 10, b)),
                         rng.integers(1, 2**31 - 1, b)), _check_gillespie),
    Case('binary_search',
         lambda rng, b: (_i32(np.sort(rng.integers(0, 40, (b, 16)), axis=1)),
                         _i32(rng.integers(1, 17, b)),
                         _i32(rng.integers(0, 40, b))), _check_binary_search),
    Case('modular',
         lambda rng, b: (rng.integers(1, 1000, b), rng.integers(2, 1000, b),
                         rng.integers(0, 5000, b)), _check_modular,
         depth=20),
    Case('bfs_distance',
         lambda rng, b: (_graphs(rng, b), _i32(rng.integers(0, N_NODES, b)),
                         _i32(rng.integers(0, N_NODES, b))), _check_bfs),
    Case('reachable',
         lambda rng, b: (_graphs(rng, b), _i32(rng.integers(0, N_NODES, b))),
         _check_reachable),
    Case('metropolis',
         lambda rng, b: (rng.normal(size=b), rng.uniform(0.2, 2, b),
                         rng.normal(size=b), rng.integers(1, 2**31 - 1, b)),
         _check_metropolis),
    Case('quicksort',
         lambda rng, b: (_i32(rng.integers(0, 50, (b, 8))),
                         np.zeros(b, np.int32), _i32(rng.integers(0, 8, b))),
         _check_quicksort),
    Case('evaluate', _trees, _check_evaluate, rtol=1e-6),
    # A(3, 2) = 29 nests 31 calls deep.
    Case('ackermann',
         lambda rng, b: (rng.integers(0, 4, b), rng.integers(0, 3, b)),
         _check_ackermann, depth=32),
    Case('newton_sqrt',
         lambda rng, b: (rng.uniform(0.01, 100, b).astype(np.float32),),
         _check_sqrt, rtol=1e-6),
]

NP_BATCH = 16
TF_BATCH = 8


def leaves(value):
  return [np.asarray(x) for x in ab.instructions.pattern_flatten(value)]


def assert_same(actual, expected, rtol):
  """Values, shapes and dtypes, leaf by leaf."""
  assert type(actual) is type(expected), (type(actual), type(expected))
  actual, expected = leaves(actual), leaves(expected)
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    assert (a.shape, a.dtype) == (e.shape, e.dtype)
    if e.dtype.kind == 'f':
      np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-12)
    else:
      np.testing.assert_array_equal(a, e)


NP = build(numpy_lib())


@functools.lru_cache(maxsize=None)
def tf_programs():
  return build(tf_lib())


@functools.lru_cache(maxsize=None)
def numpy_dry_run(name):
  case = next(c for c in CASES if c.name == name)
  args = case.make_args(np.random.default_rng(7), NP_BATCH)
  return args, getattr(NP, name)(*args, dry_run=True)


@functools.lru_cache(maxsize=None)
def tf_dry_run(name):
  """Arguments (tensors) and the dry run on them, as NumPy values."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  case = next(c for c in CASES if c.name == name)
  args = [tf.constant(a) for a in
          case.make_args(np.random.default_rng(8), TF_BATCH)]
  fn = getattr(tf_programs(), name)
  alone = fn(*args, dry_run=True, backend=ab.TensorFlowBackend())
  return args, ab.instructions.pattern_map(np.asarray, alone)


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_dry_run_is_right(case):
  """The reference itself, against facts computed without autobatch_vm."""
  args, alone = numpy_dry_run(case.name)
  case.check(args, alone)


@pytest.mark.parametrize('stackless', [False, True],
                         ids=['stack_vm', 'stackless'])
@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_numpy_matches_dry_run(case, stackless):
  args, alone = numpy_dry_run(case.name)
  fn = getattr(NP, case.name)
  batched = fn(*args, stackless=stackless, max_stack_depth=case.depth)
  assert_same(batched, alone, case.rtol)
  assert fn.last_stats.utilization < 1   # members took different paths


@pytest.mark.parametrize('case', CASES, ids=lambda c: c.name)
def test_numpy_matches_facts(case):
  """The batched call against the facts."""
  args, _ = numpy_dry_run(case.name)
  case.check(args, getattr(NP, case.name)(*args, max_stack_depth=case.depth))


# Eager calls run the staged loop of `tf.function` too (through an internal
# one), so the default run stages a user's `tf.function` for a few programs
# only, and leaves the slowest XLA compilations to `-m slow`.
_FUNCTION_BY_DEFAULT = {'cube_root', 'power_iteration', 'gillespie',
                        'ackermann'}
_SLOW_XLA = {'evaluate', 'modular', 'quicksort', 'reachable', 'metropolis',
             'gradient_descent', 'integrate'}


def _tf_params():
  params = []
  for case in CASES:
    for mode in ['eager', 'function', 'xla']:
      slow = (mode == 'function' and case.name not in _FUNCTION_BY_DEFAULT or
              mode == 'xla' and case.name in _SLOW_XLA)
      params.append(pytest.param(case, mode, id=f'{case.name}-{mode}',
                                 marks=[pytest.mark.slow] if slow else []))
  return params


@pytest.mark.parametrize('case, mode', _tf_params())
def test_tensorflow_matches_dry_run(case, mode):
  tf = pytest.importorskip('tensorflow')
  args, alone = tf_dry_run(case.name)
  fn = getattr(tf_programs(), case.name)
  backend = ab.TensorFlowBackend()

  # Under a bare jit_compile nothing can raise: the call takes each
  # member's status (a recursion returning a boolean must choose it).
  status = {'on_error': 'status'} if mode == 'xla' else {}

  def call(*a):
    return fn(*a, backend=backend, max_stack_depth=case.depth, **status)
  if mode != 'eager':
    call = tf.function(call, jit_compile=(mode == 'xla'))
  out = call(*args)
  if status:
    out, ok = out
    assert np.asarray(ok).all()
  batched = ab.instructions.pattern_map(np.asarray, out)
  assert_same(batched, alone, case.rtol)
  np_args = [a.numpy() for a in args]
  case.check(np_args, batched)


_alias_ctx = ab.Context()


@_alias_ctx.batch
def _count_up(lo, hi, scale):
  i = lo          # `i += 1` must not change `lo` (quicksort's pattern)
  x = scale
  total = 0
  while i < hi:
    i += 1
    x *= 2.0      # nor `x *= 2.0` the argument `scale`
    total += 1
  return lo, i, scale, x, total


def test_dry_run_updates_rebind_variables():
  lo = np.array([0, 3, 5])
  hi = np.array([4, 4, 5])
  scale = np.array([1.0, 0.5, 2.0])
  expected = (lo, hi, scale, scale * 2.0 ** (hi - lo), hi - lo)
  for kw in [dict(dry_run=True), {}]:
    assert_same(_count_up(lo, hi, scale, **kw), expected, 0)


# -- mistakes a new user makes in such programs --------------------------------
# Each offending line carries a `# ERR:<tag>` marker; the error must name
# this file, that line and the function, and say what to do.

_SOURCE = open(__file__).read().splitlines()


def _line_of(tag):
  lines = [i + 1 for i, text in enumerate(_SOURCE)
           if text.rstrip().endswith(f'# ERR:{tag}')]
  assert len(lines) == 1, tag
  return lines[0]


def check_error(exc_info, cls, tag, function, *snippets):
  e = exc_info.value
  assert type(e) is cls, (type(e), e)
  assert (e.filename, e.lineno, e.function) == (
      __file__, _line_of(tag), function), str(e)
  for s in snippets:
    assert s in str(e), (s, str(e))


_mistakes = ab.Context()


@_mistakes.batch
def path_length(adj, start):
  visited = start[:, None] == np.arange(N_NODES)
  order = adj[:, 0, :] & False
  steps = 0
  for v in range(N_NODES):
    if adj[np.arange(len(adj)), start, v]:
      order = np.where(np.arange(N_NODES) == np.expand_dims(steps, -1),  # ERR:dtype
                       np.expand_dims(v, -1), order)
      steps += 1
  return steps, order, visited


def test_a_range_counter_written_into_a_bool_array():
  # `v` from range() is int64 on NumPy: np.where makes `order` int64 on
  # the members that write it, and the members' values together are
  # int64, as NumPy stacks them (the dry run's result).
  adj = _graphs(np.random.default_rng(0), 3)
  start = np.array([0, 1, 2])
  for stackless in (False, True):
    out = path_length(adj, start, stackless=stackless)
    alone = path_length(adj, start, dry_run=True)
    assert out[1].dtype == alone[1].dtype == np.int64
    for got, want in zip(out, alone):
      np.testing.assert_array_equal(got, want)


def test_recursion_deeper_than_the_stack_names_the_call():
  m, n = np.array([1, 3, 2]), np.array([2, 2, 1])
  with pytest.raises(errors.StackOverflowError) as e:
    NP.ackermann(m, n, max_stack_depth=8)
  assert e.value.function == 'ackermann' and 'max_stack_depth=8' in str(
      e.value) and 'members [1]' in str(e.value)
  np.testing.assert_array_equal(NP.ackermann(m, n, max_stack_depth=32),
                                [4, 29, 5])


def _column(v, i):
  """Each member's `v[b, i[b]]`, on NumPy or TensorFlow."""
  if isinstance(v, np.ndarray):
    return np.take_along_axis(v, np.reshape(i, (-1, 1)), axis=1)[:, 0]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.gather(v, tf.reshape(i, [-1]), batch_dims=1)


@_mistakes.batch
def mean_of_positives(v):
  total = v[:, 0] * 0.0
  count = 0
  for i in range(v.shape[-1]):      # the per-member length: right
    vi = _column(v, i)   # `i` holds one index per member: not v[:, i]
    if vi > 0:
      total = total + vi
      count += 1
  n = len(v)  # ERR:len
  return total / count, n


def test_a_count_of_members_is_refused():
  v = np.array([[1.0, -2.0, 3.0], [0.5, 0.5, -1.0]])
  with pytest.raises(errors.TypeInferenceError) as e:
    mean_of_positives(v)
  check_error(e, errors.TypeInferenceError, 'len', 'mean_of_positives',
              '`len(v)` gives 1 at batch size 1 and 2 at batch size 2',
              'x.shape[-1]')


def test_a_count_of_members_is_refused_on_tensorflow():
  tf = pytest.importorskip('tensorflow')
  v = tf.constant([[1.0, -2.0, 3.0], [0.5, 0.5, -1.0]])
  with pytest.raises(errors.TypeInferenceError) as e:
    mean_of_positives(v)
  check_error(e, errors.TypeInferenceError, 'len', 'mean_of_positives',
              'batch size 2')
  # Inside a graph too (`len` of a tensor is its first axis there).
  with pytest.raises(errors.TypeInferenceError) as e:
    tf.function(mean_of_positives)(v)
  check_error(e, errors.TypeInferenceError, 'len', 'mean_of_positives',
              'batch size 2')


@_mistakes.batch
def heron(a, iters=np.int32(20)):
  x = a + 1.0
  for _ in range(iters):
    x = 0.5 * (x + a / x)
  return x, math.sqrt(a)  # ERR:math


def test_a_scalar_function_of_an_array_says_the_code_is_the_cause():
  with pytest.raises(errors.PrimitiveError) as e:
    heron(np.array([2.0, 9.0]))
  check_error(e, errors.PrimitiveError, 'math', 'heron',
              'x: float64, a: float64', 'not the likely cause',
              'np.sqrt')
  assert 'type_inference=' not in str(e.value)


@pytest.mark.parametrize('batch', [1, 2])
def test_a_scalar_function_of_an_array_fails_alike_everywhere(batch):
  """The same error at any batch size, on NumPy and TensorFlow, with any
  NumPy: one that only warns for an array of one element as well."""
  tf = pytest.importorskip('tensorflow')
  a = np.array([2.0, 9.0])[:batch]
  for arg, kw in ((a, {}), (a, {'stackless': True}),
                  (tf.constant(a), {'backend': ab.TensorFlowBackend()})):
    with pytest.raises(errors.PrimitiveError) as e:
      heron(arg, **kw)
    check_error(e, errors.PrimitiveError, 'math', 'heron',
                'TypeError while inferring', 'x: float64, a: float64',
                'only 0-dimensional arrays', 'not the likely cause')


@_mistakes.batch
def bisect_tol(c, tol=1e-10):
  lo = c * 0.0
  hi = c + 1.0
  while hi - lo > tol:
    mid = 0.5 * (lo + hi)
    if mid * mid * mid > c:
      hi = mid
    else:
      lo = mid
  return lo


def test_a_python_float_default_on_tensorflow_is_a_literal():
  """`tol=1e-10` is weak on every backend: next to float64 data on
  TensorFlow it is float64, as it is on NumPy and in the dry run."""
  tf = pytest.importorskip('tensorflow')
  c = np.array([2.0, 27.0, 0.5])
  np.testing.assert_allclose(bisect_tol(c) ** 3, c, rtol=1e-8)  # NumPy
  backend = ab.TensorFlowBackend()
  out = bisect_tol(tf.constant(c), backend=backend)
  assert out.dtype == tf.float64
  alone = bisect_tol(tf.constant(c), dry_run=True, backend=backend)
  np.testing.assert_array_equal(out.numpy(), alone.numpy())
  np.testing.assert_allclose(out.numpy() ** 3, c, rtol=1e-8)


def _clamp(x, lo, hi):
  return max(lo, min(x, hi))


@_mistakes.batch
def damped_steps(x, target):
  steps = 0
  while abs(x - target) > 1e-3:
    x = x + _clamp(target - x, -0.5, 0.5)  # ERR:clamp
    steps += 1
  return x, steps


@pytest.mark.parametrize('stackless', [False, True])
def test_python_min_in_a_helper_points_to_numpy(stackless):
  # Fine at batch size 1 (type inference, each member alone); wrong for
  # several members at once.
  x, target = np.array([0.0, 2.0, -1.0]), np.array([1.0, 0.0, 3.0])
  assert damped_steps(x[:1], target[:1], dry_run=True)[1] == [2]
  with pytest.raises(errors.PrimitiveError) as e:
    damped_steps(x, target, stackless=stackless)
  check_error(e, errors.PrimitiveError, 'clamp', 'damped_steps',
              'truth value', 'np.minimum')


# A failing `assert` with an f-string message shows the message each failing
# member computes, as Python's own AssertionError shows it in a dry run.

@_mistakes.batch
def checked_sqrt(a, iters):
  x = a * 0.0 + 1.0
  for _ in range(iters):
    x = 0.5 * (x + a / x)
  err = abs(x * x - a)
  assert err < 1e-9 * a, f'sqrt({a}): x={x} after {iters} steps'  # ERR:fstring
  return x


@_mistakes.batch
def ternary_digits(n, digits):
  if n > 0:
    return ternary_digits(n // 3, digits + 1)
  assert digits < 3, f'{digits} digits'  # ERR:recursion
  return digits


@_mistakes.batch
def formats_an_array(x):
  assert x < 3, f'x is {x:.2f}'  # ERR:format
  return x


def _dry_run_message(fn, args, member, **kw):
  """Python's own AssertionError message for one member, alone (its first
  line: pytest adds the failing comparison to asserts in test modules)."""
  one = [a[member:member + 1] for a in args]
  with pytest.raises(AssertionError) as e:
    fn(*one, dry_run=True, **kw)
  return str(e.value).split('\n')[0]


def _fails_alone(fn, args, member, **kw):
  try:
    fn(*[a[member:member + 1] for a in args], dry_run=True, **kw)
  except AssertionError:
    return True
  return False


@pytest.mark.parametrize('stackless', [False, True])
def test_an_fstring_assert_shows_its_value(stackless):
  a = np.array([2.0, 1e6, 9.0, 1e8, 3e9, 7e10, 5e11, 0.5])
  args = (a, np.full(8, 8))
  failing = [i for i in range(8) if _fails_alone(checked_sqrt, args, i)]
  assert failing == [1, 3, 4, 5, 6]
  with pytest.raises(errors.AssertionFailedError) as e:
    checked_sqrt(*args, stackless=stackless)
  check_error(e, errors.AssertionFailedError, 'fstring', 'checked_sqrt',
              f'batch members {failing}: ')
  text = e.value.message
  assert "f'sqrt(" not in text   # the value, not the source
  for member in failing[:3]:
    alone = _dry_run_message(checked_sqrt, args, member)
    assert f'member {member}: {alone}' in text, (alone, text)
  assert text.count(' steps') == 3 and '; and 2 more' in text
  # The members that pass are right.
  ok = [0, 2, 7]
  np.testing.assert_allclose(
      checked_sqrt(a[ok], args[1][ok], stackless=stackless) ** 2, a[ok])


@pytest.mark.parametrize('stackless', [False, True])
def test_an_fstring_assert_in_a_recursion_shows_each_members_value(stackless):
  n = np.array([5, 80, 2, 30])     # 2, 4, 1 and 4 ternary digits
  with pytest.raises(errors.AssertionFailedError) as e:
    ternary_digits(n, np.zeros(4, np.int64), stackless=stackless)
  check_error(e, errors.AssertionFailedError, 'recursion', 'ternary_digits',
              'batch members [1, 3]: [4] digits')
  assert _dry_run_message(ternary_digits, (n, np.zeros(4, np.int64)),
                          1) == '[4] digits'


@_mistakes.batch(per_member=True)
def checked_member_sqrt(a, v):
  assert a >= 0, f'negative input {a}: {v} {v[1]} {int(a)}'  # ERR:member
  return a ** 0.5


def test_an_fstring_assert_of_a_per_member_function_shows_its_values():
  # The message read each member's values as a batch of one (`[-1.]`),
  # and indexing them failed (`v[1]`): a per-member function's values
  # have no batch axis, as in its dry run and in plain Python.
  args = (np.array([4.0, -1.0, -2.5]), np.array([[1, 2], [3, 4], [5, 6]]))
  want = [_dry_run_message(checked_member_sqrt, args, m) for m in (1, 2)]
  assert want[0] == 'negative input -1.0: [3 4] 4 -1'   # Python's
  calls = [lambda s=s: checked_member_sqrt(*args, stackless=s)
           for s in (False, True)]
  tf = pytest.importorskip('tensorflow')
  calls.append(lambda: checked_member_sqrt(*[tf.constant(a) for a in args]))
  for call in calls:
    with pytest.raises(errors.AssertionFailedError) as e:
      call()
    check_error(e, errors.AssertionFailedError, 'member',
                'checked_member_sqrt', 'batch members [1, 2]: ')
    assert (e.value.message.endswith(
        f'member 1: {want[0]}; member 2: {want[1]}')), e.value.message


def test_a_message_that_fails_to_format_says_so():
  with pytest.raises(TypeError):   # Python's own, in a dry run
    formats_an_array(np.array([5.0]), dry_run=True)
  with pytest.raises(errors.AssertionFailedError) as e:
    formats_an_array(np.array([1.0, 5.0]))
  check_error(e, errors.AssertionFailedError, 'format', 'formats_an_array',
              "batch members [1]: f'x is {x:.2f}' (computing the message "
              'raised TypeError')


@pytest.mark.parametrize('stackless', [False, True])
def test_an_fstring_assert_shows_its_value_on_tensorflow(stackless):
  tf = pytest.importorskip('tensorflow')
  args = (tf.constant([2.0, 1e6, 9.0], tf.float64), tf.constant([8, 8, 8]))
  backend = ab.TensorFlowBackend()
  with pytest.raises(errors.AssertionFailedError) as e:
    checked_sqrt(*args, backend=backend, stackless=stackless)
  alone = _dry_run_message(checked_sqrt, args, 1, backend=backend)
  check_error(e, errors.AssertionFailedError, 'fstring', 'checked_sqrt',
              f'batch members [1]: {alone}')
  assert "f'sqrt(" not in e.value.message and 'sqrt([1000000.])' in alone


# -- literal arguments of calls between batched functions ----------------------
# The batched call passes `score(x, 1)`'s `1` to `score` as a per-member
# value (one row per member), so a dry run gives the callee a batch of one
# too, as it gives the top-level function its arguments.

LEVEL_WEIGHTS = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]])


def literal_programs(lib, weights):
  """Programs passing literals to batched functions, on `lib`."""
  ctx = ab.Context()

  @ctx.batch
  def score(x, level):
    w = lib.rows(weights, level)          # a row per member: [batch, 2]
    return w[:, 0] * x[:, 0] + w[:, 1] * x[:, 1]

  @ctx.batch
  def total_score(x):
    return score(x, 1) + 2.0 * score(x, 2)

  @ctx.batch
  def shrink(x, factor):
    return x * factor + factor

  @ctx.batch
  def shrunk_twice(x):
    return shrink(shrink(x, 0.1), 0.3)

  @ctx.batch
  def rank_of_literal(x, k):
    return x * 0 + lib.rank(k)

  @ctx.batch
  def rank_of_scalar(x, k):
    return x * 0 + lib.rank(k)

  @ctx.batch
  def rank_of_vector(x, k):
    return x * 0 + lib.rank(k)

  @ctx.batch
  def ranks(x):
    return (rank_of_literal(x, 1), rank_of_scalar(x, np.int32(2)),
            rank_of_vector(x, np.zeros(3)))

  return types.SimpleNamespace(total_score=total_score,
                               shrunk_twice=shrunk_twice, ranks=ranks)


@functools.lru_cache(maxsize=None)
def numpy_literal_programs():
  lib = types.SimpleNamespace(rows=lambda table, i: table[i], rank=np.ndim)
  return literal_programs(lib, LEVEL_WEIGHTS)


@functools.lru_cache(maxsize=None)
def tf_literal_programs():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lib = types.SimpleNamespace(rows=tf.gather, rank=lambda k: tf.rank(k))
  return literal_programs(lib, tf.constant(LEVEL_WEIGHTS))


def _literal_args(name, rng):
  if name == 'total_score':
    return (rng.normal(size=(5, 2)),)
  if name == 'shrunk_twice':
    return (rng.normal(size=5).astype(np.float32),)
  return (_i32(rng.integers(0, 9, 5)),)


def _literal_expected(name, args):
  x = args[0]
  if name == 'total_score':
    w = LEVEL_WEIGHTS
    return x @ w[1] + 2.0 * (x @ w[2])
  if name == 'shrunk_twice':
    f1, f2 = np.float32(0.1), np.float32(0.3)
    return (x * f1 + f1) * f2 + f2          # float32 throughout
  # Each `k` has the batch axis: a scalar has rank 1, a vector rank 2.
  return tuple(np.full(5, r, np.int32) for r in (1, 1, 2))


@pytest.mark.parametrize('name', ['total_score', 'shrunk_twice', 'ranks'])
@pytest.mark.parametrize('stackless', [False, True],
                         ids=['stack_vm', 'stackless'])
def test_a_literal_argument_is_a_member_value_in_a_dry_run(name, stackless):
  fn = getattr(numpy_literal_programs(), name)
  args = _literal_args(name, np.random.default_rng(3))
  alone = fn(*args, dry_run=True)
  expected = _literal_expected(name, args)
  assert_same(alone, expected, 0)
  assert_same(fn(*args, stackless=stackless), alone, 0)


@pytest.mark.parametrize('name', ['total_score', 'shrunk_twice', 'ranks'])
def test_a_literal_argument_is_a_member_value_in_a_tf_dry_run(name):
  tf = pytest.importorskip('tensorflow')
  fn = getattr(tf_literal_programs(), name)
  args = [tf.constant(a) for a in _literal_args(name, np.random.default_rng(4))]
  backend = ab.TensorFlowBackend()
  alone = ab.instructions.pattern_map(
      np.asarray, fn(*args, dry_run=True, backend=backend))
  batched = ab.instructions.pattern_map(np.asarray,
                                        fn(*args, backend=backend))
  assert_same(batched, alone, 1e-6)
  expected = _literal_expected(name, [a.numpy() for a in args])
  assert_same(alone, expected, 1e-6)


# -- reductions over the batch axis --------------------------------------------
# `w.sum()` in a primitive sums over axis 0, the batch: every member would
# get the batch's sum.  Type inference runs such a primitive on two made-up
# members and refuses it where the first member's result follows the
# second member's values.

@_mistakes.batch
def resample(w, u):
  p = w / w.sum()  # ERR:batchsum
  c = np.cumsum(p, axis=-1)
  return np.sum(c < u[:, None], axis=-1)


@_mistakes.batch
def resample_per_member(w, u):
  p = w / w.sum(axis=-1, keepdims=True)
  c = np.cumsum(p, axis=-1)
  return np.sum(c < u[:, None], axis=-1)


@_mistakes.batch
def largest_gap(x):
  s = np.sort(x, axis=0)  # ERR:sort0
  return s[:, -1] - s[:, 0]


@_mistakes.batch
def centered(v):
  return v - lib_tf_sum(v)  # ERR:tfsum


def lib_tf_sum(v):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.reduce_sum(v)


@pytest.mark.parametrize('stackless', [False, True])
def test_a_reduction_over_the_batch_is_refused(stackless):
  rng = np.random.default_rng(5)
  w, u = rng.uniform(0.1, 1, (6, 4)), rng.uniform(0, 1, 6)
  with pytest.raises(errors.TypeInferenceError) as e:
    resample(w, u, stackless=stackless)
  check_error(e, errors.TypeInferenceError, 'batchsum', 'resample',
              '`w / w.sum()` mixes batch members', 'axis=-1')
  # Per member, as written, each member alone agrees with the batch.
  alone = resample_per_member(w, u, dry_run=True)
  assert_same(resample_per_member(w, u, stackless=stackless), alone, 0)
  with pytest.raises(errors.TypeInferenceError) as e:
    largest_gap(rng.normal(size=(5, 3)), stackless=stackless)
  check_error(e, errors.TypeInferenceError, 'sort0', 'largest_gap',
              'mixes batch members')


def test_a_reduction_over_the_batch_is_refused_on_tensorflow():
  tf = pytest.importorskip('tensorflow')
  with pytest.raises(errors.TypeInferenceError) as e:
    centered(tf.constant([1.0, 2.0, 4.0]))
  check_error(e, errors.TypeInferenceError, 'tfsum', 'centered',
              'mixes batch members')


_random_ctx = ab.Context()
_calls = []


def _counted(x):
  _calls.append(1)
  return x + len(_calls)          # a different result at every call


@_random_ctx.batch
def random_walk(x, steps):
  for _ in range(steps):
    x = x + np.random.normal(size=x.shape)
  return x


@_random_ctx.batch
def seeded_noise(x):
  return x + np.random.default_rng(0).normal(size=x.shape)


@_random_ctx.batch
def counted(x):
  return _counted(x)


def _tf_noise(x):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.random.normal(tf.shape(x), dtype=x.dtype)


@_random_ctx.batch
def tf_random_walk(x, steps):
  for _ in range(steps):
    x = x + _tf_noise(x)
  return x


@pytest.mark.parametrize('stackless', [False, True])
def test_random_and_stateful_primitives_are_not_taken_for_mixing(stackless):
  # Their results differ from call to call, or follow a member's position
  # in the batch (one generator per call), never another member's values.
  x = np.zeros((7, 2))
  assert random_walk(x, np.full(7, 3), stackless=stackless).shape == (7, 2)
  out = seeded_noise(x, stackless=stackless)
  assert out.shape == (7, 2) and len(np.unique(out)) == 14
  assert counted(x, stackless=stackless).shape == (7, 2)


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
def test_random_primitives_are_not_taken_for_mixing_on_tensorflow(mode):
  # Under tf.function and XLA the check runs the primitive out of the
  # graph only where its ops built in the graph draw nothing.
  tf = pytest.importorskip('tensorflow')
  run = tf_random_walk
  if mode != 'eager':
    run = tf.function(lambda x, n: tf_random_walk(x, n),
                      jit_compile=mode == 'xla', autograph=False)
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.MemberMixingWarning)
    out = run(tf.zeros([7, 2], tf.float64), tf.fill([7], 3))
  assert out.shape == (7, 2)
  assert len(np.unique(np.asarray(out))) == 14


# -- values a helper gets: a batch of one in the dry run too -------------------
# In the batched call a helper gets one row per member of every value: the
# arguments, but also a row `np.arange(W + 1)` built in the function, a
# counter, a local `zero = la * 0`, another primitive's result.  A dry run gives
# it each member's row, a batch of one, so a helper written for the batch
# (`np.take_along_axis(row, j[:, None], axis=1)`) runs in both.

EDIT_WIDTH = 6


def edit_lib(tf=None):
  """Batch-aware row access: `get(row, j)` is `row[m, j[m]]` per member."""
  if tf is None:
    def get(row, j):
      return np.take_along_axis(row, j[:, None], axis=1)[:, 0]

    def put(row, j, v):
      out = row.copy()
      np.put_along_axis(out, j[:, None], v[:, None], axis=1)
      return out
    return types.SimpleNamespace(get=get, put=put, minimum=np.minimum,
                                 where=np.where)

  def tf_get(row, j):
    return tf.gather(row, j, batch_dims=1)

  def tf_put(row, j, v):
    hit = tf.range(tf.shape(row)[1], dtype=j.dtype)[None, :] == j[:, None]
    return tf.where(hit, v[:, None], row)
  def tf_where(c, x, y):   # tf.where makes Python ints int32
    return tf.where(c, tf.cast(x, tf.int64), tf.cast(y, tf.int64))
  return types.SimpleNamespace(get=tf_get, put=tf_put, minimum=tf.minimum,
                               where=tf_where)


def edit_programs(lib):
  ctx = ab.Context()

  @ctx.batch
  def levenshtein(a, b, la, lb):
    prev = np.arange(EDIT_WIDTH + 1)
    cur = np.zeros(EDIT_WIDTH + 1, np.int64)
    zero = la * 0
    i = 1
    while i <= la:
      cur = lib.put(cur, zero, i)
      for j in range(1, lb + 1):
        same = lib.get(a, i - 1) == lib.get(b, j - 1)
        cost = lib.where(same, zero, zero + 1)
        d = lib.minimum(lib.minimum(lib.get(prev, j) + 1,
                                    lib.get(cur, j - 1) + 1),
                        lib.get(prev, j - 1) + cost)
        cur = lib.put(cur, j, d)
      prev = cur
      i += 1
    return lib.get(prev, lb)

  @ctx.batch
  def distance_and_row(a, b, la, lb):
    row = np.arange(EDIT_WIDTH + 1)   # a constant handed to a callee
    return levenshtein(a, b, la, lb), first_cells(row, la)

  @ctx.batch
  def first_cells(row, n):
    return lib.get(row, n) + lib.get(row, n * 0)

  return types.SimpleNamespace(levenshtein=levenshtein,
                               distance_and_row=distance_and_row)


def _levenshtein_alone(s, t):
  """One member, in plain Python."""
  prev = list(range(len(t) + 1))
  for i in range(1, len(s) + 1):
    cur = [i] + [0] * len(t)
    for j in range(1, len(t) + 1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1,
                   prev[j - 1] + (s[i - 1] != t[j - 1]))
    prev = cur
  return prev[len(t)]


def _edit_args(rng, batch=5):
  a = rng.integers(0, 3, (batch, EDIT_WIDTH))
  b = rng.integers(0, 3, (batch, EDIT_WIDTH))
  la = rng.integers(0, EDIT_WIDTH + 1, batch)
  lb = rng.integers(0, EDIT_WIDTH + 1, batch)
  la[0], lb[0] = EDIT_WIDTH, EDIT_WIDTH     # the longest, and ...
  la[1] = 0                                 # ... an empty string
  expected = np.array([_levenshtein_alone(list(a[m, :la[m]]),
                                          list(b[m, :lb[m]]))
                       for m in range(batch)])
  return (a, b, la, lb), expected


@pytest.mark.parametrize('stackless', [False, True],
                         ids=['stack_vm', 'stackless'])
def test_helpers_get_batches_of_one_in_a_dry_run(stackless):
  progs = edit_programs(edit_lib())
  args, expected = _edit_args(np.random.default_rng(11))
  alone = progs.levenshtein(*args, dry_run=True)
  assert_same(alone, expected, 0)
  assert_same(progs.levenshtein(*args, stackless=stackless), alone, 0)
  both = progs.distance_and_row(*args, dry_run=True)
  assert_same(both, (expected, args[2]), 0)
  assert_same(progs.distance_and_row(*args, stackless=stackless), both, 0)


@pytest.mark.parametrize('mode', ['eager', 'function'])
def test_helpers_get_batches_of_one_in_a_tf_dry_run(mode):
  tf = pytest.importorskip('tensorflow')
  progs = edit_programs(edit_lib(tf))
  args, expected = _edit_args(np.random.default_rng(12))
  args = [tf.constant(x) for x in args]
  backend = ab.TensorFlowBackend()
  alone = progs.levenshtein(*args, dry_run=True, backend=backend)
  assert_same(alone.numpy(), expected, 0)

  def call(*a):
    return progs.distance_and_row(*a, backend=backend)
  if mode == 'function':
    call = tf.function(call)
  batched = ab.instructions.pattern_map(np.asarray, call(*args))
  both = ab.instructions.pattern_map(np.asarray, progs.distance_and_row(
      *args, dry_run=True, backend=backend))
  assert_same(batched, both, 0)
  assert_same(both, (expected, args[2].numpy()), 0)


# -- Python numbers as arguments: literals -------------------------------------
# `damped_newton_sqrt(x_f32, 12, 0.5)`: 12 and 0.5 take the dtype they meet,
# as they would written in the function, so float32 data stays float32 on
# every backend and in the dry run.

_newton_ctx = ab.Context()


@_newton_ctx.batch
def damped_newton_sqrt(x, iters, damping=0.5):
  y = x
  k = 0
  while k < iters:
    y = y - damping * (y - x / y)
    k += 1
  return y


def _newton_alone(x, iters, damping):
  """One member, in plain Python on a NumPy float32 scalar, with the
  Python number in x's dtype, as NumPy 2 promotes it (NEP 50) and the
  library does on every NumPy (NumPy 1 makes float32 scalar times a
  Python float a float64)."""
  damping = x.dtype.type(damping)
  y = x
  for _ in range(iters):
    y = y - damping * (y - x / y)
  return y


_NEWTON_X = np.array([1.0, 2.0, 9.0, 0.25, 30.0], np.float32)


@pytest.mark.parametrize('stackless', [False, True],
                         ids=['stack_vm', 'stackless'])
@pytest.mark.parametrize('given', [(12, 0.5), (12,), (np.int32(60), 0.25)],
                         ids=['passed', 'default', 'int32_iters'])
def test_python_number_arguments_keep_float32(given, stackless):
  alone = damped_newton_sqrt(_NEWTON_X, *given, dry_run=True)
  batched = damped_newton_sqrt(_NEWTON_X, *given, stackless=stackless)
  assert alone.dtype == batched.dtype == np.float32
  np.testing.assert_array_equal(batched, alone)
  damping = given[1] if len(given) > 1 else 0.5
  expected = np.array([_newton_alone(x, int(given[0]), damping)
                       for x in _NEWTON_X])
  assert expected.dtype == np.float32
  np.testing.assert_array_equal(alone, expected)
  np.testing.assert_allclose(alone, np.sqrt(_NEWTON_X), rtol=1e-6)


@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
def test_python_number_arguments_keep_float32_on_tensorflow(mode):
  tf = pytest.importorskip('tensorflow')
  backend = ab.TensorFlowBackend()
  x = tf.constant(_NEWTON_X)

  def call(x):
    return damped_newton_sqrt(x, 12, 0.5, backend=backend)
  if mode != 'eager':
    call = tf.function(call, jit_compile=(mode == 'xla'))
  batched = call(x)
  alone = damped_newton_sqrt(x, 12, 0.5, dry_run=True, backend=backend)
  assert batched.dtype == alone.dtype == tf.float32
  np.testing.assert_allclose(batched.numpy(), alone.numpy(), rtol=1e-6)
  np.testing.assert_allclose(alone.numpy(), np.sqrt(_NEWTON_X), rtol=1e-6)


def test_a_python_number_alone_is_int64_or_float64():
  """Alone, a Python number argument has NumPy's dtype for it on every
  backend, as a literal written in the function does."""
  x = np.array([1, 2, 3], np.int32)
  assert damped_newton_sqrt(x * 0 + 4.0, 3, 1.0).dtype == np.float64
  tf = pytest.importorskip('tensorflow')
  out = damped_newton_sqrt(tf.constant([4.0, 9.0], tf.float64), 3, 1.0)
  assert out.dtype == tf.float64


width = np.zeros(2)   # a global sharing the name of a function's variable


def test_a_lambda_reads_the_functions_variables_not_a_global():
  # A lambda passed to a call (np.apply_along_axis, tf.map_fn) read a
  # global of the same name as the function's variable, silently, or
  # failed with a NameError where there was none.
  ctx = ab.Context()

  @ctx.batch
  def scaled(x, width):
    return np.apply_along_axis(lambda r: r * width.shape[-1] + offset, 1, x)

  offset = 0.5
  x = np.array([[1.0, 2.0], [3.0, 4.0]])
  w = np.ones((2, 3))
  np.testing.assert_allclose(scaled(x, w), x * 3 + 0.5)
  np.testing.assert_allclose(scaled(x, w, dry_run=True), x * 3 + 0.5)
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  @ctx.batch
  def mapped(x, width):
    return tf.map_fn(lambda r: r * tf.cast(tf.shape(width)[-1], r.dtype), x)

  for run in (mapped, tf.function(mapped)):
    np.testing.assert_allclose(run(tf.constant(x), tf.constant(w)), x * 3)


def test_a_none_local_tested_in_a_conditional_expression():
  # `y = None; -1 if y is None else y`: the side Python does not run was
  # run for the joint type, and None made an object array (refused).
  ctx = ab.Context()

  @ctx.batch
  def default(x):
    y = None
    return (-1 if y is None else y) + x

  np.testing.assert_array_equal(default(np.array([1, 2])), [0, 1])
  np.testing.assert_array_equal(default(np.array([1, 2]), dry_run=True),
                                [0, 1])


def _declared_first(x, c):
  r = None
  if c > 0:
    r = x + 1
  else:
    r = x - 1
  return r


@pytest.mark.parametrize('per_member', [False, True])
def test_a_none_assigned_and_written_over_runs(per_member):
  # `r = None` that both branches write over ran on NumPy and failed on
  # TensorFlow ('None values not supported').  A None that is read
  # (`best_i is None`): tests/test_optional_locals.py.
  x, c = np.array([1.0, 2.0, 3.0]), np.array([1, -1, 0])
  declared = ab.Context().batch(per_member=per_member)(_declared_first)
  run_everywhere(declared, [x, c])
  np.testing.assert_array_equal(declared(x, c), [2.0, 1.0, 2.0])

