"""run_records: a node's phases, its record in the run's state and its progress lines (the run_phase, record_outcomes,
run_progress and the deprecated run_record filters)."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.run_phase import run_phase
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.run_progress import run_progress
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.record_outcomes import record_outcomes
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.run_record import run_record
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.duration import predict
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.run_records import advance, record

T = ["2026-11-26T10:00:%02d.000000Z" % s for s in range(60)]
DRAIN = {"method": "drain", "eviction_pods": 7, "total_pods": 9, "vms": {"migrated": ["ns/a"]},
         "duration_seconds": 4}
VERIFY = {"migrations": [{"vm": "ns/a"}], "vms": {"stopped_as_expected": ["ns/b"], "running": 1, "expected": 1}}


def state(**extra):
    base = {"records": [], "failures": 0, "stop": False, "stop_reason": None, "order": ["w1", "w2", "w3"]}
    base.update(extra)
    return base


def in_flight(phase="drain", **extra):
    current = {"index": "1", "started": T[0], "predicted_seconds": 30, "phase": "drain", "phase_start": T[0],
               "phases": {}}
    for nxt, at in (("tasks", T[4]), ("ready", T[5]), ("uncordon", T[7]), ("verify", T[8])):
        if phase == current["phase"]:
            break
        current = advance(current, nxt, at)
        if nxt == "tasks":
            current["drain"] = DRAIN
    current.update(extra)
    return current


def test_each_phase_ends_where_the_next_begins():
    current = in_flight("verify")
    assert current["phase"] == "verify" and current["phase_start"] == T[8]
    assert current["phases"] == {"drain": {"start": T[0], "end": T[4]}, "tasks": {"start": T[4], "end": T[5]},
                                 "ready": {"start": T[5], "end": T[7]}, "uncordon": {"start": T[7], "end": T[8]}}


def test_advance_leaves_its_input_alone():
    current = in_flight("drain")
    advance(current, "tasks", T[3])
    assert current["phases"] == {} and current["phase"] == "drain"


def test_a_done_node_is_recorded_with_every_phase_and_the_verification():
    run = state()
    after = record(run, "w1", in_flight("verify"), T[10], "auto", verify=VERIFY)
    assert run["records"] == []  # the input is not changed
    (entry,) = after["records"]
    assert entry == {
        "node": "w1", "index": 1, "status": "done", "method": "drain", "started": T[0], "finished": T[10],
        "predicted_seconds": 30,
        "phases": {"drain": {"start": T[0], "end": T[4]}, "tasks": {"start": T[4], "end": T[5]},
                   "ready": {"start": T[5], "end": T[7]}, "uncordon": {"start": T[7], "end": T[8]},
                   "verify": {"start": T[8], "end": T[10]}},
        "pods_evicted": 7, "total_pods": 9, "vms": {"migrated": ["ns/a"]}, "migrations": [{"vm": "ns/a"}],
        "not_running": [], "stopped_as_expected": ["ns/b"], "error": None, "machine": None}
    assert (after["failures"], after["stop"], after["stop_reason"]) == (0, False, None)


def test_a_failure_names_its_phase_and_stops_beyond_max_failures():
    task = {"name": "Wait until the node is Ready", "action": "kubevirt_ops.maintenance.maintenance_verify"}
    result = {"msg": "  Node w1 is not Ready after 120s \n", "not_running": ["ns/c"]}
    within = record(state(), "w1", in_flight("ready"), T[9], "auto", failed_task=task, failed_result=result,
                    max_failures=1)
    (entry,) = within["records"]
    assert entry["status"] == "failed" and entry["failed_phase"] == "ready"
    assert entry["phases"]["ready"] == {"start": T[5], "end": T[9], "failed": True}
    assert entry["error"] == "Wait until the node is Ready: Node w1 is not Ready after 120s"
    assert entry["not_running"] == ["ns/c"] and entry["migrations"] == []
    assert (within["failures"], within["stop"], within["stop_reason"]) == (1, False, None)
    beyond = record(within, "w2", in_flight("drain", index="2"), T[12], "auto", failed_task=task,
                    failed_result={}, max_failures=1)
    assert (beyond["failures"], beyond["stop"], beyond["stop_reason"]) == (2, True, "failure")
    assert beyond["records"][-1]["error"] == "Wait until the node is Ready: failed"
    assert beyond["records"][-1]["method"] == "auto"  # no drain result: the run's method


def test_a_lost_lock_stops_the_run_whatever_max_failures_says():
    task = {"name": "Renew the cluster lock before the node", "action": "kubevirt_ops.maintenance.cluster_lock"}
    after = record(state(), "w1", in_flight("drain"), T[2], "auto", failed_task=task, failed_result={"msg": "lost"},
                   max_failures=5)
    assert (after["stop"], after["stop_reason"]) == (True, "failure")


def test_a_stop_stays_a_stop_when_another_node_of_the_batch_fails():
    stopped = state(stop=True, stop_reason="failure", failures=1)
    after = record(stopped, "w2", in_flight("drain"), T[3], "auto", failed_task={"name": "x"}, failed_result={},
                   max_failures=5)
    assert (after["failures"], after["stop"], after["stop_reason"]) == (2, True, "failure")


def test_a_failure_before_the_node_started_has_an_index_and_times():
    after = record(state(records=[{"node": "w0"}]), "w1", {}, T[1], "cr", failed_task={"name": "Start"},
                   failed_result={"msg": "boom"})
    entry = after["records"][-1]
    assert (entry["index"], entry["started"], entry["finished"], entry["failed_phase"]) == (2, T[1], T[1], "drain")


def test_records_feed_the_window_prediction():
    done = record(state(preflight={"details": []}), "w1", in_flight("verify"), T[10], "auto", verify=VERIFY)
    details = [{"name": "w2", "plan": {"vms": []}}]
    prediction = predict(done["records"], details, "w2")
    assert prediction is not None and prediction["seconds"] > 0


def test_filters_refuse_what_is_not_a_run():
    with pytest.raises(AnsibleFilterError, match="entry of the node in flight"):
        run_phase("x", "tasks", T[0])
    with pytest.raises(AnsibleFilterError, match="unknown phase 'reboot'"):
        run_phase({}, "reboot", T[0])
    with pytest.raises(AnsibleFilterError, match="run's state"):
        run_record([], "w1", {}, T[0], "auto", verify={})
    with pytest.raises(AnsibleFilterError, match="give verify"):
        run_record({}, "w1", {}, T[0], "auto")
    with pytest.raises(AnsibleFilterError, match="run's state"):
        record_outcomes("x", [], ["w1"])
    with pytest.raises(AnsibleFilterError, match="outcomes must be a node's outcome"):
        record_outcomes({}, "w1", ["w1"])
    with pytest.raises(AnsibleFilterError, match="order must be a list"):
        record_outcomes({}, [], "w1")


def outcome(node, index, verify=None, **failure):
    base = {"node": node, "current": in_flight("verify", index=str(index)), "now": T[10 + index], "method": "auto"}
    if verify is not None:
        base["verify"] = verify
    base.update(failure)
    return base


def test_a_batch_finished_on_its_hosts_is_recorded_in_the_batch_order_as_node_by_node():
    """The host-based style: each host of a batch keeps its node's outcome, the batch records them together,
    in the batch's order whatever order the hosts come in; the same state as recording them one by one."""
    task, result = {"name": "Update the firmware", "action": "ansible.builtin.fail"}, {"msg": "exited 1"}
    w1 = outcome("w1", 1, **{"failed_task": task, "failed_result": result})
    w3 = outcome("w3", 2, verify=VERIFY)
    stale = outcome("w9", 9, verify=VERIFY)  # a host of an earlier batch: not of this one
    together = record_outcomes(state(), [stale, w3, w1, None], ["w1", "w3"], max_failures=0)
    one_by_one = record(record(state(), "w1", w1["current"], w1["now"], "auto", failed_task=task, failed_result=result),
                        "w3", w3["current"], w3["now"], "auto", verify=VERIFY)
    assert together == one_by_one
    assert [(r["node"], r["index"], r["status"]) for r in together["records"]] == [("w1", 1, "failed"), ("w3", 2, "done")]
    assert (together["failures"], together["stop"], together["stop_reason"]) == (1, True, "failure")
    # Within max_failures the run goes on; a node without an outcome (its host never finished) is not recorded.
    within = record_outcomes(state(), [w1], ["w1", "w3"], max_failures=1)
    assert [r["node"] for r in within["records"]] == ["w1"] and not within["stop"]


