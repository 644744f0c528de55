"""The cluster-wide KubeVirt settings the stand-ins honour, read from the KubeVirt CR.

Like virt-controller, every decision reads the current CR from the cache, so a change
(for example by the HCO controller) applies to the next eviction or migration
without a restart.
"""

from kubernetes.utils import parse_quantity

from lab.standins.links import link_bytes_per_second

KUBEVIRT_NAMESPACE = "kubevirt"
KUBEVIRT_NAME = "kubevirt"

DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE = 2
# Upstream fails a migration whose target pod stays unschedulable this long.
DEFAULT_UNSCHEDULABLE_PENDING_TIMEOUT = 300
# The release of a lab whose KubeVirt CR names none (lab/settings.py's default).
DEFAULT_RELEASE = (1, 7)


class ClusterConfig:
    def __init__(self, kubevirt_informer, default_bandwidth="1Gi"):
        self._informer = kubevirt_informer
        self._default_bandwidth = default_bandwidth

    def kubevirt(self):
        cr = self._informer.get_by(KUBEVIRT_NAMESPACE, KUBEVIRT_NAME)
        if cr is None:
            items = self._informer.list()
            cr = items[0] if items else None
        return cr or {}

    def kubevirt_release(self):
        """(major, minor) of the KubeVirt the lab runs, which virt-handler is part of: the CR's
        ``status.observedKubeVirtVersion`` ("v1.8.0"), written by ``lab up`` as virt-operator
        would (lab/kubevirt/control_plane.py ``kubevirt_status``)."""
        version = (self.kubevirt().get("status") or {}).get("observedKubeVirtVersion") or ""
        try:
            major, minor = version.lstrip("v").split(".")[:2]
            return int(major), int(minor)
        except ValueError:
            return DEFAULT_RELEASE

    def _configuration(self):
        return (self.kubevirt().get("spec") or {}).get("configuration") or {}

    def _migrations(self):
        return self._configuration().get("migrations") or {}

    def eviction_strategy(self):
        """The cluster default eviction strategy, or None when none is configured."""
        return self._configuration().get("evictionStrategy") or None

    def parallel_migrations_per_cluster(self):
        value = self._migrations().get("parallelMigrationsPerCluster")
        return DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER if value is None else int(value)

    def parallel_outbound_migrations_per_node(self):
        value = self._migrations().get("parallelOutboundMigrationsPerNode")
        return DEFAULT_PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE if value is None else int(value)

    def bandwidth_bytes_per_second(self):
        """Migration bandwidth; 0 means unlimited (as upstream's bandwidthPerMigration)."""
        value = self._migrations().get("bandwidthPerMigration")
        if value in (None, ""):
            value = self._default_bandwidth
        return float(parse_quantity(str(value)))

    def migration_link_bytes_per_second(self):
        """Each node's migration link (links.py), 0 for none."""
        return link_bytes_per_second(self.kubevirt())

    def unschedulable_pending_timeout(self):
        value = self._migrations().get("unschedulablePendingTimeoutSeconds")
        return DEFAULT_UNSCHEDULABLE_PENDING_TIMEOUT if value is None else int(value)

    def obsolete_cpu_models(self):
        # Every key counts, whatever its value: KubeVirt's node-labeller skips a model when
        # ``_, ok := obsolete[model]`` (kubevirt v1.7.0 pkg/virt-handler/node-labeller/cpu_plugin.go,
        # filterCpuModels). Empty: the caller falls back to KubeVirt's default list.
        return set(self._configuration().get("obsoleteCPUModels") or {})


def effective_eviction_strategy(vmi, config):
    """The VMI's own strategy, else the cluster default, else None (shut down)."""
    own = (vmi.get("spec") or {}).get("evictionStrategy")
    return own or config.eviction_strategy()


# The obsolete CPU models HCO always adds (not shown in its CR), each also as "-v1":
# hardcodedObsoleteCPUModels of kubevirt/hyperconverged-cluster-operator v1.18.1,
# controllers/handlers/kubevirt.go (the same since v1.15.0). KubeVirt's own default when the
# KubeVirt CR has none (kubevirt v1.7.0 pkg/virt-handler/node-labeller/util/util.go,
# DefaultObsoleteCPUModels) is the same 34 models.
_BUILTIN_OBSOLETE = [
    "486",
    "pentium",
    "pentium2",
    "pentium3",
    "pentiumpro",
    "coreduo",
    "n270",
    "core2duo",
    "Conroe",
    "athlon",
    "phenom",
    "qemu64",
    "qemu32",
    "kvm64",
    "kvm32",
    "Opteron_G1",
    "Opteron_G2",
]
BUILTIN_OBSOLETE_CPU_MODELS = _BUILTIN_OBSOLETE + [f"{m}-v1" for m in _BUILTIN_OBSOLETE]
