"""BUILD lists each module's real dependencies, and the imports run one way.

For every module of the package, the `py_library` of the same name in
BUILD depends on exactly the package modules its source imports (at the
top or inside a function), and the graph of those imports has no cycle.
"""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'autobatch_vm')
MODULES = sorted(f[:-3] for f in os.listdir(PACKAGE)
                 if f.endswith('.py') and f != '__init__.py')


def imported_modules(name):
  """The package modules that module `name` imports."""
  with open(os.path.join(PACKAGE, name + '.py')) as f:
    tree = ast.parse(f.read())
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module == 'autobatch_vm':
        out.update(a.name for a in node.names)
      elif node.module.startswith('autobatch_vm.'):
        out.add(node.module.split('.')[1])
  return (out & set(MODULES)) - {name}


def build_deps():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    text = f.read()
  out = {}
  for m in re.finditer(r'py_library\(\n    name = "(\w+)",\n    srcs = '
                       r'\["autobatch_vm/(\w+)\.py"\],\n    deps = \[(.*?)\]',
                       text, re.S):
    out[m.group(2)] = set(re.findall(r'":(\w+)"', m.group(3)))
  return out


def test_every_module_has_a_target_with_its_imports():
  deps = build_deps()
  for name in MODULES:
    assert name in deps, f'BUILD has no py_library for {name}.py'
    assert deps[name] == imported_modules(name), name


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
