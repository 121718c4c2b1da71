"""The seed sweep's service and model options: bad input stops it with the option and the cause, before any run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gem_operator.replay.service_model import ServiceModel

from .conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "bench" / "autoscaling_seeds.py"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["--service", "/nonexistent/ranker.yaml"], "--service: /nonexistent/ranker.yaml: cannot read", id="missing"
        ),
        pytest.param(["--service", str(ROOT / "pyproject.toml")], "--service:", id="not-a-manifest"),
        pytest.param(
            ["--service", str(ROOT / "crds/samples/rankingservice.yaml"), "--max-replicas", "0"],
            "--max-replicas: autoscaling.maxReplicas: Input should be greater than or equal to 1",
            id="max-replicas-zero",
        ),
        pytest.param(
            ["--set", "autoscaling.stabilizationSeconds.down=-1"],
            "--set: autoscaling.stabilizationSeconds.down: Input should be greater than or equal to 0",
            id="set-out-of-range",
        ),
        pytest.param(
            ["--set", "autoscaling.bogus=1"],
            "--set: autoscaling.bogus: Extra inputs are not permitted",
            id="set-unknown",
        ),
        pytest.param(
            ["--set", "slo.p99LatencyMs.x=3"],
            "--set: slo.p99LatencyMs.x: slo.p99LatencyMs is 40, not a mapping",
            id="set-into-a-number",
        ),
        pytest.param(["--set", "down"], "--set: expected KEY=VALUE, got 'down'", id="set-no-value"),
        pytest.param(
            ["--model", "model_load_seconds=-5"], "--model: model_load_seconds must be positive", id="model-negative"
        ),
        pytest.param(["--model", "nope=1"], "--model: unknown keys ['nope']; known keys are", id="model-unknown"),
        pytest.param(
            ["--fleet", "steep"], "argument --fleet: invalid choice: 'steep' (choose from", id="fleet-unknown"
        ),
        pytest.param(
            ["--model", "throughput_per_replica=[1"],
            "--model: throughput_per_replica: the value '[1' is not YAML",
            id="model-not-yaml",
        ),
    ],
)
def test_bad_service_input_names_the_option(args: list[str], says: str) -> None:
    out = subprocess.run(
        [sys.executable, str(SWEEP), "--seeds", "0:1", *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr
    assert "fleet" not in out.stdout  # stopped before any case ran


def test_a_changed_service_and_model_are_replayed() -> None:
    """--set and --model reach the replay: a 0 s down window and a 7.5-minute start-up change the cases."""

    def sweep(*extra: str) -> list[str]:
        args = [sys.executable, str(SWEEP), "--seeds", "0:1", "--family", "wave", *extra]
        out = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.splitlines()

    plain = sweep()
    changed = sweep("--set", "autoscaling.stabilizationSeconds.down=0", "--model", "model_load_seconds=420")
    assert changed[0].endswith("; with model_load_seconds=420 autoscaling.stabilizationSeconds.down=0")
    assert len(plain) == len(changed) == 5  # the header, two scale modes, the summary, the targets
    assert plain[1:3] != changed[1:3]
    judged = "targets as bench/autoscaling_replay.py judges them: "
    assert all(lines[-1].startswith(judged) for lines in (plain, changed))


def test_every_named_fleet_is_a_valid_service_profile() -> None:
    """The named fleets pass the checks a `gemop replay --profile` file gets (curves rising, values
    in range), and the ones no rule was tuned on are what docs/benchmarks.md names with `--model`."""
    module = bench_module("autoscaling_seeds")
    for name, make in module.FLEETS.items():
        model = make()
        keys = {k: v for k, v in model.describe().items() if k != "source"}
        assert ServiceModel.from_mapping(keys, where=name) == model, name
    steep = ServiceModel.from_mapping(
        {"latency_p99_ms": [[0, 10], [0.5, 12], [0.7, 20], [0.8, 35], [0.9, 80], [1, 300]]}
    )
    assert module.FLEETS["steep-knee"]() == steep
    assert module.FLEETS["fast-start"]().startup_seconds == 25.0
    assert module.FLEETS["idle-floor"]().sm_active[0] == (0.0, 0.3)
    gentle = module.FLEETS["gentle-curve"]()
    assert gentle.p99_ms(0.556) == pytest.approx(40.0, abs=0.1)  # the SLO falls at 56 % utilisation


def test_the_interruption_family_falls_once_and_comes_back() -> None:
    """`--family interruption`: a held level that falls to 50-75 % of itself between minutes 10 and
    40, stays there 10-20 minutes and comes back to the level at once (the family's docstring)."""
    family = bench_module("autoscaling_seeds").FAMILIES["interruption"]
    for seed in range(6):
        rate = family(seed).trend
        assert rate is not None
        level = rate[0]
        low = [t for t, r in enumerate(rate) if r < level]
        start, end = low[0], low[-1] + 1
        assert low == list(range(start, end)), seed  # one fall, one return
        assert 600 <= start <= 2400 and 600 <= end - start <= 1200, seed
        assert 0.5 <= rate[start] / level <= 0.75 and (rate[start:end] == rate[start]).all(), seed
        assert (rate[:start] == level).all() and (rate[end:] == level).all(), seed


def test_the_ramp_family_grows_steadily_then_holds() -> None:
    """`--family ramp`: from 0.4-0.6x to 1.3-1.6x of 2,000/s, rising for 20-40 minutes from between
    minutes 5 and 15, with a +-5 % swing on top (the family's docstring)."""
    family, scenarios = bench_module("autoscaling_seeds").FAMILIES["ramp"], bench_module("autoscaling_scenarios")
    for seed in range(6):
        trend = family(seed).trend
        assert trend is not None
        x = trend * scenarios.USERS_SCALE / scenarios.RAMP_RATE  # the level, swing included
        assert x[:300].min() >= 0.4 * 0.95 and x[:300].max() <= 0.6 * 1.05, seed  # before the rise
        assert x[3300:].min() >= 1.3 * 0.95 and x[3300:].max() <= 1.6 * 1.05, seed  # held after it
        five = x.reshape(12, 300).mean(axis=1)
        assert (five[1:] >= five[:-1] * 0.97).all(), seed  # never falls, beyond the swing
        rising = [m for m in range(1, 12) if five[m] > five[m - 1] * 1.04]
        assert 4 <= len(rising) <= 9, seed  # 20-40 minutes of growth


def test_the_step_family_steps_up_once_and_stays() -> None:
    """`--family step`: 1,500/s that steps up by 30-80 % between minutes 10 and 40 and stays there."""
    family, scenarios = bench_module("autoscaling_seeds").FAMILIES["step"], bench_module("autoscaling_scenarios")
    for seed in range(6):
        trend = family(seed).trend
        assert trend is not None
        level = scenarios.STEP_RATE / scenarios.USERS_SCALE
        higher = [t for t, r in enumerate(trend) if r != level]
        at = higher[0]
        assert higher == list(range(at, 3600)), seed  # one step, never back
        assert 600 <= at <= 2400 and 1.3 <= trend[at] / level <= 1.8, seed
        assert (trend[at:] == trend[at]).all(), seed


def test_the_decline_family_falls_gradually_once_and_stays() -> None:
    """`--family decline`: 2,600/s that falls linearly to 35-55 % of it over 20-40 minutes, from
    between minutes 5 and 15, and stays there (the family's docstring)."""
    family, scenarios = bench_module("autoscaling_seeds").FAMILIES["decline"], bench_module("autoscaling_scenarios")
    for seed in range(6):
        trend = family(seed).trend
        assert trend is not None
        x = trend * scenarios.USERS_SCALE / scenarios.DECLINE_RATE
        falling = [t for t in range(1, 3600) if x[t] < x[t - 1]]
        start, end = falling[0] - 1, falling[-1] + 1
        assert falling == list(range(start + 1, end)), seed  # one fall, never back up
        assert 300 <= start <= 900 and 1200 - 2 <= end - start <= 2400 + 2, seed
        assert (x[: start + 1] == 1.0).all() and 0.35 <= x[-1] <= 0.55 and (x[end:] == x[-1]).all(), seed
        per_second = np.diff(x[start:end])[1:-1]  # the first and last seconds fall by a part of a second's share
        assert np.allclose(per_second, per_second[0]), seed  # linear, no step


def test_the_walk_family_drifts_without_a_shape() -> None:
    """`--family walk`: a minute rate with mean 2,000/s within 0.5-2x of it, whose minute-to-minute
    moves are a random walk's: no period, no trend kept, both directions often."""
    family, scenarios = bench_module("autoscaling_seeds").FAMILIES["walk"], bench_module("autoscaling_scenarios")
    ups = downs = 0
    for seed in range(6):
        trend = family(seed).trend
        assert trend is not None
        minutes = trend.reshape(60, 60).mean(axis=1) * scenarios.USERS_SCALE / scenarios.WALK_RATE
        assert minutes.min() >= 0.5 - 1e-9 and minutes.max() <= 2.0 + 1e-9, seed
        assert 0.85 <= minutes.mean() <= 1.15, seed
        moves = np.diff(np.log(minutes))
        assert np.abs(moves).max() <= 5 * scenarios.WALK_STEP, seed  # a drift, never a step
        ups, downs = ups + int((moves > 0).sum()), downs + int((moves < 0).sum())
        assert len({round(float(m), 6) for m in minutes}) > 30, seed  # not flat
    assert min(ups, downs) >= 0.35 * (ups + downs)  # no direction kept
