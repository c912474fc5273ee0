"""Every public name of the covered modules has a Google-style docstring.

A public name is one in the module's `__all__` (checked in the module that
defines it), a class of the module whose name has no leading underscore, or
a public method, property, classmethod or staticmethod such a class defines
(`__call__` included).  Its docstring opens with a one-line summary followed
by a blank line (or nothing), and when it takes parameters (other than
`self` or `cls`) an `Args:` section names each of them; `*args` and
`**kwargs` may share one entry (`*args, **kwargs: ...`).  A class that
writes its own `__init__` documents that method's parameters in the class
docstring or in `__init__`'s.  A submodule in `__all__` needs a module
docstring.

Extend MODULES as more modules get their docstrings.
"""

import dataclasses
import importlib
import inspect
import re
import types

import pytest

MODULES = [
    'autobatch_vm',
    'autobatch_vm.allocation_strategy',
    'autobatch_vm.backends',
    'autobatch_vm.backends.base',
    'autobatch_vm.backends.numpy',
    'autobatch_vm.backends.scheduler',
    'autobatch_vm.backends.tf',
    'autobatch_vm.backends.tf.backend',
    'autobatch_vm.backends.tf.errors',
    'autobatch_vm.backends.tf.groups',
    'autobatch_vm.backends.tf.knobs',
    'autobatch_vm.backends.tf.loop',
    'autobatch_vm.backends.tf.masks',
    'autobatch_vm.backends.tf.ops',
    'autobatch_vm.backends.tf.packing',
    'autobatch_vm.backends.tf.xla',
    'autobatch_vm.batched_function',
    'autobatch_vm.dry_run',
    'autobatch_vm.dsl',
    'autobatch_vm.errors',
    'autobatch_vm.frontend',
    'autobatch_vm.instructions',
    'autobatch_vm.ir',
    'autobatch_vm.ir.dsl',
    'autobatch_vm.ir.dsl_function',
    'autobatch_vm.ir.dsl_tfp',
    'autobatch_vm.ir.instructions',
    'autobatch_vm.ir.interpreter',
    'autobatch_vm.ir.liveness',
    'autobatch_vm.ir.patterns',
    'autobatch_vm.ir.program',
    'autobatch_vm.ir.verifier',
    'autobatch_vm.liveness',
    'autobatch_vm.lowering',
    'autobatch_vm.numpy_backend',
    'autobatch_vm.ops',
    'autobatch_vm.passes',
    'autobatch_vm.passes.allocation_strategy',
    'autobatch_vm.passes.block_merge',
    'autobatch_vm.passes.block_order',
    'autobatch_vm.passes.copy_propagation',
    'autobatch_vm.passes.declared_types',
    'autobatch_vm.passes.leaf_returns',
    'autobatch_vm.passes.lowering',
    'autobatch_vm.passes.made_up',
    'autobatch_vm.passes.member_mixing',
    'autobatch_vm.passes.parallel_calls',
    'autobatch_vm.passes.pipeline',
    'autobatch_vm.passes.return_inlining',
    'autobatch_vm.passes.stack_optimization',
    'autobatch_vm.passes.type_inference',
    'autobatch_vm.per_member.numpy_array',
    'autobatch_vm.per_member.numpy_indexing',
    'autobatch_vm.per_member.numpy_rules',
    'autobatch_vm.profiler',
    'autobatch_vm.python',
    'autobatch_vm.python.call_arguments',
    'autobatch_vm.python.cfg',
    'autobatch_vm.python.primitives',
    'autobatch_vm.python.source',
    'autobatch_vm.python.to_ir',
    'autobatch_vm.sharding',
    'autobatch_vm.sharding.executor',
    'autobatch_vm.sharding.shard',
    'autobatch_vm.sharding.split',
    'autobatch_vm.sharding.tf_shards',
    'autobatch_vm.shipping',
    'autobatch_vm.stack_optimization',
    'autobatch_vm.stackless',
    'autobatch_vm.staging',
    'autobatch_vm.tf_backend',
    'autobatch_vm.type_inference',
    'autobatch_vm.virtual_machine',
    'autobatch_vm.vm',
    'autobatch_vm.vm.closures',
    'autobatch_vm.vm.codegen',
    'autobatch_vm.vm.dispatch',
    'autobatch_vm.vm.errors',
    'autobatch_vm.vm.layout',
    'autobatch_vm.vm.machine',
    'autobatch_vm.vm.stackless',
    'autobatch_vm.vm.stats',
    'autobatch_vm.xla',
]

_SECTION = re.compile(r'^(\w[\w ]*):\s*$')
_ENTRY = re.compile(r'^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?:\([^)]*\))?:')


def _public_members(module):
  """Yields (qualified name, object) for each public name `module` defines."""
  names = set(getattr(module, '__all__', ()))
  names.update(name for name, value in vars(module).items()
               if inspect.isclass(value) and not name.startswith('_')
               and value.__module__ == module.__name__)
  for name in sorted(names):
    value = getattr(module, name)
    if isinstance(value, types.ModuleType):
      yield f'{module.__name__}.{name}', value
    elif inspect.isclass(value) or inspect.isfunction(value):
      if value.__module__ != module.__name__:
        continue  # Checked where it is defined.
      yield f'{module.__name__}.{name}', value
      if inspect.isclass(value):
        yield from _class_members(value, f'{module.__name__}.{name}')


