"""Unit checks of the lab's stand-ins beside the real KubeVirt; no cluster needed.

With the real virt-controller and virt-api, the VM, VMI, migration, eviction and
subresource decisions are KubeVirt's own, checked end to end by test_contract.py. What
remains the lab's is checked here with the exact input that would break it: the
stand-ins' plumbing (work queue, cluster configuration), the CRDs they install (HCO,
NodeMaintenance in both groups); the virt-handler stand-in's rules are in
test_handler_logic.py.
"""

import time

from lab.standins import crds, hco_api
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
        "baremetalhosts.metal3.io",
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
