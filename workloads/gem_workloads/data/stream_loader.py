"""The training input of a data spec: mixed example stream + OneSeq histories -> batches, prefetched, resumable.

:class:`StreamLoader` opens every source (checking every file's columns before the first step),
merges the example sources by event time (:class:`.stream_mix.TimeMixer`), joins each example's
history from the sequence sources (:class:`.histories.SequenceHistory`) and collates batches on a
background thread, ``prefetch`` batches ahead, so the training step does not wait on data.

Memory, bounded and independent of the dataset's length: per example source one row group being
read plus ``batch_size`` buffered rows; ``prefetch`` collated batches; the sequence datasets as
sorted columns (8 x (2 + features) bytes per event). ``batch(step)`` must be called for
consecutive steps; :meth:`state` is the position after the last batch handed out (what a
checkpoint saves), :meth:`restore` resumes from it before the first batch.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from ..models.features import SEQUENCE_SOURCE, Batch, CategoricalFeature, FeatureSchema, SequenceGroup, Task
from .blocks import ExampleBlock, Jagged, collate
from .histories import SequenceHistory, feature_name
from .parquet_stream import ParquetStream, warn_of_naive_times
from .spec import DataSpec, SourceSpec
from .stores import locate
from .stream_mix import Rows, TimeMixer

USER_FEATURE = "user_id"
_STOP = object()


def _source_columns(s: SourceSpec) -> dict[str, str]:
    cols = {s.timestamp: "time", s.user: "int"}
    if s.id:
        cols[s.id] = "int"
    cols.update({c: "ids" for c in s.sparse})
    cols.update({c: "number" for c in s.dense})
    cols.update({c: "label" for c in s.labels.values()})
    if s.domain:
        cols[s.domain] = "domain"
    return cols


def open_streams(
    spec: DataSpec,
    shard: int,
    shards: int,
    env: Mapping[str, str] | None = None,
    time_range: tuple[float, float] | None = None,
) -> tuple[list[ParquetStream], list[ParquetStream]]:
    """Example streams (sharded, within ``time_range``) and sequence streams (whole).

    Raises InvalidData / DataUnavailable.
    """
    examples = [
        ParquetStream(
            s.name,
            locate(s.name, s.uri, env),
            _source_columns(s),
            s.timestamp,
            shard=shard,
            shards=shards,
            time_range=time_range,
            time_unit=s.timestamp_unit,
        )
        for s in spec.sources
    ]
    sequences = [
        ParquetStream(
            q.name,
            locate(q.name, q.uri, env),
            {q.timestamp: "time", q.user: "int", **dict.fromkeys(q.features, "int")},
            q.timestamp,
            time_unit=q.timestamp_unit,
        )
        for q in spec.sequences
    ]
    warn_of_naive_times(examples + sequences)
    return examples, sequences


def _list_columns(streams: list[ParquetStream]) -> set[str]:
    out: set[str] = set()
    for st in streams:
        schema = st._dataset.schema
        out |= {f.name for f in schema if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)}
    return out


def spec_schema(
    spec: DataSpec, table_rows: int, multi_hot: set[str], sequence_sizes: dict[str, int] | None = None
) -> FeatureSchema:
    """The model's feature schema for a data spec (ids are folded into ``table_rows`` rows)."""
    seq: list[CategoricalFeature] = [CategoricalFeature(SEQUENCE_SOURCE, max(len(spec.sequences), 1))]
    groups = []
    for q in spec.sequences:
        names = tuple(feature_name(q.name, f) for f in q.features)
        seq += [CategoricalFeature(n, table_rows) for n in names]
        groups.append(SequenceGroup(q.name, names))
    return FeatureSchema(
        user_features=(CategoricalFeature(USER_FEATURE, table_rows),),
        item_features=tuple(CategoricalFeature(c, table_rows, multi_hot=c in multi_hot) for c in spec.sparse),
        sequence_features=tuple(seq),
        num_user_dense=len(spec.dense),
        domains=spec.domains,
        tasks=tuple(Task(t) for t in spec.tasks),
        sequence_groups=tuple(groups),
    )


