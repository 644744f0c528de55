"""Command line of the lab: ``python -m lab up|down|status|env|node-fail|node-recover|node-partition|node-heal|restart|bmc``."""

import argparse
import sys

from lab import cluster, scheduler
from lab.machines import cli as bmc_cli
from lab.errors import LabError
from lab.paths import STATE_DIR_ENV, LabPaths, default_state_dir


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m lab",
        description="A local Kubernetes control plane with KWOK-simulated nodes. "
        f"State directory: ${STATE_DIR_ENV}, else <repo>/.lab.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start the lab (idempotent); builds binaries if missing")
    up.add_argument("--nodes", type=int, default=4, metavar="N", help="worker nodes (default 4)")
    up.add_argument(
        "--control-plane-nodes",
        type=int,
        default=1,
        metavar="M",
        help="control-plane nodes (default 1)",
    )
    up.add_argument(
        "--no-hco", action="store_true", help="leave the HCO stand-in out"
    )
    up.add_argument(
        "--no-metal3",
        action="store_true",
        help="create no BareMetalHost for the workers (their machines are reached through their BMCs only)",
    )
    up.add_argument(
        "--metal3-workers",
        type=int,
        metavar="N",
        help="only the first N workers are Metal3 hosts (a BareMetalHost, the providerID a Metal3 cluster gives "
        "them); the others are reached through their BMCs (bmc-inventory.yml). A new lab's choice",
    )
    up.add_argument(
        "--no-kubevirt",
        action="store_true",
        help="do not start KubeVirt, its stand-ins nor the node-maintenance-operator "
        "(plain Kubernetes lab)",
    )
    up.add_argument(
        "--kubevirt-version",
        metavar="X.Y.Z",
        help="run the real virt-controller and virt-api of this KubeVirt release "
        "(1.7.0, 1.8.0 or 1.9.0; built from the Go module on first use)",
    )
    up.add_argument(
        "--scale",
        action="store_true",
        help="the scale profile for labs of hundreds to ~3,000 nodes: a larger pod CIDR, "
        "heartbeats every 30 s, 5 minutes until a silent node turns NotReady (lab/README.md)",
    )
    up.add_argument(
        "--scheduler-profile",
        choices=scheduler.NAMES,
        help="how the kube-scheduler scores nodes: LowNodeUtilization (spread), HighNodeUtilization "
        "(pack), NoScoring (no score plugins), default (built-in defaults; the default for a new lab). "
        "A running lab switches by restarting only the kube-scheduler",
    )
    scheduler_profile = commands.add_parser(
        "scheduler-profile", help="restart the running lab's kube-scheduler with another profile"
    )
    scheduler_profile.add_argument("name", metavar="PROFILE", choices=scheduler.NAMES)
    build = commands.add_parser(
        "build", help="build every binary the lab runs into the cache (nothing starts); idempotent"
    )
    build.add_argument(
        "--kubevirt-version",
        metavar="X.Y.Z",
        action="append",
        help="a KubeVirt release to build (repeatable; default: the lab's default release)",
    )
    commands.add_parser("down", help="stop everything and delete the cluster; keeps logs/")
    commands.add_parser("status", help="show components and nodes; exit 1 unless fully up")
    commands.add_parser("env", help="print `export KUBECONFIG=...` for eval")
    for name, what, returns in (
        ("node-fail", "the node's machine crashes (its BMC powers it off): its kubelet, virt-handler and guests die",
         "once the machine is dead"),
        ("node-recover", "the node's machine is powered on and boots: a new boot ID, its guests gone, a node "
         "deleted meanwhile registered again", "once it booted"),
        ("node-partition", "cut the node off the network: its heartbeat stops, its processes and guests go on",
         "once nothing it writes reaches the API server"),
        ("node-heal", "end the node's partition: the same boot, its guests still running", "at once"),
    ):
        command = commands.add_parser(name, help=what)
        command.add_argument("node", metavar="NAME")
        command.add_argument(
            "--no-wait", action="store_true", help=f"return {returns}, without waiting for the node's Ready condition"
        )
    for name, what in (("stop", "stop"), ("start", "start again")):
        command = commands.add_parser(name, help=f"{what} virt-api or virt-controller (fault tests)")
        command.add_argument("component", metavar="COMPONENT", choices=("virt-api", "virt-controller"))
    restart = commands.add_parser("restart", help="restart a component on the same port")
    restart.add_argument("component", metavar="COMPONENT", help="apiserver (or any core component)")

    bmc_cli.add_parser(commands)

    args = parser.parse_args(argv)
    paths = LabPaths(default_state_dir())
    try:
        if args.command == "up":
            cluster.up(
                paths,
                workers=args.nodes,
                control_plane_nodes=args.control_plane_nodes,
                hco=not args.no_hco,
                kubevirt=not args.no_kubevirt,
                profile="scale" if args.scale else None,
                kubevirt_version=args.kubevirt_version,
                scheduler_profile=args.scheduler_profile,
                metal3_hosts=not args.no_metal3,
                metal3_workers=args.metal3_workers,
            )
        elif args.command == "build":
            cluster.build(paths, args.kubevirt_version)
        elif args.command == "scheduler-profile":
            cluster.set_scheduler_profile(paths, args.name)
        elif args.command == "down":
            cluster.down(paths)
        elif args.command == "status":
            return 0 if cluster.status(paths) else 1
        elif args.command == "env":
            print(f"export KUBECONFIG={paths.kubeconfig}")
        elif args.command == "node-fail":
            cluster.node_fail(paths, args.node, wait=not args.no_wait)
        elif args.command == "node-recover":
            cluster.node_recover(paths, args.node, wait=not args.no_wait)
        elif args.command == "node-partition":
            cluster.node_partition(paths, args.node, wait=not args.no_wait)
        elif args.command == "node-heal":
            cluster.node_heal(paths, args.node, wait=not args.no_wait)
        elif args.command == "stop":
            cluster.stop_component(paths, args.component)
        elif args.command == "start":
            cluster.start_component(paths, args.component)
        elif args.command == "restart":
            cluster.restart(paths, args.component)
        elif args.command == "bmc":
            return bmc_cli.run(paths, args)
    except LabError as e:
        print(f"lab: error: {e}", file=sys.stderr)
        if e.detail:
            print(e.detail, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
