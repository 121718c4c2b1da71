"""SLO feedback on the SM target, the over-SLO scale-down block, panic mode, and their state."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.policy import (
    SCALING_LIMITED,
    LatencyReading,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    ScalerState,
    desired_replicas,
)
from gem_operator.autoscaling.signals import SATURATED_SM_ACTIVE
from gem_operator.autoscaling.slo import target_bounds

NOW = 10_000.0
SLO = 40.0


def spec(**kw: Any) -> AutoscalingSpec:
    """The ratchet controller (`sloFeedback.controller: ratchet`), which this file pins; the band
    loop, the default, has its own tests (test_slo_loop.py)."""
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 60, "targetSmActive": 0.6}
    feedback = {"controller": "ratchet", **kw.pop("sloFeedback", {})}
    base.update(kw, sloFeedback=feedback)
    return AutoscalingSpec.model_validate(base)


def obs(
    values: list[float],
    *,
    p99: float | None = None,
    latency: LatencyReading | None = None,
    loading: int = 0,
    now: float = NOW,
    panic: list[float] | None = None,
) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(len(values))]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(loading)]
    reading = MetricReading(samples={f"p{i}": PodSample(v, now - 5) for i, v in enumerate(values)})
    if latency is None and p99 is not None:
        latency = LatencyReading(p99_ms=p99, timestamp=now - 5)
    panic_reading = None
    if panic is not None:
        panic_reading = MetricReading(samples={f"p{i}": PodSample(v, now - 1) for i, v in enumerate(panic)})
    return Observation(
        current_replicas=len(pods), pods=pods, metrics=reading, latency=latency, panic_metrics=panic_reading
    )


def run(s: AutoscalingSpec, state: ScalerState, o: Observation, now: float = NOW) -> Any:
    return desired_replicas(s, state, o, now, slo_p99_ms=SLO)


# --------------------------------------------------------------------------- the rule


def test_over_slo_cuts_the_target_and_scales_up_on_it() -> None:
    s = spec()
    d = run(s, ScalerState(), obs([0.6] * 10, p99=55.0))
    assert d.effective_target == pytest.approx(0.54)  # 0.6 * (1 - 10 %)
    assert d.state.effective_target == pytest.approx(0.54)
    # On the old target 10 pods at 0.6 are inside the band; on 0.54 they need ceil(6 / 0.54) = 12.
    assert d.desired_replicas == 12
    assert "p99 55.0 ms > SLO 40 ms" in d.message
    plain = desired_replicas(s, ScalerState(), obs([0.6] * 10), NOW)
    assert plain.desired_replicas == 10 and plain.effective_target == pytest.approx(0.6)


def test_at_most_one_cut_per_interval_and_none_while_overloaded() -> None:
    s = spec()
    d1 = run(s, ScalerState(), obs([0.6] * 10, p99=55.0))
    d2 = run(s, d1.state, obs([0.6] * 10, p99=55.0, now=NOW + 15), NOW + 15)
    assert d2.effective_target == pytest.approx(0.54)  # cut 15 s ago: held
    d3 = run(s, d2.state, obs([0.6] * 10, p99=55.0, now=NOW + 60), NOW + 60)
    assert d3.effective_target == pytest.approx(0.54 * 0.9)
    # After a cut, the next one waits until the replica count it led to serves: the p99 has not
    # seen that capacity (it serves a pod start later), so a cut now would learn the start-up lag.
    ordered = d3.state.slo_cut_replicas
    assert ordered is not None and ordered > 10
    starting = run(s, d3.state, obs([0.6] * 10, p99=55.0, loading=ordered - 10, now=NOW + 120), NOW + 120)
    assert starting.effective_target == pytest.approx(0.54 * 0.9)
    assert starting.desired_replicas >= ordered  # and the pool still does not scale down
    d4 = run(s, starting.state, obs([0.6] * ordered, p99=55.0, now=NOW + 135), NOW + 135)
    assert d4.effective_target == pytest.approx(0.54 * 0.81)  # all Ready, still over: the next cut
    # Pods added later (a rising load) do not hold it once the ordered count serves.
    more = run(s, d4.state, obs([0.6] * d4.state.slo_cut_replicas, p99=55.0, loading=3, now=NOW + 200), NOW + 200)
    assert more.effective_target == pytest.approx(0.54 * 0.729)
    # The first cut does not wait for starting pods (nothing was cut yet to wait for).
    first = run(s, ScalerState(), obs([0.6] * 10, p99=55.0, loading=2))
    assert first.effective_target == pytest.approx(0.54)
    # Overloaded (queued work): the queue sizes the pool; the target is neither cut nor raised.
    queued = obs([0.95] * 10, p99=900.0, now=NOW + 200)
    queued = Observation(
        current_replicas=10,
        pods=queued.pods,
        metrics=queued.metrics,
        latency=queued.latency,
        queue=MetricReading(samples={f"p{i}": PodSample(12.0, NOW + 195) for i in range(10)}),
    )
    d5 = run(s, d4.state, queued, NOW + 200)
    assert d5.effective_target == pytest.approx(d4.effective_target)
    assert "overloaded" in d5.message and d5.desired_replicas > 10
    saturated = run(s, d4.state, obs([0.95] * 10, p99=900.0, now=NOW + 200), NOW + 200)
    assert saturated.effective_target == pytest.approx(d4.effective_target)


def test_no_cut_while_the_p99_window_still_holds_an_overload() -> None:
    """A p99 over the SLO just after a flash crowd was queued says capacity was short (the queue
    rule sized it), not that the headroom target is too high: no cut until a whole query window
    (decreaseIntervalSeconds) has passed without an overloaded sync."""
    s = spec()
    o = obs([0.95] * 10, p99=900.0)
    queued = Observation(
        current_replicas=10,
        pods=o.pods,
        metrics=o.metrics,
        latency=o.latency,
        queue=MetricReading(samples={f"p{i}": PodSample(12.0, NOW - 5) for i in range(10)}),
    )
    d1 = run(s, ScalerState(), queued)
    assert d1.effective_target == pytest.approx(0.6) and d1.state.slo_last_overloaded == NOW
    # 45 s on the queue is gone and the pods idle, but the p99's window still holds the crowd.
    d2 = run(s, d1.state, obs([0.5] * 10, p99=900.0, now=NOW + 45), NOW + 45)
    assert d2.effective_target == pytest.approx(0.6)
    assert "overloaded within the query's window" in d2.message
    assert d2.state.slo_last_overloaded == NOW  # remembered, not refreshed by a calm sync
    # A whole window without an overload: an over-SLO p99 now is about headroom, and cuts.
    d3 = run(s, d2.state, obs([0.5] * 10, p99=55.0, now=NOW + 60), NOW + 60)
    assert d3.effective_target == pytest.approx(0.54)


def test_target_never_below_the_floor() -> None:
    s = spec(sloFeedback={"minTargetFraction": 0.7})
    state, t = ScalerState(), NOW
    for _ in range(20):
        d = run(s, state, obs([0.3] * 4, p99=500.0, now=t), t)
        state, t = d.state, t + 60
    assert d.effective_target == pytest.approx(0.42)  # 0.7 * 0.6
    assert "at its floor" in d.message


def test_creeps_back_only_after_a_whole_window_well_under() -> None:
    s = spec(sloFeedback={"recoverSeconds": 300})
    state = ScalerState(effective_target=0.45)
    t = NOW
    # Near the SLO (above 0.7 x 40 = 28 ms): never creeps back, however long (it is cut instead,
    # down to the floor 0.3), and the creep-back clock does not run.
    prev = 0.45
    for _ in range(30):
        d = run(s, state, obs([0.4] * 6, p99=35.0, now=t), t)
        assert d.effective_target <= prev + 1e-12 and d.state.slo_good_since is None
        prev, state, t = d.effective_target, d.state, t + 15
    low = prev
    assert low == pytest.approx(0.3)
    # Well under: after 300 s one step of 5 % of 0.6 = 0.03, then another whole window.
    seen = []
    for _ in range(45):
        d = run(s, state, obs([0.4] * 6, p99=20.0, now=t), t)
        seen.append((t, d.effective_target))
        state, t = d.state, t + 15
    start = seen[0][0]
    for when, target in seen:
        steps = int((when - start) // 300)
        assert target == pytest.approx(min(0.6, low + 0.03 * steps))


def test_near_the_slo_cuts_before_the_first_violation() -> None:
    """The warm start: a pool whose p99 already uses most of the SLO has its target cut."""
    s = spec()
    # 10 pods at 0.6 (on target), p99 30 ms: over 0.7 x 40 = 28 ms, under the SLO.
    d = run(s, ScalerState(), obs([0.6] * 10, p99=30.0))
    assert d.effective_target == pytest.approx(0.54) and d.desired_replicas == 12
    assert "near SLO" in d.message
    # Not over the SLO: no scale-down hold starts, and a cut waits for the interval as above.
    assert d.state.slo_last_over is None
    again = run(s, d.state, obs([0.6] * 12, p99=30.0, now=NOW + 15), NOW + 15)
    assert again.effective_target == pytest.approx(0.54)
    # Below the target too: p99 does not fall as the load per pod rises, so at the target it would
    # be nearer still.
    below = run(s, ScalerState(), obs([0.45] * 10, p99=30.0))
    assert below.effective_target == pytest.approx(0.54)
    # Well under (<= 0.7 x 40 = 28 ms): no cut.
    assert run(s, ScalerState(), obs([0.6] * 10, p99=27.0)).effective_target == pytest.approx(0.6)
    # Without an SM reading nothing is cut either.
    none = run(
        s,
        ScalerState(),
        Observation(
            current_replicas=2,
            pods=[],
            metrics=MetricReading.unavailable("x"),
            latency=LatencyReading(p99_ms=30.0, timestamp=NOW - 5),
        ),
    )
    assert none.effective_target == pytest.approx(0.6)


def test_p99_off_its_floor_scales_up_without_the_tolerance_band() -> None:
    """4 pods at SM 0.63 on a 0.6 target: ratio 1.05, inside HPA's 10 % band, needs ceil(4.2) = 5."""
    s = spec(sloFeedback={"recoverBelow": 0.8})  # 22 ms is neither near nor over: the target stays 0.6
    plain = run(s, ScalerState(), obs([0.63] * 4, p99=19.0))  # p99 under 0.5 x SLO: the band applies
    assert plain.desired_replicas == 4 and plain.effective_target == pytest.approx(0.6)
    eager = run(s, ScalerState(), obs([0.63] * 4, p99=22.0))  # over 0.5 x 40 = 20 ms
    assert eager.desired_replicas == 5 and eager.effective_target == pytest.approx(0.6)
    # Scale-down keeps its band: 4 pods at 0.56 (ratio 0.93) stay at 4 either way.
    assert run(s, ScalerState(), obs([0.56] * 4, p99=22.0)).desired_replicas == 4
    # No latency reading: today's SM path, the band applies.
    assert desired_replicas(s, ScalerState(), obs([0.63] * 4), NOW).desired_replicas == 4
    off = spec(sloFeedback={"recoverBelow": 0.8, "eagerScaleUpAbove": 1.0})
    assert run(off, ScalerState(), obs([0.63] * 4, p99=22.0)).desired_replicas == 4


