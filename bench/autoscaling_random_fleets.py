"""Fleets drawn at random: the policy's invariants on any fleet, and where its SLO loop ends.

Run:  python bench/autoscaling_random_fleets.py [--draws N] [--seed S] [--jobs N] [--both-sides]

Every sweep of `bench/autoscaling_sweeps.py` replays a fleet someone chose. This one draws them: a
p99 curve (5-25 ms idle, rising 0.5-25 ms to each of one to four knees, then 5-300 ms more to full
load), an SM-active curve with or without an idle floor, a pod's throughput, its start and
model-load times, a declared `targetSmActive` (0.40-0.75) and an SLO (25-80 ms), each over a family
of `bench/autoscaling_seeds.py` at a seed in 5000-8999 and a scale mode, all drawn from `--seed`.
Many such fleets cannot meet their SLO near the declared target, and some not at any load a pool
would run at: a bench for what the policy promises on any fleet, which reports its comparisons with
RPS (below) but fails only on a broken invariant.

Each case checks:
- no hour holds more than `hysteresis.maxDirectionChangesPerHour` direction changes;
- the SLO loop's target stays within its floor and ceiling (`minTargetFraction`, `maxTargetFraction`);
- no scale-down on a fresh p99 over the SLO or with no usable SM reading
  (`replay.autoscalers.unsafe_scale_down`, at every sync of the policy's pool).

and is sorted by how the SLO loop ended, as the pool's TargetLearned condition reads it:
`HeldAtFloor` (held at its floor for half an hour: the p99 may need less than the loop may go to),
`HeldBelowDeclared` (held at or below 0.8 x targetSmActive above the floor), or neither. Each class
prints the policy's and HPA on RPS's GPU-hours (of static peak) and violation minutes, and how many
of its cases lose to HPA on RPS's own run (`against_rps`): worse (more violation minutes at no
more GPU-hours) or dearer (more than `autoscaling_verdicts.GPU_SLACK`, 1.05, x its GPU-hours at
no fewer minutes). That is the sweeps' two comparisons, judged by their own functions, read
one-sided by default: a case where the policy spends more and RPS misses more is judged by
neither. `--both-sides` judges them as the sweeps do, RPS's target bisected to the policy's
GPU-hours (`rps_at_equal`) and to its violation minutes (`rps_at_as_few_violations`), which takes
the bench from seconds to minutes, and adds up where the lost cases lost, by phase of the load as
`bench/autoscaling_explain.py` reads a kept sweep (`by_phase`). Exit status 1 where a case breaks
an invariant; the comparisons are reported, since a fleet whose SLO no pool meets loses either way.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from autoscaling_explain import PHASES, load_phases, minutes_only_in, replica_minutes_above
from autoscaling_replay import MODES, SERVICE  # bench/ on sys.path
from autoscaling_seeds import FAMILIES, with_field
from autoscaling_verdicts import FAIL, gpu_at_as_few, no_more_minutes, rps_at_as_few_violations, rps_at_equal

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.learned import loop_bounds_as_read
from gem_operator.replay.engine import HPA_RPS, POLICY, STATIC_PEAK, simulate
from gem_operator.replay.report import PoolResult, ReplayReport
from gem_operator.replay.service_model import ServiceModel
from gem_operator.replay.traces import LoadSeries, ScaleMode

SEEDS = (5000, 9000)  # far from every sweep's seeds


@dataclass(frozen=True)
class Draw:
    """One case: the fleet's service model, the declared target and SLO, the traffic."""

    model: ServiceModel
    target: float
    slo_ms: float
    family: str
    seed: int
    mode: ScaleMode

    @property
    def name(self) -> str:
        return f"{self.family} s{self.seed} / {self.mode}, target {self.target:g}, SLO {self.slo_ms:g} ms"


@dataclass(frozen=True)
class Outcome:
    """What one case did: the policy's and RPS's GPU-hours of static, each pool's violation minutes,
    the TargetLearned reason it ended with (None: it never turned True), what broke, if anything,
    and how it lost to RPS (`against_rps` on its own run, or `against_rps_line`; None: it did not),
    with where by phase of the load where judged against RPS's line (`against_rps_line`)."""

    draw: Draw
    policy_share: float
    rps_share: float
    minutes: tuple[int, int, int]  # policy, HPA on RPS, static peak
    learned: str | None
    broken: tuple[str, ...]
    lost: str | None = None
    by_phase: dict[str, float] = field(default_factory=dict)


