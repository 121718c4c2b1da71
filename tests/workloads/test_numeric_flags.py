"""Numeric flags of the workloads' commands are refused at parse time, naming the flag.

Before the argparse types (`gem_common.argtypes`): `--lr -1`, `--batch-size 0` and
`--metrics-port 70000` ended in tracebacks from the optimiser, the loader and the metrics server's
bind; `--threads -1` and `--seq-len -1` in tracebacks from torch and numpy; `--speedup nan`,
`--timeout -1`, `--batch-timeout-ms -1` and `--device-time-scale 0` ran on them silently.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from gem_workloads.loader.cli import main as loader_main
from gem_workloads.precompute.__main__ import parser as precompute_parser
from gem_workloads.replay.__main__ import parser as replay_parser
from gem_workloads.serving.__main__ import parser as serving_parser
from gem_workloads.training.__main__ import parser as training_parser
from gem_workloads.transfer.__main__ import parser as transfer_parser

PRECOMPUTE = ["--preset", "tiny", "--store", "redis://x", "--source", "redis://x"]
REPLAY = ["--trace", "t.csv", "--url", "http://127.0.0.1:9"]

CASES: list[tuple[Callable[[], argparse.ArgumentParser], list[str], str, str]] = [
    (training_parser, ["--lr", "-1"], "--lr", "a finite number > 0"),
    (training_parser, ["--sparse-lr", "inf"], "--sparse-lr", "a finite number > 0"),
    (training_parser, ["--batch-size", "0"], "--batch-size", "a whole number >= 1"),
    (training_parser, ["--steps", "-1"], "--steps", "a whole number >= 1"),
    (training_parser, ["--checkpoint-every", "-1"], "--checkpoint-every", "a whole number >= 0"),
    (training_parser, ["--holdout-examples", "-5"], "--holdout-examples", "a whole number >= 1"),
    (training_parser, ["--metrics-port", "70000"], "--metrics-port", "a TCP port 0-65535"),
    (precompute_parser, [*PRECOMPUTE, "--gpus-per-worker", "nan"], "--gpus-per-worker", "a finite number >= 0"),
    (precompute_parser, [*PRECOMPUTE, "--workers", "0"], "--workers", "a whole number >= 1"),
    (precompute_parser, [*PRECOMPUTE, "--max-seconds", "-1"], "--max-seconds", "a finite number > 0"),
    (precompute_parser, [*PRECOMPUTE, "--claim-idle-ms", "-1"], "--claim-idle-ms", "a whole number >= 0"),
    (serving_parser, ["--threads", "-1"], "--threads", "a whole number >= 0"),
    (serving_parser, ["--batch-timeout-ms", "nan"], "--batch-timeout-ms", "a finite number >= 0"),
    (serving_parser, ["--device-time-scale", "0"], "--device-time-scale", "a finite number > 0"),
    (serving_parser, ["--port", "70000"], "--port", "a TCP port 0-65535"),
    (serving_parser, ["--seq-len", "-1"], "--seq-len", "a whole number >= 1"),
    (replay_parser, [*REPLAY, "--speedup", "nan"], "--speedup", "a finite number > 0"),
    (replay_parser, [*REPLAY, "--timeout", "-1"], "--timeout", "a finite number > 0"),
    (replay_parser, [*REPLAY, "--max-in-flight", "0"], "--max-in-flight", "a whole number >= 1"),
    (transfer_parser, ["eval", "--threads", "-2"], "--threads", "a whole number >= 0"),
]


@pytest.mark.parametrize(("parser", "argv", "flag", "expects"), CASES, ids=[f"{c[0].__module__}{c[2]}" for c in CASES])
def test_bad_numbers_are_refused_naming_the_flag(
    parser: Callable[[], argparse.ArgumentParser],
    argv: list[str],
    flag: str,
    expects: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert f"error: argument {flag}: expected {expects}, got {argv[-1]!r}" in last


def test_the_serving_port_from_the_environment_is_checked_as_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator sets GEM_SERVING_PORT from spec.port; the default goes through the same type."""
    monkeypatch.setenv("GEM_SERVING_PORT", "9090")
    assert serving_parser().parse_args([]).port == 9090
    monkeypatch.setenv("GEM_SERVING_PORT", "http")
    with pytest.raises(SystemExit):
        serving_parser().parse_args([])
    assert "argument --port: expected a TCP port 0-65535, got 'http'" in capsys.readouterr().err


def test_gem_load_refuses_zero_hash_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gem-load reports usage errors its own way (one `gem-load: error:` line, exit 2)."""
    assert loader_main(["manifest", str(tmp_path), "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gem-load: error: argument --workers: expected a whole number >= 1, got '0'"
