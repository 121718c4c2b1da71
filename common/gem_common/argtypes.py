"""argparse types for the numeric flags of every command (`gemop`, the testbed's, `python -m gem_workloads.X`).

A bad value is refused when the command line is parsed, and argparse names the flag
(`argument --sync-seconds: expected a finite number > 0, got 'nan'`), so nothing runs on it.
Plain `type=float` lets `nan` and `inf` through every check written as `x <= 0`; they then
fail far from the flag (a NaN sync period became an int conversion error inside the replay).

They live in `gem_common`, below both the operator and the workloads: the workloads never import
the operator (import-linter), and a copy in each drifted in its messages.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def _checked(text: str, parse: Callable[[str], N], expected: str, ok: Callable[[N], bool]) -> N:
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a period, a timeout, a scale)."""
    return _checked(text, float, "a finite number > 0", lambda v: math.isfinite(v) and v > 0)


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (an offset, a wait that may be none)."""
    return _checked(text, float, "a finite number >= 0", lambda v: math.isfinite(v) and v >= 0)


def positive_int(text: str) -> int:
    """A whole number >= 1 (a count of things that must exist)."""
    return _checked(text, int, "a whole number >= 1", lambda v: v >= 1)


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (0 meaning none, off or the default, as the flag's help says)."""
    return _checked(text, int, "a whole number >= 0", lambda v: v >= 0)


def tcp_port(text: str) -> int:
    """A TCP port, 0-65535 (0: a free one, or off, as the flag's help says)."""
    return _checked(text, int, "a TCP port 0-65535", lambda v: 0 <= v <= 65535)


__all__ = ["non_negative_float", "non_negative_int", "positive_float", "positive_int", "tcp_port"]
