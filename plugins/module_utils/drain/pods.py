# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's pods as a drain sees them: which it evicts, which it leaves, which it may
not remove with the given options (kubectl drain's rules), and the PodDisruptionBudgets
that cover each."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.access import Permission
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import (
    parse_label_selector,
    requirements_match,
    selector_matches,
)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# A virt-launcher pod whose launcher exited (after a live migration, the source pod stays
# Succeeded) holds nothing on the node, and KubeVirt deletes it with its VMI. Deleting it
# earlier races with virt-controller: a running VMI whose cached node has no pod of its own
# is failed ("pod does not exist", pkg/virt-controller/watch/vmi/lifecycle.go), and while
# virt-controller's VMI watch lags its pod watch (an API server restart) the cached node is
# still the source - the VM would be restarted. kubectl drain deletes such pods; we leave them.
FINISHED_LAUNCHER = "finished virt-launcher pod: its VM left the node; KubeVirt deletes it with its VMI"

EVICT = "evict"
SKIP = "skip"
REFUSE = "refuse"


class DrainOptions:
    """The drain options of the DRAIN argument fragment."""

    def __init__(self, ignore_daemonsets=True, delete_emptydir_data=True, force=True, pod_selector=None,
                 grace_period=-1, disable_eviction=False):
        self.ignore_daemonsets = ignore_daemonsets
        self.delete_emptydir_data = delete_emptydir_data
        self.force = force
        self.pod_selector = pod_selector
        self.selector = parse_label_selector(pod_selector, "pod_selector")
        self.grace_period = grace_period if grace_period is not None else -1
        self.disable_eviction = disable_eviction

    def replaced(self, **changes):
        """These options with ``changes`` (keyword arguments of the constructor)."""
        values = dict(ignore_daemonsets=self.ignore_daemonsets, delete_emptydir_data=self.delete_emptydir_data,
                      force=self.force, pod_selector=self.pod_selector, grace_period=self.grace_period,
                      disable_eviction=self.disable_eviction)
        values.update(changes)
        return DrainOptions(**values)

    @classmethod
    def from_params(cls, params):
        return cls(
            ignore_daemonsets=params.get("ignore_daemonsets", True),
            delete_emptydir_data=params.get("delete_emptydir_data", True),
            force=params.get("force", True),
            pod_selector=params.get("pod_selector"),
            grace_period=params.get("grace_period", -1),
            disable_eviction=params.get("disable_eviction", False),
        )


def controller_of(pod):
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def pods_permission(namespaces, delete):
    """The right a drain needs on the pods it removes from ``namespaces``: deleting them (``delete``:
    disable_eviction, or the pods of a powered-off node), else creating their evictions."""
    if delete:
        return Permission("delete", "pods", namespaces=namespaces)
    return Permission("create", "pods", subresource="eviction", namespaces=namespaces)


def is_finished(pod):
    return (pod.get("status") or {}).get("phase") in kubevirt.FINISHED_PHASES


def is_failed(pod):
    return (pod.get("status") or {}).get("phase") == "Failed"


def has_emptydir(pod):
    return any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or [])


def classify_pod(pod, options):
    """(EVICT|SKIP|REFUSE, reason) for one pod of the node, with kubectl drain's rules.

    REFUSE means the drain cannot proceed while the pod is there, unless the named option
    is changed (kubectl fails the same way).
    """
    meta = pod.get("metadata") or {}
    if options.selector and not requirements_match(options.selector, meta.get("labels")):
        return SKIP, "not selected by pod_selector"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return SKIP, "mirror pod of a static pod (the kubelet manages it)"
    controller = controller_of(pod)
    if controller and controller.get("kind") == "DaemonSet":
        if options.ignore_daemonsets:
            return SKIP, "managed by DaemonSet %s" % controller.get("name")
        return REFUSE, "is managed by DaemonSet %s (set ignore_daemonsets=true to leave it)" % controller.get("name")
    if meta.get("deletionTimestamp"):
        return EVICT, "already terminating"
    if is_finished(pod) and kubevirt.is_launcher_pod(pod):
        return SKIP, FINISHED_LAUNCHER
    if is_finished(pod):
        return EVICT, "finished (%s)" % pod["status"]["phase"]
    if has_emptydir(pod) and not options.delete_emptydir_data:
        return REFUSE, "uses emptyDir volumes (set delete_emptydir_data=true to delete their data)"
    if controller is None:
        if options.force:
            return EVICT, "not managed by a controller: it will not be re-created"
        return REFUSE, "is not managed by a controller (set force=true to delete it for good)"
    return EVICT, "managed by %s %s" % (controller.get("kind"), controller.get("name"))


def matching_pdbs(pod, pdbs):
    """The PodDisruptionBudgets of the pod's namespace whose selector matches it."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    found = []
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if selector_matches((pdb.get("spec") or {}).get("selector"), labels):
            found.append(pdb)
    return found


def describe_pdb(pdb):
    status = pdb.get("status") or {}
    meta = pdb.get("metadata") or {}
    text = "PodDisruptionBudget %s/%s allows %s disruption%s" % (
        meta.get("namespace"), meta.get("name"), status.get("disruptionsAllowed", 0),
        "" if status.get("disruptionsAllowed") == 1 else "s")
    if "currentHealthy" in status and "desiredHealthy" in status:
        text += " (%s of %s pods healthy, %s required)" % (
            status.get("currentHealthy"), status.get("expectedPods"), status.get("desiredHealthy"))
    return text
