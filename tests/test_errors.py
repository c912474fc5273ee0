"""Every user mistake gets a clear error naming the function, file and line.

Each offending line below carries a `# ERR:<tag>` marker; the tests check
that the error names this file, that line, and shows its source.
"""

import collections
import functools
import math
import warnings

import numpy as np
import pytest

import autobatch_vm as ab
from autobatch_vm import errors

_SOURCE = open(__file__).read().splitlines()


def line_of(tag):
  marker = f'# ERR:{tag}'
  matches = [i + 1 for i, l in enumerate(_SOURCE) if l.rstrip().endswith(
      marker)]
  assert len(matches) == 1, tag
  return matches[0]


def check(exc_info, cls, tag, *snippets, function=None):
  e = exc_info.value
  assert type(e) is cls, (type(e), e)
  assert e.filename == __file__, str(e)
  assert e.lineno == line_of(tag), str(e)
  if function:
    assert e.function == function
  text = str(e)
  assert _SOURCE[line_of(tag) - 1].strip().split('# ERR')[0].strip() in text
  for s in snippets:
    assert s in text, (s, text)


X = np.array([1, 2, 3])

# -- unsupported syntax ----------------------------------------------------

UNSUPPORTED = []


def unsupported(tag, *snippets):
  def register(fn):
    UNSUPPORTED.append((tag, snippets, fn))
    return fn
  return register


@unsupported('try', 'try statements')
def uses_try(x):
  try:  # ERR:try
    y = x + 1
  except ValueError:
    y = x
  return y


@unsupported('with', 'with statements')
def uses_with(x):
  with np.errstate(all='ignore'):  # ERR:with
    y = x + 1
  return y


@unsupported('lambda', 'lambdas with control flow')
def uses_lambda(x):
  return np.vectorize(lambda v: v if v > 0 else -v)(x)  # ERR:lambda


@unsupported('lambdavalue', 'lambdas as values are not supported',
             'with `def` at module level')
def assigns_lambda(x):
  fs = (lambda v: v * 2, lambda v: v)  # ERR:lambdavalue
  return fs[0](x)


@unsupported('print', 'print() is not supported', 'dry_run=True',
             'while types are inferred')
def prints(x):
  print('x is', x)  # ERR:print
  return x + 1


@unsupported('append', "`out.append(...)` changes 'out' in place",
             'np.zeros(n)', 'out[k] = x')
def appends(x):
  out = []
  out.append(x * 2)  # ERR:append
  return x


@unsupported('pop', "`s.pop(...)` changes 's' in place")
def pops(x):
  s = [x, x + 1]
  y = s.pop()  # ERR:pop
  return y


def _swap(arr, i, j):
  arr[i], arr[j] = arr[j], arr[i]


@unsupported('helper_write', "calls _swap(), which assigns items of its "
             "parameter 'arr'", 'Return the array from _swap()')
def swaps_in_a_helper(x):
  _swap(x, 0, 1)  # ERR:helper_write
  return x


@unsupported('pow_modulus', 'pow() calls with a modulus',
             'in a batch-aware function', 'per_member=True',
             'square-and-multiply')
def modular_power(x):
  return pow(x, 3, 7)  # ERR:pow_modulus


@unsupported('yield', 'yield')
def uses_yield(x):
  yield x  # ERR:yield
  return x


@unsupported('global', 'global declarations')
def uses_global(x):
  global X  # ERR:global
  return x


@unsupported('del', 'del statements')
def uses_del(x):
  y = x
  del y  # ERR:del
  return x


@unsupported('comprehension', 'comprehensions over batched values')
def uses_comprehension(x):
  return sum([v for v in x])  # ERR:comprehension


@unsupported('for', 'for loops over anything but range')
def uses_for(x):
  total = x * 0
  for v in x:  # ERR:for
    total += v
  return total


@unsupported('itemassign', 'index does not keep axis 0')
def uses_item_assignment(x):
  x[0] = 1  # ERR:itemassign
  return x


@unsupported('noreturn', 'return without a value')
def returns_nothing(x):
  if x > 0:
    return  # ERR:noreturn
  return x


@unsupported('falloff', 'can reach its end without returning')
def falls_off(x):
  if x > 0:
    return x
  y = x + 1  # ERR:falloff


@unsupported('fill_diagonal', "`np.fill_diagonal(...)` writes 'd' in place",
             'np.where(np.eye(d.shape[-1], dtype=bool), v, d)')
def fills_a_diagonal(x):
  d = x * 1.0
  np.fill_diagonal(d, 0)  # ERR:fill_diagonal
  return d


@unsupported('copyto', "`np.copyto(...)` writes 'd' in place")
def copies_into(x):
  d = x * 0.0
  np.copyto(d[0:1], x)  # ERR:copyto
  return d


@unsupported('out', "`np.add(...)` writes 'd' in place")
def adds_into(x):
  d = x * 0.0
  r = np.add(x, 1.0, out=d)  # ERR:out
  return d + r


def maybe_unassigned(x):
  if x > 1:
    y = x
  return y  # ERR:unassigned


def loop_var_after_empty_loop(x):
  for i in range(x):
    x = x + 1
  return x + i  # ERR:loopvar


@pytest.mark.parametrize('tag,snippets,fn', UNSUPPORTED,
                         ids=[u[0] for u in UNSUPPORTED])
def test_unsupported_syntax(tag, snippets, fn):
  ctx = ab.Context()
  batched = ctx.batch()(fn)
  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    batched(X)
  check(e, errors.UnsupportedSyntaxError, tag, *snippets,
        function=fn.__name__)


@pytest.mark.parametrize('tag,snippets,fn', [
    u for u in UNSUPPORTED if u[0] in ('fill_diagonal', 'copyto', 'out')],
                         ids=lambda u: getattr(u, '__name__', None))
def test_an_in_place_numpy_write_is_refused_per_member_too(tag, snippets,
                                                            fn):
  ctx = ab.Context()
  batched = ctx.batch(per_member=True)(fn)
  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    batched(np.ones((2, 3, 3)))
  check(e, errors.UnsupportedSyntaxError, tag, *snippets,
        function=fn.__name__)


def test_a_helper_may_fill_its_own_arrays_diagonal():
  def zero_diagonal(d):
    d = d.copy()
    np.fill_diagonal(d, 0)
    return d

  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def f(m):
    return zero_diagonal(m * 2.0)

  m = np.arange(18.0).reshape(2, 3, 3)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')   # the per-member fallback's
    for stackless in (False, True):
      np.testing.assert_array_equal(
          f(m, stackless=stackless), [zero_diagonal(2.0 * r) for r in m])


