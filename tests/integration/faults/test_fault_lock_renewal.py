"""The API server goes away while the cluster lock is renewed (between two nodes of a rolling run):
the renewal waits it out (the client's retry budget) and the lock stays with its holder; never
a traceback, never a lock lost or taken by nobody."""

import threading

from kubernetes import client

import reliability
import runs
from lab.wait import wait_for

LOCK = "kvops-fault-renewal"
HOLDER = "rolling_maintenance@fault-renewal"
DOWN_FOR = 8  # seconds without an API server, well inside the client's 30 s retry budget


def lease(k8s):
    return client.CoordinationV1Api(k8s).read_namespaced_lease(LOCK, "kube-system")


def test_apiserver_restart_during_the_lock_renewal(k8s, lab):
    figure = reliability.fault("API server restarted during the lock renewal", group="control plane")
    args = {"name": LOCK, "holder": HOLDER, "ttl": 300, "purpose": "fault test"}
    taken = runs.module(lab.kubeconfig, "cluster_lock", args).result()
    assert taken.get("acquired"), taken
    before = lease(k8s).spec.renew_time
    restart = threading.Thread(target=lab.restart_apiserver, kwargs={"down_for": DOWN_FOR})
    try:
        restart.start()
        wait_for(lambda: not lab.apiserver_up(), 60, "the API server to stop")
        # The renewal starts while no API server listens.
        run = runs.module(lab.kubeconfig, "cluster_lock", args)
        restart.join(180)
        assert not restart.is_alive(), "the API server did not come back"
        renewed = run.result()
        assert "Traceback" not in run.output, run.output[-3000:]
        assert not renewed.get("failed"), renewed.get("msg")
        assert renewed.get("acquired") and renewed.get("holder") == HOLDER, renewed
        after = lease(k8s)
        assert after.spec.holder_identity == HOLDER and after.spec.renew_time > before
        figure.note(pdb_violations=0, vms_lost=0)
    finally:
        restart.join(180)
        runs.module(lab.kubeconfig, "cluster_lock", dict(args, state="absent")).result()
    assert not lease(k8s).spec.holder_identity, "the lock was not released"
    figure.passed()
