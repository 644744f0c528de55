# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node remediation paused while a node is in maintenance, and restored afterwards.

A node rebooting for a firmware update looks unhealthy; remediation would then reboot or
reprovision it half-way. What covers a node, and how each is paused:

* medik8s NodeHealthCheck (``remediation.medik8s.io/v1alpha1``, cluster-scoped) whose
  ``spec.selector`` matches the node's labels: an entry in ``spec.pauseRequests``, a free-form
  list whose entries each name who paused (api/v1alpha1/nodehealthcheck_types.go of
  medik8s/node-healthcheck-operator; any entry pauses new remediations,
  internal/controller/nodehealthcheck_controller.go). Ours is
  ``kubevirt-ops: maintenance of node <node>``, so only our own entry is ever removed.
* MachineHealthCheck of OpenShift's machine API (``machine.openshift.io/v1beta1``) and of
  Cluster API (``cluster.x-k8s.io/v1beta1``) that selects the node's Machine (the Machine whose
  ``status.nodeRef.name`` is the node; for Cluster API also labelled with the check's
  ``spec.clusterName``, core/reconcilers/machinehealthcheck/machinehealthcheck_targets.go): the
  annotation ``cluster.x-k8s.io/paused``, which both controllers honour whatever its value
  (openshift/machine-api-operator pkg/util/annotations/helpers.go and
  pkg/controller/machinehealthcheck/machinehealthcheck_controller.go; kubernetes-sigs/cluster-api
  util/annotations/helpers.go ``HasPaused`` through util/paused). That annotation is one key for
  every pauser, so the nodes it is paused for by this collection are listed in
  ``maintenance.kubevirt-ops.io/paused-for``; a check someone else paused is left alone, and the
  paused annotation goes only when our list empties and its value is still ours. Without a
  Machine for the node in this cluster (no machine API, or a Cluster API management cluster
  elsewhere), no MachineHealthCheck here can remediate the node, so none is paused.
* The node label ``remediation.medik8s.io/exclude-from-remediation=true`` is set with the other
  marks of maintenance (module_utils/nodes.py, or the node-maintenance operator with method cr).

