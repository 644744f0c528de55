"""Secrets never leave: every module, on its success and its failure path, run with -vvv and
each way of authenticating; the token and the client key must appear in no result, no
failure message and nowhere in the terminal output. No key material is left on disk.
"""

import base64
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from kubernetes import client

import identities
import runs
import workloads
from lab.certs import Pki, _ensure_ca

WORKERS = 3


def secret_fragments(token, key_pem):
    """What must not appear: the token, its signature, the key (PEM, base64, any line of it)."""
    fragments = [token, token.rsplit(".", 1)[-1]]
    fragments += [key_pem.strip(), base64.b64encode(key_pem.encode()).decode()]
    body = [line for line in key_pem.splitlines() if line and not line.startswith("-----")]
    fragments += [line for line in body if len(line) >= 16]
    fragments.append("".join(body))
    return [f for f in fragments if f]


@pytest.fixture(scope="module")
def auth_modes(lab, k8s, operator_identity, tmp_path_factory):
    """name -> (kubeconfig or None, extra module args, extra environment)."""
    directory = tmp_path_factory.mktemp("auth")
    server, ca_data = identities.lab_cluster(lab.kubeconfig)
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(base64.b64decode(ca_data))
    key_pem = identities.lab_client_key(lab.kubeconfig)
    with open(lab.kubeconfig) as handle:
        config = yaml.safe_load(handle)
    user = config["users"][0]["user"]
    cert_file = directory / "client.crt"
    cert_file.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key_file = directory / "client.key"
    key_file.write_text(key_pem)
    os.chmod(str(key_file), 0o600)
    token = operator_identity.token
    wrong = Pki(directory / "wrong-ca")
    wrong.directory.mkdir()
    _ensure_ca(wrong, "ca", "not-the-lab-ca")
    return {
        "secrets": secret_fragments(token, key_pem),
        "wrong_ca": str(wrong.ca_cert),
        "modes": {
            "api_key": (None, {"host": server, "api_key": token, "ca_cert": str(ca_file)}, {}),
            "token_kubeconfig": (operator_identity.kubeconfig, {}, {}),
            "token_environment": (None, {}, {"K8S_AUTH_HOST": server, "K8S_AUTH_API_KEY": token,
                                             "K8S_AUTH_SSL_CA_CERT": str(ca_file)}),
            "client_cert_kubeconfig": (lab.kubeconfig, {}, {}),
            "client_key_files": (None, {"host": server, "ca_cert": str(ca_file), "client_cert": str(cert_file),
                                        "client_key": str(key_file)}, {}),
        },
    }


def module_cases(namespace, node):
    """(case name, module, args, check mode, expect failure)."""
    return [
        ("node_maintenance enter", "node_maintenance", {"name": node, "method": "drain"}, False, False),
        ("node_maintenance leave", "node_maintenance", {"name": node, "state": "absent", "method": "drain"},
         False, False),
        ("node_maintenance unknown node", "node_maintenance", {"name": "no-such-node"}, False, True),
        ("node_maintenance check", "node_maintenance", {"name": node}, True, False),
        ("node_maintenance_info", "node_maintenance_info", {"name": node}, False, False),
        ("node_maintenance_info unknown node", "node_maintenance_info", {"name": "no-such-node"}, False, True),
        ("node_decommission gone node", "node_decommission", {"name": "no-such-node"}, False, False),
        ("node_decommission control plane", "node_decommission", {"name": "lab-cp-1"}, True, True),
        ("vm_eviction_strategy", "vm_eviction_strategy",
         {"name": "secret-vm", "namespace": namespace, "strategy": "LiveMigrate"}, False, False),
        ("vm_eviction_strategy unknown VM", "vm_eviction_strategy",
         {"name": "no-such-vm", "namespace": namespace, "strategy": "LiveMigrate"}, False, True),
        ("vm_run_strategy", "vm_run_strategy",
         {"name": "secret-vm", "namespace": namespace, "run_strategy": "Always"}, False, False),
        ("vm_run_strategy unknown namespace", "vm_run_strategy",
         {"namespace": "no-such-namespace", "run_strategy": "Always"}, False, True),
        ("hco_obsolete_cpus", "hco_obsolete_cpus", {"cpu_models": []}, False, False),
        ("hco_obsolete_cpus unknown HCO", "hco_obsolete_cpus", {"name": "no-such-hco", "cpu_models": ["486"]},
         False, True),
        ("node_labeller", "node_labeller", {"name": node, "skip": False}, False, False),
        ("node_labeller unknown node", "node_labeller", {"name": "no-such-node", "skip": True}, False, True),
        ("cluster_lock", "cluster_lock", {"name": "kvops-secrets-lock", "holder": "secrets-test", "ttl": 60},
         False, False),
        ("cluster_lock release without holder", "cluster_lock", {"name": "kvops-secrets-lock", "state": "absent"},
         False, True),
        ("maintenance_preflight", "maintenance_preflight", {"nodes": [node], "fail_on_problems": False},
         False, False),
        ("maintenance_preflight unknown node", "maintenance_preflight", {"nodes": ["no-such-node"]}, False, True),
        ("maintenance_verify", "maintenance_verify", {"name": node, "timeout": 30}, False, False),
        ("maintenance_verify unknown node", "maintenance_verify", {"name": "no-such-node", "timeout": 5},
         False, True),
    ]