def test_one_node_s_outcome_is_recorded_as_record_records_it():
    task, result = {"name": "Renew the cluster lock", "action": "kubevirt_ops.maintenance.cluster_lock"}, {"msg": "lost"}
    done = outcome("w1", 1, verify=VERIFY)
    assert record_outcomes(state(), done) == record(state(), "w1", done["current"], done["now"], "auto", verify=VERIFY)
    lost = outcome("w2", 2, failed_task=task, failed_result=result)
    after = record_outcomes(state(), lost, max_failures=5)
    assert after == record(state(), "w2", lost["current"], lost["now"], "auto", failed_task=task, failed_result=result,
                           max_failures=5)
    assert after["stop"] and after["stop_reason"] == "failure"  # a lost lock stops the run whatever max_failures


def test_without_an_order_the_outcomes_are_recorded_as_they_come():
    w1, w3 = outcome("w1", 1, verify=VERIFY), outcome("w3", 2, verify=VERIFY)
    after = record_outcomes(state(), [w3, None, w1, w3])
    assert [(r["node"], r["index"]) for r in after["records"]] == [("w3", 2), ("w1", 1)]
    assert record_outcomes(state(), []) == state()


def test_the_deprecated_run_record_records_as_record_outcomes_does():
    task, result = {"name": "Update the firmware", "action": "ansible.builtin.fail"}, {"msg": "exited 1"}
    current = in_flight("tasks")
    assert run_record(state(), "w1", current, T[9], "auto", verify=VERIFY) == record_outcomes(
        state(), {"node": "w1", "current": current, "now": T[9], "method": "auto", "verify": VERIFY})
    assert run_record(state(), "w1", current, T[9], "auto", failed_task=task, failed_result=result,
                      max_failures=1) == record(state(), "w1", current, T[9], "auto", failed_task=task,
                                                failed_result=result, max_failures=1)
    assert run_record(state(), "w1", "not an entry", T[9], "cr", failed_task={})["records"][0]["started"] == T[9]


