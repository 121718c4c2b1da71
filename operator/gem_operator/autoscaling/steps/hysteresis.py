"""Hysteresis: a budget of direction changes per hour (`spec.autoscaling.hysteresis`). Pure.

Every flip between scaling up and scaling down costs a pod start (GPU-time before the pod serves)
and says the pool chased noise. A scale-down right after a scale-up (a reversal) is held while the
last hour already holds `maxDirectionChangesPerHour - 1` direction changes; the scale-up that may
follow it then still fits, so no hour holds more than `maxDirectionChangesPerHour` changes (two
reversals in a row would need a held one between them). That last change is kept for a scale-down
the p99 confirms (`confirmed`: below the SLO loop's band for a whole window on a quiet pool): any
other reversal is held one change earlier. Without it, a held reversal keeps a pool's peak for up
to an hour, e.g. the capacity of a flash crowd after a dip, or a wave's crest, while the p99 shows
the pool has room; with it, a reversal the budget holds is one the p99 has not confirmed. A
scale-up is never held: the SLO comes before the budget, and the down windows already make a
scale-down the cheap one to wait for. An idle or yielding precompute pool (which skips the
windows too) is not held either: giving GPUs back is what those rules are for.
"""

from __future__ import annotations

from dataclasses import replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Limit, Reason
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.limits import Limited
from gem_operator.autoscaling.steps.observe import HISTORY_SECONDS, Observed


def recent_reversals(state: ScalerState, now: float) -> tuple[float, ...]:
    """The direction changes of the last hour."""
    return tuple(t for t in state.reversals if t > now - HISTORY_SECONDS)


def hold_reversal(
    spec: AutoscalingSpec, state: ScalerState, seen: Observed, wanted: Limited, now: float, *, confirmed: bool = False
) -> Limited:
    """`wanted`, or the current count when it would reverse a scale-up beyond the hour's budget.

    `confirmed`: the p99 has shown room below the SLO loop's band for a whole window on a quiet pool
    (`SloStep.release`), so the last change pair of the budget is open to it.
    """
    h = spec.hysteresis
    if not h.enabled or wanted.replicas >= seen.current or state.last_direction != 1:
        return wanted
    recent = recent_reversals(state, now)
    if len(recent) < h.max_direction_changes_per_hour - (1 if confirmed else 2):
        return wanted
    message = (
        f"no scale-down to {wanted.replicas} (it would reverse the last scale-up): {len(recent)} direction "
        f"changes in the last hour (maxDirectionChangesPerHour={h.max_direction_changes_per_hour})"
    )
    limit = Limit("hysteresis", "DirectionChangeBudget", message, wanted.replicas, seen.current)
    reason = Reason("hysteresis", "DirectionChangeBudget", f"no scale-down to {wanted.replicas}")
    return Limited(seen.current, (*wanted.limits, limit), (*wanted.reasons, reason))


def release_fits(spec: AutoscalingSpec, state: ScalerState, now: float) -> bool:
    """Whether the SLO loop may release held capacity (`steps/stabilise.py`). Trimming is optional,
    so it never spends the budget a later scale-down needs: on a pool already scaling down it changes
    no direction; after a scale-up it is one change and the scale-up that may follow it another, and
    the budget must still take a confirmed reversal after both."""
    h = spec.hysteresis
    if not h.enabled or state.last_direction != 1:
        return True
    return len(recent_reversals(state, now)) + 2 < h.max_direction_changes_per_hour - 1


def remember_direction(state: ScalerState, current: int, desired: int, now: float) -> ScalerState:
    """`state` with this sync's direction and the last hour's direction changes."""
    recent = recent_reversals(state, now)
    if desired == current:
        return replace(state, reversals=recent)
    direction = 1 if desired > current else -1
    if state.last_direction not in (0, direction):
        recent = (*recent, now)
    return replace(state, last_direction=direction, reversals=recent)


def as_hpa(spec: AutoscalingSpec) -> AutoscalingSpec:
    """`spec` as HPA runs it, for the baselines that stand for HPA: no ramp lead, no direction budget."""
    return spec.model_copy(
        update={
            "ramp_lead": spec.ramp_lead.model_copy(update={"enabled": False}),
            "hysteresis": spec.hysteresis.model_copy(update={"enabled": False}),
        }
    )


__all__ = ["as_hpa", "hold_reversal", "recent_reversals", "release_fits", "remember_direction"]
