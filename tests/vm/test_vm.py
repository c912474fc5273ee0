"""The batched executors against plain Python, member by member.

Every program of `tests/programs.py` runs on the stack VM (lowered program)
and on the stackless executor (typed program) at batch sizes 1, 7 and 300;
each member's result must equal the Python reference run alone.  Also:
stack overflow is reported (for exactly the members that overflow, at
exactly the depth the recursion needs), tail calls need no stack, and the
batched run does per member exactly the work of a solo run.
"""

import os
import pathlib
import platform
import signal
import subprocess
import sys

import numpy as np
import pytest

from autobatch_vm import dsl
from autobatch_vm import errors
from autobatch_vm import instructions as inst
from autobatch_vm import lowering
from autobatch_vm import stackless
from autobatch_vm import virtual_machine
from autobatch_vm.numpy_backend import NumpyBackend
from autobatch_vm.passes import pipeline
from autobatch_vm.vm import layout as layout_lib
from tests import programs as progs

BACKEND = NumpyBackend()
_ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = progs.CASES
IDS = [c.name for c in CASES]
BATCH_SIZES = [1, 7, 300]

_compiled = {}


@pytest.fixture(autouse=True)
def _time_limit():
  """A VM bug that never lets a member finish fails instead of hanging."""
  if not hasattr(signal, 'SIGALRM'):
    yield
    return

  def fail(*_):
    raise TimeoutError('the run did not finish within 10 s')
  previous = signal.signal(signal.SIGALRM, fail)
  signal.alarm(10)
  try:
    yield
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def compiled(case):
  """(typed, lowered) programs of a case, built once per test session."""
  if case.name not in _compiled:
    typed = pipeline.typed(case.program, case.input_types, BACKEND,
                           verify=True)
    _compiled[case.name] = typed, pipeline.lowered(typed, verify=True)
  return _compiled[case.name]


def run_vm(case, args, batch, **kwargs):
  kwargs.setdefault('max_stack_depth', case.max_stack_depth)
  return virtual_machine.execute(compiled(case)[1], args, BACKEND, batch,
                                 **kwargs)


def check_members(case, args, out, batch):
  typed = compiled(case)[0]
  want_types = inst.pattern_flatten(
      typed.main_function.var_defs['%ret'].tensors, inst.TensorType)
  leaves = inst.pattern_flatten(out)
  assert [np.asarray(l).dtype for l in leaves] == [t.dtype for t in
                                                    want_types]
  assert all(np.shape(l) == (batch,) for l in leaves)
  for i in range(batch):
    assert progs.member_result(out, i) == case.expected(args, i), (
        case.name, case.member_args(args, i))


def _args(case, batch, seed=0):
  return case.make_args(np.random.default_rng(seed + batch), batch)


@pytest.mark.parametrize('batch', BATCH_SIZES)
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_stack_vm_matches_python(case, batch):
  args = _args(case, batch)
  saved = [a.copy() for a in args]
  out, stats = run_vm(case, args, batch)
  check_members(case, args, out, batch)
  for a, s in zip(args, saved):     # the caller's arrays are not touched
    np.testing.assert_array_equal(a, s)
  assert 0 < stats.utilization <= 1
  if batch == 1:
    assert stats.utilization == 1


@pytest.mark.parametrize('batch', BATCH_SIZES)
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_stackless_matches_python(case, batch):
  args = _args(case, batch)
  out, _ = stackless.execute(compiled(case)[0], args, BACKEND, batch)
  check_members(case, args, out, batch)


@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_most_populated_schedule_agrees(case):
  args = _args(case, 50)
  out, _ = run_vm(case, args, 50, schedule='most')
  check_members(case, args, out, 50)
  out, _ = stackless.execute(compiled(case)[0], args, BACKEND, 50,
                             schedule='most')
  check_members(case, args, out, 50)


@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_batched_run_does_each_members_solo_work(case):
  """Masking is exact: member-block executions = sum of solo step counts."""
  batch = 9
  args = _args(case, batch)
  _, stats = run_vm(case, args, batch)
  solo = 0
  for i in range(batch):
    _, s = run_vm(case, [a[i:i + 1] for a in args], 1)
    solo += s.steps
  assert stats.member_block_executions == solo
  assert stats.steps <= solo


