"""Ranker publishes candidate sets, workers precompute them with the foundation model, its next lookups hit
and change the vertical model's scores; a dead store degrades."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
redis = pytest.importorskip("redis")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel  # noqa: E402
from gem_workloads.models.model_dir import LoadedModel  # noqa: E402
from gem_workloads.precompute.service import backlog  # noqa: E402
from gem_workloads.precompute.worker import PrecomputeWorker, WorkerConfig  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import example_request  # noqa: E402
from gem_workloads.serving.app import ServerConfig, create_app  # noqa: E402
from gem_workloads.serving.lookups import PrecomputedLookups  # noqa: E402
from gem_workloads.serving.publish import CandidatePublisher  # noqa: E402

pytestmark = [pytest.mark.workloads, pytest.mark.servers]


async def _ready(client: TestClient[Any, Any]) -> None:
    for _ in range(500):
        if (await client.get("/readyz")).status == 200:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not ready")


def _vertical(foundation: LoadedModel) -> LoadedModel:
    """A vertical model that reads the foundation model's Solaris embeddings (random weights)."""
    f = foundation.model
    assert isinstance(f, KunlunModel)
    cfg = get_preset("tiny").with_(solaris_width=f.embedding_size)
    torch.manual_seed(1)
    model = build_model("vertical", cfg, foundation.schema)
    model.eval()
    return LoadedModel(model, "vertical", cfg, foundation.schema, "vertical-1", "vertical", foundation.version)


async def test_published_sets_become_exact_hits(redis_url: str) -> None:
    torch.set_num_threads(1)
    loaded = preset_model("tiny", seed=9)  # the foundation model the precompute workers run
    served = _vertical(loaded)
    store = redis.Redis.from_url(redis_url)
    store.flushdb()
    app = create_app(
        ServerConfig(),
        lambda: served,
        publisher=CandidatePublisher(redis_url, "loop"),
        lookups=PrecomputedLookups(redis_url, "L", ["exact", "userAdGroupAggregate", "similarUser"]),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await _ready(client)
        body = example_request(loaded.schema, 6, 8, seed=2, user_id=77)
        first = await (await client.post("/v1/rank", json=body)).json()
        assert first["precomputed"] == {"none": 6}
        for _ in range(100):
            if store.xlen("loop") == 1:
                break
            await asyncio.sleep(0.02)
        worker = PrecomputeWorker(
            WorkerConfig(stream="loop", group="g", consumer="w", key_prefix="L", block_ms=10), store, Engine(loaded)
        )
        stats = worker.step(block_ms=10)
        assert stats.pairs_written == len({c["item_id"] for c in body["candidates"]})
        assert backlog(store, "loop", "g") == (0, 0.0)
        second = await (await client.post("/v1/rank", json=body)).json()
        assert second["precomputed"] == {"exact": 6}
        # The vertical model consumes the foundation model's embeddings: its scores move.
        assert second["scores"] != first["scores"]
        assert second["model_version"] == first["model_version"] == "vertical-1"
        text = await (await client.get("/metrics")).text()
        assert 'gem_embedding_lookups_total{tier="exact"} 6.0' in text
        assert 'gem_embedding_lookups_total{tier="none"} 6.0' in text
    finally:
        await client.close()
        store.close()


async def test_unreachable_store_never_fails_a_request() -> None:
    torch.set_num_threads(1)
    loaded = preset_model("tiny", seed=9)
    lookups = PrecomputedLookups("redis://127.0.0.1:1/0", "L", ["exact"])  # nothing listens on port 1
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(ServerConfig(), lambda: loaded, lookups=lookups)))
    await client.start_server()
    try:
        await _ready(client)
        t0 = time.monotonic()
        r = await client.post("/v1/rank", json=example_request(loaded.schema, 3, 4))
        assert r.status == 200 and (await r.json())["precomputed"] is None
        assert time.monotonic() - t0 < 5
        assert "gem_embedding_store_errors_total 1.0" in await (await client.get("/metrics")).text()
    finally:
        await client.close()
