"""Live migrations that keep failing, with KubeVirt's real evacuation backoff.

virt-controller re-creates an evacuation migration after each failure, but holds the new one
back 20 s after the first failure, then 40 s, 80 s ... (pkg/virt-controller/watch/migration/
migration.go, handleMigrationBackoff). The drain gives a VM up after three failed migrations
and then applies the non_migratable policy; the backoff must neither count as failures nor
make the drain give up early. The lab's virt-handler stand-in fails every migration of a VM
annotated kubevirt-ops.lab/fail-migration.
"""


import threading

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError
from test_node_maintenance import GROUP, VERSION, by_name, custom, node_state, running_on, start_vms, workers
from workloads import FAIL_MIGRATION, annotate_vm

from lab.wait import wait_for


class MigrationRecorder:
    """Every state of every migration of the namespace (they go with their VMI when it is
    deleted), from a watch, as an operator running `kubectl get vmim -w` sees them."""

    def __init__(self, k8s, namespace):
        self.k8s, self.namespace = k8s, namespace
        self.seen = {}
        self._watch = watch.Watch()
        self._stopped = False
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stopped:
            listed = custom(self.k8s).list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "virtualmachineinstancemigrations")
            for item in listed["items"]:
                self._record(item)
            self._started.set()
            try:
                for event in self._watch.stream(custom(self.k8s).list_namespaced_custom_object, GROUP, VERSION,
                                                self.namespace, "virtualmachineinstancemigrations",
                                                resource_version=listed["metadata"]["resourceVersion"],
                                                timeout_seconds=60):
                    self._record(event["object"])
            except (ProtocolError, ApiException):
                pass  # the watch ended early: list again (nothing between is lost, Failed is final)

    def _record(self, item):
        failed = failed_at(item)
        known = self.seen.get(item["metadata"]["uid"])
        if known is None or failed_at(known) is None or failed:
            self.seen[item["metadata"]["uid"]] = item

    def __enter__(self):
        self._thread.start()
        self._started.wait(30)
        return self

    def __exit__(self, *exc):
        self._stopped = True
        self._watch.stop()

    def of(self, vmi_name):
        return [m for m in self.seen.values() if (m.get("spec") or {}).get("vmiName") == vmi_name]


def failed_at(migration):
    """When virt-controller recorded the migration as Failed (its phase transition timestamp)."""
    for entry in (migration.get("status") or {}).get("phaseTransitionTimestamps") or []:
        if entry.get("phase") == "Failed":
            return entry.get("phaseTransitionTimestamp")
    return None


def seconds(timestamp):
    from datetime import datetime

    return datetime.strptime(timestamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()


def test_three_failed_migrations_with_real_backoff_then_the_shutdown_policy(k8s, namespace, run_module):
    node = workers(k8s)[0]
    start_vms(k8s, namespace, node, {"stubborn": ("LiveMigrate", "Always", True),
                                     "willing": ("LiveMigrate", "Always", True)})
    annotate_vm(k8s, namespace, "stubborn", {FAIL_MIGRATION: "true"})
    first_vmi = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances",
                                                         "stubborn")
    try:
        with MigrationRecorder(k8s, namespace) as recorder:
            result = run_module("node_maintenance", {"name": node, "method": "drain",
                                                     "non_migratable": "shutdown", "wait_timeout": 300})
        assert not result.get("failed") and result["phase"] == "Succeeded", result
        migrated = by_name(v for v in result["vms"]["migrated"] if v["namespace"] == namespace)
        shut = by_name(v for v in result["vms"]["shut_down"] if v["namespace"] == namespace)
        assert list(migrated) == ["willing"] and list(shut) == ["stubborn"], result["vms"]
        assert shut["stubborn"]["outcome"] == "restart_elsewhere"

        # What an operator sees with kubectl get vmim: three failures, spaced by KubeVirt's backoff,
        # and the old VMI shut down only after the third.
        failures = sorted(t for t in (failed_at(m) for m in recorder.of("stubborn")) if t)
        assert len(failures) >= 3, [(m["metadata"]["creationTimestamp"], (m.get("status") or {}).get("phase"),
                                     (m.get("status") or {}).get("phaseTransitionTimestamps"))
                                    for m in recorder.of("stubborn")]
        times = [seconds(t) for t in failures]
        # Retry rounds: KubeVirt holds each new evacuation migration back 20 s, then 40 s, after the
        # last failure. (On a loaded machine virt-controller has been seen to start two migrations of
        # one VMI at once; both fail in the same second and form one round.)
        rounds = [times[0]] + [b for a, b in zip(times, times[1:]) if b - a > 3]
        gaps = [b - a for a, b in zip(rounds, rounds[1:])]
        assert gaps and all(gap >= 19 for gap in gaps), failures  # timestamps have 1 s resolution
        assert gaps[1:] == [] or gaps[1] >= 39, failures
        third = times[2]
        wait_for(lambda: running_on(k8s, namespace, "stubborn") not in (None, node), 180,
                 "stubborn to run again on another node")
        again = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualmachineinstances",
                                                         "stubborn")
        assert again["metadata"]["uid"] != first_vmi["metadata"]["uid"]
        assert seconds(again["metadata"]["creationTimestamp"]) >= third
        assert running_on(k8s, namespace, "willing") not in (None, node)
    finally:
        run_module("node_maintenance", {"name": node, "state": "absent"})
    assert node_state(k8s, node)["unschedulable"] is False
