"""How much of a verdict against HPA on RPS is RPS's own spread: a kept run's cases judged on RPS's lines.

Run:  python bench/autoscaling_spread.py DIR [--only SET[/SWEEP] ...] [--jobs N] [--all]

Each comparison of `bench/autoscaling_sweeps.py` with RPS reads one RPS run, or two interpolated,
at the utilisation target a bisection found. RPS's GPU-hours and violation minutes are not smooth
in that target: whether a reading keeps a replica is a path a target 0.01 away may not take, and
its GPU-hours move by a few percent between neighbouring targets, the size of the 1.05 slack the
dearer comparison allows. So a verdict compares the policy with one draw of RPS. This re-runs RPS
at `NEIGHBOURS` targets either side of the one a verdict read, `STEP` apart, fits a least-squares
line through them and judges the case against the line as the sweep judges it against the run:

- worse (more violation minutes than RPS at equal GPU-hours): RPS's violation minutes against its
  GPU-hours, read at the GPU-hours the verdict compared at (the policy's, or RPS's own where RPS
  spends more);
- dearer (over 1.05 x RPS's GPU-hours at as few violation minutes): RPS's GPU-hours against its
  utilisation target, read at the target whose run had as few minutes.

Each case prints its verdicts at RPS's run and on RPS's line, with the line's residual spread; the
last lines count the cases each way. By default only the cases DIR judged worse or dearer are read
(whether a loss stands beyond RPS's spread); `--all` reads every case, so the count also holds the
cases the line judges worse or dearer where the run did not (the spread cuts both ways). It judges
nothing for the sweeps: their verdicts stay the ones at RPS's runs.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from autoscaling_explain import Job, kept_cases, kept_run_args, replay_case, replay_kept  # bench/ on sys.path
from autoscaling_verdicts import GPU_SLACK, rps_as_few_run, rps_at_equal

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import HPA_RPS, POLICY, simulate
from gem_operator.replay.report import PoolResult
from gem_operator.replay.service_model import ServiceModel
from gem_operator.replay.traces import LoadSeries

NEIGHBOURS = 6  # RPS runs either side of the verdict's target
STEP = 0.005  # apart in utilisation: the line spans +-0.03, where the runs' spread is
LOWEST = 0.05  # the lowest target the verdicts' bisections try

Point = tuple[float, float]


@dataclass(frozen=True)
class Line:
    """A least-squares line y = intercept + slope * x and the spread of its points about it."""

    intercept: float
    slope: float
    spread: float  # residual standard deviation

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def fitted(points: Sequence[Point]) -> Line:
    """The least-squares line through `points` (x, y). Pure. Where every x is the same (or there is
    one point) the line is flat at the mean of y: no slope can be read."""
    if not points:
        raise ValueError("no points to fit a line through")
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    if len(points) < 2 or float(np.ptp(xs)) == 0.0:
        return Line(float(ys.mean()), 0.0, float(ys.std()))
    slope, intercept = np.polyfit(xs, ys, 1)
    residuals = ys - (intercept + slope * xs)
    return Line(float(intercept), float(slope), float(residuals.std()))


def minutes_on(line: Line, gpu_hours: float) -> float:
    """RPS's violation minutes on `line` at `gpu_hours`. Pure. Never below 0: a line fitted through
    runs with few minutes may cross zero, and a policy with none is not worse than it."""
    return max(0.0, line.at(gpu_hours))


def neighbours(utilisation: float) -> list[float]:
    """The targets RPS is re-run at around `utilisation` (itself included), none below `LOWEST`."""
    around = (utilisation + k * STEP for k in range(-NEIGHBOURS, NEIGHBOURS + 1))
    return [u for u in around if u >= LOWEST - 1e-12]


def rps_runs(
    load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, utilisation: float
) -> list[tuple[float, PoolResult]]:
    """RPS re-run at each of `neighbours(utilisation)`."""
    return [
        (u, simulate(load, spec, model, rps_utilisation=u, only=(HPA_RPS,)).results[HPA_RPS])
        for u in neighbours(utilisation)
    ]


@dataclass(frozen=True)
class Spread:
    """One case judged at RPS's run and on RPS's line (`spread_case`)."""

    where: str
    worse: tuple[bool, bool]  # (at RPS's run, on RPS's line)
    dearer: tuple[bool, bool]
    line: str


def spread_case(sweep_args: Sequence[str], case: str, mode: str) -> Spread:
    """Replay one case of a sweep (`sweep_args`: its `autoscaling_seeds.py` arguments) and judge it
    at RPS's runs, as the sweep does, and on the lines through RPS's neighbouring runs."""
    inputs, load, report = replay_case(sweep_args, case, mode)
    spec, model = inputs.spec, inputs.model
    pol, rps = report.results[POLICY], report.results[HPA_RPS]
    minutes = pol.slo_violation_minutes

    # Worse, as `autoscaling_verdicts.verdicts` judges it: RPS's own run where it spends more.
    equal = rps_at_equal(load, spec, model, pol, rps)
    at_run, at_gpu = equal.minutes, equal.gpu_hours
    runs = rps_runs(load, spec, model, equal.utilisation)
    minutes_line = fitted([(r.gpu_hours, float(r.slo_violation_minutes)) for _, r in runs])
    on_line = minutes_on(minutes_line, at_gpu)
    worse = (minutes > at_run + 1e-9, minutes > on_line + 1e-9)

    # Dearer: the target whose run has as few minutes (RPS's own where it has).
    few_at = rps_as_few_run(load, spec, model, pol, rps)
    if few_at is None:  # no RPS target has as few: the policy is not dearer on either reading
        dearer, few_text = (False, False), f"no RPS target down to {LOWEST} has as few as {minutes} violation min"
    else:
        u, few = few_at
        gpu_line = fitted([(v, r.gpu_hours) for v, r in rps_runs(load, spec, model, u)])
        run_ratio, line_ratio = pol.gpu_hours / few.gpu_hours, pol.gpu_hours / gpu_line.at(u)
        dearer = (run_ratio > GPU_SLACK, line_ratio > GPU_SLACK)
        few_text = (
            f"{run_ratio:.3f}x the GPU-hours of RPS's run at utilisation {u:.3f}, {line_ratio:.3f}x its line "
            f"(the runs spread {gpu_line.spread / gpu_line.at(u):.1%} about it)"
        )
    text = (
        f"{minutes} min over the SLO; RPS at {at_gpu:.2f} GPU-h {at_run:.2f} at its run(s), {on_line:.2f} on its line "
        f"(spread {minutes_line.spread:.2f} min); {few_text}"
    )
    return Spread(f"{case} {mode}", worse, dearer, text)


def mark(verdict: tuple[bool, bool], name: str) -> str:
    """'worse at RPS's run and on its line', or the like, for one comparison."""
    at_run, on_line = verdict
    if at_run and on_line:
        return f"{name} at RPS's run and on its line"
    if at_run:
        return f"{name} at RPS's run, not on its line"
    if on_line:
        return f"{name} on RPS's line, not at its run"
    return ""


