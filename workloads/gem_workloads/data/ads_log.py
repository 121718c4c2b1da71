"""A generated multi-domain ads log as Parquet: three surfaces, CTR and CVR, two sequence sources.

What a platform team's logs look like, small: one impression log per surface (``feed``, ``search``,
``video``; each surface's share of the traffic drifts over the day, so a window's mix differs from
the day's), with ``clicked`` and ``converted`` (null unless clicked: CVR applies to clicks only),
and two event-sequence logs with different event features: ``purchases`` (ad id, account id) and
``posts`` (actor id, object id). Users have a hidden taste over ad clusters that drives both their
purchases and their clicks, so a model that reads the histories can beat one that does not.
Files are written in time order, several row groups each. :func:`write_ads_log` returns the data
spec block that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SURFACES = ("feed", "search", "video")
DAY_S = 86_400.0
START_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class AdsLogConfig:
    users: int = 2_000
    ads: int = 500
    clusters: int = 8
    impressions: int = 60_000
    purchases: int = 20_000
    posts: int = 20_000
    files_per_source: int = 3
    row_group_rows: int = 4_096
    seed: int = 0


def _shares(t: np.ndarray) -> np.ndarray:
    """Per-surface traffic share at day fraction ``t``: feed fades, video grows, search is steady."""
    feed = 0.6 - 0.3 * t
    video = 0.1 + 0.3 * t
    return np.stack([feed, 1.0 - feed - video, video], axis=1)


def _write(table: pa.Table, root: Path, files: int, row_group_rows: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), files)):
        pq.write_table(table.take(pa.array(part)), root / f"part-{i:03d}.parquet", row_group_size=row_group_rows)


def _times(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.sort(rng.random(n))


def write_ads_log(root: Path, cfg: AdsLogConfig | None = None, uri: str | None = None) -> dict[str, Any]:
    """Write the log under ``root`` and return its data spec block (URIs under ``uri``, default ``root``)."""
    cfg = cfg or AdsLogConfig()
    rng = np.random.default_rng([cfg.seed, 4242])
    taste = rng.dirichlet(np.full(cfg.clusters, 0.3), size=cfg.users)
    ad_cluster = rng.integers(0, cfg.clusters, cfg.ads)
    ad_account = rng.integers(0, max(cfg.ads // 5, 1), cfg.ads)
    cdf = np.cumsum(taste, axis=1)

    def ads_for(users: np.ndarray) -> np.ndarray:
        cluster = (cdf[users] < rng.random(len(users))[:, None]).sum(1).clip(max=cfg.clusters - 1)
        pool = [np.flatnonzero(ad_cluster == k) for k in range(cfg.clusters)]
        return np.array([rng.choice(pool[k]) if len(pool[k]) else 0 for k in cluster], dtype=np.int64)

    def ts(frac: np.ndarray) -> pa.Array:
        micros = np.round((START_S + frac * DAY_S) * 1e6).astype(np.int64)
        return pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))

    base = uri or str(root)
    spec: dict[str, Any] = {"sources": [], "sequences": []}

    p_users = rng.integers(0, cfg.users, cfg.purchases)
    p_ads = ads_for(p_users)
    purchases = pa.table(
        {"ts": ts(_times(rng, cfg.purchases)), "user_id": p_users, "ad_id": p_ads, "account_id": ad_account[p_ads]}
    )
    _write(purchases, root / "purchases", cfg.files_per_source, cfg.row_group_rows)
    s_users = rng.integers(0, cfg.users, cfg.posts)
    posts = pa.table(
        {
            "ts": ts(_times(rng, cfg.posts)),
            "user_id": s_users,
            "actor_id": rng.integers(0, cfg.users, cfg.posts),
            "object_id": ads_for(s_users),
        }
    )
    _write(posts, root / "posts", cfg.files_per_source, cfg.row_group_rows)
    spec["sequences"] = [
        {
            "name": "purchases",
            "uri": f"{base}/purchases",
            "timestamp": "ts",
            "user": "user_id",
            "features": ["ad_id", "account_id"],
        },
        {
            "name": "posts",
            "uri": f"{base}/posts",
            "timestamp": "ts",
            "user": "user_id",
            "features": ["actor_id", "object_id"],
        },
    ]

    frac = _times(rng, cfg.impressions)
    surface = (np.cumsum(_shares(frac), axis=1) < rng.random(cfg.impressions)[:, None]).sum(1).clip(max=2)
    users = rng.integers(0, cfg.users, cfg.impressions)
    ads = np.where(rng.random(cfg.impressions) < 0.5, ads_for(users), rng.integers(0, cfg.ads, cfg.impressions))
    affinity = taste[users, ad_cluster[ads]] * cfg.clusters
    bias = np.array([0.0, 0.6, -0.6])[surface]
    clicked = rng.random(cfg.impressions) < 1 / (1 + np.exp(-(2.5 * (np.log1p(affinity) - 0.9) + bias)))
    converted = clicked & (rng.random(cfg.impressions) < 1 / (1 + np.exp(-(affinity - 2.0))))
    event_id = np.arange(cfg.impressions, dtype=np.int64)
    for k, name in enumerate(SURFACES):
        rows = np.flatnonzero(surface == k)
        table = pa.table(
            {
                "event_id": event_id[rows],
                "ts": ts(frac[rows]),
                "user_id": users[rows],
                "ad_id": ads[rows],
                "account_id": ad_account[ads[rows]],
                "bid": rng.gamma(2.0, 0.5, len(rows)).astype(np.float32),
                "clicked": clicked[rows],
                "converted": pa.array(np.where(clicked[rows], converted[rows], False), mask=~clicked[rows]),
            }
        )
        _write(table, root / name, cfg.files_per_source, cfg.row_group_rows)
        spec["sources"].append(
            {
                "name": name,
                "uri": f"{base}/{name}",
                "timestamp": "ts",
                "user": "user_id",
                "id": "event_id",
                "sparse": ["ad_id", "account_id"],
                "dense": ["bid"],
                "labels": {"ctr": "clicked", "cvr": "converted"},
                "weight": 1.0,
            }
        )
    return spec


def surface_shares(frac: np.ndarray) -> np.ndarray:
    """The generator's own traffic shares at day fractions ``frac`` (for benchmarks)."""
    return _shares(frac)


__all__ = ["SURFACES", "AdsLogConfig", "surface_shares", "write_ads_log"]
