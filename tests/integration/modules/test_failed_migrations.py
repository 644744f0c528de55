"""Live migrations that keep failing, with KubeVirt's real evacuation backoff.

virt-controller re-creates an evacuation migration after each failure, but holds the new one
back 20 s after the first failure, then 40 s, 80 s ... (pkg/virt-controller/watch/migration/
migration.go, handleMigrationBackoff). The drain gives a VM up after three failed migrations
and then applies the non_migratable policy; the backoff must neither count as failures nor
make the drain give up early. The lab's virt-handler stand-in fails every migration of a VM
annotated kubevirt-ops.lab/fail-migration.
"""


from test_node_maintenance import GROUP, VERSION, by_name, custom, node_state, running_on, start_vms, workers
from workloads import FAIL_MIGRATION, MigrationRecorder, annotate_vm, failed_at

from lab.wait import wait_for


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
