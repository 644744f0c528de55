#!/usr/bin/env python3
"""A virtualenv built once per requirements file and interpreter, and linked into the repository.

    cached_venv.py --python PYTHON --requirements FILE LINK

The virtualenv lives in ~/.cache/kubevirt-ops-lab/venvs/<name>-<key>/ (KUBEVIRT_OPS_CACHE overrides the root),
the key being a digest of the requirements file's content and of the interpreter (its path and version), so a
changed pin or another Python builds a new one and every clone on the machine shares the ones it has. LINK (for
example .venv-core2.17) becomes a symbolic link to it. A build holds a lock, so two lanes asking for the same one
build it once, and it counts only once complete: a build that was stopped is started again.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

COMPLETE = ".complete"


def cache_root():
    return os.environ.get("KUBEVIRT_OPS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kubevirt-ops-lab")


def key(python, requirements):
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    digest = hashlib.sha256()
    for part in (os.path.realpath(shutil.which(python) or python), version):
        digest.update(part.encode() + b"\0")
    with open(requirements, "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()[:16]


def build(python, requirements, target):
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([python, "-m", "venv", target], check=True)
    subprocess.run([os.path.join(target, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                    "-r", requirements], check=True)
    open(os.path.join(target, COMPLETE), "w").close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True)
    parser.add_argument("--requirements", required=True)
    parser.add_argument("link")
    args = parser.parse_args()
    name = os.path.basename(os.path.normpath(args.link)).lstrip(".") or "venv"
    root = os.path.join(cache_root(), "venvs")
    os.makedirs(root, exist_ok=True)
    target = os.path.join(root, "%s-%s" % (name, key(args.python, args.requirements)))
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(target, COMPLETE)):
            print("building %s (%s, %s) in %s" % (args.link, args.python, args.requirements, target), flush=True)
            build(args.python, args.requirements, target)
    if os.path.isdir(args.link) and not os.path.islink(args.link):
        shutil.rmtree(args.link)  # a virtualenv of the repository's own, from before
    # Replaced in one step: another lane may be linking the same one at the same time.
    temporary = "%s.link-%d" % (os.path.normpath(args.link), os.getpid())
    os.symlink(target, temporary)
    os.replace(temporary, args.link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
