"""Observation step: counts and the history still inside the longest window (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import MetricReading, Observation, PodState
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.observe import HISTORY_SECONDS, observe

NOW = 10_000.0


# (current replicas, pods as (ready, loaded), history ages, want current, want serving, want kept ages)
CASES: list[Any] = [
    pytest.param(3, [(True, True)] * 3, [10.0, 100.0], 3, 3, [10.0, 100.0], id="all-serving"),
    pytest.param(3, [(True, True), (True, False), (False, False)], [], 3, 1, [], id="loading-pods-do-not-serve"),
    pytest.param(-1, [], [], 0, 0, [], id="negative-count-reads-as-zero"),
    pytest.param(
        2, [(True, True)] * 2, [HISTORY_SECONDS, HISTORY_SECONDS - 1], 2, 2, [HISTORY_SECONDS - 1], id="horizon"
    ),
]


@pytest.mark.parametrize(("current", "pods", "ages", "want_current", "serving", "kept"), CASES)
def test_observe(
    current: int,
    pods: list[tuple[bool, bool]],
    ages: list[float],
    want_current: int,
    serving: int,
    kept: list[float],
) -> None:
    spec = AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 9})
    states = [PodState(f"p{i}", ready=r, model_loaded=m) for i, (r, m) in enumerate(pods)]
    state = ScalerState(recommendations=tuple((NOW - a, 4) for a in ages), events=tuple((NOW - a, 1) for a in ages))
    seen = observe(spec, state, Observation(current, states, MetricReading()), NOW)
    assert (seen.current, seen.serving, seen.min_replicas, seen.max_replicas) == (want_current, serving, 1, 9)
    assert seen.recommendations == tuple((NOW - a, 4) for a in kept)
    assert seen.events == tuple((NOW - a, 1) for a in kept)
