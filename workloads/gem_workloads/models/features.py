"""Feature schema and batch types shared by the models, the data sources and serving.

A batch is split the way a ranking request is: the *user* side (categorical features, the
behaviour-event sequence, dense features) and the *candidate* side (the item's categorical
features and the surface/domain it is shown on). Training has one candidate per user row;
serving encodes each user once and scores many candidates against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

# An id is a 64-bit integer, signed or unsigned. A uint64 value from 2**63 on has the bits of a
# negative int64 and is that id: a uint64 Parquet column reads into int64 so, and signed 64-bit
# hashes (BigQuery's FARM_FINGERPRINT, Spark's xxhash64) are negative half the time. Its row in a
# table of `cardinality` rows is that int64 floor-modulo `cardinality`, so training (numpy arrays)
# and serving (JSON's Python ints) put one id in one row.
ID_MIN = -(2**63)
ID_MAX = 2**64 - 1


def fold_id(value: int, cardinality: int) -> int:
    """The table row of one id in [ID_MIN, ID_MAX] (the caller checks the range)."""
    signed = value - 2**64 if value >= 2**63 else value
    return signed % cardinality  # Python's % floors, as numpy's does in fold_ids


def fold_ids(values: npt.NDArray[np.int64], cardinality: int) -> npt.NDArray[np.int64]:
    """The table rows of int64 ids (a uint64 column already cast to int64: the same bits)."""
    return np.asarray(values, dtype=np.int64) % cardinality


@dataclass(frozen=True)
class CategoricalFeature:
    """One sparse feature: ``name`` is the KJT key; ids are folded into ``[0, cardinality)`` rows
    (`fold_id`, `fold_ids`)."""

    name: str
    cardinality: int
    multi_hot: bool = False

    @property
    def table(self) -> str:
        return f"t_{self.name}"


@dataclass(frozen=True)
class Task:
    """One prediction head. ``domain`` restricts the label to examples of that domain (CTR per surface)."""

    name: str
    domain: int | None = None


SEQUENCE_SOURCE = "event_source"
"""With sequence groups: the sequence feature holding each event's group (source) index."""


@dataclass(frozen=True)
class SequenceGroup:
    """The event features one sequence source carries (OneSeq).

    Events of different sources carry different features (a purchase: ad and account ids; a post:
    actor and object ids); each source's features go through that source's own event encoder and
    the encoded events share one time-ordered sequence.
    """

    name: str
    features: tuple[str, ...]


@dataclass(frozen=True)
class FeatureSchema:
    """What a data source produces and what a model is built for."""

    user_features: tuple[CategoricalFeature, ...]
    item_features: tuple[CategoricalFeature, ...]
    # Per-event features of the unified behaviour sequence (same lengths for all of them).
    sequence_features: tuple[CategoricalFeature, ...]
    num_user_dense: int
    domains: tuple[str, ...]
    tasks: tuple[Task, ...]
    # OneSeq: which sequence features belong to which source; empty: every event carries them all.
    sequence_groups: tuple[SequenceGroup, ...] = ()

    @property
    def num_domains(self) -> int:
        return len(self.domains)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    @cached_property
    def user_names(self) -> list[str]:
        return [f.name for f in self.user_features]

    @cached_property
    def item_names(self) -> list[str]:
        return [f.name for f in self.item_features]

    @cached_property
    def sequence_names(self) -> list[str]:
        return [f.name for f in self.sequence_features]

    def feature_names(self) -> list[str]:
        return [*self.user_names, *self.item_names, *self.sequence_names]


@dataclass
class UserFeatures:
    """User side of a batch: ``B`` users."""

    categorical: KeyedJaggedTensor  # keys: schema.user_features
    sequence: KeyedJaggedTensor  # keys: schema.sequence_features, most recent event last
    dense: Tensor  # [B, num_user_dense] float

    def to(self, device: torch.device) -> UserFeatures:
        return UserFeatures(
            self.categorical.to(device), self.sequence.to(device), self.dense.to(device, non_blocking=True)
        )

    @property
    def size(self) -> int:
        return int(self.dense.shape[0])


@dataclass
class CandidateFeatures:
    """Candidate side: ``N`` candidates (items shown on a surface/domain)."""

    categorical: KeyedJaggedTensor  # keys: schema.item_features
    domain: Tensor  # [N] int64, index into schema.domains

    def to(self, device: torch.device) -> CandidateFeatures:
        return CandidateFeatures(self.categorical.to(device), self.domain.to(device, non_blocking=True))

    @property
    def size(self) -> int:
        return int(self.domain.shape[0])


@dataclass
class Batch:
    """A training batch: user row ``i`` is paired with candidate ``i``."""

    user: UserFeatures
    candidate: CandidateFeatures
    labels: Tensor  # [B, T] float in {0, 1}
    label_mask: Tensor  # [B, T] float: 1 where task t applies to example i
    extras: dict[str, Tensor] = field(default_factory=dict)

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.user.to(device),
            self.candidate.to(device),
            self.labels.to(device, non_blocking=True),
            self.label_mask.to(device, non_blocking=True),
            {k: v.to(device) for k, v in self.extras.items()},
        )

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])
