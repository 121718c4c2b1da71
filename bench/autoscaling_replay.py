"""Benchmark: the SLO-keeping autoscaling policy against static peak provisioning and HPA on RPS.

Run:  python bench/autoscaling_replay.py [--plot bench/autoscaling_replay.png] [--json] [--quick]

Every scenario is replayed by `gem_operator.replay.engine.simulate` on simulated time (the
same `policy.desired_replicas` the operator runs), with the service model's defaults: 200 cost
units/s per replica, p99 knee near 80 % utilisation, replicas Ready 120 s after creation (30 s
pod start + 90 s model load), GPUs held from creation. The policy reads SM active, the queue and
the pool's p99 (`metrics.latency`), and keeps the SLO through its SLO feedback.

Scenarios, each run with `--scale-mode independent` (X times as many independent users) and
`duplicate` (each request stands for X in the same second; see `traces.to_series`):

- `shared-trace`: data/traces/azure-llm-2023-code.csv (1 h of real, very bursty arrivals), each
  request weighted by its ContextTokens (normalised to mean 1), scaled so that static peak
  provisioning of the duplicate series needs >= 20 replicas (the same X in both modes).
- `diurnal`: 24 h, request rate 1,000-3,000/s (sinusoid, trough 04:00, peak 16:00) with slow
  random noise and a request mix whose mean cost drifts +-15 % over the day, drawn as a Poisson
  trace of 1/100 of the users (10-30 req/s) and scaled x100.
- `diurnal+flash`: the same day with a flash crowd, 3x the rate for 2 minutes at 11:00.
- `poisson-hour+flash`: one hour of Poisson arrivals whose rate swings 0.4x-1.6x of 1,100
  cost units/s (trough at the start and the end, peak at minute 30) with a 3x flash crowd for 2
  minutes at minute 40; 1/100 of the users, scaled x100. The seeds are fixed so that runs compare;
  `--seed N` shifts every synthetic scenario's seed (other draws of the same traffic).

For synthetic traces the independent mode's common trend is the known per-second rate (what all
users share); for the shared trace it is the trace's 300 s moving average.

Targets: GPU-hours <= 0.75 of static peak; SLO-violation minutes <= 1 % of the minutes after
warm-up without a flash crowd and <= 3 % with one; never more violation minutes than HPA on RPS at
equal or lower GPU-hours (when the policy spends more GPU-hours than RPS at its default
calibration, RPS is re-run with lower utilisation targets, bisecting to the two runs that spend
just less and just more than the policy, and its violation minutes are interpolated between them
to the policy's GPU-hours: whole replicas make GPU-hours move in steps, so no run lands on them);
<= 4 direction changes per hour. Each is printed with the number it is
judged on and PASS/FAIL. Warm-up (the first 3 minutes, before a first decision can serve) is
reported apart. Targets are never lowered here: an SLO-minute miss is marked OUT OF REACH instead
of FAIL only when the reactive oracle below misses it too at every headroom within the GPU-hour
target (x1.00-x2.00 by 0.05, then to x4) and neither RPS baseline meets both; the line says what
the oracle reaches and what meeting it would cost. Any other miss is a FAIL, and the exit status
is 1 on a FAIL. A summary table ends the run.

Feasibility: for each scenario a "reactive oracle" (exact per-second load, orders at every 15 s
sync with no tolerance or rate limit, holds the peak of the scale-down window, replicas still take
the model's 120 s to serve) is run with headroom x1..x4. Its violation minutes at x1 are the floor
no signal could remove; the headroom it needs to meet the SLO target, and the GPU-hours that
costs against static peak, show whether a target is reachable without clairvoyance.

Panic mode (`spec.autoscaling.panic`, off by default) is measured on every scenario and mode: the
policy re-run with it on, GPU-hours and violation minutes beside the default.

The RankingService under test: SLO p99 40 ms, targetSmActive 0.6, HPA-default tolerance and rate
policies, 0 s up / 900 s down stabilisation (see SERVICE), 2..128 replicas.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import (
    HPA_RPS,
    POLICY,
    STATIC_PEAK,
    Arrivals,
    LoadSeries,
    PoolResult,
    ReplayReport,
    Window,
    load_trace,
    run_pool,
    simulate,
    to_series,
)
from gem_operator.replay.service_model import Pool, ServiceModel
from gem_operator.replay.traces import ScaleMode
from gem_testbed.plots.replay import plot_report

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
MIN_STATIC_REPLICAS = 20
USERS_SCALE = 100.0  # synthetic traces are drawn for 1/100 of the users and scaled x100
MODES: tuple[ScaleMode, ...] = ("independent", "duplicate")

SERVICE: dict[str, Any] = {
    "gpusPerReplica": 1,
    "model": {"uri": "s3://gem-models/ranker/v42"},
    "slo": {"p99LatencyMs": 40},
    # Scale-down window 15 min, not HPA's 5: a replica takes 2 min to serve and holds its GPU from
    # creation, so giving one back for a lull shorter than the next burst costs a start-up and SLO
    # minutes. Both autoscaled pools use it.
    "autoscaling": {
        "minReplicas": 2,
        "maxReplicas": 128,
        "targetSmActive": 0.6,
        "stabilizationSeconds": {"up": 0, "down": 900},
    },
}


@dataclass(frozen=True)
class Scenario:
    name: str
    arrivals: Arrivals
    trend: np.ndarray[Any, np.dtype[np.float64]] | None  # known per-second rate of the drawn trace
    scale: float
    flash: bool
    zoom: tuple[int, int] | None = None  # minutes to zoom on in the plot

    def series(self, mode: ScaleMode) -> LoadSeries:
        s = to_series(self.arrivals, scale=self.scale, mode=mode, trend=self.trend if mode == "independent" else None)
        return LoadSeries(cost=s.cost, requests=s.requests, name=f"{self.name} ({mode})")


def poisson_trace(
    name: str, rate: np.ndarray[Any, np.dtype[np.float64]], mean_cost: np.ndarray[Any, np.dtype[np.float64]], seed: int
) -> tuple[Arrivals, np.ndarray[Any, np.dtype[np.float64]]]:
    """A per-second Poisson trace of 1/USERS_SCALE of the users: (arrivals, their known rate)."""
    base = rate / USERS_SCALE
    counts = np.random.default_rng(seed).poisson(base).astype(float)
    times = np.arange(len(rate), dtype=float)
    return Arrivals(times.tolist(), counts.tolist(), (counts * mean_cost).tolist(), name), base


def diurnal(flash: bool, seed: int = 7) -> Scenario:
    """24 h: 1,000-3,000 requests/s, slow noise, request mix +-15 %; optional 3x crowd at 11:00."""
    day = 86_400
    t = np.arange(day, dtype=float)
    rng = np.random.default_rng(seed)
    rate = 2000.0 - 1000.0 * np.cos(2 * np.pi * (t - 4 * 3600) / day)
    walk = np.cumsum(rng.normal(0.0, 1.0, day))
    walk = np.convolve(walk - walk.mean(), np.ones(600) / 600, mode="same")
    walk = walk / (np.abs(walk).max() or 1.0) * 0.05
    rate = rate * (1 + walk)
    if flash:
        start = 11 * 3600
        rate[start : start + 120] *= 3.0
    mean_cost = 1.0 - 0.15 * np.cos(2 * np.pi * (t - 9 * 3600) / day)
    name = "diurnal+flash" if flash else "diurnal"
    arrivals, trend = poisson_trace(name, rate, mean_cost, seed + 100)
    zoom = (11 * 60 - 10, 11 * 60 + 30) if flash else None
    return Scenario(name, arrivals, trend, USERS_SCALE, flash, zoom)


def poisson_hour(seed: int = 11) -> Scenario:
    """1 h Poisson, rate 0.4x-1.6x of 1,100 units/s (trough at the ends, peak at minute 30), 3x crowd at minute 40."""
    t = np.arange(3600, dtype=float)
    rate = 1100.0 * (1.0 - 0.6 * np.cos(2 * np.pi * t / 3600))
    rate[40 * 60 : 42 * 60] *= 3.0
    arrivals, trend = poisson_trace("poisson-hour+flash", rate, np.ones_like(rate), seed)
    return Scenario("poisson-hour+flash", arrivals, trend, USERS_SCALE, True, (30, 55))


def shared_trace(model: ServiceModel, spec: RankingServiceSpec) -> Scenario:
    arrivals = load_trace(SHARED_TRACE, cost_column="ContextTokens")
    unit = to_series(arrivals, scale=1.0, mode="duplicate")
    per_replica = model.utilisation_for_sm(spec.autoscaling.target_sm_active) * model.throughput_per_replica
    scale = math.ceil(MIN_STATIC_REPLICAS * per_replica / float(unit.cost.max()))
    return Scenario("shared-trace", arrivals, None, float(scale), False, (8, 30))


@dataclass(frozen=True)
class RpsAtEqualGpu:
    """RPS re-runs bracketing the policy's GPU-hours: (utilisation, result) just below and above."""

    gpu_hours: float
    below: tuple[float, PoolResult] | None
    above: tuple[float, PoolResult] | None

    def violation_minutes(self) -> float:
        """RPS's violation minutes at exactly the policy's GPU-hours, linear between the two runs.

        GPU-hours move in steps of whole replicas, so no utilisation target lands on the policy's
        GPU-hours exactly; one run spends a little less, one a little more. Judging against the
        one above alone would give RPS a larger budget than the policy's, against the one below a
        smaller one; the line between them is RPS at equal GPU-hours.
        """
        runs = [r for _, r in (x for x in (self.below, self.above) if x is not None)]
        if len(runs) == 1 or runs[0].gpu_hours == runs[-1].gpu_hours:
            return float(runs[0].slo_violation_minutes)
        lo, hi = runs
        w = (self.gpu_hours - lo.gpu_hours) / (hi.gpu_hours - lo.gpu_hours)
        return lo.slo_violation_minutes + w * (hi.slo_violation_minutes - lo.slo_violation_minutes)

    def describe(self) -> str:
        parts = [
            f"{r.slo_violation_minutes} min at {r.gpu_hours:.2f} GPU-h (utilisation {u:.2f})"
            for u, r in (x for x in (self.below, self.above) if x is not None)
        ]
        return "RPS re-run, " + " and ".join(parts) + ", interpolated to the policy's GPU-hours"


