# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cancelling the evacuations a drain started on a node, when its maintenance is aborted.

An eviction of a virt-launcher pod does not move the VM: virt-api's pod-eviction admitter
marks the VMI with ``status.evacuationNodeName`` (pkg/virt-api/webhooks/validating-webhook/
admitters/pod-eviction-admitter.go), and virt-controller's evacuation controller keeps creating
migrations (``generateName: kubevirt-evacuation-``, annotation ``kubevirt.io/evacuationMigration:
<node>``) for every marked VMI still on that node, within the parallel-migration limits, until
the mark is gone or the VMI has left (``getMarkedForEvictionVMIs`` and ``GenerateNewMigration`` in
pkg/virt-controller/watch/drain/evacuation/evacuation.go of kubevirt/kubevirt v1.6.0 to v1.9.0).
Ending maintenance half-way must therefore clear the marks, or the VMs keep leaving an
uncordoned node:

* KubeVirt 1.7 and later serve ``PUT .../virtualmachineinstances/<name>/evacuate/cancel`` in
  ``subresources.kubevirt.io/v1`` (pkg/virt-api/api.go; handler pkg/virt-api/rest/evacuate_cancel.go,
  body ``EvacuateCancelOptions{evacuationNodeName}``): virt-api removes the mark after testing it
  still names that node. It refuses (400) while the node carries KubeVirt's own drain taint
  (``migrations.nodeDrainTaintKey``, default ``kubevirt.io/drain``), under which the evacuation
  controller migrates every VMI of the node anyway.
* Older releases have no such route (v1.6.0's api.go has none); the same JSON patch (test the
  value, remove it) is sent to the VMI itself: the VMI update admitter only restricts spec and
  reserved-label changes by others than KubeVirt (vmi-update-admitter.go), and the VMI CRD has
  no status subresource, so status is written with the object.

Evacuation migrations of the node that have not started transferring memory yet are deleted
(deleting a migration aborts it, and a new one is no longer created for an unmarked VMI);
running ones are left to finish: the VM is then simply elsewhere.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import meta_of, object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, NotFoundError

EVACUATION_MIGRATION_ANNOTATION = "kubevirt.io/evacuationMigration"
CANCEL_ACTION = "evacuate/cancel"
EVACUATION_NODE = ("status", "evacuationNodeName")
# Migration phases after which memory is being (or has been) transferred.
STARTED_PHASES = ("Running",) + kubevirt.FINISHED_PHASES


def marked_vmis(client, node):
    """Active VMIs still marked for evacuation from ``node``."""
    items, _rv = client.list("VirtualMachineInstance")
    return [v for v in items if patches.value_at(v, EVACUATION_NODE) == node and kubevirt.vmi_is_active(v)]


def pending_migrations(client, node):
    """Evacuation migrations of ``node`` that have not started moving memory."""
    items, _rv = client.list("VirtualMachineInstanceMigration")
    return [m for m in items
            if (meta_of(m).get("annotations") or {}).get(EVACUATION_MIGRATION_ANNOTATION) == node
            and (m.get("status") or {}).get("phase") not in STARTED_PHASES
            and not meta_of(m).get("deletionTimestamp")]


def pending(client, node):
    """(marked VMIs, pending evacuation migrations) of ``node``; both empty when KubeVirt is absent."""
    if not client.kind_served("VirtualMachineInstance"):
        return [], []
    return marked_vmis(client, node), pending_migrations(client, node)


def uses_cancel_action(client):
    """True when virt-api serves the evacuate/cancel action (KubeVirt 1.7 and later)."""
    return CANCEL_ACTION in client.actions_served("VirtualMachineInstance")


def permissions(client, vmis, migrations):
    perms = []
    namespaces = sorted(set(meta_of(v).get("namespace") for v in vmis))
    if namespaces:
        if uses_cancel_action(client):
            # The API server authorizes only the first path segment after the name as the
            # subresource ("parts ... we don't interpret", k8s.io/apiserver pkg/endpoints/request/
            # requestinfo.go): RBAC sees virtualmachineinstances/evacuate.
            perms.append(Permission("update", "virtualmachineinstances", group="subresources.kubevirt.io",
                                    subresource=CANCEL_ACTION.split("/", 1)[0], namespaces=namespaces))
        else:
            perms.append(Permission("patch", "virtualmachineinstances", group="kubevirt.io", namespaces=namespaces))
    namespaces = sorted(set(meta_of(m).get("namespace") for m in migrations))
    if namespaces:
        perms.append(Permission("delete", "virtualmachineinstancemigrations", group="kubevirt.io",
                                namespaces=namespaces))
    return perms


def _entry(vmi, node, how):
    return {"namespace": meta_of(vmi).get("namespace"), "name": meta_of(vmi).get("name"), "node": node, "how": how}


def _clear_mark(client, vmi, node):
    """Remove the mark through the VMI itself; True when it was still there."""
    def plan(current):
        if patches.value_at(current, EVACUATION_NODE) != node:
            return [], False
        return patches.set_field(current, EVACUATION_NODE, None), True

    changed, _after = patches.update_guarded(client, "VirtualMachineInstance", vmi, plan)
    return changed


def cancel(client, node, vmis, warn=None):
    """Cancel the evacuations of ``vmis`` from ``node``, then delete the node's evacuation
    migrations that have not started (listed again: the evacuation controller may have created
    one from a cache that still showed a mark).

    Returns (evacuations cancelled as [{namespace, name, node, how}], migrations deleted as
    ['namespace/name']). ``how`` is ``evacuate/cancel`` or ``status`` (the VMI patched).
    """
    cancelled = []
    action = uses_cancel_action(client) if vmis else False
    for vmi in vmis:
        meta = meta_of(vmi)
        try:
            if action:
                client.subresource_action("VirtualMachineInstance", meta.get("name"), meta.get("namespace"),
                                          CANCEL_ACTION, {"evacuationNodeName": node})
                cancelled.append(_entry(vmi, node, CANCEL_ACTION))
            elif _clear_mark(client, vmi, node):
                cancelled.append(_entry(vmi, node, "status"))
        except NotFoundError:
            continue  # the VMI ended meanwhile
        except ApiError as exc:
            if exc.status != 400 or warn is None:
                raise
            warn("The evacuation of VMI %s from node %s was not cancelled: %s" % (
                object_name(vmi), node, exc.msg.rstrip(".") + "."))
    deleted = []
    for migration in pending_migrations(client, node):
        meta = meta_of(migration)
        if client.delete("VirtualMachineInstanceMigration", meta.get("name"), meta.get("namespace")) is not None:
            deleted.append(object_name(migration))
    return cancelled, deleted
