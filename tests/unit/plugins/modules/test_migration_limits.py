"""migration_limits end to end (argument spec, wrapper, logic) against the in-memory API server: raised and
restored on the HyperConverged resource or the KubeVirt one, the record a killed run leaves, the refusals
(each one sentence naming the option, nothing written), and exactly what RETURN documents."""

import json

import pytest

from fake_apiserver import FakeResponse
from kubevirt_objects import cluster, hyperconverged, kubevirt
from module_runner import assert_documented, record_warnings, run

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import migration_limits as limits_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.modules import migration_limits

HCO_DEFAULTS = {"parallelMigrationsPerCluster": 5, "parallelOutboundMigrationsPerNode": 2,
                "completionTimeoutPerGiB": 150, "progressTimeout": 150}
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.fixture
def api(monkeypatch):
    client, server = cluster(namespaces=("ns1",))
    monkeypatch.setattr(module_mod.MaintenanceModule, "client", property(lambda self: client))
    server.module_warnings = record_warnings(monkeypatch)
    server.denied = set()

    def review(method, path, body):
        attributes = body["spec"]["resourceAttributes"]
        allowed = (attributes["verb"], attributes["resource"]) not in server.denied
        return FakeResponse(201, dict(body, status={"allowed": allowed}))

    server.handlers[SSAR_PATH] = review
    return server


def hco_with(**config):
    return hyperconverged(spec={"liveMigrationConfig": dict(HCO_DEFAULTS, **config)})


def kubevirt_with(**migrations):
    obj = kubevirt()
    obj["spec"]["configuration"]["migrations"] = dict(migrations)
    return obj


def stored_hco(api):
    return api.get("HyperConverged", "kubevirt-hyperconverged", "kubevirt-hyperconverged")


def test_raised_on_the_hyperconverged_resource_then_restored(api, capsys):
    api.add("HyperConverged", hco_with())
    args = {"parallel_migrations_per_cluster": 8, "parallel_outbound_migrations_per_node": 4, "run": "run-a"}
    checked = run(migration_limits, args, capsys, check=True, diff=True)
    assert checked.get("changed") is True, checked
    assert api.writes("HyperConverged") == []
    assert checked["diff"]["after"]["parallel_outbound_migrations_per_node"] == 4
    assert_documented(checked, migration_limits)

    raised = run(migration_limits, args, capsys, diff=True)
    assert raised["changed"] is True, raised
    assert raised["limits"] == {"parallel_migrations_per_cluster": 8, "parallel_outbound_migrations_per_node": 4,
                                "bandwidth_per_migration": None}
    assert raised["limits_before"]["parallel_outbound_migrations_per_node"] == 2
    assert raised["original"] == {"parallel_migrations_per_cluster": 5, "parallel_outbound_migrations_per_node": 2,
                                  "bandwidth_per_migration": None}
    assert raised["resource"] == {"kind": "HyperConverged", "name": "kubevirt-hyperconverged",
                                  "namespace": "kubevirt-hyperconverged", "path": "spec.liveMigrationConfig"}
    assert raised["msg"] == ("Raised the live-migration limits in HyperConverged kubevirt-hyperconverged/"
                             "kubevirt-hyperconverged: parallel_migrations_per_cluster 5 -> 8, "
                             "parallel_outbound_migrations_per_node 2 -> 4.")
    assert_documented(raised, migration_limits)
    hco = stored_hco(api)
    assert hco["spec"]["liveMigrationConfig"]["parallelOutboundMigrationsPerNode"] == 4
    record = json.loads(hco["metadata"]["annotations"][limits_mod.ANNOTATION])
    assert record["original"]["parallelOutboundMigrationsPerNode"] == 2 and record["run"] == "run-a"
    # The change is told in an Event on the resource.
    notes = [obj["note"] for (kind, _ns, _n), obj in api.objects.items() if kind == "Event.events.k8s.io"]
    assert any("parallel_outbound_migrations_per_node 2 -> 4" in note for note in notes), notes

    writes = len(api.writes("HyperConverged"))
    again = run(migration_limits, args, capsys)
    assert again["changed"] is False and len(api.writes("HyperConverged")) == writes

    restored = run(migration_limits, {"state": "restored"}, capsys, diff=True)
    assert restored["changed"] is True and restored["limits"]["parallel_outbound_migrations_per_node"] == 2
    assert restored["raised_by"] == "run-a"
    assert_documented(restored, migration_limits)
    hco = stored_hco(api)
    assert hco["spec"]["liveMigrationConfig"] == HCO_DEFAULTS
    assert limits_mod.ANNOTATION not in (hco["metadata"].get("annotations") or {})
    nothing = run(migration_limits, {"state": "restored"}, capsys)
    assert nothing["changed"] is False and nothing["original"] is None
    assert nothing["msg"] == ("No run left raised live-migration limits in HyperConverged kubevirt-hyperconverged/"
                              "kubevirt-hyperconverged; nothing to put back.")


