"""Trace files (the formats ``gemop replay`` reads), as request arrivals with a cost.

- CSV with a ``TIMESTAMP`` column (a date-time like ``2023-11-16 18:17:03.97996``, or seconds),
  one row per request; ``cost_column`` weights each request by that numeric column, normalised
  to mean 1.
- JSONL, one object per line: ``{"t": seconds, "cost": number}``; optional ``"count"`` is the
  number of requests the line stands for (default 1; ``cost`` defaults to ``count`` and is spread
  evenly over them).

Errors name the file, the line and the column.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _csv import Reader


class TraceError(ValueError):
    pass


@dataclass
class Arrivals:
    times: list[float]  # seconds since the first request, ascending
    costs: list[float]  # mean 1

    def __len__(self) -> int:
        return len(self.times)


# A JSONL line's "count" expands into that many requests: more than this in all is a trace the
# replayer could not send (it stops at --max-requests, 100,000 by default), and memory it would fill.
MAX_ARRIVALS = 20_000_000


def _time(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
        raise ValueError(f"not a finite time: {raw!r}")
    text = raw.strip()
    # Python's parser takes at most 6 fractional digits; the Azure traces carry 7.
    if "." in text:
        head, frac = text.rsplit(".", 1)
        text = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(text).timestamp()


def _normalise(times: list[float], costs: list[float], path: Path) -> Arrivals:
    if not times:
        raise TraceError(f"{path}: no requests in the trace")
    order = sorted(range(len(times)), key=times.__getitem__)
    t0 = times[order[0]]
    mean = sum(c / len(costs) for c in costs)  # divided first: a sum of huge costs would overflow
    if mean <= 0:
        raise TraceError(f"{path}: costs sum to zero; cannot weight requests by them")
    return Arrivals([times[i] - t0 for i in order], [costs[i] / mean for i in order])


def load_csv(path: Path, cost_column: str | None = None) -> Arrivals:
    # -sig: a spreadsheet's byte-order mark is not part of the first column's name
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            return _read_csv(path, reader, cost_column)
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); is it a CSV trace?") from None
        except csv.Error as exc:  # e.g. a field past the csv module's size limit
            raise TraceError(f"{path}: line {reader.line_num}: not a CSV row ({exc})") from None


def _read_csv(path: Path, reader: Reader, cost_column: str | None) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
    try:
        names = [n.strip() for n in next(reader)]
    except StopIteration:
        raise TraceError(f"{path}: empty file; expected a header line with a TIMESTAMP column") from None
    upper = [n.upper() for n in names]
    if "TIMESTAMP" not in names and upper.count("TIMESTAMP") != 1:
        raise TraceError(f"{path}: line 1: no TIMESTAMP column (columns: {', '.join(names)})")
    t_idx = names.index("TIMESTAMP") if "TIMESTAMP" in names else upper.index("TIMESTAMP")
    c_idx = None
    if cost_column is not None:
        if cost_column not in names:
            raise TraceError(f"{path}: line 1: no column {cost_column!r} (columns: {', '.join(names)})")
        c_idx = names.index(cost_column)
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        try:
            times.append(_time(row[t_idx]))
        except (ValueError, IndexError):
            bad = row[t_idx] if t_idx < len(row) else ""
            raise TraceError(f"{path}: line {line}, column TIMESTAMP: cannot parse {bad!r} as a time") from None
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
    return _normalise(times, costs, path)


def load_jsonl(path: Path) -> Arrivals:
    try:
        return _read_jsonl(path)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason}); is it a JSONL trace?") from None


def _read_jsonl(path: Path) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
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
            if not isinstance(obj, dict) or "t" not in obj:
                raise TraceError(f"{path}: line {line}: expected an object with 't' (seconds)")
            values: dict[str, float] = {}
            for key, value in (("t", obj["t"]), ("count", obj.get("count", 1)), ("cost", obj.get("cost"))):
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
                times.append(values["t"])
                costs.append(cost / count)
    return _normalise(times, costs, path)


def load_trace(path: str | Path, cost_column: str | None = None) -> Arrivals:
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    if p.suffix in (".jsonl", ".ndjson"):
        return load_jsonl(p)
    return load_csv(p, cost_column)
