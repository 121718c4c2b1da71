"""`bench/autoscaling_explain.py`: a kept sweeps run's lost cases read minute by minute."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.replay.engine import HPA_RPS, POLICY, simulate
from gem_operator.replay.report import PoolResult
from gem_operator.replay.traces import LoadSeries

from .conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
EXPLAIN = ROOT / "bench" / "autoscaling_explain.py"
STEP = ("--family", "step", "--seeds", "0:8")  # held-out/step, as autoscaling_sweeps.SETS has it


def spec() -> AutoscalingSpec:
    """Tolerance 0.1 both ways, a 5-minute down window."""
    return AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 60, "stabilizationSeconds": {"down": 300}})


F, R, B, P, L = "first minutes", "rising", "before a rise", "under the down window's peak", "level"


@pytest.mark.parametrize(
    ("tail", "phases"),
    [
        # After ten level minutes of 100 (the first minutes): a step up, read before it in hindsight, then its level.
        ([100, 130, 130, 130, 130, 130, 130], [B, R, R, R, R, L, L]),
        # A fall: under the 5-minute peak for five minutes, then the new level is its own peak.
        ([100, 80, 80, 80, 80, 80, 80], [L, P, P, P, P, P, L]),
        # A trough the load climbs back from: the minutes before the climb are read in hindsight.
        ([100, 70, 70, 100, 100, 100], [L, B, B, R, R, R]),
        # Within the tolerances: a level.
        ([100, 105, 95, 104, 96, 100], [L] * 6),
    ],
)
def test_each_minute_has_the_phase_the_spec_tolerances_and_window_give(tail: list[int], phases: list[str]) -> None:
    explain = bench_module("autoscaling_explain")
    assert explain.PHASES == (F, R, B, P, L)
    got = explain.load_phases([100.0] * explain.FIRST_MINUTES + [float(x) for x in tail], spec())
    assert got[: explain.FIRST_MINUTES] == [F] * explain.FIRST_MINUTES
    assert got[explain.FIRST_MINUTES :] == phases


@dataclass(frozen=True)
class Replayed:
    """One case of the held-out step sweep, replayed as the sweep replays it."""

    inputs: Any
    load: LoadSeries
    pol: PoolResult
    rps: PoolResult


def replayed(case: str, mode: str) -> Replayed:
    seeds = bench_module("autoscaling_seeds")
    inputs = seeds.sweep_inputs(seeds.parser().parse_args(list(STEP)))
    load = dict(inputs.cases)[case].series(mode)
    report = simulate(load, inputs.spec, inputs.model, scale_mode=mode)
    return Replayed(inputs, load, report.results[POLICY], report.results[HPA_RPS])


def test_a_case_explained_adds_up_to_its_runs() -> None:
    """Step seed 6 / duplicate (the held-out step sweep), explained both ways: the minutes it names
    are the policy's own over the SLO, and the phases' replica-minutes add up to the difference of
    the two pools' replicas over the hour."""
    explain, verdicts = bench_module("autoscaling_explain"), bench_module("autoscaling_verdicts")
    got = explain.explain_case(STEP, "seed 6", "duplicate", worse=True, dearer=True)
    case = replayed("seed 6", "duplicate")
    inputs, load, pol, rps = case.inputs, case.load, case.pol, case.rps
    mine = explain.over_slo(pol, inputs.spec.slo.p99_latency_ms)
    assert 0 < sum(got.lost_minutes.values()) <= len(mine)
    assert got.lines[0].startswith(f"worse: {len(mine)} min over the SLO")
    # The policy spends more than RPS at its declared target: the run compared minute by minute is
    # the bisection's that spends at least the policy's GPU-hours.
    assert pol.gpu_hours > rps.gpu_hours
    reading = verdicts.rps_at_equal(load, inputs.spec, inputs.model, pol, rps)
    equal = reading.run
    assert equal.gpu_hours >= pol.gpu_hours and reading.gpu_hours == pol.gpu_hours
    theirs = len(explain.over_slo(equal, inputs.spec.slo.p99_latency_ms))
    assert f"RPS at {equal.gpu_hours / pol.gpu_hours:.3f}x the policy's GPU-hours {theirs};" in got.lines[0]
    few = rps
    if rps.slo_violation_minutes > pol.slo_violation_minutes:
        few = verdicts.rps_at_as_few_violations(load, inputs.spec, inputs.model, pol.slo_violation_minutes).run[1]
    total = sum(pol.replicas_per_minute) - sum(few.replicas_per_minute)
    assert sum(got.extra_replica_minutes.values()) == pytest.approx(total)
    assert got.lines[1].startswith("dearer:")
    with pytest.raises(ValueError, match="seed 99"):
        explain.explain_case(STEP, "seed 99", "duplicate", worse=True, dearer=False)


