"""Unit tests need no cluster: the API is stubbed at the HTTP boundary."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, ".build", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "kubevirt_ops", "maintenance")

# Make `ansible_collections.kubevirt_ops.maintenance` importable when pytest runs outside make.
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(REPO, LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