def rps_at_equal_gpu_hours(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, gpu_hours: float
) -> RpsAtEqualGpu:
    """The RPS baseline re-run with lower target utilisations, bracketing `gpu_hours`.

    Bisection on the utilisation target (10 steps): the last run spending >= `gpu_hours` and the
    last spending less.
    """
    hi = model.utilisation_for_sm(spec.autoscaling.target_sm_active)
    lo = 0.05
    above: tuple[float, PoolResult] | None = None
    below: tuple[float, PoolResult] | None = None
    for _ in range(10):
        mid = (lo + hi) / 2
        r = simulate(load, spec, model, rps_utilisation=mid, only=(HPA_RPS,)).results[HPA_RPS]
        if r.gpu_hours >= gpu_hours:
            above, lo = (mid, r), mid
        else:
            below, hi = (mid, r), mid
    if above is None:
        above = (lo, simulate(load, spec, model, rps_utilisation=lo, only=(HPA_RPS,)).results[HPA_RPS])
    return RpsAtEqualGpu(gpu_hours, below, above)


PASS, FAIL, OUT_OF_REACH = "PASS", "FAIL", "OUT OF REACH"


@dataclass(frozen=True)
class Reach:
    """Whether any reactive policy can meet the SLO-minute target within the GPU-hour target.

    From a fine sweep of the reactive oracle's headroom (`REACH_HEADROOMS`): `best_pct` is the
    fewest violation minutes (in %) the oracle reaches at <= 0.75 of static GPU-hours, at headroom
    `best_headroom`; `reachable` says whether that meets the target.
    """

    reachable: bool
    best_pct: float
    best_headroom: float
    floor_pct: float  # the oracle at headroom x1: what no signal could remove
    least_headroom: float | None  # the least headroom meeting the SLO target at any GPU cost
    least_gpu_vs_static: float | None  # what that headroom costs against static peak


