# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Maintenance windows: is now inside one, and if not, when does the next one open?

A window is ``{days, start, end, timezone}``: it opens at ``start`` on each of ``days``
(local time in ``timezone``) and closes at the next ``end``. An ``end`` at or before
``start`` closes on the following day, so ``{days: [sat], start: "22:00", end: "06:00"}``
runs from Saturday 22:00 to Sunday 06:00; ``start == end`` is a 24-hour window.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.timeutil import utc_now

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _zone(name):
    if name in (None, "", "UTC", "utc", "Z"):
        return datetime.timezone.utc
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError as exc:  # Python < 3.9
        raise InvalidInputError("Time zone '%s' needs Python 3.9 or later (zoneinfo); use UTC." % name) from exc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInputError(
            "The maintenance window's time zone '%s' is unknown: use an IANA name such as Europe/Paris or UTC "
            "(if the name is right, install the tzdata Python package or the system time zone database)." % name
        ) from exc


def _clock(text, what):
    if isinstance(text, int) and not isinstance(text, bool) and 0 <= text < 24 * 60:
        # An unquoted 22:00 in YAML 1.1 (Ansible's loader) is the base-60 number 1320.
        return datetime.time(*divmod(text, 60))
    try:
        hours, minutes = str(text).strip().split(":")
        value = datetime.time(int(hours), int(minutes))
    except (ValueError, TypeError) as exc:
        raise InvalidInputError("The maintenance window's %s time '%s' is not HH:MM (00:00 to 23:59)." % (what, text)) from exc
    return value


def _day(text):
    value = str(text).strip().lower()
    if value in DAYS:
        return DAYS.index(value)
    if value in _FULL_DAYS:
        return _FULL_DAYS.index(value)
    raise InvalidInputError("The maintenance window's day '%s' is not one of %s." % (text, ", ".join(DAYS)))


class Window:
    def __init__(self, days=None, start="00:00", end="00:00", timezone="UTC"):
        if isinstance(days, str):
            days = [days]  # days: sat
        self.days = sorted(set(_day(d) for d in days)) if days else list(range(7))
        self.start = _clock(start, "start")
        self.end = _clock(end, "end")
        self.timezone_name = timezone or "UTC"
        self.zone = _zone(self.timezone_name)

    @classmethod
    def from_dict(cls, spec):
        spec = dict(spec or {})
        unknown = sorted(set(spec) - set(("days", "start", "end", "timezone")))
        if unknown:
            raise InvalidInputError("The maintenance window has unknown keys %s; it takes days, start, end and timezone."
                                    % ", ".join(unknown))
        return cls(spec.get("days"), spec.get("start") or "00:00", spec.get("end") or "00:00", spec.get("timezone"))

    def _occurrence(self, day):
        """(opens, closes) of the window starting on local date ``day``."""
        opens = datetime.datetime.combine(day, self.start).replace(tzinfo=self.zone)
        closes_day = day if self.end > self.start else day + datetime.timedelta(days=1)
        closes = datetime.datetime.combine(closes_day, self.end).replace(tzinfo=self.zone)
        return opens, closes

    def describe(self):
        days = "every day" if len(self.days) == 7 else ", ".join(DAYS[d] for d in self.days)
        return "%s %s-%s %s" % (days, self.start.strftime("%H:%M"), self.end.strftime("%H:%M"), self.timezone_name)

    def status(self, now=None):
        """{open, now, opens_at, closes_at, message} for the instant ``now`` (default: the current time)."""
        now = (now or utc_now()).astimezone(self.zone)
        today = now.date()
        dates = (today + datetime.timedelta(days=offset) for offset in range(-1, 9))
        occurrences = [self._occurrence(day) for day in dates if day.weekday() in self.days]
        current = next(((opens, closes) for opens, closes in occurrences if opens <= now < closes), None)
        if current:
            # Back-to-back windows (sat and sun all day, or 22:00-22:00 every day) are one: it closes
            # when no next window opens at its end.
            closes = current[1]
            for opens, later in occurrences:
                if current[0] < opens <= closes:
                    closes = max(closes, later)
            current = (current[0], closes)
        after = current[1] if current else now
        upcoming = next(((opens, closes) for opens, closes in occurrences if opens > after), None)
        result = {
            "open": current is not None,
            "window": self.describe(),
            "now": now.isoformat(timespec="seconds"),
            "opens_at": upcoming[0].isoformat(timespec="seconds") if upcoming else None,
            "closes_at": current[1].isoformat(timespec="seconds") if current else None,
        }
        if current:
            result["message"] = "Inside the maintenance window (%s) until %s." % (self.describe(), result["closes_at"])
        else:
            result["message"] = "Outside the maintenance window (%s): it is %s; the next window opens %s." % (
                self.describe(), now.strftime("%a %H:%M %Z").strip(), result["opens_at"] or "never")
        return result


def window_status(spec, now=None):
    """The status of a window given as a dict; an empty or missing window is always open."""
    if not spec:
        stamp = (now or utc_now()).isoformat(timespec="seconds")
        return {"open": True, "window": "none (always open)", "now": stamp, "opens_at": None, "closes_at": None,
                "message": "No maintenance window is set: nodes may be started at any time."}
    return Window.from_dict(spec).status(now)
