"""Lab operations: up, down, status, restart, a node's death and boot, its partition and healing.

A lab is the set of processes recorded in one state directory. Every operation is
idempotent and re-reads that directory, so the CLI, the pytest plugin and a user at
a shell can act on the same lab one after the other.
"""

import fcntl
import os
import shutil
import sys
import time
from contextlib import contextmanager

from lab import binaries, components, kwok, metal3, network, nmo, nodes, processes, scheduler
from lab import settings as lab_settings
from lab.certs import CLIENTS, ensure_pki
from lab.components import CORE, Context
from lab.errors import LabError
from lab.kubeconfig import write_kubeconfig
from lab.kubevirt import SUPPORTED_VERSIONS, VIRT_API, VIRT_CONTROLLER, control_plane
from lab.kubevirt import normalize_version
from lab.machines import bmc
from lab.standins import handler_nodes, machines
from lab.standins import kube as standins_kube
from lab.paths import REPO_ROOT
from lab.wait import wait_for

SIM = "kubevirt-sim"
SIM_MAIN = REPO_ROOT / "lab" / "standins" / "__main__.py"
SIM_READY_TIMEOUT = 60
# The lab runs the real KubeVirt control plane; the variable and the mode remain for callers
# that name it.
KUBEVIRT_MODE_ENV = "KUBEVIRT_OPS_LAB_KUBEVIRT"
KUBEVIRT_MODES = ("real",)
# Which KubeVirt release a new lab runs when `up` is not told (default lab.kubevirt.DEFAULT_VERSION).
KUBEVIRT_VERSION_ENV = "KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION"
KUBEVIRT_COMPONENTS = (VIRT_API, VIRT_CONTROLLER)
PORT_RELEASE_TIMEOUT = 30
# A machine's power action takes effect within seconds (lab/machines/bmc.py POWER_DELAY), its boot within
# seconds more (lab/standins/machines.py).
POWER_TIMEOUT = 60
BOOT_TIMEOUT = 180


def say(message):
    print(f"lab: {message}", file=sys.stderr, flush=True)


