"""The seed sweep's service options: bad input stops it with the option and the cause, before any run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "bench" / "autoscaling_seeds.py"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["--service", "/nonexistent/ranker.yaml"], "--service: /nonexistent/ranker.yaml: cannot read", id="missing"
        ),
        pytest.param(["--service", str(ROOT / "pyproject.toml")], "--service:", id="not-a-manifest"),
        pytest.param(
            ["--service", str(ROOT / "crds/samples/rankingservice.yaml"), "--max-replicas", "0"],
            "--max-replicas: Input should be greater than or equal to 1",
            id="max-replicas-zero",
        ),
    ],
)
def test_bad_service_input_names_the_option(args: list[str], says: str) -> None:
    out = subprocess.run(
        [sys.executable, str(SWEEP), "--seeds", "0:1", *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr
    assert "fleet" not in out.stdout  # stopped before any case ran
