"""KubeVirt's own components fail in the middle of a drain.

* virt-api stops while VMs are being evacuated: its eviction webhook fails closed (the API
  server answers 500 "failed calling webhook" to every eviction of a virt-launcher pod) and
  virt-controller cannot create the next evacuation migrations (their validating webhook is
  virt-api's too). node_maintenance keeps waiting, says "virt-api is not answering" in its
  progress, and finishes once virt-api is back.
* virt-controller is killed while a live migration runs, and started again: it picks the
  migration up where it was and the drain completes.

Either way no VM is lost or restarted (a migration keeps the VMI) and no
PodDisruptionBudget is broken.
"""

import threading
import time


import reliability
import runs
import safety
import workloads
from lab.wait import wait_for

VIRT_API_DOWN = "virt-api is not answering"
# How long virt-api stays down at least (the drain must wait it out, not give up).
OUTAGE = 60
# virt-controller's evacuation controller migrates at most 2 VMs off a node at once
# (parallelOutboundMigrationsPerNode): with 6 VMs, some are still on the node, without a
# migration, when virt-api stops.
VMS = 6


def _drain_in_background(lab, node, progress_file):
    outcome = {}

    def drain():
        outcome["run"] = runs.module(lab.kubeconfig, "node_maintenance", {
            "name": node, "method": "drain", "wait_timeout": 900, "progress_file": str(progress_file)})

    worker = threading.Thread(target=drain)
    worker.start()
    return worker, outcome


def _read(path):
    try:
        return path.read_text()
    except OSError:
        return ""


def test_virt_api_down_mid_drain(k8s, lab, pair, fault_namespace, tmp_path, restore_nodes):
    a, b = pair
    figure = reliability.fault("virt-api stopped for 60 s during a drain", group="kubevirt")
    names = ["api-%d" % i for i in range(VMS)]
    workloads.vms_start_on(k8s, fault_namespace, (a, b), names, "2Gi")
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    progress = tmp_path / "progress"
    stopped = False
    try:
        with safety.PdbWatcher(k8s) as watcher:
            worker, outcome = _drain_in_background(lab, a, progress)
            # The middle of the drain: KubeVirt has started evacuating (a first migration exists).
            wait_for(lambda: not worker.is_alive() or workloads.migrations(k8s, fault_namespace), 300,
                     "the first evacuation migration")
            assert worker.is_alive(), "the drain ended before a migration started: %s" % (
                outcome["run"].output[-3000:])
            lab.cli("stop", "virt-api")
            stopped = True
            down_since = time.monotonic()
            # virt-api stays down until the drain has met the refusal, and at least OUTAGE seconds.
            wait_for(lambda: VIRT_API_DOWN in _read(progress) or not worker.is_alive(), 600,
                     "the drain to meet an eviction refused because virt-api is down")
            assert worker.is_alive(), "the drain ended while virt-api was down: %s" % (
                outcome["run"].result())
            time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_since)))
            assert worker.is_alive(), "the drain gave up while virt-api was down: %s" % (outcome["run"].result())
            lab.cli("start", "virt-api")
            stopped = False
            worker.join(1200)
            assert not worker.is_alive(), "the drain did not end"
        run = outcome["run"]
        result = run.result()
        report = vm_check.verify(shut_down=safety.shut_down_vms(result), timeout=120)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not result.get("failed"), result.get("msg")
        assert result["phase"] == "Succeeded", result
        assert sorted(v["name"] for v in result["vms"]["migrated"]) == sorted(names), result["vms"]
        assert VIRT_API_DOWN in _read(progress), _read(progress)
        assert report.problems == [] and report.restarted == [], report
        assert sorted(report.migrated) == sorted("%s/%s" % (fault_namespace, n) for n in names), report
        assert watcher.violations == []
        figure.passed()
    finally:
        if stopped:
            lab.cli("start", "virt-api")
        runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent"})


def test_virt_controller_killed_mid_migration(k8s, lab, pair, fault_namespace, tmp_path, restore_nodes):
    a, b = pair
    figure = reliability.fault("virt-controller killed during a live migration, then started again",
                               group="kubevirt")
    names = ["ctl-0", "ctl-1"]
    workloads.vms_start_on(k8s, fault_namespace, (a, b), names, "5Gi")
    vm_check = safety.VmSafety(k8s, [fault_namespace])
    stopped = False
    try:
        with safety.PdbWatcher(k8s) as watcher:
            worker, outcome = _drain_in_background(lab, a, tmp_path / "progress")
            wait_for(lambda: not worker.is_alive() or any(
                (m.get("status") or {}).get("phase") == "Running" for m in workloads.migrations(k8s, fault_namespace)),
                300, "a live migration to run")
            assert worker.is_alive(), "the drain ended before a migration ran: %s" % outcome["run"].output[-3000:]
            lab.cli("stop", "virt-controller")
            stopped = True
            time.sleep(20)  # the outage (no assertion on timing)
            lab.cli("start", "virt-controller")
            stopped = False
            worker.join(1200)
            assert not worker.is_alive(), "the drain did not end"
        run = outcome["run"]
        result = run.result()
        report = vm_check.verify(shut_down=safety.shut_down_vms(result), timeout=120)
        figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost))
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not result.get("failed"), result.get("msg")
        assert result["phase"] == "Succeeded", result
        assert report.problems == [] and report.restarted == [], report
        assert sorted(report.migrated) == sorted("%s/%s" % (fault_namespace, n) for n in names), report
        assert watcher.violations == []
        figure.passed()
    finally:
        if stopped:
            lab.cli("start", "virt-controller")
        runs.module(lab.kubeconfig, "node_maintenance", {"name": a, "state": "absent"})
