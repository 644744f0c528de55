"""The layering of plugins/, read from every file's imports (ast, so imports inside functions count too).

- Nothing under plugins/ imports the repository's lab, bench or tests: they are not shipped.
- module_utils imports nothing of this collection but module_utils, and of Ansible only
  ansible.module_utils (module_utils travel to the managed node with the module).
- module_utils files import one another without cycles.
- A module's runner (a module_utils file a module imports, other than the plumbing in SHARED)
  is imported by other module_utils files only where it is today (SIDEWAYS); a new such import
  means a helper belongs in a file of its own.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(ROOT, "plugins")
COLLECTION = "ansible_collections.kubevirt_ops.maintenance."
MODULE_UTILS = COLLECTION + "plugins.module_utils"
NOT_SHIPPED = ("lab", "bench", "tests")
# module_utils files any module imports for its plumbing (options, errors, names, KubeVirt's vocabulary).
SHARED = {"args", "errors", "identity", "kubevirt", "module"}

# (importer, runner) pairs of module_utils files that exist today.
SIDEWAYS = {
    ("decommission", "lock"),
    ("decommission", "node_maintenance"),
    ("eviction_strategy", "hco"),
    ("eviction_strategy", "run_strategy"),
    ("nm_leave", "lock"),
    ("node_maintenance", "lock"),
    # The report's renderers and files read the model the module also builds on its own in check mode.
    ("report_files", "report"),
    ("report_markdown", "report"),
    ("report_svg", "report"),
    ("restart_elsewhere", "run_strategy"),
    ("rolling", "lock"),
}


def python_files(folder):
    for base, _dirs, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(base, name)


def parse(path):
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read(), path)


def imports(tree):
    """Every imported module name: ``from a.b import c`` gives a.b and a.b.c, ``import a.b`` a.b."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import of %s" % node.module
            names.append(node.module)
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
    return names


def module_utils_imported(tree):
    """The names of the module_utils files a file imports."""
    found = set()
    for name in imports(tree):
        if name.startswith(MODULE_UTILS + "."):
            found.add(name[len(MODULE_UTILS) + 1:].split(".")[0])
    return found


def module_utils_files():
    folder = os.path.join(PLUGINS, "module_utils")
    return dict((name[:-3], parse(os.path.join(folder, name)))
                for name in sorted(os.listdir(folder)) if name.endswith(".py") and name != "__init__.py")


def runners():
    """The module_utils files the modules import, other than those every module may use (SHARED)."""
    found = set()
    for path in python_files(os.path.join(PLUGINS, "modules")):
        found |= module_utils_imported(parse(path))
    return found - SHARED


@pytest.mark.parametrize("path", sorted(python_files(PLUGINS)), ids=lambda p: os.path.relpath(p, PLUGINS))
def test_plugins_do_not_import_what_is_not_shipped(path):
    for name in imports(parse(path)):
        top = name[len(COLLECTION):] if name.startswith(COLLECTION) else name
        assert top.split(".")[0] not in NOT_SHIPPED, "%s imports %s" % (path, name)


@pytest.mark.parametrize("name", sorted(module_utils_files()))
def test_module_utils_import_only_module_utils(name):
    tree = module_utils_files()[name]
    for imported in imports(tree):
        if imported.startswith(COLLECTION):
            assert imported == MODULE_UTILS or imported.startswith(MODULE_UTILS + "."), "module_utils/%s.py imports %s" % (name, imported)
        elif imported.split(".")[0] == "ansible":
            assert imported.startswith("ansible.module_utils."), "module_utils/%s.py imports %s" % (name, imported)


def test_module_utils_have_no_import_cycle():
    graph = dict((name, module_utils_imported(tree)) for name, tree in module_utils_files().items())
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import cycle: %s" % " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for imported in sorted(graph.get(name, ())):
            visit(imported)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_runners_are_imported_sideways_only_where_they_are_today():
    found = runners()
    assert {"node_maintenance", "decommission", "rolling", "lock"} <= found
    sideways = set()
    for name, tree in module_utils_files().items():
        sideways.update((name, imported) for imported in module_utils_imported(tree) & found if imported != name)
    assert sideways - SIDEWAYS == set(), "new imports of a module's runner by another module_utils file"
    assert SIDEWAYS - sideways == set(), "no longer imported: remove from SIDEWAYS"
