"""Panic mode for bursts, after Knative's KPA. Pure.

KPA keeps two windows: a stable one (60 s) and a panic one (6 s); when the panic window's
proposal is at least twice the Ready pods, it scales to it at once and refuses to scale down
until the panic has been over for the stable window. Here the stable signal is the sync's SM
reading; `Observation.panic_metrics` carries SM active averaged over `panic.windowSeconds`
(the sync's own reading when the source has no shorter window). The panic recommendation is the
same SM/queue rule on that reading and the current effective target (`pipeline.read_signals`
computes it; without a shorter window it is the sync's own measurement, not measured twice). Constants:
`spec.autoscaling.panic` (`threshold` 2.0, `holdSeconds` 60), documented on `api.autoscaling.PanicMode`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.signals import Signal
from gem_operator.autoscaling.state import ScalerState


@dataclass(frozen=True)
class PanicStep:
    panicking: bool
    until: float | None
    recommendation: int | None  # what the panic window asks for (None: no usable reading)
    message: str = ""


def panic_step(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    now: float,
    window: Signal | None,
) -> PanicStep:
    """Whether the pool panics at this sync, and the short window's recommendation.

    `window`: the SM/queue rule on the panic window's reading at the effective target (None:
    nothing was read for it; a panic already on still runs out its hold).
    """
    pm = spec.panic
    until = state.panic_until if pm.enabled else None
    if not pm.enabled:
        return PanicStep(False, None, None)
    ready = sum(1 for p in obs.pods if p.serving)
    rec = None if window is None else window.recommendation
    if rec is not None and ready > 0 and rec >= pm.threshold * ready:
        until = now + pm.hold_seconds
        msg = f"panic: the {pm.window_seconds}s window asks for {rec} replicas, >= {pm.threshold:g}x the {ready} Ready"
        return PanicStep(True, until, rec, msg)
    if until is not None and now < until:
        return PanicStep(True, until, rec, f"panic for {until - now:.0f}s more (no scale-down)")
    return PanicStep(False, None, rec)


__all__ = ["PanicStep", "panic_step"]
