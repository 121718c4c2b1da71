"""``spec.workload.podTemplate``: what a cluster needs added to the pods the operator renders.

A subset of a PodTemplateSpec, merged into every pod of all three kinds (as Kubeflow Trainer's
pod template overrides and JobSet's templates are): metadata labels and annotations,
nodeSelector, tolerations, affinity (node affinity is ANDed with the operator's pinning),
priorityClassName, schedulerName, runtimeClassName, imagePullSecrets, volumes, hostNetwork with
dnsPolicy, the pod securityContext, and containers. A container named like the kind's main
container (``trainer``, ``ranker``, ``precompute``) is merged into it: its env and volumeMounts are
added, its resources (e.g. ``rdma/ib``) join the main container's, other fields are set. Any other
container is added as a sidecar; ``initContainers`` run before the operator's own (a native
sidecar is an init container with ``restartPolicy: Always``).

Fields the operator owns are refused with a message naming the field: ``nodeName`` and
``schedulingGates`` (placement pins and gates the pods), ``nvidia.com/gpu`` in any container
(GPUs come from gpusPerNode / gpusPerReplica), the main container's ``command``, ``args`` and
``image`` (spec.workload.args and image), labels and annotations under ``gem.dev/`` or
``app.kubernetes.io/``, volumes and containers named like the operator's, and a mount at
``/dev/shm`` (spec.workload.shmSize).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from gem_operator.api.base import QUANTITY_PATTERN, ApiModel

GPU_RESOURCE = "nvidia.com/gpu"
#: Main container of each kind: a podTemplate container with one of these names is merged into it.
MAIN_CONTAINERS: tuple[str, ...] = ("trainer", "ranker", "precompute")
#: Containers the operator renders besides the main one.
OPERATOR_CONTAINERS: tuple[str, ...] = ("model-loader", "checkpoint-restore")
#: Volumes the operator renders (render/ keeps these names).
OPERATOR_VOLUMES: tuple[str, ...] = ("gem-config", "checkpoint-scratch", "model", "node-cache", "dshm")
SHM_PATH = "/dev/shm"
_OWNED_PREFIXES = ("gem.dev/", "app.kubernetes.io/")
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

#: A Kubernetes object kept as written (validated by the API server when the pod is created).
KubeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a quantity such as 1 or '500m', not {value!r}")
    text = str(value)
    if not _QUANTITY_RE.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 1, 500m, 64Gi)")
    return text


#: A resource quantity, written as a number or a string (``rdma/ib: 1``).
IntOrQuantity = Annotated[
    str,
    BeforeValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "description": "A quantity, e.g. 1 or 64Gi."}),
]


class ExtraResources(ApiModel):
    """Requests and limits added to a container, any resource name (e.g. ``rdma/ib``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!has(self.requests) || !('{GPU_RESOURCE}' in self.requests)",
                    "message": f"{GPU_RESOURCE} is set by the operator (gpusPerNode / gpusPerReplica)",
                },
                {
                    "rule": f"!has(self.limits) || !('{GPU_RESOURCE}' in self.limits)",
                    "message": f"{GPU_RESOURCE} is set by the operator (gpusPerNode / gpusPerReplica)",
                },
            ]
        }
    )

    requests: dict[str, IntOrQuantity] = Field(default_factory=dict, description="Extra requests.")
    limits: dict[str, IntOrQuantity] = Field(default_factory=dict, description="Extra limits.")

    @model_validator(mode="after")
    def _no_gpus(self) -> Self:
        for part in ("requests", "limits"):
            if GPU_RESOURCE in getattr(self, part):
                raise ValueError(
                    f"{part}.{GPU_RESOURCE} is set by the operator (gpusPerNode for GEMTraining, gpusPerReplica "
                    "for the pools); remove it here"
                )
        return self


