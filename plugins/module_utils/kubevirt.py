# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How KubeVirt treats a VM: effective eviction strategy, live-migratability, run
strategy, and what an eviction of its launcher pod will do (the behaviour page's table).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

EVICTION_STRATEGIES = ("LiveMigrate", "LiveMigrateIfPossible", "None", "External")
RUN_STRATEGIES = ("Always", "RerunOnFailure", "Manual", "Halted", "Once")
LAUNCHER_LABEL = "kubevirt.io=virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
NODE_NAME_LABEL = "kubevirt.io/nodeName"

# Predicted results of draining a VMI's node (node_maintenance_info plan 'outcome').
MIGRATE = "migrate"
SHUTDOWN = "shutdown"
RESTART_ELSEWHERE = "restart_elsewhere"
STAY_STOPPED = "stay_stopped"
BLOCK = "block"


def cluster_eviction_strategy(client):
    """The cluster default eviction strategy from the KubeVirt CR (None when unset/absent)."""
    if not client.kind_served("KubeVirt"):
        return None
    items, _rv = client.list("KubeVirt")
    for item in items:
        value = ((item.get("spec") or {}).get("configuration") or {}).get("evictionStrategy")
        if value:
            return value
    return None


def effective_eviction_strategy(vmi_spec, cluster_default):
    """The VMI's own ``spec.evictionStrategy``, else the cluster default, else None."""
    return (vmi_spec or {}).get("evictionStrategy") or cluster_default or None


def live_migratable(vmi):
    """(True/False/None, reason, message) from the VMI's LiveMigratable condition."""
    for cond in (vmi.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "LiveMigratable":
            ok = cond.get("status") == "True"
            return ok, (None if ok else cond.get("reason")), cond.get("message")
    return None, None, None


def vm_run_strategy(vm):
    """The VM's run strategy, translating the deprecated ``spec.running``."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if "running" in spec:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def eviction_outcome(strategy, migratable, run_strategy):
    """What draining the node does to a running VMI, following the eviction table.

    ``migratable`` is the LiveMigratable condition (None = unknown, treated as not migratable
    for LiveMigrateIfPossible, as KubeVirt keeps no PDB without the condition).
    """
    if strategy in ("LiveMigrate", "External"):
        if strategy == "External" or migratable:
            return MIGRATE
        return BLOCK
    if strategy == "LiveMigrateIfPossible" and migratable:
        return MIGRATE
    # LiveMigrateIfPossible without migration, None or unset: the eviction shuts the VMI down.
    if run_strategy in ("Always", "RerunOnFailure"):
        return RESTART_ELSEWHERE
    return STAY_STOPPED