def connection_failures(server, wrong_ca):
    """Failures before any answer: the API is unreachable, or its certificate is not trusted."""
    return [
        ("unreachable API", "node_labeller",
         {"name": "lab-worker-1", "skip": True, "host": "https://127.0.0.1:9"}, False, True),
        ("untrusted CA", "node_labeller",
         {"name": "lab-worker-1", "skip": True, "host": server, "ca_cert": wrong_ca}, False, True),
    ]


def _leaks(text, secrets):
    return [s[:12] + "..." for s in secrets if s in text]


# The whole matrix runs for these two; the other ways of authenticating run a short list.
FULL_MATRIX_MODES = ("api_key", "client_cert_kubeconfig")


def short_cases(namespace, node):
    return [c for c in module_cases(namespace, node)
            if c[0] in ("node_labeller", "vm_eviction_strategy unknown VM", "node_maintenance check")]


def write_playbook(path, cases, auth_args):
    """One play, one task per case (errors ignored: each result is judged on its own)."""
    tasks = []
    for name, module, args, check, _fails in cases:
        merged = dict(auth_args)
        merged.update(args)
        tasks.append({"name": name, "kubevirt_ops.maintenance." + module: merged,
                      "check_mode": check, "ignore_errors": True})
    play = [{"name": "secrets", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    with open(path, "w") as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    return path


def test_no_secret_in_any_output(k8s, namespace, auth_modes, tmp_path, lab, restore_nodes):
    workloads.wait_no_namespace_terminating(k8s)  # see test_drain_terminating_namespace.py
    workloads.create_vm(k8s, namespace, "secret-vm")
    workloads.wait_vms_running(k8s, namespace, ["secret-vm"])
    secrets = auth_modes["secrets"]
    workers = workloads.node_names(k8s)
    server, _ca = identities.lab_cluster(lab.kubeconfig)
    jobs = []
    for mode_name, (kubeconfig, auth_args, env) in sorted(auth_modes["modes"].items()):
        if mode_name in FULL_MATRIX_MODES:
            # Each mode maintains its own node, so the modes can run side by side.
            cases = module_cases(namespace, workers[FULL_MATRIX_MODES.index(mode_name)])
            cases += connection_failures(server, auth_modes["wrong_ca"])[1 if mode_name != "api_key" else 0:]
        else:
            cases = short_cases(namespace, workers[-1])
        tmpdir = tempfile.mkdtemp(dir=str(tmp_path))
        env = dict(env, TMPDIR=tmpdir, ANSIBLE_REMOTE_TMP=os.path.join(tmpdir, "remote"),
                   ANSIBLE_LOCAL_TEMP=os.path.join(tmpdir, "local"))
        book = write_playbook(str(tmp_path / ("%s.yml" % mode_name)), cases, auth_args)
        jobs.append((mode_name, kubeconfig, book, env, cases, tmpdir))

    def work(job):
        _mode, kubeconfig, book, env, _cases, _tmpdir = job
        return runs.playbook(kubeconfig, book, verbosity=3, env=env)

    # The search works: the playbook of the api_key mode holds the token itself.
    api_key_playbook = next(job[2] for job in jobs if job[0] == "api_key")
    with open(api_key_playbook) as handle:
        assert _leaks(handle.read(), secrets)

    with ThreadPoolExecutor(WORKERS) as pool:
        outcomes = list(pool.map(work, jobs))

    problems = []
    checked = 0
    for (mode_name, _kc, _book, _env, cases, _tmpdir), run in zip(jobs, outcomes):
        text = run.output + json.dumps(run.lines, default=str)
        leaked = _leaks(text, secrets)
        if leaked:
            problems.append("%s: leaked %s" % (mode_name, leaked))
        if "Traceback" in run.output:
            problems.append("%s: a traceback in the output" % mode_name)
        results = dict(run.results())
        for name, _module, _args, _check, expect_failure in cases:
            result = results.get(name)
            if result is None:
                problems.append("%s / %s: no result (rc=%s)\n%s" % (mode_name, name, run.returncode,
                                                                    run.output[-2000:]))
                continue
            checked += 1
            if bool(result.get("failed")) != expect_failure:
                problems.append("%s / %s: expected %s, got %s: %s" % (
                    mode_name, name, "failure" if expect_failure else "success",
                    "failure" if result.get("failed") else "success", result.get("msg")))
    assert problems == [], "\n".join(problems)
    assert checked >= 2 * len(module_cases(namespace, "x"))

    # Nor in the Events the modules recorded on the cluster (a failure's note quotes its error).
    events = client.CoreV1Api(k8s).list_event_for_all_namespaces(_preload_content=False).data.decode()
    assert '"reportingComponent":"kubevirt-ops.io/maintenance"' in events.replace(" ", ""), "no Event of ours"
    assert _leaks(events, secrets) == [], "a secret in the cluster's Events"

    # Inline kubeconfig key data goes to private temporary files, removed when the module ends.
    left = []
    for job in jobs:
        for root, _dirs, files in os.walk(job[5]):
            for file_name in files:
                path = os.path.join(root, file_name)
                with open(path, errors="replace") as handle:
                    if _leaks(handle.read(), secrets):
                        left.append(path)
    assert left == [], "key material left on disk: %s" % left
