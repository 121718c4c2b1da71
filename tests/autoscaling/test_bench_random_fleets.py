"""`bench/autoscaling_random_fleets.py`: fleets drawn at random, checked for the policy's invariants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.report import HPA_RPS, POLICY

from .conftest import bench_module, pool_result

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