def test_no_scale_down_for_the_hold_after_an_over_slo_p99() -> None:
    s = spec(stabilizationSeconds={"down": 0}, sloFeedback={"scaleDownHoldSeconds": 300})
    over = run(s, ScalerState(), obs([0.1] * 8, p99=48.0))
    assert over.state.slo_last_over == NOW
    # 100 s later the p99 is fine and the pods idle: still held.
    held = run(s, over.state, obs([0.1] * 8, p99=20.0, now=NOW + 100), NOW + 100)
    assert held.desired_replicas == 8
    assert held.condition(SCALING_LIMITED).reason == "LatencyOverSlo"
    assert "scaleDownHoldSeconds=300" in held.condition(SCALING_LIMITED).message
    # Once the hold has run out it scales down.
    later = run(s, held.state, obs([0.1] * 8, p99=20.0, now=NOW + 301), NOW + 301)
    assert later.desired_replicas < 8
    # Scale-up is never held.
    up = run(s, over.state, obs([0.9] * 8, p99=20.0, now=NOW + 100), NOW + 100)
    assert up.desired_replicas > 8
    # A hold of 0 turns it off.
    s0 = spec(stabilizationSeconds={"down": 0}, sloFeedback={"scaleDownHoldSeconds": 0})
    d0 = run(s0, over.state, obs([0.1] * 8, p99=20.0, now=NOW + 100), NOW + 100)
    assert d0.desired_replicas < 8


