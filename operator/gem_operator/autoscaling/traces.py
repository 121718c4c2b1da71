"""Traces and service manifests for the replay: parsing, per-second load series, scale modes.

TRACE is either
- CSV with a `TIMESTAMP` column (date-time like `2023-11-16 18:17:03.97996`, or seconds),
  one row per request; `--cost-column NAME` weights each request by that numeric column,
  normalised to mean 1 (so a cost unit is an average request), or
- JSONL, one object per line: `{"t": seconds, "cost": number}`; optional `"count"` is the
  number of requests the line stands for (default 1; `cost` defaults to `count`), so a
  pre-aggregated trace may hold one line per second.

Every parse error names the file, the line and the column or key.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from gem_operator.api.serving import RankingServiceSpec


class TraceError(ValueError):
    """A trace or service file is unusable; the message names the file, line and column."""


# --------------------------------------------------------------------------- traces


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


def _parse_time(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # datetime.fromisoformat takes at most 6 fractional digits on older Pythons.
    if "." in text:
        head, frac = text.rsplit(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        rest = frac[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:  # naive times are read as UTC, so DST never bends the time axis
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _load_csv(path: Path, cost_column: str | None) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
    try:
        fh = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceError(f"{path}: empty file; expected a header line with a TIMESTAMP column") from None
        names = [h.strip() for h in header]
        if "TIMESTAMP" not in names:
            raise TraceError(f"{path}: line 1: no TIMESTAMP column (columns: {', '.join(names)})")
        t_idx = names.index("TIMESTAMP")
        c_idx: int | None = None
        if cost_column is not None:
            if cost_column not in names:
                raise TraceError(f"{path}: line 1: no column {cost_column!r} for --cost-column (columns: {names})")
            c_idx = names.index(cost_column)
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise TraceError(f"{path}: line {line}: {len(row)} fields, the header has {len(names)}")
            try:
                times.append(_parse_time(row[t_idx]))
            except ValueError:
                raise TraceError(
                    f"{path}: line {line}, column TIMESTAMP: cannot parse {row[t_idx]!r} as a time "
                    "(expected e.g. 2023-11-16 18:17:03.97 or seconds)"
                ) from None
            if c_idx is not None:
                try:
                    value = float(row[c_idx])
                except ValueError:
                    raise TraceError(
                        f"{path}: line {line}, column {cost_column}: {row[c_idx]!r} is not a number"
                    ) from None
                if not math.isfinite(value) or value < 0:
                    raise TraceError(f"{path}: line {line}, column {cost_column}: cost must be >= 0, got {value}")
                costs.append(value)
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    if c_idx is not None:
        mean = sum(costs) / len(costs)
        if mean <= 0:
            raise TraceError(f"{path}: column {cost_column} sums to zero; cannot weight requests by it")
        costs = [c / mean for c in costs]
    else:
        costs = [1.0] * len(times)
    return Arrivals(times, [1.0] * len(times), costs, str(path))


def _load_jsonl(path: Path) -> Arrivals:
    times: list[float] = []
    counts: list[float] = []
    costs: list[float] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    for no, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}: line {no}, column {exc.colno}: invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(f'{path}: line {no}: expected an object like {{"t": 0.5, "cost": 1}}')

        def num(key: str, default: float | None, line: int = no, o: dict[str, Any] = obj) -> float:
            if key not in o:
                if default is None:
                    raise TraceError(f"{path}: line {line}: missing key {key!r}")
                return default
            v = o[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise TraceError(f"{path}: line {line}, key {key!r}: expected a number >= 0, got {v!r}")
            return float(v)

        t = num("t", None)
        count = num("count", 1.0)
        times.append(t)
        counts.append(count)
        costs.append(num("cost", count))
    if not times:
        raise TraceError(f"{path}: no requests")
    return Arrivals(times, counts, costs, str(path))


def load_trace(path: str | Path, cost_column: str | None = None) -> Arrivals:
    """Parse a CSV or JSONL trace (chosen by extension, else by the first character)."""
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
        jsonl = head.startswith("{")
    if jsonl:
        if cost_column is not None:
            raise TraceError(f"{p}: --cost-column applies to CSV traces; JSONL lines carry their own 'cost'")
        return _load_jsonl(p)
    return _load_csv(p, cost_column)


def _moving_average(x: np.ndarray[Any, np.dtype[np.float64]], width: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    if width <= 1 or len(x) == 0:
        return x
    kernel = np.ones(width) / width
    out: np.ndarray[Any, np.dtype[np.float64]] = np.convolve(x, kernel, mode="same")
    return out


def to_series(arrivals: Arrivals, *, scale: float = 1.0, smooth_seconds: float = 10.0) -> LoadSeries:
    """Bin arrivals per second from the first arrival, scale, smooth."""
    if scale <= 0 or not math.isfinite(scale):
        raise TraceError(f"--scale must be a positive number, got {scale}")
    t0 = min(arrivals.times)
    rel = np.asarray(arrivals.times, dtype=float) - t0
    n = math.floor(float(rel.max())) + 1
    idx = np.minimum(rel.astype(int), n - 1)
    cost = np.asarray(
        np.bincount(idx, weights=np.asarray(arrivals.costs, dtype=float), minlength=n) * scale,
        dtype=np.float64,
    )
    reqs = np.asarray(
        np.bincount(idx, weights=np.asarray(arrivals.counts, dtype=float), minlength=n) * scale,
        dtype=np.float64,
    )
    width = max(1, round(smooth_seconds))
    return LoadSeries(_moving_average(cost, width), _moving_average(reqs, width), name=Path(arrivals.path).name)


# --------------------------------------------------------------------------- service


def load_service(path: str | Path) -> tuple[str, RankingServiceSpec]:
    """A RankingService manifest (YAML) -> (name, validated spec)."""
    p = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(p.read_text()) if d is not None]
    except OSError as exc:
        raise TraceError(f"{p}: cannot read service: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise TraceError(f"{p}: {where}invalid YAML: {getattr(exc, 'problem', exc)}") from None
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


__all__ = ["Arrivals", "LoadSeries", "TraceError", "load_service", "load_trace", "to_series"]
