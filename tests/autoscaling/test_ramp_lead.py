"""The ramp lead (`trend.py`): scale for the demand one measured lead ahead, only ever earlier."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.levels import (
    EXACT_FIT,
    MAX_PARTIAL_READINGS,
    MIN_LEVEL_SYNCS,
    TWO_LEVEL_FIT,
    level_shift,
    second_level,
    stepped_level,
)
from gem_operator.autoscaling.observation import MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.trend import (
    MAX_REALISED,
    MIN_SAMPLES,
    PEAK_HISTORY_SECONDS,
    SKILL_WEIGHT,
    SLIVER_REPLICAS,
    earlier_peak,
    fitted_rise,
    judged_skill,
    learn_lead,
    ramp_step,
    remember_peak,
    without_ramp_lead,
)

NOW = 50_000.0
SYNC = 15.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetSmActive": 0.5}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def obs(values: list[float], *, loading: int = 0, now: float) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(len(values))]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(loading)]
    samples = {f"p{i}": PodSample(v, now - 5) for i, v in enumerate(values)}
    return Observation(current_replicas=len(pods), pods=pods, metrics=MetricReading(samples=samples))


def rising(syncs: int) -> tuple[list[tuple[float, float]], float]:
    """`syncs` samples of demand rising 0.24 SM-active per minute, 15 s apart and ending now, as
    (the history before this sync, this sync's reading)."""
    history = [(NOW - (syncs - 1 - i) * SYNC, 2.0 + 0.004 * i * SYNC) for i in range(syncs - 1)]
    return history, 2.0 + 0.004 * (syncs - 1) * SYNC


# --------------------------------------------------------------------------- the fit


@pytest.mark.parametrize(
    ("samples", "at", "expected"),
    [
        # a clean line: value 1 + 0.01 t, read 120 s after the last sample
        ([(t * SYNC, 1 + 0.01 * t * SYNC) for t in range(10)], 9 * SYNC + 120, (1 + 0.01 * (135 + 120), 0.01)),
        # flat
        ([(t * SYNC, 2.0) for t in range(10)], 500.0, (2.0, 0.0)),
        # falling
        ([(t * SYNC, 5 - 0.02 * t * SYNC) for t in range(8)], 105.0, (5 - 0.02 * 105, -0.02)),
    ],
)
def test_fitted_rise_is_the_least_squares_line(
    samples: list[tuple[float, float]], at: float, expected: tuple[float, float]
) -> None:
    fit = fitted_rise(samples, at)
    assert fit is not None
    assert fit[0] == pytest.approx(expected[0])
    assert fit[1] == pytest.approx(expected[1], abs=1e-12)


@pytest.mark.parametrize(
    ("last", "usage", "shift"),
    [(4.0, 4.3, False), (4.0, 6.0, False), (4.0, 8.5, True), (8.5, 4.0, True), (0.0, 0.0, False)],
)
def test_level_shift(last: float, usage: float, shift: bool) -> None:
    assert level_shift([(0.0, 1.0), (15.0, last)], usage) is shift


@pytest.mark.parametrize("at", [3, 10, 17])
def test_a_step_is_not_a_ramp(at: int) -> None:
    """A jump the pool absorbs (a flash crowd without queueing) starts a new level: projected
    onward, a line through it would order for a load that never comes."""
    s = spec()
    history: tuple[tuple[float, float], ...] = ()
    for t in range(25):
        now = t * SYNC
        r = ramp_step(
            s, history, 2.0 if t < at else 6.0, 0.5, now, lead_seconds=None, pending=None, serving=12, current=12
        )
        assert r.recommendation is None
        history = r.usage
    assert len(history) == min(25 - at, 20)  # restarted at the step (20 syncs fill the 300 s window)


HALF_WAVE = [2.0 - 0.5 * float(np.cos(np.pi * i / 19)) for i in range(20)]
# A 1.3x step read over two syncs on a noisy pool (`bench/autoscaling_seeds.py --family step`,
# seed 6 / duplicate, minutes 9-14): 7.95 and 8.71 are each part of it, and the levels' noise
# leaves them 13 % of a line's squared residual.
NOISY_STEP = [7.07, 7.36, 6.89, 7.18, 7.45, 6.85, 7.18, 7.58, 7.12, 6.84, 7.68, 7.14, 7.95, 8.71]
NOISY_STEP += [10.28, 9.7, 9.97, 9.94, 9.73, 9.77]
# A 1.4x step read almost at once on a louder pool (`--family step`, seed 103 / duplicate): the old
# level moves +-6 %, so the two levels leave 16-21 % of a line's squared residual, over 15 %.
LOUD_STEP = [7.71, 7.34, 7.7, 6.54, 6.54, 6.95, 7.03, 7.1, 7.31, 8.02, 7.44, 6.77, 6.75, 7.01, 7.69, 7.0, 7.41]
LOUD_STEP += [10.11, 10.31, 10.2]


@pytest.mark.parametrize(
    ("readings", "split"),
    [
        pytest.param([2.0, 2.02] * 6, None, id="flat-with-noise"),
        pytest.param([2.0 + 0.06 * i for i in range(12)], None, id="a-ramp"),
        pytest.param([2.0 + 0.06 * i + (0.03 if i % 2 else -0.03) for i in range(12)], None, id="a-noisy-ramp"),
        pytest.param(HALF_WAVE, None, id="a-wave-rising-half"),
        pytest.param([2.0] * 8 + [3.0] * 3, (8, 2.0, 3.0), id="a-step-on-a-sync"),
        pytest.param([2.0] * 8 + [2.6, 3.0, 3.0], (9, 2.0, 3.0), id="a-step-between-syncs-drops-its-partial-reading"),
        pytest.param([2.0] * 8 + [2.6, 3.0], None, id="one-full-reading-is-no-level-yet"),
        pytest.param([2.0] * 8 + [2.3, 2.7, 3.0, 3.0], (10, 2.0, 3.0), id="a-step-read-over-two-syncs-drops-both"),
        pytest.param([3.0] * 8 + [2.7, 2.3, 2.0, 2.0], (10, 3.0, 2.0), id="a-step-down-read-over-two-syncs"),
        pytest.param([2.0] * 8 + [2.3, 2.7, 2.5, 3.0, 3.0], None, id="readings-out-of-order-are-not-partial"),
        pytest.param(NOISY_STEP, (14, 7.195, 9.898333), id="a-step-in-noise-read-over-two-syncs"),
        pytest.param(LOUD_STEP, (18, 7.194706, 10.255), id="a-step-in-louder-noise"),
        pytest.param([3.0] * 8 + [2.0] * 3, (8, 3.0, 2.0), id="a-step-down"),
        pytest.param([2.0] * 10 + [3.0, 2.0], None, id="a-spike-that-returns"),
        pytest.param([2.0] * 10 + [3.0], None, id="a-spike-now"),
        pytest.param([2.0] * (MIN_LEVEL_SYNCS - 1) + [3.0] * 4, None, id="too-short-an-earlier-level"),
        pytest.param([2.0] * 4 + [2.3] * 4 + [2.6] * 4, None, id="a-staircase-of-minutes-is-a-ramp"),
    ],
)
def test_second_level(readings: list[float], split: tuple[int, float, float] | None) -> None:
    """Two levels fit the window far better than a line only where the demand stepped: where the
    second level's first full reading is, and the two levels."""
    found = second_level([(i * SYNC, u) for i, u in enumerate(readings)])
    assert found == (None if split is None else pytest.approx(split))


def numpy_second_level(window: list[tuple[float, float]]) -> int | None:
    """levels.second_level, computed by numpy: where two levels leave under TWO_LEVEL_FIT of the
    line's squared residual, the second's first reading past the ones between them (at most
    MAX_PARTIAL_READINGS, in order), if any."""
    n = len(window)
    if n < MIN_LEVEL_SYNCS + 2:
        return None
    t, u = np.array([t for t, _ in window]), np.array([v for _, v in window])
    line = float(np.sum((u - np.polyval(np.polyfit(t, u, 1), t)) ** 2))
    if line <= EXACT_FIT * float(np.sum(u**2)):
        return None
    fits = []
    for k in range(MIN_LEVEL_SYNCS, n - 1):
        before, start = u[:k], k
        for p in range(min(MAX_PARTIAL_READINGS, n - k - 1), 0, -1):
            head, after = u[k : k + p], u[k + p :]
            moves = np.diff(head)
            up = before.max() < head[0] and (moves > 0).all() and head[-1] < after.min()
            down = before.min() > head[0] and (moves < 0).all() and head[-1] > after.max()
            if up or down:
                start = k + p
                break
        if n - start >= 2:
            fits.append(
                (float(np.sum((before - before.mean()) ** 2) + np.sum((u[start:] - u[start:].mean()) ** 2)), start)
            )
    if not fits:
        return None
    best = min(fits, key=lambda f: f[0])  # the first of equal fits, as levels.py keeps it
    return best[1] if best[0] < TWO_LEVEL_FIT * line else None


def test_a_step_read_over_two_syncs_is_not_a_ramp() -> None:
    """A batch job's 1.6x step that lands between two syncs (5.9 -> 9.3 -> 10.2 in SM-active terms,
    each move under LEVEL_SHIFT): once the new level has two readings the fit restarts at its first
    full one, and the lead orders no more than the 21 that level needs at 0.5 (the SM rule's own
    count), and nothing once it has restarted: the new level is flat. A line through the step
    ordered 21-28 for as long as the window held it; one through the partial reading and the new
    level, 22."""
    s = spec()
    history: tuple[tuple[float, float], ...] = ()
    orders = []
    for t in range(30):
        now = t * SYNC
        usage = 5.9 if t < 10 else 9.3 if t == 10 else 10.2
        r = ramp_step(s, history, usage, 0.5, now, lead_seconds=None, pending=None, serving=12, current=12)
        orders.append(r.recommendation or 0)
        history = r.usage
    assert orders[12:] == [0] * 18
    assert max(orders) <= 21
    assert 9.3 not in [u for _, u in history] and len(history) == 19  # restarted at 10.2, then the window filled


@pytest.mark.parametrize(
    ("readings", "level", "restart"),
    [
        pytest.param(NOISY_STEP + [9.8, 9.9, 9.85, 9.95] * 3, 9.5, 16, id="read-over-two-syncs"),
        pytest.param(LOUD_STEP + [10.2, 10.3, 10.25, 10.2] * 3, 10.0, 19, id="in-louder-noise"),
    ],
)
def test_a_noisy_step_is_not_a_ramp(readings: list[float], level: float, restart: int) -> None:
    """The steps of `NOISY_STEP` (7.2 -> 9.9 in SM-active terms, read 7.95 and 8.71 on the way) and
    `LOUD_STEP` (7.2 -> 10.2, one partial reading), on a pool of 13 at a 0.6 target: once the new
    level has two full readings the fit restarts there, so the lead orders nothing for a level that
    has stopped moving, and the window keeps no reading of the step. The line through the step rose
    for as long as the window held it: in the replay it ordered 21-22 replicas where the level needs
    17 (`NOISY_STEP`), and 23 where HPA on RPS held 19 (`LOUD_STEP`)."""
    s = spec()
    history: tuple[tuple[float, float], ...] = ()
    orders = []
    for t, usage in enumerate(readings):
        r = ramp_step(s, history, usage, 0.6, t * SYNC, lead_seconds=None, pending=None, serving=13, current=13)
        orders.append(r.recommendation or 0)
        history = r.usage
    assert orders[restart:] == [0] * (len(orders) - restart)
    assert min(u for _, u in history) > level


@pytest.mark.parametrize(
    ("peaks", "since", "level"),
    [
        pytest.param([(0, 6.0), (60, 6.0), (120, 6.0)], -1, None, id="flat"),
        pytest.param(
            [(0, 6.0), (60, 6.0), (120, 9.3), (180, 10.2), (240, 10.2)], -1, 10.2, id="a-step-and-its-next-minute"
        ),
        pytest.param([(0, 6.0), (60, 7.2), (120, 8.6), (180, 10.3)], -1, None, id="a-fifth-a-minute-is-a-swell"),
        pytest.param([(0, 6.0), (60, 9.3), (120, 10.2)], 60, None, id="before-the-window"),
        pytest.param([(0, 6.0), (120, 9.3)], -1, None, id="a-missing-minute-between"),
        pytest.param([(0, 6.0), (60, 9.3)], -1, 9.3, id="a-step-in-the-last-minute"),
        pytest.param([(0, 4.0), (60, 6.0), (120, 4.0), (180, 8.0)], -1, 8.0, id="the-highest-of-two-steps"),
    ],
)
def test_stepped_level(peaks: list[tuple[float, float]], since: float, level: float | None) -> None:
    assert stepped_level(peaks, since) == level


def test_overload_restarts_the_fit() -> None:
    s = spec()
    history = tuple((NOW - (9 - i) * SYNC, 2.0 + 0.1 * i) for i in range(9))
    r = ramp_step(s, history, 3.0, 0.5, NOW, lead_seconds=None, pending=None, serving=5, current=5, overloaded=True)
    assert r.recommendation is None and r.usage == ()


def test_too_few_samples_or_one_instant_fit_nothing() -> None:
    assert fitted_rise([(t * SYNC, float(t)) for t in range(MIN_SAMPLES - 1)], 0.0) is None
    assert fitted_rise([(5.0, float(u)) for u in range(MIN_SAMPLES + 2)], 0.0) is None


# --------------------------------------------------------------------------- the lead, measured


@pytest.mark.parametrize(
    ("lead", "pending", "serving", "current", "now", "expected"),
    [
        (None, None, 3, 3, 100.0, (None, None)),  # nothing to time
        (None, (0.0, 5), 4, 5, 90.0, (None, (0.0, 5))),  # still starting
        (None, (0.0, 5), 5, 5, 90.0, (90.0, None)),  # first measurement is taken as is
        (120.0, (0.0, 5), 6, 6, 60.0, (90.0, None)),  # then each new one weighs half
        (120.0, (0.0, 5), 3, 4, 60.0, (120.0, None)),  # scaled back below it before it served: dropped
        (120.0, (0.0, 5), 3, 5, 3601.0, (120.0, None)),  # a rollout that never came up: dropped
        (None, (0.0, 5), 5, 5, 99_999.0, (1800.0, None)),  # clamped
    ],
)
def test_learn_lead(
    lead: float | None,
    pending: tuple[float, int] | None,
    serving: int,
    current: int,
    now: float,
    expected: tuple[float | None, tuple[float, int] | None],
) -> None:
    assert learn_lead(lead, pending, serving, current, now) == expected


def test_ramp_step_projects_one_lead_ahead_at_the_target() -> None:
    s = spec()
    history, usage = rising(10)
    step = ramp_step(s, history, usage, 0.45, NOW, lead_seconds=None, pending=None, serving=5, current=5)
    projected = usage + 0.004 * 120  # rampLead.leadSeconds before one is measured
    assert step.recommendation == 7 == -(-projected // 0.45)
    assert "rising 0.24/min" in step.message
    assert "rampLead.leadSeconds" in step.message
    measured = ramp_step(s, history, usage, 0.45, NOW, lead_seconds=130.0, pending=None, serving=5, current=5)
    assert measured.recommendation == 7  # 2.54 + 0.004 * 130 = 3.06 → 6.8 at 0.45
    assert "(measured lead)" in measured.message


@pytest.mark.parametrize(
    ("target", "tolerance_up", "want", "sliver"),
    [
        # 3.02 one lead ahead at 0.5 is 6.04 replicas: on a pool where one replica is over 10 %,
        # a rise past 6 by 0.04 of a replica orders none
        (0.5, 0.1, 6, True),
        # the same line where the band is wider than a replica (6.04 x 0.2 > 1): the sliver is ordered
        (0.5, 0.2, 7, False),
        # 3.02 at 0.49 is 6.16: more than a sliver past 6
        (0.49, 0.1, 7, False),
        # 3.02 at 0.1 is 30.2: a large pool orders every sliver
        (0.1, 0.1, 31, False),
    ],
)
def test_a_sliver_past_a_whole_count_orders_no_replica_on_a_small_pool(
    target: float, tolerance_up: float, want: int, sliver: bool
) -> None:
    s = spec(tolerance={"up": tolerance_up})
    history, usage = rising(10)  # 2.54 now, 3.02 one lead (120 s) ahead
    step = ramp_step(s, history, usage, target, NOW, lead_seconds=None, pending=None, serving=5, current=5)
    assert step.recommendation == want
    assert ("a sliver of under" in step.message) is sliver
    # A scale-down stops at the line with its sliver: keeping a replica costs no start.
    assert step.keep == (31 if target == 0.1 else 7)
    if sliver:
        assert step.message.endswith("of the pool), needs 6 replicas")
        assert 0 < (usage + 0.004 * 120) / target - want < SLIVER_REPLICAS


@pytest.mark.parametrize(
    ("syncs", "lead", "ahead"),
    [
        # 10 samples reach back 135 s: a measured lead of 600 s projects 135 s
        (10, 600.0, 135.0),
        # a full window (300 s: its samples reach back 285 s) projects 285 s
        (20, 600.0, 285.0),
        # a lead within the samples' reach is used whole
        (20, 130.0, 130.0),
    ],
)
def test_the_line_is_projected_no_farther_than_its_samples_reach_back(syncs: int, lead: float, ahead: float) -> None:
    s = spec()
    history, usage = rising(syncs)
    step = ramp_step(s, history, usage, 0.5, NOW, lead_seconds=lead, pending=None, serving=5, current=5)
    assert step.recommendation == -(-(usage + 0.004 * ahead) // 0.5)
    ((due, made, forecast),) = step.forecasts  # the forecast is judged when its projection comes due
    assert due == NOW + ahead and made == pytest.approx(usage) and forecast == pytest.approx(usage + 0.004 * ahead)
    assert f"in {ahead:.0f}s" in step.message
    assert ("(the fit's span, short of the 600s measured lead)" in step.message) is (ahead < lead)


def test_ramp_step_keeps_only_its_window_and_adds_nothing_when_off() -> None:
    s = spec(rampLead={"enabled": False, "windowSeconds": 60})
    history = [(NOW - 200.0, 1.0), (NOW - 59.0, 1.0), (NOW - 15.0, 1.2)]
    step = ramp_step(s, history, 1.5, 0.5, NOW, lead_seconds=None, pending=(NOW - 30, 4), serving=4, current=4)
    assert step.recommendation is None
    assert step.usage == ((NOW - 59.0, 1.0), (NOW - 15.0, 1.2), (NOW, 1.5))
    assert step.lead_seconds == 30.0  # the lead is still measured while off: turning it on finds it


# --------------------------------------------------------------------------- the line held to its word


@pytest.mark.parametrize(
    ("forecasts", "skill", "demand", "waiting", "expected"),
    [
        # came true exactly: the first judged forecast is the skill
        ([(NOW, 2.0, 3.0)], None, 3.0, [], 1.0),
        # demand fell below where the line stood: nothing of the rise came true
        ([(NOW, 2.0, 3.0)], None, 1.5, [], 0.0),
        # half of the rise
        ([(NOW, 2.0, 3.0)], 1.0, 2.5, [], (1 - SKILL_WEIGHT) + SKILL_WEIGHT * 0.5),
        # far beyond the forecast: counted at MAX_REALISED, not more
        ([(NOW, 2.0, 3.0)], 1.0, 9.0, [], (1 - SKILL_WEIGHT) + SKILL_WEIGHT * MAX_REALISED),
        # not yet due: kept, the skill unchanged
        ([(NOW + 60, 2.0, 3.0)], 0.4, 9.0, [(NOW + 60, 2.0, 3.0)], 0.4),
        # a forecast without a rise judges nothing
        ([(NOW, 2.0, 2.0)], 0.7, 1.0, [], 0.7),
        # two due at once: each weighs SKILL_WEIGHT, in order
        ([(NOW - 15, 2.0, 3.0), (NOW, 2.0, 4.0)], 1.0, 2.0, [], (1 - SKILL_WEIGHT) ** 2),
    ],
)
def test_judged_skill(
    forecasts: list[tuple[float, float, float]],
    skill: float | None,
    demand: float,
    waiting: list[tuple[float, float, float]],
    expected: float,
) -> None:
    left, judged = judged_skill(forecasts, skill, demand, NOW)
    assert left == tuple(waiting)
    assert judged == pytest.approx(expected)


@pytest.mark.parametrize(
    ("skill", "elapsed", "forecasts", "expected"),
    [
        (0.5, 300.0, [], 0.75),  # a half-life without a judged forecast halves the shortfall
        (0.2, 600.0, [(NOW + 60, 2.0, 3.0)], 0.8),  # forecasts still awaiting judge nothing yet
        (0.5, 300.0, [(NOW, 2.0, 3.0)], (1 - SKILL_WEIGHT) * 0.5),  # a judged sync does not recover
        (1.4, 300.0, [], 1.4),  # above 1: nothing to recover
        (None, 300.0, [], None),  # nothing judged yet
    ],
)
def test_the_skill_recovers_between_judged_forecasts(
    skill: float | None, elapsed: float, forecasts: list[tuple[float, float, float]], expected: float | None
) -> None:
    _, out = judged_skill(forecasts, skill, 1.5, NOW, elapsed=elapsed, half_life=300.0)
    assert out == (None if expected is None else pytest.approx(expected))


def test_a_line_with_little_skill_orders_that_share_of_its_rise() -> None:
    s = spec()
    history, usage = rising(10)  # 2.54 now; the line projects 3.02 one lead (120 s) ahead
    whole = ramp_step(s, history, usage, 0.4, NOW, lead_seconds=None, pending=None, serving=5, current=5)
    half = ramp_step(s, history, usage, 0.4, NOW, lead_seconds=None, pending=None, serving=5, current=5, skill=0.5)
    none = ramp_step(s, history, usage, 0.4, NOW, lead_seconds=None, pending=None, serving=5, current=5, skill=0.0)
    assert (whole.recommendation, half.recommendation, none.recommendation) == (8, 7, 7)  # 3.02, 2.79, 2.54 at 0.4
    # No forecast came due at this sync: a sync (15 s) of the window's half-life (300 s) recovers.
    assert half.skill == pytest.approx(1 - 0.5 * 0.5 ** (SYNC / 300))
    assert "52% of that rise" in half.message and "% of that rise" not in whole.message
    # Each records its forecast at the line's full rise, whatever the skill: the skill can recover.
    assert whole.forecasts == half.forecasts == none.forecasts
    ((due, made, forecast),) = half.forecasts
    assert due == NOW + 120 and made == pytest.approx(2.54) and forecast == pytest.approx(3.02)


@pytest.mark.parametrize(
    ("name", "demand", "skill_at_least", "skill_below"),
    [
        # a ramp of +0.08 SM-active per minute for 20 minutes: its forecasts come true
        ("ramp", lambda i: 4.0 + 0.02 * i, 0.8, None),
        # a wave of 6 minutes, +-30 %: each rising half is taken back by the falling one
        ("6-minute wave", lambda i: 4.0 * (1 + 0.3 * np.sin(2 * np.pi * i * SYNC / 360)), None, 0.5),
    ],
)
def test_the_skill_tells_a_ramp_from_a_wave(
    name: str, demand: Any, skill_at_least: float | None, skill_below: float | None
) -> None:
    s = spec()
    history: tuple[tuple[float, float], ...] = ()
    forecasts: tuple[tuple[float, float, float], ...] = ()
    skill: float | None = None
    for i in range(80):  # 20 minutes of syncs
        r = ramp_step(
            s,
            history,
            float(demand(i)),
            0.5,
            NOW + i * SYNC,
            lead_seconds=None,
            pending=None,
            serving=12,
            current=12,
            forecasts=forecasts,
            skill=skill,
        )
        history, forecasts, skill = r.usage, r.forecasts, r.skill
    assert skill is not None, name
    if skill_at_least is not None:
        assert skill >= skill_at_least, name
    if skill_below is not None:
        assert skill < skill_below, name


def test_a_restart_of_the_fit_drops_the_forecasts_unjudged() -> None:
    s = spec()
    history = tuple((NOW - (9 - i) * SYNC, 2.0 + 0.1 * i) for i in range(9))
    pending = ((NOW, 2.5, 3.5),)
    over = ramp_step(
        s,
        history,
        3.0,
        0.5,
        NOW,
        lead_seconds=None,
        pending=None,
        serving=5,
        current=5,
        overloaded=True,
        forecasts=pending,
        skill=0.9,
    )
    assert over.forecasts == () and over.skill == 0.9
    jump = ramp_step(
        s, history, 9.0, 0.5, NOW, lead_seconds=None, pending=None, serving=5, current=5, forecasts=pending, skill=0.9
    )
    assert jump.forecasts == () and jump.skill == pytest.approx(1 - 0.1 * 0.5 ** (SYNC / 300))  # judged none


def test_the_skill_is_kept_in_state() -> None:
    s = spec()
    state = ScalerState(
        demand=tuple((NOW - (9 - i) * SYNC, 1.0 + 0.02 * i * SYNC) for i in range(9)),
        ramp_forecasts=((NOW, 1.0, 1.5),),  # demand now 2.5: three times the rise, counted as MAX_REALISED
        ramp_skill=0.5,
    )
    d = desired_replicas(s, state, obs([0.5, 0.5, 0.5, 0.5, 0.5], now=NOW), NOW)
    assert d.state.ramp_skill == pytest.approx((1 - SKILL_WEIGHT) * 0.5 + SKILL_WEIGHT * MAX_REALISED)
    assert d.state.ramp_forecasts and all(due > NOW for due, _, _ in d.state.ramp_forecasts)
    back = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))
    assert back == d.state


# --------------------------------------------------------------------------- the hour's earlier peak


@pytest.mark.parametrize(
    ("peaks", "usage", "now", "expected"),
    [
        # the first reading of a minute opens it
        ((), 2.0, 120.0, ((120.0, 2.0),)),
        # a later reading of the same minute keeps the higher one
        (((120.0, 2.0),), 1.5, 150.0, ((120.0, 2.0),)),
        (((120.0, 2.0),), 2.5, 175.0, ((120.0, 2.5),)),
        # the next minute opens its own
        (((120.0, 2.0),), 1.0, 185.0, ((120.0, 2.0), (180.0, 1.0))),
        # minutes older than an hour are forgotten
        (((0.0, 9.0), (60.0, 3.0)), 1.0, PEAK_HISTORY_SECONDS + 30.0, ((60.0, 3.0), (3600.0, 1.0))),
        # no reading: only the forgetting
        (((0.0, 9.0), (60.0, 3.0)), None, PEAK_HISTORY_SECONDS + 30.0, ((60.0, 3.0),)),
    ],
)
def test_remember_peak(
    peaks: tuple[tuple[float, float], ...], usage: float | None, now: float, expected: tuple[tuple[float, float], ...]
) -> None:
    assert remember_peak(peaks, usage, now) == expected


def test_earlier_peak_counts_only_minutes_that_ended_before_the_fit() -> None:
    peaks = ((0.0, 3.0), (60.0, 5.0), (120.0, 9.0))
    assert earlier_peak(peaks, 120.0) == 5.0  # the minute from 120 s has not ended by then
    assert earlier_peak(peaks, 180.0) == 9.0
    assert earlier_peak(peaks, 59.0) is None


def wave_return(peak: float) -> tuple[list[tuple[float, float]], float, tuple[tuple[float, float], ...]]:
    """A rise (`rising(20)`, reaching 3.14 now) with `peak` remembered from ten minutes ago."""
    history, usage = rising(20)
    return history, usage, ((NOW - 600.0 - NOW % 60, peak),)


@pytest.mark.parametrize(
    ("peak", "want", "capped"),
    [
        # demand (3.14) below an earlier peak of 3.3: lead to 3.3, not to the line's 3.62
        (3.3, 7, True),
        # an earlier peak above the line: the line's own order (3.62 at 0.5 → 8)
        (4.0, 8, False),
        # demand far above the earlier peak: a new high, the line leads in full
        (2.5, 8, False),
    ],
)
def test_a_return_to_an_earlier_level_leads_no_farther_than_its_peak(peak: float, want: int, capped: bool) -> None:
    history, usage, peaks = wave_return(peak)
    step = ramp_step(
        spec(), history, usage, 0.5, NOW, lead_seconds=None, pending=None, serving=5, current=5, peaks=peaks
    )
    assert step.recommendation == want
    assert ("no farther than the hour's earlier peak" in step.message) is capped
    assert "than demand has passed it" not in step.message


@pytest.mark.parametrize(
    ("peak", "want"),
    [
        # 3.14 is 0.14 past a peak of 3.0: lead to 3.28 (7 at 0.5), not to the line's 3.62 (8)
        pytest.param(3.0, 7, id="just-past-leads-as-far-again"),
        # 0.04 past 3.1: 3.18, still 7
        pytest.param(3.1, 7, id="barely-past"),
        # 0.24 past 2.9: 3.38, 7
        pytest.param(2.9, 7, id="further-past"),
    ],
)
def test_just_past_an_earlier_peak_the_line_leads_no_farther_than_demand_has_passed_it(peak: float, want: int) -> None:
    history, usage, peaks = wave_return(peak)
    step = ramp_step(
        spec(), history, usage, 0.5, NOW, lead_seconds=None, pending=None, serving=5, current=5, peaks=peaks
    )
    assert step.recommendation == want
    assert f"{2 * usage - peak:.2f}: no farther past the hour's earlier peak {peak:.2f}" in step.message
    # The line's own forecast is recorded whatever the cap, so its skill is judged on the line.
    ((_, _, forecast),) = step.forecasts
    assert forecast == pytest.approx(usage + 0.004 * 120)
    # The line's own forecast is recorded whatever the cap, so its skill is judged on the line.
    ((_, _, forecast),) = step.forecasts
    assert forecast == pytest.approx(usage + 0.004 * 120)
    assert step.peaks[-1] == (NOW - NOW % 60, usage)


def test_the_earlier_peak_is_what_arrived_not_what_the_pods_drained() -> None:
    """A minute whose pods drained a backlog read 4.0 in SM-active terms where 3.3 arrived: the lead
    stops at the 3.3 that arrived (7 replicas at 0.5), as it stops at any earlier level; read in the
    minute peaks of what the pods served, the 4.0 let the line lead to its own 3.62 (8)."""
    history, usage, served = wave_return(4.0)
    arrived = ((served[0][0], 3.3),)

    pool: dict[str, Any] = {"lead_seconds": None, "pending": None, "serving": 5, "current": 5, "peaks": served}

    def lead(arrived_peaks: tuple[tuple[float, float], ...] | None) -> int | None:
        return ramp_step(spec(), history, usage, 0.5, NOW, arrived=arrived_peaks, **pool).recommendation

    assert lead(arrived) == 7
    assert lead(None) == 8  # a state from before the arrival peaks: read in the served peaks


def test_a_peak_inside_the_fit_window_does_not_cap_it() -> None:
    history, usage = rising(20)
    inside = ((NOW - 120.0 - NOW % 60, 3.3),)  # a minute within the last 300 s: part of the rise itself
    step = ramp_step(
        spec(), history, usage, 0.5, NOW, lead_seconds=None, pending=None, serving=5, current=5, peaks=inside
    )
    assert step.recommendation == 8


def test_the_peaks_are_kept_in_state_and_through_an_overload() -> None:
    s = spec()
    state = ScalerState(demand_peaks=((NOW - 600.0, 4.0),))
    d = desired_replicas(s, state, obs([0.5, 0.5, 0.5, 0.5], now=NOW), NOW)
    assert d.state.demand_peaks == ((NOW - 600.0, 4.0), (NOW - NOW % 60, 2.0))
    back = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))
    assert back == d.state
    over = ramp_step(
        s,
        (),
        9.0,
        0.5,
        NOW + 60,
        lead_seconds=None,
        pending=None,
        serving=4,
        current=4,
        overloaded=True,
        peaks=d.state.demand_peaks,
    )
    assert over.usage == () and over.peaks[-1] == (NOW + 60 - (NOW + 60) % 60, 9.0)


