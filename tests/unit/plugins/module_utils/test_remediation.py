"""Which health checks cover a node."""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.node_maintenance import remediation


class FakeClient:
    def __init__(self, objects):
        self.objects = objects

    def kind_served(self, kind):
        return kind in self.objects

    def list(self, kind):
        return list(self.objects[kind]), "1"


def _obj(name, namespace=None, labels=None, **rest):
    meta = {"name": name, "labels": labels or {}}
    if namespace:
        meta["namespace"] = namespace
    return dict(rest, metadata=meta)


def _machine(name, node, namespace="machines", labels=None):
    return _obj(name, namespace, labels, status={"nodeRef": {"name": node}})


def _check(name, namespace="machines", selector=None, cluster=None):
    spec = {"selector": selector or {}}
    if cluster:
        spec["clusterName"] = cluster
    return _obj(name, namespace, spec=spec)


NODE = _obj("worker-1", labels={"role": "worker"})
CLUSTER = "cluster.x-k8s.io/cluster-name"


def test_covering_checks_by_namespace_cluster_and_selector():
    client = FakeClient({
        "NodeHealthCheck": [_obj("nhc-workers", spec={"selector": {"matchLabels": {"role": "worker"}}}),
                            _obj("nhc-other", spec={"selector": {"matchLabels": {"role": "infra"}}})],
        "Machine": [_machine("m-1", "worker-1", labels={"pool": "a"}),
                    _machine("m-1b", "worker-1", labels={"pool": "a"}),
                    _machine("m-2", "worker-2", labels={"pool": "b"})],
        "MachineHealthCheck": [_check("mhc-a", selector={"matchLabels": {"pool": "a"}}),
                               _check("mhc-b", selector={"matchLabels": {"pool": "b"}}),
                               _check("mhc-elsewhere", namespace="other", selector={"matchLabels": {"pool": "a"}})],
        "CapiMachine": [_machine("c-1", "worker-1", labels={CLUSTER: "east"})],
        "CapiMachineHealthCheck": [_check("capi-east", cluster="east"), _check("capi-west", cluster="west")],
    })
    found = [(kind, check["metadata"]["name"]) for kind, check in remediation.covering(client, NODE)]
    assert found == [("NodeHealthCheck", "nhc-workers"), ("MachineHealthCheck", "mhc-a"),
                     ("CapiMachineHealthCheck", "capi-east")]


def test_no_machine_of_the_node_means_no_machine_health_check():
    client = FakeClient({"Machine": [_machine("m-2", "worker-2")], "MachineHealthCheck": [_check("mhc")]})
    assert remediation.covering(client, NODE) == []
