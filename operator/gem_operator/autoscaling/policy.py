"""The scaling decision: HPA's algorithm plus what a GPU fleet needs. Pure: no I/O, no clock.

`desired_replicas(spec, state, observation, now)` is called once per sync (15 s by default) by
the controller and, with simulated time, by the replay. Steps, in order:

1. **Signal.** Only pods that are Ready *and* have finished loading the model count. Their
   fresh SM-active samples (younger than `metrics.staleAfterSeconds`) give the ratio
   `metric / target`. Inside the tolerance band (per direction) nothing changes. Above it,
   `ceil(sum(samples) / target)` (pods still loading count as zero usage, so capacity on its
   way is not ordered twice; the recommendation never falls below the current count). Below
   it, Ready pods without a fresh sample count as exactly on target and pods still loading are
   kept, so only pods that are measurably idle are removed. A saturated reading (every Ready
   pod reporting, mean >= `SATURATED_SM_ACTIVE` = 0.9 > target) only bounds demand from below, so the
   recommendation is then at least twice the Ready pods (pods still loading count toward it,
   so this doubles once per start-up wave, not every sync).
2. **Hold.** No usable signal (source error, no sample, every sample stale, no Ready pod) ⇒
   keep the current count (bounds still apply) and report `MetricsUnavailable`. Never a
   scale-down on missing data.
3. **Precompute** (`PrecomputeAutoscalingSpec`): the recommendation is the max of the SM
   signal, `ceil(backlog / backlogTargetPerReplica)` and a deadline signal (the oldest queued
   item should wait at most half of `deadlineSeconds`: `ceil(ready * age / (deadline / 2))`).
   An empty backlog for `idleSecondsBeforeZero` scales to `minReplicas` (zero allowed); before
   that at least one replica stays. A backlog brings the pool back from zero. While the linked
   RankingService is over its SLO the pool yields: it halves toward `minReplicas` every sync,
   skipping the down-stabilisation window, and never scales up.
4. **Stabilisation** (HPA semantics): every recommendation is recorded; the result may rise
   only to the *lowest* recommendation of the up window and fall only to the *highest* of the
   down window.
5. **Rate policies:** per direction the most permissive listed policy applies, each measured
   against the replicas at the start of its period (recorded scale events).
6. **Free GPUs:** scale-up is capped at `current + free_gpus // gpusPerReplica` (minus pods
   still waiting for a node).
7. **Bounds:** `minReplicas..maxReplicas`. A RankingService keeps its last replica (SM active
   cannot see demand at zero replicas; `minReplicas: 0` only lets HPA/KEDA take it to zero
   through the scale subresource).

The state carried between calls (`ScalerState`) is an immutable value with `to_dict` /
`from_dict`, so the controller may keep it in memory or in status.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from gem_operator.api.autoscaling import AutoscalingSpec, RatePolicy
from gem_operator.api.common import Condition, set_condition
from gem_operator.api.serving import PrecomputeAutoscalingSpec

# Scaling condition types (status.conditions[].type).
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
METRICS_UNAVAILABLE = "MetricsUnavailable"

# SM active at or above this means the pods are saturated: demand may be far above what they show.
SATURATED_SM_ACTIVE = 0.9

# How long history is kept: the longest window/period the API allows.
_HISTORY_SECONDS = 3600.0
_EPS = 1e-9

Direction = Literal["up", "down", "none"]


# --------------------------------------------------------------------------- observations


@dataclass(frozen=True)
class PodSample:
    """One per-pod metric value and the time it was measured (seconds, same clock as `now`)."""

    value: float
    timestamp: float


@dataclass(frozen=True)
class MetricReading:
    """What a metric source returned: per-pod samples, or why there are none.

    `error` set means the source failed (timeout, HTTP error, bad response): the policy holds.
    """

    samples: Mapping[str, PodSample] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def unavailable(cls, error: str) -> MetricReading:
        return cls(samples={}, error=error)


@dataclass(frozen=True)
class PodState:
    """A pod of the pool as the controller sees it."""

    name: str
    ready: bool
    model_loaded: bool = True
    scheduled: bool = True

    @property
    def serving(self) -> bool:
        return self.ready and self.model_loaded


@dataclass(frozen=True)
class PrecomputeSignals:
    """Queue and priority signals of a SolarisPrecompute pool. None means unknown."""

    backlog: int | None = None
    oldest_item_age_seconds: float | None = None
    ranker_over_slo: bool = False
    ranker_message: str = ""


@dataclass(frozen=True)
class Observation:
    """Everything the policy needs to know about the pool at one sync."""

    current_replicas: int
    pods: Sequence[PodState]
    metrics: MetricReading
    gpus_per_replica: int = 1
    free_gpus: int | None = None
    precompute: PrecomputeSignals | None = None
    queue: MetricReading | None = None  # seconds of queued work per pod (`metrics.queue`); None: not read


# A pod condition (e.g. set through a readiness gate) saying the model is on local disk and loaded.
MODEL_LOADED_CONDITION = "gem.dev/ModelLoaded"


def pod_states(pods: Iterable[Mapping[str, Any]]) -> list[PodState]:
    """PodStates from Pod objects (dicts as the API returns them). Pure.

    Terminating and finished pods are left out. `model_loaded` is the `gem.dev/ModelLoaded`
    condition when the pod has one; otherwise every init container (the model loader) must have
    exited 0.
    """
    out: list[PodState] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, Mapping)}
        ready = conds.get("Ready") == "True"
        if MODEL_LOADED_CONDITION in conds:
            loaded = conds[MODEL_LOADED_CONDITION] == "True"
        else:
            inits = status.get("initContainerStatuses") or []
            loaded = all(((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for s in inits) and (
                bool(inits) or ready
            )
        scheduled = bool((pod.get("spec") or {}).get("nodeName")) or conds.get("PodScheduled") == "True"
        out.append(PodState(name=str(meta.get("name", "")), ready=ready, model_loaded=loaded, scheduled=scheduled))
    return out


# --------------------------------------------------------------------------- state


@dataclass(frozen=True)
class ScalerState:
    """History carried between syncs; a plain value (see `to_dict` / `from_dict`).

    recommendations: (time, replicas) per sync with a usable signal (stabilisation windows).
    events: (time, delta) per applied change (rate policies).
    backlog_empty_since: when the precompute backlog was last seen becoming empty.
    queue: (time, mean queued seconds per Ready pod) at the last sync with a queue reading; the
        next sync turns the change into a growth rate (how far arrivals exceed capacity).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    backlog_empty_since: float | None = None
    queue: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[t, n] for t, n in self.recommendations],
            "events": [[t, d] for t, d in self.events],
            "backlogEmptySince": self.backlog_empty_since,
            "queue": None if self.queue is None else list(self.queue),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ScalerState:
        """Parse `to_dict` output; anything malformed yields a fresh state (safe: it only forgets)."""
        if not data:
            return cls()
        try:
            recs = tuple((float(t), int(n)) for t, n in data.get("recommendations", []))
            events = tuple((float(t), int(d)) for t, d in data.get("events", []))
            since = data.get("backlogEmptySince")
            q = data.get("queue")
            queue = None if q is None else (float(q[0]), float(q[1]))
            return cls(recs, events, None if since is None else float(since), queue)
        except (TypeError, ValueError):
            return cls()


