# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration_limits module: KubeVirt's live-migration limits raised for a maintenance run, and
the cluster's own values put back afterwards.

Where the limits live: with the HyperConverged Cluster Operator, in the HyperConverged resource's
``spec.liveMigrationConfig`` (``spec.virtualization.liveMigrationConfig`` in ``hco.kubevirt.io/v1``),
which HCO copies into the KubeVirt resource and puts back there whenever someone edits that
(``controllers/handlers/kubevirt.go``, getKVConfig and UpdateCR: the KubeVirt spec is HCO's);
without HCO, in the KubeVirt resource's ``spec.configuration.migrations``. virt-controller reads
``parallelMigrationsPerCluster`` and ``parallelOutboundMigrationsPerNode`` from there (defaults 5 and 2,
``pkg/virt-config/config-map.go``) and virt-handler caps each migration at ``bandwidthPerMigration``
bytes per second (unset: no cap).

The values the cluster had are recorded in an annotation of that same resource before anything
is raised (``kubevirt-ops.io/migration-limits``, JSON: the original values, the raised ones, the run
and when), in the same write, so a run that was killed leaves what the next one needs to put them
back. Raising again keeps the first record; restoring puts back each value that still is what the
run set (a value someone changed in the meantime is theirs and stays) and drops the record.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster.quantities import (
    format_memory,
    parse_quantity,
)
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import now_seconds
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s import access, patches
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.events import reference
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.meta import annotation_json, meta_of, object_name
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.waiter import wait_for_object
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt import hco as hco_cr
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.cluster_settings import (
    DEFAULT_MIGRATIONS_PER_CLUSTER,
    DEFAULT_OUTBOUND_MIGRATIONS_PER_NODE,
    kubevirt_cr,
)

ANNOTATION = "kubevirt-ops.io/migration-limits"
# (module option, field of liveMigrationConfig / configuration.migrations, default when unset)
FIELDS = (
    ("parallel_migrations_per_cluster", "parallelMigrationsPerCluster", DEFAULT_MIGRATIONS_PER_CLUSTER),
    ("parallel_outbound_migrations_per_node", "parallelOutboundMigrationsPerNode", DEFAULT_OUTBOUND_MIGRATIONS_PER_NODE),
    ("bandwidth_per_migration", "bandwidthPerMigration", None),
)
OPTIONS = tuple(option for option, _field, _default in FIELDS)
OPTION_OF = dict((field, option) for option, field, _default in FIELDS)
KUBEVIRT_PATH = ("spec", "configuration", "migrations")


class LimitsHome:
    """The resource the limits are written to: the HyperConverged one, else the KubeVirt one."""

    def __init__(self, kind, obj, path, resource, group):
        self.kind = kind
        self.obj = obj
        self.path = path
        self.permission = access.Permission("patch", resource, group=group)

    @property
    def kind_name(self):
        return "HyperConverged" if self.kind.startswith("HyperConverged") else self.kind

    def describe(self):
        return "%s %s" % (self.kind_name, object_name(self.obj))

    def as_result(self):
        metadata = meta_of(self.obj)
        return dict(kind=self.kind_name, name=metadata.get("name"), namespace=metadata.get("namespace"),
                    path=".".join(self.path))


def find_home(client, name=None, namespace=None):
    """Where this cluster keeps its migration limits (LimitsHome); InvalidInputError when nowhere."""
    hco = hco_cr.find(client, name, namespace)
    if hco is not None:
        path = ("spec", "virtualization", "liveMigrationConfig") if hco.v1 else ("spec", "liveMigrationConfig")
        return LimitsHome(hco.kind, hco.obj, path, "hyperconvergeds", "hco.kubevirt.io")
    if name != hco_cr.DEFAULT_NAME or namespace:
        if hco_cr.served_kind(client) is not None:
            raise hco_cr.not_found_error(client, name, namespace)
    kubevirt = kubevirt_cr(client)
    if kubevirt is None:
        raise InvalidInputError(
            "Neither a HyperConverged nor a KubeVirt resource exists, so there are no live-migration limits to "
            "change: is KubeVirt installed?")
    return LimitsHome("KubeVirt", kubevirt, KUBEVIRT_PATH, "kubevirts", "kubevirt.io")


def raw_values(obj, path):
    """{field: value as written, None when unset} of the limits this module manages."""
    config = patches.value_at(obj, path) or {}
    return dict((field, config.get(field)) for _option, field, _default in FIELDS)


def effective(raw):
    """{option: value as KubeVirt applies it}: the defaults for unset counts, None for no bandwidth cap."""
    out = {}
    for option, field, default in FIELDS:
        value = raw.get(field)
        if option == "bandwidth_per_migration":
            out[option] = str(value) if parse_quantity(value) else None
        else:
            out[option] = int(value) if value not in (None, "") else default
    return out


def same_limits(one, other):
    """Whether two sets of effective limits are equal (bandwidths compared as quantities: 1Gi == 1024Mi)."""
    for option in OPTIONS:
        a, b = one.get(option), other.get(option)
        if option == "bandwidth_per_migration" and a is not None and b is not None:
            if parse_quantity(a) != parse_quantity(b):
                return False
        elif a != b:
            return False
    return True


def record_of(obj):
    """The record a run left in the annotation, or None (one that does not parse counts as none)."""
    record = annotation_json(obj, ANNOTATION, dict)
    return record if record is not None and isinstance(record.get("original"), dict) else None


def wanted_values(params):
    """{field: value to write} from the options given; InvalidInputError naming a bad one."""
    wanted = {}
    for option, field, _default in FIELDS:
        value = params.get(option)
        if value is None:
            continue
        if option == "bandwidth_per_migration":
            text = str(value).strip()
            if parse_quantity(text) <= 0:
                raise InvalidInputError(
                    "Option bandwidth_per_migration (%r) is not a positive quantity of bytes per second, such as "
                    "512Mi or 1Gi." % (value,), option=option)
            wanted[field] = text
        else:
            if int(value) < 1:
                raise InvalidInputError("Option %s (%s) must be 1 or more." % (option, value), option=option)
            wanted[field] = int(value)
    return wanted


def _bytes(value):
    return "%s/s" % format_memory(parse_quantity(value))


def problems_of_raise(current, wanted, link_speed):
    """Why raising ``current`` (effective values) to ``wanted`` (fields) is refused: a list of (option,
    sentence naming the option and its value)."""
    problems = []
    after = dict(current)
    for option, field, _default in FIELDS:
        if field not in wanted:
            continue
        value = wanted[field]
        now = current[option]
        if option == "bandwidth_per_migration":
            if now is None:
                problems.append((option, "bandwidth_per_migration (%s) would cap migrations that have no bandwidth "
                                         "cap now; this module only raises limits for a run." % value))
            elif parse_quantity(value) < parse_quantity(now):
                problems.append((option, "bandwidth_per_migration (%s) is below the cluster's current %s; this module "
                                 "only raises limits for a run." % (value, now)))
        elif value < now:
            problems.append((option, "%s (%d) is below the cluster's current %d; this module only raises limits "
                                     "for a run." % (option, value, now)))
        after[option] = value
    if link_speed is not None:
        link = parse_quantity(str(link_speed).strip())
        if link <= 0:
            problems.append(("link_speed", "link_speed (%r) is not a positive quantity of bytes per second, such "
                                           "as 3Gi (about 25 Gbit/s)." % (link_speed,)))
        elif after["bandwidth_per_migration"] is None:
            problems.append(("link_speed", "link_speed (%s) cannot be checked: migrations have no bandwidth cap, so "
                             "%d of them at once may each take the whole link; give bandwidth_per_migration too." % (
                                 link_speed, after["parallel_outbound_migrations_per_node"])))
        else:
            lanes = min(after["parallel_outbound_migrations_per_node"], after["parallel_migrations_per_cluster"])
            need = lanes * parse_quantity(after["bandwidth_per_migration"])
            if need > link:
                problems.append(("link_speed",
                                 "The migration network cannot carry these limits: %d migrations at once off a node "
                                 "at %s each need %s, more than link_speed %s (%s)." % (
                                     lanes, after["bandwidth_per_migration"], _bytes(need), link_speed, _bytes(link))))
    return problems


def _options(raw):
    return dict((option, raw.get(field)) for option, field, _default in FIELDS)


def migration_limits(module):
    """migration_limits: raise KubeVirt's live-migration limits for a run (state=raised) or put the
    cluster's own values back (state=restored)."""
    params = module.params
    client = module.client
    state = params["state"]
    if state == "raised":
        wanted = wanted_values(params)
        if not wanted:
            raise InvalidInputError(
                "Give at least one limit to raise: parallel_migrations_per_cluster, "
                "parallel_outbound_migrations_per_node or bandwidth_per_migration.", option="state")
    elif any(params.get(option) is not None for option in OPTIONS + ("link_speed",)):
        given = [option for option in OPTIONS + ("link_speed",) if params.get(option) is not None]
        raise InvalidInputError(
            "Option %s only goes with state=raised; state=restored puts back the values the cluster had before."
            % ", ".join(given), option=given[0])
    home = find_home(client, params.get("name"), params.get("namespace"))
    record = record_of(home.obj)
    if state == "raised":
        # What the run asks for is judged against what the cluster would have without any run: a record's
        # original values when a run left one (a killed run's raised values are not the cluster's own).
        baseline = record["original"] if record else raw_values(home.obj, home.path)
        problems = problems_of_raise(effective(baseline), wanted, params.get("link_speed"))
        if problems:
            raise InvalidInputError(" ".join(text for _option, text in problems), option=problems[0][0])
    run = params.get("run") or ""

    def plan(obj):
        raw = raw_values(obj, home.path)
        record = record_of(obj)
        changes = []
        kept = []
        after_raw = dict(raw)
        if state == "raised":
            for field, value in wanted.items():
                changes.append((home.path + (field,), value))
            after_raw.update(wanted)
            # Unchanged when the record already says the same (set_fields writes no equal value).
            changes.append((("metadata", "annotations", ANNOTATION), json.dumps(dict(
                original=record["original"] if record else raw, raised=wanted, run=run,
                since=(record or {}).get("since") or now_seconds()), sort_keys=True)))
        elif record is not None:
            for field, value in (record.get("raised") or {}).items():
                if raw.get(field) == value:
                    changes.append((home.path + (field,), record["original"].get(field)))
                    after_raw[field] = record["original"].get(field)
                else:
                    kept.append(field)
            changes.append((("metadata", "annotations", ANNOTATION), None))
        operations = patches.set_fields(obj, changes)
        return operations, dict(before=raw, after=after_raw, record=record, kept=kept, changed=bool(operations))

    if state == "restored" and record is None:
        # Nothing to put back (the common case at the start of a run): no write, so no right to write needed.
        outcome, after_obj = plan(home.obj)[1], home.obj
    else:
        access.require(client, [home.permission], "change the live-migration limits in %s" % home.describe())
        outcome, after_obj = patches.update_guarded(client, home.kind, home.obj, plan, write=not module.check_mode)
    record = outcome["record"]
    for field in outcome["kept"]:
        module.warn("%s is left at %s: someone changed it while the run had raised it to %s, so the value is theirs "
                    "(the cluster had %s before the run)." % (
                        OPTION_OF[field], outcome["before"].get(field), record["raised"][field],
                        record["original"].get(field)))
    limits = effective(outcome["after"])
    before = effective(outcome["before"])
    moves = ", ".join("%s %s -> %s" % (o, before[o], limits[o]) for o in OPTIONS if before[o] != limits[o])
    if outcome["changed"] and not module.check_mode:
        module.events.normal(
            reference(after_obj, home.kind), "MigrationLimitsRaised" if state == "raised" else "MigrationLimitsRestored",
            "Update", "live-migration limits %s" % moves if moves else "record %s" % (
                "written" if state == "raised" else "removed"))
    applied = None
    if not module.check_mode and home.kind != "KubeVirt" and moves:
        applied = wait_applied(client, limits, params["wait_timeout"])
    if state == "raised":
        msg = ("Raised the live-migration limits in %s: %s." % (home.describe(), moves)) if moves else (
            "The live-migration limits in %s already are what the run asks for%s." % (
                home.describe(), "; the cluster's own values are recorded" if outcome["changed"] else ""))
    elif record is None:
        msg = "No run left raised live-migration limits in %s; nothing to put back." % home.describe()
    else:
        msg = "Put back the live-migration limits in %s%s%s." % (
            home.describe(), (": " + moves) if moves else " (they already were the cluster's own)",
            ("; kept what someone changed: " + ", ".join(outcome["kept"])) if outcome["kept"] else "")
    result = dict(
        changed=outcome["changed"],
        msg=msg,
        limits=limits,
        limits_before=before,
        original=_options(record["original"]) if record else (
            _options(outcome["before"]) if state == "raised" else None),
        raised_by=(record or {}).get("run") if state == "restored" else run,
        resource=home.as_result(),
        applied=applied,
    )
    if module.diff_mode:
        result["diff"] = dict(before=_options(outcome["before"]), after=_options(outcome["after"]))
    return result


def wait_applied(client, limits, timeout):
    """Wait until HCO has copied ``limits`` into the KubeVirt resource, which virt-controller reads; True,
    or False (with nothing raised about it) when the KubeVirt resource cannot be watched."""
    kubevirt = kubevirt_cr(client)
    if kubevirt is None:
        return False
    meta = kubevirt["metadata"]
    wait_for_object(
        client, "KubeVirt", meta["name"],
        lambda obj: obj is not None and same_limits(effective(raw_values(obj, KUBEVIRT_PATH)), limits),
        timeout, "HCO to copy the live-migration limits into KubeVirt %s/%s" % (meta.get("namespace"), meta["name"]),
        namespace=meta.get("namespace"))
    return True
