"""The layering of plugins/, read from every file's imports (ast, so imports inside functions count too).

- Nothing under plugins/ imports the repository's lab, bench or tests: they are not shipped.
- module_utils imports nothing of this collection but module_utils, and of Ansible only
  ansible.module_utils (module_utils travel to the managed node with the module).
- Every __init__.py under plugins/ is empty (ansible-core 2.17 sanity: empty-init).
- module_utils holds packages only, one concern each, in one order (PACKAGES, lowest first):
  a file imports its own package and the packages below it, never one above.
"""

import ast
import functools
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(ROOT, "plugins")
MODULE_UTILS_DIR = os.path.join(PLUGINS, "module_utils")
COLLECTION = "ansible_collections.kubevirt_ops.maintenance."
MODULE_UTILS = COLLECTION + "plugins.module_utils"
NOT_SHIPPED = ("lab", "bench", "tests")

# The packages of module_utils, lowest first (CONTRIBUTING.md says what each owns).
PACKAGES = (
    "common",            # the error family, time, the collection's names
    "k8s",               # the API: connection, transport, client, kinds, the waiter
    "cluster",           # nodes, selectors, quantities, what the scheduler says
    "machine",           # the machine behind a node: its BMC over Redfish, its BareMetalHost
    "ansible_module",    # the module wrapper, its shared options and their checks
    "kubevirt",          # how KubeVirt treats a VM; the VM configuration runners
    "coordination",      # the cluster lock and the run that owns it
    "drain",             # the eviction engine
    "planning",          # what a maintenance would do: plan, placement, snapshot
    "report",            # the run's report: model and renderers
    "notifications",     # webhook messages of a run
    "node_maintenance",  # entering and leaving maintenance
    "servicing",         # servicing a drained node's machine: firmware, BIOS, a restart
    "rolling",           # the rolling run: preflight (the machines' reading too), batches, verification
    "decommission",      # removing a node for good, how its power-off is established
    "fence",             # fencing a dead node: machine off, then out of service
)


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


def packages_imported(tree):
    """The module_utils packages a file imports."""
    found = set()
    for name in imports(tree):
        if name.startswith(MODULE_UTILS + "."):
            found.add(name[len(MODULE_UTILS) + 1:].split(".")[0])
    return found


@functools.lru_cache(maxsize=None)
def module_utils_files(folder=MODULE_UTILS_DIR):
    """{(package, file name): tree} of every file under module_utils (read once per folder: every parametrized
    test below looks at one file of it)."""
    found = {}
    for path in python_files(folder):
        relative = os.path.relpath(path, folder).split(os.sep)
        package = relative[0] if len(relative) > 1 else ""
        found[(package, relative[-1][:-3])] = parse(path)
    return found


def upward_imports(files, order=PACKAGES):
    """(importer, imported) pairs of files that import a package above their own, or one not in ``order``."""
    rank = dict((package, index) for index, package in enumerate(order))
    found = []
    for (package, name), tree in sorted(files.items()):
        for imported in sorted(packages_imported(tree)):
            if imported not in rank or rank[imported] > rank.get(package, -1):
                found.append(("%s/%s" % (package, name), imported))
    return found


@pytest.mark.parametrize("path", sorted(python_files(PLUGINS)), ids=lambda p: os.path.relpath(p, PLUGINS))
def test_plugins_do_not_import_what_is_not_shipped(path):
    for name in imports(parse(path)):
        top = name[len(COLLECTION):] if name.startswith(COLLECTION) else name
        assert top.split(".")[0] not in NOT_SHIPPED, "%s imports %s" % (path, name)


@pytest.mark.parametrize("key", sorted(module_utils_files()), ids="/".join)
def test_module_utils_import_only_module_utils(key):
    tree = module_utils_files()[key]
    for imported in imports(tree):
        if imported.startswith(COLLECTION):
            assert imported.startswith(MODULE_UTILS + "."), "module_utils/%s/%s.py imports %s" % (key + (imported,))
        elif imported.split(".")[0] == "ansible":
            assert imported.startswith("ansible.module_utils."), "module_utils/%s/%s.py imports %s" % (
                key + (imported,))


def test_module_utils_holds_packages_in_the_order_only():
    top = sorted(name for name in os.listdir(MODULE_UTILS_DIR) if name != "__pycache__")
    assert [name for name in top if not os.path.isdir(os.path.join(MODULE_UTILS_DIR, name))] == []
    assert sorted(top) == sorted(PACKAGES)


def test_every_package_init_is_empty():
    """ansible-core 2.17's sanity test empty-init: a package says what it is in CONTRIBUTING.md, not in __init__.py."""
    inits = [os.path.join(directory, "__init__.py") for directory, _dirs, files in os.walk(PLUGINS)
             if "__init__.py" in files]
    assert inits
    assert [os.path.relpath(path, PLUGINS) for path in inits if os.path.getsize(path)] == []


def test_no_package_imports_a_package_above_it():
    assert upward_imports(module_utils_files()) == []


def test_the_rule_catches_an_upward_import(tmp_path):
    """The test of the test: a lower package importing a higher one, and a package outside the order."""
    for package, name, text in (
            ("common", "errors", "from %s.drain import engine\n" % MODULE_UTILS),
            ("drain", "engine", "from %s.common import errors\n" % MODULE_UTILS),
            ("drain", "pods", "from %s.drain import engine\n" % MODULE_UTILS),
            ("k8s", "client", "def later():\n    from %s.elsewhere import thing\n" % MODULE_UTILS)):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / ("%s.py" % name)).write_text(text)
    assert upward_imports(module_utils_files(str(tmp_path))) == [("common/errors", "drain"), ("k8s/client", "elsewhere")]