def test_a_resumed_run_keeps_the_cluster_values_a_killed_run_recorded(api, capsys):
    api.add("HyperConverged", hco_with())
    run(migration_limits, {"parallel_outbound_migrations_per_node": 4, "run": "killed"}, capsys)
    # The next run asks for the same (or even the same as what is set now): the record still holds 2.
    resumed = run(migration_limits, {"parallel_outbound_migrations_per_node": 4, "run": "resumed"},
                  capsys)
    assert resumed["original"]["parallel_outbound_migrations_per_node"] == 2 and resumed["raised_by"] == "resumed"
    record = json.loads(stored_hco(api)["metadata"]["annotations"][limits_mod.ANNOTATION])
    assert record["original"]["parallelOutboundMigrationsPerNode"] == 2 and record["run"] == "resumed"
    # A lower value than the killed run's is fine: it is judged against the cluster's own 2.
    lower = run(migration_limits, {"parallel_outbound_migrations_per_node": 3}, capsys)
    assert not lower.get("failed"), lower
    run(migration_limits, {"state": "restored"}, capsys)
    assert stored_hco(api)["spec"]["liveMigrationConfig"]["parallelOutboundMigrationsPerNode"] == 2


def test_a_value_someone_changed_during_the_run_is_theirs(api, capsys):
    api.add("HyperConverged", hco_with())
    run(migration_limits, {"parallel_migrations_per_cluster": 8, "parallel_outbound_migrations_per_node": 4},
        capsys)
    hco = stored_hco(api)
    hco["spec"]["liveMigrationConfig"]["parallelMigrationsPerCluster"] = 10
    api.add("HyperConverged", hco)
    restored = run(migration_limits, {"state": "restored"}, capsys)
    config = stored_hco(api)["spec"]["liveMigrationConfig"]
    assert config["parallelMigrationsPerCluster"] == 10 and config["parallelOutboundMigrationsPerNode"] == 2
    assert "kept what someone changed: parallelMigrationsPerCluster" in restored["msg"]
    assert any("parallel_migrations_per_cluster is left at 10" in w for w in api.module_warnings), api.module_warnings


def test_without_hco_the_kubevirt_resource_and_an_unset_field_comes_back_unset(api, capsys):
    api.served.discard("HyperConverged")
    api.served.discard("HyperConvergedV1")
    api.add("KubeVirt", kubevirt_with(bandwidthPerMigration="512Mi"))
    raised = run(migration_limits, {"parallel_outbound_migrations_per_node": 3, "bandwidth_per_migration": "1Gi",
                                    "link_speed": "3Gi"}, capsys)
    assert raised["changed"] and raised["resource"]["kind"] == "KubeVirt" and raised["applied"] is None, raised
    assert raised["resource"]["path"] == "spec.configuration.migrations"
    migrations = api.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["migrations"]
    assert migrations == {"bandwidthPerMigration": "1Gi", "parallelOutboundMigrationsPerNode": 3}
    run(migration_limits, {"state": "restored"}, capsys)
    migrations = api.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["migrations"]
    assert migrations == {"bandwidthPerMigration": "512Mi"}


