"""Entering and leaving maintenance marks a node exactly as recorded; safety refusals."""

import json

from drain_cluster import node

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common import identity
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import leave as nm_leave
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks


def apply(obj, patch):
    return node_marks._apply_merge(json.loads(json.dumps(obj)), patch)


def test_enter_marks_like_nmo_and_records_what_it_added():
    worker = node("worker-1")
    patch, after, record = node_marks.enter_changes(worker, "bios")
    assert after["unschedulable"] is True
    assert {t["key"] for t in after["taints"]} == {"medik8s.io/drain", "node.kubernetes.io/unschedulable"}
    assert after["labels"] == {node_marks.EXCLUDE_LABEL: "true"}
    assert record["added"] == ["label", "taint:medik8s.io/drain", "taint:node.kubernetes.io/unschedulable",
                               "unschedulable"]
    assert record["reason"] == "bios" and record["phase"] == "Running"
    entered = apply(worker, patch)
    assert node_marks.maintenance_record(entered) == record
    # A second run changes nothing, even after the drain recorded its outcome.
    finished = apply(entered, {"metadata": {"annotations": {identity.NODE_STATE_ANNOTATION: json.dumps(
        dict(record, phase="Succeeded"))}}})
    assert node_marks.enter_changes(finished, "bios")[0] is None
    # Leaving removes exactly that.
    patch, after, kept = node_marks.leave_changes(finished)
    left = apply(finished, patch)
    assert not kept and not left["spec"].get("unschedulable") and not left["spec"].get("taints")
    assert node_marks.EXCLUDE_LABEL not in left["metadata"]["labels"]
    assert identity.NODE_STATE_ANNOTATION not in left["metadata"].get("annotations", {})
    assert node_marks.leave_changes(left)[0] is None


def test_leave_keeps_what_was_there_before():
    taint = {"key": "gpu", "effect": "NoSchedule"}
    worker = node("worker-1", cordoned=True, taints=[taint], labels={node_marks.EXCLUDE_LABEL: "true"})
    patch, _after, record = node_marks.enter_changes(worker)
    assert record["added"] == ["taint:medik8s.io/drain", "taint:node.kubernetes.io/unschedulable"]
    entered = apply(worker, patch)
    patch, after, kept = node_marks.leave_changes(entered)
    assert kept is True
    assert after["unschedulable"] is True and after["labels"] == {node_marks.EXCLUDE_LABEL: "true"}
    assert [t["key"] for t in after["taints"]] == ["gpu", "node.kubernetes.io/unschedulable"]


def test_leave_uncordons_a_node_cordoned_by_hand():
    patch, after, kept = node_marks.leave_changes(node("worker-1", cordoned=True))
    assert patch == {"spec": {"unschedulable": None}} and after["unschedulable"] is False and not kept


def test_operator_release_waits_for_every_mark_the_operator_and_node_controller_leave():
    unschedulable = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    drain = {"key": "medik8s.io/drain", "effect": "NoSchedule"}
    label = {node_marks.EXCLUDE_LABEL: "true"}
    # The operator's order: taints off, uncordon, label off; the node controller re-adds its
    # taint while the node is still cordoned and removes it only after the uncordon.
    steps = [
        (node("w", cordoned=True, taints=[unschedulable, drain], labels=label), False),
        (node("w", cordoned=True, taints=[unschedulable], labels=label), False),
        (node("w", taints=[unschedulable], labels=label), False),
        (node("w", labels=label), False),
        (node("w", taints=[{"key": "gpu", "effect": "NoSchedule"}]), True),
    ]
    assert [nm_leave.released_by_operator(n) for n, _want in steps] == [want for _n, want in steps]
    assert nm_leave.released_by_operator(None) is False
    # A label value the operator does not remove is not waited for.
    assert nm_leave.released_by_operator(node("w", labels={node_marks.EXCLUDE_LABEL: "false"})) is True