def test_empty_batch():
  case = progs.BY_NAME['tuple_return']
  args = [np.zeros((0,), np.int64)]
  for out in (run_vm(case, args, 0)[0],
              stackless.execute(compiled(case)[0], args, BACKEND, 0)[0]):
    r, half = out
    assert r.shape == half.shape == (0,)
    assert (r.dtype, half.dtype) == (np.int64, np.float64)


def test_block_code_cache_is_reused_and_runs_stay_independent():
  case = progs.BY_NAME['fibonacci']
  cache = {}
  a1, a2 = _args(case, 20, seed=1), _args(case, 20, seed=2)
  out1, stats1 = run_vm(case, a1, 20, block_code_cache=cache)
  assert len(cache) == 1
  out2, stats2 = run_vm(case, a2, 20, block_code_cache=cache)
  assert len(cache) == 1
  check_members(case, a1, out1, 20)
  check_members(case, a2, out2, 20)
  assert stats1 is not stats2


# -- stack overflow ------------------------------------------------------------------

def _fib_depth(n):
  """Nested calls fibonacci(n) makes: the stack depth it needs."""
  return max(n - 2, 0)


@pytest.mark.parametrize('ns', [[12], [12, 3, 12, 7], [5, 9, 1, 2, 9]])
def test_overflow_exactly_at_the_needed_depth(ns):
  case = progs.BY_NAME['fibonacci']
  args = [np.array(ns, np.int64)]
  need = max(_fib_depth(n) for n in ns)
  out, _ = run_vm(case, args, len(ns), max_stack_depth=need)
  check_members(case, args, out, len(ns))
  with pytest.raises(errors.StackOverflowError) as info:
    run_vm(case, args, len(ns), max_stack_depth=need - 1)
  deepest = [i for i, n in enumerate(ns) if _fib_depth(n) == need]
  text = str(info.value)
  assert f'max_stack_depth={need - 1}' in text
  assert f'batch members {deepest}' in text, text
  assert 'larger max_stack_depth' in text


def test_call_stack_overflow_in_mutual_recursion():
  case = progs.BY_NAME['even_odd']
  args = [np.array([3, 15, 4], np.int64)]
  # 15 nested calls, the last of which (to the base case) saves nothing:
  # leaf_returns sends it to a copy of the base case, with no push.
  out, _ = run_vm(case, args, 3, max_stack_depth=14)
  check_members(case, args, out, 3)
  with pytest.raises(errors.StackOverflowError,
                     match=r"call stack, calling 'is_(even|odd)'.*\[1\]"):
    run_vm(case, args, 3, max_stack_depth=13)


def test_single_site_helper_needs_no_call_stack():
  # `chain`'s base case calls `bump`, from the program's only call of it:
  # at the deepest point the PC stack holds main's exit and `chain`'s 5
  # frames, and `bump` (which returns straight back) adds none.
  pb = dsl.ProgramBuilder()
  with pb.function('chain', ['n']):
    with pb.if_(lambda n: n <= 0):
      pb.return_(pb.call('bump', ['n']))
    pb.call('chain', [pb.primop(lambda n: n - 1)], out='r')
    pb.return_(lambda r: r + 2)
  with pb.function('bump', ['x']):
    pb.return_(lambda x: x + 1)
  typed = pipeline.typed(pb.program(), [progs.INT], BACKEND, verify=True)
  program = pipeline.lowered(typed, verify=True)
  args = [np.array([6, 2, 0], np.int64)]
  out, _ = virtual_machine.execute(program, args, BACKEND, 3,
                                   max_stack_depth=5)
  np.testing.assert_array_equal(out, [13, 5, 1])
  with pytest.raises(errors.StackOverflowError,
                     match=r"call stack, calling 'chain'.*\[0\]"):
    virtual_machine.execute(program, args, BACKEND, 3, max_stack_depth=4)


