# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An object's metadata as the collection reads it: the metadata itself, the keys that name an
object ('namespace/name' for people, (namespace, name) for indexes) and JSON kept in an annotation."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


def meta_of(obj):
    """The object's metadata ({} when it has none)."""
    return obj.get("metadata") or {}


def namespaced_name(namespace, name):
    """'namespace/name', as messages, results and reports name a namespaced object."""
    return "%s/%s" % (namespace, name)


def object_name(obj):
    """The object's 'namespace/name'."""
    metadata = meta_of(obj)
    return namespaced_name(metadata.get("namespace"), metadata.get("name"))


def object_key(obj):
    """(namespace, name) of the object, '' for a cluster-scoped object's namespace: an index key."""
    metadata = meta_of(obj)
    return (metadata.get("namespace") or "", metadata.get("name") or "")


def annotation_json(obj, annotation, kind):
    """The JSON value of one of the object's annotations when it parses to a ``kind`` (list or
    dict), else None: an annotation someone else wrote is read, never trusted."""
    raw = (meta_of(obj).get("annotations") or {}).get(annotation)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None