def test_over_slo_blocks_scale_down() -> None:
    s = spec(stabilizationSeconds={"down": 0})
    low = obs([0.1] * 8, p99=48.0)
    d = run(s, ScalerState(), low)
    assert d.desired_replicas == 8
    assert d.condition(SCALING_LIMITED).reason == "LatencyOverSlo"
    # The same pods with a p99 under the SLO scale down.
    d = run(s, ScalerState(), obs([0.1] * 8, p99=25.0))
    assert d.desired_replicas < 8


@pytest.mark.parametrize(
    "latency",
    [
        LatencyReading.unavailable("HTTP 503"),
        LatencyReading(p99_ms=float("nan"), timestamp=NOW),
        LatencyReading(p99_ms=None, timestamp=NOW),
        LatencyReading(p99_ms=90.0, timestamp=NOW - 3600),  # stale
    ],
)
def test_unavailable_latency_holds_the_target_and_is_never_low(latency: LatencyReading) -> None:
    s = spec(sloFeedback={"recoverSeconds": 15})
    state = ScalerState(effective_target=0.5, slo_good_since=NOW - 10_000)
    d = run(s, state, obs([0.5] * 6, latency=latency))
    assert d.effective_target == pytest.approx(0.5)  # neither cut nor crept back
    assert d.state.slo_good_since is None  # and the creep-back clock restarts
    assert d.p99_ms is None


