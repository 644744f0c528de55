# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report files: the model (model.py) as JSON, Markdown and SVG, each written atomically."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report.model import build, to_json_data
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report.markdown import to_markdown
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.report.svg import to_svg


def _write(path, text):
    """Write atomically, so a reader never sees half a report."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".report-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write(run, records, directory, formats=("json", "markdown", "svg"), basename="report"):
    """Render and write the report files; returns (files, model, json data)."""
    model = build(run, records)
    data = to_json_data(model)
    directory = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(directory, exist_ok=True)
    files = {}
    if "svg" in formats:
        files["svg"] = os.path.join(directory, "%s-timeline.svg" % basename)
        _write(files["svg"], to_svg(model))
    if "json" in formats:
        files["json"] = os.path.join(directory, "%s.json" % basename)
        _write(files["json"], json.dumps(data, indent=2, sort_keys=False) + "\n")
    if "markdown" in formats:
        files["markdown"] = os.path.join(directory, "%s.md" % basename)
        timeline = os.path.basename(files["svg"]) if "svg" in files else None
        _write(files["markdown"], to_markdown(model, timeline))
    return files, model, data
