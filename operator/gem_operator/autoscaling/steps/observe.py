"""Step 1, observation: what the later steps read of the pool and of the carried history. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.state import ScalerState

HISTORY_SECONDS = 3600.0
"""How long history is kept: the longest window or period the API allows."""


@dataclass(frozen=True)
class Observed:
    """The pool at this sync, and the history still inside `HISTORY_SECONDS`."""

    current: int
    min_replicas: int
    max_replicas: int
    serving: int  # Ready pods with the model loaded
    recommendations: tuple[tuple[float, int], ...]  # (time, replicas) for the stabilisation windows
    events: tuple[tuple[float, int], ...]  # (time, delta) for the rate policies


def observe(spec: AutoscalingSpec, state: ScalerState, obs: Observation, now: float) -> Observed:
    """Read the counts and drop history older than `HISTORY_SECONDS`."""
    horizon = now - HISTORY_SECONDS
    return Observed(
        current=max(0, obs.current_replicas),
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        serving=sum(1 for p in obs.pods if p.serving),
        recommendations=tuple((t, n) for t, n in state.recommendations if t > horizon),
        events=tuple((t, d) for t, d in state.events if t > horizon),
    )
