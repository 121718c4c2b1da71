"""The 5D device mesh of a training gang: dims, world size, rank <-> coordinates, groups, validation.

Placement, the cost model, the rank map and replica restarts all rest on the same arithmetic;
one object owns it so that they cannot disagree on which ranks form a group.

Convention (torchtitan's, and DeviceMesh's row-major layout): dims outer to inner ``pp,
dp_replicate, dp_shard, cp, tp``; global rank ``r`` has the coordinates of ``r`` unravelled over
that shape. Expert parallelism adds no dimension: it is folded into ``dp_shard x cp``, an ep group
being ``ep`` consecutive positions of the flattened ``(dp_shard, cp)`` index with the other
coordinates fixed (as torchtitan unflattens dp_shard into ``(dp_shard_mod_ep, dp_shard_in_ep)``).

It lives in ``api`` rather than ``topology`` because ``render`` and ``topology`` are independent
layers that both need it, and because the CRD models validate the degrees with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

#: Mesh dimensions, outer to inner.
MESH_DIMS: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: Dimensions that have communication groups: the mesh's own and ep.
GROUP_DIMS: tuple[str, ...] = (*MESH_DIMS, "ep")
# The largest gang the operator takes (2^17 GPUs, beyond today's largest clusters): the rank map and
# the planner's work grow with it, and a typo in a degree should be an error, not a week of planning.
MAX_WORLD_SIZE = 131072
_AXIS = {name: i for i, name in enumerate(MESH_DIMS)}


@dataclass(frozen=True)
class Mesh:
    """Degrees of the mesh (in ``MESH_DIMS`` order) and of expert parallelism."""

    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    ep: int = 1

    @classmethod
    def of(cls, shape: Sequence[int], ep: int = 1) -> Mesh:
        """The mesh of a shape in ``MESH_DIMS`` order."""
        pp, dr, ds, cp, tp = (int(s) for s in shape)
        return cls(pp=pp, dp_replicate=dr, dp_shard=ds, cp=cp, tp=tp, ep=int(ep))

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    @property
    def world_size(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.cp * self.tp

    def size(self, dim: str) -> int:
        """Degree of a dimension of ``GROUP_DIMS`` (the size of each of its groups)."""
        if dim == "ep":
            return self.ep
        return self.shape[_AXIS[dim]]

    def as_dict(self) -> dict[str, int]:
        """``{dim: degree}`` in ``MESH_DIMS`` order (the rank map's and config's ``mesh``)."""
        return dict(zip(MESH_DIMS, self.shape, strict=True))

    # -- validation ------------------------------------------------------------------------------

    def problems(self, declared_world_size: int | None = None) -> list[str]:
        """What is wrong with these degrees (API field names, as a user wrote them); empty when valid.

        ``declared_world_size`` is the spec's optional ``worldSize`` check.
        """
        out = [f"{name} must be at least 1, got {size}" for name, size in self._named() if size < 1]
        if out:
            return out
        world = self.world_size
        if world > MAX_WORLD_SIZE:
            out.append(
                f"world size pp*dpReplicate*dpShard*cp*tp = {world} exceeds the maximum of "
                f"{MAX_WORLD_SIZE} GPUs; lower a degree"
            )
        if declared_world_size is not None and declared_world_size != world:
            out.append(
                f"worldSize is {declared_world_size} but pp*dpReplicate*dpShard*cp*tp = {world}; "
                "fix a degree or drop worldSize"
            )
        if (self.dp_shard * self.cp) % self.ep != 0:
            out.append(
                f"ep ({self.ep}) must divide dpShard*cp ({self.dp_shard * self.cp}): experts are "
                "sharded over the data-shard and context ranks; choose an ep that divides it"
            )
        return out

    def host_problems(self, gpus_per_node: int) -> list[str]:
        """What keeps this mesh off hosts of ``gpus_per_node`` GPUs, one pod per host."""
        out = []
        if self.tp > gpus_per_node or gpus_per_node % self.tp != 0:
            out.append(
                f"parallelism.tp ({self.tp}) must divide gpusPerNode ({gpus_per_node}): a tensor-parallel "
                "group never leaves a host; lower tp or raise gpusPerNode"
            )
        world = self.world_size
        if world > gpus_per_node and world % gpus_per_node != 0:
            out.append(
                f"world size {world} (pp*dpReplicate*dpShard*cp*tp) is not a multiple of gpusPerNode "
                f"({gpus_per_node}): one pod takes all GPUs of a host; change a degree so it is"
            )
        return out

    def _named(self) -> list[tuple[str, int]]:
        names = ("pp", "dpReplicate", "dpShard", "cp", "tp", "ep")
        return list(zip(names, (*self.shape, self.ep), strict=True))

    # -- ranks and coordinates -------------------------------------------------------------------

    def coords(self, rank: int) -> tuple[int, ...]:
        """Row-major coordinates of a global rank, in ``MESH_DIMS`` order."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the mesh of {self.world_size} ranks")
        out = []
        for size in reversed(self.shape):
            rank, c = divmod(rank, size)
            out.append(c)
        return tuple(reversed(out))

    def rank(self, coords: Sequence[int]) -> int:
        """The global rank at ``coords`` (inverse of ``coords``)."""
        if len(coords) != len(MESH_DIMS) or any(not 0 <= c < s for c, s in zip(coords, self.shape, strict=True)):
            raise ValueError(f"coordinates {list(coords)} are outside the mesh {self.as_dict()}")
        rank = 0
        for c, size in zip(coords, self.shape, strict=True):
            rank = rank * size + c
        return rank

    def coord(self, rank: int, dim: str) -> int:
        """One coordinate of a rank, by dimension name."""
        return self.coords(rank)[_AXIS[dim]]

    def coords_table(self) -> IntArray:
        """Every rank's coordinates at once: row ``r`` is ``coords(r)`` (for the rank map of a large gang)."""
        return _coords_table(self.shape)

    # -- groups ----------------------------------------------------------------------------------

    def along(self, values: IntArray, dim: str) -> IntArray:
        """``values`` (one per rank, in rank order) laid out as one row per group of ``dim``.

        Row members are in ring order (ascending coordinate along ``dim``); ``along(arange, dim)``
        gives the groups as ranks, and e.g. per-rank domain ids give the domains each group spans.
        """
        if dim == "ep":
            pp, dr, ds, cp, tp = self.shape
            arr, axis = values.reshape(pp, dr, (ds * cp) // self.ep, self.ep, tp), 3
        else:
            arr, axis = values.reshape(self.shape), _AXIS[dim]
        out: IntArray = np.moveaxis(arr, axis, -1).reshape(-1, arr.shape[axis])
        return out

    def groups(self, dim: str) -> IntArray:
        """The rank groups of ``dim`` (read-only rows; they partition the ranks)."""
        return _groups(self, dim)

    def replica_groups(self) -> IntArray:
        """Ranks of each data-parallel replica: row ``i`` holds every rank whose dp_replicate coordinate is ``i``.

        A replica is a whole model copy (all its pipeline stages, shards and tensor ranks); it can
        restart on its own while the other replicas keep their state.
        """
        return _replica_groups(self)

    def replica_of(self, rank: int) -> int:
        """The data-parallel replica a rank belongs to."""
        return self.coord(rank, "dp_replicate")

    @property
    def replica_block(self) -> int:
        """Consecutive ranks of one replica within a pipeline stage (``dp_shard*cp*tp``)."""
        return self.dp_shard * self.cp * self.tp


def consecutive(values: IntArray, size: int) -> IntArray:
    """``values`` (one per rank) as rows of ``size`` consecutive ranks: TorchRec's sharding groups."""
    if size <= 0 or len(values) % size:
        raise ValueError(f"a group of {size} ranks does not divide {len(values)} ranks")
    out: IntArray = values.reshape(-1, size)
    return out


# Bounded: a large mesh's tables take megabytes, and a long-running operator sees many meshes.
@lru_cache(maxsize=8)
def _coords_table(shape: tuple[int, ...]) -> IntArray:
    world = int(np.prod(shape))
    table: IntArray = np.stack(np.unravel_index(np.arange(world, dtype=np.int64), shape), axis=1).astype(np.int64)
    table.flags.writeable = False
    return table


@lru_cache(maxsize=64)
def _groups(mesh: Mesh, dim: str) -> IntArray:
    rows = mesh.along(np.arange(mesh.world_size, dtype=np.int64), dim)
    rows.flags.writeable = False
    return rows


@lru_cache(maxsize=8)
def _replica_groups(mesh: Mesh) -> IntArray:
    arr = np.arange(mesh.world_size, dtype=np.int64).reshape(mesh.shape)
    rows: IntArray = np.moveaxis(arr, 1, 0).reshape(mesh.dp_replicate, -1)
    rows.flags.writeable = False
    return rows
