"""The suite's real-cluster backend, exercised here: kubectl against the embedded cluster served over HTTP.

`gemop sim up --operator` serves the embedded cluster (operator included) with a kubeconfig, so the
kubectl code path that kind uses runs on every machine that has kubectl; only image builds, the
chart install and real kubelets are left to `e2e/kind/run.sh`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent
ROOT = E2E.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_kube_backend_against_a_served_embedded_cluster(tmp_path: Path, backend_choice: str) -> None:
    if backend_choice != "embedded":
        pytest.skip("this run already targets a real cluster")
    gemop = shutil.which("gemop") or str(Path(sys.executable).parent / "gemop")
    if shutil.which("kubectl") is None or not Path(gemop).exists():
        pytest.skip("needs kubectl and gemop on PATH")
    kubeconfig = tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG", "GEM_E2E_BACKEND", "GEM_E2E_KUBECONFIG"}}
    server = subprocess.Popen(
        [gemop, "sim", "up", "--operator", "--kubeconfig", str(kubeconfig)],
        env={**env, "GEM_RESYNC_SECONDS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            assert server.poll() is None, f"gemop sim up exited: {server.stderr.read() if server.stderr else ''}"
            assert time.monotonic() < deadline, "gemop sim up wrote no kubeconfig within 60 s"
            time.sleep(0.2)
        time.sleep(1.0)  # the operator starts after the kubeconfig is written
        suite = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(E2E / "test_resources.py"),
                "-q",
                "-p",
                "no:cacheprovider",
                "--durations=6",
            ],
            cwd=ROOT,
            env={
                **env,
                "GEM_E2E_KUBECONFIG": str(kubeconfig),
                "GEM_E2E_BACKEND": "kube",
                "GEM_E2E_NAMESPACE": "default",  # the namespace `gemop sim up --operator` serves
                "GEM_E2E_NODE_CACHE": "hostPath",  # its operator mounts the node cache (no chart)
                "GEM_E2E_KUBECTL_VALIDATE": "false",  # the embedded API server publishes no OpenAPI
                "GEM_E2E_EXPECT_READY": "1",  # its simulated kubelets make pods Ready
                "GEM_E2E_TIMEOUT": "150",  # deletions on a loaded machine have taken ~60 s
            },
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
        assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-3000:]
        assert "passed" in suite.stdout
        print(suite.stdout[-3000:])
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
