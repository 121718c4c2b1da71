"""The SLO loop (`sloFeedback.controller: band`, the default): a two-sided PI loop on the p99."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import Decision, desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.slo_loop import (
    MAX_ERROR,
    MIN_CUT_ELASTICITY,
    RAISE_REACH,
    band_error,
    cut_bought_little,
    loop_bounds,
    slo_loop,
)
from gem_operator.replay.engine import simulate
from gem_operator.replay.report import POLICY
from gem_operator.replay.service_model import ServiceModel

from .conftest import bench_module

SLO = 40.0
T0 = 10_000.0


def spec(**feedback: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate(
        {"minReplicas": 1, "maxReplicas": 60, "targetSmActive": 0.6, "sloFeedback": feedback}
    )


def pool(
    sm: float, p99: float | None, now: float, *, n: int = 4, starting: int = 0, queue: float | None = None
) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    pods += [PodState(f"s{i}", ready=False, model_loaded=False) for i in range(starting)]
    samples = {f"p{i}": PodSample(sm, now) for i in range(n)}
    q = None if queue is None else MetricReading({f"p{i}": PodSample(queue, now) for i in range(n)})
    latency = None if p99 is None else LatencyReading(p99, now)
    return Observation(len(pods), pods, MetricReading(samples), queue=q, latency=latency)


def run(
    s: AutoscalingSpec,
    readings: list[tuple[float, float | None]],
    state: ScalerState | None = None,
    start: float = T0,
    **kw: Any,
) -> tuple[Decision, list[float]]:
    """Syncs every 15 s from `start` with (SM active, p99) readings; the last decision and every target."""
    state = state or ScalerState()
    targets: list[float] = []
    d = None
    for i, (sm, p99) in enumerate(readings):
        now = start + 15 * i
        d = desired_replicas(s, state, pool(sm, p99, now, **kw), now, slo_p99_ms=SLO)
        state = d.state
        targets.append(d.effective_target or 0.0)
    assert d is not None
    return d, targets


def test_the_band_is_the_default_and_its_error_is_zero_inside() -> None:
    s = AutoscalingSpec()
    assert s.slo_feedback.controller == "band"
    assert band_error(s, 30.0, SLO) == 0.0
    assert band_error(s, 40.0, SLO) == pytest.approx(math.log(40 / 32))
    assert band_error(s, 20.0, SLO) == pytest.approx(math.log(20 / 26))
    assert band_error(s, 500.0, SLO) == pytest.approx(MAX_ERROR)  # one burst counts at most this


def test_it_moves_up_as_readily_as_down() -> None:
    """Equal errors either side of the band move the target by equal factors, the first move a
    whole window after the pool settled and the p99 left the band. From a target the loop had cut:
    by default it rises no higher than targetSmActive."""
    s = spec(bandLow=0.6, bandHigh=0.8)
    low, high = 24.0 * math.exp(-0.1), 32.0 * math.exp(0.1)
    cut = ScalerState(effective_target=0.5)
    d_up, up = run(s, [(0.5, low)] * 10, state=cut)
    d_down, down = run(s, [(0.5, high)] * 10, state=cut)
    first_up = next(i for i, t in enumerate(up) if t != 0.5)
    first_down = next(i for i, t in enumerate(down) if t != 0.5)
    assert first_up == first_down >= 4  # 60 s of a settled pool and of readings outside the band
    factor = math.exp(0.1 * (0.3 + 0.3))  # P and I on a first error of 0.1
    assert up[first_up] == pytest.approx(0.5 * factor)
    assert down[first_down] == pytest.approx(0.5 / factor)
    assert d_up.effective_target is not None and d_up.effective_target > 0.5 > (d_down.effective_target or 1)


def test_inside_the_band_it_holds() -> None:
    _, targets = run(spec(), [(0.6, 29.0)] * 20)
    assert set(targets) == {0.6}


def test_starting_pods_and_overload_do_not_move_it() -> None:
    s = spec()
    _, starting = run(s, [(0.6, 39.0)] * 20, starting=2)
    assert set(starting) == {0.6}  # Ready < replicas: the p99 measures the start-up lag
    _, overloaded = run(s, [(0.95, 39.0)] * 20, queue=2.0)
    assert set(overloaded) == {0.6}  # the queue sizes an overload
    # After an overload the p99's window still holds it: one more window before the loop moves.
    state = ScalerState(slo_last_overloaded=T0 - 15, slo_quiet_since=None)
    _, after = run(s, [(0.6, 39.0)] * 4, state)  # the pool settles at T0; a move needs a window more
    assert set(after) == {0.6}


def test_one_burst_moves_nothing() -> None:
    """A p99 above the band in one window, back inside it the next: no cut."""
    readings = [(0.6, 29.0)] * 6 + [(0.6, 300.0)] * 3 + [(0.6, 29.0)] * 10
    _, targets = run(spec(), readings)
    assert set(targets) == {0.6}


def test_a_return_into_the_band_takes_back_the_proportional_share_at_once() -> None:
    """A quarter-hour at 18 ms (below the band; the reach holds the raise back), then the p99 climbs
    into the band: the first reading there cuts by the proportional term's share of the error it
    left, without a window (measured: waiting one cost violation minutes, docs/benchmarks.md), and
    the target holds in the band after it."""
    s = spec()
    below = [(0.3, 18.0)] * 60
    _, targets = run(s, below + [(0.55, 29.0)] * 10)
    assert set(targets[: len(below)]) == {0.6}
    cut = 0.6 * math.exp(s.slo_feedback.proportional_gain * math.log(18.0 / 26.0))
    assert targets[len(below)] == pytest.approx(cut)
    assert set(targets[len(below) :]) == {targets[len(below)]}


def test_by_default_the_loop_gives_back_what_it_cut_and_no_more() -> None:
    """The ceiling is targetSmActive unless the spec says otherwise: a p99 far below the band at the
    declared target says nothing about where the latency curve's knee is (docs/benchmarks.md)."""
    s = spec()
    assert s.slo_feedback.max_target_fraction == 1.0
    _, at_target = run(s, [(0.6, 12.0)] * 40)
    assert set(at_target) == {0.6}
    cut = ScalerState(effective_target=0.45)
    _, back = run(s, [(0.6, 12.0)] * 120, state=cut)
    assert back[0] < back[-1] == pytest.approx(0.6)
    _, opted_in = run(spec(maxTargetFraction=1.1), [(0.6, 12.0)] * 40)
    assert max(opted_in) == pytest.approx(0.66)


