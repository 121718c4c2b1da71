"""Traces and service manifests for the replay: parsing, per-second load series, scale modes.

TRACE is either
- CSV with a `TIMESTAMP` column (date-time like `2023-11-16 18:17:03.97996`, or a number),
  one row per request; `--cost-column NAME` weights each request by that numeric column,
  normalised to mean 1 (so a cost unit is an average request), or
- JSONL, one object per line: `{"t": seconds, "cost": number}`; optional `"count"` is the
  number of requests the line stands for (default 1; `cost` defaults to `count`), so a
  pre-aggregated trace may hold one line per second. `t` may also be a date-time string.

A team's own log names its fields its own way and often mixes services: `--time-column NAME`
reads the time from another column (or key), and `--where FIELD=VALUE` (repeatable) keeps only
the rows whose field holds that value (`TraceFields`).

Numeric times are seconds, unless they are too large to be: from 1e11 on (past the year 5138 as
seconds) they are epoch milliseconds, from 1e14 microseconds, from 1e17 nanoseconds, judged on
the first time of the file (`time_unit="auto"`; `--time-unit` names the unit instead). Tracing
systems and databases export those units, and read as seconds a 15-minute trace in milliseconds
would replay as 10 days of near-silence.

Every parse error names the file, the line and the column or key. The fields, the time units, the
time parsing and the reading line by line (CSV rows, JSON lines) are `gem_common.traces`, the same
code the workloads' replayer reads with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import ValidationError

from gem_common.traces import (
    TIME_UNIT_NAMES,
    TimeReader,
    TraceError,
    TraceFields,
    add_trace_arguments,
    csv_trace,
    json_lines,
    parse_where,
    trace_fields,
)
from gem_common.yamldocs import load_documents
from gem_operator.api.serving import RankingServiceSpec


@dataclass(frozen=True)
class LoadSeries:
    """Load per simulated second: cost units/s and requests/s (both already scaled)."""

    cost: np.ndarray[Any, np.dtype[np.float64]]
    requests: np.ndarray[Any, np.dtype[np.float64]]
    name: str = "trace"

    @property
    def seconds(self) -> int:
        return len(self.cost)


@dataclass(frozen=True)
class Arrivals:
    """Request arrivals: seconds from the first one, request counts and cost units."""

    times: list[float]
    counts: list[float]
    costs: list[float]
    path: str
    time_unit: str | None = None  # what numeric times were read as ("s", "ms", ...); None: date-times


def time_note(arrivals: Arrivals, time_unit: str) -> str:
    """What a report's header says of numeric time stamps not read as seconds ("" otherwise): a
    unit picked by size is a guess the user should see, with the flag that overrides it."""
    if arrivals.time_unit in (None, "s"):
        return ""
    how = f"--time-unit {time_unit}" if time_unit != "auto" else "by their size; --time-unit s reads them as seconds"
    return f"time stamps: numbers, read as {TIME_UNIT_NAMES[arrivals.time_unit]} ({how})"


def _load_csv(path: Path, cost_column: str | None, clock: TimeReader, fields: TraceFields) -> Arrivals:
    """One request per row; a row must have the header's fields (a shifted column is no request)."""
    header, lines = csv_trace(path, fields, cost_column)
    times: list[float] = []
    costs: list[float] = []
    rows = 0
    for line, row in lines:
        if all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header.names):
            raise TraceError(f"{path}: line {line}: {len(row)} fields, the header has {len(header.names)}")
        rows += 1
        if header.keeps(row):
            times.append(header.time_of(line, row, clock))
            costs.append(header.cost_of(line, row))
    if not times:
        if fields.where and rows:
            raise TraceError(f"{path}: none of its {rows} rows matches {fields.described()}")
        raise TraceError(f"{path}: no requests after the header")
    if header.cost is not None:
        mean = sum(c / len(costs) for c in costs)  # divided first: a sum of huge costs would overflow
        if mean <= 0:
            raise TraceError(f"{path}: column {cost_column} sums to zero; cannot weight requests by it")
        costs = [c / mean for c in costs]
    return Arrivals(times, [1.0] * len(times), costs, str(path), clock.unit)


def _load_jsonl(path: Path, clock: TimeReader, fields: TraceFields) -> Arrivals:
    """One line per request or per group of them (`count`), weighed by `cost`."""
    time_key = fields.time or "t"
    rows = 0
    times: list[float] = []
    counts: list[float] = []
    costs: list[float] = []
    for no, obj in json_lines(path):
        if not isinstance(obj, dict):
            raise TraceError(f'{path}: line {no}: expected an object like {{"t": 0.5, "cost": 1}}')
        rows += 1
        if not fields.matches(obj):
            continue
        times.append(_json_time(path, no, obj, time_key, clock, fields))
        count = _json_number(path, no, obj, "count", 1.0)
        counts.append(count)
        costs.append(_json_number(path, no, obj, "cost", count))
    if not times:
        if fields.where and rows:
            raise TraceError(f"{path}: none of its {rows} lines matches {fields.described()}")
        raise TraceError(f"{path}: no requests")
    return Arrivals(times, counts, costs, str(path), clock.unit)


