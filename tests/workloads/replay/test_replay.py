"""Trace replayer: trace formats, and open-loop load against a real ranking server process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from gem_workloads.replay.__main__ import main as replay_main
from gem_workloads.replay.runner import ReplayConfig, replay
from gem_workloads.replay.trace import TraceError, load_trace

pytestmark = pytest.mark.workloads

AZURE = Path(__file__).resolve().parents[3] / "data" / "traces" / "azure-llm-2023-code.csv"


def test_csv_trace_with_datetimes_and_costs(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens\n"
        "2023-11-16 18:17:04.0319600,300\n"
        "2023-11-16 18:17:03.9799600,100\n"
        "2023-11-16 18:17:05.9799600,200\n"
    )
    a = load_trace(p, "ContextTokens")
    assert a.times == pytest.approx([0.0, 0.052, 2.0])
    assert a.costs == pytest.approx([0.5, 1.5, 1.0])
    assert load_trace(p).costs == [1.0, 1.0, 1.0]


def test_jsonl_trace_with_counts(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"t": 1.0, "cost": 4, "count": 2}\n\n{"t": 0.5}\n')
    a = load_trace(p)
    assert a.times == [0.0, 0.5, 0.5]
    assert a.costs == pytest.approx([1 / 5 * 3, 2 / 5 * 3, 2 / 5 * 3])


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.csv", "WHEN\n1\n", "line 1: no TIMESTAMP column"),
        ("a.csv", "TIMESTAMP\n1\nyesterday\n", "line 3, column TIMESTAMP"),
        ("a.csv", "", "empty file"),
        ("a.jsonl", '{"t": 1}\n{"t": "x"}\n', "line 2, field t"),
        ("a.jsonl", '{"t": 1}\n{oops\n', "line 2, column 2: invalid JSON: Expecting property name"),
        # each of these was a traceback, or (count) a loop filling memory
        ("a.csv", "TIMESTAMP\n1\nnan\n", "line 3, column TIMESTAMP: cannot parse 'nan'"),
        ("a.csv", "TIMESTAMP\n1\n" + "9" * 200_000 + "\n", r"line 3: not a CSV row \(field larger"),
        ("a.csv", "TIMESTAMP\n1\n\udc80\n", r"line 3, field 1: not UTF-8 text \(byte 0x80\); is it a CSV trace"),
        ("a.jsonl", '{"t": 1}\n{"t": 2, "count": 1e12}\n', "line 2: the counts add up to more than 20,000,000"),
        ("a.jsonl", '{"t": 1}\n\udcff\n', r"line 2, column 1: not UTF-8 text \(byte 0xff\); is it a JSONL trace"),
    ],
)
def test_bad_traces_name_the_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8", "surrogateescape"))  # lone surrogates: bytes that are not UTF-8
    with pytest.raises(TraceError, match=message):
        load_trace(p)


def test_a_csv_trace_from_a_spreadsheet_reads_as_written(tmp_path: Path) -> None:
    """A byte-order mark before the header, a lower-case column name and huge costs (weights,
    normalised to mean 1) read as the plain trace does."""
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP,c\n1,1\n2.5,1\n")
    for name, text in (
        ("bom.csv", "\ufeffTIMESTAMP,c\n1,1e308\n2.5,1e308\n"),
        ("lower.csv", "timestamp,c\n1,2\n2.5,2\n"),
    ):
        (tmp_path / name).write_text(text, encoding="utf-8")
        read, want = load_trace(tmp_path / name, "c"), load_trace(plain, "c")
        assert (read.times, read.costs) == (want.times, want.costs) == ([0.0, 1.5], [1.0, 1.0])


def test_date_times_without_an_offset_are_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # New York moves its clocks from 02:00 to 03:00 on 2024-03-10: read as local time, a naive
    # 01:59:59 -> 03:00:01 would be 2 s apart, not the hour and 2 s the trace wrote.
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        p = tmp_path / "dst.csv"
        p.write_text("TIMESTAMP\n2024-03-10 01:59:59\n2024-03-10 03:00:01\n")
        assert load_trace(p).times == [0.0, 3602.0]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main(["--trace", str(tmp_path / "missing.csv"), "--url", "http://127.0.0.1:9"]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # refused while parsing (gem_common.argtypes)
        replay_main(["--trace", str(AZURE), "--url", "http://x", "--speedup", "0"])
    assert info.value.code == 2
    assert "argument --speedup: expected a finite number > 0, got '0'" in capsys.readouterr().err


def test_deeply_nested_lines_are_refused_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """json's decoder recurses per level: such a line was a RecursionError traceback."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert replay_main(["--trace", str(deep), "--url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {deep}: line 1: invalid JSON: nested too deeply for a trace line"
    assert replay_main(["--labelled", str(deep), "--url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --labelled: {deep}: line 1: invalid JSON: nested too deeply for a trace line"
    )


def test_a_labelled_file_names_the_line_that_does_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The labelled reader shares the trace readers' line reading: the line, and the column or byte."""
    good = '{"body": {"user": {}, "candidates": [{}]}, "labels": {"ctr": 1}}'
    cases = {
        "shape.jsonl": (f"{good}\n\n[1, 2]\n", "line 3: expected {'body': {...}, 'labels': {task: 0|1}}"),
        "json.jsonl": (f"{good}\n{{body\n", "line 2, column 2: invalid JSON"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        assert replay_main(["--labelled", str(path), "--url", "http://127.0.0.1:9"]) == 2
        assert f"error: --labelled: {path}: {message}" in capsys.readouterr().err
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(good.encode() + b"\n" + b'{"body": {"q": "caf\xe9"}}\n')
    assert replay_main(["--labelled", str(latin), "--url", "http://127.0.0.1:9"]) == 2
    assert f"{latin}: line 2, column 20:" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    port = _free_port()
    cmd = [sys.executable, "-m", "gem_workloads.serving", "--preset", "tiny", "--port", str(port)]
    cmd += ["--host", "127.0.0.1", "--max-candidates", "256", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError("server not ready after 90 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.servers
def test_achieved_rate_matches_the_trace_at_modest_load(server_url: str) -> None:
    """Six seconds of the Azure trace at 10x (about 25 requests/s, bursty), 16 candidates per request."""
    arrivals = load_trace(AZURE, "ContextTokens")
    cfg = ReplayConfig(url=server_url, speedup=10.0, duration=6.0, candidates=16, max_candidates=64, seq_len=16)
    out = io.StringIO()
    summary = asyncio.run(replay(arrivals, cfg, out))
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    intervals = [x for x in lines if "summary" not in x]
    assert len(intervals) == 6 and lines[-1] == summary
    assert summary["scheduled"] > 60 and summary["errors"] == {} and summary["skipped"] == 0
    assert summary["achieved_rate"] == pytest.approx(summary["trace_rate"], rel=0.05)
    assert summary["send_late_p99_ms"] < 100  # open loop: requests left on time
    assert summary["p99_ms"] is not None and summary["p99_ms"] < 2000
    assert sum(x["ok"] for x in intervals) == summary["ok"]
    assert all({"trace_rate", "achieved_rate", "p50_ms", "p99_ms"} <= set(x) for x in intervals)


@pytest.mark.servers
def test_cli_reads_epoch_milliseconds_and_says_so(
    server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twenty requests 10 ms apart, written in epoch milliseconds: sent within seconds (read as
    seconds they would take over three minutes), with a note naming the unit it picked."""
    trace = tmp_path / "ms.csv"
    trace.write_text("TIMESTAMP\n" + "".join(f"{1_709_251_200_000 + 10 * i}\n" for i in range(20)))
    started = time.monotonic()
    assert replay_main(["--trace", str(trace), "--url", server_url + "/v1/rank"]) == 0
    assert time.monotonic() - started < 60
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1])["ok"] == 20
    assert "numeric time stamps read as epoch milliseconds (by their size; --time-unit s" in err
    assert replay_main(["--trace", str(trace), "--url", server_url + "/v1/rank", "--time-unit", "ms"]) == 0
    assert "note:" not in capsys.readouterr().err


@pytest.mark.servers
def test_cli_bounded_by_count(server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"t": i * 0.01, "cost": 1 + i % 3}) + "\n" for i in range(500)))
    records = tmp_path / "records.jsonl"
    rc = replay_main(
        ["--trace", str(trace), "--url", server_url + "/v1/rank", "--max-requests", "20", "--records", str(records)]
    )
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[-1]["summary"] and lines[-1]["scheduled"] == 20 and lines[-1]["ok"] == 20
    # One record per request, by send time, with its own latency and status.
    rows = [json.loads(x) for x in records.read_text().splitlines()]
    assert len(rows) == 20 and all(r["status"] == "200" and r["ms"] > 0 for r in rows)
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)
    assert {r["candidates"] for r in rows} <= {32, 64, 96}  # costs 1, 2, 3 normalised to mean 1


def test_a_teams_own_log_names_its_time_field_and_mixes_services(tmp_path: Path) -> None:
    """The replayer reads a team's access log as `gemop replay` does: --time-column, JSONL date-time
    strings, --where keeping one service's rows; each missing field says which flag reads it."""
    from gem_common.traces import TraceFields, parse_where
    from gem_workloads.replay.__main__ import parser

    jsonl = tmp_path / "access.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps(
                {"@timestamp": f"2026-12-01T10:00:{i:02d}.5Z", "svc": "ranker" if i % 2 else "search", "code": 200}
            )
            + "\n"
            for i in range(20)
        )
    )
    ranker = TraceFields("@timestamp", (("svc", "ranker"), ("code", "200")))
    a = load_trace(jsonl, fields=ranker)
    assert a.times == [float(2 * k) for k in range(10)]
    with jsonl.open("a") as f:  # another service's line without a time: skipped, not an error
        f.write(json.dumps({"svc": "search", "note": "no time"}) + "\n")
    assert load_trace(jsonl, fields=ranker).times == a.times
    with pytest.raises(TraceError, match=r"expected an object with 't' \(seconds\) \(--time-column NAME"):
        load_trace(jsonl)
    with pytest.raises(TraceError, match="none of its 21 lines matches --where svc=rank"):
        load_trace(jsonl, fields=TraceFields("@timestamp", (("svc", "rank"),)))

    csv_trace = tmp_path / "access.csv"
    csv_trace.write_text("ts,svc\n" + "".join(f"{100 + i},{'ranker' if i % 2 else 'search'}\n" for i in range(20)))
    assert load_trace(csv_trace, fields=TraceFields("ts", (("svc", "ranker"),))).times == a.times
    with pytest.raises(TraceError, match=r"no TIMESTAMP column \(columns: ts, svc\); --time-column NAME"):
        load_trace(csv_trace)
    with pytest.raises(TraceError, match="no zone column for --where zone=eu"):
        load_trace(csv_trace, fields=TraceFields("ts", (("zone", "eu"),)))
    with pytest.raises(TraceError, match="expected FIELD=VALUE"):
        parse_where("=ranker")
    args = parser().parse_args(["--trace", "x", "--url", "http://r", "--time-column", "ts", "--where", "svc=ranker"])
    assert (args.time_column, args.where) == ("ts", ["svc=ranker"])
