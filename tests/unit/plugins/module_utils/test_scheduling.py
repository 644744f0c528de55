"""Label selectors, tolerations, node affinity and quantities, as the scheduler reads them."""

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.label_selectors import (
    parse_label_selector,
    requirements_match,
    selector_matches,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import parse_quantity, pod_requests
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.scheduling import (
    node_affinity_matches,
    tolerates,
    why_not_on_node,
)


@pytest.mark.parametrize("selector,labels,expected", [
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "web"}, True),
    ("app!=web", {"app": "web"}, False),
    ("app!=web", {}, True),
    ("tier in (db, cache),env notin (test)", {"tier": "db", "env": "prod"}, True),
    ("tier in (db,cache)", {"tier": "web"}, False),
    ("node-role.kubernetes.io/worker", {"node-role.kubernetes.io/worker": ""}, True),
    ("!node-role.kubernetes.io/control-plane", {"node-role.kubernetes.io/control-plane": ""}, False),
    ("", {"anything": "x"}, True),
])
def test_label_selector(selector, labels, expected):
    assert requirements_match(parse_label_selector(selector), labels) is expected


@pytest.mark.parametrize("selector", ["app in ()", "=web", "a,,b", "tier in (db", "bad key=x", "app=web!"])
def test_bad_label_selector_is_one_sentence(selector):
    with pytest.raises(InvalidInputError) as err:
        parse_label_selector(selector, "pod_selector")
    assert err.value.msg.startswith("Option pod_selector has an invalid label selector term")
    assert err.value.msg.endswith(".")


def test_structured_selector():
    sel = {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}
    assert selector_matches(sel, {"app": "web", "tier": "a"})
    assert not selector_matches(sel, {"app": "web", "tier": "b"})
    assert selector_matches({}, {"x": "y"})
    assert not selector_matches(None, {"x": "y"})


@pytest.mark.parametrize("toleration,taint,expected", [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Equal", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"operator": "Exists"}, {"key": "any", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
])
def test_tolerations(toleration, taint, expected):
    assert tolerates([toleration], taint) is expected


def test_node_affinity_and_why_not():
    node = {"metadata": {"name": "n1", "labels": {"disk": "ssd", "gen": "5"}}, "spec": {}}
    required = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]},
        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]},
    ]}}}
    assert node_affinity_matches(required, node)
    excluded = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}}}
    assert not node_affinity_matches(excluded, node)
    assert why_not_on_node({"nodeSelector": {"disk": "nvme"}}, node) == "nodeSelector disk=nvme not matched"
    tainted = dict(node, spec={"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]})
    assert why_not_on_node({}, tainted) == "taint gpu=yes:NoSchedule not tolerated"
    assert why_not_on_node({}, dict(node, spec={"unschedulable": True})) == "cordoned"
    assert why_not_on_node({"affinity": required}, node) is None


@pytest.mark.parametrize("text,value", [
    ("250m", 0.25), ("2", 2.0), ("1.5Gi", 1.5 * 2 ** 30), ("128974848", 128974848.0), ("129M", 129e6),
    ("1e3", 1000.0), (None, 0.0), ("garbage", 0.0), (3, 3.0),
])
def test_quantities(text, value):
    assert parse_quantity(text) == pytest.approx(value)


def test_pod_requests_sum_containers_max_init_and_overhead():
    spec = {"containers": [{"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "200m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"memory": "100Mi"}}
    need = pod_requests(spec)
    assert need["cpu"] == pytest.approx(2.0)
    assert need["memory"] == pytest.approx(2 ** 30 + 100 * 2 ** 20)
    assert need["pods"] == 1


def test_pod_requests_count_sidecars_with_the_containers():
    # A sidecar (restartPolicy Always) keeps running: it adds to the containers, and an init container
    # after it runs beside it. containers 1 CPU + sidecar 500m = 1.5; init after the sidecar 2 + 0.5 = 2.5.
    spec = {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}, "restartPolicy": "Always"},
                               {"resources": {"requests": {"cpu": "2"}}}]}
    need = pod_requests(spec)
    assert need["cpu"] == pytest.approx(2.5)
    assert need["memory"] == pytest.approx(2 ** 30 + 256 * 2 ** 20)
    slim = snapshot._slim_pod(  # pylint: disable=protected-access
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": {}})
    assert pod_requests(slim["spec"]) == need
