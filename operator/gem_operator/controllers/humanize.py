"""Numbers as people read them in conditions and Events (status fields keep full precision)."""

from __future__ import annotations

from typing import Any


def duration(seconds: float) -> str:
    """0.01234 -> '12.3 ms', 4.5 -> '4.5 s', 0 -> '0 s'."""
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale or unit == "µs":
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"  # pragma: no cover


def score(value: Any) -> str:
    """The placement score (seconds of cross-tier communication per step), for people."""
    try:
        return f"{duration(float(value))} of cross-tier communication per step"
    except (TypeError, ValueError):
        return "unknown"