@pytest.mark.parametrize('tag,fn,variable', [
    ('unassigned', maybe_unassigned, 'y'),
    ('loopvar', loop_var_after_empty_loop, 'i')])
@pytest.mark.parametrize('mode', ['stack', 'stackless', 'eager'])
def test_a_read_of_a_maybe_unassigned_variable_fails_its_members(
    tag, fn, variable, mode):
  """Python raises UnboundLocalError only for the members whose path left
  the variable unassigned: the program compiles, the others get their
  values, and those members fail at the read, named with the line."""
  ctx = ab.Context()
  batched = ctx.batch()(fn)
  x = np.array([0, 2, 3])
  want = [fn(int(v)) for v in x[1:]]
  if mode == 'eager':
    tf = pytest.importorskip('tensorflow')
    run = lambda v: np.asarray(batched(tf.constant(v)))  # pylint: disable=unnecessary-lambda-assignment
  else:
    run = functools.partial(batched, stackless=mode == 'stackless')
  np.testing.assert_array_equal(run(x[1:]), want)
  with pytest.raises(errors.AssertionFailedError) as e:
    run(x)
  check(e, errors.AssertionFailedError, tag, 'batch members [0]',
        f'local variable {variable!r} is read before it is assigned',
        'UnboundLocalError')
  assert list(e.value.members) == [0]


@pytest.mark.parametrize('jit', [False, True])
def test_a_maybe_unassigned_read_in_a_graph_reports_its_members(jit):
  """Inside `tf.function` and XLA `on_error='status'` gives the members
  without a value as failed, the others their values."""
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()
  batched = ctx.batch()(maybe_unassigned)
  x = tf.constant([0, 2, 3])
  out, ok = tf.function(lambda v: batched(v, on_error='status'),
                        jit_compile=jit)(x)
  np.testing.assert_array_equal(np.asarray(ok), [False, True, True])
  np.testing.assert_array_equal(np.asarray(out)[1:], [2, 3])


def test_nonlocal_is_rejected():
  ctx = ab.Context()
  count = 0

  @ctx.batch()
  def uses_nonlocal(x):
    nonlocal count  # ERR:nonlocal
    return x

  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    uses_nonlocal(X)
  check(e, errors.UnsupportedSyntaxError, 'nonlocal', 'nonlocal')
  del count


def test_starred_call_of_batched_function():
  ctx = ab.Context()

  @ctx.batch()
  def callee(a, b):
    return a + b

  @ctx.batch()
  def caller(x):
    args = (x, x)
    return callee(*args)  # ERR:starred

  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    caller(X)
  check(e, errors.UnsupportedSyntaxError, 'starred', 'starred arguments')


# -- names, arity, arguments -----------------------------------------------

def test_unknown_name():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x + not_defined_anywhere  # noqa: F821  # ERR:name

  with pytest.raises(errors.NameResolutionError) as e:
    f(X)
  check(e, errors.NameResolutionError, 'name', "'not_defined_anywhere'")


def test_arity_error_inside_batched_code():
  ctx = ab.Context()

  @ctx.batch()
  def g(a, b):
    return a + b

  @ctx.batch()
  def f(x):
    return g(x)  # ERR:arity

  with pytest.raises(errors.ArgumentError) as e:
    f(X)
  check(e, errors.ArgumentError, 'arity', 'takes 2 argument(s)')


def test_unknown_keyword_inside_batched_code():
  ctx = ab.Context()

  @ctx.batch()
  def g(a):
    return a

  @ctx.batch()
  def f(x):
    return g(b=x)  # ERR:kwarg

  with pytest.raises(errors.ArgumentError) as e:
    f(X)
  check(e, errors.ArgumentError, 'kwarg', "unexpected keyword argument 'b'")


def test_wrong_arguments_from_python():
  ctx = ab.Context()

  @ctx.batch()
  def f(x, y):
    return x + y

  with pytest.raises(errors.ArgumentError, match='takes 2 positional argument'):
    f(X, X, X)
  with pytest.raises(errors.ArgumentError, match='missing argument'):
    f(X)
  with pytest.raises(errors.ArgumentError, match="unexpected keyword"):
    f(X, z=X)
  with pytest.raises(errors.ArgumentError, match='different batch sizes'):
    f(X, np.array([1, 2]))
  with pytest.raises(errors.ArgumentError, match='different batch sizes'):
    f(np.array([1, 2, 3]), np.array([1, 2, 3, 4]))
  with pytest.raises(errors.ArgumentError, match='not an array'):
    f('abc', X)
  # None runs as Python runs it: `None + y` fails, at the user's line.
  with pytest.raises(errors.PrimitiveError, match='NoneType') as e:
    f(None, X)
  assert e.value.function == 'f' and e.value.filename == __file__
  with pytest.raises(errors.ArgumentError, match='Ragged'):
    f([[1, 2], [3]], X)
  with pytest.raises(errors.ArgumentError) as e:
    f(X, y=X, x=X)
  assert e.value.function == 'f' and e.value.filename == __file__


def test_batched_keyword_arguments_work():
  ctx = ab.Context()

  @ctx.batch()
  def f(x, y):
    return x - y

  np.testing.assert_array_equal(f(y=X, x=X * 3), X * 2)


# -- types -----------------------------------------------------------------

def test_branches_with_different_dtypes_give_numpys_common_dtype():
  # Per member `y` is an int32 or a float32; the members' values together
  # are NumPy's float64 (`np.stack`), as the dry run gives them.
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    if x > 1:
      y = x.astype(np.int32)
    else:
      y = x.astype(np.float32)
    return y

  x = np.array([0.5, 1.5, 2.5])
  assert f(x).dtype == f(x, dry_run=True).dtype == np.float64
  np.testing.assert_array_equal(f(x), f(x, dry_run=True))


def _literal_sensitive(x, k):
  """A primitive that is one thing for a Python literal `k`, another for an
  array: no dtype of the array makes the batched run agree with a member's."""
  if isinstance(k, int):
    return np.stack([x, x], axis=-1)
  return x


def test_literal_variable_that_no_dtype_can_represent():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    k = 2
    if x > 5:
      k = 3
    return _literal_sensitive(x, k)  # ERR:literal

  with pytest.raises(errors.TypeInferenceError) as e:
    f(np.array([1.0, 2.0], np.float32))
  check(e, errors.TypeInferenceError, 'literal', "'k', which holds a Python "
        'literal', 'np.int32(0)')


