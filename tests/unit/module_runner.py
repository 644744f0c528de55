"""Run a module's main() in-process, as Ansible would, and check its result against its RETURN docs."""

import json

import pytest
import yaml

from ansible.module_utils import basic

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    import contextlib

    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args):
        old = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = old

STANDARD_KEYS = {"changed", "failed", "msg", "warnings", "invocation", "diff", "deprecations"}


def run_module(module, args, capsys, check=False, diff=False):
    """(exit code, result) of one run of ``module`` with ``args``."""
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            module.main()
    return info.value.code, json.loads(capsys.readouterr().out)


def record_warnings(monkeypatch, texts=None):
    """A list (``texts``, or a new one) that collects the texts of the warnings modules give from now on (how
    ansible-core passes them on in the result depends on its version and on what else the test session imported)."""
    from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod

    texts = [] if texts is None else texts
    warn = module_mod.MaintenanceModule.warn

    def recorded(self, text):
        texts.append(text)
        warn(self, text)

    monkeypatch.setattr(module_mod.MaintenanceModule, "warn", recorded)
    return texts


def run(module, args, capsys, check=False, diff=False):
    """The result of one run of ``module`` with ``args``."""
    return run_module(module, args, capsys, check=check, diff=diff)[1]


def assert_documented(result, module):
    """Every returned key (and nested key) is in RETURN, and everything 'always' returned is there."""
    doc = yaml.safe_load(module.RETURN)

    def check(value, spec, where):
        if value is None:
            return
        if spec.get("type") == "list" and spec.get("contains"):
            for item in value:
                check(item, {"type": "dict", "contains": spec["contains"]}, where + "[]")
        elif spec.get("type") == "dict" and spec.get("contains"):
            for key in value:
                assert key in spec["contains"], "%s.%s is returned but not documented" % (where, key)
                check(value[key], spec["contains"][key], where + "." + key)

    for key, value in result.items():
        if key in STANDARD_KEYS:
            continue
        assert key in doc, "%s is returned but not documented" % key
        check(value, doc[key], key)
    for key, spec in doc.items():
        if spec.get("returned") == "always":
            assert key in result, "%s is documented as always returned" % key
