# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Before a rolling run plans: wait (bounded by ``settle_timeout``) until no live migration is
in flight, since a migration moves a VM and holds room on two nodes; the migrations waited
for, and those still in flight at the timeout, as sentences for the preflight.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import namespaced_name, object_key
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import WaitTimeoutError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline, Informer, wait_until


def _migration_text(migration):
    meta = migration["metadata"]
    vmi_name = (migration.get("spec") or {}).get("vmiName")
    return "Migration %s of VMI %s/%s" % (namespaced_name(meta["namespace"], meta["name"]), meta["namespace"], vmi_name)


def _phase(migration):
    return (migration.get("status") or {}).get("phase") or "Pending"


def _in_flight_problem(migration, waited=None):
    return "%s is in flight (phase %s)%s; wait until it ends, so that capacity and VM placement are settled before " \
           "maintenance starts." % (_migration_text(migration), _phase(migration),
                                    " after waiting %ds (settle_timeout)" % waited if waited else "")


def settle_migrations(client, timeout):
    """Wait (at most ``timeout`` seconds) until no live migration is in flight anywhere.

    A migration in flight moves a VM and holds room on two nodes, so the plan waits for it:
    above all the evacuations a killed run started, which KubeVirt goes on with after the run
    died (one migration per VMI marked for evacuation, one after another). Every migration in
    flight counts, also one that starts while waiting. Returns ``(settled, waited_seconds,
    problems)``: the migrations waited for that ended, and one sentence for each migration still
    in flight at the timeout (with ``timeout`` 0, at once, without waiting).
    """
    if not client.kind_served("VirtualMachineInstanceMigration"):
        return [], 0.0, []
    items, _rv = client.list("VirtualMachineInstanceMigration")
    waited_for = dict((object_key(m), m) for m in items if kubevirt.migration_in_flight(m))
    if not waited_for:
        return [], 0.0, []
    if timeout <= 0:
        return [], 0.0, [_in_flight_problem(m) for _k, m in sorted(waited_for.items())]
    deadline = Deadline(timeout)
    informer = Informer(client, "VirtualMachineInstanceMigration")

    def in_flight():
        found = sorted((m for m in informer.items() if kubevirt.migration_in_flight(m)), key=object_key)
        for migration in found:
            waited_for.setdefault(object_key(migration), migration)
        return found

    def describe():
        return "; ".join("%s in phase %s" % (_migration_text(m), _phase(m)) for m in in_flight()[:10])

    still = []
    try:
        wait_until(lambda: not in_flight(), [informer], timeout,
                   "the live migrations in flight to end before planning", describe_pending=describe, deadline=deadline)
    except WaitTimeoutError:
        still = in_flight()
    finally:
        informer.stop()
    waited = round(deadline.elapsed(), 1)
    still_keys = set(object_key(m) for m in still)
    settled = []
    for key, migration in sorted(waited_for.items()):
        if key in still_keys:
            continue
        final = informer.get(migration["metadata"]["name"], migration["metadata"]["namespace"])
        settled.append({"namespace": key[0], "name": key[1], "vmi": (migration.get("spec") or {}).get("vmiName"),
                        "phase": _phase(final) if final is not None else "Deleted"})
    return settled, waited, [_in_flight_problem(m, timeout) for m in still]


def settled_notice(settled, settle_seconds):
    return "Waited %ds for %d live migration%s in flight to end before planning: %s." % (
        round(settle_seconds), len(settled), "" if len(settled) == 1 else "s",
        ", ".join("%s (VMI %s, %s)" % (namespaced_name(m["namespace"], m["name"]), m["vmi"], m["phase"]) for m in settled))
