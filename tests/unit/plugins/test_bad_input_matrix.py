"""Bad input that needs no cluster: every module's argument checks, selections, connection
settings, HTTP refusals and the maintenance window. Each case must fail with one clear
sentence naming what is wrong, and write nothing to the (in-memory) API server.

Each case is also recorded for the reliability table (tests/output/reliability/).
"""

import datetime
import json
import os
import re

import pytest

from kubevirt_objects import cluster, hyperconverged
from module_runner import run_module

from ansible.errors import AnsibleFilterError
from ansible_collections.kubevirt_ops.maintenance.plugins.filter.maintenance_window import maintenance_window
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import (
    cluster_lock,
    hco_obsolete_cpus,
    maintenance_notify,
    maintenance_preflight,
    migration_limits,
    node_decommission,
    node_fence,
    node_machine,
    node_labeller,
    node_maintenance,
    node_maintenance_info,
    vm_eviction_strategy,
    vm_run_strategy,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECORDS = os.path.join(REPO, "tests", "output", "reliability")


def record(case, ok):
    """One line of the reliability table (the format of tests/integration/reliability.py)."""
    os.makedirs(RECORDS, exist_ok=True)
    name = "unit: " + case
    path = os.path.join(RECORDS, "bad_input--%s.json" % re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150])
    with open(path, "w") as handle:
        json.dump({"kind": "bad_input", "name": name, "group": "unit (no cluster)", "ok": ok, "pdb_violations": 0,
                   "vms_lost": 0,
                   "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")},
                  handle)


def assert_one_sentence(msg, *names):
    assert isinstance(msg, str) and msg.strip(), msg
    assert "\n" not in msg.strip(), msg
    assert "Traceback" not in msg, msg
    assert len(msg) < 700, msg
    head = msg.strip()[:40]
    assert msg.count(head) == 1, "the message repeats itself: %r" % msg
    for name in names:
        assert name in msg, "%r does not name %r" % (msg, name)


