"""Serving precision plans: throughput, latency and quality of each plan against fp32.

Run:  python bench/serving_precision.py [--preset small] [--device cpu] [--candidates 64,256,1024]

Plans: ``fp32`` with the right-padded sequence layout (the server before packed sequences and
precision plans: the baseline), ``fp32`` (packed), ``auto`` (the per-layer plan chosen by
:func:`gem_workloads.scoring.precision_plan.plan_precision`), ``bf16`` (every layer) and, on GPUs
of compute capability 8.9+ with torchao, ``fp8``. Each plan scores one request at a time through
the serving engine (sharing on) at each candidate count; the plans are measured interleaved,
request by request (load on a shared machine moves). Quality: holdout AUC minus fp32's and mean
absolute score change, from the planner's gate.

Targets: the auto plan within 0.001 AUC of fp32; its p99 at 256 candidates no worse than the
baseline's. Exits 1 when either fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--device", default="cpu")
    p.add_argument("--candidates", default="64,256,1024")
    p.add_argument("--reps", type=int, default=30, help="requests per plan and candidate count")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    return p.parse_args()


def main() -> int:
    ns = _args()
    import torch

    from gem_workloads.scoring.engine import Engine, preset_model
    from gem_workloads.scoring.precision import apply_plan, offered
    from gem_workloads.scoring.precision_plan import plan_precision
    from gem_workloads.scoring.request import example_request, parse_request

    if ns.threads:
        torch.set_num_threads(ns.threads)
    device = torch.device(ns.device)
    kinds, _ = offered(device)
    names = ["baseline", "fp32", "auto", "bf16", *(["fp8"] if "fp8" in kinds else [])]
    engines: dict[str, Engine] = {}
    quality: dict[str, dict[str, Any]] = {}
    for name in names:
        loaded = preset_model(ns.preset, seed=0)
        loaded.model.to(device)
        if name == "baseline":
            model: Any = loaded.model
            model.padded_sequence = True
        elif name != "fp32":
            t0 = time.perf_counter()
            plan = plan_precision(loaded, name, device)
            apply_plan(loaded.model, plan.layers)
            quality[name] = {**plan.summary(), "plan_s": time.perf_counter() - t0, "notes": plan.notes}
        engines[name] = Engine(loaded, device)

    cands = [int(c) for c in ns.candidates.split(",")]
    first = engines["fp32"].loaded
    rows: dict[tuple[str, int], list[float]] = {}
    for n in cands:
        req = parse_request(
            example_request(first.schema, n, first.config.seq_len, seed=n), first.schema, first.config.seq_len, n
        )
        for e in engines.values():
            e.score([req], True)  # warm-up
        for _ in range(ns.reps):
            for name, e in engines.items():
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                e.score([req], True)
                rows.setdefault((name, n), []).append(time.perf_counter() - t0)

    print(f"preset {ns.preset}, device {device}, {ns.reps} requests per cell, one request at a time (sharing on)")
    print(
        f"{'plan':9} {'layers':28} {'AUC delta':>10} {'score err':>10}"
        + "".join(f" {f'p50/p99 ms @{n}':>20}" for n in cands)
        + f" {'cand/s @' + str(cands[-1]):>14}"
    )
    for name in names:
        q = quality.get(name, {})
        layers = ",".join(f"{k}x{v}" for k, v in (q.get("layers") or {}).items()) or (
            "padded fp32" if name == "baseline" else "all fp32"
        )
        delta = q.get("aucDelta")
        err = q.get("meanScoreError")
        cells = ""
        for n in cands:
            lat = np.array(rows[(name, n)]) * 1e3
            cells += f" {np.percentile(lat, 50):9.2f}/{np.percentile(lat, 99):9.2f}"
        rate = cands[-1] / statistics.median(rows[(name, cands[-1])])
        shown_delta = "" if delta is None else f"{delta:+.5f}"
        shown_err = "" if err is None else f"{err:.5f}"
        print(f"{name:9} {layers:28} {shown_delta:>10} {shown_err:>10}{cells} {rate:14.0f}")
    for name, q in quality.items():
        if q["notes"]:
            print(f"  {name}: " + "; ".join(q["notes"]))
    auto_delta = quality["auto"].get("aucDelta")
    p99 = {name: float(np.percentile(rows[(name, 256)], 99)) for name in ("baseline", "auto")} if 256 in cands else {}
    ok_auc = auto_delta is not None and abs(auto_delta) <= 0.001
    ok_p99 = not p99 or p99["auto"] <= p99["baseline"]
    print(f"auto plan AUC delta {auto_delta} (target |delta| <= 0.001): {'ok' if ok_auc else 'FAIL'}")
    if p99:
        verdict = "ok" if ok_p99 else "FAIL"
        print(f"p99 @256: auto {p99['auto'] * 1e3:.2f} ms vs baseline {p99['baseline'] * 1e3:.2f} ms: {verdict}")
    return 0 if ok_auc and ok_p99 else 1


if __name__ == "__main__":
    sys.exit(main())
