"""The device mesh: coordinates, groups and validation on small hand-drawn meshes, plus properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_operator.api.mesh import GROUP_DIMS, MESH_DIMS, Mesh, consecutive
from gem_operator.api.training import GEMTrainingSpec


def rows(array: np.ndarray) -> list[list[int]]:
    return [[int(v) for v in row] for row in array]


# Hand-drawn: (mesh, dim, expected groups as ranks, in ring order).
GROUPS = [
    # 8 ranks as dp_shard=2 x tp=4: tp is innermost (consecutive ranks), dp_shard strides by 4.
    (Mesh(dp_shard=2, tp=4), "tp", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (Mesh(dp_shard=2, tp=4), "dp_shard", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    (Mesh(dp_shard=2, tp=4), "pp", [[r] for r in range(8)]),
    # pp=2 x dp_replicate=2 x tp=2: a pipeline links the same position in each stage (stride 4).
    (Mesh(pp=2, dp_replicate=2, tp=2), "pp", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    (Mesh(pp=2, dp_replicate=2, tp=2), "dp_replicate", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    (Mesh(pp=2, dp_replicate=2, tp=2), "tp", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # dp_shard=2 x cp=2: cp sits between dp_shard and tp.
    (Mesh(dp_shard=2, cp=2, tp=2), "cp", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    # ep=2 folded into dp_shard=2 x cp=2: consecutive positions of the flattened (dp_shard, cp).
    (Mesh(dp_shard=2, cp=2, tp=2, ep=2), "ep", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    # ep=4 over dp_shard=2 x cp=2 spans both: one expert group per tp rank.
    (Mesh(dp_shard=2, cp=2, tp=2, ep=4), "ep", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    # ep=2 over dp_shard=4 (cp=1): pairs of shards.
    (Mesh(dp_shard=4, ep=2), "ep", [[0, 1], [2, 3]]),
]


@pytest.mark.parametrize(("mesh", "dim", "expected"), GROUPS)
def test_groups_of_hand_drawn_meshes(mesh: Mesh, dim: str, expected: list[list[int]]) -> None:
    assert rows(mesh.groups(dim)) == expected


# Hand-drawn: (mesh, rank, coordinates).
COORDS = [
    (Mesh(dp_shard=2, tp=4), 0, (0, 0, 0, 0, 0)),
    (Mesh(dp_shard=2, tp=4), 5, (0, 0, 1, 0, 1)),
    (Mesh(pp=2, dp_shard=2, tp=4), 8, (1, 0, 0, 0, 0)),  # rank 8 starts the second stage
    (Mesh(pp=2, dp_shard=2, tp=4), 15, (1, 0, 1, 0, 3)),
    (Mesh(pp=2, dp_replicate=3, dp_shard=2, cp=2, tp=2), 47, (1, 2, 1, 1, 1)),
]


@pytest.mark.parametrize(("mesh", "rank", "coords"), COORDS)
def test_coordinates_of_hand_drawn_meshes(mesh: Mesh, rank: int, coords: tuple[int, ...]) -> None:
    assert mesh.coords(rank) == coords
    assert mesh.rank(coords) == rank
    assert mesh.coord(rank, "dp_shard") == coords[MESH_DIMS.index("dp_shard")]
    assert tuple(mesh.coords_table()[rank]) == coords


def test_replica_groups_hold_whole_model_copies() -> None:
    # pp=2 x dp_replicate=2 x dp_shard=2 x tp=2: a replica is one block of 4 ranks in each stage.
    mesh = Mesh(pp=2, dp_replicate=2, dp_shard=2, tp=2)
    assert rows(mesh.replica_groups()) == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    assert [mesh.replica_of(r) for r in (0, 3, 4, 9, 12)] == [0, 0, 1, 0, 1]
    assert mesh.replica_block == 4


def test_consecutive_groups_are_torchrec_sharding_groups() -> None:
    ranks = np.arange(8, dtype=np.int64)
    assert rows(consecutive(ranks, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert rows(consecutive(ranks // 4, 2)) == [[0, 0], [0, 0], [1, 1], [1, 1]]  # per-rank values
    with pytest.raises(ValueError, match="a group of 3 ranks does not divide 8 ranks"):
        consecutive(ranks, 3)


def test_along_lays_out_per_rank_values_as_groups() -> None:
    mesh = Mesh(dp_shard=2, tp=4)
    node = np.arange(8, dtype=np.int64) // 2  # 2 ranks per pod
    assert rows(mesh.along(node, "tp")) == [[0, 0, 1, 1], [2, 2, 3, 3]]
    assert rows(mesh.along(node, "dp_shard")) == [[0, 2], [0, 2], [1, 3], [1, 3]]


def test_groups_are_read_only() -> None:
    with pytest.raises(ValueError, match="read-only"):
        Mesh(tp=2).groups("tp")[0, 0] = 7


@pytest.mark.parametrize(
    ("mesh", "declared", "problem"),
    [
        (Mesh(dp_shard=3, ep=2), None, "ep (2) must divide dpShard*cp (3)"),
        (Mesh(dp_replicate=2048, dp_shard=128), None, "exceeds the maximum of 131072 GPUs"),
        (Mesh(tp=8), 16, "worldSize is 16 but pp*dpReplicate*dpShard*cp*tp = 8"),
        (Mesh(cp=0), None, "cp must be at least 1, got 0"),
    ],
)
def test_invalid_meshes_are_named(mesh: Mesh, declared: int | None, problem: str) -> None:
    assert any(problem in p for p in mesh.problems(declared)), mesh.problems(declared)


def test_valid_mesh_has_no_problems_and_host_rules_hold() -> None:
    assert Mesh(pp=2, dp_shard=4, cp=2, tp=4, ep=8).problems(64) == []
    assert Mesh(tp=8).host_problems(8) == []
    assert "must divide gpusPerNode (8)" in Mesh(tp=3).host_problems(8)[0]
    assert "is not a multiple of gpusPerNode (8)" in Mesh(dp_shard=3, tp=4).host_problems(8)[0]


def test_coordinates_outside_the_mesh_are_refused() -> None:
    with pytest.raises(ValueError, match="rank 8 is outside the mesh of 8 ranks"):
        Mesh(tp=8).coords(8)
    with pytest.raises(ValueError, match="outside the mesh"):
        Mesh(tp=8).rank((0, 0, 0, 0, 8))


def test_spec_builds_its_mesh_and_decides_the_embedding_group() -> None:
    spec = GEMTrainingSpec.model_validate(
        {"parallelism": {"pp": 2, "dpShard": 4, "tp": 8, "ep": 2}, "checkpoint": {"uri": "/c"}}
    )
    assert spec.parallelism.mesh == Mesh(pp=2, dp_shard=4, tp=8, ep=2)
    assert spec.parallelism.mesh.world_size == spec.world_size == 64
    assert spec.embedding_group() == 8  # one pod's ranks when unplaced
    assert spec.embedding_group(32) == 32  # the placement's aligned group
    pinned = spec.model_copy(update={"embedding_sharding_group": 16})
    assert pinned.embedding_group(32) == 16  # the spec's own value wins


@st.composite
def meshes(draw: st.DrawFn) -> Mesh:
    pp, dr, ds, cp, tp = (draw(st.integers(1, 4)) for _ in MESH_DIMS)
    ep = draw(st.sampled_from([e for e in range(1, ds * cp + 1) if (ds * cp) % e == 0]))
    return Mesh(pp=pp, dp_replicate=dr, dp_shard=ds, cp=cp, tp=tp, ep=ep)


@settings(max_examples=300, deadline=None)
@given(meshes())
def test_coords_round_trip_and_follow_row_major_order(mesh: Mesh) -> None:
    world = mesh.world_size
    assert mesh.problems() == []
    expected = list(itertools.product(*(range(s) for s in mesh.shape)))
    assert [mesh.coords(r) for r in range(world)] == expected
    assert [mesh.rank(c) for c in expected] == list(range(world))
    assert [tuple(int(v) for v in c) for c in mesh.coords_table()] == expected


@settings(max_examples=300, deadline=None)
@given(meshes())
def test_groups_partition_the_ranks_with_the_dim_as_size(mesh: Mesh) -> None:
    world = mesh.world_size
    for dim in GROUP_DIMS:
        groups = mesh.groups(dim)
        assert groups.shape == (world // mesh.size(dim), mesh.size(dim)), dim
        assert sorted(groups.ravel().tolist()) == list(range(world)), dim
        if dim != "ep":
            # Members differ only along their own dimension, consecutive in ring order.
            axis = MESH_DIMS.index(dim)
            for group in groups:
                coords = [mesh.coords(int(r)) for r in group]
                assert {c[:axis] + c[axis + 1 :] for c in coords} == {coords[0][:axis] + coords[0][axis + 1 :]}
                assert [c[axis] for c in coords] == list(range(mesh.size(dim)))
        else:
            # An ep group stays within one (pp, dp_replicate, tp) position and spans consecutive
            # positions of the flattened (dp_shard, cp) index.
            for group in groups:
                coords = [mesh.coords(int(r)) for r in group]
                assert len({(c[0], c[1], c[4]) for c in coords}) == 1
                flat = [c[2] * mesh.cp + c[3] for c in coords]
                assert flat == list(range(flat[0], flat[0] + mesh.ep)) and flat[0] % mesh.ep == 0
    replicas = mesh.replica_groups()
    assert replicas.shape == (mesh.dp_replicate, world // mesh.dp_replicate)
    assert sorted(replicas.ravel().tolist()) == list(range(world))
    for i, replica in enumerate(replicas):
        assert all(mesh.replica_of(int(r)) == i for r in replica)
