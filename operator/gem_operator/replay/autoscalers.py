"""The autoscaled pools of a replay: what each pool's autoscaler reads at a sync, and how it decides.

`Window` keeps the per-second history a sync reads (SM active, requests, p99, Ready pods), and
`pool_observation` turns it into the `Observation` the operator's sources would build from a
scrape: per-pod samples of the Ready pods only, the queue gauge, the latency query's p99. The policy
pool runs `desired_replicas` with the spec as written (`policy_rule`) and records each sync in a
`PolicyTrace`; the HPA-on-RPS pool runs the same algorithm as HPA runs it, on requests/s per Ready
pod (`rps_rule`). The engine (`engine.py`) serves the load second by second and calls them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.decision import Decision
from gem_operator.autoscaling.policy import (
    LatencyReading,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    ScalerState,
    desired_replicas,
)
from gem_operator.autoscaling.steps.hysteresis import as_hpa
from gem_operator.replay.service_model import Pool, weighted_quantile

Decide = Callable[[float, Pool, "Window"], int]


@dataclass
class Window:
    """Per-second history the autoscalers read at a sync (mean over the last interval)."""

    sm: list[float]
    requests: list[float]
    p99: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)  # Ready pods in each second

    def p99_over(self, since: int, until: int) -> float | None:
        """Request-weighted p99 over [since, until): what `histogram_quantile(0.99, rate(...[1m]))` reads."""
        lo = max(0, since)
        values, weights = self.p99[lo:until], self.requests[lo:until]
        if not values or sum(weights) <= 0:
            return None
        return weighted_quantile(values, weights[: len(values)], 0.99)

    def mean(self, which: Literal["sm", "requests"], since: int, until: int) -> float:
        seq = self.sm if which == "sm" else self.requests
        part = seq[max(0, since) : until]
        return sum(part) / len(part) if part else 0.0

    def per_pod(
        self, which: Literal["sm", "requests"], pool: Pool, now: float, since: int, until: int
    ) -> list[float | None]:
        """Each Ready pod's own mean over [since, until): only the seconds it was Ready count.

        What a per-pod scrape reads: a pod that became Ready at `now` has served no second yet and
        has no sample (it is not reported with the saturated SM of the pods that served the
        interval before it). SM active is the same for every Ready pod in a second; requests are
        shared evenly among the pods Ready in that second.
        """
        ready_after = pool.model.startup_seconds
        out: list[float | None] = []
        cache: dict[int, float | None] = {}
        for created in pool.created:
            if now - created < ready_after:
                continue
            lo = max(since, 0, math.ceil(created + ready_after - 1e-9))
            if lo not in cache:
                if which == "sm":
                    part = self.sm[lo:until]
                else:
                    part = [r / n for r, n in zip(self.requests[lo:until], self.ready[lo:until], strict=False) if n > 0]
                cache[lo] = sum(part) / len(part) if part else None
            out.append(cache[lo])
        return out


def _samples(pods: Sequence[PodState], values: Sequence[float | None] | None, now: float) -> dict[str, PodSample]:
    """Per-pod samples of the serving pods, in order (None: that pod has no sample yet)."""
    if values is None:
        return {}
    serving = [p for p in pods if p.serving]
    return {p.name: PodSample(v, now) for p, v in zip(serving, values, strict=False) if v is not None}


def pool_observation(
    pool: Pool,
    now: float,
    per_pod: Sequence[float | None] | None,
    gpus: int,
    free_gpus: int | None,
    queue_seconds: float | None = None,
    latency: LatencyReading | None = None,
    panic_per_pod: Sequence[float | None] | None = None,
) -> Observation:
    ready = pool.ready_pods(now)
    pods = [PodState(name=f"pod-{i}", ready=r, model_loaded=r) for i, r in enumerate(ready)]
    samples = _samples(pods, per_pod, now)
    reading = MetricReading(samples=samples) if samples else MetricReading.unavailable("no Ready pods reporting")
    queue = None
    if queue_seconds is not None:
        queue = MetricReading(samples={p.name: PodSample(queue_seconds, now) for p in pods if p.serving})
    free = None if free_gpus is None else max(0, free_gpus - len(pool.created) * gpus)
    panic = None
    if panic_per_pod is not None:
        panic = MetricReading(samples=_samples(pods, panic_per_pod, now))
    return Observation(
        current_replicas=len(pool.created),
        pods=pods,
        metrics=reading,
        gpus_per_replica=gpus,
        free_gpus=free,
        queue=queue,
        latency=latency,
        panic_metrics=panic,
    )


# The latency query's window (`rate(...[1m])` in metrics.latency's default).
LATENCY_WINDOW_SECONDS = 60


@dataclass
class PolicyTrace:
    """What the policy pool's syncs said beside the count: (time, effective SM target, the reason of
    the pool's TargetLearned condition where it is True) at each sync, and the scale-downs the policy
    promises never to make (time, why): one on a fresh p99 over the SLO, or with no usable SM
    reading. A replay that finds one has found a bug: every bench case's verdicts and the
    random-fleet bench check for them."""

    targets: list[tuple[float, float, str | None]] = field(default_factory=list)
    unsafe_scale_downs: list[tuple[float, str]] = field(default_factory=list)


def unsafe_scale_down(d: Decision, slo_ms: float) -> str | None:
    """Why `d` is a scale-down the policy never makes (None: it is not one). A count over maxReplicas
    or the cluster's GPUs is brought down whatever the signals say: that is the bounds', not one."""
    if d.direction != "down" or (d.limit is not None and d.limit.step in ("bounds", "gpus")):
        return None
    if d.held:
        return f"scale-down {d.current_replicas} -> {d.desired_replicas} with no usable SM reading"
    if d.p99_ms is not None and d.p99_ms > slo_ms:
        return (
            f"scale-down {d.current_replicas} -> {d.desired_replicas} on a fresh p99 of {d.p99_ms:.1f} ms over the SLO"
        )
    return None


def policy_rule(
    spec: RankingServiceSpec,
    slo_ms: float,
    sync_every: int,
    gpus: int,
    cluster_gpus: int | None,
    trace: PolicyTrace,
) -> Decide:
    """The policy pool's autoscaler: `desired_replicas` with `spec.autoscaling`, fed at each sync
    what the operator's sources would read; it records each sync in `trace`."""
    pa = spec.autoscaling
    state_box = [ScalerState()]

    def decide(now: float, pool: Pool, win: Window) -> int:
        t = int(now)
        serving = pool.ready_count(now)
        per_pod = win.per_pod("sm", pool, now, t - sync_every, t) if serving else None
        # The ranking server's queue gauge over its completion rate: seconds of queued work per
        # pod, as scraped at the sync (the fluid queue is spread evenly over the Ready pods).
        queue_s = pool.queue_seconds(now) if pa.metrics.queue.enabled else None
        latency = None
        if pa.metrics.latency.enabled:
            p99 = win.p99_over(t - LATENCY_WINDOW_SECONDS, t) if serving else None
            latency = LatencyReading(p99, now) if p99 is not None else LatencyReading.unavailable("no requests")
        panic = None
        if pa.panic.enabled and serving:
            panic = win.per_pod("sm", pool, now, t - pa.panic.window_seconds, t)
        obs = pool_observation(pool, now, per_pod, gpus, cluster_gpus, queue_s, latency, panic)
        d = desired_replicas(pa, state_box[0], obs, now, slo_p99_ms=slo_ms)
        state_box[0] = d.state
        learned = d.learned.reason if d.learned is not None and d.learned.status == "True" else None
        trace.targets.append((now, d.effective_target or pa.target_sm_active, learned))
        unsafe = unsafe_scale_down(d, slo_ms)
        if unsafe is not None:
            trace.unsafe_scale_downs.append((now, unsafe))
        return d.desired_replicas

    return decide


