"""Credentials for kopf and for the ``kube`` seam, from one login through the official client.

kopf's own kubeconfig login reads tokens and client certificates only, so a kubeconfig whose user
is an ``exec`` plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``) or an
OIDC auth provider cannot authenticate with it. The official ``kubernetes`` client understands
all of them (and the in-cluster service account with its rotating token), so when it is installed
and a kubeconfig or in-cluster config exists, both logins go through it:

- kopf gets a ConnectionInfo as ``kopf.login_via_client`` builds it (``login``);
- the seam keeps its lightkube client (dict-based, async, what the bench measures) but takes its
  server, CA, client certificate and bearer token from the same client configuration
  (``connection``), and on a 401 loads it again (running the exec plugin again, rereading a
  rotated service-account token) and retries the request once (``LoginAuth``). Moving the seam
  onto the official client's API classes instead would mean a synchronous urllib3 client on the
  event loop and typed-model conversions for every object, which the seam was built to avoid.

Without the client or without any config the logins are today's: kopf's service-account and
kubeconfig logins, lightkube's own kubeconfig reader.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import kopf
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from gem_operator.envvars import http_url_problem

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def client_available() -> bool:
    try:
        import kubernetes.config  # noqa: F401
    except ImportError:
        return False
    return True


def config_present(path: str | os.PathLike[str] | None = None) -> bool:
    """An in-cluster service account, the given kubeconfig, $KUBECONFIG or ~/.kube/config."""
    if path is not None:
        return Path(path).is_file()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and SERVICE_ACCOUNT_TOKEN.is_file():
        return True
    env = os.environ.get("KUBECONFIG")
    if env:
        return any(Path(p).is_file() for p in env.split(os.pathsep) if p)
    return Path("~/.kube/config").expanduser().is_file()


_FIX = "point $KUBECONFIG at a kubeconfig kubectl can use, or run in a pod with a service account"


def config_problem() -> str | None:
    """Why no client configuration can be loaded (None: one can), for ``gemop run`` to say once.

    Without this, kopf's startup retries a kubeconfig that will never parse (or a file that is not
    there) every 60 s, each time with a traceback. Loading it here runs an exec plugin once more.
    """
    where = os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not config_present():
        return f"no Kubernetes client configuration: {where} does not exist and this is not a pod; {_FIX}"
    if not client_available():
        return None  # kopf's and lightkube's own readers report what they find
    import kubernetes.config
    import yaml

    try:
        server = connection().server
        problem = http_url_problem(server)
        if problem is not None:
            raise ValueError(f"server {server!r}: {problem}")
    except (kubernetes.config.ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return f"cannot load the Kubernetes client configuration from {where}: {first}; {_FIX}"
    return None


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's login: through the official client when it and a config exist, else today's logins.

    It does what ``kopf.login_via_client`` does (in-cluster first, then the kubeconfig, through
    the client's loaders) with one difference: $KUBECONFIG is read when called. The client's
    ``load_kube_config()`` without a path uses $KUBECONFIG as it was when the client was first
    imported, so a process that points it elsewhere later (the embedded cluster, tests) would log
    in to the old cluster.
    """
    if client_available() and config_present():
        conn = connection()
        scheme, _, token = (conn.authorization or "").partition(" ")
        return kopf.ConnectionInfo(
            server=conn.server,
            ca_path=conn.ca_path,
            insecure=conn.insecure,
            scheme=scheme or None,
            token=token or None,
            certificate_path=conn.cert_path,
            private_key_path=conn.key_path,
            default_namespace=conn.namespace,
            priority=10,  # the rank kopf gives logins through the official client
        )
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@dataclass(frozen=True)
class Connection:
    """What the seam needs from a login: where, how to trust it, and who we are."""

    server: str
    ca_path: str | None
    insecure: bool
    cert_path: str | None
    key_path: str | None
    authorization: str | None  # the whole header value, e.g. "Bearer abc"
    namespace: str