def test_control_plane_quorum():
    cps = [node("cp-%d" % i, control_plane=True) for i in (1, 2, 3)]
    assert nodes.control_plane_refusal(cps[0], cps) is None
    down = node("cp-2", control_plane=True, ready=False)
    text = nodes.control_plane_refusal(cps[0], [cps[0], down, cps[2]])
    assert "1 of 3 control-plane nodes would be Ready, below the etcd quorum of 2" in text
    guard = {"status": {"disruptionsAllowed": 0}}
    assert "etcd-guard-pdb allows no disruption" in nodes.control_plane_refusal(cps[0], cps, guard)
    assert nodes.control_plane_refusal(node("worker-1"), cps) is None


def test_release_is_reported_only_once_the_node_stays_released(monkeypatch):
    """The node lifecycle controller can put the unschedulable taint back just after the uncordon (a decision
    taken from its stale view of the cordon): the release is awaited as a state that lasts (waiter tests cover
    stable_for), through one watch."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline

    released = node("w")
    calls = []

    def fake_wait(client, kind, name, predicate, timeout, what, **kwargs):
        calls.append((kind, name, kwargs))
        assert predicate(released)
        assert not predicate(node("w", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]))
        return released

    monkeypatch.setattr(nm_leave, "wait_for_object", fake_wait)
    got = nm_leave._wait_for_release(None, "w", {"metadata": {"name": "nm-w"}}, Deadline(60), {})
    assert got is released
    assert [(kind, name, sorted(kwargs)) for kind, name, kwargs in calls] == [("Node", "w", ["settles", "stable_for"])]
    assert calls[0][2]["stable_for"] == nm_leave.RELEASE_QUIET_SECONDS
    assert isinstance(calls[0][2]["settles"], nm_leave.LifecycleTaintSettled)


UNSCHEDULABLE = [node_marks.UNSCHEDULABLE_TAINT]
DRAIN = [node_marks.DRAIN_TAINT]


def _versions(*states):
    """Node versions from (cordoned, taints) pairs."""
    return [node("w", cordoned=cordoned, taints=taints) for cordoned, taints in states]


def test_the_lifecycle_controller_is_settled_once_it_took_its_taint_off_the_uncordoned_node():
    """The sequences the lab shows after a NodeMaintenance is deleted: the operator takes its taints off (still
    cordoned), uncordons; the node lifecycle controller puts the unschedulable taint back from its stale view
    (before or after the uncordon) and takes it off again from a view of the uncordoned node."""
    late = _versions((True, UNSCHEDULABLE + DRAIN), (True, []), (False, []), (False, UNSCHEDULABLE), (False, []))
    early = _versions((True, UNSCHEDULABLE + DRAIN), (True, []), (True, UNSCHEDULABLE), (False, UNSCHEDULABLE),
                      (False, []))
    for versions in (late, early):
        settled = nm_leave.LifecycleTaintSettled()
        assert [settled(v) for v in versions] == [False, False, False, False, True]


def test_taints_the_operator_takes_off_or_a_node_never_retainted_settle_nothing():
    """The operator's own removal (the node still cordoned), or no stale decision seen at all: the release must
    then stay for RELEASE_QUIET_SECONDS, as a decision may still be on its way."""
    for versions in (_versions((True, UNSCHEDULABLE + DRAIN), (True, []), (False, []), (False, [])),
                     _versions((True, UNSCHEDULABLE), (False, UNSCHEDULABLE + DRAIN), (True, UNSCHEDULABLE),
                               (True, []))):
        settled = nm_leave.LifecycleTaintSettled()
        assert not any(settled(v) for v in versions)


def test_release_that_never_comes_names_the_cr_and_the_node(monkeypatch):
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import WaitTimeoutError
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline

    def never(client, kind, name, predicate, timeout, what, **kwargs):
        raise WaitTimeoutError("timed out")

    monkeypatch.setattr(nm_leave, "wait_for_object", never)
    try:
        nm_leave._wait_for_release(None, "w", {"metadata": {"name": "nm-w"}}, Deadline(5), {"node": "w"})
    except WaitTimeoutError as exc:
        assert "NodeMaintenance nm-w was deleted, but node w still carries its maintenance marks" in exc.msg
    else:
        raise AssertionError("no timeout")
