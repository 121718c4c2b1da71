"""Training logs for the end-to-end run, as Parquet on an object store, each split by time.

Two datasets a platform team would train one model on: MovieLens-100k (ratings, labels ``like``
and ``love``, the user's earlier ratings as an event source) re-timed onto the day of a generated
multi-domain ads log (three surfaces with ``ctr`` and ``cvr``, purchases and posts as event sources
with their own features; :mod:`gem_workloads.data.ads_log`). Re-timing keeps MovieLens' order and
lets the two streams interleave, as logs of one day do. Every example source is cut at the same
instant: what comes before is the training data, what comes after is the later data its exports are
scored on (``export.holdoutSources``). Event sources are whole (a history never reads an event at or
after its example's time).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from gem_workloads.data.ads_log import DAY_S, START_S, AdsLogConfig, write_ads_log
from gem_workloads.data.movielens import MovieLens

MOVIELENS_USER_OFFSET = 100_000
"""MovieLens users are other people than the ads log's: their ids are moved out of its range."""


@dataclass(frozen=True)
class Logs:
    """The data spec block that trains on the logs, and each source's later data (its holdout)."""

    data: dict[str, Any]
    holdout_sources: dict[str, str]


def _timestamps(fraction: np.ndarray) -> pa.Array:
    micros = np.round((START_S + fraction * DAY_S) * 1e6).astype(np.int64)
    return pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def _movielens(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """MovieLens' ratings as an example source and as an event source (times re-scaled onto the day)."""
    ml = MovieLens(seq_len=1)
    order = np.argsort(ml.ev_time, kind="stable")
    t = ml.ev_time[order]
    fraction = (t - t[0]) / max(t[-1] - t[0], 1.0) * 0.999
    users = ml.ev_user[order] + MOVIELENS_USER_OFFSET
    rating = ml.ev_rating[order]
    ratings = pa.table(
        {
            "ts": _timestamps(fraction),
            "user_id": users,
            "movie_id": ml.ev_item[order],
            "rating": rating,
            "liked": rating >= 4,
            "loved": rating == 5,
        }
    )
    (root / "movielens").mkdir(parents=True, exist_ok=True)
    pq.write_table(ratings, root / "movielens" / "part-000.parquet", row_group_size=8192)
    source = {
        "name": "movielens",
        "uri": str(root / "movielens"),
        "timestamp": "ts",
        "user": "user_id",
        "sparse": ["movie_id"],
        "labels": {"like": "liked", "love": "loved"},
    }
    sequence = {
        "name": "ratings",
        "uri": str(root / "movielens"),
        "timestamp": "ts",
        "user": "user_id",
        "features": ["movie_id", "rating"],
    }
    return source, sequence


def _split(directory: Path, cut: pa.Scalar, train: Path, later: Path) -> None:
    table = ds.dataset(directory, format="parquet").to_table()
    before = pc.less(table["ts"], cut)
    for target, rows in ((train, table.filter(before)), (later, table.filter(pc.invert(before)))):
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target / "part-000.parquet", row_group_size=4096)


def write_logs(root: Path, uri: str, ads: AdsLogConfig | None = None, cut_fraction: float = 0.8) -> Logs:
    """Write the logs under ``root`` as ``uri`` will name them once ``root`` is copied there.

    Layout: ``events/<sequence>/``, ``train/<source>/``, ``later/<source>/``.
    """
    work = root / "generated"
    spec = write_ads_log(work, ads or AdsLogConfig(impressions=20_000, purchases=6_000, posts=6_000))
    ml_source, ml_sequence = _movielens(work)
    cut = pa.scalar(int((START_S + cut_fraction * DAY_S) * 1e6), pa.timestamp("us", tz="UTC"))
    sources, later = [], {}
    for source in [*spec["sources"], ml_source]:
        name = source["name"]
        _split(Path(source["uri"]), cut, root / "train" / name, root / "later" / name)
        sources.append({**source, "uri": f"{uri}/train/{name}"})
        later[name] = f"{uri}/later/{name}"
    sequences = []
    for sequence in [*spec["sequences"], ml_sequence]:
        shutil.copytree(sequence["uri"], root / "events" / sequence["name"])
        sequences.append({**sequence, "uri": f"{uri}/events/{sequence['name']}"})
    shutil.rmtree(work)
    return Logs({"sources": sources, "sequences": sequences}, later)


def upload(root: Path, bucket: str, prefix: str, client: Any) -> int:
    """Copy every file under ``root`` to ``s3://bucket/prefix/...`` with a boto3 client; returns the count."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return len(files)


__all__ = ["MOVIELENS_USER_OFFSET", "Logs", "upload", "write_logs"]