# --------------------------------------------------------------------------- decision


@dataclass(frozen=True)
class ConditionValue:
    """A condition to put on status (type, "True"/"False", CamelCase reason, message)."""

    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """The outcome of one sync."""

    desired_replicas: int
    current_replicas: int
    reason: str
    message: str
    conditions: tuple[ConditionValue, ...]
    state: ScalerState
    recommendation: int | None = None
    metric_value: float | None = None
    metric_timestamp: float | None = None
    signals: Mapping[str, float] = field(default_factory=dict)

    @property
    def direction(self) -> Direction:
        if self.desired_replicas > self.current_replicas:
            return "up"
        if self.desired_replicas < self.current_replicas:
            return "down"
        return "none"

    def condition(self, type_: str) -> ConditionValue:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        raise KeyError(type_)


# --------------------------------------------------------------------------- helpers


def _ceil(x: float) -> int:
    """ceil that ignores float noise: 0.6 * 10 / 0.6 is 10, not 11."""
    return max(0, math.ceil(x - _EPS))


@dataclass(frozen=True)
class _Signal:
    recommendation: int | None  # None: hold
    reason: str
    message: str
    metric_value: float | None = None
    metric_timestamp: float | None = None
    metrics_problem: str | None = None  # set when MetricsUnavailable
    metrics_reason: str = "MetricsFresh"
    queue: tuple[float, float] | None = None  # (now, mean queued seconds) to remember for the next sync


