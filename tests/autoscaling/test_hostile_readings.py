"""Readings no exporter should send (a percentage for SM active, a queue of 1e308 seconds, an item
1e308 seconds old, NaN, a clock that jumps): over a run of syncs the policy holds or scales, never
raises, stays within its bounds, and the state it carries stays JSON the API server accepts (no
NaN, no Infinity)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling import observation as seen
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState

NOW = 1.7e9
HOSTILE = [float("nan"), float("inf"), -float("inf"), -1.0, 45.0, 1e300, 1.7e308, 1e-300]


def reading(draw: Any) -> float:
    return draw(st.one_of(st.floats(0, 1), st.sampled_from(HOSTILE)))


@st.composite
def syncs(draw: Any) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(5, 20))):
        pods = draw(st.integers(0, 12))
        out.append(
            {
                "step": draw(st.sampled_from([15.0, 15.0, 60.0, -10.0, 3600.0])),
                "sm": [reading(draw) for _ in range(pods)],
                "queue": draw(st.one_of(st.none(), st.floats(0, 120), st.sampled_from(HOSTILE))),
                "p99": draw(st.one_of(st.none(), st.floats(1, 500), st.sampled_from(HOSTILE))),
                "starting": draw(st.integers(0, 3)),
                "backlog": draw(st.one_of(st.none(), st.integers(0, 10**6), st.just(int(1.7e308)))),
                "age": draw(st.one_of(st.none(), st.floats(0, 600), st.sampled_from(HOSTILE))),
                "ranker_over_slo": draw(st.booleans()),
            }
        )
    return out


specs = st.builds(
    lambda lo, span, target, down, idle: AutoscalingSpec.model_validate(
        {
            "minReplicas": lo,
            "maxReplicas": lo + span,
            "targetSmActive": target,
            "stabilizationSeconds": {"down": down},
            "metrics": {"smActiveIdle": idle * target},
        }
    ),
    st.integers(0, 3),
    st.integers(1, 40),
    st.floats(0.1, 0.9),
    st.sampled_from([0, 300, 900]),
    st.sampled_from([0.0, 0.5]),  # of the target: the floor lies below it
)


def observation(sync: dict[str, Any], now: float, precompute: bool = False) -> seen.Observation:
    ready = [seen.PodState(f"p{i}", ready=True) for i in range(len(sync["sm"]))]
    starting = [seen.PodState(f"s{i}", ready=False, model_loaded=False) for i in range(sync["starting"])]
    sm = {p.name: seen.PodSample(v, now - 5) for p, v in zip(ready, sync["sm"], strict=True)}
    queued = None if sync["queue"] is None else {p.name: seen.PodSample(sync["queue"], now) for p in ready}
    return seen.Observation(
        current_replicas=len(ready) + len(starting),
        pods=ready + starting,
        metrics=seen.MetricReading(sm),
        queue=None if queued is None else seen.MetricReading(queued),
        latency=None if sync["p99"] is None else seen.LatencyReading(sync["p99"], now - 3),
        precompute=seen.PrecomputeSignals(
            backlog=sync["backlog"], oldest_item_age_seconds=sync["age"], ranker_over_slo=sync["ranker_over_slo"]
        )
        if precompute
        else None,
    )


def precompute_spec(spec: AutoscalingSpec) -> PrecomputeAutoscalingSpec:
    fields = spec.model_dump(by_alias=True, include={"min_replicas", "max_replicas", "target_sm_active", "metrics"})
    return PrecomputeAutoscalingSpec.model_validate({**fields, "deadlineSeconds": 60})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, run=syncs(), slo=st.sampled_from([None, 40.0]), precompute=st.booleans())
def test_property_hostile_readings_never_break_a_sync(
    spec: AutoscalingSpec, run: list[dict[str, Any]], slo: float | None, precompute: bool
) -> None:
    if precompute:
        spec = precompute_spec(spec)
    state, now = ScalerState(), NOW
    for sync in run:
        now += sync["step"]
        obs = observation(sync, now, precompute)
        d = desired_replicas(spec, state, obs, now, slo_p99_ms=slo)
        if obs.current_replicas <= spec.max_replicas:
            assert spec.min_replicas <= d.desired_replicas <= spec.max_replicas
        carried = json.loads(json.dumps(d.state.to_dict(), allow_nan=False))
        state = ScalerState.from_dict(carried)
        assert state.to_dict() == carried  # read back whole: nothing malformed was written
