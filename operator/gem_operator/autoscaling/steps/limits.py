"""Steps 5 and 6: panic, rate limits, then caps and bounds on the stabilised count. Pure.

- **Panic** (`panic.py`): the short window's recommendation applies at once, past the up window
  and the rate policies.
- **Rate policies:** per direction the most permissive listed policy applies, each measured
  against the replicas at the start of its period (recorded scale events).
- **No scale-down** while panicking or while a fresh p99 is over the SLO, nor for
  `sloFeedback.scaleDownHoldSeconds` after the last over-SLO p99: the pool is short of capacity,
  not idle, and the capacity a burst needed is not handed back just before the next one.
- **Free GPUs:** scale-up is capped at `current + free_gpus // gpusPerReplica` (minus pods still
  waiting for a node).
- **Bounds:** `minReplicas..maxReplicas`; the recommendation step's floor keeps the last replica.

Each returns the count it allows, the `Limit` it applied (the ScalingLimited condition), and any
reason to add to the message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec, RatePolicy
from gem_operator.autoscaling.decision import Limit, Reason
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.panic import PanicStep
from gem_operator.autoscaling.signals import EPS, ceil_
from gem_operator.autoscaling.slo import SloStep
from gem_operator.autoscaling.steps.observe import Observed


@dataclass(frozen=True)
class Limited:
    """The count a step allows, the limits it applied and the reasons it adds."""

    replicas: int
    limits: tuple[Limit, ...] = ()
    reasons: tuple[Reason, ...] = ()
    raised_by_panic: bool = False  # the panic window raised the count: no rate policy applies


def apply_panic(panic: PanicStep, stabilised: int, current: int, *, held: bool, yielding: bool) -> Limited:
    """While panicking, at least the panic window's recommendation (not on a hold or a yield)."""
    if not panic.panicking or held or yielding:
        return Limited(stabilised)
    want = max(stabilised, panic.recommendation or 0)
    return Limited(want, (), (Reason("panic", "Panic", panic.message),), raised_by_panic=want > current)


def rate_bound(
    policies: Sequence[RatePolicy], events: Sequence[tuple[float, int]], now: float, current: int, up: bool
) -> int:
    """The most permissive bound over the listed policies (upper bound if up, lower if down)."""
    best: int | None = None
    for pol in policies:
        since = now - pol.period_seconds
        if up:
            start = max(0, current - sum(d for t, d in events if t > since and d > 0))
            bound = start
            if pol.pods is not None:
                bound = max(bound, start + pol.pods)
            if pol.percent is not None:
                bound = max(bound, math.floor(start * (1 + pol.percent / 100) + EPS))
            if start == 0:
                bound = max(bound, 1)  # from zero, one pod may always start
            best = bound if best is None else max(best, bound)
        else:
            start = current + sum(-d for t, d in events if t > since and d < 0)
            bound = start
            if pol.pods is not None:
                bound = min(bound, start - pol.pods)
            if pol.percent is not None:
                bound = min(bound, ceil_(start * (1 - pol.percent / 100)))
            bound = max(0, bound)
            best = bound if best is None else min(best, bound)
    if best is None:
        return 10**9 if up else 0
    return best


def scale_down_hold(
    spec: AutoscalingSpec, panic: PanicStep, slo: SloStep, wanted: int, current: int, now: float
) -> Limited | None:
    """No scale-down while panicking, while a fresh p99 is over the SLO, or within
    `scaleDownHoldSeconds` of the last one (None: scale-down may go ahead)."""
    if not (panic.panicking or slo.over_slo or slo.hold_down):
        return None
    if panic.panicking:
        why = panic.message
    elif slo.over_slo:
        why = slo.message
    else:
        hold = spec.slo_feedback.scale_down_hold_seconds
        why = f"p99 was over the SLO {now - (slo.last_over or now):.0f}s ago (scaleDownHoldSeconds={hold})"
    code = "Panic" if panic.panicking else "LatencyOverSlo"
    limit = Limit("scale-down-hold", code, f"no scale-down (wanted {wanted}): {why}", wanted, current)
    return Limited(current, (limit,), (Reason("scale-down-hold", code, f"no scale-down to {wanted}"),))


def limit_rate(
    spec: AutoscalingSpec,
    seen: Observed,
    now: float,
    wanted: Limited,
    *,
    panic: PanicStep,
    slo: SloStep,
    yielding: bool,
) -> Limited:
    """The rate policies per direction; a scale-down may be held instead (`scale_down_hold`)."""
    current, want = seen.current, wanted.replicas
    if want > current:
        bound = rate_bound(spec.policies.scale_up, seen.events, now, current, up=True)
        if want > bound and not wanted.raised_by_panic:
            message = f"scale-up rate policies allow {bound} now (wanted {want})"
            return Limited(bound, (Limit("rate-policy", "ScaleUpLimit", message, want, bound),))
    elif want < current:
        held = None if yielding else scale_down_hold(spec, panic, slo, want, current, now)
        if held is not None:
            return held
        bound = rate_bound(spec.policies.scale_down, seen.events, now, current, up=False)
        if want < bound:
            message = f"scale-down rate policies allow {bound} now (wanted {want})"
            return Limited(bound, (Limit("rate-policy", "ScaleDownLimit", message, want, bound),))
    return Limited(want)


def cap(obs: Observation, seen: Observed, wanted: int, floor: int) -> Limited:
    """Free GPUs cap a scale-up; then maxReplicas, minReplicas and the floor (the last replica)."""
    current, lo, hi = seen.current, seen.min_replicas, seen.max_replicas
    desired, limits, reasons = wanted, list[Limit](), list[Reason]()
    if desired > current and obs.free_gpus is not None and obs.gpus_per_replica > 0:
        waiting = sum(1 for p in obs.pods if not p.scheduled)
        gpu_cap = current + max(0, obs.free_gpus // obs.gpus_per_replica - waiting)
        if desired > gpu_cap:
            message = (
                f"{obs.free_gpus} free GPUs ({obs.gpus_per_replica}/replica, {waiting} pods waiting) "
                f"allow {gpu_cap} replicas (wanted {desired})"
            )
            limits.append(Limit("gpus", "InsufficientGPUs", message, desired, gpu_cap))
            desired = gpu_cap
    if desired > hi:
        limits.append(Limit("bounds", "TooManyReplicas", f"capped at maxReplicas={hi} (wanted {desired})", desired, hi))
        desired = hi
    if desired < floor:
        if floor == lo:
            message = f"raised to minReplicas={lo} (wanted {desired})"
            limits.append(Limit("bounds", "TooFewReplicas", message, desired, floor))
        else:
            why = "the last replica stays until the pool has been idle long enough"
            reasons.append(Reason("bounds", "LastReplica", f"kept at {floor} ({why})"))
        desired = floor
    return Limited(desired, tuple(limits), tuple(reasons))