def test_disabled_feedback_scales_on_target_sm_active() -> None:
    s = spec(sloFeedback={"enabled": False})
    d = run(s, ScalerState(effective_target=0.4), obs([0.6] * 10, p99=90.0))
    assert d.effective_target == pytest.approx(0.6) and d.desired_replicas == 10


def test_learned_target_is_clamped_to_a_changed_spec() -> None:
    d = run(spec(targetSmActive=0.5), ScalerState(effective_target=0.58), obs([0.5] * 4, p99=25.0))
    assert d.effective_target == pytest.approx(0.5)
    d = run(spec(targetSmActive=0.9), ScalerState(effective_target=0.2), obs([0.5] * 4, p99=25.0))
    assert d.effective_target == pytest.approx(0.45)  # floor 0.5 x 0.9


# --------------------------------------------------------------------------- properties

feedback_specs = st.builds(
    lambda target, frac, pct, interval, below, recover: spec(
        targetSmActive=target,
        sloFeedback={
            "minTargetFraction": frac,
            "decreasePercent": pct,
            "decreaseIntervalSeconds": interval,
            "recoverBelow": below,
            "recoverSeconds": recover,
        },
        stabilizationSeconds={"down": 0},
    ),
    st.floats(0.1, 1.0),
    st.floats(0.05, 1.0),
    st.integers(1, 50),
    st.integers(0, 120),
    st.floats(0.1, 1.0),
    st.integers(15, 600),
)
step = st.tuples(
    st.lists(st.floats(0, 1), min_size=1, max_size=12),  # SM per Ready pod
    st.one_of(st.none(), st.floats(0, 400)),  # p99 (None: unavailable)
    st.integers(0, 3),  # pods still loading
)


@settings(max_examples=80, deadline=None)
@given(s=feedback_specs, steps=st.lists(step, min_size=1, max_size=25), start=st.one_of(st.none(), st.floats(0, 1)))
def test_property_effective_target_bounded_falls_over_slo_never_rises_then(
    s: AutoscalingSpec, steps: list[tuple[list[float], float | None, int]], start: float | None
) -> None:
    floor, base = target_bounds(s)
    state = ScalerState(effective_target=start)
    prev = min(base, max(floor, start)) if start is not None else base
    t = NOW
    saturated_at: float | None = None  # the last sync whose pods were saturated (overloaded: no queue here)
    for values, p99, loading in steps:
        if sum(values) / len(values) >= SATURATED_SM_ACTIVE:
            saturated_at = t
        latency = LatencyReading(p99_ms=p99, timestamp=t) if p99 is not None else LatencyReading.unavailable("down")
        o = obs(values, latency=latency, loading=loading, now=t)
        d = run(s, state, o, t)
        target = d.effective_target
        assert floor - 1e-12 <= target <= base + 1e-12
        if p99 is not None and p99 > SLO:
            assert target <= prev + 1e-12  # never rises while over the SLO
            assert d.desired_replicas >= min(o.current_replicas, s.max_replicas)  # no scale-down
            ordered = state.slo_cut_replicas
            cut_due = state.slo_last_decrease is None or (
                t - state.slo_last_decrease >= s.slo_feedback.decrease_interval_seconds
                and (ordered is None or len(values) >= min(ordered, len(values) + loading))
            )
            # Not while the p99's query window (decreaseIntervalSeconds) still holds an overload.
            calm = saturated_at is None or t - saturated_at >= s.slo_feedback.decrease_interval_seconds
            if cut_due and calm and max(values) < 0.9 and prev > floor + 1e-12:  # not saturated (no queue here)
                assert target < prev  # it falls
        elif p99 is not None and p99 > s.slo_feedback.recover_below * SLO:
            pass  # near the SLO: may be cut (the warm start), never raised (asserted below)
        else:
            assert target >= prev - 1e-12  # only the over-SLO and near-SLO branches cut
        if p99 is not None and p99 > s.slo_feedback.recover_below * SLO:
            assert target <= prev + 1e-12  # never rises near or over the SLO
        last_over = state.slo_last_over if not (p99 is not None and p99 > SLO) else t
        if last_over is not None and t - last_over < s.slo_feedback.scale_down_hold_seconds:
            assert d.desired_replicas >= min(o.current_replicas, s.max_replicas)  # the hold after a miss
        if p99 is None:
            assert target == pytest.approx(prev)
        prev, state, t = target, d.state, t + 15