@pytest.mark.parametrize("args, message", [
    ({"parallel_outbound_migrations_per_node": 1},
     "parallel_outbound_migrations_per_node (1) is below the cluster's current 2; this module only raises limits for "
     "a run."),
    ({"parallel_outbound_migrations_per_node": 0}, "Option parallel_outbound_migrations_per_node (0) must be 1 or more."),
    ({"bandwidth_per_migration": "fast"},
     "Option bandwidth_per_migration ('fast') is not a positive quantity of bytes per second, such as 512Mi or 1Gi."),
    ({"bandwidth_per_migration": "1Gi"},
     "bandwidth_per_migration (1Gi) would cap migrations that have no bandwidth cap now; this module only raises "
     "limits for a run."),
    ({"parallel_outbound_migrations_per_node": 4, "link_speed": "3Gi"},
     "link_speed (3Gi) cannot be checked: migrations have no bandwidth cap, so 4 of them at once may each take the "
     "whole link; give bandwidth_per_migration too."),
    ({}, "Give at least one limit to raise: parallel_migrations_per_cluster, parallel_outbound_migrations_per_node or "
         "bandwidth_per_migration."),
    ({"state": "restored", "parallel_outbound_migrations_per_node": 4},
     "Option parallel_outbound_migrations_per_node only goes with state=restored"),
    ({"parallel_outbound_migrations_per_node": 4, "wait_timeout": 0}, "Option wait_timeout=0 is not a usable timeout"),
])
def test_bad_values_are_refused_in_one_sentence_with_nothing_written(api, capsys, args, message):
    api.add("HyperConverged", hco_with())
    before = stored_hco(api)["metadata"]["resourceVersion"]
    failed = run(migration_limits, args, capsys)
    assert failed.get("failed") and message.replace("only goes with state=restored", "only goes with state=raised") \
        in failed["msg"], failed
    assert api.writes("HyperConverged") == [] and stored_hco(api)["metadata"]["resourceVersion"] == before


def test_limits_the_link_cannot_carry_are_refused(api, capsys):
    api.add("HyperConverged", hco_with(bandwidthPerMigration="1Gi"))
    failed = run(migration_limits, {"parallel_migrations_per_cluster": 8, "parallel_outbound_migrations_per_node": 4,
                                    "link_speed": "3Gi"}, capsys)
    assert failed["failed"] and failed["msg"] == (
        "The migration network cannot carry these limits: 4 migrations at once off a node at 1Gi each need 4Gi/s, "
        "more than link_speed 3Gi (3Gi/s).")
    assert api.writes("HyperConverged") == []
    # Three lanes fit.
    fits = run(migration_limits, {"parallel_outbound_migrations_per_node": 3, "link_speed": "3Gi"},
               capsys)
    assert fits["changed"], fits


def test_no_permission_to_patch_fails_before_anything_is_written(api, capsys):
    api.add("HyperConverged", hco_with())
    api.denied.add(("patch", "hyperconvergeds"))
    failed = run(migration_limits, {"parallel_outbound_migrations_per_node": 4}, capsys, check=True)
    assert failed["failed"] and "permission denied" in failed["msg"] and "patch hyperconvergeds.hco.kubevirt.io" in \
        failed["msg"], failed
    assert api.writes("HyperConverged") == []


def test_waits_for_hco_to_copy_the_limits_into_kubevirt(api, capsys):
    api.add("HyperConverged", hco_with())
    api.add("KubeVirt", kubevirt_with(**HCO_DEFAULTS))

    def copy_like_hco(method, kind, name):
        # HCO's reconciler, after the HyperConverged write lands: the KubeVirt resource follows.
        if kind != "HyperConverged":
            return
        import threading

        def later():
            config = stored_hco(api)["spec"]["liveMigrationConfig"]
            obj = api.get("KubeVirt", "kubevirt", "kubevirt")
            obj["spec"]["configuration"]["migrations"] = dict(config)
            api.add("KubeVirt", obj)

        threading.Timer(0.2, later).start()

    api.before_write = copy_like_hco
    raised = run(migration_limits, {"parallel_outbound_migrations_per_node": 4, "wait_timeout": 10}, capsys)
    assert raised["applied"] is True, raised
    assert api.get("KubeVirt", "kubevirt", "kubevirt")["spec"]["configuration"]["migrations"][
        "parallelOutboundMigrationsPerNode"] == 4


def test_problems_of_raise_counts_the_lanes_kubevirt_really_runs():
    current = {"parallel_migrations_per_cluster": 5, "parallel_outbound_migrations_per_node": 2,
               "bandwidth_per_migration": "1Gi"}
    # 8 outbound per node, but only 5 at once in the cluster: 5 lanes x 1Gi fit a 5Gi link.
    assert limits_mod.problems_of_raise(current, {"parallelOutboundMigrationsPerNode": 8}, "5Gi") == []
    assert [o for o, _t in limits_mod.problems_of_raise(current, {"parallelOutboundMigrationsPerNode": 8}, "4Gi")] == [
        "link_speed"]
    assert limits_mod.same_limits(dict(current, bandwidth_per_migration="1024Mi"), current)
