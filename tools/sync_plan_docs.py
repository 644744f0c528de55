"""The plan's RETURN documentation, written once.

node_maintenance_info documents the plan (its ``nodes[].plan``); node_maintenance returns the
same plan in check mode (its ``plan``). Ansible reads RETURN from each module file and has no
fragments for return values, so this copies the ``contains`` block of the plan from
node_maintenance_info into node_maintenance, re-indented. ``--check`` changes nothing and exits 1
when the copy differs (a unit test runs it).

    python tools/sync_plan_docs.py [--check]
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "plugins", "modules", "node_maintenance_info.py")
TARGET = os.path.join(ROOT, "plugins", "modules", "node_maintenance.py")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def plan_contains(lines):
    """(first, end, indent) of the lines under the plan's ``contains:`` in a module's RETURN."""
    start = next(i for i, line in enumerate(lines) if line.startswith("RETURN = "))
    plan = next(i for i in range(start, len(lines)) if re.match(r"^\s*plan:\s*$", lines[i]))
    contains = next(i for i in range(plan + 1, len(lines))
                    if lines[i].strip() == "contains:" and _indent(lines[i]) == _indent(lines[plan]) + 2)
    indent = _indent(lines[contains])
    end = contains + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return contains + 1, end, indent


def synced():
    """The target module's text with the source's plan documentation."""
    with open(SOURCE) as handle:
        source = handle.read().splitlines(True)
    with open(TARGET) as handle:
        target = handle.read().splitlines(True)
    first, end, indent = plan_contains(source)
    t_first, t_end, t_indent = plan_contains(target)
    shift = t_indent - indent
    block = [(" " * shift + line) if shift >= 0 and line.strip() else
             (line[-shift:] if line.strip() else line) for line in source[first:end]]
    return "".join(target[:t_first] + block + target[t_end:]), "".join(target)


def main(argv):
    new, old = synced()
    if new == old:
        return 0
    if "--check" in argv:
        print("%s: the plan's RETURN documentation differs from %s; run python tools/sync_plan_docs.py"
              % (os.path.relpath(TARGET, ROOT), os.path.relpath(SOURCE, ROOT)))
        return 1
    with open(TARGET, "w") as handle:
        handle.write(new)
    print("updated %s" % os.path.relpath(TARGET, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
