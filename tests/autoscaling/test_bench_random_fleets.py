"""`bench/autoscaling_random_fleets.py`: fleets drawn at random, checked for the policy's invariants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.report import HPA_RPS, POLICY

from .conftest import bench_module, pool_result, replay_report

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "autoscaling_random_fleets.py"
SPEC = RankingServiceSpec.model_validate({"model": {"uri": "s3://m/r"}, "autoscaling": {"targetSmActive": 0.6}})


def test_the_draw_is_the_seeds_and_its_fleets_are_valid() -> None:
    fleets = bench_module("autoscaling_random_fleets")
    first, again, other = fleets.draws(12, 3), fleets.draws(12, 3), fleets.draws(12, 4)
    assert first == again and first != other
    for d in first:
        p99 = [y for _, y in d.model.latency_p99_ms]
        assert p99 == sorted(p99) and 0.40 <= d.target <= 0.75 and 25 <= d.slo_ms <= 80
        assert 5000 <= d.seed < 9000 and d.model.sm_active[1][1] > d.model.sm_active[0][1]


@pytest.mark.parametrize(
    ("changes", "path", "broken"),
    [
        (4.0, [0.6, 0.45, 0.3, None], []),  # the budget and the floor (0.5 x 0.6) themselves
        (5.0, [0.6], ["5 direction changes in an hour (budget 4)"]),
        (2.0, [0.6, 0.29], ["SM target 0.290..0.600 outside the loop's 0.300..0.600"]),
        (2.0, [0.61], ["SM target 0.610..0.610 outside the loop's 0.300..0.600"]),
        (2.0, [None, None], []),  # no decision, no path to judge
    ],
)
def test_each_invariant_is_checked(changes: float, path: list[float | None], broken: list[str]) -> None:
    fleets = bench_module("autoscaling_random_fleets")
    pol = pool_result(POLICY, changes=changes)
    pol.effective_target_per_minute = path
    assert list(fleets.broken_invariants(SPEC, pol)) == broken


def test_the_command_replays_its_draws_and_names_bad_options() -> None:
    run: Any = [sys.executable, str(SCRIPT), "--draws", "2", "--jobs", "1", "--seed", "7"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "0 of 2 cases break an invariant" in done.stdout and "violation min" in done.stdout
    bad = subprocess.run([*run[:2], "--draws", "0"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--draws: 0; draw at least one case" in bad.stderr


def test_a_scale_down_the_policy_never_makes_breaks_the_case() -> None:
    fleets = bench_module("autoscaling_random_fleets")
    pol = pool_result(POLICY, changes=2.0)
    pol.effective_target_per_minute = [0.6]
    pol.unsafe_scale_downs = [(615.0, "scale-down 10 -> 8 on a fresh p99 of 41.0 ms over the SLO")]
    got = list(fleets.broken_invariants(SPEC, pol))
    assert got == ["scale-down 10 -> 8 on a fresh p99 of 41.0 ms over the SLO at 615s"]


def test_the_bounds_are_the_loops_own_in_sm_active_as_read() -> None:
    # Declared idle floor 0.5, target 0.8: busy 0.6, x 2 capped at 0.95 busy, 0.975 as read.
    fleets = bench_module("autoscaling_random_fleets")
    spec = SPEC.model_copy(deep=True)
    spec.autoscaling.target_sm_active = 0.8
    spec.autoscaling.metrics.sm_active_idle = 0.5
    spec.autoscaling.slo_feedback.max_target_fraction = 2.0
    pol = pool_result(POLICY, changes=2.0)
    pol.effective_target_per_minute = [0.8, 0.97, 0.65]  # floor: 0.5 + 0.5 x 0.6 x 0.5
    assert list(fleets.broken_invariants(spec, pol)) == []
    pol.effective_target_per_minute = [0.98, 0.64]
    assert list(fleets.broken_invariants(spec, pol)) == ["SM target 0.640..0.980 outside the loop's 0.650..0.975"]


@pytest.mark.parametrize(
    ("shares", "minutes", "lost"),
    [
        ((0.80, 0.80), (3, 2, 9), "worse"),  # as many GPU-hours, a minute more
        ((0.79, 0.80), (2, 2, 9), None),
        ((0.85, 0.80), (3, 2, 9), "dearer"),  # more GPU-hours and more minutes
        ((0.85, 0.80), (2, 2, 9), "dearer"),  # past 1.05 x at as many minutes
        ((0.84, 0.80), (2, 2, 9), None),  # within 1.05 x
        ((0.85, 0.80), (1, 2, 9), None),  # the GPU-hours bought a minute: judged by neither, one-sided
    ],
)
def test_a_case_is_judged_against_rpss_own_run(
    shares: tuple[float, float], minutes: tuple[int, int, int], lost: str | None
) -> None:
    fleets = bench_module("autoscaling_random_fleets")
    pol = pool_result(POLICY, shares[0] * 10, minutes[0])
    rps = pool_result(HPA_RPS, shares[1] * 10, minutes[1])
    assert fleets.against_rps(pol, rps) == lost
    outcome = fleets.Outcome(fleets.draws(1, 1)[0], shares[0], shares[1], minutes, None, (), lost)
    line = fleets.summary([outcome])[1]
    assert line.endswith(f"{int(lost == 'worse')} / {int(lost == 'dearer')}")


@pytest.mark.parametrize(
    ("shares", "minutes", "equal", "few", "lost"),
    [
        # Spends more and misses less than RPS's own run: one-sided, neither; RPS at its GPU-hours has fewer.
        ((0.85, 0.80), (1, 2), (0.5, 0.85), None, "worse"),
        ((0.85, 0.80), (1, 2), (1.0, 0.85), (1, 0.82), None),  # as few minutes at 0.82: within 1.05 x
        ((0.90, 0.80), (1, 2), (1.0, 0.90), (1, 0.80), "dearer"),  # as few minutes at 0.80: past 1.05 x
        ((0.90, 0.80), (1, 2), (1.0, 0.90), None, None),  # RPS never reaches as few: nothing to compare
        ((0.80, 0.80), (3, 2), (2.0, 0.80), None, "worse"),  # its own run, as one-sided
    ],
)
def test_both_sides_judges_a_case_against_rpss_line(
    monkeypatch: pytest.MonkeyPatch,
    shares: tuple[float, float],
    minutes: tuple[int, int],
    equal: tuple[float, float],
    few: tuple[int, float] | None,
    lost: str | None,
) -> None:
    fleets = bench_module("autoscaling_random_fleets")
    verdicts = bench_module("autoscaling_verdicts")
    pol = pool_result(POLICY, shares[0] * 10, minutes[0])
    rps = pool_result(HPA_RPS, shares[1] * 10, minutes[1])
    # Twenty minutes of a flat load: the first ten are the pool's first minutes, the rest a level.
    pol.p99_ms_per_minute = [60.0 if m in (3, 15) else 20.0 for m in range(20)]  # the SLO: 50 ms
    pol.replicas_per_minute = [6.0] * 20
    asked: list[str] = []

    def at_equal(load: Any, spec: Any, model: Any, p: Any, r: Any) -> Any:
        asked.append("equal")
        run = pool_result(HPA_RPS, equal[1] * 10, round(equal[0]))
        run.p99_ms_per_minute = [60.0 if m == 15 else 20.0 for m in range(20)]
        return verdicts.RpsEqual(0.5, run, equal[0], equal[1] * 10)

    def as_few(load: Any, spec: Any, model: Any, wanted: int) -> Any:
        asked.append("few")
        if few is None:
            return verdicts.RpsAsFew(wanted, None)
        run = pool_result(HPA_RPS, few[1] * 10, few[0])
        run.replicas_per_minute = [5.0] * 20
        return verdicts.RpsAsFew(wanted, (0.4, run))

    monkeypatch.setattr(fleets, "rps_at_equal", at_equal)
    monkeypatch.setattr(fleets, "rps_at_as_few_violations", as_few)
    report = replay_report({POLICY: pol, HPA_RPS: rps}, minutes=20)
    verdict, phases = fleets.against_rps_line(None, SPEC, None, report)
    assert verdict == lost
    # RPS is re-run to as few minutes only where its own run has more, and not for a case already worse.
    assert asked == (["equal"] if lost == "worse" or minutes[1] <= minutes[0] else ["equal", "few"])
    if lost == "worse":  # minute 3 is the policy's alone; minute 15 is RPS's too
        assert phases["first minutes"] == 1 and sum(phases.values()) == 1
    elif lost == "dearer":  # a replica above RPS in every minute
        assert phases["first minutes"] == 10 and phases["level"] == 10
    else:
        assert phases == {}


def test_the_phase_lines_add_up_each_verdicts_cases() -> None:
    fleets = bench_module("autoscaling_random_fleets")
    draw = fleets.draws(1, 1)[0]
    outcomes = [
        fleets.Outcome(draw, 0.8, 0.8, (3, 1, 0), None, (), "worse", {"first minutes": 2.0, "rising": 1.0}),
        fleets.Outcome(draw, 0.8, 0.8, (2, 1, 0), None, (), "worse", {"first minutes": 1.0}),
        fleets.Outcome(draw, 0.9, 0.8, (1, 1, 0), None, (), "dearer", {"level": 30.0, "rising": -4.0}),
        fleets.Outcome(draw, 0.7, 0.8, (0, 1, 0), None, (), None, {}),
    ]
    worse, dearer = fleets.by_phase(outcomes)
    assert worse.startswith("2 worse cases") and "first minutes 3, rising 1, before a rise 0" in worse
    assert dearer.startswith("1 dearer cases") and "rising -4" in dearer and "level +30" in dearer


def test_the_command_judges_both_sides_on_request() -> None:
    run = [sys.executable, str(SCRIPT), "--draws", "2", "--jobs", "1", "--seed", "7", "--both-sides"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "worse / dearer than RPS at equal GPU-h or as few minutes" in done.stdout
