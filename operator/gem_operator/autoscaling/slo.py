"""SLO feedback on the SM target: keep the p99 the user asked for, not an SM number. Pure.

`targetSmActive` is a guess: the same mean SM active gives a very different p99 depending on
how bursty the traffic is and how many replicas share it. So the policy scales on an *effective*
target that starts at `targetSmActive` and follows the observed p99 against `spec.slo`
(multiplicative decrease, slow additive recovery; the constants are `spec.autoscaling.sloFeedback`,
documented on `api.autoscaling.SloFeedback`):

- **Over the SLO** (p99 > `p99LatencyMs`): cut by `decreasePercent` (10 %), at most once per
  `decreaseIntervalSeconds` (60 s, the default query's rate window, so one cut is judged on a p99
  that could have seen it), and not while the pool is overloaded (queued work or saturated SM at
  this sync: the queue and saturation rules size an overload, and a flash crowd says nothing about
  the headroom a steady load needs). Never below
  the floor `minTargetFraction * targetSmActive` (0.5). It never rises while over, and the policy
  does not scale down while over.
- **Well under** (p99 <= `recoverBelow` (0.8) * SLO) for a whole `recoverSeconds` (600 s): step
  back up by `recoverPercent` (5 %) of `targetSmActive`, never above it; the window restarts.
- **Between, or no fresh reading**: hold. An unavailable latency is never read as a low one.

With no latency reading (`Observation.latency` None) and a fresh state, the effective target is
`targetSmActive` exactly: the SM path behaves as it did without this feedback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import LatencyReading, Observation
from gem_operator.autoscaling.state import ScalerState


@dataclass(frozen=True)
class SloStep:
    """The SLO feedback's outcome at one sync."""

    target: float  # effective SM target to scale on now
    over_slo: bool  # a fresh p99 above the SLO: blocks scale-down
    p99_ms: float | None  # the fresh p99 read, if any
    good_since: float | None
    last_decrease: float | None
    message: str = ""


def target_bounds(spec: AutoscalingSpec) -> tuple[float, float]:
    """[floor, targetSmActive] of the effective target."""
    base = spec.target_sm_active
    return base * spec.slo_feedback.min_target_fraction, base


def effective_target(spec: AutoscalingSpec, state: ScalerState) -> float:
    """The learned target, clamped to the spec's bounds (the spec may have changed since)."""
    floor, base = target_bounds(spec)
    if not spec.slo_feedback.enabled or state.effective_target is None:
        return base
    return min(base, max(floor, state.effective_target))


def fresh_p99(reading: LatencyReading | None, now: float, stale_after: float) -> tuple[float | None, str]:
    """The reading's p99 (ms) if it is usable now, else None and why not."""
    if reading is None:
        return None, "latency not read"
    if reading.error is not None:
        return None, f"latency unavailable: {reading.error}"
    if reading.p99_ms is None or not math.isfinite(reading.p99_ms) or reading.p99_ms < 0:
        return None, "latency unavailable: no p99 value (no requests in the query's window?)"
    if reading.timestamp is not None and now - reading.timestamp > stale_after:
        return None, f"latency sample is {now - reading.timestamp:.0f}s old (staleAfterSeconds={stale_after:g})"
    return reading.p99_ms, ""


def slo_step(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    slo_ms: float | None,
    now: float,
    *,
    overloaded: bool = False,
) -> SloStep:
    """Advance the SLO feedback by one sync (see the module docstring for the rule).

    `overloaded`: the SM signal sees queued work or saturated pods at this sync. The queue and
    saturation rules size an overload; the target is about headroom at a load the pods serve, so
    an overload does not cut it (a flash crowd would otherwise teach it a lesson about bursts).
    """
    fb = spec.slo_feedback
    floor, base = target_bounds(spec)
    current = effective_target(spec, state)
    if not fb.enabled or slo_ms is None or obs.latency is None:
        return SloStep(current, False, None, state.slo_good_since, state.slo_last_decrease)
    p99, why = fresh_p99(obs.latency, now, spec.metrics.stale_after_seconds)
    if p99 is None:
        return SloStep(current, False, None, None, state.slo_last_decrease, f"{why}; SM target held at {current:.3f}")
    if p99 > slo_ms:
        last = state.slo_last_decrease
        due = last is None or now - last >= fb.decrease_interval_seconds
        if due and not overloaded and current > floor:
            new = max(floor, current * (1 - fb.decrease_percent / 100))
            msg = f"p99 {p99:.1f} ms > SLO {slo_ms:g} ms: SM target {current:.3f} -> {new:.3f}"
            return SloStep(new, True, p99, None, now, msg)
        held = (
            "at its floor" if current <= floor else "overloaded: the queue sizes it" if overloaded else "cut recently"
        )
        msg = f"p99 {p99:.1f} ms > SLO {slo_ms:g} ms: SM target {current:.3f} ({held})"
        return SloStep(current, True, p99, None, last, msg)
    if p99 <= fb.recover_below * slo_ms:
        since = state.slo_good_since if state.slo_good_since is not None else now
        if current < base and now - since >= fb.recover_seconds:
            new = min(base, current + base * fb.recover_percent / 100)
            msg = (
                f"p99 {p99:.1f} ms well under SLO {slo_ms:g} ms for {now - since:.0f}s: "
                f"SM target {current:.3f} -> {new:.3f}"
            )
            return SloStep(new, False, p99, now, state.slo_last_decrease, msg)
        return SloStep(current, False, p99, since, state.slo_last_decrease, f"p99 {p99:.1f} ms (SLO {slo_ms:g} ms)")
    return SloStep(current, False, p99, None, state.slo_last_decrease, f"p99 {p99:.1f} ms near SLO {slo_ms:g} ms")


__all__ = ["SloStep", "effective_target", "fresh_p99", "slo_step", "target_bounds"]
