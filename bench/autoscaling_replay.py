"""Benchmark: the SLO-keeping autoscaling policy against static peak provisioning and HPA on RPS.

Run:  python bench/autoscaling_replay.py [--quick] [--seeds A:B] [--plot FILE.png] [--json]

Every case is replayed by `gem_operator.replay.engine.simulate` on simulated time (the same
`policy.desired_replicas` the operator runs), with the service model's defaults: 200 cost
units/s per replica, p99 knee near 80 % utilisation, replicas Ready 120 s after creation (30 s
pod start + 90 s model load), GPUs held from creation. The policy reads SM active, the queue and
the pool's p99 (`metrics.latency`); its SLO loop (`sloFeedback.controller: band`) moves the SM
target so the p99 rests within 0.6-0.8 x SLO.

Cases: three trace families (`autoscaling_scenarios.py`) x both scale modes (`independent`: X
times as many independent users; `duplicate`: each request stands for X in the same second; see
`traces.to_series`) x the seeds of `--seeds` (default 0:3; `--quick` 0:2):

- `shared-trace`: the shared Azure code trace (real arrivals: one draw, whatever the seed);
- `conversation sN`: one smooth conversation-like hour drawn with seed 23+N;
- the diurnal swing with a flash crowd: `poisson-hour+flash sN` (one hour, rate 0.4x-1.6x, 3x
  crowd for 2 minutes at minute 40, seed 11+N) and, without `--quick`, `diurnal+flash sN` (24 h,
  1,000-3,000 requests/s, 3x crowd at 11:00, seed 7+N) and one `diurnal` day without the crowd.

Targets, each printed with the number it is judged on and PASS/FAIL: GPU-hours <= 0.75 of static
peak; SLO-violation minutes <= 3 % of the minutes after warm-up on the flash-crowd and
conversation families, <= 1 % on the shared trace and the plain diurnal day; <= 4 direction
changes in any hour of the run; and two comparisons with HPA on RPS, one per direction:

- *at equal or fewer GPU-hours, never more violation minutes*: when the policy spends more than
  RPS at its default calibration, RPS is re-run with lower utilisation targets, bisecting to the
  two runs that spend just less and just more than the policy, and its violation minutes are
  interpolated between them to the policy's GPU-hours (whole replicas make GPU-hours move in
  steps, so no run lands on them);
- *at as few violation minutes, never more than 1.05x the GPU-hours*: RPS at its default
  calibration when it has no fewer violation minutes than the policy; otherwise RPS re-run with
  lower utilisation targets (bisection) to the cheapest run with as few violation minutes as the
  policy (none within reach: nothing to compare, said so).

Warm-up (the first 3 minutes, before a first decision can serve) is reported apart. Targets are
never lowered here: an SLO-minute miss is marked OUT OF REACH instead of FAIL only when the
reactive oracle below misses it too at every headroom within the GPU-hour target (x1.00-x2.00 by
0.05, then to x4) and neither RPS baseline meets both; the line says what the oracle reaches and
what meeting it would cost, and, where it does, that the oracle keeping peaks for only 60-300 s
meets the target within the GPU-hours at the one headroom that suits the trace (chosen with
hindsight, so no bound on a policy that must serve every trace with one setting; shown, not
judged). Any other miss is a FAIL, and the exit status is 1 on a FAIL. Each
case prints its effective SM target's path (every 5 minutes of an hour, every hour of a day);
a summary table ends the run.

Feasibility: for each case a "reactive oracle" (exact per-second load, orders at every 15 s
sync with no tolerance or rate limit, holds the peak of the scale-down window, replicas still take
the model's 120 s to serve) is run with headroom x1..x4. Its violation minutes at x1 are the floor
no signal could remove; the headroom it needs to meet the SLO target, and the GPU-hours that
costs against static peak, show whether a target is reachable without clairvoyance.

Variants measured on every case: panic mode on (`spec.autoscaling.panic`, off by default), the
earlier ratchet feedback (`sloFeedback.controller: ratchet`, no direction budget), and no SLO
feedback at all, each as GPU-hours and violation minutes beside the default.

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
    LoadSeries,
    PoolResult,
    ReplayReport,
    Window,
    run_pool,
    simulate,
)
from gem_operator.replay.service_model import Pool, ServiceModel
from gem_operator.replay.traces import ScaleMode
from gem_testbed.plots.replay import plot_report

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scenarios beside this file, however it is loaded
from autoscaling_scenarios import (
    ROOT,
    Scenario,
    conversation,
    diurnal,
    poisson_hour,
    shared_trace,
)

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


@dataclass(frozen=True)
class RpsAsFew:
    """RPS re-run with lower utilisation targets: the cheapest run with as few violation minutes as
    the policy (`run` None: none down to utilisation 0.05 reached them)."""

    minutes: int
    run: tuple[float, PoolResult] | None

    def describe(self) -> str:
        if self.run is None:
            return f"RPS re-run down to utilisation 0.05: never as few as {self.minutes} violation min"
        u, r = self.run
        return f"RPS re-run at utilisation {u:.2f}: {r.slo_violation_minutes} min at {r.gpu_hours:.2f} GPU-h"


def rps_at_as_few_violations(load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, minutes: int) -> RpsAsFew:
    """The RPS baseline re-run with lower target utilisations (bisection, 8 steps): the highest
    utilisation, so the fewest GPU-hours, with at most `minutes` violation minutes."""
    hi = model.utilisation_for_sm(spec.autoscaling.target_sm_active)
    lo = 0.05
    best: tuple[float, PoolResult] | None = None
    r = simulate(load, spec, model, rps_utilisation=lo, only=(HPA_RPS,)).results[HPA_RPS]
    if r.slo_violation_minutes > minutes:
        return RpsAsFew(minutes, None)
    best = (lo, r)
    for _ in range(8):
        mid = (lo + hi) / 2
        r = simulate(load, spec, model, rps_utilisation=mid, only=(HPA_RPS,)).results[HPA_RPS]
        if r.slo_violation_minutes <= minutes:
            best, lo = (mid, r), mid
        else:
            hi = mid
    return RpsAsFew(minutes, best)


PASS, FAIL, OUT_OF_REACH = "PASS", "FAIL", "OUT OF REACH"
GPU_SLACK = 1.05  # the policy may spend this x RPS's GPU-hours where RPS has as few violation minutes


@dataclass(frozen=True)
class Reach:
    """Whether the reactive oracle can meet the SLO-minute target within the GPU-hour target.

    From a fine sweep of the reactive oracle's headroom (`REACH_HEADROOMS`), keeping each peak for
    the scale-down window as the policy does: `best_pct` is the fewest violation minutes (in %) it
    reaches at <= 0.75 of static GPU-hours, at headroom `best_headroom`; `reachable` says whether
    that meets the target. `short_*`: the same sweep keeping peaks for only `REACH_WINDOWS`, shown
    beside the verdict, not in it: it says what a policy that gives capacity back sooner could
    reach with the one headroom that suits this trace, chosen with hindsight.
    """

    reachable: bool
    best_pct: float
    best_headroom: float
    floor_pct: float  # the oracle at headroom x1: what no signal could remove
    least_headroom: float | None  # the least headroom meeting the SLO target at any GPU cost
    least_gpu_vs_static: float | None  # what that headroom costs against static peak
    short_pct: float = math.inf  # fewest violation minutes (%) within the GPU target keeping peaks briefly
    short_headroom: float = math.nan
    short_window: int = 0  # seconds it keeps a peak there
    short_gpu_vs_static: float = math.nan


# The oracle's headroom, finely where the GPU-hour target is decided: x1.00..x2.00 by 0.05, then coarser.
REACH_HEADROOMS = (*(round(1 + 0.05 * i, 2) for i in range(21)), 2.25, 2.5, 3.0, 3.5, 4.0)
# Shorter times for the oracle to keep a peak (reported beside the verdict): one sync short of a
# pod start, a pod start, and HPA's default scale-down window.
REACH_WINDOWS = (60, 120, 300)
GPU_TARGET = 0.75


def reach(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, static_gpu_hours: float, warmup: int, limit: float
) -> Reach:
    best: tuple[float, float] | None = None  # (pct, headroom) within the GPU target
    short: tuple[float, float, int, float] | None = None  # (pct, headroom, window, gpu ratio), shorter windows
    least: tuple[float, float] | None = None  # (headroom, gpu ratio) meeting the SLO target
    floor = 100.0
    down = spec.autoscaling.stabilization_seconds.down
    for window in (down, *(w for w in REACH_WINDOWS if w < down)):
        for h in REACH_HEADROOMS:
            r = reactive_oracle(load, spec, model, h, warmup, window)
            ratio = r.gpu_hours / static_gpu_hours
            if window != down:
                if ratio <= GPU_TARGET and (short is None or r.violation_pct < short[0]):
                    short = (r.violation_pct, h, window, ratio)
                continue
            if h == 1.0:
                floor = r.violation_pct
            if ratio <= GPU_TARGET and (best is None or r.violation_pct < best[0]):
                best = (r.violation_pct, h)
            if least is None and r.violation_pct <= limit:
                least = (h, ratio)
    pct, headroom = best if best is not None else (math.inf, math.nan)
    s_pct, s_headroom, s_window, s_ratio = short if short is not None else (math.inf, math.nan, 0, math.nan)
    return Reach(
        pct <= limit,
        pct,
        headroom,
        floor,
        None if least is None else least[0],
        None if least is None else least[1],
        s_pct,
        s_headroom,
        s_window,
        s_ratio,
    )


def verdicts(
    report: ReplayReport,
    flash: bool,
    rps_iso: RpsAtEqualGpu | None = None,
    reachable: Reach | None = None,
    rps_few: RpsAsFew | None = None,
    limit: float | None = None,
) -> list[tuple[str, str, str]]:
    """PASS/FAIL per target, with the number each one is judged on.

    An SLO-minute miss is OUT OF REACH (not a failure) only when `reachable` says that the
    reactive oracle, which knows the exact load and orders instantly, misses it too at every
    headroom within the GPU-hour target; every other miss is a FAIL. `limit`: the SLO-minute
    target in % (default 3 with a flash crowd, else 1). `rps_few`: RPS re-run to as few violation
    minutes as the policy, needed when RPS at its default calibration has more.
    """
    pol, static, rps = (report.results[k] for k in (POLICY, STATIC_PEAK, HPA_RPS))
    ratio = pol.gpu_hours / static.gpu_hours
    if limit is None:
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
            "; OUT OF REACH for a reactive policy keeping the down window's peaks: the reactive oracle's floor at "
            f"x1 is {reachable.floor_pct:.2f}%, "
            f"{best}, {least}; the RPS baselines miss it too"
        )
        if reachable.short_pct <= limit:
            slo_text += (
                f" (keeping peaks {reachable.short_window} s instead of the down window, the oracle at the one "
                f"headroom that suits this trace, x{reachable.short_headroom:g}, has {reachable.short_pct:.2f}% at "
                f"{reachable.short_gpu_vs_static:.3f} of static GPU-h)"
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
        gpu_at_as_few(pol, rps, rps_few),
        (
            "direction changes/hour",
            f"{pol.direction_changes_per_hour:.2f} (target <= 4)",
            status(pol.direction_changes_per_hour <= 4),
        ),
    ]


def gpu_at_as_few(pol: PoolResult, rps: PoolResult, rps_few: RpsAsFew | None) -> tuple[str, str, str]:
    """Never more than GPU_SLACK x RPS's GPU-hours where RPS has as few violation minutes."""
    name = "vs RPS baseline at as few violation minutes"
    if rps.slo_violation_minutes <= pol.slo_violation_minutes:
        ref, note = rps, "RPS at its default calibration"
    elif rps_few is None or rps_few.run is None:
        note = "RPS never reaches as few" if rps_few is not None else "RPS has more at its default calibration"
        text = f"{pol.slo_violation_minutes} vs {rps.slo_violation_minutes} violation min ({note}; nothing to compare)"
        if rps_few is not None:
            text = f"{text}: {rps_few.describe()}"
        return name, text, PASS
    else:
        ref, note = rps_few.run[1], rps_few.describe()
    ok = pol.gpu_hours <= GPU_SLACK * ref.gpu_hours * (1 + 1e-9)
    text = (
        f"{pol.gpu_hours:.2f} vs {ref.gpu_hours:.2f} GPU-h = {pol.gpu_hours / ref.gpu_hours:.3f} at "
        f"{pol.slo_violation_minutes} vs {ref.slo_violation_minutes} violation min (target <= {GPU_SLACK}; {note})"
    )
    return name, text, PASS if ok else FAIL


