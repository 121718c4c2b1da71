"""The direction-change budget (`spec.autoscaling.hysteresis`)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.hysteresis import as_hpa, hold_for_ramp_lead, hold_reversal, remember_direction
from gem_operator.autoscaling.steps.limits import Limited
from gem_operator.autoscaling.steps.observe import observe

T0 = 100_000.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetSmActive": 0.5}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def pool(n: int, sm: float, now: float) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    return Observation(n, pods, MetricReading({f"p{i}": PodSample(sm, now) for i in range(n)}))


@pytest.mark.parametrize(
    ("last", "reversals", "wanted", "held"),
    [
        pytest.param(1, (T0 - 600, T0 - 300), 3, True, id="reversal-over-budget-held"),
        pytest.param(1, (T0 - 3700, T0 - 300), 3, False, id="old-changes-leave-the-hour"),
        pytest.param(-1, (T0 - 600, T0 - 300), 3, False, id="down-after-down-is-no-reversal"),
        pytest.param(1, (T0 - 600, T0 - 300), 9, False, id="scale-up-never-held"),
        pytest.param(0, (), 3, False, id="first-change"),
    ],
)
def test_a_reversing_scale_down_waits_for_the_budget(
    last: int, reversals: tuple[float, ...], wanted: int, held: bool
) -> None:
    s = spec()  # maxDirectionChangesPerHour 4: an unconfirmed reversal needs at most 1 change in the last hour
    state = ScalerState(last_direction=last, reversals=reversals)
    seen = observe(s, state, pool(5, 0.5, T0), T0)
    out = hold_reversal(s, state, seen, Limited(wanted), T0)
    assert (out.replicas == 5) == held
    if held:
        assert out.limits[-1].reason == "DirectionChangeBudget" and out.limits[-1].wanted == wanted


@pytest.mark.parametrize(
    ("needs", "wanted", "kept"),
    [
        pytest.param(4, 3, 4, id="a-scale-down-stops-at-what-the-rising-line-needs"),
        pytest.param(9, 3, 5, id="never-above-the-current-count"),
        pytest.param(3, 3, 3, id="a-scale-down-the-line-allows-passes"),
        pytest.param(None, 3, 3, id="no-rising-line-no-hold"),
        pytest.param(7, 6, 6, id="a-scale-up-passes"),
        pytest.param(7, 5, 5, id="no-change-passes"),
    ],
)
def test_a_scale_down_stops_at_the_ramp_leads_need(needs: int | None, wanted: int, kept: int) -> None:
    s = spec()
    seen = observe(s, ScalerState(), pool(5, 0.5, T0), T0)
    out = hold_for_ramp_lead(needs, seen, Limited(wanted))
    assert out.replicas == kept
    if kept != wanted:
        assert out.limits[-1].reason == "RampLead" and out.limits[-1].wanted == wanted
        assert out.limits[-1].allowed == kept and f"needs {needs} replicas" in out.limits[-1].message
    else:
        assert out.limits == ()


@pytest.mark.parametrize(
    ("current", "last", "wanted", "held"),
    [
        pytest.param(20, 1, 19, True, id="one-of-twenty-after-a-scale-up-held"),
        pytest.param(20, 1, 18, False, id="two-of-twenty-passes"),
        pytest.param(20, -1, 19, False, id="one-more-step-down-is-no-reversal"),
        pytest.param(4, 1, 3, False, id="one-of-four-is-a-quarter"),
        pytest.param(12, 1, 11, True, id="one-of-twelve-is-under-the-tolerance"),
    ],
)
def test_a_reversal_must_give_back_enough_to_be_worth_a_change(
    current: int, last: int, wanted: int, held: bool
) -> None:
    s = spec()  # tolerance.down 0.1: at least min(2, 0.1 x current) replicas
    state = ScalerState(last_direction=last)  # an empty budget: only the size can hold it
    seen = observe(s, state, pool(current, 0.5, T0), T0)
    out = hold_reversal(s, state, seen, Limited(wanted), T0, confirmed=True)
    assert out.replicas == (current if held else wanted)
    if held:
        assert out.limits[-1].reason == "DirectionChangeBudget" and "fewer than" in out.limits[-1].message


def test_remember_direction_counts_changes_only() -> None:
    state = ScalerState(last_direction=1, reversals=(T0 - 4000, T0 - 100))
    up = remember_direction(state, 3, 5, T0)
    assert up.last_direction == 1 and up.reversals == (T0 - 100,)
    down = remember_direction(state, 5, 3, T0)
    assert down.last_direction == -1 and down.reversals == (T0 - 100, T0)
    assert remember_direction(state, 4, 4, T0).last_direction == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=10, max_size=120), st.integers(2, 5))
def test_property_no_hour_holds_more_changes_than_the_budget(loads: list[float], budget: int) -> None:
    """Whatever the load does, every window of an hour holds at most the budget's direction changes."""
    s = spec(hysteresis={"maxDirectionChangesPerHour": budget}, stabilizationSeconds={"down": 0})
    state, n, demand = ScalerState(), 4, 2.0
    events: list[tuple[float, int]] = []
    for i, load in enumerate(loads):
        now = T0 + 60 * i
        demand = load * 20
        d = desired_replicas(s, state, pool(n, min(0.89, demand / n), now), now)
        if d.desired_replicas != n:
            events.append((now, 1 if d.desired_replicas > n else -1))
        state, n = d.state, d.desired_replicas
    changes = [b[0] for a, b in itertools.pairwise(events) if a[1] != b[1]]
    for t in changes:
        assert sum(1 for c in changes if t <= c < t + 3600) <= budget


def test_state_round_trips_and_rejects_a_bad_direction() -> None:
    state = ScalerState(last_direction=-1, reversals=(1.0, 2.0))
    assert ScalerState.from_dict(state.to_dict()) == state
    assert ScalerState.from_dict({"lastDirection": 7}) == ScalerState()


def test_the_hpa_baselines_run_without_it() -> None:
    s = spec(hysteresis={"maxDirectionChangesPerHour": 5})
    hpa = as_hpa(s)
    assert not hpa.hysteresis.enabled and not hpa.ramp_lead.enabled
    assert hpa.hysteresis.max_direction_changes_per_hour == 5 and s.hysteresis.enabled
