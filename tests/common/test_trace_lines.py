"""The line reading both trace readers share (`gem_common.traces`): `json_lines`, `csv_lines` and
`csv_trace`. Each failure is one TraceError naming the file and the line, whichever reader asked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gem_common.traces import CsvHeader, TimeReader, TraceError, TraceFields, csv_lines, csv_trace, json_lines

DEEP = "[" * 100_000 + "]" * 100_000  # json's decoder recurses once per level


Reader = Callable[[Path], Iterator[tuple[int, object]]]


def _error(path: Path, reader: Reader = json_lines) -> str:
    """The message of the TraceError that reading all of `path` raises."""
    with pytest.raises(TraceError) as info:
        list(reader(path))
    return str(info.value)


def test_json_lines_number_every_line_and_skip_blank_ones(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    # \r\n ends a line; U+2028 inside a string does not (str.splitlines would cut the object there)
    p.write_bytes('{"t": 1}\r\n\n   \n{"t": 2, "note": "a\u2028b"}\n[3]\n"x"'.encode())
    assert list(json_lines(p)) == [(1, {"t": 1}), (4, {"t": 2, "note": "a\u2028b"}), (5, [3]), (6, "x")]


def test_json_lines_stream_and_fail_at_the_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"t": 1}\n\n{"t": 2, "cost": }\n')
    lines = json_lines(p)
    assert next(lines) == (1, {"t": 1})  # read before the bad line is reached
    with pytest.raises(TraceError) as info:
        next(lines)
    assert str(info.value) == f"{p}: line 3, column 18: invalid JSON: Expecting value"


def test_json_lines_refuse_deep_nesting_as_json(tmp_path: Path) -> None:
    p = tmp_path / "deep.jsonl"
    p.write_text('{"t": 1}\n' + DEEP + "\n")
    assert _error(p) == f"{p}: line 2: invalid JSON: nested too deeply for a trace line"


def test_json_lines_name_the_line_of_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    """Latin-1 text past the first read chunk (8 KiB): a strict decoder fails the whole chunk and
    cannot say which line; read per line, the line and column are exact."""
    p = tmp_path / "latin1.jsonl"
    head = "".join(json.dumps({"t": i, "svc": "caf\u00e9"}) + "\n" for i in range(1000)).encode()
    p.write_bytes(head + b'{"t": 1000, "svc": "caf\xe9"}\n')
    assert _error(p) == (f"{p}: line 1001, column 24: not UTF-8 text (byte 0xe9); is it a JSONL trace, saved as UTF-8?")


@pytest.mark.parametrize("reader", [json_lines, csv_lines], ids=["json", "csv"])
def test_a_path_that_cannot_be_read_is_named(tmp_path: Path, reader: Reader) -> None:
    missing = tmp_path / "missing.jsonl"
    assert _error(missing, reader) == f"{missing}: cannot read trace: No such file or directory"
    assert _error(tmp_path, reader) == f"{tmp_path}: cannot read trace: Is a directory"


def test_csv_lines_give_the_line_a_row_ends_on(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    # a byte-order mark before the header; a quoted field spanning two lines; a blank line
    p.write_bytes('\ufeffTIMESTAMP,note\n1,"two\nlines"\n\n2,x\n'.encode())
    assert list(csv_lines(p)) == [(1, ["TIMESTAMP", "note"]), (3, ["1", "two\nlines"]), (4, []), (5, ["2", "x"])]


def test_csv_lines_name_the_line_and_field_of_what_does_not_read(tmp_path: Path) -> None:
    p = tmp_path / "latin1.csv"
    p.write_bytes(b"TIMESTAMP,svc\n1,cafe\n2,caf\xe9\n")
    assert (
        _error(p, csv_lines) == f"{p}: line 3, field 2: not UTF-8 text (byte 0xe9); is it a CSV trace, saved as UTF-8?"
    )
    p.write_text("TIMESTAMP\n1\n" + "9" * 200_000 + "\n")
    assert _error(p, csv_lines).startswith(f"{p}: line 3: not a CSV row (field larger than field limit")


def _trace(path: Path, text: str, fields: TraceFields, cost: str | None = None) -> tuple[CsvHeader, list[list[str]]]:
    path.write_text(text)
    header, lines = csv_trace(path, fields, cost)
    return header, [row for _, row in lines]


def test_csv_trace_finds_the_time_where_and_cost_columns(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    fields = TraceFields(None, (("svc", "ranker"),))
    header, rows = _trace(p, " timestamp ,SVC,tokens\n1,ranker,5\n2,search,x\n3\n", fields, "tokens")
    assert (header.names, header.time, header.where, header.cost) == (
        ["timestamp", "SVC", "tokens"],
        0,
        ((1, "ranker"),),
        2,
    )
    assert [header.keeps(row) for row in rows] == [True, False, False]  # a short row lacks the field
    clock = TimeReader("s")
    assert (header.time_of(2, rows[0], clock), header.cost_of(2, rows[0])) == (1.0, 5.0)
    assert _trace(p, "TIMESTAMP\n1\n", TraceFields())[0].cost_of(2, ["1"]) == 1.0  # no cost column: 1 each
    with pytest.raises(TraceError) as info:
        header.cost_of(3, rows[1])
    assert str(info.value) == f"{p}: line 3, column tokens: 'x' is not a number"
    with pytest.raises(TraceError) as info:
        header.cost_of(4, rows[2])
    assert str(info.value) == f"{p}: line 4, column tokens: '' is not a number"
    with pytest.raises(TraceError) as info:
        header.time_of(4, ["", "ranker"], clock)
    assert str(info.value) == (
        f"{p}: line 4, column timestamp: cannot parse '' as a time (expected e.g. 2023-11-16 18:17:03.97 or seconds)"
    )


@pytest.mark.parametrize(
    ("text", "fields", "cost", "message"),
    [
        ("", TraceFields(), None, "empty file; expected a header line with a TIMESTAMP column"),
        ("when,svc\n", TraceFields(), None, "line 1: no TIMESTAMP column (columns: when, svc); --time-column NAME"),
        ("when,svc\n", TraceFields("at"), None, "line 1: no at column (columns: when, svc)"),
        ("when,svc\n", TraceFields("when", (("zone", "eu"),)), None, "line 1: no zone column for --where zone=eu"),
        # a weight is named exactly: SVC is no guess for svc
        ("when,svc\n", TraceFields("when"), "SVC", "line 1: no column 'SVC' for --cost-column (columns: when, svc)"),
    ],
)
def test_csv_header_errors_name_the_file_and_line(
    tmp_path: Path, text: str, fields: TraceFields, cost: str | None, message: str
) -> None:
    p = tmp_path / "t.csv"
    with pytest.raises(TraceError) as info:
        _trace(p, text, fields, cost)
    assert str(info.value).startswith(f"{p}: {message}")


def test_trace_fields_match_json_values_as_json_writes_them() -> None:
    fields = TraceFields(None, (("svc", "ranker"), ("code", "200"), ("ok", "true")))
    assert fields.matches({"svc": "ranker", "code": 200, "ok": True})
    assert not fields.matches({"svc": "ranker", "code": "201", "ok": True})
    assert not fields.matches({"svc": "ranker", "code": 200})  # a missing field is no match
    assert TraceFields().matches({})
