# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling maintenance: the preflight over every selected node, and the check after each node.

The preflight first waits (bounded by ``settle_timeout``) until no live migration is in
flight, since a migration moves a VM and holds room on two nodes; then it reads the cluster
once (``snapshot.Snapshot``) and asks the same ``compute_plan`` that check mode and
node_maintenance_info use, for every selected node, before anything changes. Everything that
would stop the run is collected and reported at once: nodes that do not exist or are not
Ready, nodes already in someone else's maintenance, migrations still in flight at the
timeout, VMs that would block, no room elsewhere, budgets that never allow a disruption, and
the cluster lock when another run holds it.

The check after a node waits (watching, never polling) until the node is Ready (and
schedulable once it left maintenance) and every VM that ran before the run runs again, and
reports the live migrations that left the node with their timestamps, for the report.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import fates, kubevirt
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import lock as lock_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import plan as plan_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import snapshot as snapshot_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.errors import (
    BlockedError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.timeutil import parse_time_utc
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.waiter import (
    Deadline,
    Informer,
    object_key,
    wait_until,
)

ORDERS = ("given", "fewest_vms_first")
# How long the preflight waits, by default, for live migrations in flight to end.
DEFAULT_SETTLE_TIMEOUT = 300
# Where a run of the rolling_maintenance role leaves its mark: the reason of the maintenance.
DEFAULT_RUN_MARK = "rolling_maintenance"


def _key(namespace, name):
    return "%s/%s" % (namespace, name)


def vm_of(vmi):
    """(namespace, name, owned_by_vm) of the VM behind a VMI."""
    meta = vmi.get("metadata") or {}
    owner = kubevirt.vm_name_of(vmi)
    return meta.get("namespace"), owner or meta.get("name"), owner is not None


def running_vms(vmis):
    """Every VM (or stand-alone VMI) whose VMI is Running, with its node."""
    result = []
    for vmi in vmis:
        if not kubevirt.vmi_is_running(vmi):
            continue
        namespace, name, owned = vm_of(vmi)
        result.append({"namespace": namespace, "name": name, "node": kubevirt.vmi_node(vmi), "vm": owned})
    return sorted(result, key=lambda v: (v["namespace"], v["name"]))


def maintenance_reason(node, crs):
    """The reason recorded for a node's current maintenance (ours or a NodeMaintenance CR's)."""
    record = nodes_mod.maintenance_record(node) or {}
    if record.get("reason"):
        return record["reason"]
    for _kind, cr in crs:
        reason = (cr.get("spec") or {}).get("reason")
        if reason:
            return reason
    return None


def back_in_service(node):
    """The node as it will be once its maintenance ends: uncordoned, without the maintenance taints.

    The maintenance record stays, so the node's own plan still knows the maintenance is ours.
    """
    view = copy.deepcopy(node)
    spec = view.setdefault("spec", {})
    spec.pop("unschedulable", None)
    keys = set(t["key"] for t in nodes_mod.MAINTENANCE_TAINTS)
    spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") not in keys]
    return view


def select_nodes(client, snapshot, names=None, label_selector=None):
    """(selected names in the given order, problems) for a list or a label selector."""
    problems = []
    if names:
        seen = []
        for name in names:
            if name in seen:
                continue
            seen.append(name)
            if name not in snapshot.nodes:
                problems.append("Node %s does not exist." % name)
        return [n for n in seen if n in snapshot.nodes], problems
    items, _rv = client.list("Node", label_selector=label_selector)
    selected = sorted(n["metadata"]["name"] for n in items)
    if not selected:
        problems.append("No node matches the label selector '%s'." % label_selector)
    return selected, problems


def _migration_text(migration):
    meta = migration["metadata"]
    vmi_name = (migration.get("spec") or {}).get("vmiName")
    return "Migration %s of VMI %s/%s" % (_key(meta["namespace"], meta["name"]), meta["namespace"], vmi_name)


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


def _lock_problem(client, lock):
    state = lock_mod.held_by_another(client, lock)
    if state is None:
        return None
    return "Another maintenance run is in progress: %s." % lock_mod.held_text(lock, state)


def _check_selection(params):
    """(nodes, label_selector, order) of the run; refuses a selection that is missing or ambiguous."""
    names, label_selector = params.get("nodes"), params.get("label_selector")
    if not names and not label_selector:
        raise InvalidInputError("Give the nodes to maintain: a list in 'nodes' or a 'label_selector'.")
    if names and label_selector:
        raise InvalidInputError("Give either 'nodes' or 'label_selector', not both.")
    order = params.get("order") or "given"
    if order not in ORDERS:
        raise InvalidInputError("Order '%s' is not one of %s." % (order, ", ".join(ORDERS)))
    return names, label_selector, order


def _settled_notice(settled, settle_seconds):
    return "Waited %ds for %d live migration%s in flight to end before planning: %s." % (
        round(settle_seconds), len(settled), "" if len(settled) == 1 else "s",
        ", ".join("%s (VMI %s, %s)" % (_key(m["namespace"], m["name"]), m["vmi"], m["phase"]) for m in settled))


def _resumed_maintenances(snapshot, selected, run_mark):
    """{node: (ours, reason, phase)} of the selected nodes an earlier run left in maintenance.

    This run finishes them before any other node, so the plans of the other nodes count the
    ones left by a run of ours as back in service.
    """
    resumed = {}
    for name in selected:
        in_maintenance, phase = plan_mod.maintenance_state(snapshot, name)
        if in_maintenance:
            reason = maintenance_reason(snapshot.node(name), snapshot.maintenances_of(name)) or ""
            resumed[name] = (reason.startswith(run_mark), reason, phase)
    for name, (ours, _reason, _phase) in resumed.items():
        if ours:
            snapshot.replace_node(name, back_in_service(snapshot.node(name)))
    return resumed


def _run_order(snapshot, selected, resumed, order):
    """The nodes in the order the run takes them: the resumed nodes of ours first."""
    position = dict((name, i) for i, name in enumerate(selected))

    def order_key(name):
        ours_resumed = name in resumed and resumed[name][0]
        vms = len([v for v in snapshot.vmis_by_node.get(name, []) if kubevirt.vmi_is_active(v)])
        return (not ours_resumed, vms if order == "fewest_vms_first" else 0, position[name])

    return sorted(selected, key=order_key)


def _maintenance_check(name, node, resumed, problems, warnings):
    """Whether the run resumes the node; a node in someone else's maintenance or cordon is a problem."""
    if name not in resumed:
        if nodes_mod.is_cordoned(node):
            problems.append("Node %s is cordoned by someone else; uncordon it or leave it out." % name)
        return False
    ours, reason, phase = resumed[name]
    if ours:
        warnings.append("Node %s was left in maintenance by an earlier run (%s); this run finishes it first."
                        % (name, reason))
        return True
    problems.append("Node %s is already in maintenance (phase %s%s), not by a rolling maintenance run; "
                    "end that maintenance or leave the node out." % (
                        name, phase or "unknown", ", reason: %s" % reason if reason else ""))
    return False


def _expected_stopped(name, vms, policy, warnings):
    """The VMs of the node that stay stopped after they leave it (with a notice for each)."""
    expected_stopped = []
    for vm in vms:
        if fates.under_policy(vm["outcome"], vm.get("run_strategy"), policy) in fates.STOPPED_OUTCOMES:
            expected_stopped.append({"namespace": vm["namespace"], "name": vm["name"], "node": name,
                                     "run_strategy": vm.get("run_strategy")})
            warnings.append("VM %s on node %s will stay stopped after it leaves the node (run strategy %s); "
                            "start it again when you want it back." % (
                                _key(vm["namespace"], vm["name"]), name, vm.get("run_strategy") or "none"))
    return expected_stopped


def _node_entry(name, node, summary, resume, expected_stopped):
    vms = summary["plan"]["vms"]
    return {
        "name": name,
        "ready": summary["ready"],
        "schedulable": summary["schedulable"] and not resume,
        "in_maintenance": summary["in_maintenance"] or resume,
        "resume": resume,
        "control_plane": summary["control_plane"],
        "simulated": (node["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake",
        "internal_ip": _internal_ip(node),
        "pods": len(summary["plan"]["evict"]),
        "vms": len(vms),
        "vms_migrating": sum(1 for vm in vms if vm["outcome"] == fates.MIGRATE),
        "vms_shut_down": sum(1 for vm in vms if vm["outcome"] != fates.MIGRATE),
        "expected_stopped": expected_stopped,
        "plan": summary["plan"],
    }


def _plan_nodes(snapshot, ordered, plan_params, resumed, problems, warnings):
    """The entry of each node, planned in the run's order and cumulatively.

    What leaves a node runs where its plan put it when the next node is planned, and the nodes
    done are preferred as targets (as the pending_nodes taint makes the scheduler do).
    """
    policy, options, prefer_done = plan_params
    entries = []
    done = set()
    for name in ordered:
        node = snapshot.node(name)
        # One plan per node (on 1,000 nodes each costs a few milliseconds).
        plan = plan_mod.compute_plan(snapshot, name, options, prefer=done if prefer_done else None)
        summary = plan_mod.node_summary(snapshot, name, options, plan=plan)
        resume = _maintenance_check(name, node, resumed, problems, warnings)
        for blocker in plan.fatal_blockers(policy):
            if resume and blocker.kind == plan_mod.NODE:
                continue  # a node left in maintenance may be down for its repair; the run waits for Ready
            problems.append(blocker.text)
        expected_stopped = _expected_stopped(name, summary["plan"]["vms"], policy, warnings)
        entries.append(_node_entry(name, node, summary, resume, expected_stopped))
        snapshot.apply_plan(plan)
        done.add(name)
    return entries


def _others_notice(snapshot, selected):
    others = sorted(n for n, node in snapshot.nodes.items()
                    if n not in selected and (nodes_mod.is_cordoned(node) or nodes_mod.marked_for_maintenance(node)))
    if not others:
        return None
    return "Nodes outside this run are cordoned or in maintenance (%s); capacity was checked without them." \
        % ", ".join(others)


def _preflight_blocked(problems, result):
    count = len(problems)
    return BlockedError(
        "Preflight found %d problem%s, so nothing was changed: %s" % (
            count, "" if count == 1 else "s", " ".join("(%d) %s" % (i + 1, p) for i, p in enumerate(problems))),
        blockers=problems, nodes=result["nodes"], details=result["details"])


def preflight(client, params):
    """Check every selected node before any change; returns the ordered plan of the run."""
    names, label_selector, order = _check_selection(params)
    policy = params.get("non_migratable") or "fail"
    options = plan_mod.PlanOptions.from_params(params)
    run_mark = params.get("run_mark") or DEFAULT_RUN_MARK

    # Settled first, then read: the plan must see where the migrating VMs end up.
    settle_timeout = params.get("settle_timeout")
    settled, settle_seconds, migration_problems = settle_migrations(
        client, DEFAULT_SETTLE_TIMEOUT if settle_timeout is None else settle_timeout)
    snapshot = snapshot_mod.Snapshot.load(client)
    selected, problems = select_nodes(client, snapshot, names, label_selector)
    warnings = []
    if settled:
        warnings.append(_settled_notice(settled, settle_seconds))
    # First which nodes an earlier run left in maintenance, then the others after them.
    resumed = _resumed_maintenances(snapshot, selected, run_mark)
    ordered = _run_order(snapshot, selected, resumed, order)
    plan_params = (policy, options, params.get("prefer_done_nodes", True))
    entries = _plan_nodes(snapshot, ordered, plan_params, resumed, problems, warnings)
    problems.extend(migration_problems)
    lock_problem = _lock_problem(client, params.get("lock"))
    if lock_problem:
        problems.append(lock_problem)
    others = _others_notice(snapshot, selected)
    if others:
        warnings.append(others)

    vms_running = running_vms(snapshot.vmis) if snapshot.kubevirt else []
    result = {
        "changed": False,
        "nodes": [e["name"] for e in entries],
        "details": entries,
        "resumed": [e["name"] for e in entries if e["resume"]],
        "problems": problems,
        "notices": warnings,
        "running_vms": vms_running,
        "expected_stopped": [vm for e in entries for vm in e["expected_stopped"]],
        "migrations_settled": settled,
        "settle_seconds": settle_seconds,
        "kubevirt": snapshot.kubevirt,
        "selection": ("nodes %s" % ", ".join(names)) if names else ("label selector %s" % label_selector),
    }
    if problems and params.get("fail_on_problems", True):
        raise _preflight_blocked(problems, result)
    return result


def _internal_ip(node):
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return None


# -- after a node ----------------------------------------------------------------------------


def _vm_key(item):
    if isinstance(item, str):
        return item
    return _key(item.get("namespace"), item.get("name"))


def _running_keys(vmis, ready=True):
    """{VM key: node} of the VMIs in service (Running and Ready); with ``ready=False``, of those
    in phase Running whose Ready condition is not True."""
    keys = {}
    for vmi in vmis:
        if (kubevirt.vmi_in_service(vmi) if ready else kubevirt.vmi_running_not_ready(vmi)):
            namespace, name, _owned = vm_of(vmi)
            keys[_key(namespace, name)] = kubevirt.vmi_node(vmi)
    return keys


def migrations_from(vmis, node, since=None):
    """Completed live migrations out of ``node`` (after ``since``) from the VMIs' migrationState."""
    result = []
    for vmi in vmis:
        state = (vmi.get("status") or {}).get("migrationState") or {}
        if state.get("sourceNode") != node or not state.get("completed") or state.get("failed"):
            continue
        start = parse_time_utc(state.get("startTimestamp"))
        if since is not None and start is not None and start < since:
            continue
        namespace, name, _owned = vm_of(vmi)
        result.append({"namespace": namespace, "name": name, "source": node, "target": state.get("targetNode"),
                       "start": state.get("startTimestamp"), "end": state.get("endTimestamp")})
    return sorted(result, key=lambda m: (m["end"] or "", m["namespace"], m["name"]))


class _Verification(object):
    """What verify waits for, watched through informers: the node and the VMs that must run again."""

    def __init__(self, client, params):
        self.name = params.get("name")
        self.want_schedulable = params.get("schedulable", True)
        self.expected = [_vm_key(v) for v in params.get("running_vms") or []]
        self.may_stop = set(_vm_key(v) for v in params.get("expected_stopped") or [])
        self.timeout = params.get("timeout") or 600
        self.since = parse_time_utc(params.get("migrations_since"))
        if self.since is not None:
            # migrationState timestamps have whole seconds; do not lose a migration that began in the same second.
            self.since -= datetime.timedelta(seconds=1)
        if not self.name and not self.expected:
            raise InvalidInputError("Give a node to wait for ('name') or VMs that must run ('running_vms').")
        self.owned = dict((_vm_key(v), bool(v.get("vm", True)))
                          for v in params.get("running_vms") or [] if isinstance(v, dict))
        self.informers = []
        self.node_informer = None
        self.vmi_informer = None
        self.vm_informer = None
        if self.name:
            nodes_mod.get_node(client, self.name)
            self.node_informer = self._watch(Informer(client, "Node", field_selector="metadata.name=%s" % self.name))
        if self.expected or self.wants_migrations():
            self._watch_vms(client)

    def _watch(self, informer):
        self.informers.append(informer)
        return informer

    def _watch_vms(self, client):
        if not client.kind_served("VirtualMachineInstance"):
            if self.expected:
                raise InvalidInputError("VMs were expected to run, but KubeVirt is not installed on this cluster.")
            return
        self.vmi_informer = self._watch(Informer(client, "VirtualMachineInstance"))
        if self.expected:
            # A VM its owner deleted meanwhile was not lost: it is not waited for.
            self.vm_informer = self._watch(Informer(client, "VirtualMachine"))

    def wants_migrations(self):
        return self.since is not None and bool(self.name)

    def running(self, ready=True):
        return _running_keys(self.vmi_informer.items(), ready=ready) if self.vmi_informer else {}

    def deleted(self):
        """Expected VMs whose VirtualMachine no longer exists (or is being deleted)."""
        if self.vm_informer is None:
            return []
        gone = []
        for key in self.expected:
            if not self.owned.get(key, True):
                continue  # a stand-alone VMI that stopped is lost: nothing would start it again
            namespace, vm_name = key.split("/", 1)
            vm = self.vm_informer.get(vm_name, namespace)
            if vm is None or (vm.get("metadata") or {}).get("deletionTimestamp"):
                gone.append(key)
        return gone

    def node_ok(self):
        if self.node_informer is None:
            return True
        node = self.node_informer.get(self.name)
        if node is None or not nodes_mod.is_ready(node):
            return False
        if self.want_schedulable and (nodes_mod.is_cordoned(node) or nodes_mod.marked_for_maintenance(node)):
            return False
        return True

    def missing(self):
        running = self.running()
        gone = set(self.deleted())
        return [k for k in self.expected if k not in running and k not in self.may_stop and k not in gone]

    def check(self):
        return self.node_ok() and not self.missing()

    def _node_pending(self):
        """What the node still lacks, as a list of at most one sentence."""
        if self.node_informer is None:
            return []
        node = self.node_informer.get(self.name)
        if node is None:
            return ["node %s is gone" % self.name]
        if not nodes_mod.is_ready(node):
            return ["node %s is not Ready (%s)" % (self.name, nodes_mod.not_ready_reason(node))]
        if not self.node_ok():
            return ["node %s is still cordoned or marked for maintenance" % self.name]
        return []

    def pending(self):
        parts = self._node_pending()
        lost = self.missing()
        if lost:
            # A VMI in phase Running whose Ready condition is not True is not back in service yet.
            unready = self.running(ready=False)
            parts.append("%d VM%s that ran before %s not running: %s" % (
                len(lost), "" if len(lost) == 1 else "s", "is" if len(lost) == 1 else "are",
                ", ".join(k + (" (Running on node %s, not Ready)" % unready[k] if k in unready else "")
                          for k in lost[:10])))
        return "; ".join(parts)

    def what(self):
        if not self.name:
            return "every VM that ran before to run"
        what = "node %s to be Ready%s" % (self.name, " and schedulable" if self.want_schedulable else "")
        if self.expected:
            what += " and every VM that ran before to run"
        return what

    def wait(self):
        try:
            wait_until(self.check, self.informers, self.timeout, self.what(), describe_pending=self.pending)
        except WaitTimeoutError as exc:
            lost = self.missing() if self.vmi_informer else []
            raise BlockedError(exc.msg, node=self.name, not_running=lost) from exc
        finally:
            for informer in self.informers:
                informer.stop()

    def _node_state(self):
        node = self.node_informer.get(self.name)
        return {"name": self.name, "ready": nodes_mod.is_ready(node), "schedulable": not nodes_mod.is_cordoned(node),
                "in_maintenance": nodes_mod.marked_for_maintenance(node)}

    def result(self):
        name, expected = self.name, self.expected
        vmis = self.vmi_informer.items() if self.vmi_informer else []
        running = _running_keys(vmis)
        return {
            "changed": False,
            "node": self._node_state() if name else None,
            "vms": {
                "expected": len(expected),
                "running": sum(1 for k in expected if k in running),
                "stopped_as_expected": sorted(k for k in expected if k in self.may_stop and k not in running),
                "deleted": sorted(k for k in self.deleted() if k not in running),
                "not_running": [],
                "on_node": sorted(k for k, where in running.items() if name and where == name),
                "where": dict((k, running[k]) for k in expected if k in running),
            },
            "migrations": migrations_from(vmis, name, self.since) if self.wants_migrations() else [],
        }


def verify(client, params):
    """Wait until the node (when named) is Ready and schedulable and every VM that ran runs again."""
    verification = _Verification(client, params)
    verification.wait()
    return verification.result()
