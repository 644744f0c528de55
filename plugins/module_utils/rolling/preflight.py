# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling maintenance: the preflight over every selected node (maintenance_preflight).

The preflight first waits (bounded by ``settle_timeout``, migration_settle.py) until no live
migration is in flight, since a migration moves a VM and holds room on two nodes; then it
reads the cluster once (``snapshot.Snapshot``) and asks the same ``compute_plan`` that check
mode and node_maintenance_info use, for every selected node, before anything changes.
Everything that would stop the run is collected and reported at once: nodes that do not exist
or are not Ready, nodes already in someone else's maintenance, migrations still in flight at
the timeout, VMs that would block, no room elsewhere, budgets that never allow a disruption,
the machines to service (``machines``: each read through its road as node_machine reads it, nothing
changed), and the cluster lock when another run holds it.

What the run keeps track of (resumed nodes, their order, the VMs running) is run_state.py's;
the check after each node (maintenance_verify) is verification.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import namespaced_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling import batches as batches_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import cluster_settings as kubevirt_settings
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migration_limits as limits_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.coordination import lock as lock_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as nodes_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import plan as plan_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot as snapshot_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import (
    BlockedError,
    InvalidInputError,
    MaintenanceError,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.machine import road
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.servicing import runner as servicing
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.migration_settle import (
    settle_migrations,
    settled_notice,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.rolling.run_state import (
    resumed_maintenances,
    run_order,
    running_vms,
)

ORDERS = ("given", "fewest_vms_first")
# How long the preflight waits, by default, for live migrations in flight to end.
DEFAULT_SETTLE_TIMEOUT = 300
# Where a run of the rolling_maintenance role leaves its mark: the reason of the maintenance.
DEFAULT_RUN_MARK = "rolling_maintenance"


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


def _lock_problem(client, lock):
    state = lock_mod.held_by_another(client, lock)
    if state is None:
        return None
    return "Another maintenance run is in progress: %s; %s" % (
        lock_mod.held_text(lock, state), lock_mod.get_past(lock.get("namespace") or lock_mod.DEFAULT_LOCK_NAMESPACE, lock["name"]))


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
                                namespaced_name(vm["namespace"], vm["name"]), name, vm.get("run_strategy") or "none"))
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


def _plan_nodes(snapshot, batches, plan_params, resumed, problems, warnings):
    """The entry of each node, planned in the run's order and cumulatively.

    What leaves a node runs where its plan put it when the next node is planned, and the nodes
    done are preferred as targets (as the pending_nodes taint makes the scheduler do). The other
    nodes of a node's batch are out at the same time: they take nothing of what it sends away.
    """
    policy, options, prefer_done = plan_params
    entries = []
    done = set()
    for batch in batches:
        for name in batch:
            node = snapshot.node(name)
            peers = snapshot.cordon_for_plan([n for n in batch if n != name])
            # One plan per node (on 1,000 nodes each costs a few milliseconds).
            plan = plan_mod.compute_plan(snapshot, name, options, prefer=done if prefer_done else None)
            summary = plan_mod.node_summary(snapshot, name, options, plan=plan)
            snapshot.restore_nodes(peers)
            resume = _maintenance_check(name, node, resumed, problems, warnings)
            for blocker in plan.fatal_blockers(policy):
                if resume and blocker.kind == plan_mod.NODE:
                    continue  # a node left in maintenance may be down for its repair; the run waits for Ready
                problems.append(_in_batch(blocker.text, batch) if len(batch) > 1 else blocker.text)
            expected_stopped = _expected_stopped(name, summary["plan"]["vms"], policy, warnings)
            entries.append(_node_entry(name, node, summary, resume, expected_stopped))
            snapshot.apply_plan(plan)
        done.update(batch)
    return entries


def _in_batch(text, batch):
    return "%s (with %s in maintenance at the same time)" % (text.rstrip("."), ", ".join(batch)) + "."


def _parallel_params(params):
    """(max_parallel, failure_domain) of the run, checked."""
    max_parallel = params.get("max_parallel")
    max_parallel = 1 if max_parallel is None else max_parallel
    if max_parallel < 1:
        raise InvalidInputError("max_parallel must be at least 1, got %d." % max_parallel)
    return max_parallel, params.get("failure_domain") or None


