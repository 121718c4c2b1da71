"""GEMTraining: a gang of GPU pods for 5D-parallel training of a GEM-style model.

The mesh follows torchtitan's order, outer to inner: pp, dp_replicate, dp_shard, cp, tp. Expert
parallelism is folded into dp_shard x cp (ep must divide it), so it adds no dimension and no GPUs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gem_operator.api.common import ARG_MAX, URI_MAX, ApiModel, Condition, SecretRef, Workload
from gem_operator.api.data import TrainingData
from gem_operator.api.mesh import MAX_WORLD_SIZE, MESH_DIMS, Mesh
from gem_operator.api.pod_template import check_main_container


class Parallelism(ApiModel):
    """Degrees of the 5D mesh; world size is their product."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.pp * self.dpReplicate * self.dpShard * self.cp * self.tp <= {MAX_WORLD_SIZE}",
                    "message": f"pp*dpReplicate*dpShard*cp*tp must be at most {MAX_WORLD_SIZE} GPUs",
                }
            ]
        }
    )

    pp: int = Field(default=1, ge=1, le=1024, description="Pipeline stages.")
    dp_replicate: int = Field(default=1, ge=1, le=65536, description="Data-parallel replicas (DDP/HSDP).")
    dp_shard: int = Field(default=1, ge=1, le=65536, description="Data-parallel shards (FSDP).")
    cp: int = Field(default=1, ge=1, le=1024, description="Context (sequence) parallelism.")
    tp: int = Field(default=1, ge=1, le=64, description="Tensor parallelism; never leaves a host.")
    ep: int = Field(default=1, ge=1, le=65536, description="Expert parallelism, folded into dpShard x cp.")
    world_size: int | None = Field(
        default=None, ge=1, le=1048576, description="Optional check: must equal pp*dpReplicate*dpShard*cp*tp."
    )

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """Mesh shape in MESH_DIMS order."""
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    @property
    def mesh(self) -> Mesh:
        """The device mesh these degrees describe (ranks, coordinates, groups)."""
        return Mesh(self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp, self.ep)

    @property
    def product(self) -> int:
        """The world size (``Mesh.world_size``), computed here: it is read for every pod rendered."""
        return self.pp * self.dp_replicate * self.dp_shard * self.cp * self.tp

    def mesh_shape_env(self) -> str:
        """The GEM_MESH_SHAPE value (docs/contracts.md)."""
        return ",".join(f"{name}={size}" for name, size in zip(MESH_DIMS, self.shape, strict=True))

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problems = self.mesh.problems(self.world_size)
        if problems:
            raise ValueError(problems[0])
        return self


