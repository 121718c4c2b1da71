"""The autoscaling block shared by RankingService and SolarisPrecompute.

The defaults follow the HorizontalPodAutoscaler so that people who know HPA get no surprises:
10 % tolerance, 0 s up / 300 s down stabilisation, scale up by max(+100 %, +4 pods) per 15 s.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator

from gem_operator.api.common import ApiModel

# CEL rule placed on the CRD so the API server rejects the same thing at apply time.
MIN_LE_MAX_RULE: dict[str, JsonValue] = {
    "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
    "message": "minReplicas must be <= maxReplicas",
}

IDLE_BELOW_TARGET_RULE: dict[str, JsonValue] = {
    "rule": (
        "!has(self.metrics) || !has(self.metrics.smActiveIdle) || !has(self.targetSmActive) || "
        "self.metrics.smActiveIdle < self.targetSmActive"
    ),
    "message": "metrics.smActiveIdle must be below targetSmActive",
}

BAND_RULE: dict[str, JsonValue] = {
    "rule": "!has(self.bandLow) || !has(self.bandHigh) || self.bandLow < self.bandHigh",
    "message": "bandLow must be below bandHigh",
}

DEFAULT_SM_QUERY = 'avg by (namespace, pod) (DCGM_FI_PROF_SM_ACTIVE{namespace="$namespace", pod=~"$pods"})'

# Seconds of work waiting in each ranking server's queue: requests queued in the batcher divided by
# the requests it completes per second (docs/contracts.md). clamp_min keeps an idle pod (no
# completions in the last minute) from dividing by zero: its queue then counts one request per second.
DEFAULT_QUEUE_QUERY = (
    'sum by (namespace, pod) (gem_ranking_queue_depth{namespace="$namespace", pod=~"$pods"})'
    " / clamp_min(sum by (namespace, pod) "
    '(rate(gem_ranking_requests_total{namespace="$namespace", pod=~"$pods"}[1m])), 1)'
)

# p99 latency of the pool in seconds, from the ranking server's request histogram
# (gem_workloads.serving.metrics, `gem_ranking_request_seconds`) over its pods: one value per pool.
DEFAULT_LATENCY_QUERY = (
    "histogram_quantile(0.99, sum by (le) "
    '(rate(gem_ranking_request_seconds_bucket{namespace="$namespace", pod=~"$pods"}[1m])))'
)


class Tolerance(ApiModel):
    """No action while |metric/target - 1| is inside the band, per direction."""

    up: float = Field(default=0.1, ge=0, le=1, description="Relative band before scaling up.")
    down: float = Field(default=0.1, ge=0, le=1, description="Relative band before scaling down.")


class Stabilization(ApiModel):
    """Windows over which the safest recommendation wins (HPA semantics)."""

    up: int = Field(default=0, ge=0, le=3600, description="Seconds; the lowest recommendation wins.")
    down: int = Field(
        default=300,
        ge=0,
        le=3600,
        description=(
            "Seconds; the highest recommendation wins, and a new pool's current count is its first (as HPA "
            "seeds it), so it scales down only once a whole window agrees. HPA's 300 s suits pods that start "
            "in seconds; for bursty traffic on replicas that take minutes to load a model, 600-900 s keeps "
            "GPUs through the lulls between bursts (bench/autoscaling_replay.py shows the trade)."
        ),
    )


class RatePolicy(ApiModel):
    """At most `pods` or `percent` change per `periodSeconds` (the larger of the two applies)."""

    pods: int | None = Field(default=None, ge=1, le=10000, description="Absolute pods per period.")
    percent: int | None = Field(default=None, ge=1, le=1000, description="Percent of current per period.")
    period_seconds: int = Field(default=15, ge=1, le=1800, description="Length of the period.")

    @model_validator(mode="after")
    def _one_limit(self) -> Self:
        if self.pods is None and self.percent is None:
            raise ValueError("set pods or percent (or both)")
        return self


class ScalingPolicies(ApiModel):
    """Rate limits per direction."""

    scale_up: list[RatePolicy] = Field(
        default_factory=lambda: [
            RatePolicy(percent=100, period_seconds=15),
            RatePolicy(pods=4, period_seconds=15),
        ],
        max_length=8,
        description="Scale-up limits; the most permissive applies (default +100 % or +4 pods / 15 s).",
    )
    scale_down: list[RatePolicy] = Field(
        default_factory=lambda: [RatePolicy(percent=100, period_seconds=15)],
        max_length=8,
        description="Scale-down limits; the most permissive applies (default -100 % / 15 s).",
    )


# The usual spellings, checked by the API server at apply time (a map lookup per name: a CEL cost
# bounded whatever the keys' length); the model refuses every spelling.
CREDENTIAL_HEADERS_RULE: dict[str, JsonValue] = {
    "rule": "!has(self.headers) || !['Authorization', 'authorization', 'AUTHORIZATION', 'Proxy-Authorization', "
    "'proxy-authorization', 'Cookie', 'cookie'].exists(h, h in self.headers)",
    "message": "headers: Authorization, Proxy-Authorization and Cookie carry credentials: give the operator its "
    "Prometheus credentials instead (chart values prometheus.*)",
}

# RFC 9110's token: what an HTTP header name may hold.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


class PrometheusSource(ApiModel):
    """Where SM utilisation is read: the Prometheus HTTP API (/api/v1/query)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [CREDENTIAL_HEADERS_RULE]})

    url: str = Field(
        default="http://prometheus-operated.monitoring:9090",
        pattern=r"^https?://.+",
        max_length=2048,
        description="Base URL of Prometheus.",
    )
    query: str = Field(
        default=DEFAULT_SM_QUERY,
        min_length=1,
        max_length=4096,
        description=(
            "PromQL returning SM active (0-1) per pod; $namespace and $pods are substituted. A pod reading "
            "above 1.5 (a percentage) has no sample, and with none left the pool holds with MetricsUnavailable, "
            "reason MetricsOutOfRange."
        ),
    )
    headers: dict[str, Annotated[str, Field(max_length=1024, description="The header's value.")]] | None = Field(
        default=None,
        max_length=16,
        description=(
            "Headers sent with every query of this resource, e.g. X-Scope-OrgID: team-ads for a multi-tenant "
            "Mimir, Cortex or Thanos. Not for credentials: the operator sends its own (GEM_PROMETHEUS_* settings)."
        ),
    )

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        for name, value in (headers or {}).items():
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"headers: {name!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)")
            if name.lower() in CREDENTIAL_HEADERS:
                raise ValueError(
                    f"headers: {name} carries a credential, which a resource's spec would show to everyone who can "
                    "read it: give the operator its Prometheus credentials instead (chart values prometheus.*, "
                    "docs/dcgm-exporter.md)"
                )
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"headers: the value of {name} holds a line break or NUL")
        return headers


