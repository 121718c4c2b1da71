"""The outcome of one autoscaler sync as a structured value, and its renderings for people. Pure.

Every step of the policy (`pipeline.py`) says why it did what it did as typed `Reason` entries, and
a step that keeps the count from where the recommendation wanted it records a `Limit`. The
`Decision` carries them as they are: the controller's event, the pool's status conditions and the
metrics read these fields. `Decision.message` (status `lastScaleReason`, the conditions' message)
is one rendering of the reasons, `"scaled up 2 -> 4: <reason>; <reason>"`; the event renders each
reason as its own sentence (`controllers.autoscaler.scaled_event`). Nothing parses text back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gem_operator.autoscaling.state import ScalerState

# Scaling condition types (status.conditions[].type).
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
METRICS_UNAVAILABLE = "MetricsUnavailable"

Direction = Literal["up", "down", "none"]

Step = Literal[
    "sm",  # the SM-active (and queue) signal
    "ramp-lead",  # the ramp lead's projection (trend.py)
    "slo-feedback",  # the effective target following the p99 (slo.py)
    "panic",  # the short window (panic.py)
    "queue",  # a precompute pool's backlog and deadline signals
    "idle",  # a precompute pool idle long enough for minReplicas
    "yield",  # a precompute pool giving GPUs to its RankingService
    "hold",  # no usable signal: the count stays
    "stabilisation",  # the up/down windows
    "rate-policy",  # the scale-up/scale-down rate policies
    "scale-down-hold",  # panic or a p99 over the SLO blocks scale-down
    "hysteresis",  # the direction-change budget holds a reversing scale-down
    "gpus",  # free GPUs cap a scale-up
    "bounds",  # minReplicas/maxReplicas and the last replica
]


@dataclass(frozen=True)
class Reason:
    """One clause of why: the step that said it, its CamelCase code, and the text for people."""

    step: Step
    code: str
    text: str


@dataclass(frozen=True)
class Limit:
    """A step that kept the count from what the steps before it wanted (the ScalingLimited condition)."""

    step: Step
    reason: str  # CamelCase condition reason: ScaleUpLimit, InsufficientGPUs, TooManyReplicas, ...
    message: str
    wanted: int
    allowed: int


@dataclass(frozen=True)
class ConditionValue:
    """A condition to put on status (type, "True"/"False", CamelCase reason, message)."""

    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


NOT_LIMITED = ConditionValue(SCALING_LIMITED, "False", "DesiredWithinRange", "the desired count is within range")
METRICS_FRESH = ConditionValue(METRICS_UNAVAILABLE, "False", "MetricsFresh", "SM-active samples are fresh")


def render(reasons: Sequence[Reason]) -> str:
    """The reasons as one line: each reason's text, in order, joined by "; "."""
    return "; ".join(r.text for r in reasons)


@dataclass(frozen=True)
class Decision:
    """The outcome of one sync: the count, every reason and limit behind it, and the state to carry.

    `reason`: the CamelCase reason of the change (the metric label of a scaling event).
    `reasons`: each step's clause, in the order they read best (`message`).
    `limits`: each step that kept the count from what the steps before it wanted, in the order
    they applied; the last one is the ScalingLimited condition.
    `held`: no usable signal, the count stayed (bounds still apply); `signal_reason` then says why.
    `metrics_problem`: (reason, message) of an unusable reading (the MetricsUnavailable condition).
    """

    desired_replicas: int
    current_replicas: int
    reason: str
    reasons: tuple[Reason, ...]
    state: ScalerState = field(default_factory=ScalerState)
    limits: tuple[Limit, ...] = ()
    held: bool = False
    signal_reason: str = ""
    metrics_problem: tuple[str, str] | None = None
    recommendation: int | None = None
    metric_value: float | None = None
    metric_timestamp: float | None = None
    signals: Mapping[str, float] = field(default_factory=dict)
    effective_target: float | None = None  # SM target scaled on (targetSmActive after the SLO feedback)
    p99_ms: float | None = None  # the fresh p99 the SLO feedback read, if any
    panicking: bool = False
    learned: ConditionValue | None = None  # TargetLearned (`learned.py`): a pool with an SLO

    @property
    def direction(self) -> Direction:
        if self.desired_replicas > self.current_replicas:
            return "up"
        if self.desired_replicas < self.current_replicas:
            return "down"
        return "none"

    @property
    def limit(self) -> Limit | None:
        """The step that limited the count last (what ScalingLimited reports), if any."""
        return self.limits[-1] if self.limits else None

    @property
    def message(self) -> str:
        """One line for status: `"scaled up 2 -> 4: "` when the count changes, then the reasons."""
        body = render(self.reasons)
        if self.direction == "none":
            return body
        verb = "scaled up" if self.direction == "up" else "scaled down"
        return f"{verb} {self.current_replicas} -> {self.desired_replicas}: {body}"

    @property
    def conditions(self) -> tuple[ConditionValue, ...]:
        """ScalingActive, ScalingLimited and MetricsUnavailable, as HPA reports them, and TargetLearned
        where the pool has an SLO loop."""
        message = self.message
        if self.held:
            why = self.signal_reason if self.signal_reason in ("NoReadyPods", "ScaledToZero") else "FailedGetMetrics"
            active = ConditionValue(SCALING_ACTIVE, "False", why, message)
        else:
            why = "ValidMetricsFound" if self.metric_value is not None else self.reason
            active = ConditionValue(SCALING_ACTIVE, "True", why, message)
        lim = self.limit
        limited = NOT_LIMITED if lim is None else ConditionValue(SCALING_LIMITED, "True", lim.reason, lim.message)
        unavailable = METRICS_FRESH
        if self.metrics_problem is not None:
            unavailable = ConditionValue(METRICS_UNAVAILABLE, "True", *self.metrics_problem)
        if self.learned is not None:
            return (active, limited, unavailable, self.learned)
        return (active, limited, unavailable)

    def condition(self, type_: str) -> ConditionValue:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        raise KeyError(type_)


__all__ = [
    "METRICS_FRESH",
    "METRICS_UNAVAILABLE",
    "NOT_LIMITED",
    "SCALING_ACTIVE",
    "SCALING_LIMITED",
    "ConditionValue",
    "Decision",
    "Direction",
    "Limit",
    "Reason",
    "Step",
    "render",
]
