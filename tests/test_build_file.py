"""BUILD lists each module's real dependencies, and the imports run one way.

For every module of the package (subpackages included: `vm/layout.py` is
module `vm.layout`, target `vm_layout`), the `py_library` whose srcs is
that file depends on exactly the package modules its source imports (at
the top or inside a function), and the graph of those imports has no
cycle.
"""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'autobatch_vm')
MODULES = sorted(
    os.path.relpath(os.path.join(root, f), PACKAGE)[:-3].replace(os.sep, '.')
    for root, _, files in os.walk(PACKAGE) for f in files
    if f.endswith('.py') and f != '__init__.py')


def imported_modules(name):
  """The package modules that module `name` (dotted, in the package)
  imports: `from autobatch_vm.a import b` is module `a.b` if there is one,
  else `a`."""
  with open(os.path.join(PACKAGE, *name.split('.')) + '.py') as f:
    tree = ast.parse(f.read())
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module == 'autobatch_vm':
        out.update(a.name for a in node.names)
      elif node.module.startswith('autobatch_vm.'):
        base = node.module[len('autobatch_vm.'):]
        for a in node.names:
          full = f'{base}.{a.name}'
          out.add(full if full in MODULES else base)
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith('autobatch_vm.'):
          out.add(a.name[len('autobatch_vm.'):])
  return (out & set(MODULES)) - {name}


def target(name):
  """The BUILD target of module `name`."""
  return name.replace('.', '_')


def build_deps():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    text = f.read()
  out = {}
  for m in re.finditer(r'py_library\(\n    name = "(\w+)",\n    srcs = '
                       r'\["autobatch_vm/([\w/]+)\.py"\],\n    deps = \[(.*?)\]',
                       text, re.S):
    name = m.group(2).replace('/', '.')
    assert m.group(1) == target(name), (m.group(1), name)
    out[name] = set(re.findall(r'":(\w+)"', m.group(3)))
  return out


def test_every_module_has_a_target_with_its_imports():
  deps = build_deps()
  for name in MODULES:
    assert name in deps, f'BUILD has no py_library for {name}.py'
    assert deps[name] == {target(m) for m in imported_modules(name)}, name


def test_the_import_graph_has_no_cycle():
  graph = {name: imported_modules(name) for name in MODULES}
  state = {}

  def visit(name, path):
    if state.get(name) == 'done':
      return
    assert state.get(name) != 'open', ' -> '.join(path + [name])
    state[name] = 'open'
    for dep in sorted(graph[name]):
      visit(dep, path + [name])
    state[name] = 'done'
  for name in MODULES:
    visit(name, [])
