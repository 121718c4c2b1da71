"""Step 2, signals: every signal of one sync, each read once. Pure.

The SM reading is measured once (`signals.measure_sm`). The SLO feedback (`sloFeedback.controller`:
the band loop `steps/slo_loop.py`, or the ratchet `slo.slo_feedback`) reads whether it shows an
overload (and the ratchet its mean), and arrives at the effective target; the reading
is then sized once, at that target (`signals.recommend_sm`). The ramp lead (`trend.py`) projects
the demand the measurement shows, and may raise the recommendation; the panic window (`panic.py`)
is the same rule on the short window's reading (the sync's own measurement when there is none).
The SLO feedback is one call with one result (`SloStep`): `slo_step` picks the controller, and
nothing after it knows which one ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.panic import PanicStep, panic_step
from gem_operator.autoscaling.signals import Signal, SmMeasurement, measure_sm, recommend_sm
from gem_operator.autoscaling.slo import SloStep, slo_feedback
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.observe import Observed
from gem_operator.autoscaling.steps.slo_loop import slo_loop
from gem_operator.autoscaling.trend import RampStep, ramp_step


@dataclass(frozen=True)
class Signals:
    """The signals of one sync."""

    sm: Signal  # SM/queue recommendation at the effective target, the ramp lead applied
    slo: SloStep
    ramp: RampStep
    panic: PanicStep
    values: Mapping[str, float]  # each signal's own recommendation (`Decision.signals`)


def with_ramp_lead(sig: Signal, ramp: RampStep, current: int) -> Signal:
    """`sig` raised to the ramp lead's projection when that is above both it and the current count.

    The replicas ordered now serve a lead later: size them for the load then (trend.py). This acts
    inside the tolerance band too: waiting for the band to be left is what makes a ramp's replica
    late. It is what the arrivals will need, so the stabilisation history records it (steady None):
    recording only what the Ready pods' demand needs at the target, so that a line's over-order is
    not held for the down window, cost violation minutes over 850 cases (docs/benchmarks.md, "What
    the down window keeps of a lead").
    """
    if ramp.recommendation is None or sig.recommendation is None:
        return sig
    if ramp.recommendation <= max(sig.recommendation, current):
        return sig
    lead = Reason("ramp-lead", "RisingLoad", ramp.message)
    return replace(
        sig, recommendation=ramp.recommendation, reason="RisingLoad", reasons=(*sig.reasons, lead), steady=None
    )


def panic_window(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    now: float,
    measured: SmMeasurement | Signal,
    target: float,
    saturation: float | None,
) -> Signal | None:
    """The panic window's recommendation at `target` (None: panic mode off). Without a reading of
    its own (`obs.panic_metrics` None) it is the sync's measurement, not measured again."""
    if not spec.panic.enabled:
        return None
    if obs.panic_metrics is not None:
        measured = measure_sm(spec, obs, now, saturation, state.queue, obs.panic_metrics, state.backlog)
    return recommend_sm(spec, measured, saturation, target)


def slo_step(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    now: float,
    measured: SmMeasurement | Signal,
    slo_ms: float | None,
) -> SloStep:
    """The SLO feedback of this sync, by the spec's controller."""
    mean = measured.metric_value
    if spec.slo_feedback.controller == "ratchet":
        return slo_feedback(spec, state, obs, slo_ms, now, overloaded=measured.overloaded, sm_active=mean)
    return slo_loop(spec, state, obs, slo_ms, now, overloaded=measured.overloaded, sm_active=mean)


def read_signals(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    now: float,
    seen: Observed,
    *,
    saturation: float | None,
    slo_ms: float | None,
) -> Signals:
    """Measure, run the SLO feedback on the measurement, size it at the effective target, then the
    ramp lead and the panic window."""
    measured = measure_sm(spec, obs, now, saturation, state.queue, last_backlog=state.backlog)
    slo = slo_step(spec, state, obs, now, measured, slo_ms)
    sig = recommend_sm(spec, measured, saturation, slo.target, tolerance_up=0.0 if slo.eager else None)
    values: dict[str, float] = {}
    if sig.recommendation is not None:
        values["smActive"] = float(sig.recommendation)
    ramp = ramp_step(
        spec,
        state.demand,
        sig.usage,
        slo.target,
        now,
        lead_seconds=state.lead_seconds,
        pending=state.scale_up_pending,
        serving=seen.serving,
        current=seen.current,
        overloaded=sig.overloaded,
        forecasts=state.ramp_forecasts,
        skill=state.ramp_skill,
        peaks=state.demand_peaks,
        steps=state.demand_steps,
        arrivals=sig.arrivals,
        # None (a state carried from before the arrival peaks): read in the demand peaks.
        arrived=state.arrival_peaks or None,
    )
    if ramp.recommendation is not None and sig.recommendation is not None:
        values["rampLead"] = float(ramp.recommendation)
    window = panic_window(spec, state, obs, now, measured, slo.target, saturation)
    return Signals(
        sm=with_ramp_lead(sig, ramp, seen.current),
        slo=slo,
        ramp=ramp,
        panic=panic_step(spec, state, obs, now, window),
        values=values,
    )
