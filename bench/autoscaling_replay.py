"""Benchmark: the SM-active autoscaling policy against static peak provisioning and HPA on RPS.

Run:  python bench/autoscaling_replay.py [--plot bench/autoscaling_replay.png] [--json]

Scenarios (all replayed by `gem_operator.autoscaling.replay.simulate` on simulated time, with
the service model's defaults: 200 cost units/s per replica, replicas Ready 120 s after
creation = 30 s pod start + 90 s model load, GPUs held from creation):

- `shared-trace`: data/traces/azure-llm-2023-code.csv (1 h of real, very bursty
  arrivals), each request weighted by its ContextTokens (normalised to mean 1), scaled so
  that static peak provisioning needs >= 20 replicas.
- `diurnal`: 24 h synthetic day, request rate 1,000-3,000/s (sinusoid, trough 04:00, peak
  16:00) with slow random noise, and a request mix whose mean cost drifts +-15 % over the day
  (heavier requests in the evening) -- the effect an RPS signal cannot see.
- `diurnal+flash`: the same day with a flash crowd: 3x load for 2 minutes at 11:00.
- `sensitivity: mix+-35%` (not one of the issue's scenarios, no verdicts): the diurnal day with
  a larger request-mix drift (+-35 %), to show where a request-count signal and a work signal
  part ways.

Targets (issue 4): >= 25 % fewer GPU-hours than static peak; SLO-violation minutes <= 1 % of
the run without a flash crowd and <= 3 % with one; fewer SLO-violation minutes than the RPS
baseline at equal or lower GPU-hours; <= 4 direction changes per hour.
The RankingService under test: SLO p99 40 ms, targetSmActive 0.6, HPA-default tolerance,
windows and rate policies, 2..64 replicas.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.replay import (
    HPA_RPS,
    POLICY,
    STATIC_PEAK,
    LoadSeries,
    ReplayReport,
    load_trace,
    plot_report,
    simulate,
    to_series,
)
from gem_operator.autoscaling.service_model import ServiceModel

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
MIN_STATIC_REPLICAS = 20

SERVICE = {
    "gpusPerReplica": 1,
    "model": {"uri": "s3://gem-models/ranker/v42"},
    "slo": {"p99LatencyMs": 40},
    "autoscaling": {"minReplicas": 2, "maxReplicas": 64, "targetSmActive": 0.6},
}


def diurnal(flash: bool, seed: int = 7, mix: float = 0.15) -> LoadSeries:
    """24 h of per-second load: requests/s and cost units/s."""
    day = 86_400
    t = np.arange(day, dtype=float)
    rng = np.random.default_rng(seed)
    # Trough at 04:00, peak at 16:00; 1,000..3,000 requests/s.
    rate = 2000.0 - 1000.0 * np.cos(2 * np.pi * (t - 4 * 3600) / day)
    # Slow noise: a random walk smoothed over ~10 minutes, +-5 %.
    walk = np.cumsum(rng.normal(0.0, 1.0, day))
    walk = np.convolve(walk - walk.mean(), np.ones(600) / 600, mode="same")
    walk = walk / (np.abs(walk).max() or 1.0) * 0.05
    rate = rate * (1 + walk)
    if flash:
        start = 11 * 3600
        rate[start : start + 120] *= 3.0
    # Request mix: mean cost per request peaks at 21:00 (+mix), lowest at 09:00 (-mix).
    mean_cost = 1.0 - mix * np.cos(2 * np.pi * (t - 9 * 3600) / day)
    cost = rate * mean_cost
    name = ("diurnal+flash" if flash else "diurnal") + ("" if mix == 0.15 else f" mix+-{mix:.0%}")
    return LoadSeries(cost=cost, requests=rate, name=name)


def shared_trace(model: ServiceModel, spec: RankingServiceSpec) -> tuple[LoadSeries, float]:
    arrivals = load_trace(SHARED_TRACE, cost_column="ContextTokens")
    unit = to_series(arrivals, scale=1.0)
    target_util = model.utilisation_for_sm(spec.autoscaling.target_sm_active)
    per_replica = target_util * model.throughput_per_replica
    scale = math.ceil(MIN_STATIC_REPLICAS * per_replica / float(unit.cost.max()))
    return to_series(arrivals, scale=scale), float(scale)


def verdicts(report: ReplayReport, flash: bool) -> list[tuple[str, str, bool]]:
    pol, static, rps = (report.results[k] for k in (POLICY, STATIC_PEAK, HPA_RPS))
    saving = 1 - pol.gpu_hours / static.gpu_hours
    viol_pct = 100 * pol.slo_violation_minutes / report.minutes
    limit = 3.0 if flash else 1.0
    return [
        ("GPU-hours vs static peak", f"{-saving * 100:+.1f}% (target <= -25%)", saving >= 0.25),
        (
            "SLO-violation minutes",
            f"{viol_pct:.2f}% of {report.minutes} min (target <= {limit:g}%)",
            viol_pct <= limit,
        ),
        (
            "vs RPS baseline",
            f"{pol.slo_violation_minutes} vs {rps.slo_violation_minutes} violation min at "
            f"{pol.gpu_hours:.1f} vs {rps.gpu_hours:.1f} GPU-h",
            (pol.slo_violation_minutes < rps.slo_violation_minutes and pol.gpu_hours <= rps.gpu_hours * 1.0001)
            or (pol.slo_violation_minutes == rps.slo_violation_minutes == 0 and pol.gpu_hours <= rps.gpu_hours),
        ),
        (
            "direction changes/hour",
            f"{pol.direction_changes_per_hour:.2f} (target <= 4)",
            pol.direction_changes_per_hour <= 4,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--plot", default=str(ROOT / "bench" / "autoscaling_replay.png"), help="PNG of the diurnal+flash run"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--quick", action="store_true", help="only the issue's three scenarios")
    args = ap.parse_args(argv)

    model = ServiceModel()
    spec = RankingServiceSpec.model_validate(SERVICE)
    scenarios: list[tuple[str, LoadSeries, float, bool]] = []
    series, scale = shared_trace(model, spec)
    scenarios.append(("shared-trace", series, scale, False))
    scenarios.append(("diurnal", diurnal(flash=False), 1.0, False))
    scenarios.append(("diurnal+flash", diurnal(flash=True), 1.0, True))
    if not args.quick:
        scenarios.append(("sensitivity: mix+-35%", diurnal(flash=False, mix=0.35), 1.0, False))

    out: dict[str, Any] = {"service_model": model.describe(), "scenarios": {}}
    all_pass = True
    plotted: ReplayReport | None = None
    for name, load, scale, flash in scenarios:
        t0 = time.perf_counter()
        report = simulate(load, spec, model, service="bench-ranker", trace=name, scale=scale)
        elapsed = time.perf_counter() - t0
        sensitivity = name.startswith("sensitivity")
        checks = [] if sensitivity else verdicts(report, flash)
        all_pass &= all(ok for _, _, ok in checks)
        out["scenarios"][name] = {
            **report.to_dict(timeline=False),
            "checks": {k: {"value": v, "pass": ok} for k, v, ok in checks},
            "sim_seconds": round(elapsed, 2),
        }
        if flash:
            plotted = report
        if not args.json:
            print(f"\n=== {name} (scale x{scale:g}, simulated in {elapsed:.1f}s) ===")
            print(report.to_table())
            for k, v, ok in checks:
                print(f"  [{'PASS' if ok else 'FAIL'}] {k}: {v}")
    if plotted is not None and args.plot:
        plot_report(
            plotted,
            args.plot,
            title="diurnal day with a 3x flash crowd at 11:00 (2 min); bottom: zoom on the flash",
            zoom=(11 * 60 - 10, 11 * 60 + 30),
        )
        out["plot"] = args.plot
        if not args.json:
            print(f"\nplot: {args.plot}")
    if args.json:
        print(json.dumps(out, indent=2))
    return 0 if all_pass else 1


if __name__ == "__main__":
    sys.exit(main())
