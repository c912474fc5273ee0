"""NUTS beside what a user would pick instead: TFP's NUTS program on our
VM, TFP's hand-batched sampler, BlackJAX and NumPyro, on the same targets.

    python benchmarks/nuts_systems.py           # 2 targets x 64, 256 chains
    python benchmarks/nuts_systems.py --quick   # a smoke run, a few minutes
    python benchmarks/nuts_systems.py --systems=blackjax,numpyro --out=DIR
    python benchmarks/run.py --nuts_systems     # the same, after run.py's

The systems (`SYSTEMS`), each drawing `--iterations` NUTS iterations per
call from the same start:

- `ours_function`, `ours_xla`: TFP's autobatched NUTS program
  (`nuts_autobatching.py`, unchanged but for its `auto_batching` import:
  `tfp_baselines.tfp_nuts_on_autobatch_vm`) on our VM, under `tf.function`
  and under XLA;
- `hand_function`, `hand_xla`: TFP's hand-batched `tfp.mcmc.NoUTurnSampler`;
- `blackjax`: BlackJAX's `nuts` kernel, its step `jax.vmap`ped over the
  chains, iterations in a `lax.scan`, all under `jax.jit` (BlackJAX's own
  recipe for many chains);
- `numpyro`: NumPyro's `NUTS` kernel given a potential, its chains
  vectorized as `MCMC(chain_method='vectorized')` runs them (its way to
  run many chains on one device), staged once (`_numpyro`).

The targets (`TARGETS`), float32: a 50-dimensional correlated Gaussian
(rho = 0.9 between neighbours, scales 0.5 to 2), step size 0.15; and a
Bayesian logistic regression on 1000 x 25 data (`examples/nuts.py`'s
German-credit-like set, N(0, 1) prior), step size 0.04.  No adaptation,
identity mass matrix, max tree depth 8 (at most 2^8 leapfrogs an
iteration) everywhere; every system starts from the same points, drawn
from the target (the Gaussian) or from its Laplace approximation (the
regression), so that each draws from the typical set from its first
iteration.

Each cell (target, chains) runs in a fresh Python process (`--worker`):
every installed system is built and called once (its first-call time:
tracing and compiling), then the systems are timed in turns, a call of
each per round (`workloads.interleaved_median_times`), the time a median.
Leapfrogs are counted per iteration, each system by its own count
(`COUNTS`), summed over chains: leapfrogs/s is that per call over the
median call time.  The posterior means are checked to agree across
systems (`mean_check`).  A system that is not installed is skipped, with
a note in the results.  Writes DIR/results.md and DIR/results.json
(`--out`, default benchmarks/results/nuts_systems).
"""

import argparse
import collections
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

# Multi-threaded OpenBLAS is pathological on small shared machines (see
# run.py); the targets' NumPy set-up runs before any system.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import cells  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import tfp_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'results', 'nuts_systems')
MAX_TREE_DEPTH = 8


# -- targets -------------------------------------------------------------------

class Target(collections.namedtuple('Target', [
    'name', 'dim', 'step_size', 'mean', 'sd', 'start', 'tf_log_prob',
    'jax_log_prob'])):
  """A float32 target in every system's terms: `tf_log_prob` over a batch
  of chains ([chains, dim] -> [chains]), `jax_log_prob` of one chain
  ([dim] -> scalar), its step size, `start(chains)` (the same points for
  every system), and a reference `mean` and `sd` for the mean check."""


