"""An idle floor on SM active (`metrics.smActiveIdle`): the rules size busy SM, the status reads SM
active as the exporter does, and a floor at or above the target is refused (`autoscaling/idle.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gem_operator.api.autoscaling import IDLE_BELOW_TARGET_RULE, AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.idle import as_read, busy
from gem_operator.autoscaling.observation import MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.policy import desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps.hysteresis import as_hpa

NOW = 1_000.0


def spec(idle: float | None, **kw: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {
        "minReplicas": 1,
        "maxReplicas": 100,
        "targetSmActive": 0.55,
        "stabilizationSeconds": {"up": 0, "down": 0},
        "rampLead": {"enabled": False},
    }
    if idle is not None:
        base["metrics"] = {"smActiveIdle": idle}
    base.update(kw)
    return AutoscalingSpec.model_validate(base)


def pool(n: int, sm: float) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(n)]
    return Observation(n, pods, MetricReading({f"p{i}": PodSample(sm, NOW) for i in range(n)}))


@pytest.mark.parametrize(
    ("value", "idle", "expected"),
    [(0.65, 0.3, 0.5), (0.3, 0.3, 0.0), (0.2, 0.3, 0.0), (1.0, 0.3, 1.0), (0.6, 0.0, 0.6)],
)
def test_busy_sm(value: float, idle: float, expected: float) -> None:
    assert busy(value, idle) == pytest.approx(expected)
    if value >= idle:
        assert as_read(busy(value, idle), idle) == pytest.approx(value)


@pytest.mark.parametrize(
    ("idle", "pods", "sm", "want"),
    [
        # Busy 0.5 against a busy target of 0.25 / 0.7: 1.4x the pool. Read as is, 0.65 / 0.55 is 1.18x.
        pytest.param(0.3, 10, 0.65, 14, id="a-rise-above-the-floor"),
        pytest.param(None, 10, 0.65, 12, id="a-rise-read-as-is"),
        # Busy 0.1 / 0.7 against 0.25 / 0.7: 0.4x the pool. Read as is, 0.4 / 0.55 is 0.73x.
        pytest.param(0.3, 20, 0.4, 8, id="a-fall-above-the-floor"),
        pytest.param(None, 20, 0.4, 15, id="a-fall-read-as-is"),
    ],
)
def test_the_rules_size_the_work_above_the_idle_floor(idle: float | None, pods: int, sm: float, want: int) -> None:
    d = desired_replicas(spec(idle), ScalerState(recommendations=((NOW - 30, pods),)), pool(pods, sm), NOW)
    assert d.desired_replicas == want


def test_the_decision_reports_sm_active_as_read() -> None:
    d = desired_replicas(spec(0.3), ScalerState(), pool(10, 0.65), NOW)
    assert d.metric_value == pytest.approx(0.65)
    assert d.effective_target == pytest.approx(0.55)
    assert "metrics.smActiveIdle=0.3" in d.message
    plain = desired_replicas(spec(None), ScalerState(), pool(10, 0.65), NOW)
    assert "smActiveIdle" not in plain.message


@pytest.mark.parametrize("model", [AutoscalingSpec, PrecomputeAutoscalingSpec])
@pytest.mark.parametrize("idle", [0.55, 0.7])
def test_a_floor_at_or_above_the_target_is_refused(model: type[AutoscalingSpec], idle: float) -> None:
    with pytest.raises(ValidationError) as err:
        model.model_validate({"targetSmActive": 0.55, "metrics": {"smActiveIdle": idle}})
    text = str(err.value)
    assert "metrics.smActiveIdle" in text and "targetSmActive" in text and "lower metrics.smActiveIdle" in text


@pytest.mark.parametrize("model", [AutoscalingSpec, PrecomputeAutoscalingSpec])
def test_the_crd_refuses_it_at_apply_time(model: type[AutoscalingSpec]) -> None:
    assert IDLE_BELOW_TARGET_RULE in model.model_json_schema()["x-kubernetes-validations"]


def test_the_hpa_baselines_read_their_metric_as_is() -> None:
    assert as_hpa(spec(0.3)).metrics.sm_active_idle == 0.0


def test_a_hold_reports_its_target_as_read_and_no_busy_figures() -> None:
    """No fresh sample: the pool holds, the effective target still reads as SM active, and the message
    names no busy figures since it has none."""
    stale = Observation(10, [PodState(f"p{i}", ready=True) for i in range(10)], MetricReading({}))
    d = desired_replicas(spec(0.3), ScalerState(), stale, NOW)
    assert d.held and d.desired_replicas == 10
    assert d.effective_target == pytest.approx(0.55)
    assert "smActiveIdle" not in d.message
