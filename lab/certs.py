"""The lab's certificate authorities, serving and client certificates.

Generated once per state directory with ``cryptography``. ECDSA P-256 keys keep
generation instant; every Kubernetes component and client accepts them.
"""

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lab import network

VALIDITY = datetime.timedelta(days=365)
# Backdated so a certificate is valid at once even if clocks disagree slightly.
BACKDATE = datetime.timedelta(hours=1)

# Client identities: file stem -> (common name, organizations).
# kwok writes node and pod status and node leases for nodes it does not own the
# credentials of, which the Node authorizer would refuse; it runs as a cluster admin,
# under its own name so the audit log tells its requests apart.
CLIENTS = {
    "admin": ("lab-admin", ["system:masters"]),
    "kube-controller-manager": ("system:kube-controller-manager", []),
    "kube-scheduler": ("system:kube-scheduler", []),
    "kwok": ("kwok-controller", ["system:masters"]),
}
FRONT_PROXY_CLIENT_NAME = "front-proxy-client"


@dataclass(frozen=True)
class Pki:
    """File locations of one lab's PKI."""

    directory: Path

    def cert(self, stem):
        return self.directory / f"{stem}.crt"

    def key(self, stem):
        return self.directory / f"{stem}.key"

    @property
    def ca_cert(self):
        return self.cert("ca")

    @property
    def service_account_key(self):
        return self.directory / "sa.key"

    @property
    def service_account_pub(self):
        return self.directory / "sa.pub"


def ensure_pki(directory):
    """Create whatever part of the PKI is missing in ``directory`` and return it."""
    pki = Pki(Path(directory))
    pki.directory.mkdir(parents=True, exist_ok=True)

    ca_key, ca_cert = _ensure_ca(pki, "ca", "lab-ca")
    _ensure_leaf(
        pki,
        "apiserver",
        ca_key,
        ca_cert,
        common_name="kube-apiserver",
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=["127.0.0.1", network.KUBERNETES_SERVICE_IP, network.APISERVER_ADVERTISE_IP],
    )
    for stem, (common_name, organizations) in CLIENTS.items():
        _ensure_leaf(
            pki,
            stem,
            ca_key,
            ca_cert,
            common_name=common_name,
            organizations=organizations,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )

    # Aggregated API servers trust requests proxied by the apiserver through this
    # separate CA (requestheader authentication).
    proxy_ca_key, proxy_ca_cert = _ensure_ca(pki, "front-proxy-ca", "lab-front-proxy-ca")
    _ensure_leaf(
        pki,
        "front-proxy-client",
        proxy_ca_key,
        proxy_ca_cert,
        common_name=FRONT_PROXY_CLIENT_NAME,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )

    if not pki.service_account_key.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        write_key(pki.service_account_key, key)
        pki.service_account_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


def issue(common_name, *, issuer=None, usage=None, organizations=(), dns_names=(), ip_addresses=()):
    """A new key and its certificate, as (key, certificate): every certificate of the lab.

    Without ``issuer`` it is a self-signed CA named ``common_name``. With ``issuer`` (the
    CA's key and certificate) it is a certificate for ``usage`` (an extended key usage,
    client or server authentication) signed by that CA, its subject ``organizations`` and
    ``common_name``, naming ``dns_names`` and ``ip_addresses`` as alternative names.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    subject = x509.Name(attributes)
    is_ca = issuer is None
    signing_key, issuer_name = (key, subject) if is_ca else (issuer[0], issuer[1].subject)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if is_ca:
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
            critical=False,
        )
    alt_names = [x509.DNSName(n) for n in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return key, builder.sign(signing_key, hashes.SHA256())


def _ensure_ca(pki, stem, common_name):
    if pki.cert(stem).exists() and pki.key(stem).exists():
        return _load(pki, stem)
    key, cert = issue(common_name)
    _store(pki, stem, key, cert)
    return key, cert


def _ensure_leaf(pki, stem, ca_key, ca_cert, **certificate):
    if pki.cert(stem).exists() and pki.key(stem).exists():
        return
    _store(pki, stem, *issue(issuer=(ca_key, ca_cert), **certificate))


def _store(pki, stem, key, cert):
    write_key(pki.key(stem), key)
    pki.cert(stem).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _load(pki, stem):
    key = serialization.load_pem_private_key(pki.key(stem).read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(pki.cert(stem).read_bytes())
    return key, cert


def write_key(path, key):
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by its owner only."""
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Private keys are readable by their owner only, as the components expect.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ensure_client_cert(pki, stem, common_name, organizations=()):
    """A client certificate from the lab CA for a component that is not in CLIENTS."""
    ca_key, ca_cert = _load(pki, "ca")
    _ensure_leaf(
        pki,
        stem,
        ca_key,
        ca_cert,
        common_name=common_name,
        organizations=organizations,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    return pki.cert(stem), pki.key(stem)


def ensure_serving_cert(pki, stem, common_name, ip_addresses=("127.0.0.1",), dns_names=("localhost",)):
    """A serving certificate from the lab CA (e.g. for a webhook the apiserver calls)."""
    ca_key, ca_cert = _load(pki, "ca")
    _ensure_leaf(
        pki,
        stem,
        ca_key,
        ca_cert,
        common_name=common_name,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
    )
    return pki.cert(stem), pki.key(stem)
