"""Topology-aware gang placement for a 5D-parallel GEMTraining (pure: no API, no clock).

One pod per host takes ``nproc_per_node`` GPUs; pod ``n`` (node rank ``n``) holds global ranks
``n*nproc .. n*nproc+nproc-1`` and their row-major mesh coordinates (docs/contracts.md). The
planner decides which host gets which node rank, so ranks and coordinates follow the hosts chosen.

Algorithm (all-or-nothing, deterministic, roughly linear in hosts + node ranks):

1. **Gang tree.** Node ranks are grouped by the parallel groups that connect them, cumulatively
   from the innermost dimension outwards (by default cp, ep, embedding, dp_shard, pp,
   dp_replicate; tp never leaves a pod): level ``k`` is the connected components of the node
   ranks under the groups of the first ``k`` dimensions. The levels nest, so they form a tree
   whose leaves are node ranks and whose root is the gang. A rule on a dimension holds for the
   level where that dimension joins (a superset of its groups, so honouring it is sufficient).
2. **Topology tree.** Hosts are grouped by the tier labels (host -> nvlink -> rack -> block ->
   zone by default) into nested domains; a host that qualifies (Ready, schedulable, no
   untolerated NoSchedule/NoExecute taint, not excluded, enough free GPUs) counts as one free
   slot. A missing label makes the host a domain of its own at that tier (never assume a
   shared domain without a label).
3. **Capacities.** Bottom-up, for every gang level with a rule, the number of whole groups of
   that level each domain can hold while keeping them inside one domain of the rule's tier
   (Required rules alone, then Required plus Preferred). The root's Required capacity decides
   feasibility before anything is placed, and names the tier and domain that fall short.
4. **Packing.** Top-down from a root domain: each gang-tree item (largest first) goes whole
   into the child domain whose Preferred capacity holds it, choosing the child whose tightest
   descendant tier still holds it, then best fit (fewest free slots), then name; a run of items
   that no single child holds is spread over the fewest children (largest first, best fit for
   the tail). An item that fits no child whole is split into its children items, unless a
   Required rule pins it, or splitting could not keep the cp/ep groups in their Preferred tier
   either (then it stays whole wherever it fits).
5. **Candidates.** Packing runs for a few gang trees (dp_replicate outermost; pp outermost, the
   rank order; Required dimensions innermost when there are any; plain index order) and a few
   roots each (the best-fitting domains of the two tightest tiers that hold the gang, and the
   whole cluster), packing from each root twice: the gang kept together as above, and spread,
   each of its parts (e.g. data-parallel replicas) going alone to the root's child that holds it
   in the tightest tier, so that a gang one block could hold with its groups scattered over many
   racks may instead go to several blocks that each hold a part in one rack (the heavy inner
   rings stay in a rack; only the light outer traffic crosses blocks). Index-order BestFit
   (what a topology-aware scheduler that ignores the mesh would do) is the floor: a candidate
   that moves more bytes than it across any tier wider than nvlink survives only if it keeps
   every cp/ep group in its Preferred tier and the floor does not. The winner has the fewest
   cp/ep groups outside their Preferred tier, then the lowest score (``cost.py``: bytes per
   step crossing each tier, weighted by link bandwidth), then comes first. Preferred rules that
   the winner could not honour become warnings.

Default rules (a rule in ``spec.topology.placement`` replaces the default of its dimension): cp
and ep Preferred within nvlink, pp (each data-parallel replica's pipeline) Preferred within
block, the embedding sharding group Preferred within nvlink; tp is always inside a host. For a
spec that leaves ``embeddingShardingGroup`` unset, ``Placement.aligned_group`` gives per tier the
largest group of consecutive ranks whose aligned blocks each sit inside one domain of that tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gem_operator.api.training import DEFAULT_TIERS, MESH_DIMS, GEMTrainingSpec, PlacementSummary
from gem_operator.topology.cluster import (
    DEFAULT_TOLERATIONS,
    ClusterView,
    HostView,
    blocking_taints,
    cluster_view_from_objects,
)
from gem_operator.topology.cost import CommCost, CostModel, comm_cost

HOSTNAME_LABEL = "kubernetes.io/hostname"
PLANNER_NAME = "gem-topology"

IntArray = npt.NDArray[np.int64]

# Rule dimension names (API, camelCase) -> names used here.
_RULE_DIMS = {
    "tp": "tp",
    "cp": "cp",
    "ep": "ep",
    "pp": "pp",
    "dpShard": "dp_shard",
    "dpReplicate": "dp_replicate",
    "embedding": "embedding",
}
_DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("cp", "nvlink"),
    ("ep", "nvlink"),
    ("embedding", "nvlink"),
    ("pp", "block"),
)
# Outward orders in which groups are merged into the gang tree; the planner packs each and keeps
# the cheapest plan (ties: the first, which keeps dp_replicate outermost).
_LOCALITY_ORDERS: tuple[tuple[str, ...], ...] = (
    ("cp", "ep", "dp_shard", "pp", "dp_replicate"),
    ("cp", "ep", "dp_shard", "dp_replicate", "pp"),
)


# --------------------------------------------------------------------------------------------
# Results


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

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for size in reversed(self.shape):
            out.append(rank % size)
            rank //= size
        return tuple(reversed(out))

    def ranks(self) -> list[RankAssignment]:
        out = []
        for node_rank, host in enumerate(self.nodes):
            for local in range(self.nproc_per_node):
                rank = node_rank * self.nproc_per_node + local
                out.append(RankAssignment(rank, host, node_rank, local, self.coords(rank)))
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``gemop plan --output json`` document."""
        return {
            "feasible": True,
            "reason": None,
            "nodes": list(self.nodes),
            "mesh": dict(zip(MESH_DIMS, self.shape, strict=True)),
            "ranks": [r.to_json() for r in self.ranks()],
            "score": {t: self.cost.bytes_by_tier[t] for t in self.tiers},
            "commScore": self.cost.score,
            "groupsSplit": {d: dict(v) for d, v in self.cost.groups_split.items()},
            "alignedGroup": dict(self.aligned_group),
            "warnings": list(self.warnings),
        }

    def summary(self, planner: str = PLANNER_NAME) -> PlacementSummary:
        return PlacementSummary(
            planner=planner,
            nodes=list(self.nodes),
            score=self.cost.score,
            cross_tier_bytes=dict(self.cost.bytes_by_tier),
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


class _PackError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Gang tree


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


def _group_rows(values: IntArray, shape: Sequence[int], ep: int, emb: int) -> dict[str, IntArray]:
    pp, dr, ds, cp, tp = shape

    def along(axis: int) -> IntArray:
        return np.moveaxis(values.reshape(tuple(shape)), axis, -1).reshape(-1, shape[axis])

    return {
        "cp": along(3),
        "dp_shard": along(2),
        "dp_replicate": along(1),
        "pp": along(0),
        "ep": np.moveaxis(values.reshape(pp, dr, (ds * cp) // ep, ep, tp), 3, -1).reshape(-1, ep),
        "embedding": values.reshape(-1, emb),
    }


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
    shape = spec.parallelism.shape
    nproc = spec.nproc_per_node
    n_nodes = spec.num_nodes
    world = spec.world_size
    emb = spec.embedding_sharding_group or nproc
    rows = _group_rows(np.arange(world, dtype=np.int64) // nproc, shape, spec.parallelism.ep, emb)
    order = list(locality)
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


# --------------------------------------------------------------------------------------------
# Topology tree


@dataclass(eq=False)
class _Dom:
    uid: int
    tier: int
    name: str
    children: list[_Dom] = field(default_factory=list)
    host: str | None = None
    free: int = 0  # qualified hosts
    gpus_free: int = 0
    gpus_total: int = 0
    req: list[int] = field(default_factory=list)
    pref: list[int] = field(default_factory=list)
    maxfree: list[int] = field(default_factory=list)  # per tier <= own: most free slots in one descendant


@dataclass
class _Topo:
    tier_names: tuple[str, ...]
    root: _Dom
    hosts: dict[str, _Dom]
    by_tier: list[list[_Dom]]
    host_path: dict[str, tuple[_Dom, ...]]  # host -> its domain at every tier (0..T-1)


def _tiers(spec: GEMTrainingSpec) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """Tier names tightest first with their labels; the host tier is always first."""
    names: list[str] = []
    labels: list[str | None] = []
    tiers = spec.topology.tiers
    if not tiers or tiers[0].label != HOSTNAME_LABEL:
        names.append("host" if all(t.name != "host" for t in tiers) else "node")
        labels.append(None)
    for t in tiers:
        names.append(t.name)
        labels.append(None if t.label == HOSTNAME_LABEL else t.label)
    return tuple(names), tuple(labels)


def _build_topology(
    hosts: Sequence[HostView],
    qualified: set[str],
    tier_names: tuple[str, ...],
    labels: tuple[str | None, ...],
) -> _Topo:
    """Nested domains from the tier labels, widest first.

    A host without a label at some tier is alone at that tier and every tighter one: it hangs
    directly under its last labelled domain, and that domain's tier is skipped for it.
    """
    n_tiers = len(tier_names)
    uid = 0
    root = _Dom(uid=uid, tier=n_tiers, name="cluster")
    by_key: list[dict[tuple[str, ...], _Dom]] = [{} for _ in range(n_tiers)]
    by_tier: list[list[_Dom]] = [[] for _ in range(n_tiers)]
    host_doms: dict[str, _Dom] = {}
    host_path: dict[str, tuple[_Dom, ...]] = {}
    for h in hosts:
        parent = root
        key: tuple[str, ...] = ()
        chain: list[_Dom] = []
        for t in range(n_tiers - 1, 0, -1):
            lbl = labels[t]
            value = h.labels.get(lbl) if lbl else None
            if not value:
                break
            key = (*key, value)
            dom = by_key[t].get(key)
            if dom is None:
                uid += 1
                dom = _Dom(uid=uid, tier=t, name=value)
                by_key[t][key] = dom
                by_tier[t].append(dom)
                parent.children.append(dom)
            chain.append(dom)
            parent = dom
        uid += 1
        free = h.free_gpus
        leaf = _Dom(uid=uid, tier=0, name=h.name, host=h.name, free=1 if h.name in qualified else 0)
        leaf.gpus_free, leaf.gpus_total = free, h.allocatable_gpus
        parent.children.append(leaf)
        by_tier[0].append(leaf)
        for dom in chain:
            dom.gpus_free += free
            dom.gpus_total += h.allocatable_gpus
        host_doms[h.name] = leaf
        # tiers 0 .. n-1: the labelled chain from the top, the host itself below it
        path = [leaf] * (n_tiers - len(chain)) + list(reversed(chain))
        host_path[h.name] = tuple(path)
    for t in range(1, n_tiers):
        for dom in by_tier[t]:
            dom.free = sum(c.free for c in dom.children)
            dom.children.sort(key=lambda d: d.name)
    root.free = sum(c.free for c in root.children)
    root.children.sort(key=lambda d: d.name)

    # maxfree[i]: the most free slots in one domain of tier i inside (a host alone at a tier is
    # that tier's domain)
    def padded(child: _Dom, upto: int) -> list[int]:
        return child.maxfree + [child.free] * (upto - len(child.maxfree))

    for dom in by_tier[0]:
        dom.maxfree = [dom.free]
    for t in range(1, n_tiers):
        for dom in by_tier[t]:
            kids = [padded(c, t) for c in dom.children]
            dom.maxfree = [max(k[i] for k in kids) for i in range(t)] + [dom.free]
    kids = [padded(c, n_tiers) for c in root.children]
    root.maxfree = [max((k[i] for k in kids), default=0) for i in range(n_tiers)] + [root.free]
    return _Topo(tier_names=tier_names, root=root, hosts=host_doms, by_tier=by_tier, host_path=host_path)


def _compute_caps(topo: _Topo, levels: Sequence[_Level]) -> tuple[list[int], list[int]]:
    """Per domain, whole-group capacities of the constrained levels; returns the levels indexed."""
    req_idx = [k for k, lv in enumerate(levels) if lv.req_tier is not None and lv.size > 1]
    pref_idx = [k for k, lv in enumerate(levels) if lv.pref_tier is not None and lv.size > 1]

    def caps(dom: _Dom, idx: list[int], tier_of: list[int], attr: str) -> list[int]:
        out: list[int] = []
        for j, k in enumerate(idx):
            c = levels[k].size
            if dom.tier > tier_of[j]:
                v = sum(getattr(ch, attr)[j] for ch in dom.children)
            else:
                v = dom.free // c
                for i in range(j):
                    v = min(v, out[i] // math.ceil(c / levels[idx[i]].size))
            out.append(v)
        return out

    req_tiers = [levels[k].req_tier or 0 for k in req_idx]
    pref_tiers = [levels[k].pref_tier or 0 for k in pref_idx]
    zeros_req = [0] * len(req_idx)
    zeros_pref = [0] * len(pref_idx)
    for dom in topo.by_tier[0]:
        # every constrained level spans two or more hosts: one host holds none of its groups
        dom.req = zeros_req
        dom.pref = zeros_pref
    doms = [d for tier in topo.by_tier[1:] for d in tier] + [topo.root]
    for dom in doms:
        dom.req = caps(dom, req_idx, req_tiers, "req")
        dom.pref = caps(dom, pref_idx, pref_tiers, "pref")
    return req_idx, pref_idx


# --------------------------------------------------------------------------------------------
# Packing


@dataclass
class _KidState:
    dom: _Dom
    rem: int
    req: list[int]
    pref: list[int]
    items: list[_Item] = field(default_factory=list)


class _Packer:
    def __init__(
        self,
        levels: Sequence[_Level],
        req_idx: list[int],
        pref_idx: list[int],
        *,
        bestfit: bool = False,
        spread: bool = False,
    ) -> None:
        self.bestfit = bestfit
        self.spread = spread  # the root domain's call only: see `_spread`
        self.levels = levels
        self.req_idx = req_idx
        self.pref_idx = pref_idx
        self.assign: dict[int, str] = {}

    def _count(self, kid: _KidState, size: int, level: int, cut: int) -> int:
        """How many items of this size and level the kid can still take whole, keeping the groups
        of every Required level up to ``level`` and of every Preferred level up to ``cut`` inside
        their tiers."""
        n = kid.rem // size
        if n == 0:
            return 0
        for j, k in enumerate(self.req_idx):
            if k > level:
                break
            n = min(n, kid.req[j] // math.ceil(size / self.levels[k].size))
        for j, k in enumerate(self.pref_idx):
            if k > cut:
                break
            n = min(n, kid.pref[j] // math.ceil(size / self.levels[k].size))
        return n

    def _take(self, kid: _KidState, item: _Item) -> None:
        kid.rem -= item.size
        kid.items.append(item)
        for idx, caps in ((self.req_idx, kid.req), (self.pref_idx, kid.pref)):
            for j, k in enumerate(idx):
                c = self.levels[k].size
                if k <= item.level:
                    caps[j] -= math.ceil(item.size / c)
                else:
                    caps[j] = min(caps[j], kid.rem // c)

    def _tightest(self, kid: _KidState, size: int) -> int:
        for t, m in enumerate(kid.dom.maxfree):
            if m >= size:
                return t
        return len(kid.dom.maxfree)

    def _single_key(self, kid: _KidState, size: int) -> tuple[int, int, str]:
        if self.bestfit:
            return (0, kid.rem, kid.dom.name)
        return (self._tightest(kid, size), kid.rem, kid.dom.name)

    def _distribute(self, run: list[_Item], kids: list[_KidState], level: int, cut: int) -> list[_Item]:
        """Place whole items over the fewest kids; return those that fit nowhere.

        Counts are computed once: taking items from one kid leaves the others' counts as they were,
        and a kid is used at most once per call.
        """
        remaining = list(run)
        size = max(it.size for it in run)
        order = sorted(
            ((n, k) for k in kids if k.rem >= size and (n := self._count(k, size, level, cut)) > 0),
            key=lambda nk: (-nk[0], nk[1].rem, nk[1].dom.name),
        )
        for i, (n, kid) in enumerate(order):
            if not remaining:
                break
            if n >= len(remaining):
                total = sum(it.size for it in remaining)
                full = [k for m, k in order[i:] if m >= len(remaining)]
                best = min(full, key=lambda k: self._single_key(k, total))
                for it in remaining:
                    self._take(best, it)
                return []
            for it in remaining[:n]:
                self._take(kid, it)
            remaining = remaining[n:]
        return remaining

    def _spread(self, run: list[_Item], kids: list[_KidState], level: int) -> list[_Item]:
        """Each item alone to the kid that holds it (Preferred groups inside their tiers) in the
        tightest tier, then best fit; return those that fit nowhere so.

        `_distribute` keeps a run together in the fewest kids, so a gang that one block could
        hold goes to that block even when its free hosts are scattered over many racks there,
        and the gang's heavy inner groups (dp_shard rings) then cross many racks. Spread, each
        part (a data-parallel replica, say) goes where it sits tightest, possibly in another
        block, and only the light outer traffic crosses the wider tier; the score decides.
        """
        remaining: list[_Item] = []
        for it in run:
            fits = [k for k in kids if k.rem >= it.size and self._count(k, it.size, level, level) > 0]
            if not fits:
                remaining.append(it)
                continue
            self._take(min(fits, key=lambda k: (self._tightest(k, it.size), k.rem, k.dom.name)), it)
        return remaining

    def _splittable(self, level: int, dom: _Dom) -> bool:
        req = self.levels[level].req_tier
        return level > 0 and (req is None or req >= dom.tier)

    def _pref_room(self, kids: list[_KidState], items: list[_Item], level: int) -> bool:
        """Would splitting these items let the kids keep their inner cp/ep groups in their
        Preferred tier? False when no inner level holds cp or ep groups: splitting would then
        only add crossings."""
        inner = [(j, k) for j, k in enumerate(self.pref_idx) if k < level and {"cp", "ep"} & set(self.levels[k].dims)]
        if not inner:
            return False
        for j, k in inner:
            need = sum(math.ceil(it.size / self.levels[k].size) for it in items)
            if sum(kid.pref[j] for kid in kids) < need:
                return False
        return True

    def pack(self, dom: _Dom, items: list[_Item]) -> None:
        if dom.tier == 0:
            leaves = _leaves(items)
            if len(leaves) != 1 or dom.host is None or dom.free != 1:
                raise _PackError(f"host {dom.name} was given {len(leaves)} pods")
            self.assign[leaves[0].node_rank] = dom.host
            return
        kids = [_KidState(dom=c, rem=c.free, req=list(c.req), pref=list(c.pref)) for c in dom.children if c.free > 0]
        spread, self.spread = self.spread, False
        if spread:  # the gang's parts, each on its own (see `_spread`)
            items = [child for it in items for child in (it.children or [it])]
        pending: dict[int, list[_Item]] = {}
        for it in items:
            pending.setdefault(it.level, []).append(it)
        for level in range(max(pending, default=0), -1, -1):
            run = sorted(pending.pop(level, []), key=lambda it: it.first)
            if not run:
                continue
            if spread:
                run = self._spread(run, kids, level)
                if not run:
                    continue
            # 1. whole, with every Preferred group up to this level inside its tier
            run = self._distribute(run, kids, level, level)
            # 2. whole, with the inner Preferred groups inside their tiers
            if run:
                run = self._distribute(run, kids, level, level - 1)
            if not run:
                continue
            split = self._splittable(level, dom)
            # 3. split when that keeps the inner Preferred groups whole; else 4. whole anywhere
            if not split or not self._pref_room(kids, run, level):
                run = self._distribute(run, kids, level, -1)
            if not run:
                continue
            if not split:
                raise _PackError(f"{len(run)} groups of level {level} do not fit whole under {dom.name}")
            for it in run:
                for child in it.children:
                    pending.setdefault(child.level, []).append(child)
        for kid in kids:
            if kid.items:
                self.pack(kid.dom, kid.items)


def _leaves(items: Iterable[_Item]) -> list[_Item]:
    out: list[_Item] = []
    stack = list(items)
    while stack:
        it = stack.pop()
        if it.children:
            stack.extend(it.children)
        else:
            out.append(it)
    return out


# --------------------------------------------------------------------------------------------
# Rules, qualification, explanations


def _rules(
    spec: GEMTrainingSpec, tier_names: tuple[str, ...], tier_labels: tuple[str | None, ...]
) -> dict[str, tuple[int | None, int | None]]:
    """Per dimension: (Required tier, Preferred-or-Required tier) as tier indexes.

    Default rules find their tier by the default name, else by the default tier's label.
    """
    index = {n: i for i, n in enumerate(tier_names)}
    by_label = {lbl: i for i, lbl in enumerate(tier_labels) if lbl}
    for name, lbl in DEFAULT_TIERS:
        if name not in index and lbl in by_label:
            index[name] = by_label[lbl]
    explicit: dict[str, list[tuple[int, bool]]] = {}
    names = set(tier_names)
    for rule in spec.topology.placement:
        dim = _RULE_DIMS[rule.dimension]
        if rule.tier in names:
            explicit.setdefault(dim, []).append((index[rule.tier], str(rule.mode) == "Required"))
    out: dict[str, tuple[int | None, int | None]] = {}
    for dim, tier in _DEFAULT_RULES:
        if dim not in explicit and tier in index:
            out[dim] = (None, index[tier])
    for dim, rules in explicit.items():
        req = [t for t, r in rules if r]
        out[dim] = (min(req) if req else None, min(t for t, _ in rules))
    return out


def _qualify(
    view: ClusterView, nproc: int, exclude: frozenset[str], tolerations: Sequence[Mapping[str, str]]
) -> tuple[set[str], dict[str, int], int]:
    ok: set[str] = set()
    why = {"excluded": 0, "not Ready": 0, "cordoned": 0, "tainted": 0, "too few free GPUs": 0}
    best_short = 0
    for h in view.hosts:
        if h.name in exclude:
            why["excluded"] += 1
        elif not h.ready:
            why["not Ready"] += 1
        elif h.unschedulable:
            why["cordoned"] += 1
        elif blocking_taints(h, tolerations):
            why["tainted"] += 1
        elif h.free_gpus < nproc:
            why["too few free GPUs"] += 1
            best_short = max(best_short, h.free_gpus)
        else:
            ok.add(h.name)
    return ok, why, best_short


def _explain_required(
    topo: _Topo, levels: Sequence[_Level], req_idx: list[int], n_nodes: int, nproc: int
) -> Infeasible | None:
    for j, k in enumerate(req_idx):
        lv = levels[k]
        need = max(1, n_nodes // lv.size)
        have = topo.root.req[j]
        if have >= need:
            continue
        tier = lv.req_tier if lv.req_tier is not None else 0
        tier_name = topo.tier_names[tier]
        doms = topo.by_tier[tier] if tier < len(topo.by_tier) else [topo.root]
        doms = doms + [h for h in topo.by_tier[0] if topo.host_path[h.name][tier] is h]
        best = max(doms, key=lambda d: (d.free, d.gpus_free, [-ord(ch) for ch in d.name]), default=None)
        dims = "/".join(lv.dims) or "gang"
        group_gpus = lv.size * nproc
        if best is None:
            return Infeasible(reason=f"no {tier_name} domains exist for the Required {dims} rule")
        where = f"the best domain {best.name} has {best.gpus_free} free of {best.gpus_total} GPUs"
        if best.free < lv.size:
            short = (lv.size - best.free) * nproc
            reason = (
                f"needs {short} more free GPUs in one {tier_name} domain: each {dims} group takes "
                f"{lv.size} hosts ({group_gpus} GPUs) and must stay within one {tier_name} domain "
                f"(Required); {where}"
            )
        else:
            reason = (
                f"needs room for {need} {dims} groups of {lv.size} hosts ({group_gpus} GPUs), each within "
                f"one {tier_name} domain (Required), but the free hosts hold only {have}; {where}"
            )
        return Infeasible(reason=reason, details=(f"{dims}: {have} of {need} groups fit",))
    return None


# --------------------------------------------------------------------------------------------
# Entry points


def plan_gang(
    spec: GEMTrainingSpec,
    view: ClusterView,
    *,
    exclude_nodes: Iterable[str] = frozenset(),
    cost_model: CostModel | None = None,
    tolerations: Sequence[Mapping[str, str]] = DEFAULT_TOLERATIONS,
) -> Placement | Infeasible:
    """Place the whole gang or explain why it cannot be placed."""
    cost_model = cost_model or cost_model_for(spec)
    nproc = spec.nproc_per_node
    n_nodes = spec.num_nodes
    exclude = frozenset(exclude_nodes)
    tier_names, labels = _tiers(spec)
    qualified, why, best_short = _qualify(view, nproc, exclude, tolerations)
    if len(qualified) < n_nodes:
        skipped = ", ".join(f"{n} {reason}" for reason, n in why.items() if n)
        extra = f" (the fullest of those has {best_short} free)" if why["too few free GPUs"] else ""
        return Infeasible(
            reason=(
                f"needs {n_nodes} hosts with {nproc} free GPUs each ({n_nodes * nproc} GPUs) but only "
                f"{len(qualified)} of {len(view.hosts)} qualify" + (f"; skipped: {skipped}{extra}" if skipped else "")
            ),
            details=tuple(f"{reason}: {n}" for reason, n in why.items() if n),
        )
    rules = _rules(spec, tier_names, labels)
    topo = _build_topology(view.hosts, qualified, tier_names, labels)
    candidates: list[Placement] = []
    failure: Infeasible | None = None
    seen: list[list[IntArray]] = []
    # Dimensions with a Required rule may also go innermost (tightest tier first), so that their
    # groups are kept together on their own rather than inside a wider level.
    required = sorted(
        (d for d in _LOCALITY_ORDERS[0] if rules.get(d, (None, None))[0] is not None),
        key=lambda d: (rules[d][0] or 0, _LOCALITY_ORDERS[0].index(d)),
    )
    orders: list[tuple[str, ...] | None] = list(_LOCALITY_ORDERS)
    if required:
        orders.append((*required, *(d for d in _LOCALITY_ORDERS[0] if d not in required)))
    orders.append(None)
    for order in orders:
        level_parts = _gang_levels(spec, order) if order is not None else _index_levels(n_nodes)
        signature = [lab for _, lab in level_parts]
        if any(
            len(s) == len(signature) and all(np.array_equal(a, b) for a, b in zip(s, signature, strict=True))
            for s in seen
        ):
            continue
        seen.append(signature)
        for result in _plan_order(spec, topo, level_parts, rules, cost_model):
            if isinstance(result, Infeasible):
                failure = failure or result
            else:
                candidates.append(result)
    # Index-order BestFit (what a topology-aware scheduler without the mesh would do) is a floor:
    # a plan that moves more bytes across any tier wider than the first shared domain is kept only
    # when it keeps every cp/ep group inside its Preferred tier and the floor does not.
    floor = [r for r in _plan_order(spec, topo, _index_levels(n_nodes), rules, cost_model, bestfit=True)]
    baseline = next((r for r in floor if isinstance(r, Placement)), None)
    if baseline is not None:
        wide = baseline.tiers[2:]
        base_misses = _preferred_misses(baseline, rules)
        candidates = [
            c
            for c in candidates
            if _preferred_misses(c, rules) == 0 < base_misses
            or all(c.cost.bytes_by_tier[t] <= baseline.cost.bytes_by_tier[t] * (1 + 1e-9) for t in wide)
        ]
        candidates.append(baseline)
    if not candidates:
        if failure is None:
            failure = next((r for r in floor if isinstance(r, Infeasible)), None)
        return failure or Infeasible(reason="no placement found")
    # Fewest cp/ep groups outside their Preferred tier, then the lowest score, then the first.
    return min(enumerate(candidates), key=lambda ic: (_preferred_misses(ic[1], rules), round(ic[1].score, 9), ic[0]))[1]


def _preferred_misses(placement: Placement, rules: Mapping[str, tuple[int | None, int | None]]) -> int:
    """cp and ep groups outside their Preferred tier (the rules the planner puts first)."""
    out = 0
    for dim in ("cp", "ep"):
        tier = rules.get(dim, (None, None))[1]
        if tier is not None:
            out += placement.cost.groups_split.get(dim, {}).get(placement.tiers[tier], 0)
    return out


def _candidate_roots(topo: _Topo, levels: Sequence[_Level], req_idx: list[int], n_nodes: int) -> list[_Dom]:
    """Where to pack the gang from: the best-fitting domains of the two tightest tiers that hold it
    whole (Required rules included), then the whole cluster."""
    out: list[_Dom] = []
    tiers_used = 0
    for t in range(1, len(topo.by_tier)):
        fit = [
            d
            for d in topo.by_tier[t]
            if d.free >= n_nodes and all(d.req[j] >= math.ceil(n_nodes / levels[k].size) for j, k in enumerate(req_idx))
        ]
        if not fit:
            continue
        fit.sort(key=lambda d: (d.free, d.name))
        out.extend(fit[: 3 if not tiers_used else 2])
        tiers_used += 1
        if tiers_used == 2:
            break
    out.append(topo.root)
    return out


def _plan_order(
    spec: GEMTrainingSpec,
    topo: _Topo,
    level_parts: list[tuple[tuple[str, ...], IntArray]],
    rules: Mapping[str, tuple[int | None, int | None]],
    cost_model: CostModel | None,
    *,
    bestfit: bool = False,
) -> list[Placement | Infeasible]:
    """Plans for one gang tree, one per candidate root domain (only the first for ``bestfit``)."""
    nproc = spec.nproc_per_node
    n_nodes = spec.num_nodes
    levels: list[_Level] = []
    for k, (dims, labels_k) in enumerate(level_parts):
        # A rule on a dimension grouped with wider ones is enforced on that wider level (sufficient).
        req = [t for d in dims if d in rules and (t := rules[d][0]) is not None]
        pref = [t for d in dims if d in rules and (t := rules[d][1]) is not None]
        size = int(np.bincount(labels_k).max()) if k else 1
        levels.append(
            _Level(
                dims=dims,
                size=size,
                req_tier=min(req) if req else None,
                pref_tier=min(pref) if pref else None,
            )
        )
    req_idx, pref_idx = _compute_caps(topo, levels)
    explained = _explain_required(topo, levels, req_idx, n_nodes, nproc)
    if explained is not None:
        return [explained]
    root_item = _build_items(level_parts)
    out: list[Placement | Infeasible] = []
    roots = _candidate_roots(topo, levels, req_idx, n_nodes)
    # Each root packs the gang kept together, and (when the gang has parts) spread (`_Packer._spread`).
    variants = [False, True] if not bestfit and len(root_item.children) > 1 else [False]
    for root, spread in [(r, v) for r in (roots[:1] if bestfit else roots) for v in variants]:
        packer = _Packer(levels, req_idx, pref_idx, bestfit=bestfit, spread=spread)
        try:
            packer.pack(root, [root_item])
        except _PackError as err:
            out.append(
                Infeasible(
                    reason=f"the Required placement rules could not be met with the free hosts: {err}",
                    details=("try Preferred rules or free hosts in fewer domains",),
                )
            )
            continue
        if len(packer.assign) != n_nodes:
            out.append(Infeasible(reason=f"placed {len(packer.assign)} of {n_nodes} pods; no partial gangs"))
            continue
        nodes = tuple(packer.assign[n] for n in range(n_nodes))
        placement = _placement(spec, topo, nodes, cost_model)
        problems = _rule_violations(placement, topo.tier_names, rules)
        hard = [msg for msg, required in problems if required]
        if hard:
            out.append(Infeasible(reason="; ".join(hard), details=("the Required rules could not be met",)))
            continue
        out.append(replace(placement, warnings=tuple(msg for msg, _ in problems)))
    return out


def _placement(spec: GEMTrainingSpec, topo: _Topo, nodes: tuple[str, ...], cost_model: CostModel | None) -> Placement:
    tiers = topo.tier_names
    node_domains: list[dict[str, str]] = []
    ids: dict[str, list[int]] = {t: [] for t in tiers}
    groups: dict[str, dict[str, list[int]]] = {t: {} for t in tiers}
    for node_rank, host in enumerate(nodes):
        path = topo.host_path[host]
        names = {}
        for t, dom in enumerate(path):
            alone = t > 0 and dom.tier == 0  # no label at this tier: the host is alone in it
            names[tiers[t]] = "(none)" if alone else dom.name
            ids[tiers[t]].append(dom.uid)
            groups[tiers[t]].setdefault(f"(none) {host}" if alone else dom.name, []).append(node_rank)
        node_domains.append(names)
    cost = comm_cost(
        ids,
        spec.parallelism.shape,
        spec.nproc_per_node,
        ep=spec.parallelism.ep,
        embedding_group=spec.embedding_sharding_group or spec.nproc_per_node,
        model=cost_model,
    )
    return Placement(
        nodes=nodes,
        shape=spec.parallelism.shape,
        nproc_per_node=spec.nproc_per_node,
        ep=spec.parallelism.ep,
        embedding_sharding_group=spec.embedding_sharding_group or spec.nproc_per_node,
        tiers=tiers,
        node_domains=tuple(node_domains),
        groups={t: {d: tuple(v) for d, v in g.items()} for t, g in groups.items()},
        cost=cost,
        aligned_group={t: _aligned_group(ids[t]) * spec.nproc_per_node for t in tiers},
    )


def _aligned_group(domains: Sequence[int]) -> int:
    """The most consecutive node ranks, dividing the gang, whose every aligned block shares a domain."""
    n = len(domains)
    for size in sorted((d for d in range(1, n + 1) if n % d == 0), reverse=True):
        if all(len(set(domains[i : i + size])) == 1 for i in range(0, n, size)):
            return size
    return 1


def _rule_violations(
    placement: Placement,
    tier_names: tuple[str, ...],
    rules: Mapping[str, tuple[int | None, int | None]],
) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for dim, (req, pref) in rules.items():
        for tier, required in ((req, True), (pref, False)):
            if tier is None or (not required and req is not None and req <= tier):
                continue
            name = tier_names[tier]
            split = placement.cost.groups_split.get(dim, {}).get(name, 0)
            if split:
                total = placement.cost.groups.get(dim, 0)
                mode = "Required" if required else "Preferred"
                out.append((f"{dim}: {split} of {total} groups span more than one {name} domain ({mode})", required))
    return out


def plan_from_files(
    spec_yaml_dict: Mapping[str, Any],
    nodes: Any,
    pods: Any = (),
    *,
    exclude_nodes: Iterable[str] = frozenset(),
    cost_model: CostModel | None = None,
) -> Placement | Infeasible:
    """What-if planning for ``gemop plan``: a GEMTraining manifest (or its spec) and node/pod exports.

    ``nodes`` and ``pods`` are lists of objects or ``kind: List`` documents as ``kubectl get -o yaml``
    writes them. Raises ``pydantic.ValidationError`` for an invalid spec.
    """
    raw = spec_yaml_dict.get("spec", spec_yaml_dict) if "kind" in spec_yaml_dict else spec_yaml_dict
    spec = GEMTrainingSpec.model_validate(raw)
    view = cluster_view_from_objects(nodes, pods)
    return plan_gang(spec, view, exclude_nodes=exclude_nodes, cost_model=cost_model)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _ranges(values: Sequence[int]) -> str:
    parts: list[str] = []
    start = prev = values[0]
    for v in values[1:]:
        if v == prev + 1:
            prev = v
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = v
    parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def plan_rows(result: Placement | Infeasible) -> list[tuple[str, str, str]]:
    """(tier, domain, node ranks) rows for a table; empty for an infeasible plan."""
    if isinstance(result, Infeasible):
        return []
    rows = []
    for tier in result.tiers[1:]:
        for dom, ranks in sorted(result.groups[tier].items(), key=lambda kv: kv[1][0]):
            rows.append((tier, dom, _ranges(ranks)))
    return rows


def explain_plan(result: Placement | Infeasible) -> str:
    """A human-readable account of a plan (what ``gemop plan --output table`` prints)."""
    if isinstance(result, Infeasible):
        lines = [f"infeasible: {result.reason}"]
        lines += [f"  {d}" for d in result.details]
        return "\n".join(lines)
    shape = ",".join(f"{d}={s}" for d, s in zip(MESH_DIMS, result.shape, strict=True))
    lines = [
        f"feasible: {len(result.nodes)} pods x {result.nproc_per_node} GPUs = {result.world_size} ranks; "
        f"mesh {shape}; ep={result.ep}; score {result.score:.4g}",
        "",
        "bytes per step crossing each tier, and groups split across it (per dimension):",
    ]
    dims = [d for d in result.cost.groups if result.cost.total_bytes.get(d, 0) > 0 or d == "tp"]
    header = f"  {'tier':<10}{'bytes':>12}  " + "  ".join(f"{d:>12}" for d in dims)
    lines.append(header)
    for tier in result.tiers:
        cells = [f"{result.cost.groups_split[d].get(tier, 0)}/{result.cost.groups.get(d, 0)}".rjust(12) for d in dims]
        lines.append(f"  {tier:<10}{_fmt_bytes(result.cost.bytes_by_tier[tier]):>12}  " + "  ".join(cells))
    lines += ["", "node ranks by domain:"]
    for tier, dom, ranks in plan_rows(result):
        lines.append(f"  {tier:<10}{dom:<24}{ranks}")
    lines += ["", "node rank -> host:"]
    for node_rank, host in enumerate(result.nodes):
        doms = " ".join(f"{t}={result.node_domains[node_rank][t]}" for t in result.tiers[1:])
        lines.append(f"  {node_rank:>5}  {host:<24}{doms}")
    if result.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in result.warnings]
    return "\n".join(lines)


def embedding_sharding_group(placement: Placement, spec: GEMTrainingSpec) -> int:
    """Ranks per TorchRec sharding group for the pods of this placement.

    The spec's value when set. Otherwise the largest aligned group of ranks that this placement
    keeps inside one domain of the embedding rule's tier (by default one NVLink domain): tables are
    sharded over as many GPUs as the fast fabric joins, and the embedding all-to-all stays on it.
    """
    if spec.embedding_sharding_group:
        return spec.embedding_sharding_group
    labels = {t.name: t.label for t in spec.topology.tiers}
    rules = _rules(spec, placement.tiers, tuple(labels.get(t) for t in placement.tiers))
    tier = rules.get("embedding", (None, None))[1]
    aligned = placement.aligned_group.get(placement.tiers[tier], 0) if tier is not None else 0
    return max(placement.embedding_sharding_group, aligned)


def cost_model_for(spec: GEMTrainingSpec) -> CostModel:
    """The default traffic model, with the link bandwidths that the spec's tiers declare."""
    declared = {t.name: t.bandwidth_gbps * 1e9 for t in spec.topology.tiers if t.bandwidth_gbps is not None}
    if not declared:
        return CostModel()
    defaults = CostModel()
    return replace(defaults, tier_bandwidth={**defaults.tier_bandwidth, **declared})
