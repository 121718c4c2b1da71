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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gem_operator.autoscaling.decision import ConditionValue

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


def learned_target(declared: float, target: float, run: LowRun | None, now: float, *, looping: bool) -> Learned:
    """The `TargetLearned` condition for a pool whose SLO loop runs (`looping`) at `target` now."""
    if not looping:
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
    highest = run[1]
    message = (
        f"the SLO loop has held the SM target at or below {highest:.2f} ({highest / declared:.2f} x "
        f"targetSmActive {declared:g}) for {minutes} min and uses {target:.2f} now: the p99 needs less SM "
        f"active than declared on this fleet and traffic, and a new pool spends its first windows learning "
        f"this again; declare spec.autoscaling.targetSmActive near {target:.2f}"
    )
    return Learned(run, ConditionValue(TARGET_LEARNED, "True", "HeldBelowDeclared", message))


__all__ = [
    "LEARNED_AFTER_SECONDS",
    "LEARNED_BELOW",
    "TARGET_LEARNED",
    "Learned",
    "LowRun",
    "learned_target",
    "low_run",
]
