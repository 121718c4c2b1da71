"""How a trace's fields are named and its times read: shared by `gemop replay` / `gemop loadtest`
(`gem_operator.replay.traces`) and the replayer that sends a trace to a ranking server
(`gem_workloads.replay.trace`), so the two read a team's log the same way.

Numeric times are seconds, unless they are too large to be: from 1e11 on (past the year 5138 as
seconds) they are epoch milliseconds, from 1e14 microseconds, from 1e17 nanoseconds, judged on the
first time of the file (`TimeReader("auto")`; a unit named instead is used as given). Date-times
without an offset are read as UTC, so daylight saving never bends the time axis.

Both readers read a file line by line here too (`json_lines`, `csv_lines` and `csv_trace`), so a
file that cannot be read, is not UTF-8, or holds a line that is not JSON or CSV gets one message,
naming the file and the line, whichever command read it. What a line means is each reader's own.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


class TraceError(ValueError):
    """A trace or service file is unusable; the message names the file, line and column."""


@dataclass(frozen=True)
class TraceFields:
    """Which fields of a trace hold what: `time` (None: CSV `TIMESTAMP` in any case, JSONL `t`) and
    the rows to keep, `where` (every field equal to its value: a CSV cell as written, a JSON value as
    JSON writes it, so `status=200` matches the number and `ok=true` the boolean)."""

    time: str | None = None
    where: tuple[tuple[str, str], ...] = ()

    def described(self) -> str:
        return " ".join(f"--where {k}={v}" for k, v in self.where)

    def matches(self, obj: dict[str, object]) -> bool:
        """Whether a JSON line is one `where` keeps: every field present and equal to its value."""
        return all(k in obj and json_text(obj[k]) == v for k, v in self.where)


def parse_where(text: str) -> tuple[str, str]:
    """`FIELD=VALUE` of a `--where` flag."""
    field, sep, value = text.partition("=")
    if not sep or not field.strip():
        raise TraceError(f"--where {text!r}: expected FIELD=VALUE, e.g. --where service=ranker")
    return field.strip(), value


def json_text(value: object) -> str:
    """A JSON value as `--where` compares it: a string as it is, anything else as JSON writes it."""
    return value if isinstance(value, str) else json.dumps(value)


# Seconds per unit of a numeric time.
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
TIME_UNIT_NAMES = {"s": "seconds", "ms": "epoch milliseconds", "us": "epoch microseconds", "ns": "epoch nanoseconds"}


def numeric_time_unit(first: float) -> str:
    """The unit of a file's numeric times, from the size of its first: seconds up to 1e11 (the
    year 5138), then epoch milliseconds, microseconds (1e14) and nanoseconds (1e17)."""
    for bound, unit in ((1e17, "ns"), (1e14, "us"), (1e11, "ms")):
        if abs(first) >= bound:
            return unit
    return "s"


class TimeReader:
    """Parses a file's time stamps: date-times to epoch seconds; numbers in the file's unit (given,
    or picked by `numeric_time_unit` from the first number read)."""

    def __init__(self, time_unit: str) -> None:
        if time_unit != "auto" and time_unit not in TIME_UNITS:
            raise TraceError(f"--time-unit must be auto or one of {', '.join(TIME_UNITS)}, got {time_unit!r}")
        self.unit: str | None = None if time_unit == "auto" else time_unit

    def number(self, value: float) -> float:
        if self.unit is None:
            self.unit = numeric_time_unit(value)
        return value * TIME_UNITS[self.unit]

    def parse(self, raw: str) -> float:
        text = raw.strip()
        try:
            value = float(text)
        except ValueError:
            return parse_datetime(text)
        if not math.isfinite(value):
            raise ValueError(f"not a finite time: {raw!r}")
        return self.number(value)


def parse_datetime(text: str) -> float:
    """An ISO date-time as epoch seconds (UTC when it names no offset)."""
    # Python's parser takes at most 6 fractional digits (the Azure traces carry 7); what follows
    # the digits (an offset, "Z") is kept.
    if "." in text:
        head, frac = text.rsplit(".", 1)
        digits = frac[: len(frac) - len(frac.lstrip("0123456789"))]  # the leading run, not an offset's
        rest = frac[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """`--time-unit`, `--time-column` and `--where`: how every command that reads a team's trace
    (`gemop replay`, `gemop loadtest`, the workloads' replayer) is told to read it, worded once;
    `trace_fields` reads them back."""
    parser.add_argument(
        "--time-unit",
        choices=("auto", *TIME_UNITS),
        default="auto",
        help="unit of numeric time stamps (default auto: seconds, or epoch ms/us/ns when too large for seconds)",
    )
    parser.add_argument("--time-column", help="CSV column (JSONL key) holding the time (default TIMESTAMP, JSONL t)")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="keep only the rows whose FIELD holds VALUE, e.g. --where service=ranker (repeatable: all must hold)",
    )


def trace_fields(args: argparse.Namespace) -> TraceFields:
    """The `TraceFields` of `add_trace_arguments`'s flags. Raises TraceError for a bad `--where`."""
    return TraceFields(args.time_column, tuple(parse_where(w) for w in args.where))


# --------------------------------------------------------------------------- reading line by line
# Files are opened with `surrogateescape`: a byte that is not UTF-8 comes through as a lone surrogate,
# so the line holding it is known (a strict decoder fails on a whole chunk, lines before it included).


def _unreadable(path: Path, exc: OSError) -> TraceError:
    """A missing, unreadable or not-a-file path: the OS's reason, without a traceback."""
    return TraceError(f"{path}: cannot read trace: {exc.strerror or exc}")


def _bad_byte(text: str) -> tuple[int, int] | None:
    """(index, value) of the first byte of `text` that was not UTF-8, or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start, ord(text[exc.start]) - 0xDC00  # surrogateescape: byte b reads as U+DC00 + b
    return None


def _not_utf8(byte: int, kind: str) -> str:
    """The byte and the likely cause: another file given, or a log exported in another encoding."""
    return f"not UTF-8 text (byte 0x{byte:02x}); is it a {kind} trace, saved as UTF-8?"


def json_lines(path: Path) -> Iterator[tuple[int, object]]:
    """Each line's JSON value with its line number, blank lines skipped. A stream, not a list: a
    team's log may outgrow memory. A line that does not read is a TraceError naming the line."""
    try:
        with path.open(encoding="utf-8", errors="surrogateescape") as fh:
            for no, text in enumerate(fh, start=1):
                if text.strip():
                    yield no, _json_value(path, no, text)
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _json_value(path: Path, no: int, text: str) -> object:
    """One line's value; json's own errors (and its recursion) become the line's TraceError."""
    bad = _bad_byte(text)
    if bad is not None:
        raise TraceError(f"{path}: line {no}, column {bad[0] + 1}: {_not_utf8(bad[1], 'JSONL')}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: line {no}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:  # json's decoder recurses per level
        raise TraceError(f"{path}: line {no}: invalid JSON: nested too deeply for a trace line") from None


CsvLines = Iterator[tuple[int, list[str]]]


def csv_lines(path: Path) -> CsvLines:
    """Each CSV row, header first, with the line it ends on (a quoted field may span lines); blank
    lines come as empty rows, for the reader to skip. A stream; failures name the line."""
    try:
        # -sig: a spreadsheet's byte-order mark is not part of the first column's name
        with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
            reader = csv.reader(fh)
            try:
                for row in reader:
                    if not "".join(row).isascii():  # a byte that was not UTF-8 is never ASCII
                        _check_utf8(path, reader.line_num, row)
                    yield reader.line_num, row
            except csv.Error as exc:  # e.g. a field past the csv module's size limit
                raise TraceError(f"{path}: line {reader.line_num}: not a CSV row ({exc})") from None
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _check_utf8(path: Path, line: int, row: list[str]) -> None:
    """Refuses a row with a byte that was not UTF-8 (any row, one the reader skips too)."""
    for i, cell in enumerate(row):
        bad = _bad_byte(cell)
        if bad is not None:
            raise TraceError(f"{path}: line {line}, field {i + 1}: {_not_utf8(bad[1], 'CSV')}")


def _index(names: list[str], name: str) -> int | None:
    """The column called `name`: exact, else the one matching without case (two such: None)."""
    if name in names:
        return names.index(name)
    upper = [n.upper() for n in names]
    return upper.index(name.upper()) if upper.count(name.upper()) == 1 else None


@dataclass(frozen=True)
class CsvHeader:
    """A CSV trace's column names and the columns both readers look up in them: the time, the
    `--where` fields and the `--cost-column` (None: every request costs 1). See `csv_trace`."""

    path: Path
    names: list[str]
    time: int
    where: tuple[tuple[int, str], ...] = ()
    cost: int | None = None

    def keeps(self, row: list[str]) -> bool:
        """Whether `--where` keeps a row: each of its cells, stripped, as written in the flag."""
        return all(i < len(row) and row[i].strip() == v for i, v in self.where)

    def time_of(self, line: int, row: list[str], clock: TimeReader) -> float:
        """A row's time in epoch seconds (a short row's is empty, so an error naming the column)."""
        cell = row[self.time] if self.time < len(row) else ""
        try:
            return clock.parse(cell)
        except ValueError:
            raise TraceError(
                f"{self.path}: line {line}, column {self.names[self.time]}: cannot parse {cell!r} as a time "
                "(expected e.g. 2023-11-16 18:17:03.97 or seconds)"
            ) from None

    def cost_of(self, line: int, row: list[str]) -> float:
        """A row's cost: its cost column's number (finite, >= 0), or 1 without one."""
        if self.cost is None:
            return 1.0
        cell = row[self.cost] if self.cost < len(row) else ""
        at = f"{self.path}: line {line}, column {self.names[self.cost]}"
        try:
            value = float(cell)
        except ValueError:
            raise TraceError(f"{at}: {cell!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise TraceError(f"{at}: cost must be >= 0, got {value}")
        return value


def csv_trace(path: Path, fields: TraceFields, cost_column: str | None = None) -> tuple[CsvHeader, CsvLines]:
    """A CSV trace's header, its columns looked up, and the rows after it, still to be read. The
    time and `--where` columns match without case; a cost column, a weight, is named exactly."""
    lines = csv_lines(path)
    time_name = fields.time or "TIMESTAMP"
    first = next(lines, None)
    if first is None:
        raise TraceError(f"{path}: empty file; expected a header line with a {time_name} column")
    names = [n.strip() for n in first[1]]
    listed = ", ".join(names)
    time = _index(names, time_name)
    if time is None:
        hint = "" if fields.time else "; --time-column NAME reads the time from another"
        raise TraceError(f"{path}: line 1: no {time_name} column (columns: {listed}){hint}")
    where = []
    for k, v in fields.where:
        i = _index(names, k)
        if i is None:
            raise TraceError(f"{path}: line 1: no {k} column for --where {k}={v} (columns: {listed})")
        where.append((i, v))
    if cost_column is not None and cost_column not in names:
        raise TraceError(f"{path}: line 1: no column {cost_column!r} for --cost-column (columns: {listed})")
    cost = None if cost_column is None else names.index(cost_column)
    return CsvHeader(path, names, time, tuple(where), cost), lines


__all__ = [
    "TIME_UNITS",
    "TIME_UNIT_NAMES",
    "CsvHeader",
    "CsvLines",
    "TimeReader",
    "TraceError",
    "TraceFields",
    "add_trace_arguments",
    "csv_lines",
    "csv_trace",
    "json_lines",
    "json_text",
    "numeric_time_unit",
    "parse_datetime",
    "parse_where",
    "trace_fields",
]
