"""Where the policy loses to HPA on RPS: a kept sweeps run's worse and dearer cases, minute by minute.

Run:  python bench/autoscaling_explain.py DIR [--only SET[/SWEEP] ...] [--jobs N]

`bench/autoscaling_sweeps.py --out DIR` keeps each case's verdicts; the counts say how many cases
the policy lost, not where in the hour. This replays every case DIR judged worse (more violation
minutes than HPA on RPS at equal GPU-hours) or dearer (over 1.05x RPS's GPU-hours at as few
violation minutes) and says where:

- worse: the minutes over the SLO in the policy's run and not in RPS's run at equal GPU-hours
  (RPS's own run where the policy spends no more, otherwise the upper of the two runs
  `rps_at_equal_gpu_hours` interpolates between), and the minutes the other way round, each with
  both pools' replicas;
- dearer: the replica-minutes the policy ran above RPS at as few violation minutes (RPS's own run
  where it has as few, otherwise `rps_at_as_few_violations`'s);

each by the phase of the load at that minute (`load_phases`): the first minutes, when the pool has
no history yet; a rise; the minutes just before a rise (read in hindsight: what a lead would have
had to see coming); under the down window's peak, when a pool holds or gives back what a higher
load needed; and a level. The last lines add the phases up over every case: the phase that holds
most of the lost minutes or the extra replica-minutes is where a rule has to act to move the counts
(docs/benchmarks.md reads the runs it kept this way). It reports and judges nothing; a case it
cannot replay stops it, naming the case. `bench/autoscaling_minutes.py` prints one case's minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from autoscaling_replay import MODES  # bench/ on sys.path
from autoscaling_seeds import SweepInputs, parser, sweep_inputs
from autoscaling_sweeps import SETS
from autoscaling_verdicts import rps_as_few_run, rps_at_equal

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.replay.engine import HPA_RPS, POLICY, simulate
from gem_operator.replay.report import PoolResult, ReplayReport
from gem_operator.replay.traces import LoadSeries

FIRST_MINUTES = 10  # the ramp lead's window and the SLO loop's first windows fill in these
RISE_MINUTES = 5  # a minute rises when it is over the mean of this many before it by more than tolerance.up
AHEAD_MINUTES = 3  # ... and comes before a rise when the mean of this many after it is
PHASES = ("first minutes", "rising", "before a rise", "under the down window's peak", "level")


def load_phases(load: Sequence[float], spec: AutoscalingSpec) -> list[str]:
    """The phase of each minute of `load` (one of `PHASES`, the first that applies). Pure.

    Rising and falling are judged by the spec's own tolerances, and the peak by its down window:
    what the policy itself would count as a change of load and as capacity it may still hold."""
    up, down = 1 + spec.tolerance.up, 1 - spec.tolerance.down
    window = max(1, spec.stabilization_seconds.down // 60)
    out: list[str] = []
    for m, now in enumerate(load):
        before = load[max(0, m - RISE_MINUTES) : m]
        after = load[m + 1 : m + 1 + AHEAD_MINUTES]
        if m < FIRST_MINUTES:
            out.append(PHASES[0])
        elif before and now > up * sum(before) / len(before):
            out.append(PHASES[1])
        elif after and sum(after) / len(after) > up * now:
            out.append(PHASES[2])
        elif now < down * max(load[max(0, m - window) : m + 1]):
            out.append(PHASES[3])
        else:
            out.append(PHASES[4])
    return out


def over_slo(run: PoolResult, slo_ms: float) -> list[int]:
    """The minutes `run` spent over the SLO (a minute without a p99 is not one)."""
    return [m for m, p in enumerate(run.p99_ms_per_minute) if p is not None and p > slo_ms]


def minutes_only_in(pol: PoolResult, equal: PoolResult, slo_ms: float) -> tuple[list[int], list[int]]:
    """The minutes over the SLO that `pol` has and `equal` (RPS at equal GPU-hours) has not, and
    the other way round."""
    mine, theirs = over_slo(pol, slo_ms), over_slo(equal, slo_ms)
    return [m for m in mine if m not in theirs], [m for m in theirs if m not in mine]


def replica_minutes_above(pol: PoolResult, few: PoolResult, phases: Sequence[str]) -> dict[str, float]:
    """The replica-minutes `pol` ran above `few` (RPS at as few violation minutes), by phase (one
    entry per `PHASES`; a minute below it counts against its phase)."""
    extra = dict.fromkeys(PHASES, 0.0)
    for m, (a, b) in enumerate(zip(pol.replicas_per_minute, few.replicas_per_minute, strict=True)):
        extra[phases[m]] += a - b
    return extra


@dataclass(frozen=True)
class Explained:
    """One case, read minute by minute (`explain_case`)."""

    where: str
    lines: list[str]
    lost_minutes: Counter[str] = field(default_factory=Counter)  # worse: the policy's own minutes over the SLO
    extra_replica_minutes: dict[str, float] = field(default_factory=dict)  # dearer: above RPS at as few


def replay_case(sweep_args: Sequence[str], case: str, mode: str) -> tuple[SweepInputs, LoadSeries, ReplayReport]:
    """One kept case of a sweep (`sweep_args`: its `autoscaling_seeds.py` arguments) replayed: the
    sweep's inputs, the case's load and its report. ValueError where the sweep makes no such case."""
    inputs = sweep_inputs(parser().parse_args(list(sweep_args)))
    scenario = dict(inputs.cases).get(case)
    scale_mode = next((m for m in MODES if m == mode), None)
    if scenario is None or scale_mode is None:
        raise ValueError(f"{case!r} / {mode!r}: no such case in a sweep of {' '.join(sweep_args)}")
    load = scenario.series(scale_mode)
    return inputs, load, simulate(load, inputs.spec, inputs.model, scale_mode=scale_mode)


def explain_case(sweep_args: Sequence[str], case: str, mode: str, *, worse: bool, dearer: bool) -> Explained:
    """Replay one kept case of a sweep (`sweep_args`: its `autoscaling_seeds.py` arguments) and say
    where it lost: see the module docstring."""
    inputs, load, report = replay_case(sweep_args, case, mode)
    spec, model = inputs.spec, inputs.model
    pol, rps = report.results[POLICY], report.results[HPA_RPS]
    phases = load_phases(report.load_per_minute, spec.autoscaling)
    slo = spec.slo.p99_latency_ms
    lines: list[str] = []
    lost: Counter[str] = Counter()
    extra = dict.fromkeys(PHASES, 0.0)
    if worse:
        equal = rps_at_equal(load, spec, model, pol, rps).run
        only, theirs_only = minutes_only_in(pol, equal, slo)
        lost.update(phases[m] for m in only)

        def at(minutes: list[int]) -> str:
            return ", ".join(
                f"{m} ({phases[m]}, {pol.replicas_per_minute[m]:g} vs {equal.replicas_per_minute[m]:g} replicas)"
                for m in minutes
            )

        lines.append(
            f"worse: {len(over_slo(pol, slo))} min over the SLO, RPS at {equal.gpu_hours / pol.gpu_hours:.3f}x the "
            f"policy's GPU-hours {len(over_slo(equal, slo))}; the policy only at {at(only) or 'none'}; RPS only at "
            f"{at(theirs_only) or 'none'}"
        )
    if dearer:
        found = rps_as_few_run(load, spec, model, pol, rps)
        if found is None:
            raise ValueError(f"{case} {mode}: kept as dearer, but no RPS run has as few violation minutes")
        few = found[1]
        extra = replica_minutes_above(pol, few, phases)
        split = ", ".join(f"{p} {extra[p]:+.0f}" for p in PHASES if extra[p])
        lines.append(
            f"dearer: {pol.gpu_hours / few.gpu_hours:.3f}x the GPU-hours of RPS at as few violation minutes "
            f"({few.slo_violation_minutes}); replica-minutes above it {sum(extra.values()):+.0f}: {split}"
        )
    return Explained(f"{case} {mode}", lines, lost, extra)


Job = tuple[str, tuple[str, ...], str, str, bool, bool]
"""(set/sweep, its arguments, case, mode, worse, dearer)."""


def kept_cases(root: Path, only: Sequence[str] = (), *, losses_only: bool = True) -> list[Job]:
    """The cases a run kept with `--out ROOT` judged worse or dearer (`losses_only` False: every
    case), in the sets' order; `only`: SET or SET/SWEEP names to keep (none: all)."""
    jobs: list[Job] = []
    for set_name, sweeps in SETS.items():
        for sweep_name, args in sweeps:
            name = f"{set_name}/{sweep_name}"
            path = root / set_name / f"{sweep_name}.json"
            if (only and set_name not in only and name not in only) or not path.exists():
                continue
            for case in json.loads(path.read_text(encoding="utf-8")).get("per_case", []):
                if case["worse"] or case["dearer"] or not losses_only:
                    jobs.append((name, args, str(case["case"]), str(case["mode"]), case["worse"], case["dearer"]))
    return jobs


