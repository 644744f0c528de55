# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask the API server whether the caller may do something, before doing anything.

A drain that is allowed to cordon a node but not to evict its pods would leave the node
cordoned and the task failed; asking first (SelfSubjectAccessReview) keeps "permission
denied" a clean failure with nothing changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError


class Permission:
    def __init__(self, verb, resource, group="", subresource=None, namespaces=None):
        self.verb = verb
        self.resource = resource
        self.group = group
        self.subresource = subresource
        self.namespaces = sorted(set(namespaces or []))

    def describe(self, namespace=None):
        what = self.resource + ("/" + self.subresource if self.subresource else "")
        if self.group:
            what += "." + self.group
        where = " in namespace %s" % namespace if namespace else ""
        return "%s %s%s" % (self.verb, what, where)


def _allowed(client, permission, namespace=None):
    attributes = {"verb": permission.verb, "resource": permission.resource, "group": permission.group}
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    if namespace:
        attributes["namespace"] = namespace
    review = client.create("SelfSubjectAccessReview", {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }, verb="review")
    return bool((review.get("status") or {}).get("allowed"))


def require(client, permissions, task):
    """Raise one sentence listing every missing permission (nothing has been changed yet).

    A namespaced permission is asked cluster-wide first and, only when that is denied,
    per namespace.
    """
    missing = []
    for permission in permissions:
        try:
            if _allowed(client, permission):
                continue
            if not permission.namespaces:
                missing.append(permission.describe())
                continue
            for namespace in permission.namespaces:
                if not _allowed(client, permission, namespace):
                    missing.append(permission.describe(namespace))
        except ApiError:
            return  # the API cannot answer access reviews: the requests themselves will tell
    if missing:
        user = client.settings.impersonate_user or "the current user"
        raise ApiError("Cannot %s: permission denied: %s may not %s." % (task, user, ", ".join(missing)),
                       status=403, reason="permission denied", missing_permissions=missing)
