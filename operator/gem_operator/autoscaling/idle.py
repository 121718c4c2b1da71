"""Busy SM: SM active above what an idle pod reads, the share of the work the rules size. Pure.

DCGM's SM active is the share of time an SM has a warp resident. A server whose runtime keeps a
kernel resident between requests (a polling loop, a persistent kernel, a graph replayed on a timer)
reads above zero while it serves nothing, and every rule that takes SM active as proportional to the
work under-reads a change of load: HPA's ratio `ceil(sum / target)`, the ramp lead's line, the SLO
loop's raise of at most 10 % past the SM active it read the p99 at. With an idle floor of 0.3 and
0.75 at full load, twice the work moves SM active from 0.44 to 0.57, and the ratio orders 30 % more
pods where 100 % more are needed.

`metrics.smActiveIdle` declares the floor. Each sync then works in *busy* SM, `(SM active - idle) /
(1 - idle)`: the readings (and the panic window's), the target (`targetSmActive` taken the same way)
and the saturation level, so every step sizes the work above the floor and nothing else changes.
What the autoscaler reports (the metric value, the effective target) goes back to SM active as read,
which is what a dashboard of DCGM shows. The state it carries (the SLO loop's target, the ramp
lead's demand) stays in busy terms: after a change of `smActiveIdle` the loop's target is clamped to
its new bounds, and the demand read before it ages out (the ramp lead's window, 300 s; its minute
peaks, an hour).

The floor is declared, not learned: the pool's readings alone cannot tell an idle floor from load
(each reading is `idle + work / pods`, and the load moves with every scale event that would
separate the two: estimated from the policy's own scale events, it reads the floor on a smooth
hour and scatters from -1.5 to 1.7 on waves and conversation hours, where a release lags the load;
docs/benchmarks.md, "Learning the floor from scale events"). Measure it once: the SM active of a
Ready pod with the model loaded and no traffic. Measured (`bench/autoscaling_seeds.py --model
'sm_active=[[0,0.3],[1,0.75]]' --set autoscaling.targetSmActive=0.55`, docs/benchmarks.md): see "An
SM curve with an idle floor".
"""

from __future__ import annotations

from dataclasses import replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Decision, Reason
from gem_operator.autoscaling.observation import MetricReading, Observation


def busy(value: float, idle: float) -> float:
    """SM active `value` as busy SM above `idle` (never below 0)."""
    return max(0.0, (value - idle) / (1.0 - idle))


def as_read(value: float, idle: float) -> float:
    """Busy SM back to SM active as read."""
    return idle + value * (1.0 - idle)


def _busy_reading(reading: MetricReading, idle: float) -> MetricReading:
    if reading.error is not None:
        return reading
    samples = {pod: replace(s, value=busy(s.value, idle)) for pod, s in reading.samples.items()}
    return replace(reading, samples=samples)


def in_busy_terms(
    spec: AutoscalingSpec, obs: Observation, saturation: float | None
) -> tuple[AutoscalingSpec, Observation, float | None]:
    """The spec, observation and saturation level of one sync, in busy SM (no change without a floor)."""
    idle = spec.metrics.sm_active_idle
    if idle <= 0:
        return spec, obs, saturation
    metrics = spec.metrics.model_copy(update={"sm_active_idle": 0.0})
    busy_spec = spec.model_copy(update={"target_sm_active": busy(spec.target_sm_active, idle), "metrics": metrics})
    panic = None if obs.panic_metrics is None else _busy_reading(obs.panic_metrics, idle)
    busy_obs = replace(obs, metrics=_busy_reading(obs.metrics, idle), panic_metrics=panic)
    return busy_spec, busy_obs, None if saturation is None else busy(saturation, idle)


def as_read_decision(decision: Decision, idle: float) -> Decision:
    """`decision`, worked out in busy SM, with its SM figures as read and, where it read any, a reason
    that says the figures in its message are busy SM."""
    if idle <= 0:
        return decision
    target = None if decision.effective_target is None else as_read(decision.effective_target, idle)
    if decision.metric_value is None:
        return replace(decision, effective_target=target)
    note = Reason(
        "sm",
        "BusySmActive",
        f"SM figures below are busy SM, (SM active - {idle:g}) / {1 - idle:g} (metrics.smActiveIdle={idle:g})",
    )
    return replace(
        decision,
        reasons=(note, *decision.reasons),
        metric_value=as_read(decision.metric_value, idle),
        effective_target=target,
    )


__all__ = ["as_read", "as_read_decision", "busy", "in_busy_terms"]
