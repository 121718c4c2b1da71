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
- `sensitivity: shared-trace, HPA default 300 s down window` (no verdicts): the shared trace
  with the scale-down window HPA uses by default, to show what the longer window buys.

Targets (issue 4): >= 25 % fewer GPU-hours than static peak; SLO-violation minutes <= 1 % of
the run without a flash crowd and <= 3 % with one; fewer SLO-violation minutes than the RPS
baseline at equal or lower GPU-hours; <= 4 direction changes per hour. Each is printed as the
ratio it is judged on with PASS/FAIL. When the policy spends more GPU-hours than the RPS
baseline, the RPS baseline is re-run with a lower utilisation target until it spends at least
as many, and the violation minutes are compared at that budget (equal GPU-hours). Both zero
counts as a pass (no policy can have fewer than zero).

Feasibility: for each scenario a "reactive oracle" (exact per-second load, orders at every
15 s sync with no tolerance or rate limit, holds the peak of the scale-down window, replicas still
take the model's 120 s to serve) is run with headroom x1..x4. Its violation minutes at x1 are
what no signal could remove; the headroom it needs to meet the SLO target, and the GPU-hours
that costs against static peak, show whether a target is reachable without clairvoyance.
The RankingService under test: SLO p99 40 ms, targetSmActive 0.6, HPA-default tolerance and
rate policies, 0 s up / 900 s down stabilisation (see SERVICE), 2..64 replicas.
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
    PoolResult,
    ReplayReport,
    Window,
    load_trace,
    plot_report,
    run_pool,
    simulate,
    to_series,
)
from gem_operator.autoscaling.service_model import Pool, ServiceModel

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
MIN_STATIC_REPLICAS = 20