def _class_members(cls, qualname):
  """Yields the public methods and properties `cls` itself defines."""
  generated = _generated_methods(cls)
  for name, value in vars(cls).items():
    if name.startswith('_') and name != '__call__' or name in generated:
      continue
    if isinstance(value, (staticmethod, classmethod)):
      value = value.__func__
    elif isinstance(value, property):
      value = value.fget
    elif isinstance(value, types.FunctionType):
      pass
    else:
      continue
    yield f'{qualname}.{name}', value


def _generated_methods(cls):
  """Names of methods that `dataclasses` or `typing.NamedTuple` wrote."""
  out = set()
  for name, value in vars(cls).items():
    code = getattr(getattr(value, '__func__', value), '__code__', None)
    if code is not None and not code.co_filename.endswith('.py'):
      out.add(name)
  return out


def _own_init(cls):
  """`cls.__init__` if the class's source writes it, else None."""
  init = vars(cls).get('__init__')
  if not isinstance(init, types.FunctionType):
    return None
  if not init.__code__.co_filename.endswith('.py'):
    return None  # dataclass-generated.
  return init


def _sections(doc):
  """Maps each section title of a cleaned docstring to its lines."""
  out = {}
  current = None
  for line in doc.splitlines():
    match = _SECTION.match(line)
    if match:
      current = out.setdefault(match.group(1), [])
    elif current is not None:
      if line and not line[0].isspace():
        current = None
      else:
        current.append(line)
  return out


def _documented_args(doc):
  """The parameter names the `Args:` section of `doc` describes."""
  lines = [line for line in _sections(doc).get('Args', []) if line.strip()]
  if not lines:
    return set()
  indent = len(lines[0]) - len(lines[0].lstrip())
  names = set()
  for line in lines:
    if len(line) - len(line.lstrip()) != indent:
      continue
    match = _ENTRY.match(line.strip())
    if match:
      names.update(n.strip().lstrip('*') for n in match.group(1).split(','))
  return names


def _parameters(function):
  """The parameter names of `function` its docstring must describe."""
  try:
    signature = inspect.signature(function)
  except (TypeError, ValueError):
    return []
  names = list(signature.parameters)
  if names and names[0] in ('self', 'cls'):
    names = names[1:]
  return names


def _problems(name, value):
  """What is missing from the docstring of `value` (empty if nothing)."""
  doc = inspect.getdoc(value) if not inspect.isclass(value) else (
      inspect.cleandoc(value.__doc__) if value.__doc__ else None)
  if inspect.isclass(value) and doc and re.fullmatch(
      re.escape(value.__name__) + r'\(.*\)', doc, re.S):
    # What dataclasses and namedtuples write for a class without one.
    doc = None
  if not doc:
    return [f'{name} has no docstring']
  lines = doc.splitlines()
  if (not lines[0].strip() or _SECTION.match(lines[0])
      or len(lines) > 1 and lines[1].strip()):
    return [f'{name}: the docstring does not open with a one-line summary '
            'followed by a blank line']
  problems = []
  if inspect.isfunction(value):
    missing = [p for p in _parameters(value)
               if p not in _documented_args(doc)]
    if missing:
      problems.append(f'{name}: Args: does not describe {missing}')
  elif inspect.isclass(value):
    init = _own_init(value)
    if init is not None:
      documented = _documented_args(doc) | _documented_args(
          inspect.getdoc(init) or '')
      missing = [p for p in _parameters(init) if p not in documented]
      if missing:
        problems.append(
            f'{name}.__init__: Args: does not describe {missing}')
  return problems


@pytest.mark.parametrize('module_name', MODULES)
def test_public_names_have_google_style_docstrings(module_name):
  module = importlib.import_module(module_name)
  problems = []
  if not (module.__doc__ or '').strip():
    problems.append(f'{module_name} has no module docstring')
  for name, value in _public_members(module):
    if isinstance(value, types.ModuleType):
      if not (value.__doc__ or '').strip():
        problems.append(f'{name} has no module docstring')
      continue
    problems.extend(_problems(name, value))
  assert not problems, '\n'.join(problems)


def test_the_checker_finds_what_is_missing():
  def documented(x, *args, **kwargs):
    """Adds.

    Args:
      x (int): A number.
      *args, **kwargs: Passed on.
    """
    del x, args, kwargs

  def undocumented_arg(x, y):
    """Adds.

    Args:
      x: A number.
    """
    del x, y

  def no_summary(x):
    """Args:

      x: A number.
    """
    del x

  def long_summary(x):
    """Adds a number to another one, wrapping the summary over
    two lines.

    Args:
      x: A number.
    """
    del x

  @dataclasses.dataclass
  class Undocumented:
    x: int

  class Documented:
    """A class.

    Args:
      y: A number.
    """

    def __init__(self, y):
      self.y = y

    def method(self, z):
      """Returns z."""
      return z

    def __call__(self):
      return self.y

  assert not _problems('documented', documented)
  assert _problems('long_summary', long_summary)
  assert _problems('Undocumented', Undocumented) == [
      'Undocumented has no docstring']
  assert not _problems('Documented', Documented)
  members = dict(_class_members(Documented, 'Documented'))
  assert set(members) == {'Documented.method', 'Documented.__call__'}
  assert _problems('Documented.method', members['Documented.method']) == [
      "Documented.method: Args: does not describe ['z']"]
  assert _problems('Documented.__call__', members['Documented.__call__'])
  assert _problems('undocumented_arg', undocumented_arg) == [
      "undocumented_arg: Args: does not describe ['y']"]
  assert _problems('no_summary', no_summary)
  assert _problems('bare', lambda x: x) == ['bare has no docstring']