def reactive_oracle(
    load: LoadSeries,
    spec: RankingServiceSpec,
    model: ServiceModel,
    headroom: float,
    warmup: int,
    window_s: int | None = None,
) -> PoolResult:
    """A bound for *any* reactive policy: exact knowledge of the load, only pod start-up to wait for.

    Every 15 s it orders `ceil(headroom * L / per-replica load at the target utilisation)` replicas
    at once (no tolerance, no rate limits, no maxReplicas), where L is the highest per-second load
    of the last `window_s` seconds (default the scale-down window, `stabilizationSeconds.down`): it
    sees every burst the moment it starts, which no metric can. Its replicas still take the model's
    start-up time to serve.
    """
    cost = load.cost.tolist()
    if window_s is None:
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


def with_ratchet(spec: RankingServiceSpec) -> RankingServiceSpec:
    """The earlier one-way feedback: cut near the SLO, creep back slowly; no direction budget."""
    data = spec.model_dump(by_alias=True)
    data["autoscaling"]["sloFeedback"]["controller"] = "ratchet"
    data["autoscaling"]["hysteresis"]["enabled"] = False
    return RankingServiceSpec.model_validate(data)


def target_path(per_minute: list[float | None]) -> list[float]:
    """The effective target every 5 minutes of an hour (every hour of a longer run)."""
    step = 5 if len(per_minute) <= 90 else 60
    values = [x for x in per_minute[::step] if x is not None]
    return [round(x, 3) for x in values]