def gaussian(dim=50, rho=0.9):
  """N(mu, Sigma), Sigma_ij = s_i s_j rho^|i-j|, s from 0.5 to 2, mu from
  -1 to 1; chains start at exact draws."""
  mu = np.linspace(-1.0, 1.0, dim)
  scales = np.geomspace(0.5, 2.0, dim)
  idx = np.arange(dim)
  cov = scales[:, None] * scales[None, :] * rho ** np.abs(
      idx[:, None] - idx[None, :])
  prec = np.linalg.inv(cov).astype(np.float32)
  mu32 = mu.astype(np.float32)
  chol = np.linalg.cholesky(cov)

  def start(chains):
    z = np.random.default_rng(chains).normal(size=(chains, dim))
    return (mu + z @ chol.T).astype(np.float32)

  def tf_log_prob(theta):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    d = theta - tf.constant(mu32)
    return -0.5 * tf.reduce_sum(d * tf.linalg.matmul(d, tf.constant(prec)),
                                axis=-1)

  def jax_log_prob(theta):
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    d = theta - jnp.asarray(mu32)
    return -0.5 * d @ (jnp.asarray(prec) @ d)

  return Target(f'correlated Gaussian ({dim}-d, rho {rho})', dim, 0.15, mu,
                np.sqrt(np.diag(cov)), start, tf_log_prob, jax_log_prob)


def logistic():
  """Bayesian logistic regression, beta ~ N(0, I), on the 1000 x 25
  German-credit-like data of `examples/nuts.py`; chains start at draws of
  its Laplace approximation (the mode by Newton's method, the inverse
  Hessian there), which also gives the reference mean and sd."""
  x, y = cells.example('nuts').german_credit_like_data()
  beta = np.zeros(x.shape[1])
  for _ in range(25):   # Newton's method: converges in ~8 steps
    p = 1 / (1 + np.exp(-x @ beta))
    hessian = (x * (p * (1 - p))[:, None]).T @ x + np.eye(x.shape[1])
    beta = beta + np.linalg.solve(hessian, x.T @ (y - p) - beta)
  cov = np.linalg.inv(hessian)
  chol = np.linalg.cholesky(cov)
  xt32 = np.ascontiguousarray(x.T).astype(np.float32)
  x32, y32 = x.astype(np.float32), y.astype(np.float32)

  def start(chains):
    z = np.random.default_rng(chains).normal(size=(chains, x.shape[1]))
    return (beta + z @ chol.T).astype(np.float32)

  def tf_log_prob(theta):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logits = tf.linalg.matmul(theta, tf.constant(xt32))
    log_lik = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(tf.constant(y32), tf.shape(logits)),
        logits=logits), axis=-1)
    return log_lik - 0.5 * tf.reduce_sum(theta * theta, -1)

  def jax_log_prob(theta):
    import jax  # pylint: disable=g-import-not-at-top
    logits = jax.numpy.asarray(x32) @ theta
    return (jax.numpy.asarray(y32) @ logits
            - jax.numpy.sum(jax.nn.softplus(logits)) - 0.5 * theta @ theta)

  return Target(f'logistic regression ({x.shape[0]} x {x.shape[1]})',
                x.shape[1], 0.04, beta, np.sqrt(np.diag(cov)), start,
                tf_log_prob, jax_log_prob)


TARGETS = {'gaussian': gaussian, 'logistic': logistic}


# -- systems: make(target, theta, iterations) -> run ---------------------------
#
# `run()` draws `iterations` NUTS iterations of every chain from `theta`
# and returns (samples [iterations, chains, dim], leapfrogs [iterations,
# chains]: each chain's leapfrogs in each iteration), as NumPy.

def _tfp_system(kind, backend):
  def make(target, theta, iterations):
    run, out = tfp_baselines.nuts_runner(
        kind, backend, target, theta,
        np.full(theta.shape[0], target.step_size, np.float32), iterations,
        MAX_TREE_DEPTH)

    def call():
      run()
      return out['samples'], out['leapfrogs_each']
    return call
  return make


def _blackjax(target, theta, iterations, seed=0):
  import blackjax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  nuts = blackjax.nuts(target.jax_log_prob, target.step_size,
                       jax.numpy.ones(target.dim, jax.numpy.float32),
                       max_num_doublings=MAX_TREE_DEPTH)
  chains = theta.shape[0]

  def sample(key, theta):
    def one(states, key):
      states, info = jax.vmap(nuts.step)(jax.random.split(key, chains),
                                         states)
      return states, (states.position, info.num_integration_steps)
    return jax.lax.scan(one, jax.vmap(nuts.init)(theta),
                        jax.random.split(key, iterations))[1]
  return _jax_run(sample, theta, seed)


