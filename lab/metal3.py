"""Metal3 in the lab: the CRDs of baremetal-operator's API module and a BareMetalHost per worker.

baremetal-operator itself cannot be built here (the module proxy refuses
``github.com/metal3-io/baremetal-operator``), but its API module
``github.com/metal3-io/baremetal-operator/apis`` is served. Its CRDs are generated once from
that module's types with controller-gen, as upstream's ``make manifests`` does
(``Makefile``: ``crd:allowDangerousTypes=true,crdVersions=v1 paths=./...`` run in ``apis/``),
into the lab's cache (``<cache>/baremetal-operator-apis-<version>/crds``); nothing about the
API is written by hand. ``lab up`` installs them (BareMetalHost, HostFirmwareSettings,
FirmwareSchema, HostFirmwareComponents, HostUpdatePolicy and the rest of upstream's
``config/base/crds``), and the stand-in ``lab/standins/baremetal.py`` plays the operator.

Upstream's validating webhook (``internal/webhooks/metal3.io/v1alpha1/baremetalhost_validation.go``
``validatePowerStatus``) refuses a host with ``spec.disablePowerOff`` and ``spec.online: false``;
the lab has the same rule as a ValidatingAdmissionPolicy.

Every worker gets a BareMetalHost (``up``; not with ``up --no-metal3``) in
``openshift-machine-api``, named as its node, whose ``spec.bmc`` is the worker's Redfish System
(``redfish+https://...``, lab/machines) with a credentials Secret ``<node>-bmc-secret``, and the
annotation ``kubevirt-ops.lab/node`` naming the node (a lab node's providerID is ``kwok://<name>``
and cannot name its host). With ``up --metal3-workers N`` only the first N workers get a host, and
they register with the providerID Cluster API Provider Metal3 gives a node
(``metal3://openshift-machine-api/<host>/<machine>``), so the collection finds the host from the node
as on a Metal3 cluster; the other workers' machines are reached through their BMCs.
"""

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.paths import cache_root
from lab.wait import wait_for

MODULE = "github.com/metal3-io/baremetal-operator/apis"
# The newest release of the module the proxy serves (v0.13.0 and v0.12.x are refused).
VERSION = "v0.13.2"
# Upstream pins v0.16.5 (hack/tools/go.mod), which the proxy does not serve; v0.17.3 generates
# the same CRDs byte for byte but the version annotation.
CONTROLLER_TOOLS = "sigs.k8s.io/controller-tools"
CONTROLLER_TOOLS_VERSION = "v0.17.3"
NAME = "baremetal-operator-apis"
GROUP = "metal3.io"
# Where OpenShift keeps its BareMetalHosts (and its Machines).
NAMESPACE = "openshift-machine-api"
NODE_ANNOTATION = "kubevirt-ops.lab/node"
DETACHED_ANNOTATION = "baremetalhost.metal3.io/detached"
POLICY = "lab-metal3-baremetalhost"
# On the CRDs the lab installed: the module version they were generated from.
VERSION_LABEL = "kubevirt-ops.lab/apis-version"
CRD_TIMEOUT = 60


class BuildError(LabError):
    """The CRDs could not be generated; the message says why."""


@dataclass(frozen=True)
class Build:
    directory: Path

    @property
    def crds(self):
        return self.directory / "crds"

    @property
    def error_file(self):
        return self.directory / "build-error.txt"

    def complete(self):
        return (self.crds / "metal3.io_baremetalhosts.yaml").is_file()

    def crd_files(self):
        return sorted(self.crds.glob("metal3.io_*.yaml"))


def build_dir():
    return Build(cache_root() / f"{NAME}-{VERSION}")


def _say(message):
    print(f"lab: {message}", file=sys.stderr, flush=True)


def ensure_built(build=True, say=_say):
    """The generated CRDs, generated on first use (about 2 minutes cold: controller-gen is built
    too); raises BuildError. A failure is recorded in ``build-error.txt`` (delete it to retry)."""
    target = build_dir()
    if target.complete():
        return target
    if target.error_file.exists():
        raise BuildError(
            f"the Metal3 CRDs ({MODULE} {VERSION}) failed to generate earlier: see {target.error_file} "
            "(delete it to retry)", detail=target.error_file.read_text().strip())
    if not build:
        raise BuildError(f"the Metal3 CRDs are not generated in {target.directory}")
    go = shutil.which("go")
    if not go:
        raise BuildError(f"no `go` on PATH: cannot generate the CRDs of {MODULE} {VERSION}")
    target.directory.mkdir(parents=True, exist_ok=True)
    with open(target.directory / ".build.lock", "w") as lock:
        # Several labs may start at once on a fresh machine: one build, the others wait.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.complete():
            return target
        say(f"generating the CRDs of {MODULE}@{VERSION} with controller-gen {CONTROLLER_TOOLS_VERSION} (once)")
        _build(go, target)
    return target


