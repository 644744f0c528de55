"""Reading large pod lists through the client's one pager: pages fetched ahead and transformed one at a
time, managedFields skipped, equal parts shared."""

from urllib.parse import parse_qs, urlsplit

from fake_apiserver import FakeResponse, fake_client

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.pages import continue_token
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.planning import snapshot as plan


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


class _PagingPool:
    """The HTTP pool of a real KubeClient: serves ``pods`` in pages of ``size``, as compact JSON
    (as the API server writes it) unless ``spaced``; with its keys sorted when ``sorted_keys``
    (as the API server writes custom resources)."""

    def __init__(self, pods, size, spaced=False, sorted_keys=False):
        self.pods, self.size, self.spaced, self.calls = pods, size, spaced, []
        self.sorted_keys = sorted_keys

    def request(self, method, url, body=None, headers=None, preload_content=True, timeout=None):
        assert method == "GET" and not preload_content, "lists are read as streams, page by page"
        params = dict((k, v[0]) for k, v in parse_qs(urlsplit(url).query).items())
        self.calls.append(params.get("continue"))
        start = int(params.get("continue") or 0)
        meta = {"resourceVersion": "42"}
        if start + self.size < len(self.pods):
            meta["continue"] = str(start + self.size)
            meta["remainingItemCount"] = len(self.pods) - start - self.size
        page = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": self.pods[start:start + self.size]}
        return FakeResponse(200, page, compact=not self.spaced, sort_keys=self.sorted_keys)


def _client(pool):
    client, _server = fake_client()
    client._pool = pool
    return client


def test_pages_are_followed_and_managed_fields_skipped():
    pods = [_pod(i, "n-%d" % (i % 3)) for i in range(7)]
    pods[4] = _pod(4, "n-1", managed=[{"manager": "odd", "fieldsV1": {"f:metadata": {"k:[x]": {}}}}])
    pool = _PagingPool(pods, 3)
    raw, rv = _client(pool).list("Pod", drop_managed_fields=True)
    assert rv == "42"
    assert pool.calls == [None, "3", "6"]
    assert [p["metadata"]["name"] for p in raw] == ["p-%d" % i for i in range(7)]
    # Skipped where they hold no brackets; pod 4's are kept whole rather than cut wrongly.
    assert ["managedFields" in p["metadata"] for p in raw] == [False] * 4 + [True] + [False] * 2
    for got, want in zip(raw, pods):
        want = dict(want, metadata=dict(want["metadata"]))
        if "managedFields" not in got["metadata"]:
            del want["metadata"]["managedFields"]
        assert got == want
    slim, _rv = _client(_PagingPool(pods, 3)).list("Pod", transform=plan._slim_pod, drop_managed_fields=True)
    assert slim == [plan._slim_pod(p) for p in pods]


def test_managed_fields_of_custom_resources_are_skipped_too():
    """VMIs and VMs come with sorted keys: managedFields between labels and name."""
    objects = [_pod(i, "n-1") for i in range(5)]
    objects[2] = _pod(2, "n-1", managed=[{"manager": "odd", "fieldsV1": {"f:status": {"v:[x]": {}}}}])
    pool = _PagingPool(objects, 2, sorted_keys=True)
    raw, _rv = _client(pool).list("VirtualMachineInstance", drop_managed_fields=True)
    assert ["managedFields" in o["metadata"] for o in raw] == [False, False, True, False, False]
    for got, want in zip(raw, objects):
        want = dict(want, metadata=dict(want["metadata"]))
        if "managedFields" not in got["metadata"]:
            del want["metadata"]["managedFields"]
        assert got == want
    kept, _rv = _client(_PagingPool(objects, 2, sorted_keys=True)).list("VirtualMachineInstance")
    assert kept == objects


def test_pages_are_transformed_one_at_a_time():
    """At most the page being transformed and the one fetched ahead are held undecoded."""
    pods = [_pod(i, "n-1") for i in range(10)]
    pool = _PagingPool(pods, 2)
    fetched_when = []

    def transform(pod):
        fetched_when.append((int(pod["metadata"]["name"].split("-")[1]) // 2, len(pool.calls)))
        return plan._slim_pod(pod)

    items, _rv = _client(pool).list("Pod", transform=transform)
    assert len(items) == 10 and pool.calls == [None, "2", "4", "6", "8"]
    assert all(fetched <= page + 2 for page, fetched in fetched_when), fetched_when


def test_pages_without_the_token_up_front_are_fetched_in_turn():
    pods = [_pod(i, "n-1") for i in range(5)]
    pool = _PagingPool(pods, 2, spaced=True)
    items, rv = _client(pool).list("Pod", label_selector="app=a")
    assert rv == "42" and pool.calls == [None, "2", "4"]
    assert [p["metadata"]["name"] for p in items] == ["p-%d" % i for i in range(5)]


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


def test_the_next_page_is_found_up_front_in_both_layouts():
    """The token a page is fetched ahead with: before the items of a built-in kind's list, after them in a custom
    resource's (sorted keys); none on the last page, whatever its layout."""
    pods = [_pod(i, "n-1") for i in range(5)]
    for sorted_keys in (False, True):
        pool = _PagingPool(pods, 2, sorted_keys=sorted_keys)
        first = pool.request("GET", "https://x/api/v1/pods?limit=2", preload_content=False)
        pool = _PagingPool(pods, 2, sorted_keys=sorted_keys)
        last = pool.request("GET", "https://x/api/v1/pods?limit=2&continue=4", preload_content=False)
        assert continue_token(first.read()) == "2", sorted_keys
        assert continue_token(last.read()) is None, sorted_keys