def up(
    paths,
    workers=4,
    control_plane_nodes=1,
    hco=True,
    kubevirt=True,
    profile=None,
    kubevirt_version=None,
    kubevirt_mode=None,
    scheduler_profile=None,
    metal3_hosts=True,
    metal3_workers=None,
):
    """Bring the lab to the requested shape, starting only what is not running.

    ``profile`` is a key of lab.settings.PROFILES ("scale" for ``up --scale``); None keeps
    the one the lab was created with ("default" for a new lab). ``kubevirt_version``
    (e.g. "1.8.0", default $KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION, else 1.7.0) picks the release of
    the real virt-controller and virt-api; ``kubevirt_mode`` can only be "real".
    ``scheduler_profile`` (a name of lab/scheduler.py; None keeps the lab's, "default" for a
    new lab) is how the kube-scheduler scores nodes; a running lab switches by restarting
    only the kube-scheduler. ``metal3_hosts``: a BareMetalHost for every worker that has none
    (lab/metal3.py; not in the scale profile); without it none is created. ``metal3_workers`` (a new
    lab's choice): only that many workers, the first ones, are Metal3 hosts, registered with the providerID a
    Metal3 cluster gives them; the others have no BareMetalHost and ``bmc-inventory.yml`` gives their BMCs.
    """
    _check_scheduler_profile(scheduler_profile)
    kubevirt_version = kubevirt_version or os.environ.get(KUBEVIRT_VERSION_ENV) or None
    if kubevirt_version is not None:
        kubevirt_version = normalize_version(kubevirt_version)
        if kubevirt_version not in SUPPORTED_VERSIONS:
            raise LabError(
                f"KubeVirt {kubevirt_version} is not one the lab runs; one of: {', '.join(SUPPORTED_VERSIONS)}"
            )
        kubevirt_mode = kubevirt_mode or "real"
    kubevirt_mode = kubevirt_mode or os.environ.get(KUBEVIRT_MODE_ENV) or None
    if kubevirt_mode is not None and kubevirt_mode not in KUBEVIRT_MODES:
        raise LabError(f"unknown KubeVirt mode {kubevirt_mode!r}; one of: {', '.join(KUBEVIRT_MODES)}")
    if workers < 0 or control_plane_nodes < 1:
        raise LabError("need at least one control-plane node and zero or more workers")
    if metal3_workers is not None and not (0 <= metal3_workers <= workers and metal3_hosts and kubevirt):
        raise LabError(f"--metal3-workers {metal3_workers} needs KubeVirt, BareMetalHosts and 0 to {workers} workers")
    if profile is not None and profile not in lab_settings.PROFILES:
        raise LabError(f"unknown profile {profile!r}; one of: {', '.join(lab_settings.PROFILES)}")
    started = time.monotonic()
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    with _locked(paths):
        ctx = _prepare(
            paths, workers, control_plane_nodes, hco, kubevirt, profile, kubevirt_mode, kubevirt_version
        )
        if scheduler_profile is not None:
            _switch_scheduler_profile(ctx, scheduler_profile)
        for component in CORE:
            _ensure_running(ctx, component)
        api = nodes.api_client(paths.kubeconfig)
        _choose_metal3_workers(ctx, api, metal3_workers)
        nodes.ensure_dead_machine_policy(api)
        planned = nodes.plan(control_plane_nodes, workers, ctx.settings.metal3_workers)
        created = nodes.ensure(api, planned, binaries.kubernetes_version(ctx.settings.bin_dir))
        if created:
            say(f"created {len(created)} nodes: {_names(created)}")
        failed = set(nodes.failed_names(api)) | set(nodes.partitioned_names(api))
        nodes.wait_ready(
            api,
            [n.name for n in planned if n.name not in failed],
            timeout=ctx.settings.tuning.ready_timeout,
        )
        if kubevirt:
            nmo.ensure_running(paths, ctx.settings, say=say)
        if kubevirt:
            control_plane.ensure(ctx, api, say)
            metal3.install(api)
            _ensure_standins(paths, hco)
        workers_planned = [n for n in planned if not n.control_plane]
        # Nodes whose providerID names their host reach their machine through it alone (bmc-inventory.yml
        # leaves them out); without --metal3-workers every worker gets a host and keeps its BMC road.
        managed = [n.name for n in workers_planned if n.provider_id.startswith("metal3://")]
        hosts = managed if ctx.settings.metal3_workers is not None else [n.name for n in workers_planned]
        bmc.ensure(ctx, [(n.name, n.ip) for n in workers_planned], say, managed=managed)
        if kubevirt and metal3_hosts and ctx.settings.profile == "default" and hosts:
            metal3.ensure_hosts(api, {name: entry for name, entry in bmc.load(paths).items() if name in hosts}, say)
    say(
        f"up in {time.monotonic() - started:.0f}s: {len(planned)} nodes"
        f"{'' if ctx.settings.profile == 'default' else f' ({ctx.settings.profile} profile)'},"
        f"{'' if ctx.settings.scheduler_profile == 'default' else f' {ctx.settings.scheduler_profile} scheduling,'}"
        f" API at {ctx.settings.apiserver_url}"
    )
    say(f"export KUBECONFIG={paths.kubeconfig}")


def down(paths):
    """Stop every process of the lab and forget its cluster; keep the logs."""
    if not paths.state_dir.is_dir():
        return
    with _locked(paths):
        settings = lab_settings.load(paths)
        recorded = processes.recorded_names(paths)
        core = [c.name for c in reversed(CORE)]
        # Clients first (the stand-ins, anything else recorded), the control plane last.
        if processes.stop(paths, SIM, processes.DEFAULT_STOP_GRACE):
            say(f"stopped {SIM}")
        control_plane.stop(paths, say)
        order = [n for n in recorded if n not in core and n not in (SIM, *KUBEVIRT_COMPONENTS)] + core
        for name in order:
            component = components.BY_NAME.get(name)
            grace = component.stop_grace if component else processes.DEFAULT_STOP_GRACE
            if processes.stop(paths, name, grace):
                say(f"stopped {name}")
        if settings:
            for name, port in settings.ports.items():
                wait_for(
                    lambda: not network.port_in_use(port),
                    PORT_RELEASE_TIMEOUT,
                    f"127.0.0.1:{port} ({name}) to be released",
                )
        for entry in paths.cluster_files():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
    say(f"down; logs kept in {paths.logs}")


