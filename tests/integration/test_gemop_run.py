"""`gemop run` as a process: kubeconfig login, peering, liveness endpoint and operator metrics."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from gem_testbed.cluster import EmbeddedCluster

pytestmark = pytest.mark.integration
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as rsp:
            return rsp.status, rsp.read().decode()
    except OSError:
        return 0, ""


def test_gemop_run_serves_liveness_and_metrics(cluster: EmbeddedCluster) -> None:
    live, metrics = free_port(), free_port()
    env = {**os.environ, "GEM_RESYNC_SECONDS": "1"}
    cmd = [sys.executable, "-m", "gem_operator.cli", "run", "-n", "default",
           "--liveness", f"http://127.0.0.1:{live}/healthz", "--metrics-port", str(metrics)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        cluster.apply(yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text()))
        cluster.wait_for(
            lambda: (
                (
                    (cluster.get("gem.dev/v1alpha1", "RankingService", "ads-ranker", "default") or {}).get("status")
                    or {}
                ).get("phase")
                == "Ready"
            ),
            timeout=40,
        )
        cluster.wait_for(lambda: fetch(f"http://127.0.0.1:{live}/healthz")[0] == 200, timeout=10)
        status, text = fetch(f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200
        assert 'gem_operator_reconcile_total{kind="RankingService",result="ok"}' in text
        assert (
            'gem_operator_children_applied_total{action="created",child_kind="Deployment",kind="RankingService"}'
            in text
        )
        assert "gem_operator_reconcile_seconds_bucket" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
