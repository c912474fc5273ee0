"""Runs every example at a small size and checks its results.

Each example is imported (its functions are checked against plain Python)
and also run as a script with small flags, as a user would.  The NUTS test
checks that on a Gaussian target the samples' mean and variance match the
truth within Monte-Carlo error.  TensorFlow parts are skipped when
`autobatch_vm.tf_backend` cannot be imported; long parts are marked slow.
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import autobatch_vm as ab

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / 'examples'


def _load(name):
  """Imports examples/<name>.py as module `examples_<name>`."""
  module_name = f'examples_{name}'
  if module_name in sys.modules:
    return sys.modules[module_name]
  spec = importlib.util.spec_from_file_location(module_name,
                                                EXAMPLES / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  sys.modules[module_name] = module
  spec.loader.exec_module(module)
  return module


collatz = _load('collatz')
tree_rnn = _load('tree_rnn')
nuts = _load('nuts')


def _tf_backend_available():
  try:
    importlib.import_module('autobatch_vm.tf_backend')
  except ImportError:
    return False
  return True


needs_tf = pytest.mark.skipif(not _tf_backend_available(),
                              reason='autobatch_vm.tf_backend not available')


def run_example(name, *flags, timeout=300):
  """Runs examples/<name>.py with `flags`; returns its stdout."""
  env = dict(os.environ, OPENBLAS_NUM_THREADS='1', TF_CPP_MIN_LOG_LEVEL='2')
  proc = subprocess.run(
      [sys.executable, str(EXAMPLES / f'{name}.py'), *flags],
      capture_output=True, text=True, timeout=timeout, env=env, check=False)
  assert proc.returncode == 0, (
      f'{name}.py {" ".join(flags)} failed:\n{proc.stdout}\n{proc.stderr}')
  return proc.stdout


# -- every example runs as a script, and answers --help -------------------------

@pytest.mark.parametrize('name', ['fibonacci', 'collatz', 'tree_rnn', 'nuts'])
def test_help(name):
  proc = subprocess.run([sys.executable, str(EXAMPLES / f'{name}.py'),
                         '--help'], capture_output=True, text=True,
                        timeout=60, check=False)
  assert proc.returncode in (0, 1), proc.stderr   # absl exits 1 after --help
  assert f'examples/{name}.py:' in proc.stdout and '--seed' in proc.stdout


def test_fibonacci_script():
  out = run_example('fibonacci', '--batch_size=5', '--low=3', '--high=10')
  assert 'matches each member run alone' in out


def test_collatz_script():
  out = run_example('collatz', '--batch_size=6', '--high=200')
  assert 'matches plain Python for every member' in out
  assert 'utilization' in out


def test_tree_rnn_script():
  out = run_example('tree_rnn', '--num_trees=6', '--max_leaves=6',
                    '--hidden=8', '--repeats=1', '--backend=numpy')
  assert 'matches each tree alone' in out
  assert 'trees/s' in out


def test_stackless_scripts_batch_a_level_of_calls_together():
  out = run_example('tree_rnn', '--num_trees=6', '--max_leaves=6',
                    '--hidden=8', '--repeats=1', '--backend=stackless')
  assert 'batched, NumPy stackless' in out and 'matches each tree' in out
  out = run_example('fibonacci', '--batch_size=5', '--low=3', '--high=10',
                    '--stackless')
  assert "frame of one recursion level's calls" in out


def test_nuts_script():
  out = run_example('nuts', '--num_chains=3', '--num_warmup=4',
                    '--num_samples=6', '--chunk=3', '--verify_chains=2',
                    '--max_tree_depth=6')
  assert 'match the batch' in out
  assert 'leapfrogs/s' in out and 'ESS/s' in out


# -- Collatz -------------------------------------------------------------------

@pytest.mark.parametrize('branch_free', [False, True])
@pytest.mark.parametrize('stackless', [False, True])
def test_collatz_matches_plain_python(branch_free, stackless):
  n = np.concatenate([np.arange(1, 40), [97, 871, 6171]])
  steps, stats, _ = collatz.run(n, branch_free=branch_free,
                                stackless=stackless)
  assert steps.tolist() == [collatz.collatz_plain(int(k)) for k in n]
  assert stats.steps > 0
  assert 0.0 < stats.utilization <= 1.0


def test_collatz_branch_free_needs_fewer_steps():
  n = np.arange(1, 200)
  _, branching, _ = collatz.run(n, branch_free=False)
  _, branch_free, _ = collatz.run(n, branch_free=True)
  assert branch_free.steps < branching.steps


@needs_tf
@pytest.mark.slow
def test_collatz_tensorflow():
  n = np.array([1, 6, 27, 97])
  steps, stats, _ = collatz.run(n, backend='tf')
  assert steps.tolist() == [collatz.collatz_plain(int(k)) for k in n]
  assert stats.steps > 0


def test_collatz_dry_run():
  n = np.array([1, 6, 27])
  out = collatz.collatz_steps(n, dry_run=True)
  assert np.asarray(out).tolist() == [0, 8, 111]


# -- Tree RNN ------------------------------------------------------------------

def _small_forest(num_trees=10, hidden=8, seed=3):
  rng = np.random.default_rng(seed)
  forest = tree_rnn.random_forest(num_trees, 1, 9, 20, rng)
  params = tree_rnn.random_params(hidden, 20, rng)
  return forest, params


@pytest.mark.parametrize('schedule', ['most', 'lowest'])
def test_tree_rnn_batched_matches_each_tree_alone(schedule):
  forest, params = _small_forest()
  expected = tree_rnn.encode_each_alone(forest, params)
  fn, encode, stats = tree_rnn.encode_batched(forest, params, 'numpy',
                                              schedule)
  np.testing.assert_allclose(fn(), expected, rtol=1e-5, atol=1e-6)
  assert stats() is encode.last_stats and stats().steps > 0
  # Every internal node is one `cell` evaluation, batched into fewer runs.
  runs = tree_rnn.cell_runs(encode, forest, schedule)
  assert 0 < runs <= int(forest.leaves.sum() - len(forest.roots))


def test_tree_rnn_stackless_and_dry_run():
  forest, params = _small_forest(num_trees=5)
  expected = tree_rnn.encode_each_alone(forest, params)
  _, encode = tree_rnn.make_encoder(tree_rnn.numpy_lib(forest, params))
  np.testing.assert_allclose(encode(forest.roots, stackless=True), expected,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(encode(forest.roots, dry_run=True), expected,
                             rtol=1e-5, atol=1e-6)


def test_tree_rnn_too_shallow_stack_raises():
  forest, params = _small_forest()
  _, encode = tree_rnn.make_encoder(tree_rnn.numpy_lib(forest, params))
  with pytest.raises(ab.errors.StackOverflowError):
    encode(forest.roots, max_stack_depth=2)


@needs_tf
@pytest.mark.slow
@pytest.mark.parametrize('backend', ['tf', 'xla'])
def test_tree_rnn_tensorflow(backend):
  forest, params = _small_forest(num_trees=6, hidden=4)
  expected = tree_rnn.encode_each_alone(forest, params)
  fn, encode, stats = tree_rnn.encode_batched(forest, params, backend)
  np.testing.assert_allclose(fn(), expected, rtol=1e-4, atol=1e-5)
  # Statistics of the staged call, as numbers: those of the NumPy run.
  np_fn, np_encode, np_stats = tree_rnn.encode_batched(forest, params, 'vm')
  np_fn()
  assert stats().block_executions == np_stats().block_executions
  assert stats().block_active == np_stats().block_active
  assert (tree_rnn.cell_runs(encode, forest, stats=stats())
          == tree_rnn.cell_runs(np_encode, forest))


# -- NUTS ----------------------------------------------------------------------

def test_effective_sample_size():
  rng = np.random.default_rng(0)
  iid = rng.normal(size=(4, 2000, 1))
  assert 0.85 < nuts.effective_sample_size(iid)[0] / 8000 < 1.15
  # AR(1) with coefficient phi: ESS = N (1 - phi) / (1 + phi).
  phi, n = 0.6, 4000
  x = np.zeros((4, n, 1))
  noise = rng.normal(size=(4, n, 1))
  for t in range(1, n):
    x[:, t] = phi * x[:, t - 1] + noise[:, t]
  expected = 4 * n * (1 - phi) / (1 + phi)
  assert 0.8 < nuts.effective_sample_size(x)[0] / expected < 1.2


@pytest.mark.parametrize('name', ['gaussian', 'logistic'])
def test_target_gradients(name):
  target = nuts.make_target(name, dim=4, rho=0.5)
  rng = np.random.default_rng(1)
  theta = rng.normal(scale=0.3, size=(3, target.dim))
  logp, grad = target.log_prob_and_grad(theta)
  for k in range(3):   # written for one chain: the same, row by row
    one_logp, one_grad = target.member_log_prob_and_grad(theta[k])
    np.testing.assert_allclose(one_logp, logp[k], rtol=1e-12)
    np.testing.assert_allclose(one_grad, grad[k], rtol=1e-12, atol=1e-12)
  h = 1e-6
  for i in range(target.dim):
    e = np.zeros(target.dim)
    e[i] = h
    up, _ = target.log_prob_and_grad(theta + e)
    down, _ = target.log_prob_and_grad(theta - e)
    np.testing.assert_allclose(grad[:, i], (up - down) / (2 * h), rtol=1e-4,
                               atol=1e-4)


def test_german_credit_like_data_is_fixed():
  x, y = nuts.german_credit_like_data()
  assert x.shape == (1000, 25) and y.shape == (1000,)
  assert np.all(x[:, 0] == 1.0) and set(np.unique(y)) == {0.0, 1.0}
  x2, y2 = nuts.german_credit_like_data()
  assert np.array_equal(x, x2) and np.array_equal(y, y2)


@pytest.mark.parametrize('target_name', ['gaussian', 'logistic'])
def test_nuts_chains_alone_match_the_batch(target_name):
  target = nuts.make_target(target_name, dim=3, rho=0.5)
  sampler = nuts.Sampler(target, 'numpy', chunk=4, max_tree_depth=6)
  diff, rate = nuts.verify_against_alone(sampler, num_chains=5, num_alone=2,
                                         seed=7)
  assert diff < 1e-8
  assert rate > 0


@pytest.mark.parametrize('target_name', [
    'gaussian', pytest.param('logistic', marks=pytest.mark.slow)])
def test_nuts_per_member_form_matches_the_batch_aware_form(target_name):
  """The sampler with primitives written for one chain (`per_member=True`):
  chain by chain the batch-aware form's samples, and each chain run alone
  (`dry_run`, one chain's values without a batch axis) the batch's."""
  target = nuts.make_target(target_name, dim=3, rho=0.5)
  aware = nuts.Sampler(target, 'numpy', chunk=4, max_tree_depth=6)
  member = nuts.Sampler(target, 'numpy', chunk=4, max_tree_depth=6,
                        per_member=True)
  assert member.fns.run_chunk.per_member
  want = nuts.first_chunk(aware, 5, 7)
  np.testing.assert_allclose(nuts.first_chunk(member, 5, 7), want,
                             rtol=0, atol=1e-10)
  assert len(np.unique(want[:, -1, 0])) == 5     # the chains moved apart
  assert not member.last_stats.per_member_fallbacks
  diff, rate = nuts.verify_against_alone(member, num_chains=5, num_alone=2,
                                         seed=7)
  assert diff < 1e-10
  assert rate > 0


def _textbook_tree(fns, lib, point, joint0, v, j, eps, seed, counter):
  """Algorithm 3's recursion down to j == 0 (a tree of one leapfrog), as
  plain NumPy on the whole batch (every chain at the same j), from the
  example's primitives."""
  if j == 0:
    return fns.leaf(point, joint0, v, eps, counter)
  backward = v < 0
  tree = _textbook_tree(fns, lib, point, joint0, v, j - 1, eps, seed,
                        counter)
  other = _textbook_tree(fns, lib, lib.where(backward, tree.minus, tree.plus),
                         joint0, v, j - 1, eps, seed, tree.counter)
  return fns.extend(tree, other, backward, seed)


@pytest.mark.parametrize('j', [1, 2, 3, 4])
def test_nuts_unrolled_base_case_matches_the_plain_recursion(j):
  # build_tree takes its last two levels (j == 2: four leapfrogs) in one
  # block instead of recursing to j == 0 (a tree of one leapfrog, which
  # `transition` builds in line), and j == 1 (`pair`) in one block too.
  # The textbook recursion must give the same trees, field by field.
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  sampler = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=5)
  fns, lib = sampler.fns, sampler.lib
  point, da, seeds, counter = sampler.init(6, seed=3)
  point = point._replace(r=lib.normal(seeds, counter))
  joint0 = point.logp - lib.kinetic(point.r)
  v = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
  eps = np.exp(da.log_eps)

  def leaves(tree):   # the Points' fields, then the scalars
    return [x for f in tree for x in (f if isinstance(f, tuple) else (f,))]

  expected = _textbook_tree(fns, lib, point, joint0, v, j, eps, seeds,
                            counter)
  got = fns.build_tree(point, joint0, v, np.full(6, j), eps, seeds, counter,
                       max_stack_depth=8)
  for want, have in zip(leaves(expected), leaves(got), strict=True):
    np.testing.assert_allclose(have, want, rtol=1e-12, atol=0)
  # Not vacuous: some chain's tree holds all 2^j points (at j == 4 they
  # all stop before, but some chain passes the unrolled base case).
  most = np.asarray(got.n_alpha).max()
  assert most == 2 ** j if j <= 3 else most > 4


