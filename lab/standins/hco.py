"""A stand-in for the HyperConverged Cluster Operator (HCO 1.18.1) and its CR.

The real operator cannot run here (its Go module is not served by the module proxy), so
this plays the part of it the collection meets, following upstream's source
(kubevirt/hyperconverged-cluster-operator at v1.18.1):

- API: ``hco.kubevirt.io/v1beta1`` (stored, as 1.18.1) and ``v1``, converted by a webhook
  (``hco_api.py``; the CRD in ``crds.py``); the reconciler reads v1beta1, as upstream's does
  (``controllers/hyperconverged/hyperconverged_controller.go``, getHyperConverged).
- ``status.infrastructureHighlyAvailable``: at least 2 nodes labelled
  ``node-role.kubernetes.io/worker`` (``pkg/internal/nodeinfo/nodeinfo.go``; updateStatus).
- Defaulting: an unset eviction strategy becomes LiveMigrate on a highly available
  infrastructure, else None (``pkg/webhooks/mutator/v1beta1_hyperConvergedMutator.go``
  mutateV1beta1EvictionStrategy, ``hyperConvergedMutator.go`` mutateEvictionStrategy). Upstream's
  mutating webhook does it on the next update of the CR once the status is known; the
  stand-in patches the spec itself in the reconcile that first writes the status, before it,
  so a reader who sees ``Available`` also sees the defaulted strategy.
- The KubeVirt CR ``kubevirt/kubevirt`` is HCO's: its whole spec is built from the
  HyperConverged (``controllers/handlers/kubevirt.go`` NewKubeVirt, getKVConfig) and any other
  spec is replaced by it, an edit of any field put back at once (UpdateCR: ``reflect.DeepEqual``
  of the specs, then the whole spec copied and the object updated). Built from the
  HyperConverged: the eviction strategy as is (unset: none), ``liveMigrationConfig`` as
  ``configuration.migrations`` with exactly its fields (hcLiveMigrationToKv), the obsolete CPU
  models (HCO's hardcodedObsoleteCPUModels and the CR's, every value true: getObsoleteCPUConfig)
  and ``uninstallStrategy``. The rest of upstream's opinionated spec (feature gates, TLS, rollout
  strategy, product name and version...) is not modelled: the rest is the spec ``lab up`` creates
  (``lab/kubevirt/install.py``). The ``kubevirt.kubevirt.io/jsonpatch`` annotation of the
  HyperConverged is applied to the built spec (``controllers/operands/operand.go``
  ApplyPatchToSpec; only ``/spec/`` paths) and raises the ``TaintedConfiguration`` condition
  (detectTaintedConfiguration): the way to set what HCO does not expose, such as a KubeVirt
  feature gate. An invalid patch fails the reconcile (ReconcileComplete False, the others
  Unknown) and leaves the KubeVirt CR as it was. Upstream names its KubeVirt CR
  ``kubevirt-kubevirt-hyperconverged`` in HCO's namespace; the lab's is the one ``lab up`` creates.
- Conditions (ReconcileComplete, Available, Progressing, Degraded, Upgradeable) and
  ``systemHealthStatus`` come from the KubeVirt CR's own conditions, which virt-operator writes
  (here ``lab up``, or a test acting as virt-operator): ``controllers/operands/generic_operand.go``
  setConditionsByOperandConditions turns a component's Available=False, Progressing=True,
  Degraded=True and Upgradeable=False into HCO's, and the controller's
  aggregateComponentConditions derives the rest (Degraded -> Available False, Upgradeable False).
- Versions and upgrades: ``status.versions`` ``operator`` is the HCO version the CR was last
  reconciled to; an operator of another version (the lab knob below) is upgrading it
  (doReconcile, upgradeMode): Progressing True ``HCOUpgrading`` until the KubeVirt CR is ready and
  reports (``status.observedKubeVirtVersion``) the KubeVirt version that operator ships
  (CheckComponentVersion), then ``versions`` records the new version (completeReconciliation).

Lab knobs, annotations on the HyperConverged standing for the environment of HCO's operator
Deployment, which OLM replaces in an upgrade: ``kubevirt-ops.lab/hco-version`` (its
``HCO_KV_IO_VERSION``; default 1.18.1) and ``kubevirt-ops.lab/hco-kubevirt-version`` (its
``KUBEVIRT_VERSION``; default the KubeVirt CR's ``status.targetKubeVirtVersion``).
"""

import copy
import json