class TopologyTier(ApiModel):
    """One topology tier: a name and the node label whose value names the domain."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$", description="Tier name used by placement rules.")
    label: str = Field(min_length=1, max_length=316, description="Node label key, e.g. nvidia.com/gpu.clique.")
    bandwidth_gbps: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        alias="bandwidthGBps",
        description=(
            "GB/s per GPU of the links a byte uses when the widest tier it crosses is this one; weights the "
            "planner's cost score (default: the planner's table for host, nvlink, rack, block, zone)."
        ),
    )


DEFAULT_TIERS: tuple[tuple[str, str], ...] = (
    ("host", "kubernetes.io/hostname"),
    ("nvlink", "nvidia.com/gpu.clique"),
    ("rack", "gem.dev/rack"),
    ("block", "gem.dev/block"),
    ("zone", "topology.kubernetes.io/zone"),
)


#: Tier names that discovery uses when topology.tiers is unset (gem_operator.topology.tiers).
DISCOVERED_TIER_NAMES: tuple[str, ...] = ("host", "machine", "nvlink", "rack", "block", "spine", "zone")


class PlacementMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


class DimensionPlacement(ApiModel):
    """Keep every group of one parallel dimension inside one domain of a tier."""

    dimension: Literal["tp", "cp", "ep", "pp", "dpShard", "dpReplicate", "embedding"] = Field(
        description="Parallel dimension whose groups are constrained."
    )
    tier: str = Field(max_length=31, description="Tier name from topology.tiers.")
    mode: PlacementMode = Field(default=PlacementMode.PREFERRED, description="Required or Preferred.")


class TopologySpec(ApiModel):
    """Ordered topology tiers, tightest first, and per-dimension placement rules.

    Unset ``tiers`` (and no ``kueueTopology``) means discovery: the planner takes the known label
    conventions present on the GPU nodes (host, machine, nvlink, rack, block, spine, zone; see
    ``gem_operator.topology.tiers``).
    """

    tiers: list[TopologyTier] | None = Field(
        default=None,
        min_length=1,
        max_length=8,
        description=(
            "Tiers from tightest (host) to widest (zone). Unset: discovered from the node labels "
            "(NVIDIA, GKE, EKS, OCI, gem.dev and zone conventions)."
        ),
    )
    kueue_topology: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        max_length=253,
        description="Name of a Kueue Topology (kueue.x-k8s.io) whose levels are the tiers; excludes tiers.",
    )
    placement: list[DimensionPlacement] = Field(
        default_factory=list,
        max_length=16,
        description="Per-dimension rules; the planner's defaults otherwise.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.tiers) && has(self.kueueTopology))",
                    "message": "set topology.tiers or topology.kueueTopology, not both",
                }
            ]
        }
    )

    @model_validator(mode="after")
    def _known_tiers(self) -> Self:
        if self.tiers is None:
            if self.kueue_topology is not None:
                return self  # the Topology's levels are read at plan time; the planner judges the rules
            for i, rule in enumerate(self.placement):
                if rule.tier not in DISCOVERED_TIER_NAMES:
                    raise ValueError(
                        f"placement[{i}].tier {rule.tier!r} is not a tier; with topology.tiers unset use one of "
                        f"{list(DISCOVERED_TIER_NAMES)} or list the tiers in topology.tiers"
                    )
            return self
        if self.kueue_topology is not None:
            raise ValueError("set topology.tiers or topology.kueueTopology, not both")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique, got {names}")
        labels = [t.label for t in self.tiers]
        if len(set(labels)) != len(labels):
            raise ValueError(f"tier labels must be unique, got {labels}")
        for i, rule in enumerate(self.placement):
            if rule.tier not in names:
                raise ValueError(
                    f"placement[{i}].tier {rule.tier!r} is not a tier; use one of {names} or add it to topology.tiers"
                )
        return self


class CheckpointSpec(ApiModel):
    """Where checkpoints are written and how often."""

    uri: str = Field(
        pattern=r"^(s3|gs|https?|file)://.+|^/.+",
        max_length=URI_MAX,
        description="s3://, gs://, file:// or an absolute path on a shared volume.",
    )
    interval_steps: int = Field(default=500, ge=1, le=10_000_000, description="Steps between checkpoints.")
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret with object-store credentials (AWS_* or GOOGLE_* keys), given to the trainer and the "
        "checkpoint loader through envFrom; never inline.",
    )

    @property
    def object_store(self) -> bool:
        """s3:// and gs:// checkpoints are uploaded by the trainer and pulled back by the loader."""
        return self.uri.startswith(("s3://", "gs://"))


class ExportSpec(ApiModel):
    """Where the built-in trainer exports versioned models, and how often (status.models lists them)."""

    uri: str = Field(
        pattern=r"^(s3|gs|file)://.+|^/.+",
        max_length=URI_MAX,
        description="s3://, gs://, file:// or an absolute path on a shared volume; versions go to URI/v<N>/.",
    )
    interval_steps: int = Field(
        default=0, ge=0, le=10_000_000, description="Steps between exports; 0 exports at the end only."
    )
    holdout_examples: int = Field(
        default=20_000, ge=1, le=10_000_000, description="Time-ordered holdout examples every version is scored on."
    )
    holdout_sources: dict[
        str,
        Annotated[
            str,
            Field(
                pattern=r"^(s3|gs|https?|file)://.+|^/.+", max_length=URI_MAX, description="The source's later data."
            ),
        ],
    ] = Field(
        default_factory=dict,
        description="With training.data.sources: each source's later data (source name -> Parquet URI, e.g. the "
        "next day's partition), read as the training reads the source: the time-ordered holdout every version is "
        "scored on. Every source once.",
    )
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret with object-store credentials for uri (envFrom, like the checkpoint's); default: the "
        "checkpoint's Secret.",
    )

    @property
    def object_store(self) -> bool:
        return self.uri.startswith(("s3://", "gs://"))


class FailureScope(StrEnum):
    GANG = "Gang"
    REPLICA_GROUP = "ReplicaGroup"


