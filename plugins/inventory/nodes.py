# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nodes
short_description: Kubernetes / KubeVirt cluster nodes as Ansible hosts
version_added: 0.1.0
description:
  - Makes every node of a cluster (or those matching O(label_selector)) an Ansible host, so that a playbook can
    put nodes into maintenance one at a time (with C(serial) set to 1) and run real host tasks, such as a reboot, a firmware
    or a package update over SSH, while a node is drained.
  - C(ansible_host) is the node's C(InternalIP) (else its C(ExternalIP), else its hostname address).
  - "Groups: C(control_plane) (nodes with the C(node-role.kubernetes.io/control-plane) or C(master) label),
    C(workers) (all other nodes), C(schedulable) (Ready and not cordoned) and C(in_maintenance) (cordoned for
    maintenance by this collection or by the node-maintenance operator: a NodeMaintenance custom resource, its
    C(medik8s.io/drain) taint, or this collection's record)."
  - "Host variables: C(node_name), C(node_labels), C(node_annotations), C(node_roles), C(node_taints),
    C(node_ready), C(node_schedulable), C(node_in_maintenance), C(node_maintenance_phase),
    C(node_internal_ip), C(node_kubelet_version), C(node_os_image), C(node_simulated) (a KWOK node with no
    machine behind it), and, when KubeVirt is installed, C(node_vmi_count) and C(node_vmis) (the VirtualMachineInstances
    on the node, found through their C(kubevirt.io/nodeName) label)."
  - Supports the constructed options (O(compose), O(groups), O(keyed_groups)) and inventory caching.
  - The configuration file name must end with C(nodes.yml) or C(nodes.yaml).
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
    choices: [kubevirt_ops.maintenance.nodes]
  label_selector:
    description: Only nodes matching this label selector become hosts, for example C(node-role.kubernetes.io/worker).
    type: str
  hostname:
    description:
      - What a host is called in the inventory.
      - V(name) is the node name. V(internal_ip) is its C(InternalIP) address.
    type: str
    choices: [name, internal_ip]
    default: name
  vmis:
    description:
      - Count the VirtualMachineInstances on each node (one list call). Skipped when KubeVirt is not installed.
    type: bool
    default: true
  kubeconfig:
    description:
      - Path to a kubeconfig file; several separated by C(:) are merged as kubectl merges C(KUBECONFIG).
      - When neither O(kubeconfig) nor O(host) is given, C(KUBECONFIG) or C(~/.kube/config) is used, and inside a
        pod its service account.
    type: raw
    env:
      - name: K8S_AUTH_KUBECONFIG
  context:
    description: The kubeconfig context to use instead of its current context.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
  host:
    description: URL of the Kubernetes API server. Overrides the kubeconfig's server.
    type: str
    env:
      - name: K8S_AUTH_HOST
  api_key:
    description: Bearer token to authenticate with.
    type: str
    env:
      - name: K8S_AUTH_API_KEY
  validate_certs:
    description: Whether to verify the API server's TLS certificate.
    type: bool
    aliases: [verify_ssl]
    env:
      - name: K8S_AUTH_VERIFY_SSL
  ca_cert:
    description: Path to a CA certificate to verify the API server with.
    type: path
    aliases: [ssl_ca_cert]
    env:
      - name: K8S_AUTH_SSL_CA_CERT
  client_cert:
    description: Path to a client certificate for authentication.
    type: path
    aliases: [cert_file]
    env:
      - name: K8S_AUTH_CERT_FILE
  client_key:
    description: Path to the client certificate's private key.
    type: path
    aliases: [key_file]
    env:
      - name: K8S_AUTH_KEY_FILE
  proxy:
    description: HTTP(S) proxy URL to reach the API server through.
    type: str
    env:
      - name: K8S_AUTH_PROXY
  impersonate_user:
    description: User to impersonate for every request.
    type: str
    env:
      - name: K8S_AUTH_IMPERSONATE_USER
  impersonate_groups:
    description: Groups to impersonate for every request.
    type: list
    elements: str
    env:
      - name: K8S_AUTH_IMPERSONATE_GROUPS
requirements:
  - python >= 3.9 on the controller
  - kubernetes >= 24.2.0 (brings urllib3 and PyYAML)
notes:
  - The auth options and their C(K8S_AUTH_*) environment variables are the ones of the collection's modules
    (and of kubernetes.core), so one kubeconfig serves both.
  - The user needs C(list) on nodes and, for the VMI count, on C(virtualmachineinstances) in all namespaces.
"""

EXAMPLES = r"""
# cluster.nodes.yml: every node, reachable over SSH at its InternalIP
plugin: kubevirt_ops.maintenance.nodes
kubeconfig: ~/.kube/config

---
# workers.nodes.yml: only workers, grouped by rack label, with the BMC address composed from a label
plugin: kubevirt_ops.maintenance.nodes
label_selector: node-role.kubernetes.io/worker
keyed_groups:
  - key: node_labels['topology.kubernetes.io/zone'] | default('none')
    prefix: zone
compose:
  bmc_address: node_labels['example.com/bmc'] | default(omit)
groups:
  busy: node_vmi_count | default(0) > 20
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/kubevirt-nodes
cache_timeout: 300

# Then: ansible-playbook -i workers.nodes.yml kubevirt_ops.maintenance.rolling_maintenance_hosts
"""

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import nodes as node_state
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.cluster import node_marks
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import MaintenanceError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.kubevirt import NODE_NAME_LABEL, vmi_is_active

AUTH_OPTIONS = ("kubeconfig", "context", "host", "api_key", "validate_certs", "ca_cert", "client_cert", "client_key",
                "proxy", "impersonate_user", "impersonate_groups")
ROLE_PREFIX = "node-role.kubernetes.io/"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GROUPS = ("control_plane", "workers", "schedulable", "in_maintenance")


def _address(node, kinds=("InternalIP", "ExternalIP", "Hostname")):
    addresses = (node.get("status") or {}).get("addresses") or []
    for kind in kinds:
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                return address["address"]
    return None


def describe_node(node, vmis_by_node=None, maintenance_by_node=None):
    """The host variables of one Node (plain data, so it can be cached)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = meta.get("name")
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    taints = list(spec.get("taints") or [])
    cordoned = node_state.is_cordoned(node)
    ready = node_state.is_ready(node)
    in_maintenance, maintenance_phase = node_marks.maintenance_state(node, (maintenance_by_node or {}).get(name))
    host = {
        "node_name": name,
        "node_labels": labels,
        "node_annotations": annotations,
        "node_roles": sorted(k[len(ROLE_PREFIX):] for k in labels if k.startswith(ROLE_PREFIX) and k != ROLE_PREFIX),
        "node_taints": taints,
        "node_ready": ready,
        "node_schedulable": ready and not cordoned,
        "node_cordoned": cordoned,
        "node_in_maintenance": in_maintenance,
        "node_maintenance_phase": maintenance_phase,
        "node_control_plane": node_state.is_control_plane(node),
        "node_internal_ip": _address(node, ("InternalIP",)),
        "node_kubelet_version": (status.get("nodeInfo") or {}).get("kubeletVersion"),
        "node_os_image": (status.get("nodeInfo") or {}).get("osImage"),
        "node_simulated": annotations.get(KWOK_ANNOTATION) == "fake" or (spec.get("providerID") or "").startswith("kwok://"),
        "ansible_host": _address(node),
    }
    if vmis_by_node is not None:
        vmis = sorted(vmis_by_node.get(name) or [])
        host["node_vmi_count"] = len(vmis)
        host["node_vmis"] = vmis
    return host


def collect(client, label_selector=None, vmis=True):
    """List nodes (and VMIs, NodeMaintenances when served): a list of host-variable dicts."""
    nodes, _rv = client.list("Node", label_selector=label_selector)
    vmis_by_node = None
    if vmis and client.kind_served("VirtualMachineInstance"):
        vmis_by_node = {}
        items, _rv = client.list("VirtualMachineInstance", label_selector=NODE_NAME_LABEL)
        for vmi in items:
            if not vmi_is_active(vmi):
                continue
            meta = vmi.get("metadata") or {}
            node = (meta.get("labels") or {}).get(NODE_NAME_LABEL)
            if node:
                vmis_by_node.setdefault(node, []).append("%s/%s" % (meta.get("namespace"), meta.get("name")))
    maintenance_by_node = {}
    for kind in ("LegacyNodeMaintenance", "NodeMaintenance"):
        if client.kind_served(kind):
            items, _rv = client.list(kind)
            for item in items:
                node = (item.get("spec") or {}).get("nodeName")
                if node:
                    maintenance_by_node[node] = (item.get("status") or {}).get("phase") or "Pending"
    return [describe_node(n, vmis_by_node, maintenance_by_node)
            for n in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or "")]


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "kubevirt_ops.maintenance.nodes"

    def verify_file(self, path):
        if not super(InventoryModule, self).verify_file(path):
            return False
        return path.endswith(("nodes.yml", "nodes.yaml"))

    def _client(self):
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.client import KubeClient
        from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.connection import resolve_settings

        params = dict((name, self.get_option(name)) for name in AUTH_OPTIONS)
        groups = params.get("impersonate_groups")
        if isinstance(groups, str):
            params["impersonate_groups"] = [g.strip() for g in groups.split(",") if g.strip()]
        return KubeClient(resolve_settings(params))

    def _fetch(self):
        try:
            return collect(self._client(), self.get_option("label_selector"), self.get_option("vmis"))
        except MaintenanceError as exc:
            raise AnsibleParserError("kubevirt_ops.maintenance.nodes: %s" % exc.msg) from exc
        except ImportError as exc:
            raise AnsibleParserError(
                "kubevirt_ops.maintenance.nodes needs the Python library kubernetes (with urllib3 and PyYAML) on the "
                "controller (pip install kubernetes): %s" % exc) from exc

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache")
        update_cache = False
        hosts = None
        if use_cache and cache:
            try:
                hosts = self._cache[cache_key]
            except KeyError:
                update_cache = True
        elif use_cache:
            update_cache = True  # --flush-cache: fetch again and store
        if hosts is None:
            hosts = self._fetch()
        if update_cache:
            self._cache[cache_key] = hosts
        self._populate(hosts)

    def _populate(self, hosts):
        for group in GROUPS:
            self.inventory.add_group(group)
        by_ip = self.get_option("hostname") == "internal_ip"
        strict = self.get_option("strict")
        for host_vars in hosts:
            name = (host_vars.get("node_internal_ip") if by_ip else None) or host_vars["node_name"]
            self.inventory.add_host(name)
            for key, value in host_vars.items():
                if value is None and key == "ansible_host":
                    continue
                self.inventory.set_variable(name, key, value)
            self.inventory.add_child("control_plane" if host_vars["node_control_plane"] else "workers", name)
            if host_vars["node_schedulable"]:
                self.inventory.add_child("schedulable", name)
            if host_vars["node_in_maintenance"]:
                self.inventory.add_child("in_maintenance", name)
            self._set_composite_vars(self.get_option("compose"), host_vars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), host_vars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), host_vars, name, strict=strict)