from lab.kubevirt import control_plane as kubevirt_control_plane
from lab.kubevirt import install as kubevirt_install
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import BUILTIN_OBSOLETE_CPU_MODELS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE
from lab.standins.workqueue import Controller

HCO_NAMESPACE = "kubevirt-hyperconverged"
HCO_NAME = "kubevirt-hyperconverged"
HCO_VERSION = "1.18.1"
WORKER_ROLE = "node-role.kubernetes.io/worker"
VERSION_ANNOTATION = "kubevirt-ops.lab/hco-version"
KUBEVIRT_VERSION_ANNOTATION = "kubevirt-ops.lab/hco-kubevirt-version"
# controllers/common/consts.go JSONPatchKVAnnotationName
KUBEVIRT_JSONPATCH_ANNOTATION = "kubevirt.kubevirt.io/jsonpatch"
# status.versions entry of HCO itself (hyperconverged_controller.go hcoVersionName)
OPERATOR = "operator"
# controllers/common/hcoConditions.go HcoConditionTypes, in that order
CONDITION_TYPES = ("ReconcileComplete", "Available", "Progressing", "Degraded", "Upgradeable")
COMPLETED = ("ReconcileCompleted", "Reconcile completed successfully")
INIT = ("Init", "Initializing HyperConverged cluster")
TAINTED = (
    "TaintedConfiguration",
    "True",
    "UnsupportedFeatureAnnotation",
    "Unsupported feature was activated via an HCO annotation",
)

DEFAULT_LIVE_MIGRATION_CONFIG = {
    "allowAutoConverge": False,
    "allowPostCopy": False,
    "completionTimeoutPerGiB": 150,
    "parallelMigrationsPerCluster": 5,
    "parallelOutboundMigrationsPerNode": 2,
    "progressTimeout": 150,
}
# The KubeVirt MigrationConfiguration fields hcLiveMigrationToKv fills from liveMigrationConfig.
_MIGRATION_KEYS = (
    "bandwidthPerMigration",
    "completionTimeoutPerGiB",
    "parallelOutboundMigrationsPerNode",
    "parallelMigrationsPerCluster",
    "progressTimeout",
    "network",
    "allowAutoConverge",
    "allowPostCopy",
)


def ensure_hyperconverged(kube):
    k.ensure_namespace(kube, HCO_NAMESPACE)
    if kube.get_or_none(k.HYPERCONVERGEDS, HCO_NAME, HCO_NAMESPACE) is not None:
        return
    kube.create(
        k.HYPERCONVERGEDS,
        {
            "apiVersion": k.HYPERCONVERGEDS.api_version,
            "kind": k.HYPERCONVERGEDS.kind,
            "metadata": {"name": HCO_NAME, "namespace": HCO_NAMESPACE},
            # Upstream's deploy/hco.cr.yaml sets no eviction strategy: defaulting decides.
            "spec": {
                "liveMigrationConfig": dict(DEFAULT_LIVE_MIGRATION_CONFIG),
                "infra": {},
                "workloads": {},
            },
        },
    )


def lab_kubevirt_spec():
    """The KubeVirt spec ``lab up`` creates: what the stand-in keeps of it besides the fields it builds."""
    (kubevirt,) = [
        obj
        for obj in kubevirt_install.base_objects(b"", kubevirt_control_plane.configuration(None))
        if obj["kind"] == "KubeVirt"
    ]
    return kubevirt["spec"]


# -- the KubeVirt spec ----------------------------------------------------------------------------