def _sm_signal(
    spec: AutoscalingSpec,
    obs: Observation,
    now: float,
    saturation: float | None,
    last_queue: tuple[float, float] | None = None,
) -> _Signal:
    current = obs.current_replicas
    serving = [p.name for p in obs.pods if p.serving]
    reading = obs.metrics
    if reading.error is not None:
        return _Signal(
            None,
            "MetricsUnavailable",
            f"metric source failed: {reading.error}",
            metrics_problem=reading.error,
            metrics_reason="SourceError",
        )
    if not serving and not obs.pods and obs.current_replicas == 0:
        return _Signal(None, "ScaledToZero", "no replicas: nothing to measure")
    if not serving:
        msg = f"no Ready pod with the model loaded (of {len(obs.pods)} pods)"
        return _Signal(None, "NoReadyPods", msg, metrics_problem=msg, metrics_reason="NoReadyPods")
    stale_after = spec.metrics.stale_after_seconds
    fresh: dict[str, PodSample] = {}
    newest: float | None = None
    for pod in serving:
        sample = reading.samples.get(pod)
        if sample is None or not math.isfinite(sample.value):
            continue
        newest = sample.timestamp if newest is None else max(newest, sample.timestamp)
        if now - sample.timestamp <= stale_after:
            fresh[pod] = sample
    if not fresh:
        if newest is None:
            msg = f"no samples for the {len(serving)} Ready pods"
            return _Signal(None, "MetricsUnavailable", msg, metrics_problem=msg, metrics_reason="MetricsMissing")
        msg = f"newest sample is {now - newest:.0f}s old (staleAfterSeconds={stale_after})"
        return _Signal(None, "MetricsUnavailable", msg, metrics_problem=msg, metrics_reason="MetricsStale")

    target = spec.target_sm_active
    values = [max(0.0, s.value) for s in fresh.values()]
    sm_usage = sum(values)
    sm_avg = sm_usage / len(values)
    stamp = max(s.timestamp for s in fresh.values())
    ready = len(serving)
    missing = ready - len(fresh)
    # Demand beyond what SM active can show. Queued seconds `b` grow at `arrivals / capacity - 1`
    # per second, so the growth `g` since the last sync says how far demand exceeds what the pods
    # serve; `b / drain` more empties the queue within `drainSeconds`. A pod's SM usage is scaled
    # by `1 + g + b / drain`. Only fresh queue samples of pods with a fresh SM sample count; a
    # missing one means an empty queue, so the queue can raise the recommendation, never lower it.
    queued = _fresh_queue(obs.queue, fresh, now, stale_after)
    drain = float(spec.metrics.queue.drain_seconds)
    mean_queue = sum(queued.values()) / len(fresh)
    growth = 0.0
    if last_queue is not None and 0 < now - last_queue[0] <= stale_after:
        growth = max(0.0, (mean_queue - last_queue[1]) / (now - last_queue[0]))
    remember = (now, mean_queue) if obs.queue is not None and obs.queue.error is None else None
    usage = sum(max(0.0, s.value) * (1 + growth + queued.get(pod, 0.0) / drain) for pod, s in fresh.items())
    avg = usage / len(values)
    ratio = avg / target
    tol = spec.tolerance
    note = f" ({missing} Ready pods without a fresh sample)" if missing else ""
    base = f"SM active {sm_avg:.2f} vs target {target:.2f} over {len(fresh)} Ready pods{note}"
    if queued or growth > 0:
        worst = max(queued.values(), default=0.0)
        base += f", queue up to {worst:.1f}s of work growing {growth:.2f}s/s (demand {avg:.2f} in SM-active terms)"
    if ratio > 1 + tol.up + _EPS:
        # Missing pods count as idle: only scale up if the measured usage alone justifies it.
        want = _ceil(usage / target)
        reason = "QueuedWork" if usage > sm_usage * (1 + tol.up) else "HighSmActive"
        if saturation is not None and target < saturation <= sm_avg and not missing and remember is None:
            # Saturated and no queue signal to say by how much: SM active cannot rise further, so
            # the ratio only bounds demand from below. Like a panic mode, ask for at least twice the
            # Ready pods (once per start-up wave: pods still loading count toward it).
            want = max(want, 2 * ready)
            reason = "SaturatedSmActive"
        if usage / (ready * target) <= 1 + tol.up or want <= current:
            return _Signal(
                current,
                "CapacityPending",
                base + "; capacity already sufficient or on its way",
                sm_avg,
                stamp,
                queue=remember,
            )
        return _Signal(want, reason, f"{base}: {want} replicas", sm_avg, stamp, queue=remember)
    if ratio < 1 - tol.down - _EPS:
        # Missing pods count as on target; pods still loading are kept.
        adj = (usage + missing * target) / (ready * target)
        if adj >= 1 - tol.down:
            return _Signal(
                current,
                "WithinTolerance",
                base + "; missing samples keep it in the band",
                sm_avg,
                stamp,
                queue=remember,
            )
        want = min(current, _ceil(ready * adj) + max(0, current - ready))
        return _Signal(want, "LowSmActive", f"{base}: {want} replicas", sm_avg, stamp, queue=remember)
    return _Signal(current, "WithinTolerance", f"{base}: inside the tolerance band", sm_avg, stamp, queue=remember)


