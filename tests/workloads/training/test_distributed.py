"""Two gloo processes through the real CLI: DMP table-wise + FSDP2, loss goes down, kill + resume is exact."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

pytestmark = [pytest.mark.workloads, pytest.mark.slow]

STEPS, EVERY = 30, 10
ARGS = ["--preset", "tiny", "--batch-size", "128", "--log-every", "5", "--checkpoint-every", str(EVERY)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE", "MASTER_PORT"):
        base.pop(k, None)
    return {
        **base,
        "WORLD_SIZE": "2",
        "NNODES": "1",
        "NODE_RANK": "0",
        "NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1",
        "GEM_MESH_COORDS": "[[0,0,0,0,0],[0,0,1,0,0]]",
        "GEM_EMBEDDING_SHARDING_GROUP": "2",
        "GEM_NUM_THREADS": "1",
        "GEM_METRICS_PORT": "0",
        "OMP_NUM_THREADS": "1",
    }


def _cmd(ckpt: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "gem_workloads.training", *ARGS, "--steps", str(steps), "--checkpoint-dir", str(ckpt)]


def _records(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_two_process_training_loss_decreases_kill_and_resume_is_exact(tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "first.jsonl"
    # 1. a run killed (SIGKILL to its whole process group) once its step-20 checkpoint is complete
    #    and reported
    with log.open("w") as out:
        proc = subprocess.Popen(
            _cmd(ckpt, 10_000), env=_env(), stdout=out, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 200
        try:
            while '"event": "checkpoint", "step": 20' not in log.read_text():
                assert proc.poll() is None, "training exited before its checkpoint"
                assert time.monotonic() < deadline, "no checkpoint within 200 s"
                time.sleep(0.2)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    first = _records(log.read_text())
    saved = {r["step"]: r["param_checksum"] for r in first if r.get("event") == "checkpoint"}
    assert 10 in saved and 20 in saved
    complete = sorted(p.name for p in ckpt.iterdir() if (p / ".complete").exists())
    newest = int(complete[-1].split("-")[1])
    assert newest % EVERY == 0 and newest < STEPS
    logged = [r for r in first if "loss" in r]
    for r in logged:
        assert {"step", "loss", "examples_per_s", "auc", "flops_per_s", "mfu"} <= set(r)
    assert [r["step"] for r in logged][:4] == [5, 10, 15, 20]

    # 2. resume: continues from the newest complete checkpoint with identical parameters
    proc2 = subprocess.run(_cmd(ckpt, STEPS), env=_env(), capture_output=True, text=True, timeout=240)
    # On failure show how far the run got (its JSON records) as well as how it ended.
    assert proc2.returncode == 0, f"stdout: {proc2.stdout[-1500:]}\nstderr: {proc2.stderr[-3000:]}"
    resumed = _records(proc2.stdout)
    assert resumed[0]["event"] == "start" and resumed[0]["mesh"] == "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1"
    resumed = resumed[1:]
    assert resumed[0]["event"] == "resumed" and resumed[0]["step"] == newest
    assert resumed[0]["param_checksum"] == saved[newest]
    after = [r for r in resumed if "loss" in r]
    assert after[0]["step"] == newest + 5 and after[-1]["step"] == STEPS
    # the data stream is a function of the step: steps both runs logged have identical losses
    before = {r["step"]: r["loss"] for r in logged}
    for r in after:
        if r["step"] in before:
            assert r["loss"] == pytest.approx(before[r["step"]], abs=1e-6)
    assert resumed[-1]["event"] == "done" and resumed[-1]["step"] == STEPS
    # 3. it learned: the loss went down over the run
    assert after[-1]["loss"] < logged[0]["loss"] - 0.01, (logged, after)

    # 4. the checkpoint loads into an unsharded model (what serving does) and scores
    import torch

    from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema
    from gem_workloads.models import build_model, get_preset, load_trained

    cfg = get_preset("tiny")
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    torch.manual_seed(123)
    model = build_model("kunlun", cfg, schema)
    before = model.sparse.user.embedding_bags["t_user_id"].weight.detach().clone()
    load_trained(model, ckpt / f"step-{STEPS:06d}")
    assert not torch.equal(before, model.sparse.user.embedding_bags["t_user_id"].weight)
    batch = MixingLoader([universe.domain(i) for i in range(3)], [1, 1, 1], 16, schema=schema).batch(0)
    with torch.no_grad():
        assert torch.isfinite(model(batch)).all()
