"""Parquet example sources: the spec's shape, column checks, malformed rows, shards, mixing in stream order."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log
from gem_workloads.data.parquet_stream import InvalidData, ParquetStream
from gem_workloads.data.spec import DataSpecError, load_data_spec, parse_data_spec
from gem_workloads.data.stores import DataUnavailable, RetrySettingError, locate, retry_settings, with_retries
from gem_workloads.data.stream_loader import StreamLoader, open_streams
from gem_workloads.data.stream_mix import TimeMixer

pytestmark = pytest.mark.workloads


def source(path: Path, **over: Any) -> dict[str, Any]:
    return {
        "name": "feed",
        "uri": str(path),
        "timestamp": "ts",
        "user": "user_id",
        "id": "event_id",
        "sparse": ["ad_id"],
        "dense": ["bid"],
        "labels": {"ctr": "clicked"},
        **over,
    }


def write(path: Path, n: int, start: int = 0, row_group: int = 50, **cols: Any) -> None:
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(start)
    table = {
        "event_id": np.arange(start, start + n, dtype=np.int64),
        "ts": np.sort(rng.random(n)) * 1000.0 + start,
        "user_id": rng.integers(0, 50, n),
        "ad_id": rng.integers(0, 100, n),
        "bid": rng.random(n),
        "clicked": rng.random(n) < 0.3,
    }
    table.update(cols)
    pq.write_table(pa.table(table), path / f"part-{start:06d}.parquet", row_group_size=row_group)


@pytest.fixture(scope="module")
def ads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ads")
    return write_ads_log(
        root, AdsLogConfig(users=300, ads=80, impressions=6_000, purchases=2_000, posts=2_000, row_group_rows=500)
    )


def test_spec_errors_name_the_field() -> None:
    good = source(Path("/data/feed"))
    assert parse_data_spec({"sources": [good]}).domains == ("feed",)
    units = parse_data_spec({"sources": [{**good, "timestampUnit": "ms"}]}).sources[0].timestamp_unit
    assert units == "ms" and parse_data_spec({"sources": [good]}).sources[0].timestamp_unit == "auto"
    cases = [
        ({"sources": []}, "data.sources"),
        ({"sources": [{**good, "labels": {}}]}, "data.sources[0].labels"),
        ({"sources": [{**good, "uri": "ftp://x"}]}, "data.sources[0].uri"),
        ({"sources": [{**good, "weight": 0}]}, "data.sources[0].weight"),
        ({"sources": [{**good, "domain": "surface"}]}, "data.sources[0].domain"),
        ({"sources": [good], "sequences": [{"name": "p", "uri": "/p", "features": []}]}, "data.sequences[0].features"),
        ({"sources": [good, good]}, "unique"),
        ({"sources": [{**good, "timestampUnit": "minutes"}]}, "data.sources[0].timestampUnit"),
        (
            {"sources": [good], "sequences": [{"name": "p", "uri": "/p", "features": ["x"], "timestampUnit": 1000}]},
            "data.sequences[0].timestampUnit",
        ),
    ]
    for raw, field in cases:
        with pytest.raises(DataSpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
            parse_data_spec(raw)


def test_missing_column_and_wrong_type_name_source_and_column(tmp_path: Path) -> None:
    write(tmp_path / "feed", 100)
    spec = parse_data_spec({"sources": [source(tmp_path / "feed", labels={"ctr": "clicks"})]})
    with pytest.raises(InvalidData) as exc:
        open_streams(spec, 0, 1)
    assert "'feed'" in str(exc.value) and "'clicks'" in str(exc.value) and "missing" in str(exc.value)
    write(tmp_path / "bad", 100, user_id=np.array([f"u{i}" for i in range(100)]))
    spec = parse_data_spec({"sources": [source(tmp_path / "bad", name="search")]})
    with pytest.raises(InvalidData) as exc:
        open_streams(spec, 0, 1)
    assert exc.value.source == "search" and exc.value.column == "user_id" and "string" in str(exc.value)
    # String ids are common in a team's logs: the error says what to do, for training and serving alike.
    assert str(exc.value).endswith(
        "map string ids to 64-bit integers upstream (a 64-bit hash such as FARM_FINGERPRINT or xxhash64), "
        "and send the ranking server the same integers"
    )


def test_a_file_lacking_a_column_is_found_before_reading(tmp_path: Path) -> None:
    write(tmp_path / "feed", 100, start=0)
    path = tmp_path / "feed"
    pq.write_table(pa.table({"event_id": [1], "ts": [5000.0], "user_id": [1]}), path / "part-999999.parquet")
    with pytest.raises(InvalidData, match=r"column 'ad_id' is missing in .*part-999999"):
        open_streams(parse_data_spec({"sources": [source(path)]}), 0, 1)


def test_malformed_rows_are_counted_skipped_and_sampled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    n = 200
    users = pa.array([None if i % 10 == 3 else i % 7 for i in range(n)], pa.int64())
    bid = np.where(np.arange(n) % 25 == 4, np.nan, 1.0)
    write(tmp_path / "feed", n, user_id=users, bid=bid)
    (tmp_path / "feed" / "part-zzz.parquet").write_bytes(b"PAR1 not a parquet file PAR1")
    spec = parse_data_spec({"sources": [source(tmp_path / "feed")]})
    with pytest.raises(InvalidData, match="part-zzz"):  # an unreadable footer is found before the first step
        open_streams(spec, 0, 1)
    (tmp_path / "feed" / "part-zzz.parquet").unlink()
    with caplog.at_level(logging.WARNING, logger="gem_workloads.data"):
        loader = StreamLoader(spec, 32, 8, 1000)
        seen = []
        for step in range(1, 5):
            seen += loader.batch(step).extras["example_id"].tolist()
        loader.close()
    bad = {i for i in range(n) if i % 10 == 3 or i % 25 == 4}
    assert not bad & set(seen) and len(seen) == len(set(seen)) == 128
    assert loader.malformed()["feed"] == len(bad)
    assert any(
        "malformed rows skipped" in r.getMessage() and "'user_id': None" in r.getMessage() for r in caplog.records
    )


def test_an_infinite_time_is_a_malformed_row(tmp_path: Path) -> None:
    """An infinite event time sorted after every other and, as an example, took every event of its
    user as history; it orders nothing, as a null time does not."""
    ts = np.arange(100, dtype=np.float64) + 1_709_251_200
    ts[[5, 50]] = [np.inf, -np.inf]
    write(tmp_path / "feed", 100, row_group=128, ts=ts)
    stream = open_streams(parse_data_spec({"sources": [source(tmp_path / "feed")]}), 0, 1)[0][0]
    chunk = stream.read_unit(0)
    assert len(chunk.time) == 98 and np.isfinite(chunk.time).all()
    assert stream.counters.malformed == 2


def test_a_dense_value_past_float32_is_malformed_as_an_infinity_is(tmp_path: Path) -> None:
    """The model reads float32: 1e300 is finite in the file but an infinity in the batch."""
    n = 100
    bid = np.where(np.arange(n) % 10 == 0, 1e300, 0.5)
    write(tmp_path / "feed", n, bid=bid)
    loader = StreamLoader(parse_data_spec({"sources": [source(tmp_path / "feed")]}), 30, 8, 1000)
    batch = loader.batch(1)
    loader.close()
    assert np.isfinite(batch.user.dense.numpy()).all()
    assert loader.malformed()["feed"] == 10


def test_column_types_pyarrow_reads_awkwardly_still_stream(tmp_path: Path) -> None:
    """A float16 column (pyarrow cannot turn its statistics into scalars) and int64 times past
    2**53 (no exact float64) are data like any other, not an ArrowInvalid out of the trainer."""
    n = 100
    write(tmp_path / "half", n, bid=np.linspace(0, 1, n).astype(np.float16))
    write(tmp_path / "ns", n, ts=np.arange(n, dtype=np.int64) * 1_000_003 + 2**60)
    for name in ("half", "ns"):
        loader = StreamLoader(parse_data_spec({"sources": [source(tmp_path / name)]}), 25, 8, 1000)
        assert len(loader.batch(1).extras["example_id"]) == 25
        assert loader.malformed()["feed"] == 0
        loader.close()


def test_a_source_without_a_usable_row_says_what_was_wrong(tmp_path: Path) -> None:
    """Every row malformed: the error carries a sample of why, not only 'no usable rows'."""
    write(tmp_path / "feed", 60, user_id=pa.array([None] * 60, pa.int64()))
    loader = StreamLoader(parse_data_spec({"sources": [source(tmp_path / "feed")]}), 16, 8, 1000)
    with pytest.raises(InvalidData, match=r"has no usable rows \(\d+ malformed, e\.g\. .*'user_id': None"):
        loader.batch(1)
    loader.close()


def test_unreachable_store_is_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []

    def fail() -> None:
        raise OSError("connection refused")

    with pytest.raises(DataUnavailable, match=r"source 'feed' at s3://b/x: unreachable after 3 attempts"):
        with_retries("source 'feed' at s3://b/x", fail, attempts=3, base_s=0.1, sleep=calls.append)
    assert calls == [0.1, 0.2]
    # a real S3 client against a port nobody listens on
    monkeypatch.setenv("GEM_DATA_RETRIES", "2")
    monkeypatch.setenv("GEM_DATA_RETRY_BASE_S", "0.01")
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    with pytest.raises(DataUnavailable, match="'feed' at s3://bucket/feed: unreachable after 2 attempts"):
        ParquetStream("feed", locate("feed", "s3://bucket/feed", env), {"ts": "time"}, "ts")


def test_retry_settings_refuse_what_would_read_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """GEM_DATA_RETRIES=0 ran no attempt, so a read returned None as if the source were empty."""
    assert retry_settings({}) == (5, 0.5)
    assert retry_settings({"GEM_DATA_RETRIES": "2", "GEM_DATA_RETRY_BASE_S": "0"}) == (2, 0.0)
    for env, words in [
        ({"GEM_DATA_RETRIES": "0"}, "GEM_DATA_RETRIES='0': expected a whole number >= 1"),
        ({"GEM_DATA_RETRIES": "-1"}, "GEM_DATA_RETRIES='-1': expected a whole number >= 1"),
        ({"GEM_DATA_RETRY_BASE_S": "inf"}, "GEM_DATA_RETRY_BASE_S='inf': expected a finite number of seconds >= 0"),
        ({"GEM_DATA_RETRY_BASE_S": "-0.5"}, "GEM_DATA_RETRY_BASE_S='-0.5': expected a finite number"),
    ]:
        with pytest.raises(RetrySettingError, match=re.escape(words)):
            retry_settings(env)
    monkeypatch.setenv("GEM_DATA_RETRIES", "0")
    with pytest.raises(RetrySettingError):
        with_retries("source 'feed'", lambda: 1)


def test_a_data_spec_nested_too_deeply_is_a_data_spec_error(tmp_path: Path) -> None:
    """The YAML parser recurses per level: such a file was a RecursionError from the trainer's preflight."""
    deep = tmp_path / "spec.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataSpecError, match="not YAML/JSON: nested too deeply to be a data spec"):
        load_data_spec(deep)


