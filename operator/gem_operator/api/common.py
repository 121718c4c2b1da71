"""Types shared by the three kinds: conditions, resources, workload, model sources (base model: ``base``).

Every field is camelCase on the wire (Kubernetes convention) and snake_case in Python. Models
forbid unknown fields so that a typo in a manifest becomes an error that names the field instead
of a silently ignored setting.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

# ApiModel is re-exported: the kinds' modules import it from here.
from gem_operator.api.base import ApiModel as ApiModel
from gem_operator.api.base import Quantity
from gem_operator.api.pod_template import PodTemplate

GROUP = "gem.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Names of children are "<cr>-<role>-<index>", and Service names must be DNS-1035 labels.
CR_NAME_MAX = 40
# Bounds on free-form strings, so that a resource cannot carry megabytes into every child it renders.
IMAGE_MAX = 512  # registry/name (255) + tag (128) or digest (71), with room to spare
URI_MAX = 2048
DNS_SUBDOMAIN_MAX = 253
ARG_MAX = 4096
ENV_VALUE_MAX = 32768
MODEL_SOURCE_MESSAGE = "set exactly one of model.uri and model.fromTraining"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(description="Condition type, e.g. Ready, Placed, ScalingActive.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason for the last transition.", pattern=r"^[A-Za-z]\w*$")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.")
    observed_generation: int | None = Field(default=None, ge=0, description="Generation this is about.")


def set_condition(
    conditions: list[Condition],
    *,
    type: str,
    status: ConditionStatus | str,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """Return conditions with one type set, keeping lastTransitionTime unless the status flips.

    A pure function (time is passed in) so reconcilers stay deterministic and testable.
    """
    status = ConditionStatus(status)
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type:
            out.append(cond)
            continue
        found = True
        changed = cond.status != status
        out.append(
            Condition(
                type=type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=stamp if changed else cond.last_transition_time,
                observed_generation=observed_generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=stamp,
                observed_generation=observed_generation,
            )
        )
    return out


class ResourceList(ApiModel):
    """Per-container requests or limits. GPUs are counted separately (see gpusPerNode/gpus)."""

    model_config = ConfigDict(alias_generator=None, populate_by_name=True, extra="forbid")

    cpu: Quantity | None = Field(default=None, description='CPU, e.g. "8" or "500m".')
    memory: Quantity | None = Field(default=None, description='Memory, e.g. "64Gi".')
    ephemeral_storage: Quantity | None = Field(
        default=None, alias="ephemeral-storage", description='Scratch disk, e.g. "100Gi".'
    )


class Resources(ApiModel):
    """CPU and memory for the main container; GPUs are set by the kind's own GPU field."""

    requests: ResourceList = Field(default_factory=ResourceList, description="Guaranteed resources.")
    limits: ResourceList = Field(default_factory=ResourceList, description="Upper bounds.")


class EnvVar(ApiModel):
    """A literal environment variable for the main container (use secretRefs for credentials)."""

    name: str = Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=256, description="Variable name.")
    value: str = Field(default="", max_length=ENV_VALUE_MAX, description="Literal value.")


class SecretRef(ApiModel):
    """A Secret in the same namespace; the operator mounts it, it never copies its data."""

    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        max_length=253,
        description="Name of a Secret in the resource's namespace.",
    )


WORKLOADS_REPOSITORY = "ghcr.io/gem-dev/gem-workloads"
WORKLOADS_TAG = "0.1.0"
"""The release's tag: the package version and the chart's appVersion (tests keep the three equal)."""
CUDA_SUFFIX = "-cuda"


def default_workloads_image(gpu: bool) -> str:
    """`:<tag>-cuda` (CUDA torch) for pods with GPUs, `:<tag>` (CPU torch) for the others."""
    return f"{WORKLOADS_REPOSITORY}:{WORKLOADS_TAG}{CUDA_SUFFIX if gpu else ''}"