def is_running(paths):
    """True if the lab in ``paths`` has all its control plane up and serving."""
    settings = lab_settings.load(paths)
    if settings is None or not paths.kubeconfig.exists():
        return False
    if not all(processes.tracked(paths, c.name) for c in CORE):
        return False
    return components.BY_NAME["kube-apiserver"].healthy(_context(paths, settings))


def status(paths):
    """Print what runs and how the nodes are; True if the lab is fully up."""
    settings = lab_settings.load(paths)
    if settings is None:
        print(f"lab at {paths.state_dir}: not up")
        return False
    ctx = _context(paths, settings)
    healthy = True
    total_rss = 0
    lines = []
    for component in CORE:
        record = processes.tracked(paths, component.name)
        port = settings.ports[component.name]
        if record is None:
            state = "not running"
            healthy = False
        elif component.healthy(ctx):
            state = f"pid {record.pid}, healthy"
        else:
            state = f"pid {record.pid}, NOT healthy"
            healthy = False
        rss = processes.rss_bytes(record) if record else 0
        total_rss += rss
        lines.append(f"  {component.name:<24} 127.0.0.1:{port:<6} {state}{_mib(rss)}")
    if settings.kubevirt:
        for name in KUBEVIRT_COMPONENTS:
            record = processes.tracked(paths, name)
            where = f"{settings.service_address}:{settings.ports[name]}" if name == VIRT_API else f"127.0.0.1:{settings.ports[name]}"
            if record is None:
                state = "not running"
                healthy = False
            elif control_plane.healthy(ctx, name, settings.service_address):
                state = f"pid {record.pid}, {'leader' if name == VIRT_CONTROLLER else 'healthy'}"
            else:
                state = f"pid {record.pid}, NOT healthy"
                healthy = False
            rss = processes.rss_bytes(record) if record else 0
            total_rss += rss
            lines.append(f"  {name + ' v' + settings.kubevirt_version:<24} {where:<16} {state}{_mib(rss)}")
    sim = processes.tracked(paths, SIM)
    if sim:
        rss = processes.rss_bytes(sim)
        total_rss += rss
        ready = "ready" if paths.sim_ready.exists() else "not ready"
        lines.append(f"  {SIM:<24} {'':<16} pid {sim.pid}, {ready}{_mib(rss)}")
    else:
        lines.append(f"  {SIM:<24} {'':<16} not running")
    nmo_line = nmo.status_line(paths)
    if nmo_line:
        lines.append(nmo_line)
    redfish = processes.tracked(paths, bmc.COMPONENT)
    if redfish:
        rss = processes.rss_bytes(redfish)
        total_rss += rss
        where = f"{settings.service_address}:{settings.ports.get(bmc.COMPONENT)}"
        lines.append(f"  {'redfish BMCs':<24} {where:<16} pid {redfish.pid}{_mib(rss)}")
    print(f"lab at {paths.state_dir}: {'up' if healthy else 'DEGRADED'}")
    print("\n".join(lines))
    print(f"  total memory (RSS)       {total_rss / 2**20:.0f} MiB")
    if healthy:
        api = nodes.api_client(paths.kubeconfig)
        failed, partitioned = set(nodes.failed_names(api)), set(nodes.partitioned_names(api))
        for node in nodes.list_nodes(api):
            name = node.metadata.name
            ready = "Ready" if nodes.is_ready(node) else "NotReady"
            extra = []
            if node.spec.unschedulable:
                extra.append("SchedulingDisabled")
            if name in failed:
                extra.append("machine dead (node-fail or power off)")
            if name in partitioned:
                extra.append("partitioned (node-partition)")
            print(f"  node {name:<20} {ready:<9} {', '.join(extra)}".rstrip())
    print(f"kubeconfig: {paths.kubeconfig}")
    return healthy


def stop_component(paths, name):
    """Stop one KubeVirt component (virt-api, virt-controller), e.g. for a fault test."""
    _require_kubevirt_component(name)
    with _locked(paths):
        _require_settings(paths)
        if processes.stop(paths, name, control_plane.STOP_GRACE):
            say(f"stopped {name}")