def test_a_data_spec_alias_bomb_or_several_documents_is_a_data_spec_error(tmp_path: Path) -> None:
    """Nine anchors of nine aliases mean a billion values: refused before anything walks them."""
    path = tmp_path / "data.yaml"
    lines = ['l0: &l0 ["lol"]'] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    path.write_text("sources:\n" + "".join(f"  {line}\n" for line in lines))
    with pytest.raises(DataSpecError, match="not YAML/JSON: its aliases expand to more than"):
        load_data_spec(path)
    path.write_text("sources: []\n---\nsources: []\n")
    with pytest.raises(DataSpecError, match="2 YAML documents; a data spec is one"):
        load_data_spec(path)


def test_shards_are_disjoint_complete_and_deterministic(tmp_path: Path) -> None:
    write(tmp_path / "feed", 400, start=0, row_group=40)
    write(tmp_path / "feed", 300, start=400, row_group=40)
    spec = parse_data_spec({"sources": [source(tmp_path / "feed")]})
    for shards in (1, 2, 3, 40):
        ids = []
        for shard in range(shards):
            stream = open_streams(spec, shard, shards)[0][0]
            again = open_streams(spec, shard, shards)[0][0]
            mine = [stream.read_unit(i).columns["event_id"].to_pylist() for i in range(len(stream.units))]
            assert mine == [again.read_unit(i).columns["event_id"].to_pylist() for i in range(len(again.units))]
            ids += [i for unit in mine for i in unit]
        assert sorted(ids) == list(range(700)), shards


