"""A private CA and a serving certificate for the stand-ins' HTTPS endpoints.

The apiserver calls the admission webhooks and the aggregated API over HTTPS and
checks the certificate against the caBundle we register, so the serving
certificate names every address it is reached at (IP SANs). Both certificates are
built by lab/certs.py, as every certificate of the lab.
"""

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from lab import certs


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    cert_file: Path
    key_file: Path


def create(directory, ips, dns_names):
    """Write a fresh CA and serving certificate into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = certs.issue("kubevirt-sim-ca")
    key, cert = certs.issue(
        dns_names[0] if dns_names else "kubevirt-sim",
        issuer=ca,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        dns_names=dns_names,
        ip_addresses=ips,
    )

    ca_pem = ca[1].public_bytes(serialization.Encoding.PEM)
    cert_file = directory / "serving.crt"
    key_file = directory / "serving.key"
    (directory / "ca.crt").write_bytes(ca_pem)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + ca_pem)
    certs.write_key(key_file, key)
    return ServingCertificate(ca_pem=ca_pem, cert_file=cert_file, key_file=key_file)