class QueueSignal(ApiModel):
    """Work queued in each Ready pod, in seconds at the rate the pod completes requests.

    SM active saturates near 1, so once demand exceeds capacity it only says "at least this
    much". The queue says how far beyond: its growth measures the arrivals beyond what the pods
    serve, sized at the target like any demand; a pod with `b` seconds of queued work adds
    `b / drainSeconds` of its SM usage to empty the queue within `drainSeconds`, served flat out
    (SM active 0.9), since the drain is transient and its capacity is not meant to idle at the
    target once the queue is gone. A queue that lasted since the last sync is planned as it will be
    a `drainSeconds` on, at its measured growth (capacity ordered now serves after a pod start). It
    can only raise the recommendation (missing samples count as an empty queue); a RankingService
    reads it from the ranking server's own metrics.
    """

    enabled: bool = Field(default=True, description="Read the queue signal (RankingService only).")
    query: str = Field(
        default=DEFAULT_QUEUE_QUERY,
        min_length=1,
        max_length=4096,
        description="PromQL returning queued work per pod in seconds; $namespace and $pods are substituted.",
    )
    drain_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="Size capacity to empty the measured queue within this many seconds, the pods working flat out.",
    )


class LatencySignal(ApiModel):
    """The pool's observed p99 latency, compared with `spec.slo.p99LatencyMs` (RankingService only).

    Fresh or unavailable exactly like the SM signal: a failed query, an empty or NaN result (no
    requests in the query's window) or a sample older than `staleAfterSeconds` is unavailable,
    never zero, and then the SLO feedback holds what it learned.
    """

    enabled: bool = Field(default=True, description="Read the latency signal (RankingService only).")
    query: str = Field(
        default=DEFAULT_LATENCY_QUERY,
        min_length=1,
        description=(
            "PromQL returning one value, the pool's p99 latency in seconds; $namespace and $pods are "
            "substituted. The default reads the ranking server's gem_ranking_request_seconds histogram."
        ),
    )


