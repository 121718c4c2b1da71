"""kubeconfig auth through the official client: an ``exec`` plugin's token authenticates `gemop run`
(kopf's login and the kube seam both) against an embedded cluster that checks bearer tokens."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.api.crd import gem_crds
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.controlplane.operator import refused_lines
from gem_testbed.drivers.demo import PEERING_NAME, peering_object
from tests.integration.conftest import FAST

pytestmark = pytest.mark.integration
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"
PLUGIN = textwrap.dedent(
    """
    import json, pathlib, sys
    here = pathlib.Path(sys.argv[1])
    with (here / "calls").open("a") as f:
        f.write("call\\n")
    print(json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": (here / "token").read_text().strip()},
    }))
    """
)


def get_status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as rsp:
            return int(rsp.status)
    except urllib.error.HTTPError as err:
        return err.code


def exec_kubeconfig(server: str, plugin_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": sys.executable,
                        "args": [str(plugin_dir / "plugin.py"), str(plugin_dir)],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "default"}}],
        "current-context": "c",
    }


@pytest.fixture
def token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
def cluster(token: str) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster("demo", list(gem_crds().values()), lifecycle=FAST, token=token) as c:
        c.apply(peering_object(PEERING_NAME, "default"))
        yield c


def test_exec_plugin_token_authenticates_gemop_run(cluster: EmbeddedCluster, token: str, tmp_path: Path) -> None:
    assert get_status(f"{cluster.url}/api/v1/namespaces") == 401
    assert get_status(f"{cluster.url}/api/v1/namespaces", "wrong") == 401
    assert get_status(f"{cluster.url}/api/v1/namespaces", token) == 200
    (tmp_path / "plugin.py").write_text(PLUGIN)
    (tmp_path / "token").write_text(token)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(exec_kubeconfig(cluster.url, tmp_path)))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "GEM_RESYNC_SECONDS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gem_operator.cli", "run", "-n", "default"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        cluster.apply(yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text()))

        def ready() -> bool:
            body = cluster.get("gem.dev/v1alpha1", "RankingService", "ads-ranker", "default") or {}
            return (body.get("status") or {}).get("phase") == "Ready"

        cluster.wait_for(ready, timeout=40)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    # the seam created the Deployment and kopf wrote the status: both through the plugin's token
    assert cluster.get("apps/v1", "Deployment", "ads-ranker-server", "default") is not None
    assert (tmp_path / "calls").read_text().count("call") >= 1
    # No call was refused: the peering priority and the time stamps' milliseconds may read 401, no status does.
    assert refused_lines(err, 401) == [], err[-2000:]


def test_sim_up_token_file(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    (tmp_path / "token").write_text(token + "\n")
    kubeconfig = tmp_path / "kubeconfig"
    cmd = [sys.executable, "-m", "gem_operator.cli", "sim", "up", "--token-file", str(tmp_path / "token"),
           "--kubeconfig", str(kubeconfig)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving at" in line, line
        config = yaml.safe_load(kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]["server"]
        assert config["users"][0]["user"]["token"] == token  # the kubeconfig it writes works
        assert get_status(f"{server}/api/v1/nodes") == 401
        assert get_status(f"{server}/api/v1/nodes", token) == 200
        request = urllib.request.Request(f"{server}/api/v1/nodes", headers={"Authorization": "Bearer nope"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert json.loads(err.value.read())["reason"] == "Unauthorized"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    empty = tmp_path / "empty"
    empty.write_text("")
    bad = subprocess.run([sys.executable, "-m", "gem_operator.cli", "sim", "up", "--token-file", str(empty)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "is empty" in bad.stderr
