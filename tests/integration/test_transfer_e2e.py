"""End to end on the embedded cluster: the operator wires a RankingService to its SolarisPrecompute pool;
the pool fills the store with foundation-model embeddings for the candidate sets the ranker published,
and the ranker's responses show exact-tier hits (and scores that changed) afterwards.

The embedded cluster simulates pods; this test plays kubelet for the two pods: it runs the ranker
container's command as a real server process (a real redis-server as store and stream), and the
precompute container's arguments drive the same worker its Ray actors host, in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
redis = pytest.importorskip("redis")

from gem_operator.cli.operator import OperatorThread  # noqa: E402
from gem_testbed.cluster import EmbeddedCluster  # noqa: E402
from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel  # noqa: E402
from gem_workloads.models.model_dir import load_model_dir, save_model_dir  # noqa: E402
from gem_workloads.precompute.__main__ import model_version  # noqa: E402
from gem_workloads.precompute.__main__ import parser as precompute_parser  # noqa: E402
from gem_workloads.precompute.worker import PrecomputeWorker, WorkerConfig  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import example_request  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.workloads, pytest.mark.servers, pytest.mark.slow]

GEM = "gem.dev/v1alpha1"
ROOT = Path(__file__).resolve().parents[2]
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
MODEL_DIR = "/var/lib/gem/model"  # where the rendered pods expect the loaded model


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if not Path(REDIS).exists():
        pytest.skip("redis-server is not installed")
    port = _port()
    proc = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.wait(5)


def _container(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    deploy = cluster.wait_for(lambda: cluster.get("apps/v1", "Deployment", name, "default"), timeout=30)
    return dict(deploy["spec"]["template"]["spec"]["containers"][0])


def _post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_precompute_pool_fills_the_store_and_the_ranker_hits_exact(
    cluster: EmbeddedCluster, operator: OperatorThread, redis_url: str, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    foundation = preset_model("tiny", seed=2)
    f = foundation.model
    assert isinstance(f, KunlunModel)
    f_dir = save_model_dir(tmp_path / "foundation", f, "kunlun", foundation.config, foundation.schema, "found-7")
    vcfg = get_preset("tiny").with_(solaris_width=f.embedding_size)
    torch.manual_seed(3)
    vertical = build_model("vertical", vcfg, foundation.schema)
    v_dir = save_model_dir(tmp_path / "vertical", vertical, "vertical", vcfg, foundation.schema, "vert-1",
                           foundation_version="found-7")  # fmt: skip

    pool = {"store": {"url": redis_url, "keyPrefix": "e2e"}, "source": {"url": redis_url, "stream": "e2e:cands"}}
    cluster.apply({
        "apiVersion": GEM, "kind": "SolarisPrecompute", "metadata": {"name": "pool", "namespace": "default"},
        "spec": {"model": {"uri": "file:///models/foundation"}, "foundationVersion": "found-7",
                 "autoscaling": {"enabled": False}, "replicas": 1, **pool},
    })  # fmt: skip
    cluster.apply({
        "apiVersion": GEM, "kind": "RankingService", "metadata": {"name": "ranker", "namespace": "default"},
        "spec": {"model": {"uri": "file:///models/vertical"}, "precomputeRef": "pool",
                 "autoscaling": {"enabled": False}, "replicas": 1},
    })  # fmt: skip
    pre = _container(cluster, "pool-precompute")

    def wired() -> dict[str, Any] | None:  # the ranker is re-rendered once the pool exists
        c = _container(cluster, "ranker-server")
        return c if "--embedding-store" in c["args"] else None

    rank = cluster.wait_for(wired, timeout=30)

    # The ranker pod: its rendered command, on this machine (model path and port are the kubelet's part).
    port = _port()
    args = [str(v_dir) if a == MODEL_DIR else a for a in rank["args"]]
    args[args.index("--port") + 1] = str(port)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'workloads'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    server = subprocess.Popen([sys.executable, *args, "--host", "127.0.0.1", "--threads", "1"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            assert time.monotonic() < deadline, "ranker not ready within 90 s"
            time.sleep(0.2)

        body = example_request(foundation.schema, 5, 8, seed=4, user_id=31)
        first = _post(f"{base}/v1/rank", body)
        assert first["precomputed"] == {"none": 5}

        # The precompute pod: its rendered arguments configure the worker (as in each Ray actor).
        p = precompute_parser().parse_args([str(f_dir) if a == MODEL_DIR else a for a in pre["args"][2:]])
        assert p.foundation_version == "found-7" == model_version(p.model, None)
        store = redis.Redis.from_url(p.store)
        cfg = WorkerConfig(stream=p.stream, group=p.group, consumer="pool-0", key_prefix=p.key_prefix,
                           tiers=tuple(p.fallback.split(",")), batch_size=p.batch_size, block_ms=50)  # fmt: skip
        worker = PrecomputeWorker(cfg, redis.Redis.from_url(p.source), Engine(load_model_dir(p.model)), store)
        written = 0
        for _ in range(100):
            written += worker.step(block_ms=50).pairs_written
            if written:
                break
        assert written == len({c["item_id"] for c in body["candidates"]})

        second = _post(f"{base}/v1/rank", body)
        assert second["precomputed"] == {"exact": 5}
        assert second["scores"] != first["scores"]
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            assert 'gem_embedding_lookups_total{tier="exact"} 5.0' in r.read().decode()
        store.close()
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
