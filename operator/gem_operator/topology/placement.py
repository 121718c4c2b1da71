"""What the planner returns: a feasible placement (hosts by node rank, ranks, cost) or why not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gem_operator.api.mesh import MESH_DIMS, Mesh
from gem_operator.api.training import PlacementSummary, TierUsage
from gem_operator.topology.cost import CommCost
from gem_operator.topology.tiers import TierSet

PLANNER_NAME = "gem-topology"


@dataclass(frozen=True)
class RankAssignment:
    rank: int
    node: str
    node_rank: int
    local_rank: int
    coords: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "nodeRank": self.node_rank,
            "localRank": self.local_rank,
            "coords": dict(zip(MESH_DIMS, self.coords, strict=True)),
        }


@dataclass(frozen=True)
class Placement:
    """A feasible plan: hosts by node rank, per-tier groups and the communication cost."""

    nodes: tuple[str, ...]
    shape: tuple[int, int, int, int, int]
    nproc_per_node: int
    ep: int
    embedding_sharding_group: int
    tiers: tuple[str, ...]
    #: per node rank: tier name -> domain name
    node_domains: tuple[Mapping[str, str], ...]
    #: tier name -> domain name -> node ranks in it (ascending)
    groups: Mapping[str, Mapping[str, tuple[int, ...]]]
    cost: CommCost
    #: per tier: the largest rank group (a multiple of the pod's ranks dividing the world) whose
    #: aligned blocks each sit inside one domain of that tier in this placement; a TorchRec
    #: sharding group of that size stays inside the tier (use it when the spec leaves it unset)
    aligned_group: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the tiers used, where they came from, and how many candidate nodes carry each label
    tierset: TierSet | None = None
    #: labels that do not nest (a clique spanning two racks); also in ``warnings``
    topology_warnings: tuple[str, ...] = ()
    feasible: Literal[True] = True

    @property
    def reason(self) -> None:
        return None

    @property
    def score(self) -> float:
        return self.cost.score

    @property
    def world_size(self) -> int:
        return len(self.nodes) * self.nproc_per_node

    @property
    def bytes_by_tier(self) -> dict[str, float]:
        return dict(self.cost.bytes_by_tier)

    @property
    def mesh(self) -> Mesh:
        return Mesh.of(self.shape, self.ep)

    def ranks(self) -> list[RankAssignment]:
        mesh = self.mesh
        out = []
        for node_rank, host in enumerate(self.nodes):
            for local in range(self.nproc_per_node):
                rank = node_rank * self.nproc_per_node + local
                out.append(RankAssignment(rank, host, node_rank, local, mesh.coords(rank)))
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``gemop plan --output json`` document."""
        return {
            "feasible": True,
            "reason": None,
            "nodes": list(self.nodes),
            "mesh": self.mesh.as_dict(),
            "ranks": [r.to_json() for r in self.ranks()],
            "score": {t: self.cost.bytes_by_tier[t] for t in self.tiers},
            "commScore": self.cost.score,
            "groupsSplit": {d: dict(v) for d, v in self.cost.groups_split.items()},
            "alignedGroup": dict(self.aligned_group),
            "warnings": list(self.warnings),
            "tiers": self.tierset.usage() if self.tierset else [],
            "tierSource": self.tierset.source if self.tierset else None,
            "candidateNodes": self.tierset.candidates if self.tierset else None,
        }

    def summary(self, planner: str = PLANNER_NAME) -> PlacementSummary:
        return PlacementSummary(
            planner=planner,
            nodes=list(self.nodes),
            score=self.cost.score,
            cross_tier_bytes=dict(self.cost.bytes_by_tier),
            tier_source=self.tierset.source if self.tierset else None,
            tiers=[TierUsage.model_validate(u) for u in self.tierset.usage()] if self.tierset else [],
        )


@dataclass(frozen=True)
class Infeasible:
    """No all-or-nothing placement exists; ``reason`` says what is missing and where."""

    reason: str
    details: tuple[str, ...] = ()
    feasible: Literal[False] = False

    def to_json(self) -> dict[str, Any]:
        return {
            "feasible": False,
            "reason": self.reason,
            "details": list(self.details),
            "ranks": [],
            "score": {},
        }


PlanResult = Placement | Infeasible
