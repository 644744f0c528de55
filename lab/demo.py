"""``make demo``: rolling maintenance of every lab worker, with VMs migrating, then the report.

1. Bring up a lab of its own (state in ``.lab/demo``): one control-plane node, 4 workers, their
   machines behind Redfish BMCs; two of them are Metal3 hosts (``up --metal3-workers 2``: a
   BareMetalHost each, named by the node's providerID), the other two are reached through their BMCs.
2. Create 16 VMs of mixed eviction and run strategies, and a Deployment guarded by a
   PodDisruptionBudget. One VM would block a drain (LiveMigrate with a ReadWriteOnce disk);
   the demo's policy, ``non_migratable: shutdown``, shuts it down so that its run strategy
   (Always) starts it again on another node.
3. Run ``playbooks/demo.yml`` (the rolling_maintenance role over every worker; while each is
   drained, its machine gets a BIOS image and a BIOS setting and restarts: through its BareMetalHost
   (HostFirmwareComponents, HostFirmwareSettings, the reboot annotation) or through its Redfish BMC),
   with the lab's ``bmc-inventory.yml`` (the BMCs of the machines no host manages) beside ``localhost``.
4. Check that every VM that ran before runs after, print the report's path and summary.
5. Take the lab down, always, also when something failed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lab import scheduler
from lab.paths import REPO_ROOT, STATE_DIR_ENV
from lab.wait import wait_for

NAMESPACE = "demo"
GROUP, VERSION = "kubevirt.io", "v1"
WORKERS = 4
METAL3_WORKERS = 2
VM_TIMEOUT = 300

# name, eviction strategy, run strategy, disk access mode (None: no PVC), memory
VMS = [
    ("web-1", "LiveMigrate", "Always", "ReadWriteMany", "2Gi"),
    ("web-2", "LiveMigrate", "Always", "ReadWriteMany", "2Gi"),
    ("web-3", "LiveMigrate", "Always", "ReadWriteMany", "2Gi"),
    ("web-4", "LiveMigrate", "Always", "ReadWriteMany", "2Gi"),
    ("api-1", "LiveMigrate", "Always", None, "4Gi"),
    ("api-2", "LiveMigrate", "Always", None, "4Gi"),
    ("api-3", "LiveMigrate", "RerunOnFailure", None, "4Gi"),
    ("db-1", "LiveMigrate", "Always", "ReadWriteMany", "8Gi"),
    ("db-2", "LiveMigrate", "Always", "ReadWriteMany", "8Gi"),
    ("cache-1", "LiveMigrateIfPossible", "Always", None, "2Gi"),
    ("cache-2", "LiveMigrateIfPossible", "Always", None, "2Gi"),
    ("report-1", "LiveMigrateIfPossible", "Always", "ReadWriteOnce", "2Gi"),
    ("batch-1", "None", "RerunOnFailure", None, "1Gi"),
    ("ci-runner", "None", "Always", None, "1Gi"),
    ("dev-1", "LiveMigrate", "Manual", None, "1Gi"),
    # Would block every drain: LiveMigrate, but its disk is ReadWriteOnce.
    ("db-legacy", "LiveMigrate", "Always", "ReadWriteOnce", "4Gi"),
]


def log(text):
    print("demo: %s" % text, flush=True)


def run(argv, env, check=True):
    log("$ %s" % " ".join(str(a) for a in argv))
    result = subprocess.run([str(a) for a in argv], env=env, cwd=REPO_ROOT, check=False)
    if check and result.returncode != 0:
        raise SystemExit("demo: %s exited %d" % (argv[0], result.returncode))
    return result.returncode


def vm_manifest(name, eviction, run_strategy, access_mode, memory):
    spec = {
        "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                   "resources": {"requests": {"memory": memory, "cpu": "500m"}}},
        "evictionStrategy": eviction,
        "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}],
    }
    if access_mode:
        spec["volumes"] = [{"name": "root", "persistentVolumeClaim": {"claimName": name + "-root"}}]
    return {
        "apiVersion": "%s/%s" % (GROUP, VERSION),
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "demo"}},
        "spec": {"runStrategy": run_strategy,
                 "template": {"metadata": {"labels": {"kubevirt.io/vm": name}}, "spec": spec}},
    }


def create_workloads(api):
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    wait_for(lambda: _exists(lambda: core.read_namespaced_service_account("default", NAMESPACE)), 120,
             "the default ServiceAccount of namespace %s" % NAMESPACE)
    custom = client.CustomObjectsApi(api)
    for name, eviction, run_strategy, access_mode, memory in VMS:
        if access_mode:
            _create(lambda: core.create_namespaced_persistent_volume_claim(NAMESPACE, {
                "metadata": {"name": name + "-root"},
                "spec": {"accessModes": [access_mode], "resources": {"requests": {"storage": "20Gi"}}},
            }))
        # A Manual VM starts only when asked to: create it running (Always), switch to Manual once it runs.
        manifest = vm_manifest(name, eviction, "Always" if run_strategy == "Manual" else run_strategy, access_mode,
                               memory)
        _create(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "virtualmachines", manifest))
    labels = {"app": "frontend"}
    _create(lambda: client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, {
        "metadata": {"name": "frontend", "labels": labels},
        "spec": {"replicas": 6, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "frontend", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                     "terminationGracePeriodSeconds": 0}}},
    }))
    _create(lambda: client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(NAMESPACE, {
        "metadata": {"name": "frontend"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }))


def _create(call):
    try:
        call()
    except ApiException as exc:
        if exc.status != 409:
            raise


def _exists(call):
    try:
        call()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def in_service(vmi):
    """Running and Ready (virt-controller copies Ready from the launcher pod), not being deleted."""
    status = vmi.get("status") or {}
    return (status.get("phase") == "Running" and not vmi["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []))


def running_vms(api):
    """{name: node} of the VMIs in service (Running and Ready) in the demo namespace."""
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "virtualmachineinstances").get("items") or []
    return dict((v["metadata"]["name"], (v.get("status") or {}).get("nodeName")) for v in items if in_service(v))


def wait_vms(api, names):
    def all_running():
        vmis = client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "virtualmachineinstances").get("items") or []
        by_name = dict((v["metadata"]["name"], v) for v in vmis)
        return all(name in by_name and in_service(by_name[name])
                   and any(c.get("type") == "LiveMigratable" for c in by_name[name]["status"].get("conditions") or [])
                   for name in names)

    wait_for(all_running, VM_TIMEOUT, "the demo VMs to run")


def placement_table(placement):
    by_node = {}
    for vm, node in sorted(placement.items()):
        by_node.setdefault(node, []).append(vm)
    return "; ".join("%s: %s" % (node, ", ".join(vms)) for node, vms in sorted(by_node.items()))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lab.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the demo lab running afterwards")
    parser.add_argument("--reports", default=str(REPO_ROOT / "report"), help="report directory (default: report/)")
    parser.add_argument("--scheduler-profile", choices=scheduler.NAMES, default=scheduler.DEFAULT,
                        help="how the lab's kube-scheduler scores nodes (lab/scheduler.py; make demo SCHEDULER_PROFILE=...)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    state_dir = Path(os.environ.get("KUBEVIRT_OPS_DEMO_LAB_DIR") or REPO_ROOT / ".lab" / "demo")
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    env.update({
        STATE_DIR_ENV: str(state_dir),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".build" / "collections"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_FORCE_COLOR": env.get("ANSIBLE_FORCE_COLOR", "1" if sys.stdout.isatty() else "0"),
        "K8S_AUTH_KUBECONFIG": str(state_dir / "kubeconfig"),
        "PATH": str(bin_dir) + os.pathsep + env.get("PATH", ""),
    })
    rc = 1
    try:
        # Two roads to the machines: the first METAL3_WORKERS workers are Metal3 hosts (their providerID names
        # their BareMetalHost), the others are reached through their BMCs (bmc-inventory.yml).
        run([sys.executable, "-m", "lab", "up", "--nodes", str(WORKERS), "--metal3-workers", str(METAL3_WORKERS),
             "--scheduler-profile", args.scheduler_profile], env)
        api = config.new_client_from_config(config_file=str(state_dir / "kubeconfig"))
        log("creating %d VMs and a Deployment of 6 pods guarded by a PodDisruptionBudget" % len(VMS))
        create_workloads(api)
        wait_vms(api, [vm[0] for vm in VMS])
        for name, _eviction, run_strategy, _access, _memory in VMS:
            if run_strategy == "Manual":
                client.CustomObjectsApi(api).patch_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "virtualmachines", name, {"spec": {"runStrategy": "Manual"}})
        before = running_vms(api)
        log("%d VMs running: %s" % (len(before), placement_table(before)))
        setup_done = time.monotonic()

        rc = run([bin_dir / "ansible-playbook", "-i", state_dir / "bmc-inventory.yml",
                  REPO_ROOT / "playbooks" / "demo.yml",
                  "-e", json.dumps({"rolling_maintenance_report_dir": args.reports})], env, check=False)
        playbook_seconds = time.monotonic() - setup_done

        after = running_vms(api)
        lost = sorted(set(before) - set(after))
        moved = sorted(vm for vm in before if vm in after and after[vm] != before[vm])
        log("%d of %d VMs that ran before run now (%d on another node): %s" % (
            len(set(before) & set(after)), len(before), len(moved), placement_table(after)))
        if lost:
            log("NOT RUNNING after the maintenance: %s" % ", ".join(lost))
            rc = rc or 1
        report = _latest_report(Path(args.reports))
        if report:
            data = json.loads((report / "report.json").read_text())
            log("report: %s" % (report / "report.md"))
            log("timeline: %s" % (report / "report-timeline.svg"))
            if shutil.which("rsvg-convert"):
                png = report / "report-timeline.png"
                subprocess.run(["rsvg-convert", "-o", str(png), str(report / "report-timeline.svg")], check=False)
                if png.exists():
                    log("timeline picture: %s" % png)
            totals = data["totals"]
            log("summary: %s - %d/%d nodes, %s pods evicted, %s VMs migrated, %s shut down, %.0fs for the playbook"
                % (data["status"], totals["nodes_done"], totals["nodes_planned"], totals["pods_evicted"],
                   totals["vms_migrated"], totals["vms_shut_down"], playbook_seconds))
            for node in data["nodes"]:
                phases = ", ".join("%s %.0fs" % (name, p["seconds"] or 0) for name, p in node["phases"].items())
                log("  %s %s in %.0fs (%s)" % (node["node"], node["status"], node["duration_seconds"] or 0, phases))
                machine = node.get("machine")
                if machine:
                    log("    machine through %s: %s" % (machine.get("address") or machine.get("bmh"), ", ".join(
                        "%s %.1fs" % (action["action"], action["seconds"] or 0) for action in machine["actions"])))
    except KeyboardInterrupt:
        rc = 130
    finally:
        if not args.keep:
            run([sys.executable, "-m", "lab", "down"], env, check=False)
        log("finished in %.0fs, exit code %d" % (time.monotonic() - started, rc))
    return rc


def _latest_report(directory):
    if not directory.is_dir():
        return None
    runs = sorted(p for p in directory.glob("rolling-maintenance-*") if (p / "report.json").exists())
    return runs[-1] if runs else None


if __name__ == "__main__":
    sys.exit(main())
