# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Timestamps: the current time, reading Kubernetes (RFC 3339) times and writing them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import datetime
import re
import time

SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICRO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

_UTC_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]00:00)$")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def parse_time(value):
    """RFC 3339 / ISO 8601 (Time or MicroTime) -> aware datetime keeping its offset, or None.

    A naive time means UTC; a datetime is taken as it is; an unreadable value gives None.
    """
    if not value:
        return None
    if isinstance(value, datetime.datetime):
        moment = value
    else:
        text = str(value).strip().replace("Z", "+00:00")
        if "." in text:
            # Python < 3.11 accepts exactly 3 or 6 fraction digits.
            head, rest = text.split(".", 1)
            digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
            text = "%s.%s%s" % (head, (digits + "000000")[:6], rest[len(digits):])
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment


def parse_time_utc(value):
    """As parse_time, converted to UTC; a space may also separate the date from the time."""
    if value and not isinstance(value, datetime.datetime):
        value = str(value).strip().replace(" ", "T", 1)
    moment = parse_time(value)
    return moment.astimezone(datetime.timezone.utc) if moment else None


def parse_epoch(value):
    """Seconds since the epoch of a Kubernetes (Micro)Time written in UTC, or None.

    Stricter than parse_time: only ``Z`` or a zero offset, and every fraction digit counts.
    """
    found = _UTC_TIME.match(value or "")
    if not found:
        return None
    seconds = calendar.timegm(time.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds + (float(found.group(2)) if found.group(2) else 0.0)


def format_seconds(moment):
    """A Kubernetes Time (whole seconds, ``Z``) of a UTC datetime; None for None."""
    return moment.strftime(SECONDS_FORMAT) if moment else None


def format_micro(moment):
    """A Kubernetes MicroTime: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(datetime.timezone.utc).strftime(MICRO_FORMAT)


def format_epoch(epoch):
    """A Kubernetes Time of seconds since the epoch; None for None."""
    return None if epoch is None else time.strftime(SECONDS_FORMAT, time.gmtime(epoch))


def now_seconds():
    """Now as a Kubernetes Time (whole seconds, UTC)."""
    return format_seconds(utc_now())
