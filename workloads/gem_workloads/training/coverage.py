"""Solaris coverage simulation: which embedding the store would hand the ranker for each example.

For every example the simulation knows what each fallback tier of the store
(:mod:`gem_workloads.exchange.store`) would return at that example's time:

- ``exact``: the foundation model's embedding of this (user, ad) pair (what a precompute worker
  writes just before the ranker needs it);
- ``userAdGroupAggregate``: the mean of the user's embeddings for other ads of the same ad group,
  from examples strictly before this one (the store keeps the newest ``group_keep``);
- ``similarUser``: the latest embedding of the same ad for a user of the same behaviour bucket,
  strictly before this one;
- ``none``: nothing (the vertical model's learned "none" embedding).

Training draws, per example, whether the exact embedding is present (at ``exact_rate``) and, if
not, whether the fallback tiers are consulted (``fallback_rate``) or the lookup is dropped, so
the model learns to use each tier; evaluation fixes the exact rate (coverage) and either falls
back or drops.

No label leaks through the exact tier: in production the exact embedding of an impression is
computed before it happens, by a foundation model that never trained on it. A foundation model's
embedding of one of its own training examples encodes that example's label (memorisation), so
training offers the exact tier only on examples the foundation model did not train on
(``exact_allowed``); every fallback tier reads embeddings of *earlier* examples, whose labels are
the user's past and equally visible at evaluation time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..models.vertical import TIER_INDEX
from .memory import HistoricalMemory

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

EXACT, GROUP, SIMILAR, NONE = (TIER_INDEX[t] for t in ("exact", "userAdGroupAggregate", "similarUser", "none"))


@dataclass
class TierSources:
    """Per example: refs (rows of the embedding table) each tier would read; ``-1`` where absent."""

    exact: IntArray  # [n]
    group: IntArray  # [n, group_keep]
    similar: IntArray  # [n]

    def take(self, rows: IntArray) -> TierSources:
        return TierSources(self.exact[rows], self.group[rows], self.similar[rows])


def tier_sources(
    user: IntArray, time: FloatArray, item: IntArray, group: IntArray, bucket: IntArray, group_keep: int = 16
) -> TierSources:
    """Tier sources for examples ``0..n-1`` whose embeddings are rows ``0..n-1`` of the table."""
    n = len(user)
    refs = np.arange(n, dtype=np.int64)
    n_groups = int(group.max()) + 1 if n else 1
    n_items = int(item.max()) + 1 if n else 1
    by_group = HistoricalMemory(user * n_groups + group, time, refs)
    group_refs, _ = by_group.query(user * n_groups + group, time, group_keep)
    by_bucket = HistoricalMemory(bucket * n_items + item, time, refs)
    similar, _ = by_bucket.query(bucket * n_items + item, time, 1)
    return TierSources(refs, group_refs, similar[:, 0])


def assign_tiers(
    sources: TierSources,
    exact_rate: float,
    fallback_rate: float,
    rng: np.random.Generator,
    exact_allowed: npt.NDArray[np.bool_] | None = None,
) -> IntArray:
    """A tier per example: exact at ``exact_rate`` (only where ``exact_allowed``); otherwise, at
    ``fallback_rate``, the first fallback tier that has an embedding, else ``none``."""
    if not 0.0 <= exact_rate <= 1.0 or not 0.0 <= fallback_rate <= 1.0:
        raise ValueError(f"exact_rate and fallback_rate must be in [0, 1], got {exact_rate}, {fallback_rate}")
    n = len(sources.exact)
    exact = rng.random(n) < exact_rate
    if exact_allowed is not None:
        exact &= exact_allowed
    fallback = rng.random(n) < fallback_rate
    has_group = (sources.group >= 0).any(1)
    has_similar = sources.similar >= 0
    tier = np.full(n, NONE, dtype=np.int64)
    tier[fallback & has_similar] = SIMILAR
    tier[fallback & has_group] = GROUP
    tier[exact] = EXACT
    return tier


def tier_embeddings(table: npt.NDArray[np.float32], sources: TierSources, tier: IntArray) -> npt.NDArray[np.float32]:
    """The vector the store would return for each example's tier (zeros for ``none``)."""
    out = np.zeros((len(tier), table.shape[1]), dtype=np.float32)
    sel = tier == EXACT
    out[sel] = table[sources.exact[sel]]
    sel = tier == SIMILAR
    out[sel] = table[sources.similar[sel]]
    sel = np.flatnonzero(tier == GROUP)
    if len(sel):
        refs = sources.group[sel]
        present = refs >= 0
        vecs = table[np.where(present, refs, 0)] * present[..., None]
        out[sel] = vecs.sum(1) / np.maximum(present.sum(1, keepdims=True), 1)
    return out


def tier_shares(tier: IntArray) -> dict[str, float]:
    names = {v: k for k, v in TIER_INDEX.items()}
    n = max(len(tier), 1)
    return {names[i]: float((tier == i).sum()) / n for i in sorted(names)}
