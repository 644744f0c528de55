"""Unit checks of the lab's stand-ins beside the real KubeVirt; no cluster needed.

With the real virt-controller and virt-api, the VM, VMI, migration, eviction and
subresource decisions are KubeVirt's own, checked end to end by test_contract.py. What
remains the lab's is checked here with the exact input that would break it: the
stand-ins' plumbing (work queue, cluster configuration), the CRDs they install (HCO,
NodeMaintenance in both groups), the HCO stand-in's KubeVirt spec and conditions; the virt-handler stand-in's rules are in
test_handler_logic.py.
"""

import json
import time

import pytest

from lab.standins import baremetal, crds, hco, hco_api
from lab.standins import kube as k
from lab.standins.cluster_config import ClusterConfig
from lab.standins.workqueue import WorkQueue

# -- fakes ------------------------------------------------------------------------------------


class FakeCache:
    def __init__(self, objects=()):
        self.objects = {k.key_of(o): o for o in objects}

    def get(self, key):
        return self.objects.get(key)

    def get_by(self, namespace, name):
        return self.get(f"{namespace}/{name}" if namespace else name)

    def list(self):
        return list(self.objects.values())

    def by_index(self, name, value):
        return []


def kubevirt_cr(eviction_strategy=None, **migrations):
    configuration = {"migrations": migrations}
    if eviction_strategy:
        configuration["evictionStrategy"] = eviction_strategy
    return {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": configuration},
    }


# -- plumbing -------------------------------------------------------------------------------------


def test_work_queue_deduplicates_and_delays():
    q = WorkQueue("t")
    q.add("a")
    q.add("a")
    q.add_after("b", 0.05)
    assert q.get() == "a"
    q.add("a")  # re-added while processing: handed out again after done()
    started = time.monotonic()
    assert q.get() == "b"
    assert time.monotonic() - started >= 0.04
    q.done("a")
    assert q.get() == "a"


def test_crds_are_structural_and_have_status():
    # Beside the real KubeVirt the stand-in installs every CRD but KubeVirt's own
    # (those come from virt-operator's generators, lab/kubevirt/install.py).
    definitions = [d for d in crds.definitions() if d["spec"]["group"] != "kubevirt.io"]
    names = {d["metadata"]["name"] for d in definitions}
    assert {
        "hyperconvergeds.hco.kubevirt.io",
        "nodemaintenances.nodemaintenance.medik8s.io",
        "nodemaintenances.nodemaintenance.kubevirt.io",
        "nodehealthchecks.remediation.medik8s.io",
        "machinehealthchecks.machine.openshift.io",
        "machines.machine.openshift.io",
        "machinehealthchecks.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
    } == names

    def structural(schema, path):
        if "x-kubernetes-int-or-string" in schema:
            return
        assert "type" in schema, path
        for name, sub in (schema.get("properties") or {}).items():
            structural(sub, f"{path}.{name}")
        if "items" in schema:
            structural(schema["items"], f"{path}[]")

    for d in definitions:
        for version in d["spec"]["versions"]:
            assert version["subresources"] == {"status": {}}
            structural(version["schema"]["openAPIV3Schema"], d["metadata"]["name"])
    nm = next(
        d for d in definitions if d["metadata"]["name"] == "nodemaintenances.nodemaintenance.medik8s.io"
    )
    assert nm["spec"]["scope"] == "Cluster" and nm["spec"]["names"]["shortNames"] == ["nm"]


def test_cluster_config_defaults_and_bandwidth():
    config = ClusterConfig(FakeCache([kubevirt_cr()]), default_bandwidth="512Mi")
    assert config.parallel_migrations_per_cluster() == 5
    assert config.parallel_outbound_migrations_per_node() == 2
    assert config.bandwidth_bytes_per_second() == 512 * 2**20
    config = ClusterConfig(
        FakeCache([kubevirt_cr(bandwidthPerMigration="64Mi", parallelMigrationsPerCluster=1)])
    )
    assert config.bandwidth_bytes_per_second() == 64 * 2**20
    assert config.parallel_migrations_per_cluster() == 1


def test_hyperconverged_conversion_moves_the_fields_upstream_moves():
    beta = {
        "apiVersion": hco_api.V1BETA1,
        "kind": "HyperConverged",
        "metadata": {"name": "kubevirt-hyperconverged"},
        "spec": {
            "evictionStrategy": "LiveMigrate",
            "obsoleteCPUs": {"cpuModels": ["Penryn"], "minCPUModel": "Haswell"},
            "liveMigrationConfig": {"parallelMigrationsPerCluster": 5},
            "infra": {},
            "workloads": {"nodePlacement": {"nodeSelector": {"a": "b"}}},
            "featureGates": {"x": True},
        },
        "status": {"infrastructureHighlyAvailable": True},
    }
    v1 = hco_api.convert(beta, hco_api.V1)
    assert v1["apiVersion"] == hco_api.V1 and v1["status"] == beta["status"]
    assert v1["spec"] == {
        "virtualization": {
            "evictionStrategy": "LiveMigrate",
            "obsoleteCPUModels": ["Penryn"],
            "liveMigrationConfig": {"parallelMigrationsPerCluster": 5},
        },
        "deployment": {"nodePlacements": {"workload": {"nodeSelector": {"a": "b"}}}},
        "featureGates": {"x": True},
    }
    back = hco_api.convert(v1, hco_api.V1BETA1)
    expected = dict(beta["spec"], obsoleteCPUs={"cpuModels": ["Penryn"]})  # minCPUModel has no place in v1
    assert back["spec"] == expected
    review = hco_api.review(
        {"apiVersion": "apiextensions.k8s.io/v1", "request": {"uid": "u", "desiredAPIVersion": hco_api.V1,
                                                              "objects": [beta]}}
    )
    assert review["response"]["uid"] == "u" and review["response"]["result"]["status"] == "Success"
    assert review["response"]["convertedObjects"] == [v1]


