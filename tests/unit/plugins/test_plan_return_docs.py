"""The plan's RETURN documentation is written once (node_maintenance_info) and copied into
node_maintenance by tools/sync_plan_docs.py: the two never drift apart."""

import ast
import importlib.util
import os
import shutil

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _tool():
    spec = importlib.util.spec_from_file_location("sync_plan_docs", os.path.join(ROOT, "tools", "sync_plan_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _return_doc(path):
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "RETURN":
            return yaml.safe_load(node.value.value)
    raise AssertionError("no RETURN in %s" % path)


def test_node_maintenance_documents_the_plan_exactly_as_node_maintenance_info():
    tool = _tool()
    assert tool.main(["--check"]) == 0
    info = _return_doc(tool.SOURCE)["nodes"]["contains"]["plan"]["contains"]
    drain = _return_doc(tool.TARGET)["plan"]["contains"]
    assert drain == info


def test_a_copy_that_drifted_is_found_and_synced(tmp_path, capsys):
    tool = _tool()
    source, target = tmp_path / "info.py", tmp_path / "drain.py"
    shutil.copy(tool.SOURCE, str(source))
    text = open(tool.TARGET).read().replace("What stops maintenance, one sentence each", "What stops it", 1)
    target.write_text(text)
    tool.SOURCE, tool.TARGET = str(source), str(target)
    assert tool.main(["--check"]) == 1
    assert "differs" in capsys.readouterr().out
    assert tool.main([]) == 0
    assert tool.main(["--check"]) == 0
    assert _return_doc(str(target))["plan"]["contains"] == _return_doc(str(source))["nodes"]["contains"]["plan"]["contains"]
