"""Drift detection between a desired child and what the API server holds (pure)."""

from __future__ import annotations

from typing import Any


def is_subset(desired: Any, actual: Any) -> bool:
    """True when every field we set has the value we want.

    Fields the server adds (defaults, clusterIP, status) are ignored, so a real cluster's
    defaulting does not look like drift; lists must match element by element.
    """
    if isinstance(desired, dict):
        if not isinstance(actual, dict):
            return False
        return all(key in actual and is_subset(value, actual[key]) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(actual, list) or len(desired) != len(actual):
            return False
        return all(is_subset(d, a) for d, a in zip(desired, actual, strict=True))
    if isinstance(desired, (int, float)) and isinstance(actual, str):
        return str(desired) == actual
    return bool(desired == actual)