def variant_runs(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, mode: ScaleMode, static_gpu_hours: float
) -> dict[str, dict[str, float]]:
    out = {}
    for label, variant in (
        ("panic on", with_panic(spec)),
        ("ratchet feedback", with_ratchet(spec)),
        ("no SLO feedback", without_feedback(spec)),
    ):
        v = simulate(load, spec, model, spec_override=variant, scale_mode=mode, only=(POLICY,)).results[POLICY]
        out[label] = {
            "gpu_vs_static": round(v.gpu_hours / static_gpu_hours, 3),
            "violation_minutes": v.slo_violation_minutes,
            "violation_pct": round(v.violation_pct, 2),
            "direction_changes_per_hour": round(v.direction_changes_per_hour, 2),
        }
    return out


def run_case(
    sc: Scenario, mode: ScaleMode, spec: RankingServiceSpec, model: ServiceModel, quiet: bool
) -> tuple[dict[str, Any], bool, ReplayReport]:
    load = sc.series(mode)
    t0 = time.perf_counter()
    report = simulate(load, spec, model, service="bench-ranker", trace=sc.name, scale=sc.scale, scale_mode=mode)
    elapsed = time.perf_counter() - t0
    pol, rps, static = report.results[POLICY], report.results[HPA_RPS], report.results[STATIC_PEAK]
    rps_iso = rps_at_equal_gpu_hours(load, spec, model, pol.gpu_hours) if pol.gpu_hours > rps.gpu_hours else None
    rps_few = None
    if rps.slo_violation_minutes > pol.slo_violation_minutes:
        rps_few = rps_at_as_few_violations(load, spec, model, pol.slo_violation_minutes)
    limit = sc.slo_limit_pct
    # The fine oracle sweep decides OUT OF REACH; it only runs when the policy misses the target.
    reachable = None
    if pol.violation_pct > limit:
        reachable = reach(load, spec, model, static.gpu_hours, report.warmup_minutes, limit)
    checks = verdicts(report, sc.flash, rps_iso, reachable, rps_few, limit)
    oracle = oracle_table(load, spec, model, static.gpu_hours, report.warmup_minutes)
    variants = variant_runs(load, spec, model, mode, static.gpu_hours)
    targets = [x for x in pol.effective_target_per_minute if x is not None]
    out = {
        **report.to_dict(timeline=False),
        "checks": {k: {"value": v, "pass": st == PASS, "status": st} for k, v, st in checks},
        "reach": None if reachable is None else reachable.__dict__,
        "reactive_oracle": oracle,
        "variants": variants,
        "effective_target": {
            "min": round(min(targets), 3),
            "mean": round(float(np.mean(targets)), 3),
            "max": round(max(targets), 3),
            "path": target_path(pol.effective_target_per_minute),
        }
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
        "rps_as_few": None
        if rps_few is None or rps_few.run is None
        else {"utilisation": round(rps_few.run[0], 3), **rps_few.run[1].summary()},
        "sim_seconds": round(elapsed, 2),
    }
    if not quiet:
        print_case(sc, mode, report, checks, out, elapsed, limit, reachable)
    return out, all(st != FAIL for _, _, st in checks), report