@pytest.mark.parametrize('depth', [1, 2, 3, 5])
def test_nuts_transition_matches_the_textbook_loop(depth):
  # `transition` builds its first two doublings (one leapfrog, then two)
  # in line, the second only where the first did not stop and the depth
  # allows it, and `build_tree` stops at j == 2.  Per chain, the textbook
  # loop (every doubling a call of the recursion, down to j == 0) must
  # draw the same trajectory: same proposal, acceptance, leapfrogs and
  # counter.
  target = nuts.make_target('gaussian', dim=3, rho=0.5)
  sampler = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=depth)
  fns, lib = sampler.fns, sampler.lib
  point, da, seeds, counter = sampler.init(8, seed=5)
  eps = np.exp(da.log_eps)

  def textbook_transition(point, eps, seed, counter):   # one chain
    point = point._replace(r=lib.normal(seed, counter))
    joint0 = point.logp - lib.kinetic(point.r)
    zero = np.zeros(1)
    traj = nuts.Trajectory(point, point, point, zero, np.ones(1, bool),
                           zero, zero, counter + 1)
    j = 0
    while traj.s[0] and j < depth:
      v = lib.direction(lib.uniform(seed, traj.counter))
      backward = v < 0
      tree = _textbook_tree(fns, lib,
                            lib.where(backward, traj.minus, traj.plus),
                            joint0, v, j, eps, seed, traj.counter + 1)
      traj = fns.grow(traj, tree, backward, seed)
      j += 1
    return (traj.proposal, traj.alpha / traj.n_alpha, traj.n_alpha,
            traj.counter)

  got = fns.transition(point, eps, seeds, counter, max_stack_depth=depth + 3)
  sizes = set()
  for i in range(8):
    one = lambda x, i=i: x[i:i + 1]
    want = textbook_transition(nuts.Point(*map(one, point)), one(eps),
                               one(seeds), one(counter))
    np.testing.assert_allclose(got[0].theta[i], want[0].theta[0],
                               rtol=1e-12, atol=0)
    for k in (1, 2, 3):
      np.testing.assert_allclose(got[k][i], want[k][0], rtol=1e-12, atol=0)
    sizes.add(float(want[2][0]))
  # Not vacuous: no chain went past the depth, and with room to grow
  # chains stopped at different depths.
  assert max(sizes) <= 2 ** depth - 1
  if depth >= 3:
    assert len(sizes) > 1


