"""Start the stand-ins beside the real virt-controller and virt-api.

    python -m lab.standins --kubeconfig KUBECONFIG --state-dir DIR [--no-hco] [--no-node-maintenance]

KubeVirt's CRDs, KubeVirt CR and webhooks are installed by ``lab up`` (lab/kubevirt). This
process plays only what cannot run here: virt-handler on every node (handler_*.py), the
storage provisioner, HCO, the legacy NodeMaintenance group and Metal3's BareMetalHost
(baremetal.py). It applies their CRDs, starts the caches and controllers, then writes
``DIR/ready`` (JSON) and runs until SIGTERM/SIGINT.
"""

import argparse
import base64
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from lab.standins import certs, crds, hco, hco_api, https_server, nodes, storage, webhook
from lab.standins.baremetal import BareMetalHostController
from lab.standins.firmware import HostFirmwareController
from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.cluster_config import ClusterConfig
from lab.standins.handler_launcher import LauncherPods
from lab.standins.handler_migration import MigrationHandler
from lab.standins.handler_node_labeller import HandlerNodeLabeller
from lab.standins.handler_nodes import LEASES, NODE_LEASE_NAMESPACE, Heartbeat
from lab.standins.handler_vmi import VMIHandler
from lab.standins.hco import HyperConvergedController
from lab.standins.machines import MachinePower
from lab.standins.informer import Informer
from lab.standins.nodemaintenance import NodeMaintenanceController
from lab.standins.storage import Provisioner

log = logging.getLogger("lab.standins")

HANDLER_USER = "system:serviceaccount:kubevirt:kubevirt-handler"