def test_an_hour_of_a_short_wave_holds_no_more_than_its_crest_needs() -> None:
    """An 11-minute wave of +-30 % through the policy: after the first crest, the ramp lead orders
    no more than the crest needs (a line through each rising half ordered a lead's worth of slope
    above every crest, and the down window held it for the hour)."""
    s = spec(tolerance={"up": 0.1, "down": 0.1}, stabilizationSeconds={"down": 900})
    wave = [6.0 * (1 + 0.3 * np.sin(2 * np.pi * i * SYNC / 660)) for i in range(240)]
    crest_needs = -(-max(wave) // 0.5)
    held = [n for n, _ in run(s, wave, 12)]
    assert max(held[:44]) > crest_needs + 1  # the first crest: no earlier peak to stop at
    # Once the down window has let the first crest's order go, the pool holds what the crest needs.
    assert max(held[120:]) <= crest_needs


def test_a_wave_through_a_small_pool_is_not_let_go_and_ordered_back() -> None:
    """A 22-minute wave whose crests need 6 replicas: the down window lets a crest go as the next
    rise begins, and the ramp lead's next order took the scale-down back within a minute (two
    direction changes and a pod start for the same load). The scale-down now stops at what the
    rising line needs."""
    s = spec(tolerance={"up": 0.1, "down": 0.1}, stabilizationSeconds={"down": 900})
    wave = [1.95 + 0.75 * np.sin(2 * np.pi * i * SYNC / 1320) for i in range(480)]
    held = [n for n, _ in run(s, wave, 5)]
    flips = [i for i in range(1, len(held) - 4) if held[i] < held[i - 1] and max(held[i : i + 5]) > held[i]]
    assert flips == []
    assert max(held) == 6


# --------------------------------------------------------------------------- through the policy


def numpy_projection(window: list[tuple[float, float]], at: float) -> float | None:
    """trend.fitted_rise's line, fitted by numpy: its value at `at`, if it rises."""
    slope, icept = np.polyfit([t for t, _ in window], [u for _, u in window], 1)
    return float(slope * at + icept) if slope > 0 else None


def sliver_allowed(replicas: float, tolerance_up: float) -> float:
    """How far past the count it orders a line at `replicas` may be: a sliver where one replica is
    more than tolerance.up of the pool, else nothing."""
    return SLIVER_REPLICAS if replicas * tolerance_up < 1 else 0.0


def run(s: AutoscalingSpec, demand: list[float], start: int) -> list[tuple[int, str]]:
    """Syncs every 15 s over pods whose total SM usage is `demand[i]`; new pods serve 120 s after the order."""
    state = ScalerState()
    replicas, serving = start, start
    ordered: list[tuple[float, int]] = []
    out = []
    for i, total in enumerate(demand):
        now = NOW + i * SYNC
        serving = max([serving] + [n for t, n in ordered if now - t >= 120])
        serving = min(serving, replicas)
        per_pod = min(1.0, total / serving)
        o = obs([per_pod] * serving, loading=replicas - serving, now=now)
        d = desired_replicas(s, state, o, now)
        state = d.state
        if d.desired_replicas > replicas:
            ordered.append((now, d.desired_replicas))
        replicas = d.desired_replicas
        serving = min(serving, replicas)
        out.append((replicas, d.reason))
    return out


def test_a_ramp_is_ordered_ahead_and_the_lead_is_learned() -> None:
    s = spec(tolerance={"up": 0.1, "down": 0.1})
    ramp = [2.0 + 0.02 * i for i in range(40)]  # +0.08 SM-active per minute, 10 minutes
    with_lead = run(s, ramp, 5)
    without = run(spec(tolerance={"up": 0.1, "down": 0.1}, rampLead={"enabled": False}), ramp, 5)
    assert any(reason == "RisingLoad" for _, reason in with_lead)
    # Never fewer replicas at any sync, and capacity arrives earlier.
    assert all(a >= b for (a, _), (b, _) in zip(with_lead, without, strict=True))
    first = next(i for i, (n, _) in enumerate(with_lead) if n > 5)
    assert first < next(i for i, (n, _) in enumerate(without) if n > 5)


def test_learned_lead_is_kept_in_state() -> None:
    s = spec()
    state = ScalerState(scale_up_pending=(NOW - 90.0, 3))
    d = desired_replicas(s, state, obs([0.5, 0.5, 0.5], now=NOW), NOW)
    assert d.state.lead_seconds == 90.0 and d.state.scale_up_pending is None
    back = ScalerState.from_dict(d.state.to_dict())
    assert back == d.state


@pytest.mark.parametrize(
    "bad",
    [
        {"scaleUpPending": []},
        {"scaleUpPending": ["x", 2]},
        {"demand": [[1.0]]},
        {"leadSeconds": "nan"},
        {"rampForecasts": [[1.0, 2.0]]},
        {"rampSkill": "inf"},
        {"demandPeaks": [[1.0]]},
        {"demandPeaks": [[1.0, "nan"]]},
        {"arrivalPeaks": [[1.0]]},
        {"arrivalPeaks": [[1.0, "inf"]]},
        {"arrivalPeaks": "x"},
    ],
)
def test_malformed_ramp_state_is_forgotten(bad: dict[str, Any]) -> None:
    assert ScalerState.from_dict({"recommendations": [[1.0, 2]], **bad}) == ScalerState()


@settings(max_examples=60, deadline=None)
@given(
    level=st.floats(0.2, 8.0),
    slope=st.floats(-0.05, 0.0),
    noise=st.lists(st.floats(-0.02, 0.02), min_size=30, max_size=30),
    n=st.integers(1, 20),
)
def test_property_flat_or_falling_demand_never_reads_as_a_ramp(
    level: float, slope: float, noise: list[float], n: int
) -> None:
    """A line that does not rise adds nothing (the noise is far smaller than the fall it rides on, or zero)."""
    s = spec()
    state = ScalerState()
    for i, e in enumerate(noise):
        now = NOW + i * SYNC
        total = max(0.0, level + slope * i * SYNC + (e * abs(slope) * SYNC if slope < 0 else 0.0))
        d = desired_replicas(s, state, obs([min(1.0, total / n)] * n, now=now), now)
        assert d.reason != "RisingLoad"
        state = d.state


@settings(max_examples=60, deadline=None)
@given(
    demand=st.lists(st.floats(0.0, 10.0), min_size=12, max_size=40),
    start=st.integers(1, 12),
)
def test_property_the_ramp_lead_only_ever_raises_the_decision(demand: list[float], start: int) -> None:
    """At every sync of a run, the same state and readings without it never give more replicas.

    (Per sync, not per run: runs diverge once one scales earlier, e.g. the other saturates and
    doubles.)"""
    on, off = spec(), spec(rampLead={"enabled": False})
    state = ScalerState()
    replicas, serving = start, start
    ordered: list[tuple[float, int]] = []
    for i, total in enumerate(demand):
        now = NOW + i * SYNC
        serving = min(replicas, max([serving] + [n for t, n in ordered if now - t >= 120]))
        o = obs([min(1.0, total / serving)] * serving, loading=replicas - serving, now=now)
        d = desired_replicas(on, state, o, now)
        assert d.desired_replicas >= desired_replicas(off, state, o, now).desired_replicas
        if d.desired_replicas > replicas:
            ordered.append((now, d.desired_replicas))
        replicas, state = d.desired_replicas, d.state
        serving = min(serving, replicas)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 20),
    target=st.floats(0.05, 0.6),  # x (1 + tu) stays under SATURATED_SM_ACTIVE: never overloaded
    tu=st.floats(0, 0.45),
    td=st.floats(0, 0.25),  # no move between syncs exceeds LEVEL_SHIFT (a two-sync step may restart the fit)
    noise=st.lists(st.floats(-1, 1), min_size=30, max_size=30),
)
@example(n=5, target=0.5, tu=0.0, td=0.2265625, noise=[-0.625, -0.375, -1.0] + [0.0] * 27)  # a sliver
def test_property_inside_the_band_only_the_ramp_moves_it_and_only_up(
    n: int, target: float, tu: float, td: float, noise: list[float]
) -> None:
    """Readings inside the SM rule's band: the count never falls, and a rise is always the ramp's.

    Every rise is sized between the least-squares line of the demand now and its value one lead
    ahead, or as far ahead as its samples reach back if that is less (numpy's fit, computed here
    apart from trend.py), and at the projection itself while the line's forecasts have come true
    (skill 1 or more, or none judged yet), less a sliver of a replica on a pool where one replica
    is more than tolerance.up of it (a random seed found n=5, tolerance.up 0: a line at 6.026
    replicas rightly ordered 6).
    """
    s = spec(targetSmActive=target, tolerance={"up": tu, "down": td}, stabilizationSeconds={"up": 0, "down": 0})
    state = ScalerState()
    count = n
    demand: list[tuple[float, float]] = []
    start = 0  # where the fit restarted: the window's demand read as two levels
    for i, x in enumerate(noise):
        now = NOW + i * SYNC
        band = tu if x > 0 else td
        v = target * (1 + 0.999 * band * x)
        demand.append((now, v * n))
        first = next(j for j in range(start, len(demand)) if now - demand[j][0] < s.ramp_lead.window_seconds)
        restart = numpy_second_level(demand[first:])
        start = first + restart if restart is not None else start
        d = desired_replicas(s, state, obs([v] * n, loading=count - n, now=now), now)
        assert d.desired_replicas >= count
        if d.desired_replicas > count:
            assert d.reason == "RisingLoad"
            window = [(t, u) for t, u in demand[start:] if now - t < s.ramp_lead.window_seconds]
            reach = min(float(s.ramp_lead.lead_seconds), window[-1][0] - window[0][0])
            projected = numpy_projection(window, now + reach)
            level = numpy_projection(window, now)
            assert projected is not None and level is not None
            lowest = level / target - sliver_allowed(level / target, tu)
            assert lowest - 1e-6 <= d.desired_replicas < projected / target + 1
            if d.state.ramp_skill is None or d.state.ramp_skill >= 1:
                exact = projected / target
                assert d.desired_replicas - 1 < exact <= d.desired_replicas + sliver_allowed(exact, tu) + 1e-6
        count = d.desired_replicas
        state = d.state
        # The pods now ordered are still starting: the readings stay those of the n serving ones.


def test_the_hpa_baselines_run_without_it() -> None:
    """HPA has no ramp lead: the replay's and the closed loop's HPA-on-RPS baselines turn it off."""
    s = spec(rampLead={"windowSeconds": 600}, tolerance={"up": 0.2, "down": 0.1})
    hpa = without_ramp_lead(s)
    assert not hpa.ramp_lead.enabled and hpa.ramp_lead.window_seconds == 600
    assert hpa.model_copy(update={"ramp_lead": s.ramp_lead}) == s
    assert s.ramp_lead.enabled  # the policy's own spec is left as it was
