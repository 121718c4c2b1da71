"""SLO feedback on the SM target, the `ratchet` controller (`sloFeedback.controller: ratchet`). Pure.

The default controller is the two-sided band loop (`steps/slo_loop.py`); this module keeps the
earlier one-way rule, its `SloStep` (which both return) and the helpers both use.

`targetSmActive` is a guess: the same mean SM active gives a very different p99 depending on
how bursty the traffic is and how many replicas share it. So the policy scales on an *effective*
target that starts at `targetSmActive` and follows the observed p99 against `spec.slo`
(multiplicative decrease, slow additive recovery; the constants are `spec.autoscaling.sloFeedback`,
documented on `api.autoscaling.SloFeedback`):

- **Over the SLO** (p99 > `p99LatencyMs`): cut by `decreasePercent` (10 %), at most once per
  `decreaseIntervalSeconds` (60 s, the default query's rate window, so one cut is judged on a p99
  that could have seen it) and, after a cut, not before the replica count it led to serves (the
  replicas it ordered serve only after a pod start and model load; cutting again each minute
  meanwhile learns the start-up lag, not the headroom, and over-corrects), and not while the
  pool is overloaded (queued work or saturated SM at this sync: the queue and saturation rules
  size an overload, and a flash crowd says nothing about the headroom a steady load needs).
  Never below the floor `minTargetFraction * targetSmActive` (0.5). It never rises while over, and the policy
  does not scale down while over nor for `scaleDownHoldSeconds` (300 s) after the last over-SLO
  reading (hysteresis: the capacity a burst needed is not handed back just before the next burst,
  which on bursty traffic is a direction change per burst).
- **Near the SLO** (p99 > `recoverBelow` (0.7) * SLO) with a usable SM reading: the same cut
  (same interval and start-up rule), before any violation. The target starts at
  `targetSmActive`, a guess; a pool whose p99 already uses most of the SLO has no headroom left
  for a ramp while new pods start (minutes) or for the next burst, so the first violation would
  come next. p99 does not fall as the load per pod rises, so a p99 near the SLO below the target
  says the target is too high as well. This is the warm start: the target is learned from the
  latency signal before the first miss, not only from misses.
- **Well under** (p99 <= `recoverBelow` * SLO) for a whole `recoverSeconds` (600 s): step
  back up by `recoverPercent` (5 %) of `targetSmActive`, never above it; the window restarts.
- **No fresh reading**: hold. An unavailable latency is never read as a low one.

With no latency reading (`Observation.latency` None) and a fresh state, the effective target is
`targetSmActive` exactly: the SM path behaves as it did without this feedback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Reason, render
from gem_operator.autoscaling.observation import LatencyReading, Observation
from gem_operator.autoscaling.state import ScalerState


@dataclass(frozen=True)
class SloStep:
    """The SLO feedback's outcome at one sync.

    The pipeline reads only this: the target to scale on, whether scale-down is blocked
    (`over_slo`, `hold_down`), whether scale-up skips its tolerance band (`eager`), the reasons to
    report, and `remember` for the state it carries. The band loop (`steps/slo_loop.py`, the
    default controller) returns the same value (`LoopStep`, its own `remember`).
    """

    target: float  # effective SM target to scale on now
    over_slo: bool  # a fresh p99 above the SLO: blocks scale-down
    p99_ms: float | None  # the fresh p99 read, if any
    good_since: float | None
    last_decrease: float | None
    reasons: tuple[Reason, ...] = ()
    last_over: float | None = None  # when a fresh p99 was last over the SLO
    hold_down: bool = False  # within scaleDownHoldSeconds of the last over-SLO p99 (blocks scale-down)
    last_overloaded: float | None = None  # when a sync last saw the pool overloaded
    eager: bool = False  # a fresh p99 above eagerScaleUpAbove x SLO: scale-up ignores the up tolerance
    release: float | None = None  # the p99 shows room below the band: the down window may keep this x its count

    @property
    def message(self) -> str:
        return render(self.reasons)

    def remember(self, spec: AutoscalingSpec, state: ScalerState, desired: int, now: float) -> ScalerState:
        """`state` with what the feedback carries to the next sync (`desired`: the count decided now)."""
        learned = self.target if state.effective_target is not None or self.target != spec.target_sm_active else None
        return replace(
            state,
            effective_target=learned,
            slo_good_since=self.good_since,
            slo_last_decrease=self.last_decrease,
            slo_last_over=self.last_over,
            slo_cut_replicas=desired if self.last_decrease == now else state.slo_cut_replicas,
            slo_last_overloaded=self.last_overloaded,
        )


def says(*texts: str) -> tuple[Reason, ...]:
    """The feedback's clauses as reasons."""
    return tuple(Reason("slo-feedback", "SloFeedback", t) for t in texts)


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


def cut_due(spec: AutoscalingSpec, state: ScalerState, obs: Observation, now: float) -> bool:
    """Whether a cut may come now.

    One cut is judged on a p99 that could have seen it: the interval (the query's window), and no
    further cut until the replicas the last cut ordered serve (`slo_cut_replicas`: they serve a
    pod start and model load later; cutting again meanwhile would learn the start-up lag, not the
    headroom). Pods added later for a rising load do not hold it.
    """
    last = state.slo_last_decrease
    ordered = state.slo_cut_replicas
    serving = sum(1 for p in obs.pods if p.serving)
    starting = ordered is not None and serving < min(ordered, obs.current_replicas)
    return last is None or (now - last >= spec.slo_feedback.decrease_interval_seconds and not starting)


