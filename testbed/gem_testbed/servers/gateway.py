"""An https gateway in front of Prometheus that wants credentials and a tenant, as production runs one.

OpenShift's thanos-querier sits behind a proxy that checks a bearer token; Grafana Mimir and Cortex
gateways check basic auth and route on `X-Scope-OrgID`; both answer over https signed by a private
CA. This is Debian's nginx doing the same in front of a real Prometheus on loopback: it answers 401
without the expected Authorization header, 403 without the expected tenant, and proxies the rest.
`make_ca_and_certificate` writes the CA and the loopback server certificate it presents.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from gem_testbed.kubelets.pod_config import LOOPBACK
from gem_testbed.servers.origin import NginxServer


def make_ca_and_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a certificate it signs for 127.0.0.1 and localhost: (ca.crt, tls.crt, tls.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gem-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "prometheus-gateway")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK)), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class PrometheusGateway(NginxServer):
    """https://127.0.0.1:PORT proxying to `upstream` for requests that carry `authorization` (the
    whole header value, e.g. "Bearer abc") and, when given, `X-Scope-OrgID: tenant`."""

    def __init__(
        self,
        upstream: str,
        *,
        authorization: str,
        tenant: str | None,
        certificate: Path,
        key: Path,
        work_dir: Path | None = None,
    ) -> None:
        self.upstream, self.authorization, self.tenant = upstream.rstrip("/"), authorization, tenant
        self.certificate, self.key = certificate, key
        super().__init__(work_dir, "gem-prometheus-gateway-")

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def config(self) -> str:
        tenant = (
            f'    if ($http_x_scope_orgid != "{self.tenant}") {{ return 403 "no such tenant\\n"; }}\n'
            if self.tenant is not None
            else ""
        )
        return f"""{self.head()}
  server {{
    listen {LOOPBACK}:{self.port} ssl;
    ssl_certificate {self.certificate};
    ssl_certificate_key {self.key};
    location / {{
      if ($http_authorization != "{self.authorization}") {{ return 401 "unauthorized\\n"; }}
{tenant}      proxy_pass {self.upstream};
    }}
  }}
}}
"""


__all__ = ["PrometheusGateway", "make_ca_and_certificate"]
