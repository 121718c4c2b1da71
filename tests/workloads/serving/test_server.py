"""Ranking server: sharing vs per-candidate, dynamic batching, bad input, readiness, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
pytest.importorskip("aiohttp")

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from gem_workloads.models.model_dir import LoadedModel, ModelDirError, load_model_dir, save_model_dir  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import example_request, parse_request  # noqa: E402
from gem_workloads.serving.__main__ import main as serving_main  # noqa: E402
from gem_workloads.serving.app import STATE, ServerConfig, create_app  # noqa: E402

pytestmark = pytest.mark.workloads


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return preset_model("tiny", seed=3)


async def _client(app: Any) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def _wait_ready(client: TestClient[Any, Any], within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        r = await client.get("/readyz")
        if r.status == 200:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("server never became ready")


@pytest.fixture
async def make_client(loaded: LoadedModel) -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient[Any, Any]] = []

    async def make(cfg: ServerConfig | None = None, load: Callable[[], LoadedModel] | None = None) -> Any:
        app = create_app(cfg or ServerConfig(max_candidates=4096), load or (lambda: loaded))
        client = await _client(app)
        clients.append(client)
        return client

    yield make
    for c in clients:
        await c.close()


def _body(loaded: LoadedModel, n: int, seq: int | None = None, seed: int = 0) -> dict[str, Any]:
    return example_request(loaded.schema, n, loaded.config.seq_len if seq is None else seq, seed=seed)


async def test_shared_and_per_candidate_scores_are_equal(make_client: Any, loaded: LoadedModel) -> None:
    shared = await make_client(ServerConfig(share=True))
    baseline = await make_client(ServerConfig(share=False))
    await _wait_ready(shared)
    await _wait_ready(baseline)
    body = _body(loaded, 37, seed=1)
    a = await (await shared.post("/v1/rank", json=body)).json()
    b = await (await baseline.post("/v1/rank", json=body)).json()
    assert a["shared"] is True and b["shared"] is False
    assert np.asarray(a["scores"]).shape == (37, loaded.schema.num_tasks)
    np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-5)
    assert a["model_version"] == loaded.version
    assert a["tasks"] == [t.name for t in loaded.schema.tasks]


def test_batched_requests_score_like_single_ones(loaded: LoadedModel) -> None:
    """Dynamic batching mixes users in one model call; each request still gets its own scores."""
    engine = Engine(loaded)
    reqs = [
        parse_request(_body(loaded, n, seq=s, seed=i), loaded.schema, loaded.config.seq_len, 100)
        for i, (n, s) in enumerate([(3, 0), (9, 5), (1, 16), (20, 40)])  # empty, short, full and truncated histories
    ]
    together = engine.score(reqs, share=True)
    for r, t in zip(reqs, together, strict=True):
        np.testing.assert_allclose(engine.score([r], share=True)[0], t, atol=1e-5)
        np.testing.assert_allclose(engine.score([r], share=False)[0], t, atol=1e-5)


async def test_concurrent_requests_are_batched(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client(ServerConfig(max_batch_requests=16, batch_timeout_s=0.05))
    await _wait_ready(client)
    bodies = [_body(loaded, 4, seed=i) for i in range(12)]
    replies = await asyncio.gather(*(client.post("/v1/rank", json=b) for b in bodies))
    assert all(r.status == 200 for r in replies)
    text = await (await client.get("/metrics")).text()
    count = _sample(text, "gem_ranking_batch_requests_count")
    assert count is not None and count < 12  # fewer model calls than requests


def test_signed_and_unsigned_64_bit_ids_are_one_id_as_in_training(loaded: LoadedModel) -> None:
    """A signed 64-bit hash (BigQuery's FARM_FINGERPRINT, Spark's xxhash64) is negative half the
    time, and training folds it into a row; serving answered 422 to every such request. An id and
    its unsigned spelling (2**64 - 3 for -3) reach the same row, as a uint64 column does in training."""
    card = next(f.cardinality for f in loaded.schema.user_features if f.name == "user_id")
    rows = []
    for user in (-3, 2**64 - 3, card - 3, -3 - 5 * card):
        body = _body(loaded, 4)
        body["user"]["features"]["user_id"] = user
        rows.append(parse_request(body, loaded.schema, loaded.config.seq_len, 10).user["user_id"].values.tolist())
    assert rows == [[card - 3]] * 4


def _big_body(loaded: LoadedModel, n: int) -> dict[str, Any]:
    cand = {"item_id": 1, "item_cluster": 1, "item_tags": [1], "domain": 0}
    return {
        "user": {
            "features": {"user_id": 1, "user_segment": 1},
            "sequence": {f.name: [] for f in loaded.schema.sequence_features},
        },
        "candidates": [cand] * n,
    }


BAD_BODIES: list[tuple[str, Any, int, str]] = [
    ("not an object", [1, 2], 422, "body"),
    ("no user", {"candidates": [{}]}, 422, "user"),
    (
        "user id a string",
        {"user": {"features": {"user_id": "u1"}}, "candidates": [{}]},
        422,
        "user.features.user_id: expected an integer id, got the string 'u1': map string ids to 64-bit integers",
    ),
    ("id past 64 bits", {"user": {"features": {"user_id": 2**64}}, "candidates": [{}]}, 422, "user.features.user_id"),
    ("candidates not a list", {"user": {}, "candidates": {"item_id": 1}}, 422, "candidates"),
    ("empty candidates", {"user": {}, "candidates": []}, 422, "candidates: empty"),
]


@pytest.mark.parametrize(("name", "body", "status", "names"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
async def test_bad_bodies_get_a_clear_4xx(
    make_client: Any, loaded: LoadedModel, name: str, body: Any, status: int, names: str
) -> None:
    client = await make_client()
    await _wait_ready(client)
    r = await client.post("/v1/rank", json=body)
    assert r.status == status
    err = await r.json()
    assert names in err["error"], err


async def test_field_level_errors_and_server_keeps_serving(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client()
    await _wait_ready(client)
    r = await client.post("/v1/rank", data=b'{"user": {"features": ', headers={"Content-Type": "application/json"})
    assert r.status == 400 and "not valid JSON" in (await r.json())["error"]
    # json's decoder recurses once per level: 100,000 nested arrays were a RecursionError and a 500
    deep = b"[" * 100_000 + b"]" * 100_000
    r = await client.post("/v1/rank", data=deep, headers={"Content-Type": "application/json"})
    assert r.status == 400 and "nested too deeply" in (await r.json())["error"]
    cases = [
        (lambda b: b["candidates"][2].update(domain="nowhere"), "candidates[2].domain"),
        (lambda b: b["candidates"][1].update(item_id=[1, 2]), "candidates[1].item_id"),
        (lambda b: b["candidates"][0].pop("item_cluster"), "candidates[0].item_cluster: missing"),
        (lambda b: b["user"]["sequence"]["seq_action"].append(1), "user.sequence.seq_action"),
        (lambda b: b["user"].update(dense=[1.0]), "user.dense"),
        (lambda b: b["user"].update(dense="x"), "user.dense"),
        # valid JSON past a float: numpy's OverflowError was a 500
        (lambda b: b["user"].update(dense=[10**400] * len(b["user"]["dense"])), "user.dense: values must be finite"),
        # finite in JSON, an infinity in float32
        (lambda b: b["user"].update(dense=[-1e300] * len(b["user"]["dense"])), "within +-3.403e+38 (float32)"),
    ]
    for mutate, where in cases:
        body = _body(loaded, 4, seq=6)
        mutate(body)
        r = await client.post("/v1/rank", json=body)
        assert r.status == 422, where
        assert where in (await r.json())["error"]
    ok = await client.post("/v1/rank", json=_body(loaded, 4))
    assert ok.status == 200


async def test_oversized_requests_get_413(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client(ServerConfig(max_candidates=2048))
    await _wait_ready(client)
    r = await client.post("/v1/rank", json=_big_body(loaded, 100_000))
    assert r.status == 413
    assert "100000 candidates exceed" in (await r.json())["error"]
    r = await client.post("/v1/rank", json=_big_body(loaded, 2048))
    assert r.status == 200


async def test_readiness_only_after_the_model_is_loaded(make_client: Any, loaded: LoadedModel) -> None:
    gate = threading.Event()

    def slow_load() -> LoadedModel:
        assert gate.wait(10)
        return loaded

    client = await make_client(load=slow_load)
    r = await client.get("/readyz")
    assert r.status == 503 and (await r.json())["reason"] == "loading model"
    assert (await client.get("/healthz")).status == 200  # alive while loading: no restart loop
    r = await client.post("/v1/rank", json=_body(loaded, 2))
    assert r.status == 503 and r.headers["Retry-After"] == "1"
    assert _sample(await (await client.get("/metrics")).text(), "gem_ranking_model_ready") == 0
    gate.set()
    await _wait_ready(client)
    assert (await client.post("/v1/rank", json=_body(loaded, 2))).status == 200
    assert _sample(await (await client.get("/metrics")).text(), "gem_ranking_model_ready") == 1


async def test_failed_model_load_is_reported(make_client: Any, tmp_path: Path) -> None:
    def bad_load() -> LoadedModel:
        return load_model_dir(tmp_path)

    client = await make_client(load=bad_load)
    for _ in range(200):
        r = await client.get("/healthz")
        if r.status == 503:
            break
        await asyncio.sleep(0.02)
    assert r.status == 503 and "gem-model.json" in (await r.json())["reason"]
    assert (await client.get("/readyz")).status == 503


async def test_full_queue_answers_503_not_a_crash(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client(ServerConfig(max_queue=1, max_batch_requests=1))
    await _wait_ready(client)
    engine = client.server.app[STATE].engine
    assert engine is not None
    real = engine.score

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return real(*args, **kwargs)

    engine.score = slow  # type: ignore[method-assign]
    replies = await asyncio.gather(*(client.post("/v1/rank", json=_body(loaded, 2, seed=i)) for i in range(6)))
    codes = sorted(r.status for r in replies)
    assert 200 in codes and 503 in codes and set(codes) <= {200, 503}
    busy = next(r for r in replies if r.status == 503)
    assert busy.headers["Retry-After"] == "1" and "queue full" in (await busy.json())["error"]


def _sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_metrics_exported(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client()
    await _wait_ready(client)
    for i in range(3):
        assert (await client.post("/v1/rank", json=_body(loaded, 5, seed=i))).status == 200
    await client.post("/v1/rank", json={"user": {}, "candidates": []})
    text = await (await client.get("/metrics")).text()
    assert _sample(text, "gem_ranking_request_seconds_count") == 3
    assert 'gem_ranking_request_seconds_bucket{le="0.1"}' in text
    assert _sample(text, "gem_ranking_in_flight_requests") == 0
    assert _sample(text, "gem_ranking_queue_depth") == 0
    assert _sample(text, "gem_ranking_candidates_total") == 15
    assert (_sample(text, "gem_ranking_candidates_per_second") or 0) > 0
    assert 'gem_ranking_requests_total{code="422"} 1.0' in text
    assert "gem_ranking_gpu_sm_active" not in text  # no GPU here: no made-up SM metric


async def test_example_request_endpoint_and_model_info(make_client: Any, loaded: LoadedModel) -> None:
    client = await make_client()
    await _wait_ready(client)
    body = await (await client.get("/v1/example-request", params={"candidates": "7", "seq_len": "3"})).json()
    assert len(body["candidates"]) == 7
    assert (await client.post("/v1/rank", json=body)).status == 200
    assert (await client.get("/v1/example-request", params={"candidates": "x"})).status == 422
    info = await (await client.get("/v1/model")).json()
    assert info["preset"] == "tiny" and info["seq_len"] == loaded.config.seq_len


def test_example_request_cli(capsys: pytest.CaptureFixture[str], loaded: LoadedModel) -> None:
    assert serving_main(["--example-request", "--candidates", "5", "--seq-len", "9", "--preset", "tiny"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert len(body["candidates"]) == 5
    assert all(len(v) == 9 for v in body["user"]["sequence"].values())
    parse_request(body, loaded.schema, loaded.config.seq_len, 10)  # valid for the model


def test_model_dir_round_trip(tmp_path: Path, loaded: LoadedModel) -> None:
    save_model_dir(tmp_path, loaded.model, loaded.kind, loaded.config, loaded.schema, version="v7")
    again = load_model_dir(tmp_path)
    assert again.version == "v7" and again.schema == loaded.schema and again.config == loaded.config
    req = parse_request(_body(loaded, 6), loaded.schema, loaded.config.seq_len, 10)
    np.testing.assert_allclose(Engine(again).score([req], True)[0], Engine(loaded).score([req], True)[0], atol=1e-6)
    (tmp_path / "gem-model.json").write_text("{")
    with pytest.raises(ModelDirError, match="not JSON"):
        load_model_dir(tmp_path)
    (tmp_path / "gem-model.json").write_text("[" * 100_000 + "]" * 100_000)  # a RecursionError in json
    with pytest.raises(ModelDirError, match="not JSON: nested too deeply"):
        load_model_dir(tmp_path)
