"""Recommendation step: the SM signal, a precompute pool's queue, idle and yield, and holds (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.observation import PrecomputeSignals
from gem_operator.autoscaling.signals import Signal
from gem_operator.autoscaling.steps.observe import Observed
from gem_operator.autoscaling.steps.recommend import QueueSignal, queue_signals, recommend

NOW = 10_000.0


def sig(replicas: int | None, reason: str = "LowSmActive", *, steady: int | None = None) -> Signal:
    text = "no samples for the 2 Ready pods" if replicas is None else f"SM active 0.20: {replicas} replicas"
    return Signal(replicas, reason, (Reason("sm", reason, text),), steady=steady)


def seen(current: int, lo: int = 0) -> Observed:
    return Observed(current, lo, 50, current, (), ())


PRE = PrecomputeAutoscalingSpec.model_validate(
    {"backlogTargetPerReplica": 100, "deadlineSeconds": 60, "idleSecondsBeforeZero": 600, "yieldTo": "ads-ranker"}
)


# (backlog, oldest age, ready, want signals)
QUEUE_CASES: list[Any] = [
    pytest.param(None, None, 2, [], id="nothing-known"),
    pytest.param(450, None, 2, [("backlog", 5, "Backlog")], id="backlog"),
    pytest.param(0, 40.0, 2, [("backlog", 0, "Backlog")], id="no-deadline-on-an-empty-backlog"),
    pytest.param(450, 45.0, 2, [("backlog", 5, "Backlog"), ("deadline", 3, "Deadline")], id="both"),
    pytest.param(None, 45.0, 0, [("deadline", 2, "Deadline")], id="deadline-counts-one-pod-at-least"),
]


@pytest.mark.parametrize(("backlog", "age", "ready", "want"), QUEUE_CASES)
def test_queue_signals(backlog: int | None, age: float | None, ready: int, want: list[tuple[str, int, str]]) -> None:
    out = queue_signals(PRE, PrecomputeSignals(backlog=backlog, oldest_item_age_seconds=age), ready)
    assert [(q.key, q.replicas, q.code) for q in out] == want
    assert all(isinstance(q, QueueSignal) and q.text for q in out)


# RankingService: (signal, current, minReplicas, want replicas, reason, floor, first reason's step, steady)
RANKING_CASES: list[Any] = [
    pytest.param(sig(3), 5, 0, 3, "LowSmActive", 1, "sm", None, id="takes-the-signal"),
    pytest.param(sig(3), 0, 0, 3, "LowSmActive", 0, "sm", None, id="floor-zero-without-replicas"),
    pytest.param(sig(3), 5, 2, 3, "LowSmActive", 2, "sm", None, id="floor-min-replicas"),
    pytest.param(sig(None, "MetricsUnavailable"), 5, 0, None, "MetricsUnavailable", 1, "hold", None, id="hold"),
    pytest.param(sig(6, "QueuedWork", steady=4), 5, 0, 6, "QueuedWork", 1, "sm", 4, id="keeps-steady"),
]


@pytest.mark.parametrize(("signal", "current", "lo", "want", "reason", "floor", "step", "steady"), RANKING_CASES)
def test_ranking_service(
    signal: Signal, current: int, lo: int, want: int | None, reason: str, floor: int, step: str, steady: int | None
) -> None:
    spec = AutoscalingSpec.model_validate({"minReplicas": lo})
    out = recommend(spec, signal, seen(current, lo), NOW, None, None)
    assert (out.replicas, out.reason, out.floor, out.reasons[0].step, out.steady) == (want, reason, floor, step, steady)
    if want is None:
        assert out.reasons[0].text == f"holding at {current}: {signal.message}"
    assert not out.at_once and not out.yielding


# Precompute: (signal, current, signals, empty since, want replicas, reason, first text, at once, floor, empty since)
PRE_CASES: list[Any] = [
    pytest.param(
        sig(2),
        2,
        PrecomputeSignals(backlog=150),
        None,
        2,
        "LowSmActive",
        "SM active",
        False,
        0,
        None,
        id="backlog-below-sm",
    ),
    pytest.param(
        sig(2),
        2,
        PrecomputeSignals(backlog=450),
        None,
        5,
        "Backlog",
        "backlog 450 / 100 per replica: 5 replicas",
        False,
        0,
        None,
        id="backlog-raises",
    ),
    pytest.param(
        sig(None, "MetricsUnavailable"),
        2,
        PrecomputeSignals(backlog=450),
        None,
        5,
        "Backlog",
        "backlog 450 / 100 per replica (SM signal held: no samples",
        False,
        0,
        None,
        id="queue-past-a-hold",
    ),
    pytest.param(
        sig(None, "MetricsUnavailable"),
        6,
        PrecomputeSignals(backlog=450),
        None,
        None,
        "MetricsUnavailable",
        "holding at 6",
        False,
        0,
        None,
        id="queue-below-current-holds",
    ),
    pytest.param(
        sig(1),
        4,
        PrecomputeSignals(),
        None,
        4,
        "BacklogUnknown",
        "backlog unknown, no scale-down",
        False,
        0,
        None,
        id="unknown-backlog-blocks-scale-down",
    ),
    pytest.param(
        sig(1),
        4,
        PrecomputeSignals(backlog_error="http://prom/api/v1/query answered HTTP 503: overloaded"),
        None,
        4,
        "BacklogUnknown",
        "backlog unknown (http://prom/api/v1/query answered HTTP 503: overloaded), no scale-down",
        False,
        0,
        None,
        id="unknown-backlog-says-why",
    ),
    pytest.param(
        sig(1),
        4,
        PrecomputeSignals(backlog=0),
        None,
        1,
        "LowSmActive",
        "SM active",
        False,
        1,
        NOW,
        id="empty-backlog-starts-the-idle-clock",
    ),
    pytest.param(
        sig(1),
        4,
        PrecomputeSignals(backlog=0),
        NOW - 700,
        0,
        "Idle",
        "backlog empty for 700s",
        True,
        0,
        NOW - 700,
        id="idle-long-enough",
    ),
    pytest.param(
        sig(1),
        4,
        PrecomputeSignals(backlog=10),
        NOW - 700,
        1,
        "LowSmActive",
        "SM active",
        False,
        0,
        None,
        id="work-resets-the-idle-clock",
    ),
    pytest.param(
        sig(6),
        6,
        PrecomputeSignals(backlog=900, ranker_over_slo=True, ranker_message="p99 80 ms"),
        None,
        3,
        "YieldingGPUs",
        "yielding GPUs to RankingService ads-ranker: p99 80 ms",
        True,
        0,
        None,
        id="yield",
    ),
]


@pytest.mark.parametrize(
    ("signal", "current", "pre", "since", "want", "reason", "text", "at_once", "floor", "empty"), PRE_CASES
)
def test_precompute(
    signal: Signal,
    current: int,
    pre: PrecomputeSignals,
    since: float | None,
    want: int | None,
    reason: str,
    text: str,
    at_once: bool,
    floor: int,
    empty: float | None,
) -> None:
    out = recommend(PRE, signal, seen(current), NOW, pre, since)
    assert (out.replicas, out.reason, out.at_once, out.floor, out.backlog_empty_since) == (
        want,
        reason,
        at_once,
        floor,
        empty,
    )
    assert out.reasons[0].text.startswith(text), out.reasons[0].text
    assert out.yielding == pre.ranker_over_slo
    if pre.backlog is not None:
        assert out.values["backlog"] == float(-(-pre.backlog // 100))
