"""Cluster topology from node labels and the 5D gang placement planner (pure)."""

from gem_operator.topology.cluster import ClusterView, HostView, Taint, cluster_view_from_objects
from gem_operator.topology.cost import CommCost, CostModel, comm_cost
from gem_operator.topology.planner import (
    Infeasible,
    Placement,
    PlanResult,
    RankAssignment,
    embedding_sharding_group,
    explain_plan,
    plan_from_files,
    plan_gang,
    plan_rows,
)

__all__ = [
    "ClusterView",
    "CommCost",
    "CostModel",
    "HostView",
    "Infeasible",
    "Placement",
    "PlanResult",
    "RankAssignment",
    "Taint",
    "cluster_view_from_objects",
    "comm_cost",
    "embedding_sharding_group",
    "explain_plan",
    "plan_from_files",
    "plan_gang",
    "plan_rows",
]
