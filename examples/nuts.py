"""The No-U-Turn sampler, many chains batched by autobatch_vm.

NUTS (Hoffman & Gelman 2014: recursive tree doubling as in Algorithm 3;
step size found by Algorithm 4 and adapted by dual averaging, Algorithm 5),
with multinomial sampling along the trajectory as Stan and TensorFlow
Probability do (Betancourt 2017): each point weighs exp(-H), a subtree
takes its new half's proposal with probability w'' / (w' + w''), and the
top level moves to a new subtree's with probability min(1, w_new / w_old)
(biased progressive sampling).  Over 14 seeds of 64 chains x 500 samples
on the logistic regression its min ESS averaged 3.9% above Algorithm 3's
slice sampling, with the same leapfrogs.

NUTS is control-heavy: every chain builds its own binary tree of leapfrog
steps, to its own depth, stopping early where the trajectory makes a
U-turn.  Written for ONE chain below, it runs for a batch of chains with
the state as arrays `[chains, dim]`: each leapfrog step is one gradient
evaluation for all the chains that are at a leaf of their tree.  The
recursion's last two levels (four leapfrogs) and a transition's first two
doublings (three leapfrogs) are written out, so that each takes one VM
step (docs/guide.md, section 6).

Random numbers inside batched code come from a counter-based generator
(splitmix64 of a per-chain seed and a per-chain counter threaded through the
recursion), so a chain draws the same numbers whether it runs alone or in a
batch, whatever the other chains do.

Targets: Bayesian logistic regression on synthetic data shaped like the
German credit data set (1000 x 25, fixed seed), and a correlated Gaussian.
Gradients are written by hand for NumPy; the TensorFlow path (tf.function,
optionally XLA) uses tf.GradientTape.  As the generator is counter-based,
the TensorFlow chains equal the NumPy chains up to rounding, which the
example checks.

    python examples/nuts.py                              # logistic regression
    python examples/nuts.py --target=gaussian --dim=10
    python examples/nuts.py --num_chains=256 --num_samples=1000
    python examples/nuts.py --backend=xla --num_chains=128
    python examples/nuts.py --per_member                 # one chain's math

With `--per_member` the sampler's primitives are written for one chain
(`numpy_member_lib`, `tf_member_lib`: `x @ beta`, `np.dot(r, r)`, no batch
axis) and its functions are per-member functions
(`ctx.batch(per_member=True)`); the backend batches that math.  The chains
are the batch-aware form's, which the example checks.
"""

import os
# Small matrix products: one BLAS thread is faster, and timings on a shared
# machine steadier, than several (set the variable yourself to override).
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import collections  # pylint: disable=g-import-not-at-top,wrong-import-position
import time  # pylint: disable=g-import-not-at-top,wrong-import-position
import types  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

import autobatch_vm as ab  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags():
  """Command-line flags (defined only when run as a script, so that the
  examples can be imported together, e.g. by the tests)."""
  flags.DEFINE_enum('target', 'logistic', ['logistic', 'gaussian'],
                    'logistic: Bayesian logistic regression on German-credit-'
                    'shaped synthetic data; gaussian: a correlated Gaussian.')
  flags.DEFINE_integer('num_chains', 32, 'Chains run as one batch.')
  flags.DEFINE_integer('num_warmup', 100, 'Warmup (step-size adaptation) '
                       'iterations per chain.')
  flags.DEFINE_integer('num_samples', 200, 'Kept iterations per chain.')
  flags.DEFINE_integer('chunk', 25, 'Iterations per batched call: chains '
                       'drift apart within a call and wait for each other at '
                       'its end.')
  flags.DEFINE_integer('max_tree_depth', 10, 'Most doublings per iteration.')
  flags.DEFINE_float('target_accept', 0.8, 'Dual averaging target (delta).')
  flags.DEFINE_integer('dim', 10, 'Dimension of the Gaussian target.')
  flags.DEFINE_float('rho', 0.9, 'Correlation of neighbouring coordinates of '
                     'the Gaussian target (Sigma_ij = s_i s_j rho^|i-j|).')
  flags.DEFINE_integer('seed', 0, 'Seed of the chains.')
  flags.DEFINE_integer('verify_chains', 2, 'Chains also run alone (dry_run) '
                       'for one chunk and compared with the batch; 0 skips.')
  flags.DEFINE_enum('schedule', 'most', ['most', 'lowest'],
                    'VM block choice: the block with the most chains, or the '
                    'lowest-numbered block that has any.')
  flags.DEFINE_boolean('per_member', False, 'The sampler over primitives '
                       'written for one chain (per_member=True), checked '
                       'against the batch-aware form.')
  flags.DEFINE_enum('backend', 'numpy', ['numpy', 'tf', 'xla'],
                    'numpy; tf: tf.function; xla: tf.function(jit_compile='
                    'True).  tf and xla fall back to numpy without '
                    'autobatch_vm.tf_backend.')


DELTA_MAX = 1000.0   # divergence: H - H0 above this ends a trajectory
GAMMA, T0, KAPPA = 0.05, 10.0, 0.75   # dual averaging constants (Alg. 5)


# ---------------------------------------------------------------------------
# Targets: log density and its gradient, batched over chains.
# ---------------------------------------------------------------------------

Target = collections.namedtuple(
    'Target', ['name', 'dim', 'log_prob_and_grad', 'tf_log_prob',
               'true_mean', 'true_var', 'member_log_prob_and_grad',
               'tf_member_log_prob'])
Target.__doc__ = """A target density: `log_prob_and_grad` and `tf_log_prob`
batch-aware (`theta` of shape [chains, dim]), `member_log_prob_and_grad`
and `tf_member_log_prob` written for one chain (`theta` of shape [dim])."""