def test_nuts_random_numbers_are_per_chain():
  lib = nuts.numpy_lib(nuts.make_target('gaussian', dim=3))
  seeds = np.array([1, 2, 3], np.uint64)
  u = lib.uniform(seeds, np.array([0, 5, 9]))
  # The same (seed, counter) gives the same number alone or in a batch.
  assert lib.uniform(seeds[1:2], np.array([5]))[0] == u[1]
  assert np.all((u > 0) & (u < 1))
  z = lib.normal(np.arange(2000, dtype=np.uint64), np.zeros(2000, np.int64))
  assert z.shape == (2000, 3)
  assert abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1


def _check_gaussian_moments(samples, target):
  """Mean and variance vs the truth, within 4.5 Monte-Carlo std errors."""
  centered = samples - target.true_mean
  mean = samples.mean(axis=(0, 1))
  ess = nuts.effective_sample_size(samples)
  mean_se = np.sqrt(target.true_var / ess)
  assert np.all(np.abs(mean - target.true_mean) < 4.5 * mean_se), (
      mean, target.true_mean, mean_se)
  squares = centered**2
  var = squares.mean(axis=(0, 1))
  var_se = squares.std(axis=(0, 1)) / np.sqrt(
      nuts.effective_sample_size(squares))
  assert np.all(np.abs(var - target.true_var) < 4.5 * var_se), (
      var, target.true_var, var_se)
  return ess


