"""p99 latency of the ranking model for 512 candidates on one GPU (written for one H200; not run on CPU).

Run:  python bench/serving_gpu_p99.py [--preset base] [--candidates 512] [--seq-len 1024] [--requests 300]

Three measurements, each after a warm-up, with ``torch.cuda.synchronize()`` around every request:

- ``shared``: one request at a time, the user sequence encoded once and broadcast to the
  candidates (what the server does), fp32 and bf16 autocast;
- ``batched8``: eight requests per model call (the server's dynamic batching), latency per call;
- ``per_candidate``: the baseline that encodes the sequence per candidate (fewer requests).

With ``--write-device-profile FILE`` it also times one-request batches (bf16) on a grid of
sequence lengths x candidates, and two-request batches for the cost of each further request, and
writes them as a device profile for the emulated accelerator (``--device emulated:NAME
--device-profile FILE``, format in gem_workloads/serving/device.py), median of 20 calls each.

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
    ap.add_argument("--write-device-profile", help="also write a measured device profile (JSON) here")
    ap.add_argument("--profile-seq-lens", default="64,256,1024,4096")
    ap.add_argument("--profile-candidates", default="64,256,1024,4096")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device: this benchmark only runs on a GPU"}))
        return 2
    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request

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
    if args.write_device_profile:
        out["device_profile"] = write_device_profile(args, torch, device)
    print(json.dumps(out, indent=1))
    return 0


def write_device_profile(args: argparse.Namespace, torch: Any, device: Any) -> str:
    """Median seconds per batch on the grid (see the module docstring); returns the file written."""
    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.request import example_request, parse_request
    from gem_workloads.serving.device import DeviceProfile

    lens = [int(x) for x in args.profile_seq_lens.split(",")]
    cands = [int(x) for x in args.profile_candidates.split(",")]

    def median_seconds(engine: Any, reqs: list[Any]) -> float:
        times = []
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for i in range(25):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                engine.score(reqs, True)
                torch.cuda.synchronize()
                if i >= 5:
                    times.append(time.perf_counter() - t0)
        return float(np.median(times))

    table, extra = [], []
    for seq in lens:
        loaded = preset_model(args.preset, kind=args.kind, seq_len=seq)
        loaded.model.to(device)
        engine = Engine(loaded, device)
        row = []
        for n in cands:
            body = example_request(loaded.schema, n, seq, seed=0)
            row.append(median_seconds(engine, [parse_request(body, loaded.schema, seq, n)]))
        table.append(row)
        small = [parse_request(example_request(loaded.schema, cands[0], seq, seed=s), loaded.schema, seq, cands[0])
                 for s in range(2)]  # fmt: skip
        extra.append(max(0.0, median_seconds(engine, small) - row[0]))
    raw = {
        "device": torch.cuda.get_device_name(0).lower().replace(" ", "-"),
        "description": f"measured by bench/serving_gpu_p99.py: preset {args.preset}, {args.kind}, bf16, median of 20",
        "seq_len": lens,
        "candidates": cands,
        "seconds": table,
        "per_extra_request_seconds": extra,
    }
    DeviceProfile.from_mapping(raw)  # the same checks the server applies
    with open(args.write_device_profile, "w") as f:
        json.dump(raw, f, indent=1)
    return str(args.write_device_profile)


if __name__ == "__main__":
    sys.exit(main())
