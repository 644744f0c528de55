"""option_checks.fold_drain_options: the grouped drain options and the flat ones agree."""

import pytest

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.args import DRAIN, DRAIN_POD_OPTIONS
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.option_checks import check


def defaults(**grouped):
    params = dict((option, DRAIN[option].get("default")) for option in DRAIN_POD_OPTIONS)
    params["drain_options"] = dict((option, None) for option in DRAIN_POD_OPTIONS)
    params["drain_options"].update(grouped)
    return params


def test_keys_set_in_the_dict_replace_the_defaults():
    params = defaults(grace_period=30, force=False, pod_selector="app=web")
    check(params)
    assert (params["grace_period"], params["force"], params["pod_selector"]) == (30, False, "app=web")
    assert params["ignore_daemonsets"] is True and params["disable_eviction"] is False  # unset keys keep defaults


def test_an_empty_or_missing_dict_changes_nothing():
    for grouped in ({}, None):
        params = defaults()
        params["drain_options"] = grouped
        params["grace_period"] = 10
        check(params)
        assert params["grace_period"] == 10


def test_the_same_value_in_both_places_is_accepted():
    params = defaults(grace_period=30)
    params["grace_period"] = 30
    check(params)
    assert params["grace_period"] == 30


def test_different_values_in_both_places_are_refused():
    params = defaults(delete_emptydir_data=True)
    params["delete_emptydir_data"] = False
    with pytest.raises(InvalidInputError) as caught:
        check(params)
    assert caught.value.msg == ("Option delete_emptydir_data=False contradicts drain_options.delete_emptydir_data=True: "
                                "give it in one place.")


def test_folded_values_are_checked_like_flat_ones():
    with pytest.raises(InvalidInputError, match="grace_period=-3"):
        check(defaults(grace_period=-3))
