"""The user-facing API: `Context`, `Context.batch` and `truthy`.

A user writes the logic of ONE batch member, decorates it, and calls it on
a whole batch (arrays whose axis 0 is the batch):

    ctx = ab.Context()

    @ctx.batch(type_inference=lambda arg_types: arg_types[0])
    def fibonacci(n):
      if n > 2:
        return fibonacci(n - 1) + fibonacci(n - 2)
      return 1

    fibonacci(np.array([6, 7, 8, 7]))   # -> array([ 8, 13, 21, 13])

`Context.batch` makes a `BatchedFunction` (`batched_function`, re-exported
here).  The source of each decorated function is compiled
(`python.to_ir`) the first time the Context is used; types are inferred
per input signature and the lowered program is cached.  A call's
arguments are converted by `python.call_arguments`, and a dry run
(`dry_run=True`: each member alone, as plain Python) is run by `dry_run`.
This module never imports TensorFlow.
"""

import ast
import dataclasses
import functools
import inspect
import textwrap
import types

from autobatch_vm import caches
from autobatch_vm import dry_run as dry_run_lib
from autobatch_vm import errors
from autobatch_vm import externals
from autobatch_vm import shipping
from autobatch_vm.backends import numpy as numpy_backend
from autobatch_vm.backends import scheduler
from autobatch_vm.batched_function import BatchedFunction
from autobatch_vm.batched_function import DEFAULT_MAX_STACK_DEPTH
from autobatch_vm.ir import instructions as inst
from autobatch_vm.ops import truthy  # re-exported: ab.frontend.truthy, as in TFP
from autobatch_vm.passes import pipeline
from autobatch_vm.per_member import primitive as member_primitive
from autobatch_vm.python import call_arguments
from autobatch_vm.python import to_ir as python_to_ir
from autobatch_vm.python.call_arguments import map_arguments  # re-exported
from autobatch_vm.vm import failures
from autobatch_vm.vm import machine
from autobatch_vm.vm import stackless as stackless_lib

__all__ = ['Context', 'ContextState', 'truthy', 'BatchedFunction']

# `stackless=None` (the default) picks stackless mode only up to this
# max_stack_depth: deeper recursion limits go to the stack VM, whose depth
# does not spend Python's recursion limit (about three Python frames per
# batched call in stackless mode).
AUTO_STACKLESS_MAX_DEPTH = 100
# The most entries a Context's cache keeps (`Context(cache_size=...)`): a
# signature takes up to four programs, plus compiled blocks per backend
# and `max_stack_depth` (on TensorFlow also per batch size).
DEFAULT_CACHE_SIZE = 256

# The kinds of compiled programs a Context caches per signature (the first
# item of their cache keys), which `Context.export_state` hands out.  The
# cache's other entries are the VM's compiled blocks, kept by `id` of a
# lowered program and so meaningful only in this process.
_PROGRAM_KINDS = ('typed', 'stackless', 'chooses_stackless', 'lowered')


@dataclasses.dataclass(frozen=True)
class ContextState(shipping.StatePickling):
  """What rebuilds a Context elsewhere: its functions and compiled programs.

  `Context.export_state` makes one and `Context.install_state` puts it in
  another Context (`shard`'s executor form ships it to worker processes,
  pickled with cloudpickle, so that they run without compiling).

  Attributes:
    functions: Function name -> (Python function, type-inference callable
      or None, whether it is per-member), in definition order.
    programs: The compiled programs (typed, stackless, lowered, and the
      choice of stackless mode), keyed as the Context caches them: by
      kind, function name, input signature, backend (and schedule).
  """
  functions: dict
  programs: dict