class Workload(ApiModel):
    """The container the operator runs: image, resources, extra env and args."""

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=IMAGE_MAX,
        description=(
            f"Container image with gem_workloads installed. Default: {default_workloads_image(True)} (CUDA) "
            f"for pods with GPUs, {default_workloads_image(False)} (CPU) otherwise."
        ),
    )
    image_pull_policy: str = Field(
        default="IfNotPresent",
        description="Always, IfNotPresent or Never.",
        json_schema_extra={"enum": ["Always", "IfNotPresent", "Never"]},
    )
    resources: Resources = Field(default_factory=Resources, description="CPU and memory (not GPUs).")
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra literal env vars.")
    args: list[Annotated[str, Field(max_length=ARG_MAX)]] = Field(
        default_factory=list, max_length=64, description="Extra arguments."
    )
    service_account_name: str | None = Field(
        default=None, max_length=DNS_SUBDOMAIN_MAX, description="ServiceAccount for the pods."
    )
    shm_size: Quantity | None = Field(
        default=None,
        description=(
            "Size of the memory-backed /dev/shm (NCCL, DataLoader workers); default 16Gi for GEMTraining, "
            'none for the pools; "0" mounts none.'
        ),
    )
    pod_template: PodTemplate | None = Field(
        default=None,
        description=(
            "PodTemplateSpec subset merged into every pod: labels, annotations, nodeSelector, tolerations, "
            "affinity, priorityClassName, schedulerName, runtimeClassName, imagePullSecrets, volumes, hostNetwork, "
            "dnsPolicy, securityContext, containers (the main one by name, others as sidecars), initContainers."
        ),
    )

    def image_for(self, gpus: int) -> str:
        """The image a pod with `gpus` GPUs runs: the spec's, else the release's CUDA or CPU image."""
        return self.image or default_workloads_image(gpus > 0)

    @field_validator("image_pull_policy")
    @classmethod
    def _pull_policy(cls, value: str) -> str:
        if value not in {"Always", "IfNotPresent", "Never"}:
            raise ValueError(f"must be Always, IfNotPresent or Never, not {value!r}")
        return value


class LoaderSettings(ApiModel):
    """How the model loader fetches the model (multi-stream ranged GETs, node and peer caches)."""

    streams: int = Field(default=16, ge=1, le=256, description="Concurrent download streams.")
    part_size_mi_b: int = Field(
        default=32, ge=8, le=64, alias="partSizeMiB", description="Ranged-GET part size in MiB (8-64)."
    )
    node_cache: bool = Field(default=True, description="Use the node-local content-addressed cache.")
    peer_cache: bool = Field(default=True, description="Fetch from peers that hold the model first.")


def _model_version(value: object) -> int | str:
    if value == "latest":
        return "latest"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a version number or 'latest', not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"must be a version number or 'latest', not {value!r}") from None
    if number < 1:
        raise ValueError(f"version numbers start at 1, got {number}")
    return number


#: A model version: a number (1, 2, ...) or "latest".
ModelVersion = Annotated[
    int | str,
    BeforeValidator(_model_version),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "description": "A version number (1, 2, ...) or latest."}),
]


class TrainingModelRef(ApiModel):
    """A model a GEMTraining (same namespace) exported: the operator resolves it to that version's URI."""

    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=DNS_SUBDOMAIN_MAX,
        description="Name of the GEMTraining.",
    )
    version: ModelVersion = Field(
        default="latest",
        description="A version from the GEMTraining's status.models, or latest (a newer version then rolls out, "
        "the old one serving until the new pods are Ready).",
    )


class ModelSource(ApiModel):
    """Where the model comes from: a URI, or a GEMTraining's exported version. Credentials only through a
    Secret reference, never inline."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.uri) != has(self.fromTraining)", "message": MODEL_SOURCE_MESSAGE}
            ]
        }
    )

    uri: str | None = Field(
        default=None,
        pattern=r"^(s3|gs|https?|file)://.+|^/.+",
        max_length=URI_MAX,
        description="Origin of the model: s3://, gs://, http(s)://, file:// or an absolute path.",
    )
    from_training: TrainingModelRef | None = Field(
        default=None,
        description="A version a GEMTraining exported (spec.export), instead of uri.",
    )
    manifest_uri: str | None = Field(
        default=None, max_length=URI_MAX, description="SHA-256 manifest (default: <uri>/manifest.json)."
    )
    credentials_secret_ref: SecretRef | None = Field(
        default=None, description="Secret with object-store credentials (AWS_* or GOOGLE_* keys)."
    )
    loader: LoaderSettings = Field(default_factory=LoaderSettings, description="Loader tuning.")

    @model_validator(mode="after")
    def _one_origin(self) -> Self:
        if (self.uri is None) == (self.from_training is None):
            raise ValueError(MODEL_SOURCE_MESSAGE)
        return self

    @property
    def origin(self) -> str:
        """The URI to load; a ``fromTraining`` reference must have been resolved (``resolved``) first."""
        if self.uri is None:
            raise ValueError("model.fromTraining is not resolved to a URI yet")
        return self.uri

    def resolved(self, uri: str) -> ModelSource:
        """This source with ``uri`` set (what a resolved ``fromTraining`` reference points at)."""
        return self.model_copy(update={"uri": uri, "from_training": None})
