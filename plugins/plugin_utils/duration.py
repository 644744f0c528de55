# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long the next node of a rolling run will take, predicted from the nodes the run has done,
and whether it can finish before the maintenance window closes.

A node's time is its drain plus the rest (node tasks, reboot, Ready, leaving maintenance,
verification). A live migration copies the guest's memory, so the drain of a node is predicted
from the memory of the VMs that migrate off it at the rate this run's drains achieved (seconds
per byte of guest memory moved); a node whose VMs do not migrate, or a run whose drains moved
none, takes the run's mean drain. The rest does not depend on the node's VMs: the run's mean.
Before any node is done there is nothing to predict from, and the first node always starts
(inside its window).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import fates
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import format_memory
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import parse_time_utc, utc_now


def migrating_memory(detail):
    """Bytes of guest memory the preflight plans to live-migrate off a node (its detail entry)."""
    vms = ((detail or {}).get("plan") or {}).get("vms") or []
    return sum(int(vm.get("memory") or 0) for vm in vms if vm.get("outcome") == fates.MIGRATE)


def _seconds(start, end):
    start, end = parse_time_utc(start), parse_time_utc(end)
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def predict(records, details, node):
    """{seconds, drain_seconds, rest_seconds, memory, basis} for ``node``, or None before any node is done.

    ``records``: the run's node records (``status``, ``started``, ``finished``, ``phases``);
    ``details``: the preflight's entries per node (``name``, ``plan``)."""
    by_name = dict((d.get("name"), d) for d in details or [])
    drains, rests, moved = [], [], []
    for record in records or []:
        if record.get("status") != "done":
            continue
        total = _seconds(record.get("started"), record.get("finished"))
        drain = (record.get("phases") or {}).get("drain") or {}
        drain_seconds = _seconds(drain.get("start"), drain.get("end"))
        if total is None or drain_seconds is None:
            continue
        drains.append(drain_seconds)
        rests.append(max(0.0, total - drain_seconds))
        moved.append(migrating_memory(by_name.get(record.get("node"))))
    if not drains:
        return None
    memory = migrating_memory(by_name.get(node))
    rest = sum(rests) / len(rests)
    count = len(drains)
    nodes_words = "%d node%s done in this run" % (count, "" if count == 1 else "s")
    # The rate comes from the drains that migrated memory: a drain that moved none (pods only, or
    # VMs shut down) says nothing about how fast memory moves.
    migrated = [(seconds, nbytes) for seconds, nbytes in zip(drains, moved) if nbytes > 0]
    if memory and migrated:
        migrated_seconds = sum(pair[0] for pair in migrated)
        migrated_bytes = sum(pair[1] for pair in migrated)
        drain = migrated_seconds * memory / migrated_bytes
        basis = ("%s of guest memory to migrate at this run's rate (%s in %.0f s of drains), plus %.0f s for the "
                 "rest of a node (the mean of the %s)" % (
                     format_memory(memory), format_memory(migrated_bytes), migrated_seconds, rest, nodes_words))
    else:
        drain = sum(drains) / count
        basis = "the mean drain (%.0f s) and the mean rest of a node (%.0f s) of the %s" % (drain, rest, nodes_words)
    return {"seconds": int(round(drain + rest)), "drain_seconds": int(round(drain)),
            "rest_seconds": int(round(rest)), "memory": memory, "basis": basis}


def predict_batch(records, details, nodes):
    """The prediction for nodes in maintenance together, or None before any node is done.

    Their drains run at once, so the batch drains as long as its longest drain (at the run's rate:
    KubeVirt's migration limits are in the rates already observed); the rest of each node (node
    tasks, reboot, Ready, verification) comes one node after the other. A batch of one node is
    that node's prediction."""
    if len(nodes) == 1:
        return predict(records, details, nodes[0])
    predictions = [predict(records, details, node) for node in nodes]
    if not predictions or predictions[0] is None:
        return None
    drain = max(p["drain_seconds"] for p in predictions)
    rest = sum(p["rest_seconds"] for p in predictions)
    basis = "the longest drain of the %d nodes (%d s) plus the rest of each node in turn (%d s); per node: %s" % (
        len(nodes), drain, rest, predictions[0]["basis"])
    return {"seconds": drain + rest, "drain_seconds": drain, "rest_seconds": rest,
            "memory": sum(p["memory"] for p in predictions), "basis": basis}


def fits_window(prediction, window, node, now=None):
    """Whether ``node`` can finish before the window closes: {fits, predicted_seconds, closes_at, message}.

    ``window``: a status of the maintenance window (module_utils.window: ``open``, ``closes_at``,
    ``now``, the instant judged, used when ``now`` is not given). Without a window that closes, or
    without a prediction, the node fits."""
    closes_at = parse_time_utc((window or {}).get("closes_at"))
    result = {"fits": True, "predicted_seconds": prediction["seconds"] if prediction else None,
              "closes_at": (window or {}).get("closes_at"), "message": None}
    if prediction is None or closes_at is None:
        return result
    now = now or parse_time_utc(window.get("now")) or utc_now()
    left = (closes_at - now).total_seconds()
    if prediction["seconds"] <= left:
        return result
    result["fits"] = False
    result["message"] = (
        "%s not started: %s predicted to take %d s (%s) and the maintenance window closes at %s, in %d s." % (
            ("Node %s is" % node) if isinstance(node, str) else ("Nodes %s are" % ", ".join(node)),
            "it is" if isinstance(node, str) else "together they are",
            prediction["seconds"], prediction["basis"], result["closes_at"], max(0, int(left))))
    return result
