"""Start the KubeVirt simulator against a running cluster.

    python -m lab.kubevirt_sim --kubeconfig KUBECONFIG --state-dir DIR [--no-hco] [--real-kubevirt]

Applies the CRDs, creates the KubeVirt (and HyperConverged) CRs, starts the caches,
controllers, webhooks and the aggregated API, then writes ``DIR/ready`` (JSON:
pid, webhook port, how VM actions are served). It runs until SIGTERM/SIGINT.

With ``--real-kubevirt`` the real virt-controller and virt-api run beside it (their
CRDs, KubeVirt CR and webhooks installed by others): it then plays only virt-handler
on every node (handler_*.py), the storage provisioner, HCO and NodeMaintenance.
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

from lab.kubevirt_sim import certs, crds, hco, hco_api, https_server, kubevirt_cr, nodes, storage, webhook
from lab.kubevirt_sim import kube as k
from lab.kubevirt_sim import objects as o
from lab.kubevirt_sim.cluster_config import ClusterConfig
from lab.kubevirt_sim.evacuation import EvacuationController
from lab.kubevirt_sim.handler_launcher import LauncherPods
from lab.kubevirt_sim.handler_migration import MigrationHandler
from lab.kubevirt_sim.handler_node_labeller import HandlerNodeLabeller
from lab.kubevirt_sim.handler_nodes import LEASES, NODE_LEASE_NAMESPACE, Heartbeat
from lab.kubevirt_sim.handler_vmi import VMIHandler
from lab.kubevirt_sim.hco import HyperConvergedController
from lab.kubevirt_sim.informer import Informer
from lab.kubevirt_sim.kubevirt_cr import KubeVirtStatus
from lab.kubevirt_sim.migration_controller import MigrationController
from lab.kubevirt_sim.node_labeller import NodeLabeller
from lab.kubevirt_sim.nodemaintenance import NodeMaintenanceController
from lab.kubevirt_sim.nodes import SchedulableLabeller
from lab.kubevirt_sim.pdb import DisruptionBudgets
from lab.kubevirt_sim.storage import Provisioner
from lab.kubevirt_sim.subresources import SubresourceAPI, host_address
from lab.kubevirt_sim.vm_controller import VMController
from lab.kubevirt_sim.vmi_controller import VMIController

log = logging.getLogger("lab.kubevirt_sim")

ACTIONS_AGGREGATED = "aggregated-api"
HANDLER_USER = "system:serviceaccount:kubevirt:kubevirt-handler"
ACTIONS_VM_OBJECT = "vm-object"


class Simulator:
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
        self.pdbs = Informer(kube, k.PDBS, label_selector=o.CREATED_BY_LABEL)
        self.config = ClusterConfig(self.kubevirts, migration_bandwidth)
        self.budgets = DisruptionBudgets(self)

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
    p = argparse.ArgumentParser(prog="python -m lab.kubevirt_sim", description=__doc__.splitlines()[0])
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
        "--subresources-address",
        default="auto",
        help="address for the aggregated subresources.kubevirt.io API: an IP of this host, "
        "'auto' (first non-loopback address) or 'off'",
    )
    p.add_argument(
        "--no-node-maintenance",
        action="store_true",
        help="legacy group only: leave nodemaintenance.medik8s.io (CRD, webhook, controller) to the "
        "real node-maintenance-operator and keep only the nodemaintenance.kubevirt.io stand-in",
    )
    p.add_argument(
        "--real-kubevirt",
        action="store_true",
        help="the real virt-controller and virt-api run: play only virt-handler (plus storage, "
        "HCO and NodeMaintenance); KubeVirt's CRDs and KubeVirt CR must exist",
    )
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


def run(args):
    if args.real_kubevirt:
        return run_handler(args)
    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    ready_file = state_dir / "ready"
    ready_file.unlink(missing_ok=True)

    kube = k.Kube(args.kubeconfig)
    log.info("starting against %s", kube.host)
    wait_for_apiserver(kube)
    medik8s = not args.no_node_maintenance

    serving_ips = ["127.0.0.1"]
    address = None
    if args.subresources_address != "off":
        address = host_address() if args.subresources_address == "auto" else args.subresources_address
        if address:
            serving_ips.append(address)
    serving = certs.create(
        state_dir / "certs",
        serving_ips,
        ["virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local", "localhost"],
    )
    # HyperConverged's conversion webhook serves before its CRD exists: every read of the
    # version that is not stored goes through it.
    _, conversion_port = https_server.serve("127.0.0.1", serving.cert_file, serving.key_file, [hco_api.route])
    hco_conversion = {
        "url": f"https://127.0.0.1:{conversion_port}{hco_api.CONVERSION_PATH}",
        "caBundle": base64.b64encode(serving.ca_pem).decode(),
    }
    crds.apply_all(kube, medik8s_node_maintenance=medik8s, hco_conversion=hco_conversion)
    kubevirt_cr.ensure_kubevirt(kube)
    if not args.no_hco:
        hco.ensure_hyperconverged(kube)
    storage.ensure_storage_class(kube)
    nodes.ensure_virt_handler(kube)

    sim = Simulator(kube, args.migration_bandwidth, medik8s_node_maintenance=medik8s)
    controllers = [
        VMController(sim),
        VMIController(sim),
        MigrationController(sim),
        EvacuationController(sim),
        Provisioner(sim),
        SchedulableLabeller(sim),
        NodeLabeller(sim),
        KubeVirtStatus(sim),
        HyperConvergedController(sim),
        NodeMaintenanceController(sim),
    ]
    for informer in sim.informers():
        informer.start()
    for informer in sim.informers():
        if not informer.wait_synced(120):
            raise TimeoutError(f"cache of {informer.name} did not sync")
    for controller in controllers:
        controller.start()

    webhook_port = webhook.start(sim, serving, medik8s_node_maintenance=medik8s)

    subresources = SubresourceAPI(sim)
    actions = ACTIONS_VM_OBJECT
    if address:
        if subresources.start(address, serving):
            actions = ACTIONS_AGGREGATED
    else:
        subresources.withdraw()
        log.warning("no non-loopback address: VM actions only through the VM object")

    wait_for_kubevirt_nodes(sim)
    info = {
        "pid": os.getpid(),
        "webhook": f"https://127.0.0.1:{webhook_port}",
        "vm_actions": actions,
        "subresources_address": address if actions == ACTIONS_AGGREGATED else None,
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
    if actions == ACTIONS_AGGREGATED:
        # An APIService without its server breaks discovery (and namespace deletion).
        try:
            subresources.withdraw()
        except Exception as e:
            log.warning("could not withdraw the APIService: %s", e)
    log.info("stopped")


def run_handler(args):
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
    kubevirt_cr.ensure_namespace(kube, "kubevirt")
    if not args.no_hco:
        hco.ensure_hyperconverged(kube)
    storage.ensure_storage_class(kube)
    # virt-operator's DaemonSet: KWOK runs its pods, drains skip them, and virt-controller's
    # node controller expects exactly one (pkg/virt-controller/watch/node/node.go).
    nodes.ensure_virt_handler(kube)

    sim = Simulator(kube, args.migration_bandwidth, medik8s_node_maintenance=medik8s)
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

    webhook_port = webhook.start(sim, serving, kubevirt=False, medik8s_node_maintenance=medik8s)

    wait_for_kubevirt_nodes(sim)
    info = {
        "pid": os.getpid(),
        "mode": "real-kubevirt",
        "webhook": f"https://127.0.0.1:{webhook_port}" if webhook_port else None,
        "vm_actions": None,
        "subresources_address": None,
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
        log.exception("the KubeVirt simulator failed")
        return 1
    return 0