def _jax_run(sample, theta, seed):
  """A call of `sample(key, theta)` staged by `jax.jit`, returning
  (samples, leapfrogs) as NumPy."""
  import jax  # pylint: disable=g-import-not-at-top
  staged = jax.jit(sample)
  key, theta = jax.random.PRNGKey(seed), jax.numpy.asarray(theta)

  def run():
    samples, steps = staged(key, theta)
    return np.asarray(samples), np.asarray(steps, np.float64)
  return run


def _numpyro(target, theta, iterations, seed=0):
  """NumPyro's NUTS kernel run as `MCMC(chain_method='vectorized')` runs
  it (the kernel initialized with a key per chain samples them all, its
  step vmapped), iterations in a `lax.scan`, staged once by `jax.jit`:
  `MCMC.run` traces and compiles its loop at every call (5.7 s a call of
  2 iterations at 8 chains), so repeated calls of it would time compiles,
  a cost its users pay once a run."""
  import jax  # pylint: disable=g-import-not-at-top
  from numpyro import infer  # pylint: disable=g-import-not-at-top
  kernel = infer.NUTS(potential_fn=lambda x: -target.jax_log_prob(x),
                      step_size=target.step_size, adapt_step_size=False,
                      adapt_mass_matrix=False, max_tree_depth=MAX_TREE_DEPTH)
  chains = theta.shape[0]

  def sample(key, theta):
    # MCMC's vectorized init: a key per chain, the states batched, and
    # the kernel's sample function vmapped over them.
    states = kernel.init(jax.random.split(key, chains), 0, theta)

    def one(states, _):
      states = kernel.sample(states, (), {})
      return states, (states.z, states.num_steps)
    return jax.lax.scan(one, states, None, length=iterations)[1]
  return _jax_run(sample, theta, seed)


SYSTEMS = {
    'ours_function': ("TFP's NUTS program on autobatch_vm, tf.function",
                      'tf', _tfp_system('autobatched_ours', 'function')),
    'ours_xla': ("TFP's NUTS program on autobatch_vm, XLA", 'tf',
                 _tfp_system('autobatched_ours', 'xla')),
    'hand_function': ('tfp.mcmc.NoUTurnSampler (hand-batched), tf.function',
                      'tf', _tfp_system('unrolled', 'function')),
    'hand_xla': ('tfp.mcmc.NoUTurnSampler (hand-batched), XLA', 'tf',
                 _tfp_system('unrolled', 'xla')),
    'blackjax': ('BlackJAX nuts, jax.vmap + jit', 'blackjax', _blackjax),
    'numpyro': ('NumPyro NUTS, vectorized chains (vmap + jit)', 'numpyro',
                _numpyro),
}
# The hand-batched row each row is compared with: the same TensorFlow
# mode, XLA for the JAX rows (JAX always compiles with XLA).
HAND = {'ours_function': 'hand_function', 'hand_function': 'hand_function'}
# How each system counts its leapfrogs, per iteration and chain.  Every
# system steps its chains in lock step (a batched or vmapped while loop)
# and counts, for each chain, the leapfrogs of that chain's own trajectory,
# up to the one that stopped it: none computed after it stopped.
COUNTS = {
    'ours': "TFP's program's `leapfrogs_taken`, a running total since "
            '`bootstrap_results`: its differences between iterations',
    'hand': '`leapfrogs_taken` of the kernel results, per iteration',
    'blackjax': '`info.num_integration_steps`, per iteration',
    'numpyro': 'the `num_steps` extra field, per iteration',
}
# Why their trajectories differ in length from the same start at the same
# step size.
TRAJECTORIES = (
    "The trajectories' lengths differ with the U-turn test: TFP's NUTS "
    'program tests (q+ - q-) . p > 0 at both ends of every subtree (slice '
    'sampling); BlackJAX and NumPyro take rho . p, rho the sum of the '
    "momenta less half of the two end ones (multinomial); TFP's "
    "hand-batched sampler takes rho as the whole sum, whose ends' own "
    '|p|^2 keep it going longer (on the Gaussian, see its leapfrogs a '
    'chain and iteration): compare it by leapfrogs/s, not by time per '
    'iteration.')


