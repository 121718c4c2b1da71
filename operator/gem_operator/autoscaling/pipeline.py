"""One autoscaler sync as a pipeline of pure steps, and the decision they add up to. Pure.

observe -> signals (SLO loop) -> recommendation -> stabilisation -> panic and rate limits ->
hysteresis -> caps and bounds -> decision (`steps/`; the rules are described in `policy.py`).
`decide` runs them in that order; `conclude` turns their results into the `Decision` and the
state for the next sync. Each step owns the part of `ScalerState` it reads and writes: the windows
(observe, stabilise), the SLO feedback (`SloStep.remember`), the ramp lead, the panic, the queue
and backlog of the SM reading, the direction-change budget (`steps/hysteresis.py`).
"""

from __future__ import annotations

from dataclasses import replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import NOT_LIMITED, Decision, Limit, Reason, render
from gem_operator.autoscaling.idle import as_read_decision, in_busy_terms
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.hysteresis import (
    hold_for_ramp_lead,
    hold_reversal,
    release_fits,
    remember_direction,
)
from gem_operator.autoscaling.steps.limits import Limited, apply_panic, cap, limit_rate
from gem_operator.autoscaling.steps.measure import Signals, read_signals
from gem_operator.autoscaling.steps.observe import Observed, observe
from gem_operator.autoscaling.steps.recommend import Recommendation, recommend
from gem_operator.autoscaling.steps.stabilise import Stabilised, climbed_back, stabilise, stepped_floor


def decide(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    now: float,
    *,
    saturation: float | None,
    slo_ms: float | None,
) -> Decision:
    """Run the steps of one sync in order (see `policy.desired_replicas`), in busy SM where the spec
    declares an idle floor (`idle.py`)."""
    idle = spec.metrics.sm_active_idle
    spec, obs, saturation = in_busy_terms(spec, obs, saturation)
    seen = observe(spec, state, obs, now)
    sig = read_signals(spec, state, obs, now, seen, saturation=saturation, slo_ms=slo_ms)
    rec = recommend(spec, sig.sm, seen, now, obs.precompute, state.backlog_empty_since)
    # No capacity is given back while the ramp lead sees demand rising, nor once it has climbed back
    # off its low (`steps/stabilise.py`).
    release = sig.slo.release if sig.ramp.recommendation is None and release_fits(spec, state, now) else None
    climbed = None if release is None else climbed_back(spec, sig.ramp.usage)
    release = None if climbed is not None else release
    stepped = None if release is None else stepped_floor(spec, sig.ramp, sig.slo.target, now)
    stable = stabilise(spec, seen, rec, now, release=release, stepped=stepped, release_held=climbed)
    held = rec.replicas is None
    panicked = apply_panic(sig.panic, stable.replicas, seen.current, held=held, yielding=rec.yielding)
    rated = limit_rate(spec, seen, now, panicked, panic=sig.panic, slo=sig.slo, yielding=rec.yielding)
    if not rec.at_once:  # an idle or yielding precompute pool gives its GPUs back whatever the budget
        rated = hold_reversal(spec, state, seen, rated, now, confirmed=sig.slo.release is not None)
        rated = hold_for_ramp_lead(sig.ramp.keep, seen, rated)
    reasons = (*rec.reasons, *stable.reasons, *sig.slo.reasons, *panicked.reasons, *rated.reasons)
    limits = rated.limits
    if rec.yielding:
        # A yielding pool reports the yield as what limits it, whatever else applied.
        limits = (*limits, Limit("yield", "YieldingGPUs", render(reasons), stable.replicas, rated.replicas))
    capped = cap(obs, seen, rated.replicas, rec.floor)
    limited = Limited(capped.replicas, (*limits, *capped.limits), (*reasons, *capped.reasons))
    return as_read_decision(conclude(spec, state, now, seen, sig, rec, stable, panicked, limited), idle)


def conclude(
    spec: AutoscalingSpec,
    state: ScalerState,
    now: float,
    seen: Observed,
    sig: Signals,
    rec: Recommendation,
    stable: Stabilised,
    panicked: Limited,
    limited: Limited,
) -> Decision:
    """The decision of the steps' results, and the state to carry to the next sync."""
    current, desired = seen.current, limited.replicas
    reason = rec.reason
    if panicked.replicas > stable.replicas and panicked.replicas > current:
        reason = "Panic"
    reasons = limited.reasons
    held = rec.replicas is None
    if held and desired != current:
        # A bound moved the count, not the signal: say that, not "holding at".
        last = limited.limits[-1] if limited.limits else None
        moved = Reason("bounds", NOT_LIMITED.reason, NOT_LIMITED.message)
        if last is not None:
            moved = Reason(last.step, last.reason, last.message)
        reasons = (moved, *sig.sm.reasons)
    events = seen.events if desired == current else (*seen.events, (now, desired - current))
    ramp = sig.ramp
    carried = replace(
        state,
        recommendations=stable.recommendations,
        events=events,
        backlog_empty_since=rec.backlog_empty_since,
        queue=sig.sm.queue,
        backlog=sig.sm.backlog,
        panic_until=sig.panic.until,
        demand=ramp.usage,
        lead_seconds=ramp.lead_seconds,
        ramp_forecasts=ramp.forecasts,
        ramp_skill=ramp.skill,
        demand_peaks=ramp.peaks,
        arrival_peaks=ramp.arrived,
        demand_steps=ramp.steps,
        scale_up_pending=(now, desired) if desired > current and ramp.pending is None else ramp.pending,
        slo_last_release=now if stable.released else state.slo_last_release,
    )
    problem = sig.sm.metrics_problem
    return Decision(
        desired_replicas=desired,
        current_replicas=current,
        reason=reason,
        reasons=reasons,
        state=remember_direction(sig.slo.remember(spec, carried, desired, now), current, desired, now),
        limits=limited.limits,
        held=held,
        signal_reason=sig.sm.reason,
        metrics_problem=None if problem is None else (sig.sm.metrics_reason, problem),
        recommendation=rec.replicas,
        metric_value=sig.sm.metric_value,
        metric_timestamp=sig.sm.metric_timestamp,
        signals={**sig.values, **rec.values},
        effective_target=sig.slo.target,
        p99_ms=sig.slo.p99_ms,
        panicking=sig.panic.panicking,
    )


__all__ = ["conclude", "decide"]
