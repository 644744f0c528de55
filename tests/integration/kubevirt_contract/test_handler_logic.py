"""Unit checks of the virt-handler stand-in's decisions; no cluster needed.

test_handler_standin.py checks the same behaviour end to end beside the real
virt-controller; these pin down upstream's rules (pkg/virt-handler/vm.go) with the
exact input that would break them.
"""

import datetime

import pytest
import yaml

from lab import kwok
from lab.standins import handler_migratability as m
from lab.standins import handler_nodes, handler_vmi
from lab.standins.handler_migration import CONNECTION_TIMEOUT_SECONDS, connection_lost_in, migration_done


def vmi(devices=None, volumes=(), volume_status=(), networks=None, annotations=None, domain=None):
    spec_domain = dict(domain or {}, devices=devices or {})
    return {
        "metadata": {"name": "v", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"domain": spec_domain, "volumes": list(volumes), "networks": networks or []},
        "status": {"volumeStatus": list(volume_status)},
    }


def claim_status(name, modes):
    return {"name": name, "persistentVolumeClaimInfo": {"claimName": name, "accessModes": modes}}


POD_NET = [{"name": "default", "pod": {}}]


def test_no_interfaces_and_local_disks_are_migratable_by_block_migration():
    live, storage, method = m.conditions(vmi(volumes=[{"name": "root", "containerDisk": {"image": "x"}}]))
    assert live["status"] == "True" and storage["status"] == "True"
    assert method == m.BLOCK_MIGRATION


def test_rwo_claim_blocks_with_upstreams_message_but_not_storage_migration():
    v = vmi(
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
        volume_status=[claim_status("data", ["ReadWriteOnce"])],
    )
    live, storage, method = m.conditions(v)
    assert (live["reason"], storage["status"]) == (m.DISKS, "True")
    assert live["message"].startswith("cannot migrate VMI: PVC c is not shared")
    assert method == m.BLOCK_MIGRATION


def test_claim_without_volume_status_blocks():
    v = vmi(volumes=[{"name": "data", "dataVolume": {"name": "dv"}}])
    assert m.conditions(v)[0]["message"].startswith("cannot migrate VMI: Unable to determine if PVC dv")


def test_rwx_claim_is_a_live_migration():
    v = vmi(
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
        volume_status=[claim_status("data", ["ReadWriteMany"])],
    )
    assert m.conditions(v)[0]["status"] == "True" and m.conditions(v)[2] == m.LIVE_MIGRATION


V1_7, V1_8 = (1, 7), (1, 8)
SECONDARY_NET = [{"name": "blue", "multus": {"networkName": "blue-net"}}]
ALLOW_BRIDGE = {"kubevirt.io/allow-pod-bridge-network-live-migration": ""}


# pkg/network/vmispec/interface.go VerifyVMIMigratable of v1.7.0 and of v1.8.0.
@pytest.mark.parametrize(
    "iface, networks, annotations, release, migratable",
    [
        ({"name": "default", "masquerade": {}}, POD_NET, {}, V1_7, True),
        ({"name": "default", "masquerade": {}}, POD_NET, {}, V1_8, True),
        ({"name": "default", "bridge": {}}, POD_NET, {}, V1_7, False),
        ({"name": "default", "bridge": {}}, POD_NET, {}, V1_8, False),
        # The annotation only has to exist.
        ({"name": "default", "bridge": {}}, POD_NET, ALLOW_BRIDGE, V1_7, True),
        ({"name": "default", "bridge": {}}, POD_NET, ALLOW_BRIDGE, V1_8, True),
        # Only secondary networks: no pod network to judge (v1.7 IsPodNetworkWithMasqueradeBindingInterface
        # is true without one, v1.8 returns early on a nil pod network).
        ({"name": "blue", "bridge": {}}, SECONDARY_NET, {}, V1_7, True),
        ({"name": "blue", "bridge": {}}, SECONDARY_NET, {}, V1_8, True),
        # v1.8's core passt binding migrates.
        ({"name": "default", "passtBinding": {}}, POD_NET, {}, V1_8, True),
        # A pod network without an interface of its name: v1.7 lets it through, v1.8 refuses.
        ({"name": "blue", "bridge": {}}, POD_NET + SECONDARY_NET, {}, V1_7, True),
        ({"name": "blue", "bridge": {}}, POD_NET + SECONDARY_NET, {}, V1_8, False),
    ],
)
def test_pod_network_binding(iface, networks, annotations, release, migratable):
    live = m.conditions(vmi(devices={"interfaces": [iface]}, networks=networks, annotations=annotations),
                        release=release)[0]
    assert (live["status"] == "True") is migratable
    if not migratable:
        assert live["reason"] == m.INTERFACE


