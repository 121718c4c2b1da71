"""Checkpoints in S3 (moto's server, tests/workloads/conftest.py): save, resume exactly, ignore half uploads, pull."""

from __future__ import annotations

import io
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
pytest.importorskip("obstore")

pytestmark = [pytest.mark.workloads, pytest.mark.servers]

BUCKET = "ckpt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3(moto_s3: Any) -> Any:
    """The shared moto server (tests/workloads/conftest.py) with this module's bucket."""
    moto_s3.client.create_bucket(Bucket=BUCKET)
    return moto_s3


def _train(uri: str, steps: int, every: int, environ: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One in-process training run (world size 1, gloo); returns the JSON records it printed."""
    from gem_workloads.training.env import load_env
    from gem_workloads.training.trainer import TrainArgs, Trainer

    env = load_env({"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    args = TrainArgs(
        steps=steps, checkpoint_dir=uri, checkpoint_every=every, batch_size=32, log_every=100, metrics_port=0
    )
    saved = {k: os.environ.get(k) for k in (environ or {})}
    os.environ.update(environ or {})
    out = io.StringIO()
    try:
        trainer = Trainer(args, env, 0, 0, out=out)
        try:
            trainer.run()
        finally:
            trainer.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _event(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == name]


def test_checkpoint_uri_accepts_object_stores_and_rejects_http() -> None:
    from gem_workloads.training.checkpoint import checkpoint_dir_from_uri

    assert checkpoint_dir_from_uri("s3://b/run") == "s3://b/run"
    assert checkpoint_dir_from_uri("gs://b/run") == "gs://b/run"
    assert checkpoint_dir_from_uri("file:///data/run") == "/data/run"
    assert checkpoint_dir_from_uri("/data/run") == "/data/run"
    with pytest.raises(ValueError, match="not https://"):
        checkpoint_dir_from_uri("https://example.com/run")
    with pytest.raises(ValueError, match="no bucket"):
        checkpoint_dir_from_uri("s3:///run")


def test_save_to_s3_then_resume_is_exact_and_half_uploads_are_ignored(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gem_workloads.loader.manifest import Manifest
    from gem_workloads.training.checkpoint import MARKER, ObjectStoreCheckpoints

    monkeypatch.setenv("GEM_CHECKPOINT_STAGING", str(tmp_path / "staging"))
    uri = f"s3://{BUCKET}/exact"
    first = _train(uri, steps=4, every=2)
    saved = {r["step"]: r["param_checksum"] for r in _event(first, "checkpoint")}
    assert set(saved) == {2, 4}
    assert _event(first, "checkpoint")[-1]["path"] == f"{uri}/step-000004"
    keys = s3.keys(BUCKET, "exact/step-000004/")
    assert f"exact/step-000004/{MARKER}" in keys and "exact/step-000004/manifest.json" in keys
    # the manifest lists exactly the DCP files (not itself, not the marker), with their real hashes
    raw = s3.client.get_object(Bucket=BUCKET, Key="exact/step-000004/manifest.json")["Body"].read()
    manifest = Manifest.from_json(raw)
    listed = {f.path for f in manifest.files}
    assert listed == {k.removeprefix("exact/step-000004/") for k in keys} - {MARKER, "manifest.json"}
    assert ".metadata" in listed and any(p.endswith(".distcp") for p in listed)
    marker = json.loads(s3.client.get_object(Bucket=BUCKET, Key=f"exact/step-000004/{MARKER}")["Body"].read())
    assert marker["step"] == 4 and marker["manifestDigest"] == manifest.digest
    # staging is cleaned up after the upload
    assert not any((tmp_path / "staging").rglob("*.distcp"))

    # uploads that died before their marker, one older and one newer than step 4: never resumed from
    for key in keys:
        if not key.endswith((MARKER, "manifest.json")):
            body = s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            for step in ("step-000003", "step-000006"):
                s3.client.put_object(Bucket=BUCKET, Key=key.replace("step-000004", step), Body=body)
    # and a marker nested too deeply for json's decoder (a RecursionError): not complete either
    deep = b"[" * 100_000 + b"]" * 100_000
    s3.client.put_object(Bucket=BUCKET, Key=f"exact/step-000005/{MARKER}", Body=deep)
    store = ObjectStoreCheckpoints(uri, staging=tmp_path / "probe")
    assert store.newest() == "step-000004"
    assert [n for _, n in store.complete_names()] == ["step-000002", "step-000004"]

    resumed = _train(uri, steps=8, every=2)
    start = _event(resumed, "resumed")
    assert len(start) == 1 and start[0]["step"] == 4
    assert start[0]["param_checksum"] == saved[4]
    assert [r["step"] for r in _event(resumed, "checkpoint")] == [6, 8]
    # retention (keep=3), and the older half upload is cleaned up; step 6 was cleared and saved whole
    assert [n for _, n in store.complete_names()] == ["step-000004", "step-000006", "step-000008"]
    assert not s3.keys(BUCKET, "exact/step-000002/") and not s3.keys(BUCKET, "exact/step-000003/")
    marker6 = json.loads(s3.client.get_object(Bucket=BUCKET, Key=f"exact/step-000006/{MARKER}")["Body"].read())
    manifest6 = Manifest.from_json(
        s3.client.get_object(Bucket=BUCKET, Key="exact/step-000006/manifest.json")["Body"].read()
    )
    assert marker6["step"] == 6 and marker6["manifestDigest"] == manifest6.digest


def test_gem_load_pulls_and_verifies_a_trainer_checkpoint_and_the_trainer_restores_from_it(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the operator wires: an init container pulls the checkpoint, the trainer loads it from GEM_RESTORE_DIR."""
    monkeypatch.setenv("GEM_CHECKPOINT_STAGING", str(tmp_path / "staging"))
    uri = f"s3://{BUCKET}/restore"
    first = _train(uri, steps=3, every=3)
    checksum = _event(first, "checkpoint")[-1]["param_checksum"]

    dest = tmp_path / "gem" / "restore" / "step-000003"
    loader = [sys.executable, "-m", "gem_workloads.loader"]
    env = {**os.environ, **s3.env}
    pulled = subprocess.run(
        [*loader, "pull", f"{uri}/step-000003", str(dest), "--manifest", f"{uri}/step-000003/manifest.json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    verified = subprocess.run([*loader, "verify", str(dest)], env=env, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["verified"] is True

    # the bucket's copy is now broken: a resume that read it would fail, so success proves the restore dir was used
    s3.client.put_object(Bucket=BUCKET, Key="restore/step-000003/.metadata", Body=b"garbage")
    resumed = _train(
        uri, steps=3, every=3, environ={"GEM_RESTORE_DIR": str(dest), "GEM_CHECKPOINT_STAGING": str(tmp_path / "s2")}
    )
    start = _event(resumed, "resumed")
    assert start[0]["step"] == 3 and start[0]["param_checksum"] == checksum
    assert start[0]["path"] == str(dest)


def test_a_restore_dir_that_is_incomplete_or_another_checkpoint_is_not_used(tmp_path: Path) -> None:
    from gem_workloads.loader.manifest import build_manifest
    from gem_workloads.loader.pull import DEST_MANIFEST_NAME, MARKER_NAME
    from gem_workloads.training.checkpoint import CheckpointManager

    pulled = tmp_path / "restore" / "step-000010"
    pulled.mkdir(parents=True)
    (pulled / ".metadata").write_bytes(b"x" * 100)
    manifest = build_manifest(pulled, 64 * 1024)
    (pulled / DEST_MANIFEST_NAME).write_text(manifest.to_json())
    mgr = CheckpointManager(tmp_path / "ckpt", restore_dir=pulled)
    assert mgr.restored("step-000010") is None  # no loader marker yet: the pull did not finish
    (pulled / MARKER_NAME).write_text(json.dumps({"manifestDigest": manifest.digest}))
    assert mgr.restored("step-000010") == pulled
    assert mgr.restored("step-000020") is None  # another checkpoint than the one asked for
    (pulled / ".metadata").write_bytes(b"x" * 99)
    assert mgr.restored("step-000010") is None  # sizes no longer match the manifest


def _two_process_env(s3: Any, uri: str, staging: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NNODES", "NPROC_PER_NODE", "MASTER_PORT"):
        base.pop(k, None)
    return {
        **base,
        **s3.env,
        "WORLD_SIZE": "2",
        "NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1",
        "GEM_CHECKPOINT_URI": uri,
        "GEM_CHECKPOINT_STAGING": str(staging),
        "GEM_NUM_THREADS": "1",
        "GEM_METRICS_PORT": "0",
        "OMP_NUM_THREADS": "1",
    }


@pytest.mark.slow
def test_two_gloo_processes_save_to_s3_and_resume_exactly_through_the_cli(s3: Any, tmp_path: Path) -> None:
    """Both ranks upload their own shards, rank 0 writes one manifest covering both; resume pulls and reshards."""
    from gem_workloads.loader.manifest import Manifest

    uri = f"s3://{BUCKET}/two"
    cmd = [sys.executable, "-m", "gem_workloads.training", "--batch-size", "32", "--checkpoint-every", "2"]
    first = subprocess.run(
        [*cmd, "--steps", "2"],
        env=_two_process_env(s3, uri, tmp_path / "a"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert first.returncode == 0, first.stderr[-4000:]
    records = [json.loads(line) for line in first.stdout.splitlines() if line.startswith("{")]
    checksum = _event(records, "checkpoint")[-1]["param_checksum"]
    raw = s3.client.get_object(Bucket=BUCKET, Key="two/step-000002/manifest.json")["Body"].read()
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= {f.path for f in Manifest.from_json(raw).files}

    second = subprocess.run(
        [*cmd, "--steps", "3"],
        env=_two_process_env(s3, uri, tmp_path / "b"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert second.returncode == 0, second.stderr[-4000:]
    records = [json.loads(line) for line in second.stdout.splitlines() if line.startswith("{")]
    start = _event(records, "resumed")
    assert start[0]["step"] == 2 and start[0]["param_checksum"] == checksum
    assert _event(records, "done")[0]["step"] == 3


def test_failures_raise_instead_of_completing_or_starting_fresh(s3: Any, tmp_path: Path) -> None:
    """An upload that fails leaves no marker; a store that cannot be listed is an error, not 'no checkpoint yet'."""
    import torch

    from gem_workloads.training.checkpoint import CheckpointError, ObjectStoreCheckpoints

    missing = ObjectStoreCheckpoints("s3://no-such-bucket/run", staging=tmp_path / "staging")
    with pytest.raises(CheckpointError, match="rank 0"):
        missing.save(1, {"w": torch.ones(4)}, rank=0)
    assert not any((tmp_path / "staging").rglob("*.distcp"))
    with pytest.raises(CheckpointError, match="listing s3://no-such-bucket/run"):
        missing.resume_point(None, rank=0, local_rank=0)
    assert missing.latest_name() is None  # the exit report falls back to what this process knows

    store = ObjectStoreCheckpoints(f"s3://{BUCKET}/small", staging=tmp_path / "staging")
    assert store.resume_point(None, rank=0, local_rank=0) is None  # empty prefix: a fresh start
    assert store.save(7, {"w": torch.arange(4.0)}, rank=0) == f"s3://{BUCKET}/small/step-000007"
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        store.resume_point("step-000009", rank=0, local_rank=0)
    path = store.resume_point(None, rank=0, local_rank=0)
    assert path is not None and path.name == "step-000007"
    state = {"w": torch.zeros(4)}
    store.load(path, state)
    assert torch.equal(state["w"], torch.arange(4.0))