def test_a_counter_given_to_a_scalar_only_function_names_the_batch():
  # `math.factorial(i)` of a `for` counter in a batch-aware function was
  # refused as a literal's dtype ("Give the literal a dtype ..., e.g.
  # `i = np.int32(0)`"), which a `for` target has no place for.
  ctx = ab.Context()

  @ctx.batch()
  def series(x, n):
    s = x * 0
    for i in range(n):
      s = s + x ** i / math.factorial(i)  # ERR:factorial
    return s

  args = [np.array([0.5, 1.0]), np.array([3, 4])]
  calls = [lambda: series(*args)]
  tf = pytest.importorskip('tensorflow')
  calls.append(lambda: series(*[tf.constant(a) for a in args]))
  for call in calls:
    with pytest.raises(errors.TypeInferenceError) as e:
      call()
    check(e, errors.TypeInferenceError, 'factorial',
          "needs one Python number where 'i' holds a number for each "
          'member', 'per_member=True')
    assert 'np.int32(0)' not in str(e.value)


def test_literal_variables_are_cast_where_they_meet_arrays():
  ctx = ab.Context()

  @ctx.batch()
  def f(n):
    k = 2
    if n > 1:
      k = 3
    return n + k

  n = np.array([1, 2], np.int32)
  assert 'cast(f.k:int32)' in str(ctx.lowered_for_args('f', [n]))
  assert f(n).dtype == np.int32
  np.testing.assert_array_equal(f(n), [3, 5])


def test_a_local_assigned_one_literal_takes_the_dtype_it_meets():
  ctx = ab.Context()

  @ctx.batch()
  def f(n):
    k = 2
    return n + k

  n = np.array([1, 2], np.int32)
  assert 'f.k' not in str(ctx.lowered_for_args('f', [n]))
  assert f(n).dtype == np.int32
  np.testing.assert_array_equal(f(n), [3, 4])


def test_branches_with_different_shapes():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    if x > 1:
      return np.stack([x, x], axis=-1)
    return np.stack([x, x, x], axis=-1)  # ERR:shapes

  with pytest.raises(errors.TypeInferenceError) as e:
    f(X)
  check(e, errors.TypeInferenceError, 'shapes', 'different shapes')


_Left = collections.namedtuple('_Left', 'a b')
_Right = collections.namedtuple('_Right', 'a b')


def returns_two_classes(x):
  if x > 1:
    return _Left(x, x + 1)
  return _Right(x, x - 1)  # ERR:classes


def assigns_two_classes(x):
  if x > 1:
    r = _Left(x, x + 1)
  else:
    r = _Right(x, x - 1)  # ERR:classes_pm
  return r


@pytest.mark.parametrize('fn,tag,per_member', [
    (returns_two_classes, 'classes', False),
    (assigns_two_classes, 'classes_pm', True)])
def test_branches_with_different_namedtuple_classes(fn, tag, per_member):
  # One class for every member: the batched result would have had the
  # first class for every member, where each member's is its own.
  batched = ab.Context().batch(per_member=per_member)(fn)
  for stackless in (False, True):
    with pytest.raises(errors.TypeInferenceError) as e:
      batched(X, stackless=stackless)
    check(e, errors.TypeInferenceError, tag, '_Left vs _Right',
          'different classes')
  # The dry run refuses members whose classes differ, and runs members
  # that agree.
  with pytest.raises(errors.TypeInferenceError,
                     match='different classes') as e:
    batched(X, dry_run=True)
  assert e.value.function == fn.__name__ and e.value.filename == __file__
  got = batched(np.array([2, 3]), dry_run=True)
  assert type(got) is _Left
  np.testing.assert_array_equal(got.b, [3, 4])


@pytest.mark.parametrize('per_member', [False, True])
def test_a_dict_result_is_refused_batched_and_in_the_dry_run(per_member):
  ctx = ab.Context()

  def named(x):
    return {'a': x, 'b': x * 2}  # ERR:dict_result

  fn = ctx.batch(per_member=per_member)(named)
  with pytest.raises(errors.TypeInferenceError) as e:
    fn(X)
  check(e, errors.TypeInferenceError, 'dict_result', 'produced a dict',
        'namedtuple')
  with pytest.raises(errors.TypeInferenceError, match='returns a dict') as e:
    fn(X, dry_run=True)
  assert e.value.function == 'named' and e.value.filename == __file__
  assert 'namedtuple' in str(e.value)


def test_a_namedtuple_of_one_class_on_every_path_still_runs():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    if x > 1:
      r = _Left(x, x + 1)
    else:
      r = _Left(x, x - 1)
    return r

  for stackless in (False, True):
    got = f(X, stackless=stackless)
    assert type(got) is _Left
    np.testing.assert_array_equal(got.b, [0, 3, 4])


def _check_declared(type_inference, exc_type, *snippets):
  ctx = ab.Context()

  def f(x):
    return x * 2
  f = ctx.batch(type_inference=type_inference)(f)
  with pytest.raises(exc_type) as e:
    f(X)
  assert e.value.function == 'f'
  assert e.value.filename == __file__
  for s in snippets:
    assert s in str(e.value), str(e.value)


def test_type_inference_declared_dtype_and_shape_win():
  # As in TFP: the declared dtype is authoritative; results are cast to
  # it, in both modes.
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: [ab.TensorType(np.float32, ())])
  def f(x):
    return x * 2

  @ctx.batch(type_inference=lambda t: [ab.TensorType(np.int32, ())])
  def g(x):
    return True

  for stackless in (False, True):
    out = f(X, stackless=stackless)
    assert out.dtype == np.float32 and out.shape == X.shape
    np.testing.assert_array_equal(out, X * 2)
    out = g(X, stackless=stackless)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.ones(len(X)))


def test_type_inference_wrong_shape():
  # The declared result is not computed on made-up data; its first real
  # run checks its shape.
  _check_declared(lambda t: ab.TensorType(np.int64, (3,)),
                  errors.TypeInferenceError, 'does not match',
                  'members of shape ()', 'declared (3,)', 'type_inference')


def test_type_inference_declared_real_for_a_complex_result():
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: [ab.TensorType(np.float64, ())])
  def f(x):
    return x * 1j

  with pytest.raises(errors.TypeInferenceError) as e:
    f(X)
  assert e.value.function == 'f' and 'complex to real' in str(e.value)


