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

Errors name the file, the line and the column. The fields, the time units, the time parsing and
the reading line by line (CSV rows, JSON lines) are ``gem_common.traces``, the same code
``gemop replay`` reads with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gem_common.traces import TimeReader, TraceError, TraceFields, csv_trace, json_lines


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
    """One request per row; a short row is read as far as it goes (a missing time is an error)."""
    fields = fields or TraceFields()
    clock = TimeReader(time_unit)
    header, lines = csv_trace(path, fields, cost_column)
    times: list[float] = []
    costs: list[float] = []
    rows = 0
    for line, row in lines:
        if not row:
            continue
        rows += 1
        if header.keeps(row):
            times.append(header.time_of(line, row, clock))
            costs.append(header.cost_of(line, row))
    if not times and fields.where and rows:
        raise TraceError(f"{path}: none of its {rows} rows matches {fields.described()}")
    return _normalise(times, costs, path, clock.unit)


def load_jsonl(path: Path, time_unit: str = "auto", fields: TraceFields | None = None) -> Arrivals:
    """One line per request or per ``count`` of them, streamed: ``MAX_ARRIVALS`` caps what it holds."""
    fields = fields or TraceFields()
    clock = TimeReader(time_unit)
    times: list[float] = []
    costs: list[float] = []
    time_key = fields.time or "t"
    rows = 0
    for line, obj in json_lines(path):
        if isinstance(obj, dict):
            rows += 1
            # Another service's line is skipped before its fields are judged, as `gemop replay` does.
            if not fields.matches(obj):
                continue
        if not isinstance(obj, dict) or time_key not in obj:
            hint = "" if fields.time else " (--time-column NAME reads the time from another key)"
            raise TraceError(f"{path}: line {line}: expected an object with {time_key!r} (seconds){hint}")
        t = _line_time(path, line, obj[time_key], time_key, clock)
        count, cost = _count_and_cost(path, line, obj)
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


def _count_and_cost(path: Path, line: int, obj: dict[str, object]) -> tuple[float, float]:
    """A line's ``count`` (a whole number >= 0, default 1) and ``cost`` (>= 0, default the count)."""
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
    return count, cost


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