def slo_step(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    slo_ms: float | None,
    now: float,
    *,
    overloaded: bool = False,
    sm_active: float | None = None,
) -> SloStep:
    """Advance the SLO feedback by one sync (see the module docstring for the rule).

    `overloaded`: the SM signal saw queued work or saturated pods at this sync, or within
    `decreaseIntervalSeconds` (the p99 query's window still holds that overload). The queue and
    saturation rules size an overload; the target is about headroom at a load the pods serve, so
    an overload does not cut it (a flash crowd would otherwise teach it a lesson about bursts).
    `sm_active`: the Ready pods' mean fresh SM active at this sync (None: no usable reading, and a
    p99 near the SLO then cuts nothing).
    """
    fb = spec.slo_feedback
    floor, base = target_bounds(spec)
    current = effective_target(spec, state)
    last_over = state.slo_last_over
    if not fb.enabled or slo_ms is None or obs.latency is None:
        return SloStep(current, False, None, state.slo_good_since, state.slo_last_decrease, last_over=last_over)
    holding = last_over is not None and now - last_over < fb.scale_down_hold_seconds
    p99, why = fresh_p99(obs.latency, now, spec.metrics.stale_after_seconds)
    if p99 is None:
        held_at = says(why, f"SM target held at {current:.3f}")
        return SloStep(current, False, None, None, state.slo_last_decrease, held_at, last_over, holding)
    last = state.slo_last_decrease
    due = cut_due(spec, state, obs, now)
    if p99 > slo_ms:
        if due and not overloaded and current > floor:
            new = max(floor, current * (1 - fb.decrease_percent / 100))
            msg = f"p99 {p99:.1f} ms > SLO {slo_ms:g} ms: SM target {current:.3f} -> {new:.3f}"
            return SloStep(new, True, p99, None, now, says(msg), now, fb.scale_down_hold_seconds > 0)
        held = (
            "at its floor"
            if current <= floor
            else "overloaded within the query's window: the queue sizes it"
            if overloaded
            else "cut recently"
        )
        msg = f"p99 {p99:.1f} ms > SLO {slo_ms:g} ms: SM target {current:.3f} ({held})"
        return SloStep(current, True, p99, None, last, says(msg), now, fb.scale_down_hold_seconds > 0)
    if p99 > fb.recover_below * slo_ms:
        if sm_active is not None and due and not overloaded and current > floor:
            new = max(floor, current * (1 - fb.decrease_percent / 100))
            msg = (
                f"p99 {p99:.1f} ms near SLO {slo_ms:g} ms (SM active {sm_active:.2f}): "
                f"SM target {current:.3f} -> {new:.3f}"
            )
            return SloStep(new, False, p99, None, now, says(msg), last_over, holding)
        msg = f"p99 {p99:.1f} ms near SLO {slo_ms:g} ms"
        return SloStep(current, False, p99, None, last, says(msg), last_over, holding)
    since = state.slo_good_since if state.slo_good_since is not None else now
    if current < base and now - since >= fb.recover_seconds:
        new = min(base, current + base * fb.recover_percent / 100)
        msg = (
            f"p99 {p99:.1f} ms well under SLO {slo_ms:g} ms for {now - since:.0f}s: "
            f"SM target {current:.3f} -> {new:.3f}"
        )
        return SloStep(new, False, p99, now, last, says(msg), last_over, holding)
    return SloStep(current, False, p99, since, last, says(f"p99 {p99:.1f} ms (SLO {slo_ms:g} ms)"), last_over, holding)


def slo_feedback(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    slo_ms: float | None,
    now: float,
    *,
    overloaded: bool,
    sm_active: float | None,
) -> SloStep:
    """The SLO feedback step of one sync: `slo_step` with the overload window and eager scale-up.

    `overloaded`: the SM reading of this sync saw queued work or saturated pods; `sm_active`: its
    mean (None: no usable reading).
    """
    # The p99 of a query window that held an overload says capacity was short, which the queue rule
    # sizes; it is no lesson about headroom. So the window after an overloaded sync cuts no target.
    fb = spec.slo_feedback
    last_overloaded = now if overloaded else state.slo_last_overloaded
    in_window = last_overloaded is not None and now - last_overloaded < fb.decrease_interval_seconds
    step = slo_step(spec, state, obs, slo_ms, now, overloaded=in_window, sm_active=sm_active)
    # A p99 already using part of the SLO: scale-up does not wait for the up tolerance band (at a
    # few replicas 10 % is most of a replica, and the replica ordered late serves a pod start later).
    eager = step.p99_ms is not None and slo_ms is not None and step.p99_ms > fb.eager_scale_up_above * slo_ms
    return replace(step, last_overloaded=last_overloaded, eager=eager)


__all__ = ["SloStep", "cut_due", "effective_target", "fresh_p99", "says", "slo_feedback", "slo_step", "target_bounds"]
