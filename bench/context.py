"""What every scenario run needs: the lab, its audit log, the peers' environment, the workers."""

from pathlib import Path

from bench import peers, workloads
from bench.audit import AuditLog
from bench.kube import Kube

REPO = Path(__file__).resolve().parent.parent


class Context:
    def __init__(self, lab_dir, timeout=900, collections=None):
        self.lab_dir = Path(lab_dir)
        self.kubeconfig = self.lab_dir / "kubeconfig"
        self.kube = Kube(self.kubeconfig)
        self.audit = AuditLog(self.lab_dir / "audit.log")
        self.env = peers.Env(self.lab_dir, self.kubeconfig, self.kube,
                             collections or REPO / ".build" / "collections", timeout)
        self.workers = workloads.workers(self.kube)