def _build(go, target):
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    # The module's versions are served by the proxy, not always by the checksum database.
    env["GONOSUMDB"] = ",".join(filter(None, [env.get("GONOSUMDB"), "github.com/metal3-io"]))
    bin_dir = target.directory / "bin"
    src = target.directory / "src"
    out = target.directory / "crds.tmp"
    for path in (src, out):
        shutil.rmtree(path, ignore_errors=True)

    def run(step, cwd, what):
        result = subprocess.run(step, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            error = f"{what} failed:\n{(result.stderr or result.stdout).strip()[-3000:]}"
            target.error_file.write_text(error + "\n")
            raise BuildError(f"the Metal3 CRDs failed to generate: see {target.error_file}", detail=error)
        return result.stdout

    controller_gen = bin_dir / "controller-gen"
    if not controller_gen.is_file():
        env["GOBIN"] = str(bin_dir)
        run([go, "install", f"{CONTROLLER_TOOLS}/cmd/controller-gen@{CONTROLLER_TOOLS_VERSION}"],
            target.directory, f"`go install controller-gen@{CONTROLLER_TOOLS_VERSION}`")
    info = json.loads(run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], target.directory,
                          f"`go mod download {MODULE}@{VERSION}`"))
    # controller-gen runs inside the module, as upstream's Makefile does; the module cache is read-only.
    shutil.copytree(info["Dir"], src)
    for root, dirs, files in os.walk(src):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    run([str(controller_gen), "crd:allowDangerousTypes=true,crdVersions=v1", "paths=./...",
         f"output:crd:artifacts:config={out}"], src, "controller-gen")
    shutil.rmtree(target.crds, ignore_errors=True)
    out.replace(target.crds)
    shutil.rmtree(src, ignore_errors=True)


# -- installing them in a lab ---------------------------------------------------------------


def install(api):
    """Create or update every generated CRD and the webhook rule; wait until they are served."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    built = ensure_built()
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in built.crd_files():
        crd = yaml.safe_load(path.read_text())
        crd["metadata"].setdefault("labels", {})[VERSION_LABEL] = VERSION
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            current = ext.read_custom_resource_definition(name)
        except ApiException as e:
            if e.status != 404:
                raise
            ext.create_custom_resource_definition(crd)
            continue
        if (current.metadata.labels or {}).get(VERSION_LABEL) != VERSION:
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)

    def established():
        for name in names:
            status = ext.read_custom_resource_definition(name).status
            if not any(c.type == "Established" and c.status == "True" for c in (status.conditions or [])):
                return False
        return True

    wait_for(established, CRD_TIMEOUT, "the Metal3 CustomResourceDefinitions to be established")
    _install_policy(api)


def _install_policy(api):
    """Upstream's webhook rule ``validatePowerStatus`` as a ValidatingAdmissionPolicy: a host whose
    power-off is disabled cannot be asked to be off (403, upstream's message)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["v1alpha1"], "resources": ["baremetalhosts"],
                "operations": ["CREATE", "UPDATE"]}]},
            "validations": [{
                "expression": "!(has(object.spec.disablePowerOff) && object.spec.disablePowerOff == true"
                              " && object.spec.online == false)",
                "message": "node can't simultaneously have online set to false and have power off disabled",
                "reason": "Forbidden"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    }
    admission = client.AdmissionregistrationV1Api(api)
    for body, create, replace, read in (
            (policy, admission.create_validating_admission_policy, admission.replace_validating_admission_policy,
             admission.read_validating_admission_policy),
            (binding, admission.create_validating_admission_policy_binding,
             admission.replace_validating_admission_policy_binding,
             admission.read_validating_admission_policy_binding)):
        try:
            create(body)
        except ApiException as e:
            if e.status != 409:
                raise
            body["metadata"]["resourceVersion"] = read(POLICY).metadata.resource_version
            replace(POLICY, body)


# -- the workers' hosts ------------------------------------------------------------------------


def secret_name(node):
    return f"{node}-bmc-secret"


def bmc_address(entry):
    """A ``bmc.json`` address (``https://host:port/redfish/v1/Systems/<id>``) as a BareMetalHost names
    it: ``redfish+https://...`` (baremetal-operator ``pkg/hardwareutils/bmc/redfish.go``)."""
    return "redfish+" + entry["address"]


def host_manifest(node, entry, mac):
    return {
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": node, "namespace": NAMESPACE, "annotations": {NODE_ANNOTATION: node}},
        "spec": {"online": True, "bootMACAddress": mac,
                 "bmc": {"address": bmc_address(entry), "credentialsName": secret_name(node)}},
    }


def secret_manifest(node, entry):
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": secret_name(node), "namespace": NAMESPACE},
        "data": {"username": base64.b64encode(entry["username"].encode()).decode(),
                 "password": base64.b64encode(entry["password"].encode()).decode()},
    }


