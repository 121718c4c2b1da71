"""Sources on a real S3 endpoint (moto's server): per-source credentials, Hive partitions, and kill -9 +
resume counted by ids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.data.stream_loader import StreamLoader, open_streams
from gem_workloads.data.stream_mix import TimeMixer
from tests.workloads.data.test_parquet_sources import source, write

pytestmark = [pytest.mark.workloads, pytest.mark.slow]

WORKER = Path(__file__).with_name("_stream_worker.py")
BUCKET = "logs"


@pytest.fixture(scope="module")
def s3_spec(moto_s3: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ads")
    cfg = AdsLogConfig(users=300, ads=80, impressions=5_000, purchases=1_500, posts=1_500, row_group_rows=300)
    spec = write_ads_log(root, cfg, uri=f"s3://{BUCKET}/ads")
    moto_s3.client.create_bucket(Bucket=BUCKET)
    for path in root.rglob("*.parquet"):
        moto_s3.client.upload_file(str(path), BUCKET, f"ads/{path.relative_to(root)}")
    return spec


def _ids(log: Path, upto: int | None = None) -> list[list[int]]:
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [s["ids"] for s in steps if upto is None or s["step"] <= upto]


def test_s3_sources_read_with_their_own_prefixed_credentials(moto_s3: Any, s3_spec: dict[str, Any]) -> None:
    # the plain endpoint is dead: only the sources' GEM_DATA_<NAME>_ variables reach the bucket
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    for name in ("FEED", "SEARCH", "VIDEO", "PURCHASES", "POSTS"):
        env |= {f"GEM_DATA_{name}_AWS_ENDPOINT_URL": moto_s3.endpoint, f"GEM_DATA_{name}_AWS_ACCESS_KEY_ID": "testing"}
        env[f"GEM_DATA_{name}_AWS_SECRET_ACCESS_KEY"] = "testing"
    loader = StreamLoader(parse_data_spec(s3_spec), 64, 8, 1000, env=env)
    try:
        batch = loader.batch(1)
    finally:
        loader.close()
    assert batch.size == 64 and len(set(batch.extras["example_id"].tolist())) == 64
    assert loader.history is not None and loader.history.num_events == 3_000


def test_kill_9_and_resume_neither_repeats_nor_skips(moto_s3: Any, s3_spec: dict[str, Any], tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(s3_spec))
    env = {**os.environ, **moto_s3.env, "OMP_NUM_THREADS": "1"}
    steps, every, shards = 40, 5, 2
    for shard in range(shards):
        ref_ids, ckpt, ids = tmp_path / f"ref{shard}", tmp_path / f"ckpt{shard}", tmp_path / f"ids{shard}"
        args = [str(spec_file), str(shard), str(shards), str(steps), str(every)]
        subprocess.run(
            [sys.executable, str(WORKER), *args, str(tmp_path / f"refck{shard}"), str(ref_ids)],
            env=env,
            check=True,
            timeout=300,
        )
        # killed with SIGKILL once it has checkpointed step 15 or later (and usually logged a few more
        # steps); it waits after logging step 18, so a fast run cannot finish before the kill
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), *args, str(ckpt), str(ids), "18"], env=env, start_new_session=True
        )
        deadline = time.monotonic() + 200
        try:
            while not ckpt.exists() or json.loads(ckpt.read_text())["step"] < 15:
                assert proc.poll() is None, "the worker ended before its checkpoint"
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        saved = json.loads(ckpt.read_text())["step"]
        assert saved < steps
        before = _ids(ids, upto=saved)
        ids.rename(tmp_path / f"first{shard}")
        subprocess.run([sys.executable, str(WORKER), *args, str(ckpt), str(ids)], env=env, check=True, timeout=300)
        effective = before + _ids(ids)
        reference = _ids(ref_ids)
        assert len(effective) == steps and effective == reference  # same examples, same order
        flat = [i for step in effective for i in step]
        assert len(flat) == len(set(flat)) == steps * 48
        (tmp_path / f"shard{shard}.json").write_text(json.dumps(flat))
    a, b = (set(json.loads((tmp_path / f"shard{s}.json").read_text())) for s in range(shards))
    assert not a & b  # data-parallel shards never share an example


def test_hive_partitions_on_s3_are_columns(moto_s3: Any, tmp_path: Path) -> None:
    """The partition keys of an S3 prefix (`surface=feed/`) are read as a store lists them."""
    moto_s3.client.create_bucket(Bucket="hive")
    for i, surface in enumerate(("feed", "search")):  # in time order
        write(tmp_path / f"dt=2026-12-01/surface={surface}", 40, start=1000 * i)
    for path in tmp_path.rglob("*.parquet"):
        moto_s3.client.upload_file(str(path), "hive", f"log/{path.relative_to(tmp_path)}")
    raw = source(tmp_path, name="log", uri="s3://hive/log", domain="surface", domains=["search", "feed"])
    spec = parse_data_spec({"sources": [raw]})
    with pytest.MonkeyPatch.context() as mp:
        for key, value in moto_s3.env.items():
            mp.setenv(key, value)
        rows = TimeMixer(spec, open_streams(spec, 0, 1)[0]).take(80)
    domains = dict(zip(rows.example_id.tolist(), rows.domain.tolist(), strict=True))
    assert {d for i, d in domains.items() if i < 1000} == {1} and {d for i, d in domains.items() if i >= 1000} == {0}