class MetricsSpec(ApiModel):
    """Metric sources and freshness."""

    prometheus: PrometheusSource = Field(default_factory=PrometheusSource, description="Prometheus source.")
    queue: QueueSignal = Field(
        default_factory=QueueSignal, description="Queued work per pod: demand beyond what SM active shows."
    )
    latency: LatencySignal = Field(
        default_factory=LatencySignal, description="Observed p99 latency: feeds the SLO feedback on the SM target."
    )
    stale_after_seconds: int = Field(
        default=60, ge=5, le=3600, description="Older samples count as missing: hold, never scale down."
    )
    sm_active_idle: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description=(
            "SM active a Ready pod reads while it serves nothing (a runtime that keeps a kernel resident "
            "between requests reads above 0). The rules size busy SM, (SM active - smActiveIdle) / "
            "(1 - smActiveIdle), against targetSmActive taken the same way; status reports SM active as read."
        ),
    )


class SloFeedback(ApiModel):
    """Adjust the SM target so that the observed p99 keeps `spec.slo.p99LatencyMs` (RankingService).

    The same mean SM active means a very different p99 depending on how bursty the traffic is and
    how many replicas share it, so `targetSmActive` is where the effective target starts, not a
    promise. Two controllers (`controller`):

    `band` (the default; `autoscaling.steps.slo_loop`): a proportional-integral loop on
    log(p99 / band edge) that keeps the p99 inside [`bandLow`, `bandHigh`] x SLO, moving the target
    down when the p99 is above the band and up when it is below, as readily one way as the other,
    between `minTargetFraction` and `maxTargetFraction` x targetSmActive (clamping the output is
    the anti-windup; by default the ceiling is targetSmActive itself, so the loop gives back what it
    cut and no more: `autoscaling.steps.slo_loop` says why). At most one move per
    `decreaseIntervalSeconds`, and none while pods are still starting (Ready < replicas), while the
    pool is overloaded (the queue signal sizes an overload), nor within that interval after either
    (the p99's query window still holds them); no upward move while the stabilisation window keeps
    more replicas than the target asks for (a low p99 then says nothing about the target). Inside
    the band it holds. A p99 below the band for a whole window on a quiet pool also releases
    capacity the scale-down window holds: the window keeps exp(integralGain x error) of its peak
    (never less than the peak of the ramp lead's window), once per window, not while the ramp lead
    sees demand rising.

    `ratchet` (the earlier rule), at every sync with a fresh latency reading:

    - p99 > SLO: the effective target drops by `decreasePercent` (at most once per
      `decreaseIntervalSeconds`; after a cut not before the replica count it led to serves, since
      the p99 has not seen the replicas it ordered; and not while the pool is overloaded:
      queued work or saturated SM, which the queue and saturation rules size), never below `minTargetFraction *
      targetSmActive`. It never rises while p99 is over the SLO, and the pool does not scale down
      then nor for `scaleDownHoldSeconds` after the last over-SLO reading.
    - p99 near the SLO (above `recoverBelow` * SLO): the same cut, before the first violation. A
      pool whose p99 already uses most of the SLO has too little headroom for a ramp during pod
      start-up or the next burst (and p99 does not fall as the load per pod rises, so below the
      target this holds all the more); this is how the target is learned from the latency signal
      before the SLO is missed (a cold start at `targetSmActive`).
    - p99 <= `recoverBelow` * SLO for a whole `recoverSeconds`: it creeps back by `recoverPercent`
      of targetSmActive, never above targetSmActive; each step needs another whole window.
    - no fresh reading: it holds.

    While a fresh p99 is over `eagerScaleUpAbove` * SLO, scale-up ignores `tolerance.up` (any SM
    ratio over 1 adds the replicas it rounds up to): the tolerance band keeps noise from moving the
    pool, but once the p99 has left its floor, waiting for a 10 % excess costs a pod start on a
    ramp (at a few replicas 10 % is most of a replica). Scale-down keeps its tolerance.

    The effective target is kept in status (`autoscaling.effectiveTargetSmActive` and the scaler
    state), so a restarted operator keeps what it learned.
    """

    enabled: bool = Field(
        default=True, description="Adjust the SM target from the observed p99 (needs metrics.latency)."
    )
    controller: Literal["band", "ratchet"] = Field(
        default="band",
        description=(
            "band: a proportional-integral loop keeping the p99 inside [bandLow, bandHigh] x SLO, two-sided; "
            "ratchet: cut while p99 > recoverBelow x SLO, creep back recoverPercent per recoverSeconds."
        ),
    )
    band_low: float = Field(
        default=0.65,
        gt=0,
        lt=1,
        description=(
            "band: the p99 below this fraction of the SLO raises the target, up to maxTargetFraction x targetSmActive."
        ),
    )
    band_high: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "band: the p99 above this fraction of the SLO lowers the target; under the SLO only while the"
            " last cut lowered the p99 by at least half its own size (log/log), so a flat latency curve"
            " is not cut to the floor."
        ),
    )
    proportional_gain: float = Field(
        default=0.3,
        ge=0,
        le=5,
        description=(
            "band: change of log(target) per unit change of the error log(p99 / band edge) between two moves."
        ),
    )
    integral_gain: float = Field(
        default=0.3,
        ge=0,
        le=5,
        description="band: change of log(target) per move per unit of the error log(p99 / band edge).",
    )
    max_target_fraction: float = Field(
        default=1.0,
        ge=1,
        le=2,
        description=(
            "band: ceiling of the effective target, as a fraction of targetSmActive (capped at 0.95 SM active). "
            "1 (the default): the loop gives back what it cut, never more; above 1 a p99 below the band raises "
            "the target past targetSmActive, toward a knee of the latency curve the pool has not been near."
        ),
    )
    min_target_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Floor of the effective target, as a fraction of targetSmActive (0.5: never below half of it).",
    )
    decrease_percent: int = Field(
        default=10, ge=1, le=50, description="Cut of the effective target per step while p99 is over the SLO."
    )
    decrease_interval_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description=(
            "At most one cut per this many seconds (the latency query's window: 1 min by default), and "
            "none for this long after a sync that saw the pool overloaded (the window still holds it)."
        ),
    )
    recover_below: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description=(
            "p99 at or below this fraction of the SLO counts as well under it; above it (near the SLO) "
            "the target is cut as over it."
        ),
    )
    recover_seconds: int = Field(
        default=600, ge=15, le=86_400, description="p99 must stay well under the SLO this long before each creep back."
    )
    recover_percent: int = Field(
        default=5, ge=1, le=100, description="Step back toward targetSmActive, in percent of targetSmActive."
    )
    eager_scale_up_above: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "While p99 is over this fraction of the SLO, scale-up ignores tolerance.up (a replica is added as "
            "soon as the SM ratio rounds up to it); band: over this or bandHigh, whichever is higher."
        ),
    )
    scale_down_hold_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description=(
            "No scale-down for this long after the last p99 over the SLO (hysteresis: capacity bought for a "
            "burst is not given back just before the next one); band: over the SLO while not overloaded."
        ),
    )

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [BAND_RULE]})

    @model_validator(mode="after")
    def _band(self) -> Self:
        if self.band_low >= self.band_high:
            raise ValueError(
                f"bandLow ({self.band_low}) must be below bandHigh ({self.band_high}): the band is where the p99 rests"
            )
        return self


