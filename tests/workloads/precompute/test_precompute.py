"""Solaris precompute against a real redis-server: pairs, fallback tiers, coverage, backlog, no lost or double work."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
redis = pytest.importorskip("redis")

from gem_workloads.exchange.messages import CandidateSet  # noqa: E402
from gem_workloads.exchange.store import EmbeddingReader, Keys, unpack  # noqa: E402
from gem_workloads.models.model_dir import LoadedModel  # noqa: E402
from gem_workloads.precompute.__main__ import main as precompute_main  # noqa: E402
from gem_workloads.precompute.__main__ import redis_problem  # noqa: E402
from gem_workloads.precompute.service import PrecomputeMetrics, backlog  # noqa: E402
from gem_workloads.precompute.worker import PrecomputeWorker, WorkerConfig  # noqa: E402
from gem_workloads.scoring.engine import Engine, preset_model  # noqa: E402
from gem_workloads.scoring.request import example_request, parse_request  # noqa: E402

pytestmark = [pytest.mark.workloads, pytest.mark.servers]

STREAM = "cands"


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return preset_model("tiny", seed=5)


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    c.flushdb()
    yield c
    c.close()


def _set(loaded: LoadedModel, user: int, ads: list[tuple[int, int]], seed: int = 0, scores: bool = True) -> Any:
    body = example_request(loaded.schema, len(ads), 8, seed=seed, user_id=user)
    for cand, (ad, group) in zip(body["candidates"], ads, strict=True):
        cand["item_id"], cand["item_cluster"] = ad, group
    return CandidateSet(body, [1.0 - 0.01 * i for i in range(len(ads))] if scores else None, time.time())


def _worker(loaded: LoadedModel, client: Any, consumer: str, **kw: Any) -> PrecomputeWorker:
    cfg = WorkerConfig(stream=STREAM, group="g", consumer=consumer, key_prefix="t", block_ms=10, **kw)
    return PrecomputeWorker(cfg, client, Engine(loaded))


def _drain(worker: PrecomputeWorker, steps: int = 20) -> int:
    written = 0
    for _ in range(steps):
        s = worker.step(block_ms=10)
        written += s.pairs_written
        if backlog(worker.client, STREAM, "g")[0] == 0:
            break
    return written


def test_pairs_are_computed_and_stored_with_ttl_and_version(loaded: LoadedModel, client: Any) -> None:
    w = _worker(loaded, client, "a", max_pairs_per_set=3, ttl_seconds=600)
    cset = _set(loaded, 11, [(100, 1), (101, 1), (102, 2), (103, 2), (100, 1)])
    client.xadd(STREAM, cset.fields())
    client.xadd(STREAM, _set(loaded, 12, [(200, 3)], seed=1, scores=False).fields())
    assert backlog(client, STREAM, "g")[0] == 2
    assert _drain(w) == 4  # top 3 of user 11 by score (dedup of ad 100), 1 of user 12
    keys = Keys("t", loaded.version)
    for ad in (100, 101, 102):
        assert client.exists(keys.exact(11, ad))
        assert 590 < client.ttl(keys.exact(11, ad)) <= 600
    assert not client.exists(keys.exact(11, 103))  # not predicted: beyond max_pairs_per_set
    assert client.exists(keys.exact(12, 200))
    # The stored vector is the model's user-ad embedding of that pair.
    req = parse_request(cset.request, loaded.schema, loaded.config.seq_len, 100)
    emb, _ = Engine(loaded).embed([req])
    stored, ts = unpack(client.get(keys.exact(11, 101)))
    np.testing.assert_allclose(stored, emb[0][1], atol=1e-5)
    assert abs(time.time() - ts) < 30
    assert backlog(client, STREAM, "g") == (0, 0.0)
    # Another model version never reads these.
    other = EmbeddingReader(client, Keys("t", "other-version"), ["exact"])
    assert other.lookup(11, [(100, 1)])[0].tier == "none"


def test_fallback_tiers_and_coverage(loaded: LoadedModel, client: Any) -> None:
    w = _worker(loaded, client, "a")
    a = _set(loaded, 1, [(10, 7), (11, 7), (12, 8)], seed=3)
    b = _set(loaded, 2, [(20, 9)], seed=3)  # same history as user 1: same behaviour bucket
    client.xadd(STREAM, a.fields())
    client.xadd(STREAM, b.fields())
    _drain(w)
    keys = Keys("t", loaded.version)
    assert client.get(keys.bucket(1)) == client.get(keys.bucket(2))
    reader = EmbeddingReader(client, keys, ["exact", "userAdGroupAggregate", "similarUser"])
    got = reader.lookup(
        1,
        [(10, 7), (99, 7), (98, 8)],  # exact; aggregate of ads 10+11 in group 7; aggregate of ad 12
    )
    assert [g.tier for g in got] == ["exact", "userAdGroupAggregate", "userAdGroupAggregate"]
    v10, _ = unpack(client.get(keys.exact(1, 10)))
    v11, _ = unpack(client.get(keys.exact(1, 11)))
    assert got[1].vector is not None
    np.testing.assert_allclose(got[1].vector, (v10 + v11) / 2, atol=1e-6)
    similar = reader.lookup(2, [(11, 5)])  # user 2 never saw ad 11, nor group 5: user 1's embedding
    assert similar[0].tier == "similarUser"
    assert similar[0].vector is not None and np.allclose(similar[0].vector, v11)
    miss = reader.lookup(3, [(10, 7)])  # unknown user: nothing to degrade to
    assert miss[0].tier == "none" and miss[0].vector is None
    assert reader.coverage() == pytest.approx(
        {"exact": 1 / 5, "userAdGroupAggregate": 2 / 5, "similarUser": 1 / 5, "none": 1 / 5}
    )
    assert reader.registry.get_sample_value("gem_embedding_lookups_total", {"tier": "userAdGroupAggregate"}) == 2
    assert reader.registry.get_sample_value("gem_embedding_age_seconds_count", {"tier": "exact"}) == 1
    age = got[0].age_seconds
    assert age is not None and 0 <= age < 30
    # Tiers not configured are not used: exact only degrades straight to none.
    strict = EmbeddingReader(client, keys, ["exact"])
    assert [g.tier for g in strict.lookup(1, [(10, 7), (99, 7)])] == ["exact", "none"]


def test_worker_killed_mid_batch_loses_nothing(loaded: LoadedModel, client: Any) -> None:
    for i in range(4):
        client.xadd(STREAM, _set(loaded, 30 + i, [(i, 1), (i + 10, 2)], seed=i).fields())
    dying = _worker(loaded, client, "dying", read_count=3)
    taken = dying.read(block_ms=10)  # delivered to "dying", which is killed before storing anything
    assert len(taken) == 3
    assert backlog(client, STREAM, "g")[0] == 4
    survivor = _worker(loaded, client, "survivor", claim_idle_ms=50)
    time.sleep(0.1)
    first = survivor.step(block_ms=10)
    assert first.claimed == 3 and first.pairs_written == 6  # the dead consumer's entries, claimed
    _drain(survivor)
    keys = Keys("t", loaded.version)
    assert all(client.exists(keys.exact(30 + i, i)) and client.exists(keys.exact(30 + i, i + 10)) for i in range(4))
    assert backlog(client, STREAM, "g") == (0, 0.0)


def test_stored_but_unacked_entries_are_not_written_twice(loaded: LoadedModel, client: Any) -> None:
    for i in range(3):
        client.xadd(STREAM, _set(loaded, 40 + i, [(i, 1)], seed=i).fields())
    first = _worker(loaded, client, "first")
    real_xack = client.xack
    client.xack = lambda *a, **k: 0  # dies after the transaction, before XACK
    try:
        stored = first.step(block_ms=10)
    finally:
        client.xack = real_xack
    assert stored.pairs_written == 3
    assert backlog(client, STREAM, "g")[0] == 3
    second = _worker(loaded, client, "second", claim_idle_ms=50)
    time.sleep(0.1)
    again = second.step(block_ms=10)
    assert again.claimed == 3 and again.duplicates == 3 and again.pairs_written == 0
    assert backlog(client, STREAM, "g") == (0, 0.0)


def test_fresh_pairs_are_skipped_and_bad_entries_dead_lettered(loaded: LoadedModel, client: Any) -> None:
    w = _worker(loaded, client, "a")
    cset = _set(loaded, 50, [(1, 1), (2, 1)])
    client.xadd(STREAM, cset.fields())
    assert _drain(w) == 2
    client.xadd(STREAM, cset.fields())  # the same user sees the same ads again
    client.xadd(STREAM, {"request": "{not json"})
    client.xadd(STREAM, {"request": '{"user": {"features": {"user_id": 1}}, "candidates": []}'})
    client.xadd(STREAM, {"request": "[" * 100_000 + "]" * 100_000})  # a RecursionError in json's decoder
    s = w.step(block_ms=10)
    assert s.pairs_fresh == 2 and s.pairs_written == 0 and s.dead == 3 and s.entries == 4
    dead = client.xrange(f"{STREAM}:dead")
    reasons = [d[1][b"reason"].decode() for d in dead]
    assert any("not JSON" in r for r in reasons) and any("candidates: empty" in r for r in reasons)
    assert any("nested too deeply" in r for r in reasons)
    assert backlog(client, STREAM, "g") == (0, 0.0)


def test_backlog_and_oldest_age_for_the_autoscaler(loaded: LoadedModel, client: Any) -> None:
    now_ms = int(time.time() * 1000)
    for i in range(5):
        client.xadd(STREAM, _set(loaded, 60 + i, [(i, 1)], seed=i).fields(), id=f"{now_ms - 60_000 + i}-0")
    w = _worker(loaded, client, "a", read_count=2)
    n, age = backlog(client, STREAM, "g")
    assert n == 5 and 59 < age < 90
    w.read(block_ms=10)  # two pending, three undelivered: still five to do, the oldest still 60 s old
    n, age = backlog(client, STREAM, "g")
    assert n == 5 and 59 < age < 90
    metrics = PrecomputeMetrics()
    metrics.refresh(client, STREAM, "g")
    assert metrics.registry.get_sample_value("gem_precompute_backlog") == 5
    assert (metrics.registry.get_sample_value("gem_precompute_oldest_item_age_seconds") or 0) > 59
    w2 = _worker(loaded, client, "b", claim_idle_ms=0)
    _drain(w2)
    metrics.refresh(client, STREAM, "g")
    assert metrics.registry.get_sample_value("gem_precompute_backlog") == 0
    assert metrics.registry.get_sample_value("gem_precompute_oldest_item_age_seconds") == 0


def test_backlog_gauges_keep_their_reading_while_the_source_is_down(loaded: LoadedModel, client: Any) -> None:
    """A Redis blip used to end the pool's loop with a traceback; a backlog of zero that nobody
    measured would let the autoscaler scale down, so the gauges keep the last reading instead."""
    import redis

    client.xadd(STREAM, _set(loaded, 90, [(1, 1)]).fields())
    metrics = PrecomputeMetrics()
    assert metrics.refresh(client, STREAM, "g") is True
    down = redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=1)
    assert metrics.refresh(down, STREAM, "g") is False
    assert metrics.registry.get_sample_value("gem_precompute_backlog") == 1


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_says_which_redis_it_cannot_use(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before the workers start: one line naming the flag and the URL, not a traceback."""
    down = f"redis://127.0.0.1:{_closed_port()}/0"
    assert redis_problem(redis_url) is None
    assert precompute_main(["--preset", "tiny", "--store", redis_url, "--source", down]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --source {down}: cannot reach Redis (") and "Traceback" not in err
    assert precompute_main(["--preset", "tiny", "--store", "http://cache:80", "--source", redis_url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --store http://cache:80: not a Redis URL (") and err.endswith(
        "redis://HOST:PORT[/DB]"
    )


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--preset", "tiny", "--store", "redis://x", "--source", "redis://x"]
    assert precompute_main([*base, "--fallback", "similarUser,exact"]) == 2
    assert "must start with 'exact'" in capsys.readouterr().err
    assert precompute_main([*base, "--fallback", "exact,nearest"]) == 2
    assert "unknown fallback tiers" in capsys.readouterr().err


def test_large_sets_are_split_into_batches(loaded: LoadedModel, client: Any) -> None:
    w = _worker(loaded, client, "a", batch_size=4)
    cset = _set(loaded, 70, [(i, i % 3) for i in range(10)], seed=4, scores=False)
    client.xadd(STREAM, cset.fields())
    client.xadd(STREAM, _set(loaded, 71, [(50, 1), (51, 1)], seed=5).fields())
    assert _drain(w) == 12
    req = parse_request(cset.request, loaded.schema, loaded.config.seq_len, 100)
    emb, _ = Engine(loaded).embed([req])
    keys = Keys("t", loaded.version)
    for i in range(10):
        np.testing.assert_allclose(unpack(client.get(keys.exact(70, i)))[0], emb[0][i], atol=1e-5)


def test_an_id_spelled_unsigned_and_signed_meets_on_one_key(loaded: LoadedModel, client: Any) -> None:
    """A producer writing ids unsigned and a ranker sending them signed read the same embedding."""
    w = _worker(loaded, client, "a")
    client.xadd(STREAM, _set(loaded, 2**64 - 1, [(2**63, 7)]).fields())
    assert _drain(w) == 1
    reader = EmbeddingReader(client, Keys("t", loaded.version), ["exact"])
    assert reader.lookup(-1, [(-(2**63), 7)])[0].tier == "exact"
    assert reader.lookup(2**64 - 1, [(2**63, 7)])[0].tier == "exact"
