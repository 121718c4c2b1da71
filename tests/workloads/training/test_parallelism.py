"""tp / pp / cp / ep: numerical equivalence with the plain model, a 4-process pp x tp run, invalid meshes.

The equivalence checks run one gloo world (``_parallel_worker.py``) through several meshes and
compare loss, logits, every dense gradient and the embedding-output gradients of one step with
the single-process model on the same batches and seed.
"""

from __future__ import annotations

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

from gem_workloads.models import get_preset
from gem_workloads.training.env import EnvContractError, load_env
from gem_workloads.training.parallel import check_mesh_fits

pytestmark = [pytest.mark.workloads, pytest.mark.slow]

WORKER = Path(__file__).with_name("_parallel_worker.py")
# pp, dp_replicate, dp_shard, cp, tp, ep
SCENARIOS = {
    "tp2": "1,1,1,1,2,1",
    "pp2": "2,1,1,1,1,1",
    "cp2": "1,1,1,2,1,1",
    "ep2_over_dp_shard": "1,1,2,1,1,2",
    "ep2_over_cp": "1,1,1,2,1,2",
}


def _clean_env() -> dict[str, str]:
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_")) and k not in drop}
    return {**env, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def equivalence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("parallel") / "results.json"
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(out), "2", *SCENARIOS.values()],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: dict[str, Any] = json.loads(out.read_text())
    return results


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_step_matches_the_plain_model(equivalence: dict[str, Any], name: str) -> None:
    r = equivalence[SCENARIOS[name]]
    assert r["loss"] == pytest.approx(r["ref_loss"], abs=1e-5)
    assert r["logit_err"] < 1e-5  # forward (c): the cp forward equals the unsharded sequence
    assert r["grad_rel_err"] < 1e-4, r  # every dense parameter's gradient, TP/FSDP shards gathered
    assert r["emb_rel_err"] < 1e-4, r  # what TorchRec receives sums to the plain embedding gradient
    # every dense parameter was checked on at least one rank (pp / ep ranks hold subsets)
    assert r["params_checked"] >= r["params_total"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(ckpt: Path, steps: int, resume: str | None = None) -> list[dict[str, Any]]:
    env = {
        **_clean_env(),
        "WORLD_SIZE": "4",
        "NNODES": "1",
        "NODE_RANK": "0",
        "NPROC_PER_NODE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "GEM_MESH_SHAPE": "pp=2,dp_replicate=1,dp_shard=1,cp=1,tp=2",
        "GEM_NUM_THREADS": "1",
        "GEM_METRICS_PORT": "0",
    }
    if resume:
        env["GEM_RESUME_FROM"] = resume
    args = ["--preset", "tiny", "--batch-size", "64", "--lr", "0.01", "--log-every", "5", "--checkpoint-every", "10"]
    proc = subprocess.run(
        [sys.executable, "-m", "gem_workloads.training", *args, "--steps", str(steps), "--checkpoint-dir", str(ckpt)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_pipeline_x_tensor_parallel_trains_checkpoints_and_resumes_exactly(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    first = _run(ckpt, 20)
    assert first[0]["event"] == "start" and first[0]["mesh"] == "pp=2,dp_replicate=1,dp_shard=1,cp=1,tp=2"
    logged = {r["step"]: r for r in first if "loss" in r}
    assert sorted(logged) == [5, 10, 15, 20]
    assert logged[20]["loss"] < logged[5]["loss"], logged  # it learns
    assert logged[20]["auc"] is not None  # the last stage's AUC reaches rank 0's log
    saved = {r["step"]: r["param_checksum"] for r in first if r.get("event") == "checkpoint"}
    # resume from step 10: same parameters, then the same losses for steps 15 and 20
    again = _run(ckpt, 20, resume="step-000010")
    resumed = next(r for r in again if r.get("event") == "resumed")
    assert resumed["step"] == 10 and resumed["param_checksum"] == saved[10]
    after = {r["step"]: r["loss"] for r in again if "loss" in r}
    assert sorted(after) == [15, 20]
    for step, loss in after.items():
        assert loss == pytest.approx(logged[step]["loss"], abs=1e-5)


def _env(mesh: str, ep: int = 1) -> Any:
    world = 1
    for part in mesh.split(","):
        world *= int(part.split("=")[1])
    return load_env({"WORLD_SIZE": str(world), "GEM_MESH_SHAPE": mesh, "GEM_EP": str(ep)})


@pytest.mark.parametrize(
    ("mesh", "model", "batch", "words"),
    [
        ("pp=4,dp_replicate=1,dp_shard=1,cp=1,tp=1", "kunlun", 64, "pp=4 exceeds the 2 layers"),
        ("pp=1,dp_replicate=1,dp_shard=1,cp=4,tp=1", "kunlun", 64, "cp=4 must divide the 2 attention blocks"),
        ("pp=1,dp_replicate=1,dp_shard=1,cp=1,tp=4", "kunlun", 64, "tp=4 must divide num_heads=2"),
        ("pp=1,dp_replicate=1,dp_shard=1,cp=1,tp=2", "dlrm", 64, "data-parallel baseline"),
    ],
)
def test_meshes_the_model_cannot_take_name_the_variable_and_the_fix(
    mesh: str, model: str, batch: int, words: str
) -> None:
    with pytest.raises(EnvContractError) as info:
        check_mesh_fits(_env(mesh), get_preset("tiny"), model, batch)
    assert info.value.variable == "GEM_MESH_SHAPE" and words in str(info.value)


def test_batch_that_does_not_split_into_microbatches_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"--batch-size 30 must be divisible by 4"):
        check_mesh_fits(_env("pp=2,dp_replicate=1,dp_shard=1,cp=2,tp=1"), get_preset("tiny"), "kunlun", 30)
    check_mesh_fits(_env("pp=2,dp_replicate=1,dp_shard=2,cp=2,tp=2", ep=2), get_preset("tiny"), "kunlun", 32)