def _json_number(path: Path, line: int, obj: dict[str, Any], key: str, default: float) -> float:
    """A line's `count` or `cost`: a finite number >= 0, `default` when the key is missing."""
    if key not in obj:
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise TraceError(f"{path}: line {line}, key {key!r}: expected a number >= 0, got {v!r}")
    return float(v)


def _json_time(path: Path, line: int, obj: dict[str, Any], key: str, clock: TimeReader, fields: TraceFields) -> float:
    """A line's time: a number (in the file's unit) or a string (a date-time, or a number)."""
    if key not in obj:
        hint = "" if fields.time else " (--time-column NAME reads the time from another key)"
        raise TraceError(f"{path}: line {line}: missing key {key!r}{hint}")
    v = obj[key]
    try:
        if isinstance(v, str):
            return clock.parse(v)
        if not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0:
            return clock.number(float(v))
    except ValueError:
        pass
    raise TraceError(
        f"{path}: line {line}, key {key!r}: expected seconds >= 0 or a date-time like 2023-11-16T18:17:03Z, got {v!r}"
    )


def load_trace(
    path: str | Path, cost_column: str | None = None, time_unit: str = "auto", fields: TraceFields | None = None
) -> Arrivals:
    """Parse a CSV or JSONL trace (chosen by extension, else by the first character); numeric times
    in `time_unit` ("auto": by their size, see the module's docstring); `fields` names the time
    field and the rows to keep."""
    fields = fields or TraceFields()
    clock = TimeReader(time_unit)
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        jsonl = True
    elif suffix == ".csv":
        jsonl = False
    else:
        try:
            with p.open() as fh:
                head = fh.read(64).lstrip()
        except OSError as exc:
            raise TraceError(f"{p}: cannot read trace: {exc.strerror or exc}") from exc
        except UnicodeDecodeError:
            head = ""  # not text: the CSV reader says so
        jsonl = head.startswith("{")
    if jsonl:
        if cost_column is not None:
            raise TraceError(f"{p}: --cost-column applies to CSV traces; JSONL lines carry their own 'cost'")
        return _load_jsonl(p, clock, fields)
    return _load_csv(p, cost_column, clock, fields)


ScaleMode = Literal["independent", "duplicate"]
SCALE_MODES: tuple[ScaleMode, ...] = ("independent", "duplicate")
TREND_SECONDS = 300.0
# The replay holds a few float arrays per second of the trace: 31 days is ~20 MB each, and a time
# stamp years off (a wrong year, milliseconds read as seconds) would otherwise ask for terabytes.
MAX_TRACE_SECONDS = 31 * 86_400


