"""CustomResourceDefinitions for KubeVirt, HCO and node-maintenance, applied at start.

The schemas are our own and structural. They name the fields the stand-ins (and the
collection) read or write, with types and enums, and keep everything else open with
``x-kubernetes-preserve-unknown-fields`` where upstream's API is wider than we model.
Names, short names, categories and printer columns follow upstream, so
``kubectl get vm,vmi,vmim -A`` prints what a real cluster prints.
"""

import logging
import time

from lab.standins import kube as k

log = logging.getLogger(__name__)

RUN_STRATEGIES = ["Always", "RerunOnFailure", "Manual", "Halted", "Once", "WaitAsReceiver"]
EVICTION_STRATEGIES = ["LiveMigrate", "LiveMigrateIfPossible", "None", "External"]
VMI_PHASES = ["", "Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "Unknown"]
MIGRATION_PHASES = [
    "",
    "Pending",
    "Scheduling",
    "Scheduled",
    "PreparingTarget",
    "TargetReady",
    "Running",
    "Succeeded",
    "Failed",
    "WaitingForSync",
    "Synchronizing",
]


NMO_GROUP = "nodemaintenance.medik8s.io"
# The old kubevirt node-maintenance-operator's group (<= 0.10): a stand-in only.
LEGACY_NMO_GROUP = "nodemaintenance.kubevirt.io"
# Metal3's CRDs (BareMetalHost and its firmware kinds) are generated from baremetal-operator's
# API module by lab/metal3.py and installed by `lab up`; their stand-in is baremetal.py.


def _open(properties=None, **extra):
    """An object schema that validates ``properties`` and keeps unknown fields."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema["properties"] = properties
    schema.update(extra)
    return schema


def _string(enum=None, **extra):
    schema = {"type": "string"}
    if enum:
        schema["enum"] = enum
    schema.update(extra)
    return schema


def _int(**extra):
    return dict({"type": "integer"}, **extra)


def _bool():
    return {"type": "boolean"}


def _strings():
    return {"type": "array", "items": {"type": "string"}}


def _set_of_strings():
    """A list the apiserver keeps free of duplicates (it answers 422 to one)."""
    return dict(_strings(), **{"x-kubernetes-list-type": "set"})


def _objects(properties=None):
    return {"type": "array", "items": _open(properties)}


def _int_or_string():
    return {"x-kubernetes-int-or-string": True}


_CONDITION = {
    "type": _string(),
    "status": _string(),
    "reason": _string(),
    "message": _string(),
    "lastProbeTime": {"type": "string", "nullable": True},
    "lastTransitionTime": {"type": "string", "nullable": True},
}

_MIGRATION_STATE = _open(
    {
        "migrationUid": _string(),
        "sourceNode": _string(),
        "targetNode": _string(),
        "sourcePod": _string(),
        "targetPod": _string(),
        "startTimestamp": _string(),
        "endTimestamp": _string(),
        "completed": _bool(),
        "failed": _bool(),
        "abortRequested": _bool(),
        "mode": _string(),
    }
)

_VMI_SPEC = _open(
    {
        "evictionStrategy": _string(EVICTION_STRATEGIES),
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
        "affinity": _open(),
        "tolerations": _objects(),
        "terminationGracePeriodSeconds": _int(),
        "domain": _open(
            {
                "memory": _open({"guest": _int_or_string()}),
                "resources": _open({"requests": _open(), "limits": _open()}),
                "cpu": _open({"cores": _int(), "sockets": _int(), "threads": _int(), "model": _string()}),
                "devices": _open(),
            }
        ),
        "volumes": _objects(),
        "networks": _objects(),
    }
)

_VMI_STATUS = _open(
    {
        "phase": _string(VMI_PHASES),
        "nodeName": _string(),
        "reason": _string(),
        "conditions": _objects(_CONDITION),
        "evacuationNodeName": _string(),
        "migrationState": _MIGRATION_STATE,
        "interfaces": _objects(),
        "activePods": _open(),
    }
)


def _crd(group, kind, plural, singular, *, scope="Namespaced", short_names=(), categories=(), versions):
    names = {"kind": kind, "plural": plural, "singular": singular, "listKind": f"{kind}List"}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    return {
        "metadata": {"name": f"{plural}.{group}", "labels": {"app.kubernetes.io/managed-by": "kubevirt-sim"}},
        "spec": {"group": group, "names": names, "scope": scope, "versions": versions},
    }


def _version(name, spec, status, columns=(), served=True, storage=True, required=None):
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": _string(),
            "kind": _string(),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    if required:
        schema["required"] = required
    version = {
        "name": name,
        "served": served,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
    }
    if columns:
        version["additionalPrinterColumns"] = [dict(c) for c in columns]
    return version


def _column(name, json_path, type_="string", priority=0, description=None):
    col = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


AGE = _column("Age", ".metadata.creationTimestamp", "date")


def definitions(hco_conversion=None):
    """The CRDs of the stand-ins (HyperConverged, both NodeMaintenance groups, BareMetalHost), as dicts ready
    for server-side apply; KubeVirt's own come from virt-operator's generators (lab/kubevirt)."""
    live_migration = _open(
        {
            "parallelMigrationsPerCluster": _int(minimum=0),
            "parallelOutboundMigrationsPerNode": _int(minimum=0),
            "bandwidthPerMigration": _string(),
            "completionTimeoutPerGiB": _int(),
            "progressTimeout": _int(),
        }
    )
    hco_status = _open(
        {
            "conditions": _objects(_CONDITION),
            "observedGeneration": _int(),
            "infrastructureHighlyAvailable": _bool(),
            "systemHealthStatus": _string(),
            "versions": _objects({"name": _string(), "version": _string()}),
        }
    )
    # HyperConverged as HCO v1.18.1 installs it (config/crd/bases/hco.kubevirt.io_hyperconvergeds.yaml):
    # v1 and v1beta1 served, v1beta1 stored (v1 is stored from a later release), the obsolete CPU
    # models a list of type set in both.
    hco = _crd(
        "hco.kubevirt.io",
        "HyperConverged",
        "hyperconvergeds",
        "hyperconverged",
        short_names=["hco", "hcos"],
        categories=["all"],
        versions=[
            _version(
                "v1",
                _open(
                    {
                        "virtualization": _open(
                            {
                                "evictionStrategy": _string(EVICTION_STRATEGIES),
                                "obsoleteCPUModels": _set_of_strings(),
                                "liveMigrationConfig": live_migration,
                            }
                        ),
                        "deployment": _open(),
                    }
                ),
                hco_status,
                columns=[AGE],
                storage=False,
            ),
            _version(
                "v1beta1",
                _open(
                    {
                        "evictionStrategy": _string(EVICTION_STRATEGIES),
                        "obsoleteCPUs": _open({"cpuModels": _set_of_strings(), "minCPUModel": _string()}),
                        "liveMigrationConfig": live_migration,
                    }
                ),
                hco_status,
                columns=[AGE],
                storage=True,
            ),
        ],
    )
    if hco_conversion:
        hco["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": hco_conversion},
        }
    nm_columns = [
        _column("Node", ".spec.nodeName"),
        _column("Phase", ".status.phase"),
        _column("Progress", ".status.drainProgress", "integer"),
        AGE,
    ]
    nm_spec = _open({"nodeName": _string(), "reason": _string()}, required=["nodeName"])
    nm_status = _open(
        {
            "phase": _string(["Running", "Succeeded", "Failed"]),
            "drainProgress": _int(),
            "lastUpdate": _string(),
            "lastError": _string(),
            "pendingPods": _strings(),
            "totalpods": _int(),
            "evictionPods": _int(),
            "errorOnLeaseCount": _int(),
        }
    )
    nodemaintenance = _crd(
        NMO_GROUP,
        "NodeMaintenance",
        "nodemaintenances",
        "nodemaintenance",
        scope="Cluster",
        short_names=["nm"],
        versions=[_version("v1beta1", nm_spec, nm_status, columns=nm_columns, required=["spec"])],
    )
    legacy_nodemaintenance = _crd(
        LEGACY_NMO_GROUP,
        "NodeMaintenance",
        "nodemaintenances",
        "nodemaintenance",
        scope="Cluster",
        versions=[_version("v1beta1", nm_spec, nm_status, columns=nm_columns, required=["spec"])],
    )
    return [hco, nodemaintenance, legacy_nodemaintenance] + remediation_definitions()


REMEDIATION_GROUP = "remediation.medik8s.io"
MACHINE_API_GROUP = "machine.openshift.io"
CLUSTER_API_GROUP = "cluster.x-k8s.io"


def _label_selector():
    expression = _open({"key": _string(), "operator": _string(), "values": _strings()})
    return {
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": expression},
        },
        "x-kubernetes-map-type": "atomic",
    }


def remediation_definitions():
    """What remediates nodes, with no controller behind it (the lab only proves what a module writes):
    medik8s NodeHealthCheck (api/v1alpha1/nodehealthcheck_types.go of medik8s/node-healthcheck-operator),
    OpenShift's MachineHealthCheck and Machine (openshift/api machine/v1beta1) and Cluster API's
    (kubernetes-sigs/cluster-api api/core/v1beta1), with the fields maintenance reads or writes."""
    unhealthy = _objects({"type": _string(), "status": _string(), "timeout": _string(), "duration": _string()})
    template_ref = _open({"apiVersion": _string(), "kind": _string(), "name": _string(), "namespace": _string()})
    phase = _column("Phase", ".status.phase")
    nhc = _crd(
        REMEDIATION_GROUP,
        "NodeHealthCheck",
        "nodehealthchecks",
        "nodehealthcheck",
        scope="Cluster",
        short_names=["nhc"],
        versions=[
            _version(
                "v1alpha1",
                _open(
                    {
                        "selector": _label_selector(),
                        "unhealthyConditions": unhealthy,
                        "minHealthy": _int_or_string(),
                        "maxUnhealthy": _int_or_string(),
                        "remediationTemplate": template_ref,
                        "escalatingRemediations": _objects(),
                        "pauseRequests": _strings(),
                        "healthyDelay": _string(),
                    }
                ),
                _open({"phase": _string(), "reason": _string(), "observedNodes": _int(), "healthyNodes": _int()}),
                columns=[phase, AGE],
            )
        ],
    )
    mhc_spec = {
        "selector": _label_selector(),
        "unhealthyConditions": unhealthy,
        "maxUnhealthy": _int_or_string(),
        "nodeStartupTimeout": _string(),
        "remediationTemplate": template_ref,
    }
    mhc_status = _open({"expectedMachines": _int(), "currentHealthy": _int(), "conditions": _objects(_CONDITION)})
    machine_status = _open(
        {"nodeRef": _open({"kind": _string(), "name": _string(), "uid": _string()}), "phase": _string()}
    )
    openshift_mhc = _crd(
        MACHINE_API_GROUP,
        "MachineHealthCheck",
        "machinehealthchecks",
        "machinehealthcheck",
        short_names=["mhc", "mhcs"],
        versions=[_version("v1beta1", _open(mhc_spec), mhc_status, columns=[AGE])],
    )
    openshift_machine = _crd(
        MACHINE_API_GROUP,
        "Machine",
        "machines",
        "machine",
        versions=[
            _version(
                "v1beta1",
                _open({"providerID": _string(), "providerSpec": _open()}),
                machine_status,
                columns=[phase, _column("Node", ".status.nodeRef.name"), AGE],
            )
        ],
    )
    capi_mhc = _crd(
        CLUSTER_API_GROUP,
        "MachineHealthCheck",
        "machinehealthchecks",
        "machinehealthcheck",
        short_names=["mhc", "mhcs"],
        categories=["cluster-api"],
        versions=[
            _version(
                "v1beta1",
                _open(dict(mhc_spec, clusterName=_string())),
                mhc_status,
                columns=[_column("Cluster", ".spec.clusterName"), AGE],
                required=["spec"],
            )
        ],
    )
    capi_machine = _crd(
        CLUSTER_API_GROUP,
        "Machine",
        "machines",
        "machine",
        short_names=["ma"],
        categories=["cluster-api"],
        versions=[
            _version(
                "v1beta1",
                _open({"clusterName": _string(), "providerID": _string(), "bootstrap": _open()}),
                machine_status,
                columns=[_column("Cluster", ".spec.clusterName"), _column("Node", ".status.nodeRef.name"), AGE],
            )
        ],
    )
    return [nhc, openshift_mhc, openshift_machine, capi_mhc, capi_machine]


def apply_all(kube, timeout=120, medik8s_node_maintenance=True, hco_conversion=None, exclude_groups=()):
    """Create or update every CRD (but those of ``exclude_groups``) and wait until the
    apiserver serves them.

    Without ``medik8s_node_maintenance`` the nodemaintenance.medik8s.io CRD is left to the
    real node-maintenance-operator's installation (its own config/crd). ``hco_conversion``
    is the clientConfig (url, caBundle) of HyperConverged's conversion webhook."""
    names = []
    for crd in definitions(hco_conversion):
        if crd["spec"]["group"] in exclude_groups:
            continue
        if crd["spec"]["group"] == NMO_GROUP and not medik8s_node_maintenance:
            continue
        kube.apply(k.CRDS, crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = kube.get(k.CRDS, name)
            # Right after creation the status (even its conditions) may still be null.
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CustomResourceDefinition {name} was not established within {timeout}s")
            time.sleep(0.3)
    log.info("CRDs established: %s", ", ".join(names))