# run_progress: the lines a run prints for its node.

def labelled(**extra):
    current = dict(in_flight("tasks"), label="[2/3 w2]", detail={"pods": 12, "vms": 4, "simulated": False},
                   host="host-2")
    current.update(extra)
    return current


def test_progress_lines_of_a_node_entering_and_drained():
    assert run_progress(labelled(), "enter") == "[2/3 w2] entering maintenance (12 pods and 4 VMs on it at preflight)"
    assert run_progress({"label": "[1/1 w1]"}, "enter") == "[1/1 w1] entering maintenance (? pods and ? VMs on it at preflight)"
    assert run_progress(labelled(), "drained") == (
        "[2/3 w2] drained in 4s (drain): 7 pods evicted, 1 VMs migrated, 0 shut down; left on the node: 0 pods, 0 VMs.")
    assert run_progress(labelled(), "drained", with_batch=True, node_tasks=True, reboot=True) == (
        "[2/3 w2] drained in 4s (drain, with its batch): 7 pods evicted, 1 VMs migrated, 0 shut down; left on the "
        "node: 0 pods, 0 VMs. Running the node tasks. Rebooting host-2.")
    simulated = labelled(detail={"simulated": True})
    assert run_progress(simulated, "drained", reboot=True).endswith(
        "Reboot simulated (a KWOK node has no machine): waiting for Ready.")


