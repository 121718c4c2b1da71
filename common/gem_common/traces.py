"""How a trace's fields are named and its times read: shared by `gemop replay` / `gemop loadtest`
(`gem_operator.replay.traces`) and the replayer that sends a trace to a ranking server
(`gem_workloads.replay.trace`), so the two read a team's log the same way.

Numeric times are seconds, unless they are too large to be: from 1e11 on (past the year 5138 as
seconds) they are epoch milliseconds, from 1e14 microseconds, from 1e17 nanoseconds, judged on the
first time of the file (`TimeReader("auto")`; a unit named instead is used as given). Date-times
without an offset are read as UTC, so daylight saving never bends the time axis.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime


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


__all__ = [
    "TIME_UNITS",
    "TIME_UNIT_NAMES",
    "TimeReader",
    "TraceError",
    "TraceFields",
    "json_text",
    "numeric_time_unit",
    "parse_datetime",
    "parse_where",
]
