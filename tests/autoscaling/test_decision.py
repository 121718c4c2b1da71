"""The structured decision and its renderings: message, conditions, the limit that applied (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.autoscaling.decision import (
    METRICS_UNAVAILABLE,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    Decision,
    Limit,
    Reason,
)
from gem_operator.controllers.autoscaler import scaled_event

SM = Reason("sm", "LowSmActive", "SM active 0.21 vs target 0.60 over 5 Ready pods: 3 replicas")
SLO = Reason("slo-feedback", "SloFeedback", "p99 12.0 ms (SLO 40 ms)")
DOWN_LIMIT = Limit("rate-policy", "ScaleDownLimit", "scale-down rate policies allow 4 now (wanted 3)", 3, 4)
MAX = Limit("bounds", "TooManyReplicas", "capped at maxReplicas=6 (wanted 8)", 8, 6)

# (desired, current, reasons, want message)
MESSAGES: list[Any] = [
    pytest.param(5, 5, (SM, SLO), f"{SM.text}; {SLO.text}", id="no-change-no-verb"),
    pytest.param(3, 5, (SM, SLO), f"scaled down 5 -> 3: {SM.text}; {SLO.text}", id="down"),
    pytest.param(6, 2, (SM,), f"scaled up 2 -> 6: {SM.text}", id="up"),
]


@pytest.mark.parametrize(("desired", "current", "reasons", "want"), MESSAGES)
def test_message_renders_the_reasons(desired: int, current: int, reasons: tuple[Reason, ...], want: str) -> None:
    assert Decision(desired, current, "R", reasons).message == want


# (decision fields, want ScalingActive, ScalingLimited, MetricsUnavailable as (status, reason))
CONDITIONS: list[Any] = [
    pytest.param(
        {"metric_value": 0.21},
        ("True", "ValidMetricsFound"),
        ("False", "DesiredWithinRange"),
        ("False", "MetricsFresh"),
        id="valid",
    ),
    pytest.param(
        {"reason": "Backlog"},
        ("True", "Backlog"),
        ("False", "DesiredWithinRange"),
        ("False", "MetricsFresh"),
        id="queue",
    ),
    pytest.param(
        {"held": True, "signal_reason": "NoReadyPods", "metrics_problem": ("NoReadyPods", "no Ready pod")},
        ("False", "NoReadyPods"),
        ("False", "DesiredWithinRange"),
        ("True", "NoReadyPods"),
        id="held-no-ready-pods",
    ),
    pytest.param(
        {"held": True, "signal_reason": "MetricsUnavailable", "metrics_problem": ("SourceError", "timeout")},
        ("False", "FailedGetMetrics"),
        ("False", "DesiredWithinRange"),
        ("True", "SourceError"),
        id="held-source-error",
    ),
    pytest.param(
        {"metric_value": 0.21, "limits": (DOWN_LIMIT, MAX)},
        ("True", "ValidMetricsFound"),
        ("True", "TooManyReplicas"),
        ("False", "MetricsFresh"),
        id="last-limit-wins",
    ),
]


@pytest.mark.parametrize(("fields", "active", "limited", "unavailable"), CONDITIONS)
def test_conditions(
    fields: dict[str, Any], active: tuple[str, str], limited: tuple[str, str], unavailable: tuple[str, str]
) -> None:
    d = Decision(**{"desired_replicas": 5, "current_replicas": 5, "reason": "LowSmActive", "reasons": (SM,), **fields})
    got = {c.type: (c.status, c.reason) for c in d.conditions}
    assert got == {SCALING_ACTIVE: active, SCALING_LIMITED: limited, METRICS_UNAVAILABLE: unavailable}
    assert d.condition(SCALING_ACTIVE).message == d.message
    assert d.limit == (d.limits[-1] if d.limits else None)
    if d.limit is not None:
        assert d.condition(SCALING_LIMITED).message == d.limit.message


# (decision, want event)
EVENTS: list[Any] = [
    pytest.param(
        Decision(3, 5, "LowSmActive", (SM, SLO)),
        "Scaled down from 5 to 3 replicas. SM active 0.21 vs target 0.60 over 5 Ready pods: 3 replicas. "
        "P99 12.0 ms (SLO 40 ms).",
        id="one-sentence-per-reason",
    ),
    pytest.param(
        Decision(4, 2, "X", (Reason("sm", "MetricsUnavailable", "metric source failed: HTTP 503; retry later"),)),
        "Scaled up from 2 to 4 replicas. Metric source failed: HTTP 503; retry later.",
        id="text-of-a-source-stays-whole",
    ),
    pytest.param(
        Decision(4, 2, "X", (Reason("bounds", "LastReplica", "done."), Reason("sm", "X", ""))),
        "Scaled up from 2 to 4 replicas. Done.",
        id="no-double-stop-no-empty-sentence",
    ),
]


@pytest.mark.parametrize(("decision", "want"), EVENTS)
def test_scaled_event_reads_the_reasons(decision: Decision, want: str) -> None:
    assert scaled_event(decision) == want
