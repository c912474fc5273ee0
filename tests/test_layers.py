"""The package's layers: every import runs down the layers, and none cycles.

Each module of `autobatch_vm` belongs to one layer (`LAYERS`, bottom
first); a module imports only modules of its own layer or of layers
below it.  The imports are read from the source with `ast`: at the top
of a module and inside functions and classes alike, so an import moved
into a function to dodge a cycle is caught as well.  Function-level
imports are allowed only of what `LAZY_IMPORTS` lists: the optional heavy
dependencies (TensorFlow and the package modules that import it, Dask,
cloudpickle, matplotlib) and the per-member rules; any other
function-level import fails.  A failure names the file and line.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'autobatch_vm')

# The layers, bottom first: a module name (dotted, in the package) or a
# subpackage ('vm.' for every module under vm/).
LAYERS = (
    ('ir', ('ir.', 'errors', 'caches', 'externals', 'ops', 'profiler')),
    ('per_member', ('per_member.',)),
    ('backends', ('backends.',)),
    ('vm', ('vm.',)),
    ('passes', ('passes.',)),
    ('python', ('python.',)),
    ('api', ('frontend', 'batched_function', 'dry_run', 'staging',
             'shipping')),
    ('sharding', ('sharding.',)),
    ('faces', ('__init__', 'instructions', 'dsl', 'liveness',
               'type_inference', 'allocation_strategy', 'lowering',
               'stack_optimization', 'virtual_machine', 'stackless',
               'numpy_backend', 'tf_backend', 'xla')),
)

# Imports allowed inside a function: optional heavy dependencies, loaded
# only when a feature needs them (a module of the package that imports
# TensorFlow at its top counts as TensorFlow), and the per-member rules,
# loaded when a per-member function first runs (the NumPy rule tables,
# TensorFlow's form).  The cycle test reads these imports too.
LAZY_IMPORTS = ('tensorflow', 'dask', 'distributed', 'cloudpickle',
                'matplotlib', 'importlib', 'autobatch_vm.backends.tf.',
                'autobatch_vm.per_member.numpy_rules',
                'autobatch_vm.per_member.tf_vectorize')


def _modules():
  out = {}
  for root, _, files in os.walk(PACKAGE):
    for f in files:
      if f.endswith('.py'):
        rel = os.path.relpath(os.path.join(root, f), PACKAGE)[:-3]
        name = rel.replace(os.sep, '.')
        if name.endswith('.__init__'):
          name = name[:-len('.__init__')] + '.'
        out[name] = os.path.join(root, f)
  return out


MODULES = _modules()


def layer_of(name):
  """The index in `LAYERS` of module `name` (`vm.` for vm/__init__.py)."""
  for i, (_, members) in enumerate(LAYERS):
    for m in members:
      if name == m or (m.endswith('.') and name.startswith(m)):
        return i
  raise AssertionError(
      f'autobatch_vm/{name.replace(".", "/")}.py is in no layer: add it to '
      'LAYERS in tests/test_layers.py (and to the tree in docs/design.md)')


def _resolve(dotted):
  """The package module that `autobatch_vm.<dotted>` names, or None."""
  if dotted in MODULES:
    return dotted
  if dotted + '.' in MODULES:
    return dotted + '.'
  return None


def imports_of(name):
  """(imported module, line, inside a function) for each package import."""
  with open(MODULES[name]) as f:
    tree = ast.parse(f.read(), MODULES[name])
  out = []

  def visit(node, nested):
    for child in ast.iter_child_nodes(node):
      inner = nested or isinstance(
          child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
      if isinstance(child, ast.Import):
        for a in child.names:
          out.append((a.name, child.lineno, nested))
      elif isinstance(child, ast.ImportFrom):
        assert not child.level, (
            f'{MODULES[name]}:{child.lineno}: relative import; write '
            '`from autobatch_vm.<module> import ...`')
        for a in child.names:
          out.append((f'{child.module}.{a.name}', child.lineno, nested))
      visit(child, inner)
  visit(tree, False)
  return out


def package_imports(name):
  """(module, line, nested) for the package modules module `name` imports."""
  out = []
  for full, line, nested in imports_of(name):
    if not full.startswith('autobatch_vm.'):
      continue
    dotted = full[len('autobatch_vm.'):]
    # `from autobatch_vm.a import b`: module a.b if there is one, else a.
    target = _resolve(dotted) or _resolve(dotted.rsplit('.', 1)[0])
    if target and target != name:
      out.append((target, line, nested))
  return out


def _where(name, line):
  return f'{os.path.relpath(MODULES[name], ROOT)}:{line}'


def test_every_module_is_in_a_layer():
  for name in MODULES:
    layer_of(name)


def test_imports_run_down_the_layers():
  wrong = []
  for name in sorted(MODULES):
    mine = layer_of(name)
    for target, line, _ in package_imports(name):
      theirs = layer_of(target)
      if theirs > mine:
        wrong.append(
            f'{_where(name, line)}: {name} (layer {LAYERS[mine][0]}) imports '
            f'{target} (layer {LAYERS[theirs][0]}), above it; move the code '
            'it needs down, or the importing code up')
  assert not wrong, '\n'.join(wrong)


def test_function_level_imports_are_of_optional_dependencies_only():
  wrong = []
  for name in sorted(MODULES):
    for full, line, nested in imports_of(name):
      if nested and not any(full == lazy or full.startswith(lazy + '.')
                            or (lazy.endswith('.') and full.startswith(lazy))
                            for lazy in LAZY_IMPORTS):
        wrong.append(
            f'{_where(name, line)}: `{full}` imported inside a function; '
            'import it at the top of the module (a function-level import '
            'may hide a cycle), or list it in LAZY_IMPORTS if it is an '
            'optional heavy dependency')
  assert not wrong, '\n'.join(wrong)


def test_the_import_graph_has_no_cycle():
  graph = {name: sorted({(t, line) for t, line, _ in package_imports(name)})
           for name in MODULES}
  state = {}

  def visit(name, path):
    if state.get(name) == 'done':
      return
    if state.get(name) == 'open':
      start = [p for p, _ in path].index(name)
      cycle = [f'{_where(p, line)} imports {nxt}'
               for (p, line), nxt in zip(path[start:],
                                         [q for q, _ in path[start + 1:]] +
                                         [name])]
      pytest.fail('import cycle:\n' + '\n'.join(cycle))
    state[name] = 'open'
    for dep, line in graph[name]:
      visit(dep, path + [(name, line)])
    state[name] = 'done'

  for name in sorted(MODULES):
    visit(name, [])
