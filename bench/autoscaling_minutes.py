"""One case of a sweep or of the random fleets, minute by minute: the policy beside HPA on RPS.

Run:  python bench/autoscaling_minutes.py SET/SWEEP CASE MODE     (a case of bench/autoscaling_sweeps.py)
      python bench/autoscaling_minutes.py --random SEED NAME        (a draw of bench/autoscaling_random_fleets.py)

The sweeps and `bench/autoscaling_explain.py` say which cases lose and in which phase of the load;
docs/benchmarks.md then reads single cases minute by minute. This prints those minutes: the load,
the policy's replicas, SM active, p99 and effective SM target, and beside them RPS's run at the
policy's GPU-hours as the worse verdict reads it (`autoscaling_verdicts.rps_at_equal`: RPS's own
run where the policy spends no more, else the bisection's run), with each pool's GPU-hours of
static peak and violation minutes on top. CASE is as a kept sweep names it ("seed 6", "azure-tok");
NAME is the start of a draw's name as the random bench prints it ("poisson-hour s8357 / independent").
It judges nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from autoscaling_explain import replay_case  # bench/ on sys.path
from autoscaling_random_fleets import draw_inputs, draws
from autoscaling_sweeps import SETS
from autoscaling_verdicts import rps_at_equal

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import HPA_RPS, POLICY, STATIC_PEAK, simulate
from gem_operator.replay.report import ReplayReport
from gem_operator.replay.service_model import ServiceModel
from gem_operator.replay.traces import LoadSeries

# The draws docs/benchmarks.md cites (--draws 200). Each draw follows the one before it from one
# generator, so a run with fewer draws (the bench's default is 60) holds the first of these.
RANDOM_DRAWS = 200


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def minute_lines(load: LoadSeries, spec: RankingServiceSpec, model: ServiceModel, report: ReplayReport) -> list[str]:
    """The header and one line per minute of `report` (see the module docstring)."""
    pol, rps, static = (report.results[k] for k in (POLICY, HPA_RPS, STATIC_PEAK))
    equal = rps_at_equal(load, spec, model, pol, rps)
    share = static.gpu_hours
    lines = [
        f"policy {pol.gpu_hours / share:.3f} of static GPU-h, {pol.slo_violation_minutes} violation min; "
        f"RPS at its declared target {rps.gpu_hours / share:.3f}, {rps.slo_violation_minutes} min; "
        f"RPS at the policy's GPU-hours {equal.minutes:.1f} min ({equal.note}); "
        f"SLO {spec.slo.p99_latency_ms:g} ms",
        "min      load  policy: replicas  SM    p99 ms  target  |  RPS at equal GPU-h: replicas  p99 ms",
    ]
    targets = pol.effective_target_per_minute
    for m, value in enumerate(report.load_per_minute):
        target = targets[m] if m < len(targets) else None
        lines.append(
            f"{m:3d} {value:9.2f}  {pol.replicas_per_minute[m]:16.1f}  {pol.sm_active_per_minute[m]:.2f}"
            f"  {_ms(pol.p99_ms_per_minute[m]):>7}  {'-' if target is None else f'{target:.3f}':>6}"
            f"  |  {equal.run.replicas_per_minute[m]:27.1f}  {_ms(equal.run.p99_ms_per_minute[m]):>6}"
        )
    return lines


def sweep_case(name: str, case: str, mode: str) -> list[str]:
    """A case of a sweep of `autoscaling_sweeps.SETS`, by SET/SWEEP, case and scale mode."""
    set_name, _, sweep = name.partition("/")
    args = dict(SETS.get(set_name, ())).get(sweep)
    if args is None:
        if set_name in SETS:
            known = f"the sweeps of {set_name}: " + ", ".join(w for w, _ in SETS[set_name])
        else:
            known = "the sets: " + ", ".join(SETS)
        raise ValueError(f"SET/SWEEP: no sweep named {name!r} ({known})")
    inputs, load, report = replay_case(args, case, mode)
    return minute_lines(load, inputs.spec, inputs.model, report)


def random_case(seed: int, name: str) -> list[str]:
    """The first of the random bench's draws (`--draws 200 --seed SEED`) whose name starts with `name`."""
    found = next((d for d in draws(RANDOM_DRAWS, seed) if d.name.startswith(name)), None)
    if found is None:
        raise ValueError(f"NAME: no draw of seed {seed} is named {name!r}... (the random bench prints the names)")
    spec, load = draw_inputs(found)
    report = simulate(load, spec, found.model, scale_mode=found.mode)
    return [found.name, *minute_lines(load, spec, found.model, report)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("case", nargs="+", metavar="ARG", help="SET/SWEEP CASE MODE, or with --random the draw's NAME")
    ap.add_argument("--random", type=int, metavar="SEED", help="a draw of the random fleets bench at this seed")
    args = ap.parse_args(argv)
    try:
        if args.random is not None:
            lines = random_case(args.random, " ".join(args.case))
        elif len(args.case) == 3:
            lines = sweep_case(*args.case)
        else:
            ap.error("give SET/SWEEP CASE MODE (e.g. held-out/step 'seed 6' duplicate), or --random SEED NAME")
    except ValueError as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