def boot_mac(entry):
    """The MAC of the machine's first NIC, as its BMC reports it (upstream's webhook requires
    ``bootMACAddress`` for Redfish hosts)."""
    from lab.machines import bmc as lab_bmc

    machine = lab_bmc.Bmc(entry)
    members = machine.get("/EthernetInterfaces").get("Members") or []
    for member in members:
        mac = machine.get(member["@odata.id"]).get("MACAddress")
        if mac:
            return mac.lower()
    return None


def ensure_hosts(api, bmcs, say=_say):
    """A BareMetalHost and its credentials Secret for every machine of ``bmcs`` (``bmc.json``) that
    has none; existing ones are left as they are. Returns the names created."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as e:
        if e.status != 409:
            raise
    existing = {h["metadata"]["name"] for h in custom.list_namespaced_custom_object(
        GROUP, "v1alpha1", NAMESPACE, "baremetalhosts")["items"]}
    created = []
    for node, entry in sorted(bmcs.items()):
        if node in existing:
            continue
        try:
            core.create_namespaced_secret(NAMESPACE, secret_manifest(node, entry))
        except ApiException as e:
            if e.status != 409:
                raise
        custom.create_namespaced_custom_object(GROUP, "v1alpha1", NAMESPACE, "baremetalhosts",
                                               host_manifest(node, entry, boot_mac(entry)))
        created.append(node)
    if created:
        say(f"created BareMetalHosts in {NAMESPACE}: {', '.join(created)}")
    return created


def host_of(api, node):
    """The lab's BareMetalHost of ``node`` (the one whose ``kubevirt-ops.lab/node`` names it), or None."""
    from kubernetes import client

    for host in client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, "v1alpha1", "baremetalhosts")["items"]:
        if (host["metadata"].get("annotations") or {}).get(NODE_ANNOTATION) == node:
            return host
    return None


def release_host(api, node, timeout=120):
    """Take ``node``'s machine out of Metal3's hands, as an administrator does before driving its BMC
    directly: detach its BareMetalHost (``baremetalhost.metal3.io/detached``: the operator stops managing
    it and leaves the machine's power alone), then delete it. ``lab up`` creates it again."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    host = host_of(api, node)
    if host is None:
        return None
    custom = client.CustomObjectsApi(api)
    namespace, name = host["metadata"]["namespace"], host["metadata"]["name"]
    custom.patch_namespaced_custom_object(GROUP, "v1alpha1", namespace, "baremetalhosts", name,
                                          {"metadata": {"annotations": {DETACHED_ANNOTATION: ""}}})

    def read():
        try:
            return custom.get_namespaced_custom_object(GROUP, "v1alpha1", namespace, "baremetalhosts", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    wait_for(lambda: (read() or {}).get("status", {}).get("operationalStatus") == "detached", timeout,
             f"BareMetalHost {namespace}/{name} to be detached")
    custom.delete_namespaced_custom_object(GROUP, "v1alpha1", namespace, "baremetalhosts", name)
    wait_for(lambda: read() is None, timeout, f"BareMetalHost {namespace}/{name} to be deleted")
    return f"{namespace}/{name}"


def restore_host(api, bmcs, node, timeout=120):
    """``node``'s BareMetalHost back as ``lab up`` made it (created again if it was deleted; online, not
    detached); returns once it reports its machine on."""
    from kubernetes import client

    ensure_hosts(api, {node: bmcs[node]}, say=lambda message: None)
    host = host_of(api, node)
    custom = client.CustomObjectsApi(api)
    namespace, name = host["metadata"]["namespace"], host["metadata"]["name"]
    custom.patch_namespaced_custom_object(GROUP, "v1alpha1", namespace, "baremetalhosts", name, {
        "metadata": {"annotations": {DETACHED_ANNOTATION: None}}, "spec": {"online": True}})

    def on():
        status = custom.get_namespaced_custom_object(GROUP, "v1alpha1", namespace, "baremetalhosts", name).get(
            "status") or {}
        return status.get("poweredOn") is True and status.get("operationalStatus") == "OK"

    wait_for(on, timeout, f"BareMetalHost {namespace}/{name} to report its machine on")
    return host


@contextlib.contextmanager
def hosts_released(api, bmcs, nodes):
    """The BareMetalHosts of ``nodes`` out of Metal3's hands (release_host) for the block, so that their machines
    can be driven through their BMCs; made again as ``lab up`` made them afterwards (restore_host), also after a
    failure. Yields the nodes whose host was released."""
    released = [node for node in nodes if release_host(api, node) is not None]
    try:
        yield released
    finally:
        for node in released:
            restore_host(api, bmcs, node)