class Hysteresis(ApiModel):
    """A budget of direction changes: a pool that flips between scaling up and down pays a pod start
    (and its GPU) for every flip and learns nothing from it.

    A scale-down right after a scale-up (a reversal) is held while the last hour already holds
    `maxDirectionChangesPerHour - 1` direction changes, so the scale-up that may follow it still
    fits the budget: no hour holds more than `maxDirectionChangesPerHour` changes. That last change
    is kept for a reversal the p99 confirms (below the SLO loop's band for a whole window on a quiet
    pool); any other is held one change earlier. The SLO loop's release after a scale-up is such a
    confirmed reversal. A reversal that would give back fewer than
    min(2, tolerance.down x replicas) replicas is held whatever the budget: it saves little and
    spends two changes. A scale-up is never held (the SLO comes first), and a scale-down after a
    scale-down is no reversal.
    """

    enabled: bool = Field(default=True, description="Hold reversing scale-downs beyond the budget.")
    max_direction_changes_per_hour: int = Field(
        default=4,
        ge=2,
        le=60,
        description=(
            "Direction changes (up to down, down to up) any hour may hold; the last one only for a scale-down "
            "the p99 confirms."
        ),
    )


class PanicMode(ApiModel):
    """Bursts, in the spirit of Knative's KPA panic mode.

    The SM signal averaged over the last `windowSeconds` (instead of the sync interval) gives a
    second recommendation; when it is at least `threshold` times the Ready pods, the pool panics:
    that recommendation is applied at once (scale-up rate policies and the up window are skipped;
    maxReplicas and free GPUs still cap it) and no scale-down happens until `holdSeconds` have passed
    without a new trigger. Off by default: on the diurnal benchmark traces it buys no SLO minutes
    that the queue signal does not already buy (bench/autoscaling_replay.py measures both).
    """

    enabled: bool = Field(default=False, description="Turn panic mode on.")
    window_seconds: int = Field(default=6, ge=1, le=60, description="Short averaging window of the panic signal.")
    threshold: float = Field(
        default=2.0, ge=1.1, le=100, description="Panic when the short-window recommendation is >= this x Ready pods."
    )
    hold_seconds: int = Field(default=60, ge=0, le=3600, description="Panic lasts this long after the last trigger.")