def rps_rule(
    spec: RankingServiceSpec, target_rps: float, rps_window: int, gpus: int, cluster_gpus: int | None
) -> Decide:
    """The HPA-on-RPS pool's autoscaler: the same algorithm; the metric is requests/s per Ready pod,
    expressed against the SM target so the HPA ratio metric/target is rps_per_pod / target_rps."""
    a = spec.autoscaling
    hpa = as_hpa(a)  # HPA's algorithm as HPA runs it: the ramp lead and the direction budget are this policy's
    state_box = [ScalerState()]

    def decide(now: float, pool: Pool, win: Window) -> int:
        t = int(now)
        ready = pool.ready_count(now)
        per_pod = None
        if ready:
            rps = win.per_pod("requests", pool, now, t - rps_window, t)
            per_pod = [None if r is None else r / target_rps * a.target_sm_active for r in rps]
        obs = pool_observation(pool, now, per_pod, gpus, cluster_gpus)
        d = desired_replicas(hpa, state_box[0], obs, now, saturation=None)
        state_box[0] = d.state
        return d.desired_replicas

    return decide


__all__ = [
    "LATENCY_WINDOW_SECONDS",
    "Decide",
    "PolicyTrace",
    "Window",
    "policy_rule",
    "pool_observation",
    "rps_rule",
    "unsafe_scale_down",
]