@pytest.fixture
def api(monkeypatch):
    client, server = cluster(namespaces=("ns1",))
    server.add("HyperConverged", hyperconverged())
    server.add("Node", {"metadata": {"name": "worker-1", "labels": {"node-role.kubernetes.io/worker": ""}},
                        "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    server.requests[:] = []
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    return server


# (case id, module, args, words the sentence must contain)
# A BMC as the modules take it (the machine is never reached: every case fails before).
BMC = {"address": "https://bmc-1/redfish/v1/Systems/1", "username": "admin", "password": "hunter22"}

MODULE_CASES = [
    ("node_maintenance unknown method", node_maintenance, {"name": "worker-1", "method": "magic"}, ["method", "magic"]),
    ("node_maintenance unknown state", node_maintenance, {"name": "worker-1", "state": "gone"}, ["state", "gone"]),
    ("node_maintenance unknown non_migratable policy", node_maintenance,
     {"name": "worker-1", "non_migratable": "ignore"}, ["non_migratable", "ignore"]),
    ("node_maintenance without a node", node_maintenance, {}, ["name"]),
    ("node_maintenance invalid pod_selector", node_maintenance, {"name": "worker-1", "pod_selector": "app in ("},
     ["pod_selector"]),
    ("node_maintenance_info name and label_selector", node_maintenance_info,
     {"name": "worker-1", "label_selector": "a=b"}, ["name", "label_selector"]),
    ("node_maintenance_info invalid label_selector", node_maintenance_info, {"label_selector": "a=b=c"},
     ["label_selector"]),
    ("node_decommission without a node", node_decommission, {}, ["name"]),
    ("vm_eviction_strategy unknown strategy", vm_eviction_strategy,
     {"name": "vm1", "namespace": "ns1", "strategy": "Migrate"}, ["strategy", "Migrate"]),
    ("vm_eviction_strategy present without strategy", vm_eviction_strategy, {"name": "vm1", "namespace": "ns1"},
     ["strategy"]),
    ("vm_eviction_strategy unknown scope", vm_eviction_strategy, {"scope": "namespace", "strategy": "None"},
     ["scope", "namespace"]),
    ("vm_eviction_strategy name and all_namespaces", vm_eviction_strategy,
     {"name": "vm1", "all_namespaces": True, "strategy": "None"}, ["name", "all_namespaces"]),
    ("vm_eviction_strategy unknown namespace", vm_eviction_strategy,
     {"namespace": "nope", "strategy": "None"}, ["nope"]),
    ("vm_run_strategy run_strategy and action", vm_run_strategy,
     {"name": "vm1", "namespace": "ns1", "run_strategy": "Always", "action": "stop"}, ["run_strategy", "action"]),
    ("vm_run_strategy unknown run strategy", vm_run_strategy,
     {"name": "vm1", "namespace": "ns1", "run_strategy": "Sometimes"}, ["run_strategy", "Sometimes"]),
    ("vm_run_strategy unknown action", vm_run_strategy, {"name": "vm1", "namespace": "ns1", "action": "pause"},
     ["action", "pause"]),
    ("vm_run_strategy neither run strategy nor action", vm_run_strategy, {"name": "vm1", "namespace": "ns1"},
     ["run_strategy", "action"]),
    ("vm_run_strategy name without namespace", vm_run_strategy, {"name": "vm1", "run_strategy": "Always"},
     ["vm1", "namespace"]),
    ("vm_run_strategy no selection", vm_run_strategy, {"run_strategy": "Always"}, ["namespace"]),
    ("hco_obsolete_cpus exclusive with absent", hco_obsolete_cpus,
     {"cpu_models": ["486"], "state": "absent", "exclusive": True}, ["exclusive"]),
    ("hco_obsolete_cpus unknown HyperConverged", hco_obsolete_cpus, {"name": "nope", "cpu_models": ["486"]},
     ["nope"]),
    ("node_labeller without skip", node_labeller, {"name": "worker-1"}, ["skip"]),
    ("node_labeller unknown node", node_labeller, {"name": "no-such-node", "skip": True}, ["no-such-node"]),
    ("cluster_lock zero TTL", cluster_lock, {"ttl": 0}, ["TTL"]),
    ("cluster_lock release without holder", cluster_lock, {"state": "absent"}, ["holder"]),
    ("cluster_lock bound to a process that is not running", cluster_lock, {"owner_pid": -3}, ["owner_pid", "-3"]),
    ("maintenance_notify webhook without a scheme", maintenance_notify,
     {"event": "node_done", "text": "x", "webhooks": [{"url": "hooks.example.com/T0/secret"}]},
     ["webhooks[1].url"]),
    ("maintenance_notify unknown event", maintenance_notify, {"event": "node_rebooted", "text": "x"},
     ["event", "node_rebooted"]),
    ("maintenance_notify negative retries", maintenance_notify, {"event": "node_done", "text": "x", "retries": -1},
     ["retries", "-1"]),
    ("maintenance_notify timeout of 0", maintenance_notify, {"event": "node_done", "text": "x", "timeout": 0},
     ["timeout", "0"]),
    ("maintenance_preflight nodes and label_selector", maintenance_preflight,
     {"nodes": ["worker-1"], "label_selector": "a=b"}, ["nodes", "label_selector"]),
    ("maintenance_preflight neither nodes nor selector", maintenance_preflight, {}, ["nodes", "label_selector"]),
    # Values no module can use: negative and absurd timeouts, invalid names, malformed selectors.
    ("node_maintenance negative wait_timeout", node_maintenance,
     {"name": "worker-1", "wait_timeout": -5}, ["wait_timeout", "-5"]),
    ("node_maintenance wait_timeout of ten years", node_maintenance, {"name": "worker-1", "wait_timeout": 315360000},
     ["wait_timeout", "315360000"]),
    ("node_maintenance grace_period below -1", node_maintenance,
     {"name": "worker-1", "grace_period": -7}, ["grace_period", "-7"]),
    ("node_maintenance empty name", node_maintenance, {"name": ""}, ["name"]),
    ("node_maintenance drain_options contradicting grace_period", node_maintenance,
     {"name": "worker-1", "grace_period": 30, "drain_options": {"grace_period": 60}},
     ["grace_period=30", "drain_options.grace_period=60"]),
    ("node_maintenance drain_options.grace_period below -1", node_maintenance,
     {"name": "worker-1", "drain_options": {"grace_period": -7}}, ["grace_period", "-7"]),
    ("node_maintenance method cr with drain_options.disable_eviction", node_maintenance,
     {"name": "worker-1", "method": "cr", "drain_options": {"disable_eviction": True}}, ["disable_eviction"]),
    ("maintenance_preflight drain_options.pod_selector malformed", maintenance_preflight,
     {"nodes": ["worker-1"], "drain_options": {"pod_selector": "a in (b"}}, ["pod_selector"]),
    ("node_decommission drain_options contradicting force", node_decommission,
     {"name": "worker-1", "force": False, "drain_options": {"force": True}}, ["force=False", "drain_options.force"]),
    ("node_maintenance invalid node name", node_maintenance, {"name": "Worker_1!"}, ["name", "Worker_1!"]),
    ("node_maintenance method cr with grace_period", node_maintenance,
     {"name": "worker-1", "method": "cr", "grace_period": 5}, ["grace_period"]),
    ("node_maintenance_info invalid node name", node_maintenance_info, {"name": "bad name"}, ["name", "bad name"]),
    ("node_decommission negative wait_timeout", node_decommission,
     {"name": "worker-1", "wait_timeout": -1}, ["wait_timeout", "-1"]),
    ("node_decommission empty name", node_decommission, {"name": ""}, ["name"]),
    ("node_decommission unknown power_off", node_decommission, {"name": "worker-1", "power_off": "ipmi"},
     ["power_off", "ipmi"]),
    ("node_decommission bmh without power_off=bmh", node_decommission,
     {"name": "worker-1", "bmh": {"name": "host-1", "namespace": "ns1"}}, ["bmh", "power_off", "ns1/host-1"]),
    ("node_decommission invalid BareMetalHost name", node_decommission,
     {"name": "worker-1", "power_off": "bmh", "bmh": {"name": "Host_1", "namespace": "ns1"}}, ["bmh.name", "Host_1"]),
    ("node_decommission bmc without power_off=redfish", node_decommission,
     {"name": "worker-1", "bmc": {"address": "https://bmc-1/redfish/v1/Systems/1", "username": "admin",
                                  "password": "hunter22"}}, ["bmc", "power_off", "https://bmc-1/redfish/v1/Systems/1"]),
    ("node_decommission power_off=redfish without bmc", node_decommission,
     {"name": "worker-1", "power_off": "redfish"}, ["bmc", "power_off=redfish", "worker-1"]),
    ("node_decommission bmc address that is no Redfish System", node_decommission,
     {"name": "worker-1", "power_off": "redfish", "bmc": {"address": "ipmi://10.0.0.9", "username": "admin",
                                                          "password": "hunter22"}}, ["bmc.address", "ipmi://10.0.0.9"]),
    ("node_decommission negative reregistration_watch", node_decommission,
     {"name": "worker-1", "reregistration_watch": -1}, ["reregistration_watch", "-1"]),
    ("node_decommission power_off=bmh on a node naming no BareMetalHost", node_decommission,
     {"name": "worker-1", "power_off": "bmh", "allow_last_schedulable_node": True},
     ["worker-1", "BareMetalHost", "bmh"]),
    ("node_decommission heartbeating node without a power-off", node_decommission,
     {"name": "worker-1", "allow_last_schedulable_node": True}, ["worker-1", "power_off", "assume_powered_off"]),
    ("node_fence without a node", node_fence, {}, ["name"]),
    ("node_fence unknown state", node_fence, {"name": "worker-1", "state": "off"}, ["state", "off"]),
    ("node_fence of a node that does not exist", node_fence, {"name": "worker-9"}, ["worker-9", "does not exist"]),
    ("node_fence bmc and bmh both", node_fence,
     {"name": "worker-1", "bmh": {"name": "host-1", "namespace": "ns1"},
      "bmc": {"address": "https://bmc-1/redfish/v1/Systems/1", "username": "admin", "password": "hunter22"}},
     ["bmc", "bmh"]),
    ("node_fence bmc address that is no Redfish System", node_fence,
     {"name": "worker-1", "bmc": {"address": "https://bmc-1/", "username": "admin", "password": "hunter22"}},
     ["bmc.address", "https://bmc-1/"]),
    ("node_fence without a road to the machine", node_fence, {"name": "worker-1"}, ["worker-1", "bmc", "bmh"]),
    ("node_fence of a node that still heartbeats", node_fence,
     {"name": "worker-1", "bmc": {"address": "https://bmc-1/redfish/v1/Systems/1", "username": "admin",
                                  "password": "hunter22"}}, ["worker-1", "heartbeats", "never fenced"]),
    ("node_fence negative wait_timeout", node_fence, {"name": "worker-1", "wait_timeout": -5}, ["wait_timeout", "-5"]),
    ("node_machine without a node", node_machine, {}, ["name"]),
    ("node_machine of a node that does not exist", node_machine, {"name": "worker-9", "reboot": True},
     ["worker-9", "does not exist"]),
    ("node_machine firmware without a version", node_machine,
     {"name": "worker-1", "bmc": BMC, "firmware": [{"component": "bios", "url": "https://fw/bios.bin"}]},
     ["firmware", "version"]),
    ("node_machine firmware with an empty url", node_machine,
     {"name": "worker-1", "bmc": BMC, "firmware": [{"component": "bios", "url": " ", "version": "1.2"}]},
     ["firmware[0].url"]),
    ("node_machine firmware url that is no URL", node_machine,
     {"name": "worker-1", "bmc": BMC, "firmware": [{"component": "bios", "url": "bios.bin", "version": "1.2"}]},
     ["firmware[0].url", "bios.bin"]),
    ("node_machine firmware naming a component twice", node_machine,
     {"name": "worker-1", "bmc": BMC, "firmware": [{"component": "bios", "url": "https://fw/a", "version": "1"},
                                                   {"component": "bios", "url": "https://fw/b", "version": "2"}]},
     ["firmware", "bios", "more than once"]),
    ("node_machine bios that is no dict", node_machine, {"name": "worker-1", "bios": "SriovGlobalEnable"}, ["bios"]),
    ("node_machine bmc and bmh both", node_machine,
     {"name": "worker-1", "reboot": True, "bmh": {"name": "host-1", "namespace": "ns1"}, "bmc": BMC},
     ["bmc", "bmh"]),
    ("node_machine without a road to the machine", node_machine, {"name": "worker-1", "reboot": True},
     ["worker-1", "bmc", "bmh"]),
    ("node_machine negative wait_timeout", node_machine, {"name": "worker-1", "wait_timeout": -5},
     ["wait_timeout", "-5"]),
    ("vm_eviction_strategy malformed label_selector", vm_eviction_strategy,
     {"namespace": "ns1", "label_selector": "tier in (", "strategy": "None"}, ["label_selector"]),
    ("vm_eviction_strategy empty name", vm_eviction_strategy,
     {"name": "", "namespace": "ns1", "strategy": "None"}, ["name"]),
    ("vm_eviction_strategy negative wait_timeout", vm_eviction_strategy,
     {"namespace": "ns1", "strategy": "None", "wait_timeout": -3}, ["wait_timeout", "-3"]),
    ("vm_run_strategy negative wait_timeout", vm_run_strategy,
     {"name": "vm1", "namespace": "ns1", "run_strategy": "Always", "wait_timeout": -3}, ["wait_timeout", "-3"]),
    ("vm_run_strategy malformed label_selector", vm_run_strategy,
     {"namespace": "ns1", "label_selector": "a in (b", "run_strategy": "Always"}, ["label_selector"]),
    ("hco_obsolete_cpus empty model name", hco_obsolete_cpus, {"cpu_models": [""]}, ["cpu_models"]),
    ("hco_obsolete_cpus unknown state", hco_obsolete_cpus,
     {"cpu_models": ["486"], "state": "removed"}, ["state", "removed"]),
    ("node_labeller empty name", node_labeller, {"name": "", "skip": True}, ["name"]),
    ("cluster_lock negative TTL", cluster_lock, {"ttl": -10}, ["TTL"]),
    ("cluster_lock unknown state", cluster_lock, {"state": "locked"}, ["state", "locked"]),
    ("maintenance_preflight empty node list", maintenance_preflight, {"nodes": []}, ["nodes"]),
    ("maintenance_preflight unknown non_migratable", maintenance_preflight,
     {"nodes": ["worker-1"], "non_migratable": "skip"}, ["non_migratable", "skip"]),
    ("node_maintenance disable_eviction not a boolean", node_maintenance,
     {"name": "worker-1", "disable_eviction": "sometimes"}, ["disable_eviction", "sometimes"]),
    ("vm_eviction_strategy restart not a boolean", vm_eviction_strategy,
     {"namespace": "ns1", "strategy": "None", "restart": "maybe"}, ["restart", "maybe"]),
    ("node_maintenance owner_pid of no process", node_maintenance, {"name": "worker-1", "owner_pid": -5},
     ["owner_pid -5", "worker-1"]),
    ("node_decommission owner_pid of no process", node_decommission, {"name": "worker-1", "owner_pid": -5},
     ["owner_pid -5", "worker-1"]),
    ("migration_limits below the cluster's value", migration_limits, {"parallel_outbound_migrations_per_node": 1},
     ["parallel_outbound_migrations_per_node (1)", "current 2"]),
    ("migration_limits bandwidth not a quantity", migration_limits, {"bandwidth_per_migration": "fast"},
     ["bandwidth_per_migration", "fast"]),
    ("migration_limits link speed not a quantity", migration_limits,
     {"parallel_outbound_migrations_per_node": 3, "link_speed": "zero"}, ["link_speed", "zero"]),
    ("migration_limits nothing to raise", migration_limits, {}, ["parallel_outbound_migrations_per_node"]),
    ("migration_limits a value with restored", migration_limits,
     {"state": "restored", "parallel_migrations_per_cluster": 9}, ["parallel_migrations_per_cluster", "restored"]),
    ("migration_limits unknown state", migration_limits, {"state": "lowered"}, ["state", "lowered"]),
]


@pytest.mark.parametrize("case, module, args, names", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_bad_input(case, module, args, names, api, capsys):
    record(case, False)
    code, result = run_module(module, args, capsys)
    assert code != 0 and result.get("failed"), result
    assert_one_sentence(result["msg"], *names)
    assert api.writes() == [], "written despite bad input: %s" % api.writes()
    record(case, True)


# -- connection settings -------------------------------------------------------------------------

GOOD_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

KUBECONFIG_CASES = [
    ("kubeconfig that is not YAML", "clusters: [unclosed\n  - {", {}, ["not valid YAML"]),
    ("kubeconfig that is a list", "- a\n- b\n", {}, ["not a kubeconfig"]),
    ("kubeconfig with an unknown context", GOOD_KUBECONFIG, {"context": "nope"}, ["nope"]),
    ("kubeconfig without a server", GOOD_KUBECONFIG.replace('server: "https://127.0.0.1:6443"', "insecure: true"),
     {}, ["no server"]),
    ("kubeconfig without current-context", GOOD_KUBECONFIG.replace("current-context: x", ""), {}, ["context"]),
    ("missing CA certificate file", GOOD_KUBECONFIG, {"ca_cert": "/nonexistent/ca.crt"}, ["/nonexistent/ca.crt"]),
    ("missing client certificate file", GOOD_KUBECONFIG,
     {"client_cert": "/nonexistent/c.crt", "client_key": "/nonexistent/c.key"}, ["/nonexistent/c"]),
]


@pytest.mark.parametrize("case, content, extra, names", KUBECONFIG_CASES, ids=[c[0] for c in KUBECONFIG_CASES])
def test_bad_connection_settings(case, content, extra, names, tmp_path, capsys):
    record(case, False)
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    code, result = run_module(node_labeller, dict({"name": "worker-1", "skip": True, "kubeconfig": str(path)},
                                                  **extra), capsys)
    assert code != 0 and result.get("failed"), result
    assert_one_sentence(result["msg"], *names)
    record(case, True)


def test_missing_kubeconfig_file(tmp_path, capsys):
    case = "kubeconfig file that does not exist"
    record(case, False)
    missing = str(tmp_path / "nope" / "kubeconfig")
    code, result = run_module(node_labeller, {"name": "worker-1", "skip": True, "kubeconfig": missing}, capsys)
    assert code != 0 and result.get("failed")
    assert_one_sentence(result["msg"], missing, "does not exist")
    record(case, True)


# -- the API server refuses ------------------------------------------------------------------------

@pytest.mark.parametrize("status, words", [(401, ["credentials were rejected"]), (403, ["permission denied"])],
                         ids=["expired or invalid token (401)", "RBAC denied (403)"])
def test_api_refusal_is_one_sentence(status, words, api, capsys):
    case = "API answers %d" % status
    record(case, False)
    api.fail_next[("GET", "Node")] = status
    code, result = run_module(node_labeller, {"name": "worker-1", "skip": True}, capsys)
    assert code != 0 and result.get("failed")
    assert_one_sentence(result["msg"], "Node worker-1", *words)
    assert api.writes() == []
    record(case, True)


# -- the maintenance window of the role -----------------------------------------------------------

WINDOW_CASES = [
    ("window start 25:00", {"start": "25:00", "end": "06:00"}, ["25:00", "HH:MM"]),
    ("window end without minutes", {"start": "22:00", "end": "6"}, ["'6'", "HH:MM"]),
    ("window unknown day", {"days": ["someday"], "start": "22:00", "end": "06:00"}, ["someday"]),
    ("window unknown time zone", {"start": "22:00", "end": "06:00", "timezone": "Mars/Olympus_Mons"},
     ["Mars/Olympus_Mons"]),
]


@pytest.mark.parametrize("case, window, names", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_bad_window(case, window, names):
    record(case, False)
    with pytest.raises(AnsibleFilterError) as info:
        maintenance_window(window)
    assert_one_sentence(info.value.message, *names)
    record(case, True)


def test_window_now_not_a_timestamp():
    case = "window 'now' that is not a timestamp"
    record(case, False)
    with pytest.raises(AnsibleFilterError) as info:
        maintenance_window({"start": "22:00", "end": "06:00"}, now="saturday night")
    assert_one_sentence(info.value.message, "saturday night", "ISO 8601")
    record(case, True)


def test_window_now_without_offset():
    case = "window 'now' without a UTC offset"
    record(case, False)
    with pytest.raises(AnsibleFilterError) as info:
        maintenance_window({"start": "22:00", "end": "06:00"}, now="2024-05-04T23:00:00")
    assert_one_sentence(info.value.message, "UTC offset")
    record(case, True)
