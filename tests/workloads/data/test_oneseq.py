"""OneSeq: sequence sources with different event features, merged by time, each through its own encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

import torch

from gem_workloads.data.blocks import collate
from gem_workloads.data.histories import SequenceHistory, feature_name
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.data.stream_loader import StreamLoader, open_streams
from gem_workloads.models import build_model, get_preset
from gem_workloads.models.features import SEQUENCE_SOURCE

pytestmark = pytest.mark.workloads

L = 6


def write_events(path: Path, users: np.ndarray, times: np.ndarray, **features: np.ndarray) -> None:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"ts": times, "user_id": users, **features}), path / "part-0.parquet", row_group_size=97)


@pytest.fixture
def spec_and_history(tmp_path: Path) -> tuple[Any, SequenceHistory, dict[str, Any]]:
    rng = np.random.default_rng(7)
    n = 600
    # quarter-second times, distinct within a source (ties inside one source have no order), shared across
    # sources and with the examples' whole-second times, so ties at the example's time happen often
    grid = np.arange(n, dtype=np.float64) / 4
    buys = {"user_id": rng.integers(0, 20, n), "ts": rng.permutation(grid)}
    buys |= {"ad_id": rng.integers(1, 1000, n), "account_id": rng.integers(1, 50, n)}
    posts = {"user_id": rng.integers(0, 20, n), "ts": rng.permutation(grid)}
    posts |= {"actor_id": rng.integers(1, 500, n), "object_id": rng.integers(1, 900, n)}
    write_events(tmp_path / "buys", buys["user_id"], buys["ts"], ad_id=buys["ad_id"], account_id=buys["account_id"])
    write_events(
        tmp_path / "posts", posts["user_id"], posts["ts"], actor_id=posts["actor_id"], object_id=posts["object_id"]
    )
    ex = tmp_path / "examples"
    ex.mkdir()
    pq.write_table(
        pa.table(
            {
                "ts": np.arange(200, dtype=np.float64) / 2,
                "user_id": rng.integers(0, 22, 200),
                "ad_id": rng.integers(0, 1000, 200),
                "clicked": rng.random(200) < 0.5,
            }
        ),
        ex / "part-0.parquet",
    )
    spec = parse_data_spec(
        {
            "sources": [
                {"name": "feed", "uri": str(ex), "timestamp": "ts", "sparse": ["ad_id"], "labels": {"ctr": "clicked"}}
            ],
            "sequences": [
                {"name": "buys", "uri": str(tmp_path / "buys"), "timestamp": "ts", "features": ["ad_id", "account_id"]},
                {
                    "name": "posts",
                    "uri": str(tmp_path / "posts"),
                    "timestamp": "ts",
                    "features": ["actor_id", "object_id"],
                },
            ],
        }
    )
    history = SequenceHistory(spec.sequences, open_streams(spec, 0, 1)[1])
    return spec, history, {"buys": buys, "posts": posts}


def test_history_is_the_last_events_strictly_before_merged_by_time(spec_and_history: Any) -> None:
    _spec, history, raw = spec_and_history
    rng = np.random.default_rng(3)
    users = rng.integers(0, 22, 300)  # users 20, 21 have no events
    times = rng.integers(0, 151, 300).astype(np.float64)
    out = history.lookup(users, times, L)
    lengths = out[SEQUENCE_SOURCE].lengths
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    names = {"buys": ("ad_id", "account_id"), "posts": ("actor_id", "object_id")}
    for i, (u, t) in enumerate(zip(users, times, strict=True)):
        expected = []
        for s, name in enumerate(("buys", "posts")):
            ev = raw[name]
            for j in np.flatnonzero((ev["user_id"] == u) & (ev["ts"] < t)):
                expected.append((ev["ts"][j], s, tuple(int(ev[f][j]) for f in names[name])))
        # per source the last L, then merged by (time, source), last L
        per_source = [sorted([e for e in expected if e[1] == s], key=lambda e: e[0])[-L:] for s in (0, 1)]
        merged = sorted(per_source[0] + per_source[1], key=lambda e: (e[0], e[1]))[-L:]
        a, b = offsets[i], offsets[i + 1]
        got_sources = out[SEQUENCE_SOURCE].values[a:b].tolist()
        assert got_sources == [e[1] for e in merged], i
        for k, (_, s, feats) in enumerate(merged):
            name = ("buys", "posts")[s]
            for f, value in zip(names[name], feats, strict=True):
                assert out[feature_name(name, f)].values[a + k] == value
            other = ("buys", "posts")[1 - s]
            assert all(out[feature_name(other, f)].values[a + k] == 0 for f in names[other])
    # never an event at or after the example's time (the brute force above uses <): ties did occur
    at_time = sum(
        int(((raw[k]["user_id"] == u) & (raw[k]["ts"] == t)).sum())
        for k in raw
        for u, t in zip(users, times, strict=True)
    )
    assert at_time > 10 and (lengths <= L).all() and lengths.sum() > 0


def test_histories_join_into_batches_and_each_source_has_its_own_encoder(spec_and_history: Any) -> None:
    spec, _, _ = spec_and_history
    cfg = get_preset("tiny")
    loader = StreamLoader(spec, 32, cfg.seq_len, cfg.max_table_rows)
    try:
        rows = loader.next_rows()
        block = loader.block(rows)
    finally:
        loader.close()
    schema = loader.schema
    assert [g.name for g in schema.sequence_groups] == ["buys", "posts"]
    assert schema.sequence_names[0] == SEQUENCE_SOURCE
    torch.manual_seed(0)
    model = build_model("kunlun", cfg, schema).eval()
    with torch.no_grad():
        base = model(collate(block, schema))
        # Another source's features on an event are invisible: change the posts features on buys events.
        buys_events = block.sequence[SEQUENCE_SOURCE].values == 0
        assert buys_events.any() and (~buys_events).any()
        for f in ("actor_id", "object_id"):
            block.sequence[feature_name("posts", f)].values[buys_events] += 17
        assert torch.equal(model(collate(block, schema)), base)
        # ...while an event's own features are read by its source's encoder.
        block.sequence[feature_name("buys", "ad_id")].values[buys_events] += 17
        assert not torch.allclose(model(collate(block, schema)), base)
    assert len(model.sequence_input.events.encoders) == 2


def test_examples_in_epoch_milliseconds_see_only_earlier_events(tmp_path: Path) -> None:
    """Examples timed in int64 epoch milliseconds, events in epoch seconds: a history holds only the
    events before each example. Read as seconds, every example came after every event (year
    55,000), and each history held the user's future purchases: labels leaking into features."""
    epoch = 1_709_251_200
    buys = tmp_path / "buys"
    write_events(
        buys, np.array([1, 1, 1]), np.array([epoch + 100, epoch + 300, epoch + 500]), ad_id=np.array([11, 33, 55])
    )
    ex = tmp_path / "examples"
    ex.mkdir()
    when = np.array([epoch + 200, epoch + 400], dtype=np.int64) * 1000
    pq.write_table(
        pa.table({"ts": when, "user_id": [1, 1], "ad_id": [3, 4], "clicked": [True, False]}), ex / "part-0.parquet"
    )
    spec = parse_data_spec(
        {
            "sources": [
                {"name": "feed", "uri": str(ex), "timestamp": "ts", "sparse": ["ad_id"], "labels": {"ctr": "clicked"}}
            ],
            "sequences": [{"name": "buys", "uri": str(buys), "timestamp": "ts", "features": ["ad_id"]}],
        }
    )
    examples, sequences = open_streams(spec, 0, 1)
    chunk = examples[0].read_unit(0)
    assert chunk.time.tolist() == [epoch + 200, epoch + 400]
    got = SequenceHistory(spec.sequences, sequences).lookup(np.array([1, 1]), chunk.time, L)
    seq = got[feature_name("buys", "ad_id")]
    assert seq.lengths.tolist() == [1, 2] and seq.values.tolist() == [11, 11, 33]