def _fresh_queue(
    reading: MetricReading | None, fresh: Mapping[str, PodSample], now: float, stale_after: float
) -> dict[str, float]:
    """Queued seconds of work per pod, for pods with a fresh SM sample and a fresh, positive queue sample."""
    if reading is None or reading.error is not None:
        return {}
    out: dict[str, float] = {}
    for pod in fresh:
        sample = reading.samples.get(pod)
        if sample is None or not math.isfinite(sample.value) or sample.value <= 0:
            continue
        if now - sample.timestamp <= stale_after:
            out[pod] = sample.value
    return out


def _rate_limits(
    policies: Sequence[RatePolicy], events: Sequence[tuple[float, int]], now: float, current: int, up: bool
) -> int:
    """The most permissive bound over the listed policies (upper bound if up, lower if down)."""
    best: int | None = None
    for pol in policies:
        since = now - pol.period_seconds
        if up:
            moved = sum(d for t, d in events if t > since and d > 0)
            start = max(0, current - moved)
            bound = start
            if pol.pods is not None:
                bound = max(bound, start + pol.pods)
            if pol.percent is not None:
                bound = max(bound, math.floor(start * (1 + pol.percent / 100) + _EPS))
            if start == 0:
                bound = max(bound, 1)  # from zero, one pod may always start
            best = bound if best is None else max(best, bound)
        else:
            moved = sum(-d for t, d in events if t > since and d < 0)
            start = current + moved
            bound = start
            if pol.pods is not None:
                bound = min(bound, start - pol.pods)
            if pol.percent is not None:
                bound = min(bound, _ceil(start * (1 - pol.percent / 100)))
            bound = max(0, bound)
            best = bound if best is None else min(best, bound)
    if best is None:
        return 10**9 if up else 0
    return best


def _conditions(
    *, active: tuple[bool, str, str], limited: tuple[bool, str, str], unavailable: tuple[bool, str, str]
) -> tuple[ConditionValue, ...]:
    def cv(type_: str, v: tuple[bool, str, str]) -> ConditionValue:
        return ConditionValue(type_, "True" if v[0] else "False", v[1], v[2])

    return (cv(SCALING_ACTIVE, active), cv(SCALING_LIMITED, limited), cv(METRICS_UNAVAILABLE, unavailable))


# --------------------------------------------------------------------------- the policy


