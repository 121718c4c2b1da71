"""``bench/gpu_check.sh``: stops clearly without CUDA; its Python parts run end to end on the CPU (``--dry-run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.serving.device import DeviceProfile  # noqa: E402

pytestmark = pytest.mark.workloads
ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_without_cuda_the_check_stops_at_once_and_says_why() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh")], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "--dry-run" in proc.stderr
    assert proc.stdout == ""  # no table, no figure


def test_an_unknown_precision_plan_is_refused_with_the_known_ones() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--precision", "fp32,fp4", "--dry-run"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 2
    assert "fp4" in proc.stderr and "bf16" in proc.stderr


@pytest.mark.slow
def test_dry_run_prints_the_table_and_writes_a_profile_the_server_loads(tmp_path: Path) -> None:
    profile, out = tmp_path / "profile.json", tmp_path / "check.json"
    args = ["--dry-run", "--precision", "fp32,bf16", "--profile-out", str(profile), "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    t = result["training"]
    assert "error" not in t["plain"] and "error" not in t["trainer"], t
    assert t["e2e_mfu"] == pytest.approx(t["local_mfu"] * t["scaling_ratio"], abs=1e-5)  # both printed rounded
    points = {(r["precision"], r["candidates"]) for r in result["serving"]}
    assert points == {(p, n) for p in ("fp32", "bf16") for n in (64, 256, 1024)}
    assert all(0 < r["p50_ms"] <= r["p99_ms"] for r in result["serving"])
    DeviceProfile.load(str(profile))  # the emulated device's own loader accepts it
    table = proc.stdout
    assert "DRY RUN" in table and "E2E MFU = local x scaling" in table
    assert "serving bf16 1024 candidates p50 / p99 ms" in table and str(profile) in table
