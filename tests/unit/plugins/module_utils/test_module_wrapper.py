"""The module wrapper: errors become fail_json in one place, secrets never leave."""

import json

import pytest

from ansible.module_utils import basic
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module import module as module_mod
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import InvalidInputError
from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.ansible_module.module import MaintenanceModule, redact

TOKEN = "sha256~very-secret-token-value"

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


def run(args, action, capsys):
    with patch_module_args(args):
        module = MaintenanceModule(argument_spec={"name": {"type": "str"}})
        with pytest.raises(SystemExit) as info:
            module.run(action)
    out = capsys.readouterr().out
    return info.value.code, json.loads(out), out


def test_error_becomes_fail_json_with_details(capsys):
    def action(module):
        raise InvalidInputError("Node n9 does not exist.", node="n9")

    code, result, _out = run({"name": "n9"}, action, capsys)
    assert code == 1
    assert result["failed"] is True and result["msg"] == "Node n9 does not exist." and result["node"] == "n9"


def test_token_never_reaches_result_or_failure(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))

    def leaky(module):
        module.client  # resolves settings, registers secrets
        raise InvalidInputError("Request with Authorization: Bearer %s failed." % TOKEN, echo=TOKEN)

    code, result, out = run({"host": "https://127.0.0.1:1", "api_key": TOKEN}, leaky, capsys)
    assert code == 1
    assert TOKEN not in out
    assert "********" in result["msg"]


def test_token_redacted_from_successful_results(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))

    def ok(module):
        module.client
        return {"changed": False, "note": "used %s" % TOKEN}

    code, result, out = run({"host": "https://127.0.0.1:1", "api_key": TOKEN}, ok, capsys)
    assert code == 0 and TOKEN not in out


def test_missing_library_message_names_the_pip_command(capsys, monkeypatch):
    monkeypatch.setattr(module_mod, "missing_requirements", lambda: ["kubernetes>=24.2.0"])

    def action(module):
        return module.client

    code, result, _out = run({}, action, capsys)
    assert code == 1
    assert "-m pip install 'kubernetes>=24.2.0'" in result["msg"]


def test_redact_walks_nested_values():
    data = {"a": ["x %s y" % TOKEN, {"b": TOKEN}], "n": 3}
    assert redact(data, [TOKEN]) == {"a": ["x ******** y", {"b": "********"}], "n": 3}