@settings(max_examples=80, deadline=None)
@given(
    s=feedback_specs,
    values=st.lists(st.one_of(st.none(), st.floats(0, 1)), max_size=12),
    loading=st.integers(0, 3),
    history=st.lists(st.tuples(st.floats(-600, 0), st.integers(0, 60)), max_size=8),
)
def test_property_missing_latency_leaves_the_sm_path_as_it_was(
    s: AutoscalingSpec, values: list[float | None], loading: int, history: list[tuple[float, int]]
) -> None:
    """No latency reading, or an unavailable one: the same decision as the SM path alone."""
    pods = [PodState(f"p{i}", ready=True) for i in range(len(values))]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(loading)]
    reading = MetricReading(samples={f"p{i}": PodSample(v, NOW - 5) for i, v in enumerate(values) if v is not None})
    base = Observation(current_replicas=len(pods), pods=pods, metrics=reading)
    state = ScalerState(recommendations=tuple((NOW + t, n) for t, n in history))
    reference = desired_replicas(s, state, base, NOW)
    for latency, slo in ((None, SLO), (LatencyReading.unavailable("timeout"), SLO), (LatencyReading(90.0, NOW), None)):
        o = Observation(current_replicas=len(pods), pods=pods, metrics=reading, latency=latency)
        d = desired_replicas(s, state, o, NOW, slo_p99_ms=slo)
        assert (d.desired_replicas, d.recommendation, d.reason) == (
            reference.desired_replicas,
            reference.recommendation,
            reference.reason,
        )
        assert d.state.recommendations == reference.state.recommendations
        assert d.effective_target == s.target_sm_active and d.state.effective_target is None


states = st.builds(
    ScalerState,
    recommendations=st.lists(st.tuples(st.floats(0, 1e9), st.integers(0, 10_000)), max_size=5).map(tuple),
    events=st.lists(st.tuples(st.floats(0, 1e9), st.integers(-100, 100)), max_size=5).map(tuple),
    backlog_empty_since=st.one_of(st.none(), st.floats(0, 1e9)),
    queue=st.one_of(st.none(), st.tuples(st.floats(0, 1e9), st.floats(0, 1e4))),
    effective_target=st.one_of(st.none(), st.floats(0.01, 1)),
    slo_good_since=st.one_of(st.none(), st.floats(0, 1e9)),
    slo_last_decrease=st.one_of(st.none(), st.floats(0, 1e9)),
    panic_until=st.one_of(st.none(), st.floats(0, 1e9)),
    backlog=st.one_of(
        st.none(), st.tuples(st.floats(0, 1e9), st.floats(0, 1e6), st.one_of(st.none(), st.integers(0, 10_000)))
    ),
    slo_last_over=st.one_of(st.none(), st.floats(0, 1e9)),
    slo_cut_replicas=st.one_of(st.none(), st.integers(0, 10_000)),
    slo_last_overloaded=st.one_of(st.none(), st.floats(0, 1e9)),
    ramp_forecasts=st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1e3), st.floats(0, 1e3)), max_size=5).map(tuple),
    ramp_skill=st.one_of(st.none(), st.floats(0, 2)),
    demand_peaks=st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1e3)), max_size=5).map(tuple),
    demand_steps=st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1e3), st.floats(0, 1e3)), max_size=5).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(state=states)
def test_property_state_round_trips_through_json(state: ScalerState) -> None:
    import json

    assert ScalerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


@pytest.mark.parametrize(
    "bad",
    [
        {"effectiveTarget": "x"},
        {"effectiveTarget": math.inf},
        {"panicUntil": [1]},
        {"sloLastOver": "soon"},
        {"sloCutReplicas": "many"},
        {"sloLastOverloaded": "lately"},
        {"backlog": [1.0, 2.0, -3]},
        {"backlog": [1.0, 2.0, 3, 4]},
        {"backlog": [1.0]},
    ],
)
def test_malformed_state_is_forgotten_not_fatal(bad: dict[str, Any]) -> None:
    assert ScalerState.from_dict(bad) == ScalerState()