def test_a_raise_reaches_only_past_the_sm_the_p99_was_read_at() -> None:
    """A pool held at SM 0.3 by its window shows a low p99 for SM 0.3, not for the ceiling."""
    _, targets = run(spec(maxTargetFraction=1.5), [(0.3, 18.0)] * 40)
    assert max(targets) == pytest.approx(max(0.6, 0.3 * RAISE_REACH))
    _, free = run(spec(maxTargetFraction=1.5), [(0.6, 18.0)] * 40)
    assert max(free) == pytest.approx(0.6 * RAISE_REACH)  # one step past what the pool showed, then it waits


def test_a_raise_holds_on_a_fleet_whose_sm_active_idles_high() -> None:
    """SM active 0.3 idle, 0.75 at full load: a step of SM active is a larger step of work per pod.
    Three generated conversation hours through the replay: the raises stay within what the p99
    holds, so the hours keep the bench's target of 3 % of minutes over the SLO (a 15 % reach spent 12 of
    171 judged minutes over it, 8 in one hour). The raise opted in: by default the ceiling is the target."""
    scenarios, replay = bench_module("autoscaling_scenarios"), bench_module("autoscaling_replay")
    raised = {**replay.SERVICE["autoscaling"], "targetSmActive": 0.55, "sloFeedback": {"maxTargetFraction": 1.1}}
    service = {**replay.SERVICE, "autoscaling": raised}
    rs = RankingServiceSpec.model_validate(service)
    model = ServiceModel(sm_active=((0.0, 0.3), (1.0, 0.75)))
    over = judged = 0
    for seed in (123, 124, 125):
        report = simulate(scenarios.conversation(seed).series("independent"), rs, model)
        over += report.results[POLICY].slo_violation_minutes
        judged += report.judged_minutes
    assert judged > 150
    assert over <= 0.03 * judged


def test_bounded_and_unwinds_at_once_from_the_ceiling() -> None:
    """Anti-windup: hours below the band leave the target at the ceiling, not beyond it, so the
    first confirmed window above the band cuts it. The ceiling above the target is opted in."""
    s = spec(maxTargetFraction=1.1)
    floor, ceiling = loop_bounds(s)
    assert ceiling == pytest.approx(0.66)
    readings = [(0.85, 18.0)] * 240  # SM keeps showing room (not saturated): the loop climbs to its ceiling
    d, targets = run(s, readings)
    assert max(targets) == pytest.approx(ceiling)
    _, after = run(s, [(0.72, 60.0)] * 10, d.state, T0 + 15 * 240)
    assert after[-1] < ceiling
    d, low = run(s, [(0.6, 45.0)] * 400)  # over the SLO, cuts that buy nothing still cut: down to the floor
    assert min(low) == pytest.approx(floor)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1.0),
            st.one_of(st.none(), st.floats(1.0, 400.0)),
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_property_bounded_no_wrong_way_no_scale_down_over_the_slo(
    syncs: list[tuple[float, float | None, int, bool]],
) -> None:
    s = spec()
    floor, ceiling = loop_bounds(s)
    state, current = ScalerState(), 4
    for i, (sm, p99, starting, queued) in enumerate(syncs):
        now = T0 + 15 * i
        starting = min(starting, current - 1)
        o = pool(sm, p99, now, n=current - starting, starting=starting, queue=1.0 if queued else None)
        before = state.effective_target or 0.6
        d = desired_replicas(s, state, o, now, slo_p99_ms=SLO)
        target = d.effective_target or 0.6
        assert floor - 1e-9 <= target <= ceiling + 1e-9
        if p99 is None or starting:
            assert target == pytest.approx(before)  # no reading, or pods starting: it holds
        elif p99 > 0.8 * SLO:
            assert target <= before + 1e-12  # never up above the band
        elif p99 < 0.65 * SLO:
            assert target >= before - 1e-12  # never down below it
        if p99 is not None and p99 > SLO:
            assert d.desired_replicas >= o.current_replicas  # no scale-down over the SLO
        state, current = d.state, d.desired_replicas


