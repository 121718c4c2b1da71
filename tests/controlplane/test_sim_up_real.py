"""`gemop sim up --control-plane real`, as a user runs it: a process, a kubeconfig, Ctrl-C.

Without binaries (an empty cache) and with a taken port it says so in one line and starts nothing;
with them it serves the fleet as KWOK nodes (GPU capacity and topology labels of `--fleet`), runs the
operator with the chart's ServiceAccount when asked, and on SIGINT stops everything, removes its
state and exits 0 (the operator got no 403).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

import pytest

from gem_operator.fleet import GPU, load_fleet
from gem_testbed.controlplane import CORE, missing_binaries
from gem_testbed.controlplane.binaries import CACHE_ENV, HELM


def _gemop(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gem_operator.cli", "sim", "up", "--control-plane", "real", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_missing_binaries_are_one_line(tmp_path: pathlib.Path) -> None:
    done = _gemop("--kubeconfig", str(tmp_path / "k"), env={CACHE_ENV: str(tmp_path)})
    _, err = done.communicate(timeout=60)
    assert done.returncode == 1
    assert err.strip().count("\n") == 0
    assert err.startswith("gemop sim up: error: missing control-plane binary 'etcd'")
    assert "scripts/control-plane/build.sh" in err
    assert not (tmp_path / "k").exists()


def test_a_taken_port_is_one_line(tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _gemop("--port", str(port), "--kubeconfig", str(tmp_path / "k"))
        _, err = done.communicate(timeout=60)
    assert done.returncode == 2
    assert err.strip().count("\n") == 0 and f"--port {port}" in err


@pytest.mark.controlplane
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_serves_the_fleet_with_the_operator_and_cleans_up_on_ctrl_c(tmp_path: pathlib.Path) -> None:
    missing = missing_binaries((*CORE, HELM))
    if missing:
        pytest.skip("; ".join(str(error) for error in missing))
    kubeconfig = tmp_path / "gem.kubeconfig"
    proc = _gemop("--fleet", "demo", "--operator", "--kubeconfig", str(kubeconfig))
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("operator running as"):
                break
        assert lines and lines[-1].startswith("operator running as system:serviceaccount:gem-system:"), lines
        state = pathlib.Path(re.search(r"logs: (\S+)/logs;", "".join(lines)).group(1))  # type: ignore[union-attr]
        assert state.is_dir()
        got = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    nodes = {n["metadata"]["name"]: n for n in json.loads(got.stdout)["items"]}
    fleet = {n["metadata"]["name"]: n for n in load_fleet("demo")}
    assert nodes.keys() == fleet.keys()
    for name, source in fleet.items():
        assert nodes[name]["status"]["capacity"][GPU] == source["status"]["capacity"][GPU]
        for key, value in source["metadata"]["labels"].items():
            assert nodes[name]["metadata"]["labels"][key] == value
    assert proc.returncode == 0, err
    assert not state.exists(), "Ctrl-C removes the certificates, data and logs"
    assert "client-key-data" in kubeconfig.read_text(), "the kubeconfig carries its credentials"