def start_component(paths, name):
    """Start a stopped KubeVirt component again; wait until it serves (and leads)."""
    _require_kubevirt_component(name)
    with _locked(paths):
        settings = _require_settings(paths)
        control_plane.start_one(_context(paths, settings), name)
    say(f"started {name}")


def _require_kubevirt_component(name):
    if name not in KUBEVIRT_COMPONENTS:
        raise LabError(f"unknown KubeVirt component {name!r}; one of: {', '.join(KUBEVIRT_COMPONENTS)}")


def restart(paths, name, down_for=0):
    """Stop and start one control-plane component on its port; wait until it serves.
    ``down_for``: seconds the component stays stopped (an API server restart that takes a while)."""
    if name in KUBEVIRT_COMPONENTS:
        stop_component(paths, name)
        start_component(paths, name)
        return
    if name == nmo.NAME:
        # The operator process ends (TERM, as a pod deletion does) and a new one starts; returns
        # once the new one leads, runs its controller and serves its webhook.
        with _locked(paths):
            settings = _require_settings(paths)
            processes.stop(paths, name, control_plane.STOP_GRACE)
            nmo.ensure_running(paths, settings, say=say, restarted=True)
        say(f"restarted {name}")
        return
    component = components.BY_NAME.get(name) or components.BY_NAME.get(f"kube-{name}")
    if component is None:
        raise LabError(f"unknown component {name!r}; one of: {', '.join([*components.BY_NAME, nmo.NAME])}")
    with _locked(paths):
        settings = _require_settings(paths)
        ctx = _context(paths, settings)
        processes.stop(paths, component.name, component.stop_grace)
        port = settings.ports[component.name]
        wait_for(
            lambda: not network.port_in_use(port),
            PORT_RELEASE_TIMEOUT,
            f"127.0.0.1:{port} to be released by {component.name}",
        )
        time.sleep(down_for)
        _ensure_running(ctx, component)
    say(f"restarted {component.name} on 127.0.0.1:{settings.ports[component.name]}")


def set_scheduler_profile(paths, name):
    """Run the kube-scheduler of a running lab with another profile (lab/scheduler.py)."""
    _check_scheduler_profile(name)
    with _locked(paths):
        settings = _require_settings(paths)
        ctx = _context(paths, settings)
        _switch_scheduler_profile(ctx, name)
        _ensure_running(ctx, components.BY_NAME["kube-scheduler"])
    say(f"kube-scheduler runs with the {name} scheduler profile")


def _check_scheduler_profile(name):
    if name is not None and name not in scheduler.NAMES:
        raise LabError(f"unknown scheduler profile {name!r}; one of: {', '.join(scheduler.NAMES)}")


def _switch_scheduler_profile(ctx, name):
    """Record the profile and write its file; stop a kube-scheduler that runs another one
    (the caller starts it again)."""
    before = ctx.settings.scheduler_profile
    ctx.settings.scheduler_profile = name
    lab_settings.save(ctx.paths, ctx.settings)
    _write_scheduler_config(ctx)
    if before != name and processes.tracked(ctx.paths, "kube-scheduler"):
        component = components.BY_NAME["kube-scheduler"]
        processes.stop(ctx.paths, component.name, component.stop_grace)
        port = ctx.settings.ports[component.name]
        wait_for(
            lambda: not network.port_in_use(port),
            PORT_RELEASE_TIMEOUT,
            f"127.0.0.1:{port} to be released by {component.name}",
        )


def _write_scheduler_config(ctx):
    text = scheduler.configuration(
        ctx.settings.scheduler_profile, ctx.paths.component_kubeconfig("kube-scheduler")
    )
    if text is None:
        ctx.paths.scheduler_config.unlink(missing_ok=True)
    else:
        ctx.paths.scheduler_config.write_text(text)