def run_job(job: Job) -> Spread:
    name, args, case, mode, _, _ = job
    try:
        got = spread_case(args, case, mode)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return Spread(f"{name} {got.where}", got.worse, got.dearer, got.line)


def main(argv: list[str] | None = None) -> int:
    ap, args = kept_run_args(__doc__, argv, every="--all")
    jobs = kept_cases(args.run, args.only, losses_only=not args.all)
    counts: Counter[tuple[str, bool, bool]] = Counter()

    def each(got: Spread) -> None:
        counts[("worse", *got.worse)] += 1
        counts[("dearer", *got.dearer)] += 1
        said = [m for m in (mark(got.worse, "worse"), mark(got.dearer, "dearer")) if m]
        if said:
            print(f"{got.where}: {'; '.join(said)}\n  {got.line}")

    if replay_kept(ap.prog, run_job, jobs, args.jobs, each):
        return 1
    print(f"{len(jobs)} cases read{' (every kept case)' if args.all else ' (the kept losses)'}:")
    for name in ("worse", "dearer"):
        print(
            f"  {name}: {counts[(name, True, True)] + counts[(name, True, False)]} at RPS's runs, "
            f"{counts[(name, True, True)] + counts[(name, False, True)]} on RPS's lines "
            f"({counts[(name, True, False)]} only at the runs, {counts[(name, False, True)]} only on the lines)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
