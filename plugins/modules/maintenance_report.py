#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: maintenance_report
short_description: Write the report of a maintenance run as JSON, Markdown and an SVG timeline
version_added: 0.1.0
description:
  - Turns what a maintenance run recorded (the run, and one record per node) into three files in O(dest)
    and returns a short summary for the end of the play.
  - C(<basename>.json) holds, per node, the start, the end and the duration of each phase, the pods evicted,
    the VMs migrated (source, target, duration) and shut down.
  - C(<basename>.md) is the same for people, with what remains to do when the run stopped early.
  - C(<basename>-timeline.svg) draws one row per node with its phases coloured, live migrations marked where
    they completed, VMs shut down, the failed phase outlined in red and nodes not started greyed out.
  - The C(kubevirt_ops.maintenance.rolling_maintenance) role calls this module; it can also render records kept
    by other automation.
author:
  - kubevirt_ops.maintenance contributors (@kubevirt-ops)
options:
  dest:
    description: Directory to write the files to. Created when missing.
    type: path
    required: true
  basename:
    description: File name stem of the files.
    type: str
    default: report
  formats:
    description: Which files to write.
    type: list
    elements: str
    choices: [json, markdown, svg]
    default: [json, markdown, svg]
  run:
    description:
      - The run. Keys used (all optional) are C(title), C(status) (for example V(succeeded), V(failed),
        V(window_closed), V(health_gate_failed)), C(message), C(cluster), C(selection), C(policy) (a dictionary shown as is),
        C(lock), C(started), C(finished), C(preflight) (with C(start) and C(end)), C(nodes) (the planned order,
        so nodes never started appear too), C(batches) (the nodes in maintenance together, in order; one node each
        by default), C(remaining) (what is left to do) and C(resume) (the command that
        finishes the job).
      - Times are ISO 8601 strings; without an offset they are UTC.
    type: dict
    default: {}
  nodes:
    description:
      - One record per node that was started, in order.
      - Keys used are C(node), C(index), C(status) (V(done) or V(failed)), C(method), C(started), C(finished),
        C(phases) (a dictionary from phase name V(drain), V(tasks), V(ready), V(uncordon), V(verify) to
        C(start), C(end) and optionally C(failed)), C(pods_evicted), C(total_pods), C(vms) (the C(vms) return of
        M(kubevirt_ops.maintenance.node_maintenance)), C(migrations) (timed migrations with C(namespace), C(name),
        C(source), C(target), C(start), C(end)), C(not_running) (VMs not running after the node), C(error) and
        C(predicted_seconds) (the duration predicted before the node started, shown beside the real one).
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - kubevirt_ops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: Computes the summary and the file names without writing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The same records give the same files.
"""

EXAMPLES = r"""
- name: Write the report of a run
  kubevirt_ops.maintenance.maintenance_report:
    dest: /var/log/maintenance/2024-05-04
    run:
      title: Rolling maintenance
      started: "2024-05-04T22:00:00Z"
      finished: "2024-05-04T22:09:30Z"
      nodes: [worker-1, worker-2]
    nodes:
      - node: worker-1
        index: 1
        status: done
        phases:
          drain: {start: "2024-05-04T22:00:05Z", end: "2024-05-04T22:02:00Z"}
          tasks: {start: "2024-05-04T22:02:00Z", end: "2024-05-04T22:06:00Z"}
        pods_evicted: 14
        vms:
          migrated: [{namespace: prod, name: db-1, source: worker-1, target: worker-2}]
  register: report

- name: Print the summary
  ansible.builtin.debug:
    msg: "{{ report.summary }}"
"""

RETURN = r"""
files:
  description: The files written (or that would be written in check mode), by format.
  returned: always
  type: dict
  sample:
    json: /var/log/maintenance/2024-05-04/report.json
    markdown: /var/log/maintenance/2024-05-04/report.md
    svg: /var/log/maintenance/2024-05-04/report-timeline.svg
summary:
  description: Readable lines, one for the run and one per node.
  returned: always
  type: list
  elements: str
  sample:
    - "Rolling maintenance succeeded in 9m30s: 2/2 nodes done, 0 failed, 0 untouched; 14 pods evicted, 1 VMs migrated, 0 shut down."
status:
  description: The run's status.
  returned: always
  type: str
  sample: succeeded
totals:
  description: Totals over the run (nodes done, failed and untouched, pods evicted, VMs migrated and shut down,
    seconds per phase, average seconds per node), and the VM moves (V(vm_moves)), the fewest the run could
    have made (V(vm_moves_minimum); only VMs of the first node, which had no node done to go to, move twice)
    and the avoidable ones (V(vm_moves_avoidable)); the JSON report lists the moves of each VM and why a move
    was avoidable under C(moves).
  returned: always
  type: dict
  sample: {nodes_planned: 2, nodes_done: 2, nodes_failed: 0, pods_evicted: 14, vms_migrated: 1}
report:
  description: The content of the JSON file.
  returned: always
  type: dict
"""

import os

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import model as report
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report import files as report_files
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule


def write_report(module):
    params = module.params
    formats = tuple(params["formats"])
    if module.check_mode:
        model = report.build(params["run"], params["nodes"])
        data = report.to_json_data(model)
        dest = os.path.abspath(params["dest"])
        names = {"json": "%s.json", "markdown": "%s.md", "svg": "%s-timeline.svg"}
        files = dict((f, os.path.join(dest, names[f] % params["basename"])) for f in formats)
        changed = True
    else:
        before = _snapshot(params["dest"], params["basename"])
        files, model, data = report_files.write(params["run"], params["nodes"], params["dest"], formats, params["basename"])
        changed = before != _snapshot(params["dest"], params["basename"])
    return {
        "changed": changed,
        "files": files,
        "summary": report.summary_lines(model),
        "status": model["status"],
        "totals": model["totals"],
        "report": data,
    }


def _snapshot(directory, basename):
    contents = {}
    for suffix in (".json", ".md", "-timeline.svg"):
        path = os.path.join(directory, basename + suffix)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                contents[suffix] = handle.read()
    return contents


def main():
    module = MaintenanceModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            basename=dict(type="str", default="report"),
            formats=dict(type="list", elements="str", choices=["json", "markdown", "svg"],
                         default=["json", "markdown", "svg"]),
            run=dict(type="dict", default={}),
            nodes=dict(type="list", elements="dict", default=[]),
        ),
        with_auth=False,
    )
    module.run(write_report)


if __name__ == "__main__":
    main()
