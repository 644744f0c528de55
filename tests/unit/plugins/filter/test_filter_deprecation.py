"""The deprecated run_record filter says so when a play uses it, and only then: ansible-core loads every filter
file of the collection to find any one of its filters, so a deprecation in meta/runtime.yml would be printed in
every play that uses another filter of the collection (the rolling_maintenance role's, for one)."""

from playbook_runner import run_playbook

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Another filter of the collection
      ansible.builtin.debug:
        msg: "{{ {'phase': 'drain', 'phases': []} | kubevirt_ops.maintenance.run_phase('tasks', '2026-01-01T00:00:00Z') }}"
    - name: Marker
      ansible.builtin.debug:
        msg: AFTER-THE-OTHER-FILTER
    - name: The deprecated filter
      ansible.builtin.debug:
        msg: "{{ {'records': []} | kubevirt_ops.maintenance.run_record('w1', {}, '2026-01-01T00:00:00Z', 'drain',
                 verify={}) }}"
"""


def test_run_record_is_said_deprecated_when_used_and_only_then(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    # One stream, in the order ansible-playbook wrote it (warnings go to stderr); ansible-core 2.17 wraps them.
    proc = run_playbook(playbook, env={"ANSIBLE_DEPRECATION_WARNINGS": "1"}, merge_output=True)
    output = " ".join(proc.stdout.split())
    assert proc.returncode == 0, output[-3000:]
    before, marker, after = output.partition("AFTER-THE-OTHER-FILTER")
    assert marker, output[-3000:]
    assert "deprecat" not in before.lower(), before[-3000:]
    assert after.count("run_record filter is deprecated") == 1, after[-3000:]
    assert "use kubevirt_ops.maintenance.record_outcomes" in after
