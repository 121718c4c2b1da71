"""The sets of seed sweeps docs/benchmarks.md counts (`bench/autoscaling_sweeps.py`): their sizes,
their arguments, and one real sweep run through them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from .conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "bench" / "autoscaling_sweeps.py"


@pytest.mark.parametrize(
    ("name", "cases"),
    # The sizes docs/benchmarks.md quotes for them.
    [
        ("bench", 250),
        ("held-out", 304),
        ("unseen-fleets", 64),
        ("new-seeds", 72),
        ("decline-walk", 160),
        ("start-ups", 72),
        ("far-seeds", 168),
    ],
)
def test_each_set_has_the_cases_the_docs_count(name: str, cases: int) -> None:
    sweeps = bench_module("autoscaling_sweeps")
    assert sum(sweeps.cases_in(args) for _, args in sweeps.SETS[name]) == cases


def test_every_sweep_is_a_valid_seed_sweep_and_named_once() -> None:
    sweeps, seeds = bench_module("autoscaling_sweeps"), bench_module("autoscaling_seeds")
    for set_name, members in sweeps.SETS.items():
        names = [name for name, _ in members]
        assert len(names) == len(set(names)), set_name
        for _, args in members:
            parsed = seeds.parser().parse_args(list(args))  # exits on an unknown family, fleet or option
            assert parsed.family in seeds.FAMILIES and parsed.fleet in seeds.FLEETS
            assert not parsed.service or (ROOT / parsed.service).is_file()
            keys = seeds.FLEETS[parsed.fleet]().describe()
            assert all(text.split("=", 1)[0] in keys for text in parsed.model), parsed.model  # a fleet's own keys


def test_no_two_sweeps_of_a_set_run_the_same_cases() -> None:
    sweeps = bench_module("autoscaling_sweeps")
    for members in sweeps.SETS.values():
        runs = [tuple(sorted(args)) for _, args in members]
        assert len(runs) == len(set(runs))


def test_counts_add_up_and_a_failed_sweep_is_named() -> None:
    sweeps = bench_module("autoscaling_sweeps")
    written = {"cases": 2, "worse": 1, "dearer": 0, "violation_minutes": 3, "rps_at_equal_minutes": 1.5}
    written |= {"over_gpu_target": 2, "targets_exclude": 1, "every_target_met": 0}

    def runner(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if "step" in args:
            return subprocess.CompletedProcess(args, 2, "", "usage: ...\nerror: --seeds: empty range\n")
        Path(args[list(args).index("--json") + 1]).write_text(json.dumps(written), encoding="utf-8")
        return subprocess.CompletedProcess(args, 0, "fleet batching; ...\n", "")

    sets = {"a": (("one", ("--family", "wave")), ("two", ("--family", "ramp"))), "b": (("bad", ("--family", "step")),)}
    report = sweeps.run_sets(["a", "b"], 2, runner=runner, sets=sets)
    counts = [got for _, got in report["a"]]
    total = counts[0] + counts[1]
    assert (total.cases, total.worse, total.violation_minutes, total.rps_at_equal_minutes) == (4, 2, 6, 3.0)
    assert report["b"] == [("bad", "exit 2: usage: ... | error: --seeds: empty range")]


def test_an_unknown_set_is_refused_with_the_sets_named() -> None:
    done = subprocess.run([sys.executable, str(SWEEPS), "bogus"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "SET: no set named bogus; the sets are bench, held-out" in done.stderr


def test_one_real_sweep_writes_the_counts_it_prints(tmp_path: Path) -> None:
    """`autoscaling_seeds.py --json` through the runner: the counts are those of its summary line."""
    sweeps = bench_module("autoscaling_sweeps")
    got = sweeps.run_sweep(("step", ("--family", "step", "--seeds", "0:1")), (), tmp_path)
    assert not isinstance(got, str), got
    printed = (tmp_path / "step.txt").read_text(encoding="utf-8")
    assert got.cases == 2 == printed.count(" policy ")
    summary = next(line for line in printed.splitlines() if line.startswith("policy worse than RPS"))
    assert f"in {got.worse} of 2; over 1.05x" in summary and f"minutes in {got.dearer} of 2" in summary
    assert f"violation minutes {got.violation_minutes:g} vs {got.rps_at_equal_minutes:.1f}" in summary
    assert f"every target met in {got.every_target_met} of 2" in printed
    kept = json.loads((tmp_path / "step.json").read_text(encoding="utf-8"))["per_case"]
    assert [(c["case"], c["mode"]) for c in kept] == [("seed 0", "independent"), ("seed 0", "duplicate")]
    assert sum(c["violation_minutes"] for c in kept) == got.violation_minutes
    assert sum(c["worse"] for c in kept) == got.worse and sum(c["dearer"] for c in kept) == got.dearer


def keep(root: Path, set_name: str, sweep: str, cases: list[dict[str, object]]) -> None:
    (root / set_name).mkdir(parents=True, exist_ok=True)
    (root / set_name / f"{sweep}.json").write_text(json.dumps({"cases": len(cases), "per_case": cases}), "utf-8")


def case(name: str, minutes: int, gpu: float, *, worse: bool = False, dearer: bool = False) -> dict[str, object]:
    return {"case": name, "mode": "independent", "violation_minutes": minutes, "gpu_of_static": gpu} | {
        "worse": worse,
        "dearer": dearer,
    }


def test_compare_names_each_case_that_moved_and_counts_the_flips(tmp_path: Path) -> None:
    sweeps = bench_module("autoscaling_sweeps")
    old, new = tmp_path / "old", tmp_path / "new"
    keep(old, "bench", "bursts", [case("seed 0", 2, 0.9, dearer=True), case("seed 1", 3, 0.8), case("seed 2", 1, 0.7)])
    keep(new, "bench", "bursts", [case("seed 0", 2, 0.85), case("seed 1", 5, 0.8, worse=True), case("seed 2", 1, 0.7)])
    keep(new, "bench", "wave", [case("seed 0", 0, 0.9)])
    lines = sweeps.compare(old, new)
    assert lines[0] == "3 cases differ; worse 1 gained / 0 lost, dearer 0 gained / 1 lost"
    # seed 0 spends less at the same minutes, seed 1 has more minutes at the same GPU-hours; the
    # wave is in one run only and counts in neither total.
    assert lines[1] == (
        "violation minutes more in 1 / fewer in 0 cases (6 -> 8 over the cases both runs hold), "
        "GPU-hours more in 0 / fewer in 1"
    )
    assert (
        "  bench/bursts seed 0 independent: violation minutes 2 -> 2, GPU-h 0.9 -> 0.85 of static (dearer lost)"
        in lines
    )
    assert (
        "  bench/bursts seed 1 independent: violation minutes 3 -> 5, GPU-h 0.8 -> 0.8 of static (worse gained)"
        in lines
    )
    assert "  bench/wave seed 0 independent: only in the new run" in lines
    assert not any("seed 2" in line for line in lines)  # the same on both sides


def test_compare_refuses_a_folder_with_no_kept_run(tmp_path: Path) -> None:
    keep(tmp_path / "old", "bench", "bursts", [case("seed 0", 2, 0.9)])
    args = [sys.executable, str(SWEEPS), "--compare", str(tmp_path / "old"), str(tmp_path / "empty")]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert f"--compare: {tmp_path / 'empty'} holds no kept sweep" in done.stderr
