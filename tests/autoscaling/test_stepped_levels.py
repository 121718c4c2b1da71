"""The levels a release keeps: those steps up reached (the ramp lead reads the steps and the state
carries them), until the down window has passed the level's last minute (`levels.held_step_level`),
a burst's level, read in the minute peaks, likewise (`levels.burst_level`), and a level held for a
whole down window that demand fell from at once, until the window has passed the fall
(`levels.interrupted_level`)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.levels import Step, burst_level, held_step_level, interrupted_level
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.trend import MAX_STEPS, PEAK_HISTORY_SECONDS, ramp_step

SYNC = 15.0
T0 = 100_020.0  # 20 s into a minute
SLO = 40.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetSmActive": 0.5}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


STEP: Step = (120.0, 6.0, 10.0)
LEVEL = [(0.0, 6.0), (60.0, 6.1), (120.0, 10.2), (180.0, 10.1), (240.0, 10.3), (300.0, 6.2), (360.0, 6.0)]


@pytest.mark.parametrize(
    ("peaks", "steps", "since", "level"),
    [
        pytest.param(LEVEL, [], -1.0, None, id="no-step"),
        pytest.param(LEVEL, [STEP], -1.0, 10.3, id="the-levels-highest-minute"),
        pytest.param(LEVEL, [STEP], 250.0, 10.3, id="held-while-the-window-has-its-last-minute"),
        pytest.param(LEVEL, [STEP], 200.0, 10.3, id="only-the-minutes-inside-the-window"),
        pytest.param(LEVEL, [STEP], 300.0, None, id="the-window-has-passed-its-last-minute"),
        pytest.param(LEVEL, [(150.0, 6.0, 10.0)], -1.0, 10.3, id="a-step-inside-a-minute-counts-that-minute"),
        pytest.param(
            [(120.0, 10.0), (180.0, 12.5), (240.0, 12.5)], [STEP], 190.0, None, id="a-rise-past-the-level-ends-it"
        ),
        pytest.param([(120.0, 10.0), (240.0, 10.0)], [STEP], 200.0, None, id="a-missing-minute-ends-it"),
        pytest.param([(120.0, 10.0), (180.0, 7.9)], [STEP], 190.0, None, id="a-fall-past-halfway-ends-it"),
        pytest.param([(120.0, 10.0), (180.0, 8.1)], [STEP], 190.0, 8.1, id="a-fall-short-of-halfway-holds-it"),
        pytest.param(
            [*LEVEL, (420.0, 9.0), (480.0, 9.0)], [STEP, (420.0, 6.0, 9.0)], 300.0, 9.0, id="a-later-step-of-its-own"
        ),
    ],
)
def test_held_step_level(
    peaks: list[tuple[float, float]], steps: list[Step], since: float, level: float | None
) -> None:
    assert held_step_level(peaks, steps, since) == level


def run_ramp(readings: list[float], *, overloaded_from: int | None = None) -> tuple[Step, ...]:
    """The steps the ramp lead has marked after these readings, 15 s apart."""
    s = spec()
    history: tuple[tuple[float, float], ...] = ()
    steps: tuple[Step, ...] = ()
    for i, usage in enumerate(readings):
        over = overloaded_from is not None and i >= overloaded_from
        r = ramp_step(
            s, history, usage, 0.5, T0 + i * SYNC, lead_seconds=None, pending=None, serving=12, current=12,
            overloaded=over, steps=steps,
        )  # fmt: skip
        history, steps = r.usage, r.steps
    return steps


def test_two_levels_mark_a_step_from_its_first_full_reading() -> None:
    [(at, before, after)] = run_ramp([2.0] * 8 + [2.6, 3.0, 3.0])
    assert at == T0 + 9 * SYNC and (before, after) == pytest.approx((2.0, 3.0))


def test_a_jump_marks_a_step_at_once() -> None:
    assert run_ramp([2.0] * 6 + [4.5]) == ((T0 + 6 * SYNC, 2.0, 4.5),)


def test_an_overload_marks_none() -> None:
    """The readings of an overloaded pool show what it serves, not what arrives (the queue sizes it),
    and the first minutes of a pool sized too small overload it without any step in the load."""
    assert run_ramp([2.0] * 6 + [2.9, 3.0], overloaded_from=6) == ()


@pytest.mark.parametrize(
    "readings",
    [
        pytest.param([3.0] * 8 + [2.0] * 3, id="a-step-down"),
        pytest.param([2.0 + 0.06 * i for i in range(20)], id="a-ramp"),
        pytest.param([2.0, 2.02] * 10, id="noise"),
    ],
)
def test_no_step_up_marks_none(readings: list[float]) -> None:
    assert run_ramp(readings) == ()


def test_steps_are_kept_for_an_hour_and_at_most_max_steps() -> None:
    old: Step = (T0 - PEAK_HISTORY_SECONDS - 1, 1.0, 2.0)
    many = tuple((T0 - 60.0 * (MAX_STEPS - i), 1.0, 2.0) for i in range(MAX_STEPS))
    r = ramp_step(spec(), (), 2.0, 0.5, T0, lead_seconds=None, pending=None, serving=4, current=4, steps=(old,))
    assert r.steps == ()
    jump = ((T0 - SYNC, 2.0),)
    r = ramp_step(spec(), jump, 4.5, 0.5, T0, lead_seconds=None, pending=None, serving=4, current=4, steps=many)
    assert len(r.steps) == MAX_STEPS and r.steps[-1] == (T0, 2.0, 4.5) and r.steps[0] == many[1]


def test_steps_survive_a_restart() -> None:
    state = ScalerState(demand_steps=((T0, 2.0, 3.0),))
    assert ScalerState.from_dict(state.to_dict()) == state
    assert "demandSteps" not in ScalerState().to_dict()  # a state written before them parses the same


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], [[1.0, 2.0, "nan"]], [["x", 1.0, 2.0]], 3])
def test_malformed_steps_are_forgotten(bad: Any) -> None:
    assert ScalerState.from_dict({"recommendations": [[1.0, 2]], "demandSteps": bad}) == ScalerState()


def pool(n: int, sm: float, p99: float, now: float) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    samples = {f"p{i}": PodSample(sm, now) for i in range(n)}
    return Observation(n, pods, MetricReading(samples), latency=LatencyReading(p99, now))


@pytest.mark.parametrize(("steps", "lowest"), [pytest.param(True, 17, id="held"), pytest.param(False, 15, id="not")])
def test_a_release_keeps_a_stepped_level_until_the_window_passes_its_last_minute(steps: bool, lowest: int) -> None:
    """A pool held at 20 by the down window (900 s), serving what 8 need, p99 well below the band.
    Demand stepped 4.5 -> 10.2 (SM-active terms) 20 minutes ago, held that level for 15 minutes and
    eased back over 4 minutes (each minute's peak less than `STEP_JUMP` below the one before, so
    no interruption: `test_interrupted_level` below). The step itself is older than the down
    window, but its level's last minute is inside it, as HPA's window keeps a peak for its length
    after the last reading at it: the release keeps the 17 replicas the level needs at 0.6 for the
    ten minutes run here. Without the step in the state the level is read as a swell, and the
    release goes to 15."""
    s = spec(targetSmActive=0.6, stabilizationSeconds={"down": 900})
    minute = T0 - T0 % 60
    peaks = [(minute - 1260 + 60 * i, 4.5 if i == 0 else 10.2) for i in range(16)]
    peaks += [(minute - 300 + 60 * i, p) for i, p in enumerate((8.5, 7.0, 5.8, 4.8, 4.8))]
    marked = ((minute - 1200 + 10, 4.5, 10.2),) if steps else ()
    state = ScalerState(
        recommendations=((T0 - 100, 20),), last_direction=-1, demand_peaks=tuple(peaks), demand_steps=marked
    )
    counts = released_from_20(s, state)
    assert min(counts) == lowest and counts == sorted(counts, reverse=True)


def released_from_20(s: AutoscalingSpec, state: ScalerState) -> list[int]:
    """The counts of 40 syncs (ten minutes) of a pool of 20 that serves what 8 need at 0.6, with its
    p99 (19 ms) well below the band: what the release gives back, step by step."""
    n, counts = 20, []
    for i in range(40):
        now = T0 + SYNC * i
        d = desired_replicas(s, state, pool(n, 0.6 * 8 / n, 19.0, now), now, slo_p99_ms=SLO)
        state, n = d.state, d.desired_replicas
        counts.append(n)
    return counts


WINDOW = 900.0


def minutes(*levels: tuple[int, float], start: float = 0.0) -> list[tuple[float, float]]:
    """Minute peaks from (how many minutes, peak) runs, one minute apart from `start`."""
    out: list[tuple[float, float]] = []
    for count, peak in levels:
        out += [(start + 60.0 * (len(out) + i), peak) for i in range(count)]
    return out


HELD = minutes((16, 10.0), (3, 6.0))  # 16 minutes at 10, a fall to 6 in minute 16
# `bench/autoscaling_seeds.py --family interruption`, seed 500 (SM-active terms): a fall late in
# minute 26 that the readings' rate window shows in part in minute 27.
SEED_500 = minutes((25, 11.7), (1, 11.69), (1, 11.75), (1, 9.66), (1, 7.57), (1, 7.54), (1, 7.56))
FALL = 16 * 60.0


@pytest.mark.parametrize(
    ("peaks", "since", "level"),
    [
        pytest.param(HELD, FALL - WINDOW, 10.0, id="a-fall-from-a-level-held-a-whole-window"),
        pytest.param(HELD, FALL - 1, 10.0, id="while-the-window-holds-the-fall"),
        pytest.param(HELD, FALL, None, id="the-window-has-passed-the-fall"),
        pytest.param(minutes((2, 5.0), (14, 10.0), (3, 6.0)), -1.0, None, id="a-level-held-less-than-the-window"),
        pytest.param(minutes((14, 10.0), (3, 6.0)), -1.0, 10.0, id="held-since-the-first-minute-remembered"),
        pytest.param(minutes((16, 10.0), (3, 8.0)), -1.0, None, id="a-fall-of-less-than-step-jump"),
        pytest.param(minutes((16, 10.0), (1, 6.0), (2, 10.0)), -1.0, None, id="one-low-minute-is-a-dip"),
        pytest.param(minutes((16, 10.0), (1, 6.0), (1, 8.0)), -1.0, None, id="the-next-minute-not-as-low"),
        pytest.param(minutes((16, 10.0), (1, 6.0)), -1.0, None, id="a-fall-the-next-minute-has-not-confirmed"),
        pytest.param(minutes((16, 10.0), (1, 8.5), (1, 7.0), (2, 6.0)), -1.0, None, id="a-fall-over-minutes"),
        pytest.param(minutes((16, 10.0), (1, 7.5), (3, 6.0)), -1.0, 10.0, id="a-fall-read-in-part-in-one-minute"),
        pytest.param(SEED_500, -1.0, 11.7, id="the-fall-of-interruption-seed-500"),
        pytest.param(
            minutes((16, 10.0), (1, 7.75), (1, 6.0), (2, 4.8)), -1.0, None, id="a-fall-in-part-that-goes-on-falling"
        ),
        pytest.param(
            minutes((15, 10.0), (1, 8.5), (1, 7.5), (3, 6.0)),
            -1.0,
            None,
            id="two-minutes-in-part-are-a-fall-over-minutes",
        ),
        pytest.param(
            minutes((8, 10.0), (1, 8.0), (8, 10.0), (3, 6.0)), -1.0, 10.0, id="a-dip-short-of-the-fall-splits-nothing"
        ),
        pytest.param(
            minutes((8, 10.0), (1, 5.0), (8, 10.0), (3, 6.0)), 9 * 60.0, None, id="a-deeper-dip-splits-the-level"
        ),
        pytest.param(
            [*minutes((8, 10.0)), *minutes((8, 10.0), (3, 6.0), start=9 * 60.0)],
            9 * 60.0,
            None,
            id="a-missing-minute-splits-the-level",
        ),
        pytest.param(minutes((6, 9.0), (5, 10.0), (6, 11.0), (3, 6.0)), -1.0, 10.0, id="the-levels-median-minute"),
        pytest.param(minutes((16, 10.0), (3, 6.0), (16, 12.0), (3, 7.0)), -1.0, 12.0, id="the-higher-of-two"),
    ],
)
def test_interrupted_level(peaks: list[tuple[float, float]], since: float, level: float | None) -> None:
    assert interrupted_level(peaks, since, WINDOW) == level


@pytest.mark.parametrize(
    ("held_minutes", "lowest"),
    [pytest.param(18, 17, id="held-a-whole-window"), pytest.param(10, 15, id="a-swell")],
)
def test_a_release_keeps_an_interrupted_level_until_the_window_passes_the_fall(held_minutes: int, lowest: int) -> None:
    """A pool held at 20 by the down window (900 s), serving what 8 need, p99 well below the band.
    Demand had held 10.2 (SM-active terms) for 18 minutes and fell to 4.8 two minutes ago, at once:
    the load that left comes back as a step, and the release keeps the 17 replicas the level needs
    at 0.6 for the ten minutes run here (the fall is inside the window for 13). A level reached
    over minutes and held 10 is a swell, which the release gives back to 15 (no step up is in the
    window or the state, so nothing else holds it)."""
    s = spec(targetSmActive=0.6, stabilizationSeconds={"down": 900})
    minute = T0 - T0 % 60
    rise = [4.8 + 0.9 * i for i in range(1, 6)]  # 5.7 .. 8.4: each minute under STEP_JUMP above the last
    levels = [4.8] * (20 - held_minutes - len(rise)) + rise + [10.2] * held_minutes + [4.8, 4.8]
    peaks = [(minute - 60.0 * (len(levels) - i), level) for i, level in enumerate(levels)]
    state = ScalerState(recommendations=((T0 - 100, 20),), last_direction=-1, demand_peaks=tuple(peaks))
    counts = released_from_20(s, state)
    assert min(counts) == lowest and counts == sorted(counts, reverse=True)


# `bench/autoscaling_seeds.py --family bursts`, seed 803 (SM-active terms): a burst that overloaded
# the pool (so the ramp lead read no step) stepped up at minute 1 and left at minute 5.
BURST_803 = minutes((1, 5.88), (1, 9.74), (1, 9.9), (1, 10.72), (1, 9.89), (12, 6.1))


@pytest.mark.parametrize(
    ("peaks", "since", "within", "level"),
    [
        pytest.param(BURST_803, -1.0, 300.0, 10.72, id="the-bursts-highest-minute"),
        pytest.param(BURST_803, 250.0, 300.0, 10.72, id="kept-while-the-window-has-its-last-minute"),
        pytest.param(BURST_803, 300.0, 300.0, None, id="the-window-has-passed-its-last-minute"),
        pytest.param(BURST_803, -1.0, 120.0, None, id="held-longer-than-within-is-no-burst"),
        pytest.param(minutes((1, 6.0), (5, 10.0)), -1.0, 300.0, None, id="a-level-not-left-is-no-burst-yet"),
        pytest.param(minutes((1, 6.0), (1, 7.7), (3, 6.0)), -1.0, 300.0, None, id="a-rise-within-the-jump"),
        pytest.param([(0.0, 6.0), (120.0, 10.0), (180.0, 6.0)], -1.0, 300.0, None, id="a-missing-minute-is-no-step"),
        pytest.param(
            [(0.0, 6.0), (60.0, 10.0), (180.0, 10.0), (240.0, 6.0)], -1.0, 300.0, None, id="a-gap-in-it-ends-it-unleft"
        ),
        pytest.param(
            minutes((1, 6.0), (2, 10.0), (1, 6.0), (2, 12.0), (1, 6.0)), 90.0, 300.0, 12.0, id="the-higher-of-two"
        ),
    ],
)
def test_burst_level(peaks: list[tuple[float, float]], since: float, within: float, level: float | None) -> None:
    assert burst_level(peaks, since, within) == level


def test_a_release_keeps_a_bursts_level_until_the_window_passes_its_last_minute() -> None:
    """Bursts seed 803's first burst, as the minute peaks read it, its last minute 6 minutes ago:
    the down window (900 s) holds it for the ten minutes run here, so the release keeps what its
    level (10.72) needs at 0.6, 18 replicas. The same minutes without the burst (at the level it
    left) release to 15, and so does the burst once its last minute is older than the window."""
    s = spec(targetSmActive=0.6, stabilizationSeconds={"down": 900})
    minute = T0 - T0 % 60

    def lowest(values: list[float], ago: int) -> int:
        peaks = [(minute - 60 * (ago + len(values) - 1 - i), p) for i, p in enumerate(values)]
        state = ScalerState(recommendations=((T0 - 100, 20),), last_direction=-1, demand_peaks=tuple(peaks))
        return min(released_from_20(s, state))

    burst = [p for _, p in BURST_803[:6]] + [6.1] * 5
    assert lowest(burst, 0) == 18
    assert lowest([6.1] * len(burst), 0) == 15
    assert lowest(burst, 10) == 15
