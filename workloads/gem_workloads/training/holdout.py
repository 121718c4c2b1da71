"""The evaluation holdout of an export: examples the training never sees, later in time than what it sees.

Why time-ordered: a ranker is always scored on traffic that comes after its training data, so a
random split overstates its AUC (a user's future ratings leak into training). For MovieLens the
holdout is each user's last ratings in time (the dataset's test split, never sampled by
training); for the synthetic universe, which has no clock, it is a stream of batches drawn with a
seed the training never uses. The holdout is fixed for a run (same data, seed and size), so every
exported version is scored on the same examples and their AUCs compare.

`evaluate` scores the unsharded model exactly as the ranking server does (``encode_user`` then
``score_candidates``, probabilities by sigmoid), so the served scores of the same examples give
the same AUC.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data import MixingLoader, MovieLens, SyntheticConfig, SyntheticUniverse, cap_schema
from ..data.blocks import ExampleBlock, Jagged, collate
from ..data.spec import DataSpec, parse_data_spec
from ..models import FeatureSchema, ModelConfig
from .metrics import auc

HOLDOUT_SEED_OFFSET = 7_919_113
"""Added to --seed for the synthetic holdout stream, so it never meets a training batch's stream."""
EVAL_BATCH = 1024


@dataclass(frozen=True)
class Holdout:
    """The holdout examples (in blocks of at most EVAL_BATCH) and how they were chosen."""

    blocks: list[ExampleBlock]
    description: str
    recipe: dict[str, Any] = field(default_factory=dict)  # what rebuilds it: build_holdout(**recipe)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blocks)


def split_block(block: ExampleBlock, size: int = EVAL_BATCH) -> list[ExampleBlock]:
    """Consecutive slices of at most ``size`` rows, in order."""
    return [block.take(np.arange(s, min(s + size, block.size))) for s in range(0, block.size, size)]


def movielens_holdout(cfg: ModelConfig, limit: int) -> Holdout:
    """Each user's last ratings in time (the test split), at most ``limit``, evenly spaced over users."""
    ml = MovieLens(seq_len=cfg.seq_len)
    events = ml.source("test").index
    if len(events) > limit:
        events = events[np.linspace(0, len(events) - 1, limit).astype(np.int64)]
    block = ml.examples(np.sort(events))
    return Holdout(split_block(block), f"movielens: each user's last ratings in time ({block.size} examples)")


def synthetic_holdout(cfg: ModelConfig, seed: int, limit: int) -> Holdout:
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=seed))
    sources = [universe.domain(i) for i in range(len(universe.cfg.domains))]
    weights = [d.weight for d in universe.cfg.domains]
    loader = MixingLoader(sources, weights, EVAL_BATCH, seed=seed + HOLDOUT_SEED_OFFSET, shard=0)
    blocks, total = [], 0
    step = 0
    while total < limit:
        step += 1
        block = loader.block(step)
        block = block.take(np.arange(min(block.size, limit - total)))
        blocks.append(block)
        total += block.size
    return Holdout(blocks, f"synthetic: {total} examples from a stream training never samples")


def data_spec_holdout(spec: DataSpec, cfg: ModelConfig, limit: int) -> Holdout:
    """The first ``limit`` examples of one pass over ``spec`` (the sources' later data), mixed by time as
    training mixes its stream, histories joined from the sequence sources at each example's time."""
    from ..data.stream_loader import StreamLoader

    loader = StreamLoader(spec, EVAL_BATCH, cfg.seq_len, cfg.max_table_rows, prefetch=1)
    blocks: list[ExampleBlock] = []
    total = 0
    try:
        while total < limit:
            rows = loader.next_rows()
            fresh = np.flatnonzero(rows.epoch == 0)
            take = fresh[: limit - total]
            if take.size:
                blocks.append(loader.block(rows.take(take)))
                total += int(take.size)
            if fresh.size < rows.size:
                break  # the stream wrapped around: every holdout example is in
    finally:
        loader.close()
    names = ", ".join(s.name for s in spec.sources)
    return Holdout(blocks, f"data spec: the later data of {names} ({total} examples)")


def holdout_spec(spec: DataSpec, uris: Mapping[str, str]) -> DataSpec:
    """The training data spec with every source read from its later data (``uris``: source name -> URI)."""
    names = [s.name for s in spec.sources]
    unknown = sorted(set(uris) - set(names))
    missing = [n for n in names if n not in uris]
    if unknown or missing:
        raise ValueError(
            f"--holdout-source: give NAME=URI for every source of the data spec ({names}); "
            + (f"missing {missing}" if missing else f"unknown {unknown}")
        )
    return replace(spec, sources=tuple(replace(s, uri=uris[s.name]) for s in spec.sources))


def build_holdout(data: str, cfg: ModelConfig, seed: int, limit: int, spec: DataSpec | None = None) -> Holdout:
    """The holdout of ``--data`` or of a data spec's later data (see the module docstring); ``limit`` caps it."""
    if limit < 1:
        raise ValueError(f"--holdout-examples must be >= 1, got {limit}")
    if spec is not None:
        from ..data.spec import spec_to_json

        holdout = data_spec_holdout(spec, cfg, limit)
        return replace(
            holdout, recipe={"data": "spec", "spec": json.loads(spec_to_json(spec)), "seed": seed, "limit": limit}
        )
    if data == "movielens":
        holdout = movielens_holdout(cfg, limit)
    elif data == "synthetic":
        holdout = synthetic_holdout(cfg, seed, limit)
    else:
        raise ValueError(f"no holdout for --data {data!r}")
    return replace(holdout, recipe={"data": data, "seed": seed, "limit": limit})