def test_a_restart_keeps_what_the_feedback_learned() -> None:
    import json

    s = spec()
    d = run(s, ScalerState(), obs([0.6] * 10, p99=55.0))
    restored = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))
    again = run(s, restored, obs([0.6] * 12, p99=35.0, now=NOW + 15), NOW + 15)
    assert again.effective_target == pytest.approx(0.54)


# --------------------------------------------------------------------------- panic mode


def test_panic_applies_the_short_window_at_once_and_blocks_scale_down() -> None:
    s = spec(panic={"enabled": True}, stabilizationSeconds={"down": 0}, maxReplicas=60)
    # The sync's mean is on target; the last 6 s are saturated with a queue-free burst: 4 pods at
    # 0.95 -> at least 2 x 4 (saturation rule) -> panic; HPA's rate policy would allow +4 only.
    burst = obs([0.6] * 4, panic=[0.95] * 4)
    d = desired_replicas(s, ScalerState(), burst, NOW)
    assert d.panicking and d.desired_replicas >= 8 and d.reason == "Panic"
    assert d.state.panic_until == NOW + 60
    calm = desired_replicas(s, d.state, obs([0.1] * 8, panic=[0.1] * 8, now=NOW + 30), NOW + 30)
    assert calm.panicking and calm.desired_replicas == 8
    assert calm.condition(SCALING_LIMITED).reason == "Panic"
    over = desired_replicas(s, calm.state, obs([0.1] * 8, panic=[0.1] * 8, now=NOW + 61), NOW + 61)
    assert not over.panicking and over.desired_replicas < 8


def test_panic_off_by_default_ignores_the_short_window() -> None:
    s = spec()
    d = desired_replicas(s, ScalerState(), obs([0.6] * 4, panic=[0.95] * 4), NOW)
    assert not d.panicking and d.desired_replicas == 4


