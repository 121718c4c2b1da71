"""RankingService and SolarisPrecompute: GPU pools that load a model and scale on SM utilisation.

Both share the replica/GPU/model/autoscaling surface (ReplicaPoolSpec) and a scale subresource, so
people who prefer HPA or KEDA can turn the built-in autoscaler off and drive spec.replicas.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gem_operator.api.autoscaling import IDLE_BELOW_TARGET_RULE, MIN_LE_MAX_RULE, AutoscalingSpec
from gem_operator.api.common import DNS_SUBDOMAIN_MAX, URI_MAX, ApiModel, Condition, ModelSource, Workload
from gem_operator.api.pod_template import check_main_container

Precision = Literal["auto", "fp32", "bf16", "fp8"]
PRECISIONS: tuple[Precision, ...] = ("auto", "fp32", "bf16", "fp8")


class ReplicaPoolSpec(ApiModel):
    """Fields every replica pool has."""

    replicas: int = Field(default=1, ge=0, le=10000, description="Replicas when the built-in autoscaler is disabled.")
    gpus_per_replica: int = Field(default=1, ge=0, le=16, description="nvidia.com/gpu per pod.")
    model: ModelSource = Field(description="The model every replica loads before it is Ready.")
    workload: Workload = Field(default_factory=Workload, description="Image, resources, env.")
    precision: Precision = Field(
        default="fp32",
        description=(
            "Numeric precision of the model's layers when serving. fp32: as trained. auto: a per-layer plan "
            "(fp32, bf16, int8 on CPUs, fp8 on GPUs that have it) chosen in each pod before it serves by "
            "timing every layer and keeping only changes that pass a quality gate (holdout AUC within 0.001 "
            "of fp32, small score error) and make scoring faster. bf16 / fp8: that precision on every layer "
            "(fp8 falls back to bf16 where the GPU lacks it). The chosen plan appears in status.precision."
        ),
    )


class SloSpec(ApiModel):
    """Latency objective; SolarisPrecompute yields GPUs while it is violated."""

    p99_latency_ms: float = Field(default=50.0, gt=0, le=600_000, description="Target p99 latency (ms).")


class RankingServiceSpec(ReplicaPoolSpec):
    """Desired state of a RankingService."""

    port: int = Field(default=8080, ge=1024, le=65535, description="HTTP port of the ranking server.")
    max_batch_size: int = Field(default=64, ge=1, le=4096, description="Requests per dynamic batch.")
    max_candidates: int = Field(default=2048, ge=1, le=100_000, description="Candidates per request.")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objective.")
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec, description="SM-utilisation scaling.")
    precompute_ref: str | None = Field(
        default=None,
        max_length=DNS_SUBDOMAIN_MAX,
        description=(
            "SolarisPrecompute (same namespace) whose embeddings the ranker looks up and feeds its model: the "
            "operator points the ranker at that pool's store, key prefix, fallback tiers and foundation version, "
            "and publishes the ranker's candidate sets to the pool's stream."
        ),
    )

    @model_validator(mode="after")
    def _main_container(self) -> Self:
        check_main_container(self.workload.pod_template, "ranker")
        return self


class EmbeddingStore(ApiModel):
    """Where precomputed user-ad embeddings go (Redis)."""

    url: str = Field(pattern=r"^rediss?://.+", max_length=URI_MAX, description="redis:// or rediss:// URL.")
    ttl_seconds: int = Field(default=3600, ge=1, le=604_800, description="Lifetime of an embedding.")
    key_prefix: str = Field(default="gem:emb", min_length=1, max_length=64, description="Key namespace.")
    credentials_secret_ref: str | None = Field(
        default=None, max_length=DNS_SUBDOMAIN_MAX, description="Secret with the Redis password."
    )


class CandidateSource(ApiModel):
    """The Redis stream where the ranking tier publishes upcoming candidate sets."""

    url: str = Field(pattern=r"^rediss?://.+", max_length=URI_MAX, description="redis:// URL of the stream's server.")
    stream: str = Field(default="gem:candidates", min_length=1, max_length=256, description="Stream key.")
    consumer_group: str = Field(
        default="solaris", min_length=1, max_length=256, description="Consumer group of the workers."
    )


FallbackTier = Literal["exact", "userAdGroupAggregate", "similarUser"]
FALLBACK_TIERS: tuple[FallbackTier, ...] = ("exact", "userAdGroupAggregate", "similarUser")


class FallbackSpec(ApiModel):
    """The read path degrades, never drops: tiers tried in order when an exact embedding is missing."""

    tiers: list[FallbackTier] = Field(
        default_factory=lambda: list(FALLBACK_TIERS),
        min_length=1,
        max_length=3,
        description="Order of lookups.",
    )
    aggregate_window: int = Field(default=20, ge=1, le=10_000, description="Recent embeddings averaged.")

    @model_validator(mode="after")
    def _exact_first(self) -> Self:
        if self.tiers[0] != "exact":
            raise ValueError(f"tiers must start with 'exact', got {self.tiers}; put exact first")
        if len(set(self.tiers)) != len(self.tiers):
            raise ValueError(f"tiers must not repeat, got {self.tiers}")
        return self


class PrecomputeAutoscalingSpec(AutoscalingSpec):
    """SM utilisation plus backlog and deadline; scale to zero when idle; yield to a ranker."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [MIN_LE_MAX_RULE, IDLE_BELOW_TARGET_RULE]})

    min_replicas: int = Field(default=0, ge=0, le=10000, description="Lower bound (0 allows scale to zero).")
    backlog_target_per_replica: int = Field(
        default=1000, ge=1, le=10_000_000, description="Queued candidate sets one replica should hold."
    )
    deadline_seconds: int = Field(
        default=60, ge=1, le=86_400, description="Oldest queued item must be done within this."
    )
    idle_seconds_before_zero: int = Field(
        default=600, ge=0, le=86_400, description="Empty backlog this long scales to minReplicas (0 = zero)."
    )
    yield_to: str | None = Field(
        default=None,
        max_length=DNS_SUBDOMAIN_MAX,
        description="RankingService whose SLO takes priority: yield GPUs when it is violated.",
    )


