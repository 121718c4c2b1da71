"""Whether the SLO loop has learned an SM target well below the declared one (`TargetLearned`). Pure.

`targetSmActive` is the team's guess at the SM active its p99 holds at. Where the fleet's p99
needs less (a latency curve that reaches the SLO below the declared target), the SLO loop learns
its way down a window at a time, over the SLO's band or the SLO itself, and every new pool, and
every pool whose status is lost, pays those windows again. The loop is the safety net; the
declared target is the team's to set. So once the loop has held the target at or below
`LEARNED_BELOW` x `targetSmActive` for `LEARNED_AFTER_SECONDS`, the pool says so in its
`TargetLearned` condition (and the controller's event), with the target to declare.

The fraction leaves room for the loop's cuts for bursts: each is about a tenth, given back once
the p99 has room, and a run of them must hold for the whole half hour to count. `gemop replay`
names the same target from a replay's second half (`replay.report.LearnedTarget`).

**At the loop's floor** (`minTargetFraction` x `targetSmActive`) the loop may have wanted less: a
fleet whose p99 meets the SLO only at a fraction of the load declared. Declaring the floor then
saves only the first windows, and the pool spends up to 1 / minTargetFraction of what the declared
target would for a p99 that may still miss the SLO; the condition says so (reason `HeldAtFloor`,
with the last p99 against the SLO), since whether those GPUs are worth it is the team's call, not
the loop's. Measured on fleets drawn at random (docs/benchmarks.md, "Fleets drawn at random"): 44
of 200 held the floor for half an hour, at 1.35 of static peak's GPU-hours on the mean case (up to
2.06), and 26 of them had as many violation minutes as RPS and static peak still.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import ConditionValue
from gem_operator.autoscaling.idle import as_read, busy
from gem_operator.autoscaling.steps.slo_loop import loop_bounds

TARGET_LEARNED = "TargetLearned"  # status.conditions[].type
LEARNED_BELOW = 0.8
LEARNED_AFTER_SECONDS = 1800.0

LowRun = tuple[float, float]
"""(since, highest target in the run): the syncs in a row whose SM target was at or below
`LEARNED_BELOW` x `targetSmActive`."""


@dataclass(frozen=True)
class Learned:
    """The run carried to the next sync, and the condition it gives now."""

    run: LowRun | None
    condition: ConditionValue


def low_run(declared: float, target: float, run: LowRun | None, now: float) -> LowRun | None:
    """`run` extended by this sync's target, or None where the target is above the fraction.

    A run with a start after `now` (a clock set back, a hand-edited state) starts again now.
    """
    if not math.isfinite(target) or target > LEARNED_BELOW * declared:
        return None
    if run is None or run[0] > now:
        return (now, target)
    return (run[0], max(run[1], target))


def advice(target: float, *, at_floor: bool) -> str:
    """What a learned `target` says to the team, held at the loop's floor or above it (the condition's
    and `gemop replay`'s note's words)."""
    if at_floor:
        return (
            f"the p99 may need less SM active than the loop may go to; declaring targetSmActive {target:.2f} "
            f"saves only the first windows, a lower minTargetFraction spends more GPUs on the p99, and a p99 "
            f"over the SLO at low load is one capacity does not fix"
        )
    return (
        f"the p99 needs less SM active than declared on this fleet and traffic, and a new pool spends its "
        f"first windows learning this again; declare spec.autoscaling.targetSmActive near {target:.2f}"
    )


def on_floor(target: float, floor: float) -> bool:
    """Whether `target` is the loop's `floor` (to a rounding of the clamp that put it there)."""
    return target <= floor * (1 + 1e-6)


def loop_bounds_as_read(spec: AutoscalingSpec) -> tuple[float, float]:
    """[floor, ceiling] of the SLO loop's target in SM active as read: `loop_bounds` taken in busy SM
    where `metrics.smActiveIdle` is declared, as the loop works (its 0.95 cap is busy SM too), and
    read back."""
    idle = spec.metrics.sm_active_idle
    if idle <= 0:
        return loop_bounds(spec)
    floor, ceiling = loop_bounds(spec.model_copy(update={"target_sm_active": busy(spec.target_sm_active, idle)}))
    return as_read(floor, idle), as_read(ceiling, idle)


def loop_floor(spec: AutoscalingSpec) -> float:
    """The SLO loop's lowest target in SM active as read (`loop_bounds_as_read`)."""
    return loop_bounds_as_read(spec)[0]


def learned_target(
    spec: AutoscalingSpec, target: float, run: LowRun | None, now: float, *, p99_ms: float | None, slo_ms: float
) -> Learned:
    """The `TargetLearned` condition of a pool with an SLO whose loop runs at `target` now (SM active
    as read); `p99_ms`: the fresh p99 of this sync, if any."""
    declared = spec.target_sm_active
    if not spec.slo_feedback.enabled:
        off = "the SLO loop is off (spec.autoscaling.sloFeedback.enabled: false): the SM target is targetSmActive"
        return Learned(None, ConditionValue(TARGET_LEARNED, "False", "SloFeedbackDisabled", off))
    run = low_run(declared, target, run, now)
    share = f"{target:.2f} ({target / declared:.2f} x targetSmActive {declared:g})"
    if run is None:
        near = f"the SM target in use is {share}, above {LEARNED_BELOW:g} x targetSmActive"
        return Learned(None, ConditionValue(TARGET_LEARNED, "False", "NearDeclaredTarget", near))
    held = now - run[0]
    minutes = int(held // 60)
    if held < LEARNED_AFTER_SECONDS:
        learning = (
            f"the SM target in use is {share}; it has been at or below {LEARNED_BELOW:g} x targetSmActive for "
            f"{minutes} of the {LEARNED_AFTER_SECONDS / 60:g} min that name a learned target"
        )
        return Learned(run, ConditionValue(TARGET_LEARNED, "False", "Learning", learning))
    if on_floor(target, loop_floor(spec)):
        p99 = "" if p99_ms is None else f"; the last p99 is {p99_ms:.1f} ms against the {slo_ms:g} ms SLO"
        message = (
            f"the SLO loop has held the SM target at its floor, {target:.2f} (sloFeedback.minTargetFraction "
            f"{spec.slo_feedback.min_target_fraction:g} of targetSmActive {declared:g}), for {minutes} min{p99}: "
            f"{advice(target, at_floor=True)}"
        )
        return Learned(run, ConditionValue(TARGET_LEARNED, "True", "HeldAtFloor", message))
    highest = run[1]
    message = (
        f"the SLO loop has held the SM target at or below {highest:.2f} ({highest / declared:.2f} x "
        f"targetSmActive {declared:g}) for {minutes} min and uses {target:.2f} now: {advice(target, at_floor=False)}"
    )
    return Learned(run, ConditionValue(TARGET_LEARNED, "True", "HeldBelowDeclared", message))


__all__ = [
    "LEARNED_AFTER_SECONDS",
    "LEARNED_BELOW",
    "TARGET_LEARNED",
    "Learned",
    "LowRun",
    "advice",
    "learned_target",
    "loop_bounds_as_read",
    "loop_floor",
    "low_run",
    "on_floor",
]