class RampLead(ApiModel):
    """Order for the load new replicas will meet: a replica serves a pod start and model load later.

    A least-squares line through the pool's demand (SM usage of the Ready pods with the queue's
    excess) over the last `windowSeconds` of syncs; while it rises, the recommendation is at least
    what its value one lead ahead needs at the effective target (never less than the SM rule's, so
    it only scales up earlier; the down window then holds it like any recommendation). The lead is
    measured on the pool: the time from a scale-up decision until that many pods serve, averaged
    over scale-ups; `leadSeconds` until the first is measured. At least 8 syncs are fitted; while
    the pool is overloaded (queued work, saturated pods) the samples restart, so a step or a flash
    crowd is not read back as a ramp. It acts inside the tolerance band, only ever upward. Each
    rising line is a forecast, judged when its time comes: the lead orders the share of the rise
    that its recent forecasts made true (on a load that turns within minutes, a line through the
    rising half over-orders every crest), and the shortfall halves over each `windowSeconds`
    without a judged forecast. The line is projected no farther ahead than its samples reach back
    (`windowSeconds` once the window is full): a pool whose start-up is longer leads by the window,
    so raise `windowSeconds` to lead farther. While demand reads at or below the highest demand of
    the last hour before the window, the line orders no farther than that earlier peak: a load
    returning to a level it has reached is a wave, and a line through its rising half projects past
    the crest. A new high gets the full lead. While pods drain a backlog, that peak is what arrived
    (the queue's change says how much), not what the pods served.
    """

    enabled: bool = Field(default=True, description="Turn the ramp lead on.")
    window_seconds: int = Field(
        default=300,
        ge=60,
        le=3600,
        description=(
            "Demand samples fitted (a fit over minutes, so one burst does not read as a ramp); also the "
            "farthest ahead the line is projected."
        ),
    )
    lead_seconds: int = Field(
        default=120,
        ge=0,
        le=1800,
        description=(
            "Lead before one is measured: seconds from a scale-up decision until the new pods serve "
            "(pod start + model load)."
        ),
    )


