"""`bench/autoscaling_spread.py`: a kept run's verdicts judged again on lines through RPS's neighbouring runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
SPREAD = ROOT / "bench" / "autoscaling_spread.py"
STEP = ("--family", "step", "--seeds", "0:8")  # held-out/step, as autoscaling_sweeps.SETS has it


@pytest.mark.parametrize(
    ("points", "intercept", "slope", "spread"),
    [
        ([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)], 1.0, 2.0, 0.0),  # on a line: no spread
        ([(0.0, 0.0), (1.0, 2.0), (2.0, 0.0), (3.0, 2.0)], 0.4, 0.4, 0.8**0.5),  # a zigzag about a shallow line
        ([(0.5, 2.0), (0.5, 4.0)], 3.0, 0.0, 1.0),  # one x: flat at the mean, no slope read
        ([(0.5, 7.0)], 7.0, 0.0, 0.0),  # one point
    ],
)
def test_a_line_fits_its_points(
    points: list[tuple[float, float]], intercept: float, slope: float, spread: float
) -> None:
    line = bench_module("autoscaling_spread").fitted(points)
    assert (line.intercept, line.slope, line.spread) == pytest.approx((intercept, slope, spread), abs=1e-9)


def test_minutes_on_a_line_are_never_below_zero() -> None:
    """A line through runs of 2, 1 and 0 minutes crosses zero past them: a policy with no minute is
    not worse than a line that reads -1 there."""
    spread = bench_module("autoscaling_spread")
    line = spread.fitted([(10.0, 2.0), (11.0, 1.0), (12.0, 0.0)])
    assert line.at(13.0) == pytest.approx(-1.0)
    assert spread.minutes_on(line, 13.0) == 0.0 and spread.minutes_on(line, 11.5) == pytest.approx(0.5)


def test_no_line_without_points() -> None:
    with pytest.raises(ValueError, match="no points"):
        bench_module("autoscaling_spread").fitted([])


def test_the_neighbours_span_both_sides_and_stop_at_the_bisections_floor() -> None:
    spread = bench_module("autoscaling_spread")
    around = spread.neighbours(0.6)
    assert len(around) == 2 * spread.NEIGHBOURS + 1 and around[spread.NEIGHBOURS] == pytest.approx(0.6)
    assert around[0] == pytest.approx(0.6 - spread.NEIGHBOURS * spread.STEP)
    low = spread.neighbours(spread.LOWEST + spread.STEP)
    assert low[0] == pytest.approx(spread.LOWEST) and len(low) == spread.NEIGHBOURS + 2


def test_a_case_is_judged_at_rps_runs_as_the_sweep_judges_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step seed 6 / duplicate (the held-out step sweep) is worse and dearer at RPS's runs, as the
    kept sweeps judge it. With no neighbours the dearer line is RPS's run itself, so both readings
    agree; with neighbours they may not, and the line reads RPS's spread."""
    spread = bench_module("autoscaling_spread")
    monkeypatch.setattr(spread, "NEIGHBOURS", 0)
    alone = spread.spread_case(STEP, "seed 6", "duplicate")
    assert alone.worse[0] and alone.dearer == (True, True)
    monkeypatch.setattr(spread, "NEIGHBOURS", 2)
    near = spread.spread_case(STEP, "seed 6", "duplicate")
    assert near.worse[0] == alone.worse[0] and near.dearer[0] == alone.dearer[0]
    assert "on its line" in near.line and "the runs spread" in near.line
    with pytest.raises(ValueError, match="seed 99"):
        spread.spread_case(STEP, "seed 99", "duplicate")


def test_the_command_reads_the_losses_or_every_case(tmp_path: Path) -> None:
    kept = tmp_path / "run" / "held-out"
    kept.mkdir(parents=True)
    case = {"case": "seed 6", "mode": "duplicate", "violation_minutes": 3, "worse": True, "dearer": True}
    calm = {**case, "case": "seed 3", "worse": False, "dearer": False}
    (kept / "step.json").write_text(json.dumps({"per_case": [case, calm]}), encoding="utf-8")
    run = [sys.executable, str(SPREAD), str(tmp_path / "run"), "--jobs", "1"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "held-out/step seed 6 duplicate: worse at RPS's run" in done.stdout
    assert "1 cases read (the kept losses):" in done.stdout
    every = subprocess.run([*run, "--all"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert every.returncode == 0, every.stderr
    assert "2 cases read (every kept case):" in every.stdout
    unknown = subprocess.run([*run, "--only", "nope"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert unknown.returncode == 2 and "--only: no set or sweep named nope" in unknown.stderr