class FailurePolicy(ApiModel):
    """What happens when a pod or node fails."""

    max_restarts: int = Field(default=3, ge=0, le=1000, description="Restarts before the job fails.")
    backoff_seconds: int = Field(
        default=30, ge=0, le=3600, description="First backoff; doubles per restart (capped at 1 h)."
    )
    scope: FailureScope = Field(
        default=FailureScope.GANG, description="Gang restarts all pods; ReplicaGroup only the failed replica."
    )


class TrainingJob(ApiModel):
    """What the pods train (passed to python -m gem_workloads.training)."""

    preset: str = Field(default="tiny", pattern=r"^[a-z0-9-]+$", max_length=63, description="Model preset name.")
    data: TrainingData = Field(
        default_factory=TrainingData,
        description="What to train on: a built-in dataset, or Parquet sources (and sequence sources) as "
        "python -m gem_workloads.training --data-spec reads them.",
    )
    steps: int = Field(default=1000, ge=1, le=100_000_000, description="Training steps.")

    command: list[Annotated[str, Field(min_length=1, max_length=ARG_MAX)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=(
            "Your own trainer instead of the built-in one, e.g. [python, /app/train.py]: run by the same torchrun "
            "launch (torchrun --no-python COMMAND ARGS) with the same env (ranks, mesh shape and coordinates, "
            "rank map, checkpoint and export URIs); needs workload.image. preset, data and steps are then unused."
        ),
    )
    args: list[Annotated[str, Field(max_length=ARG_MAX)]] = Field(
        default_factory=list, max_length=64, description="Arguments of command (then workload.args)."
    )


OWN_TRAINER_RULE = (
    "!has(self.training) || !has(self.training.command) || has(self.workload) && has(self.workload.image)"
)
OWN_TRAINER_MESSAGE = (
    "training.command runs your own trainer: set workload.image to the image that holds it (the default image "
    "has only the built-in trainer)"
)


class GEMTrainingSpec(ApiModel):
    """Desired state of a GEMTraining."""

    parallelism: Parallelism = Field(default_factory=Parallelism, description="5D mesh degrees.")
    gpus_per_node: int = Field(default=8, ge=1, le=16, description="GPUs per host; one pod takes all of them.")
    topology: TopologySpec = Field(default_factory=TopologySpec, description="Tiers and placement rules.")
    embedding_sharding_group: int | None = Field(
        default=None, ge=1, le=1048576, description="Ranks per TorchRec sharding group (default: one NVLink domain)."
    )
    checkpoint: CheckpointSpec = Field(description="Checkpoint location and interval.")
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, description="Restart behaviour.")
    suspend: bool = Field(
        default=False,
        description="True holds or removes the gang; with a Kueue queue label it also deactivates the Workload.",
    )
    training: TrainingJob = Field(default_factory=TrainingJob, description="What to train.")
    export: ExportSpec | None = Field(
        default=None, description="Versioned model exports that RankingService/SolarisPrecompute name by version."
    )
    workload: Workload = Field(default_factory=Workload, description="Image, resources, env.")
    rendezvous_port: int = Field(default=29500, ge=1024, le=65535, description="MASTER_PORT.")

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.parallelism.tp <= self.gpusPerNode",
                    "message": "parallelism.tp must be <= gpusPerNode: a tensor-parallel group never leaves a host",
                },
                {
                    "rule": OWN_TRAINER_RULE,
                    "message": OWN_TRAINER_MESSAGE,
                },
            ]
        }
    )

    @property
    def world_size(self) -> int:
        return self.parallelism.product

    @property
    def nproc_per_node(self) -> int:
        """Processes per pod: all GPUs of a host, or the whole world when it fits on one host."""
        return min(self.gpus_per_node, self.world_size)

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.nproc_per_node

    def embedding_group(self, placed: int | None = None) -> int:
        """Ranks per TorchRec sharding group: the spec's value, else the group the placement
        aligned to its domains (``placed``), else one pod's ranks.

        The one place this default is decided: the planner, the cost model and the pods all ask here.
        """
        return self.embedding_sharding_group or placed or self.nproc_per_node

    @model_validator(mode="after")
    def _fits_hosts(self) -> Self:
        problems = self.parallelism.mesh.host_problems(self.gpus_per_node)
        if problems:
            raise ValueError(problems[0])
        world = self.parallelism.product
        check_main_container(self.workload.pod_template, "trainer")
        if self.training.command is not None and self.workload.image is None:
            raise ValueError(OWN_TRAINER_MESSAGE)
        self._holdout_names_sources()
        if self.embedding_sharding_group is not None and world % self.embedding_sharding_group != 0:
            raise ValueError(
                f"embeddingShardingGroup ({self.embedding_sharding_group}) must divide the world size "
                f"({world}); pick a divisor such as {self.nproc_per_node}"
            )
        return self

    def _holdout_names_sources(self) -> None:
        """export.holdoutSources names exactly the data spec's sources (the built-in datasets need none)."""
        if self.export is None or self.training.command is not None:
            return
        names = [s.name for s in self.training.data.sources or []]
        given = sorted(self.export.holdout_sources)
        if names and given != sorted(names):
            raise ValueError(
                f"export.holdoutSources must give the later data of every source {names} (the holdout each "
                f"version is scored on), got {given}"
            )
        if not names and given:
            raise ValueError("export.holdoutSources is for training.data.sources; the built-in datasets have theirs")


