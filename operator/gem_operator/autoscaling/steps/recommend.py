"""Step 3, recommendation: the count the signals ask for, or a hold. Pure.

A RankingService takes the SM signal's recommendation and keeps its last replica (SM active cannot
see demand at zero replicas). A SolarisPrecompute (`PrecomputeAutoscalingSpec`) adds its queue:
the max of the SM signal, `ceil(backlog / backlogTargetPerReplica)` and the deadline signal (the
oldest item should wait at most half of `deadlineSeconds`: `ceil(ready * age / (deadline / 2))`);
an empty backlog for `idleSecondsBeforeZero` goes to `minReplicas` at once, and while its linked
RankingService is over its SLO it yields, halving toward `minReplicas` at once. No usable signal
is a hold at the current count (`MetricsUnavailable`), never a scale-down.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.observation import PrecomputeSignals
from gem_operator.autoscaling.signals import Signal, ceil_
from gem_operator.autoscaling.steps.observe import Observed


@dataclass(frozen=True)
class Recommendation:
    """What the signals ask for at this sync, before the windows, rate policies and bounds."""

    replicas: int | None  # None: hold at the current count
    reason: str
    reasons: tuple[Reason, ...]
    floor: int  # the lowest count the bounds may leave
    backlog_empty_since: float | None
    steady: int | None = None  # what the stabilisation history records instead (None: `replicas`)
    at_once: bool = False  # skips the stabilisation windows (idle, yielding)
    yielding: bool = False
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueSignal:
    """One of a precompute pool's queue signals: its replicas, CamelCase reason and why."""

    key: str  # name in `Decision.signals`
    replicas: int
    code: str
    text: str


def queue_signals(spec: PrecomputeAutoscalingSpec, pre: PrecomputeSignals, ready: int) -> tuple[QueueSignal, ...]:
    """The backlog signal (when the backlog is known) and the deadline signal (when items wait)."""
    out: list[QueueSignal] = []
    if pre.backlog is not None:
        per = spec.backlog_target_per_replica
        out.append(
            QueueSignal("backlog", ceil_(pre.backlog / per), "Backlog", f"backlog {pre.backlog} / {per} per replica")
        )
    age = pre.oldest_item_age_seconds
    if age is not None and math.isfinite(age) and (pre.backlog is None or pre.backlog > 0):
        # maxReplicas half-deadlines of age already order maxReplicas; counting past that overflows a float.
        halves = min(max(age, 0.0) / (spec.deadline_seconds / 2), float(spec.max_replicas))
        n = ceil_(max(ready, 1) * halves)
        out.append(
            QueueSignal("deadline", n, "Deadline", f"oldest item {age:.0f}s vs deadline {spec.deadline_seconds}s")
        )
    return tuple(out)


def with_queue(
    sig: Signal, queue: tuple[QueueSignal, ...], current: int, backlog_known: bool, unknown_why: str = ""
) -> tuple[int | None, str, tuple[Reason, ...]]:
    """The SM recommendation raised by the queue signals (never lowered by them: a hold stays a hold
    unless the queue asks for more than the current count; an unknown backlog blocks scale-down)."""
    best = max(queue, default=None, key=lambda q: q.replicas)
    rec, reason, reasons = sig.recommendation, sig.reason, sig.reasons
    if rec is None:
        if best is not None and best.replicas > current:
            text = f"{best.text} (SM signal held: {sig.message})"
            rec, reason, reasons = best.replicas, best.code, (Reason("queue", best.code, text),)
    elif best is not None and best.replicas > rec:
        text = f"{best.text}: {best.replicas} replicas"
        rec, reason, reasons = best.replicas, best.code, (Reason("queue", best.code, text), *sig.reasons)
    elif rec < current and not backlog_known:
        why = f" ({unknown_why})" if unknown_why else ""
        unknown = Reason("queue", "BacklogUnknown", f"backlog unknown{why}, no scale-down")
        rec, reason, reasons = current, "BacklogUnknown", (unknown, *sig.reasons)
    return rec, reason, reasons


def recommend_precompute(
    spec: PrecomputeAutoscalingSpec,
    pre: PrecomputeSignals,
    sig: Signal,
    seen: Observed,
    now: float,
    empty_since: float | None,
) -> Recommendation:
    """The precompute pool's recommendation: SM and queue, then idle, then yielding to the ranker."""
    current, lo = seen.current, seen.min_replicas
    if pre.backlog is not None:
        empty_since = None if pre.backlog > 0 else now if empty_since is None else empty_since
    queue = queue_signals(spec, pre, seen.serving)
    replicas, reason, reasons = with_queue(sig, queue, current, pre.backlog is not None, pre.backlog_error)
    floor, at_once = lo, False
    idle_for = None if empty_since is None else now - empty_since
    if idle_for is not None and idle_for >= spec.idle_seconds_before_zero:
        text = f"backlog empty for {idle_for:.0f}s (idleSecondsBeforeZero={spec.idle_seconds_before_zero})"
        replicas, reason, reasons, at_once = lo, "Idle", (Reason("idle", "Idle", text),), True
    elif idle_for is not None and current > 0:
        floor = max(lo, 1)  # the last replica stays until the pool has been idle long enough
    yielding = pre.ranker_over_slo
    if yielding:
        half = max(lo, current - max(1, current // 2)) if current > lo else current
        text = f"yielding GPUs to RankingService {spec.yield_to or '?'}"
        text += f": {pre.ranker_message}" if pre.ranker_message else ""
        replicas, reason, at_once = min(half, current), "YieldingGPUs", True
        reasons = (Reason("yield", reason, text),)
    values = {q.key: float(q.replicas) for q in queue}
    return Recommendation(replicas, reason, reasons, floor, empty_since, None, at_once, yielding, values)


def recommend(
    spec: AutoscalingSpec,
    sig: Signal,
    seen: Observed,
    now: float,
    pre: PrecomputeSignals | None,
    empty_since: float | None,
) -> Recommendation:
    """The recommendation of this sync; a hold (`replicas` None) says why it holds."""
    if isinstance(spec, PrecomputeAutoscalingSpec) and pre is not None:
        rec = recommend_precompute(spec, pre, sig, seen, now, empty_since)
    else:
        # SM active cannot see demand once no replica runs, so it never takes the last one away.
        lo = seen.min_replicas
        floor = max(lo, 1) if not isinstance(spec, PrecomputeAutoscalingSpec) and seen.current > 0 else lo
        rec = Recommendation(sig.recommendation, sig.reason, sig.reasons, floor, empty_since)
    if rec.replicas is None:
        held = Reason("hold", sig.reason, f"holding at {seen.current}: {sig.message}")
        return Recommendation(None, sig.reason, (held,), rec.floor, rec.backlog_empty_since, values=rec.values)
    # Around a backlog the history records what the arrivals need, not the capacity ordered to
    # drain it or already on its way (`Signal.steady`), so a one-off backlog is not held for the
    # whole down window.
    steady = sig.steady if sig.steady is not None and rec.replicas == sig.recommendation else None
    return Recommendation(
        rec.replicas,
        rec.reason,
        rec.reasons,
        rec.floor,
        rec.backlog_empty_since,
        steady,
        rec.at_once,
        rec.yielding,
        rec.values,
    )
