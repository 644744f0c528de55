# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A drain and the PodDisruptionBudgets: which blocked pods to ask again, and when.

A budget watched by the drain tells when it allows a disruption again; exactly that many
pods it covers are asked at once, and an allowance seen at one resourceVersion of a budget
is handed out once (``Allowances``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import describe_pdb, matching_pdbs


class Allowances:
    """Disruptions each budget allows that the drain has not handed out yet."""

    def __init__(self):
        self._spent = {}  # PDB key -> (resourceVersion, disruptions handed out at that version)

    def available(self, key, budget):
        """Disruptions the budget allows that this drain has not handed out yet."""
        version = budget["metadata"].get("resourceVersion")
        allowed = (budget.get("status") or {}).get("disruptionsAllowed") or 0
        spent_version, spent = self._spent.get(key, (None, 0))
        return allowed - (spent if spent_version == version else 0)

    def take(self, key, budget):
        # The watch shows a budget before our own evictions reduced it: an allowance seen at
        # one resourceVersion is handed out once.
        version = budget["metadata"].get("resourceVersion")
        spent_version, spent = self._spent.get(key, (None, 0))
        self._spent[key] = (version, (spent if spent_version == version else 0) + 1)


def watched_budgets(target, pdbs):
    """(key, budget) of the budgets (but a VMI's own) that refused the pod's last attempt, as watched now."""
    found = []
    for key in target.pdb_versions:
        namespace, name = key.split("/", 1)
        budget = pdbs.get(name, namespace) if pdbs is not None else None
        if budget is not None and not kubevirt.is_vmi_pdb(budget):
            found.append((key, budget))
    return found


def due_targets(targets, pdbs, allowances, now, limit, recheck):
    """Up to ``limit`` pods to ask now: new ones, those whose budget allows a disruption
    again (as many as it allows), and those whose backoff ran out while no watched budget
    says no. An allowance is only taken for a pod that is asked. A pod whose budget allows
    nothing yet is looked at again after ``recheck`` seconds."""
    due = [t for t in targets if t.state == "todo"][:limit]
    for target in targets:
        if len(due) >= limit:
            return due
        if target.state != "blocked" or target.next_try > now:
            continue
        budgets = watched_budgets(target, pdbs)
        if any(allowances.available(key, budget) < 1 for key, budget in budgets):
            # The watch tells when the budget changes; asking now would only collect a 429.
            target.next_try = now + recheck
            continue
        for key, budget in budgets:
            allowances.take(key, budget)
        due.append(target)
    if pdbs is None:
        return due
    for budget in pdbs.items():
        meta = budget["metadata"]
        key = "%s/%s" % (meta.get("namespace"), meta.get("name"))
        room = allowances.available(key, budget)
        if room < 1:
            continue
        waiting = [t for t in targets
                   if t.state == "blocked" and t not in due and key in t.pdb_versions
                   and t.pdb_versions[key] != meta.get("resourceVersion")]
        waiting.sort(key=lambda t: t.next_try)
        for target in waiting[:min(room, limit - len(due))]:
            allowances.take(key, budget)
            due.append(target)
    return due


def hold_back(targets, pdbs, allowances, recheck):
    """Ask first only for as many pods as each budget allows now; the others wait for the
    budget to change (or for ``recheck`` seconds) instead of collecting a 429 each.

    A VMI's own budget is left out: its launcher pod must be evicted once for KubeVirt's
    webhook to start the migration, although that budget always answers 429.
    """
    for target in targets:
        if target.wait_only:
            continue
        found = [p for p in matching_pdbs(target.pod, pdbs.items()) if not kubevirt.is_vmi_pdb(p)]
        if len(found) != 1:
            continue
        meta = found[0]["metadata"]
        key = "%s/%s" % (meta.get("namespace"), meta.get("name"))
        if allowances.available(key, found[0]) > 0:
            allowances.take(key, found[0])
            continue
        target.state = "blocked"
        target.reason = "%s (not asked yet)" % describe_pdb(found[0])
        target.next_try = time.monotonic() + recheck
        target.pdb_versions = {key: meta.get("resourceVersion")}