def test_type_inference_wrong_structure():
  _check_declared(lambda t: (t[0], t[0]), errors.TypeInferenceError,
                  'different structures')


def test_type_inference_returns_garbage():
  _check_declared(lambda t: 'int', errors.TypeInferenceError,
                  "returned 'int'")


def test_type_inference_raises():
  def bad(arg_types):
    raise KeyError('oops')
  _check_declared(bad, errors.TypeInferenceError, 'raised KeyError')


def test_no_base_case():
  ctx = ab.Context()

  @ctx.batch()
  def forever(x):  # ERR:nobase
    return forever(x - 1) + 1

  with pytest.raises(errors.TypeInferenceError) as e:
    forever(X)
  check(e, errors.TypeInferenceError, 'nobase', 'Cannot determine the '
        'return type', 'type_inference')


def test_primitive_without_batch_dimension():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return np.sum(x)  # ERR:nobatch

  with pytest.raises(errors.TypeInferenceError) as e:
    f(X)
  check(e, errors.TypeInferenceError, 'nobatch', 'batch dimension')


def test_condition_must_be_per_member_scalar():
  ctx = ab.Context()

  @ctx.batch()
  def f(v):
    if v > 0:  # ERR:vectorcond
      return v
    return -v

  with pytest.raises(errors.TypeInferenceError) as e:
    f(np.ones((3, 2)))
  check(e, errors.TypeInferenceError, 'vectorcond', 'one boolean per member')


def test_unpacking_an_array():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    a, b = x * 2  # ERR:unpack
    return a

  with pytest.raises(errors.TypeInferenceError) as e:
    f(X)
  check(e, errors.TypeInferenceError, 'unpack', 'cannot unpack')


# -- run time --------------------------------------------------------------

def test_primitive_raises_during_inference():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x + 'text'  # ERR:primtype

  with pytest.raises(errors.PrimitiveError) as e:
    f(X)
  check(e, errors.PrimitiveError, 'primtype', 'while inferring')
  assert e.value.__cause__ is not None


TABLE = np.arange(5)


def test_primitive_raises_for_some_members():
  ctx = ab.Context()

  @ctx.batch()
  def f(i):
    if i > 2:
      return TABLE[i * 10]  # ERR:index
    return i

  with pytest.raises(errors.PrimitiveError) as e:
    f(np.array([0, 5, 1, 3]))
  check(e, errors.PrimitiveError, 'index', 'IndexError', '[1, 3]')
  assert isinstance(e.value.__cause__, IndexError)


@pytest.mark.parametrize('stackless', [False, True])
def test_assert_names_failing_members(stackless):
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    assert x < 3, 'x too big'  # ERR:assert
    return x + 1

  np.testing.assert_array_equal(f(np.array([0, 1]), stackless=stackless),
                                [1, 2])
  with pytest.raises(errors.AssertionFailedError) as e:
    f(np.array([0, 5, 1, 7]), stackless=stackless)
  check(e, errors.AssertionFailedError, 'assert', 'x too big', '[1, 3]')


def test_stack_overflow():
  ctx = ab.Context()

  @ctx.batch()
  def depth(n):
    if n > 0:
      return depth(n - 1) + 1  # ERR:overflow
    return n

  # depth(11) makes 11 nested calls; the last, to the base case, pushes
  # nothing (it jumps to a copy of the base case: leaf_returns).
  np.testing.assert_array_equal(depth(np.array([3, 11]),
                                      max_stack_depth=10), [3, 11])
  with pytest.raises(errors.StackOverflowError) as e:
    depth(np.array([3, 12]), max_stack_depth=10)
  check(e, errors.StackOverflowError, 'overflow', 'max_stack_depth=10',
        "'depth'", '[1]')


def test_stackless_overflow_is_clear():
  ctx = ab.Context()

  @ctx.batch()
  def deep(n):
    if n > 0:
      return deep(n - 1) + 1  # ERR:stackless
    return n

  with pytest.raises(errors.StackOverflowError) as e:
    deep(np.array([100000]), stackless=True)
  check(e, errors.StackOverflowError, 'stackless', 'stackless')


def test_bad_mode_arguments():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x

  with pytest.raises(errors.ArgumentError, match='max_stack_depth'):
    f(X, max_stack_depth=0)
  with pytest.raises(errors.ArgumentError, match='schedule'):
    f(X, schedule='random')


def test_a_mode_takes_any_integer_and_names_what_it_takes():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x

  np.testing.assert_array_equal(f(X, max_stack_depth=np.int64(20)), X)
  np.testing.assert_array_equal(f(X, max_stack_depth=np.int32(3),
                                  stackless=True), X)
  np.testing.assert_array_equal(f(X, max_steps=np.int64(50)), X)
  for bad in (2.5, -1, True, np.float64(20.0), '20'):
    with pytest.raises(errors.ArgumentError, match='max_stack_depth') as e:
      f(X, max_stack_depth=bad)
    assert e.value.function == 'f' and e.value.filename == __file__
    assert 'any integer type' in str(e.value)
  with pytest.raises(errors.ArgumentError, match='max_steps'):
    f(X, max_steps=np.float32(50))


@pytest.mark.parametrize('name', ['numpy', 'tensorflow', 'np', None])
def test_a_backend_given_by_name_says_to_pass_the_backend_object(name):
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x

  backend = name or object()
  for dry_run in (False, True):
    with pytest.raises(errors.ArgumentError, match='backend must be') as e:
      f(X, backend=backend, dry_run=dry_run)
    assert 'ab.NumpyBackend()' in str(e.value)
    assert 'ab.TensorFlowBackend()' in str(e.value)
    assert e.value.function == 'f' and e.value.filename == __file__


def test_star_parameters_are_refused_where_the_function_is_batched():
  def star(x, *rest):  # ERR:star_params
    return x

  def star_star(x, **options):  # ERR:star_star_params
    return x

  def only_positional(x, /, y):  # ERR:positional_only
    return x + y

  for fn, tag, what in ((star, 'star_params', '*rest'),
                        (star_star, 'star_star_params', '**options'),
                        (only_positional, 'positional_only',
                         'positional-only x')):
    for per_member in (False, True):
      with pytest.raises(errors.UnsupportedSyntaxError) as e:
        ab.Context().batch(per_member=per_member)(fn)
      check(e, errors.UnsupportedSyntaxError, tag, what,
            'must take named parameters', function=fn.__name__)


