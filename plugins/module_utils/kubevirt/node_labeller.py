# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node-labeller skip-node annotation.

virt-handler's node-labeller leaves a node alone while the annotation exists, whatever its
value (pkg/virt-handler/node-labeller/node_labeller.go): ``skip: false`` removes it, also
one set to "false" by someone else; ``skip: true`` sets "true".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference

SKIP_NODE_ANNOTATION = "node-labeller.kubevirt.io/skip-node"


def set_skip_node(module):
    name, skip = module.params["name"], module.params["skip"]
    node = module.client.get_or_none("Node", name)
    if node is None:
        raise InvalidInputError("Node %s does not exist." % name, node=name)
    desired = "true" if skip else None

    def decide(current):
        value = ((current.get("metadata") or {}).get("annotations") or {}).get(SKIP_NODE_ANNOTATION)
        patch = {"metadata": {"annotations": {SKIP_NODE_ANNOTATION: desired}}} if value != desired else None
        return patch, value

    # Guarded by the resourceVersion read: a concurrent edit of the node is re-read, not overwritten.
    current, _node = module.client.update_guarded("Node", name, decide, current=node, write=not module.check_mode,
                                                  details={"node": name})
    result = {"node": name, "skip": skip, "changed": current != desired}
    if result["changed"]:
        module.events.normal(reference(node, "Node"), "NodeLabellerSkipped" if skip else "NodeLabellerResumed",
                             "Annotate", "virt-handler's node-labeller %s this node (annotation %s)" % (
                                 "skips" if skip else "labels", SKIP_NODE_ANNOTATION))
    if module.diff_mode:
        result["diff"] = {
            "before": {"annotations": {SKIP_NODE_ANNOTATION: current}},
            "after": {"annotations": {SKIP_NODE_ANNOTATION: desired}},
        }
    return result
