"""The three kinds as data: names, models, printer columns, subresources.

CRD generation, the controllers and the embedded cluster all read this one table, so a kind's
names are spelled in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gem_operator.api.common import API_VERSION, GROUP, VERSION, ApiModel
from gem_operator.api.serving import (
    RankingServiceSpec,
    RankingServiceStatus,
    SolarisPrecomputeSpec,
    SolarisPrecomputeStatus,
)
from gem_operator.api.training import GEMTrainingSpec, GEMTrainingStatus


def _column(
    name: str, json_path: str, type_: str = "string", description: str = "", priority: int = 0
) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if description:
        col["description"] = description
    if priority:
        col["priority"] = priority
    return col


_READY = _column("Ready", '.status.conditions[?(@.type=="Ready")].status', description="Ready condition.")
_AGE = _column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class KindInfo:
    """Everything the operator needs to know about one of its kinds."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec_model: type[ApiModel]
    status_model: type[ApiModel]
    description: str
    printer_columns: tuple[dict[str, Any], ...]
    scalable: bool
    group: str = GROUP
    version: str = VERSION
    categories: tuple[str, ...] = field(default=("gem",))

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return API_VERSION

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


GEM_TRAINING = KindInfo(
    kind="GEMTraining",
    plural="gemtrainings",
    short_names=("gemt",),
    spec_model=GEMTrainingSpec,
    status_model=GEMTrainingStatus,
    description="A gang of GPU pods placed for 5D-parallel training of a GEM-style model, "
    "with ranks that follow the placement and restarts from the last checkpoint.",
    printer_columns=(
        _column("Phase", ".status.phase"),
        _column("World", ".status.worldSize", "integer", "Total ranks."),
        _column("Nodes", ".status.nodes", "integer", "Pods in the gang."),
        _column("Restarts", ".status.restarts", "integer"),
        _column("Checkpoint", ".status.lastCheckpoint", priority=1),
        _READY,
        _AGE,
    ),
    scalable=False,
)

RANKING_SERVICE = KindInfo(
    kind="RankingService",
    plural="rankingservices",
    short_names=("rks",),
    spec_model=RankingServiceSpec,
    status_model=RankingServiceStatus,
    description="Online ranking servers that load a model in minutes and scale on GPU SM utilisation.",
    printer_columns=(
        _column("Phase", ".status.phase"),
        _column("Desired", ".status.desiredReplicas", "integer"),
        _column("Ready-Replicas", ".status.readyReplicas", "integer"),
        _column("SM-Active", ".status.lastMetric.value", "number", "Last SM active reading."),
        _column("Model-Load-s", ".status.modelLoadSeconds", "number", priority=1),
        _column(
            "SM-Target",
            ".status.autoscaling.effectiveTargetSmActive",
            "number",
            "SM target in use: targetSmActive after the SLO loop (where it holds far below, declare it).",
            priority=1,
        ),
        _column("P99-ms", ".status.autoscaling.p99LatencyMs", "number", "Last p99 the SLO loop read.", priority=1),
        _READY,
        _AGE,
    ),
    scalable=True,
)

SOLARIS_PRECOMPUTE = KindInfo(
    kind="SolarisPrecompute",
    plural="solarisprecomputes",
    short_names=("spc",),
    spec_model=SolarisPrecomputeSpec,
    status_model=SolarisPrecomputeStatus,
    description="An elastic pool that precomputes user-ad embeddings before the ranker needs them.",
    printer_columns=(
        _column("Phase", ".status.phase"),
        _column("Desired", ".status.desiredReplicas", "integer"),
        _column("Ready-Replicas", ".status.readyReplicas", "integer"),
        _column("Backlog", ".status.backlog", "integer"),
        _READY,
        _AGE,
    ),
    scalable=True,
)

KINDS: tuple[KindInfo, ...] = (GEM_TRAINING, RANKING_SERVICE, SOLARIS_PRECOMPUTE)


def kind_info(kind: str) -> KindInfo:
    """Look a kind up by Kind, plural or short name."""
    for info in KINDS:
        if kind in (info.kind, info.plural, info.singular, *info.short_names):
            return info
    known = ", ".join(info.kind for info in KINDS)
    raise KeyError(f"unknown kind {kind!r}; known kinds: {known}")
