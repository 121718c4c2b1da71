"""Data mixing: sample domains by configured proportions without building a merged dataset.

Every batch draws its per-domain counts from a multinomial over the proportions, asks each
source for that many examples and concatenates only those rows. The random stream is a
pure function of ``(seed, shard, step)``, so a resumed run sees exactly the batches an
uninterrupted run would have seen, and data-parallel shards never overlap in seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..models.features import Batch, FeatureSchema
from .blocks import ExampleBlock, ExampleSource, collate


class MixingLoader:
    def __init__(
        self,
        sources: Sequence[ExampleSource],
        proportions: Sequence[float] | Mapping[int, float],
        batch_size: int,
        *,
        seed: int = 0,
        shard: int = 0,
        schema: FeatureSchema | None = None,
    ) -> None:
        """``schema`` (default: the first source's) decides table sizes: ids are folded into it."""
        if not sources:
            raise ValueError("MixingLoader needs at least one source")
        weights = (
            [float(proportions.get(i, 0.0)) for i in range(len(sources))]
            if isinstance(proportions, Mapping)
            else [float(p) for p in proportions]
        )
        if len(weights) != len(sources):
            raise ValueError(f"{len(weights)} proportions for {len(sources)} sources")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"proportions must be non-negative with a positive sum, got {weights}")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        total = sum(weights)
        self.proportions = np.array([w / total for w in weights])
        self.sources = list(sources)
        self.schema: FeatureSchema = schema or self.sources[0].schema
        self.batch_size, self.seed, self.shard = batch_size, seed, shard

    def block(self, step: int) -> ExampleBlock:
        rng = np.random.default_rng([self.seed, self.shard, step])
        counts = rng.multinomial(self.batch_size, self.proportions)
        parts = [src.sample(int(c), rng) for src, c in zip(self.sources, counts, strict=True) if c > 0]
        block = ExampleBlock.concat(parts)
        # Shuffle rows so that a batch is not sorted by domain.
        perm = rng.permutation(block.size)
        return block.take(perm)

    def batch(self, step: int) -> Batch:
        return collate(self.block(step), self.schema)
