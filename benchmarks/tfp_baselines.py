"""TensorFlow Probability baselines, run in the same process as ours.

Used by `benchmarks/run.py` when `tensorflow_probability` imports (the
`bench` extra: TFP 0.25 and the tf-keras matching the TensorFlow installed;
tried with TF 2.18 and with TF 2.21 + tf-keras 2.21).  Each function
returns None when TFP is missing, so the harness runs either way.  Compare
systems only within one run: XLA on TF 2.18 ran both TFP's NUTS and ours
several times slower than on TF 2.21 on the same machine.

- `fibonacci_runner`: TFP's `auto_batching` VM on the same fibonacci.
- `nuts_runner`, a call to time: TFP's autobatched NUTS
  (`tfp.experimental.mcmc.NoUTurnSampler`, built on that VM) and its
  hand-batched NUTS (`tfp.mcmc.NoUTurnSampler`),
  on the same logistic-regression target, from the same warmed-up chains,
  at the same per-chain step sizes, for the same number of transitions.
"""

import contextlib

import numpy as np


@contextlib.contextmanager
def quiet_logs():
  """Only errors from absl and TensorFlow's logger inside: TFP's
  `auto_batching` warns at every program it traces ("Found variables
  with NULL allocation ...", unread variables it drops) and its
  TensorFlow backend trips a `while_loop(back_prop=False)` deprecation,
  lines that would land among the benchmark's progress lines."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  verbosity = absl_logging.get_verbosity()
  tf_level = tf.get_logger().level
  absl_logging.set_verbosity(absl_logging.ERROR)
  tf.get_logger().setLevel('ERROR')
  try:
    yield
  finally:
    absl_logging.set_verbosity(verbosity)
    tf.get_logger().setLevel(tf_level)


def _first_call_quiet(run):
  """`run`, whose first call (which traces TFP's program) is made under
  `quiet_logs`."""
  traced = []

  def call(*args, **kwargs):
    if traced:
      return run(*args, **kwargs)
    with quiet_logs():
      out = run(*args, **kwargs)
    traced.append(True)
    return out
  return call


def _tfp():
  try:
    import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
  except Exception:  # pylint: disable=broad-except  (missing, or wrong TF)
    return None
  return tfp


def available():
  return _tfp() is not None


def fibonacci_runner(backend, n, max_stack_depth=20):
  """A call running TFP's VM on fibonacci(n) (None without TFP); backend is
  'numpy', 'function' (tf.function) or 'xla'."""
  if _tfp() is None:
    return None
  from tensorflow_probability.python.experimental import auto_batching as tfp_ab  # pylint: disable=g-import-not-at-top
  ctx = tfp_ab.Context()

  @ctx.batch(type_inference=lambda arg_types: arg_types[0])
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)
    else:
      return 1

  if backend == 'numpy':
    # TFP's NumPy VM compiles the program, and warns, at every call: a
    # few microseconds of log settings against its milliseconds.
    def run():
      with quiet_logs():
        return fib(n, max_stack_depth=max_stack_depth,
                   backend=tfp_ab.NumpyBackend())
    return run
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  staged = tf.function(
      lambda x: fib(x, max_stack_depth=max_stack_depth,
                    backend=tfp_ab.TensorFlowBackend()),
      jit_compile=(backend == 'xla'))
  n_t = tf.constant(n)
  return _first_call_quiet(lambda: staged(n_t))


TFP_AB_IMPORT = ('from tensorflow_probability.python.experimental import '
                 'auto_batching as ab')


def tfp_nuts_on_autobatch_vm():
  """TFP's own `nuts_autobatching` module, loaded from the installed wheel
  with its one `auto_batching` import rebound to `import autobatch_vm as
  ab` and nothing else changed (None without TFP).

  Raises:
    RuntimeError: the installed file lacks that import line (another TFP
      release), so the module would not run on autobatch_vm.
  """
  tfp = _tfp()
  if tfp is None:
    return None
  import os  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(tfp.__file__), 'python', 'experimental',
                      'mcmc', 'nuts_autobatching.py')
  with open(path) as f:
    source = f.read()
  if source.count(TFP_AB_IMPORT) != 1:
    raise RuntimeError(f'{path} does not import auto_batching as expected')
  module = types.ModuleType('nuts_autobatching_on_autobatch_vm')
  module.__file__ = path
  exec(compile(source.replace(TFP_AB_IMPORT, 'import autobatch_vm as ab'),  # pylint: disable=exec-used
               path, 'exec'), module.__dict__)
  return module


def nuts_runner(kind, backend, target, theta, step_size, num_transitions,
                max_tree_depth, seed=0):
  """TFP's NUTS from `theta` [chains, dim] at per-chain `step_size`.

  kind: 'autobatched' (tfp.experimental.mcmc.NoUTurnSampler, TFP's VM),
  'autobatched_ours' (the same unchanged sampler on autobatch_vm's VM,
  `tfp_nuts_on_autobatch_vm`) or 'unrolled' (tfp.mcmc.NoUTurnSampler,
  hand-batched).  backend: 'function'
  (tf.function, graph) or 'xla'.  Returns `(run, out)`: a call that draws
  `num_transitions` samples, and the dict its calls fill with `samples`
  ([transitions, chains, dim]), `leapfrogs_each` (each chain's leapfrogs
  in each transition, [transitions, chains]: `leapfrogs_per_iteration`)
  and `leapfrogs` (their sum), and holds `trace` (traces the staged
  function, returning its concrete function); `(None, None)` without
  TFP.  `run(draw=k)` makes the hand-batched sampler draw with the
  stateless seed `[seed + k, 1]` (the same numbers for the same k; k = 0
  by default); the autobatched sampler draws new numbers at every call
  whatever k.
  """
  tfp = _tfp()
  if tfp is None:
    return None, None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  theta = tf.constant(theta)
  step = tf.constant(np.asarray(step_size).reshape(-1, 1), theta.dtype)

  if kind == 'unrolled':
    kernel = tfp.mcmc.NoUTurnSampler(target.tf_log_prob, step_size=step,
                                     max_tree_depth=max_tree_depth)
  elif kind in ('autobatched', 'autobatched_ours'):
    module = (tfp.experimental.mcmc if kind == 'autobatched' else
              tfp_nuts_on_autobatch_vm())
    kernel = module.NoUTurnSampler(
        target.tf_log_prob, step_size=step, max_tree_depth=max_tree_depth,
        seed=seed)
  else:
    raise ValueError(f'kind {kind!r}')

  def sample(x, draw):
    kwargs = ({} if kind != 'unrolled' else
              {'seed': tf.stack([seed + draw, 1])})
    return tfp.mcmc.sample_chain(
        num_results=num_transitions, current_state=x, kernel=kernel,
        num_burnin_steps=0, trace_fn=lambda _, kr: kr.leapfrogs_taken,
        **kwargs)

  staged = tf.function(sample, jit_compile=(backend == 'xla'),
                       autograph=False)
  # `trace` traces the staged function for run's arguments, without
  # compiling or calling it (benchmarks/first_call.py times it alone).
  out = {'trace': lambda: staged.get_concrete_function(
      theta, tf.constant(0, tf.int32))}
  draws = {}   # k -> its seed offset as a tensor, made once

  def run(draw=0):
    if draw not in draws:
      draws[draw] = tf.constant(draw, tf.int32)
    samples, leapfrogs = staged(theta, draws[draw])
    out['samples'] = samples.numpy()
    out['leapfrogs_each'] = leapfrogs_per_iteration(kind, leapfrogs.numpy())
    out['leapfrogs'] = float(np.sum(out['leapfrogs_each']))
  return _first_call_quiet(run), out


# The kinds whose kernel results' `leapfrogs_taken` is a running total.
CUMULATIVE_LEAPFROGS = ('autobatched', 'autobatched_ours')


def leapfrogs_per_iteration(kind, trace):
  """Each chain's leapfrogs in each transition, [transitions, chains],
  from the `leapfrogs_taken` of the kernel results after each transition
  of a `sample_chain` call (`trace`, the same shape) of a `nuts_runner`
  kind.

  The hand-batched `tfp.mcmc.NoUTurnSampler` ('unrolled') reports the
  leapfrogs of the transition it made; the autobatched sampler of
  `nuts_autobatching.py` ('autobatched', 'autobatched_ours') adds them to
  the previous results' count, a running total from `bootstrap_results`
  (zero), which `sample_chain` calls at its start: the transitions' own
  counts are its differences.
  """
  trace = np.asarray(trace, np.float64)
  if kind not in CUMULATIVE_LEAPFROGS:
    return trace
  return np.diff(trace, axis=0, prepend=np.zeros_like(trace[:1]))