def test_nuts_gaussian_mean_and_variance():
  target = nuts.gaussian_target(dim=2, rho=0.8)
  sampler = nuts.Sampler(target, 'numpy', chunk=50, max_tree_depth=8)
  r = sampler.run(num_chains=16, num_warmup=100, num_samples=200, seed=3)
  assert r['samples'].shape == (16, 200, 2)
  ess = _check_gaussian_moments(r['samples'], target)
  assert ess.min() > 300          # NUTS mixes well on a Gaussian
  assert r['leapfrogs'] > 0 and 0 < r['utilization'] <= 1


@pytest.mark.slow
def test_nuts_gaussian_mean_and_variance_long():
  target = nuts.gaussian_target(dim=6, rho=0.9)
  sampler = nuts.Sampler(target, 'numpy', chunk=50, max_tree_depth=10)
  r = sampler.run(num_chains=16, num_warmup=150, num_samples=250, seed=5)
  _check_gaussian_moments(r['samples'], target)


@pytest.mark.slow
def test_nuts_logistic_regression_posterior_mean():
  """NUTS's posterior mean vs importance sampling from a Laplace fit."""
  target = nuts.logistic_regression_target()
  x, _ = nuts.german_credit_like_data()
  beta = np.zeros(target.dim)
  for _ in range(20):     # Newton's method for the mode
    _, grad = target.log_prob_and_grad(beta[None])
    p = 1 / (1 + np.exp(-x @ beta))
    hess = -(x.T * (p * (1 - p))) @ x - np.eye(target.dim)
    beta = beta - np.linalg.solve(hess, grad[0])
  # Self-normalized importance sampling, proposal N(mode, -H^-1) widened.
  rng = np.random.default_rng(0)
  chol = np.linalg.cholesky(np.linalg.inv(-hess)) * 1.2
  draws = beta + rng.normal(size=(20000, target.dim)) @ chol.T
  log_q = -0.5 * np.sum(np.linalg.solve(chol, (draws - beta).T)**2, axis=0)
  log_p = np.concatenate([target.log_prob_and_grad(d)[0]
                          for d in np.split(draws, 20)])
  w = np.exp(log_p - log_q - np.max(log_p - log_q))
  w /= w.sum()
  reference = w @ draws
  reference_se = np.sqrt(w**2 @ (draws - reference)**2)

  sampler = nuts.Sampler(target, 'numpy', chunk=25, max_tree_depth=8)
  r = sampler.run(num_chains=8, num_warmup=100, num_samples=100, seed=2)
  samples = r['samples']
  mean = samples.mean(axis=(0, 1))
  se = samples.std(axis=(0, 1)) / np.sqrt(nuts.effective_sample_size(samples))
  assert np.all(np.abs(mean - reference) < 5 * np.hypot(se, reference_se)), (
      mean - reference, se, reference_se)