def test_a_cut_that_bought_no_p99_is_not_repeated_under_the_slo() -> None:
    """A flat latency curve: the first cut (0.6 -> 0.56) leaves the p99 at 36 ms, above the band and
    under the SLO. Another cut would buy as little, so the loop holds; over the SLO it cuts on."""
    flat = [(0.6, 36.0)] * 200
    d, targets = run(spec(), flat)
    cuts = sorted(set(targets), reverse=True)
    assert len(cuts) == 2 and cuts[1] < 0.6  # one cut, then it holds for the 50 minutes
    assert "took the p99 from 36.0 to 36.0 ms" in d.message
    _, over = run(spec(), [(0.6, 44.0)] * 200)
    assert len(set(over)) > 3  # over the SLO the loop is the safety net: it cuts whatever a cut bought


def test_a_cut_that_bought_p99_is_followed_by_the_next() -> None:
    """The last cut, 0.6 -> 0.5, took the p99 from 48 to 36 ms (elasticity 1.6): the loop cuts again."""
    state = ScalerState(effective_target=0.5, slo_last_cut=(0.6, 48.0))
    _, targets = run(spec(), [(0.5, 36.0)] * 12, state=state)
    assert min(targets) < 0.5
    bought = math.log(48.0 / 36.0) / math.log(0.6 / 0.5)
    assert bought > MIN_CUT_ELASTICITY
    assert cut_bought_little((0.6, 48.0), 0.5, 36.0, SLO) is None
    assert cut_bought_little((0.6, 37.0), 0.5, 36.0, SLO) is not None  # 0.15 of the cut's size
    assert cut_bought_little((0.6, 37.0), 0.5, 41.0, SLO) is None  # over the SLO: no hold
    assert cut_bought_little((0.5, 48.0), 0.5, 36.0, SLO) is None  # the spec moved the target: nothing to read
    assert cut_bought_little(None, 0.5, 36.0, SLO) is None
    assert cut_bought_little((0.6, 0.0), 0.5, 36.0, SLO) is None  # no logarithm to take: no hold, no error


def test_the_loop_remembers_its_last_cut_and_forgets_it_on_a_raise() -> None:
    d, targets = run(spec(), [(0.6, 36.0)] * 12)
    assert targets[-1] < 0.6 and d.state.slo_last_cut == pytest.approx((0.6, 36.0))
    raised, up = run(spec(), [(0.6, 18.0)] * 12, d.state, T0 + 15 * 12)
    assert up[-1] > targets[-1] and raised.state.slo_last_cut is None
    assert ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict()))) == d.state
    assert ScalerState.from_dict({}).slo_last_cut is None  # states written before it parse the same


def test_missing_latency_holds_and_is_never_low() -> None:
    d, _ = run(spec(), [(0.6, 39.0)] * 12)
    learned = d.effective_target
    assert learned is not None and learned < 0.6
    _, targets = run(spec(), [(0.2, None)] * 40, d.state, T0 + 15 * 12)
    assert set(targets) == {learned}


def test_the_state_survives_a_restart() -> None:
    """Through status JSON, the loop decides exactly as if the operator had not restarted."""
    s = spec()
    d, _ = run(s, [(0.6, 18.0)] * 8 + [(0.6, 36.0)] * 5)
    restored = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))
    assert restored == d.state
    now = T0 + 15 * 13
    o = pool(0.6, 36.0, now)
    assert desired_replicas(s, restored, o, now, slo_p99_ms=SLO) == desired_replicas(s, d.state, o, now, slo_p99_ms=SLO)


@pytest.mark.parametrize(
    "bad",
    [
        {"sloOutside": ["x", 1]},
        {"sloError": "nan"},
        {"sloQuietSince": [1]},
        {"sloLastCut": [0.6]},
        {"sloLastCut": [0.6, 0]},  # a p99 of 0 has no logarithm: kept, the next cut would raise
        {"sloLastCut": [-0.6, 36.0]},
    ],
)
def test_malformed_loop_state_is_forgotten(bad: dict[str, Any]) -> None:
    assert ScalerState.from_dict(bad) == ScalerState()


def test_a_band_that_is_no_band_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="bandLow"):
        spec(bandLow=0.8, bandHigh=0.7)


def test_the_loop_step_reports_why_it_holds() -> None:
    s = spec()
    step = slo_loop(s, ScalerState(), pool(0.6, 39.0, T0, starting=1), SLO, T0, overloaded=False, sm_active=0.6)
    assert step.target == 0.6 and "still starting" in step.message and step.eager