def test_a_case_that_spends_no_more_than_rps_is_read_against_rps_own_run() -> None:
    """Step seed 1 / duplicate: the policy spends less than RPS at its declared target and has more
    violation minutes (3 to 0). The verdict compares with RPS's own run, so explain reads that one,
    not a bisection's run near the declared target."""
    explain, verdicts = bench_module("autoscaling_explain"), bench_module("autoscaling_verdicts")
    got = explain.explain_case(STEP, "seed 1", "duplicate", worse=True, dearer=False)
    case = replayed("seed 1", "duplicate")
    inputs, load, pol, rps = case.inputs, case.load, case.pol, case.rps
    assert pol.gpu_hours <= rps.gpu_hours
    equal = verdicts.rps_at_equal(load, inputs.spec, inputs.model, pol, rps)
    assert equal.run is rps and (equal.minutes, equal.gpu_hours) == (rps.slo_violation_minutes, rps.gpu_hours)
    slo = inputs.spec.slo.p99_latency_ms
    mine, theirs = explain.over_slo(pol, slo), explain.over_slo(rps, slo)
    assert got.lines[0].startswith(
        f"worse: {len(mine)} min over the SLO, RPS at {rps.gpu_hours / pol.gpu_hours:.3f}x the policy's "
        f"GPU-hours {len(theirs)};"
    )
    assert sum(got.lost_minutes.values()) == len([m for m in mine if m not in theirs])


def test_the_command_reads_a_kept_run_and_names_what_it_cannot(tmp_path: Path) -> None:
    kept = tmp_path / "run" / "held-out"
    kept.mkdir(parents=True)
    case = {"case": "seed 6", "mode": "duplicate", "violation_minutes": 3, "worse": True, "dearer": False}
    calm = {**case, "case": "seed 3", "worse": False}
    (kept / "step.json").write_text(json.dumps({"per_case": [case, calm]}), encoding="utf-8")
    run = [sys.executable, str(EXPLAIN), str(tmp_path / "run"), "--jobs", "1"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "held-out/step seed 6 duplicate:\n  worse:" in done.stdout
    assert "seed 3" not in done.stdout  # neither worse nor dearer: not replayed
    assert "1 worse cases:" in done.stdout and "0 dearer cases:" in done.stdout
    empty = subprocess.run([*run[:2], str(tmp_path)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert empty.returncode == 2 and "holds no kept sweep" in empty.stderr
    unknown = subprocess.run([*run, "--only", "held-out/nope"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert unknown.returncode == 2 and "--only: no set or sweep named held-out/nope" in unknown.stderr
    # A kept case the sweep does not make (its seeds changed since): named, with its sweep.
    (kept / "step.json").write_text(json.dumps({"per_case": [{**case, "case": "seed 99"}]}), encoding="utf-8")
    stale = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
    assert stale.returncode == 1 and "cannot replay held-out/step: 'seed 99'" in stale.stderr


@pytest.mark.parametrize("doc", [None, "", "Reads a kept run.\n\nMore."])
def test_a_script_without_a_docstring_still_parses_its_arguments(doc: str | None, tmp_path: Path) -> None:
    """A script run with `python -OO` has no docstring; its arguments still parse (the first line,
    where there is one, is the description)."""
    explain = bench_module("autoscaling_explain")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "sweep.json").write_text("{}", encoding="utf-8")
    ap, args = explain.kept_run_args(doc, [str(tmp_path), "--jobs", "2"])
    assert args.jobs == 2 and ap.description == (doc.splitlines()[0] if doc else None)
