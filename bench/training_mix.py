"""Virtual mixing in stream order: each domain's share per time window, against the stream's own.

Data: the generated ads log (``gem_workloads.data.ads_log``), whose three surfaces' shares drift
over the day (feed 60 % -> 30 %, video 10 % -> 40 %). The loader's mixer (``TimeMixer``: sources
interleaved by event time, never copied) runs as each data-parallel shard would; the batches a
shard trains on are cut into windows of consecutive steps, and each window's domain shares are
compared with the shares of *all* rows of the logs over the same event-time span (the stream's
own). With weights, the stream's shares are reweighted (a source of weight w keeps w / max(w) of
its rows) before the comparison. Baseline, measured the same way: a fixed-proportion mixer (each
batch's domain counts drawn from the day's overall proportions, as ``MixingLoader`` does), which
ignores the stream's order.

Target: the mixer's largest deviation over windows and domains <= 5 points.

    python bench/training_mix.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as pads

from gem_workloads.data.ads_log import SURFACES, AdsLogConfig, write_ads_log
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.data.stream_loader import open_streams
from gem_workloads.data.stream_mix import TimeMixer


def stream_rows(spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(time in seconds, domain index) of every row of every source: the stream's own mix."""
    times, domains = [], []
    for k, src in enumerate(spec["sources"]):
        ts = pads.dataset(src["uri"], format="parquet").to_table(columns=[src["timestamp"]]).column(0)
        times.append(ts.cast("int64").to_numpy() / 1e6)
        domains.append(np.full(len(times[-1]), k))
    return np.concatenate(times), np.concatenate(domains)


def window_deviation(
    out_time: np.ndarray,
    out_domain: np.ndarray,
    all_time: np.ndarray,
    all_domain: np.ndarray,
    weights: np.ndarray,
    rows_per_window: int,
) -> tuple[float, list[list[float]]]:
    """Largest |share - stream's share| in points over windows of consecutive output rows; and the shares."""
    worst, table = 0.0, []
    for start in range(0, len(out_time) - rows_per_window + 1, rows_per_window):
        t = out_time[start : start + rows_per_window]
        d = out_domain[start : start + rows_per_window]
        got = np.bincount(d, minlength=3) / len(d)
        span = (all_time >= t.min()) & (all_time <= t.max())
        expected = np.bincount(all_domain[span], minlength=3) * weights
        expected = expected / expected.sum()
        worst = max(worst, float(np.abs(got - expected).max() * 100))
        table.append([round(float(x) * 100, 1) for x in (*got, *expected)])
    return worst, table


def run(spec: dict[str, Any], weights: dict[str, float], shards: int, batch: int) -> dict[str, Any]:
    raw = json.loads(json.dumps(spec))
    for src in raw["sources"]:
        src["weight"] = weights.get(src["name"], 1.0)
    parsed = parse_data_spec(raw)
    w = np.array([s.weight for s in parsed.sources])
    all_time, all_domain = stream_rows(raw)
    result: dict[str, Any] = {"weights": weights, "shards": {}}
    # rows a shard draws: a little under one pass over its share of the kept rows
    per_shard = int(len(all_time) * (w / w.max()).mean() / shards * 0.95)
    for shard in range(shards):
        mixer = TimeMixer(parsed, open_streams(parsed, shard, shards)[0])
        rows = [mixer.take(batch) for _ in range(per_shard // batch)]
        t = np.concatenate([r.time for r in rows])
        d = np.concatenate([r.domain for r in rows])
        worst, table = window_deviation(t, d, all_time, all_domain, w / w.max(), batch * 20)
        result["shards"][shard] = {
            "max_deviation_points": round(worst, 2),
            "windows": len(table),
            "first": table[0],
            "last": table[-1],
        }
    # the baseline: every batch drawn with the day's overall proportions, whatever the time
    overall = np.bincount(all_domain, minlength=3) * (w / w.max())
    overall = overall / overall.sum()
    rng = np.random.default_rng(0)
    order = np.sort(all_time)
    n = per_shard // batch * batch
    base_time = order[np.linspace(0, len(order) - 1, n).astype(int)]  # the same event-time progress
    base_domain = np.concatenate([np.repeat(np.arange(3), rng.multinomial(batch, overall)) for _ in range(n // batch)])
    result["fixed_proportions_max_deviation_points"] = round(
        window_deviation(base_time, base_domain, all_time, all_domain, w / w.max(), batch * 20)[0], 2
    )
    result["mixer_max_deviation_points"] = max(s["max_deviation_points"] for s in result["shards"].values())
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impressions", type=int, default=200_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--shards", type=int, default=2)
    ns = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="gem-bench-mix-"))
    spec = write_ads_log(root, AdsLogConfig(impressions=ns.impressions, purchases=1_000, posts=1_000))
    out = {
        "domains": list(SURFACES),
        "window_rows": ns.batch_size * 20,
        "equal_weights": run(spec, {}, ns.shards, ns.batch_size),
        "search_at_half_weight": run(spec, {"search": 0.5}, ns.shards, ns.batch_size),
    }
    out["target_within_5_points"] = all(
        out[k]["mixer_max_deviation_points"] <= 5 for k in ("equal_weights", "search_at_half_weight")
    )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
