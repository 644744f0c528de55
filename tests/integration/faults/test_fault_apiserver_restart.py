"""The API server restarts in the middle of a drain: the module retries (its informers re-list,
its requests back off) and completes, or fails with one clear sentence; never a traceback.
No PodDisruptionBudget is broken and every VM still runs with the same VMI."""

import threading
import time


import reliability
import runs
import safety
import workloads


def test_apiserver_restart_mid_drain(k8s, lab, pair, fault_namespace, restore_nodes):
    a, b = pair
    figure = reliability.fault("API server restarted during a drain", group="control plane")
    workloads.vms_start_on(k8s, fault_namespace, (a, b), ["restart-0", "restart-1"], "5Gi", guarded=True)
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    outcome = {}

    def drain():
        outcome["run"] = runs.module(lab.kubeconfig, "node_maintenance",
                                     {"name": a, "method": "drain", "wait_timeout": 300})

    with safety.PdbWatcher(k8s) as watcher:
        worker = threading.Thread(target=drain)
        worker.start()
        deadline = time.monotonic() + 180
        while worker.is_alive() and time.monotonic() < deadline:
            migrations = workloads.migrations(k8s, fault_namespace)
            if any((m.get("status") or {}).get("phase") == "Running" for m in migrations):
                break
            time.sleep(0.1)
        assert worker.is_alive(), "the drain ended before a migration ran: %s" % outcome["run"].output[-3000:]
        lab.restart_apiserver()
        worker.join(600)
        run = outcome["run"]
        result = run.result()
        left = runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent", "method": "drain"})
    report = vm_check.verify(shut_down=safety.shut_down_vms(result), timeout=120)
    figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
    assert "Traceback" not in run.output, run.output[-3000:]
    if result.get("failed"):
        assert reliability.clean_error_problems(result, rc=run.returncode) == [], result.get("msg")
    else:
        assert result["phase"] == "Succeeded", result
    assert not left.result().get("failed"), left.result().get("msg")
    assert watcher.violations == []
    assert report.problems == [], report
    figure.passed()