class StandIns:
    """The shared caches and settings every controller reads."""

    def __init__(self, kube, migration_bandwidth, medik8s_node_maintenance=True):
        self.kube = kube
        self.vms = Informer(kube, k.VMS)
        self.vmis = Informer(kube, k.VMIS)
        self.vmims = Informer(kube, k.VMIMS)
        self.kubevirts = Informer(kube, k.KUBEVIRTS)
        self.hcos = Informer(kube, k.HYPERCONVERGEDS)
        # nodemaintenance.medik8s.io is the real node-maintenance-operator's when the lab runs it.
        self.nms = Informer(kube, k.NODEMAINTENANCES) if medik8s_node_maintenance else None
        self.legacy_nms = Informer(kube, k.LEGACY_NODEMAINTENANCES, name="legacy-nodemaintenances")
        # Only KubeVirt's own pods (virt-launcher, virt-handler) are cached.
        self.pods = Informer(kube, k.PODS, label_selector=o.APP_LABEL)
        self.nodes = Informer(kube, k.NODES)
        self.pvcs = Informer(kube, k.PVCS)
        self.pvs = Informer(kube, k.PVS)
        self.bmhs = Informer(kube, k.BAREMETALHOSTS)
        self.config = ClusterConfig(self.kubevirts, migration_bandwidth)

        self.pods.add_index(
            "created-by",
            lambda p: [o.labels(p)[o.CREATED_BY_LABEL]] if o.CREATED_BY_LABEL in o.labels(p) else [],
        )
        self.pods.add_index(
            "migration", lambda p: [o.labels(p)[o.MIGRATION_JOB_LABEL]] if o.is_migration_target(p) else []
        )
        self.pods.add_index("node", lambda p: [o.pod_node(p)] if o.pod_node(p) else [])
        self.vmis.add_index(
            "node", lambda v: [o.status(v)["nodeName"]] if o.status(v).get("nodeName") else []
        )
        self.vmis.add_index(
            "claim", lambda v: [f"{o.meta(v, 'namespace')}/{c}" for c in o.claim_names(o.spec(v))]
        )
        self.vmims.add_index("vmi", lambda m: [f"{o.meta(m, 'namespace')}/{o.spec(m).get('vmiName')}"])
        self.vmims.add_index("uid", lambda m: [o.meta(m, "uid")])

    def add_handler_caches(self):
        """What the virt-handler stand-in reads besides the shared caches."""
        self.leases = Informer(self.kube, LEASES, field_selector=f"metadata.namespace={NODE_LEASE_NAMESPACE}")
        self.vmis.add_index("uid", lambda v: [o.meta(v, "uid")])

    def informers(self):
        return [v for v in vars(self).values() if isinstance(v, Informer)]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m lab.standins", description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the cluster")
    p.add_argument("--state-dir", required=True, help="directory for the ready file and certificates")
    p.add_argument("--no-hco", action="store_true", help="plain KubeVirt: no HyperConverged CR")
    p.add_argument(
        "--migration-bandwidth",
        default="1Gi",
        help="bytes per second a live migration copies when the KubeVirt CR sets no "
        "bandwidthPerMigration (default 1Gi: a 2Gi VM migrates in about 2 s)",
    )
    p.add_argument(
        "--no-node-maintenance",
        action="store_true",
        help="legacy group only: leave nodemaintenance.medik8s.io (CRD, webhook, controller) to the "
        "real node-maintenance-operator and keep only the nodemaintenance.kubevirt.io stand-in",
    )
    # Accepted for older callers: the real virt-controller and virt-api always run.
    p.add_argument("--real-kubevirt", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=60.0,
        help="virt-handler heartbeat period in seconds, before upstream's 1.2 jitter (default 60)",
    )
    p.add_argument(
        "--guest-shutdown-seconds",
        type=float,
        default=1.0,
        help="how long a guest takes to power off after an ACPI shutdown (default 1)",
    )
    p.add_argument("--power-log", help="the BMCs' power log (lab/machines): machine power reaches the nodes")
    p.add_argument("--boot-seconds", type=float, default=5.0, help="how long a machine takes to boot")
    p.add_argument("--lab-dir", help="the lab's state directory: what a booting machine's kubelet registers")
    p.add_argument("--log-level", default=os.environ.get("KUBEVIRT_SIM_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def wait_for_apiserver(kube, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.request("GET", "/version", timeout=5)
            return
        except Exception as e:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the apiserver at {kube.host} is not ready: {e}") from e
            time.sleep(1)


def wait_for_kubevirt_nodes(sim, timeout=20):
    """Give virt-handler time to land, so the first VM does not meet 'no schedulable node'.

    The start-up waits (this one and the APIService's) stay well below the minute
    ``lab up`` allows for the ready file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = sim.nodes.list()
        workers = [n for n in nodes if not o.spec(n).get("taints")]
        if not workers or any(o.labels(n).get(o.SCHEDULABLE_LABEL) == "true" for n in nodes):
            return
        time.sleep(0.5)
    log.warning("no node became kubevirt.io/schedulable within %ss", timeout)


def wait_for_hyperconverged(sim, timeout=20):
    """Ready means settled: the HyperConverged CR defaulted and Available, the KubeVirt CR written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        settled = [
            h
            for h in sim.hcos.list()
            if o.spec(h).get("evictionStrategy")
            and any(
                c.get("type") == "Available" and c.get("status") == "True"
                for c in o.status(h).get("conditions") or []
            )
        ]
        if settled:
            return
        time.sleep(0.2)
    log.warning("the HyperConverged CR was not Available within %ss", timeout)


def _registration(lab_dir):
    """What the kubelet of a lab node registers when its machine boots (lab/nodes.py ``registration``)."""
    if not lab_dir:
        return None
    from lab import nodes as lab_nodes
    from lab.paths import LabPaths

    return lambda node: lab_nodes.registration(LabPaths(Path(lab_dir)), node)


def run(args):
    """The virt-handler stand-in beside the real virt-controller and virt-api."""
    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    ready_file = state_dir / "ready"
    ready_file.unlink(missing_ok=True)

    kube = k.Kube(args.kubeconfig)
    log.info("starting the virt-handler stand-in against %s", kube.host)
    wait_for_apiserver(kube)
    medik8s = not args.no_node_maintenance
    serving = certs.create(state_dir / "certs", ["127.0.0.1"], ["localhost"])
    # HyperConverged's conversion webhook serves before its CRD exists.
    _, conversion_port = https_server.serve("127.0.0.1", serving.cert_file, serving.key_file, [hco_api.route])
    hco_conversion = {
        "url": f"https://127.0.0.1:{conversion_port}{hco_api.CONVERSION_PATH}",
        "caBundle": base64.b64encode(serving.ca_pem).decode(),
    }
    crds.apply_all(
        kube, medik8s_node_maintenance=medik8s, hco_conversion=hco_conversion, exclude_groups=("kubevirt.io",)
    )
    k.ensure_namespace(kube, "kubevirt")
    if not args.no_hco:
        hco.ensure_hyperconverged(kube)
    storage.ensure_storage_class(kube)
    # virt-operator's DaemonSet: KWOK runs its pods, drains skip them, and virt-controller's
    # node controller expects exactly one (pkg/virt-controller/watch/node/node.go).
    nodes.ensure_virt_handler(kube)

    sim = StandIns(kube, args.migration_bandwidth, medik8s_node_maintenance=medik8s)
    sim.add_handler_caches()
    heartbeat = Heartbeat(sim, args.heartbeat_interval)
    controllers = [
        heartbeat,
        VMIHandler(sim, args.guest_shutdown_seconds),
        MigrationHandler(sim),
        LauncherPods(sim),
        HandlerNodeLabeller(sim),
        Provisioner(sim),
        HyperConvergedController(sim),
    ]
    controllers.append(NodeMaintenanceController(sim))
    # The BareMetalHost stand-in trusts the BMCs' certificates as bmc.json's ca_file does (the lab CA); its
    # firmware objects and servicing are firmware.py's.
    firmware = HostFirmwareController(sim)
    controllers.append(BareMetalHostController(sim, ca_file=str(Path(args.lab_dir) / "pki" / "ca.crt")
                                               if args.lab_dir else True, servicing=firmware))
    controllers.append(firmware)
    if args.power_log:
        controllers.append(MachinePower(sim, args.power_log, args.boot_seconds, registration=_registration(args.lab_dir)))
    # virt-handler's own writes act as its ServiceAccount, so the RBAC virt-operator gives it and
    # virt-api's webhooks (which keep VMI status changes from anyone but KubeVirt's own
    # ServiceAccounts) judge them as they judge the real virt-handler.
    handler_kube = k.Kube(args.kubeconfig, user_agent="virt-handler", impersonate=HANDLER_USER)
    for controller in controllers:
        if isinstance(controller, (VMIHandler, MigrationHandler, HandlerNodeLabeller)):
            controller.kube = handler_kube
    for informer in sim.informers():
        informer.start()
    for informer in sim.informers():
        if not informer.wait_synced(120):
            raise TimeoutError(f"cache of {informer.name} did not sync (are KubeVirt's CRDs installed?)")
    for controller in controllers:
        controller.start()

    webhook_port = webhook.start(sim, serving, medik8s_node_maintenance=medik8s)

    wait_for_kubevirt_nodes(sim)
    if not args.no_hco:
        wait_for_hyperconverged(sim)
    info = {
        "pid": os.getpid(),
        "mode": "real-kubevirt",
        "webhook": f"https://127.0.0.1:{webhook_port}" if webhook_port else None,
        "migration_bandwidth": args.migration_bandwidth,
        "hco": not args.no_hco,
        "node_maintenance_groups": [
            g for g, on in ((crds.NMO_GROUP, medik8s), (crds.LEGACY_NMO_GROUP, True)) if on
        ],
    }
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    tmp.replace(ready_file)
    log.info("ready: %s", json.dumps(info))

    stopping = threading.Event()

    def stop(signum, frame):
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping.wait(3600):
        pass
    ready_file.unlink(missing_ok=True)
    heartbeat.stop()
    log.info("stopped")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        run(args)
    except Exception:
        log.exception("the KubeVirt stand-ins failed")
        return 1
    return 0