def test_step_limit_names_where_the_members_are():
  ctx = ab.Context()

  @ctx.batch()
  def spin(n):
    k = 0
    while n > 0:  # ERR:spin
      n = n + 1
      k += 1
    return k

  np.testing.assert_array_equal(spin(np.array([0, -3]), max_steps=10), [0, 0])
  for stackless in (False, True):
    with pytest.raises(errors.StepLimitError) as e:
      spin(np.array([4, 2]), max_steps=40, stackless=stackless)
    assert e.value.function == 'spin' and e.value.filename == __file__
    assert line_of('spin') <= e.value.lineno <= line_of('spin') + 2
    assert 'max_steps=40' in str(e.value) and '[0, 1]' in str(e.value)
    assert 'larger max_steps=' in str(e.value)
    if not stackless:   # the VM names the loop the members are in
      assert e.value.lineno == line_of('spin')
      assert 'in the loop (or recursion) at this line' in str(e.value)


def test_numpy_step_limit_names_the_users_loop_and_its_members():
  # The stack VM on NumPy names the innermost loop (or recursive call)
  # the members are still in, and only them (not those waiting behind
  # them, outside it), as a staged TensorFlow run does.
  ctx = ab.Context()

  @ctx.batch()
  def nested_spin(n):
    i = n * 0
    while i < n:
      j = i * 0
      while j < i:  # ERR:nested_spin
        j = j * 1
      i = i + 1
    return i

  @ctx.batch()
  def fib(n):
    if n > 2:
      return fib(n - 1) + fib(n - 2)  # ERR:fib
    return 1

  cases = [(nested_spin, [1, 3, 0], r'\[1\]'), (fib, [14, 2], r'\[0\]')]
  for fn, n, members in cases:
    with pytest.raises(errors.StepLimitError, match=members) as e:
      fn(np.array(n), max_steps=40, max_stack_depth=20, stackless=False)
    assert e.value.filename == __file__
    assert e.value.lineno == line_of(fn.name), fn.name
    assert 'in the loop (or recursion) at this line' in str(e.value)


def test_max_steps_must_be_a_positive_int():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x

  for bad in (0, -1, 2.5, True, '10'):
    with pytest.raises(errors.ArgumentError, match='max_steps'):
      f(X, max_steps=bad)
  np.testing.assert_array_equal(f(X, max_steps=1), X)


def test_internal_errors_are_separate():
  assert not issubclass(errors.InternalError, errors.AutoBatchError)
  assert 'bug in autobatch_vm' in str(errors.InternalError('x'))


Pair = collections.namedtuple('Pair', 'a b')


def test_namedtuple_field_typo():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    p = Pair(x, x)
    return p.c  # ERR:field

  with pytest.raises(errors.PrimitiveError) as e:
    f(X)
  check(e, errors.PrimitiveError, 'field', 'AttributeError')


def test_unbatched_constant_inside_tuple_says_how_to_fix():
  """Found by the fuzzer: `return np.minimum(0, 0), x`."""
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return np.minimum(0, 0), x  # ERR:consttuple

  with pytest.raises(errors.TypeInferenceError) as e:
    f(X)
  check(e, errors.TypeInferenceError, 'consttuple', 'its own statement')

  @ctx.batch()
  def g(x):
    zero = np.minimum(0, 0)
    return zero, x

  out = g(X)
  np.testing.assert_array_equal(out[0], [0, 0, 0])


def test_whole_batch_reduction_of_float64_is_rejected():
  """np.float64 is a float subclass; it is no broadcast literal."""
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x.sum()  # ERR:f64sum

  with pytest.raises(errors.TypeInferenceError) as e:
    f(np.ones((4, 2)))
  check(e, errors.TypeInferenceError, 'f64sum', 'batch dimension')


def test_mistake_in_unreachable_function_does_not_stop_others():
  ctx = ab.Context()

  @ctx.batch()
  def good(x):
    return x + 1

  @ctx.batch()
  def bad(x):
    try:  # ERR:unreachable_bad
      return x
    except ValueError:
      return x

  np.testing.assert_array_equal(good(X), X + 1)
  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    bad(X)
  check(e, errors.UnsupportedSyntaxError, 'unreachable_bad', 'try')


# -- messages that name the user's code ------------------------------------

def positive_part(v):
  assert np.all(v >= 0), 'needs non-negative input'  # ERR:helperassert
  return np.sqrt(v)


@pytest.mark.parametrize('stackless', [False, True])
def test_assert_in_a_helper_is_reported_as_an_assertion(stackless):
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    y = positive_part(x)  # ERR:helpercall
    return y + 1.0

  x = np.array([1.0, 4.0])
  np.testing.assert_allclose(f(x, stackless=stackless), [2.0, 3.0])
  np.testing.assert_allclose(f(x, dry_run=True), [2.0, 3.0])
  with pytest.raises((errors.AssertionFailedError, errors.PrimitiveError)) \
      as e:
    f(np.array([1.0, -4.0]), stackless=stackless)
  # Found by the run (an AssertionFailedError) or, where type inference
  # runs on the members' data, while inferring the type.
  check(e, type(e.value), 'helpercall', 'an assert in positive_part()',
        f'line {line_of("helperassert")}', 'needs non-negative input',
        function='f')
  assert 'NoneType' not in str(e.value)
  assert isinstance(e.value.__cause__, (AssertionError,
                                        errors.HelperAssertionError))


def test_dry_run_runs_print_per_member(capsys):
  ctx = ab.Context()

  @ctx.batch()
  def shows(x):
    print('member', x)  # ERR:printdry
    return x * 2

  with pytest.raises(errors.UnsupportedSyntaxError) as e:
    shows(X)
  check(e, errors.UnsupportedSyntaxError, 'printdry', 'print()',
        'dry_run=True', function='shows')
  assert capsys.readouterr().out == ''   # nothing printed on made-up data
  np.testing.assert_array_equal(shows(X, dry_run=True), X * 2)
  assert capsys.readouterr().out.splitlines() == [
      'member [1]', 'member [2]', 'member [3]']


@pytest.mark.parametrize('backend', ['numpy', 'tensorflow'])
def test_stack_overflow_names_the_users_expression(backend):
  ctx = ab.Context()

  @ctx.batch()
  def ack(m, n):
    if m == 0:
      return n + 1
    if n == 0:
      return ack(m - 1, 1)
    return ack(m - 1, ack(m, n - 1))  # ERR:ackoverflow

  m, n = np.array([1, 3]), np.array([1, 4])
  if backend == 'tensorflow':
    tf = pytest.importorskip('tensorflow')
    m, n = tf.constant(m), tf.constant(n)
  with pytest.raises(errors.StackOverflowError) as e:
    ack(m, n, max_stack_depth=5, stackless=False)
  check(e, errors.StackOverflowError, 'ackoverflow', '[1]',
        'saving the value of `m - 1`', function='ack')
  assert '%' not in str(e.value) and 'ack.' not in str(e.value)


