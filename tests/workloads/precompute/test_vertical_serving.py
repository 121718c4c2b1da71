"""A vertical model served with the foundation model's Solaris embeddings and LoopFM memory (real redis-server).

Scores change with what the store holds and equal the model's offline scores for the same inputs;
a corrupt entry degrades to the next tier, an unreachable store to ``none``, a foreign model
version is refused; all counted, never a 5xx.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
redis = pytest.importorskip("redis")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from gem_workloads.exchange.store import EmbeddingWriter, Keys, PairEmbedding, pack  # noqa: E402
from gem_workloads.models import build_model, get_preset  # noqa: E402
from gem_workloads.models.kunlun import KunlunModel  # noqa: E402
from gem_workloads.models.loopfm import representation_width  # noqa: E402
from gem_workloads.models.model_dir import LoadedModel  # noqa: E402
from gem_workloads.models.vertical import TIER_INDEX, TransferInputs, VerticalModel  # noqa: E402
from gem_workloads.scoring.engine import preset_model  # noqa: E402
from gem_workloads.scoring.request import collate_requests, example_request, parse_request  # noqa: E402
from gem_workloads.serving.app import ServerConfig, create_app  # noqa: E402
from gem_workloads.serving.lookups import PrecomputedLookups  # noqa: E402

pytestmark = [pytest.mark.workloads, pytest.mark.servers]

PREFIX = "vs"
TIERS = ["exact", "userAdGroupAggregate", "similarUser"]
K = 4


@pytest.fixture(scope="module")
def foundation() -> LoadedModel:
    torch.set_num_threads(1)
    return preset_model("tiny", seed=3)


@pytest.fixture(scope="module")
def vertical(foundation: LoadedModel) -> LoadedModel:
    f = foundation.model
    assert isinstance(f, KunlunModel)
    cfg = get_preset("tiny").with_(memory_len=K, memory_width=representation_width(f), solaris_width=f.embedding_size)
    torch.manual_seed(4)
    model = build_model("vertical", cfg, foundation.schema)
    model.eval()
    return LoadedModel(model, "vertical", cfg, foundation.schema, "vert-1", "vertical", foundation.version)


@pytest.fixture
def store(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    c.flushdb()
    yield c
    c.close()


@pytest.fixture
async def client(vertical: LoadedModel, redis_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(ServerConfig(), lambda: vertical, lookups=PrecomputedLookups(redis_url, PREFIX, TIERS))
    c: TestClient[Any, Any] = TestClient(TestServer(app))
    await c.start_server()
    for _ in range(500):
        if (await c.get("/readyz")).status == 200:
            break
        await asyncio.sleep(0.02)
    yield c
    await c.close()


def _body(vertical: LoadedModel, n: int = 4) -> Any:
    body = example_request(vertical.schema, n, 8, seed=1, user_id=42)
    for i, cand in enumerate(body["candidates"]):
        cand["item_id"], cand["item_cluster"] = 100 + i, 7
    return body


def _writer(store: Any, version: str) -> EmbeddingWriter:
    return EmbeddingWriter(store, Keys(PREFIX, version), 600, TIERS, memory_keep=K)


def _offline(vertical: LoadedModel, body: Any, side: TransferInputs) -> np.ndarray:
    model = vertical.model
    assert isinstance(model, VerticalModel)
    inputs = collate_requests(
        [parse_request(body, vertical.schema, vertical.config.seq_len, 100)], vertical.schema, True
    )
    with torch.inference_mode():
        logits = model.score(inputs.user, inputs.candidates, side, inputs.user_index)
    out: np.ndarray = torch.sigmoid(logits).numpy()
    return out


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_exact_embeddings_and_memory_change_scores_to_the_offline_ones(
    client: TestClient[Any, Any], vertical: LoadedModel, foundation: LoadedModel, store: Any
) -> None:
    body = _body(vertical)
    cfg = vertical.config
    before = await (await client.post("/v1/rank", json=body)).json()
    assert before["precomputed"] == {"none": 4}
    empty = TransferInputs(
        torch.zeros(1, K, cfg.memory_width), torch.zeros(1, K, dtype=torch.bool),
        torch.zeros(4, cfg.solaris_width), torch.full((4,), TIER_INDEX["none"]),
    )  # fmt: skip
    np.testing.assert_allclose(before["scores"], _offline(vertical, body, empty), atol=1e-6)

    rng = np.random.default_rng(0)
    vecs = rng.normal(0, 1, (2, cfg.solaris_width)).astype(np.float32)
    rep = rng.normal(0, 1, cfg.memory_width).astype(np.float32)
    now = time.time() - 1.0
    pairs = [PairEmbedding("42", "100", "7", vecs[0]), PairEmbedding("42", "101", "7", vecs[1])]
    _writer(store, foundation.version).write_entry("s", "1-0", pairs, {}, now, memory={"42": rep})
    # A representation written after the request's time is never read.
    store.zadd(Keys(PREFIX, foundation.version).memory("42"), {pack(rep * 0 + 9.0, now + 3600): now + 3600})

    after = await (await client.post("/v1/rank", json=body)).json()
    assert after["precomputed"] == {"exact": 2, "userAdGroupAggregate": 2}
    assert after["scores"] != before["scores"]
    memory = torch.zeros(1, K, cfg.memory_width)
    memory[0, -1] = torch.from_numpy(rep)
    mask = torch.zeros(1, K, dtype=torch.bool)
    mask[0, -1] = True
    solaris = torch.from_numpy(np.stack([vecs[0], vecs[1], vecs.mean(0), vecs.mean(0)]))
    tier = torch.tensor([TIER_INDEX["exact"]] * 2 + [TIER_INDEX["userAdGroupAggregate"]] * 2)
    np.testing.assert_allclose(
        after["scores"], _offline(vertical, body, TransferInputs(memory, mask, solaris, tier)), atol=1e-5
    )


async def test_corrupt_entry_degrades_to_the_next_tier_and_is_counted(
    client: TestClient[Any, Any], vertical: LoadedModel, foundation: LoadedModel, store: Any
) -> None:
    body = _body(vertical, 2)
    good = np.ones(vertical.config.solaris_width, np.float32)
    _writer(store, foundation.version).write_entry("s", "2-0", [PairEmbedding("42", "100", "7", good)], {}, time.time())
    keys = Keys(PREFIX, foundation.version)
    store.set(keys.exact("42", "100"), b"\x01\x02garbage")  # not a packed vector
    store.set(keys.exact("42", "101"), pack(np.ones(3, np.float32), time.time()))  # wrong width
    r = await client.post("/v1/rank", json=body)
    assert r.status == 200
    # Both exact entries are unusable: the group aggregate (still holding the good vector) serves.
    assert (await r.json())["precomputed"] == {"userAdGroupAggregate": 2}
    text = await (await client.get("/metrics")).text()
    assert _metric(text, 'gem_embedding_corrupt_entries_total{tier="exact"}') == 2.0


async def test_foreign_version_is_refused_and_counted(
    client: TestClient[Any, Any], vertical: LoadedModel, store: Any
) -> None:
    body = _body(vertical, 2)
    vec = np.ones(vertical.config.solaris_width, np.float32)
    # Another foundation model fills the store, under its own version (and, wrongly, ours' keys).
    _writer(store, "other-foundation").write_entry("s", "3-0", [PairEmbedding("42", "100", "7", vec)], {}, time.time())
    store.set(Keys(PREFIX, str(vertical.foundation_version)).exact("42", "100"), pack(vec, time.time()))
    r = await client.post("/v1/rank", json=body)
    assert r.status == 200 and (await r.json())["precomputed"] == {"none": 2}
    text = await (await client.get("/metrics")).text()
    assert _metric(text, "gem_embedding_version_mismatch_total") >= 1.0


async def test_unreachable_store_scores_with_tier_none(vertical: LoadedModel) -> None:
    lookups = PrecomputedLookups("redis://127.0.0.1:1/0", PREFIX, ["exact"])  # nothing listens on port 1
    c: TestClient[Any, Any] = TestClient(TestServer(create_app(ServerConfig(), lambda: vertical, lookups=lookups)))
    await c.start_server()
    try:
        for _ in range(500):
            if (await c.get("/readyz")).status == 200:
                break
            await asyncio.sleep(0.02)
        body = _body(vertical, 3)
        r = await c.post("/v1/rank", json=body)
        assert r.status == 200
        answer = await r.json()
        assert answer["precomputed"] is None
        cfg = vertical.config
        empty = TransferInputs(
            torch.zeros(1, K, cfg.memory_width), torch.zeros(1, K, dtype=torch.bool),
            torch.zeros(3, cfg.solaris_width), torch.full((3,), TIER_INDEX["none"]),
        )  # fmt: skip
        np.testing.assert_allclose(answer["scores"], _offline(vertical, body, empty), atol=1e-6)
        assert _metric(await (await c.get("/metrics")).text(), "gem_embedding_store_errors_total") == 1.0
    finally:
        await c.close()


def test_precompute_refuses_a_model_of_another_foundation_version(tmp_path: Any, foundation: LoadedModel) -> None:
    from gem_workloads.models.model_dir import save_model_dir
    from gem_workloads.precompute.__main__ import main as precompute_main

    d = save_model_dir(tmp_path / "f", foundation.model, "kunlun", foundation.config, foundation.schema, "found-2")
    common = ["--model", str(d), "--store", "redis://127.0.0.1:1/0", "--source", "redis://127.0.0.1:1/0"]
    assert precompute_main([*common, "--foundation-version", "found-1"]) == 2