def print_case(
    sc: Scenario,
    mode: ScaleMode,
    report: ReplayReport,
    checks: list[tuple[str, str, str]],
    out: dict[str, Any],
    elapsed: float,
    limit: float,
    reachable: Reach | None,
) -> None:
    print(f"\n=== {sc.name}, scale x{sc.scale:g}, mode {mode} (simulated in {elapsed:.1f}s) ===")
    print(report.to_table())
    for k, v, st in checks:
        print(f"  [{st}] {k}: {v}")
    tg = out["effective_target"]
    if tg:
        every = "5 min" if report.duration_seconds <= 90 * 60 else "hour"
        path = " ".join(f"{x:.2f}" for x in tg["path"])
        print(
            f"  effective SM target (targetSmActive 0.6): min {tg['min']:.3f}, mean {tg['mean']:.3f}, "
            f"max {tg['max']:.3f}"
        )
        print(f"    path, every {every}: {path}")
    for label, v in out["variants"].items():
        print(
            f"  {label}: {v['gpu_vs_static']:.3f} of static GPU-h, {v['violation_minutes']} violation min "
            f"({v['violation_pct']:.2f}%), {v['direction_changes_per_hour']:.2f} dir chg/h"
        )
    print(f"  reactive oracle (exact load, orders instantly, Ready {report.model.startup_seconds:g} s later):")
    for row in out["reactive_oracle"]:
        ok = row["violation_pct"] <= limit and row["gpu_vs_static"] <= GPU_TARGET
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