def missing(family):
  """Why a system's family cannot run here (a note), or None."""
  if family == 'tf':
    if not tfp_baselines.available():
      return 'TensorFlow Probability is not installed (the bench extra)'
    return None
  try:
    __import__(family)   # blackjax and numpyro import jax
  except ImportError:
    return f'{family} is not installed (the bench-jax extra)'
  return None


def available(systems):
  """(the systems of `systems` that can run here, {system: why not})."""
  ok, notes = [], {}
  for name in systems:
    why = missing(SYSTEMS[name][1])
    if why:
      notes[name] = why
    else:
      ok.append(name)
  return ok, notes


# -- one cell, in this process -------------------------------------------------

def mean_check(target, means, chains):
  """Per system, the largest distance over coordinates between its
  posterior mean and the reference (the target's exact mean for the
  Gaussian, else the median of the systems' means), in standard errors
  sd / sqrt(chains): every chain starts at a draw of the target (or of an
  approximation to it) and samples it, so a chain's mean over the
  iterations varies by at most sd.  `agree` at most `MEAN_BOUND`
  (about p = 3e-4 for 50 coordinates of a normal)."""
  ref = target.mean if target.name.startswith('correlated') else np.median(
      np.stack(list(means.values())), axis=0)
  out = {}
  for name, m in means.items():
    z = float(np.max(np.abs(m - ref) / target.sd) * np.sqrt(chains))
    out[name] = dict(mean_z=z, agree=z <= MEAN_BOUND)
  return out


MEAN_BOUND = 4.5


def warm_up(names):
  """Pays this process's one-time costs before any first call is timed:
  each family's imports, and a first trace and XLA compile of a trivial
  function in TensorFlow and in JAX.  Else the system called first pays
  them in its "first call" (about 4 s of TensorFlow's: the hand-batched
  sampler called first took 5.8 s, ours after it 5.4 s; in the other
  order 2.0 s and 6.9 s)."""
  families = {SYSTEMS[n][1] for n in names}
  if 'tf' in families:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import autobatch_vm  # pylint: disable=g-import-not-at-top,unused-import
    tfp_baselines.tfp_nuts_on_autobatch_vm()   # imports TFP
    x = tf.constant([1.0])
    for jit in (False, True):
      tf.function(lambda v: v * 2.0 + 1.0, jit_compile=jit)(x).numpy()
  if families & {'blackjax', 'numpyro'}:
    import jax  # pylint: disable=g-import-not-at-top
    jax.jit(lambda v: v * 2.0 + 1.0)(jax.numpy.ones(1)).block_until_ready()
  for family in families - {'tf'}:
    __import__(family)


