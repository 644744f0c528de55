# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Field-level JSON patches that cannot clobber a concurrent edit.

Every write of a single field is a JSON patch that first ``test``s the value it replaces
(or, when the field is absent, the object that would enclose it). When someone else changed
the field in between, the API server refuses the patch; the client's guarded update
(``KubeClient.update_guarded``) then reads the object again, recomputes what to do from the
fresh copy and tries once more. Status updates by controllers do not disturb a value test,
so busy objects are patched at the first attempt.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy


def pointer(path):
    """A JSON pointer ('/spec/template/spec/evictionStrategy') for a tuple of keys."""
    return "".join("/" + str(key).replace("~", "~0").replace("/", "~1") for key in path)


def lookup(obj, path):
    """(exists, value) of the field at ``path`` (a tuple of keys)."""
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def value_at(obj, path, default=None):
    exists, value = lookup(obj, path)
    return value if exists and value is not None else default


def resource_version_test(obj):
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return {"op": "test", "path": "/metadata/resourceVersion", "value": version}


def set_field(obj, path, value):
    """JSON-patch operations that make ``obj[path] == value``; ``None`` removes the field.

    Returns ``[]`` when the object already has that value. Missing parent objects are
    created in the same operation.
    """
    exists, old = lookup(obj, path)
    if value is None:
        if not exists:
            return []
        return [{"op": "test", "path": pointer(path), "value": old}, {"op": "remove", "path": pointer(path)}]
    if exists and old is not None:
        if old == value:
            return []
        return [{"op": "test", "path": pointer(path), "value": old},
                {"op": "replace", "path": pointer(path), "value": value}]
    # Absent: test the closest enclosing object that exists (a concurrent add changes it,
    # while controllers' status updates do not), or the object's version at the top level.
    # "add" on the first missing (or null) level creates what is missing below it.
    depth = 0
    node = obj
    for key in path[:-1]:
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            break
        node = child
        depth += 1
    nested = value
    for key in reversed(path[depth + 1:]):
        nested = {key: nested}
    guard = resource_version_test(obj) if depth == 0 else {"op": "test", "path": pointer(path[:depth]), "value": node}
    return [guard, {"op": "add", "path": pointer(path[:depth + 1]), "value": nested}]


def _apply_locally(obj, operations):
    """A copy of ``obj`` with add/replace/remove operations of ``set_field`` applied."""
    doc = copy.deepcopy(obj)
    for op in operations:
        if op["op"] == "test":
            continue
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        parent = doc
        for k in keys[:-1]:
            parent = parent[k]
        if op["op"] == "remove":
            parent.pop(keys[-1], None)
        else:
            parent[keys[-1]] = copy.deepcopy(op["value"])
    return doc


def set_fields(obj, changes):
    """One operation list for several ``(path, value)`` changes, each planned on the result of
    the previous ones (so two new fields under one missing parent both survive)."""
    groups = []
    for path, value in changes:
        operations = set_field(obj, path, value)
        if operations:
            groups.append(operations)
            obj = _apply_locally(obj, operations)
    return merge_operations(*groups)


def merge_operations(*groups):
    """Concatenate operation lists, keeping one resourceVersion test (at the front)."""
    tests, rest = [], []
    for group in groups:
        for op in group:
            if op.get("path") == "/metadata/resourceVersion" and op.get("op") == "test":
                if not tests:
                    tests.append(op)
            else:
                rest.append(op)
    return tests + rest


def update_guarded(client, kind, obj, plan, write=True, subresource=None):
    """Apply ``plan(obj) -> (operations, outcome)`` to ``obj`` through the client's one guarded
    update (``KubeClient.update_guarded``, JSON patches); return ``(outcome, object after)``.

    With ``write=False`` (check mode) nothing is sent. When a ``test`` fails the object is read
    again and ``plan`` recomputed from it, so the outcome always describes what was really done.
    """
    meta = obj.get("metadata") or {}
    return client.update_guarded(kind, meta.get("name"), plan, namespace=meta.get("namespace"), current=obj,
                                 patch_type="json", subresource=subresource, write=write)