def test_progress_line_of_a_node_done_counts_the_nodes_left():
    run = state(records=[{"node": "w1"}, {"node": "w2"}])
    assert run_progress(labelled(), "done", state=run, verify=VERIFY) == (
        "[2/3 w2] done: Ready and schedulable, 1 of 1 VMs that ran before run, 1 left stopped by their run strategy; "
        "1 node(s) left.")
    batch = state(records=[{"node": "w1"}], order=["w1", "w2", "w3", "w4"])
    plain = {"vms": {"running": 2, "expected": 2, "stopped_as_expected": []}}
    assert run_progress(labelled(), "done", state=batch, verify=plain, recorded_later=2) == (
        "[2/3 w2] done: Ready and schedulable, 2 of 2 VMs that ran before run; 1 node(s) left after this batch.")


def test_a_failure_stops_the_run_goes_on_or_waits_for_its_batch():
    task = {"name": "Update the firmware", "action": "command"}
    outcome = {"node": "w2", "failed_task": task, "failed_result": {"msg": "boom"}}
    stopped = record(state(), "w2", in_flight("ready"), T[9], "auto", failed_task=task, failed_result={"msg": "boom"})
    assert run_progress({}, "failed", state=stopped, outcome=outcome) == (
        "Node w2 failed while waiting for the node to be Ready and is left cordoned (in maintenance): "
        "Update the firmware: boom")
    assert run_progress({}, "failed", state=stopped, outcome=outcome, with_batch=True) == (
        "Node w2 failed and is left cordoned: Update the firmware: boom. The run stops once the other nodes of its "
        "batch, already drained, are finished.")
    within = record(state(), "w2", in_flight("ready"), T[9], "auto", failed_task=task, failed_result={"msg": "boom"},
                    max_failures=1)
    assert run_progress({}, "failed", state=within, outcome=outcome, max_failures=1) == (
        "Node w2 failed and is left cordoned: Update the firmware: boom. 1 of at most 1 failure(s); going on with "
        "the next node.")
    assert run_progress({}, "failed", state=state(), outcome=outcome, with_batch=True, recorded_later=2,
                        max_failures=1) == (
        "Node w2 failed and is left cordoned: Update the firmware: boom. The other nodes of its batch finish on their "
        "hosts; then the failures are counted (at most 1 go on).")


def test_run_progress_refuses_what_it_cannot_say():
    with pytest.raises(AnsibleFilterError, match="the entry of the node in flight"):
        run_progress([], "enter")
    with pytest.raises(AnsibleFilterError, match="unknown step 'reboot'"):
        run_progress({}, "reboot")
    with pytest.raises(AnsibleFilterError, match="needs the run's state and the node's outcome"):
        run_progress({}, "failed", state={})


MACHINE = {"road": "redfish", "address": "https://bmc/redfish/v1/Systems/1", "boot_id_before": "a", "boot_id_after": "b",
           "firmware_before": {"bios": "1.0.0"}, "firmware_after": {"bios": "1.1.0"}, "bios_changed": {},
           "actions": [{"action": "restart (GracefulRestart)", "started": T[5], "seconds": 12.5}]}


def test_a_node_records_what_was_done_to_its_machine_done_or_failed():
    done = record(state(), "w1", dict(in_flight("verify"), machine=MACHINE), T[10], "auto", verify=VERIFY)
    assert done["records"][0]["machine"] == MACHINE
    # A servicing that failed says what it did in its result: the node's record keeps it.
    failed = record(state(), "w1", in_flight("tasks"), T[10], "auto", failed_task={"name": "Service the node's machine"},
                    failed_result={"msg": "Node w1's machine booted again but did not take what was asked",
                                   "machine": MACHINE})
    assert failed["records"][0]["machine"] == MACHINE and failed["records"][0]["status"] == "failed"