def german_credit_like_data(seed=1234, num_data=1000, num_features=25):
  """Synthetic stand-in for German credit: standardized features, intercept.

  Returns X [1000, 25] (first column ones) and labels y in {0, 1} drawn
  from a logistic model with weights ~ N(0, 0.5^2).
  """
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(num_data, num_features - 1))
  x = np.concatenate([np.ones((num_data, 1)), x], axis=1)
  beta = rng.normal(scale=0.5, size=num_features)
  y = (rng.uniform(size=num_data) < 1 / (1 + np.exp(-x @ beta))).astype(
      np.float64)
  return x, y


def logistic_regression_target(prior_scale=1.0):
  """Posterior of weights beta ~ N(0, prior_scale^2 I), y ~ Bern(s(X beta))."""
  x, y = german_credit_like_data()
  xt = np.ascontiguousarray(x.T)

  def log_prob_and_grad(beta):            # beta: [chains, 25]
    logits = beta @ xt                    # [chains, 1000]
    e = np.exp(-np.abs(logits))           # stable softplus and sigmoid
    softplus = np.maximum(logits, 0.0) + np.log1p(e)
    log_lik = (y * logits - softplus).sum(axis=-1)
    log_prior = -0.5 * (beta * beta).sum(axis=-1) / prior_scale**2
    probs = np.where(logits >= 0, 1.0, e) / (1.0 + e)
    grad = (y - probs) @ x - beta / prior_scale**2
    return log_lik + log_prior, grad

  def tf_log_prob(beta):
    # TensorFlow's logistic loss, max(l, 0) - y l + log1p(exp(-|l|)), as
    # the NumPy version above: its gradient by autodiff reuses exp(-|l|).
    # Under XLA a leapfrog step then costs about 0.77x one with
    # y l - tf.nn.softplus(l), whose gradient computes a sigmoid afresh; in
    # graph mode, where each op is a kernel of its own, about 1.3x.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logits = tf.linalg.matmul(beta, tf.constant(xt))
    log_lik = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(tf.constant(y), tf.shape(logits)),
        logits=logits), axis=-1)
    return log_lik - 0.5 * tf.reduce_sum(beta * beta, -1) / prior_scale**2

  def member_log_prob_and_grad(beta):     # one chain: beta [25]
    logits = x @ beta                     # [1000]
    e = np.exp(-np.abs(logits))
    softplus = np.maximum(logits, 0.0) + np.log1p(e)
    log_lik = np.sum(y * logits - softplus)
    log_prior = -0.5 * np.dot(beta, beta) / prior_scale**2
    probs = np.where(logits >= 0, 1.0, e) / (1.0 + e)
    grad = (y - probs) @ x - beta / prior_scale**2
    return log_lik + log_prior, grad

  def tf_member_log_prob(beta):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logits = tf.linalg.matvec(tf.constant(x), beta)
    log_lik = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.constant(y), logits=logits))
    return log_lik - 0.5 * tf.reduce_sum(beta * beta) / prior_scale**2

  return Target('logistic regression (1000 x 25)', x.shape[1],
                log_prob_and_grad, tf_log_prob, None, None,
                member_log_prob_and_grad, tf_member_log_prob)


def gaussian_target(dim, rho):
  """N(mu, Sigma), Sigma_ij = s_i s_j rho^|i-j|, scales s from 0.5 to 2."""
  mu = np.linspace(-1.0, 1.0, dim)
  scales = np.geomspace(0.5, 2.0, dim)
  idx = np.arange(dim)
  cov = scales[:, None] * scales[None, :] * rho ** np.abs(
      idx[:, None] - idx[None, :])
  prec = np.linalg.inv(cov)

  def log_prob_and_grad(theta):
    d = theta - mu
    g = -d @ prec
    return 0.5 * (d * g).sum(axis=-1), g

  def tf_log_prob(theta):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    d = theta - tf.constant(mu)
    return -0.5 * tf.reduce_sum(d * tf.linalg.matmul(d, tf.constant(prec)),
                                axis=-1)

  def member_log_prob_and_grad(theta):    # one chain: theta [dim]
    d = theta - mu
    g = -d @ prec
    return 0.5 * np.dot(d, g), g

  def tf_member_log_prob(theta):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    d = theta - tf.constant(mu)
    return -0.5 * tf.tensordot(d, tf.linalg.matvec(tf.constant(prec), d), 1)

  return Target(f'correlated Gaussian (dim {dim}, rho {rho})', dim,
                log_prob_and_grad, tf_log_prob, mu, np.diag(cov).copy(),
                member_log_prob_and_grad, tf_member_log_prob)


# ---------------------------------------------------------------------------
# Array primitives, in a NumPy and a TensorFlow version.  Each runs on whole
# batches (axis 0 = chains), members not at the calling block included.
# ---------------------------------------------------------------------------

Point = collections.namedtuple('Point', ['theta', 'r', 'logp', 'grad'])
DualAveraging = collections.namedtuple(
    'DualAveraging', ['log_eps', 'log_eps_bar', 'h_bar', 'm', 'mu'])

_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64_np(z):
  z = z + np.uint64(_GOLDEN)
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return z ^ (z >> np.uint64(31))


def _splitmix64_tf(z):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  u64 = lambda v: tf.constant(v, tf.uint64)
  z = z + u64(_GOLDEN)
  z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, u64(30)))
  z = z * u64(0xBF58476D1CE4E5B9)
  z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, u64(27)))
  z = z * u64(0x94D049BB133111EB)
  return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, u64(31)))