@settings(max_examples=60, deadline=None)
@given(
    stable=st.lists(st.floats(0, 1), min_size=1, max_size=10),
    short=st.floats(0, 1),
    later=st.lists(st.floats(0, 1), min_size=1, max_size=8),
)
def test_property_no_scale_down_while_panicking(stable: list[float], short: float, later: list[float]) -> None:
    s = spec(panic={"enabled": True, "holdSeconds": 120}, stabilizationSeconds={"down": 0})
    d = desired_replicas(s, ScalerState(), obs(stable, panic=[short] * len(stable)), NOW)
    state, current, t = d.state, d.desired_replicas, NOW
    for v in later:
        t += 15
        o = obs([v] * current, panic=[v] * current, now=t)
        d = desired_replicas(s, state, o, t)
        if d.panicking:
            assert d.desired_replicas >= current
        state, current = d.state, d.desired_replicas


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"sloFeedback": {"minTargetFraction": 0}}, "minTargetFraction"),
        ({"sloFeedback": {"decreasePercent": 0}}, "decreasePercent"),
        ({"sloFeedback": {"recoverBelow": 1.5}}, "recoverBelow"),
        ({"sloFeedback": {"recoverSeconds": 1}}, "recoverSeconds"),
        ({"sloFeedback": {"scaleDownHoldSeconds": -1}}, "scaleDownHoldSeconds"),
        ({"sloFeedback": {"eagerScaleUpAbove": 0}}, "eagerScaleUpAbove"),
        ({"panic": {"threshold": 1.0}}, "threshold"),
        ({"panic": {"windowSeconds": 0}}, "windowSeconds"),
        ({"metrics": {"latency": {"query": ""}}}, "query"),
        ({"sloFeedback": {"decreasPercent": 5}}, "decreasPercent"),
    ],
)
def test_bad_feedback_and_panic_fields_are_rejected_by_name(block: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        spec(**block)
    assert field in str(err.value)


# --------------------------------------------------------------------------- the history around a backlog


def queued_obs(sm: float, queue_s: float, n: int, loading: int = 0, now: float = NOW) -> Observation:
    o = obs([sm] * n, loading=loading, now=now)
    q = MetricReading(samples={f"p{i}": PodSample(queue_s, now - 1) for i in range(n)})
    return Observation(current_replicas=n + loading, pods=o.pods, metrics=o.metrics, queue=q)


def test_capacity_ordered_to_drain_a_backlog_is_not_held_for_the_down_window() -> None:
    """A one-off backlog: the drain term orders capacity at once, but the down window remembers
    what the arrivals needed, so once the backlog is gone the pool comes back to that."""
    s = spec(targetSmActive=0.5, stabilizationSeconds={"down": 900})
    # 10 saturated pods with 120 s of queued work each, the backlog still growing (1 s per s):
    # arrivals 19; the queue as it will be a drainSeconds on (180 s each) emptied within
    # drainSeconds, served flat out (0.9).
    state = ScalerState(queue=(NOW - 15, 105.0), backlog=(NOW - 15, 1050.0, 10))
    d = desired_replicas(s, state, queued_obs(0.95, 120.0, 10), NOW)
    want = d.recommendation
    assert want == math.ceil((19 + 9.5 * 180 / 60) / 0.9) == 53
    remembered = d.state.recommendations[-1][1]
    # Arrivals = SM usage x (1 + growth of the total backlog per pod) = 9.5 x 2 = 19 -> 38 at 0.5.
    assert remembered == 38 < want
    # The backlog drains (new pods Ready, queue shrinking): arrivals are what SM shows minus the drain.
    n = want
    d2 = desired_replicas(s, d.state, queued_obs(0.6, 1.0, n, now=NOW + 15), NOW + 15)
    assert d2.state.recommendations[-1][1] < n
    # Queue gone, pods idle: the pool falls to the highest remembered need, not to the drain's count.
    d3 = desired_replicas(s, d2.state, queued_obs(0.2, 0.0, n, now=NOW + 30), NOW + 30)
    assert d3.desired_replicas == max(r for _, r in d3.state.recommendations) == remembered < n


def test_a_draining_backlog_orders_no_capacity_beyond_the_arrivals() -> None:
    """Pods saturated while they drain a shrinking backlog (a flash crowd's tail): SM active reads
    the drain, and replicas ordered now would start after it is over."""
    s = spec(targetSmActive=0.5)
    # 20 pods at 0.95 with 1 s queued each (20 pod-seconds), down from 200 pod-seconds 15 s ago.
    state = ScalerState(queue=(NOW - 15, 10.0), backlog=(NOW - 15, 200.0, 20))
    d = desired_replicas(s, state, queued_obs(0.95, 1.0, 20), NOW)
    # Arrivals: 19 x (1 - 180 / (15 x 20)) = 7.6 in SM-active terms, 16 replicas at 0.5: no scale-up.
    assert d.desired_replicas == 20 and d.reason == "CapacityPending"
    # The same reading with the backlog growing is an overload: the queue sizes it.
    growing = ScalerState(queue=(NOW - 15, 0.5), backlog=(NOW - 15, 10.0, 20))
    d2 = desired_replicas(s, growing, queued_obs(0.95, 1.0, 20), NOW)
    assert d2.desired_replicas > 20


def test_a_draining_backlog_is_remembered_as_what_arrives_not_as_the_drain() -> None:
    """The ramp lead's earlier peak is read in the minute peaks of what arrives: while pods drain a
    backlog, SM active reads the drain too. A pool that caught up with a crowd's first minutes read
    16.4 in SM-active terms where 13.3 arrived, and the remembered 16.4 let the lead order 28
    replicas at every crest of the wave after it, where 23 served (`bench/autoscaling_seeds.py
    --family wave`, seed 600). The levels a release keeps still read what the pods served."""
    s = spec(targetSmActive=0.5)
    # As above: 20 pods at 0.95 draining 200 -> 20 pod-seconds in 15 s, arrivals 7.6.
    state = ScalerState(queue=(NOW - 15, 10.0), backlog=(NOW - 15, 200.0, 20))
    d = desired_replicas(s, state, queued_obs(0.95, 1.0, 20), NOW)
    minute = NOW - NOW % 60
    assert d.state.arrival_peaks == ((minute, pytest.approx(19 * (1 - 180 / (15 * 20)))),)
    assert d.state.demand_peaks[-1][1] > 19  # SM usage, with the queue's excess
    # The next sync, the queue empty: SM active still reads the last seconds of the drain
    # (20 pod-seconds in 15 s of 20 pods), so what arrived is again below it.
    d2 = desired_replicas(s, d.state, queued_obs(0.5, 0.0, 20, now=NOW + 15), NOW + 15)
    assert d2.state.arrival_peaks[-1][1] == pytest.approx(max(7.6, 10 * (1 - 20 / (15 * 20))))
    # No backlog, now or at the last sync: SM usage is what arrives.
    d3 = desired_replicas(s, d2.state, queued_obs(0.4, 0.0, 20, now=NOW + 75), NOW + 75)
    assert d3.state.arrival_peaks[-1] == ((NOW + 75) - (NOW + 75) % 60, pytest.approx(8.0))
    assert d3.state.demand_peaks[-1] == d3.state.arrival_peaks[-1]
    back = ScalerState.from_dict(json.loads(json.dumps(d3.state.to_dict())))
    assert back == d3.state


def test_a_state_from_before_the_arrival_peaks_reads_its_earlier_peak_in_the_demand_peaks() -> None:
    s = spec(targetSmActive=0.5)
    earlier = ((NOW - 600.0, 4.0),)
    d = desired_replicas(s, ScalerState(demand_peaks=earlier), queued_obs(0.4, 0.0, 20), NOW)
    assert d.state.arrival_peaks == (*earlier, (NOW - NOW % 60, pytest.approx(8.0)))


def partly_reported(sm: float, queue_s: float, ready: int, reporting: int, pending: int, now: float) -> Observation:
    """`ready` Ready pods of which the first `reporting` have fresh SM and queue samples."""
    pods = [PodState(f"p{i}", ready=True) for i in range(ready)]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(pending)]
    samples = {f"p{i}": PodSample(sm, now - 1) for i in range(reporting)}
    queue = MetricReading(samples={f"p{i}": PodSample(queue_s, now - 1) for i in range(reporting)})
    return Observation(current_replicas=ready + pending, pods=pods, metrics=MetricReading(samples=samples), queue=queue)


