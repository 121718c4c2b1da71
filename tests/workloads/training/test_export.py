"""Model versions: two gloo processes export v1 (every N steps) and v2 (the end), each a loadable,
verifiable model directory scored on the holdout; the termination message lists them; S3 works too."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.loader.manifest import MANIFEST_NAME, build_manifest
from gem_workloads.loader.pull import pull
from gem_workloads.models.model_dir import MODEL_FILE, load_model_dir
from gem_workloads.training.export import (
    TERMINATION_LIMIT,
    ExportedVersion,
    ExportStore,
    termination_message,
)
from gem_workloads.training.holdout import build_holdout, evaluate

pytestmark = [pytest.mark.workloads]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(term: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE", "MASTER_PORT"):
        base.pop(k, None)
    return {
        **base,
        "WORLD_SIZE": "2",
        "NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1",
        "GEM_NUM_THREADS": "1",
        "GEM_METRICS_PORT": "0",
        "GEM_TERMINATION_LOG": str(term),
        "OMP_NUM_THREADS": "1",
    }


def test_two_process_training_exports_versions_scored_on_the_holdout(tmp_path: Path) -> None:
    models, term = tmp_path / "models", tmp_path / "termination-log"
    cmd = [
        sys.executable, "-m", "gem_workloads.training", "--preset", "tiny", "--data", "synthetic",
        "--steps", "12", "--batch-size", "64", "--log-every", "6", "--checkpoint-dir", str(tmp_path / "ckpt"),
        "--checkpoint-every", "4", "--export", f"file://{models}", "--export-every", "6", "--holdout-examples", "1500",
    ]  # fmt: skip
    out = subprocess.run(cmd, env=_env(term), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    exports = [r for r in records if r.get("event") == "export"]
    # Step 6 is not a checkpoint step (every 4): it is checkpointed for its export; step 12 is the end.
    assert [(e["version"], e["step"]) for e in exports] == [(1, 6), (2, 12)]
    assert sorted(p.name for p in models.iterdir()) == ["v1", "v2"]
    last = records[-1]
    assert last["event"] == "done" and last["export"] == f"file://{models}/v2" and last["version"] == 2
    # The exported weights score the holdout as the trainer said (the same examples, the plain model).
    loaded = load_model_dir(models / "v2")
    meta = json.loads((models / "v2" / MODEL_FILE).read_text())
    assert meta["modelVersion"] == 2 and meta["step"] == 12 and meta["eval"] == last["eval"]
    holdout = build_holdout("synthetic", loaded.config, 0, 1500)
    assert evaluate(loaded.model, holdout, loaded.schema) == last["eval"]
    assert set(last["eval"]) == {t.name for t in loaded.schema.tasks}
    assert all(0 < m["auc"] < 1 and m["examples"] > 0 for m in last["eval"].values()), last["eval"]
    # A version is an ordinary model origin: the loader pulls and verifies it.
    summary = asyncio.run(pull(str(models / "v1"), tmp_path / "pulled"))
    assert summary["bytes"] == sum(p.stat().st_size for p in (models / "v1").iterdir() if p.name != MANIFEST_NAME)
    message = json.loads(term.read_text())
    assert message["checkpoint"] == "step-000012"
    assert [(m["version"], m["step"], m["uri"]) for m in message["models"]] == [
        (1, 6, f"file://{models}/v1"),
        (2, 12, f"file://{models}/v2"),
    ]


def test_termination_message_keeps_the_newest_versions_that_fit() -> None:
    evals: dict[str, dict[str, float | int | None]] = {"ctr": {"auc": 0.712345, "examples": 20000, "positives": 1234}}
    versions = [ExportedVersion(v, f"s3://bucket/team/models/gem-pretrain/v{v}", v * 500, evals) for v in range(1, 101)]
    text = termination_message("step-050000", versions)
    assert len(text.encode()) <= TERMINATION_LIMIT
    parsed = json.loads(text)
    kept = [m["version"] for m in parsed["models"]]
    assert kept == list(range(101 - len(kept), 101)) and len(kept) >= 10
    assert parsed["checkpoint"] == "step-050000"


def test_versions_on_s3_count_up_and_pull_like_any_model(tmp_path: Path, moto_s3: Any) -> None:
    moto_s3.client.create_bucket(Bucket="models")
    model = tmp_path / "v"
    model.mkdir()
    (model / "weights.pt").write_bytes(os.urandom(100_000))
    (model / MODEL_FILE).write_text("{}")
    (model / MANIFEST_NAME).write_text(build_manifest(model, 65536).to_json())
    store = ExportStore("s3://models/team/job")
    assert store.versions() == []
    assert store.publish(model, 1) == "s3://models/team/job/v1"
    assert store.publish(model, 2) == "s3://models/team/job/v2"
    assert store.versions() == [1, 2]
    names = (MODEL_FILE, MANIFEST_NAME, "weights.pt")
    assert moto_s3.keys("models", "team/job/v2/") == [f"team/job/v2/{n}" for n in names]
    asyncio.run(pull("s3://models/team/job/v2", tmp_path / "pulled"))
    assert (tmp_path / "pulled" / "weights.pt").read_bytes() == (model / "weights.pt").read_bytes()