class ContainerTemplate(ApiModel):
    """A container: merged into the main one when named like it, else added. Other Container fields
    (ports, probes, lifecycle, ...) are kept as written."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-validations": [
                {
                    "rule": f"!(self.name in {list(MAIN_CONTAINERS)}) || "
                    "(!has(self.command) && !has(self.args) && !has(self.image))",
                    "message": "the main container's command, args and image are the operator's; use "
                    "spec.workload.args and spec.workload.image",
                }
            ],
        },
    )

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63, description="Container name.")
    image: str | None = Field(default=None, description="Image (not for the main container: spec.workload.image).")
    command: list[str] | None = Field(default=None, description="Command (not for the main container).")
    args: list[str] | None = Field(default=None, description="Arguments (not for the main container).")
    env: list[KubeObject] = Field(default_factory=list, max_length=128, description="EnvVar objects to add.")
    env_from: list[KubeObject] = Field(default_factory=list, max_length=32, description="EnvFromSource objects.")
    volume_mounts: list[KubeObject] = Field(default_factory=list, max_length=64, description="VolumeMounts to add.")
    resources: ExtraResources | None = Field(default=None, description="Requests/limits to add (not GPUs).")
    security_context: KubeObject | None = Field(default=None, description="Container securityContext.")

    @model_validator(mode="after")
    def _owned(self) -> Self:
        if self.name in MAIN_CONTAINERS:
            for field, fix in (("command", "args"), ("args", "args"), ("image", "image")):
                if getattr(self, field) is not None:
                    raise ValueError(
                        f"{field} of the main container {self.name!r} is set by the operator; use spec.workload.{fix}"
                    )
            for i, mount in enumerate(self.volume_mounts):
                if str(mount.get("mountPath", "")).rstrip("/") == SHM_PATH:
                    raise ValueError(f"volumeMounts[{i}] mounts {SHM_PATH}; size it with spec.workload.shmSize")
        elif self.name in OPERATOR_CONTAINERS:
            raise ValueError(f"container name {self.name!r} is the operator's own; choose another name")
        elif self.image is None:
            raise ValueError(f"container {self.name!r} needs an image (only the main container takes the workload's)")
        for i, mount in enumerate(self.volume_mounts):
            if not mount.get("name") or not mount.get("mountPath"):
                raise ValueError(f"volumeMounts[{i}] needs name and mountPath")
        for i, var in enumerate(self.env):
            if not var.get("name"):
                raise ValueError(f"env[{i}] needs a name")
        return self


class Toleration(ApiModel):
    """A pod toleration (added to the operator's GPU toleration)."""

    key: str | None = Field(default=None, description="Taint key; empty with Exists tolerates everything.")
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: str | None = Field(default=None, description="Taint value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; empty matches all."
    )
    toleration_seconds: int | None = Field(default=None, description="NoExecute: how long the pod stays.")


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1, max_length=253, description="Name of a Secret in the namespace.")


