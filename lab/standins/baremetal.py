"""Metal3 BareMetalHost stand-in: a host's power switch is its KWOK node's heartbeat.

metal3-io/baremetal-operator serves ``baremetalhosts.metal3.io`` (v1alpha1) and drives each
host's BMC: ``spec.online`` is the power state asked for, ``status.poweredOn`` the one the BMC
last reported (``apis/metal3.io/v1alpha1/baremetalhost_types.go``). Here the "machine" of a host
is a KWOK node, found the way the collection finds a node's host, from the other side:

- the node whose ``spec.providerID`` names the host (``metal3://<namespace>/<host>/<machine>``,
  ``metal3://<host uid>`` or ``baremetalhost:///<namespace>/<host>[/<uid>]``), else
- the node named by the host's annotation ``kubevirt-ops.lab/node`` (lab only: a lab node's
  providerID is ``kwok://<name>`` and cannot change once set).

``online: false`` powers the machine off as ``lab/nodes.py fail`` stops a kubelet: the node's Lease
goes to a holder that never renews it, so KWOK stops renewing it and updating the node, and the
node lifecycle controller turns the node NotReady after its grace period; then
``status.poweredOn: false``. ``online: true`` boots again what this stand-in powered off, as a machine
does (machines.py ``boot``: a new ``bootID``, its virt-launcher pods Failed, the kubelet back) and
reports ``poweredOn: true``. Reboot annotations (``reboot.metal3.io[/<key>]``) power the host off while they
exist, as below. A host whose node does not exist (a decommissioned one) just reports what it was asked.
Provisioning is not modelled: every host is reported ``provisioned`` (``externally provisioned`` with
``spec.externallyProvisioned``), as a host carrying a running node is. Not modelled either: inspection, BMC
credentials, errors.
"""

from lab.standins import kube as k
from lab.standins import objects as o
from lab.standins.handler_nodes import FAILED_LEASE_HOLDER, LEASES, NODE_LEASE_NAMESPACE, kill_kubelet
from lab.standins.machines import boot
from lab.standins.workqueue import Controller

NODE_ANNOTATION = "kubevirt-ops.lab/node"
# baremetal-operator's reboot annotations (controllers/metal3.io/baremetalhost_controller.go, manageHostPower):
# while ``reboot.metal3.io`` or any ``reboot.metal3.io/<key>`` exists a provisioned host is powered off; the
# suffixless one is removed once the host is off, the suffixed ones by the clients that set them, and the host
# is powered on again (as spec.online says) once none is left.
REBOOT_ANNOTATION = "reboot.metal3.io"


def names_host(provider_id, host):
    """Whether a node's providerID names this BareMetalHost."""
    namespace, name, uid = o.meta(host, "namespace"), o.meta(host, "name"), o.meta(host, "uid")
    if provider_id.startswith("metal3://"):
        parts = [p for p in provider_id[len("metal3://"):].split("/") if p]
        return parts[:2] == [namespace, name] if len(parts) == 3 else parts == [uid]
    if provider_id.startswith("baremetalhost:///"):
        parts = [p for p in provider_id[len("baremetalhost:///"):].split("/") if p]
        return parts[:2] == [namespace, name]
    return False


class BareMetalHostController(Controller):
    name = "baremetalhost"

    def __init__(self, sim):
        super().__init__(sim)
        sim.bmhs.add_handler(lambda event, host, old: self.enqueue(k.key_of(host)))
        # A host may be created before the node that names it.
        sim.nodes.add_handler(lambda event, node, old: [self.enqueue(key) for key in sim.bmhs.keys()])

    def all_keys(self):
        return self.sim.bmhs.keys()

    def node_of(self, host):
        for node in self.sim.nodes.list():
            if names_host(o.spec(node).get("providerID") or "", host):
                return o.meta(node, "name")
        named = o.annotations(host).get(NODE_ANNOTATION)
        return named if named and self.sim.nodes.get(named) is not None else None

    def reconcile(self, key):
        host = self.sim.bmhs.get(key)
        if host is None or o.deleting(host):
            return None
        namespace, name = k.split_key(key)
        held = [a for a in o.annotations(host) if a == REBOOT_ANNOTATION or a.startswith(REBOOT_ANNOTATION + "/")]
        reported = o.status(host).get("poweredOn")
        if reported is False and REBOOT_ANNOTATION in held:
            # The one-off reboot is done once the host is off: the operator drops the suffixless annotation.
            self.kube.patch(k.BAREMETALHOSTS, name, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}},
                            namespace=namespace)
            return None
        # A reboot annotation keeps a provisioned host off (every lab host is: it carries a running node).
        online = bool(o.spec(host).get("online")) and not held
        if reported == online:
            return None
        node = self.node_of(host)
        if node is not None:
            if not online:
                if not self._switch_off(node):
                    return 1.0  # KWOK has not created the node's Lease yet
            elif reported is False:
                self._switch_on(node)
        status = {"poweredOn": online}
        if not (o.status(host).get("provisioning") or {}).get("state"):
            status["provisioning"] = {"state": "externally provisioned" if o.spec(host).get("externallyProvisioned")
                                      else "provisioned"}
        self.kube.patch(k.BAREMETALHOSTS, name, {"status": status}, namespace=namespace, subresource="status")
        self.log.info("BareMetalHost %s: powered %s (node %s)", key, "on" if online else "off", node or "none")
        return None

    def _switch_off(self, node):
        return kill_kubelet(self.kube, node, FAILED_LEASE_HOLDER)

    def _switch_on(self, node):
        lease = self.kube.get_or_none(LEASES, node, namespace=NODE_LEASE_NAMESPACE)
        if lease and o.spec(lease).get("holderIdentity") == FAILED_LEASE_HOLDER:
            boot(self.kube, self.sim, node, self.log)
