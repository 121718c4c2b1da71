"""The few HTTPS calls the launcher makes itself: health probes and creating nodes.

The standard library is enough for these, which keeps the launcher free of a Kubernetes client;
callers use whatever client they like with the admin kubeconfig the launcher writes.
"""

from __future__ import annotations

import json
import pathlib
import ssl
import urllib.error
import urllib.request
from typing import Any

from gem_testbed.controlplane.pki import KeyPair


class ApiClient:
    """Authenticated JSON requests against one API server (or an unauthenticated health probe)."""

    def __init__(self, server: str, ca: pathlib.Path, client: KeyPair | None = None, timeout: float = 5.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=str(ca))
        if client is not None:
            self._context.load_cert_chain(str(client.cert), str(client.key))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """Status code and decoded JSON (or text); connection errors are status 0.

        `content_type` names the patch format for PATCH (e.g. application/merge-patch+json).
        """
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read())
        except (urllib.error.URLError, OSError):
            return 0, None

    def ok(self, path: str) -> bool:
        """True when GET `path` answers 200 (health endpoints)."""
        return self.request("GET", path)[0] == 200


class InsecureProbe:
    """GET on a component's own health endpoint, whose serving certificate is self-signed."""

    def __init__(self, url: str, timeout: float = 3.0) -> None:
        self.url = url
        self.timeout = timeout
        self._context = ssl.create_default_context()
        self._context.check_hostname = False
        self._context.verify_mode = ssl.CERT_NONE

    def ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout, context=self._context) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
