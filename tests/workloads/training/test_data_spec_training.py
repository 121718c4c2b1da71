"""The real CLI on a data spec: bad data stops before the first step; a resume continues the stream exactly."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log

pytestmark = [pytest.mark.workloads, pytest.mark.slow]


def _env(tmp_path: Path, procs: int = 1) -> dict[str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_"))}
    return {
        **base,
        "WORLD_SIZE": str(procs),
        "NNODES": "1",
        "NODE_RANK": "0",
        "NPROC_PER_NODE": str(procs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "GEM_MESH_SHAPE": f"pp=1,dp_replicate=1,dp_shard={procs},cp=1,tp=1",
        "GEM_MESH_COORDS": json.dumps([[0, 0, r, 0, 0] for r in range(procs)]),
        "GEM_EMBEDDING_SHARDING_GROUP": str(procs),
        "GEM_NUM_THREADS": "1",
        "GEM_METRICS_PORT": "0",
        "OMP_NUM_THREADS": "1",
        "GEM_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }


def _run(tmp_path: Path, spec: Path, *extra: str, procs: int = 1) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "gem_workloads.training",
        "--preset",
        "tiny",
        "--batch-size",
        "64",
        "--data-spec",
        str(spec),
    ]
    return subprocess.run([*cmd, *extra], env=_env(tmp_path, procs), capture_output=True, text=True, timeout=400)


def _records(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def ads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ads")
    return write_ads_log(
        root, AdsLogConfig(users=300, ads=80, impressions=4_000, purchases=1_000, posts=1_000, row_group_rows=400)
    )


def test_a_missing_column_stops_before_the_first_step(tmp_path: Path, ads: dict[str, Any]) -> None:
    bad = json.loads(json.dumps(ads))
    bad["sources"][1]["labels"]["cvr"] = "purchased"
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"data": bad}))
    proc = _run(tmp_path, spec, "--steps", "5")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "data source 'search': column 'purchased' is missing" in proc.stderr
    assert not any(r.get("event") == "start" for r in _records(proc.stdout))  # no process started training
    message = json.loads((tmp_path / "termination-log").read_text())
    assert (
        message["reason"] == "InvalidData" and "'search'" in message["message"] and "'purchased'" in message["message"]
    )


@pytest.mark.parametrize("procs", [1, 2])
def test_resume_continues_the_stream_exactly(tmp_path: Path, ads: dict[str, Any], procs: int) -> None:
    """Each data-parallel shard's position is in the checkpoint (gathered from every rank) and given back."""
    spec, ckpt = tmp_path / "spec.json", tmp_path / "ckpt"
    spec.write_text(json.dumps(ads))
    args = ("--steps", "20", "--checkpoint-every", "10", "--log-every", "5", "--checkpoint-dir", str(ckpt))
    whole = _run(tmp_path, spec, *args, procs=procs)
    assert whole.returncode == 0, whole.stderr[-3000:]
    reference = {r["step"]: r for r in _records(whole.stdout) if "loss" in r}
    done = _records(whole.stdout)[-1]
    assert done["event"] == "done" and done["malformed_rows"] == {"feed": 0, "search": 0, "video": 0}
    # as if killed after the step-10 checkpoint: the newest complete checkpoint is step 10
    shutil.rmtree(ckpt / "step-000020")
    resumed = _run(tmp_path, spec, *args, procs=procs)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = _records(resumed.stdout)
    assert records[1]["event"] == "resumed" and records[1]["step"] == 10
    after = {r["step"]: r for r in records if "loss" in r}
    assert sorted(after) == [15, 20]
    for step in (15, 20):  # the same batches after the resume as without it: identical losses
        assert after[step]["loss"] == pytest.approx(reference[step]["loss"], abs=1e-6)
    assert records[-1]["param_checksum"] == pytest.approx(done["param_checksum"], rel=1e-9)
