"""Unit checks of the KubeVirt simulator's decisions; no cluster needed.

The contract tests (test_contract.py) check the same behaviour end to end on the
lab; these pin down the decision tables themselves so a regression is reported
with the exact input that broke, in well under a second.
"""

import time

import pytest

from lab.kubevirt_sim import crds, hco_api
from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim.admission import Admission
from lab.kubevirt_sim.cluster_config import ClusterConfig, effective_eviction_strategy
from lab.kubevirt_sim.launcher_pod import launcher_pod
from lab.kubevirt_sim.migratability import live_migratable_condition
from lab.kubevirt_sim.pdb import pdb_required
from lab.kubevirt_sim.vm_actions import ActionError, VMActions
from lab.kubevirt_sim.vm_controller import VMController, run_strategy
from lab.kubevirt_sim.workqueue import WorkQueue

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


class FakeKube:
    """Records writes; serves reads from a dict keyed by (plural, namespace, name)."""

    def __init__(self, objects=()):
        self.objects = {}
        for plural, obj in objects:
            self.objects[(plural, obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
        self.writes = []

    def get_or_none(self, res, name, namespace=None):
        return self.objects.get((res.plural, namespace, name))

    def get(self, res, name, namespace=None, subresource=None):
        obj = self.get_or_none(res, name, namespace)
        if obj is None:
            raise k.ApiError(404, '{"reason": "NotFound", "message": "not found"}')
        return obj

    def patch(self, res, name, patch, namespace=None, subresource=None, **kwargs):
        self.writes.append(("patch", res.plural, subresource, patch))

    def create(self, res, obj, **kwargs):
        self.writes.append(("create", res.plural, None, obj))
        return obj


def kubevirt_cr(eviction_strategy=None, **migrations):
    configuration = {"migrations": migrations}
    if eviction_strategy:
        configuration["evictionStrategy"] = eviction_strategy
    return {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": configuration},
    }


def vmi(name="v", eviction=None, migratable=True, node="node-a", **spec):
    obj = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {}, "annotations": {}},
        "spec": dict(spec),
        "status": {
            "phase": "Running",
            "nodeName": node,
            "conditions": [{"type": "LiveMigratable", "status": "True" if migratable else "False"}],
        },
    }
    if eviction:
        obj["spec"]["evictionStrategy"] = eviction
    return obj


def pvc(name, mode):
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"accessModes": [mode]}}


# -- LiveMigratable -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, claims, expected",
    [
        ({}, [], ("True", None)),
        (
            {"volumes": [{"name": "r", "persistentVolumeClaim": {"claimName": "d"}}]},
            [pvc("d", "ReadWriteMany")],
            ("True", None),
        ),
        (
            {"volumes": [{"name": "r", "persistentVolumeClaim": {"claimName": "d"}}]},
            [pvc("d", "ReadWriteOnce")],
            ("False", "DisksNotLiveMigratable"),
        ),
        (
            {"volumes": [{"name": "r", "dataVolume": {"name": "d"}}]},
            [pvc("d", "ReadWriteOnce")],
            ("False", "DisksNotLiveMigratable"),
        ),
        (
            {"volumes": [{"name": "r", "persistentVolumeClaim": {"claimName": "gone"}}]},
            [],
            ("False", "DisksNotLiveMigratable"),
        ),
        (
            {
                "networks": [{"name": "n", "pod": {}}],
                "domain": {"devices": {"interfaces": [{"name": "n", "bridge": {}}]}},
            },
            [],
            ("False", "InterfaceNotLiveMigratable"),
        ),
        (
            {
                "networks": [{"name": "n", "pod": {}}],
                "domain": {"devices": {"interfaces": [{"name": "n", "masquerade": {}}]}},
            },
            [],
            ("True", None),
        ),
        (
            {"domain": {"devices": {"hostDevices": [{"name": "x"}]}}},
            [],
            ("False", "HostDeviceNotLiveMigratable"),
        ),
        ({"domain": {"devices": {"gpus": [{"name": "x"}]}}}, [], ("False", "HostDeviceNotLiveMigratable")),
        ({"domain": {"cpu": {"model": "host-passthrough"}}}, [], ("False", "CPUModeLiveMigratable")),
        (
            {"domain": {"devices": {"filesystems": [{"name": "f", "virtiofs": {}}]}}},
            [],
            ("False", "VirtIOFSNotLiveMigratable"),
        ),
        ({"domain": {"launchSecurity": {"sev": {}}}}, [], ("False", "SEVNotLiveMigratable")),
    ],
)
def test_live_migratable_condition(spec, claims, expected):
    claims_by_name = {c["metadata"]["name"]: c for c in claims}
    c = live_migratable_condition(vmi(**spec), lambda ns, name: claims_by_name.get(name))
    assert (c["status"], c.get("reason")) == expected


