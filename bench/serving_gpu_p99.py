"""p99 latency of the ranking model for 512 candidates on one GPU (written for one H200; not run on CPU).

Run:  python bench/serving_gpu_p99.py [--preset base] [--candidates 512] [--seq-len 1024] [--requests 300]

Three measurements, each after a warm-up, with ``torch.cuda.synchronize()`` around every request:

- ``shared``: one request at a time, the user sequence encoded once and broadcast to the
  candidates (what the server does), fp32 and bf16 autocast;
- ``batched8``: eight requests per model call (the server's dynamic batching), latency per call;
- ``per_candidate``: the baseline that encodes the sequence per candidate (fewer requests).

Prints one JSON object (p50/p99 ms, requests/s, peak memory). It includes request collation on
the host, as in the server, but not HTTP/JSON. Exits 2 without a GPU: no numbers are made up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext
from typing import Any

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="base")
    ap.add_argument("--kind", default="kunlun")
    ap.add_argument("--candidates", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--baseline-requests", type=int, default=10)
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device: this benchmark only runs on a GPU"}))
        return 2
    from gem_workloads.serving.engine import Engine, preset_model
    from gem_workloads.serving.request import example_request, parse_request

    device = torch.device("cuda")
    loaded = preset_model(args.preset, kind=args.kind, seq_len=args.seq_len)
    loaded.model.to(device)
    engine = Engine(loaded, device)
    bodies = [example_request(loaded.schema, args.candidates, args.seq_len, seed=i) for i in range(8)]
    reqs = [parse_request(b, loaded.schema, args.seq_len, args.candidates) for b in bodies]

    def measure(n: int, batch: int, share: bool, bf16: bool) -> dict[str, Any]:
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else nullcontext()
        lat = []
        with ctx:
            for i in range(n + 5):
                group = [reqs[(i + j) % len(reqs)] for j in range(batch)]
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                engine.score(group, share)
                torch.cuda.synchronize()
                if i >= 5:  # warm-up
                    lat.append((time.perf_counter() - t0) * 1000)
        a = np.asarray(lat)
        return {
            "calls": n,
            "requests_per_call": batch,
            "p50_ms": round(float(np.percentile(a, 50)), 3),
            "p99_ms": round(float(np.percentile(a, 99)), 3),
            "requests_per_s": round(batch * 1000 / float(a.mean()), 1),
        }

    torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "preset": args.preset,
        "kind": args.kind,
        "candidates": args.candidates,
        "seq_len": args.seq_len,
        "shared_fp32": measure(args.requests, 1, True, False),
        "shared_bf16": measure(args.requests, 1, True, True),
        "batched8_bf16": measure(max(args.requests // 8, 20), 8, True, True),
        "per_candidate_bf16": measure(args.baseline_requests, 1, False, True),
    }
    out["sharing_speedup_bf16"] = round(
        out["shared_bf16"]["requests_per_s"] / out["per_candidate_bf16"]["requests_per_s"], 1
    )
    out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