def kept_run_args(
    doc: str | None, argv: list[str] | None, *, every: str | None = None
) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The arguments of a script that reads a kept run (DIR, --only, --jobs; `every`: a flag that
    reads every kept case, not only the losses), checked: each parser error (exit 2) names the
    option and what it needs."""
    ap = argparse.ArgumentParser(description=next(iter((doc or "").splitlines()), None))
    ap.add_argument("run", type=Path, metavar="DIR", help="a run kept with bench/autoscaling_sweeps.py --out DIR")
    ap.add_argument("--only", action="append", default=[], metavar="SET[/SWEEP]", help="only these sets or sweeps")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases replayed at once (one per CPU)")
    if every is not None:
        ap.add_argument(every, action="store_true", help="every kept case, not only those judged worse or dearer")
    args = ap.parse_args(argv)
    if not any(args.run.glob("*/*.json")):
        ap.error(f"DIR: {args.run} holds no kept sweep (DIR/SET/SWEEP.json from autoscaling_sweeps.py --out DIR)")
    known = set(SETS) | {f"{s}/{w}" for s, sweeps in SETS.items() for w, _ in sweeps}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        ap.error(f"--only: no set or sweep named {', '.join(unknown)}")
    if args.jobs < 1:
        ap.error(f"--jobs: {args.jobs}; replay at least one case at a time")
    return ap, args


Got = TypeVar("Got")


def replay_kept(
    prog: str, run: Callable[[Job], Got], jobs: Sequence[Job], at_once: int, each: Callable[[Got], None]
) -> int:
    """Replay `jobs` with `run`, `at_once` at a time, handing each result to `each` in the jobs'
    order: 0, or 1 with the reason on stderr where a kept case is one this checkout's sweeps do not
    make (the cases not yet started are then not replayed for nothing)."""
    with ProcessPoolExecutor(max_workers=at_once) as pool:
        try:
            for got in pool.map(run, jobs):
                each(got)
        except ValueError as exc:
            pool.shutdown(cancel_futures=True)
            print(f"{prog}: cannot replay {exc}", file=sys.stderr)
            return 1
    return 0


def run_job(job: Job) -> Explained:
    name, args, case, mode, worse, dearer = job
    try:
        got = explain_case(args, case, mode, worse=worse, dearer=dearer)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return Explained(f"{name} {got.where}", got.lines, got.lost_minutes, got.extra_replica_minutes)


def main(argv: list[str] | None = None) -> int:
    ap, args = kept_run_args(__doc__, argv)
    jobs = kept_cases(args.run, args.only)
    lost: Counter[str] = Counter()
    extra = dict.fromkeys(PHASES, 0.0)

    def each(got: Explained) -> None:
        nonlocal lost
        print(f"{got.where}:")
        for line in got.lines:
            print(f"  {line}")
        lost += got.lost_minutes
        for phase, minutes in got.extra_replica_minutes.items():
            extra[phase] += minutes

    if replay_kept(ap.prog, run_job, jobs, args.jobs, each):
        return 1
    worse, dearer = sum(j[4] for j in jobs), sum(j[5] for j in jobs)
    print(f"{worse} worse cases: minutes over the SLO the policy has and RPS at its GPU-hours has not, by phase:")
    print("  " + ", ".join(f"{p} {lost[p]}" for p in PHASES))
    print(f"{dearer} dearer cases: replica-minutes above RPS at as few violation minutes, by phase:")
    print("  " + ", ".join(f"{p} {extra[p]:+.0f}" for p in PHASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