def draw_model(rng: random.Random) -> ServiceModel:
    """A fleet: a rising p99 curve, an SM curve (a third of them with an idle floor), throughput, starts."""
    idle_p99 = rng.uniform(5, 25)
    knees = sorted(rng.sample([i / 20 for i in range(1, 20)], rng.randint(1, 4)))
    p99 = [idle_p99]
    for _ in knees:
        p99.append(p99[-1] + rng.uniform(0.5, 25))
    p99.append(p99[-1] + rng.uniform(5, 300))
    idle_sm = rng.choice([0.0, 0.0, rng.uniform(0.02, 0.35)])
    return ServiceModel(
        throughput_per_replica=rng.uniform(50, 400),
        latency_p99_ms=tuple(zip([0.0, *knees, 1.0], p99, strict=True)),
        sm_active=((0.0, idle_sm), (1.0, rng.uniform(max(idle_sm + 0.3, 0.6), 1.0))),
        pod_start_seconds=rng.uniform(5, 90),
        model_load_seconds=rng.choice([rng.uniform(5, 60), rng.uniform(60, 300), rng.uniform(300, 600)]),
    )


def draws(count: int, seed: int) -> list[Draw]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        model = draw_model(rng)
        target, slo_ms = round(rng.uniform(0.40, 0.75), 2), float(round(rng.uniform(25, 80)))
        family, traffic_seed = rng.choice(sorted(FAMILIES)), rng.randrange(*SEEDS)
        out.append(Draw(model, target, slo_ms, family, traffic_seed, rng.choice(MODES)))
    return out


def draw_inputs(draw: Draw) -> tuple[RankingServiceSpec, LoadSeries]:
    """The service a draw replays (the bench's, with its target and SLO) and its load."""
    service = with_field(SERVICE, "autoscaling.targetSmActive", draw.target)
    spec = RankingServiceSpec.model_validate(with_field(service, "slo.p99LatencyMs", draw.slo_ms))
    return spec, FAMILIES[draw.family](draw.seed).series(draw.mode)


def run_case(draw: Draw, both_sides: bool = False) -> Outcome:
    spec, load = draw_inputs(draw)
    report = simulate(load, spec, draw.model, scale_mode=draw.mode)
    pol, rps, static = (report.results[k] for k in (POLICY, HPA_RPS, STATIC_PEAK))
    minutes = (pol.slo_violation_minutes, rps.slo_violation_minutes, static.slo_violation_minutes)
    share = pol.gpu_hours / static.gpu_hours, rps.gpu_hours / static.gpu_hours
    broken = broken_invariants(spec, pol)
    lost, by_phase = against_rps_line(load, spec, draw.model, report) if both_sides else (against_rps(pol, rps), {})
    return Outcome(draw, share[0], share[1], minutes, pol.target_learned_reason, broken, lost, by_phase)


def run_both_sides(draw: Draw) -> Outcome:
    """`run_case` judged against RPS's line (a top-level function: the process pool pickles it)."""
    return run_case(draw, both_sides=True)


def broken_invariants(spec: RankingServiceSpec, pol: PoolResult) -> tuple[str, ...]:
    """What the policy's pool broke of the invariants it keeps on any fleet (none: an empty tuple)."""
    broken = []
    budget = spec.autoscaling.hysteresis.max_direction_changes_per_hour
    if pol.direction_changes_per_hour > budget:
        broken.append(f"{pol.direction_changes_per_hour:g} direction changes in an hour (budget {budget})")
    path = [t for t in pol.effective_target_per_minute if t is not None]
    floor, ceiling = loop_bounds_as_read(spec.autoscaling)
    if path and (min(path) < floor - 1e-9 or max(path) > ceiling + 1e-9):
        broken.append(f"SM target {min(path):.3f}..{max(path):.3f} outside the loop's {floor:.3f}..{ceiling:.3f}")
    broken.extend(f"{why} at {when:.0f}s" for when, why in pol.unsafe_scale_downs)
    return tuple(broken)


def against_rps(pol: PoolResult, rps: PoolResult) -> str | None:
    """`worse` or `dearer` where the policy loses to HPA on RPS's own run (None: neither), judged as
    the sweeps judge it (`autoscaling_verdicts`), with no re-run of RPS: at equal GPU-hours only
    where the policy spends no more, at as few minutes only where RPS has as few."""
    if pol.gpu_hours <= rps.gpu_hours and not no_more_minutes(pol, rps.slo_violation_minutes, rps.gpu_hours):
        return "worse"
    if gpu_at_as_few(pol, rps, None)[2] == FAIL:
        return "dearer"
    return None


