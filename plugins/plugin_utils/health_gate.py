# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health gate of a rolling maintenance run (``rolling_maintenance_health_gate``): the verdict of one try.

A gate has one check: ``command`` (run on the controller; it passes when it exits 0), ``url`` (an
HTTP GET; it passes when the status is one of ``status_code``, default ``[200]``, and the body
contains ``expect``, when given) or ``tasks`` (a task file; it passes when none of its tasks fails,
so a try that gets as far as its verdict has passed). ``verdict`` judges a try from the check's
result and says why it failed in one line for the progress line and the run's message: the exit
code and the last line of the command's error output, or the HTTP status, or what the answer lacks.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# The checks a gate may have; a gate has exactly one (the role refuses any other gate before it starts).
KINDS = ("command", "url", "tasks")

# How much of a command's output or of a request's error a reason quotes.
QUOTED = 200


def kind_of(gate):
    """The gate's check: the first of KINDS it has, or an empty string."""
    return next((kind for kind in KINDS if kind in (gate or {})), "")


def truncate(text, length=QUOTED, end="...", leeway=5):
    """``text`` cut to ``length`` characters at a word's end, with ``end`` appended; a text at most
    ``leeway`` characters longer is kept whole (as Jinja's truncate filter does)."""
    if len(text) <= length + leeway:
        return text
    return text[:length - len(end)].rsplit(" ", 1)[0] + end


def _int(value, default=0):
    """A number as Jinja's int filter reads it (``default`` for anything else)."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def _flatten(values):
    """Every element of nested lists, nulls left out."""
    flat = []
    for value in values:
        if value in (None, "None", "null"):
            continue
        if isinstance(value, (list, tuple)):
            flat.extend(_flatten(value))
        else:
            flat.append(value)
    return flat


def _stripped(result, key):
    return ("%s" % (result[key],)).strip() if key in result else ""


def _command_reason(result):
    """Why the command failed: its exit code and the last line of its error output (else of its output,
    else of the message of the try, for example a timeout); nothing when it exited 0."""
    if result.get("rc", 1) == 0:
        return ""
    output = _stripped(result, "stderr") or _stripped(result, "stdout") or _stripped(result, "msg")
    lines = output.splitlines()
    last = lines[-1] if lines else ""
    return "exited %s%s" % (result.get("rc", "?"), (": " + truncate(last)) if last else "")


def _url_reason(gate, result, url_shown):
    """Why the GET failed: no answer, an unexpected status, or a body without ``expect``; nothing when it passed."""
    answer = _int(result.get("status", -1))
    codes = [_int(code) for code in _flatten([gate.get("status_code", [200])])]
    if answer < 0:
        error = re.sub(r"^.*Request failed: ", "", "%s" % (result.get("msg", ""),))
        return "no answer from %s (%s)" % (url_shown, truncate(error))
    if answer not in codes:
        return "HTTP %s from %s (expected %s)" % (answer, url_shown, " or ".join("%s" % code for code in codes))
    if "expect" in gate and gate["expect"] not in result.get("content", ""):
        return "the answer of %s does not contain %s" % (url_shown, json.dumps(gate["expect"]))
    return ""


def verdict(gate, command=None, http=None, url_shown=""):
    """The verdict of one try of ``gate``: ``passed``, and the ``reason`` it failed (empty when it passed).

    ``command``: the result of the command (a ``command`` gate); ``http``: the result of the GET (a ``url``
    gate); ``url_shown``: the URL as messages show it, without user, password and query string. A ``tasks``
    gate judged here has passed: a failing task file is judged by the task that failed.
    """
    gate = gate or {}
    kind = kind_of(gate)
    if kind == "command":
        reason = _command_reason(command or {})
    elif kind == "url":
        reason = _url_reason(gate, http or {}, url_shown)
    else:
        reason = ""
    reason = reason.strip()
    return {"passed": not reason, "reason": reason}