def node_fail(paths, name, wait=True):
    """The node's machine crashes (lab/standins/machines.py ``crash``): it stays powered on (its BMC reports On,
    as after a kernel panic) but its kubelet, virt-handler and guests are dead and write nothing, until
    ``node_recover``. Returns once the machine is dead; with ``wait``, once the node is NotReady and tainted
    unreachable. A node whose machine is dead already is left as it is.

    Not a power-off: a worker's BareMetalHost powers an Off machine on again, as baremetal-operator's
    ``manageHostPower`` does for ``spec.online: true`` (``bmc power NODE off`` is that death)."""
    _require_settings(paths)
    api = nodes.api_client(paths.kubeconfig)
    nodes.get_node(api, name)
    if nodes.lease_holder(api, name) not in nodes.DEAD_MACHINE_HOLDERS:
        kube = _standins_client(paths)
        wait_for(lambda: machines.crash(kube, name), POWER_TIMEOUT, f"the Lease of node {name}")
    if wait:
        wait_for(lambda: nodes._all(api, [name], nodes.is_failed), nodes.FAIL_TIMEOUT, f"node {name} to become NotReady")
    say(f"node {name}: machine dead" + ("" if wait else " (not waiting for NotReady)"))


def node_recover(paths, name, wait=True):
    """The node's dead machine is reset through its BMC (ForceRestart; On when it is off) and boots
    (lab/standins/machines.py ``boot``): a new boot ID, its guests gone (virt-launcher pods Failed), a node
    deleted meanwhile registered again, the kubelet back. A machine without a BMC, or whose power reaches no
    node (``up --no-kubevirt``), boots at once. Returns once it booted; with ``wait``, once the node is Ready
    and untainted. A node whose machine lives is left as it is."""
    settings = _require_settings(paths)
    api = nodes.api_client(paths.kubeconfig)
    before = nodes.boot_id(api, name)
    dead = before is None or nodes.lease_holder(api, name) in nodes.DEAD_MACHINE_HOLDERS
    if dead:
        machine = _bmc_of(paths, settings, name)
        if machine is not None:
            machine.reset("ForceRestart" if machine.power_state() == "On" else "On")
        else:
            registration = nodes.registration(paths, name)
            if before is None and registration is None:
                raise LabError(f"no node named {name}")
            machines.boot(_standins_client(paths), None, name, registration=registration)
        wait_for(lambda: nodes.booted(api, name, before), BOOT_TIMEOUT, f"the machine of node {name} to boot")
    if wait:
        wait_for(lambda: nodes._all(api, [name], nodes.is_recovered), nodes.READY_TIMEOUT, f"node {name} to become Ready")
    say(f"node {name}: " + ("booted" if dead else "its machine lives") + ("" if wait else " (not waiting for Ready)"))


def node_partition(paths, name, wait=True):
    """Cut the node off the network: its kubelet and virt-handler go on, and so do its guests, but nothing they
    write gets through, and its heartbeat stops. Its Lease goes to a holder that never renews it
    (lab/standins/handler_nodes.py ``kill_kubelet``, the silence of a dead machine): kwok renews a node's Lease and
    plays its node and pod stages only while it holds it, and the API server refuses what kwok had taken up
    before (lab/dead_machines.py). The node-lifecycle controller then does what it does for a silent kubelet:
    after the grace period the node turns NotReady (Unknown) and is tainted ``node.kubernetes.io/unreachable``.
    Returns once nothing the node writes gets through; with ``wait``, once the node is NotReady."""
    _require_settings(paths)
    api = nodes.api_client(paths.kubeconfig)
    nodes.get_node(api, name)
    if nodes.lease_holder(api, name) in nodes.DEAD_MACHINE_HOLDERS:
        raise LabError(f"node {name}'s machine is dead: nothing is left to cut off (node-recover boots it)")
    kube = _standins_client(paths)
    wait_for(lambda: handler_nodes.kill_kubelet(kube, name, nodes.PARTITION_HOLDER), POWER_TIMEOUT,
             f"the Lease of node {name}")
    if wait:
        wait_for(lambda: nodes._all(api, [name], nodes.is_failed), nodes.FAIL_TIMEOUT, f"node {name} to become NotReady")
    say(f"node {name} partitioned" + ("" if wait else " (not waiting for NotReady)"))


def node_heal(paths, name, wait=True):
    """End the node's partition: what it writes gets through again and kwok takes its Lease back (the same boot,
    its guests still running); with ``wait``, until it is Ready. A node that is not partitioned is left alone."""
    _require_settings(paths)
    api = nodes.api_client(paths.kubeconfig)
    nodes.get_node(api, name)
    if nodes.lease_holder(api, name) == nodes.PARTITION_HOLDER:
        handler_nodes.revive_kubelet(_standins_client(paths), name)
    if wait:
        wait_for(lambda: nodes._all(api, [name], nodes.is_recovered), nodes.READY_TIMEOUT, f"node {name} to become Ready")
    say(f"node {name} healed" + ("" if wait else " (not waiting for Ready)"))


