"""The seam's login: the official client's credentials, refreshed and retried once on a 401."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from lightkube.core.exceptions import ConfigError

from gem_operator.kube import auth


def test_a_401_logs_in_again_and_retries_once() -> None:
    tokens = iter(["Bearer fresh", "Bearer fresher"])
    seen: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        return httpx.Response(200 if seen[-1] == "Bearer fresh" else 401, json={})

    relogins: list[int] = []

    def relogin() -> auth.Connection:
        relogins.append(1)
        return auth.Connection("http://x", None, False, None, None, next(tokens), "default")

    async def run() -> list[int]:
        client = httpx.AsyncClient(transport=httpx.MockTransport(serve), auth=auth.LoginAuth("Bearer stale", relogin))
        codes = [(await client.get("http://x/api")).status_code for _ in range(2)]
        await client.aclose()
        return codes

    assert asyncio.run(run()) == [200, 200]
    assert seen == ["Bearer stale", "Bearer fresh", "Bearer fresh"]
    assert len(relogins) == 1


def test_connection_reads_token_ca_and_namespace_from_a_kubeconfig(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not checked here")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://k8s.example:6443", "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "u", "user": {"token": "s3cr3t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    conn = auth.connection(str(path))
    assert conn.server == "https://k8s.example:6443"
    assert conn.authorization == "Bearer s3cr3t"
    assert conn.ca_path == str(ca) and not conn.insecure
    assert conn.namespace == "ml"


def test_missing_kubeconfig_is_reported_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not auth.config_present()
    # without any config the seam falls back to lightkube's own reader, which names the problem
    with pytest.raises(ConfigError, match=r"Configuration file .*absent not found"):
        auth.async_client(field_manager="t")
