"""Numeric flags of `gemop` are refused at parse time, naming the flag and what it takes.

Before the argparse types (`gem_common.argtypes`), `--sync-seconds nan` and `--trend-seconds nan`
ended in a traceback inside the replay, `--replay-seconds -1` in one inside the demo, and
`--sync-seconds -5`, `--cluster-gpus -3` or `--timeout -1` ran on them silently.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gem_common import argtypes
from gem_operator.cli import main
from gem_operator.replay import traces
from gem_operator.replay.traces import MAX_TRACE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
SERVICE = str(ROOT / "crds" / "samples" / "rankingservice.yaml")
TRACE = str(ROOT / "data" / "traces" / "azure-llm-2023-code.csv")
REPLAY = ["replay", "--trace", TRACE, "--service", SERVICE]
LOADTEST = ["loadtest", "--trace", TRACE, "--service", str(ROOT / "bench" / "loadtest-rankingservice.yaml")]

# (type, accepted text -> value, refused texts, what the message says it expects)
TYPES = [
    ("positive_float", {"0.5": 0.5, "15": 15.0, "1e3": 1000.0}, ["0", "-1", "nan", "inf", "-inf", "x", ""], "> 0"),
    ("non_negative_float", {"0": 0.0, "2.5": 2.5}, ["-0.1", "nan", "inf", "x"], ">= 0"),
    ("positive_int", {"1": 1, "64": 64}, ["0", "-3", "1.5", "nan", "x"], "whole number >= 1"),
    ("non_negative_int", {"0": 0, "7": 7}, ["-1", "2.0", "x"], "whole number >= 0"),
    ("tcp_port", {"0": 0, "8080": 8080, "65535": 65535}, ["-1", "65536", "70000", "http"], "TCP port 0-65535"),
]


@pytest.mark.parametrize(("name", "accepted", "refused", "expects"), TYPES, ids=[t[0] for t in TYPES])
def test_argtypes_accept_and_refuse(name: str, accepted: dict[str, float], refused: list[str], expects: str) -> None:
    convert = getattr(argtypes, name)
    for text, value in accepted.items():
        assert convert(text) == value
        assert type(convert(text)) is type(value)
    for text in refused:
        with pytest.raises(argparse.ArgumentTypeError, match=expects) as info:
            convert(text)
        assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("argv", "flag", "expects"),
    [
        ([*REPLAY, "--sync-seconds", "nan"], "--sync-seconds", "a finite number > 0"),
        ([*REPLAY, "--sync-seconds", "-5"], "--sync-seconds", "a finite number > 0"),
        ([*REPLAY, "--smooth-seconds", "-1"], "--smooth-seconds", "a finite number > 0"),
        ([*REPLAY, "--trend-seconds", "nan"], "--trend-seconds", "a finite number > 0"),
        ([*REPLAY, "--scale", "inf"], "--scale", "a finite number > 0"),
        ([*REPLAY, "--cluster-gpus", "-3"], "--cluster-gpus", "a whole number >= 1"),
        (["demo", "--timeout", "nan"], "--timeout", "a finite number > 0"),
        (["demo", "--replay-seconds", "-1"], "--replay-seconds", "a whole number >= 0"),
        (["sim", "up", "--max-pod-processes", "0"], "--max-pod-processes", "a whole number >= 1"),
        (["run", "-A", "--metrics-port", "70000"], "--metrics-port", "a TCP port 0-65535"),
        ([*LOADTEST, "--minutes", "nan"], "--minutes", "a finite number > 0"),
        ([*LOADTEST, "--start-minute", "-1"], "--start-minute", "a finite number >= 0"),
        ([*LOADTEST, "--candidates", "0"], "--candidates", "a whole number >= 1"),
    ],
)
def test_bad_numbers_are_refused_naming_the_flag(
    argv: list[str], flag: str, expects: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"error: argument {flag}: expected {expects}, got {argv[-1]!r}" in err.splitlines()[-1]


def test_replay_refuses_a_trace_spanning_more_than_its_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One time stamp years off asked the replay for terabytes (a MemoryError); now one clear line."""
    trace = tmp_path / "years.jsonl"
    lines = [{"t": 0.0, "cost": 1.0}, {"t": 30.0, "cost": 1.0}, {"t": 10 * 365 * 86_400.0, "cost": 1.0}]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["replay", "--trace", str(trace), "--service", SERVICE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "years.jsonl: the arrivals span 3,650.0 days" in err
    assert f"at most {MAX_TRACE_SECONDS // 86_400} days: split the trace" in err


@pytest.mark.parametrize(("last", "refused"), [(3_599.0, False), (3_599.999, False), (3_600.0, True)])
def test_the_span_limit_is_on_first_to_last_arrival(
    last: float, refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The boundary, on an hour-long limit (a 31-day replay takes minutes): an hour of seconds is
    3,600 bins, so arrivals 3,599.999 s apart still fit and 3,600 s apart do not."""
    monkeypatch.setattr(traces, "MAX_TRACE_SECONDS", 3_600)
    arrivals = traces.Arrivals(times=[0.0, last], costs=[1.0, 1.0], counts=[1.0, 1.0], path="t.jsonl")
    if refused:
        with pytest.raises(traces.TraceError, match=r"span 0\.0 days"):
            traces.to_series(arrivals)
    else:
        assert len(traces.to_series(arrivals).cost) == 3_600
