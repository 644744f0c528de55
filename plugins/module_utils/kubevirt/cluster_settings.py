# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the KubeVirt CR sets for the whole cluster (the default eviction strategy, the live
migration limits) and what KubeVirt answers an eviction with (its eviction webhook's words, the
reasons a VMI is not live-migratable). How KubeVirt treats one VM is kubevirt.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def cluster_eviction_strategy(kubevirt):
    """The cluster default eviction strategy in the KubeVirt CR ``kubevirt`` (None when unset/absent)."""
    return (((kubevirt or {}).get("spec") or {}).get("configuration") or {}).get("evictionStrategy") or None


def kubevirt_cr(client):
    """The KubeVirt custom resource (None when KubeVirt's CRD or CR is missing)."""
    if not client.kind_served("KubeVirt"):
        return None
    items, _rv = client.list("KubeVirt")
    return items[0] if items else None


# kubevirt pkg/virt-config/config-map.go: ParallelMigrationsPerClusterDefault,
# ParallelOutboundMigrationsPerNodeDefault.
DEFAULT_MIGRATIONS_PER_CLUSTER = 5
DEFAULT_OUTBOUND_MIGRATIONS_PER_NODE = 2


def migration_limits(kubevirt_cr):
    """KubeVirt's live-migration limits, as its controllers apply them (defaults when unset)."""
    migrations = (((kubevirt_cr or {}).get("spec") or {}).get("configuration") or {}).get("migrations") or {}
    return {
        "parallel_migrations_per_cluster": int(migrations.get("parallelMigrationsPerCluster")
                                               or DEFAULT_MIGRATIONS_PER_CLUSTER),
        "parallel_outbound_migrations_per_node": int(migrations.get("parallelOutboundMigrationsPerNode")
                                                     or DEFAULT_OUTBOUND_MIGRATIONS_PER_NODE),
    }


def migration_lanes(kubevirt_cr):
    """How many live migrations KubeVirt runs off one node at once: the lesser of its two limits."""
    limits = migration_limits(kubevirt_cr)
    return max(1, min(limits["parallel_outbound_migrations_per_node"], limits["parallel_migrations_per_cluster"]))


# What each LiveMigratable=False reason means for an operator (kubevirt.io/api core/v1
# types.go; pkg/virt-handler/vm.go calculateLiveMigrationCondition).
NOT_MIGRATABLE_HINTS = {
    "DisksNotLiveMigratable": "a disk's PVC is not ReadWriteMany",
    "InterfaceNotLiveMigratable": "its pod-network interface is neither masquerade nor a migratable binding",
    "HostDeviceNotLiveMigratable": "it uses a PCI host device or GPU",
    "HotplugNotLiveMigratable": "it has hot-plugged volumes",
    "CPUModeLiveMigratable": "its CPU model is host-model and its node reports no host CPU model",
    "VirtIOFSNotLiveMigratable": "it shares a filesystem through virtiofs",
    "SEVNotLiveMigratable": "it uses SEV memory encryption",
    "TDXNotLiveMigratable": "it uses TDX",
    "SecureExecutionNotLiveMigratable": "it uses s390x Secure Execution",
    "NoTSCFrequencyNotLiveMigratable": "it needs a TSC frequency its node does not report",
    "HypervPassthroughNotLiveMigratable": "it uses Hyper-V passthrough",
    "PersistentReservationNotLiveMigratable": "a disk uses SCSI persistent reservation",
}


# virt-api's eviction webhook (pkg/virt-api/webhooks/validating-webhook/admitters/
# pod-eviction-admitter.go) answers 429 itself, with these words, once it has marked the VMI
# for evacuation; before KubeVirt 1.6 the VMI's own PodDisruptionBudget answered instead.
EVACUATION_MESSAGES = ("Eviction triggered evacuation of VMI", "Evacuation in progress", "disruption budget")
WEBHOOK_NAME = "virt-launcher-eviction-interceptor.kubevirt.io"
VIRT_API_DOWN = "virt-api is not answering, so KubeVirt's eviction webhook refuses every eviction (%s)"


def evacuation_under_way(message):
    """True when an eviction was refused because KubeVirt is evacuating the VMI."""
    return any(words in (message or "") for words in EVACUATION_MESSAGES)


def webhook_unreachable(status, message):
    """True for the apiserver's answer while KubeVirt's eviction webhook cannot be called
    (failurePolicy Fail: "Internal error occurred: failed calling webhook ...")."""
    text = message or ""
    return status in (500, 502, 503, 504) and "failed calling webhook" in text and WEBHOOK_NAME in text


def describe_not_migratable(reason, message=None):
    """'DisksNotLiveMigratable: a disk's PVC is not ReadWriteMany' (plus KubeVirt's own words)."""
    if not reason and not message:
        return "its LiveMigratable condition is not reported yet"
    text = reason or "not live-migratable"
    detail = message or NOT_MIGRATABLE_HINTS.get(reason)
    if detail:
        text += ": " + detail.rstrip(".")
    return text
