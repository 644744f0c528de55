"""node_labeller on the lab: KubeVirt's node labeller skips a node while the skip-node annotation
exists, whatever its value (pkg/virt-handler/node-labeller/node_labeller.go), so skip=false removes
the annotation, also one someone else set to "false"."""

from kubernetes import client

SKIP = "node-labeller.kubevirt.io/skip-node"


def annotation(k8s, node):
    return (client.CoreV1Api(k8s).read_node(node).metadata.annotations or {}).get(SKIP)


def test_skip_false_removes_an_annotation_whatever_its_value(lab, k8s, run_module):
    node = sorted(n.metadata.name for n in client.CoreV1Api(k8s).list_node(
        label_selector="node-role.kubernetes.io/worker").items)[-1]
    lab.kubectl("annotate", "node", node, "%s=false" % SKIP, "--overwrite")
    try:
        checked = run_module("node_labeller", {"name": node, "skip": False}, check=True, diff=True)
        assert checked["changed"] is True and annotation(k8s, node) == "false", checked
        removed = run_module("node_labeller", {"name": node, "skip": False})
        assert removed["changed"] is True and annotation(k8s, node) is None, removed
        assert run_module("node_labeller", {"name": node, "skip": False})["changed"] is False

        skipped = run_module("node_labeller", {"name": node, "skip": True})
        assert skipped["changed"] is True and annotation(k8s, node) == "true", skipped
        assert run_module("node_labeller", {"name": node, "skip": True})["changed"] is False
    finally:
        client.CoreV1Api(k8s).patch_node(node, {"metadata": {"annotations": {SKIP: None}}})
    assert annotation(k8s, node) is None