def measure_cell(target_name, chains, systems, iterations, repeats):
  """One cell in this process: the process warmed up (`warm_up`), each
  system built and called once, then timed in turns; returns the cell's
  dict (see `write`)."""
  target = TARGETS[target_name]()
  theta = target.start(chains)
  names, notes = available(systems)
  warm_up(names)
  runs, first, draws = {}, {}, {}
  for name in names:
    make = SYSTEMS[name][2]
    start = time.perf_counter()
    call = make(target, theta, iterations)
    draw = call()
    first[name] = time.perf_counter() - start
    print(f'{target_name} x{chains}: {name} first call {first[name]:.1f} s',
          flush=True)
    draws[name] = [draw]
    runs[name] = _recording(call, draws[name])
  seconds = workloads.interleaved_median_times(
      [runs[n] for n in names], repeats, 0.0, repeats)
  means = {n: np.mean([s.mean(axis=(0, 1)) for s, _ in draws[n]], axis=0)
           for n in names}
  checks = mean_check(target, means, chains)
  rows = []
  for name, s in zip(names, seconds):
    leapfrogs = float(np.median([np.sum(lf) for _, lf in draws[name]]))
    rows.append(dict(
        system=name, label=SYSTEMS[name][0], seconds=s,
        seconds_per_iteration=s / iterations,
        leapfrogs_per_second=leapfrogs / s,
        leapfrogs_per_chain_iteration=leapfrogs / (chains * iterations),
        first_call_seconds=first[name],
        compile_seconds=max(first[name] - s, 0.0), **checks[name]))
  return dict(target=target_name, target_name=target.name, chains=chains,
              iterations=iterations, step_size=target.step_size,
              rows=rows, skipped=notes)


def _recording(call, draws):
  """`call`, whose draws are appended to `draws`."""
  def run():
    draws.append(call())
  return run


# -- the table -----------------------------------------------------------------

def ratios(cell):
  """Each row's leapfrogs/s over the hand-batched sampler's (`HAND`) and
  over BlackJAX's: {system: (vs hand or None, vs BlackJAX or None)}."""
  rate = {r['system']: r['leapfrogs_per_second'] for r in cell['rows']}
  out = {}
  for r in cell['rows']:
    hand = rate.get(HAND.get(r['system'], 'hand_xla'))
    bj = rate.get('blackjax')
    mine = r['leapfrogs_per_second']
    out[r['system']] = (mine / hand if hand else None,
                        mine / bj if bj else None)
  return out


def _x(v):
  return '-' if v is None else f'{v:.2f}x'


def cell_markdown(cell):
  """A cell's table: per system, ms per iteration, leapfrogs/s, the ratios,
  the first call, leapfrogs per chain and iteration, the mean check."""
  lines = [f'**{cell["target_name"]}, {cell["chains"]} chains** (step size '
           f'{cell["step_size"]}, {cell["iterations"]} iterations a call):',
           '', '| system | ms / iteration | leapfrogs/s | vs hand-batched | '
           'vs BlackJAX | first call (s) | leapfrogs / chain / iteration | '
           'mean check (SE) |', '|---|---|---|---|---|---|---|---|']
  rel = ratios(cell)
  for r in cell['rows']:
    hand, bj = rel[r['system']]
    check = f'{r["mean_z"]:.1f}' + ('' if r['agree'] else ' **differs**')
    lines.append(
        f'| {r["label"]} | {1e3 * r["seconds_per_iteration"]:.1f} | '
        f'{r["leapfrogs_per_second"]:,.0f} | {_x(hand)} | {_x(bj)} | '
        f'{r["first_call_seconds"]:.1f} | '
        f'{r["leapfrogs_per_chain_iteration"]:.1f} | {check} |')
  for name, why in cell['skipped'].items():
    lines.append(f'| {SYSTEMS[name][0]} | skipped: {why} | | | | | | |')
  return '\n'.join(lines)


def counts_markdown():
  return ('Leapfrogs per iteration, as each system counts them (for each '
          "chain, those of its own trajectory): " +
          '; '.join(f'{k}: {v}' for k, v in COUNTS.items()) + '.  ' +
          TRAJECTORIES)


NOTES = (
    'Each cell ran in a fresh process, warmed up first (imports, and a '
    'trivial function traced and compiled by TensorFlow and by JAX, whose '
    'one-time costs the system called first would pay); each system there '
    'was called once (its "first call": tracing and compiling, and one '
    'call\'s sampling), '
    'then the systems were timed in turns, a call of each per round, and '
    'each time is the median of `--repeats` calls.  "leapfrogs/s": '
    'leapfrogs summed over chains and iterations per call, over the median '
    'call time.  "vs hand-batched": leapfrogs/s over '
    '`tfp.mcmc.NoUTurnSampler`\'s in the same TensorFlow mode (XLA for the '
    'JAX rows); "vs BlackJAX": over BlackJAX\'s.  "mean check": the '
    'largest distance over coordinates between the system\'s posterior '
    'mean (over its calls\' draws) and the reference (the Gaussian\'s '
    'mean; for the regression the median of the systems\' means), in '
    'standard errors sd / sqrt(chains); over '
    f'{MEAN_BOUND} is marked.  float32, no adaptation, identity mass '
    f'matrix, max tree depth {MAX_TREE_DEPTH}, the same start for every '
    'system.')