# -- HCO ----------------------------------------------------------------------------------------


def test_hyperconverged_crd_stores_v1beta1_and_keeps_cpu_models_a_set():
    (crd,) = [d for d in crds.definitions() if d["metadata"]["name"] == "hyperconvergeds.hco.kubevirt.io"]
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert {n: (v["served"], v["storage"]) for n, v in versions.items()} == {"v1": (True, False), "v1beta1": (True, True)}

    def spec_schema(name):
        return versions[name]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    beta = spec_schema("v1beta1")["obsoleteCPUs"]["properties"]["cpuModels"]
    v1 = spec_schema("v1")["virtualization"]["properties"]["obsoleteCPUModels"]
    assert beta["x-kubernetes-list-type"] == v1["x-kubernetes-list-type"] == "set"


def test_hco_builds_the_whole_kubevirt_spec():
    base = hco.lab_kubevirt_spec()
    spec = {
        "evictionStrategy": "LiveMigrateIfPossible",
        "liveMigrationConfig": {"parallelMigrationsPerCluster": 8, "allowPostCopy": False, "network": None},
        "obsoleteCPUs": {"cpuModels": ["Penryn"], "minCPUModel": "Haswell"},
    }
    built = hco.kubevirt_spec(spec, {}, base)
    configuration = built["configuration"]
    assert configuration["evictionStrategy"] == "LiveMigrateIfPossible"
    # exactly the HyperConverged's live-migration fields: nothing else survives (bandwidthPerMigration)
    assert configuration["migrations"] == {"parallelMigrationsPerCluster": 8, "allowPostCopy": False}
    assert configuration["obsoleteCPUModels"]["Penryn"] is True and configuration["obsoleteCPUModels"]["486"] is True
    assert built["uninstallStrategy"] == "BlockUninstallIfWorkloadsExist"
    assert configuration["network"] == base["configuration"]["network"]
    assert "evictionStrategy" not in hco.kubevirt_spec({}, {}, base)["configuration"]
    assert base == hco.lab_kubevirt_spec()  # not modified

    gate = [{"op": "add", "path": "/spec/configuration/developerConfiguration/featureGates/-", "value": "HostDevices"},
            {"op": "replace", "path": "/spec/configuration/migrations/parallelMigrationsPerCluster", "value": 2}]
    patched = hco.kubevirt_spec(spec, {hco.KUBEVIRT_JSONPATCH_ANNOTATION: json.dumps(gate)}, base)
    assert patched["configuration"]["developerConfiguration"]["featureGates"] == ["HostDevices"]
    assert patched["configuration"]["migrations"]["parallelMigrationsPerCluster"] == 2
    for bad in ('[{"op": "add", "path": "/metadata/labels", "value": {}}]',
                '[{"op": "replace", "path": "/spec/nothing/there", "value": 1}]', "{", '{"op": "add"}'):
        with pytest.raises(ValueError, match="invalid jsonPatch in the kubevirt.kubevirt.io/jsonpatch annotation"):
            hco.kubevirt_spec(spec, {hco.KUBEVIRT_JSONPATCH_ANNOTATION: bad}, base)


def kubevirt_conditions(available="True", progressing="False", degraded="False", message="m"):
    return [{"type": t, "status": s, "reason": "R", "message": message}
            for t, s in (("Available", available), ("Progressing", progressing), ("Degraded", degraded))]


COMPLETED = ("ReconcileCompleted", "Reconcile completed successfully")


