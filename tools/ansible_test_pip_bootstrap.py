"""Stand-in for the pip bootstrap script ansible-test downloads for its sanity virtualenvs.

ansible-test fetches ``get-pip-<version>.py`` from a host outside the package registries;
where only PyPI is reachable, this script does the same job: it seeds pip from the
standard library's ``ensurepip`` and then installs the requested versions from PyPI.
``make sanity`` places it in ansible-test's cache under the expected name.
"""

import ensurepip
import os
import subprocess
import sys


def main():
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    # ensurepip blanks the pip configuration of this process (PIP_CONFIG_FILE=/dev/null);
    # the real install must see the machine's pip configuration (index, proxy CA).
    env = dict(os.environ)
    ensurepip.bootstrap(upgrade=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--upgrade", "--disable-pip-version-check"] + args, env=env)


if __name__ == "__main__":
    main()
