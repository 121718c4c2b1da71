"""The scaling decision: HPA's algorithm plus what a GPU fleet needs. Pure: no I/O, no clock.

`desired_replicas(spec, state, observation, now, slo_p99_ms=...)` is called once per sync (15 s
by default) by the controller and, with simulated time, by the replay (and so by every driver of
either). Steps, in order:

0. **SLO feedback** (`slo.py`, `spec.autoscaling.sloFeedback`): the SM target used below is an
   *effective* target that starts at `targetSmActive`, drops 10 % (at most once a minute, only
   once the replicas the last cut led to serve, not while the pool is overloaded nor for a
   minute after, while the p99's query window still holds the overload; never below
   `minTargetFraction` = 0.5 of it) while the observed p99 (`Observation.latency`) is over
   `spec.slo.p99LatencyMs` or near it (over `recoverBelow` = 0.7 x SLO: the warm start, learned
   before the first miss), and creeps back 5 % of
   `targetSmActive` per 600 s with p99 <= 0.7 x SLO. It lives in `ScalerState`. Without a
   latency reading it holds (a fresh state: exactly `targetSmActive`). While a fresh p99 is over
   `eagerScaleUpAbove` (0.5) x SLO, scale-up ignores the up tolerance band (step 1): a pool whose
   p99 has left its floor adds the replica its SM ratio rounds up to at once instead of after a
   10 % excess, which at a few replicas is most of a replica and, on a ramp, a pod start late.
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
   **Ramp lead** (`trend.py`, `spec.autoscaling.rampLead`, on by default): a least-squares line
   through the demand of the last 300 s of syncs (SM usage with the queue's excess); while it
   rises, the recommendation is at least what its value one *lead* ahead needs at the effective
   target, the lead being the measured time from a scale-up decision until that many pods serve
   (120 s until measured). Only ever higher than the SM rule's; inside its tolerance band too
   (waiting for the band is what makes a ramp's replica late); the history restarts while the
   pool is overloaded and when demand jumps by more than half between two syncs, so a step is
   not read as a ramp. Recorded in the stabilisation history like any recommendation.
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
   down window. Around a backlog (queue signal) the history records what the arrivals need
   (`signals.Signal.steady`), not the capacity ordered to drain the backlog or already on its way,
   so a one-off flash crowd is not paid for over the whole down window.
5. **Rate policies:** per direction the most permissive listed policy applies, each measured
   against the replicas at the start of its period (recorded scale events).
6. **Free GPUs:** scale-up is capped at `current + free_gpus // gpusPerReplica` (minus pods
   still waiting for a node).
   **Panic** (`panic.py`, `spec.autoscaling.panic`, off by default): when the short window's
   recommendation is >= 2x the Ready pods it is applied at once (no up window, no rate policy).
   **No scale-down** while panicking or while a fresh p99 is over the SLO, nor for
   `sloFeedback.scaleDownHoldSeconds` (300 s) after the last over-SLO p99: hysteresis, so the
   capacity a burst needed is not handed back just before the next one (`ScalingLimited`
   reasons `Panic` / `LatencyOverSlo`).
7. **Bounds:** `minReplicas..maxReplicas`. A RankingService keeps its last replica (SM active
   cannot see demand at zero replicas; `minReplicas: 0` only lets HPA/KEDA take it to zero
   through the scale subresource).

The state carried between calls (`ScalerState`) is an immutable value with `to_dict` /
`from_dict`, so the controller may keep it in memory or in status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from gem_operator.api.autoscaling import AutoscalingSpec, RatePolicy
from gem_operator.api.common import Condition, set_condition
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.observation import (
    MODEL_LOADED_CONDITION,
    LatencyReading,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    PrecomputeSignals,
    pod_states,
)
from gem_operator.autoscaling.panic import panic_step
from gem_operator.autoscaling.signals import SATURATED_SM_ACTIVE, ceil_, sm_signal
from gem_operator.autoscaling.slo import effective_target, slo_step
from gem_operator.autoscaling.state import ScalerState
from gem_operator.autoscaling.trend import ramp_step

# Scaling condition types (status.conditions[].type).
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
METRICS_UNAVAILABLE = "MetricsUnavailable"


# How long history is kept: the longest window/period the API allows.
_HISTORY_SECONDS = 3600.0
_EPS = 1e-9

Direction = Literal["up", "down", "none"]

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
    effective_target: float | None = None  # SM target scaled on (targetSmActive after the SLO feedback)
    p99_ms: float | None = None  # the fresh p99 the SLO feedback read, if any
    panicking: bool = False

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
                bound = min(bound, ceil_(start * (1 - pol.percent / 100)))
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
    slo_p99_ms: float | None = None,
) -> Decision:
    """One sync of the autoscaler. Pure: the same inputs give the same Decision (and new state).

    `saturation`: mean SM active at which pods count as saturated (None: the plain HPA ratio).
    `slo_p99_ms`: the service's `spec.slo.p99LatencyMs`; with `observation.latency` it drives the
    SLO feedback (`slo.py`). Either missing: the effective target stays where the state has it
    (`targetSmActive` for a fresh state) and nothing else changes.

    This is the one entry point every driver calls: the operator's controller, `gemop replay`,
    `gemop demo` (through the operator) and the closed-loop load test. Keep its signature.
    """
    obs = observation
    current = max(0, obs.current_replicas)
    lo, hi = spec.min_replicas, spec.max_replicas
    horizon = now - _HISTORY_SECONDS
    recs = tuple((t, n) for t, n in state.recommendations if t > horizon)
    events = tuple((t, d) for t, d in state.events if t > horizon)
    empty_since = state.backlog_empty_since

    held_target = effective_target(spec, state)
    sig = sm_signal(spec, obs, now, saturation, state.queue, target=held_target, last_backlog=state.backlog)
    # The p99 of a query window that held an overload says capacity was short, which the queue rule
    # sizes; it is no lesson about headroom. So the window after an overloaded sync cuts no target.
    last_overloaded = now if sig.overloaded else state.slo_last_overloaded
    overload_in_window = last_overloaded is not None and now - last_overloaded < (
        spec.slo_feedback.decrease_interval_seconds
    )
    slo = slo_step(spec, state, obs, slo_p99_ms, now, overloaded=overload_in_window, sm_active=sig.metric_value)
    # A p99 already using part of the SLO: scale-up does not wait for the up tolerance band (at a
    # few replicas 10 % is most of a replica, and the replica ordered late serves a pod start later).
    eager = (
        slo.p99_ms is not None
        and slo_p99_ms is not None
        and slo.p99_ms > spec.slo_feedback.eager_scale_up_above * slo_p99_ms
    )
    if slo.target != held_target or eager:
        sig = sm_signal(
            spec,
            obs,
            now,
            saturation,
            state.queue,
            target=slo.target,
            last_backlog=state.backlog,
            tolerance_up=0.0 if eager else None,
        )
    signals: dict[str, float] = {}
    if sig.recommendation is not None:
        signals["smActive"] = float(sig.recommendation)
    ramp = ramp_step(
        spec,
        state.demand,
        sig.usage,
        slo.target,
        now,
        lead_seconds=state.lead_seconds,
        pending=state.scale_up_pending,
        serving=sum(1 for p in obs.pods if p.serving),
        current=current,
        overloaded=sig.overloaded,
    )
    if ramp.recommendation is not None and sig.recommendation is not None:
        signals["rampLead"] = float(ramp.recommendation)
        if ramp.recommendation > max(sig.recommendation, current):
            # The replicas ordered now serve a lead later: size them for the load then (trend.py). This
            # acts before the SM rule would, inside its tolerance band too: waiting for the band to be
            # left is what makes a ramp's replica arrive late.
            # It is what the arrivals will need, so the stabilisation history records it (steady=None).
            sig = replace(
                sig,
                recommendation=ramp.recommendation,
                reason="RisingLoad",
                message=f"{sig.message}; {ramp.message}",
                steady=None,
            )
    pan = panic_step(spec, state, obs, now, slo.target, saturation)
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
            b = ceil_(pre.backlog / spec.backlog_target_per_replica)
            signals["backlog"] = float(b)
            queue_recs.append((b, "Backlog", f"backlog {pre.backlog} / {spec.backlog_target_per_replica} per replica"))
            if pre.backlog > 0:
                empty_since = None
            elif empty_since is None:
                empty_since = now
        if pre.oldest_item_age_seconds is not None and (pre.backlog is None or pre.backlog > 0):
            half = spec.deadline_seconds / 2
            d = ceil_(max(ready, 1) * pre.oldest_item_age_seconds / half)
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
            # Capacity ordered only to drain a backlog, or already on its way, is not held for the
            # down window: around a backlog the history records what the arrivals need.
            remembered = sig.steady if sig.steady is not None and rec == sig.recommendation else rec
            recs = (*recs, (now, remembered))
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
    if slo.message:
        message += f"; {slo.message}"

    # Panic: the short window's recommendation applies at once (no up window, no rate policy).
    panic_up = False
    if pan.panicking and not yielding and not held:
        want = max(stabilised, pan.recommendation or 0)
        if want > stabilised and want > current:
            reason = "Panic"
        message += f"; {pan.message}"
        panic_up = want > current
        stabilised = want

    # Rate policies.
    limited: tuple[bool, str, str] = (False, "DesiredWithinRange", "the desired count is within range")
    desired = stabilised
    if desired > current:
        up_limit = _rate_limits(spec.policies.scale_up, events, now, current, up=True)
        if desired > up_limit and not panic_up:
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
    elif desired < current and not yielding and (pan.panicking or slo.over_slo or slo.hold_down):
        # An over-SLO p99 or a panic blocks scale-down: the pool is short of capacity, not idle. So
        # does a recent over-SLO p99 (sloFeedback.scaleDownHoldSeconds): capacity a burst needed is
        # not handed back just before the next burst.
        if pan.panicking:
            why = pan.message
        elif slo.over_slo:
            why = slo.message
        else:
            hold = spec.slo_feedback.scale_down_hold_seconds
            why = f"p99 was over the SLO {now - (slo.last_over or now):.0f}s ago (scaleDownHoldSeconds={hold})"
        limited = (True, "Panic" if pan.panicking else "LatencyOverSlo", f"no scale-down (wanted {desired}): {why}")
        message += f"; no scale-down to {desired}"
        desired = current
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

    learned = slo.target if state.effective_target is not None or slo.target != spec.target_sm_active else None
    new_state = replace(
        state,
        recommendations=recs,
        events=events,
        backlog_empty_since=empty_since,
        queue=sig.queue,
        backlog=sig.backlog,
        effective_target=learned,
        slo_good_since=slo.good_since,
        slo_last_decrease=slo.last_decrease,
        panic_until=pan.until,
        slo_last_over=slo.last_over,
        slo_cut_replicas=desired if slo.last_decrease == now else state.slo_cut_replicas,
        slo_last_overloaded=last_overloaded,
        demand=ramp.usage,
        lead_seconds=ramp.lead_seconds,
        scale_up_pending=(now, desired) if desired > current and ramp.pending is None else ramp.pending,
    )
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
        effective_target=slo.target,
        p99_ms=slo.p99_ms,
        panicking=pan.panicking,
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
    "LatencyReading",
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
