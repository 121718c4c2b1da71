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
judged). Any other miss is a FAIL, and the exit status is 1 on a FAIL; an SLO-minute FAIL with no
more minutes than the oracle at x1 says so (the floor the issue allows, reported as such: a FAIL
here all the same, since a reactive policy meets it within the GPU-hour target). Each
case prints its effective SM target's path (every 5 minutes of an hour, every hour of a day);
a summary table ends the run. How a case is judged (the RPS re-runs, the oracle, the verdicts) is
in `autoscaling_verdicts.py`.

Feasibility: for each case a "reactive oracle" (exact per-second load, orders at every 15 s
sync with no tolerance or rate limit, holds the peak of the scale-down window, replicas still take
the model's 120 s to serve) is run with headroom x1..x4. Its violation minutes at x1 are the floor
no signal could remove; the headroom it needs to meet the SLO target, and the GPU-hours that
costs against static peak, show whether a target is reachable without clairvoyance. Where the spec
lets the SLO loop raise its target above `targetSmActive` (`maxTargetFraction` above 1; by default
its ceiling is the target itself), the oracle is also run at that highest effective target (headroom
1 / `maxTargetFraction`): what it spends there says whether the GPU-hour target is within reach of a
reactive policy that stays within the spec's bounds. By default the oracle at x1 says it: on the
conversation hours' duplicate draws it is often not (the x1 oracle spends more than 0.75 of static).
It is shown, not judged: a GPU-hour miss is a FAIL.

Variants measured on every case: panic mode on (`spec.autoscaling.panic`, off by default), the
earlier ratchet feedback (`sloFeedback.controller: ratchet`, no direction budget), and no SLO
feedback at all, each as GPU-hours and violation minutes beside the default.

The RankingService under test: SLO p99 40 ms, targetSmActive 0.6, HPA-default tolerance and rate
policies, 0 s up / 900 s down stabilisation (see SERVICE), 2..128 replicas.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import (
    HPA_RPS,
    POLICY,
    STATIC_PEAK,
    LoadSeries,
    ReplayReport,
    simulate,
)
from gem_operator.replay.service_model import ServiceModel
from gem_operator.replay.traces import ScaleMode
from gem_testbed.plots.replay import plot_report

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this file, however it is loaded
from autoscaling_scenarios import (
    ROOT,
    Scenario,
    conversation,
    diurnal,
    poisson_hour,
    shared_trace,
)
from autoscaling_verdicts import (
    FAIL,
    GPU_TARGET,
    PASS,
    Reach,
    oracle_table,
    reach,
    rps_at_as_few_violations,
    rps_at_equal,
    verdicts,
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
    rps_equal = rps_at_equal(load, spec, model, pol, rps)
    rps_iso = rps_equal.bisection
    rps_few = None
    if rps.slo_violation_minutes > pol.slo_violation_minutes:
        rps_few = rps_at_as_few_violations(load, spec, model, pol.slo_violation_minutes)
    limit = sc.slo_limit_pct
    # The fine oracle sweep decides OUT OF REACH; it only runs when the policy misses the target.
    reachable = None
    if pol.violation_pct > limit:
        reachable = reach(load, spec, model, static.gpu_hours, report.warmup_minutes, limit)
    checks = verdicts(report, sc.flash, rps_equal, reachable, rps_few, limit)
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
            f"    headroom x{row['headroom']:<5g} {row['violation_minutes']:>4d} violation min "
            f"({row['violation_pct']:.2f}%), {row['gpu_vs_static']:.3f} of static GPU-h, "
            f"{row['direction_changes_per_hour']:.2f} dir chg/h{'  <- meets SLO and GPU targets' if ok else ''}"
            + (f"  ({row['at']})" if "at" in row else "")
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