def _others_notice(snapshot, selected):
    others = sorted(n for n, node in snapshot.nodes.items()
                    if n not in selected and (nodes_mod.is_cordoned(node) or node_marks.marked_for_maintenance(node)))
    if not others:
        return None
    return "Nodes outside this run are cordoned or in maintenance (%s); capacity was checked without them." \
        % ", ".join(others)


# The machines of a run are read side by side (each through its own road: a BMC, a BareMetalHost), at most this
# many at once: a run over many nodes waits about as long as for its slowest BMC, not for the sum of them.
MACHINE_READERS = 8


def _check_machines(client, snapshot, entries, machines, problems):
    """Every selected node's machine read and checked as node_machine would before servicing it (servicing.read:
    its road answers and takes the credentials, every firmware component and BIOS attribute asked exists and the
    road would take the changes), nothing changed, the machines side by side; each entry gains ``machine``
    (node_machine's summary, or None when it cannot be serviced) and each problem is one of ``problems``,
    ``<node>: <sentence>``, in the order of the entries."""
    firmware = servicing.check_firmware(machines.get("firmware"))
    bios = dict(machines.get("bios") or {})
    roads = dict((entry["name"], entry) for entry in machines.get("roads") or [])

    def read(entry):
        name = entry["name"]
        params = dict(roads.get(name) or {}, name=name)
        try:
            reading = servicing.read(client, name, snapshot.nodes[name], params, firmware, bios,
                                     road.check_options(params))
        except MaintenanceError as exc:
            return None, "%s: %s" % (name, exc.msg)
        return dict(reading.summary, changes=reading.changes(machines.get("reboot"))), None

    for entry in entries:
        entry["machine"] = None
    todo = [entry for entry in entries if entry["name"] in snapshot.nodes]
    if not todo:
        return
    with ThreadPoolExecutor(max_workers=min(MACHINE_READERS, len(todo))) as pool:
        read_all = list(pool.map(read, todo))
    for entry, (summary, problem) in zip(todo, read_all):
        entry["machine"] = summary
        if problem:
            problems.append(problem)


def _limits_left_raised(client):
    """Whether a stopped run left raised live-migration limits recorded where the cluster keeps them (the
    migration_limits module puts them back, state=restored); None when that cannot be read (no right to)."""
    try:
        home = limits_mod.find_home(client)
    except InvalidInputError:  # neither a HyperConverged nor a KubeVirt resource: no limits at all
        return False
    except MaintenanceError:
        return None
    return limits_mod.record_of(home.obj) is not None


def _preflight_blocked(problems, result):
    count = len(problems)
    return BlockedError(
        "Preflight found %d problem%s, so nothing was changed: %s" % (
            count, "" if count == 1 else "s", " ".join("(%d) %s" % (i + 1, p) for i, p in enumerate(problems))),
        blockers=problems, nodes=result["nodes"], details=result["details"])


def preflight(client, params):
    """Check every selected node before any change; returns the ordered plan of the run."""
    names, label_selector, order = _check_selection(params)
    max_parallel, failure_domain = _parallel_params(params)
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
        warnings.append(settled_notice(settled, settle_seconds))
    # First which nodes an earlier run left in maintenance, then the others after them.
    resumed = resumed_maintenances(snapshot, selected, run_mark)
    ordered = run_order(snapshot, selected, resumed, order)
    plan_params = (policy, options, params.get("prefer_done_nodes", True))
    domains, domain_problems = batches_mod.failure_domains(ordered, snapshot.nodes, failure_domain)
    problems.extend(domain_problems)
    batches = batches_mod.plan_batches(ordered, domains, max_parallel)
    entries = _plan_nodes(snapshot, batches, plan_params, resumed, problems, warnings)
    for entry in entries:
        entry["failure_domain"] = domains.get(entry["name"]) if failure_domain else None
    limits = kubevirt_settings.migration_limits(snapshot.kubevirt_cr)
    crowded = batches_mod.limits_notice(batches, limits, dict((e["name"], e["vms_migrating"]) for e in entries))
    if crowded:
        warnings.append(crowded)
    problems.extend(migration_problems)
    if params.get("machines"):
        _check_machines(client, snapshot, entries, params["machines"], problems)
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
        "batches": batches,
        "max_parallel": max_parallel,
        "failure_domain": failure_domain,
        "migration_limits": limits,
        "migration_limits_left_raised": _limits_left_raised(client),
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
