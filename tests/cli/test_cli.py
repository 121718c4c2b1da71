"""`gemop` commands, run as a person would run them (subprocesses with bounded time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from gem_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]
GEMOP = [sys.executable, "-m", "gem_operator.cli"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("gemop 0.")


def test_crds_check_detects_drift(tmp_path: Path) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    assert main(["crds", "--out", str(tmp_path), "--check"]) == 0
    victim = tmp_path / "gem.dev_rankingservices.yaml"
    victim.write_text(victim.read_text().replace("minimum: 1", "minimum: 2", 1))
    assert main(["crds", "--out", str(tmp_path), "--check"]) == 1


def test_validate_reports_field_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, sorted((ROOT / "crds" / "samples").glob("*.yaml")))]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "gem.dev/v1alpha1",
                "kind": "RankingService",
                "metadata": {"name": "r"},
                "spec": {"model": {"uri": "s3://m"}, "prot": 1},
            }
        )
    )
    missing = tmp_path / "missing.yaml"
    assert main(["validate", str(bad), str(missing)]) == 1
    err = capsys.readouterr().err
    assert "RankingService/r: spec.prot: unknown field" in err
    assert "missing.yaml: cannot read" in err


def test_run_requires_a_scope(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == 2
    assert "--namespace" in capsys.readouterr().err


@pytest.mark.integration
def test_demo_runs_to_its_summary() -> None:
    env = {**os.environ, "GEM_RESYNC_SECONDS": "1"}
    proc = subprocess.run(
        [*GEMOP, "demo", "--timeout", "60", "--replay-seconds", "8"],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "Demo finished" in out
    for needle in (
        "GEMTraining/gem-pretrain",
        "RankingService/ads-ranker",
        "SolarisPrecompute/ads-precompute",
        "InvalidSpec",
        "gem-pretrain-worker-3",
        "Autoscaling on SM active",
    ):
        assert needle in out
    # The first screen has no Warning that only the demo's apply order would cause (a gang re-placed
    # because ranker pods took its planned GPUs): the one Warning is the invalid sample's rejection.
    warnings = {row.split("│")[3].strip() for row in out.splitlines() if row.count("│") > 4 and "│ Warning │" in row}
    assert warnings == {"InvalidSpec"}, warnings
    assert "Replacing" not in out and "OS signals are ignored" not in proc.stderr


@pytest.mark.integration
def test_sim_up_serves_a_cluster_with_the_operator(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    env = {**os.environ, "GEM_RESYNC_SECONDS": "1"}
    proc = subprocess.Popen(
        [*GEMOP, "sim", "up", "--kubeconfig", str(kubeconfig), "--operator"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split("serving at ")[1].split(";")[0]
        assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == url
        for line in proc.stdout:
            if "operator running" in line:
                break
        doc = yaml.safe_load((ROOT / "crds" / "samples" / "rankingservice.yaml").read_text())
        req = urllib.request.Request(
            f"{url}/apis/gem.dev/v1alpha1/namespaces/default/rankingservices",
            data=json.dumps(doc).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        assert urllib.request.urlopen(req, timeout=10).status == 201
        deadline = time.monotonic() + 30
        phase = None
        while time.monotonic() < deadline and phase != "Ready":
            with urllib.request.urlopen(
                f"{url}/apis/gem.dev/v1alpha1/namespaces/default/rankingservices/ads-ranker", timeout=10
            ) as rsp:
                phase = (json.load(rsp).get("status") or {}).get("phase")
            time.sleep(0.2)
        assert phase == "Ready"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_plan_explains_feasible_infeasible_and_invalid_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = ROOT / "crds" / "samples" / "gemtraining.yaml"
    assert main(["plan", str(job), "--fleet", "demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("feasible: 4 pods x 8 GPUs = 32 ranks")
    assert "node rank -> host" in out
    assert main(["plan", str(job), "--fleet", "demo", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["feasible"] is True

    too_big = tmp_path / "big.yaml"
    too_big.write_text(
        yaml.safe_dump({"spec": {"parallelism": {"dpReplicate": 16, "tp": 8}, "checkpoint": {"uri": "/c"}}})
    )
    assert main(["plan", str(too_big), "--fleet", "demo"]) == 1
    assert "infeasible: needs 16 hosts with 8 free GPUs" in capsys.readouterr().out

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"spec": {"parallelism": {"tp": 3}, "checkpoint": {"uri": "/c"}}}))
    assert main(["plan", str(bad)]) == 2
    assert "parallelism.tp (3) must divide gpusPerNode (8)" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2
    assert "gemop plan:" in capsys.readouterr().err
