"""Which pods restart with a failed one when the failure policy's scope is ReplicaGroup."""

from __future__ import annotations

import pytest

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.controllers.gang import replica_group_ranks, replica_groups_separable


def spec(gpus: int = 8, **par: int) -> GEMTrainingSpec:
    return GEMTrainingSpec.model_validate({"parallelism": par, "gpusPerNode": gpus, "checkpoint": {"uri": "/c"}})


@pytest.mark.parametrize(
    ("job", "node_rank", "group"),
    [
        # dp_replicate=2 x dp_shard=2 x tp=8: replica 0 is pods 0-1, replica 1 pods 2-3.
        (spec(dpReplicate=2, dpShard=2, tp=8), 0, [0, 1]),
        (spec(dpReplicate=2, dpShard=2, tp=8), 3, [2, 3]),
        # With pp=2 outermost a replica holds one block of pods in each stage.
        (spec(pp=2, dpReplicate=2, dpShard=2, tp=8), 5, [0, 1, 4, 5]),
        (spec(pp=2, dpReplicate=2, dpShard=2, tp=8), 2, [2, 3, 6, 7]),
        # Four replicas of one pod each.
        (spec(dpReplicate=4, tp=8), 2, [2]),
    ],
)
def test_replica_group_is_the_pods_of_one_model_copy(job: GEMTrainingSpec, node_rank: int, group: list[int]) -> None:
    assert replica_groups_separable(job)
    assert replica_group_ranks(job, node_rank) == group


def test_replicas_that_share_a_pod_or_a_single_replica_restart_the_gang() -> None:
    assert not replica_groups_separable(spec(dpReplicate=4, dpShard=1, tp=4))  # two replicas per 8-GPU pod
    assert not replica_groups_separable(spec(dpShard=4, tp=8))  # one replica: nothing to keep