def test_interface_messages_follow_the_release():
    bridged = vmi(devices={"interfaces": [{"name": "default", "bridge": {}}]}, networks=POD_NET)
    assert "bridge with kubevirt.io/allow-pod-bridge-network-live-migration" in m.conditions(bridged)[0]["message"]
    assert m.conditions(bridged, release=V1_8)[0]["message"] == (
        "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network")
    orphan = vmi(devices={"interfaces": [{"name": "blue", "bridge": {}}]}, networks=POD_NET + SECONDARY_NET)
    assert m.conditions(orphan, release=V1_8)[0]["message"] == "no primary interface found for network default"


# pkg/virt-handler/vm.go calculateVmPhaseForStatusReason and isACPIEnabled: a killed domain
# (reason Destroyed) fails the VMI only when the guest had ACPI and a grace period to use it.
@pytest.mark.parametrize(
    "domain, grace, phase",
    [
        ({"features": {"acpi": {}}}, None, "Failed"),
        ({"features": {}}, 6, "Failed"),  # ACPI is on unless disabled
        ({"features": {"acpi": {"enabled": False}}}, 6, "Succeeded"),
        ({}, 6, "Succeeded"),  # no features, no ACPI in the domain (converter.go); virt-api defaults them
        ({"features": {"acpi": {}}}, 0, "Succeeded"),  # grace period 0: killed at once, not a failure
    ],
)
def test_a_killed_guest_fails_only_with_acpi_and_a_grace_period(domain, grace, phase):
    v = vmi(domain=domain)
    if grace is not None:
        v["spec"]["terminationGracePeriodSeconds"] = grace
    assert handler_vmi.killed_phase(v) == phase


def test_grace_period_defaults_to_upstreams_30_seconds():
    assert handler_vmi.grace_period_seconds(vmi()) == 30
    assert handler_vmi.ACPI_RESEND_SECONDS == 5


# pkg/virt-handler/heartbeat/heartbeat.go with v1.CPUManager / v1.DeprecatedCPUManager (api core/v1 types.go).
def test_cpu_manager_label_keys_per_release():
    assert handler_nodes.cpu_manager_labels(V1_7) == {"cpumanager": "false"}
    assert handler_nodes.cpu_manager_labels(V1_8) == {"cpumanager": "false", "kubevirt.io/cpumanager": "false"}


def test_interface_blocker_is_reported_before_disks_and_storage_lists_all_but_disks():
    v = vmi(
        devices={"interfaces": [{"name": "default", "bridge": {}}], "gpus": [{"name": "g", "deviceName": "x"}]},
        networks=POD_NET,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
        volume_status=[claim_status("data", ["ReadWriteOnce"])],
    )
    live, storage, _ = m.conditions(v)
    assert live["reason"] == m.INTERFACE
    assert storage["reason"] == m.NOT_MIGRATABLE
    assert storage["message"].startswith(m.INTERFACE + ": ") and (m.HOST_DEVICE + ": ") in storage["message"]
    assert m.DISKS not in storage["message"]


def test_host_passthrough_and_virtiofs_no_longer_block():
    v = vmi(
        domain={"cpu": {"model": "host-passthrough"}},
        devices={"filesystems": [{"name": "share", "virtiofs": {}}]},
        volumes=[{"name": "share", "configMap": {"name": "cm"}}],
    )
    live, _, method = m.conditions(v)
    assert live["status"] == "True" and method == m.LIVE_MIGRATION


def test_migration_done_needs_an_end_and_an_outcome():
    assert not migration_done({"migrationUid": "u", "endTimestamp": "t"})
    assert migration_done({"migrationUid": "u", "endTimestamp": "t", "failed": True})
    assert migration_done({"migrationUid": "u", "endTimestamp": "t", "completed": True})