def versions():
  """The installed versions of what the systems run on."""
  out = [f'Python {platform.python_version()}', f'numpy {np.__version__}']
  for module in ('tensorflow', 'tensorflow_probability', 'jax', 'blackjax',
                 'numpyro'):
    try:
      out.append(f'{module} {__import__(module).__version__}')
    except ImportError:
      pass
  return ', '.join(out)


def write(results, out):
  """DIR/results.json and DIR/results.md from `results`: {'command',
  'versions', 'machine', 'cells': [measure_cell's dicts]}."""
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1)
  text = '\n\n'.join(
      ['# NUTS beside BlackJAX, NumPyro and TFP\'s hand-batched sampler',
       f'`{results["command"]}`: {results["machine"]}; '
       f'{results["versions"]}.'] +
      [cell_markdown(c) for c in results['cells']] +
      [counts_markdown(), NOTES])
  with open(os.path.join(out, 'results.md'), 'w') as f:
    f.write(text + '\n')
  print(text)


# -- the command ---------------------------------------------------------------

def parse(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='a smoke run: the Gaussian at 8 chains, 2 '
                      'iterations a call, 1 timed call')
  parser.add_argument('--targets', default='gaussian,logistic')
  parser.add_argument('--chains', default='64,256')
  parser.add_argument('--systems', default=','.join(SYSTEMS))
  parser.add_argument('--iterations', type=int, default=10,
                      help='NUTS iterations per call')
  parser.add_argument('--repeats', type=int, default=5,
                      help='timed calls per system (median)')
  parser.add_argument('--out', default=OUT)
  parser.add_argument('--worker', default=None,
                      help='internal: measure the one cell of --targets x '
                      '--chains here, JSON to this path')
  args = parser.parse_args(argv)
  if args.quick:
    given = ' '.join(argv)
    for name, value in (('targets', 'gaussian'), ('chains', '8'),
                        ('iterations', 2), ('repeats', 1)):
      if f'--{name}' not in given:
        setattr(args, name, value)
  for name in ('targets', 'chains', 'systems'):
    setattr(args, name, [v for v in getattr(args, name).split(',') if v])
  args.chains = [int(c) for c in args.chains]
  unknown = set(args.systems) - set(SYSTEMS)
  if unknown:
    parser.error(f'unknown systems {sorted(unknown)}; known: {list(SYSTEMS)}')
  return args


def main(argv):
  args = parse(argv)
  if args.worker:
    cell = measure_cell(args.targets[0], args.chains[0], args.systems,
                        args.iterations, args.repeats)
    with open(args.worker, 'w') as f:
      json.dump(cell, f)
    return
  cells_ = []
  for target in args.targets:
    for chains in args.chains:
      cells_.append(_in_a_process(argv, target, chains))
  write(dict(command='python benchmarks/nuts_systems.py ' +
             shlex.join(argv), versions=versions(),
             machine=f'{os.cpu_count()} CPUs ({workloads.cpu_model()})',
             cells=cells_), args.out)


def _in_a_process(argv, target, chains):
  """One cell measured by a fresh Python process (`--worker`)."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'cell.json')
    subprocess.run([sys.executable, os.path.abspath(__file__)] + argv + [
        f'--targets={target}', f'--chains={chains}', f'--worker={path}'],
                   check=True)
    with open(path) as f:
      return json.load(f)


if __name__ == '__main__':
  main(sys.argv[1:])
