"""The machines behind the lab's workers, and their BMCs.

Every worker has a Redfish BMC: one ``sushy-tools`` emulator (the Redfish emulator Metal3 and
Ironic test against) serves all of them as Redfish Systems, over HTTPS with a certificate of
the lab CA and HTTP basic auth, on the lab's own veth address (lab/netif.py).

- ``redfish.py``: the emulator's process. Its fake systems driver, with what a server's BMC
  has on top of it (firmware versions and BIOS settings that take effect at the next power
  cycle, power actions that take effect on their own after a delay). The Redfish surface
  (URLs, payloads, errors) is the emulator's.
- ``bmc.py``: the lab's side: configuration, credentials, start and stop, ``bmc.json``, and a
  small Redfish client for ``python -m lab bmc``.
"""