def test_stack_overflow_names_the_users_variable():
  ctx = ab.Context()

  @ctx.batch()
  def down(n, acc):
    if n <= 0:
      return acc
    r = down(n - 1, acc + 1)  # ERR:downoverflow
    return r + n

  with pytest.raises(errors.StackOverflowError) as e:
    down(np.array([2, 9]), np.array([0, 0]), max_stack_depth=4,
         stackless=False)
  check(e, errors.StackOverflowError, 'downoverflow',
        "saving variable 'n'", '[1]', function='down')


def test_dtype_mismatch_gets_a_dtype_hint_not_a_made_up_data_hint():
  tf = pytest.importorskip('tensorflow')
  ctx = ab.Context()

  @ctx.batch()
  def add(x, t):
    return tf.add(x, t)  # ERR:dtypemix

  with pytest.raises(errors.PrimitiveError) as e:
    add(np.array([1, 2]), tf.constant([1, 2], tf.int32))
  check(e, errors.PrimitiveError, 'dtypemix', 'int32', 'same dtype',
        function='add')
  assert 'made-up' not in str(e.value) and 'zeros' not in str(e.value)
  assert e.value.__cause__ is not None
  # The same inputs with one dtype add up.
  np.testing.assert_array_equal(
      add(np.array([1, 2]), tf.constant([1, 2], tf.int64)).numpy(), [2, 4])


def test_domain_errors_keep_the_made_up_data_hint():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return x + 'text'  # ERR:notdtype

  with pytest.raises(errors.PrimitiveError) as e:
    f(X)
  check(e, errors.PrimitiveError, 'notdtype', 'while inferring')
  assert 'does not promote' not in str(e.value)


_xla_ctx = ab.Context()


@_xla_ctx.batch()
def _xla_fib(n):
  if n < 2:
    return n + 0.0
  return _xla_fib(n - 1) + _xla_fib(n - 2)


@_xla_ctx.batch()
def _grow(x, n):
  i = 0
  while i < n:
    x = x * 1.5
    i += 1
  return x


def test_xla_warnings_point_at_the_users_call():
  tf = pytest.importorskip('tensorflow')

  @tf.function(jit_compile=True)
  def compiled(n):
    return _xla_fib(n)

  with pytest.warns(errors.XlaErrorsWarning) as record:
    out = compiled(tf.constant([5.0, 6.0]))  # ERR:xlawarning
  np.testing.assert_allclose(out.numpy(), [5.0, 8.0])
  hits = [w for w in record if w.category is errors.XlaErrorsWarning]
  assert hits and all(w.filename == __file__ for w in hits), [
      (w.filename, w.lineno) for w in hits]
  assert all(w.lineno in (line_of('xlawarning'), compiled.python_function
                          .__code__.co_firstlineno + 2) for w in hits)


@pytest.mark.slow
def test_xla_gradient_without_max_steps_says_to_pass_it():
  tf = pytest.importorskip('tensorflow')
  x = tf.constant([1.0, 2.0])
  n = tf.constant([2, 3])

  def gradient(max_steps):
    def grad(x, n):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = _grow(x, n, max_steps=max_steps)
      return tape.gradient(y, x)
    return grad

  with pytest.warns(errors.XlaGradientWarning, match='max_steps=') as record:
    with pytest.raises(errors.BackendError, match='max_steps=') as e:
      ab.xla.compile_nested_output(gradient(None))(x, n)  # ERR:xlagrad
  assert 'fixed tensor list size' in str(e.value)
  assert [w.filename for w in record
          if w.category is errors.XlaGradientWarning] == [__file__]
  # With max_steps the gradient compiles: d(1.5**n x)/dx = 1.5**n.
  g = ab.xla.compile_nested_output(gradient(50))(x, n)
  np.testing.assert_allclose(g.numpy(), [1.5 ** 2, 1.5 ** 3], rtol=1e-6)


def test_lambda_passed_to_a_function_still_works():
  ctx = ab.Context()

  @ctx.batch()
  def f(x):
    return np.apply_along_axis(lambda r: r * 2, 1, x)

  x = np.arange(6.0).reshape(3, 2)
  np.testing.assert_array_equal(f(x), x * 2)
  np.testing.assert_array_equal(f(x, dry_run=True), x * 2)


def _first_rows(x):
  if x > 0:
    y = x[:1] * 2  # ERR:first_rows
  else:
    y = x + 1
  return y


def _broadcasts(x):
  z = np.ones((1, 3))   # a constant: a batch of one, broadcast
  return z + x[:, :1] * 2


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'graph', 'xla'])
@pytest.mark.parametrize('stackless', [False, True])
def test_primitive_returning_other_rows_than_members(backend, stackless):
  # `x[:1]` is the first member's row, not a row of each member: rather
  # than broadcast it to the members (a silently wrong value), the VM says
  # what went wrong, in every backend and mode.
  if backend != 'numpy':
    tf = pytest.importorskip('tensorflow')
  if stackless and backend in ('graph', 'xla'):
    pytest.skip('stackless runs eagerly')
  ctx = ab.Context()
  first_rows = ctx.batch()(_first_rows)
  broadcasts = ctx.batch()(_broadcasts)
  x = np.array([1.0, 2.0, -1.0, 3.0])
  v = np.arange(8.0).reshape(4, 2)
  options = dict(stackless=stackless)
  if backend == 'numpy':
    run, run_b = first_rows, broadcasts
  else:
    options['backend'] = ab.TensorFlowBackend()
    x, v = tf.constant(x), tf.constant(v)
    run, run_b = first_rows, broadcasts
    if backend != 'eager':
      jit = backend == 'xla'
      run = tf.function(lambda a: first_rows(a, **options), jit_compile=jit)
      run_b = tf.function(lambda a: broadcasts(a, **options),
                          jit_compile=jit)
      options = {}
  np.testing.assert_allclose(run_b(v, **options),
                             np.ones((4, 3)) + v[:, :1] * 2)
  with pytest.raises(errors.PrimitiveError) as e:
    run(x, **options)
  check(e, errors.PrimitiveError, 'first_rows', '1 row for',
        'one row per member', function='_first_rows')


