"""The gang tree: node ranks grouped by the parallel groups that connect them, innermost first.

Level ``k`` is the connected components of the node ranks under the groups of the first ``k``
dimensions of an outward order; the levels nest, so they form a tree whose leaves are node ranks
and whose root is the gang (see ``planner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gem_operator.api.mesh import IntArray, consecutive
from gem_operator.api.training import GEMTrainingSpec


@dataclass
class _Item:
    level: int
    size: int
    first: int  # smallest node rank in it (order key)
    children: list[_Item] = field(default_factory=list)
    node_rank: int = -1  # leaves only


@dataclass(frozen=True)
class _Level:
    dims: tuple[str, ...]
    size: int  # largest group size (node ranks) at this level
    req_tier: int | None
    pref_tier: int | None  # Required and Preferred together: the tighter


def _merge(labels: IntArray, rows: IntArray) -> IntArray:
    """Connected components (label = smallest node rank) after joining every row's members."""
    if rows.shape[1] <= 1:
        return labels
    rows = np.unique(rows, axis=0)
    rows = rows[rows.min(axis=1) != rows.max(axis=1)]
    if rows.size == 0:
        return labels
    flat = rows.ravel()
    g = rows.shape[1]
    while True:
        member = labels[rows]
        low = np.repeat(member.min(axis=1), g)
        new = labels.copy()
        np.minimum.at(new, flat, low)
        np.minimum.at(new, member.ravel(), low)
        while True:
            nxt = new[new]
            if np.array_equal(nxt, new):
                break
            new = nxt
        if np.array_equal(new, labels):
            return labels
        labels = new


def _gang_levels(spec: GEMTrainingSpec, locality: Sequence[str]) -> list[tuple[tuple[str, ...], IntArray]]:
    """Nested partitions of node ranks, innermost first, with the dimensions merged at each."""
    mesh = spec.parallelism.mesh
    n_nodes = spec.num_nodes
    node_of_rank = np.arange(mesh.world_size, dtype=np.int64) // spec.nproc_per_node
    order = list(locality)
    rows = {dim: mesh.along(node_of_rank, dim) for dim in order}
    rows["embedding"] = consecutive(node_of_rank, spec.embedding_group())
    # The embedding group joins where its own groups' size falls in the outward order.
    emb_labels = _merge(np.arange(n_nodes, dtype=np.int64), rows["embedding"])
    emb_size = int(np.bincount(emb_labels).max())
    labels = np.arange(n_nodes, dtype=np.int64)
    sizes = []
    for dim in order:
        labels = _merge(labels, rows[dim])
        sizes.append(int(np.bincount(labels).max()))
    pos = next((i for i, s in enumerate(sizes) if s >= emb_size), len(order))
    order.insert(pos, "embedding")
    levels: list[tuple[tuple[str, ...], IntArray]] = [((), np.arange(n_nodes, dtype=np.int64))]
    labels = np.arange(n_nodes, dtype=np.int64)
    for dim in order:
        if rows[dim].shape[1] <= 1:
            continue  # a degree of 1: no groups to keep together
        labels = _merge(labels, rows[dim])
        prev_dims, prev = levels[-1]
        if np.array_equal(labels, prev):
            levels[-1] = ((*prev_dims, dim), prev)
        else:
            levels.append(((dim,), labels))
    return levels


def _index_levels(n_nodes: int) -> list[tuple[tuple[str, ...], IntArray]]:
    """The plain gang tree: node ranks in index order under one root (bin packing by index)."""
    levels: list[tuple[tuple[str, ...], IntArray]] = [((), np.arange(n_nodes, dtype=np.int64))]
    if n_nodes > 1:
        levels.append(((), np.zeros(n_nodes, dtype=np.int64)))
    return levels


def _build_items(levels: list[tuple[tuple[str, ...], IntArray]]) -> _Item:
    n_nodes = len(levels[0][1])
    current: dict[int, _Item] = {n: _Item(level=0, size=1, first=n, node_rank=n) for n in range(n_nodes)}
    for k in range(1, len(levels)):
        labels = levels[k][1]
        parents: dict[int, _Item] = {}
        for key in sorted(current):
            child = current[key]
            lab = int(labels[child.first])
            parent = parents.get(lab)
            if parent is None:
                parent = parents[lab] = _Item(level=k, size=0, first=child.first)
            parent.children.append(child)
            parent.size += child.size
            parent.first = min(parent.first, child.first)
        current = parents
    if len(current) != 1:
        # Defensive: the mesh dims connect every rank, so this does not happen.
        root = _Item(level=len(levels), size=n_nodes, first=0, children=[current[k] for k in sorted(current)])
        return root
    return next(iter(current.values()))