def desired_replicas(
    spec: AutoscalingSpec,
    state: ScalerState,
    observation: Observation,
    now: float,
    *,
    saturation: float | None = SATURATED_SM_ACTIVE,
) -> Decision:
    """One sync of the autoscaler. Pure: the same inputs give the same Decision (and new state).

    `saturation`: mean SM active at which pods count as saturated (None: the plain HPA ratio).
    """
    obs = observation
    current = max(0, obs.current_replicas)
    lo, hi = spec.min_replicas, spec.max_replicas
    horizon = now - _HISTORY_SECONDS
    recs = tuple((t, n) for t, n in state.recommendations if t > horizon)
    events = tuple((t, d) for t, d in state.events if t > horizon)
    empty_since = state.backlog_empty_since

    sig = _sm_signal(spec, obs, now, saturation, state.queue)
    signals: dict[str, float] = {}
    if sig.recommendation is not None:
        signals["smActive"] = float(sig.recommendation)
    rec = sig.recommendation
    reason, message = sig.reason, sig.message
    skip_stabilisation = False
    yielding = False
    floor = lo

    if not isinstance(spec, PrecomputeAutoscalingSpec) and current > 0:
        # SM active cannot see demand once no replica runs, so it never takes the last one away.
        floor = max(lo, 1)
    pre = obs.precompute
    if isinstance(spec, PrecomputeAutoscalingSpec) and pre is not None:
        ready = sum(1 for p in obs.pods if p.serving)
        queue_recs: list[tuple[int, str, str]] = []
        if pre.backlog is not None:
            b = _ceil(pre.backlog / spec.backlog_target_per_replica)
            signals["backlog"] = float(b)
            queue_recs.append((b, "Backlog", f"backlog {pre.backlog} / {spec.backlog_target_per_replica} per replica"))
            if pre.backlog > 0:
                empty_since = None
            elif empty_since is None:
                empty_since = now
        if pre.oldest_item_age_seconds is not None and (pre.backlog is None or pre.backlog > 0):
            half = spec.deadline_seconds / 2
            d = _ceil(max(ready, 1) * pre.oldest_item_age_seconds / half)
            signals["deadline"] = float(d)
            queue_recs.append(
                (
                    d,
                    "Deadline",
                    f"oldest item {pre.oldest_item_age_seconds:.0f}s vs deadline {spec.deadline_seconds}s",
                )
            )
        best_q = max(queue_recs, default=None, key=lambda x: x[0])
        queue_known = pre.backlog is not None
        if rec is None:
            # SM unknown: queue signals may raise the count, never lower it.
            if best_q is not None and best_q[0] > current:
                rec, reason, message = best_q[0], best_q[1], f"{best_q[2]} (SM signal held: {sig.message})"
        elif best_q is not None and best_q[0] > rec:
            rec, reason, message = best_q[0], best_q[1], f"{best_q[2]}: {best_q[0]} replicas; {sig.message}"
        elif rec < current and not queue_known:
            rec, reason, message = current, "BacklogUnknown", f"backlog unknown, no scale-down; {sig.message}"
        idle_for = None if empty_since is None else now - empty_since
        if idle_for is not None:
            if idle_for >= spec.idle_seconds_before_zero:
                rec, reason = lo, "Idle"
                idle_limit = spec.idle_seconds_before_zero
                message = f"backlog empty for {idle_for:.0f}s (idleSecondsBeforeZero={idle_limit})"
                skip_stabilisation = True
            elif current > 0:
                floor = max(lo, 1)
        if pre.ranker_over_slo:
            yielding = True
            target = max(lo, current - max(1, current // 2)) if current > lo else current
            rec, reason = min(target, current), "YieldingGPUs"
            message = f"yielding GPUs to RankingService {spec.yield_to or '?'}"
            if pre.ranker_message:
                message += f": {pre.ranker_message}"
            skip_stabilisation = True

    held = rec is None
    if rec is None:
        stabilised = current
        message = f"holding at {current}: {sig.message}"
        reason = sig.reason
    else:
        if not skip_stabilisation:
            recs = (*recs, (now, rec))
        if skip_stabilisation:
            stabilised = rec
        else:
            up_win = spec.stabilization_seconds.up
            down_win = spec.stabilization_seconds.down
            up_rec = min([n for t, n in recs if t > now - up_win] + [rec])
            down_rec = max([n for t, n in recs if t > now - down_win] + [rec])
            stabilised = current
            if stabilised < up_rec:
                stabilised = up_rec
            if stabilised > down_rec:
                stabilised = down_rec
            if stabilised != rec:
                message += f"; stabilised to {stabilised}"

    # Rate policies.
    limited: tuple[bool, str, str] = (False, "DesiredWithinRange", "the desired count is within range")
    desired = stabilised
    if desired > current:
        up_limit = _rate_limits(spec.policies.scale_up, events, now, current, up=True)
        if desired > up_limit:
            limited = (
                True,
                "ScaleUpLimit",
                f"scale-up rate policies allow {up_limit} now (wanted {desired})",
            )
            desired = up_limit
        if obs.free_gpus is not None and obs.gpus_per_replica > 0:
            waiting = sum(1 for p in obs.pods if not p.scheduled)
            room = max(0, obs.free_gpus // obs.gpus_per_replica - waiting)
            gpu_cap = current + room
            if desired > gpu_cap:
                limited = (
                    True,
                    "InsufficientGPUs",
                    f"{obs.free_gpus} free GPUs ({obs.gpus_per_replica}/replica, {waiting} pods waiting) "
                    f"allow {gpu_cap} replicas (wanted {desired})",
                )
                desired = max(current, gpu_cap)
    elif desired < current:
        down_limit = _rate_limits(spec.policies.scale_down, events, now, current, up=False)
        if desired < down_limit:
            limited = (
                True,
                "ScaleDownLimit",
                f"scale-down rate policies allow {down_limit} now (wanted {desired})",
            )
            desired = down_limit
    if yielding:
        limited = (True, "YieldingGPUs", message)

    # Bounds.
    if desired > hi:
        limited = (True, "TooManyReplicas", f"capped at maxReplicas={hi} (wanted {desired})")
        desired = hi
    if desired < floor:
        why = "minReplicas" if floor == lo else "the last replica stays until the pool has been idle long enough"
        if floor == lo:
            limited = (True, "TooFewReplicas", f"raised to minReplicas={lo} (wanted {desired})")
        desired = floor
        if floor != lo:
            message += f"; kept at {floor} ({why})"

    if desired != current:
        events = (*events, (now, desired - current))
        verb = "scaled up" if desired > current else "scaled down"
        if held:  # a bound moved it, not the signal: say that, not "holding at"
            message = f"{limited[2]}; {sig.message}"
        message = f"{verb} {current} -> {desired}: {message}"

    unavailable = (
        (True, sig.metrics_reason, sig.metrics_problem)
        if sig.metrics_problem is not None
        else (False, "MetricsFresh", "SM-active samples are fresh")
    )
    if held:
        active = (False, sig.reason if sig.reason in ("NoReadyPods", "ScaledToZero") else "FailedGetMetrics", message)
    else:
        active = (True, "ValidMetricsFound" if sig.recommendation is not None else reason, message)

    new_state = replace(state, recommendations=recs, events=events, backlog_empty_since=empty_since, queue=sig.queue)
    return Decision(
        desired_replicas=desired,
        current_replicas=current,
        reason=reason,
        message=message,
        conditions=_conditions(active=active, limited=limited, unavailable=unavailable),
        state=new_state,
        recommendation=rec,
        metric_value=sig.metric_value,
        metric_timestamp=sig.metric_timestamp,
        signals=signals,
    )


def apply_conditions(
    conditions: list[Condition], decision: Decision, now: datetime, observed_generation: int | None = None
) -> list[Condition]:
    """Merge the decision's ScalingActive/ScalingLimited/MetricsUnavailable into status conditions.

    lastTransitionTime only moves when a condition's status flips (see `set_condition`).
    """
    out = conditions
    for c in decision.conditions:
        out = set_condition(
            out,
            type=c.type,
            status=c.status,
            reason=c.reason,
            message=c.message,
            now=now,
            observed_generation=observed_generation,
        )
    return out


__all__ = [
    "METRICS_UNAVAILABLE",
    "MODEL_LOADED_CONDITION",
    "SATURATED_SM_ACTIVE",
    "SCALING_ACTIVE",
    "SCALING_LIMITED",
    "ConditionValue",
    "Decision",
    "MetricReading",
    "Observation",
    "PodSample",
    "PodState",
    "PrecomputeSignals",
    "ScalerState",
    "apply_conditions",
    "desired_replicas",
    "pod_states",
]