def test_more_pods_reporting_a_draining_backlog_is_no_new_demand() -> None:
    """New pods turn Ready during a drain and report one by one: the backlog's total spans the Ready
    pods, so more pods reporting it is not read as arrivals (summed over the reporting pods alone,
    14 x 25 s then 28 x 12 s looked flat, and the pool ordered 6 more replicas after the crowd)."""
    s = spec(targetSmActive=0.6)
    first = desired_replicas(s, ScalerState(), partly_reported(0.95, 25.0, 28, 14, 7, NOW), NOW)
    d = desired_replicas(s, first.state, partly_reported(0.95, 12.0, 33, 28, 2, NOW + 15), NOW + 15)
    # Backlog 28 x 25 = 700 pod-seconds, then 33 x 12 = 396: arrivals 26.6 x (1 - 304 / (15 x 33)),
    # about 10 in SM-active terms, 18 replicas: the 35 on their way are enough.
    assert d.desired_replicas == 35 and d.reason == "CapacityPending"


def test_without_a_queue_reading_the_history_records_the_recommendation() -> None:
    s = spec(targetSmActive=0.5)
    d = desired_replicas(s, ScalerState(), obs([0.95] * 4, loading=4), NOW)
    assert d.reason == "CapacityPending" and d.state.recommendations[-1][1] == d.recommendation == 8


def test_pods_that_turned_ready_during_a_backlog_are_no_new_demand() -> None:
    """A crowd's backlog read over a sync in which the first ordered pods came up: the pool served
    that interval partly at its old size, so what the new pods served is not read as arrivals.
    Taken at today's count, a flat backlog across 15 -> 30 saturated pods read 28.5 arriving in
    SM-active terms, and the pool ordered 48 replicas for a crowd 36 served
    (`bench/autoscaling_sweeps.py start-ups`, the 70 s start-up's flash hour)."""
    s = spec(targetSmActive=0.6)
    # 15 Ready pods with 20 s queued each, then 30 with 10 s each: the total flat at 300 pod-seconds.
    now = queued_obs(0.95, 10.0, 30, loading=5)
    grown = ScalerState(queue=(NOW - 15, 20.0), backlog=(NOW - 15, 300.0, 15))
    d = desired_replicas(s, grown, now, NOW)
    # Served over the interval: 28.5 x (15 + 30) / (2 x 30) = 21.4 in SM-active terms, 36 at 0.6.
    assert d.recommendation == math.ceil(28.5 * 0.75 / 0.6) == 36
    # The same reading over a pool that served the whole interval at 30 is an overload at 28.5.
    steady = ScalerState(queue=(NOW - 15, 10.0), backlog=(NOW - 15, 300.0, 30))
    assert desired_replicas(s, steady, now, NOW).recommendation == math.ceil(28.5 / 0.6) == 48
    # A state written before the count was kept reads it as today's, as it did.
    old = ScalerState.from_dict({"queue": [NOW - 15, 20.0], "backlog": [NOW - 15, 300.0]})
    assert old.backlog == (NOW - 15, 300.0, None)
    assert old.to_dict()["backlog"] == [NOW - 15, 300.0]  # written back as it was read, no null
    assert desired_replicas(s, old, now, NOW).recommendation == 48
    assert d.state.backlog == (NOW, 300.0, 30)