def test_sources_interleave_by_event_time_with_weights(tmp_path: Path) -> None:
    write(tmp_path / "a", 600, start=0, row_group=64)
    write(tmp_path / "b", 600, start=0, row_group=64, event_id=np.arange(10_000, 10_600))
    spec = parse_data_spec(
        {"sources": [source(tmp_path / "a", name="a"), source(tmp_path / "b", name="b", weight=0.5)]}
    )
    mixer = TimeMixer(spec, open_streams(spec, 0, 1)[0])
    rows = [mixer.take(50) for _ in range(12)]
    times = np.concatenate([r.time for r in rows])
    assert np.all(np.diff(times) >= 0), "the merged stream is in event time order"
    source_of = np.concatenate([r.source for r in rows])
    share_b = float((source_of == 1).mean())
    assert 0.27 < share_b < 0.40, share_b  # 0.5 : 1 weights -> one third, by the position hash


def test_numeric_times_in_any_unit_interleave_with_timestamps(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Four sources of the same 600 seconds, their times written as a timestamp type, epoch seconds,
    epoch milliseconds and epoch nanoseconds: merged in true time order. Read as seconds, the
    milliseconds and nanoseconds sources sorted after every other row (years 55,000 and later)."""
    epoch = 1_709_251_200
    seconds = np.sort(np.random.default_rng(1).random(600)) * 600 + epoch
    written = {
        "stamp": pa.array((seconds * 1e6).astype(np.int64), type=pa.timestamp("us", tz="UTC")),
        "secs": seconds,
        "millis": (seconds * 1e3).astype(np.int64),
        "nanos": (seconds * 1e9).astype(np.int64),
    }
    for name, ts in written.items():
        write(tmp_path / name, 600, row_group=64, ts=ts)
    spec = parse_data_spec({"sources": [source(tmp_path / name, name=name) for name in written]})
    with caplog.at_level(logging.INFO, logger="gem_workloads.data"):
        mixer = TimeMixer(spec, open_streams(spec, 0, 1)[0])
        rows = [mixer.take(100) for _ in range(20)]
    times = np.concatenate([r.time for r in rows])
    assert np.all(np.diff(times) >= 0) and times[0] >= epoch and times[-1] < epoch + 600
    source_of = np.concatenate([r.source for r in rows])
    assert all(0.15 < float((source_of == k).mean()) < 0.35 for k in range(4))  # the four interleave
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "data source 'millis': numbers in time column 'ts' read as epoch milliseconds by their size" in said
    assert "'nanos': numbers in time column 'ts' read as epoch nanoseconds" in said
    assert "'secs'" not in said and "'stamp'" not in said


def test_naive_timestamps_beside_zoned_ones_are_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    micros = (np.sort(np.random.default_rng(2).random(100)) * 600 + 1_709_251_200) * 1e6
    for name, tz in (("naive", None), ("naive2", None), ("utc", "UTC")):
        write(tmp_path / name, 100, ts=pa.array(micros.astype(np.int64), type=pa.timestamp("us", tz=tz)))
    warned = "have timestamps without a time zone, read as UTC, beside sources whose times are UTC-based"
    for names, said in ((["naive", "naive2"], False), (["naive", "utc"], True)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gem_workloads.data"):
            open_streams(parse_data_spec({"sources": [source(tmp_path / n, name=n) for n in names]}), 0, 1)
        assert (warned in caplog.text) is said, caplog.text
    assert "data sources 'naive' have timestamps without a time zone" in caplog.text and "('utc')" in caplog.text


def test_footers_are_read_several_at_a_time_in_file_order(tmp_path: Path) -> None:
    """Opening reads every file's footer (a store round trip each) `footer_reads` at a time; what it
    finds, and the first unreadable file it names, do not depend on how many."""
    for i in range(40):
        write(tmp_path / "many", 10, start=i * 10, row_group=4)
    opened = [
        ParquetStream("feed", locate("feed", str(tmp_path / "many")), {"ts": "time"}, "ts", footer_reads=n)
        for n in (1, 32)
    ]
    assert [(u.path, u.row_group) for u in opened[0].units] == [(u.path, u.row_group) for u in opened[1].units]
    assert len(opened[0].units) == 120 and opened[1].total_rows == 400
    for bad in ("part-000170.parquet", "part-000300.parquet"):
        (tmp_path / "many" / bad).write_bytes(b"not parquet at all, but long enough to have a footer" * 4)
    for n in (1, 8):
        with pytest.raises(InvalidData, match=r"part-000170.parquet is not a readable Parquet file"):
            ParquetStream("feed", locate("feed", str(tmp_path / "many")), {"ts": "time"}, "ts", footer_reads=n)


def test_footer_reads_overlap_up_to_their_bound() -> None:
    from gem_workloads.data.parquet_stream import _read_footers

    lock, now, most = threading.Lock(), [0], [0]

    class Slow:
        def __init__(self, i: int) -> None:
            self.path = f"f{i}"

        def ensure_complete_metadata(self) -> None:
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
            time.sleep(0.05)
            with lock:
                now[0] -= 1
            if self.path == "f7":
                raise pa.ArrowInvalid("bad footer")

    errors = _read_footers("test", [Slow(i) for i in range(12)], 4)  # type: ignore[arg-type]
    assert most[0] == 4
    assert [i for i, e in enumerate(errors) if e is not None] == [7]

    # A store that stays unreachable: the first file's error is raised, and the files not yet
    # started are dropped rather than each retried in turn.
    started: list[str] = []

    class Gone(Slow):
        def ensure_complete_metadata(self) -> None:
            with lock:
                started.append(self.path)
            time.sleep(0.02)
            if self.path == "f0":
                raise DataUnavailable("test (f0): unreachable after 1 attempts")

    with pytest.raises(DataUnavailable, match="f0"):
        _read_footers("test", [Gone(i) for i in range(200)], 4)  # type: ignore[arg-type]
    assert len(started) < 50, len(started)


def test_a_timestamp_unit_reads_times_counted_from_another_origin(tmp_path: Path) -> None:
    """Milliseconds since the log began are too small for auto to tell from seconds: the spec says."""
    write(tmp_path / "rel", 100, row_group=128, ts=np.arange(100, dtype=np.int64) * 250)  # every 250 ms
    as_seconds, as_millis = (
        open_streams(parse_data_spec({"sources": [source(tmp_path / "rel", **unit)]}), 0, 1)[0][0].read_unit(0).time
        for unit in ({}, {"timestampUnit": "ms"})
    )
    assert as_seconds[-1] == 99 * 250 and as_millis[-1] == pytest.approx(99 * 0.25)


def test_resume_from_state_continues_exactly(ads: dict[str, Any]) -> None:
    spec = parse_data_spec(ads)
    whole = StreamLoader(spec, 64, 16, 1000, shard=1, shards=2)
    reference = [whole.batch(s).extras["example_id"].tolist() for s in range(1, 9)]
    first = StreamLoader(spec, 64, 16, 1000, shard=1, shards=2)
    for s in range(1, 4):
        first.batch(s)
    state = first.state()
    resumed = StreamLoader(spec, 64, 16, 1000, shard=1, shards=2)
    resumed.restore(state, 3)
    rest = [resumed.batch(s).extras["example_id"].tolist() for s in range(4, 9)]
    assert rest == reference[3:]
    assert state["examples"] == 3 * 64
    with pytest.raises(RuntimeError, match="sequential"):
        resumed.batch(10)
    for loader in (whole, first, resumed):
        loader.close()


def test_a_domain_column_maps_rows_to_the_listed_domains(tmp_path: Path) -> None:
    n = 120
    surface = pa.array([("feed", "search", "shorts")[i % 3] for i in range(n)]).dictionary_encode()
    write(tmp_path / "log", n, surface=surface)
    raw = source(tmp_path / "log", name="log", domain="surface", domains=["search", "feed"])
    spec = parse_data_spec({"sources": [raw, source(tmp_path / "log", name="other", weight=0.5)]})
    assert spec.domains == ("search", "feed", "other")
    mixer = TimeMixer(spec, open_streams(spec, 0, 1)[0])
    rows = mixer.take(100)
    from_log = rows.source == 0
    ids = rows.example_id[from_log]
    assert set(rows.domain[from_log].tolist()) == {0, 1}
    assert all(rows.domain[from_log][ids % 3 == 1] == 0) and all(rows.domain[from_log][ids % 3 == 0] == 1)
    assert not (ids % 3 == 2).any()  # "shorts" is not listed: malformed, skipped and counted
    assert mixer.malformed()["log"] > 0 and set(rows.domain[~from_log].tolist()) == {2}


def test_a_time_range_keeps_only_its_examples(ads: dict[str, Any]) -> None:
    spec = parse_data_spec(ads)
    start = 1_767_225_600.0  # the ads log's day
    cut = start + 0.8 * 86_400
    holdout = StreamLoader(spec, 64, 8, 1000, time_range=(cut, float("inf")))
    train = StreamLoader(spec, 64, 8, 1000, time_range=(float("-inf"), cut))
    try:
        late = np.concatenate([holdout.next_rows().time for _ in range(5)])
        early = np.concatenate([train.next_rows().time for _ in range(5)])
    finally:
        holdout.close()
        train.close()
    assert late.min() >= cut and early.max() < cut
    assert holdout.malformed() == {"feed": 0, "search": 0, "video": 0}  # outside the range is not malformed


def test_a_hive_partition_directory_is_a_column(tmp_path: Path) -> None:
    """Spark and Hive write a partition key into the path (`surface=feed/`), not into the files."""
    n = 90
    for i, surface in enumerate(("shorts", "feed", "search")):  # in time order
        write(tmp_path / "log" / "dt=2026-01-01" / f"surface={surface}", n, start=1000 * i)
    raw = source(tmp_path / "log", name="log", domain="surface", domains=["search", "feed"])
    spec = parse_data_spec({"sources": [raw]})
    mixer = TimeMixer(spec, open_streams(spec, 0, 1)[0])
    rows = mixer.take(150)
    by_id = dict(zip(rows.example_id.tolist(), rows.domain.tolist(), strict=True))
    assert not any(i < 1000 for i in by_id)  # shorts is not listed: malformed, skipped and counted
    assert {by_id[i] for i in by_id if 1000 <= i < 2000} == {1}  # feed: the second listed domain
    assert {by_id[i] for i in by_id if i >= 2000} == {0}  # search: the first
    assert mixer.malformed()["log"] == n


@pytest.mark.parametrize("key", ["day=20260101", "dt=2026-12-01"])  # read as an integer, as a string
def test_a_partition_key_is_not_an_event_time(tmp_path: Path, key: str) -> None:
    write(tmp_path / "log" / key, 20)
    name = key.split("=")[0]
    with pytest.raises(InvalidData, match=rf"'{name}' is a partition directory \({name}=\.\.\.\).*event time"):
        open_streams(parse_data_spec({"sources": [source(tmp_path / "log", timestamp=name)]}), 0, 1)


def test_a_partition_key_the_files_also_hold_is_left_to_the_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "log" / "ad_id=7", 40)  # the files' ad_id are int64 0..99; the directory's 7 reads as int32
    spec = parse_data_spec({"sources": [source(tmp_path / "log")]})
    with caplog.at_level(logging.WARNING, logger="gem_workloads.data"):
        mixer = TimeMixer(spec, open_streams(spec, 0, 1)[0])
    assert "partition directories not read as columns" in caplog.text
    rows = mixer.take(40)
    assert len(rows.example_id) == 40 and mixer.malformed()["feed"] == 0
