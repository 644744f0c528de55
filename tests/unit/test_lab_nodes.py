"""lab/nodes.py ``ensure`` (what ``lab up`` does about the planned nodes), against a stubbed API."""

import json
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from lab import nodes


class FakeCore:
    """Lists ``existing`` nodes; creating one of ``registered_meanwhile`` answers 409, as when the kubelet of its
    booting machine registered it since the list."""

    def __init__(self, existing=(), registered_meanwhile=(), refuse=None):
        self.existing = list(existing)
        self.registered_meanwhile = set(registered_meanwhile)
        self.refuse = refuse
        self.created = []

    def list_node(self):
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n)) for n in self.existing])

    def read_namespaced_config_map(self, _name, _namespace):
        return SimpleNamespace(data={})

    def create_node(self, body, _preload_content=True):
        name = body["metadata"]["name"]
        if name in self.registered_meanwhile:
            raise ApiException(status=409, reason="Conflict")
        if self.refuse:
            raise ApiException(status=self.refuse, reason="refused")
        self.created.append(name)
        return SimpleNamespace(data=json.dumps({"status": body["status"]}))


@pytest.fixture
def core(monkeypatch):
    def use(fake):
        monkeypatch.setattr(nodes.client, "CoreV1Api", lambda _api: fake)
        monkeypatch.setattr(nodes, "mark_dead", lambda *_args: None)
        return fake

    return use


def test_a_node_its_kubelet_registered_since_the_list_counts_as_there(core):
    fake = core(FakeCore(existing=["lab-cp-1"], registered_meanwhile=["lab-worker-2"]))
    planned = nodes.plan(1, 2)
    assert nodes.ensure(object(), planned, "v1.36.3") == ["lab-worker-1", "lab-worker-2"]
    assert fake.created == ["lab-worker-1"]


def test_any_other_refusal_is_an_error(core):
    core(FakeCore(refuse=403))
    with pytest.raises(ApiException):
        nodes.ensure(object(), nodes.plan(1, 1), "v1.36.3")