# The oracle's headroom, finely where the GPU-hour target is decided: x1.00..x2.00 by 0.05, then coarser.
REACH_HEADROOMS = (*(round(1 + 0.05 * i, 2) for i in range(21)), 2.25, 2.5, 3.0, 3.5, 4.0)
GPU_TARGET = 0.75


def reach(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, static_gpu_hours: float, warmup: int, limit: float
) -> Reach:
    best: tuple[float, float] | None = None  # (pct, headroom) within the GPU target
    least: tuple[float, float] | None = None  # (headroom, gpu ratio) meeting the SLO target
    floor = 100.0
    for h in REACH_HEADROOMS:
        r = reactive_oracle(load, spec, model, h, warmup)
        ratio = r.gpu_hours / static_gpu_hours
        if h == 1.0:
            floor = r.violation_pct
        if ratio <= GPU_TARGET and (best is None or r.violation_pct < best[0]):
            best = (r.violation_pct, h)
        if least is None and r.violation_pct <= limit:
            least = (h, ratio)
    pct, headroom = best if best is not None else (math.inf, math.nan)
    return Reach(
        pct <= limit, pct, headroom, floor, None if least is None else least[0], None if least is None else least[1]
    )


def verdicts(
    report: ReplayReport,
    flash: bool,
    rps_iso: RpsAtEqualGpu | None = None,
    reachable: Reach | None = None,
) -> list[tuple[str, str, str]]:
    """PASS/FAIL per target, with the number each one is judged on.

    An SLO-minute miss is OUT OF REACH (not a failure) only when `reachable` says that the
    reactive oracle, which knows the exact load and orders instantly, misses it too at every
    headroom within the GPU-hour target; every other miss is a FAIL.
    """
    pol, static, rps = (report.results[k] for k in (POLICY, STATIC_PEAK, HPA_RPS))
    ratio = pol.gpu_hours / static.gpu_hours
    limit = 3.0 if flash else 1.0
    if pol.gpu_hours <= rps.gpu_hours:
        ref, ref_note = rps, "RPS at its default calibration"
        ref_minutes, ref_gpu = float(rps.slo_violation_minutes), rps.gpu_hours
    else:
        assert rps_iso is not None, "policy above RPS GPU-hours: pass rps_at_equal_gpu_hours()"
        assert rps_iso.above is not None
        ref = rps_iso.above[1]
        ref_note = rps_iso.describe()
        ref_minutes, ref_gpu = rps_iso.violation_minutes(), pol.gpu_hours

    def status(ok: bool) -> str:
        return PASS if ok else FAIL

    slo_text = (
        f"{pol.slo_violation_minutes}/{pol.judged_minutes} = {pol.violation_pct:.2f}% (target <= {limit:g}%; "
        f"warm-up {pol.warmup_violation_minutes} of {report.warmup_minutes} min)"
    )
    slo_status = status(pol.violation_pct <= limit)
    # The RPS baseline is a reactive policy too: if it meets both targets, the target is reachable.
    rps_meets = any(r.violation_pct <= limit and r.gpu_hours <= GPU_TARGET * static.gpu_hours for r in (rps, ref))
    if slo_status == FAIL and reachable is not None and not reachable.reachable and not rps_meets:
        slo_status = OUT_OF_REACH
        least = (
            "no headroom up to x4 meets it"
            if reachable.least_headroom is None
            else f"meeting it takes headroom x{reachable.least_headroom:g} = "
            f"{reachable.least_gpu_vs_static:.3f} of static GPU-h"
        )
        best = (
            f"even headroom x1 costs more than {GPU_TARGET} of static GPU-h"
            if math.isinf(reachable.best_pct)
            else f"its best within {GPU_TARGET} of static GPU-h is {reachable.best_pct:.2f}% "
            f"(x{reachable.best_headroom:g})"
        )
        slo_text += (
            f"; OUT OF REACH for a reactive policy: the reactive oracle's floor at x1 is {reachable.floor_pct:.2f}%, "
            f"{best}, {least}; the RPS baselines miss it too"
        )
    return [
        (
            "GPU-hours vs static peak",
            f"{pol.gpu_hours:.2f}/{static.gpu_hours:.2f} = {ratio:.3f} (target <= {GPU_TARGET})",
            status(ratio <= GPU_TARGET),
        ),
        ("SLO-violation minutes after warm-up", slo_text, slo_status),
        (
            "vs RPS baseline at equal or lower GPU-hours",
            f"{pol.slo_violation_minutes} vs {ref_minutes:.2f} violation min at {pol.gpu_hours:.2f} vs "
            f"{ref_gpu:.2f} GPU-h ({ref_note}; never more passes)",
            status(pol.slo_violation_minutes <= ref_minutes + 1e-9 and pol.gpu_hours <= ref_gpu * (1 + 1e-9)),
        ),
        (
            "direction changes/hour",
            f"{pol.direction_changes_per_hour:.2f} (target <= 4)",
            status(pol.direction_changes_per_hour <= 4),
        ),
    ]


