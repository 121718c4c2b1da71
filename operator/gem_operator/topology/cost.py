"""Communication-cost model: bytes per training step crossing each topology tier.

Assumptions (all volumes per training step, bf16 = 2 bytes per value; defaults in ``CostModel``):

* Mesh ``(pp, dp_replicate, dp_shard, cp, tp)``, row-major, and its groups as ``api.mesh.Mesh``
  defines them (docs/contracts.md). Pod ``n`` holds ranks ``n*nproc .. n*nproc+nproc-1``.
* Each data-parallel rank processes ``microbatches`` micro-batches of ``seq_len / cp`` tokens.
* **tp**: 4 ring all-reduces of the activations (2 forward, 2 backward) per layer and micro-batch.
* **cp**: ring attention; each rank passes its K/V block ``cp-1`` times forward and twice that
  backward, per layer and micro-batch (modelled as a ring whose every edge carries that volume).
* **ep** (folded into ``dp_shard x cp``): MoE all-to-all, dispatch + combine, forward and backward
  (4 passes of the local tokens' hidden states) on ``moe_layer_fraction`` of the layers.
* **dp_shard** (FSDP): all-gather of parameters forward and backward plus a reduce-scatter of
  gradients: 3 ring passes over the dense parameters of one pipeline stage and tp shard.
* **dp_replicate** (HSDP/DDP): ring all-reduce of the gradient shard ``params / (pp*tp*dp_shard)``.
* **pp**: point-to-point activations forward and gradients backward between consecutive stages,
  per micro-batch, each tp rank sending its 1/tp share (sequence parallel).
* **embedding**: TorchRec all-to-all of pooled embeddings forward and their gradients backward
  within each sharding group of ``embedding_sharding_group`` consecutive ranks.

Crossing a tier: a ring collective (tp, cp, dp_shard, dp_replicate) whose members sit in ``k > 1``
domains of a tier is assumed to be ordered topology-aware (as NCCL does), so ``k`` of its edges cross
the tier, each carrying the per-edge volume; an all-to-all sends ``1/g`` of each rank's volume to
every member, so the bytes between members in different domains cross; a pipeline crosses once
for every pair of consecutive stages in different domains. Tiers nest: bytes crossing ``rack``
also cross ``nvlink`` and ``host``.

Score (lower is better): the seconds the crossing bytes would occupy links, summing for each tier
the bytes whose widest crossing is that tier over that tier's link bandwidth (``tier_bandwidth``,
which a tier's ``bandwidthGBps`` in the spec overrides; unknown tiers use the network default).
It is a relative figure to compare plans, not a step time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gem_operator.api.mesh import IntArray, Mesh, consecutive

COST_DIMS: tuple[str, ...] = ("tp", "cp", "ep", "dp_shard", "dp_replicate", "pp", "embedding")
# How each dimension communicates: rings, a chain of pipeline stages, or all-to-all.
_PATTERNS: dict[str, str] = {
    "tp": "ring",
    "cp": "ring",
    "dp_shard": "ring",
    "dp_replicate": "ring",
    "pp": "chain",
    "ep": "a2a",
    "embedding": "a2a",
}


def _default_bandwidth() -> dict[str, float]:
    # Bytes/s per GPU of the link a byte uses when its widest crossing is this tier: NVLink inside
    # the domain, a 400 Gb/s NIC to the leaf switch, then a 2:1 oversubscribed spine, the
    # block's uplinks, and the inter-zone links.
    return {"host": 450e9, "nvlink": 50e9, "rack": 25e9, "block": 12.5e9, "zone": 3e9}


@dataclass(frozen=True)
class CostModel:
    """Model-size parameters of the traffic estimate (defaults: a ~4B dense-parameter GEM trunk)."""

    dense_params: float = 4e9
    bytes_per_value: float = 2.0
    layers: int = 32
    hidden: int = 4096
    seq_len: int = 4096
    microbatches: int = 8
    moe_layer_fraction: float = 0.5
    embedding_bytes_per_rank: float = 256 * 2**20
    tier_bandwidth: Mapping[str, float] = field(default_factory=_default_bandwidth)
    default_bandwidth: float = 20e9

    def bandwidth(self, tier: str) -> float:
        return float(self.tier_bandwidth.get(tier, self.default_bandwidth))


@dataclass(frozen=True)
class CommCost:
    """Bytes per step crossing each tier, per dimension, and groups split per tier."""

    tiers: tuple[str, ...]
    bytes_by_tier: dict[str, float]
    bytes_by_dim: dict[str, dict[str, float]]
    groups: dict[str, int]
    groups_split: dict[str, dict[str, int]]
    total_bytes: dict[str, float]
    score: float


def _distinct(groups: IntArray) -> IntArray:
    srt = np.sort(groups, axis=1)
    out: IntArray = (np.diff(srt, axis=1) != 0).sum(axis=1).astype(np.int64) + 1
    return out


def _same_pairs(groups: IntArray) -> IntArray:
    """Per row, the number of ordered pairs (i, j) of members in the same domain (i == j included)."""
    rows, g = groups.shape
    srt = np.sort(groups, axis=1)
    row_id = np.repeat(np.arange(rows), g)
    flat = srt.ravel()
    starts = np.ones(flat.size, dtype=bool)
    starts[1:] = (flat[1:] != flat[:-1]) | (row_id[1:] != row_id[:-1])
    run = np.cumsum(starts) - 1
    counts = np.bincount(run)
    run_row = row_id[starts]
    return np.bincount(run_row, weights=counts.astype(np.float64) ** 2, minlength=rows).astype(np.int64)


def dim_groups(doms: IntArray, mesh: Mesh, embedding_group: int) -> dict[str, tuple[str, IntArray]]:
    """Per dimension: (pattern, groups as rows of the domain ids of their ranks)."""
    out = {dim: (_PATTERNS[dim], mesh.along(doms, dim)) for dim in ("tp", "cp", "dp_shard", "dp_replicate", "pp", "ep")}
    out["embedding"] = (_PATTERNS["embedding"], consecutive(doms, embedding_group))
    return out


def per_rank_volumes(shape: Sequence[int], ep: int, model: CostModel) -> dict[str, float]:
    """Volume per rank per step: per ring edge (rings, chain) or sent per rank (all-to-all)."""
    pp, dr, ds, cp, tp = shape
    b = model.bytes_per_value
    layers_per_stage = max(1.0, model.layers / pp)
    tokens = model.seq_len / cp
    act = tokens * model.hidden * b  # one micro-batch's hidden states on one rank
    mb = model.microbatches
    stage_params = model.dense_params * b / (pp * tp)
    vol: dict[str, float] = {}
    vol["tp"] = 2 * (tp - 1) / tp * 4 * layers_per_stage * mb * act if tp > 1 else 0.0
    vol["cp"] = 3 * (cp - 1) * layers_per_stage * mb * 2 * act / tp if cp > 1 else 0.0
    vol["ep"] = 4 * model.moe_layer_fraction * layers_per_stage * mb * act / tp if ep > 1 else 0.0
    vol["dp_shard"] = 3 * (ds - 1) / ds * stage_params if ds > 1 else 0.0
    vol["dp_replicate"] = 2 * (dr - 1) / dr * stage_params / ds if dr > 1 else 0.0
    vol["pp"] = 2 * mb * act / tp if pp > 1 else 0.0
    vol["embedding"] = 2 * model.embedding_bytes_per_rank
    return vol


def comm_cost(
    node_domains: Mapping[str, Sequence[int]],
    shape: Sequence[int],
    nproc: int,
    *,
    ep: int = 1,
    embedding_group: int | None = None,
    model: CostModel | None = None,
) -> CommCost:
    """Cost of a placement given, per tier (tightest first), the domain id of each node rank."""
    model = model or CostModel()
    tiers = tuple(node_domains)
    mesh = Mesh.of(shape, ep)
    world = mesh.world_size
    emb = embedding_group or nproc
    if emb <= 0 or world % emb:
        emb = world
    vol = per_rank_volumes(shape, ep, model)
    bytes_by_dim: dict[str, dict[str, float]] = {d: {} for d in COST_DIMS}
    split: dict[str, dict[str, int]] = {d: {} for d in COST_DIMS}
    groups: dict[str, int] = {}
    total: dict[str, float] = {}
    for tier in tiers:
        nodes = np.asarray(node_domains[tier], dtype=np.int64)
        doms = np.repeat(nodes, nproc)
        for dim, (pattern, rows) in dim_groups(doms, mesh, emb).items():
            n_groups, g = rows.shape
            groups[dim] = n_groups
            v = vol[dim]
            if g <= 1:
                bytes_by_dim[dim][tier] = 0.0
                split[dim][tier] = 0
                total[dim] = 0.0
                continue
            if pattern == "ring":
                k = _distinct(rows)
                crossing = float(np.where(k > 1, k, 0).sum()) * v
                n_split = int((k > 1).sum())
                total[dim] = n_groups * g * v
            elif pattern == "chain":
                cuts = (rows[:, 1:] != rows[:, :-1]).sum(axis=1)
                crossing = float(cuts.sum()) * v
                n_split = int((cuts > 0).sum())
                total[dim] = n_groups * (g - 1) * v
            else:
                same = _same_pairs(rows)
                crossing = float((g * g - same).sum()) * v / g
                n_split = int((same < g * g).sum())
                total[dim] = n_groups * (g - 1) * v
            bytes_by_dim[dim][tier] = crossing
            split[dim][tier] = n_split
    by_tier = {t: sum(bytes_by_dim[d].get(t, 0.0) for d in COST_DIMS) for t in tiers}
    score = 0.0
    for i, tier in enumerate(tiers):
        wider = by_tier[tiers[i + 1]] if i + 1 < len(tiers) else 0.0
        score += max(0.0, by_tier[tier] - wider) / model.bandwidth(tier)
    return CommCost(
        tiers=tiers,
        bytes_by_tier=by_tier,
        bytes_by_dim=bytes_by_dim,
        groups=groups,
        groups_split=split,
        total_bytes=total,
        score=score,
    )
