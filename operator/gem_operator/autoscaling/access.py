"""How the operator's requests reach a Prometheus that wants more than a URL.

Production endpoints often sit behind a proxy that asks for credentials (OpenShift's
thanos-querier takes the ServiceAccount's bearer token; Grafana Mimir or Cortex gateways take basic
auth) and a tenant header (`X-Scope-OrgID`), over https signed by a private CA. Credentials belong
to the operator, set once in its environment (the chart's `prometheus.*` values), never in a
resource's spec, which everyone who can read the resource sees; a resource adds only plain headers
(`spec.autoscaling.metrics.prometheus.headers`, its tenant).

Files are read at each sync, not once: a projected ServiceAccount token rotates (hourly by default),
and a mounted Secret or ConfigMap changes in place. A file that cannot be read makes the reading
unavailable, a hold that names the variable and the file, never a request without credentials
that a proxy would answer with a 401 the user then has to trace back.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gem_operator.envvars import EnvSettingError

BEARER_TOKEN_FILE = "GEM_PROMETHEUS_BEARER_TOKEN_FILE"
USERNAME = "GEM_PROMETHEUS_USERNAME"
PASSWORD_FILE = "GEM_PROMETHEUS_PASSWORD_FILE"
CA_FILE = "GEM_PROMETHEUS_CA_FILE"


@dataclass(frozen=True)
class PrometheusAccess:
    """What every request of one sync carries: headers (the resource's, then the operator's
    credentials) and the TLS context an https URL is verified with (None: the system's CAs). `error`
    set: credentials are configured but could not be read; nothing is asked."""

    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None
    error: str | None = None


NO_ACCESS_SETTINGS = PrometheusAccess()


@dataclass(frozen=True)
class PrometheusCredentials:
    """The operator's own Prometheus credentials: the paths and name its environment gives."""

    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PrometheusCredentials:
        """Checked when the handlers load (`EnvSettingError`: `gemop run` says which variable)."""
        e = os.environ if env is None else env

        def get(name: str) -> str | None:
            return e.get(name, "").strip() or None

        creds = cls(get(BEARER_TOKEN_FILE), get(USERNAME), get(PASSWORD_FILE), get(CA_FILE))
        if (creds.username is None) != (creds.password_file is None):
            raise EnvSettingError(f"{USERNAME} and {PASSWORD_FILE} go together (basic auth): set both or neither")
        if creds.bearer_token_file is not None and creds.username is not None:
            raise EnvSettingError(
                f"{BEARER_TOKEN_FILE} and {USERNAME} both set: a request carries one Authorization header; keep one"
            )
        return creds

    def plain_http_warning(self, url: str) -> str | None:
        """What to warn of when these credentials would go to `url` unencrypted (None: they would not).

        Sent as Prometheus clients send them (a proxy on a trusted network may want no more), but
        anyone on the path reads a bearer token or a password from a plain http request."""
        sent = BEARER_TOKEN_FILE if self.bearer_token_file is not None else USERNAME if self.username else None
        if sent is None or urlsplit(url).scheme.lower() != "http":
            return None
        return (
            f"{sent} is set and Prometheus at {url} is plain http: the credentials cross the network "
            "unencrypted; use an https URL (GEM_PROMETHEUS_CA_FILE for a private CA)"
        )

    def access(self, headers: Mapping[str, str]) -> PrometheusAccess:
        """The headers and TLS context for this sync, the files read now."""
        out = dict(headers)
        try:
            if self.bearer_token_file is not None:
                out["Authorization"] = f"Bearer {_secret(self.bearer_token_file, BEARER_TOKEN_FILE)}"
            if self.username is not None and self.password_file is not None:
                password = _secret(self.password_file, PASSWORD_FILE)
                pair = base64.b64encode(f"{self.username}:{password}".encode()).decode()
                out["Authorization"] = f"Basic {pair}"
            context = _context(self.ca_file) if self.ca_file is not None else None
        except CredentialError as exc:
            return PrometheusAccess(error=str(exc))
        return PrometheusAccess(out, context)


class CredentialError(Exception):
    """A configured credential file could not be used (the message names variable and file)."""


def _secret(path: str, variable: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"{variable}: cannot read {path}: {exc}") from None
    if not value:
        raise CredentialError(f"{variable}: {path} is empty")
    if any(c in value for c in "\r\n\0"):  # a header value cannot hold them
        raise CredentialError(f"{variable}: {path} holds more than one line")
    return value


# A context per CA file and its modification time: built again only when the mounted file changes.
_contexts: dict[tuple[str, int], ssl.SSLContext] = {}


def _context(path: str) -> ssl.SSLContext:
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError as exc:
        raise CredentialError(f"{CA_FILE}: cannot read {path}: {exc}") from None
    context = _contexts.get(key)
    if context is None:
        try:
            context = ssl.create_default_context(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            raise CredentialError(f"{CA_FILE}: {path} is not a PEM CA bundle: {exc}") from None
        _contexts.clear()
        _contexts[key] = context
    return context


__all__ = [
    "BEARER_TOKEN_FILE",
    "CA_FILE",
    "NO_ACCESS_SETTINGS",
    "PASSWORD_FILE",
    "USERNAME",
    "PrometheusAccess",
    "PrometheusCredentials",
]