_WEIGHTS = np.array([1.0, 2.0, 3.0])


def _shared_rows(x, k):
  pos = np.arange(x.shape[-1])[None, :]   # one row, every member's
  w = _WEIGHTS[None] + np.zeros((1, x.shape[-1]))
  s = x * 0.0
  while k > 0:
    s = s + w * pos
    k = k - 1
  return s.sum(axis=-1)


def _batch_row(x):
  m = x.sum(0, keepdims=True)  # ERR:batch_row
  return (x - m).sum(axis=-1)


@pytest.mark.parametrize('backend', ['numpy', 'eager', 'graph', 'xla'])
@pytest.mark.parametrize('stackless', [False, True])
def test_primitive_returning_a_row_every_member_shares(backend, stackless):
  # A primitive of per-member inputs may compute one row that no member's
  # values change (`np.arange(x.shape[-1])[None, :]`): NumPy broadcasts it
  # against the members' rows, and so does the VM.  A row that does follow
  # the members' values (`x.sum(0, keepdims=True)`) is still refused.
  if backend != 'numpy':
    tf = pytest.importorskip('tensorflow')
  if stackless and backend in ('graph', 'xla'):
    pytest.skip('stackless runs eagerly')
  ctx = ab.Context()
  shared = ctx.batch()(_shared_rows)
  batch_row = ctx.batch()(_batch_row)
  x = np.arange(12.0).reshape(4, 3)
  k = np.array([0, 1, 3, 2])
  want = k * (_WEIGHTS * np.arange(3.0)).sum()
  np.testing.assert_allclose(shared(x, k, dry_run=True), want)
  options = dict(stackless=stackless)
  run, run_b = shared, batch_row
  if backend != 'numpy':
    options['backend'] = ab.TensorFlowBackend()
    x, k = tf.constant(x), tf.constant(k)
    if backend != 'eager':
      jit = backend == 'xla'
      run = tf.function(lambda a, b: shared(a, b, **options),
                        jit_compile=jit)
      run_b = tf.function(lambda a: batch_row(a, **options),
                          jit_compile=jit)
      options = {}
  np.testing.assert_allclose(run(x, k, **options), want)
  with pytest.raises(errors.PrimitiveError) as e:
    run_b(x, **options)
  check(e, errors.PrimitiveError, 'batch_row', '1 row for',
        'one row per member', function='_batch_row')
  if backend == 'numpy':
    printed = str(ctx.lowered_for_args('_shared_rows', [x, k]))
    assert 'prim[np.arange(x.shape[-1])[None, :]](_shared_rows.x) broadcast' in printed


# -- Python number arguments ---------------------------------------------------
# A Python number argument is a literal: it takes the dtype it meets.  Where
# it cannot (a float joined with int32 data), the variable where they meet
# takes NumPy's common dtype, as the members' values stacked have it.

_number_ctx = ab.Context()


@_number_ctx.batch
def stepped(n, step=0.5):
  k = step
  if n > 0:
    k = n
  return k


@_number_ctx.batch
def widen(n, factor):
  return n * 0 + factor


@_number_ctx.batch
def widen_both(n, step):
  return widen(n, n) + widen(n, step)


@pytest.mark.parametrize('stackless', [False, True])
def test_a_python_number_argument_that_cannot_take_a_dtype_widens(
    stackless):
  n = np.array([1, -2, 3], np.int32)
  out = stepped(n, stackless=stackless)
  assert out.dtype == np.float64
  np.testing.assert_array_equal(out, [1, 0.5, 3])
  np.testing.assert_array_equal(stepped(n, dry_run=True), [1, 0.5, 3])
  np.testing.assert_array_equal(stepped(n, 2.5, stackless=stackless),
                                [1, 2.5, 3])
  # In the dtype meant, or as an int, it stays int32.
  assert stepped(n, np.int32(7)).dtype == np.int32
  np.testing.assert_array_equal(stepped(n, np.int32(7)), [1, 7, 3])
  np.testing.assert_array_equal(stepped(n, 7), [1, 7, 3])


def test_a_python_number_argument_passed_on_widens_the_parameter():
  n = np.array([1, 2], np.int32)
  np.testing.assert_array_equal(widen_both(n, 0.5), [1.5, 2.5])
  np.testing.assert_array_equal(widen_both(n, 0.5, dry_run=True), [1.5, 2.5])
  np.testing.assert_array_equal(widen_both(n, 3), [4, 5])
  assert widen(n, 0.5).dtype == np.float64
  assert widen(np.array([1.0], np.float32), 0.5).dtype == np.float32


def test_a_python_scalar_of_an_array_raises_on_every_numpy():
  """`float()` of an array of one element raises inside the library's
  runs, as on the newest NumPy, also on one that only warns; the warning
  filters are as they were after it."""
  before = list(warnings.filters)
  for x in (np.zeros(1), np.zeros((1, 1))):
    with pytest.raises(TypeError, match=errors.SCALAR_CONVERSION_MESSAGE):
      with errors.scalar_conversions_raise():
        float(x)
  assert list(warnings.filters) == before
  with errors.scalar_conversions_raise():
    assert float(np.float64(2.0)) == 2.0 and float(np.array(3.0)) == 3.0


def _closure_of(pick):
  def argument(x):
    return pick(x)
  return argument


def test_a_wrapper_whose_name_was_registered_again_refuses_to_run():
  """A Context compiles by name: a wrapper replaced by another function
  of its name (two closures of one def) must not run the other one."""
  ctx = ab.Context()
  negated = ctx.batch_uncurried(_closure_of(np.negative),
                                type_inference=lambda t: t)
  same = ctx.batch_uncurried(_closure_of(np.positive),
                             type_inference=lambda t: t)
  x = np.arange(3.0)
  np.testing.assert_array_equal(same(x), x)
  np.testing.assert_array_equal(same(x, dry_run=True), x)
  for dry_run in (False, True):
    with pytest.raises(errors.ArgumentError,
                       match='registered again in its Context') as info:
      negated(x, dry_run=dry_run)
    assert 'test_errors.py' in str(info.value)
    assert 'different names' in str(info.value)
  # The same Python function registered twice is no change.
  fn = _closure_of(np.negative)
  first, second = (ctx.batch_uncurried(fn, type_inference=lambda t: t)
                   for _ in range(2))
  np.testing.assert_array_equal(first(x), -x)
  np.testing.assert_array_equal(second(x), -x)


