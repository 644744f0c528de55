#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: hco_obsolete_cpus
short_description: Manage the obsolete CPU models of OpenShift Virtualization (HyperConverged)
version_added: 0.1.0
description:
  - Adds CPU models to, or removes them from, the list of obsolete CPU models in the HyperConverged resource
    (C(spec.obsoleteCPUs.cpuModels), or C(spec.virtualization.obsoleteCPUModels) in C(hco.kubevirt.io/v1)).
    KubeVirt's node-labeller does not advertise obsolete models on nodes, so no VM is scheduled with them.
  - HCO adds the models of the resource to a built-in list that the resource does not show, and writes the union
    to the KubeVirt resource (C(spec.configuration.obsoleteCPUModels)), which is what KubeVirt uses. The module
    returns the built-in list (RV(builtin)) and the union (RV(effective)) as the cluster uses them, read from the
    KubeVirt resource when it can be read (listed in every namespace, or C(kubevirt-kubevirt-hyperconverged) in
    HCO's namespace), else taken from the built-in list of the HCO version the HyperConverged status reports
    (upstream HCO 1.4.0 to 1.18; since 1.15.0 C(486), C(pentium), C(pentium2), C(pentium3), C(pentiumpro),
    C(coreduo), C(n270), C(core2duo), C(Conroe), C(athlon), C(phenom), C(qemu64), C(qemu32), C(kvm64), C(kvm32),
    C(Opteron_G1), C(Opteron_G2), each also with the suffix C(-v1)). When neither tells, both are V(null), a warning
    says why, and RV(builtin_source) is V(unknown).
  - HCO writes the KubeVirt resource shortly after the HyperConverged resource changes; the module does not wait
    for it. After a change, and in check mode, RV(effective) is what HCO writes for the new list (the built-in
    list followed by the resource's models).
  - The change is a patch of that one list that the API server refuses if someone changed it in the meantime;
    the resource is then read again and the change recomputed.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  cpu_models:
    description:
      - CPU models to add (O(state=present)) or remove (O(state=absent)), for example C(Penryn).
      - Names are case-sensitive, as KubeVirt compares them.
    type: list
    elements: str
    default: []
  state:
    description:
      - V(present) adds O(cpu_models) to the list (or, with O(exclusive=true), makes the list exactly O(cpu_models)).
      - V(absent) removes O(cpu_models) from the list.
    type: str
    choices: [present, absent]
    default: present
  exclusive:
    description:
      - With O(state=present), the list becomes exactly O(cpu_models) (an empty O(cpu_models) empties it).
        Not allowed with O(state=absent).
    type: bool
    default: false
  min_cpu_model:
    description:
      - Sets C(spec.obsoleteCPUs.minCPUModel) (O(state=present)) or removes it when it has this value
        (O(state=absent)).
      - Deprecated by HCO and ignored by its recent versions; the module warns whenever it is given.
    type: str
  name:
    description:
      - Name of the HyperConverged resource.
    type: str
    default: kubevirt-hyperconverged
  namespace:
    description:
      - Namespace of the HyperConverged resource. When omitted, C(openshift-cnv) (OpenShift) and
        C(kubevirt-hyperconverged) (upstream) are tried, then every namespace.
    type: str
extends_documentation_fragment:
  - kubevirt_ops.maintenance.auth
  - kubevirt_ops.maintenance.attributes
  - kubevirt_ops.maintenance.attributes.actiongroup
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff holds the CPU model list (and C(minCPUModel)) of the resource before and after.
  idempotent:
    support: full
notes:
  - Fails, changing nothing, when no HyperConverged resource exists.
seealso:
  - module: kubevirt_ops.maintenance.node_labeller
"""

EXAMPLES = r"""
- name: Mark two more CPU models obsolete
  kubevirt_ops.maintenance.hco_obsolete_cpus:
    cpu_models:
      - Penryn
      - Nehalem

- name: Allow Nehalem again
  kubevirt_ops.maintenance.hco_obsolete_cpus:
    cpu_models: [Nehalem]
    state: absent

- name: Make the list exactly this (only the built-in models otherwise)
  kubevirt_ops.maintenance.hco_obsolete_cpus:
    cpu_models: [Penryn]
    exclusive: true
    namespace: openshift-cnv
"""

RETURN = r"""
cpu_models:
  description: The CPU models listed in the HyperConverged resource after the task (in check mode, what it would list).
  returned: success
  type: list
  elements: str
  sample: [Penryn, Nehalem]
builtin:
  description:
    - HCO's built-in obsolete CPU models, which the resource does not show.
    - With RV(builtin_source=kubevirt), the models of the KubeVirt resource's C(spec.configuration.obsoleteCPUModels)
      that the HyperConverged resource does not list (those it lists are kept when they are also in the built-in
      list of the reported HCO version); with RV(builtin_source=hco_version), the list of that HCO version.
    - V(null) when RV(builtin_source=unknown).
  returned: success
  type: list
  elements: str
  sample: ["486", 486-v1, pentium, pentium-v1]
effective:
  description:
    - Every CPU model treated as obsolete, the built-in list followed by the resource's own models; this is what HCO writes
      to the KubeVirt resource for the list after the task (in check mode, for the list it would set).
    - V(null) when RV(builtin_source=unknown).
  returned: success
  type: list
  elements: str
  sample: ["486", 486-v1, pentium, pentium-v1, Penryn]
builtin_source:
  description:
    - Where RV(builtin) comes from. V(kubevirt) is the KubeVirt resource (see RV(kubevirt)); V(hco_version) is the
      built-in list of RV(hco_version) because the KubeVirt resource could not be read or has no list yet (see
      RV(builtin_reason)); V(unknown) means neither, and RV(builtin) and RV(effective) are V(null).
  returned: success
  type: str
  choices: [kubevirt, hco_version, unknown]
  sample: kubevirt
builtin_reason:
  description: Why the KubeVirt resource was not used (and, for V(unknown), why the HCO version did not help either); V(null) with RV(builtin_source=kubevirt).
  returned: success
  type: str
  sample: "the KubeVirt resources cannot be read (permission denied)"
kubevirt:
  description: The KubeVirt resource RV(builtin) was read from; V(null) unless RV(builtin_source=kubevirt).
  returned: success
  type: dict
  contains:
    name:
      description: Its name.
      type: str
      sample: kubevirt-kubevirt-hyperconverged
    namespace:
      description: Its namespace.
      type: str
      sample: openshift-cnv
hco_version:
  description: HCO's version from the HyperConverged status (C(status.versions), entry C(operator)); V(null) when not reported.
  returned: success
  type: str
  sample: 1.18.1
min_cpu_model:
  description: C(spec.obsoleteCPUs.minCPUModel) after the task; V(null) when unset.
  returned: success
  type: str
  sample: null
hyperconverged:
  description: The HyperConverged resource that was read (and changed).
  returned: success
  type: dict
  contains:
    name:
      description: Its name.
      type: str
      sample: kubevirt-hyperconverged
    namespace:
      description: Its namespace.
      type: str
      sample: openshift-cnv
    api_version:
      description: The API version used.
      type: str
      sample: hco.kubevirt.io/v1beta1
diff:
  description: The resource's list (and minCPUModel) before and after.
  returned: when diff mode is on
  type: dict
  sample:
    before:
      cpuModels: []
      minCPUModel: null
    after:
      cpuModels: [Penryn]
      minCPUModel: null
"""

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.hco import DEFAULT_NAME
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.kubevirt.obsolete_cpus import obsolete_cpus
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            cpu_models=dict(type="list", elements="str", default=[]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            exclusive=dict(type="bool", default=False),
            min_cpu_model=dict(type="str"),
            name=dict(type="str", default=DEFAULT_NAME),
            namespace=dict(type="str"),
        ),
    )
    module.run(obsolete_cpus)


if __name__ == "__main__":
    main()
