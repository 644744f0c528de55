"""A drain meets a pod whose namespace is being deleted.

The API server refuses any eviction there with 403 "unable to create new content in
namespace ... because it is being terminated" (cause NamespaceTerminating): the eviction
would create an object in that namespace. The namespace controller deletes the pod soon
anyway. kubectl drain waits for such a pod to go instead of failing; so must the drain,
and it must not call it "permission denied".
"""

import threading

import pytest

from drain_cluster import cluster, pod

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain import engine as drain
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.engine import Drainer
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.pods import DrainOptions
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.drain.progress import Progress
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import Deadline

TERMINATING = ('pods "web-a" is forbidden: unable to create new content in namespace ns1 because it is being '
               'terminated')


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(drain, "BACKOFF_START", 0.05)
    monkeypatch.setattr(drain, "BACKOFF_CAP", 0.4)


def test_pod_of_a_terminating_namespace_is_waited_for_not_fatal():
    client, server = cluster()
    server.add("Pod", pod("web-a"))
    server.add("Pod", pod("web-b", namespace="ns2"))
    server.webhook = lambda p: (403, TERMINATING) if p["metadata"]["namespace"] == "ns1" else None
    # The namespace controller deletes the pod a moment later.
    threading.Timer(0.5, lambda: client.delete("Pod", "web-a", "ns1")).start()
    engine = Drainer(client, "worker-1", DrainOptions(), Deadline(10), progress=Progress("worker-1", log=lambda _l: None))
    result = engine.run(wait=True)
    assert result.fatal is None, getattr(result.fatal, "msg", result.fatal)
    assert result.done and server.pods_on("worker-1") == []