def kubevirt_spec(hco_spec, annotations, base):
    """The whole KubeVirt spec HCO writes for this HyperConverged spec (NewKubeVirt); ValueError
    when the jsonpatch annotation cannot be applied."""
    spec = copy.deepcopy(base)
    configuration = spec.setdefault("configuration", {})
    if hco_spec.get("evictionStrategy"):
        configuration["evictionStrategy"] = hco_spec["evictionStrategy"]
    else:
        configuration.pop("evictionStrategy", None)
    live_migration = hco_spec.get("liveMigrationConfig") or {}
    configuration["migrations"] = {
        f: copy.deepcopy(live_migration[f]) for f in _MIGRATION_KEYS if live_migration.get(f) is not None
    }
    models = list(BUILTIN_OBSOLETE_CPU_MODELS) + list((hco_spec.get("obsoleteCPUs") or {}).get("cpuModels") or [])
    configuration["obsoleteCPUModels"] = {m: True for m in models}
    remove_workloads = hco_spec.get("uninstallStrategy") == "RemoveWorkloads"
    spec["uninstallStrategy"] = "RemoveWorkloads" if remove_workloads else "BlockUninstallIfWorkloadsExist"
    operations = json_patch_of(annotations)
    if operations:
        try:
            for op in operations:
                if not str(op.get("path", "")).startswith("/spec/"):
                    raise ValueError("can only modify spec fields")
            spec = apply_json_patch({"spec": spec}, operations)["spec"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise ValueError(f"invalid jsonPatch in the {KUBEVIRT_JSONPATCH_ANNOTATION} annotation: {e}") from e
    return spec


def json_patch_of(annotations):
    """The operations of the jsonpatch annotation ([] without one); ValueError when it is not a list."""
    text = (annotations or {}).get(KUBEVIRT_JSONPATCH_ANNOTATION)
    if text is None:
        return []
    try:
        operations = json.loads(text)
    except ValueError as e:
        raise ValueError(f"invalid jsonPatch in the {KUBEVIRT_JSONPATCH_ANNOTATION} annotation: {e}") from e
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise ValueError(f"invalid jsonPatch in the {KUBEVIRT_JSONPATCH_ANNOTATION} annotation: not a list of operations")
    return operations


def apply_json_patch(document, operations):
    """``document`` with the RFC 6902 ``operations`` (add, remove, replace, test) applied."""
    document = copy.deepcopy(document)
    for op in operations:
        path = op["path"]
        if not path.startswith("/"):
            raise ValueError(f"bad path {path!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
        parent = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last, kind = parts[-1], op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent[last]
            if current != op["value"]:
                raise ValueError(f"test failed at {path}")
        elif kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, value)
                else:
                    parent[index] = value
            else:
                if kind == "replace" and last not in parent:
                    raise KeyError(last)
                parent[last] = value
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise ValueError(f"unsupported operation {kind!r}")
    return document


# -- conditions -----------------------------------------------------------------------------------


def component_conditions(component, conditions):
    """(HCO's negative conditions {type: (status, reason, message)}, ready) from one component's
    conditions: generic_operand.go handleComponentConditions and setConditionsByOperandConditions,
    operand.go handleOperand*Cond."""
    negative = {}

    def put(type_, status, reason, message, only_if_unset=False):
        if not (only_if_unset and type_ in negative):
            negative[type_] = (status, reason, message)

    if not conditions:  # getConditionsForNewCr
        reason, message = f"{component}Conditions", f"{component} resource has no conditions"
        put("Available", "False", reason, message)
        put("Progressing", "True", reason, message)
        put("Upgradeable", "False", reason, message)
        return negative, False
    ready = True
    found = set()
    for c in conditions:
        type_, status, message = c.get("type"), c.get("status"), c.get("message") or ""
        found.add(type_)
        if type_ == "Available" and status == "False":
            put("Available", "False", f"{component}NotAvailable", f"{component} is not available: {message}")
            ready = False
        elif type_ == "Progressing" and status == "True":
            text = f"{component} is progressing: {message}"
            put("Progressing", "True", f"{component}Progressing", text)
            put("Upgradeable", "False", f"{component}Progressing", text, only_if_unset=True)
            ready = False
        elif type_ == "Degraded" and status == "True":
            put("Degraded", "True", f"{component}Degraded", f"{component} is degraded: {message}")
            ready = False
        elif type_ == "Upgradeable" and status == "False":
            put("Upgradeable", "False", f"{component}NotUpgradeable", f"{component} is not upgradeable: {message}")
    if "Available" not in found:
        put("Available", "False", f"{component}NotAvailable", 'missing "Available" condition')
    return negative, ready and {"Available", "Progressing", "Degraded"} <= found


def aggregate(negative, upgrading, version):
    """All five conditions {type: (status, reason, message)} from the components' negative ones
    (hyperconverged_controller.go aggregateComponentConditions, the chart's numbers in comments,
    and completeReconciliation's override while upgrading)."""
    out = dict(negative)
    out["ReconcileComplete"] = ("True",) + COMPLETED
    if "Degraded" in negative:  # 1
        out.setdefault("Progressing", ("False",) + COMPLETED)  # 2, 3
        out.setdefault("Upgradeable", ("False", "HCODegraded", "HCO is not Upgradeable due to degraded components"))
        out.setdefault("Available", ("False", "HCODegraded", "HCO is not available due to degraded components"))
    else:
        out["Degraded"] = ("False",) + COMPLETED  # 8
        if "Progressing" in negative:  # 9
            out.setdefault(
                "Upgradeable", ("False", "HCOProgressing", "HCO is not Upgradeable due to progressing components")
            )
            out.setdefault("Available", ("True",) + COMPLETED)  # 12, 13
        else:
            out["Progressing"] = ("False",) + COMPLETED  # 14
            out.setdefault("Upgradeable", ("True",) + COMPLETED)  # 15, 16
            out.setdefault("Available", ("True",) + COMPLETED)  # 17, 18
    if upgrading:
        out["Progressing"] = ("True", "HCOUpgrading", f"HCO is now upgrading to version {version}")
    return out


def initial_conditions():
    """setInitialConditions: the status of a HyperConverged seen for the first time."""
    return {
        "ReconcileComplete": ("Unknown",) + INIT,
        "Available": ("False",) + INIT,
        "Progressing": ("True",) + INIT,
        "Degraded": ("False",) + INIT,
        "Upgradeable": ("Unknown",) + INIT,
    }


def system_health(conditions, upgrading):
    """getSystemHealthStatus: error, warning or healthy."""

    def true(type_):
        return (conditions.get(type_) or ("",))[0] == "True"

    if true("Degraded") or (not upgrading and not true("Available")):
        return "error"
    if not true("ReconcileComplete") or (not upgrading and true("Progressing")):
        return "warning"
    return "healthy"


def set_conditions(existing, wanted, generation, now):
    """``existing`` with the ``wanted`` types set as metav1.SetStatusCondition sets them
    (lastTransitionTime changes only with the status); a type missing from ``wanted`` is
    Unknown (updateConditions); other types are kept."""
    conditions = [dict(c) for c in existing or []]
    for type_ in CONDITION_TYPES:
        status, reason, message = wanted.get(type_) or ("Unknown", "StatusUnknown", "Unknown Status")
        set_condition(conditions, type_, status, reason, message, generation, now)
    return conditions


def set_condition(conditions, type_, status, reason, message, generation, now):
    new = {"type": type_, "status": status, "reason": reason, "message": message, "observedGeneration": generation}
    for c in conditions:
        if c.get("type") == type_:
            if c.get("status") != status or not c.get("lastTransitionTime"):
                c["lastTransitionTime"] = now
            c.update(new)
            return
    conditions.append(dict(new, lastTransitionTime=now))


def version_of(versions, name):
    return next((v.get("version") for v in versions or [] if v.get("name") == name), None)


# -- the controller -------------------------------------------------------------------------------


class HyperConvergedController(Controller):
    name = "hco"

    def __init__(self, sim):
        super().__init__(sim)
        self.base_kubevirt_spec = lab_kubevirt_spec()
        sim.hcos.add_handler(lambda event, hco, old: self.enqueue(k.key_of(hco)))
        # Edits of the KubeVirt CR's spec are put back; its conditions and version are HCO's input.
        sim.kubevirts.add_handler(lambda event, cr, old: self._enqueue_all())
        # The default eviction strategy depends on how many workers there are.
        sim.nodes.add_handler(self._on_node)

    def _on_node(self, event, node, old):
        if event != "MODIFIED" or (WORKER_ROLE in o.labels(node)) != (WORKER_ROLE in o.labels(old or {})):
            self._enqueue_all()

    def _enqueue_all(self):
        for key in self.sim.hcos.keys():
            self.enqueue(key)

    def all_keys(self):
        return self.sim.hcos.keys()

    def _infrastructure_highly_available(self):
        return sum(1 for n in self.sim.nodes.list() if WORKER_ROLE in o.labels(n)) >= 2

    def reconcile(self, key):
        hco = self.sim.hcos.get(key)
        if hco is None or o.deleting(hco):
            return None
        spec = o.spec(hco)
        kubevirt = self.sim.kubevirts.get_by(KUBEVIRT_NAMESPACE, KUBEVIRT_NAME)
        if kubevirt is None:
            return 1.0

        highly_available = self._infrastructure_highly_available()
        if not spec.get("evictionStrategy"):
            default = "LiveMigrate" if highly_available else "None"
            self.kube.patch(
                k.HYPERCONVERGEDS,
                o.meta(hco, "name"),
                {"spec": {"evictionStrategy": default}},
                o.meta(hco, "namespace"),
            )
            self.log.info("HyperConverged evictionStrategy defaulted to %s", default)
            spec = dict(spec, evictionStrategy=default)

        annotations = o.annotations(hco)
        own_version = annotations.get(VERSION_ANNOTATION) or HCO_VERSION
        try:
            desired = kubevirt_spec(spec, annotations, self.base_kubevirt_spec)
        except ValueError as e:
            self.log.warning("HyperConverged %s: %s", key, e)
            failed = {"ReconcileComplete": ("False", "ReconcileFailed", f"Error while reconciling: {e}")}
            self._write_status(hco, failed, o.status(hco).get("versions"), highly_available, upgrading=False)
            return None
        updated = o.spec(kubevirt) != desired
        if updated:
            body = copy.deepcopy(kubevirt)
            body.update(apiVersion=k.KUBEVIRTS.api_version, kind=k.KUBEVIRTS.kind, spec=desired)
            self.kube.replace(k.KUBEVIRTS, body)
            self.log.info(
                "KubeVirt CR spec reconciled to the HyperConverged's: %s",
                ", ".join(_differences(o.spec(kubevirt), desired)),
            )

        current = o.status(hco)
        versions = [dict(v) for v in current.get("versions") or []]
        if not current.get("conditions"):  # the first reconcile (doReconcile, init)
            versions = _with_version(versions, own_version)
            self._write_status(hco, initial_conditions(), versions, highly_available, upgrading=False)
            return 0.1  # upstream requeues after 100 ms
        upgrading = version_of(versions, OPERATOR) != own_version
        negative, ready = component_conditions("KubeVirt", o.status(kubevirt).get("conditions"))
        if upgrading and not negative and ready and not updated:
            kubevirt_status = o.status(kubevirt)
            expected = annotations.get(KUBEVIRT_VERSION_ANNOTATION) or kubevirt_status.get("targetKubeVirtVersion")
            if expected and kubevirt_status.get("observedKubeVirtVersion") == expected:
                versions = _with_version(versions, own_version)
                upgrading = False
                self.log.info("HyperConverged upgraded to version %s", own_version)
        self._write_status(hco, aggregate(negative, upgrading, own_version), versions, highly_available, upgrading)
        return None

    def _write_status(self, hco, wanted, versions, highly_available, upgrading):
        current = o.status(hco)
        generation = o.meta(hco, "generation")
        conditions = set_conditions(current.get("conditions"), wanted, generation, o.now())
        try:
            tainted = bool(json_patch_of(o.annotations(hco)))
        except ValueError:
            tainted = False  # getNumOfChangesJSONPatch: 0 for a patch that does not decode
        if tainted:
            set_condition(conditions, *TAINTED, generation, o.now())
        else:  # removed rather than False (detectTaintedConfiguration)
            conditions = [c for c in conditions if c.get("type") != TAINTED[0]]
        patch = {}
        if not _same_conditions(current.get("conditions"), conditions):
            patch["conditions"] = conditions
        health = system_health(wanted, upgrading)
        if current.get("systemHealthStatus") != health:
            patch["systemHealthStatus"] = health
        if current.get("infrastructureHighlyAvailable") != highly_available:
            patch["infrastructureHighlyAvailable"] = highly_available
        if current.get("observedGeneration") != generation:
            patch["observedGeneration"] = generation
        if (current.get("versions") or []) != versions:
            patch["versions"] = versions
        if patch:
            self.kube.patch(
                k.HYPERCONVERGEDS,
                o.meta(hco, "name"),
                {"status": patch},
                o.meta(hco, "namespace"),
                subresource="status",
            )


def _with_version(versions, version):
    """status.versions with the operator's entry set (versions.go UpdateVersion)."""
    out = [v for v in versions if v.get("name") != OPERATOR]
    index = next((i for i, v in enumerate(versions) if v.get("name") == OPERATOR), len(out))
    out.insert(index, {"name": OPERATOR, "version": version})
    return out


def _differences(current, desired, prefix="spec"):
    """The paths (down to the fields of spec.configuration.migrations) where ``current`` differs, for the log."""
    paths = []
    for key in sorted(set(current) | set(desired)):
        path = f"{prefix}.{key}"
        mine, theirs = current.get(key), desired.get(key)
        if mine == theirs:
            continue
        if path in ("spec.configuration", "spec.configuration.migrations") and isinstance(mine, dict) \
                and isinstance(theirs, dict):
            paths += _differences(mine, theirs, path)
        else:
            paths.append(path)
    return paths


def _same_conditions(a, b):
    def key(conditions):
        return [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in conditions or []
        ]

    return key(a) == key(b)