class VolumeTemplate(ApiModel):
    """A pod volume (any Volume source), added to the operator's."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63, description="Volume name.")

    @field_validator("name")
    @classmethod
    def _not_owned(cls, value: str) -> str:
        if value in OPERATOR_VOLUMES:
            raise ValueError(f"volume name {value!r} is the operator's own; choose another name")
        return value


class Affinity(ApiModel):
    """Pod affinity. Node affinity's required terms are ANDed with the operator's pinning."""

    node_affinity: KubeObject | None = Field(default=None, description="NodeAffinity.")
    pod_affinity: KubeObject | None = Field(default=None, description="PodAffinity.")
    pod_anti_affinity: KubeObject | None = Field(default=None, description="PodAntiAffinity.")


LabelValue = Annotated[str, Field(max_length=63, description="Label value.")]
AnnotationValue = Annotated[str, Field(description="Annotation value.")]


class PodMetadataTemplate(ApiModel):
    labels: dict[str, LabelValue] = Field(default_factory=dict, description="Labels added to every pod.")
    annotations: dict[str, AnnotationValue] = Field(default_factory=dict, description="Annotations added to every pod.")

    @model_validator(mode="after")
    def _owned(self) -> Self:
        for part in ("labels", "annotations"):
            for key in getattr(self, part):
                if key.startswith(_OWNED_PREFIXES):
                    raise ValueError(
                        f"{part} key {key!r} is the operator's own ({', '.join(_OWNED_PREFIXES)} prefixes); rename it"
                    )
        return self


class PodSpecTemplate(ApiModel):
    """The pod spec fields a cluster may need; merged into what the operator renders."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.nodeName)",
                    "message": "nodeName is set by the operator's placement; use nodeSelector or affinity",
                },
                {
                    "rule": "!has(self.schedulingGates)",
                    "message": "schedulingGates are the operator's (it gates the gang until it is whole)",
                },
            ]
        }
    )

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, description="Node labels the pods require.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Extra tolerations.")
    affinity: Affinity | None = Field(default=None, description="Affinity, ANDed with the operator's pinning.")
    priority_class_name: str | None = Field(default=None, max_length=253, description="PriorityClass of the pods.")
    scheduler_name: str | None = Field(default=None, max_length=253, description="Scheduler of the pods.")
    runtime_class_name: str | None = Field(default=None, max_length=253, description="RuntimeClass (e.g. nvidia).")
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list, max_length=16, description="Pull.")
    volumes: list[VolumeTemplate] = Field(default_factory=list, max_length=64, description="Extra volumes.")
    host_network: bool | None = Field(default=None, description="Use the host's network (RDMA setups).")
    dns_policy: Literal["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"] | None = Field(
        default=None, description="DNS policy (default with hostNetwork: ClusterFirstWithHostNet)."
    )
    security_context: KubeObject | None = Field(default=None, description="PodSecurityContext.")
    containers: list[ContainerTemplate] = Field(
        default_factory=list, max_length=16, description="Main-container additions (by its name) and sidecars."
    )
    init_containers: list[ContainerTemplate] = Field(
        default_factory=list, max_length=16, description="Init containers run before the operator's own."
    )
    # Refused: declared so that the handler can name them rather than report an unknown field.
    node_name: str | None = Field(default=None, description="Refused: the operator places the pods.")
    scheduling_gates: list[KubeObject] | None = Field(default=None, description="Refused: the operator gates.")

    @model_validator(mode="after")
    def _owned(self) -> Self:
        if self.node_name is not None:
            raise ValueError("nodeName is set by the operator's placement; use nodeSelector or affinity instead")
        if self.scheduling_gates is not None:
            raise ValueError("schedulingGates are the operator's (it gates the gang until it is whole); remove them")
        names = [v.name for v in self.volumes]
        if len(set(names)) != len(names):
            raise ValueError(f"volume names must be unique, got {names}")
        containers = [c.name for c in (*self.containers, *self.init_containers)]
        if len(set(containers)) != len(containers):
            raise ValueError(f"container names must be unique, got {containers}")
        for c in self.init_containers:
            if c.name in MAIN_CONTAINERS:
                raise ValueError(f"initContainers: {c.name!r} is a main container's name; choose another")
        return self


class PodTemplate(ApiModel):
    """A PodTemplateSpec subset merged into the operator's pods."""

    metadata: PodMetadataTemplate = Field(default_factory=PodMetadataTemplate, description="Labels, annotations.")
    spec: PodSpecTemplate = Field(default_factory=PodSpecTemplate, description="Pod spec additions.")


def check_main_container(template: PodTemplate | None, main: str) -> None:
    """Refuse containers named like another kind's main container (they would have no image)."""
    if template is None:
        return
    for i, c in enumerate(template.spec.containers):
        if c.name in MAIN_CONTAINERS and c.name != main:
            raise ValueError(
                f"workload.podTemplate.spec.containers[{i}].name {c.name!r}: this kind's main container is "
                f"{main!r}; name it {main!r} to add to it, or choose another name for a sidecar"
            )
