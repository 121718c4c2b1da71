"""Trace files (the formats ``gemop replay`` reads), as request arrivals with a cost.

- CSV with a ``TIMESTAMP`` column (a date-time like ``2023-11-16 18:17:03.97996``, or a number),
  one row per request; ``cost_column`` weights each request by that numeric column, normalised
  to mean 1.
- JSONL, one object per line: ``{"t": seconds, "cost": number}``; optional ``"count"`` is the
  number of requests the line stands for (default 1; ``cost`` defaults to ``count`` and is spread
  evenly over them). ``t`` may also be a date-time string.

A team's own log names its fields its own way and often mixes services: ``TraceFields`` (the
replayer's ``--time-column`` and ``--where FIELD=VALUE``) reads the time from another column or
key and keeps only the rows whose fields hold the given values, as ``gemop replay`` does.

Numeric times are seconds, unless too large to be: from 1e11 on (past the year 5138 as seconds)
epoch milliseconds, from 1e14 microseconds, from 1e17 nanoseconds, judged on the file's first
time (``time_unit="auto"``; ``--time-unit`` names the unit instead), as ``gemop replay`` reads
them. Date-times without an offset are UTC, so a daylight-saving change never bends the time axis.

Errors name the file, the line and the column. The fields, the time units and the time parsing
are ``gem_common.traces``, the same code ``gemop replay`` reads with.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gem_common.traces import TimeReader, TraceError, TraceFields, json_text

if TYPE_CHECKING:
    from _csv import Reader


def _column(path: Path, names: list[str], name: str, flag: str) -> int:
    """The index of column ``name`` (exact, else the one matching without case)."""
    if name in names:
        return names.index(name)
    upper = [n.upper() for n in names]
    if upper.count(name.upper()) == 1:
        return upper.index(name.upper())
    raise TraceError(f"{path}: line 1: no {name} column for {flag} (columns: {', '.join(names)})")


@dataclass
class Arrivals:
    times: list[float]  # seconds since the first request, ascending
    costs: list[float]  # mean 1
    time_unit: str | None = None  # what numeric times were read as ("s", "ms", ...); None: date-times

    def __len__(self) -> int:
        return len(self.times)


# A JSONL line's "count" expands into that many requests: more than this in all is a trace the
# replayer could not send (it stops at --max-requests, 100,000 by default), and memory it would fill.
MAX_ARRIVALS = 20_000_000


def _normalise(times: list[float], costs: list[float], path: Path, time_unit: str | None) -> Arrivals:
    if not times:
        raise TraceError(f"{path}: no requests in the trace")
    order = sorted(range(len(times)), key=times.__getitem__)
    t0 = times[order[0]]
    mean = sum(c / len(costs) for c in costs)  # divided first: a sum of huge costs would overflow
    if mean <= 0:
        raise TraceError(f"{path}: costs sum to zero; cannot weight requests by them")
    return Arrivals([times[i] - t0 for i in order], [costs[i] / mean for i in order], time_unit)


def load_csv(
    path: Path, cost_column: str | None = None, time_unit: str = "auto", fields: TraceFields | None = None
) -> Arrivals:
    # -sig: a spreadsheet's byte-order mark is not part of the first column's name
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            return _read_csv(path, reader, cost_column, TimeReader(time_unit), fields or TraceFields())
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); is it a CSV trace?") from None
        except csv.Error as exc:  # e.g. a field past the csv module's size limit
            raise TraceError(f"{path}: line {reader.line_num}: not a CSV row ({exc})") from None


def _read_csv(path: Path, reader: Reader, cost_column: str | None, clock: TimeReader, fields: TraceFields) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
    time_name = fields.time or "TIMESTAMP"
    try:
        names = [n.strip() for n in next(reader)]
    except StopIteration:
        raise TraceError(f"{path}: empty file; expected a header line with a {time_name} column") from None
    try:
        t_idx = _column(path, names, time_name, "the time")
    except TraceError:
        hint = "" if fields.time else "; --time-column NAME reads the time from another"
        raise TraceError(f"{path}: line 1: no {time_name} column (columns: {', '.join(names)}){hint}") from None
    keep = [(_column(path, names, k, f"--where {k}={v}"), v) for k, v in fields.where]
    rows = 0
    c_idx = None
    if cost_column is not None:
        if cost_column not in names:
            raise TraceError(f"{path}: line 1: no column {cost_column!r} (columns: {', '.join(names)})")
        c_idx = names.index(cost_column)
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        rows += 1
        if any(i >= len(row) or row[i].strip() != v for i, v in keep):
            continue
        try:
            times.append(clock.parse(row[t_idx]))
        except (ValueError, IndexError):
            bad = row[t_idx] if t_idx < len(row) else ""
            raise TraceError(f"{path}: line {line}, column {names[t_idx]}: cannot parse {bad!r} as a time") from None
        if c_idx is None:
            costs.append(1.0)
            continue
        try:
            value = float(row[c_idx])
        except (ValueError, IndexError):
            raise TraceError(f"{path}: line {line}, column {cost_column}: not a number") from None
        if not math.isfinite(value) or value < 0:
            raise TraceError(f"{path}: line {line}, column {cost_column}: cost must be >= 0, got {value}")
        costs.append(value)
    if not times and keep and rows:
        raise TraceError(f"{path}: none of its {rows} rows matches {fields.described()}")
    return _normalise(times, costs, path, clock.unit)


def load_jsonl(path: Path, time_unit: str = "auto", fields: TraceFields | None = None) -> Arrivals:
    try:
        return _read_jsonl(path, TimeReader(time_unit), fields or TraceFields())
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); is it a JSONL trace?") from None


def _read_jsonl(path: Path, clock: TimeReader, fields: TraceFields) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
    time_key = fields.time or "t"
    rows = 0
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}: line {line}: not JSON: {exc.msg}") from None
            except RecursionError:  # json's decoder recurses per level
                raise TraceError(f"{path}: line {line}: not JSON: nested too deeply") from None
            if isinstance(obj, dict):
                rows += 1
                # Another service's line is skipped before its fields are judged, as `gemop replay` does.
                if any(k not in obj or json_text(obj[k]) != v for k, v in fields.where):
                    continue
            if not isinstance(obj, dict) or time_key not in obj:
                hint = "" if fields.time else " (--time-column NAME reads the time from another key)"
                raise TraceError(f"{path}: line {line}: expected an object with {time_key!r} (seconds){hint}")
            t = _line_time(path, line, obj[time_key], time_key, clock)
            values: dict[str, float] = {}
            for key, value in (("count", obj.get("count", 1)), ("cost", obj.get("cost"))):
                if key == "cost" and value is None:
                    value = values["count"]
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise TraceError(f"{path}: line {line}, field {key}: expected a number, got {value!r}")
                values[key] = float(value)
            count, cost = values["count"], values["cost"]
            if count < 0 or cost < 0 or int(count) != count:
                raise TraceError(f"{path}: line {line}: count must be a whole number >= 0 and cost >= 0")
            if len(times) + count > MAX_ARRIVALS:
                raise TraceError(
                    f"{path}: line {line}: the counts add up to more than {MAX_ARRIVALS:,} requests, more than "
                    "one replayer sends; cut the trace or divide its counts"
                )
            for _ in range(int(count)):
                times.append(t)
                costs.append(cost / count)
    if not times and fields.where and rows:
        raise TraceError(f"{path}: none of its {rows} lines matches {fields.described()}")
    return _normalise(times, costs, path, clock.unit)


def _line_time(path: Path, line: int, value: object, key: str, clock: TimeReader) -> float:
    """A JSONL line's time: a number (in the file's unit) or a string (a date-time, or a number)."""
    try:
        if isinstance(value, str):
            return clock.parse(value)
        if not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value):
            return clock.number(float(value))
    except ValueError:
        pass
    raise TraceError(f"{path}: line {line}, field {key}: expected a number or a date-time, got {value!r}")


def load_trace(
    path: str | Path, cost_column: str | None = None, time_unit: str = "auto", fields: TraceFields | None = None
) -> Arrivals:
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if p.suffix in (".jsonl", ".ndjson"):
        return load_jsonl(p, time_unit, fields)
    return load_csv(p, cost_column, time_unit, fields)
