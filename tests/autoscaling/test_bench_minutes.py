"""`bench/autoscaling_minutes.py`: one case of a sweep or of the random fleets, minute by minute."""

from __future__ import annotations

import pytest

from gem_operator.replay.engine import POLICY, simulate

from .conftest import bench_module

STEP = ("--family", "step", "--seeds", "0:8")  # held-out/step, as autoscaling_sweeps.SETS has it


def test_a_sweep_case_prints_each_minute_of_its_replay() -> None:
    """held-out/step seed 6 / duplicate: one line per minute of the case's replay, the policy's
    replicas and violation minutes as the replay has them."""
    minutes, seeds = bench_module("autoscaling_minutes"), bench_module("autoscaling_seeds")
    lines = minutes.sweep_case("held-out/step", "seed 6", "duplicate")
    inputs = seeds.sweep_inputs(seeds.parser().parse_args(list(STEP)))
    load = dict(inputs.cases)["seed 6"].series("duplicate")
    pol = simulate(load, inputs.spec, inputs.model, scale_mode="duplicate").results[POLICY]
    rows = lines[2:]
    assert len(rows) == len(pol.replicas_per_minute)
    assert [float(r.split()[2]) for r in rows] == [round(x, 1) for x in pol.replicas_per_minute]
    assert f"{pol.slo_violation_minutes} violation min" in lines[0]


def test_a_random_draw_is_found_by_the_start_of_its_name() -> None:
    minutes, fleets = bench_module("autoscaling_minutes"), bench_module("autoscaling_random_fleets")
    draw = fleets.draws(minutes.RANDOM_DRAWS, 1)[0]
    lines = minutes.random_case(1, draw.name.split(",")[0])
    spec, load = fleets.draw_inputs(draw)
    report = simulate(load, spec, draw.model, scale_mode=draw.mode)
    assert lines[0] == draw.name
    assert len(lines) == 3 + len(report.load_per_minute)  # the name, the header, the column names, the minutes


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (
            ["held-out/nope", "seed 6", "duplicate"],
            "SET/SWEEP: no sweep named 'held-out/nope' (the sweeps of held-out:",
        ),
        (["nope/step", "seed 6", "duplicate"], "(the sets: bench, held-out"),
        (["held-out/step", "seed 99", "duplicate"], "'seed 99'"),
        (["--random", "1", "no such draw"], "NAME: no draw of seed 1 is named 'no such draw'"),
    ],
)
def test_bad_input_names_the_argument(argv: list[str], names: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_module("autoscaling_minutes").main(argv) == 2
    assert names in capsys.readouterr().err