# -- eviction strategy, PDB and the eviction webhook -------------------------------------------------


@pytest.mark.parametrize(
    "own, cluster, expected",
    [
        ("None", "LiveMigrate", "None"),
        (None, "LiveMigrate", "LiveMigrate"),
        (None, None, None),
        ("External", None, "External"),
    ],
)
def test_effective_eviction_strategy(own, cluster, expected):
    config = ClusterConfig(FakeCache([kubevirt_cr(cluster)]))
    assert effective_eviction_strategy(vmi(eviction=own), config) == expected


# The behaviour page's eviction table: strategy, migratable -> webhook, per-VMI PDB.
EVICTION_TABLE = [
    ("LiveMigrate", True, "mark", True),
    ("LiveMigrate", False, "deny", True),
    ("LiveMigrateIfPossible", True, "mark", True),
    ("LiveMigrateIfPossible", False, "allow", False),
    ("External", True, "mark", True),
    ("External", False, "mark", True),
    ("None", True, "allow", False),
    ("None", False, "allow", False),
    (None, True, "allow", False),
]


@pytest.mark.parametrize("strategy, migratable, webhook, budget", EVICTION_TABLE)
def test_eviction_table(strategy, migratable, webhook, budget):
    target = vmi(eviction=strategy, migratable=migratable)
    config = ClusterConfig(FakeCache([kubevirt_cr()]))
    assert pdb_required(target, config, migratable) is budget

    pod = {
        "metadata": {
            "name": "virt-launcher-v-abcde",
            "namespace": "ns",
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {"kubevirt.io/domain": "v"},
        },
        "spec": {"nodeName": "node-a"},
    }

    class Sim:
        kube = FakeKube([("pods", pod)])
        vmis = FakeCache([target])

    Sim.config = config
    response = Admission(Sim).eviction({"uid": "1", "namespace": "ns", "name": pod["metadata"]["name"]})
    marks = [w for w in Sim.kube.writes if w[1] == "virtualmachineinstances"]
    if webhook == "deny":
        assert response["allowed"] is False and response["status"]["code"] == 429
        assert "not live-migratable" in response["status"]["message"]
    else:
        assert response["allowed"] is True
    if webhook == "mark":
        assert marks == [
            ("patch", "virtualmachineinstances", "status", {"status": {"evacuationNodeName": "node-a"}})
        ]
    else:
        assert marks == []


# -- the virt-launcher pod ----------------------------------------------------------------------


def test_launcher_pod_and_migration_target():
    source = vmi(
        nodeSelector={"disk": "ssd"},
        domain={"cpu": {"cores": 2, "sockets": 2}, "memory": {"guest": "4Gi"}},
        volumes=[{"name": "root", "persistentVolumeClaim": {"claimName": "d"}}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        },
    )
    source["metadata"]["ownerReferences"] = [{"kind": "VirtualMachine", "name": "vm-v", "uid": "x"}]
    pod = launcher_pod(source)
    assert pod["metadata"]["generateName"] == "virt-launcher-v-"
    assert pod["metadata"]["labels"] == {
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": "uid-v",
        "vm.kubevirt.io/name": "vm-v",
    }
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "kubevirt.io/schedulable": "true"}
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"memory": "4Gi", "cpu": "400m"}
    assert {"name": "vol-root", "persistentVolumeClaim": {"claimName": "d"}} in pod["spec"]["volumes"]
    assert any("emptyDir" in v for v in pod["spec"]["volumes"])
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-v"

    migration = {"metadata": {"uid": "mig-1"}, "spec": {"addedNodeSelector": {"rack": "2"}}}
    target = launcher_pod(source, migration=migration, source_node="node-a")
    assert target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == "mig-1"
    assert target["spec"]["nodeSelector"]["rack"] == "2"
    terms = target["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 2
    for term in terms:  # ORed terms: the exclusion must be in each
        assert {"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]} in term["matchFields"]
    # the source VMI's own spec is not modified
    assert "matchFields" not in str(source["spec"]["affinity"])


# -- run strategies and actions -----------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"runStrategy": "Manual"}, "Manual"),
        ({"running": True}, "Always"),
        ({"running": False}, "Halted"),
        ({}, "Halted"),
    ],
)
def test_run_strategy(spec, expected):
    assert run_strategy({"spec": spec}) == expected