SERVICE: dict[str, Any] = {
    "gpusPerReplica": 1,
    "model": {"uri": "s3://gem-models/ranker/v42"},
    "slo": {"p99LatencyMs": 40},
    # Scale-down window 15 min, not HPA's 5: a replica takes 2 min to serve and holds its GPU from
    # creation, so giving one back for a lull shorter than the next burst costs a start-up and SLO
    # minutes. Both autoscaled pools use it; the "HPA default windows" sensitivity row shows 300 s.
    "autoscaling": {
        "minReplicas": 2,
        "maxReplicas": 64,
        "targetSmActive": 0.6,
        "stabilizationSeconds": {"up": 0, "down": 900},
    },
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


def rps_at_equal_gpu_hours(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, gpu_hours: float
) -> tuple[float, PoolResult]:
    """The RPS baseline re-run with a lower target utilisation until it holds >= `gpu_hours`.

    Used when the policy spent more GPU-hours than the RPS baseline at its default calibration:
    "fewer violation minutes at equal GPU-hours" then compares against RPS given the same budget.
    Bisection on the utilisation target (12 steps); returns (utilisation, result).
    """
    hi = model.utilisation_for_sm(spec.autoscaling.target_sm_active)
    lo = 0.05
    best: tuple[float, PoolResult] | None = None
    for _ in range(12):
        mid = (lo + hi) / 2
        r = simulate(load, spec, model, rps_utilisation=mid).results[HPA_RPS]
        if r.gpu_hours >= gpu_hours:
            best, lo = (mid, r), mid
        else:
            hi = mid
    if best is None:
        r = simulate(load, spec, model, rps_utilisation=lo).results[HPA_RPS]
        best = (lo, r)
    return best


def verdicts(
    report: ReplayReport, flash: bool, rps_iso: tuple[float, PoolResult] | None = None
) -> list[tuple[str, str, bool]]:
    """PASS/FAIL per issue-4 target, with the ratio each one is judged on."""
    pol, static, rps = (report.results[k] for k in (POLICY, STATIC_PEAK, HPA_RPS))
    saving = 1 - pol.gpu_hours / static.gpu_hours
    viol_pct = 100 * pol.slo_violation_minutes / report.minutes
    limit = 3.0 if flash else 1.0
    if pol.gpu_hours <= rps.gpu_hours:
        ref, ref_note = rps, "RPS at its default calibration"
    else:
        assert rps_iso is not None, "policy above RPS GPU-hours: pass rps_at_equal_gpu_hours()"
        ref = rps_iso[1]
        ref_note = f"RPS re-run at utilisation {rps_iso[0]:.2f} to spend >= the policy's GPU-hours"
    fewer = pol.slo_violation_minutes < ref.slo_violation_minutes or (
        pol.slo_violation_minutes == ref.slo_violation_minutes == 0
    )
    return [
        (
            "GPU-hours vs static peak",
            f"{pol.gpu_hours:.2f}/{static.gpu_hours:.2f} = {pol.gpu_hours / static.gpu_hours:.3f} "
            f"({-saving * 100:+.1f}%, target <= -25%)",
            saving >= 0.25,
        ),
        (
            "SLO-violation minutes",
            f"{pol.slo_violation_minutes}/{report.minutes} = {viol_pct:.2f}% (target <= {limit:g}%)",
            viol_pct <= limit,
        ),
        (
            "vs RPS baseline at equal or lower GPU-hours",
            f"{pol.slo_violation_minutes} vs {ref.slo_violation_minutes} violation min at {pol.gpu_hours:.2f} vs "
            f"{ref.gpu_hours:.2f} GPU-h ({ref_note}; fewer, or both zero, passes)",
            fewer and pol.gpu_hours <= ref.gpu_hours * (1 + 1e-9),
        ),
        (
            "direction changes/hour",
            f"{pol.direction_changes_per_hour:.2f} (target <= 4)",
            pol.direction_changes_per_hour <= 4,
        ),
    ]


def reactive_oracle(load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, headroom: float) -> PoolResult:
    """A bound for *any* reactive policy: exact knowledge of the load, only pod start-up to wait for.

    Every 15 s it orders `ceil(headroom * L / per-replica load at the target utilisation)` replicas
    at once (no tolerance, no rate limits, no maxReplicas), where L is the highest per-second load
    of the last scale-down window (`stabilizationSeconds.down`): it sees every burst the moment it starts,
    which no metric can. Its replicas still take the model's start-up time to serve. With
    headroom 1 its violation minutes are what no better signal could remove; the headroom it
    needs to meet the SLO target, and the GPU-hours that costs, show what static slack would buy.
    """
    cost = load.cost.tolist()
    window_s = spec.autoscaling.stabilization_seconds.down
    per_replica = model.utilisation_for_sm(spec.autoscaling.target_sm_active) * model.throughput_per_replica

    def decide(now: float, pool: Pool, win: Window) -> int:
        t = int(now)
        peak = float(max(cost[max(0, t - window_s) : t] or [0.0]))
        return max(spec.autoscaling.min_replicas, math.ceil(headroom * peak / per_replica - 1e-9))

    first = max(cost[:60] or [0.0])
    initial = max(spec.autoscaling.min_replicas, math.ceil(headroom * first / per_replica - 1e-9))
    return run_pool(
        f"oracle x{headroom:g}",
        decide,
        initial,
        cost,
        load.requests.tolist(),
        model,
        15,
        spec.slo.p99_latency_ms,
        spec.gpus_per_replica,
    )


HEADROOMS = (1.0, 1.5, 2.0, 3.0, 4.0)


def oracle_table(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, static_gpu_hours: float, minutes: int
) -> list[dict[str, Any]]:
    rows = []
    for h in HEADROOMS:
        r = reactive_oracle(load, spec, model, h)
        rows.append(
            {
                "headroom": h,
                "violation_minutes": r.slo_violation_minutes,
                "violation_pct": round(100 * r.slo_violation_minutes / minutes, 2),
                "gpu_hours": round(r.gpu_hours, 2),
                "gpu_vs_static": round(r.gpu_hours / static_gpu_hours, 3),
                "direction_changes_per_hour": round(r.direction_changes_per_hour, 2),
            }
        )
    return rows


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
    hpa_windows = RankingServiceSpec.model_validate(
        {**SERVICE, "autoscaling": {**SERVICE["autoscaling"], "stabilizationSeconds": {"up": 0, "down": 300}}}
    )
    scenarios: list[tuple[str, LoadSeries, float, bool, RankingServiceSpec]] = []
    series, scale = shared_trace(model, spec)
    scenarios.append(("shared-trace", series, scale, False, spec))
    scenarios.append(("diurnal", diurnal(flash=False), 1.0, False, spec))
    scenarios.append(("diurnal+flash", diurnal(flash=True), 1.0, True, spec))
    if not args.quick:
        scenarios.append(("sensitivity: mix+-35%", diurnal(flash=False, mix=0.35), 1.0, False, spec))
        hpa_name = "sensitivity: shared-trace, HPA default 300 s down window"
        scenarios.append((hpa_name, series, scale, False, hpa_windows))

    out: dict[str, Any] = {"service_model": model.describe(), "scenarios": {}}
    all_pass = True
    plotted: ReplayReport | None = None
    for name, load, scale, flash, service in scenarios:
        t0 = time.perf_counter()
        report = simulate(load, service, model, service="bench-ranker", trace=name, scale=scale)
        elapsed = time.perf_counter() - t0
        sensitivity = name.startswith("sensitivity")
        pol, rps = report.results[POLICY], report.results[HPA_RPS]
        rps_iso = None
        if not sensitivity and pol.gpu_hours > rps.gpu_hours:
            rps_iso = rps_at_equal_gpu_hours(load, service, model, pol.gpu_hours)
        checks = [] if sensitivity else verdicts(report, flash, rps_iso)
        all_pass &= all(ok for _, _, ok in checks)
        oracle = (
            []
            if sensitivity
            else oracle_table(load, service, model, report.results[STATIC_PEAK].gpu_hours, report.minutes)
        )
        out["scenarios"][name] = {
            **report.to_dict(timeline=False),
            "checks": {k: {"value": v, "pass": ok} for k, v, ok in checks},
            "reactive_oracle": oracle,
            "sim_seconds": round(elapsed, 2),
        }
        if flash:
            plotted = report
        if not args.json:
            print(f"\n=== {name} (scale x{scale:g}, simulated in {elapsed:.1f}s) ===")
            print(report.to_table())
            for k, v, ok in checks:
                print(f"  [{'PASS' if ok else 'FAIL'}] {k}: {v}")
            if oracle:
                limit = 3.0 if flash else 1.0
                print(
                    "  reactive oracle (exact load, orders instantly, replicas Ready "
                    f"{model.startup_seconds:g} s later; SLO target <= {limit:g}%):"
                )
                for row in oracle:
                    ok = row["violation_pct"] <= limit and row["gpu_vs_static"] <= 0.75
                    print(
                        f"    headroom x{row['headroom']:<4g} {row['violation_minutes']:>4d} violation min "
                        f"({row['violation_pct']:.2f}%), {row['gpu_hours']:.2f} GPU-h = {row['gpu_vs_static']:.3f} "
                        f"of static, {row['direction_changes_per_hour']:.2f} dir chg/h"
                        f"{'  <- meets SLO and GPU targets' if ok else ''}"
                    )
                feasible = [r for r in oracle if r["violation_pct"] <= limit and r["gpu_vs_static"] <= 0.75]
                floor = oracle[0]["violation_minutes"]
                if not feasible:
                    print(
                        "  => no reactive policy in this sweep meets the SLO target at <= 75 % of static GPU-hours: "
                        "the SLO target is out of reach without clairvoyance"
                    )
                if floor >= rps.slo_violation_minutes > 0:
                    print(
                        f"  => exact load knowledge without headroom still leaves {floor} violation min; RPS has "
                        f"{rps.slo_violation_minutes}: no signal can do fewer at the same headroom"
                    )
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