class Context(shipping.ContextPickling):
  """A set of batched functions that may call each other.

  Args:
    debug: Whether to run the IR verifier between compiler passes.
    cache_size: The most compiled programs and blocks kept, the least
      recently used dropped first (`caches.LRUCache`); None: no bound.
      `clear_caches()` empties the cache, `cache_info()` counts it.
    block_exits: Whether the stack VM's programs let members leave a
      block early, so that a branch's likely side runs in the branching
      block's step (`passes.block_exits`): fewer steps, the same or more
      time per call on TFP's NUTS program (docs/performance.md).

  Attributes:
    debug: As given.
    block_exits: As given; programs lowered from then on follow it.
    last_stats: The `RunStats` of the last call of any of its functions.
  """

  def __init__(self, debug=False, cache_size=DEFAULT_CACHE_SIZE,
               block_exits=False):
    self.debug = debug
    self.block_exits = block_exits
    self._functions = {}      # name -> BatchedFunction, in definition order
    self._variants = {}       # variant name -> BatchedFunction (`variant`)
    self._module = None
    # name -> (its Python function, the globals and closure values
    # compiling it read: `python_to_ir.compile_function`'s `static_reads`).
    self._static_reads = {}
    self._outside = {}        # cache key -> `externals.types` when made
    try:
      self._cache = caches.LRUCache(cache_size)
    except ValueError as e:
      raise errors.ArgumentError(str(e)) from None
    self._dry_runs = dry_run_lib.DryRuns()
    self.last_stats = None

  # -- decorating --------------------------------------------------------------

  def batch(self, type_inference=None, per_member=False):
    """Decorates a function as batched: `@ctx.batch(...)` or bare `@ctx.batch`.

    The forms are `@ctx.batch(type_inference=...)`, `@ctx.batch()` and the
    bare `@ctx.batch`.  The bare form hands the decorated function itself
    to this method; it is told from a `type_inference` callable given
    positionally by its source: a `def` whose own decorators include a
    bare `...batch`.

    Args:
      type_inference: Optional.  A callable that takes a list with one type
        per argument (an `ab.TensorType`, or a pattern of them; shapes
        without the batch dimension) and returns the result's type (TFP's
        convention, a list with one `Type` per returned value, is taken
        too).  Without it the result's type is inferred.
      per_member: Whether the function is written for one member: its
        values have no batch axis, and its math (indexing, item
        assignment, `len`, `min`, reductions, linear algebra) means what
        it means on one member's values; the backend vectorizes it
        (docs/guide.md, "Per-member functions").  The default, False,
        is a batch-aware function: its primitives see whole batches.

    Returns:
      A decorator that returns the `BatchedFunction`; for the bare form,
      the `BatchedFunction` itself.
    """
    if type_inference is not None and _decorated_bare(type_inference):
      return self.batch_uncurried(type_inference)

    def decorator(fn=None, *more, **keywords):
      if more or keywords or not (callable(fn) and hasattr(fn, '__code__')):
        # A call of the function itself: the function was given to
        # `batch` (`ctx.batch(f)`, or a bare `@ctx.batch` whose source
        # could not be read), which took it for a `type_inference`.
        name = getattr(type_inference, '__name__', None)
        got = (f'{fn!r}' + (' and more arguments' if more or keywords
                            else ''))
        if name and _has_source(type_inference):
          hint = (f'ctx.batch({name}) takes {name} for type_inference= '
                  '(TFP\'s convention) and returns a decorator.  Batch a '
                  f'function without the @ syntax with ctx.batch()({name}) '
                  f'or ctx.batch_uncurried({name}), or decorate its def '
                  'with @ctx.batch.')
        elif name:
          hint = (f'If {name!r} was decorated with a bare @ctx.batch, its '
                  'source could not be read (exec, python -c, an '
                  'interactive prompt), so the decorator took it for a '
                  'type_inference= callable: define batched functions in a '
                  'file (the library compiles their source).')
        else:
          hint = 'Decorate a function: @ctx.batch(...) then def f(...).'
        raise errors.ArgumentError(
            f'Context.batch(...) returned a decorator, which got {got} '
            'instead of a function', hint=hint)
      return self.batch_uncurried(fn, type_inference, per_member)
    return decorator

  def batch_uncurried(self, function, type_inference=None, per_member=False):
    """Registers `function` as a batched function of this Context.

    Args:
      function: The user's Python function, the logic of one member.
      type_inference: As for `batch`, or None.
      per_member: As for `batch`.

    Returns:
      The `BatchedFunction`, a callable wrapper of `function`.

    Raises:
      ArgumentError: If `function` is already batched or is not a Python
        function.
    """
    if isinstance(function, BatchedFunction):
      raise errors.ArgumentError(
          f'{function.name!r} is already a batched function')
    if not callable(function) or not hasattr(function, '__code__'):
      raise errors.ArgumentError(
          f'Context.batch expects a Python function, got {function!r}')
    _check_parameters(function)
    if type_inference is not None:
      type_inference = _output_types(type_inference)
    wrapper = BatchedFunction(self, function, type_inference,
                              bool(per_member))
    self._functions[function.__name__] = wrapper
    self._variants = {}
    self._module = None
    self._static_reads = {}
    self._cache.clear()
    return wrapper

  # -- rebuilding elsewhere -----------------------------------------------------

  def export_state(self, main=None, sig=None):
    """Hands out the functions and compiled programs that rebuild this Context.

    The state holds the Python functions and the programs compiled so far;
    `install_state` puts it in another Context (in another process, once
    pickled), whose calls of these signatures then run without compiling.

    Args:
      main: Optional: a batched function of this Context, the function it
        was made from, or its name; only its programs are handed out.
        None: the programs of every function.
      sig: Optional, with `main`: the input types, as for
        `program_compiled`; only the programs for them are handed out.

    Returns:
      A `ContextState`; its dicts are new, the functions and programs in
      them this Context's own.

    Raises:
      ArgumentError: If `main` is not a batched function of this Context,
        or `sig` is given without `main`.
    """
    name = None if main is None else self._name_of(main)
    if sig is not None and name is None:
      raise errors.ArgumentError(
          'export_state(sig=...) needs main=, the function the signature '
          'is of')
    sig_key = None if sig is None else repr(self._signature(name, sig))
    programs = {
        key: value for key, value in self._cache.items()
        if isinstance(key, tuple) and len(key) > 2
        and key[0] in _PROGRAM_KINDS
        and (name is None or key[1] == name)
        and (sig_key is None or key[2] == sig_key)}
    functions = {n: (bf.python_function, bf.type_inference, bf.per_member)
                 for n, bf in self._functions.items()}
    return ContextState(functions=functions, programs=programs)

  def install_state(self, state):
    """Makes this Context the one `state` describes.

    Its functions and compiled programs become those of `state` (from
    `export_state`), each function batched anew in this Context.  A call
    whose program `state` holds runs it without compiling (`compiled`
    stays False); another signature is compiled from the functions.

    Args:
      state: A `ContextState`.

    Returns:
      Function name -> the `BatchedFunction` of this Context.

    Raises:
      ArgumentError: If `state` is not a `ContextState`.
    """
    if not isinstance(state, ContextState):
      raise errors.ArgumentError(
          f'install_state expects a ContextState (from export_state), got '
          f'{type(state).__name__}')
    self._functions = {
        n: BatchedFunction(self, fn, type_inference, *per_member)
        for n, (fn, type_inference, *per_member) in state.functions.items()}
    self._variants = {}
    self._module = None
    self._static_reads = {}
    self._cache = caches.LRUCache(self._cache.maxsize, state.programs)
    return dict(self._functions)

  @property
  def compiled(self):
    """Whether this Context has compiled any of its functions to IR.

    False for a new Context, after a function is added to it, and after
    `install_state` until a call needs a program the state did not hold.
    """
    return self._module is not None

  # -- caches ------------------------------------------------------------------

  def clear_caches(self):
    """Empties this Context's cache and the process-wide ones.

    The Context's: its typed, lowered and stackless programs and compiled
    blocks.  The process-wide ones (`caches.clear_caches`): the
    TensorFlow backend's staged loops and the stackless executor's tables.
    The next call of each signature compiles again.
    """
    self._cache.clear()
    caches.clear_caches()

  def cache_info(self):
    """Counts the cached entries.

    Returns:
      A dict: `entries` and `maxsize` of this Context's cache, `kinds`
      (entries per kind: `'typed'`, `'lowered'`, `'stackless'`,
      `'chooses_stackless'`, `'untyped'`, and `'blocks'`, the compiled
      blocks of a program for a backend and `max_stack_depth`, serving
      every batch size) and `process` (`caches.cache_info()`).
    """
    kinds = {}
    for key in self._cache:
      kind = key[0] if isinstance(key, tuple) and key else 'other'
      kinds[kind] = kinds.get(kind, 0) + 1
    return {'entries': len(self._cache), 'maxsize': self._cache.maxsize,
            'kinds': kinds, 'process': caches.cache_info()}

  # -- compiling ---------------------------------------------------------------

  def _resolve(self, obj, name=None):
    """The batched function a call of `obj` (spelt `name`) runs, or None.

    A batched function of this Context, or the plain Python function that
    was registered (a function batched with `batch_uncurried` that calls
    itself by its own name).  A bare name that is registered but not bound
    to anything callable yet counts too, as in TFP.  A batched function of
    another Context counts where this Context has the same Python function
    under its name (a Context rebuilt by `install_state`, whose functions
    still name the original's).
    """
    if isinstance(obj, BatchedFunction):
      if obj.context is self:
        return obj.name
      mine = self._functions.get(obj.name)
      if mine is not None and mine.python_function is obj.python_function:
        return obj.name
      return None
    for fname, bf in self._functions.items():
      if obj is bf.python_function:
        return fname
    if name in self._functions and not callable(obj):
      return name
    return None

  def _entry(self, name):
    """The `BatchedFunction` of `name`: a function's, or a variant's."""
    bf = self._functions.get(name)
    return bf if bf is not None else self._variants[name]

  def _params_of(self, name):
    """The parameters' names: the positional ones, then the keyword-only
    ones (`_positional_of` counts the first); a variant's without those
    it fixes."""
    bf = self._entry(name)
    code = bf.python_function.__code__
    return tuple(p for p in code.co_varnames[
        :code.co_argcount + code.co_kwonlyargcount] if p not in bf.static)

  def _positional_of(self, name):
    """How many of the parameters may be passed by position."""
    bf = self._entry(name)
    code = bf.python_function.__code__
    return sum(p not in bf.static
               for p in code.co_varnames[:code.co_argcount])

  def _writes_of(self, name):
    """The parameters whose items the batched function assigns, as a
    Python caller would see its array change
    (`python.source.item_written_params`)."""
    return python_to_ir.item_written_params(self._entry(name).python_function)

  def _defaults_of(self, name):
    """Parameter name -> default value, for the parameters that have one."""
    bf = self._entry(name)
    fn = bf.python_function
    code = fn.__code__
    params = code.co_varnames[:code.co_argcount]
    defaults = fn.__defaults__ or ()
    out = dict(zip(params[len(params) - len(defaults):], defaults))
    out.update(fn.__kwdefaults__ or {})
    return {p: v for p, v in out.items() if p not in bf.static}

  def variant(self, name, static):
    """The variant of batched function `name` with `static` given None.

    A call that passes None for a parameter (or leaves out one whose
    default is None) runs the variant: a function of the other
    parameters, compiled with those ones None (`p is None` decided where
    they still are: `python.source.fold_none_tests`).  Made once per
    function and parameters.

    Args:
      name: A batched function of this Context.
      static: Names of its parameters.

    Returns:
      The variant's `BatchedFunction`; its name, e.g. `f(y=None)`, names
      its program.
    """
    base = self._functions[name]
    static = tuple(p for p in self._params_of(name) if p in static)
    if not static:
      return base
    vname = f'{name}({", ".join(f"{p}=None" for p in static)})'
    if vname not in self._variants:
      self._variants[vname] = BatchedFunction(
          self, base.python_function,
          _with_none_types(base.type_inference, self._params_of(name),
                           static),
          base.per_member, name=vname, static=static)
    return self._variants[vname]

  def _variant_name(self, name, static):
    return self.variant(name, static).name

  def _with_nones_fixed(self, bf, args):
    """`(bf, args)` as a call of `bf` with `args` (one per parameter) runs
    them: where some are None, `bf`'s variant with those parameters fixed
    (`variant`) and the other arguments; else as given."""
    if bf.static:
      return bf, args
    nones = [p for p, a in zip(self._params_of(bf.name), args) if a is None]
    if not nones:
      return bf, args
    return self.variant(bf.name, nones), [a for a in args if a is not None]

  def _name_of(self, main):
    """The name of batched function `main`: its name, the batched function
    or the Python function registered with this Context."""
    if isinstance(main, str):
      name = main
    else:
      name = self._resolve(main)
    if name is None or (name not in self._functions and
                        name not in self._variants):
      raise errors.ArgumentError(
          f'{main!r} is not a batched function of this Context; it has '
          f'{self.function_names()}', hint='Pass the batched function, the '
          'function it was made from, or its name.')
    return name

  def function_loc(self, name):
    """Finds where batched function `name` is defined, for error messages.

    Args:
      name: The name of a batched function of this Context.

    Returns:
      A `SourceLoc` (function, file, first line), or None if the function
      has no code to locate.
    """
    fn = self._entry(name).python_function
    try:
      filename = fn.__code__.co_filename
      return inst.SourceLoc(fn.__name__, filename, fn.__code__.co_firstlineno)
    except AttributeError:
      return None

  def function_names(self):
    """Lists the batched functions of this Context.

    Returns:
      Their names, in definition order.
    """
    return list(self._functions)

  def _function_ir(self, name):
    """The IR of one function, compiled on first use.

    Functions are compiled one by one, so a mistake in a function that the
    called one cannot reach does not stop it.
    """
    if self._module is None:
      self._module = {}
    if name not in self._module:
      bf = self._entry(name)
      reads = []
      self._module[name] = python_to_ir.compile_function(
          bf.python_function, self._resolve, self._params_of,
          bf.type_inference, defaults_of=self._defaults_of,
          per_member=bf.per_member, positional_of=self._positional_of,
          variant_of=self._variant_name, static=bf.static, name=bf.name,
          writes_of=self._writes_of, static_reads=reads)
      if reads:
        self._static_reads[name] = (bf.python_function, tuple(reads))
    return self._module[name]

  def module(self):
    """Compiles every function of the Context to IR.

    Returns:
      An untyped `Program` of them all, main the first defined.
    """
    functions = tuple(self._function_ir(n) for n in self._functions)
    main = functions[0].name if functions else ''
    return inst.Program(functions, main)

  def program(self, main):
    """Compiles `main` and the functions it can reach to an untyped `Program`.

    Args:
      main: A batched function of this Context, the function it was made
        from, or its name.

    Returns:
      The untyped `Program`, `main` its main function.

    Raises:
      ArgumentError: If `main` is not a batched function of this Context.
    """
    main = self._name_of(main)
    order, stack = [], [main]
    while stack:
      name = stack.pop(0)
      if name in order:
        continue
      order.append(name)
      for b in self._function_ir(name).blocks:
        for op in b.instructions:
          if isinstance(op, inst.FunctionCallOp):
            stack.append(op.function)
    return inst.Program(tuple(self._function_ir(n) for n in order), main)

  def _made(self, key, program):
    """Caches `program` under `key`, with the types of the values from
    outside it that its primitives read now (`_check_outside`)."""
    self._cache[key] = program
    self._outside[key] = externals.types(program)

  def _check_outside(self, key, main):
    """Drops `main`'s typed programs where the arrays, numbers and tensors
    their primitives read from outside them have other types now than
    when typed (`externals.types`): a global rebound to another dtype or
    shape since is typed anew (`x * SCALE[1]` had kept writing an int64
    register after `SCALE` became a float array).  Checked on the cached
    program `key` names, so a Context given programs by `install_state`
    compiles nothing to check them.

    A function whose compiled code holds a global or closure value as it
    was (a loop written out over `range(K)`, a table) compiles anew, and
    every program is made anew, once that value is another
    (`_check_static_reads`)."""
    self._check_static_reads()
    if key not in self._cache:
      return
    now = externals.types(self._cache[key])
    # (A program installed from another Context's state: as it is now.)
    if self._outside.setdefault(key, now) == now:
      return
    for k in list(self._cache):
      if (isinstance(k, tuple) and len(k) > 2 and k[0] in _PROGRAM_KINDS
          and k[1] == main):
        del self._cache[k]
        self._outside.pop(k, None)

  def _check_static_reads(self):
    """Drops the compiled functions and programs where a global or
    closure value that compiling a function read is another now."""
    if not any(python_to_ir.static_reads_changed(fn, reads)
               for fn, reads in self._static_reads.values()):
      return
    self._module = None
    self._static_reads = {}
    for k in list(self._cache):
      if isinstance(k, tuple) and k and k[0] in _PROGRAM_KINDS + ('untyped',):
        del self._cache[k]
        self._outside.pop(k, None)

  def program_compiled(self, main, sig=None, backend=None):
    """Compiles, types and allocates `main` for input types `sig`.

    Args:
      main: A batched function of this Context, the function it was made
        from, or its name.
      sig: A list with one `ab.Type` or `ab.TensorType` (or pattern of
        them; shapes without the batch dimension) per argument of `main`;
        None: no type inference, every type `Type(None)` (as TFP, a
        program to inspect, not to run: `pipeline.untyped`).
      backend: The backend that runs primitives during type inference;
        None: `NumpyBackend()`.

    Returns:
      The typed and allocated `Program` (cached per signature).

    Raises:
      ArgumentError: If `main` is unknown.
    """
    backend = backend or numpy_backend.NumpyBackend()
    main = self._name_of(main)
    if sig is None:
      key = ('untyped', main)
      self._check_static_reads()
      if key not in self._cache:
        self._cache[key] = pipeline.untyped(self.program(main),
                                            verify=self._verify())
      return self._cache[key]
    sig = self._signature(main, sig)
    key = ('typed', main, repr(sig), backend)
    self._check_outside(key, main)
    if key not in self._cache:
      try:
        self._made(key, pipeline.typed(self.program(main), sig, backend,
                                       verify=self._verify()))
      except errors.PrimitiveError as e:
        better = errors.explain_dtype_mismatch(e)
        if better is e:
          raise
        raise better from e.__cause__
    return self._cache[key]

  def program_stackless(self, main, sig=None, backend=None):
    """Builds the `Program` that `stackless=True` runs for input types `sig`.

    Args:
      main: A batched function of this Context, the function it was made
        from, or its name.
      sig: The input types, as for `program_compiled`.
      backend: As for `program_compiled`.

    Returns:
      The typed program with independent calls grouped (`parallel_calls`).
    """
    backend = backend or numpy_backend.NumpyBackend()
    main = self._name_of(main)
    sig = self._signature(main, sig)
    key = ('stackless', main, repr(sig), backend)
    self._check_outside(key, main)
    if key not in self._cache:
      self._made(key, pipeline.stackless(
          self.program_compiled(main, sig, backend), verify=self._verify()))
    return self._cache[key]

  def chooses_stackless(self, main, sig=None, backend=None,
                        max_stack_depth=DEFAULT_MAX_STACK_DEPTH):
    """Tells whether `stackless=None` (the default) runs `main` stackless.

    It does on a backend that computes a block on its members' rows only
    (NumPy), for a program with a branching recursion
    (`stackless.branching_recursion`: a function making independent calls
    into its own recursion, as a tree recursion does), and for
    `max_stack_depth` up to `AUTO_STACKLESS_MAX_DEPTH`; otherwise the stack
    VM runs it.

    Args:
      main: A batched function of this Context, the function it was made
        from, or its name.
      sig: The input types, as for `program_compiled`.
      backend: The backend of the call; None: `NumpyBackend()`.
      max_stack_depth: The call's `max_stack_depth`.

    Returns:
      True for stackless mode, False for the stack VM.
    """
    backend = backend or numpy_backend.NumpyBackend()
    if (not backend.compacts
        or max_stack_depth > AUTO_STACKLESS_MAX_DEPTH):
      return False
    main = self._name_of(main)
    sig = self._signature(main, sig)
    key = ('chooses_stackless', main, repr(sig), backend)
    if key not in self._cache:
      self._cache[key] = stackless_lib.branching_recursion(
          self.program_stackless(main, sig, backend))
    return self._cache[key]

  def program_lowered(self, main, sig=None, backend=None,
                      schedule=scheduler.DEFAULT_SCHEDULE):
    """Builds the lowered, optimized program the VM runs for types `sig`.

    Args:
      main: A batched function of this Context, the function it was made
        from, or its name.
      sig: The input types, as for `program_compiled`; None: every type
        unknown, the structure the VM would run for any types (`graph`,
        `var_alloc`), which cannot run.
      backend: As for `program_compiled`.
      schedule: The VM schedule, `'most'` or `'lowest'`; the blocks are
        merged for it.

    Returns:
      The `LoweredProgram` (cached per signature, backend and schedule).

    Raises:
      ArgumentError: If `schedule` is unknown.
    """
    backend = backend or numpy_backend.NumpyBackend()
    main = self._name_of(main)
    sig = None if sig is None else self._signature(main, sig)
    scheduler.check_schedule(schedule)
    exits = bool(self.block_exits)
    key = ('lowered', main, repr(sig), backend, schedule, exits)
    if sig is not None:
      self._check_outside(key, main)
    if key not in self._cache:
      self._made(key, pipeline.lowered(
          self.program_compiled(main, sig, backend), verify=self._verify(),
          schedule=schedule, exits=exits))
    return self._cache[key]

  def lowered_for_args(self, name, args, backend=None,
                      schedule=scheduler.DEFAULT_SCHEDULE):
    """Builds the lowered program that a call with `args` would run.

    Args:
      name: A batched function of this Context, the function it was made
        from, or its name.
      args: The call's positional arguments, batched.
      backend: The backend of the call; None picks it from `args`.
      schedule: The VM schedule, `'most'` or `'lowest'`.

    Returns:
      The `LoweredProgram` for the arguments' types.

    Raises:
      ArgumentError: If the arguments do not fit the function.
    """
    bf = self._entry(self._name_of(name))
    args = bf.bind_arguments(list(args), {}, batched=True)
    bf, args = self._with_nones_fixed(bf, args)
    name = bf.name
    backend = backend or call_arguments.default_backend(args)
    scalars = call_arguments.python_scalars(args)
    args = self._convert_args(name, args, backend)
    return self.program_lowered(name, self._arg_types(args, backend, scalars),
                                backend, schedule)

  def _verify(self):
    return bool(self.debug)

  def _signature(self, main, sig):
    if sig is None:
      raise errors.ArgumentError(
          'Give the input signature: a list with one ab.Type or '
          'ab.TensorType (or pattern of them) per argument of '
          f'{main!r}, or use lowered_for_args(name, args).')
    out = []
    for t in sig:
      if isinstance(t, inst.Type):
        t = t.tensors
      # A weak scalar stands for a Python number argument (a literal).
      out.append(inst.pattern_map(lambda x: x if x.weak and not x.shape
                                  else x.strong(), t, inst.TensorType))
    return out

  # -- running -----------------------------------------------------------------

  def _convert_args(self, name, args, backend):
    """The arguments of `name` as backend arrays with one common batch size
    (`call_arguments.convert_arguments`)."""
    return call_arguments.convert_arguments(
        name, self._params_of(name), args, backend, self.function_loc(name))

  def _arg_types(self, args, backend, scalars=None):
    return call_arguments.argument_types(args, backend, scalars)

  def _batch_size(self, name, args, backend):
    """The batch size of `name`'s converted arguments."""
    batch = call_arguments.batch_size(args, backend)
    if batch is None:
      raise errors.ArgumentError(
          f'{name}() has no arguments to take the batch size from',
          loc=self.function_loc(name),
          hint='Batched functions need at least one batched argument.')
    return batch

  def _run(self, bf, args, stackless, max_stack_depth, backend,
           block_code_cache, schedule, profile=False, max_steps=None,
           on_error='raise'):
    backend = backend or call_arguments.default_backend(args)
    scalars = call_arguments.python_scalars(args)
    args = self._convert_args(bf.name, args, backend)
    batch = self._batch_size(bf.name, args, backend)
    sig = self._arg_types(args, backend, scalars)
    if not isinstance(max_stack_depth, int) or max_stack_depth < 1:
      raise errors.ArgumentError(
          f'max_stack_depth must be a positive int, got {max_stack_depth!r}')
    if max_steps is None:
      max_steps = backend.while_maximum_iterations
    if max_steps is not None and (not isinstance(max_steps, int)
                                  or isinstance(max_steps, bool)
                                  or max_steps < 1):
      raise errors.ArgumentError(
          f'max_steps must be None or a positive int, got {max_steps!r}')
    if backend.staged:
      from autobatch_vm.backends.tf import xla  # pylint: disable=g-import-not-at-top
      if max_steps is None:
        xla.warn_if_gradient_needs_max_steps(bf.name)
      # Under XLA, a gradient from outside the compiled function is
      # refused clearly, at the run's inputs and outputs.
      loc = self.function_loc(bf.name)
      args = xla.refuse_gradient_from_outside(args, bf.name, loc)
    auto = stackless is None
    if auto:
      stackless = self.chooses_stackless(bf.name, sig, backend,
                                         max_stack_depth)
    fallbacks = member_primitive.fallback_counts()
    if stackless:
      program = self.program_stackless(bf.name, sig, backend)
      try:
        # Automatic: a recursion deeper than the VM would take, the step
        # limit or Python's recursion limit hands the call to the VM,
        # which runs it from the start and decides.  The VM takes one
        # level more than max_stack_depth (a leaf's call pushes nothing).
        out, stats = stackless_lib.execute(
            program, args, backend, batch, schedule=schedule,
            max_steps=max_steps, profile=profile,
            max_depth=max_stack_depth + 1 if auto else None, fallback=auto)
      except stackless_lib.Fallback:
        stackless = False
      except (errors.AssertionFailedError, errors.StackOverflowError,
              errors.StepLimitError, errors.PrimitiveError,
              errors.PerMemberError) as e:
        # Stackless mode raises any error: chosen for the call, it hands
        # a run that reports errors to the VM, which stops the members
        # (a primitive's error, where it names the members Python fails:
        # an item index out of range, a math domain error).
        if not (auto and on_error == 'status') or (
            isinstance(e, (errors.PrimitiveError, errors.PerMemberError))
            and e.members is None):
          raise
        stackless = False
      else:
        if on_error == 'status':   # stackless mode raises any error
          out = failures.finished(out, backend)
    if not stackless:
      program = self.program_lowered(bf.name, sig, backend, schedule)
      cache = self._cache if block_code_cache is None else block_code_cache
      # A run staged once and cached across calls (TensorFlow, called
      # eagerly) is keyed by the outside values its primitives read.
      token = externals.current.set(
          externals.fingerprint(program)
          if backend.staged and not backend.in_graph() else None)
      try:
        out, stats = machine.execute(
            program, args, backend, batch, max_stack_depth=max_stack_depth,
            schedule=schedule, block_code_cache=cache, profile=profile,
            max_steps=max_steps, on_error=on_error)
      finally:
        externals.current.reset(token)
    if backend.staged:
      out = xla.refuse_gradient_from_outside(out, bf.name, loc)
    stats.per_member_fallbacks = member_primitive.fallbacks_since(fallbacks)
    bf.last_stats = stats
    self.last_stats = stats
    return out

  def _dry_run(self, bf, args, backend):
    """Runs `bf` once per member as plain Python (`dry_run.DryRuns.run`)."""
    backend = backend or call_arguments.default_backend(args)
    given = args
    args = self._convert_args(bf.name, args, backend)
    batch = self._batch_size(bf.name, args, backend)
    if not isinstance(batch, int):   # a tensor: no size while traced
      raise errors.ArgumentError(
          f'{bf.name}(..., dry_run=True) runs each member in Python, so it '
          'needs the batch size while a tf.function is traced; the '
          'arguments\' batch axis has none', loc=self.function_loc(bf.name),
          hint='Give the input_signature a batch size, or run the dry run '
          'eagerly.')
    return self._dry_runs.run(bf, args, batch, backend, given)