def reactive_oracle(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, headroom: float, warmup: int
) -> PoolResult:
    """A bound for *any* reactive policy: exact knowledge of the load, only pod start-up to wait for.

    Every 15 s it orders `ceil(headroom * L / per-replica load at the target utilisation)` replicas
    at once (no tolerance, no rate limits, no maxReplicas), where L is the highest per-second load
    of the last scale-down window (`stabilizationSeconds.down`): it sees every burst the moment it
    starts, which no metric can. Its replicas still take the model's start-up time to serve.
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
        warmup_minutes=warmup,
    )


HEADROOMS = (1.0, 1.5, 2.0, 3.0, 4.0)


def oracle_table(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, static_gpu_hours: float, warmup: int
) -> list[dict[str, Any]]:
    rows = []
    for h in HEADROOMS:
        r = reactive_oracle(load, spec, model, h, warmup)
        rows.append(
            {
                "headroom": h,
                "violation_minutes": r.slo_violation_minutes,
                "violation_pct": round(r.violation_pct, 2),
                "gpu_hours": round(r.gpu_hours, 2),
                "gpu_vs_static": round(r.gpu_hours / static_gpu_hours, 3),
                "direction_changes_per_hour": round(r.direction_changes_per_hour, 2),
            }
        )
    return rows


def with_panic(spec: RankingServiceSpec) -> RankingServiceSpec:
    data = spec.model_dump(by_alias=True)
    data["autoscaling"]["panic"]["enabled"] = True
    return RankingServiceSpec.model_validate(data)


def without_feedback(spec: RankingServiceSpec) -> RankingServiceSpec:
    data = spec.model_dump(by_alias=True)
    data["autoscaling"]["sloFeedback"]["enabled"] = False
    data["autoscaling"]["metrics"]["latency"]["enabled"] = False
    return RankingServiceSpec.model_validate(data)


def run_case(
    sc: Scenario, mode: ScaleMode, spec: RankingServiceSpec, model: ServiceModel, quiet: bool
) -> tuple[dict[str, Any], bool, ReplayReport]:
    load = sc.series(mode)
    t0 = time.perf_counter()
    report = simulate(load, spec, model, service="bench-ranker", trace=sc.name, scale=sc.scale, scale_mode=mode)
    elapsed = time.perf_counter() - t0
    pol, rps, static = report.results[POLICY], report.results[HPA_RPS], report.results[STATIC_PEAK]
    rps_iso = rps_at_equal_gpu_hours(load, spec, model, pol.gpu_hours) if pol.gpu_hours > rps.gpu_hours else None
    limit = 3.0 if sc.flash else 1.0
    # The fine oracle sweep decides OUT OF REACH; it only runs when the policy misses the target.
    reachable = None
    if pol.violation_pct > limit:
        reachable = reach(load, spec, model, static.gpu_hours, report.warmup_minutes, limit)
    checks = verdicts(report, sc.flash, rps_iso, reachable)
    oracle = oracle_table(load, spec, model, static.gpu_hours, report.warmup_minutes)
    variants = {}
    for label, variant in (("panic on", with_panic(spec)), ("no SLO feedback", without_feedback(spec))):
        v = simulate(load, spec, model, spec_override=variant, scale_mode=mode, only=(POLICY,)).results[POLICY]
        variants[label] = {
            "gpu_vs_static": round(v.gpu_hours / static.gpu_hours, 3),
            "violation_minutes": v.slo_violation_minutes,
            "violation_pct": round(v.violation_pct, 2),
            "direction_changes_per_hour": round(v.direction_changes_per_hour, 2),
        }
    targets = [x for x in pol.effective_target_per_minute if x is not None]
    out = {
        **report.to_dict(timeline=False),
        "checks": {k: {"value": v, "pass": st == PASS, "status": st} for k, v, st in checks},
        "reach": None if reachable is None else reachable.__dict__,
        "reactive_oracle": oracle,
        "variants": variants,
        "effective_target": {"min": round(min(targets), 3), "mean": round(float(np.mean(targets)), 3)}
        if targets
        else None,
        "rps_equal_gpu": None
        if rps_iso is None
        else {
            "gpu_hours": round(pol.gpu_hours, 3),
            "slo_violation_minutes": round(rps_iso.violation_minutes(), 2),
            "runs": [
                {"utilisation": round(u, 3), **r.summary(), "violation_pct": r.violation_pct}
                for u, r in (x for x in (rps_iso.below, rps_iso.above) if x is not None)
            ],
        },
        "sim_seconds": round(elapsed, 2),
    }
    if not quiet:
        print(f"\n=== {sc.name}, scale x{sc.scale:g}, mode {mode} (simulated in {elapsed:.1f}s) ===")
        print(report.to_table())
        for k, v, st in checks:
            print(f"  [{st}] {k}: {v}")
        if targets:
            print(f"  effective SM target: min {min(targets):.3f}, mean {np.mean(targets):.3f} (targetSmActive 0.6)")
        for label, v in variants.items():
            print(
                f"  {label}: {v['gpu_vs_static']:.3f} of static GPU-h, {v['violation_minutes']} violation min "
                f"({v['violation_pct']:.2f}%), {v['direction_changes_per_hour']:.2f} dir chg/h"
            )
        print(f"  reactive oracle (exact load, orders instantly, Ready {model.startup_seconds:g} s later):")
        for row in oracle:
            ok = row["violation_pct"] <= limit and row["gpu_vs_static"] <= 0.75
            print(
                f"    headroom x{row['headroom']:<4g} {row['violation_minutes']:>4d} violation min "
                f"({row['violation_pct']:.2f}%), {row['gpu_vs_static']:.3f} of static GPU-h, "
                f"{row['direction_changes_per_hour']:.2f} dir chg/h{'  <- meets SLO and GPU targets' if ok else ''}"
            )
        if reachable is not None and not reachable.reachable:
            print(
                f"  => at no headroom x1..x4 (x1.00-x2.00 by 0.05) does the reactive oracle meet the SLO target at "
                f"<= {GPU_TARGET} of static GPU-hours: out of reach without clairvoyance"
            )
    return out, all(st != FAIL for _, _, st in checks), report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--plot", default=str(ROOT / "bench" / "autoscaling_replay.png"), help="PNG of the poisson-hour+flash run"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--quick", action="store_true", help="only the two one-hour scenarios")
    ap.add_argument("--seed", type=int, default=0, help="added to every scenario's seed")
    args = ap.parse_args(argv)

    model = ServiceModel()
    spec = RankingServiceSpec.model_validate(SERVICE)
    scenarios = [shared_trace(model, spec), poisson_hour(11 + args.seed)]
    if not args.quick:
        scenarios += [diurnal(flash=False, seed=7 + args.seed), diurnal(flash=True, seed=7 + args.seed)]
    out: dict[str, Any] = {"service_model": model.describe(), "scenarios": {}}
    all_pass = True
    rows: list[tuple[str, dict[str, Any]]] = []
    plotted: tuple[ReplayReport, Scenario] | None = None
    for sc in scenarios:
        for mode in MODES:
            case, ok, report = run_case(sc, mode, spec, model, args.json)
            out["scenarios"][f"{sc.name} / {mode}"] = case
            all_pass &= ok
            rows.append((f"{sc.name} / {mode}", case))
            if sc.name == "poisson-hour+flash" and mode == "independent":
                plotted = (report, sc)
    if plotted is not None and args.plot:
        report, sc = plotted
        plot_report(
            report,
            args.plot,
            title="one-hour Poisson diurnal with a 3x flash crowd at minute 40 (independent users); bottom: zoom",
            zoom=sc.zoom,
        )
        out["plot"] = args.plot
        if not args.json:
            print(f"\nplot: {args.plot}")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_summary(rows)
        print(
            "\nverdict: "
            + (
                "every target met, or out of reach for any reactive policy (shown with the oracle above)"
                if all_pass
                else "FAIL: a target that a reactive policy can reach is missed"
            )
        )
    return 0 if all_pass else 1


def print_summary(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """One line per scenario and mode: each target's number and status."""
    print("\nsummary (status per target: GPU-h/static, SLO-violation % after warm-up, vs RPS, dir chg/h)")
    print(f"{'scenario / mode':36s} {'GPU':>6s}      {'viol %':>7s}               {'pol vs RPS min':>14s}      dir/h")
    for name, case in rows:
        pol = case["policy"]
        c = case["checks"]
        ref = case["rps_equal_gpu"] or case["baselines"][HPA_RPS]
        st = [c[k]["status"] for k in c]
        gpu = pol["gpu_hours"] / case["baselines"][STATIC_PEAK]["gpu_hours"]
        print(
            f"{name:36s} {gpu:6.3f} {st[0]:4s} {pol['slo_violation_pct_after_warmup']:6.2f}% "
            f"{st[1]:12s} {pol['slo_violation_minutes']:>4d} vs {ref['slo_violation_minutes']:<4g} {st[2]:4s}  "
            f"{pol['direction_changes_per_hour']:5.2f} {st[3]}"
        )


if __name__ == "__main__":
    sys.exit(main())