def holdout_schema(data: str, cfg: ModelConfig, seed: int) -> FeatureSchema:
    """The (capped) schema training uses for ``data``: what the holdout is collated with."""
    if data == "movielens":
        return cap_schema(MovieLens(seq_len=cfg.seq_len).schema, cfg.max_table_rows)
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=seed))
    return cap_schema(universe.schema, cfg.max_table_rows)


@torch.inference_mode()
def predict(model: nn.Module, blocks: list[ExampleBlock], schema: FeatureSchema) -> np.ndarray:
    """Probabilities ``[n, num_tasks]`` of the model in eval mode, block by block."""
    model.eval()
    out = []
    for block in blocks:
        batch = collate(block, schema)
        out.append(torch.sigmoid(model(batch).float()).numpy())
    return np.concatenate(out) if out else np.zeros((0, schema.num_tasks), dtype=np.float32)


def task_metrics(
    probs: np.ndarray, labels: np.ndarray, mask: np.ndarray, tasks: list[str]
) -> dict[str, dict[str, float | int | None]]:
    """Per task: AUC over the labelled rows (None with one class only), examples and positives."""
    out: dict[str, dict[str, float | int | None]] = {}
    for t, name in enumerate(tasks):
        rows = mask[:, t] > 0
        value = auc(probs[rows, t], labels[rows, t])
        out[name] = {
            "auc": None if value is None else round(value, 6),
            "examples": int(rows.sum()),
            "positives": int(labels[rows, t].sum()),
        }
    return out


def evaluate(model: nn.Module, holdout: Holdout, schema: FeatureSchema) -> dict[str, dict[str, float | int | None]]:
    """``{task: {auc, examples, positives}}`` of ``model`` on the holdout."""
    probs = predict(model, holdout.blocks, schema)
    labels = np.concatenate([b.labels for b in holdout.blocks])
    mask = np.concatenate([b.label_mask for b in holdout.blocks])
    return task_metrics(probs, labels, mask, [t.name for t in schema.tasks])


def _ids(column: Jagged, row: int, multi_hot: bool) -> int | list[int]:
    start = int(column.lengths[:row].sum())
    values = [int(v) for v in column.values[start : start + int(column.lengths[row])]]
    return values if multi_hot else values[0]


def request_lines(holdout: Holdout, schema: FeatureSchema) -> Iterator[dict[str, Any]]:
    """One labelled ``POST /v1/rank`` body per holdout example (the user, one candidate): what the replayer
    sends to score a served model on the examples its offline eval used."""
    tasks = [t.name for t in schema.tasks]
    for block in holdout.blocks:
        for row in range(block.size):
            user = {f.name: _ids(block.user[f.name], row, f.multi_hot) for f in schema.user_features}
            sequence = {f.name: _ids(block.sequence[f.name], row, True) for f in schema.sequence_features}
            item = {f.name: _ids(block.item[f.name], row, f.multi_hot) for f in schema.item_features}
            body = {
                "user": {"features": user, "dense": [float(x) for x in block.dense[row]], "sequence": sequence},
                "candidates": [{**item, "domain": int(block.domain[row])}],
            }
            labelled = {t: float(block.labels[row, i]) for i, t in enumerate(tasks) if block.label_mask[row, i] > 0}
            yield {"body": body, "labels": labelled}


def main(argv: list[str] | None = None) -> int:
    """``python -m gem_workloads.training.holdout MODEL_DIR OUT``: an exported version's holdout as labelled
    requests (JSONL), rebuilt from the recipe its gem-model.json records."""
    import argparse
    from pathlib import Path

    from ..models.model_dir import MODEL_FILE, config_from_dict, schema_from_dict

    p = argparse.ArgumentParser(prog="python -m gem_workloads.training.holdout", description=main.__doc__)
    p.add_argument("model_dir", help="an exported version (its gem-model.json)")
    p.add_argument("out", help="JSONL file to write: one {body, labels} per holdout example")
    args = p.parse_args(argv)
    meta = json.loads((Path(args.model_dir) / MODEL_FILE).read_text())
    recipe = meta.get("holdoutRecipe")
    if not isinstance(recipe, dict):
        raise SystemExit(f"{args.model_dir}/{MODEL_FILE}: no holdoutRecipe (not an exported version)")
    spec = parse_data_spec(recipe["spec"]) if recipe.get("data") == "spec" else None
    cfg = config_from_dict(meta["config"])
    holdout = build_holdout(str(recipe["data"]), cfg, int(recipe["seed"]), int(recipe["limit"]), spec)
    schema = schema_from_dict(meta["schema"])
    with open(args.out, "w") as out:
        for line in request_lines(holdout, schema):
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
    print(json.dumps({"out": args.out, "examples": holdout.size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