def cases(model: ServiceModel, spec: RankingServiceSpec, quick: bool, seeds: range) -> list[Scenario]:
    """The shared trace, then per seed a conversation hour and the flash-crowd swing (the 24 h day
    unless `quick`, whose one-hour form runs either way), then one plain diurnal day unless `quick`."""
    out = [shared_trace(model, spec)]
    for s in seeds:
        out += [conversation(23 + s), poisson_hour(11 + s)]
        if not quick:
            out.append(diurnal(flash=True, seed=7 + s))
    if not quick:
        out.append(diurnal(flash=False, seed=7 + seeds.start))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--plot", default=str(ROOT / "bench" / "autoscaling_replay.png"), help="PNG of the poisson-hour+flash run"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--quick", action="store_true", help="one-hour cases only, seeds 0:2 unless --seeds")
    ap.add_argument("--seeds", default=None, help="seed range A:B (B excluded), default 0:3 (0:2 with --quick)")
    args = ap.parse_args(argv)
    try:
        a, b = (int(x) for x in (args.seeds or ("0:2" if args.quick else "0:3")).split(":"))
    except ValueError:
        ap.error(f"--seeds: expected A:B (e.g. 0:3), got {args.seeds!r}")
    if b <= a:
        ap.error(f"--seeds: empty range {args.seeds!r}; B must be above A")

    model = ServiceModel()
    spec = RankingServiceSpec.model_validate(SERVICE)
    out: dict[str, Any] = {"service_model": model.describe(), "scenarios": {}}
    all_pass = True
    rows: list[tuple[str, dict[str, Any]]] = []
    plotted: tuple[ReplayReport, Scenario] | None = None
    for sc in cases(model, spec, args.quick, range(a, b)):
        for mode in MODES:
            case, ok, report = run_case(sc, mode, spec, model, args.json)
            out["scenarios"][f"{sc.name} / {mode}"] = case
            all_pass &= ok
            rows.append((f"{sc.name} / {mode}", case))
            if sc.family == "poisson-hour+flash" and mode == "independent" and plotted is None:
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
                "every target met, or out of reach for a reactive policy keeping the down window's peaks "
                "(shown with the oracle above)"
                if all_pass
                else "FAIL: a target that a reactive policy can reach is missed"
            )
        )
    return 0 if all_pass else 1


def print_summary(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """One line per case: each target's number and status, and the effective target's range."""
    print(
        "\nsummary (GPU-h/static; SLO-violation % after warm-up; policy vs RPS violation min at equal GPU-h; "
        "policy/RPS GPU-h at as few violation min; dir chg/h; effective target min-max)"
    )
    print(
        f"{'case / mode':36s} {'GPU':>6s}      {'viol %':>7s}               {'vs RPS min':>12s}        "
        f"{'GPU/RPS':>7s}       dir/h       target"
    )
    for name, case in rows:
        pol = case["policy"]
        c = case["checks"]
        ref = case["rps_equal_gpu"] or case["baselines"][HPA_RPS]
        few = case["rps_as_few"] or case["baselines"][HPA_RPS]
        st = {k: c[k]["status"] for k in c}
        gpu = pol["gpu_hours"] / case["baselines"][STATIC_PEAK]["gpu_hours"]
        tg = case["effective_target"] or {"min": 0.0, "max": 0.0}
        few_ratio = pol["gpu_hours"] / few["gpu_hours"] if few["gpu_hours"] else float("nan")
        print(
            f"{name:36s} {gpu:6.3f} {st['GPU-hours vs static peak']:4s} {pol['slo_violation_pct_after_warmup']:6.2f}% "
            f"{st['SLO-violation minutes after warm-up']:12s} {pol['slo_violation_minutes']:>4d} vs "
            f"{ref['slo_violation_minutes']:<5.4g} {st['vs RPS baseline at equal or lower GPU-hours']:4s}  "
            f"{few_ratio:6.3f} {st['vs RPS baseline at as few violation minutes']:4s}  "
            f"{pol['direction_changes_per_hour']:5.2f} {st['direction changes/hour']:4s}  "
            f"{tg['min']:.2f}-{tg['max']:.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