def test_hco_conditions_aggregate_the_kubevirt_cr_conditions():
    negative, ready = hco.component_conditions("KubeVirt", kubevirt_conditions())
    assert negative == {} and ready
    healthy = hco.aggregate(negative, False, "1.18.1")
    assert {t: c[0] for t, c in healthy.items()} == {
        "ReconcileComplete": "True", "Available": "True", "Progressing": "False", "Degraded": "False",
        "Upgradeable": "True"}
    assert hco.system_health(healthy, False) == "healthy"

    # Degraded (virt-operator's UpdateConditionsFailedError)
    negative, ready = hco.component_conditions("KubeVirt", kubevirt_conditions("False", "False", "True", "boom"))
    degraded = hco.aggregate(negative, False, "1.18.1")
    assert not ready and degraded == {
        "ReconcileComplete": ("True",) + COMPLETED,
        "Available": ("False", "KubeVirtNotAvailable", "KubeVirt is not available: boom"),
        "Progressing": ("False",) + COMPLETED,
        "Degraded": ("True", "KubeVirtDegraded", "KubeVirt is degraded: boom"),
        "Upgradeable": ("False", "HCODegraded", "HCO is not Upgradeable due to degraded components"),
    }
    assert hco.system_health(degraded, False) == hco.system_health(degraded, True) == "error"

    # Progressing: still Available, not Upgradeable
    negative, _ = hco.component_conditions("KubeVirt", kubevirt_conditions(progressing="True", message="rolling"))
    progressing = hco.aggregate(negative, False, "1.18.1")
    assert progressing["Available"] == ("True",) + COMPLETED and progressing["Degraded"] == ("False",) + COMPLETED
    assert progressing["Progressing"] == ("True", "KubeVirtProgressing", "KubeVirt is progressing: rolling")
    assert progressing["Upgradeable"] == ("False", "KubeVirtProgressing", "KubeVirt is progressing: rolling")
    assert hco.system_health(progressing, False) == "warning"

    # No conditions yet, or no Available one
    negative, ready = hco.component_conditions("KubeVirt", [])
    assert not ready and negative["Available"] == ("False", "KubeVirtConditions", "KubeVirt resource has no conditions")
    negative, ready = hco.component_conditions("KubeVirt", kubevirt_conditions()[1:])
    assert not ready and negative == {"Available": ("False", "KubeVirtNotAvailable", 'missing "Available" condition')}

    # Upgrading: Progressing whatever the components say, and health not a warning for it
    upgrading = hco.aggregate({}, True, "1.18.2")
    assert upgrading["Progressing"] == ("True", "HCOUpgrading", "HCO is now upgrading to version 1.18.2")
    assert upgrading["Available"][0] == "True" and hco.system_health(upgrading, True) == "healthy"


def test_hco_conditions_keep_their_transition_time_and_fill_unknown():
    before = hco.set_conditions([], hco.aggregate({}, False, "1.18.1"), 1, "t1")
    assert [c["type"] for c in before] == list(hco.CONDITION_TYPES)
    assert all(c["lastTransitionTime"] == "t1" and c["observedGeneration"] == 1 for c in before)
    after = hco.set_conditions(before + [{"type": "TaintedConfiguration", "status": "True"}],
                               {"ReconcileComplete": ("True",) + COMPLETED}, 2, "t2")
    by_type = {c["type"]: c for c in after}
    assert by_type["ReconcileComplete"]["lastTransitionTime"] == "t1"
    assert by_type["Available"] == {"type": "Available", "status": "Unknown", "reason": "StatusUnknown",
                                    "message": "Unknown Status", "observedGeneration": 2, "lastTransitionTime": "t2"}
    assert "TaintedConfiguration" in by_type


def test_baremetalhost_bmc_addresses_and_reboot_annotations_read_as_upstream():
    """baremetal-operator pkg/hardwareutils/bmc/redfish.go (address forms) and internal/controller/metal3.io/
    baremetalhost_controller.go hasRebootAnnotation (modes) as lab/standins/baremetal.py reads them."""
    assert baremetal.parse_address("redfish+https://10.0.0.1:8000/redfish/v1/Systems/abc") == (
        "https://10.0.0.1:8000", "/redfish/v1/Systems/abc")
    assert baremetal.parse_address("redfish://bmc.example/redfish/v1/Systems/1") == (
        "https://bmc.example", "/redfish/v1/Systems/1")
    assert baremetal.parse_address("redfish+http://bmc.example:8000") == ("http://bmc.example:8000", None)
    assert baremetal.parse_address("idrac-redfish://bmc.example/redfish/v1/") == ("https://bmc.example", None)
    for address, message in (("ipmi://10.0.0.1", "Unknown BMC type 'ipmi' for address ipmi://10.0.0.1"),
                             ("redfish+ftp://h/x", "Unknown BMC type 'redfish+ftp' for address redfish+ftp://h/x"),
                             ("", "Empty BMC address Missing BMC connection detail 'Address'")):
        with pytest.raises(baremetal.RegistrationError) as refused:
            baremetal.parse_address(address)
        assert str(refused.value) == message
    assert baremetal.reboot_request({}) == (False, "soft")
    assert baremetal.reboot_request({"reboot.metal3.io": ""}) == (True, "soft")
    assert baremetal.reboot_request({"reboot.metal3.io/a": "not json"}) == (True, "soft")
    assert baremetal.reboot_request({"reboot.metal3.io/a": '{"mode": "soft"}',
                                     "reboot.metal3.io/b": '{"mode": "hard"}'}) == (True, "hard")
    assert baremetal.reboot_request({"reboot.metal3.iox": ""}) == (False, "soft")
    # Without "force": true a reboot annotation counts only for a provisioned host.
    assert baremetal.reboot_request({"reboot.metal3.io": ""}, provisioned=False) == (False, "soft")
    assert baremetal.reboot_request({"reboot.metal3.io/x": '{"force": true}'}, provisioned=False) == (True, "soft")