class TierUsage(ApiModel):
    """One tier a plan used and how many candidate nodes carry its label."""

    name: str = Field(description="Tier name (placement rules use it).")
    label: str = Field(description="Node label key.")
    nodes: int = Field(ge=0, description="Candidate (GPU) nodes that carry the label.")


class PlacementSummary(ApiModel):
    """What the planner chose, in brief (the full rank map is in the job's ConfigMap)."""

    planner: str = Field(description="Which planner placed the gang.")
    nodes: list[str] = Field(default_factory=list, description="Hosts by node rank (empty until bound).")
    score: float | None = Field(default=None, description="Communication-cost score (lower is better).")
    cross_tier_bytes: dict[str, float] = Field(
        default_factory=dict, description="Estimated bytes per step crossing each tier."
    )
    spec_key: str | None = Field(default=None, description="Digest of the spec fields the plan was made for.")
    embedding_sharding_group: int | None = Field(
        default=None, description="Ranks per TorchRec sharding group given to the pods (aligned to the placement)."
    )
    tier_source: str | None = Field(
        default=None, description="Where the tiers came from: spec, discovered or kueue/<Topology name>."
    )
    tiers: list[TierUsage] = Field(default_factory=list, description="Tiers used, tightest first.")


class TaskEval(ApiModel):
    """One task's metrics on the export's holdout."""

    auc: float | None = Field(default=None, description="ROC AUC (absent with one class only).")
    examples: int | None = Field(default=None, description="Labelled holdout examples.")
    positives: int | None = Field(default=None, description="Positive labels among them.")


class ExportedModel(ApiModel):
    """One exported version (learned from the trainer's termination message)."""

    version: int = Field(ge=1, description="Version number, counting up from 1.")
    uri: str = Field(description="The version's model directory (gem-model.json, weights, manifest.json).")
    step: int | None = Field(default=None, description="Training step it was exported at.")
    eval: dict[str, TaskEval] = Field(default_factory=dict, description="Holdout metrics by task.")


MAX_LISTED_MODELS = 64
"""status.models keeps the newest versions (older ones stay in the store and can be named by uri)."""


class GEMTrainingStatus(ApiModel):
    """Observed state of a GEMTraining."""

    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    phase: str | None = Field(default=None, description="Pending, Running, Restarting, Succeeded, Failed, ...")
    conditions: list[Condition] = Field(default_factory=list, description="Kubernetes-style conditions.")
    world_size: int | None = Field(default=None, description="Total ranks.")
    nodes: int | None = Field(default=None, description="Pods in the gang.")
    ready_nodes: int | None = Field(default=None, description="Pods running and ready.")
    restarts: int = Field(default=0, description="Gang restarts so far.")
    last_checkpoint: str | None = Field(default=None, description="Newest checkpoint reported.")
    last_failure: str | None = Field(default=None, description="Reason of the last failure.")
    placement: PlacementSummary | None = Field(default=None, description="Placement summary.")
    restart_after: str | None = Field(default=None, description="RFC 3339 time the next restart may start.")
    excluded_nodes: list[str] = Field(default_factory=list, description="Nodes avoided after failures.")
    models: list[ExportedModel] = Field(
        default_factory=list, max_length=MAX_LISTED_MODELS, description="Exported versions, oldest first."
    )
