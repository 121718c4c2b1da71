"""Solaris precompute coverage on a replayed trace: share of ranker lookups served exactly / by fallback / missed.

Run:  python bench/precompute_coverage.py [--workers 0,1,2] [--rate 20] [--seconds 20] [--preset small]

A real redis-server (started here on a loopback port), the real worker code (threads in this
process, one consumer each) and the ranker's real read path. Requests arrive at the Azure
trace's times, compressed to ``--rate`` requests/s. A user population with Zipf popularity
revisits; each user prefers a few ad groups, and a request's candidates come mostly from those
groups. For each request the "ranker" first looks up every candidate (exact -> user/ad-group
aggregate -> similar user -> none), then publishes the candidate set, as the server does
with ``--embedding-store`` and ``--publish-url``. Worker count 0 is the no-precompute baseline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Population:
    def __init__(self, schema: Any, seq_len: int, users: int, groups: int, ads_per_group: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.schema, self.seq_len = schema, seq_len
        self.users, self.groups, self.ads_per_group = users, groups, ads_per_group
        weights = 1.0 / np.arange(1, users + 1) ** 1.1
        self.popularity = weights / weights.sum()
        self.prefs = [self.rng.choice(groups, 3, replace=False) for _ in range(users)]

    def request(self, n: int) -> dict[str, Any]:
        from gem_workloads.scoring.request import example_request

        rng = self.rng
        u = int(rng.choice(self.users, p=self.popularity))
        body = example_request(self.schema, n, self.seq_len, seed=int(rng.integers(1 << 30)), user_id=u)
        pref = self.prefs[u]
        # The history reflects the preferred groups, so users with the same taste look alike.
        seq_groups = rng.choice(pref, self.seq_len)
        body["user"]["sequence"]["seq_cluster"] = seq_groups.tolist()
        body["user"]["features"]["user_segment"] = int(min(pref))
        for cand in body["candidates"]:
            g = int(rng.choice(pref)) if rng.random() < 0.75 else int(rng.integers(self.groups))
            cand["item_cluster"] = g
            cand["item_id"] = g * 1000 + int(rng.integers(self.ads_per_group))
        return body


def run(args: argparse.Namespace, workers: int, redis_url: str, loaded: Any, arrivals: np.ndarray) -> dict[str, Any]:
    import redis

    from gem_workloads.exchange.messages import CandidateSet
    from gem_workloads.exchange.store import EmbeddingReader, Keys
    from gem_workloads.precompute.service import backlog
    from gem_workloads.precompute.worker import PrecomputeWorker, WorkerConfig
    from gem_workloads.scoring.engine import Engine

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    stream, group, prefix = "bench:cands", "solaris", "bench"
    reader = EmbeddingReader(client, Keys(prefix, loaded.version), ["exact", "userAdGroupAggregate", "similarUser"])
    stop = threading.Event()
    written = [0] * workers

    def work(i: int) -> None:
        cfg = WorkerConfig(
            stream=stream, group=group, consumer=f"w{i}", key_prefix=prefix, ttl_seconds=600, read_count=8,
            batch_size=256, max_pairs_per_set=args.candidates,
        )  # fmt: skip
        w = PrecomputeWorker(cfg, redis.Redis.from_url(redis_url), Engine(loaded))
        while not stop.is_set():
            written[i] += w.step(block_ms=100).pairs_written

    from gem_workloads.precompute.worker import ensure_group

    ensure_group(client, stream, group)
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    pop = Population(loaded.schema, args.seq_len, args.users, args.groups, args.ads_per_group, seed=1)
    bodies = [pop.request(args.candidates) for _ in range(len(arrivals))]
    start = time.monotonic()
    lag = []
    for t_arrival, body in zip(arrivals, bodies, strict=True):
        delay = start + t_arrival - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        lag.append(max(0.0, -delay))
        user = body["user"]["features"]["user_id"]
        reader.lookup(user, [(c["item_id"], c["item_cluster"]) for c in body["candidates"]])
        client.xadd(stream, CandidateSet(body, None, time.time()).fields())
    elapsed = time.monotonic() - start
    n_backlog, oldest = backlog(client, stream, group)
    stop.set()
    for t in threads:
        t.join(10)
    counts = dict(reader.counts)
    total = sum(counts.values())
    return {
        "workers": workers,
        "requests": len(arrivals),
        "rate_rps": round(len(arrivals) / elapsed, 2),
        "driver_late_p99_ms": round(float(np.percentile(lag, 99)) * 1000, 1),
        "lookups": total,
        "coverage": {k: round(v / total, 4) for k, v in counts.items()},
        "served_exact": round(counts["exact"] / total, 4),
        "served_fallback": round((counts["userAdGroupAggregate"] + counts["similarUser"]) / total, 4),
        "missed": round(counts["none"] / total, 4),
        "pairs_written": sum(written),
        "backlog_at_end": n_backlog,
        "oldest_item_age_s_at_end": round(oldest, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--rate", type=float, default=20.0, help="requests/s after compressing the trace")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--candidates", type=int, default=32)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--ads-per-group", type=int, default=40)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        print("redis-server not found (apt-get install redis-server)", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "workloads"))
    from gem_workloads.replay.trace import load_trace
    from gem_workloads.scoring.engine import preset_model

    trace = load_trace(TRACE)
    n = int(args.rate * args.seconds)
    times = np.asarray(trace.times[:n])
    arrivals = times * (args.seconds / times[-1])  # the trace's first n arrivals, squeezed into --seconds
    loaded = preset_model(args.preset, seq_len=args.seq_len)
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)
            results = []
            for w in [int(x) for x in args.workers.split(",")]:
                r = run(args, w, f"redis://127.0.0.1:{port}/0", loaded, arrivals)
                results.append(r)
                print(json.dumps(r), flush=True)
        finally:
            proc.terminate()
            proc.wait(5)
    print(f"\n{'workers':>7} {'exact':>7} {'fallback':>9} {'missed':>7} {'backlog':>8} {'oldest s':>9}")
    for r in results:
        print(
            f"{r['workers']:>7} {r['served_exact']:>7.1%} {r['served_fallback']:>9.1%} {r['missed']:>7.1%} "
            f"{r['backlog_at_end']:>8} {r['oldest_item_age_s_at_end']:>9.1f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
