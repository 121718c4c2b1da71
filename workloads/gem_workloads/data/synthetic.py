"""Synthetic multi-domain ranking data with a known, learnable signal.

A shared universe of users and items: items fall into ``num_clusters`` clusters, every user
has a preference distribution over clusters. A user's behaviour sequence is drawn from
that preference (events from heterogeneous sources: each event carries the domain it came
from and an action type), so the sequence predicts the label. Each domain (surface) has its
own base click rate and its own share of the traffic; the CTR task of a domain applies only
to that domain's examples, and a CVR task (conversion given click) applies to all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.features import CategoricalFeature, FeatureSchema, Task
from .blocks import ExampleBlock, Jagged


@dataclass(frozen=True)
class DomainSpec:
    """A surface: ``weight`` is its default share of the mix, ``bias`` shifts its click logit."""

    name: str
    weight: float = 1.0
    bias: float = 0.0


@dataclass(frozen=True)
class SyntheticConfig:
    domains: tuple[DomainSpec, ...] = (
        DomainSpec("feed", 0.6, 0.0),
        DomainSpec("search", 0.3, 0.5),
        DomainSpec("video", 0.1, -0.5),
    )
    num_users: int = 2_000
    num_items: int = 2_000
    num_clusters: int = 16
    num_tags: int = 64
    seq_len: int = 16
    signal: float = 4.0
    seed: int = 0


def synthetic_schema(cfg: SyntheticConfig) -> FeatureSchema:
    n_dom = len(cfg.domains)
    return FeatureSchema(
        user_features=(
            CategoricalFeature("user_id", cfg.num_users),
            CategoricalFeature("user_segment", cfg.num_clusters),
        ),
        item_features=(
            CategoricalFeature("item_id", cfg.num_items),
            CategoricalFeature("item_cluster", cfg.num_clusters),
            CategoricalFeature("item_tags", cfg.num_tags, multi_hot=True),
        ),
        sequence_features=(
            CategoricalFeature("seq_item_id", cfg.num_items),
            CategoricalFeature("seq_cluster", cfg.num_clusters),
            CategoricalFeature("seq_action", 4),
            CategoricalFeature("seq_source", max(n_dom, 1)),
        ),
        num_user_dense=2,
        domains=tuple(d.name for d in cfg.domains),
        tasks=(*(Task(f"ctr_{d.name}", i) for i, d in enumerate(cfg.domains)), Task("cvr")),
    )


class SyntheticUniverse:
    """The shared ground truth; :meth:`domain` gives one :class:`SyntheticDomain` source per surface."""

    def __init__(self, cfg: SyntheticConfig) -> None:
        self.cfg = cfg
        self.schema = synthetic_schema(cfg)
        rng = np.random.default_rng(cfg.seed)
        pref = rng.dirichlet(np.full(cfg.num_clusters, 0.3), size=cfg.num_users)
        self.pref = pref.astype(np.float64)
        self.cdf = np.cumsum(pref, axis=1)
        self.item_cluster = rng.integers(0, cfg.num_clusters, cfg.num_items)
        self.items_by_cluster = [np.flatnonzero(self.item_cluster == c) for c in range(cfg.num_clusters)]
        for c, items in enumerate(self.items_by_cluster):
            if len(items) == 0:
                self.items_by_cluster[c] = np.array([c % cfg.num_items])
        self.item_tags = rng.integers(0, cfg.num_tags, (cfg.num_items, 2))

    def domain(self, index: int) -> SyntheticDomain:
        return SyntheticDomain(self, index)

    def _items_in(self, clusters: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.empty(len(clusters), dtype=np.int64)
        for c in np.unique(clusters):
            sel = clusters == c
            pool = self.items_by_cluster[int(c)]
            out[sel] = pool[rng.integers(0, len(pool), int(sel.sum()))]
        return out


class SyntheticDomain:
    """Examples of one domain (an :class:`~.blocks.ExampleSource`)."""

    def __init__(self, universe: SyntheticUniverse, index: int) -> None:
        self.universe, self.index = universe, index
        self.schema = universe.schema
        self.spec = universe.cfg.domains[index]

    def sample(self, n: int, rng: np.random.Generator) -> ExampleBlock:
        u, cfg = self.universe, self.universe.cfg
        users = rng.integers(0, cfg.num_users, n)
        lengths = rng.integers(0, cfg.seq_len + 1, n)
        ev_users = np.repeat(users, lengths)
        ev_clusters = (u.cdf[ev_users] < rng.random(len(ev_users))[:, None]).sum(1).clip(max=cfg.num_clusters - 1)
        ev_items = u._items_in(ev_clusters, rng)
        ev_action = rng.integers(0, 4, len(ev_users))
        ev_source = rng.integers(0, len(cfg.domains), len(ev_users))
        # Candidates: half from the user's taste, half uniform.
        own = (u.cdf[users] < rng.random(n)[:, None]).sum(1).clip(max=cfg.num_clusters - 1)
        cand_clusters = np.where(rng.random(n) < 0.5, own, rng.integers(0, cfg.num_clusters, n))
        items = u._items_in(cand_clusters, rng)
        affinity = u.pref[users, cand_clusters] * cfg.num_clusters
        logit = cfg.signal * (np.log1p(affinity) - 0.7) + self.spec.bias
        click = rng.random(n) < 1 / (1 + np.exp(-logit))
        convert = click & (rng.random(n) < 1 / (1 + np.exp(-(affinity - 2.0))))
        n_dom = len(cfg.domains)
        labels = np.zeros((n, n_dom + 1), dtype=np.float32)
        mask = np.zeros_like(labels)
        labels[:, self.index] = click
        mask[:, self.index] = 1
        labels[:, n_dom] = convert
        mask[:, n_dom] = 1
        dense = np.stack([lengths / max(cfg.seq_len, 1), rng.normal(0, 1, n)], axis=1).astype(np.float32)
        return ExampleBlock(
            user={
                "user_id": Jagged.single(users),
                "user_segment": Jagged.single(u.pref[users].argmax(1)),
            },
            sequence={
                "seq_item_id": Jagged(ev_items, lengths),
                "seq_cluster": Jagged(u.item_cluster[ev_items], lengths),
                "seq_action": Jagged(ev_action, lengths),
                "seq_source": Jagged(ev_source, lengths),
            },
            dense=dense,
            item={
                "item_id": Jagged.single(items),
                "item_cluster": Jagged.single(u.item_cluster[items]),
                "item_tags": Jagged(u.item_tags[items].reshape(-1), np.full(n, 2, dtype=np.int64)),
            },
            domain=np.full(n, self.index, dtype=np.int64),
            labels=labels,
            label_mask=mask,
        )