@needs_tf
@pytest.mark.slow
@pytest.mark.parametrize('per_member', [False, True])
@pytest.mark.parametrize('backend', ['tf', 'xla'])
def test_nuts_tensorflow_matches_numpy(backend, per_member):
  target = nuts.make_target('gaussian', dim=2, rho=0.5)
  chains = 4
  tf_sampler = nuts.Sampler(target, backend, chunk=3, max_tree_depth=5,
                            per_member=per_member)
  np_sampler = nuts.Sampler(target, 'numpy', chunk=3, max_tree_depth=5,
                            per_member=per_member)
  np.testing.assert_allclose(nuts.first_chunk(tf_sampler, chains, 1),
                             nuts.first_chunk(np_sampler, chains, 1),
                             atol=1e-8)
  # The staged call's statistics, read back through counts(): the same
  # schedule as NumPy's, block by block.
  got, want = tf_sampler.last_stats, np_sampler.last_stats
  assert not got.symbolic and got.steps == want.steps > 0
  assert got.block_executions == want.block_executions
  assert got.block_active == want.block_active


@needs_tf
@pytest.mark.slow
def test_nuts_xla_guarded_group_matches_numpy(monkeypatch):
  """On the logistic regression at 64 chains, with groups made free
  (knob `group_step_bytes=0`), the blocks that write large packs (a leaf
  writes a 550 KB pack of `[64, 25]` registers) are groups of their own:
  under XLA such a group runs its block in a conditional
  (`backends.tf.groups.run_group`), and the chains match NumPy's.  The
  sampler makes its own backends: the CPU's default knobs are replaced."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import knobs  # pylint: disable=g-import-not-at-top
  from autobatch_vm.backends.tf import packing  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(knobs, 'CPU',
                      dataclasses.replace(knobs.CPU, group_step_bytes=0))
  guarded = []
  no_ports = packing.Packing.no_ports

  def spy(self, writes, width, carried):
    guarded.append(self.written_bytes(width))
    return no_ports(self, writes, width, carried)
  monkeypatch.setattr(packing.Packing, 'no_ports', spy)
  target = nuts.make_target('logistic')
  xla = nuts.Sampler(target, 'xla', chunk=2, max_tree_depth=3)
  numpy = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=3)
  np.testing.assert_allclose(nuts.first_chunk(xla, 64, 1),
                             nuts.first_chunk(numpy, 64, 1), atol=1e-8)
  assert guarded
  assert min(guarded) >= knobs.CPU.guarded_group_bytes
  assert max(guarded) >= 512 * 1024
  assert xla.last_stats.block_executions == numpy.last_stats.block_executions


@needs_tf
def test_nuts_tensorflow_logaddexp_broadcasts_as_numpy():
  lib = nuts.tf_lib(nuts.make_target('gaussian', dim=2))
  b = np.array([-1.5, -np.inf, 3.0])
  for a in (0.0, np.array([0.25, -np.inf, -2.0]), -np.inf):
    np.testing.assert_allclose(lib.logaddexp(a, b).numpy(),
                               np.logaddexp(a, b))
    np.testing.assert_allclose(lib.logaddexp(b, a).numpy(),
                               np.logaddexp(b, a))


@needs_tf
def test_nuts_tensorflow_chains_alone_match_the_batch():
  """Each chain run alone (`dry_run`) on TensorFlow tensors, as the
  benchmark's "alone" baseline runs them: the batch's samples."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  target = nuts.make_target('logistic')
  sampler = nuts.Sampler(target, 'tf', chunk=2, max_tree_depth=4)
  numpy = nuts.Sampler(target, 'numpy', chunk=2, max_tree_depth=4)
  point, da, seeds, counter = numpy.init(3, seed=5)
  args = (point, da, seeds, counter, np.ones(3, bool))
  batched = numpy.fns.run_chunk(*args, max_stack_depth=numpy.depth)
  first = lambda x: tf.convert_to_tensor(x[:2])
  alone = sampler.fns.run_chunk(
      *[ab.instructions.pattern_map(first, a) for a in args], dry_run=True)
  np.testing.assert_allclose(alone[2].numpy(), batched[2][:2], atol=1e-8)


@needs_tf
@pytest.mark.slow
def test_nuts_tensorflow_gradients_match_numpy():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for name in ('gaussian', 'logistic'):
    target = nuts.make_target(name, dim=3, rho=0.5)
    lib = nuts.tf_lib(target)
    # Near the mode, and far out: logits in the hundreds (no overflow).
    theta = np.random.default_rng(0).normal(size=(2, target.dim)) * [
        [0.3], [30.0]]
    logp, grad = lib.log_prob_and_grad(tf.constant(theta))
    want_logp, want_grad = target.log_prob_and_grad(theta)
    np.testing.assert_allclose(logp.numpy(), want_logp, rtol=1e-10)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-8,
                               atol=1e-10)
    member = nuts.tf_member_lib(target)   # one chain at a time
    for k in range(2):
      logp, grad = member.log_prob_and_grad(tf.constant(theta[k]))
      np.testing.assert_allclose(logp.numpy(), want_logp[k], rtol=1e-10)
      np.testing.assert_allclose(grad.numpy(), want_grad[k], rtol=1e-8,
                                 atol=1e-10)