def connection(path: str | None = None, context: str | None = None) -> Connection:
    """Load the client configuration as kubectl would: in-cluster first unless a kubeconfig path is
    given, then the kubeconfig (running its exec plugin or auth provider)."""
    import kubernetes.client
    import kubernetes.config

    cfg = kubernetes.client.Configuration()
    namespace = "default"
    loaded = False
    if path is None and context is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            loaded = True
            ns_file = SERVICE_ACCOUNT_TOKEN.with_name("namespace")
            if ns_file.is_file():
                namespace = ns_file.read_text().strip() or namespace
        except kubernetes.config.ConfigException:
            pass
    if not loaded:
        # $KUBECONFIG now, not as the client saw it at import (see ``login``); paths may be a list.
        path = path or os.environ.get("KUBECONFIG") or None
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=cfg
        )
        _, current = kubernetes.config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
        if context is not None:
            contexts, _ = kubernetes.config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
            current = next((c for c in contexts if c.get("name") == context), current)
        namespace = ((current or {}).get("context") or {}).get("namespace") or namespace
    # kubernetes>=36 keeps the token under BearerToken, older ones under authorization.
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    if not header and cfg.username:
        basic = base64.b64encode(f"{cfg.username}:{cfg.password or ''}".encode()).decode()
        header = f"Basic {basic}"
    return Connection(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        cert_path=cfg.cert_file or None,
        key_path=cfg.key_file or None,
        authorization=header or None,
        namespace=namespace,
    )


class LoginAuth(httpx.Auth):
    """Adds the login's Authorization header; on a 401 logs in again and retries once."""

    def __init__(self, authorization: str | None, relogin: Callable[[], Connection]) -> None:
        self._authorization = authorization
        self._relogin = relogin
        self._lock = asyncio.Lock()

    def _apply(self, request: httpx.Request) -> None:
        if self._authorization:
            request.headers["Authorization"] = self._authorization
        else:
            request.headers.pop("Authorization", None)

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        sent = self._authorization
        self._apply(request)
        response = yield request
        if response.status_code != 401:
            return
        async with self._lock:
            if self._authorization == sent:  # nobody refreshed meanwhile
                fresh = await asyncio.to_thread(self._relogin)
                self._authorization = fresh.authorization
                log.info("credentials refreshed after a 401 from the API server")
        await response.aread()
        self._apply(request)
        yield request


def _kubeconfig_dict(conn: Connection) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": conn.server}
    if conn.ca_path:
        cluster["certificate-authority"] = conn.ca_path
    if conn.insecure:
        cluster["insecure-skip-tls-verify"] = True
    user: dict[str, Any] = {}
    if conn.cert_path and conn.key_path:
        user = {"client-certificate": conn.cert_path, "client-key": conn.key_path}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "login", "cluster": cluster}],
        "users": [{"name": "login", "user": user}],
        "contexts": [{"name": "login", "context": {"cluster": "login", "user": "login", "namespace": conn.namespace}}],
        "current-context": "login",
    }


def async_client(
    path: str | None = None,
    context: str | None = None,
    *,
    field_manager: str,
    timeout: httpx.Timeout | None = None,
) -> AsyncClient:
    """The seam's lightkube client on the official client's credentials (or lightkube's own
    kubeconfig reader when the official client or any config is missing)."""
    if not (client_available() and config_present(path)):
        config = KubeConfig.from_file(path) if path else KubeConfig.from_env()
        return AsyncClient(config=config.get(context_name=context), field_manager=field_manager, timeout=timeout)
    conn = connection(path, context)
    config = KubeConfig.from_dict(_kubeconfig_dict(conn))
    client = AsyncClient(config=config.get(), field_manager=field_manager, timeout=timeout)
    # lightkube builds its httpx client with the kubeconfig user's auth; the seam's requests carry
    # the login's header instead (refreshed on a 401), so both clients act as the same identity.
    transport = client._client._client
    if not isinstance(transport, httpx.AsyncClient):
        raise RuntimeError("lightkube's HTTP client is not an httpx.AsyncClient; update kube/auth.py")
    transport.auth = LoginAuth(conn.authorization, lambda: connection(path, context))
    return client
