"""Examples as numpy column blocks, and collation of blocks into a :class:`Batch` of KJTs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from ..models.features import Batch, CandidateFeatures, CategoricalFeature, FeatureSchema, UserFeatures, fold_ids

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


@dataclass
class Jagged:
    """One jagged feature: ``values`` of all rows back to back, ``lengths`` per row."""

    values: IntArray
    lengths: IntArray

    @staticmethod
    def single(ids: IntArray) -> Jagged:
        return Jagged(ids.astype(np.int64), np.ones(len(ids), dtype=np.int64))

    @staticmethod
    def concat(parts: list[Jagged]) -> Jagged:
        return Jagged(np.concatenate([p.values for p in parts]), np.concatenate([p.lengths for p in parts]))


@dataclass
class ExampleBlock:
    """``n`` examples of one schema, column by column."""

    user: dict[str, Jagged]
    sequence: dict[str, Jagged]
    dense: FloatArray  # [n, num_user_dense]
    item: dict[str, Jagged]
    domain: IntArray  # [n]
    labels: FloatArray  # [n, T]
    label_mask: FloatArray  # [n, T]

    @property
    def size(self) -> int:
        return len(self.domain)

    def take(self, rows: np.ndarray) -> ExampleBlock:
        """Examples ``rows`` (in that order)."""
        return ExampleBlock(
            user={k: take_rows(v, rows) for k, v in self.user.items()},
            sequence={k: take_rows(v, rows) for k, v in self.sequence.items()},
            dense=self.dense[rows],
            item={k: take_rows(v, rows) for k, v in self.item.items()},
            domain=self.domain[rows],
            labels=self.labels[rows],
            label_mask=self.label_mask[rows],
        )

    @staticmethod
    def concat(blocks: list[ExampleBlock]) -> ExampleBlock:
        first = blocks[0]
        return ExampleBlock(
            user={k: Jagged.concat([b.user[k] for b in blocks]) for k in first.user},
            sequence={k: Jagged.concat([b.sequence[k] for b in blocks]) for k in first.sequence},
            dense=np.concatenate([b.dense for b in blocks]),
            item={k: Jagged.concat([b.item[k] for b in blocks]) for k in first.item},
            domain=np.concatenate([b.domain for b in blocks]),
            labels=np.concatenate([b.labels for b in blocks]),
            label_mask=np.concatenate([b.label_mask for b in blocks]),
        )


def take_rows(j: Jagged, rows: np.ndarray) -> Jagged:
    """Rows ``rows`` of a jagged feature (vectorised gather)."""
    offsets = np.concatenate([[0], np.cumsum(j.lengths)])
    lengths = j.lengths[rows]
    new_starts = np.cumsum(lengths) - lengths
    idx = np.repeat(offsets[rows] - new_starts, lengths) + np.arange(int(lengths.sum()))
    return Jagged(j.values[idx], lengths)


class ExampleSource(Protocol):
    """Something that draws ``n`` examples with a given random generator."""

    schema: FeatureSchema

    def sample(self, n: int, rng: np.random.Generator) -> ExampleBlock: ...


def _kjt(features: dict[str, Jagged], names: list[str], cardinality: dict[str, int]) -> KeyedJaggedTensor:
    values = np.concatenate([fold_ids(features[n].values, cardinality[n]) for n in names])
    lengths = np.concatenate([features[n].lengths for n in names])
    return KeyedJaggedTensor.from_lengths_sync(
        keys=names,
        values=torch.from_numpy(values.astype(np.int64)),
        lengths=torch.from_numpy(lengths.astype(np.int32)),
    )


def collate(block: ExampleBlock, schema: FeatureSchema) -> Batch:
    """Build the KJTs in schema order (ids are folded into each table's rows)."""
    card = {f.name: f.cardinality for f in (*schema.user_features, *schema.item_features, *schema.sequence_features)}
    user = UserFeatures(
        categorical=_kjt(block.user, [f.name for f in schema.user_features], card),
        sequence=_kjt(block.sequence, [f.name for f in schema.sequence_features], card),
        dense=torch.from_numpy(np.ascontiguousarray(block.dense, dtype=np.float32)),
    )
    cand = CandidateFeatures(
        categorical=_kjt(block.item, [f.name for f in schema.item_features], card),
        domain=torch.from_numpy(block.domain.astype(np.int64)),
    )
    return Batch(
        user,
        cand,
        torch.from_numpy(np.ascontiguousarray(block.labels, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(block.label_mask, dtype=np.float32)),
    )


def _cap(features: tuple[CategoricalFeature, ...], max_rows: int) -> tuple[CategoricalFeature, ...]:
    return tuple(replace(f, cardinality=min(f.cardinality, max_rows)) for f in features)


def cap_schema(schema: FeatureSchema, max_rows: int) -> FeatureSchema:
    """The same schema with every table limited to ``max_rows`` rows (ids are folded modulo)."""
    return replace(
        schema,
        user_features=_cap(schema.user_features, max_rows),
        item_features=_cap(schema.item_features, max_rows),
        sequence_features=_cap(schema.sequence_features, max_rows),
    )