class _Leases:
    def __init__(self, **leases):
        self.leases = leases

    def get_by(self, namespace, name):
        return self.leases.get(name) if namespace == "kube-node-lease" else None


class _Sim:
    def __init__(self, **leases):
        self.leases = _Leases(**leases)


def lease(holder, renewed_seconds_ago):
    renewed = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=renewed_seconds_ago)
    return {"spec": {"holderIdentity": holder, "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def test_a_dead_machine_drops_migration_connections_after_libvirts_keepalive():
    sim = _Sim(alive=lease("alive", 60), dying=lease("lab-machine-off", 10), dead=lease("lab-node-fail", 31))
    assert CONNECTION_TIMEOUT_SECONDS == 30  # keepalive_interval 5 * (keepalive_count 5 + 1)
    assert connection_lost_in(sim, "alive") is None  # a live node, however old its last renewal
    assert 15 < connection_lost_in(sim, "dying") <= 20
    assert connection_lost_in(sim, "dead") == 0
    assert connection_lost_in(sim, "") is None and connection_lost_in(sim, "unknown") is None


def test_kwok_leaves_launcher_pods_to_the_handler_only_when_asked():
    text = "kind: Stage\nspec:\n  selector:\n    matchExpressions:\n    - key: .metadata.deletionTimestamp\n      operator: Exists\n"
    stage = yaml.safe_load(kwok._without_launchers(text))
    assert kwok.NOT_A_LAUNCHER in stage["spec"]["selector"]["matchExpressions"]


# -- the nodes' migration links (lab/standins/links.py) ----------------------------------------

GI = 2.0 ** 30


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_migrations_share_their_nodes_link_until_each_is_at_its_cap():
    from lab.standins.links import Links

    clock = Clock()
    links = Links(clock)
    link = 4 * GI
    # Two 4Gi guests off one node, each capped at 1Gi/s: the link (4Gi/s) has room for both at their cap.
    links.start("m1", "ns/a", "n1", "n2", 4 * GI, GI, link)
    links.start("m2", "ns/b", "n1", "n3", 4 * GI, GI, link)
    assert links.seconds_left("m1", link) == pytest.approx(4.0)
    # Six at once: 4Gi/s shared by six, two thirds of a Gi each.
    for i in range(3, 7):
        links.start("m%d" % i, "ns/v%d" % i, "n1", "n%d" % (i + 1), 4 * GI, GI, link)
    clock.now = 1.0
    assert links.seconds_left("m1", link) == pytest.approx((4 * GI - 2.0 / 3 * GI) / (2.0 / 3 * GI))
    # Four of them end: the two left are at their cap again, and the ones sharing n1 are named to look again.
    for i in range(3, 7):
        named = links.end("m%d" % i, link)
        assert "ns/a" in named and "ns/b" in named
    assert links.seconds_left("m2", link) == pytest.approx(4 - 2.0 / 3)
    # A target's link counts too: two transfers into n9 from different nodes share it.
    links.start("m7", "ns/c", "n5", "n9", 2 * GI, 0, GI)
    links.start("m8", "ns/d", "n6", "n9", 2 * GI, 0, GI)
    assert links.seconds_left("m7", GI) == pytest.approx(4.0)


def test_without_a_link_each_migration_runs_at_its_cap_and_without_a_cap_at_once():
    from lab.standins.links import Links, link_bytes_per_second

    clock = Clock()
    links = Links(clock)
    links.start("m1", "ns/a", "n1", "n2", 2 * GI, GI, 0)
    links.start("m2", "ns/b", "n1", "n3", 2 * GI, GI, 0)
    assert links.seconds_left("m1", 0) == pytest.approx(2.0)
    # A stand-in that restarted counts what already ran at the cap.
    links.start("m3", "ns/c", "n1", "n4", 2 * GI, GI, 0, elapsed=1.5)
    assert links.seconds_left("m3", 0) == pytest.approx(0.5)
    links.start("m4", "ns/d", "n1", "n5", 2 * GI, 0, 0)
    assert links.seconds_left("m4", 0) == 0.0
    assert links.seconds_left("unknown", 0) is None
    assert link_bytes_per_second({"metadata": {"annotations": {"kubevirt-ops.lab/migration-link": "4Gi"}}}) == 4 * GI
    assert link_bytes_per_second({}) == 0.0