def _bmc_of(paths, settings, name):
    """The BMC of the node's machine when its power reaches the node (the stand-ins follow it), else None."""
    if not settings.kubevirt or processes.tracked(paths, SIM) is None:
        return None
    try:
        entry = bmc.load(paths).get(name)
    except LabError:
        return None
    return bmc.Bmc(entry) if entry else None


def _standins_client(paths):
    """The client the machines' deaths and boots are written with (the stand-ins' own)."""
    return standins_kube.Kube(paths.kubeconfig, user_agent="lab")


def build(paths, kubevirt_versions=None):
    """Every binary the lab runs, built into the cache when missing (``make test`` builds them
    while the static checks run, so that a cold run does not wait for them later)."""
    from lab.kubevirt import DEFAULT_VERSION
    from lab.kubevirt import binaries as kubevirt_binaries

    binaries.ensure()
    for version in kubevirt_versions or [DEFAULT_VERSION]:
        kubevirt_binaries.ensure(version, paths.log("kubevirt-build-%s" % version))
    nmo.ensure_built()
    metal3.ensure_built()
    say("binaries built: kubernetes, etcd, kwok, KubeVirt %s, node-maintenance-operator, the Metal3 CRDs"
        % ", ".join(kubevirt_versions or [DEFAULT_VERSION]))


def _choose_metal3_workers(ctx, api, metal3_workers):
    """Record a new lab's ``metal3_workers``: a node's providerID is set when it registers and never changes."""
    if metal3_workers is None or metal3_workers == ctx.settings.metal3_workers:
        return
    if nodes.list_nodes(api):
        raise LabError(f"the lab's nodes are registered already ({ctx.settings.metal3_workers or 'no'} Metal3 "
                       f"workers); take the lab down to register {metal3_workers}")
    ctx.settings.metal3_workers = metal3_workers
    lab_settings.save(ctx.paths, ctx.settings)


def _prepare(
    paths, workers, control_plane_nodes, hco, kubevirt, profile=None, kubevirt_mode=None, kubevirt_version=None
):
    """Settings, certificates and config files for ``up``; returns the start context."""
    bin_dir = binaries.ensure()
    settings = lab_settings.load(paths)
    anything_running = any(processes.tracked(paths, c.name) for c in CORE)
    if settings is None:
        settings = lab_settings.Settings(str(bin_dir), workers, control_plane_nodes, hco)
        settings.choose_ports()
    elif not anything_running:
        # A stopped lab (e.g. after a reboot) keeps its data but not its ports:
        # others may have taken them meanwhile.
        settings.choose_ports()
        settings.bin_dir = str(bin_dir)
    if profile is not None and profile != settings.profile:
        if anything_running:
            raise LabError(
                f"the lab in {paths.state_dir} runs with the {settings.profile} profile,"
                f" not {profile}: take it down first"
            )
        settings.profile = profile
    room = network.max_nodes(settings.tuning.pod_cidr)
    if workers + control_plane_nodes > room:
        hint = "" if settings.profile == "scale" else " (up --scale has room for more)"
        raise LabError(
            f"{workers + control_plane_nodes} nodes do not fit: the {settings.profile} profile's"
            f" pod CIDR {settings.tuning.pod_cidr} has a /24 for {room} nodes{hint}"
        )
    settings.workers, settings.control_plane_nodes = workers, control_plane_nodes
    settings.hco, settings.kubevirt = hco, kubevirt
    wanted_mode = kubevirt_mode or settings.kubevirt_mode
    wanted_version = kubevirt_version or settings.kubevirt_version
    if (wanted_mode, wanted_version) != (settings.kubevirt_mode, settings.kubevirt_version):
        if anything_running and kubevirt:
            raise LabError(
                f"the lab in {paths.state_dir} runs {settings.kubevirt_mode} KubeVirt"
                f" {settings.kubevirt_version}: take it down first"
            )
        settings.kubevirt_mode, settings.kubevirt_version = wanted_mode, wanted_version
    lab_settings.save(paths, settings)

    pki = ensure_pki(paths.pki)
    write_kubeconfig(
        paths.kubeconfig,
        settings.apiserver_url,
        pki.ca_cert,
        pki.cert("admin"),
        pki.key("admin"),
        CLIENTS["admin"][0],
    )
    for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
        write_kubeconfig(
            paths.component_kubeconfig(component),
            settings.apiserver_url,
            pki.ca_cert,
            pki.cert(component),
            pki.key(component),
            CLIENTS[component][0],
        )
    paths.audit_policy.write_text(components.audit_policy(settings))
    # With real KubeVirt, the virt-handler stand-in (playing virt-launcher) ends a launcher
    # pod's deletion once its guest has shut down; kwok must not delete it at once.
    kwok.write_config(
        paths.kwok_config,
        settings.bin_dir,
        launchers_by_handler=settings.kubevirt,
    )
    ctx = Context(paths, settings, pki)
    _write_scheduler_config(ctx)
    return ctx