def test_state_change_requests_are_trimmed_once_done():
    running = vmi()
    trim = VMController._trim_requests
    stop_start = [{"action": "Stop", "uid": "uid-v"}, {"action": "Start"}]
    assert trim(stop_start, running) == stop_start  # the VMI to stop still exists
    assert trim(stop_start, None) == [{"action": "Start"}]  # stopped; the start is still to do
    assert trim([{"action": "Start"}], None) == [{"action": "Start"}]
    assert trim([{"action": "Start"}], running) == []
    assert trim([{"action": "Stop", "uid": "older"}], running) == []


def vm_obj(strategy=None, running=None, requests=None):
    spec = {}
    if strategy:
        spec["runStrategy"] = strategy
    if running is not None:
        spec["running"] = running
    return {
        "metadata": {"name": "v", "namespace": "ns", "resourceVersion": "7"},
        "spec": spec,
        "status": {"stateChangeRequests": requests or []},
    }


ACTION_CASES = [
    # before, vmi phase, action -> expected write (or conflict)
    ("Always", "Running", "start", "conflict"),
    ("Always", "Running", "stop", {"spec": {"runStrategy": "Halted"}}),
    ("Always", "Running", "restart", [{"action": "Stop", "uid": "uid-v"}, {"action": "Start"}]),
    ("RerunOnFailure", "Running", "start", "conflict"),
    ("RerunOnFailure", "Running", "stop", {"spec": {"runStrategy": "Halted"}}),
    ("RerunOnFailure", "Running", "restart", [{"action": "Stop", "uid": "uid-v"}, {"action": "Start"}]),
    ("Manual", None, "start", [{"action": "Start"}]),
    ("Manual", "Failed", "start", [{"action": "Stop", "uid": "uid-v"}, {"action": "Start"}]),
    ("Manual", "Running", "stop", [{"action": "Stop", "uid": "uid-v"}]),
    ("Manual", "Running", "restart", [{"action": "Stop", "uid": "uid-v"}, {"action": "Start"}]),
    ("Halted", None, "start", {"spec": {"runStrategy": "Always"}}),
    ("Halted", None, "stop", "conflict"),
    ("Halted", None, "restart", "conflict"),
    ("Once", "Running", "restart", "conflict"),
]


@pytest.mark.parametrize("before, phase, action, expected", ACTION_CASES)
def test_vm_actions(before, phase, action, expected):
    objects = [("virtualmachines", vm_obj(before))]
    if phase:
        instance = vmi()
        instance["status"]["phase"] = phase
        objects.append(("virtualmachineinstances", instance))
    kube = FakeKube(objects)
    if expected == "conflict":
        with pytest.raises(ActionError) as e:
            VMActions(kube).run(action, "ns", "v", {})
        assert e.value.code == 409
        assert kube.writes == []
        return
    VMActions(kube).run(action, "ns", "v", {})
    ((verb, plural, subresource, patch),) = kube.writes
    assert patch["metadata"]["resourceVersion"] == "7"  # never overwrites a concurrent change
    if isinstance(expected, list):
        assert subresource == "status" and patch["status"]["stateChangeRequests"] == expected
    else:
        assert subresource is None and patch["spec"] == expected["spec"]


def test_actions_keep_the_deprecated_running_field():
    kube = FakeKube([("virtualmachines", vm_obj(running=False))])
    VMActions(kube).run("start", "ns", "v", {})
    assert kube.writes[0][3]["spec"] == {"running": True}


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
    definitions = crds.definitions()
    names = {d["metadata"]["name"] for d in definitions}
    assert {
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "virtualmachineinstancemigrations.kubevirt.io",
        "kubevirts.kubevirt.io",
        "hyperconvergeds.hco.kubevirt.io",
        "nodemaintenances.nodemaintenance.medik8s.io",
        "nodemaintenances.nodemaintenance.kubevirt.io",
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