_shapes_ctx = ab.Context()


@_shapes_ctx.batch
def _scalar_or_vector(x):
  if x > 0:
    return x
  return np.zeros(3)


@_shapes_ctx.batch
def _pair_or_single(x):
  if x > 0:
    return x, x
  return x


@pytest.mark.parametrize('fn,kind', [(_scalar_or_vector, 'shapes'),
                                     (_pair_or_single, 'structures')])
def test_paths_of_different_shapes_get_a_hint_about_shapes(fn, kind):
  """A clash of shapes or structures between paths is not a dtype's: the
  hint says to give one shape on every path, and names no argument's
  dtype."""
  with pytest.raises(errors.TypeInferenceError,
                     match=f'different {kind}') as info:
    fn(np.ones(3))
  text = str(info.value)
  assert 'one shape and structure in every branch' in text
  assert 'dtype you mean' not in text and 'comes from argument' not in text


def test_a_loop_counter_gathering_across_the_batch_is_named():
  # `i` is one number per member, [batch]: np.take(x, i, axis=1) takes
  # every member's i from every member ([batch, batch]); for one member's
  # Python number it is one item.  Not a dtype to fix: the message says so.
  ctx = ab.Context()

  @ctx.batch
  def count_above(x, thr):
    c = 0
    i = 0
    while i < 4:
      if np.take(x, i, axis=1) > thr:  # ERR:gather
        c += 1
      i += 1
    return c

  with pytest.raises(errors.TypeInferenceError) as e:
    count_above(np.ones((3, 4)), np.zeros(3))
  check(e, errors.TypeInferenceError, 'gather', 'one number per member',
        'across the batch', 'np.take_along_axis', 'batch_dims=1')


def test_a_callee_writing_items_of_an_array_its_caller_reads_warns():
  # Python's caller sees `union`'s write to `parent`; a batched
  # function's arrays are values, so the components were counted wrong,
  # silently (in a dry run too).  Passing a copy, or taking the array
  # back (`v = f(v)`), does not warn.
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def union(parent, a, b):
    if parent[a] == parent[b]:
      return False
    parent[parent[a]] = parent[b]
    return True

  @ctx.batch(per_member=True)
  def components(a, b):
    parent = np.arange(4)
    count = 4
    for e in range(2):
      if union(parent, a[e], b[e]):  # ERR:union_write
        count -= 1
    return count

  @ctx.batch(per_member=True)
  def reset(v):
    v[0] = 0.0
    return v

  @ctx.batch(per_member=True)
  def own_copy(v):
    v = v.copy()
    v[0] = 1.0
    return v.sum()

  @ctx.batch(per_member=True)
  def takes_it_back(v):
    v = reset(v)
    return own_copy(v) + v.sum()
  with pytest.warns(errors.ArgumentWriteWarning,
                    match="union\\(\\) assigns items of its parameter "
                    "'parent'") as caught:
    components(np.array([[0, 1], [2, 2]]), np.array([[1, 2], [3, 3]]))
  assert caught[0].lineno == line_of('union_write')
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.ArgumentWriteWarning)
    np.testing.assert_allclose(takes_it_back(np.ones((2, 3))), [5.0, 5.0])


def test_items_written_through_a_second_name_then_read_warn():
  # `b = a; b[0] = 99; return a[0]`: Python's `a` shows the write; a
  # batched function's arrays are values.  A copy, or `a` bound anew
  # before it is read, does not warn.
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def through_alias(a):
    b = a
    b[0] = 99  # ERR:alias_write
    return a[0]

  @ctx.batch(per_member=True)
  def copied(a):
    b = a.copy()
    b[0] = 99
    c = a
    c[1] = 5
    a = c * 2
    return a[0] + b[0]
  with pytest.warns(errors.ArgumentWriteWarning,
                    match="'b' holds the array of 'a'") as caught:
    through_alias(np.arange(6).reshape(2, 3))
  assert caught[0].lineno == line_of('alias_write')
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.ArgumentWriteWarning)
    np.testing.assert_array_equal(copied(np.arange(6).reshape(2, 3)),
                                  [99, 105])


def _demean(v):
  v -= v.mean()
  return v


def _normalize(v):
  v /= v.sum()


def _bump(k):
  k += 1
  return k


def test_a_helper_updating_an_array_its_caller_reads_warns():
  # A plain helper updating its argument in place (`v -= m`, `v[:] = x`)
  # changes the caller's array in Python; here the caller kept its values,
  # silently.  Called for its effect alone it is refused.  A counter
  # updated (`k += 1`, a number) does not warn.
  ctx = ab.Context()

  @ctx.batch(per_member=True)
  def centred(x):
    d = _demean(x)  # ERR:demean_write
    return x.mean() + d.sum()

  @ctx.batch(per_member=True)
  def normalized(q):
    _normalize(q)  # ERR:normalize_write
    return q

  @ctx.batch(per_member=True)
  def counted(x, k):
    j = _bump(k)
    return x * j + k
  with pytest.warns(errors.ArgumentWriteWarning,
                    match="_demean\\(\\) assigns items of its parameter "
                    "'v' \\(or updates it in place\\)") as caught:
    centred(np.arange(6.0).reshape(2, 3))
  assert caught[0].lineno == line_of('demean_write')
  with pytest.raises(errors.UnsupportedSyntaxError,
                     match='calls _normalize') as info:
    normalized(np.ones((2, 3)))
  assert info.value.lineno == line_of('normalize_write')
  with warnings.catch_warnings():
    warnings.simplefilter('error', errors.ArgumentWriteWarning)
    np.testing.assert_allclose(counted(np.ones(3), np.array([1, 2, 3])),
                               [3.0, 5.0, 7.0])


def test_a_dry_run_result_changed_by_the_cast_to_its_type_warns():
  # The dry run casts each member's Python result to the batched run's
  # type: a float result of a function declared int64 became its
  # integer part, silently, hiding the mistake the batched run makes too.
  ctx = ab.Context()

  @ctx.batch(type_inference=lambda t: [ab.TensorType(np.int64, ())])
  def half(x):
    return x / 2

  with pytest.warns(ab.errors.TypeCastWarning, match=r'members \[0, 2\]'):
    half(np.array([1, 4, 5]), dry_run=True)
  with warnings.catch_warnings():
    warnings.simplefilter('error', ab.errors.TypeCastWarning)
    np.testing.assert_array_equal(half(np.array([2, 4]), dry_run=True),
                                  [1, 2])
