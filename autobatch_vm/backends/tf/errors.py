"""Errors that only data reveals, in a staged run: parked members.

Recursion deeper than `max_stack_depth` or a failing `assert` cannot
raise inside a graph.  The members involved are *parked* instead: their
PC is set to an error code (`num_blocks + 1 + site`), which stops them
and lets the others finish; after the loop the run fails, or reports
them (see `backends.tf.backend` and `vm.failures`).
"""

import contextlib
import threading

import tensorflow as tf

from autobatch_vm import errors

__all__ = ['Sites', 'Step', 'current_step', 'tracing_step', 'collect_errors',
           'poison']


class Sites:
  """Error sites of one staged run; site k parks members at `base + k`.

  Args:
    num_blocks: The program's blocks (codes start past the exit).
  """

  def __init__(self, num_blocks):
    self.base = num_blocks + 1
    self.makers = []      # site -> function(members) -> AutoBatchError
    self.quiet = set()    # the sites `error_names` leaves out
    # Whether an item index out of range (a per-member read) is reported:
    # not where nothing could report it (under a bare `jit_compile=True`
    # without `on_error='status'`).  There its members are stopped
    # quietly, their outputs poisoned (XLA's own indexing would clamp the
    # index, and a loop such as `while v[i] < t: i += 1` would never
    # end), with no warning when traced, and no correct program is
    # refused for returning a boolean (`vm.failures.refuse_unmarkable`).
    self.reports_indices = True

  def add(self, make_error, quiet=False):
    """Adds a site.

    Args:
      make_error: `make_error(members)` builds the site's error.
      quiet: Whether the site stops its members without its error being
        named where nothing reports it (`error_names`).

    Returns:
      The site's error code.
    """
    self.makers.append(make_error)
    code = self.base + len(self.makers) - 1
    if quiet:
      self.quiet.add(code)
    return code

  def error(self, code, members):
    """The error of the site with `code`.

    Args:
      code: An error code `add` returned.
      members: The members parked there (None: unknown).

    Returns:
      The error.
    """
    return self.makers[code - self.base](members)

  def computes_message(self, code):
    """Whether a site's assert computes its message from members' values.

    Args:
      code: An error code `add` returned.

    Returns:
      True for an assert whose message reads the members' values
      (`assert_maker`), which a traced block never has.
    """
    return getattr(self.makers[code - self.base], 'computes_message', False)

  def graph_messages(self):
    """Each site's message for a graph's assertion (members unknown)."""
    return [without_members(self.error(self.base + k, None))
            for k in range(len(self.makers))]


def without_members(err):
  """The text of `err` for a graph, where the members are unknown."""
  text = str(err)
  for known in (' for batch members None', ' for batch members []'):
    text = text.replace(known, ' for some batch members')
  # Assert prints strings escaped: keep the message on one line.
  lines = [line.strip() for line in text.split('\n') if line.strip()]
  return (f'{type(err).__name__}: {" -- ".join(lines)} (run eagerly to see '
          'which members)')


class Step:
  """Collects what one traced block wants done to the PCs afterwards.

  Args:
    sites: The run's `Sites`.
  """

  def __init__(self, sites):
    self.sites = sites
    self.park = []        # (bool [batch] tensor, code)


_local = threading.local()


def current_step():
  """The `Step` of the block being traced, or None outside the loop."""
  return getattr(_local, 'step', None)


@contextlib.contextmanager
def tracing_step(step):
  """Makes `step` the current step while tracing a block.

  Args:
    step: A `Step`.

  Yields:
    Nothing.
  """
  old = current_step()
  _local.step = step
  try:
    yield
  finally:
    _local.step = old


def explain_symbolic(e):
  """`e`, with a hint if a primitive met a symbolic tensor it cannot use."""
  cause = e.__cause__
  if not (isinstance(cause, (NotImplementedError, TypeError)) or
          type(cause).__name__ == 'OperatorNotAllowedInGraphError'):
    return e
  if 'symbolic' not in str(cause) and 'graph' not in str(cause):
    return e
  return errors.PrimitiveError(
      e.message, loc=e.loc,
      hint='Inside tf.function (or XLA) primitives get symbolic tensors: '
      'use TensorFlow ops (operators, tf.math, tf.gather, ...) rather than '
      'NumPy functions or Python `if` on values, or call the batched '
      'function eagerly.')


def overflow_maker(overflow_error):
  """A site's maker from `overflow_error(members)` (also a step limit's)."""
  def make(members):
    return overflow_error([] if members is None else members)
  return make


def assert_maker(err):
  """A site's maker from the `AssertionFailedError` raised while tracing.

  The maker's `computes_message` says whether the assert's message is
  computed from the members' values (`errors.FailedAssertion`), which a
  traced primitive never sees: the error then shows the message's source.
  """
  def make(members):
    who = 'some batch members' if members is None else \
        f'batch members {errors.member_indices(members)}'
    cause = err.__cause__ if err.__cause__ is not None else err.message
    return errors.AssertionFailedError(f'Assertion failed for {who}: {cause}',
                                       loc=err.loc, hint=err.hint,
                                       members=members)
  make.computes_message = (isinstance(err.__cause__, errors.FailedAssertion)
                           and err.__cause__.message is not None)
  return make


# Error codes of runs traced inside `xla.compile_nested_output`, which checks
# them after the compiled function returns (XLA itself cannot raise).
_collectors = threading.local()


@contextlib.contextmanager
def collect_errors(sink):
  """Makes staged runs append `(code, members_failed, sites)` to `sink`.

  Args:
    sink: A list.

  Yields:
    `sink`.
  """
  stack = getattr(_collectors, 'stack', [])
  _collectors.stack = stack + [sink]
  try:
    yield sink
  finally:
    _collectors.stack = stack


def collecting():
  """Whether a `collect_errors` takes the errors of runs staged now."""
  return bool(getattr(_collectors, 'stack', None))


def report_to_collector(code, failed, sites):
  """Hands the run's error code to `collect_errors`; False if none."""
  stack = getattr(_collectors, 'stack', None)
  if stack:
    stack[-1].append((code, failed, sites))
  return bool(stack)


def error_names(sites):
  """The names of the errors a run's sites raise, sorted; not those of
  quiet sites (`Sites.add`)."""
  return tuple(sorted({type(sites.error(code, [])).__name__
                       for code in range(sites.base,
                                         sites.base + len(sites.makers))
                       if code not in sites.quiet}))


def poison(x, bad):
  """`x` with the rows of the members in `bad` replaced by a marker.

  Args:
    x: A tensor whose axis 0 is the batch.
    bad: A bool tensor `[batch]`.

  Returns:
    NaN for floats, the minimum (or maximum, unsigned) for integers,
    False for booleans, in the rows of `bad`.
  """
  dtype = x.dtype
  if dtype.is_floating or dtype.is_complex:
    value = float('nan')
  elif dtype.is_integer:
    value = dtype.max if dtype.is_unsigned else dtype.min
  elif dtype == tf.bool:
    value = False
  else:
    return x
  if x.shape.rank is None or x.shape.rank == 0:
    return x
  where = tf.reshape(bad, [-1] + [1] * (x.shape.rank - 1))
  return tf.where(where, tf.constant(value, dtype), x)