class StreamLoader:
    """See the module docstring."""

    def __init__(
        self,
        spec: DataSpec,
        batch_size: int,
        seq_len: int,
        table_rows: int,
        *,
        shard: int = 0,
        shards: int = 1,
        prefetch: int = 4,
        env: Mapping[str, str] | None = None,
        time_range: tuple[float, float] | None = None,
    ) -> None:
        """``time_range`` ``[lo, hi)`` (seconds): only examples of that event time, e.g. a holdout after
        a cut; histories still hold every event before each example."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.spec, self.batch_size, self.seq_len, self.prefetch = spec, batch_size, seq_len, prefetch
        examples, sequences = open_streams(spec, shard, shards, env, time_range)
        self.mixer = TimeMixer(spec, examples)
        self.history = SequenceHistory(spec.sequences, sequences) if spec.sequences else None
        self.schema = spec_schema(spec, table_rows, _list_columns(examples))
        self.waits: list[float] = []  # seconds each batch() blocked on the queue (the first fills the pipeline)
        self._state: dict[str, Any] = {"sources": self.mixer.state(), "examples": 0}
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(prefetch, 1))
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._next_step: int | None = None

    # -- blocks ------------------------------------------------------------------------------
    def block(self, rows: Rows) -> ExampleBlock:
        n = rows.size
        if self.history is not None:
            sequence = self.history.lookup(rows.user, rows.time, self.seq_len)
        else:  # no sequence sources: empty histories (the model's summary then reads its null token)
            sequence = {SEQUENCE_SOURCE: Jagged(np.zeros(0, np.int64), np.zeros(n, np.int64))}
        return ExampleBlock(
            user={USER_FEATURE: Jagged.single(rows.user)},
            sequence=sequence,
            dense=rows.dense,
            item=dict(rows.sparse),
            domain=rows.domain,
            labels=rows.labels,
            label_mask=rows.mask,
        )

    def next_rows(self) -> Rows:
        return self.mixer.take(self.batch_size)

    def _produce(self) -> None:
        examples = int(self._state["examples"])
        try:
            while not self._halt.is_set():
                rows = self.next_rows()
                batch = collate(self.block(rows), self.schema)
                batch.extras["example_id"] = torch.from_numpy(rows.example_id.copy())
                examples += rows.size
                item = (batch, {"sources": self.mixer.state(), "examples": examples})
                while not self._halt.is_set():
                    try:
                        self._queue.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the training thread, which raises it
            self._queue.put(exc)

    # -- the trainer's interface ---------------------------------------------------------------
    def batch(self, step: int) -> Batch:
        """The batch of ``step``; steps must follow each other (the stream has no random access)."""
        if self._next_step is not None and step != self._next_step:
            raise RuntimeError(f"stream batches are sequential: asked for step {step}, next is {self._next_step}")
        if self._thread is None:
            self._thread = threading.Thread(target=self._produce, name="gem-data", daemon=True)
            self._thread.start()
        start = time.perf_counter()
        item = self._queue.get()
        self.waits.append(time.perf_counter() - start)
        if isinstance(item, BaseException):
            raise item
        batch, self._state = item
        self._next_step = step + 1
        return batch  # type: ignore[no-any-return]

    def state(self) -> dict[str, Any]:
        """The read position after the last batch handed out (JSON-serialisable)."""
        return {"sources": dict(self._state["sources"]), "examples": int(self._state["examples"])}

    def restore(self, state: Mapping[str, Any], step: int) -> None:
        """Resume after ``step`` from a saved :meth:`state`; only before the first batch."""
        if self._thread is not None:
            raise RuntimeError("restore() must come before the first batch")
        self.mixer.restore(dict(state["sources"]))
        self._state = {"sources": self.mixer.state(), "examples": int(state.get("examples", 0))}
        self._next_step = step + 1

    @property
    def wait_seconds(self) -> float:
        return sum(self.waits)

    def malformed(self) -> dict[str, int]:
        return self.mixer.malformed()

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["USER_FEATURE", "StreamLoader", "open_streams", "spec_schema"]