class SolarisPrecomputeSpec(ReplicaPoolSpec):
    """Desired state of a SolarisPrecompute."""

    store: EmbeddingStore = Field(description="Embedding store.")
    source: CandidateSource = Field(description="Where candidate sets arrive.")
    fallback: FallbackSpec = Field(default_factory=FallbackSpec, description="Read-path degradation.")
    batch_size: int = Field(default=256, ge=1, le=65536, description="Pairs per embedding batch.")
    foundation_version: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
        description=(
            "Version of the foundation model this pool serves (its model directory's version). Workers refuse a "
            "model of another version; the embedding store is keyed by it, and RankingServices that reference "
            "this pool read it (a vertical model trained against another foundation version reads nothing)."
        ),
    )
    autoscaling: PrecomputeAutoscalingSpec = Field(
        default_factory=PrecomputeAutoscalingSpec, description="Scaling on SM utilisation and backlog."
    )

    @model_validator(mode="after")
    def _main_container(self) -> Self:
        check_main_container(self.workload.pod_template, "precompute")
        return self


class MetricSample(ApiModel):
    """The last value the autoscaler read."""

    value: float = Field(description="Metric value.")
    timestamp: str = Field(description="RFC 3339 time of the sample.")


class AutoscalingStatus(ApiModel):
    """What the built-in autoscaler learned and saw at its last sync."""

    effective_target_sm_active: float | None = Field(
        default=None,
        description=(
            "SM target in use: targetSmActive adjusted by the SLO feedback (autoscaling.sloFeedback), "
            "within [minTargetFraction x targetSmActive, targetSmActive]."
        ),
    )
    p99_latency_ms: float | None = Field(default=None, description="Last fresh p99 latency read (ms).")
    panicking: bool | None = Field(default=None, description="Panic mode active: scale-down blocked.")