def against_rps_line(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, report: ReplayReport
) -> tuple[str | None, dict[str, float]]:
    """`worse` or `dearer` as the sweeps' verdicts judge a case (None: neither): against RPS's run at
    the policy's GPU-hours, bisected where RPS's own run spends less (`rps_at_equal`), and against
    its cheapest run with as few violation minutes, bisected where its own run has more. With it,
    where the case lost, by phase of the load (`autoscaling_explain.load_phases`): worse, the
    minutes over the SLO the policy has and RPS at its GPU-hours has not (RPS's run read minute by
    minute as `autoscaling_explain.py` reads it); dearer, the replica-minutes above RPS at as few."""
    pol, rps = report.results[POLICY], report.results[HPA_RPS]
    phases = load_phases(report.load_per_minute, spec.autoscaling)
    equal = rps_at_equal(load, spec, model, pol, rps)
    if not no_more_minutes(pol, equal.minutes, equal.gpu_hours):
        only, _ = minutes_only_in(pol, equal.run, spec.slo.p99_latency_ms)
        return "worse", {p: float(sum(phases[m] == p for m in only)) for p in PHASES}
    few = None
    if rps.slo_violation_minutes > pol.slo_violation_minutes:
        few = rps_at_as_few_violations(load, spec, model, pol.slo_violation_minutes)
    if gpu_at_as_few(pol, rps, few)[2] != FAIL:
        return None, {}
    cheapest = rps if few is None or few.run is None else few.run[1]
    return "dearer", replica_minutes_above(pol, cheapest, phases)


OWN_RUN, LINE = "RPS's run", "RPS at equal GPU-h or as few minutes"


def summary(outcomes: Sequence[Outcome], against: str = OWN_RUN) -> list[str]:
    """One line per class of how the loop ended: cases, GPU-hours of static, violation minutes, and
    the cases worse and dearer than RPS (`against`: its own run, or its line)."""
    classes: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        classes[o.learned or "neither"].append(o)
    lines = [
        "class               cases  policy GPU-h/static (mean, max)  RPS mean   violation min: policy / RPS / static"
        f"   worse / dearer than {against}"
    ]
    for name in ("HeldAtFloor", "HeldBelowDeclared", "neither"):
        group = classes.get(name, [])
        if not group:
            continue
        pol = [o.policy_share for o in group]
        rps = sum(o.rps_share for o in group) / len(group)
        mins = [sum(o.minutes[i] for o in group) for i in range(3)]
        lost = [o.lost for o in group]
        lines.append(
            f"{name:<19} {len(group):>5}  {sum(pol) / len(pol):>10.3f} {max(pol):>8.3f}            {rps:>8.3f}"
            f"   {mins[0]} / {mins[1]} / {mins[2]}   {lost.count('worse')} / {lost.count('dearer')}"
        )
    return lines


def by_phase(outcomes: Sequence[Outcome]) -> list[str]:
    """Where the cases judged against RPS's line lost, added up by phase of the load: the worse
    cases' minutes over the SLO that RPS at the policy's GPU-hours has not, the dearer cases'
    replica-minutes above RPS at as few violation minutes (`against_rps_line`)."""
    lines = []
    for verdict, what, fmt in (
        ("worse", "minutes over the SLO that RPS at equal GPU-hours has not", "{:.0f}"),
        ("dearer", "replica-minutes above RPS at as few violation minutes", "{:+.0f}"),
    ):
        cases = [o for o in outcomes if o.lost == verdict]
        total = {p: sum(o.by_phase.get(p, 0.0) for o in cases) for p in PHASES}
        split = ", ".join(f"{p} {fmt.format(total[p])}" for p in PHASES)
        lines.append(f"{len(cases)} {verdict} cases, {what}, by phase: {split}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--draws", type=int, default=60, help="cases drawn (each an hour's replay, three pools)")
    ap.add_argument("--seed", type=int, default=1, help="the draw's random seed")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases replayed at once (one per CPU)")
    ap.add_argument(
        "--both-sides",
        action="store_true",
        help="judge each case against RPS's target bisected to the policy's GPU-hours and minutes, as the sweeps do",
    )
    args = ap.parse_args(argv)
    if args.draws < 1:
        ap.error(f"--draws: {args.draws}; draw at least one case")
    if args.jobs < 1:
        ap.error(f"--jobs: {args.jobs}; replay at least one case at a time")
    against = LINE if args.both_sides else OWN_RUN
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(run_both_sides if args.both_sides else run_case, draws(args.draws, args.seed)))
    for o in outcomes:
        mark = "BROKEN " if o.broken else ""
        lost = o.lost
        print(
            f"{mark}{o.draw.name}: policy {o.policy_share:.3f} of static GPU-h, RPS {o.rps_share:.3f}; "
            f"violation min {o.minutes[0]} / {o.minutes[1]} / {o.minutes[2]}; TargetLearned {o.learned or '-'}"
            + ("" if lost is None else f"; {lost} than {against}")
            + "".join(f"; {b}" for b in o.broken)
        )
    print()
    print("\n".join(summary(outcomes, against)))
    if args.both_sides:
        print("\n".join(by_phase(outcomes)))
    broken = sum(1 for o in outcomes if o.broken)
    print(f"{broken} of {len(outcomes)} cases break an invariant")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
