"""Fault tests: the lab tier that kills, restarts and breaks things during maintenance.

Every test here carries the ``faults`` marker (``make test-faults`` runs this directory;
``make test`` runs it after the other integration tests). Each fault injected is recorded
for the reliability table (tests/integration/reliability.py).
"""

import os
import sys
import uuid

import pytest
from kubernetes import client

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import runs  # noqa: E402  (tests/integration helpers)
import workloads  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
    config.addinivalue_line("markers", "faults: fault-injection tests on the lab (make test-faults)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def pair(k8s, lab):
    """Two workers (A, B) that the fault tests maintain; VMs are kept on them by node affinity.

    Afterwards both are taken out of maintenance (whatever a failed test left: cordon, taints,
    NodeMaintenance), so the next test starts from a clean cluster.
    """
    workers = workloads.node_names(k8s)
    assert len(workers) >= 3, "the fault tests need at least 3 workers (lab up --nodes 4)"
    yield workers[0], workers[1]
    for node in workers[:2]:
        runs.module(lab.kubeconfig, "node_maintenance", {"name": node, "state": "absent"})


@pytest.fixture
def fault_namespace(k8s):
    """A namespace of our own, deleted afterwards (waiting for its VMs to go, so they leave the nodes)."""
    core = client.CoreV1Api(k8s)
    name = "kvops-fault-%s" % uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": name}})
    workloads.wait_for_default_service_account(k8s, name)
    yield name
    workloads.delete_namespace(k8s, name)