class ScalerStateStatus(ApiModel):
    """The built-in autoscaler's memory between passes (stabilisation windows, rate policies, idle timer).

    An object, not a JSON string, so that `kubectl get -o yaml` and GitOps health checks can read
    it; unknown fields are preserved so that the policy may remember more without a schema change.
    """

    recommendations: list[list[float]] = Field(
        default_factory=list, description="[unix time, replicas] recommended within the stabilisation windows."
    )
    events: list[list[float]] = Field(
        default_factory=list, description="[unix time, replica delta] of recent scale events (rate policies)."
    )
    backlog_empty_since: float | None = Field(default=None, description="Unix time the backlog became empty.")
    queue: list[float] | None = Field(default=None, description="Last queue reading: [unix time, seconds of work].")

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})


class PrecisionStatus(ApiModel):
    """The serving precision plan the pods chose (from their precision-plan init containers)."""

    requested: str | None = Field(default=None, description="spec.precision the plan was made for.")
    device: str | None = Field(default=None, description="Device type the plan was measured on (cuda, cpu).")
    layers: dict[str, int] = Field(default_factory=dict, description="Number of model layers per precision.")
    auc_delta: float | None = Field(default=None, description="Holdout AUC of the plan minus fp32's.")
    mean_score_error: float | None = Field(default=None, description="Mean absolute score change against fp32.")
    speedup: float | None = Field(default=None, description="Scoring speed of the plan over fp32 (256 candidates).")


class PoolStatus(ApiModel):
    """Observed state of a replica pool (shared by both kinds)."""

    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    phase: str | None = Field(default=None, description="Pending, Progressing, Ready, Invalid, ...")
    conditions: list[Condition] = Field(default_factory=list, description="Kubernetes-style conditions.")
    replicas: int | None = Field(default=None, description="Pods of the child workload.")
    ready_replicas: int | None = Field(default=None, description="Ready pods with the model loaded.")
    desired_replicas: int | None = Field(default=None, description="What the operator asks for now.")
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    model_load_seconds: float | None = Field(default=None, description="Last model load time.")
    last_metric: MetricSample | None = Field(default=None, description="Last metric sample.")
    last_scale_time: str | None = Field(default=None, description="When replicas last changed.")
    last_scale_reason: str | None = Field(default=None, description="Why they changed.")
    scaler_state: ScalerStateStatus | None = Field(
        default=None, description="Autoscaler history: recommendations and scale events in the windows."
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None, description="Effective SM target, last p99 and panic state of the built-in autoscaler."
    )
    model: ServedModel | None = Field(default=None, description="The model the pods are given.")
    precision: PrecisionStatus | None = Field(
        default=None, description="Serving precision plan the pods run (absent with spec.precision fp32)."
    )


class ServedModel(ApiModel):
    """The model a pool's pods load: its URI and, for model.fromTraining, the version it resolved to."""

    uri: str = Field(description="What the loader pulls.")
    training: str | None = Field(default=None, description="The GEMTraining that exported it.")
    version: int | None = Field(default=None, description="The exported version.")


class RankingServiceStatus(PoolStatus):
    """Observed state of a RankingService."""


class SolarisPrecomputeStatus(PoolStatus):
    """Observed state of a SolarisPrecompute."""

    backlog: int | None = Field(default=None, description="Queued candidate sets.")


__all__ = [
    "PRECISIONS",
    "AutoscalingStatus",
    "CandidateSource",
    "EmbeddingStore",
    "FallbackSpec",
    "PoolStatus",
    "Precision",
    "PrecisionStatus",
    "PrecomputeAutoscalingSpec",
    "RankingServiceSpec",
    "RankingServiceStatus",
    "ReplicaPoolSpec",
    "ServedModel",
    "SloSpec",
    "SolarisPrecomputeSpec",
    "SolarisPrecomputeStatus",
]