def test_self_tail_call_needs_no_stack():
  case = progs.BY_NAME['gcd']
  args = [np.array([89, 144, 7], np.int64), np.array([55, 89, 0], np.int64)]
  out, _ = run_vm(case, args, 3, max_stack_depth=1)
  check_members(case, args, out, 3)
  unoptimized = lowering.lower(compiled(case)[0])
  with pytest.raises(errors.StackOverflowError):
    virtual_machine.execute(unoptimized, args, BACKEND, 3, max_stack_depth=1)
  out, _ = virtual_machine.execute(unoptimized, args, BACKEND, 3,
                                   max_stack_depth=12)
  check_members(case, args, out, 3)


def test_stackless_reports_python_recursion_limit_as_overflow():
  case = progs.BY_NAME['even_odd']
  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(150)
  try:
    with pytest.raises(errors.StackOverflowError, match='stackless'):
      stackless.execute(compiled(case)[0], [np.array([400], np.int64)],
                        BACKEND, 1)
  finally:
    sys.setrecursionlimit(limit)


def test_unknown_schedule_is_an_argument_error():
  case = progs.BY_NAME['collatz']
  with pytest.raises(errors.ArgumentError, match='schedule'):
    run_vm(case, _args(case, 2), 2, schedule='random')


# -- stack pointers shared by variables saved together ---------------------------

def _blend_program():
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  ctx = ab.Context()

  @ctx.batch()
  def blend(n, a, b):
    """`a` and `b` live across the call: saved and restored together."""
    if n <= 0:
      return a + b
    r = blend(n - 1, a * 2, b + 1)
    return r + a * b
  return ctx, blend


def test_variables_saved_together_share_a_stack_pointer():
  ctx, blend = _blend_program()
  n = np.array([0, 3, 7, 1, 5], np.int64)
  a = np.array([1, -2, 3, 4, 0], np.int64)
  b = np.array([5, 6, -7, 8, 9], np.int64)
  program = ctx.lowered_for_args('blend', (n, a, b))
  layout = layout_lib.Layout(program, BACKEND, 5, 8)
  saved_by = {}
  for k, block in enumerate(program.blocks):
    for i, op in enumerate(block.instructions):
      if isinstance(op, (inst.PushOp, inst.PopOp)):
        for var in op.vars:
          saved_by.setdefault(var, set()).add((k, i))
  stacks = layout.stacks
  assert {'blend.a', 'blend.b'} <= set(stacks), stacks
  assert stacks['blend.a'][1] == stacks['blend.b'][1]
  for u in stacks:   # shared exactly when saved by the same instructions
    for v in stacks:
      assert (stacks[u][1] == stacks[v][1]) == (saved_by[u] == saved_by[v])
  out = blend(n, a, b, max_stack_depth=8)
  want = blend(n, a, b, dry_run=True)
  np.testing.assert_array_equal(out, want)
  with pytest.raises(errors.StackOverflowError,
                     match=r"saving variable '[ab]', variable '[ab]'"
                     r".*batch members \[2\]"):
    blend(n, a, b, max_stack_depth=6)


# -- registers written in place (NumPy) ------------------------------------------

