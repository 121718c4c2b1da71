"""Signals step: the SM reading measured once and sized at the effective target, the SLO feedback's
overload window and eager scale-up, the ramp lead's raise, the panic window (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling import signals as signals_module
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.observation import LatencyReading, MetricReading, Observation, PodSample, PodState
from gem_operator.autoscaling.signals import Signal, SmMeasurement, measure_sm, recommend_sm
from gem_operator.autoscaling.slo import slo_feedback
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.steps import measure as measure_step
from gem_operator.autoscaling.steps.measure import read_signals, with_ramp_lead
from gem_operator.autoscaling.steps.observe import observe
from gem_operator.autoscaling.trend import RampStep

NOW = 10_000.0
SPEC = AutoscalingSpec.model_validate({"targetSmActive": 0.5, "maxReplicas": 50})


def pool(
    values: list[float | None],
    *,
    loading: int = 0,
    age: float = 5.0,
    error: str | None = None,
    queue: float | None = None,
    p99: float | None = None,
    panic: list[float] | None = None,
) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(len(values))]
    pods += [PodState(f"l{i}", ready=False, model_loaded=False) for i in range(loading)]
    samples = {f"p{i}": PodSample(v, NOW - age) for i, v in enumerate(values) if v is not None}
    return Observation(
        current_replicas=len(pods),
        pods=pods,
        metrics=MetricReading.unavailable(error) if error else MetricReading(samples=samples),
        queue=None if queue is None else MetricReading({f"p{i}": PodSample(queue, NOW) for i in range(len(values))}),
        latency=None if p99 is None else LatencyReading(p99, NOW),
        panic_metrics=None
        if panic is None
        else MetricReading({f"p{i}": PodSample(v, NOW) for i, v in enumerate(panic)}),
    )


# (observation, want hold reason, want metrics reason)
HOLD_CASES: list[Any] = [
    pytest.param(pool([0.5], error="timeout"), "MetricsUnavailable", "SourceError", id="source-error"),
    pytest.param(Observation(0, [], MetricReading()), "ScaledToZero", "MetricsFresh", id="scaled-to-zero"),
    pytest.param(pool([], loading=2), "NoReadyPods", "NoReadyPods", id="no-ready-pods"),
    pytest.param(pool([None, None]), "MetricsUnavailable", "MetricsMissing", id="no-samples"),
    pytest.param(pool([0.5, 0.5], age=600), "MetricsUnavailable", "MetricsStale", id="stale"),
    pytest.param(pool([45.0, 60.0]), "MetricsUnavailable", "MetricsOutOfRange", id="percent-not-fraction"),
]


@pytest.mark.parametrize(("obs", "reason", "metrics_reason"), HOLD_CASES)
def test_unusable_readings_hold(obs: Observation, reason: str, metrics_reason: str) -> None:
    measured = measure_sm(SPEC, obs, NOW, 0.9)
    assert isinstance(measured, Signal)
    assert (measured.recommendation, measured.reason, measured.metrics_reason) == (None, reason, metrics_reason)
    assert recommend_sm(SPEC, measured, 0.9, 0.3) is measured  # a hold passes through any target


def test_the_plain_hpa_ratio_reads_any_metric() -> None:
    """The HPA baselines feed requests/s per pod (`saturation` None): a value past 1 is a reading."""
    measured = measure_sm(SPEC, pool([3.0] * 4), NOW, None)
    assert isinstance(measured, SmMeasurement) and measured.metric_value == 3.0
    assert recommend_sm(SPEC, measured, None, 2.0).recommendation == 6


# (observation, target, up tolerance, want replicas, reason, clauses)
RECOMMEND_CASES: list[Any] = [
    pytest.param(pool([0.85] * 4), 0.5, None, 7, "HighSmActive", 1, id="ratio-up"),
    pytest.param(pool([0.85] * 4), 0.45, None, 8, "HighSmActive", 1, id="lower-effective-target"),
    pytest.param(pool([0.85] * 4), 0.3, None, 12, "HighSmActive", 1, id="floor-of-effective-target"),
    pytest.param(pool([0.9] * 4), 0.5, None, 8, "SaturatedSmActive", 1, id="saturated"),
    pytest.param(pool([0.2] * 6), 0.5, None, 3, "LowSmActive", 1, id="ratio-down"),
    pytest.param(pool([0.52] * 6), 0.5, None, 6, "WithinTolerance", 1, id="inside-band"),
    pytest.param(pool([0.54] * 6), 0.5, 0.0, 7, "HighSmActive", 1, id="eager-no-up-band"),
    pytest.param(pool([0.95] * 4), 0.6, None, 8, "SaturatedSmActive", 1, id="saturated-doubles"),
    pytest.param(pool([0.9] * 4, loading=4), 0.5, None, 8, "CapacityPending", 2, id="capacity-on-its-way"),
    pytest.param(pool([0.44, 0.44, None]), 0.5, None, 3, "WithinTolerance", 2, id="missing-counts-on-target"),
    pytest.param(pool([0.3, 0.3, None]), 0.5, None, 3, "LowSmActive", 1, id="missing-kept-on-target"),
    # Arrivals 3.6 need 8 at 0.5; with 90 s queued, (3.6 + 3.6 x 90/60) / 0.9 = 10 flat out.
    pytest.param(pool([0.9] * 4, queue=90.0), 0.5, None, 10, "QueuedWork", 1, id="queue-excess"),
    pytest.param(pool([0.9] * 4, queue=30.0), 0.5, None, 8, "HighSmActive", 1, id="short-queue-drains-at-target"),
]


@pytest.mark.parametrize(("obs", "target", "tol_up", "want", "reason", "clauses"), RECOMMEND_CASES)
def test_recommend_sm(
    obs: Observation, target: float, tol_up: float | None, want: int, reason: str, clauses: int
) -> None:
    measured = measure_sm(SPEC, obs, NOW, 0.9)
    assert isinstance(measured, SmMeasurement)
    out = recommend_sm(SPEC, measured, 0.9, target, tol_up)
    assert (out.recommendation, out.reason, len(out.reasons)) == (want, reason, clauses)
    assert all(r.step == "sm" and r.code == reason for r in out.reasons)
    assert out.metric_value == measured.metric_value and out.overloaded == measured.overloaded


def ramp(replicas: int | None) -> RampStep:
    return RampStep(replicas, (), None, None, "demand rising" if replicas else "")


# (signal replicas, ramp replicas, current, want replicas, want reason)
RAMP_CASES: list[Any] = [
    pytest.param(4, None, 4, 4, "WithinTolerance", id="no-fit"),
    pytest.param(4, 6, 4, 6, "RisingLoad", id="raises"),
    pytest.param(4, 4, 4, 4, "WithinTolerance", id="equal-adds-nothing"),
    pytest.param(3, 5, 6, 3, "WithinTolerance", id="not-below-current"),
    pytest.param(None, 6, 4, None, "WithinTolerance", id="never-past-a-hold"),
]


@pytest.mark.parametrize(("rec", "lead", "current", "want", "reason"), RAMP_CASES)
def test_with_ramp_lead(rec: int | None, lead: int | None, current: int, want: int | None, reason: str) -> None:
    sig = Signal(rec, "WithinTolerance", (Reason("sm", "WithinTolerance", "inside"),), steady=2)
    out = with_ramp_lead(sig, ramp(lead), current)
    assert (out.recommendation, out.reason) == (want, reason)
    if reason == "RisingLoad":
        assert [r.step for r in out.reasons] == ["sm", "ramp-lead"] and out.steady is None
    else:
        assert out is sig


FB = AutoscalingSpec.model_validate({"targetSmActive": 0.5, "sloFeedback": {"decreaseIntervalSeconds": 60}})


# (overloaded now, last overloaded age, p99, want target, want eager, want last overloaded age)
SLO_CASES: list[Any] = [
    pytest.param(False, None, 30.0, 0.45, True, None, id="near-slo-cuts-and-is-eager"),
    pytest.param(False, None, 15.0, 0.5, False, None, id="well-under"),
    pytest.param(True, None, 55.0, 0.5, True, 0.0, id="overloaded-now-no-cut"),
    pytest.param(False, 30.0, 55.0, 0.5, True, 30.0, id="overload-in-window-no-cut"),
    pytest.param(False, 90.0, 55.0, 0.45, True, 90.0, id="overload-out-of-window-cuts"),
    pytest.param(False, None, None, 0.5, False, None, id="no-latency-holds"),
]


@pytest.mark.parametrize(("overloaded", "last_age", "p99", "target", "eager", "remembered_age"), SLO_CASES)
def test_slo_feedback(
    overloaded: bool,
    last_age: float | None,
    p99: float | None,
    target: float,
    eager: bool,
    remembered_age: float | None,
) -> None:
    state = ScalerState(slo_last_overloaded=None if last_age is None else NOW - last_age)
    step = slo_feedback(FB, state, pool([0.4] * 4, p99=p99), 40.0, NOW, overloaded=overloaded, sm_active=0.4)
    assert step.target == pytest.approx(target)
    assert step.eager == eager
    assert step.last_overloaded == (None if remembered_age is None else NOW - remembered_age)
    assert all(r.step == "slo-feedback" for r in step.reasons)


# (panic on, panic window reading, want measurements)
ONCE_CASES: list[Any] = [
    pytest.param(False, None, 1, id="plain"),
    pytest.param(True, None, 1, id="panic-reuses-the-measurement"),
    pytest.param(True, [0.9, 0.9], 2, id="panic-window-has-its-own-reading"),
]


@pytest.mark.parametrize(("panic", "window", "want"), ONCE_CASES)
def test_the_reading_is_measured_once_per_sync(
    monkeypatch: pytest.MonkeyPatch, panic: bool, window: list[float] | None, want: int
) -> None:
    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> SmMeasurement | Signal:
        calls.append(1)
        return signals_module.measure_sm(*args, **kwargs)

    monkeypatch.setattr(measure_step, "measure_sm", counting)
    spec = AutoscalingSpec.model_validate(
        {"targetSmActive": 0.5, "panic": {"enabled": panic}, "sloFeedback": {"controller": "ratchet"}}
    )
    obs = pool([0.45, 0.45], p99=30.0, panic=window)  # near the SLO: the ratchet cuts, the band goes
    state = ScalerState()
    out = read_signals(spec, state, obs, NOW, observe(spec, state, obs, NOW), saturation=0.9, slo_ms=40.0)
    assert len(calls) == want
    assert out.slo.target == pytest.approx(0.45) and out.slo.eager
    assert out.sm.recommendation == 2 and out.sm.reason == "WithinTolerance"  # 0.45 at 0.45: on target
    assert out.values == {"smActive": 2.0}
    assert out.panic.panicking == (window is not None)
