"""Reading large pod lists: pages fetched ahead, managedFields skipped, equal parts shared."""

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils import plan


def _pod(i, node, managed=None):
    return {
        "metadata": {
            "name": "p-%d" % i, "namespace": "ns", "uid": "u-%d" % i, "resourceVersion": str(100 + i),
            "labels": {"app": "a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid",
                                 "controller": True}],
            "managedFields": managed if managed is not None else [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                             "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}}}],
        },
        "spec": {"nodeName": node,
                 "containers": [{"name": "app", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class _Response:
    def __init__(self, data):
        self.data = data

    def read(self):
        return self.data

    def release_conn(self):
        pass


class _PagingClient:
    """Serves ``pods`` in pages of ``size``, compact JSON as the API server writes it."""

    request_timeout = 5.0

    def __init__(self, pods, size):
        self.pods, self.size, self.calls = pods, size, []

    def request(self, method, path, params=None, obj=None, verb=None, stream=False, timeout=None):
        assert stream and method == "GET"
        self.calls.append(params.get("continue"))
        start = int(params.get("continue") or 0)
        meta = {"resourceVersion": "42"}
        if start + self.size < len(self.pods):
            meta["continue"] = str(start + self.size)
            meta["remainingItemCount"] = len(self.pods) - start - self.size
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                "items": self.pods[start:start + self.size]}
        return _Response(json.dumps(body, separators=(",", ":")).encode())


def test_pages_are_followed_and_managed_fields_skipped():
    pods = [_pod(i, "n-%d" % (i % 3)) for i in range(7)]
    pods[4] = _pod(4, "n-1", managed=[{"manager": "odd", "fieldsV1": {"f:metadata": {"k:[x]": {}}}}])
    client = _PagingClient(pods, 3)
    raw, rv = plan.list_pages(client, "Pod", drop_managed_fields=True)
    assert rv == "42"
    assert client.calls == [None, "3", "6"]
    assert [p["metadata"]["name"] for p in raw] == ["p-%d" % i for i in range(7)]
    # Skipped where they hold no brackets; pod 4's are kept whole rather than cut wrongly.
    assert ["managedFields" in p["metadata"] for p in raw] == [False] * 4 + [True] + [False] * 2
    for got, want in zip(raw, pods):
        want = dict(want, metadata=dict(want["metadata"]))
        if "managedFields" not in got["metadata"]:
            del want["metadata"]["managedFields"]
        assert got == want
    slim, _rv = plan.list_pages(_PagingClient(pods, 3), "Pod", transform=plan._slim_pod, drop_managed_fields=True)
    assert slim == [plan._slim_pod(p) for p in pods]


def test_equal_parts_of_pods_are_kept_once():
    share = plan._Shared()
    a, b, c = (plan._slim_pod(p, share) for p in (_pod(1, "n-1"), _pod(2, "n-1"), _pod(3, "n-2")))
    assert a["spec"] is b["spec"] and a["spec"] is not c["spec"]
    assert a["metadata"]["labels"] is c["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"] is c["metadata"]["ownerReferences"]
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert a == plan._slim_pod(_pod(1, "n-1"))
    requests = plan._requests(a)
    assert requests is plan._requests(b)
    assert abs(requests["cpu"] - 0.01) < 1e-9 and requests["memory"] == 16 * 2 ** 20 and requests["pods"] == 1.0
