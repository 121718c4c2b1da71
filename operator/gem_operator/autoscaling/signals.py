"""The SM-active signal: what one sync's per-pod readings say the replica count should be. Pure.

`measure_sm` turns fresh SM-active samples of Ready pods (plus the queue signal) into a
measurement, or into a hold with the reason the data is unusable; `recommend_sm` sizes a
measurement at a target. The policy measures once per sync and recommends once, at the target the
SLO feedback arrives at (`steps/measure.py`). See `policy.py` step 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Reason, render
from gem_operator.autoscaling.observation import MetricReading, Observation, PodSample
from gem_operator.autoscaling.state import Backlog

# SM active at or above this means the pods are saturated: demand may be far above what they show.
SATURATED_SM_ACTIVE = 0.9

EPS = 1e-9

# SM active is the fraction of the SMs busy. A reading a little past 1 (a sampled counter's jitter)
# is a busy pod and counts as it reads; one past this is another metric in SM active's place, most
# often a utilisation in percent, and taken as a fraction 45 % reads 75x the target.
SM_ACTIVE_MAX = 1.5
# Queued seconds per pod are read up to a day: past that a reading says only that the pool is far
# behind (it already orders maxReplicas), and the products of a larger one overflow a float.
QUEUE_SECONDS_MAX = 86_400.0


def ceil_(x: float) -> int:
    """ceil that ignores float noise: 0.6 * 10 / 0.6 is 10, not 11."""
    return max(0, math.ceil(x - EPS))


@dataclass(frozen=True)
class Signal:
    recommendation: int | None  # None: hold
    reason: str
    reasons: tuple[Reason, ...]  # what the signal says, one clause each (`message` joins them)
    metric_value: float | None = None
    metric_timestamp: float | None = None
    metrics_problem: str | None = None  # set when MetricsUnavailable
    metrics_reason: str = "MetricsFresh"
    queue: tuple[float, float] | None = None  # (now, mean queued seconds) to remember for the next sync
    # The recommendation without the backlog-drain term: what demand needs once the queue is empty.
    # The stabilisation history records this, so capacity ordered to clear a one-off backlog is not
    # held for the whole scale-down window. None: same as `recommendation`.
    steady: int | None = None
    overloaded: bool = False  # queued work or saturated SM: demand beyond what the pods serve
    backlog: Backlog | None = None  # to remember for the next sync
    usage: float | None = None  # Ready pods' SM usage with the queue's excess: demand in SM-active terms
    # What arrives in SM-active terms while there is, or just was, a backlog: SM usage then reads
    # the drain too. None: no backlog, or no queue reading to measure one (`usage` is what arrives).
    arrivals: float | None = None

    @property
    def message(self) -> str:
        return render(self.reasons)


def _hold(reason: str, text: str, problem: str | None = None, metrics_reason: str = "MetricsFresh") -> Signal:
    return Signal(None, reason, (Reason("sm", reason, text),), metrics_problem=problem, metrics_reason=metrics_reason)


@dataclass(frozen=True)
class SmMeasurement:
    """What one sync's SM reading (with the queue) measures, before a target is applied to it.

    Measured once per sync (`measure_sm`); the SLO feedback reads `overloaded` and `metric_value`
    from it, then `recommend_sm` sizes it at the effective target the feedback arrives at.
    """

    current: int
    ready: int  # Ready pods with the model loaded
    fresh: int  # of them, those with a fresh SM sample
    sm_usage: float  # sum of their SM active
    usage: float  # the same with the queue's excess: demand in SM-active terms
    drain: float  # of `usage`, the part that empties the queue within drainSeconds
    stamp: float  # newest fresh sample
    worst_queue: float | None  # most queued seconds on one pod (None: no queued work)
    growth: float  # growth of the mean queued seconds per second since the last sync
    arrivals: float  # what the arrivals need in SM-active terms (the stabilisation history)
    had_backlog: bool  # a backlog now or at the last sync
    queued_before: bool  # a backlog at the last sync too
    overloaded: bool  # queued work or saturated SM: demand beyond what the pods serve
    queue: tuple[float, float] | None  # to remember for the next sync (None: no queue reading)
    backlog: Backlog | None

    @property
    def metric_value(self) -> float:
        """Mean fresh SM active of the Ready pods."""
        return self.sm_usage / self.fresh

    @property
    def missing(self) -> int:
        return self.ready - self.fresh


def fresh_samples(
    spec: AutoscalingSpec,
    obs: Observation,
    reading: MetricReading,
    serving: list[str],
    now: float,
    fraction: bool = True,
) -> dict[str, PodSample] | Signal:
    """The finite samples of the serving pods younger than `staleAfterSeconds`, or the hold that
    says why there are none (source error, no replicas, no Ready pod, no sample, none that is a
    fraction, all stale). `fraction`: the reading is SM active, so a value past `SM_ACTIVE_MAX` is
    not a sample (False for the plain HPA ratio, which the baselines feed requests/s)."""
    if reading.error is not None:
        return _hold("MetricsUnavailable", f"metric source failed: {reading.error}", reading.error, "SourceError")
    if not serving and not obs.pods and obs.current_replicas == 0:
        return _hold("ScaledToZero", "no replicas: nothing to measure")
    if not serving:
        msg = f"no Ready pod with the model loaded (of {len(obs.pods)} pods)"
        return _hold("NoReadyPods", msg, msg, "NoReadyPods")
    stale_after = spec.metrics.stale_after_seconds
    fresh: dict[str, PodSample] = {}
    newest: float | None = None
    past_one: tuple[str, float] | None = None
    for pod in serving:
        sample = reading.samples.get(pod)
        if sample is None or not math.isfinite(sample.value):
            continue
        if fraction and sample.value > SM_ACTIVE_MAX:
            past_one = past_one or (pod, sample.value)
            continue
        newest = sample.timestamp if newest is None else max(newest, sample.timestamp)
        if now - sample.timestamp <= stale_after:
            fresh[pod] = sample
    if fresh:
        return fresh
    if past_one is not None:
        pod, value = past_one
        msg = (
            f"SM active must be a fraction in [0, 1], but pod {pod} reads {value:g}: "
            "spec.autoscaling.metrics.prometheus.query returns another metric or a percentage "
            "(query DCGM_FI_PROF_SM_ACTIVE, a fraction, or divide a percentage by 100)"
        )
        return _hold("MetricsUnavailable", msg, msg, "MetricsOutOfRange")
    if newest is None:
        msg = f"no samples for the {len(serving)} Ready pods"
        return _hold("MetricsUnavailable", msg, msg, "MetricsMissing")
    msg = f"newest sample is {now - newest:.0f}s old (staleAfterSeconds={stale_after})"
    return _hold("MetricsUnavailable", msg, msg, "MetricsStale")


def measure_sm(
    spec: AutoscalingSpec,
    obs: Observation,
    now: float,
    saturation: float | None,
    last_queue: tuple[float, float] | None = None,
    reading: MetricReading | None = None,
    last_backlog: Backlog | None = None,
) -> SmMeasurement | Signal:
    """Measure the reading (`obs.metrics` unless `reading`, e.g. the panic window's samples), or
    say why it cannot be used: a Signal that holds (recommendation None)."""
    serving = [p.name for p in obs.pods if p.serving]
    fresh = fresh_samples(spec, obs, obs.metrics if reading is None else reading, serving, now, saturation is not None)
    if isinstance(fresh, Signal):
        return fresh
    stale_after = spec.metrics.stale_after_seconds
    values = [max(0.0, s.value) for s in fresh.values()]
    sm_usage = sum(values)
    sm_avg = sm_usage / len(values)
    # Demand beyond what SM active can show. Queued seconds `b` grow at `arrivals / capacity - 1`
    # per second, so the growth `g` since the last sync says how far demand exceeds what the pods
    # serve; `b / drain` more empties the queue within `drainSeconds`. A pod's SM usage is scaled
    # by `1 + g + b / drain`. Only fresh queue samples of pods with a fresh SM sample count; a
    # missing one means an empty queue, so the queue can raise the recommendation, never lower it.
    queued = fresh_queue(obs.queue, fresh, now, stale_after)
    drain = float(spec.metrics.queue.drain_seconds)
    mean_queue = sum(queued.values()) / len(fresh)
    growth = 0.0
    if last_queue is not None and 0 < now - last_queue[0] <= stale_after:
        growth = max(0.0, (mean_queue - last_queue[1]) / (now - last_queue[0]))
    remember = (now, mean_queue) if obs.queue is not None and obs.queue.error is None else None
    draining = sum(max(0.0, s.value) * queued.get(pod, 0.0) / drain for pod, s in fresh.items())
    usage = sm_usage * (1 + growth) + draining
    # What the arrivals need, for the stabilisation history (`Signal.steady`): a backlog's total
    # (pod-seconds of work) grows at arrivals minus what the pods serve, so SM usage times the
    # share of it the pool served since the last sync (`served_share`) plus the total's growth per
    # Ready pod is the arrivals in SM-active terms, below SM usage while the pods drain a backlog.
    # Only with a queue reading; while there is, or just was, a backlog, or while capacity is on
    # its way, the history records that instead of the recommendation.
    # The total spans the Ready pods, those without a fresh sample taken at the measured mean: a
    # sum over the fresh pods alone grows whenever more pods report, and would read as arrivals.
    total = mean_queue * len(serving)
    backlog: Backlog | None = (now, total, len(serving)) if remember is not None else None
    arrivals = sm_usage * (1 + growth)
    if backlog is not None and last_backlog is not None and 0 < now - last_backlog[0] <= stale_after:
        growth_per_pod = (total - last_backlog[1]) / ((now - last_backlog[0]) * len(serving))
        arrivals = sm_usage * max(0.0, served_share(len(serving), last_backlog[2]) + growth_per_pod)
    queued_before = last_backlog is not None and last_backlog[1] > 0
    return SmMeasurement(
        current=obs.current_replicas,
        ready=len(serving),
        fresh=len(fresh),
        sm_usage=sm_usage,
        usage=usage,
        drain=draining,
        stamp=max(s.timestamp for s in fresh.values()),
        worst_queue=max(queued.values()) if queued else None,
        growth=growth,
        arrivals=arrivals,
        had_backlog=total > 0 or queued_before,
        queued_before=queued_before,
        overloaded=bool(queued) or growth > 0 or (saturation is not None and sm_avg >= saturation),
        queue=remember,
        backlog=backlog,
    )


def served_share(ready: int, ready_before: int | None) -> float:
    """The share of the Ready pods' SM usage that the pool served over the interval since the last
    sync, for the backlog's arrivals (what the pods served plus the backlog's growth).

    Where pods turned Ready (or left) in between, the pool served the interval partly at its old
    size: the mean of the two counts over today's, as if they changed mid-interval. Taken at today's
    count, a crowd's backlog read over a sync in which the first ordered pods came up counted their
    work as arrivals, and the pool ordered 48 replicas where 36 served the crowd
    (`bench/autoscaling_sweeps.py start-ups`). A count of None (a state from before it was kept)
    reads as today's.
    """
    if ready_before is None or ready <= 0:
        return 1.0
    return (ready + ready_before) / (2 * ready)


def recommend_sm(
    spec: AutoscalingSpec,
    measured: SmMeasurement | Signal,
    saturation: float | None,
    target: float | None = None,
    tolerance_up: float | None = None,
) -> Signal:
    """The SM-active recommendation for a measurement (a hold passes through). `target` replaces
    `targetSmActive` (the SLO feedback's effective target); `tolerance_up` replaces
    `tolerance.up` (0 while the p99 is above `eagerScaleUpAbove`)."""
    if isinstance(measured, Signal):
        return measured
    m = measured
    target = spec.target_sm_active if target is None else target
    current, ready, missing, usage, sm_avg = m.current, m.ready, m.missing, m.usage, m.metric_value

    def out(reason: str, want: int, *texts: str) -> Signal:
        steady = None
        if m.backlog is not None and (m.had_backlog or reason == "CapacityPending"):
            steady = min(want, ceil_(m.arrivals / target))
        arrivals = m.arrivals if m.backlog is not None and m.had_backlog else None
        reasons = tuple(Reason("sm", reason, t) for t in texts)
        return Signal(
            want,
            reason,
            reasons,
            sm_avg,
            m.stamp,
            queue=m.queue,
            backlog=m.backlog,
            overloaded=m.overloaded,
            steady=steady,
            usage=usage,
            arrivals=arrivals,
        )

    avg = usage / m.fresh
    ratio = avg / target
    tol_up = spec.tolerance.up if tolerance_up is None else tolerance_up
    tol_down = spec.tolerance.down
    note = f" ({missing} Ready pods without a fresh sample)" if missing else ""
    base = f"SM active {sm_avg:.2f} vs target {target:.2f} over {m.fresh} Ready pods{note}"
    if m.worst_queue is not None or m.growth > 0:
        worst = m.worst_queue or 0.0
        base += f", queue up to {worst:.1f}s of work growing {m.growth:.2f}s/s (demand {avg:.2f} in SM-active terms)"
    if ratio > 1 + tol_up + EPS:
        # Missing pods count as idle: only scale up if the measured usage alone justifies it.
        # The arrivals are sized at the target. A queue is emptied by pods working flat out, not
        # at the target: sized at the target, a flash crowd's backlog ordered replicas that idled
        # once it was gone (40 for a 4x step that needs 17). A backlog that lasted since the last
        # sync is planned as it will be a drainSeconds on, at its measured growth: capacity
        # ordered now serves after a pod start, and a crowd's queue grows until then.
        ceiling = max(target, SATURATED_SM_ACTIVE if saturation is None else saturation)
        ahead = m.sm_usage * m.growth if m.queued_before else 0.0
        want = max(ceil_((usage - m.drain) / target), ceil_((usage + ahead) / ceiling))
        reason = "QueuedWork" if want > ceil_(m.sm_usage / target) else "HighSmActive"
        if saturation is not None and target < saturation <= sm_avg and not missing and m.queue is None:
            # Saturated and no queue signal to say by how much: SM active cannot rise further, so
            # the ratio only bounds demand from below. Like a panic mode, ask for at least twice the
            # Ready pods (once per start-up wave: pods still loading count toward it).
            want = max(want, 2 * ready)
            reason = "SaturatedSmActive"
        if m.backlog is not None and m.had_backlog and m.arrivals < m.sm_usage:
            # The backlog shrinks: the pods serve more than arrives, and SM active reads the drain.
            # Capacity ordered now serves after a pod start, when the drain is over: size it by the
            # arrivals (a flash crowd's tail otherwise orders replicas that start after it ends).
            want = min(want, ceil_(m.arrivals / target))
        if usage / (ready * target) <= 1 + tol_up or want <= current:
            return out("CapacityPending", current, base, "capacity already sufficient or on its way")
        return out(reason, want, f"{base}: {want} replicas")
    if ratio < 1 - tol_down - EPS:
        # Missing pods count as on target; pods still loading are kept.
        adj = (usage + missing * target) / (ready * target)
        if adj >= 1 - tol_down:
            return out("WithinTolerance", current, base, "missing samples keep it in the band")
        want = min(current, ceil_(ready * adj) + max(0, current - ready))
        return out("LowSmActive", want, f"{base}: {want} replicas")
    return out("WithinTolerance", current, f"{base}: inside the tolerance band")


def fresh_queue(
    reading: MetricReading | None, fresh: Mapping[str, PodSample], now: float, stale_after: float
) -> dict[str, float]:
    """Queued seconds of work per pod (at most `QUEUE_SECONDS_MAX`), for pods with a fresh SM sample
    and a fresh, positive queue sample."""
    if reading is None or reading.error is not None:
        return {}
    out: dict[str, float] = {}
    for pod in fresh:
        sample = reading.samples.get(pod)
        if sample is None or not math.isfinite(sample.value) or sample.value <= 0:
            continue
        if now - sample.timestamp <= stale_after:
            out[pod] = min(sample.value, QUEUE_SECONDS_MAX)
    return out
