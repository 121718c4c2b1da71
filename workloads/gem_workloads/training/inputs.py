"""What the trainer reads: the built-in datasets or a data spec's Parquet sources, and their read position.

The built-in ``synthetic`` and ``movielens`` data are step-indexed (a batch is a pure function of the
step), so a resume needs only the step. A data spec is a stream: its position after each batch is
gathered from every data-parallel shard into every checkpoint (:func:`data_state`) and handed back
to each shard on resume (:func:`restore_data`), so a resumed run neither repeats nor skips an example.

Bad data stops the run before the first step: :func:`preflight` opens every source (every file's
columns) and :func:`report_data_error` writes the reason and message to the container's
termination message, where the operator reads it (``Ready=False, reason=InvalidData``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

import torch.distributed as dist

from ..data import MixingLoader, MovieLens, SyntheticConfig, SyntheticUniverse, cap_schema
from ..data.parquet_stream import InvalidData
from ..data.spec import DataSpecError, load_data_spec
from ..data.stores import DataUnavailable
from ..data.stream_loader import StreamLoader, open_streams
from ..models import FeatureSchema, ModelConfig


class DataArgs(Protocol):
    """The trainer's arguments this module reads (``trainer.TrainArgs`` has them)."""

    @property
    def data(self) -> str: ...
    @property
    def data_spec(self) -> str | None: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def seed(self) -> int: ...


DATA_ERRORS = (InvalidData, DataUnavailable, DataSpecError)
EXIT_DATA_ERROR = 3


def build_data(args: DataArgs, cfg: ModelConfig, shard: int, shards: int = 1) -> tuple[Any, FeatureSchema]:
    """(loader with ``batch(step)``, the model's feature schema) for ``--data`` or ``--data-spec``."""
    if args.data_spec:
        spec = load_data_spec(args.data_spec)
        loader = StreamLoader(spec, args.batch_size, cfg.seq_len, cfg.max_table_rows, shard=shard, shards=shards)
        return loader, loader.schema
    if args.data == "synthetic":
        universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=args.seed))
        schema = cap_schema(universe.schema, cfg.max_table_rows)
        sources = [universe.domain(i) for i in range(len(universe.cfg.domains))]
        weights = [d.weight for d in universe.cfg.domains]
        return MixingLoader(sources, weights, args.batch_size, seed=args.seed, shard=shard, schema=schema), schema
    if args.data == "movielens":
        ml = MovieLens(seq_len=cfg.seq_len)
        schema = cap_schema(ml.schema, cfg.max_table_rows)
        return MixingLoader(
            [ml.source("train")], [1.0], args.batch_size, seed=args.seed, shard=shard, schema=schema
        ), schema
    raise ValueError(f"--data must be 'synthetic' or 'movielens', got {args.data!r}")


DATA_KEY = "data_position"
"""Checkpoint key of the stream positions: one JSON string (a plain value, which DCP stores as bytes)."""


def data_state(loader: Any, shard: int, shards: int) -> str | None:
    """The read position of every data shard as JSON (the same on every rank); None for step-indexed data.

    Collective: every rank must call it (ranks of one shard share a position).
    """
    if not isinstance(loader, StreamLoader):
        return None
    mine = (shard, loader.state())
    gathered: list[Any] = [mine]
    if dist.is_initialized() and dist.get_world_size() > 1:
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
    positions = {int(s): st for s, st in gathered}
    return json.dumps({"shards": shards, "positions": [positions[s] for s in range(shards)]}, sort_keys=True)


def restore_data(loader: Any, saved: str | None, shard: int, shards: int, step: int) -> None:
    """Hand this shard its saved position; a stream cannot resume without one, nor with another dp degree."""
    if not isinstance(loader, StreamLoader):
        return
    if not saved:
        raise RuntimeError("the checkpoint has no data position: it was not written for a data spec")
    record = json.loads(saved)
    if int(record["shards"]) != shards:
        raise RuntimeError(
            f"the checkpoint's data position was saved for {record['shards']} data-parallel shards, this run has "
            f"{shards}: an exact resume of a stream needs the same data-parallel degree"
        )
    loader.restore(record["positions"][shard], step)


def preflight(data_spec: str) -> None:
    """Open every source of the spec (as shard 0 of 1): raises a :data:`DATA_ERRORS` before any process starts."""
    open_streams(load_data_spec(data_spec), 0, 1)


def report_data_error(exc: BaseException, path: str | None = None) -> bool:
    """Write ``{"reason", "message"}`` into the termination message, keeping what is there (a checkpoint)."""
    target = Path(path or os.environ.get("GEM_TERMINATION_LOG", "/dev/termination-log"))
    if not target.parent.is_dir():
        return False
    record: dict[str, Any] = {}
    try:
        old = json.loads(target.read_text() or "{}")
        record = old if isinstance(old, dict) else {}
    except (OSError, ValueError):
        record = {}
    reason = "InvalidData" if isinstance(exc, (InvalidData, DataSpecError)) else "DataUnavailable"
    record.update(reason=reason, message=str(exc)[:3000])  # the kubelet keeps 4 KiB
    try:
        target.write_text(json.dumps(record))
    except OSError:
        return False
    return True


__all__ = [
    "DATA_ERRORS",
    "DATA_KEY",
    "EXIT_DATA_ERROR",
    "build_data",
    "data_state",
    "preflight",
    "report_data_error",
    "restore_data",
]