def test_in_place_register_writes_never_change_arrays_seen_outside():
  """On NumPy a masked write changes an owned register's rows in place.
  Every array the run hands out (to a primitive, as an input or output)
  must keep its contents: a primitive may keep it or return it as is."""
  import autobatch_vm as ab  # pylint: disable=g-import-not-at-top
  seen = []

  def spy(x):
    seen.append((x, np.array(x, copy=True)))
    return x

  ctx = ab.Context()

  @ctx.batch()
  def walk(n, v):
    steps = n * 0
    while n > 1:
      v = spy(v)
      if n % 2 == 0:
        n = n // 2
        v = v * 0.5
      else:
        n = 3 * n + 1
        v = v + 1.0
      steps = steps + 1
    return steps, spy(v)

  @ctx.batch()
  def join(n, v):
    w = v * 0.0
    if n % 2 == 0:   # masked writes: both registers copied, then owned
      v = v * 0.5
      w = w + 1.0
    else:
      v = v + 1.0
    k = n * 0
    while k < 1:     # a loop header: every member meets here
      w = spy(v)     # whole batch: `w` is `v`'s array
      k = k + 1
    if n % 3 == 0:
      v = v * 3.0    # must not change `w`
    else:
      w = w - 1.0    # must not change `v`
    return spy(w) * 10.0 + v

  @ctx.batch()
  def rec(n, v):
    u = spy(v * 1.0)   # the whole batch on the first call
    if n <= 0:
      return u
    r = rec(n - 1, v + 1.0)
    return r + u       # `u` restored for some members first

  @ctx.batch()
  def tree(n, v):
    if n <= 1:
      return spy(v)
    a = tree(n - 1, v + 1.0)
    w = spy(v) * 2.0   # `v` restored from the stack
    b = tree(n - 2, w)
    return a + b + spy(w)

  rng = np.random.default_rng(0)
  n = rng.integers(1, 30, size=40)
  v = rng.normal(size=(40, 3))
  n0, v0 = n.copy(), v.copy()
  for fn, args, depth in ((walk, (n, v), 15), (join, (n, v), 15),
                          (rec, (np.where(n % 4 == 0, 3, 1), v), 6),
                          (tree, (n % 9, v), 12)):
    seen.clear()
    for stackless, schedule in ((False, 'lowest'), (False, 'most'),
                                (True, 'lowest')):
      out = fn(*args, max_stack_depth=depth, stackless=stackless,
               schedule=schedule)
      want = fn(*args, dry_run=True)
      for got, ref in zip(out if isinstance(out, tuple) else (out,),
                          want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(got, ref)
    assert seen
    for array, snapshot in seen:
      np.testing.assert_array_equal(array, snapshot)
    np.testing.assert_array_equal(n, n0)
    np.testing.assert_array_equal(v, v0)


_FAULTS_SCRIPT = '''
import resource
import sys
import threading
import numpy as np
import autobatch_vm as ab
from autobatch_vm.backends import numpy as numpy_backend

where, width = sys.argv[1], int(sys.argv[2])
if where == 'thread, no top pad':   # the control: thread heaps left to glibc
  numpy_backend._THREAD_HEAP_BYTES = 0
ctx = ab.Context()

@ctx.batch()
def smooth(x, y, z):
  i = 0
  while i < 5:
    x = (x + y * z) * 0.5
    y = (y + x * z) * 0.5
    z = (z + x * y) * 0.5
    i = i + 1
  return x, y, z

def calls():
  x = np.zeros((16, width))   # arrays above glibc's first thresholds
  smooth(x, x, x)
  smooth(x, x, x)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  smooth(x, x, x)
  print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

if where == 'main':
  calls()
else:   # as a Dask worker runs its tasks
  worker = threading.Thread(target=calls)
  worker.start()
  worker.join()
'''


def _page_faults_of_a_call(tmp_path, where, width, **environ):
  script = tmp_path / 'faults.py'   # batched functions need a source file
  script.write_text(_FAULTS_SCRIPT)
  paths = [str(_ROOT)] + [p for p in os.environ.get('PYTHONPATH', '').split(
      os.pathsep) if p]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **environ)
  proc = subprocess.run([sys.executable, str(script), where, str(width)],
                        capture_output=True, text=True, check=False, env=env,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr
  return int(proc.stdout.split()[-1])


def test_stack_vm_reuses_freed_memory_in_a_fresh_process(tmp_path):
  # The NumPy backend has glibc keep freed memory (keep_freed_heap): in a
  # fresh process, each call would otherwise fault its large arrays in
  # again.  It sets malloc's thresholds itself, so a fixed threshold from
  # the environment (which turns off glibc's own adjustment) changes
  # nothing.
  if platform.libc_ver()[0] != 'glibc':
    pytest.skip('glibc malloc only')
  assert _page_faults_of_a_call(
      tmp_path, 'main', 8192, MALLOC_MMAP_THRESHOLD_='131072') < 50


def test_stack_vm_reuses_freed_memory_in_a_worker_thread(tmp_path):
  # A thread's arena unmaps a heap whenever it empties, whatever the
  # thresholds; keep_freed_heap's top pad keeps them.  8 MiB arrays, three
  # live at a time and more in flight, outgrow a first thread heap.  The
  # same run without the top pad is the control: it must fault, or the
  # check proves nothing.
  if platform.libc_ver()[0] != 'glibc':
    pytest.skip('glibc malloc only')
  assert _page_faults_of_a_call(tmp_path, 'thread', 65536) < 50
  assert _page_faults_of_a_call(tmp_path, 'thread, no top pad', 65536) > 500
