"""The built-in SM-utilisation autoscaler, one sync inside each pool's reconcile pass.

Running it inside the pass (not as a second timer) keeps one writer of the pool's status, so
conditions from the pool and from the autoscaler never overwrite each other. The policy itself is
pure (autoscaling/policy.py); this module only gathers its inputs and records its decision.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.autoscaling.access import PrometheusAccess, PrometheusCredentials
from gem_operator.autoscaling.policy import (
    TARGET_LEARNED,
    Decision,
    Observation,
    PrecomputeSignals,
    ScalerState,
    desired_replicas,
    pod_states,
)
from gem_operator.autoscaling.sources import (
    LatencySource,
    MetricSource,
    PrecomputeSignalSource,
    PrometheusLatencySource,
    PrometheusPrecomputeSignals,
    PrometheusSmActiveSource,
)
from gem_operator.controllers import metrics
from gem_operator.controllers.reconcile import Outcome, PassContext
from gem_operator.render.common import LABEL_INSTANCE, LABEL_KIND, LABEL_ROLE
from gem_operator.render.serving import ROLE_SERVER
from gem_operator.topology import cluster_view_from_objects

log = logging.getLogger(__name__)

SourceFactory = Callable[[AutoscalingSpec], MetricSource]
SignalFactory = Callable[[AutoscalingSpec], PrecomputeSignalSource]
LatencyFactory = Callable[[AutoscalingSpec], LatencySource]
_sources: dict[str, Any] = {}
# The operator's own Prometheus credentials (GEM_PROMETHEUS_*), checked as the handlers load.
_credentials: list[PrometheusCredentials] = [PrometheusCredentials.from_env()]


def use_prometheus_credentials(credentials: PrometheusCredentials) -> None:
    """Replace the credentials read from the environment at start (tests, embedded drivers)."""
    _credentials[0] = credentials
    _warned_plain_http.clear()


# Each Prometheus URL the credentials were sent to over plain http, warned of once per process.
_warned_plain_http: set[str] = set()


def warn_of_plain_http(url: str) -> None:
    """Log once per URL that the operator's credentials go to it unencrypted."""
    if url in _warned_plain_http:
        return
    warning = _credentials[0].plain_http_warning(url)
    if warning is not None:
        _warned_plain_http.add(url)
        log.warning("%s", warning)


def use_metric_sources(
    sm: SourceFactory | None,
    precompute: SignalFactory | None = None,
    queue: SourceFactory | None = None,
    latency: LatencyFactory | None = None,
) -> None:
    """Replace where the autoscaler reads its signals (the embedded cluster's simulated DCGM).

    The default reads Prometheus at ``spec.autoscaling.metrics.prometheus.url``. Replacing the SM
    source without a queue (latency) source turns the queue (latency) signal off: nothing to read
    it from, and without a latency reading the SLO feedback holds.
    """
    _sources["sm"] = sm
    _sources["precompute"] = precompute
    _sources["queue"] = queue
    _sources["latency"] = latency


def _sm_source(spec: AutoscalingSpec, access: PrometheusAccess) -> MetricSource:
    factory = _sources.get("sm")
    return factory(spec) if factory else PrometheusSmActiveSource.from_spec(spec.metrics.prometheus, access=access)


def _queue_source(spec: AutoscalingSpec, access: PrometheusAccess) -> MetricSource | None:
    factory = _sources.get("queue")
    if factory:
        return factory(spec)  # type: ignore[no-any-return]
    if _sources.get("sm") or not spec.metrics.queue.enabled:
        return None
    return PrometheusSmActiveSource.for_queue(spec.metrics.prometheus, spec.metrics.queue, access=access)


def _latency_source(spec: AutoscalingSpec, access: PrometheusAccess) -> LatencySource | None:
    factory = _sources.get("latency")
    if factory:
        return factory(spec)  # type: ignore[no-any-return]
    if _sources.get("sm") or not spec.metrics.latency.enabled or not spec.slo_feedback.enabled:
        return None
    return PrometheusLatencySource.from_spec(spec.metrics.prometheus, spec.metrics.latency, access=access)


def _precompute_source(spec: AutoscalingSpec, access: PrometheusAccess) -> PrecomputeSignalSource:
    factory = _sources.get("precompute")
    return factory(spec) if factory else PrometheusPrecomputeSignals(spec.metrics.prometheus.url, access=access)


