"""`bench/autoscaling_random_fleets.py`: fleets drawn at random, checked for the policy's invariants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.report import POLICY

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
