"""The SLO loop's release: a p99 below the band lets the scale-down window give capacity back."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.hysteresis import hold_reversal, release_fits
from gem_operator.autoscaling.steps.limits import Limited
from gem_operator.autoscaling.steps.observe import Observed, observe
from gem_operator.autoscaling.steps.recommend import Recommendation
from gem_operator.autoscaling.steps.slo_loop import band_error, slo_loop
from gem_operator.autoscaling.steps.stabilise import stabilise

SLO = 40.0
T0 = 100_000.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetSmActive": 0.6}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def pool(n: int, sm: float, p99: float | None, now: float, *, starting: int = 0) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    pods += [PodState(f"s{i}", ready=False, model_loaded=False) for i in range(starting)]
    latency = None if p99 is None else LatencyReading(p99, now)
    samples = {f"p{i}": PodSample(sm, now) for i in range(n)}
    return Observation(len(pods), pods, MetricReading(samples), latency=latency)


def loop_release(
    s: AutoscalingSpec, readings: list[float | None], *, fresh: bool = False, **kw: Any
) -> list[float | None]:
    """The loop's release at each of 15 s syncs with these p99 readings (10 Ready pods at SM 0.3);
    the pool quiet for a while unless `fresh`."""
    state, out = ScalerState(slo_quiet_since=None if fresh else T0 - 600), []
    for i, p99 in enumerate(readings):
        now = T0 + 15 * i
        step = slo_loop(s, state, pool(10, 0.3, p99, now, **kw), SLO, now, overloaded=False, sm_active=0.3)
        state = step.remember(s, state, 10, now)
        out.append(step.release)
    return out


def test_a_whole_window_below_the_band_releases_by_the_loops_own_move() -> None:
    s = spec()
    out = loop_release(s, [20.0] * 6)
    assert out[:4] == [None] * 4  # the first reading starts the run; a window (60 s) confirms it
    assert out[4] == pytest.approx(math.exp(0.3 * band_error(s, 20.0, SLO)))
    assert 0.9 < out[4] < 1.0


@pytest.mark.parametrize(
    ("readings", "kw"),
    [
        pytest.param([28.0] * 8, {}, id="inside-the-band"),
        pytest.param([36.0] * 8, {}, id="above-the-band"),
        pytest.param([20.0] * 8, {"starting": 1}, id="pods-starting"),
        pytest.param([20.0] * 8, {"fresh": True}, id="not-quiet-for-a-window-yet"),
        pytest.param([None] * 8, {}, id="no-p99-is-never-low"),
        pytest.param([20.0, 20.0, 20.0, 28.0] * 2, {}, id="run-broken-by-the-band"),
    ],
)
def test_no_release_without_a_whole_quiet_window_below_the_band(readings: list[float | None], kw: Any) -> None:
    assert set(loop_release(spec(), readings, **kw)) == {None}


def test_a_sync_without_a_p99_releases_nothing() -> None:
    out = loop_release(spec(), [20.0] * 5 + [None, 20.0])
    assert out[4] is not None and out[5] is None


def test_the_next_release_waits_a_window_after_the_last() -> None:
    s = spec()
    state = ScalerState(slo_outside=(T0 - 600, -0.2), slo_last_release=T0 - 30, slo_quiet_since=T0 - 600)
    step = slo_loop(s, state, pool(10, 0.3, 20.0, T0), SLO, T0, overloaded=False, sm_active=0.3)
    assert step.release is None
    later = slo_loop(s, state, pool(10, 0.3, 20.0, T0 + 45), SLO, T0 + 45, overloaded=False, sm_active=0.3)
    assert later.release is not None


def seen(current: int, history: tuple[tuple[float, int], ...]) -> Observed:
    return Observed(current, 0, 100, current, tuple((T0 - age, n) for age, n in history), ())


def rec(n: int) -> Recommendation:
    return Recommendation(n, "R", (), 1, None)


# (current, history as (age s, replicas), recommendation, release, count, released)
CASES: list[Any] = [
    pytest.param(20, ((600, 20),), 12, None, 20, False, id="no-release-holds-the-window"),
    pytest.param(20, ((600, 20),), 12, 0.9, 18, True, id="keeps-the-share-of-its-peak"),
    pytest.param(20, ((600, 20),), 19, 0.5, 19, True, id="never-below-the-recommendation"),
    pytest.param(20, ((600, 20), (200, 17)), 12, 0.5, 17, True, id="never-below-the-ramp-windows-peak"),
    pytest.param(20, ((600, 20), (200, 20)), 12, 0.5, 20, False, id="ramp-window-peak-at-the-top"),
    pytest.param(20, ((600, 20),), 12, 0.99, 20, False, id="less-than-a-replica-is-nothing"),
]


@pytest.mark.parametrize(("current", "history", "want", "release", "count", "released"), CASES)
def test_stabilise_releases(
    current: int,
    history: tuple[tuple[float, int], ...],
    want: int,
    release: float | None,
    count: int,
    released: bool,
) -> None:
    s = spec(stabilizationSeconds={"down": 900})
    out = stabilise(s, seen(current, history), rec(want), T0, release=release)
    assert (out.replicas, out.released) == (count, released)
    # The window keeps no more than it released to, so the next sync does not restore it.
    assert max(n for _, n in out.recommendations) == (count if released else max(current, *(n for _, n in history)))


@pytest.mark.parametrize(
    ("stepped", "count"),
    [
        pytest.param(None, 10, id="no-step-releases-to-its-share"),
        pytest.param(16, 16, id="keeps-what-the-stepped-level-needs"),
        pytest.param(25, 20, id="a-level-above-the-window-releases-nothing"),
        pytest.param(8, 10, id="a-level-below-the-share-changes-nothing"),
    ],
)
def test_a_release_keeps_what_a_level_reached_by_a_step_needs(stepped: int | None, count: int) -> None:
    s = spec(stabilizationSeconds={"down": 900})
    out = stabilise(s, seen(20, ((600, 20),)), rec(8), T0, release=0.5, stepped=stepped)
    assert out.replicas == count


def test_a_held_peak_comes_down_no_lower_than_a_stepped_level_needs() -> None:
    """A pool held at 20 by the down window, serving what 8 need, p99 well below the band; demand
    reached 10.2 (SM-active terms) by a step 3 minutes ago. A load that steps returns as a step,
    faster than a pod starts, so the release keeps the 17 replicas that level needs at the 0.6
    target while the step is inside the down window (without the step: down to 15, where a
    one-replica release is smaller than the direction budget lets go)."""
    s = spec(stabilizationSeconds={"down": 900})
    minute = T0 - T0 % 60
    peaks = ((minute - 240, 4.5), (minute - 180, 10.2), (minute - 120, 10.2), (minute - 60, 4.8))
    state = ScalerState(recommendations=((T0 - 100, 20),), last_direction=-1, demand_peaks=peaks)
    n, counts = 20, []
    for i in range(40):  # the step stays inside the 900 s down window
        now = T0 + 15 * i
        d = desired_replicas(s, state, pool(n, 0.6 * 8 / n, 19.0, now), now, slo_p99_ms=SLO)
        state, n = d.state, d.desired_replicas
        counts.append(n)
    assert min(counts) == 17 and counts == sorted(counts, reverse=True)


@pytest.mark.parametrize(
    ("last", "changes", "confirmed", "held"),
    [
        pytest.param(1, 1, False, False, id="one-change-either"),
        pytest.param(1, 2, False, True, id="two-changes-unconfirmed-held"),
        pytest.param(1, 2, True, False, id="two-changes-confirmed-passes"),
        pytest.param(1, 3, True, True, id="three-changes-held-either"),
        pytest.param(-1, 3, False, False, id="down-after-down-is-no-reversal"),
    ],
)
def test_the_budgets_last_change_is_for_a_confirmed_reversal(
    last: int, changes: int, confirmed: bool, held: bool
) -> None:
    s = spec()  # maxDirectionChangesPerHour 4
    state = ScalerState(last_direction=last, reversals=tuple(T0 - 100 * (i + 1) for i in range(changes)))
    seen_ = observe(s, state, pool(5, 0.3, 20.0, T0), T0)
    out = hold_reversal(s, state, seen_, Limited(3), T0, confirmed=confirmed)
    assert (out.replicas == 5) == held


@pytest.mark.parametrize(
    ("last", "changes", "fits"),
    [
        pytest.param(1, 0, True, id="after-a-scale-up-with-an-empty-budget"),
        pytest.param(1, 2, True, id="after-a-scale-up-a-release-is-a-confirmed-reversal"),
        pytest.param(1, 3, False, id="the-last-change-stays-for-the-scale-up-after-it"),
        pytest.param(-1, 3, True, id="already-scaling-down-changes-nothing"),
    ],
)
def test_a_release_never_spends_the_budget_a_later_scale_down_needs(last: int, changes: int, fits: bool) -> None:
    state = ScalerState(last_direction=last, reversals=tuple(T0 - 100 * (i + 1) for i in range(changes)))
    assert release_fits(spec(), state, T0) == fits


def test_a_held_peak_comes_down_step_by_step_while_the_p99_shows_room() -> None:
    """A pool held at 20 by the down window, serving what 8 need, p99 well below the band."""
    s = spec(stabilizationSeconds={"down": 900})
    state = ScalerState(recommendations=((T0 - 400, 20),), last_direction=-1)
    n, counts = 20, []
    for i in range(30):  # within the down window of the recorded 20
        now = T0 + 15 * i
        d = desired_replicas(s, state, pool(n, 0.6 * 8 / n, 19.0, now), now, slo_p99_ms=SLO)
        state, n = d.state, d.desired_replicas
        counts.append(n)
    assert counts[-1] < 20 and counts == sorted(counts, reverse=True)
    assert counts[-1] >= 8
    restored = ScalerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state and restored.slo_last_release is not None


def test_no_release_while_the_p99_is_missing_or_over_the_slo() -> None:
    s = spec(stabilizationSeconds={"down": 900})
    for p99 in (None, 45.0):
        state = ScalerState(recommendations=((T0 - 400, 20),), last_direction=-1, slo_quiet_since=T0 - 600)
        n = 20
        for i in range(30):  # within the down window of the recorded 20
            now = T0 + 15 * i
            d = desired_replicas(s, state, pool(n, 0.2, p99, now), now, slo_p99_ms=SLO)
            state, n = d.state, d.desired_replicas
        assert n == 20


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.0), st.floats(15.0, 60.0)), min_size=10, max_size=120))
def test_property_releases_keep_every_hour_within_the_budget(syncs: list[tuple[float, float]]) -> None:
    """With p99 readings that confirm room or not, no hour holds more than the budget's changes."""
    s = spec(stabilizationSeconds={"down": 300})
    state, n = ScalerState(), 4
    events: list[tuple[float, int]] = []
    for i, (load, p99) in enumerate(syncs):
        now = T0 + 60 * i
        d = desired_replicas(s, state, pool(n, min(0.89, load * 20 / n), p99, now), now, slo_p99_ms=SLO)
        if d.desired_replicas != n:
            events.append((now, 1 if d.desired_replicas > n else -1))
        state, n = d.state, d.desired_replicas
    changes = [b[0] for a, b in itertools.pairwise(events) if a[1] != b[1]]
    for t in changes:
        assert sum(1 for c in changes if t <= c < t + 3600) <= s.hysteresis.max_direction_changes_per_hour
