"""Stabilisation step: HPA's up/down windows over the recorded recommendations (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.steps.observe import Observed
from gem_operator.autoscaling.steps.recommend import Recommendation
from gem_operator.autoscaling.steps.stabilise import stabilise

NOW = 10_000.0


def seen(current: int, history: tuple[tuple[float, int], ...] = ()) -> Observed:
    return Observed(current, 0, 50, current, tuple((NOW - age, n) for age, n in history), ())


def rec(replicas: int | None, *, steady: int | None = None, at_once: bool = False) -> Recommendation:
    return Recommendation(replicas, "R", (), 0, None, steady=steady, at_once=at_once)


# (windows up/down, current, history as (age s, replicas), recommendation, want count, want recorded, want reason text)
CASES: list[Any] = [
    pytest.param((0, 300), 5, ((15, 5),), rec(5), 5, 5, None, id="steady-state"),
    pytest.param((0, 300), 6, (), rec(None), 6, None, None, id="hold-records-nothing"),
    pytest.param((0, 300), 6, ((100, 8),), rec(0, at_once=True), 0, None, None, id="idle-or-yield-skips-windows"),
    pytest.param((0, 300), 6, ((100, 8),), rec(5), 6, 5, "stabilised to 6", id="down-window-holds-the-current"),
    pytest.param((0, 300), 6, ((400, 8),), rec(5), 5, 5, None, id="down-window-expired"),
    pytest.param((0, 300), 10, ((100, 8),), rec(5), 8, 5, "stabilised to 8", id="falls-to-highest-of-window"),
    pytest.param((60, 300), 4, ((30, 4),), rec(8), 4, 8, "stabilised to 4", id="up-window-holds"),
    pytest.param((60, 300), 4, ((30, 6),), rec(8), 6, 8, "stabilised to 6", id="rises-to-lowest-of-up-window"),
    pytest.param((0, 300), 4, ((30, 2),), rec(8), 8, 8, None, id="no-up-window-rises-at-once"),
    pytest.param((0, 300), 6, ((10, 6),), rec(6, steady=3), 6, 3, None, id="records-what-arrivals-need"),
    # A new pool (no history) records its current count first, as HPA seeds its scale-down window.
    pytest.param((0, 300), 8, (), rec(4), 8, 4, "stabilised to 8", id="new-pool-keeps-its-count-for-a-window"),
    pytest.param((0, 300), 4, (), rec(8), 8, 8, None, id="new-pool-scales-up-at-once"),
    pytest.param((0, 0), 8, (), rec(4), 4, 4, None, id="new-pool-without-down-window"),
]


@pytest.mark.parametrize(("windows", "current", "history", "recommendation", "want", "recorded", "text"), CASES)
def test_stabilise(
    windows: tuple[int, int],
    current: int,
    history: tuple[tuple[float, int], ...],
    recommendation: Recommendation,
    want: int,
    recorded: int | None,
    text: str | None,
) -> None:
    spec = AutoscalingSpec.model_validate({"stabilizationSeconds": {"up": windows[0], "down": windows[1]}})
    before = seen(current, history)
    out = stabilise(spec, before, recommendation, NOW)
    assert out.replicas == want
    if recorded is None:
        assert out.recommendations == before.recommendations
    else:
        seed = () if history else ((NOW, current),)
        assert out.recommendations == (*before.recommendations, *seed, (NOW, recorded))
    assert [r.text for r in out.reasons] == ([text] if text else [])
    assert all(r.step == "stabilisation" for r in out.reasons)


RELEASED = "stabilised to {} (the p99 below the band {} the down window's peak of 20{})"
FLOOR = "; a level demand stepped to or fell from needs {}"


@pytest.mark.parametrize(
    ("stepped", "want", "text"),
    [
        pytest.param(None, 18, RELEASED.format(18, "released", ""), id="released"),
        pytest.param(19, 19, RELEASED.format(19, "released", FLOOR.format(19)), id="released-to-a-level"),
        pytest.param(20, 20, RELEASED.format(20, "would release", " to 18" + FLOOR.format(20)), id="held-for-a-level"),
        pytest.param(12, 18, RELEASED.format(18, "released", ""), id="a-level-below-the-release"),
    ],
)
def test_a_release_says_what_it_gave_back_and_what_held_it(stepped: int | None, want: int, text: str) -> None:
    """A pool of 20 held by the down window (a recommendation of 20 at 400 s, outside the ramp
    lead's window) for a recommendation of 8; the p99 releases to 0.9 of the peak (18), and a level
    a step reached or an interruption left keeps `stepped`. The message names both, so `kubectl
    describe` says why a quiet pool keeps its replicas."""
    spec = AutoscalingSpec.model_validate({"stabilizationSeconds": {"up": 0, "down": 900}})
    out = stabilise(spec, seen(20, ((400, 20),)), rec(8), NOW, release=0.9, stepped=stepped)
    assert out.replicas == want and out.released == (want < 20)
    assert [r.text for r in out.reasons] == [text]


def test_a_release_with_nothing_to_give_back_says_nothing_of_it() -> None:
    """The ramp lead's window (here 1,200 s) holds the down window's peak: the p99 releases nothing,
    so a level that would have held the pool is not named either."""
    spec = AutoscalingSpec.model_validate(
        {"stabilizationSeconds": {"up": 0, "down": 900}, "rampLead": {"windowSeconds": 1200}}
    )
    out = stabilise(spec, seen(20, ((400, 20), (1000, 24))), rec(8), NOW, release=0.9, stepped=26)
    assert out.replicas == 20 and not out.released
    assert [r.text for r in out.reasons] == ["stabilised to 20"]
