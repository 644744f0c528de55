"""The credentials' token expires and is revoked in the middle of a rolling run.

The run authenticates through an exec credential plugin that announces a 5 s expiry, so every
module renews its token while it works. Once the first node is cordoned (its drain under way),
the plugin starts handing out another identity's token and the identity behind the first one
is deleted (its token refused from then on), as a rotation or a short-lived cloud token would
do. The run finishes both nodes with the new token: no PodDisruptionBudget broken, no VM lost,
both nodes back in service, the lock released, and neither token in the output.
"""

import os

from kubernetes import client

from credentials import credential_plugin, lab_context, requests_by, rotate, write
import identities
import reliability
import runs
import safety
import workloads
from lab.wait import wait_for

PLAYBOOK = os.path.join(runs.REPO, "playbooks", "rolling_maintenance.yml")
LOCK = "kvops-fault-token"
TTL = 5  # seconds the plugin announces for each token


def test_token_rotated_during_a_rolling_run(k8s, lab, pair, fault_namespace, restore_nodes, tmp_path):
    a, b = pair
    figure = reliability.fault("the credentials' token expires and is revoked during a rolling run",
                               group="control plane")
    first = identities.create_identity(k8s, lab.kubeconfig, tmp_path, cluster_roles=("cluster-admin",),
                                       prefix="kvops-rot-a")
    second = identities.create_identity(k8s, lab.kubeconfig, tmp_path, cluster_roles=("cluster-admin",),
                                        prefix="kvops-rot-b")
    core = client.CoreV1Api(k8s)
    names = ["rot-0", "rot-1"]
    workloads.vms_start_on(k8s, fault_namespace, (a, b), names, memory="1Gi", guarded=True)
    vm_check = safety.VmSafety(k8s, [fault_namespace])

    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    counter = tmp_path / "invocations"
    token_file, user = credential_plugin(plugin_dir, first.token, counter, ttl=TTL)
    kubeconfig = write(tmp_path / "kubeconfig", dict(lab_context(lab), users=[user]))
    extra = runs.rolling_vars([a, b], LOCK, tmp_path)
    with safety.PdbWatcher(k8s) as watcher:
        run = runs.start_playbook(kubeconfig, PLAYBOOK, extra_vars=extra)
        try:
            wait_for(lambda: core.read_node(a).spec.unschedulable or not run.running(), 300,
                     "the run to cordon %s" % a)
            assert run.running(), "the run ended before draining %s: %s" % (a, run.output()[-3000:])
            rotate(token_file, second.token)
            identities.delete_identity(k8s, first, until_refused=True)  # the first token is refused from now on
            rc = run.wait(900)
            output = run.output()
            results = run.results()
        finally:
            run.close()
            identities.delete_identity(k8s, first)
            identities.delete_identity(k8s, second)
            runs.module(lab.kubeconfig, "cluster_lock", {"name": LOCK, "state": "absent", "force": True})
    report = vm_check.verify(timeout=180)
    figure.note(pdb_violations=len(watcher.violations), vms_lost=len(report.lost),
                plugin_calls=len(counter.read_text()))
    assert "Traceback" not in output, output[-3000:]
    assert rc == 0, output[-3000:]
    assert requests_by(lab, second.username), "no request was made with the second token"
    assert requests_by(lab, first.username), "no request was made with the first token"
    for token in (first.token, second.token):
        assert token not in output and token not in str(results), "a token reached the run's output"
    for node in (a, b):
        assert not core.read_node(node).spec.unschedulable, "%s was left cordoned" % node
    assert watcher.violations == []
    assert report.problems == [], report
    figure.passed()