class AutoscalingSpec(ApiModel):
    """Built-in SM-utilisation autoscaler. Disable it to drive replicas through the scale subresource."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [MIN_LE_MAX_RULE, IDLE_BELOW_TARGET_RULE]})

    enabled: bool = Field(default=True, description="False hands replicas to spec.replicas (HPA/KEDA).")
    min_replicas: int = Field(default=1, ge=0, le=10000, description="Lower bound on replicas.")
    max_replicas: int = Field(default=10, ge=1, le=10000, description="Upper bound on replicas.")
    target_sm_active: float = Field(
        default=0.6, gt=0, le=1, description="Target DCGM_FI_PROF_SM_ACTIVE per pod (fraction 0-1)."
    )
    tolerance: Tolerance = Field(default_factory=Tolerance, description="No-action band per direction.")
    stabilization_seconds: Stabilization = Field(
        default_factory=Stabilization, description="Stabilisation windows per direction."
    )
    policies: ScalingPolicies = Field(default_factory=ScalingPolicies, description="Rate limits.")
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Where the signal comes from.")
    slo_feedback: SloFeedback = Field(
        default_factory=SloFeedback,
        description=(
            "Effective SM target from the observed p99 (metrics.latency) against spec.slo.p99LatencyMs. "
            "controller band (default): a PI loop on log(p99 / band edge) keeps the p99 within [bandLow (0.65), "
            "bandHigh (0.8)] x SLO, between minTargetFraction (0.5) and maxTargetFraction (1) x targetSmActive, "
            "at most one move per decreaseIntervalSeconds (60 s), none while pods start or the pool is "
            "overloaded. controller ratchet: while p99 > recoverBelow (0.7) x SLO it drops decreasePercent "
            "(10 %) at most once per decreaseIntervalSeconds, not while overloaded, never below the floor; after "
            "recoverSeconds (600 s) with p99 <= recoverBelow x SLO it creeps back recoverPercent (5 %). Both: "
            "no scale-down while p99 > SLO nor for scaleDownHoldSeconds (300 s) after; while p99 > "
            "eagerScaleUpAbove (0.5) x SLO scale-up ignores tolerance.up. Reported as "
            "status.autoscaling.effectiveTargetSmActive."
        ),
    )
    ramp_lead: RampLead = Field(
        default_factory=RampLead,
        description=(
            "On a rising load, scale for the demand one lead ahead: a least-squares line through the demand "
            "of the last windowSeconds (300 s), projected by the measured time from a scale-up to serving "
            "pods (leadSeconds, 120 s, until measured). It only raises the recommendation; the samples "
            "restart while the pool is overloaded; while demand is no higher than the last hour's earlier "
            "peak it leads no farther than that peak, and just past it no farther beyond the reading than "
            "demand has passed that peak."
        ),
    )
    hysteresis: Hysteresis = Field(
        default_factory=Hysteresis,
        description=(
            "No scale-down reversing a scale-up while the last hour holds maxDirectionChangesPerHour (4) - 1 "
            "direction changes (- 2 unless the p99 shows room below the SLO loop's band): no hour holds more "
            "than maxDirectionChangesPerHour. Scale-up is never held."
        ),
    )
    panic: PanicMode = Field(
        default_factory=PanicMode,
        description=(
            "Knative KPA-style burst handling, off by default: when the SM signal over windowSeconds (6 s) "
            "asks for >= threshold (2) x the Ready pods, that count applies at once (no rate policy, no up "
            "window) and scale-down is blocked until holdSeconds (60 s) pass without a new trigger."
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas}); "
                "lower minReplicas or raise maxReplicas"
            )
        if self.metrics.sm_active_idle >= self.target_sm_active:
            raise ValueError(
                f"metrics.smActiveIdle ({self.metrics.sm_active_idle}) must be below targetSmActive "
                f"({self.target_sm_active}): the target is a level of work above the idle floor; lower "
                "metrics.smActiveIdle to what an idle pod reads or raise targetSmActive"
            )
        return self
