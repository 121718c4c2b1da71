"""The env contract: clear errors naming the variable; --help documents it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gem_workloads.training.env import EnvContractError, MeshShape, load_env

pytestmark = pytest.mark.workloads

GOOD = {
    "WORLD_SIZE": "8",
    "NNODES": "2",
    "NODE_RANK": "1",
    "NPROC_PER_NODE": "4",
    "MASTER_ADDR": "job-0.job",
    "MASTER_PORT": "29500",
    "GEM_MESH_SHAPE": "pp=1,dp_replicate=2,dp_shard=2,cp=1,tp=2",
    "GEM_EP": "2",
    "GEM_EMBEDDING_SHARDING_GROUP": "4",
    "GEM_MESH_COORDS": json.dumps([[0, 1, 0, 0, 0], [0, 1, 0, 0, 1], [0, 1, 1, 0, 0], [0, 1, 1, 0, 1]]),
}


def test_good_env_parses() -> None:
    env = load_env(GOOD)
    assert env.mesh == MeshShape(1, 2, 2, 1, 2)
    assert env.global_rank(3) == 7 and env.sharding_group == 4 and env.ep == 2
    assert env.coords is not None and env.coords[3] == (0, 1, 1, 0, 1)


def test_pet_forms_and_torchrun_rank() -> None:
    env = load_env({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})
    assert (env.rank, env.local_rank, env.nproc_per_node, env.mesh.dp_shard) == (1, 1, 2, 2)


@pytest.mark.parametrize(
    ("change", "variable", "words"),
    [
        ({"GEM_MESH_SHAPE": "pp=1,dp_shard=8"}, "GEM_MESH_SHAPE", "five dims"),
        ({"GEM_MESH_SHAPE": "tp=2,dp_replicate=2,dp_shard=2,cp=1,pp=1"}, "GEM_MESH_SHAPE", "where 'pp' belongs"),
        ({"GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=2"}, "GEM_MESH_SHAPE", "WORLD_SIZE is 8"),
        ({"WORLD_SIZE": "eight"}, "WORLD_SIZE", "integer"),
        ({"NPROC_PER_NODE": "3"}, "NPROC_PER_NODE", "!= WORLD_SIZE"),
        ({"NODE_RANK": "2"}, "NODE_RANK", "< NNODES=2"),
        ({"GEM_EP": "3"}, "GEM_EP", "divide dp_shard x cp"),
        ({"GEM_EMBEDDING_SHARDING_GROUP": "3"}, "GEM_EMBEDDING_SHARDING_GROUP", "divide WORLD_SIZE"),
        ({"GEM_MESH_COORDS": "[[0,0,0,0,0]]"}, "GEM_MESH_COORDS", "NPROC_PER_NODE=4"),
        (
            {"GEM_MESH_COORDS": json.dumps([[0, 0, 0, 0, 0], [0, 1, 0, 0, 1], [0, 1, 1, 0, 0], [0, 1, 1, 0, 1]])},
            "GEM_MESH_COORDS",
            "global rank 4",
        ),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT", "TCP port"),
        ({"GEM_METRICS_PORT": "70000"}, "GEM_METRICS_PORT", "must be <= 65535"),
        ({"GEM_NUM_THREADS": "all"}, "GEM_NUM_THREADS", "must be an integer"),
        ({"GEM_NUM_THREADS": "-2"}, "GEM_NUM_THREADS", "must be >= 0"),
        ({"GEM_DATA_RETRIES": "0"}, "GEM_DATA_RETRIES", "must be a whole number >= 1"),
        ({"GEM_DATA_RETRIES": "many"}, "GEM_DATA_RETRIES", "must be a whole number >= 1"),
        ({"GEM_DATA_RETRY_BASE_S": "nan"}, "GEM_DATA_RETRY_BASE_S", "must be a finite number of seconds >= 0"),
        ({"GEM_RESUME_FROM": "latest"}, "GEM_RESUME_FROM", "step-000400"),
        ({"RANK": "9"}, "RANK", "< WORLD_SIZE=8"),
    ],
)
def test_bad_env_names_the_variable(change: dict[str, str], variable: str, words: str) -> None:
    with pytest.raises(EnvContractError) as info:
        load_env({**GOOD, **change})
    assert info.value.variable == variable
    assert str(info.value).startswith(variable + "=")
    assert words in str(info.value)


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(EnvContractError, match=r"GEM_CONFIG_FILE.*cannot be read"):
        load_env({"GEM_CONFIG_FILE": str(tmp_path / "missing.json")})
    bad = tmp_path / "c.json"
    bad.write_text("[1, 2]")
    with pytest.raises(EnvContractError, match="JSON object"):
        load_env({"GEM_CONFIG_FILE": str(bad)})
    bad.write_text("[" * 100_000 + "]" * 100_000)  # json's decoder recurses per level: was a RecursionError
    with pytest.raises(EnvContractError, match="is not JSON: nested too deeply"):
        load_env({"GEM_CONFIG_FILE": str(bad)})


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_")) and k not in GOOD}
    return subprocess.run(
        [sys.executable, "-m", "gem_workloads.training", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_env_exits_2_with_the_variable() -> None:
    proc = _cli(["--steps", "1"], {"WORLD_SIZE": "2", "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=4,cp=1,tp=1"})
    assert proc.returncode == 2
    assert "GEM_MESH_SHAPE=" in proc.stderr and "WORLD_SIZE is 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_rejects_a_mesh_the_preset_cannot_split_before_starting_processes() -> None:
    # tp=4 cannot split the tiny preset's 2 attention heads
    proc = _cli(
        ["--steps", "1", "--preset", "tiny"],
        {"WORLD_SIZE": "4", "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=1,cp=1,tp=4"},
    )
    assert proc.returncode == 2
    assert "GEM_MESH_SHAPE=" in proc.stderr and "tp=4 must divide num_heads=2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_help_documents_the_env_contract() -> None:
    proc = _cli(["--help"], {})
    assert proc.returncode == 0
    for name in ("WORLD_SIZE", "NODE_RANK", "GEM_MESH_SHAPE", "GEM_MESH_COORDS", "GEM_EMBEDDING_SHARDING_GROUP"):
        assert name in proc.stdout
    for flag in ("--preset", "--data", "--steps", "--checkpoint-dir", "--checkpoint-every"):
        assert flag in proc.stdout


def test_auc_matches_pairwise_definition() -> None:
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    from gem_workloads.training.metrics import auc

    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 300).astype(float)  # many ties
    labels = rng.random(300) < 0.4
    pos, neg = scores[labels], scores[~labels]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (
        len(pos) * len(neg)
    )
    assert auc(scores, labels) == pytest.approx(pairwise)
    assert auc(scores, np.zeros(300, dtype=bool)) is None


def test_prometheus_exporter_serves_training_series() -> None:
    pytest.importorskip("torch")
    import socket
    import urllib.request

    from gem_workloads.training.metrics import PrometheusMetrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics = PrometheusMetrics(port, {"job": "t", "node_rank": "0"})
    metrics.update({"step": 7, "loss": 0.5, "examples_per_s": 100.0, "auc": 0.7, "flops_per_s": 1e9, "mfu": None})
    metrics.add_examples(64)
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5).read().decode()
    assert 'gem_train_step{job="t",node_rank="0"} 7.0' in body
    assert "gem_train_examples_total" in body and "gem_train_auc" in body


def test_newest_checkpoint_is_reported_in_the_termination_message(tmp_path: Path) -> None:
    import json

    from gem_workloads.training.trainer import report_checkpoint

    log = tmp_path / "termination-log"
    assert report_checkpoint(tmp_path / "ckpt" / "step-000400", str(log))
    assert json.loads(log.read_text()) == {"checkpoint": "step-000400"}
    assert not report_checkpoint(None, str(log))
    assert not report_checkpoint(tmp_path / "x" / "step-1", str(tmp_path / "missing-dir" / "log"))


def test_a_worker_process_ends_without_finalization_but_keeps_its_output_and_exit_code() -> None:
    """os._exit skips the interpreter's teardown (where torch's C++ threads can abort a finished run),
    so the helper must flush what the run printed and pass on its code."""
    script = (
        "import logging, sys\n"
        "from gem_workloads.training.trainer import exit_without_teardown\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "print('{\"event\": \"done\"}', end='')\n"  # no newline: still in stdout's buffer
        "logging.getLogger('t').warning('kept')\n"
        "import atexit; atexit.register(print, 'finalized')\n"
        "exit_without_teardown(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == '{"event": "done"}'  # flushed, and no atexit handler ran
    assert "kept" in proc.stderr
