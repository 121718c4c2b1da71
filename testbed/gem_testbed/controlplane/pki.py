"""Certificates and keys for one short-lived local control plane.

Everything is generated at start into the control plane's state directory and removed with it: a
cluster CA, the API server's serving certificate, client certificates whose subjects the API
server's bootstrap RBAC policy already knows (system:masters for the admin, system:kube-controller-manager,
system:kube-scheduler), a front-proxy CA and client (the request-header authentication that the
controller manager, the scheduler and any aggregated API server expect to find configured), and the key
pair that signs service-account tokens. ECDSA P-256 keys: they
are generated in milliseconds and every component accepts them.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)
# Names a pod or a host uses for the API server; the first service IP is the `kubernetes` Service.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key on disk."""

    cert: pathlib.Path
    key: pathlib.Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything the components are started with."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    front_proxy_ca: KeyPair
    front_proxy_client: KeyPair
    service_account_key: pathlib.Path
    service_account_pub: pathlib.Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: pathlib.Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _issue(
    directory: pathlib.Path,
    stem: str,
    subject: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    *,
    server_ips: tuple[str, ...] = (),
) -> KeyPair:
    key = _new_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_ips else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(subject, ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server_ips:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVING_DNS_NAMES]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def _new_ca(directory: pathlib.Path, stem: str, common_name: str) -> tuple[KeyPair, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = _name(common_name)
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair, key


def generate_pki(directory: pathlib.Path, *, service_ip: str) -> Pki:
    """Writes fresh CAs and every certificate and key into `directory` (which must exist)."""
    ca, ca_key = _new_ca(directory, "ca", "gem-control-plane-ca")
    ca_name = _name("gem-control-plane-ca")
    proxy_ca, proxy_key = _new_ca(directory, "front-proxy-ca", "gem-front-proxy-ca")

    sa_key = _new_key()
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key, sa_key_path)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    def client(stem: str, user: str, group: str | None = None) -> KeyPair:
        return _issue(directory, stem, _name(user, group), ca_key, ca_name)

    return Pki(
        ca=ca,
        apiserver=_issue(
            directory,
            "apiserver",
            _name("kube-apiserver"),
            ca_key,
            ca_name,
            server_ips=("127.0.0.1", service_ip),
        ),
        admin=client("admin", "gem-admin", "system:masters"),
        controller_manager=client("controller-manager", "system:kube-controller-manager"),
        scheduler=client("scheduler", "system:kube-scheduler"),
        front_proxy_ca=proxy_ca,
        front_proxy_client=_issue(
            directory, "front-proxy-client", _name(FRONT_PROXY_CLIENT), proxy_key, _name("gem-front-proxy-ca")
        ),
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )
