"""Where the lab keeps its files: one state directory per lab, so several can coexist."""

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR_ENV = "KUBEVIRT_OPS_LAB_DIR"


def cache_root():
    """Where the lab's builds are kept (binaries, generated manifests), shared by every lab and checkout:
    ``$KUBEVIRT_OPS_LAB_CACHE``, else ``~/.cache/kubevirt-ops-lab`` (as lab/build.sh)."""
    configured = os.environ.get("KUBEVIRT_OPS_LAB_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kubevirt-ops-lab"


def default_state_dir():
    """The state dir named by the environment, else ``<repo>/.lab`` (git-ignored)."""
    configured = os.environ.get(STATE_DIR_ENV)
    return Path(configured).resolve() if configured else REPO_ROOT / ".lab"


@dataclass(frozen=True)
class LabPaths:
    """Every file and directory of one lab, derived from its state directory."""

    state_dir: Path

    @property
    def kubeconfig(self):
        return self.state_dir / "kubeconfig"

    @property
    def settings(self):
        """Ports and node counts chosen at the first ``up``; reused until ``down``."""
        return self.state_dir / "lab.json"

    @property
    def lock(self):
        return self.state_dir / "lab.lock"

    @property
    def logs(self):
        return self.state_dir / "logs"

    def log(self, component):
        return self.logs / f"{component}.log"

    @property
    def pids(self):
        return self.state_dir / "pids"

    def pid_file(self, component):
        return self.pids / f"{component}.json"

    @property
    def pki(self):
        return self.state_dir / "pki"

    @property
    def component_kubeconfigs(self):
        return self.state_dir / "kubeconfigs"

    def component_kubeconfig(self, component):
        return self.component_kubeconfigs / f"{component}.kubeconfig"

    @property
    def etcd_data(self):
        return self.state_dir / "etcd"

    @property
    def audit_log(self):
        return self.state_dir / "audit.log"

    @property
    def audit_policy(self):
        return self.state_dir / "audit-policy.yaml"

    @property
    def kwok_config(self):
        return self.state_dir / "kwok.yaml"

    @property
    def scheduler_config(self):
        return self.state_dir / "scheduler.yaml"

    @property
    def sim_dir(self):
        return self.state_dir / "sim"

    @property
    def sim_ready(self):
        return self.sim_dir / "ready"

    @property
    def tmp(self):
        """The temporary directory of KubeVirt's processes (their TMPDIR): virt-api makes a new
        directory there at every start and leaves it, as a pod's filesystem would be discarded."""
        return self.state_dir / "tmp"

    @property
    def machines(self):
        """The lab's machines: the Redfish emulator's configuration, credentials and state."""
        return self.state_dir / "machines"

    @property
    def bmc_file(self):
        """``bmc.json``: every worker's BMC (address, username, password, CA file), for tools."""
        return self.state_dir / "bmc.json"

    @property
    def bmc_inventory(self):
        """``bmc-inventory.yml``: the workers as an Ansible inventory, each with its BMC (host var ``bmc``)."""
        return self.state_dir / "bmc-inventory.yml"

    def cluster_files(self):
        """What ``down`` deletes: the cluster and its credentials, not the logs.

        An explicit list, so a state directory pointed at by mistake loses nothing else.
        """
        return [
            self.kubeconfig,
            self.settings,
            self.pids,
            self.pki,
            self.component_kubeconfigs,
            self.etcd_data,
            self.audit_log,
            self.audit_policy,
            self.kwok_config,
            self.scheduler_config,
            self.sim_dir,
            self.tmp,
            self.machines,
            self.bmc_file,
            self.bmc_inventory,
        ]
