"""A raw list page's continue token (module_utils/k8s/pages.py, read by the client's pager and the benchmark's
raw-list reference) is found where the API server writes it: before the items of a built-in kind's list, after
them in a custom resource's (keys sorted)."""

import json

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.k8s.pages import continue_token


def test_the_token_of_a_built_in_kinds_page_comes_before_its_items():
    page = json.dumps({"kind": "PodList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "12", "continue": "eyJ2IjoxfQ", "remainingItemCount": 9},
                       "items": [{"metadata": {"name": "p-%d" % i, "annotations": {"a": "b"}}} for i in range(3)]},
                      separators=(",", ":")).encode()
    assert continue_token(page) == "eyJ2IjoxfQ"


def test_the_token_of_a_custom_resources_page_comes_after_its_items():
    items = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
              "metadata": {"labels": {"x": "y"}, "name": "vm-%05d" % i, "namespace": "ns"},
              "spec": {"domain": {"devices": {}}}, "status": {"phase": "Running"}} for i in range(200)]
    page = json.dumps({"apiVersion": "kubevirt.io/v1", "items": items, "kind": "VirtualMachineInstanceList",
                       "metadata": {"continue": "eyJ2IjoyfQ", "remainingItemCount": 9500, "resourceVersion": "77"}},
                      separators=(",", ":"), sort_keys=True).encode()
    assert len(page) > 8192  # the token is in neither the first 4 KiB nor anywhere but the end
    assert continue_token(page) == "eyJ2IjoyfQ"


def test_the_last_page_has_no_token():
    for page in ({"kind": "PodList", "metadata": {"resourceVersion": "12"}, "items": [{"metadata": {"name": "p"}}]},
                 {"apiVersion": "kubevirt.io/v1", "items": [{"metadata": {"name": "v"}}], "kind": "VirtualMachineList",
                  "metadata": {"continue": "", "resourceVersion": "77"}}):
        assert continue_token(json.dumps(page, separators=(",", ":"), sort_keys=True).encode()) is None