def _has_source(fn):
  """Whether Python can read `fn`'s source (a `def` in a file)."""
  try:
    inspect.getsource(fn)
  except (OSError, TypeError):
    return False
  return True


def _with_none_types(type_inference, params, static):
  """A variant's `type_inference`: the function's, given None as the
  type of each parameter the variant fixes; None without one."""
  if type_inference is None:
    return None
  kept = [p for p in params if p not in static]

  @functools.wraps(type_inference)
  def wrapped(arg_types):
    by_name = dict(zip(kept, arg_types))
    return type_inference([by_name.get(p) for p in params])
  return wrapped


def _output_types(type_inference):
  """Accepts TFP's convention: a list with one `Type` per returned value.

  `[T]` means a single result of type T, whatever T is (a `TensorType`, a
  `Type`, or a pattern: `[[T1, T2]]` is a function returning a list);
  `[T1, T2]` of `Type`s or `TensorType`s the tuple `return a, b`.  A
  `Type`, `TensorType` or tuple pattern is taken as it is.
  """
  @functools.wraps(type_inference)
  def wrapped(arg_types):
    result = type_inference(arg_types)
    if isinstance(result, list) and len(result) == 1:
      return result[0]
    if isinstance(result, list) and all(
        isinstance(r, (inst.Type, inst.TensorType)) for r in result):
      return tuple(result)
    return result
  wrapped.user_type_inference = type_inference
  return wrapped