What was paused is recorded on the node (``maintenance.kubevirt-ops.io/remediation-paused``)
before the first pause is written, so a run that was interrupted is restored by the next
``state=absent``; restoring also finds our entries by themselves, record or not.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import annotation_json, meta_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ApiError, NotFoundError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.identity import (
    PAUSED_FOR_ANNOTATION,
    REMEDIATION_PAUSE_PREFIX,
    REMEDIATION_RECORD_ANNOTATION,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.kinds import RESOURCES, api_version_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import selector_matches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.nodes import labels_of
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.node_marks import EXCLUDE_LABEL

NODE_HEALTH_CHECK = "NodeHealthCheck"
# (check kind, machine kind, label a Machine carries with the check's spec.clusterName or None)
MACHINE_HEALTH_CHECKS = (
    ("MachineHealthCheck", "Machine", None),
    ("CapiMachineHealthCheck", "CapiMachine", "cluster.x-k8s.io/cluster-name"),
)
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"

PAUSE_REQUESTS = ("spec", "pauseRequests")
PAUSED = ("metadata", "annotations", PAUSED_ANNOTATION)
PAUSED_FOR = ("metadata", "annotations", PAUSED_FOR_ANNOTATION)
NODE_RECORD = ("metadata", "annotations", REMEDIATION_RECORD_ANNOTATION)


def pause_request(node):
    """Our entry in a NodeHealthCheck's pauseRequests (and our value of the paused annotation)."""
    return REMEDIATION_PAUSE_PREFIX + node


def _api_version(kind):
    return api_version_of(kind)[1]


def entry(kind, obj, how):
    """One item of ``remediation_paused`` / ``remediation_restored``."""
    return {"kind": "MachineHealthCheck" if kind == "CapiMachineHealthCheck" else kind,
            "api_version": _api_version(kind) if kind != "Node" else "v1",
            "namespace": meta_of(obj).get("namespace"), "name": meta_of(obj).get("name"), "how": how}


def how(kind):
    return "pauseRequests" if kind == NODE_HEALTH_CHECK else "annotation"


def _paused_for(obj):
    return [n for n in annotation_json(obj, PAUSED_FOR_ANNOTATION, list) or [] if isinstance(n, str)]


def paused_by_us(kind, obj, node):
    if kind == NODE_HEALTH_CHECK:
        return pause_request(node) in (patches.value_at(obj, PAUSE_REQUESTS) or [])
    return node in _paused_for(obj)


def paused_by_others(kind, obj, node):
    """True when someone else's pause already holds the check (then we add nothing)."""
    if kind == NODE_HEALTH_CHECK:
        return False  # every pauser has an entry of its own
    annotations = meta_of(obj).get("annotations") or {}
    return PAUSED_ANNOTATION in annotations and not _paused_for(obj)


# -- what covers a node --------------------------------------------------------------------------

def _node_health_checks(client, node):
    if not client.kind_served(NODE_HEALTH_CHECK):
        return []
    return [(NODE_HEALTH_CHECK, check) for check in client.list(NODE_HEALTH_CHECK)[0]
            if selector_matches((check.get("spec") or {}).get("selector") or {}, labels_of(node))]


def _check_selects_machine(check, machine, cluster_label):
    """Whether a MachineHealthCheck selects the machine (same namespace, same cluster, matching labels)."""
    spec = check.get("spec") or {}
    labels = meta_of(machine).get("labels") or {}
    if meta_of(machine).get("namespace") != meta_of(check).get("namespace"):
        return False
    if cluster_label and labels.get(cluster_label) != spec.get("clusterName"):
        return False
    return selector_matches(spec.get("selector") or {}, labels)


def _machine_health_checks(client, name, kind, machine_kind, cluster_label):
    if not (client.kind_served(kind) and client.kind_served(machine_kind)):
        return []
    machines = [m for m in client.list(machine_kind)[0]
                if (((m.get("status") or {}).get("nodeRef") or {}).get("name")) == name]
    if not machines:
        return []
    return [(kind, check) for check in client.list(kind)[0]
            if any(_check_selects_machine(check, machine, cluster_label) for machine in machines)]


def covering(client, node):
    """[(kind, check)] of the health checks that would remediate ``node`` (served kinds only)."""
    found = _node_health_checks(client, node)
    name = meta_of(node).get("name")
    for kind, machine_kind, cluster_label in MACHINE_HEALTH_CHECKS:
        found.extend(_machine_health_checks(client, name, kind, machine_kind, cluster_label))
    return found


def ours_anywhere(client, node):
    """[(kind, check)] of every served health check that holds a pause of ours for ``node``."""
    found = []
    for kind in (NODE_HEALTH_CHECK,) + tuple(k for k, _m, _l in MACHINE_HEALTH_CHECKS):
        if not client.kind_served(kind):
            continue
        try:
            checks = client.list(kind)[0]
        except ApiError as exc:
            if exc.status != 403:
                raise
            continue  # who may not list them cannot have paused them (pausing lists them first)
        found.extend((kind, check) for check in checks if paused_by_us(kind, check, node))
    return found


def to_pause(client, node):
    """[(kind, check)] that maintenance of ``node`` would pause (covering it, not yet paused by us
    or by someone else)."""
    name = meta_of(node).get("name")
    return [(kind, check) for kind, check in covering(client, node)
            if not paused_by_us(kind, check, name) and not paused_by_others(kind, check, name)]


def label_entry(node):
    """The exclude-from-remediation label as an item of ``remediation_paused`` when maintenance adds it."""
    if labels_of(node).get(EXCLUDE_LABEL) == "true":
        return []
    return [{"kind": "Node", "api_version": "v1", "namespace": None, "name": meta_of(node).get("name"),
             "how": "label"}]


def permissions(targets):
    perms = []
    for kind, _check in targets:
        group, _version, plural = api_version_of(kind)
        namespaces = sorted(set(meta_of(c).get("namespace") for k, c in targets if k == kind and meta_of(c).get("namespace")))
        perm = Permission("patch", plural, group=group, namespaces=namespaces or None)
        if not any(p.resource == perm.resource and p.group == perm.group for p in perms):
            perms.append(perm)
    return perms


# -- the node's record -------------------------------------------------------------------------

def _record_key(kind, obj):
    return {"kind": kind, "namespace": meta_of(obj).get("namespace"), "name": meta_of(obj).get("name")}


def recorded(node):
    return [i for i in annotation_json(node, REMEDIATION_RECORD_ANNOTATION, list) or []
            if isinstance(i, dict) and i.get("kind") in RESOURCES]


def _write_record(client, node, items):
    value = json.dumps(items, sort_keys=True) if items else None

    def plan(current):
        return patches.set_field(current, NODE_RECORD, value), None

    _outcome, after = patches.update_guarded(client, "Node", node, plan)
    return after


# -- pausing and restoring -----------------------------------------------------------------------

def _pause_plan(kind, node_name):
    def plan(check):
        if paused_by_us(kind, check, node_name) or paused_by_others(kind, check, node_name):
            return [], False
        if kind == NODE_HEALTH_CHECK:
            requests = list(patches.value_at(check, PAUSE_REQUESTS) or [])
            return patches.set_field(check, PAUSE_REQUESTS, requests + [pause_request(node_name)]), True
        changes = [(PAUSED_FOR, json.dumps(_paused_for(check) + [node_name]))]
        if PAUSED_ANNOTATION not in (meta_of(check).get("annotations") or {}):
            changes.append((PAUSED, pause_request(node_name)))
        return patches.set_fields(check, changes), True
    return plan


def _restore_plan(kind, node_name):
    def plan(check):
        if not paused_by_us(kind, check, node_name):
            return [], False
        if kind == NODE_HEALTH_CHECK:
            requests = [r for r in patches.value_at(check, PAUSE_REQUESTS) or [] if r != pause_request(node_name)]
            return patches.set_field(check, PAUSE_REQUESTS, requests or None), True
        left = [n for n in _paused_for(check) if n != node_name]
        changes = [(PAUSED_FOR, json.dumps(left) if left else None)]
        value = (meta_of(check).get("annotations") or {}).get(PAUSED_ANNOTATION)
        if not left and isinstance(value, str) and value.startswith(REMEDIATION_PAUSE_PREFIX):
            changes.append((PAUSED, None))
        return patches.set_fields(check, changes), True
    return plan


def pause(client, node, targets):
    """Pause ``targets`` for ``node`` (recorded on the node first); returns (node after, entries)."""
    name = meta_of(node).get("name")
    if not targets:
        return node, []
    known = recorded(node)
    wanted = known + [_record_key(k, c) for k, c in targets if _record_key(k, c) not in known]
    if wanted != known:
        node = _write_record(client, node, wanted)
    done = []
    for kind, check in targets:
        try:
            changed, _after = patches.update_guarded(client, kind, check, _pause_plan(kind, name))
        except NotFoundError:
            continue  # deleted meanwhile: nothing left to pause
        if changed:
            done.append(entry(kind, check, how(kind)))
    return node, done


def to_restore(client, node):
    """[(kind, check)] holding a pause of ours for ``node``: the recorded ones and any found."""
    name = meta_of(node).get("name")
    found = ours_anywhere(client, node=name) if isinstance(name, str) else []
    seen = set((k, meta_of(c).get("namespace"), meta_of(c).get("name")) for k, c in found)
    for item in recorded(node):
        key = (item["kind"], item.get("namespace"), item.get("name"))
        if key in seen or not client.kind_served(item["kind"]):
            continue
        check = client.get_or_none(item["kind"], item.get("name"), item.get("namespace"))
        if check is not None and paused_by_us(item["kind"], check, name):
            found.append((item["kind"], check))
    return found


def restore(client, node, targets=None, node_deleted=False):
    """Undo our pauses for ``node`` and drop its record; returns (node after, entries restored).

    ``node_deleted``: the node is gone (decommissioned), so its record went with it."""
    name = meta_of(node).get("name")
    if targets is None:
        targets = to_restore(client, node)
    done = []
    for kind, check in targets:
        try:
            changed, _after = patches.update_guarded(client, kind, check, _restore_plan(kind, name))
        except NotFoundError:
            continue
        if changed:
            done.append(entry(kind, check, how(kind)))
    has_record = recorded(node) or REMEDIATION_RECORD_ANNOTATION in (meta_of(node).get("annotations") or {})
    if has_record and not node_deleted:
        try:
            node = _write_record(client, node, [])
        except NotFoundError:
            pass
    return node, done
