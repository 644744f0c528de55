"""Run ansible-playbook as a user would, from the ansible-core that runs the tests (the one beside their Python,
so `make test-versions` runs each ansible-core's own), with its output free of colours and localhost warnings."""

import os
import shutil
import subprocess
import sys


def ansible_playbook():
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return beside if os.path.exists(beside) else shutil.which("ansible-playbook")


def run_playbook(playbook, *args, env=None, merge_output=False):
    """The finished ansible-playbook process (text output; ``merge_output``: stderr into stdout, in the order they
    were written); ``env``: variables on top of the quiet ones."""
    full_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
                    ANSIBLE_INVENTORY_UNPARSED_WARNING="0", **(env or {}))
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merge_output else {"capture_output": True}
    return subprocess.run([ansible_playbook(), str(playbook), *args], text=True, env=full_env, timeout=300,
                          check=False, **streams)
