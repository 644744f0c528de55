# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why pods are still on a node after a drain gave up: one sentence per pending pod
(its budgets, its VM's migrations, the last eviction answer)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import describe_pdb, matching_pdbs

VIRT_API_DOWN_START = kubevirt_settings.VIRT_API_DOWN.split("%", 1)[0]


def explain_pending(client, node, pods, pdbs, reasons=None, vmis=None):
    """One sentence per pending pod saying why it is still on the node.

    ``pods``: the pending pod objects; ``pdbs``: PodDisruptionBudgets (any namespace);
    ``reasons``: last eviction answers by pod key; ``vmis``: VMIs by UID when known.
    Reads VMIs, migrations and migration target pods of the pods' namespaces (only here,
    after a timeout).
    """
    reasons = reasons or {}
    vmis_by_uid, migrations, cluster_default = _launcher_context(client, pods, vmis)
    sentences = []
    for pod in pods:
        key = object_name(pod)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            sentences.append("pod %s is terminating since %s (the node must confirm it stopped)"
                             % (key, meta["deletionTimestamp"]))
        elif kubevirt.is_launcher_pod(pod):
            sentences.append(_explain_launcher(client, node, pod, vmis_by_uid, migrations, cluster_default,
                                               reasons.get(key)))
        else:
            sentences.append(_explain_plain_pod(pod, pdbs, reasons.get(key)))
    return sentences


def _launcher_context(client, pods, vmis):
    """(VMIs by UID, migrations by (namespace, VMI name), cluster eviction strategy) for the
    namespaces of the virt-launcher pods; what could be read when the API fails."""
    launcher_namespaces = sorted(set(p["metadata"]["namespace"] for p in pods if kubevirt.is_launcher_pod(p)))
    vmis_by_uid = dict(vmis or {})
    migrations = {}
    cluster_default = None
    if launcher_namespaces:
        try:
            for namespace in launcher_namespaces:
                items, _rv = client.list("VirtualMachineInstance", namespace=namespace)
                for vmi in items:
                    vmis_by_uid[vmi["metadata"].get("uid")] = vmi
                items, _rv = client.list("VirtualMachineInstanceMigration", namespace=namespace)
                for migration in items:
                    vmi_name = (migration.get("spec") or {}).get("vmiName")
                    migrations.setdefault((namespace, vmi_name), []).append(migration)
            cr = kubevirt_settings.kubevirt_cr(client)
            cluster_default = kubevirt_settings.cluster_eviction_strategy(cr)
        except MaintenanceError:
            pass  # an explanation must not fail the report of the real problem
    return vmis_by_uid, migrations, cluster_default


def _explain_plain_pod(pod, pdbs, last_reason):
    """A pod that is no virt-launcher: its blocking budgets, else the last eviction answer."""
    key = object_name(pod)
    zero = [p for p in matching_pdbs(pod, pdbs) if ((p.get("status") or {}).get("disruptionsAllowed") or 0) < 1]
    if zero:
        return "pod %s: %s" % (key, "; ".join(describe_pdb(p) for p in zero))
    if last_reason:
        return "pod %s: %s" % (key, last_reason.rstrip("."))
    return "pod %s is still on the node" % key


def _explain_launcher(client, node, pod, vmis_by_uid, migrations, cluster_default, last_reason):
    key = object_name(pod)
    vmi = vmis_by_uid.get(kubevirt.launcher_vmi_uid(pod))
    if vmi is None:
        return "pod %s runs a VMI that no longer exists" % key
    meta = vmi["metadata"]
    name = "%s/%s" % (meta.get("namespace"), kubevirt.vm_name_of(vmi) or meta.get("name"))
    strategy = fates.effective_strategy(vmi, cluster_default)
    migratable, reason, message = kubevirt.live_migratable(vmi)
    if strategy == "LiveMigrate" and not migratable:
        return ("VM %s is not live-migratable (%s) and its eviction strategy LiveMigrate keeps it on node %s"
                % (name, kubevirt_settings.describe_not_migratable(reason, message), node))
    own = migrations.get((meta.get("namespace"), meta.get("name")), [])
    active = [m for m in own if kubevirt.migration_in_flight(m)]
    failures = describe_failures(kubevirt.failed_migrations(own), vmi)
    if active:
        migration = sorted(active, key=lambda m: m["metadata"].get("creationTimestamp") or "")[-1]
        state = kubevirt.migration_state(vmi)
        text = "VM %s: %s" % (name, kubevirt.describe_migration(
            migration, state.get("sourceNode") or node, state.get("targetNode")))
        pending_target = _pending_target_pod(client, migration)
        if pending_target:
            text += "; its target pod %s" % pending_target
        if failures:
            text += "; before it, %s" % failures
        if last_reason and last_reason.startswith(VIRT_API_DOWN_START):
            text += "; the last eviction answer was: %s" % last_reason.rstrip(".")
        return text
    text = "VM %s has no migration running" % name
    if failures:
        text += "; %s" % failures
    if last_reason:
        text += "; the last eviction answer was: %s" % last_reason.rstrip(".")
    return text


def describe_failures(failed, vmi=None):
    """'2 live migrations failed, the last: <KubeVirt's reason>' (None when none failed)."""
    if not failed:
        return None
    text = "%d live migration%s failed" % (len(failed), "" if len(failed) == 1 else "s")
    reason = kubevirt.migration_failure_reason(failed[-1], vmi)
    if reason:
        text += ", the last: %s" % reason
    return text


def _pending_target_pod(client, migration):
    uid = migration["metadata"].get("uid")
    try:
        items, _rv = client.list("Pod", namespace=migration["metadata"].get("namespace"),
                                 label_selector="%s=%s" % (kubevirt.MIGRATION_JOB_LABEL, uid))
    except MaintenanceError:
        return None
    for pod in items:
        if (pod.get("status") or {}).get("phase") == "Pending":
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    return "%s is Pending: %s" % (object_name(pod), (cond.get("message") or cond.get("reason") or "").rstrip("."))
            return "%s is Pending" % object_name(pod)
    return None
