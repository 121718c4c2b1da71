"""Virtual mixing in stream order: several example sources interleaved by event time, with weights, never copied.

Each source is read as its own time-ordered stream (:class:`.parquet_stream.ParquetStream`); a batch
is the next ``n`` rows of their k-way merge by ``(epoch, event time)``, so the proportion of each
source (and domain) in any time window is the stream's own. A source's ``weight`` is its sampling
rate relative to the heaviest source: rows are kept when a hash of their position falls below
``weight / max(weights)``, so the choice is a pure function of the files and survives restarts.
Nothing is materialised: at most one row group and ``n`` buffered rows per source are in memory.

The position of every source, ``(epoch, unit, next raw row)`` and the merge key reached (the running
maximum of event times, which keeps each source's key monotone when row groups overlap in time), is
what checkpoints save (:meth:`TimeMixer.state` / :meth:`TimeMixer.restore`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .blocks import Jagged
from .parquet_stream import Chunk, InvalidData, ParquetStream
from .spec import DataSpec, SourceSpec

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Position = tuple[int, int, int]


@dataclass
class Rows:
    """Examples in the common layout of all sources (features a source lacks are id 0 / 0.0 / masked)."""

    epoch: IntArray
    unit: IntArray
    raw_row: IntArray
    key: FloatArray  # merge key: running max of the event time within the epoch
    time: FloatArray
    source: IntArray
    user: IntArray
    example_id: IntArray  # the id column, or -1
    domain: IntArray
    sparse: dict[str, Jagged]
    dense: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]
    mask: npt.NDArray[np.float32]

    @property
    def size(self) -> int:
        return len(self.time)

    def take(self, rows: IntArray) -> Rows:
        from .blocks import take_rows

        arrays = {k: v[rows] for k, v in self.__dict__.items() if isinstance(v, np.ndarray)}
        return Rows(**arrays, sparse={k: take_rows(v, rows) for k, v in self.sparse.items()})

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        first = parts[0]
        arrays = {
            k: np.concatenate([getattr(p, k) for p in parts])
            for k, v in first.__dict__.items()
            if isinstance(v, np.ndarray)
        }
        return Rows(**arrays, sparse={k: Jagged.concat([p.sparse[k] for p in parts]) for k in first.sparse})


def _ids(col: pa.Array) -> Jagged:
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = np.asarray(col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        values = np.asarray(col.flatten().fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return Jagged(values, lengths)
    return Jagged.single(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64))


def _numbers(col: pa.Array, fill: float) -> FloatArray:
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return np.asarray(col.cast(pa.float64()).fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.float64)


def position_hash(source: int, epoch: IntArray, unit: IntArray, row: IntArray) -> FloatArray:
    """Uniform [0, 1) per row position (splitmix64): the deterministic coin of weighted sampling."""
    x = (row.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (unit.astype(np.uint64) << np.uint64(20))
    x ^= (epoch.astype(np.uint64) << np.uint64(44)) ^ np.uint64(source * 0xD1B54A32D192ED03 % 2**64)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) / float(2**53)


class SourceReader:
    """One source's stream, converted to :class:`Rows`, buffered, with its position."""

    def __init__(self, index: int, spec: SourceSpec, stream: ParquetStream, layout: DataSpec, keep: float) -> None:
        self.index, self.spec, self.stream, self.keep = index, spec, stream, keep
        self.domains = {d: layout.domains.index(d) for d in spec.domain_values}
        self.sparse_names, self.dense_names, self.tasks = layout.sparse, layout.dense, layout.tasks
        self.position: Position = (0, 0, 0)
        self.consumed_key = (-1, float("-inf"))  # (epoch, merge key) of the last row consumed
        self._buffer: Rows | None = None
        self._chunks: Iterator[tuple[int, Chunk]] | None = None
        self._running = self.consumed_key  # ... of the last row buffered

    def restore(self, position: Position, key: tuple[int, float]) -> None:
        self.position, self._buffer, self._chunks = position, None, None
        self.consumed_key = self._running = key

    def _convert(self, epoch: int, chunk: Chunk) -> Rows | None:
        n, s, c = chunk.size, self.spec, chunk.columns
        if n == 0:
            return None
        ok = position_hash(self.index, np.full(n, epoch), np.full(n, chunk.unit), chunk.raw_row) < self.keep
        if s.domain:
            col = c[s.domain]
            values = col.dictionary_decode() if pa.types.is_dictionary(col.type) else col
            names = [str(v) for v in values.to_pylist()]
            domain = np.array([self.domains.get(v, -1) for v in names], dtype=np.int64)
        else:
            domain = np.full(n, self.domains[s.name], dtype=np.int64)
        labels = np.stack(
            [_numbers(c[s.labels[t]], np.nan) if t in s.labels else np.full(n, np.nan) for t in self.tasks], 1
        )
        bad = (domain < 0) | np.any((labels < 0) | (labels > 1), axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            self.stream.counters.add(
                int(bad.sum()), f"row {int(chunk.raw_row[row])}: unknown domain or label outside [0, 1]"
            )
            self.stream._log_malformed()
        keep = np.flatnonzero(ok & ~bad)
        if len(keep) == 0:
            return None
        times = chunk.time
        run_epoch, run_max = self._running
        start = run_max if run_epoch == epoch else float("-inf")
        key = np.maximum.accumulate(np.maximum(times, start))
        self._running = (epoch, float(key[-1]))
        one = Jagged.single(np.zeros(n, np.int64))
        rows = Rows(
            epoch=np.full(n, epoch, np.int64),
            unit=np.full(n, chunk.unit, np.int64),
            raw_row=chunk.raw_row,
            key=key,
            time=times,
            source=np.full(n, self.index, np.int64),
            user=np.asarray(c[s.user].to_numpy(zero_copy_only=False), dtype=np.int64),
            example_id=np.asarray(c[s.id].to_numpy(zero_copy_only=False), dtype=np.int64) if s.id else np.full(n, -1),
            domain=domain,
            sparse={f: _ids(c[f]) if f in s.sparse else one for f in self.sparse_names},
            dense=np.stack([_numbers(c[f], 0.0) if f in s.dense else np.zeros(n) for f in self.dense_names], 1).astype(
                np.float32
            )
            if self.dense_names
            else np.zeros((n, 0), np.float32),
            labels=np.nan_to_num(labels, nan=0.0).astype(np.float32),
            mask=(~np.isnan(labels)).astype(np.float32),
        )
        return rows.take(keep.astype(np.int64))

    def peek(self, n: int) -> Rows:
        """At least ``n`` buffered rows (the stream repeats by epochs, so there always are)."""
        if self._chunks is None:
            self._chunks = self.stream.chunks(*self.position)
        parts = [self._buffer] if self._buffer is not None and self._buffer.size else []
        have = sum(p.size for p in parts)
        empty_units = 0
        while have < n:
            epoch, chunk = next(self._chunks)
            rows = self._convert(epoch, chunk)
            if rows is None:
                empty_units += 1
                if empty_units > 2 * len(self.stream.units) + 2:
                    seen = self.stream.counters
                    why = f"{seen.malformed} malformed, e.g. {seen.samples[-1]}" if seen.samples else "none malformed"
                    raise InvalidData(
                        self.spec.name, None, f"has no usable rows ({why}; or none left after sampling by weight)"
                    )
                continue
            empty_units = 0
            parts.append(rows)
            have += rows.size
        self._buffer = Rows.concat(parts) if len(parts) > 1 else parts[0]
        return self._buffer

    def consume(self, k: int) -> None:
        if k <= 0:
            return
        assert self._buffer is not None and k <= self._buffer.size
        b = self._buffer
        self.position = (int(b.epoch[k - 1]), int(b.unit[k - 1]), int(b.raw_row[k - 1]) + 1)
        self.consumed_key = (int(b.epoch[k - 1]), float(b.key[k - 1]))
        self._buffer = b.take(np.arange(k, b.size, dtype=np.int64))


class TimeMixer:
    """The merged stream of all example sources of one data-parallel shard (see the module docstring)."""

    def __init__(self, spec: DataSpec, streams: list[ParquetStream]) -> None:
        top = max(s.weight for s in spec.sources)
        self.readers = [
            SourceReader(i, s, stream, spec, s.weight / top)
            for i, (s, stream) in enumerate(zip(spec.sources, streams, strict=True))
        ]

    def take(self, n: int) -> Rows:
        """The next ``n`` rows in ``(epoch, time)`` order across sources (ties: source order)."""
        heads = [r.peek(n) for r in self.readers]
        merged = Rows.concat([h.take(np.arange(n, dtype=np.int64)) for h in heads])
        order = np.lexsort((merged.source, merged.key, merged.epoch))[:n]
        counts = np.bincount(merged.source[order], minlength=len(self.readers))
        for reader, k in zip(self.readers, counts, strict=True):
            reader.consume(int(k))
        return merged.take(order.astype(np.int64))

    def state(self) -> dict[str, list[float | int | None]]:
        """Per source ``[epoch, unit, next raw row, key epoch, key]`` (key None before the first row)."""
        out: dict[str, list[float | int | None]] = {}
        for r in self.readers:
            key_epoch, key = r.consumed_key
            out[r.spec.name] = [*r.position, key_epoch, None if key == float("-inf") else key]
        return out

    def restore(self, state: dict[str, list[float | int | None]]) -> None:
        missing = [r.spec.name for r in self.readers if r.spec.name not in state]
        if missing:
            raise ValueError(f"the checkpoint's data position has no entry for source(s) {missing}")
        for r in self.readers:
            e, u, row, key_epoch, key = state[r.spec.name]
            r.restore(
                (int(e or 0), int(u or 0), int(row or 0)),
                (int(key_epoch or 0), float("-inf") if key is None else float(key)),
            )

    def malformed(self) -> dict[str, int]:
        return {r.spec.name: r.stream.counters.malformed for r in self.readers}


__all__ = ["Rows", "SourceReader", "TimeMixer", "position_hash"]
