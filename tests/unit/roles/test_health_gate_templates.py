"""The health gate's templates (roles/rolling_maintenance/tasks/gate*.yml) on the ansible-core
that runs these tests: `make test-versions` runs them on every ansible-core the collection
claims. Before 2.19 a template yields text where 2.19 keeps the type (a float stays a float),
so an expression that works on one may fail on another.

The gate needs no cluster when no lock is held yet (the renewal is skipped): a playbook includes
gate.yml with the role's defaults and vars, and writes the run state the gate leaves behind.
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from playbook_runner import run_playbook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "rolling_maintenance")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - %(role)s/defaults/main.yml
    - %(role)s/vars/main.yml
  vars:
    rolling_maintenance_node: worker-1
  tasks:
    - ansible.builtin.set_fact:
        _rolling_maintenance_run: {records: [], order: [worker-1], holder: '', stop: false}
    - ansible.builtin.include_tasks: %(role)s/tasks/gate.yml
    - ansible.builtin.copy:
        content: "{{ {'state': _rolling_maintenance_state, 'gate': _rolling_maintenance_gate} | to_json }}"
        dest: %(out)s
        mode: "0600"
"""


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
        body = b'{"status":"success","data":{"result":[]}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture(scope="module")
def http_url():
    server = HTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/api/v1/alerts" % server.server_port
    server.shutdown()


def run_gate(tmp_path, gate):
    out = tmp_path / "out.json"
    playbook = tmp_path / "gate.yml"
    playbook.write_text(PLAYBOOK % {"role": ROLE, "out": out})
    proc = run_playbook(playbook, "-e", json.dumps({"rolling_maintenance_health_gate": gate}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_passing_command(tmp_path):
    result = run_gate(tmp_path, {"command": "true"})
    assert result["gate"]["passed"] is True and int(result["gate"]["tries"]) == 1
    assert not result["state"]["stop"]


def test_a_failing_command_stops_the_run_after_its_timeout(tmp_path):
    result = run_gate(tmp_path, {"command": ["false"], "timeout": 2, "delay": 1})
    gate = result["state"]["health_gate"]
    assert result["state"]["stop"] is True and result["state"]["stop_reason"] == "health_gate"
    # Tried until the timeout has passed (how many tries fit in it depends on the machine's load).
    assert gate["kind"] == "command" and int(gate["tries"]) >= 1 and int(gate["seconds"]) >= 2
    assert gate["reason"].startswith("exited 1")
    assert "node worker-1 was not started" in gate["message"] and ".." not in gate["message"]


def test_a_url_with_one_status_code_and_an_expected_text(tmp_path, http_url):
    result = run_gate(tmp_path, {"url": http_url, "status_code": 200, "expect": '"result":[]', "timeout": 5})
    assert result["gate"]["passed"] is True, result
    assert not result["state"]["stop"]


def test_a_url_answering_another_status_code(tmp_path, http_url):
    result = run_gate(tmp_path, {"url": http_url, "status_code": [204, 202], "timeout": 0})
    gate = result["state"]["health_gate"]
    assert result["state"]["stop"] is True and int(gate["tries"]) == 1
    assert gate["reason"].startswith("HTTP 200 from http://127.0.0.1:") and "expected 204 or 202" in gate["reason"]


def test_a_url_that_does_not_answer(tmp_path):
    result = run_gate(tmp_path, {"url": "http://user:secret@127.0.0.1:9/alerts?token=t0ken", "timeout": 1, "delay": 1})
    gate = result["state"]["health_gate"]
    assert result["state"]["stop"] is True
    assert gate["reason"].startswith("no answer from http://127.0.0.1:9/alerts")
    assert "secret" not in json.dumps(result) and "t0ken" not in json.dumps(result)