def centred_mean(x: np.ndarray[Any, np.dtype[np.float64]], width: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Centred moving average over `width` seconds, averaging only the samples that exist at the edges."""
    n = len(x)
    if width <= 1 or n == 0:
        return x.astype(np.float64)
    half = width // 2
    csum = np.concatenate(([0.0], np.cumsum(x, dtype=np.float64)))
    lo = np.clip(np.arange(n) - half, 0, n)
    hi = np.clip(np.arange(n) - half + width, 0, n)
    out: np.ndarray[Any, np.dtype[np.float64]] = (csum[hi] - csum[lo]) / (hi - lo)
    return out


def superpose(
    x: np.ndarray[Any, np.dtype[np.float64]],
    scale: float,
    trend: np.ndarray[Any, np.dtype[np.float64]],
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per-second sum of `scale` independent copies of a series whose common trend is `trend`.

    `X * trend + sqrt(X) * (x - trend)`: the mean grows X-fold, the fluctuations around it (with
    their time structure: a burst that lasts 20 s still lasts 20 s) grow in variance, sqrt(X) in
    amplitude, as a sum of X independent copies does (the central limit theorem's scaling; for a
    Poisson trace exactly Poisson(X * rate)'s mean and variance). Never negative for X >= 1; for
    X < 1 it is thinning in expectation, `X * x`.
    """
    if scale <= 1:
        return np.asarray(x * scale, dtype=np.float64)
    out: np.ndarray[Any, np.dtype[np.float64]] = np.maximum(0.0, scale * trend + math.sqrt(scale) * (x - trend))
    return out


def to_series(
    arrivals: Arrivals,
    *,
    scale: float = 1.0,
    smooth_seconds: float = 10.0,
    mode: ScaleMode = "independent",
    trend_seconds: float = TREND_SECONDS,
    trend: np.ndarray[Any, np.dtype[np.float64]] | None = None,
) -> LoadSeries:
    """Bin arrivals per second from the first arrival and scale them by `scale` (`--scale-mode`).

    - `independent` (default: X times as many users): each second is the sum of X independent
      copies of the trace's arrival process (`superpose`). What is common to every copy is the
      trace's trend, a centred `trend_seconds` (300 s) moving average of its per-second counts
      and costs (or `trend`, the per-second intensity of a synthetic trace, when the caller knows
      it): diurnal swings, ramps and events that last minutes move all users together; faster
      fluctuations are each copy's own and add in variance. No further smoothing: the copies'
      noise is the per-second noise the aggregate stream has.
    - `duplicate` (the replay's earlier meaning): every request stands for X requests in the same
      second, so bursts and sampling noise grow X-fold, then a centred `smooth_seconds` (10 s)
      moving average (X-fold sampling noise would otherwise be spikes no aggregate stream has).
    """
    if scale <= 0 or not math.isfinite(scale):
        raise TraceError(f"--scale must be a positive number, got {scale}")
    if mode not in SCALE_MODES:
        raise TraceError(f"--scale-mode must be one of {', '.join(SCALE_MODES)}, got {mode!r}")
    t0 = min(arrivals.times)
    rel = np.asarray(arrivals.times, dtype=float) - t0
    span = float(rel.max())
    if span >= MAX_TRACE_SECONDS:
        raise TraceError(
            f"{arrivals.path}: the arrivals span {span / 86_400:,.1f} days from first to last; the replay bins "
            f"them per second and takes at most {MAX_TRACE_SECONDS // 86_400} days: split the trace, or look for "
            "a time stamp far from the others (a wrong year or unit)"
        )
    n = math.floor(span) + 1
    idx = np.minimum(rel.astype(int), n - 1)
    cost = np.asarray(np.bincount(idx, weights=np.asarray(arrivals.costs, dtype=float), minlength=n), dtype=np.float64)
    reqs = np.asarray(np.bincount(idx, weights=np.asarray(arrivals.counts, dtype=float), minlength=n), dtype=np.float64)
    if not (np.isfinite(cost).all() and np.isfinite(reqs).all()):
        raise TraceError(
            f"{arrivals.path}: the counts or costs of one second add up past a float's range; "
            "write them in smaller units"
        )
    name = Path(arrivals.path).name
    if mode == "duplicate":
        width = max(1, round(smooth_seconds))
        # Edge-aware: a zero-padded mean halves the first and last seconds, a dip no trace has.
        return LoadSeries(centred_mean(cost * scale, width), centred_mean(reqs * scale, width), name=name)
    if trend is not None:
        if len(trend) != n:
            raise TraceError(f"{arrivals.path}: trend has {len(trend)} seconds, the trace {n}")
        req_trend = np.asarray(trend, dtype=np.float64)
        # The cost trend follows the request trend at the trace's local mean cost per request.
        w = max(1, round(trend_seconds))
        per_request = centred_mean(cost, w) / np.maximum(centred_mean(reqs, w), 1e-12)
        cost_trend = req_trend * per_request
    else:
        w = max(1, round(trend_seconds))
        req_trend, cost_trend = centred_mean(reqs, w), centred_mean(cost, w)
    return LoadSeries(superpose(cost, scale, cost_trend), superpose(reqs, scale, req_trend), name=name)


# --------------------------------------------------------------------------- service


def load_service(path: str | Path) -> tuple[str, RankingServiceSpec]:
    """A RankingService manifest (YAML) -> (name, validated spec)."""
    p = Path(path)
    try:
        docs = [d for d in load_documents(p.read_text()) if d is not None]
    except OSError as exc:
        raise TraceError(f"{p}: cannot read service: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise TraceError(f"{p}: {where}invalid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:  # the YAML parser recurses per level: no manifest nests like this
        raise TraceError(f"{p}: invalid YAML: nested too deeply to be a RankingService manifest") from None
    docs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "RankingService"]
    if not docs:
        raise TraceError(f"{p}: no RankingService document (kind: RankingService)")
    doc = docs[0]
    name = str((doc.get("metadata") or {}).get("name", "rankingservice"))
    try:
        spec = RankingServiceSpec.model_validate(doc.get("spec") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise TraceError(f"{p}: spec.{loc}: {first['msg']}") from None
    return name, spec


__all__ = [
    "MAX_TRACE_SECONDS",
    "SCALE_MODES",
    "TREND_SECONDS",
    "Arrivals",
    "LoadSeries",
    "ScaleMode",
    "TraceError",
    "TraceFields",
    "add_trace_arguments",
    "centred_mean",
    "load_service",
    "load_trace",
    "parse_where",
    "superpose",
    "time_note",
    "to_series",
    "trace_fields",
]