def _unit_tf(b):
  """Random bits `b` (uint64) as uniforms in (0, 1)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  b = tf.cast(tf.bitwise.right_shift(b, tf.constant(11, tf.uint64)),
              tf.float64)
  return (b + 0.5) * 2.0**-53


def _stream_tf(seed, counter, width):
  """seed * golden + counter * width: where a chain's draw starts."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  counter = tf.cast(tf.cast(counter, tf.int64), tf.uint64)
  if width != 1:
    counter = counter * tf.constant(width, tf.uint64)
  return tf.cast(seed, tf.uint64) * tf.constant(_GOLDEN, tf.uint64) + counter


def _gradient_tf(log_prob):
  """`log_prob_and_grad(theta)` of `log_prob` on TensorFlow, by
  GradientTape."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def log_prob_and_grad(theta):
    with tf.GradientTape() as tape:
      tape.watch(theta)
      logp = log_prob(theta)
    return logp, tape.gradient(logp, theta)
  return log_prob_and_grad


def _leapfrog(point, step, log_prob_and_grad):
  """One leapfrog step of size `step` (broadcasting against the point's
  vectors) from `point`."""
  r = point.r + 0.5 * step * point.grad
  theta = point.theta + step * r
  logp, grad = log_prob_and_grad(theta)
  return Point(theta, r + 0.5 * step * grad, logp, grad)


def numpy_lib(target):
  """The primitives on NumPy arrays."""
  dim = target.dim

  def bits(seed, counter, width):
    # One stream per chain: splitmix64(seed * golden + counter * width + k).
    counter = np.asarray(counter).astype(np.uint64)
    base = (np.asarray(seed) * np.uint64(_GOLDEN)
            + counter * np.uint64(width))
    return _splitmix64_np(base[:, None] + np.arange(width, dtype=np.uint64))

  def uniform(seed, counter):
    """[chains] uniforms in (0, 1): draw number `counter` of each chain."""
    b = bits(seed, counter, 1)[:, 0]
    return ((b >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53

  def normal(seed, counter):
    """[chains, dim] standard normals (Box-Muller) at draw `counter`."""
    b = bits(seed, counter, 2 * dim)
    u = ((b >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    u1, u2 = u[:, :dim], u[:, dim:]
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

  def leapfrog(point, step):
    return _leapfrog(point, np.asarray(step)[:, None],
                     target.log_prob_and_grad)

  def where(cond, x, y):
    """Per chain, `x` where `cond` else `y` (arrays, or namedtuples)."""
    if isinstance(x, tuple):
      return type(x)(*[where(cond, a, b) for a, b in zip(x, y)])
    x = np.asarray(x)
    return np.where(np.reshape(cond, (-1,) + (1,) * (x.ndim - 1)), x, y)

  def put(samples, i, theta):
    """samples[:, i] = theta, for a per-chain (or Python int) index i."""
    hit = np.arange(samples.shape[1]) == np.reshape(i, (-1, 1))
    return np.where(hit[:, :, None], theta[:, None, :], samples)

  return types.SimpleNamespace(
      uniform=uniform, normal=normal, where=where,
      # The gradient is the expensive step: run it for every chain at a
      # leaf of its tree at once (see ab.sync_point).
      leapfrog=ab.sync_point(leapfrog),
      put=put, log=np.log, exp=np.exp, minimum=np.minimum,
      logaddexp=np.logaddexp,
      sqrt=np.sqrt, to_float=lambda x: np.asarray(x, np.float64),
      to_int=lambda x: np.asarray(x, np.int64),
      kinetic=lambda r: 0.5 * (r * r).sum(axis=-1),
      dot=lambda a, b: (a * b).sum(axis=-1),
      zeros_samples=lambda theta, n: np.zeros(
          (theta.shape[0], n, theta.shape[1])),
      direction=lambda u: np.where(u < 0.5, -1.0, 1.0),
      log_prob_and_grad=target.log_prob_and_grad)


def tf_lib(target):
  """The same primitives on TensorFlow tensors (gradients by GradientTape)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dim = target.dim
  splitmix64, to_unit, stream = _splitmix64_tf, _unit_tf, _stream_tf
  log_prob_and_grad = _gradient_tf(target.tf_log_prob)

  def bits(seed, counter, width):
    offsets = tf.cast(tf.range(width, dtype=tf.int64), tf.uint64)
    return splitmix64(stream(seed, counter, width)[:, None] + offsets)

  def leapfrog(point, step):
    return _leapfrog(point, tf.convert_to_tensor(step, tf.float64)[:, None],
                     log_prob_and_grad)

  def where(cond, x, y):
    # Per chain: one reshape of `cond` per rank of x's leaves, not per leaf
    # (a Point is three [chains, dim] tensors and a [chains] one).
    cond = tf.convert_to_tensor(cond)
    by_rank = {1: cond}

    def pick(a, b):
      a = tf.convert_to_tensor(a)
      rank = len(a.shape)
      if rank not in by_rank:
        by_rank[rank] = tf.reshape(cond, [-1] + [1] * (rank - 1))
      return tf.where(by_rank[rank], a, b)
    if isinstance(x, tuple):
      return type(x)(*map(pick, x, y))
    return pick(x, y)

  def put(samples, i, theta):
    i = tf.cast(tf.reshape(i, [-1, 1]), tf.int64)
    hit = tf.range(tf.shape(samples, out_type=tf.int64)[1]) == i
    return tf.where(hit[:, :, None], theta[:, None, :], samples)

  def normal(seed, counter):
    u = to_unit(bits(seed, counter, 2 * dim))
    u1, u2 = u[:, :dim], u[:, dim:]
    return tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(2.0 * np.pi * u2)

  def uniform(seed, counter):
    # bits(seed, counter, 1)[:, 0], without the offsets and the column.
    return to_unit(splitmix64(stream(seed, counter, 1)))

  def logaddexp(a, b):
    # As np.logaddexp (-inf where both are -inf), broadcasting: a chain
    # run alone (dry_run) starts from the Python float log_w = 0.0.
    a = tf.convert_to_tensor(a, tf.float64)
    b = tf.convert_to_tensor(b, tf.float64)
    shape = tf.broadcast_dynamic_shape(tf.shape(a), tf.shape(b))
    return tf.reduce_logsumexp(
        tf.stack([tf.broadcast_to(a, shape), tf.broadcast_to(b, shape)]),
        axis=0)

  return types.SimpleNamespace(
      uniform=uniform,
      normal=normal, leapfrog=ab.sync_point(leapfrog), where=where, put=put,
      log=tf.math.log, exp=tf.exp, minimum=tf.minimum, sqrt=tf.sqrt,
      logaddexp=logaddexp,
      to_float=lambda x: tf.cast(x, tf.float64),
      to_int=lambda x: tf.cast(x, tf.int64),
      kinetic=lambda r: 0.5 * tf.reduce_sum(r * r, axis=-1),
      dot=lambda a, b: tf.reduce_sum(a * b, axis=-1),
      zeros_samples=lambda theta, n: tf.zeros(
          [tf.shape(theta)[0], n, theta.shape[1]], tf.float64),
      direction=lambda u: tf.where(u < 0.5, tf.constant(-1.0, tf.float64),
                                   tf.constant(1.0, tf.float64)),
      log_prob_and_grad=log_prob_and_grad)