def _ensure_running(ctx, component):
    paths = ctx.paths
    record = processes.tracked(paths, component.name)
    if record is None:
        port = ctx.port(component.name)
        if network.port_in_use(port):
            raise LabError(
                f"{component.name} cannot start: 127.0.0.1:{port} is taken by another process"
                " (run `python -m lab down`, then `up` again)"
            )
        say(f"starting {component.name} on 127.0.0.1:{port}")
        record = processes.start(
            paths, component.name, component.command(ctx), env=components.environment(ctx.settings)
        )

    def serving():
        if not processes.is_running(record):
            raise _start_failure(paths, component.name, "exited while starting")
        return component.healthy(ctx)

    try:
        wait_for(serving, components.START_TIMEOUT, f"{component.name} to serve")
    except LabError as e:
        if e.detail is None:
            raise _start_failure(paths, component.name, str(e)) from e
        raise


def _ensure_standins(paths, hco):
    if not SIM_MAIN.exists():
        say("lab/standins is not there: skipping the KubeVirt stand-ins")
        return
    record = processes.tracked(paths, SIM)
    if record is None:
        paths.sim_dir.mkdir(parents=True, exist_ok=True)
        paths.sim_ready.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "lab.standins",
            "--kubeconfig",
            str(paths.kubeconfig),
            "--state-dir",
            str(paths.sim_dir),
        ]
        if not hco:
            argv.append("--no-hco")
        argv.extend(nmo.STANDINS_FLAGS)
        # The machines' power reaches their nodes (lab/standins/machines.py).
        argv.extend(["--power-log", str(paths.machines / bmc.POWER_LOG), "--lab-dir", str(paths.state_dir)])
        say(
            "starting the virt-handler stand-in (and the HCO, storage, legacy NodeMaintenance "
            "and BareMetalHost stand-ins)"
        )
        env = components.environment()
        env["PYTHONUNBUFFERED"] = "1"
        record = processes.start(paths, SIM, argv, env=env, cwd=str(REPO_ROOT))

    def ready():
        if not processes.is_running(record):
            raise _start_failure(paths, SIM, "exited while starting")
        return paths.sim_ready.exists()

    try:
        wait_for(ready, SIM_READY_TIMEOUT, f"{paths.sim_ready} to appear")
    except LabError as e:
        if e.detail is None:
            raise _start_failure(paths, SIM, str(e)) from e
        raise


def _start_failure(paths, name, reason):
    log = paths.log(name)
    error = processes.last_error(log)
    summary = f"{name} failed to start ({reason})"
    if error:
        summary += f": {error[:300]}"
    return LabError(
        f"{summary} [log: {log}]",
        detail=f"last lines of {log}:\n{processes.log_tail(log)}",
    )


def _context(paths, settings):
    return Context(paths, settings, ensure_pki(paths.pki))


def _require_settings(paths):
    settings = lab_settings.load(paths)
    if settings is None:
        raise LabError(f"no lab is up in {paths.state_dir} (run `python -m lab up`)")
    return settings


def _names(names, shown=10):
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])}, ... {names[-1]}"


def _mib(rss):
    return f", {rss / 2**20:.0f} MiB" if rss else ""


@contextmanager
def _locked(paths):
    """One operation at a time per lab, across processes."""
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