def free_gpus(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> int:
    """GPUs free on schedulable nodes: what a scale-up can actually get."""
    view = cluster_view_from_objects(list(nodes), list(pods))
    return sum(h.free_gpus for h in view.hosts if h.ready and not h.unschedulable)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _precompute_signals(
    ctx: PassContext, spec: SolarisPrecomputeSpec, pods: Sequence[str], access: PrometheusAccess
) -> PrecomputeSignals:
    ranker_pods: list[str] = []
    slo_ms: float | None = None
    if spec.autoscaling.yield_to:
        ranker = await ctx.kube.get("gem.dev/v1alpha1", "RankingService", spec.autoscaling.yield_to, ctx.namespace)
        if ranker is not None:
            slo_ms = float(((ranker.get("spec") or {}).get("slo") or {}).get("p99LatencyMs", 50.0))
            labels = {LABEL_KIND: "rankingservice", LABEL_INSTANCE: spec.autoscaling.yield_to, LABEL_ROLE: ROLE_SERVER}
            ranker_pods = [p["metadata"]["name"] for p in await ctx.kube.list("v1", "Pod", ctx.namespace, labels)]
    source = _precompute_source(spec.autoscaling, access)
    return await source.read_precompute(ctx.namespace, pods, ranker_pods, slo_ms)


def scaled_event(decision: Decision) -> str:
    """One sentence per decision: the change first, then each reason the policy gave, on its own."""
    verb = "Scaled up" if decision.direction == "up" else "Scaled down"
    sentences = [f"{verb} from {decision.current_replicas} to {decision.desired_replicas} replicas."]
    for r in decision.reasons:
        text = r.text.strip()
        if text:
            sentences.append(text[0].upper() + text[1:] + ("" if text.endswith(".") else "."))
    return " ".join(sentences)


def learned_event(status: Mapping[str, Any], decision: Decision) -> str | None:
    """The event's message where the TargetLearned condition turns True at this sync, or changes its
    reason while True (held below the declared target, then at the loop's floor); None otherwise:
    one event per thing learned, not one per sync."""
    cond = decision.learned
    if cond is None or cond.status != "True":
        return None
    for seen in status.get("conditions") or []:
        if not isinstance(seen, Mapping) or seen.get("type") != TARGET_LEARNED:
            continue
        if seen.get("status") == "True" and seen.get("reason") == cond.reason:
            return None
    return cond.message[0].upper() + cond.message[1:] + "."


async def autoscale(
    ctx: PassContext,
    kind: str,
    spec: RankingServiceSpec | SolarisPrecomputeSpec,
    pods: Sequence[Mapping[str, Any]],
    current: int,
    outcome: Outcome,
) -> int:
    """One autoscaler sync: returns the replicas the pool should have now."""
    scaling = spec.autoscaling
    status = ctx.body.get("status") or {}
    raw = status.get("scalerState") or {}
    try:
        # An object since v0.x; a JSON string as older operators wrote it is still read.
        state = ScalerState.from_dict(json.loads(raw) if isinstance(raw, str) else raw)
    except (ValueError, AttributeError, RecursionError):
        state = ScalerState()  # forgetting history is safe: windows restart empty
    states = pod_states(pods)
    serving = [s.name for s in states if s.serving]
    # Files read now: a rotated token or a changed CA is used from this sync on.
    access = _credentials[0].access(scaling.metrics.prometheus.headers or {})
    warn_of_plain_http(scaling.metrics.prometheus.url)
    reading = await _sm_source(scaling, access).read(ctx.namespace, serving or [s.name for s in states])
    nodes = await ctx.kube.list("v1", "Node", None)
    all_pods = await ctx.kube.list("v1", "Pod", None)
    precompute = None
    if isinstance(spec, SolarisPrecomputeSpec):
        precompute = await _precompute_signals(ctx, spec, [s.name for s in states], access)
    queue = None
    queue_source = _queue_source(scaling, access) if isinstance(spec, RankingServiceSpec) else None
    if queue_source is not None and serving:
        queue = await queue_source.read(ctx.namespace, serving)
    latency = None
    slo_ms = None
    if isinstance(spec, RankingServiceSpec):
        slo_ms = spec.slo.p99_latency_ms
        latency_source = _latency_source(scaling, access)
        if latency_source is not None and serving:
            latency = await latency_source.read_latency(ctx.namespace, serving)
    observation = Observation(
        current_replicas=current,
        pods=states,
        metrics=reading,
        gpus_per_replica=spec.gpus_per_replica,
        free_gpus=free_gpus(nodes, all_pods) if spec.gpus_per_replica else None,
        precompute=precompute,
        queue=queue,
        latency=latency,
    )
    decision = desired_replicas(scaling, state, observation, ctx.now.timestamp(), slo_p99_ms=slo_ms)
    fields = outcome.draft.fields
    fields["scalerState"] = decision.state.to_dict()
    fields["lastScaleTime"] = status.get("lastScaleTime")
    fields["lastScaleReason"] = status.get("lastScaleReason")
    if decision.metric_value is not None and decision.metric_timestamp is not None:
        fields["lastMetric"] = {"value": round(decision.metric_value, 4), "timestamp": _iso(decision.metric_timestamp)}
    else:
        fields["lastMetric"] = status.get("lastMetric")
    seen = status.get("autoscaling")
    previous: Mapping[str, Any] = seen if isinstance(seen, Mapping) else {}
    fields["autoscaling"] = {
        "effectiveTargetSmActive": round(decision.effective_target or scaling.target_sm_active, 4),
        "p99LatencyMs": round(decision.p99_ms, 2) if decision.p99_ms is not None else previous.get("p99LatencyMs"),
        "panicking": decision.panicking,
    }
    learned = learned_event(status, decision)
    if learned is not None:
        outcome.events.append(("Normal", TARGET_LEARNED, learned))
    for cond in decision.conditions:
        outcome.draft.condition(cond.type, cond.status, cond.reason, cond.message)
    if decision.direction != "none":
        fields["lastScaleTime"] = ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        fields["lastScaleReason"] = decision.message
        metrics.SCALING_DECISIONS.labels(kind, decision.direction, decision.reason).inc()
        outcome.events.append(("Normal", "Scaled", scaled_event(decision)))
    metrics.EFFECTIVE_TARGET.labels(kind, ctx.namespace, ctx.name).set(
        decision.effective_target or scaling.target_sm_active
    )
    if decision.metric_value is not None:
        metrics.SM_ACTIVE.labels(kind, ctx.namespace, ctx.name).set(decision.metric_value)
    return decision.desired_replicas
