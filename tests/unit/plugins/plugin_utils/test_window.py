"""Maintenance windows: inside, outside, across midnight, time zones, bad input."""

import datetime

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.plugin_utils.window import window_status

UTC = datetime.timezone.utc


def at(text):
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


SAT_NIGHT = {"days": ["sat"], "start": "22:00", "end": "06:00", "timezone": "UTC"}


@pytest.mark.parametrize("moment, is_open", [
    ("2024-05-04T21:59:59", False),  # Saturday, before start
    ("2024-05-04T22:00:00", True),
    ("2024-05-05T05:59:00", True),   # Sunday morning belongs to Saturday's window
    ("2024-05-05T06:00:00", False),
    ("2024-05-05T22:30:00", False),  # Sunday night is not a window day
])
def test_window_across_midnight(moment, is_open):
    assert window_status(SAT_NIGHT, at(moment))["open"] is is_open


def test_closed_window_says_when_it_opens():
    status = window_status(SAT_NIGHT, at("2024-05-01T12:00:00"))
    assert not status["open"]
    assert status["opens_at"] == "2024-05-04T22:00:00+00:00"
    assert "Outside the maintenance window (sat 22:00-06:00 UTC)" in status["message"]
    assert "2024-05-04T22:00:00+00:00" in status["message"]


def test_open_window_says_when_it_closes():
    status = window_status(SAT_NIGHT, at("2024-05-04T23:00:00"))
    assert status["closes_at"] == "2024-05-05T06:00:00+00:00"


def test_time_zone_is_applied():
    window = {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "17:00", "timezone": "Asia/Tokyo"}
    assert window_status(window, at("2024-05-06T01:00:00"))["open"]  # 10:00 Monday in Tokyo
    assert not window_status(window, at("2024-05-06T09:00:00"))["open"]  # 18:00 in Tokyo


def test_equal_start_and_end_is_a_whole_day():
    window = {"days": ["wed"], "start": "00:00", "end": "00:00"}
    assert window_status(window, at("2024-05-01T23:59:00"))["open"]
    assert not window_status(window, at("2024-05-02T00:00:00"))["open"]


def test_back_to_back_windows_are_one():
    weekend = {"days": ["sat", "sun"]}  # all of Saturday and Sunday
    status = window_status(weekend, at("2024-05-04T23:30:00"))
    assert status["open"] and status["closes_at"] == "2024-05-06T00:00:00+00:00", status
    assert status["opens_at"] == "2024-05-11T00:00:00+00:00"
    nightly = {"start": "22:00", "end": "22:00"}  # every day, 24 hours from 22:00: never closes
    status = window_status(nightly, at("2024-05-04T21:00:00"))
    assert status["open"] and status["closes_at"] > "2024-05-11", status


def test_an_unquoted_time_and_a_single_day():
    # YAML 1.1 (Ansible's loader) reads an unquoted 22:00 as the base-60 number 1320.
    window = {"days": "sat", "start": 22 * 60, "end": "06:00"}
    assert window_status(window, at("2024-05-04T22:30:00"))["open"]
    assert not window_status(window, at("2024-05-05T22:30:00"))["open"]


def test_no_window_is_always_open():
    assert window_status(None)["open"] and window_status({})["open"]


@pytest.mark.parametrize("window, words", [
    ({"days": ["caturday"], "start": "01:00", "end": "02:00"}, "day 'caturday'"),
    ({"start": "25:00", "end": "02:00"}, "start time '25:00' is not HH:MM"),
    ({"start": "01:00", "end": "2pm"}, "end time '2pm'"),
    ({"start": "01:00", "end": "02:00", "timezone": "Mars/Olympus"}, "time zone 'Mars/Olympus' is unknown"),
    ({"start": "01:00", "stop": "02:00"}, "unknown keys stop"),
])
def test_bad_window_is_one_clear_sentence(window, words):
    with pytest.raises(InvalidInputError, match=words.replace("(", r"\(")):
        window_status(window)