# ---------------------------------------------------------------------------
# The same primitives written for one chain, for the sampler's per-member
# form (`per_member=True`): theta, r and grad are vectors [dim], the rest
# scalars, and the math is one chain's (`np.dot`, `x @ beta`, `samples[i]
# = theta`).  The backend batches them.
# ---------------------------------------------------------------------------

def numpy_member_lib(target):
  """`numpy_lib`'s primitives for one chain, on NumPy."""
  dim = target.dim

  def bits(seed, counter, width):
    with np.errstate(over='ignore'):   # NumPy's scalars warn; wrapping is meant
      start = (seed * np.uint64(_GOLDEN)
               + counter.astype(np.uint64) * np.uint64(width))
    return _splitmix64_np(start + np.arange(width, dtype=np.uint64))

  def to_unit(b):
    return ((b >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53

  def normal(seed, counter):
    u = to_unit(bits(seed, counter, 2 * dim))
    return np.sqrt(-2.0 * np.log(u[:dim])) * np.cos(2.0 * np.pi * u[dim:])

  def leapfrog(point, step):
    return _leapfrog(point, step, target.member_log_prob_and_grad)

  def where(cond, x, y):
    if isinstance(x, tuple):
      return type(x)(*[np.where(cond, a, b) for a, b in zip(x, y)])
    return np.where(cond, x, y)

  def put(samples, i, theta):
    samples = samples.copy()
    samples[i] = theta
    return samples

  return types.SimpleNamespace(
      uniform=lambda seed, counter: to_unit(bits(seed, counter, 1)[0]),
      normal=normal, where=where, leapfrog=ab.sync_point(leapfrog), put=put,
      log=np.log, exp=np.exp, minimum=np.minimum, logaddexp=np.logaddexp,
      sqrt=np.sqrt, to_float=lambda x: x.astype(np.float64),
      to_int=lambda x: x.astype(np.int64),
      kinetic=lambda r: 0.5 * np.dot(r, r), dot=np.dot,
      zeros_samples=lambda theta, n: np.zeros((n, len(theta))),
      direction=lambda u: np.where(u < 0.5, -1.0, 1.0),
      log_prob_and_grad=target.member_log_prob_and_grad)


def tf_member_lib(target):
  """`tf_lib`'s primitives for one chain, on TensorFlow (gradients by
  GradientTape, vectorized by pfor with the rest)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dim = target.dim
  splitmix64, to_unit, stream = _splitmix64_tf, _unit_tf, _stream_tf
  log_prob_and_grad = _gradient_tf(target.tf_member_log_prob)

  def normal(seed, counter):
    offsets = tf.cast(tf.range(2 * dim, dtype=tf.int64), tf.uint64)
    u = to_unit(splitmix64(stream(seed, counter, 2 * dim) + offsets))
    return tf.sqrt(-2.0 * tf.math.log(u[:dim])) * tf.cos(2.0 * np.pi * u[dim:])

  def leapfrog(point, step):
    return _leapfrog(point, step, log_prob_and_grad)

  def where(cond, x, y):
    if isinstance(x, tuple):
      return type(x)(*[tf.where(cond, a, b) for a, b in zip(x, y)])
    return tf.where(cond, x, y)

  def put(samples, i, theta):
    return tf.tensor_scatter_nd_update(
        samples, tf.reshape(tf.cast(i, tf.int64), [1, 1]), theta[None])

  def logaddexp(a, b):
    a = tf.convert_to_tensor(a, tf.float64)
    return tf.reduce_logsumexp(tf.stack([a, tf.broadcast_to(b, a.shape)]))

  return types.SimpleNamespace(
      uniform=lambda seed, counter: to_unit(splitmix64(stream(seed, counter,
                                                              1))),
      normal=normal, leapfrog=ab.sync_point(leapfrog), where=where, put=put,
      log=tf.math.log, exp=tf.exp, minimum=tf.minimum, sqrt=tf.sqrt,
      logaddexp=logaddexp,
      to_float=lambda x: tf.cast(x, tf.float64),
      to_int=lambda x: tf.cast(x, tf.int64),
      kinetic=lambda r: 0.5 * tf.tensordot(r, r, 1),
      dot=lambda a, b: tf.tensordot(a, b, 1),
      zeros_samples=lambda theta, n: tf.zeros([n, dim], tf.float64),
      direction=lambda u: tf.where(u < 0.5, tf.constant(-1.0, tf.float64),
                                   tf.constant(1.0, tf.float64)),
      log_prob_and_grad=log_prob_and_grad)


# ---------------------------------------------------------------------------
# The sampler, written for one chain.
# ---------------------------------------------------------------------------

Tree = collections.namedtuple(
    'Tree', ['minus', 'plus', 'proposal', 'log_w', 's', 'alpha', 'n_alpha',
             'counter'])
# A transition's trajectory so far: the same fields.
Trajectory = collections.namedtuple('Trajectory', Tree._fields)


def make_sampler(lib, chunk, max_tree_depth, target_accept, per_member=False):
  """A Context of batched NUTS functions over the primitives `lib`.

  Its functions: `initial_step_size(point, seed, counter)` (Algorithm 4),
  `transition(point, eps, seed, counter)` (one NUTS iteration)
  and `run_chunk(point, da, seed, counter, adapt)`: `chunk` iterations,
  adapting the step size by dual averaging where `adapt` holds.  Also
  returned: `build_tree`, and the primitives `leaf` (a tree of one
  leapfrog), `pair` (a tree of two), `extend` (a tree grown by the one
  built at its end), `grow` (a transition's trajectory after a doubling)
  and `second_doubling` (a trajectory after its doubling of two leapfrogs,
  where it goes on).
  """
  if max_tree_depth < 1:
    raise ValueError(f'max_tree_depth must be at least 1, got '
                     f'{max_tree_depth}')
  ctx = ab.Context()

  def no_uturn(minus, plus):
    span = plus.theta - minus.theta
    return (lib.dot(span, minus.r) >= 0) & (lib.dot(span, plus.r) >= 0)

  @ab.sync_point
  def leaf(point, joint0, v, eps, counter):
    """A tree of one point: one leapfrog step in direction v."""
    new = lib.leapfrog(point, v * eps)
    joint = new.logp - lib.kinetic(new.r)
    log_w = joint - joint0
    s = joint > joint0 - DELTA_MAX
    alpha = lib.minimum(lib.exp(log_w), 1.0)
    one = lib.to_float(s | ~s)   # 1.0 per chain, float64 (a primitive's
    # results keep the batch axis; the select on tree.s needs float64)
    return Tree(new, new, new, log_w, s, alpha, one, counter)

  def extend(tree, other, backward, seed):
    """`tree` extended by `other`, built at its end facing v.  Selects
    rather than `if`s: on v (one call site, so chains going either way
    share steps), and on tree.s: a chain whose first half stopped builds
    the second half too, in the same steps as the others, and keeps its
    first half (the same sample; the extra leapfrogs are not counted)."""
    valid = tree.s    # else keep `tree`: selects on it below
    minus = lib.where(valid & backward, other.minus, tree.minus)
    plus = lib.where(valid & ~backward, other.plus, tree.plus)
    log_w = lib.logaddexp(tree.log_w, other.log_w)
    # Take the new half's proposal with probability w'' / (w' + w'').
    take = valid & (lib.log(lib.uniform(seed, other.counter))
                    < other.log_w - log_w)
    return Tree(minus, plus,
                lib.where(take, other.proposal, tree.proposal),
                lib.where(valid, log_w, tree.log_w),
                valid & other.s & no_uturn(minus, plus),
                lib.where(valid, tree.alpha + other.alpha, tree.alpha),
                lib.where(valid, tree.n_alpha + other.n_alpha,
                          tree.n_alpha),
                lib.where(valid, other.counter + 1, tree.counter))

  def grow(traj, tree, backward, seed):
    """The trajectory after a doubling by `tree`, built at its end facing
    v.  Where the subtree is valid, move to its proposal with probability
    min(1, w_new / w_old) (a draw that only those chains count).  Selects
    rather than `if`s: one step runs the whole update."""
    minus = lib.where(backward, tree.minus, traj.minus)
    plus = lib.where(backward, traj.plus, tree.plus)
    counter = tree.counter
    take = tree.s & (lib.log(lib.uniform(seed, counter))
                     < tree.log_w - traj.log_w)
    return Trajectory(minus, plus,
                      lib.where(take, tree.proposal, traj.proposal),
                      lib.logaddexp(traj.log_w, tree.log_w),
                      tree.s & no_uturn(minus, plus),
                      traj.alpha + tree.alpha, traj.n_alpha + tree.n_alpha,
                      counter + lib.to_int(tree.s))

  @ab.sync_point
  def pair(point, joint0, v, eps, seed, counter):
    """A tree of two leapfrogs (j = 1) in direction v."""
    backward = v < 0
    tree = leaf(point, joint0, v, eps, counter)
    other = leaf(lib.where(backward, tree.minus, tree.plus), joint0, v, eps,
                 tree.counter)
    return extend(tree, other, backward, seed)

  @ctx.batch(per_member=per_member)
  def build_tree(point, joint0, v, j, eps, seed, counter):
    """Algorithm 3's BuildTree, multinomial: 2^j leapfrog steps in
    direction v, for j >= 1 (`transition` builds the trees of j = 0 and
    j = 1 in line).  `joint0`: -H at the iteration's start; a tree's
    `log_w` is the log of its points' summed weights exp(joint - joint0)."""
    backward = v < 0
    if ab.truthy(j == 2):
      # The last two levels unrolled: four leapfrogs in one block, one VM
      # step.  Tested first, this base case is where the calls of j >= 2
      # go directly, and it returns in the same step (docs/guide.md).
      tree = pair(point, joint0, v, eps, seed, counter)
      other = pair(lib.where(backward, tree.minus, tree.plus), joint0, v,
                   eps, seed, tree.counter)
      return extend(tree, other, backward, seed)
    if ab.truthy(j == 1):
      return pair(point, joint0, v, eps, seed, counter)
    tree = build_tree(point, joint0, v, j - 1, eps, seed, counter)
    other = build_tree(lib.where(backward, tree.minus, tree.plus), joint0,
                       v, j - 1, eps, seed, tree.counter)
    return extend(tree, other, backward, seed)

  @ab.sync_point
  def second_doubling(traj, joint0, eps, seed):
    """The trajectory after its second doubling (j = 1, two leapfrogs)
    where it goes on after the first, as `transition`'s loop would."""
    if max_tree_depth < 2:
      return traj
    v = lib.direction(lib.uniform(seed, traj.counter))
    backward = v < 0
    tree = pair(lib.where(backward, traj.minus, traj.plus), joint0, v, eps,
                seed, traj.counter + 1)
    grown = grow(traj, tree, backward, seed)
    return Trajectory(*[lib.where(traj.s, a, b)
                        for a, b in zip(grown, traj)])

  @ctx.batch(per_member=per_member)
  def transition(point, eps, seed, counter):
    """One NUTS iteration from `point`; returns (point, accept, leapfrogs,
    counter)."""
    r0 = lib.normal(seed, counter)
    point = point._replace(r=r0)
    joint0 = point.logp - lib.kinetic(r0)
    counter = counter + 1
    log_w, s = 0.0, True   # the start point weighs exp(0)
    alpha, n_alpha = 0.0, 0.0
    traj = Trajectory(point, point, point, log_w, s, alpha, n_alpha, counter)
    # The first two doublings (j = 0: one leapfrog, j = 1: two) in line,
    # in this step.
    v = lib.direction(lib.uniform(seed, counter))
    traj = grow(traj, leaf(point, joint0, v, eps, counter + 1), v < 0, seed)
    traj = second_doubling(traj, joint0, eps, seed)
    j = 2
    while traj.s and j < max_tree_depth:
      v = lib.direction(lib.uniform(seed, traj.counter))
      backward = v < 0
      tree = build_tree(lib.where(backward, traj.minus, traj.plus), joint0,
                        v, j, eps, seed, traj.counter + 1)
      traj = grow(traj, tree, backward, seed)
      j = j + 1
    return (traj.proposal, traj.alpha / traj.n_alpha, traj.n_alpha,
            traj.counter)

  @ctx.batch(per_member=per_member)
  def initial_step_size(point, seed, counter):
    """Algorithm 4: halve or double eps until the acceptance crosses 1/2."""
    eps = 1.0
    r = lib.normal(seed, counter)
    joint0 = point.logp - lib.kinetic(r)
    new = lib.leapfrog(point._replace(r=r), eps + 0.0 * joint0)
    log_ratio = new.logp - lib.kinetic(new.r) - joint0
    a = 2.0 * lib.to_float(log_ratio > np.log(0.5)) - 1.0   # +1 or -1
    tries = 0
    while a * log_ratio > -a * np.log(2.0) and tries < 100:
      eps = eps * 2.0**a
      new = lib.leapfrog(point._replace(r=r), eps)
      log_ratio = new.logp - lib.kinetic(new.r) - joint0
      tries = tries + 1
    return eps, counter + 1

  @ctx.batch(per_member=per_member)
  def run_chunk(point, da, seed, counter, adapt):
    """`chunk` iterations; returns (point, da, samples, leapfrogs, counter)."""
    samples = lib.zeros_samples(point.theta, chunk)
    leapfrogs = 0.0
    for i in range(chunk):
      # Selects on `adapt` rather than `if`s: small arms cost a VM step
      # each, and their arithmetic is harmless for the other chains.
      eps = lib.exp(lib.where(adapt, da.log_eps, da.log_eps_bar))
      point, accept, steps, counter = transition(point, eps, seed, counter)
      # Algorithm 5's dual averaging update of log eps, where adapting.
      m = da.m + 1.0
      w = 1.0 / (m + T0)
      h_bar = (1.0 - w) * da.h_bar + w * (target_accept - accept)
      log_eps = da.mu - lib.sqrt(m) / GAMMA * h_bar
      eta = m ** -KAPPA
      da = lib.where(adapt, DualAveraging(
          log_eps, eta * log_eps + (1.0 - eta) * da.log_eps_bar, h_bar, m,
          da.mu), da)
      samples = lib.put(samples, i, point.theta)
      leapfrogs = leapfrogs + steps
    return point, da, samples, leapfrogs, counter

  return ctx, types.SimpleNamespace(
      build_tree=build_tree, transition=transition,
      initial_step_size=initial_step_size, run_chunk=run_chunk,
      leaf=leaf, pair=pair, extend=extend, grow=grow,
      second_doubling=second_doubling)


# ---------------------------------------------------------------------------
# Driving the chains, and diagnostics.
# ---------------------------------------------------------------------------

def effective_sample_size(samples):
  """ESS per coordinate of `samples` [chains, draws, dim].

  The multi-chain estimator of Stan / BDA3: autocorrelations from the
  chains' averaged autocovariances (FFT) against the pooled variance, summed
  in pairs with Geyer's initial monotone sequence.
  """
  samples = np.asarray(samples, np.float64)
  m, n, _ = samples.shape
  centered = samples - samples.mean(axis=1, keepdims=True)
  size = 1 << (2 * n - 1).bit_length()
  f = np.fft.rfft(centered, n=size, axis=1)
  acov = np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n
  chain_var = acov[:, 0] * n / max(n - 1, 1)        # [chains, dim]
  within = chain_var.mean(axis=0)
  between = n * samples.mean(axis=1).var(axis=0, ddof=1) if m > 1 else 0.0
  var_plus = (n - 1) / n * within + between / n
  rho = 1.0 - (within - acov.mean(axis=0)) / var_plus   # [n, dim]
  rho[0] = 1.0
  ess = np.empty(rho.shape[1])
  for d in range(rho.shape[1]):
    pairs = rho[:-1:2, d] + rho[1::2, d]
    total, prev = 0.0, np.inf
    for p in pairs:
      if p <= 0:
        break
      p = min(p, prev)       # initial monotone sequence
      total += p
      prev = p
    tau = max(-1.0 + 2.0 * total, 1.0 / np.log10(max(m * n, 10)))
    ess[d] = m * n / tau
  return ess


def tf_available():
  try:
    from autobatch_vm import tf_backend  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


class Sampler:
  """Runs NUTS chains in chunks on one backend and collects statistics."""

  def __init__(self, target, backend='numpy', chunk=50, max_tree_depth=10,
               target_accept=0.8, schedule='most', per_member=False):
    self.target = target
    self.backend = backend
    self.schedule = schedule
    self.chunk = chunk
    self.depth = max_tree_depth + 4      # run_chunk, transition, the tree
    if per_member:
      lib = (numpy_member_lib if backend == 'numpy' else tf_member_lib)(target)
    else:
      lib = (numpy_lib if backend == 'numpy' else tf_lib)(target)
    self.tf_kind = backend   # 'tf' or 'xla' (ignored on numpy)
    self.ctx, self.fns = make_sampler(lib, chunk, max_tree_depth,
                                      target_accept, per_member)
    self.lib = lib
    self.last_stats = None   # RunStats of the last call, on every backend
    self._call = self._numpy_call if backend == 'numpy' else self._tf_call()

  def _numpy_call(self, name, *args):
    fn = getattr(self.fns, name)
    out = fn(*args, max_stack_depth=self.depth, schedule=self.schedule)
    self.last_stats = fn.last_stats
    return out

  def _tf_call(self):
    staged = {}

    def call(name, *args):
      if name not in staged:
        # ab.stage: tf.function (XLA: compiled by compile_nested_output,
        # which raises a stack overflow after the call), and the call's
        # statistics as numbers in `last_stats`.
        staged[name] = ab.stage(getattr(self.fns, name),
                                jit_compile=self.tf_kind == 'xla',
                                max_stack_depth=self.depth,
                                schedule=self.schedule)
      out = staged[name].numpy(*args)
      self.last_stats = staged[name].last_stats
      return out
    return call

  def init(self, num_chains, seed):
    """Initial points (theta ~ U(-2, 2)), dual averaging state, seeds."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-2.0, 2.0, size=(num_chains, self.target.dim))
    logp, grad = self.target.log_prob_and_grad(theta)
    point = Point(theta, np.zeros_like(theta), logp, grad)
    seeds = rng.integers(0, 2**63, size=num_chains, dtype=np.uint64)
    counter = np.zeros(num_chains, np.int64)
    eps, counter = self._call('initial_step_size', point, seeds, counter)
    eps = np.asarray(eps)
    z = np.zeros(num_chains)
    da = DualAveraging(np.log(eps), z, z, z, np.log(10.0 * eps))
    return point, da, seeds, np.asarray(counter)

  def warmup(self, num_chains, num_warmup, seed=0):
    """`init`, then `num_warmup` adapting iterations (rounded up to whole
    chunks); returns the state (point, da, seeds, counter), from which
    `run_chunk` with `adapt` False samples at the adapted step sizes."""
    point, da, seeds, counter = self.init(num_chains, seed)
    adapt = np.ones(num_chains, bool)
    for _ in range(-(-num_warmup // self.chunk)):
      point, da, _, _, counter = self._call('run_chunk', point, da, seeds,
                                            counter, adapt)
    return point, da, seeds, counter

  def run(self, num_chains, num_warmup, num_samples, seed=0):
    """Warmup (adapting) then sampling; returns a dict of results."""
    start = time.perf_counter()
    point, da, seeds, counter = self.warmup(num_chains, num_warmup, seed)
    adapt = np.ones(num_chains, bool)
    warmup_time = time.perf_counter() - start
    chunks, leapfrogs, steps, active = [], 0.0, 0, 0
    start = time.perf_counter()
    for _ in range(-(-num_samples // self.chunk)):
      point, da, samples, lf, counter = self._call(
          'run_chunk', point, da, seeds, counter, ~adapt)
      chunks.append(np.asarray(samples))
      leapfrogs += float(np.sum(lf))
      steps += self.last_stats.steps
      active += self.last_stats.member_block_executions
    sample_time = time.perf_counter() - start
    samples = np.concatenate(chunks, axis=1)[:, :num_samples]
    return dict(samples=samples, step_size=np.exp(np.asarray(da.log_eps_bar)),
                warmup_time=warmup_time, sample_time=sample_time,
                leapfrogs=leapfrogs, vm_steps=steps,
                utilization=active / max(steps * num_chains, 1))


def verify_against_alone(sampler, num_chains, num_alone, seed):
  """One chunk (adapting) batched vs the first chains each run alone.

  `dry_run=True` runs each member as plain Python with batch-of-one
  arrays.  Returns (the largest absolute difference of the samples, the
  alone run's leapfrogs per second).
  """
  point, da, seeds, counter = sampler.init(num_chains, seed)
  adapt = np.ones(num_chains, bool)
  args = (point, da, seeds, counter, adapt)
  batched = sampler.fns.run_chunk(*args, max_stack_depth=sampler.depth)
  first = lambda x: x[:num_alone]
  start = time.perf_counter()
  alone = sampler.fns.run_chunk(*[ab.instructions.pattern_map(first, a)
                                  for a in args], dry_run=True)
  elapsed = time.perf_counter() - start
  diff = float(np.max(np.abs(batched[2][:num_alone] - alone[2])))
  return diff, float(np.sum(alone[3])) / elapsed


def first_chunk(sampler, num_chains, seed):
  """The samples of one adapting chunk from the initial state."""
  point, da, seeds, counter = sampler.init(num_chains, seed)
  out = sampler._call('run_chunk', point, da, seeds, counter,  # pylint: disable=protected-access
                      np.ones(num_chains, bool))
  return np.asarray(out[2])


def make_target(name, dim=10, rho=0.9):
  if name == 'gaussian':
    return gaussian_target(dim, rho)
  return logistic_regression_target()


def main(argv):
  del argv
  target = make_target(FLAGS.target, FLAGS.dim, FLAGS.rho)
  backend = FLAGS.backend
  if backend != 'numpy' and not tf_available():
    print('autobatch_vm.tf_backend is not available; running on NumPy.')
    backend = 'numpy'
  print(f'target: {target.name}; {FLAGS.num_chains} chains, '
        f'{FLAGS.num_warmup} warmup + {FLAGS.num_samples} samples each, '
        f'backend {backend}')
  sampler = Sampler(target, backend, FLAGS.chunk, FLAGS.max_tree_depth,
                    FLAGS.target_accept, FLAGS.schedule, FLAGS.per_member)
  if FLAGS.verify_chains > 0:
    numpy_sampler = sampler if backend == 'numpy' else Sampler(
        target, 'numpy', FLAGS.chunk, FLAGS.max_tree_depth,
        FLAGS.target_accept, FLAGS.schedule, FLAGS.per_member)
    if FLAGS.per_member:
      aware = Sampler(target, 'numpy', FLAGS.chunk, FLAGS.max_tree_depth,
                      FLAGS.target_accept, FLAGS.schedule)
      diff = np.max(np.abs(first_chunk(numpy_sampler, FLAGS.num_chains,
                                       FLAGS.seed)
                           - first_chunk(aware, FLAGS.num_chains, FLAGS.seed)))
      print(f'per-member chains match the batch-aware chains over '
            f'{FLAGS.chunk} iterations: max |diff| = {diff:.1e}')
      assert diff < 1e-6, diff
    k = min(FLAGS.verify_chains, FLAGS.num_chains)
    diff, alone_rate = verify_against_alone(numpy_sampler, FLAGS.num_chains,
                                            k, FLAGS.seed)
    print(f'first {k} chains run alone (dry_run) match the batch over '
          f'{FLAGS.chunk} iterations: max |diff| = {diff:.1e}; alone they '
          f'ran {alone_rate:.0f} leapfrogs/s')
    assert diff < 1e-6, diff
    if backend != 'numpy':
      # Rounding differs between backends and grows along a trajectory
      # (until an accept decision flips), so compare the first iterations.
      n = min(FLAGS.chunk, 5)
      diff = np.max(np.abs(
          first_chunk(sampler, FLAGS.num_chains, FLAGS.seed)[:, :n]
          - first_chunk(numpy_sampler, FLAGS.num_chains, FLAGS.seed)[:, :n]))
      print(f'{backend} chains match the NumPy chains over {n} '
            f'iterations: max |diff| = {diff:.1e}')
      assert diff < 1e-6, diff
  r = sampler.run(FLAGS.num_chains, FLAGS.num_warmup, FLAGS.num_samples,
                  FLAGS.seed)
  samples = r['samples']
  ess = effective_sample_size(samples)
  mean = samples.mean(axis=(0, 1))
  np.set_printoptions(precision=3, suppress=True, linewidth=100)
  print(f'step size after warmup: median {np.median(r["step_size"]):.3g} '
        f'(warmup {r["warmup_time"]:.1f} s)')
  print(f'posterior mean:\n{mean}')
  if target.true_mean is not None:
    se = np.sqrt(target.true_var / ess)
    z = (mean - target.true_mean) / se
    var = samples.var(axis=(0, 1))
    print(f'true mean:\n{target.true_mean}')
    print(f'sample variance / true variance:\n{var / target.true_var}')
    print(f'max |mean error| / Monte-Carlo standard error: '
          f'{np.abs(z).max():.2f}')
  t = r['sample_time']
  print(f'ESS: min {ess.min():.0f}, median {np.median(ess):.0f} of '
        f'{samples.shape[0] * samples.shape[1]} draws')
  print(f'sampling time {t:.2f} s: ESS/s min {ess.min() / t:.1f}, median '
        f'{np.median(ess) / t:.1f}; {r["leapfrogs"] / t:.0f} leapfrogs/s '
        f'({r["leapfrogs"] / samples.size * target.dim:.1f} per iteration '
        f'per chain)')
  print(f'VM steps while sampling: {r["vm_steps"]}, mean utilization '
        f'{r["utilization"]:.1%} ({FLAGS.backend})')


if __name__ == '__main__':
  define_flags()
  app.run(main)
