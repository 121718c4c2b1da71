"""The pure scaling policy: HPA algorithm plus the GPU-fleet additions."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.policy import (
    METRICS_UNAVAILABLE,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    Decision,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    PrecomputeSignals,
    ScalerState,
    apply_conditions,
    desired_replicas,
    pod_states,
)

NOW = 10_000.0


def spec(**kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 50, "targetSmActive": 0.5}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def pspec(**kw: Any) -> PrecomputeAutoscalingSpec:
    base: dict[str, Any] = {"minReplicas": 0, "maxReplicas": 50, "targetSmActive": 0.5}
    base.update(kw)
    return PrecomputeAutoscalingSpec.model_validate(base)


def obs(
    values: list[float | None],
    *,
    current: int | None = None,
    loading: int = 0,
    age: float = 5.0,
    free_gpus: int | None = None,
    gpus: int = 1,
    error: str | None = None,
    precompute: PrecomputeSignals | None = None,
    now: float = NOW,
) -> Observation:
    """Ready pods with the given SM values (None: no sample), plus `loading` pods still loading the model."""
    pods = [PodState(f"p{i}", ready=True) for i in range(len(values))]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(loading)]
    samples = {f"p{i}": PodSample(v, now - age) for i, v in enumerate(values) if v is not None}
    reading = MetricReading.unavailable(error) if error else MetricReading(samples=samples)
    return Observation(
        current_replicas=len(pods) if current is None else current,
        pods=pods,
        metrics=reading,
        gpus_per_replica=gpus,
        free_gpus=free_gpus,
        precompute=precompute,
    )


def cond(d: Decision, type_: str) -> tuple[str, str]:
    c = d.condition(type_)
    return c.status, c.reason


# --------------------------------------------------------------------------- HPA core


def test_ratio_scales_up_by_ceil_of_current_times_ratio() -> None:
    d = desired_replicas(spec(), ScalerState(), obs([0.9, 0.9, 0.9, 0.9]), NOW)
    # ceil(4 * 0.9 / 0.5) = ceil(7.2) = 8
    assert d.desired_replicas == 8
    assert d.direction == "up"
    assert cond(d, SCALING_ACTIVE) == ("True", "ValidMetricsFound")
    assert cond(d, METRICS_UNAVAILABLE)[0] == "False"
    assert d.metric_value == pytest.approx(0.9)
    assert "4 -> 8" in d.message


def test_no_float_noise_in_ceil() -> None:
    d = desired_replicas(spec(targetSmActive=0.6, tolerance={"up": 0, "down": 0}), ScalerState(), obs([0.6] * 10), NOW)
    assert d.desired_replicas == 10


def test_saturated_pods_at_least_double_once_per_wave() -> None:
    s = spec(targetSmActive=0.6)
    d = desired_replicas(s, ScalerState(), obs([0.95] * 4), NOW)
    assert d.desired_replicas == 8  # ratio alone says ceil(4 * 0.95 / 0.6) = 7
    assert d.reason == "SaturatedSmActive"
    assert desired_replicas(s, ScalerState(), obs([0.95] * 4), NOW, saturation=None).desired_replicas == 7
    # While the new pods load, the same reading does not double again.
    d = desired_replicas(s, d.state, obs([0.95] * 4, loading=4, now=NOW + 15), NOW + 15)
    assert d.desired_replicas == 8 and d.reason == "CapacityPending"
    # A pod without a sample: demand is not known to be saturated.
    assert desired_replicas(s, ScalerState(), obs([0.95] * 3 + [None]), NOW).desired_replicas == 5


def test_inside_tolerance_nothing_changes() -> None:
    s = spec()
    for v in (0.46, 0.5, 0.54):
        d = desired_replicas(s, ScalerState(), obs([v] * 6), NOW)
        assert d.desired_replicas == 6, v
        assert d.reason == "WithinTolerance"


def test_per_direction_tolerance() -> None:
    s = spec(tolerance={"up": 0.5, "down": 0.05}, stabilizationSeconds={"down": 0})
    assert desired_replicas(s, ScalerState(), obs([0.7] * 4), NOW).desired_replicas == 4  # +40 % < 50 %
    d = desired_replicas(s, ScalerState(), obs([0.3] * 4), NOW)  # -40 % > 5 %
    assert d.desired_replicas == 3  # ceil(4 * 0.6)
    s = spec(tolerance={"up": 0.05, "down": 0.5}, stabilizationSeconds={"down": 0})
    assert desired_replicas(s, ScalerState(), obs([0.3] * 4), NOW).desired_replicas == 4
    assert desired_replicas(s, ScalerState(), obs([0.6] * 4), NOW).desired_replicas == 5


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    s = spec()  # 300 s down window
    state = ScalerState()
    d = desired_replicas(s, state, obs([0.5] * 8), NOW)
    state = d.state
    # Load drops: recommendation 2, but the window still holds the recommendation of 8.
    for k in range(1, 40):
        t = NOW + 15 * k
        d = desired_replicas(s, state, obs([0.1] * 8, now=t), t)
        state = d.state
        if 15 * k < 300:
            assert d.desired_replicas == 8, k
        else:
            assert d.desired_replicas == 2, k
            break
    else:
        pytest.fail("never scaled down")


def test_scale_up_window_takes_the_lowest_recommendation() -> None:
    s = spec(stabilizationSeconds={"up": 60, "down": 0})
    d = desired_replicas(s, ScalerState(), obs([0.5] * 4), NOW)
    d = desired_replicas(s, d.state, obs([1.0] * 4, now=NOW + 15), NOW + 15)
    assert d.desired_replicas == 4  # lowest in the last 60 s is 4
    state = d.state
    t = NOW + 15
    while t < NOW + 90:
        t += 15
        d = desired_replicas(s, state, obs([1.0] * 4, now=t), t)
        state = d.state
    assert d.desired_replicas == 8


def test_rate_policy_up_most_permissive_and_period_counts_events() -> None:
    s = spec(
        maxReplicas=100,
        policies={"scaleUp": [{"pods": 4, "periodSeconds": 60}, {"percent": 50, "periodSeconds": 60}]},
    )
    d = desired_replicas(s, ScalerState(), obs([1.0] * 10), NOW)
    # want 20; +4 -> 14, +50 % -> 15: the most permissive is 15
    assert d.desired_replicas == 15
    assert cond(d, SCALING_LIMITED) == ("True", "ScaleUpLimit")
    # 15 s later the period started at 10 replicas: nothing more until it passes.
    d2 = desired_replicas(s, d.state, obs([1.0] * 15, now=NOW + 15), NOW + 15)
    assert d2.desired_replicas == 15
    d3 = desired_replicas(s, d2.state, obs([1.0] * 15, now=NOW + 75), NOW + 75)
    assert d3.desired_replicas > 15


def test_rate_policy_down() -> None:
    s = spec(stabilizationSeconds={"down": 0}, policies={"scaleDown": [{"pods": 1, "periodSeconds": 60}]})
    d = desired_replicas(s, ScalerState(), obs([0.05] * 10), NOW)
    assert d.desired_replicas == 9
    assert cond(d, SCALING_LIMITED) == ("True", "ScaleDownLimit")
    d = desired_replicas(s, d.state, obs([0.05] * 9, now=NOW + 15), NOW + 15)
    assert d.desired_replicas == 9


def test_min_max_bounds() -> None:
    d = desired_replicas(spec(maxReplicas=5), ScalerState(), obs([1.0] * 4), NOW)
    assert d.desired_replicas == 5
    assert cond(d, SCALING_LIMITED) == ("True", "TooManyReplicas")
    d = desired_replicas(spec(minReplicas=3, stabilizationSeconds={"down": 0}), ScalerState(), obs([0.01] * 4), NOW)
    assert d.desired_replicas == 3
    assert cond(d, SCALING_LIMITED) == ("True", "TooFewReplicas")


# --------------------------------------------------------------------------- missing data


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (obs([0.01] * 5, error="connection refused"), "SourceError"),
        (obs([None] * 5), "MetricsMissing"),
        (obs([0.01] * 5, age=61), "MetricsStale"),
        (obs([], loading=5), "NoReadyPods"),
        (obs([45.0] * 5), "MetricsOutOfRange"),  # a percentage where SM active is a fraction
    ],
)
def test_hold_on_missing_or_stale_metrics(observation: Observation, reason: str) -> None:
    d = desired_replicas(spec(stabilizationSeconds={"down": 0}), ScalerState(), observation, NOW)
    assert d.desired_replicas == 5
    assert cond(d, METRICS_UNAVAILABLE) == ("True", reason)
    assert cond(d, SCALING_ACTIVE)[0] == "False"
    assert "holding at 5" in d.message
    assert d.state.recommendations == ()  # a hold is not a recommendation


def test_a_percentage_for_sm_active_names_the_query_and_the_fix() -> None:
    """GPU utilisation in percent in SM active's place would read 45 % as 75x the target and order
    maxReplicas; the pool holds and says which field to change."""
    d = desired_replicas(spec(), ScalerState(), obs([45.0, 52.5, 38.0]), NOW)
    assert d.desired_replicas == 3
    problem = d.condition(METRICS_UNAVAILABLE)
    assert (problem.status, problem.reason) == ("True", "MetricsOutOfRange")
    assert "p0 reads 45" in problem.message
    assert "spec.autoscaling.metrics.prometheus.query" in problem.message and "divide" in problem.message
    # A pod past 1 beside pods in range is a pod without a sample: the others still size the pool.
    d = desired_replicas(spec(), ScalerState(), obs([0.95, 0.95, 45.0]), NOW)
    assert d.desired_replicas > 3 and d.condition(METRICS_UNAVAILABLE).status == "False"
    # A little past 1 (a sampled counter's jitter) is still a reading of a busy pod.
    d = desired_replicas(spec(), ScalerState(), obs([1.04] * 3), NOW)
    assert d.desired_replicas > 3 and d.condition(METRICS_UNAVAILABLE).status == "False"


def test_staleness_follows_the_spec() -> None:
    s = spec(metrics={"staleAfterSeconds": 300}, stabilizationSeconds={"down": 0})
    assert desired_replicas(s, ScalerState(), obs([0.01] * 5, age=200), NOW).desired_replicas < 5


def test_hold_still_honours_min_replicas() -> None:
    d = desired_replicas(spec(minReplicas=4), ScalerState(), obs([None] * 2), NOW)
    assert d.desired_replicas == 4
    # One decision per clause: the bound raised it; no "holding at 2" beside "2 -> 4".
    assert d.message.startswith("scaled up 2 -> 4: raised to minReplicas=4 (wanted 2); "), d.message
    assert "holding" not in d.message


def test_partial_samples_count_as_on_target_for_scale_down() -> None:
    s = spec(stabilizationSeconds={"down": 0})
    # Two pods idle, two without samples (counted as on target 0.5): ratio 0.5 -> 2 pods... not 1.
    d = desired_replicas(s, ScalerState(), obs([0.0, 0.0, None, None]), NOW)
    assert d.desired_replicas == 2


def test_partial_samples_count_as_idle_for_scale_up() -> None:
    # One pod hot, three without samples: usage 1.0 / target 0.5 = 2 <= 4: no scale-up.
    d = desired_replicas(spec(), ScalerState(), obs([1.0, None, None, None]), NOW)
    assert d.desired_replicas == 4


def test_only_ready_model_loaded_pods_count() -> None:
    s = spec(stabilizationSeconds={"down": 0})
    # 2 ready pods at 0.9 + 6 loading: usage 1.8 / 0.5 = 4 <= 8: capacity is on its way.
    d = desired_replicas(s, ScalerState(), obs([0.9, 0.9], loading=6), NOW)
    assert d.desired_replicas == 8
    assert d.reason == "CapacityPending"
    # Idle ready pods do not take loading pods down with them.
    d = desired_replicas(s, ScalerState(), obs([0.05, 0.05], loading=3), NOW)
    assert d.desired_replicas == 1 + 3
    # Ready-but-not-loaded pods do not count as serving.
    o = obs([0.9] * 2)
    o = Observation(
        current_replicas=3, pods=[*o.pods, PodState("x", ready=True, model_loaded=False)], metrics=o.metrics
    )
    assert desired_replicas(s, ScalerState(), o, NOW).desired_replicas == 4


def test_free_gpus_cap_scale_up() -> None:
    d = desired_replicas(spec(), ScalerState(), obs([1.0] * 4, free_gpus=5, gpus=2), NOW)
    # want 8; 5 free GPUs / 2 per replica = 2 more
    assert d.desired_replicas == 6
    assert cond(d, SCALING_LIMITED) == ("True", "InsufficientGPUs")
    # Pods waiting for a node already claim the free GPUs.
    o = obs([1.0] * 4, free_gpus=4, gpus=2)
    o = Observation(
        current_replicas=5,
        pods=[*o.pods, PodState("w", ready=False, scheduled=False)],
        metrics=o.metrics,
        gpus_per_replica=2,
        free_gpus=4,
    )
    assert desired_replicas(spec(), ScalerState(), o, NOW).desired_replicas == 6


def test_apply_conditions_keeps_transition_time_until_a_flip() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    d = desired_replicas(spec(), ScalerState(), obs([0.5] * 3), NOW)
    conds = apply_conditions([], d, t0, observed_generation=3)
    assert {c.type: c.status for c in conds} == {
        SCALING_ACTIVE: "True",
        SCALING_LIMITED: "False",
        METRICS_UNAVAILABLE: "False",
    }
    assert all(c.observed_generation == 3 for c in conds)
    d2 = desired_replicas(spec(), ScalerState(), obs([0.5] * 3, error="down"), NOW)
    conds2 = apply_conditions(conds, d2, t0 + timedelta(minutes=1))
    by = {c.type: c for c in conds2}
    assert by[METRICS_UNAVAILABLE].status == "True"
    assert by[METRICS_UNAVAILABLE].last_transition_time == "2026-01-01T00:01:00Z"
    assert by[SCALING_LIMITED].last_transition_time == "2026-01-01T00:00:00Z"


def test_state_round_trips_as_json() -> None:
    s = spec()
    d = desired_replicas(s, ScalerState(), obs([0.9] * 4), NOW)
    raw = json.loads(json.dumps(d.state.to_dict()))
    assert ScalerState.from_dict(raw) == d.state
    assert ScalerState.from_dict({"recommendations": "garbage"}) == ScalerState()
    assert ScalerState.from_dict(None) == ScalerState()


def test_ranking_service_keeps_its_last_replica() -> None:
    s = spec(minReplicas=0, stabilizationSeconds={"down": 0})
    d = desired_replicas(s, ScalerState(), obs([0.0] * 3), NOW)
    assert d.desired_replicas == 1


def test_history_is_pruned() -> None:
    s = spec()
    state = ScalerState(recommendations=((0.0, 99),), events=((0.0, 5),))
    d = desired_replicas(s, state, obs([0.5] * 4), NOW)
    assert (0.0, 99) not in d.state.recommendations
    assert d.state.events == ()


# --------------------------------------------------------------------------- precompute


def test_precompute_scales_on_backlog() -> None:
    s = pspec(backlogTargetPerReplica=100)
    d = desired_replicas(s, ScalerState(), obs([0.5] * 2, precompute=PrecomputeSignals(backlog=1000)), NOW)
    assert d.desired_replicas == 6  # rate: +4 pods per 15 s
    assert d.reason == "Backlog"
    assert d.signals["backlog"] == 10


def test_precompute_deadline_signal() -> None:
    s = pspec(backlogTargetPerReplica=10_000, deadlineSeconds=60)
    sig = PrecomputeSignals(backlog=10, oldest_item_age_seconds=60)
    d = desired_replicas(s, ScalerState(), obs([0.5] * 2, precompute=sig), NOW)
    # oldest item waited the whole deadline: 2 * 60 / 30 = 4
    assert d.desired_replicas == 4
    assert d.reason == "Deadline"


def test_precompute_takes_max_of_signals() -> None:
    s = pspec(backlogTargetPerReplica=100)
    d = desired_replicas(s, ScalerState(), obs([1.0] * 2, precompute=PrecomputeSignals(backlog=100)), NOW)
    assert d.desired_replicas == 4  # SM says 4, backlog says 1


def test_precompute_zero_after_idle_and_back_on_backlog() -> None:
    s = pspec(idleSecondsBeforeZero=120)
    state = ScalerState()
    t = NOW
    idle = PrecomputeSignals(backlog=0)
    d = desired_replicas(s, state, obs([0.0] * 2, precompute=idle, now=t), t)
    assert d.desired_replicas >= 1  # not idle long enough
    state = d.state
    while t < NOW + 120:
        t += 15
        d = desired_replicas(s, state, obs([0.0] * d.desired_replicas, precompute=idle, now=t), t)
        state = d.state
        if t - NOW < 120:
            assert d.desired_replicas >= 1
    assert d.desired_replicas == 0
    assert d.reason == "Idle"
    # Zero pods, no metrics, a backlog arrives: back up.
    t += 15
    d = desired_replicas(s, state, obs([], precompute=PrecomputeSignals(backlog=5000), now=t), t)
    assert d.desired_replicas >= 1
    assert d.reason == "Backlog"


def test_precompute_stays_at_zero_without_backlog() -> None:
    s = pspec(idleSecondsBeforeZero=0)
    d = desired_replicas(s, ScalerState(), obs([], precompute=PrecomputeSignals(backlog=0)), NOW)
    assert d.desired_replicas == 0
    s = pspec(idleSecondsBeforeZero=600)
    d = desired_replicas(s, ScalerState(), obs([], precompute=PrecomputeSignals(backlog=0)), NOW)
    assert d.desired_replicas == 0
    assert cond(d, METRICS_UNAVAILABLE)[0] == "False"
    assert cond(d, SCALING_ACTIVE) == ("False", "ScaledToZero")


def test_precompute_yields_to_ranker() -> None:
    s = pspec(minReplicas=1, yieldTo="ads-ranker")
    sig = PrecomputeSignals(backlog=100_000, ranker_over_slo=True, ranker_message="p99 80 ms > 40 ms")
    d = desired_replicas(s, ScalerState(), obs([1.0] * 8, precompute=sig), NOW)
    assert d.desired_replicas == 4  # halves, despite a backlog and hot SMs, skipping the 300 s window
    assert d.reason == "YieldingGPUs"
    assert "ads-ranker" in d.message and "p99 80 ms" in d.message
    assert cond(d, SCALING_LIMITED) == ("True", "YieldingGPUs")
    d = desired_replicas(s, d.state, obs([1.0] * 4, precompute=sig, now=NOW + 15), NOW + 15)
    assert d.desired_replicas == 2
    d = desired_replicas(s, d.state, obs([1.0] * 1, precompute=sig, now=NOW + 30), NOW + 30)
    assert d.desired_replicas == 1


def test_precompute_sm_missing_backlog_can_raise_not_lower() -> None:
    s = pspec(backlogTargetPerReplica=100)
    o = obs([0.1] * 4, error="timeout", precompute=PrecomputeSignals(backlog=1000))
    assert desired_replicas(s, ScalerState(), o, NOW).desired_replicas == 8
    o = obs([0.1] * 4, error="timeout", precompute=PrecomputeSignals(backlog=10))
    assert desired_replicas(s, ScalerState(), o, NOW).desired_replicas == 4


def test_precompute_backlog_unknown_blocks_scale_down() -> None:
    s = pspec(stabilizationSeconds={"down": 0})
    d = desired_replicas(s, ScalerState(), obs([0.05] * 4, precompute=PrecomputeSignals()), NOW)
    assert d.desired_replicas == 4


# --------------------------------------------------------------------------- properties

specs = st.builds(
    lambda lo, span, target, tu, td, up, down: spec(
        minReplicas=lo,
        maxReplicas=lo + span,
        targetSmActive=target,
        tolerance={"up": tu, "down": td},
        stabilizationSeconds={"up": up, "down": down},
    ),
    st.integers(0, 5),
    st.integers(1, 40),
    st.floats(0.05, 1.0),
    st.floats(0, 0.5),
    st.floats(0, 0.5),
    st.sampled_from([0, 30, 60]),
    st.sampled_from([0, 60, 300]),
)
values = st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=0, max_size=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=specs, vals=values, loading=st.integers(0, 5), free=st.one_of(st.none(), st.integers(0, 20)))
def test_property_bounds(s: AutoscalingSpec, vals: list[float | None], loading: int, free: int | None) -> None:
    o = obs(vals, loading=loading, free_gpus=free)
    d = desired_replicas(s, ScalerState(), o, NOW)
    assert s.min_replicas <= d.desired_replicas <= s.max_replicas
    if free is not None and d.desired_replicas > max(o.current_replicas, s.min_replicas):
        assert d.desired_replicas - o.current_replicas <= free


@settings(max_examples=60, deadline=None)
@given(
    s=specs,
    vals=values,
    loading=st.integers(0, 5),
    kind=st.sampled_from(["stale", "error", "missing"]),
    history=st.lists(st.tuples(st.floats(-600, 0), st.integers(0, 60)), max_size=10),
)
def test_property_never_scale_down_without_fresh_data(
    s: AutoscalingSpec, vals: list[float | None], loading: int, kind: str, history: list[tuple[float, int]]
) -> None:
    if kind == "stale":
        o = obs(vals, loading=loading, age=s.metrics.stale_after_seconds + 1)
    elif kind == "error":
        o = obs(vals, loading=loading, error="HTTP 503")
    else:
        o = obs([None] * len(vals), loading=loading)
    state = ScalerState(recommendations=tuple((NOW + t, n) for t, n in history))
    d = desired_replicas(s, state, o, NOW)
    if o.current_replicas <= s.max_replicas:
        assert d.desired_replicas >= o.current_replicas
    if o.pods:  # with no pod at all there is nothing to measure (ScaledToZero)
        assert d.condition(METRICS_UNAVAILABLE).status == "True"


@settings(max_examples=50, deadline=None)
@given(
    s=specs,
    n=st.integers(1, 20),
    noise=st.lists(st.floats(-1, 1), min_size=30, max_size=30),
)
def test_property_no_flapping_inside_tolerance(s: AutoscalingSpec, n: int, noise: list[float]) -> None:
    """Metrics that wander inside the tolerance band never move the replica count (the SM rule's band).

    The ramp lead is off here: it acts inside the band by design, on a fitted rise, and only upward;
    `test_ramp_lead.test_property_inside_the_band_only_the_ramp_moves_it_and_only_up` holds it to that.
    """
    s = s.model_copy(update={"ramp_lead": s.ramp_lead.model_copy(update={"enabled": False})})
    n = max(s.min_replicas, min(n, s.max_replicas))
    state = ScalerState()
    t = NOW
    for x in noise:
        band = s.tolerance.up if x > 0 else s.tolerance.down
        v = s.target_sm_active * (1 + 0.999 * band * x)
        d = desired_replicas(s, state, obs([v] * n, now=t), t)
        assert d.desired_replicas == n
        state = d.state
        t += 15


@settings(max_examples=50, deadline=None)
@given(s=specs, n=st.integers(1, 20), lows=st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_property_stabilisation_respected(s: AutoscalingSpec, n: int, lows: list[float]) -> None:
    """Never below the highest recommendation of the down window (nor above the lowest of the up window)."""
    n = max(s.min_replicas, min(n, s.max_replicas))
    state = ScalerState()
    t = NOW
    current = n
    for v in lows:
        d = desired_replicas(s, state, obs([v] * current, now=t), t)
        if d.recommendation is None:
            break
        recs_down = [r for ts, r in d.state.recommendations if ts > t - s.stabilization_seconds.down]
        recs_up = [r for ts, r in d.state.recommendations if ts > t - s.stabilization_seconds.up]
        recs_down.append(d.recommendation)
        recs_up.append(d.recommendation)
        if d.desired_replicas < current:
            assert d.desired_replicas >= min(max(recs_down), current) or d.desired_replicas == s.max_replicas
        if d.desired_replicas > current:
            assert d.desired_replicas <= max(min(recs_up), s.min_replicas)
        state = d.state
        current = d.desired_replicas
        t += 15


def test_pod_states_from_pod_objects() -> None:
    def pod(name: str, **status: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": "n1"}, "status": status}

    ready = {"type": "Ready", "status": "True"}
    loader_done = [{"name": "loader", "state": {"terminated": {"exitCode": 0}}}]
    loader_running = [{"name": "loader", "state": {"running": {}}}]
    pods = [
        pod("a", phase="Running", conditions=[ready], initContainerStatuses=loader_done),
        pod("b", phase="Pending", conditions=[], initContainerStatuses=loader_running),
        pod("c", phase="Running", conditions=[ready, {"type": "gem.dev/ModelLoaded", "status": "False"}]),
        pod("d", phase="Failed", conditions=[]),
        {"metadata": {"name": "e", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"conditions": [ready]}},
        {"metadata": {"name": "f"}, "spec": {}, "status": {"phase": "Pending"}},
        pod("g", phase="Running", conditions=[ready]),
    ]
    states = {p.name: p for p in pod_states(pods)}
    assert set(states) == {"a", "b", "c", "f", "g"}
    assert states["a"].serving
    assert not states["b"].ready and not states["b"].model_loaded and states["b"].scheduled
    assert states["c"].ready and not states["c"].serving
    assert not states["f"].scheduled
    assert states["g"].serving  # no loader and no condition: Ready means loaded


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(0, 3),
    span=st.integers(1, 30),
    n=st.integers(0, 20),
    backlog=st.one_of(st.none(), st.integers(0, 100_000)),
    age=st.one_of(st.none(), st.floats(0, 600)),
    sm_ok=st.booleans(),
    over_slo=st.booleans(),
    empty_for=st.one_of(st.none(), st.floats(0, 2000)),
)
def test_property_precompute(
    lo: int,
    span: int,
    n: int,
    backlog: int | None,
    age: float | None,
    sm_ok: bool,
    over_slo: bool,
    empty_for: float | None,
) -> None:
    s = pspec(minReplicas=lo, maxReplicas=lo + span, idleSecondsBeforeZero=600)
    sig = PrecomputeSignals(backlog=backlog, oldest_item_age_seconds=age, ranker_over_slo=over_slo)
    state = ScalerState(backlog_empty_since=None if empty_for is None else NOW - empty_for)
    o = obs([0.3] * n, precompute=sig) if sm_ok else obs([0.3] * n, error="down", precompute=sig)
    d = desired_replicas(s, state, o, NOW)
    assert lo <= d.desired_replicas <= lo + span
    if over_slo:
        assert d.desired_replicas <= max(n, lo)  # yielding never scales up
    elif not sm_ok and backlog and n <= lo + span:
        assert d.desired_replicas >= n  # SM missing, work queued: never down
    if backlog and not over_slo and n == 0:
        assert d.desired_replicas >= 1  # back from zero on backlog


# --------------------------------------------------------------------------- queue signal (demand beyond SM)


def qobs(
    values: list[float], queue: list[float | None] | None, *, now: float = NOW, age: float = 5.0, **kw: Any
) -> Observation:
    """`obs` plus a queue reading (seconds of queued work per Ready pod; None: no sample)."""
    o = obs(list(values), now=now, age=age, **kw)
    if queue is None:
        return o
    samples = {f"p{i}": PodSample(v, now - age) for i, v in enumerate(queue) if v is not None}
    return Observation(
        current_replicas=o.current_replicas,
        pods=o.pods,
        metrics=o.metrics,
        gpus_per_replica=o.gpus_per_replica,
        free_gpus=o.free_gpus,
        queue=MetricReading(samples=samples),
    )


def test_queue_sizes_demand_beyond_saturation() -> None:
    s = spec(targetSmActive=0.5, metrics={"queue": {"drainSeconds": 60}})
    # 4 pods at 0.95 with 120 s of queued work each. The arrivals need ceil(3.8/0.5) = 8; emptying
    # the queue within 60 s adds 3.8 * 120/60 = 7.6, served flat out: ceil((3.8 + 7.6)/0.9) = 13.
    d = desired_replicas(s, ScalerState(), qobs([0.95] * 4, [120.0] * 4), NOW)
    assert d.recommendation == 13 and d.reason == "QueuedWork"
    assert d.desired_replicas == 8  # default rate policy: +100 % / +4 per 15 s
    assert d.state.queue == (NOW, 120.0)
    # A short queue drains on the capacity the arrivals need at the target: 8.
    short = desired_replicas(s, ScalerState(), qobs([0.95] * 4, [30.0] * 4), NOW)
    assert short.recommendation == 8 == max(math.ceil(3.8 / 0.5), math.ceil(3.8 * 1.5 / 0.9))
    # Without a queue reading the saturation rule can only double.
    assert desired_replicas(s, ScalerState(), obs([0.95] * 4), NOW).recommendation == 8


def test_queue_growth_measures_the_overload() -> None:
    s = spec(targetSmActive=0.5, metrics={"queue": {"drainSeconds": 60}})
    # The queue grew from 60 to 75 s in 15 s: arrivals are twice what the pods serve (growth 1 s/s).
    # Arrivals 3.8 * 2 at the target; with the drain (3.8 * 75/60) at saturation.
    state = ScalerState(queue=(NOW - 15, 60.0))
    d = desired_replicas(s, state, qobs([0.95] * 4, [75.0] * 4), NOW)
    assert d.recommendation == max(math.ceil(3.8 * 2 / 0.5), math.ceil(3.8 * (2 + 75 / 60) / 0.9)) == 16
    # A backlog seen at the last sync too is one that lasts: the drain plans for the queue as it will
    # be a drainSeconds on at this growth (3.8 x 1 s/s more), 18 replicas.
    lasting = ScalerState(queue=(NOW - 15, 60.0), backlog=(NOW - 15, 240.0, 4))
    d = desired_replicas(s, lasting, qobs([0.95] * 4, [75.0] * 4), NOW)
    assert d.recommendation == math.ceil(3.8 * (2 + 75 / 60 + 1) / 0.9) == 18
    # A previous reading older than staleAfterSeconds gives no growth: the drain decides.
    old = ScalerState(queue=(NOW - s.metrics.stale_after_seconds - 1, 60.0))
    no_growth = math.ceil(3.8 * (1 + 75 / 60) / 0.9)
    assert no_growth == 10 > math.ceil(3.8 / 0.5)
    assert desired_replicas(s, old, qobs([0.95] * 4, [75.0] * 4), NOW).recommendation == no_growth
    # A shrinking queue (capacity arrived) is no negative growth.
    shrinking = ScalerState(queue=(NOW - 15, 90.0))
    assert desired_replicas(s, shrinking, qobs([0.95] * 4, [75.0] * 4), NOW).recommendation == no_growth


def test_empty_queue_means_saturation_is_not_overload() -> None:
    s = spec(targetSmActive=0.6)
    # Busy but no queue: demand is what SM shows (ceil(3.8/0.6) = 7), no blind doubling.
    d = desired_replicas(s, ScalerState(), qobs([0.95] * 4, [0.0] * 4), NOW)
    assert d.recommendation == 7 and d.reason == "HighSmActive"


@pytest.mark.parametrize("kind", ["stale", "error", "missing", "disabled-in-obs"])
def test_unusable_queue_is_an_empty_queue(kind: str) -> None:
    s = spec(targetSmActive=0.5)
    base = desired_replicas(s, ScalerState(), qobs([0.2] * 4, [0.0] * 4), NOW)
    if kind == "stale":
        o = qobs([0.2] * 4, [50.0] * 4)
        o = Observation(
            current_replicas=4,
            pods=o.pods,
            metrics=o.metrics,
            queue=MetricReading(samples={f"p{i}": PodSample(50.0, NOW - 1000) for i in range(4)}),
        )
    elif kind == "error":
        o = Observation(
            current_replicas=4, pods=base_pods(4), metrics=obs([0.2] * 4).metrics, queue=MetricReading.unavailable("x")
        )
    elif kind == "missing":
        o = qobs([0.2] * 4, [None] * 4)
    else:
        o = obs([0.2] * 4)
    d = desired_replicas(s, ScalerState(), o, NOW)
    assert d.recommendation == base.recommendation


def base_pods(n: int) -> list[PodState]:
    return [PodState(f"p{i}", ready=True) for i in range(n)]


def test_queue_does_not_bypass_hold_on_stale_sm() -> None:
    s = spec(targetSmActive=0.5)
    o = qobs([0.1] * 4, [100.0] * 4, age=s.metrics.stale_after_seconds + 1)
    d = desired_replicas(s, ScalerState(), o, NOW)
    assert d.desired_replicas == 4 and d.recommendation is None
    assert d.condition(METRICS_UNAVAILABLE).status == "True"


def test_state_with_queue_round_trips() -> None:
    st_ = ScalerState(recommendations=((1.0, 2),), events=(), queue=(3.0, 4.5))
    assert ScalerState.from_dict(json.loads(json.dumps(st_.to_dict()))) == st_
    assert ScalerState.from_dict({"queue": ["x", 1]}) == ScalerState()


@pytest.mark.parametrize(
    "raw",
    [
        '{"recommendations": [[9990, Infinity]]}',  # int(inf): OverflowError
        '{"sloCutReplicas": Infinity}',
        '{"scaleUpPending": [9990, -Infinity]}',
        '{"events": [[Infinity, 1]]}',  # kept, it made every later status patch unwritable
        '{"recommendations": [[NaN, 3]]}',
        '{"queue": [NaN, 2]}',
        '{"backlog": {"depth": 1}}',  # KeyError
        '{"targetLowRun": [NaN, 0.4]}',
        '{"targetLowRun": [9990]}',  # IndexError
        "[[9990, 3]]",  # not an object at all
    ],
)
def test_state_that_is_not_finite_or_not_an_object_is_forgotten(raw: str) -> None:
    """The older JSON-string form of status.scalerState is parsed by Python, which accepts
    NaN and Infinity: such a state reads as a fresh one and the next decision is JSON again."""
    state = ScalerState.from_dict(json.loads(raw))
    assert state == ScalerState()
    d = desired_replicas(spec(), state, obs([0.5] * 4), NOW)
    json.dumps(d.state.to_dict(), allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    s=specs,
    vals=st.lists(st.floats(0, 1), min_size=1, max_size=12),
    queue=st.lists(st.one_of(st.none(), st.floats(0, 600)), min_size=12, max_size=12),
    last=st.one_of(st.none(), st.tuples(st.floats(-120, -1), st.floats(0, 600))),
)
def test_property_queue_only_raises(
    s: AutoscalingSpec, vals: list[float], queue: list[float | None], last: tuple[float, float] | None
) -> None:
    """Against the same reading with every queue empty, queued work never lowers the recommendation."""
    q = queue[: len(vals)]
    state = ScalerState(queue=None if last is None else (NOW + last[0], last[1]))
    with_q = desired_replicas(s, state, qobs(vals, q), NOW)
    empty = desired_replicas(s, ScalerState(), qobs(vals, [0.0] * len(vals)), NOW)
    assert with_q.recommendation is not None and empty.recommendation is not None
    assert with_q.recommendation >= empty.recommendation
    assert s.min_replicas <= with_q.desired_replicas <= s.max_replicas
