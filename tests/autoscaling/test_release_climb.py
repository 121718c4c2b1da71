"""A release holds once demand has climbed back off its low (`levels.climb_off_low`,
`steps/stabilise.climbed_back`): the p99 below the band says the pool has room now, but a load that
has turned up will want back what a release gives, a pod start later."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.levels import climb_off_low
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState

SYNC = 15.0
T0 = 100_000.0
SLO = 40.0


def minutes(*means: float) -> list[tuple[float, float]]:
    """Four 15 s readings per minute at these levels, oldest first, the last at T0."""
    values = [m for m in means for _ in range(4)]
    return [(T0 - SYNC * (len(values) - 1 - i), v) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    ("samples", "climb"),
    [
        pytest.param([], None, id="no-readings"),
        pytest.param(minutes(5.0), None, id="one-minute-has-no-earlier-low"),
        pytest.param(minutes(5.0, 5.0, 5.0), 1.0, id="flat"),
        pytest.param(minutes(6.0, 5.0, 4.0, 4.8), 1.2, id="a-fall-that-turned-up"),
        pytest.param(minutes(6.0, 5.0, 4.8), 0.96, id="still-falling-the-newest-minute-is-the-low"),
        pytest.param(minutes(4.0, 0.0, 4.0), None, id="a-low-of-nothing"),
        # The oldest minute holds two readings (the window cut into it): left out, not the low.
        pytest.param(minutes(4.0, 4.0, 4.8)[2:], 1.2, id="partial-oldest-minute-kept-when-whole-minutes-remain"),
        pytest.param([(T0 - 120.0, 3.0), *minutes(5.0, 5.5)], 1.1, id="partial-oldest-minute-left-out"),
    ],
)
def test_climb_off_low(samples: list[tuple[float, float]], climb: float | None) -> None:
    got = climb_off_low(samples)
    assert got == (None if climb is None else pytest.approx(climb))


def test_the_means_of_minutes_not_one_readings_swing() -> None:
    """One reading 40 % up in the newest minute is a tenth of its mean, not a climb past the band."""
    samples = minutes(5.0, 5.0, 5.0)
    samples[-1] = (T0, 7.0)
    assert climb_off_low(samples) == pytest.approx(1.1)


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetSmActive": 0.6}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def pool(n: int, sm: float, p99: float, now: float) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    samples = {f"p{i}": PodSample(sm, now) for i in range(n)}
    return Observation(n, pods, MetricReading(samples), latency=LatencyReading(p99, now))


def released_from_20(demand: list[tuple[float, float]], syncs: int = 4) -> tuple[list[int], list[str]]:
    """The counts of a minute of a pool of 20 held by the down window (900 s) that serves 4.8 in
    SM-active terms (8 replicas' worth at 0.6), its p99 (19 ms) below the band for two minutes so
    a release is due, after `demand` (the ramp lead's window of readings before T0); and the
    stabilisation clauses of its decisions."""
    s = spec(stabilizationSeconds={"down": 900})
    state = ScalerState(
        recommendations=((T0 - 400, 20),),  # older than the ramp lead's window (300 s), inside the down window
        last_direction=-1,
        demand=tuple(demand),
        slo_quiet_since=T0 - 600,
        slo_outside=(T0 - 120, -0.3),
    )
    n, counts, said = 20, [], []
    for i in range(1, syncs + 1):
        now = T0 + SYNC * i
        d = desired_replicas(s, state, pool(n, 4.8 / n, 19.0, now), now, slo_p99_ms=SLO)
        state, n = d.state, d.desired_replicas
        counts.append(n)
        said += [r.text for r in d.reasons if r.step == "stabilisation"]
    return counts, said


def test_a_release_holds_once_demand_has_climbed_off_its_low() -> None:
    """Demand fell 6.2 -> 4.0 over five minutes and its last minute read 4.8, 20 % off the low (a
    line through the window still falls, so the ramp lead does not hold the release): the p99
    says the pool has room, but the fall is over, and what a release gives back the climb wants a
    pod start later. The same fall ending at 4.6 (4.8 is 4 % off it, inside `tolerance.up`)
    releases as before."""
    fall = [6.2, 5.6, 5.0, 4.5]
    turned, said = released_from_20(minutes(*fall, 4.0, 4.8)[1:])
    assert turned == [20] * len(turned)
    assert any("but demand has climbed 20% off its lowest minute" in text for text in said), said
    settled, _ = released_from_20(minutes(*fall, 4.6, 4.8)[1:])
    assert min(settled) < 20