def _decorated_bare(fn):
  """Whether `fn` is a `def` carrying a bare `@...batch` decorator (so
  `Context.batch` got the function to batch, not a type_inference)."""
  if not isinstance(fn, types.FunctionType) or fn.__name__ == '<lambda>':
    return False
  try:
    source = textwrap.dedent(''.join(inspect.getsourcelines(fn)[0]))
    node = ast.parse(source).body[0]
  except (OSError, TypeError, SyntaxError, IndexError):
    return False
  if not isinstance(node, ast.FunctionDef):
    return False
  for d in node.decorator_list:
    name = (d.attr if isinstance(d, ast.Attribute) else
            d.id if isinstance(d, ast.Name) else None)
    if name == 'batch':
      return True
  return False


def _check_parameters(function):
  """Raises where `function`'s signature has `*args`, `**kwargs` or
  positional-only parameters, which a batched function cannot take (its
  call binds each argument to a named parameter, and the compiled program
  takes a fixed list of them)."""
  kind = inspect.Parameter
  kinds = [f'*{p.name}' if p.kind == kind.VAR_POSITIONAL else
           f'**{p.name}' if p.kind == kind.VAR_KEYWORD else
           f'positional-only {p.name}'
           for p in inspect.signature(function).parameters.values()
           if p.kind in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD,
                         kind.POSITIONAL_ONLY)]
  if kinds:
    raise errors.UnsupportedSyntaxError(
        f'Batched function {function.__name__!r} must take named '
        'parameters, positional or keyword-only, with or without default '
        f'values; it takes {", ".join(kinds)}',
        loc=_def_loc(function),
        hint='Name each parameter (def f(x, y, z=None)); pass a varying '
        'number of arrays as one tuple or list argument, or stack them '
        'into one array.')


def _def_loc(function):
  """The `SourceLoc` of `function`'s `def` line (after its decorators),
  with the line's text where the source can be read."""
  code = function.__code__
  try:
    lines, first = inspect.getsourcelines(function)
  except (OSError, TypeError):
    return inst.SourceLoc(function.__name__, code.co_filename,
                          code.co_firstlineno)
  for i, text in enumerate(lines):
    if text.lstrip().startswith(('def ', 'async def ')):
      return inst.SourceLoc(function.__name__, code.co_filename, first + i,
                            text.rstrip('\n'))
  return inst.SourceLoc(function.__name__, code.co_filename, first)
