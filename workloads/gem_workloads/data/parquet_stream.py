"""One Parquet dataset read as a time-ordered stream of row groups: checked, sharded, resumable.

Units of work are row groups, ordered by the smallest timestamp their statistics record (then path
and index), so a log written in time order streams in time order. A data-parallel rank keeps every
``shards``-th row of every unit: shards are disjoint, depend on nothing but the files, and each
covers the whole time range, so every shard sees the sources' mix as the stream has it (taking
whole row groups per rank instead leaves time gaps as long as a row group of the sparsest source,
and the mix of a window drifts by tens of points). The price: each rank decodes the needed
columns of every row group. Rows of a unit are sorted by time (stable) when read. Memory: the
columns of one unit at a time (plus what the caller buffers).

Numeric times are seconds since the epoch, or in the source's ``timestampUnit``; by default
(``auto``) a number from 1e11 on is epoch milliseconds, from 1e14 microseconds and from 1e17
nanoseconds, each value by its own size (1e11 seconds is the year 5138). Logs often store event
times as int64 milliseconds; read as seconds they would sort after every source that uses
seconds, and a sequence source's whole history, future events included, would precede each example.

The read position is ``(epoch, unit, row)`` in that order, counted in raw rows (malformed ones
included), so it is exact after a restart whatever was skipped. Before anything is read, every
file's schema is checked: a missing column or a type the model cannot use raises
:class:`InvalidData` naming the source, the column and the file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .stores import Location, http_listing, with_retries

log = logging.getLogger("gem_workloads.data")

KINDS = ("time", "int", "ids", "number", "label", "domain")
# Seconds per unit of a numeric time column; "auto" picks one per value by its size.
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
TIME_UNIT_CHOICES = ("auto", *TIME_UNITS)
AUTO_BOUNDS = ((1e17, "ns"), (1e14, "us"), (1e11, "ms"))
MALFORMED_SAMPLES = 5
# Files whose footers are read at once when a source is opened (one store round trip each).
FOOTER_READS = 32
FLOAT32_MAX = float(np.finfo(np.float32).max)


class InvalidData(ValueError):
    """A source's files do not have a configured column, or it has a type that cannot be used."""

    reason = "InvalidData"

    def __init__(self, source: str, column: str | None, problem: str) -> None:
        what = f"column {column!r} {problem}" if column else problem
        super().__init__(f"data source {source!r}: {what}")
        self.source, self.column = source, column


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t))


def _type_ok(kind: str, t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    integer = bool(pa.types.is_integer(t))
    floating = bool(pa.types.is_floating(t))
    numeric = integer or floating or bool(pa.types.is_boolean(t))
    if kind == "time":
        return bool(pa.types.is_timestamp(t) or pa.types.is_date(t)) or integer or floating
    if kind == "int":
        return integer
    if kind == "ids":
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return bool(pa.types.is_integer(t.value_type))
        return integer
    if kind in ("number", "label"):
        return numeric
    if kind == "domain":
        return integer or bool(pa.types.is_string(t) or pa.types.is_large_string(t))
    raise ValueError(f"unknown column kind {kind!r}")


_EXPECTED = {
    "time": "a timestamp, or a number (seconds, or in the timestampUnit)",
    "int": "integers",
    "ids": "integers or lists of integers",
    "number": "numbers",
    "label": "booleans or numbers",
    "domain": "strings or integers",
}


def check_schema(source: str, schema: pa.Schema, columns: dict[str, str], where: str) -> None:
    """Raise :class:`InvalidData` for the first configured column ``where`` lacks or cannot use."""
    for column, kind in columns.items():
        idx = schema.get_field_index(column)
        if idx < 0:
            present = ", ".join(schema.names[:12])
            raise InvalidData(source, column, f"is missing in {where} (columns: {present})")
        t = schema.field(idx).type
        if not _type_ok(kind, t):
            hint = ""
            if kind in ("ids", "int") and _is_text(t):
                # Embedding tables know 64-bit ids only; serving must then see the same integers.
                hint = (
                    "; map string ids to 64-bit integers upstream (a 64-bit hash such as FARM_FINGERPRINT "
                    "or xxhash64), and send the ranking server the same integers"
                )
            raise InvalidData(source, column, f"has type {t} in {where}; expected {_EXPECTED[kind]}{hint}")


@dataclass(frozen=True)
class Unit:
    """One row group of one file."""

    path: str
    row_group: int
    rows: int
    first_time: float


@dataclass
class Chunk:
    """Clean rows of one unit, sorted by time: columns as numpy, plus each row's raw position."""

    unit: int
    raw_row: npt.NDArray[np.int64]
    time: npt.NDArray[np.float64]
    columns: dict[str, pa.Array]

    @property
    def size(self) -> int:
        return len(self.raw_row)

    def select(self, keep: npt.NDArray[np.bool_]) -> Chunk:
        mask = pa.array(keep)
        return Chunk(
            self.unit, self.raw_row[keep], self.time[keep], {k: v.filter(mask) for k, v in self.columns.items()}
        )


@dataclass
class Counters:
    """Malformed rows seen (and a few samples for the log), per source."""

    malformed: int = 0
    samples: list[str] = field(default_factory=list)

    def add(self, count: int, sample: str) -> None:
        if count <= 0:
            return
        self.malformed += count
        if len(self.samples) < MALFORMED_SAMPLES:
            self.samples.append(sample)


def numbers_as_seconds(values: npt.NDArray[np.float64], unit: str = "auto") -> npt.NDArray[np.float64]:
    """Numeric times in ``unit`` as seconds; ``auto``: each value by its size (see the module docstring)."""
    if unit != "auto":
        return values * TIME_UNITS[unit]
    size = np.abs(values)
    scale = np.select([size >= b for b, _ in AUTO_BOUNDS], [TIME_UNITS[u] for _, u in AUTO_BOUNDS], 1.0)
    return np.asarray(values * scale, dtype=np.float64)


def auto_units(values: npt.NDArray[np.float64]) -> list[str]:
    """The units ``auto`` reads some of ``values`` in, other than seconds (for the log)."""
    size = np.abs(values[np.isfinite(values)])
    found, below = [], np.inf
    for bound, unit in AUTO_BOUNDS:
        if ((size >= bound) & (size < below)).any():
            found.append(unit)
        below = bound
    return found


def time_numbers(arr: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.float64]:
    """A numeric time column's values as float64 (nulls as NaN), in the column's own unit."""
    # Unsafe: an integer past 2**53 is still a time (a ns count), not an error.
    return np.asarray(arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)


def time_seconds(arr: pa.ChunkedArray | pa.Array, unit: str = "auto") -> npt.NDArray[np.float64]:
    """Timestamps as float seconds (nulls as NaN): timestamp/date types converted (they carry their
    unit), numbers in ``unit`` (``numbers_as_seconds``)."""
    t = arr.type
    if pa.types.is_timestamp(t):
        arr = arr.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64) / 1e6
    if pa.types.is_date(t):
        arr = arr.cast(pa.date32()).cast(pa.int32())
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64) * 86400.0
    return numbers_as_seconds(time_numbers(arr), unit)


class ParquetStream:
    """See the module docstring. ``columns``: column -> kind (see :data:`KINDS`); ``time_column`` orders rows."""

    def __init__(
        self,
        source: str,
        location: Location,
        columns: dict[str, str],
        time_column: str,
        *,
        shard: int = 0,
        shards: int = 1,
        time_range: tuple[float, float] | None = None,
        time_unit: str = "auto",
        footer_reads: int = FOOTER_READS,
    ) -> None:
        """``time_range`` ``[lo, hi)`` in seconds keeps only rows of that event time (a time-ordered
        holdout); ``time_unit`` is the unit of a numeric time column (see the module docstring);
        ``footer_reads`` how many files' footers are read at once when the source is opened."""
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} outside 0..{shards - 1}")
        if time_unit not in TIME_UNIT_CHOICES:
            raise ValueError(f"time unit {time_unit!r} is not one of {', '.join(TIME_UNIT_CHOICES)}")
        self.time_unit = time_unit
        self._units_logged: set[str] = set()
        self.source, self.location, self.columns, self.time_column = source, location, columns, time_column
        self.counters = Counters()
        what = f"data source {source!r} at {location.uri}"
        target: str | list[str] = location.path
        if location.uri.startswith(("http://", "https://")) and location.uri.endswith("/"):
            target = with_retries(what, lambda: http_listing(location.uri))  # files, so each opens with its size
        self._dataset = with_retries(what, lambda: open_dataset(what, target, location.fs))
        fragments = sorted(self._dataset.get_fragments(), key=lambda f: f.path)
        if not fragments:
            raise InvalidData(source, time_column, f"cannot be read: no Parquet files under {location.uri}")
        self._fragments = {f.path: f for f in fragments}
        self._schemas: dict[str, pa.Schema] = {}
        self.naive_times = False  # a timestamp column without a time zone (read as UTC) in some file
        units: list[Unit] = []
        for frag, error in zip(fragments, _read_footers(what, fragments, footer_reads), strict=True):
            if error is not None:
                raise InvalidData(source, None, f"{frag.path} is not a readable Parquet file ({error})") from error
            self._schemas[frag.path] = fragment_schema(frag, self._dataset.schema)
            from_path = frag.physical_schema.get_field_index(time_column) < 0
            # Before the type check: `dt=2026-12-01` is a string, and that message would not say why.
            if from_path and self._schemas[frag.path].get_field_index(time_column) >= 0:
                raise InvalidData(
                    source,
                    time_column,
                    f"is a partition directory ({time_column}=...) of {frag.path}, not a column of the files: "
                    "the time column must give each row its event time (a partition's one value orders nothing "
                    "within it)",
                )
            check_schema(source, self._schemas[frag.path], columns, frag.path)
            time_type = frag.physical_schema.field(time_column).type
            self.naive_times |= bool(pa.types.is_timestamp(time_type) and time_type.tz is None)
            for rg in frag.row_groups:
                first = _as_seconds(_column_min(rg.metadata, time_column), time_unit)
                units.append(Unit(frag.path, rg.id, rg.num_rows, first))
        units.sort(key=lambda u: (u.first_time, u.path, u.row_group))
        self.total_rows = sum(u.rows for u in units)
        self.units, self.row_stride = units, (shard, shards)
        self.shard, self.shards, self.time_range = shard, shards, time_range

    def read_unit(self, index: int) -> Chunk:
        """Unit ``index`` of this shard: this shard's rows, sorted by time, malformed rows removed and counted."""
        unit = self.units[index]
        if self.time_range is not None and unit.first_time >= self.time_range[1]:
            return _empty_chunk(index)  # starts after the range: nothing to read
        frag = self._fragments[unit.path].subset(row_group_ids=[unit.row_group])
        what = f"data source {self.source!r}: {unit.path} row group {unit.row_group}"
        try:
            schema = self._schemas[unit.path]
            table = with_retries(what, lambda: frag.to_table(columns=list(self.columns), schema=schema))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:  # undecodable: skip the unit, never crash
            self.counters.add(unit.rows, f"{what}: unreadable ({exc})")
            self._log_malformed()
            return _empty_chunk(index)
        first, step = self.row_stride
        if step > 1:
            table = table.take(pa.array(np.arange(first, table.num_rows, step)))
        column = table.column(self.time_column)
        if pa.types.is_temporal(column.type):
            times = time_seconds(column, self.time_unit)
        else:  # numbers: read once, for the seconds and for the units `auto` guessed
            numbers = time_numbers(column)
            times = numbers_as_seconds(numbers, self.time_unit)
            if self.time_unit == "auto":
                self._log_units(numbers)
        order = np.argsort(times, kind="stable")
        table = table.take(pa.array(order))
        times = times[order]
        bad = ~np.isfinite(times)  # a null time is NaN; an infinite one orders nothing either
        for column, kind in self.columns.items():
            col = table.column(column).combine_chunks()
            if kind in ("time", "int", "domain", "ids") and col.null_count:
                bad |= np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            if kind == "number" and pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            if kind == "number" and pa.types.is_floating(col.type):
                numbers = np.asarray(col.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False))
                # The model reads float32: a finite float64 past its range would reach it as an infinity.
                bad |= ~(np.abs(numbers) <= FLOAT32_MAX)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            values = {c: table.column(c)[row].as_py() for c in self.columns}
            self.counters.add(int(bad.sum()), f"{unit.path} row group {unit.row_group}: {values}")
            self._log_malformed()
        wanted = ~bad
        if self.time_range is not None:  # outside the range is not malformed, only not this stream's
            wanted &= (times >= self.time_range[0]) & (times < self.time_range[1])
        keep = np.flatnonzero(wanted)
        table = table.take(pa.array(keep))
        cols = {c: table.column(c).combine_chunks() for c in self.columns}
        return Chunk(index, keep.astype(np.int64), times[keep], cols)

    def _log_units(self, numbers: npt.NDArray[np.float64]) -> None:
        for unit in auto_units(numbers):
            if unit not in self._units_logged:  # once per unit and source: a guess the user should see
                self._units_logged.add(unit)
                log.warning(
                    "data source %r: numbers in time column %r read as epoch %s by their size (timestampUnit: "
                    "%s says so and silences this)",
                    self.source,
                    self.time_column,
                    {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit],
                    unit,
                )

    def _log_malformed(self) -> None:
        c = self.counters
        log.warning(
            "data source %r: %d malformed rows skipped so far; e.g. %s", self.source, c.malformed, c.samples[-1]
        )

    def chunks(self, epoch: int, unit: int, row: int) -> Iterator[tuple[int, Chunk]]:
        """Chunks from position ``(epoch, unit, row)`` on, forever (epochs repeat the shard): (epoch, chunk)."""
        if not self.units:
            raise InvalidData(self.source, self.time_column, f"has no rows for shard {self.shard} of {self.shards}")
        while True:
            for index in range(unit, len(self.units)):
                chunk = self.read_unit(index)
                if row:
                    keep = chunk.raw_row >= row
                    chunk = chunk.select(keep)
                    row = 0
                yield epoch, chunk
            epoch, unit = epoch + 1, 0


def open_dataset(what: str, target: str | list[str], fs: pafs.FileSystem) -> pads.Dataset:
    """The Parquet files of ``target``, with Hive partition directories (``surface=feed/``) as columns.

    Spark, Hive and most exporters write a partition key into the path, not into the files; its
    values are then a column like the others (a source's ``domain`` column, say). A key that is
    also a column of the files, with another type, is left to the files. A list of files (a web
    server's index) has no directories to read keys from.
    """
    if isinstance(target, list):
        return pads.dataset(target, filesystem=fs, format="parquet")
    hive = pads.HivePartitioning.discover(infer_dictionary=False)
    try:
        return pads.dataset(target, filesystem=fs, format="parquet", partitioning=hive)
    except pa.ArrowTypeError as exc:  # a key that the files also hold, with another type
        log.warning("%s: partition directories not read as columns (%s)", what, exc)
        return pads.dataset(target, filesystem=fs, format="parquet")


def fragment_schema(frag: pads.ParquetFileFragment, dataset: pa.Schema) -> pa.Schema:
    """The columns one file offers: its own, then the keys of its partition directories."""
    schema = frag.physical_schema
    for key in pads.get_partition_keys(frag.partition_expression):
        if schema.get_field_index(key) < 0 and dataset.get_field_index(key) >= 0:
            schema = schema.append(dataset.field(key))
    return schema


def _column_min(row_group: pq.RowGroupMetaData, column: str) -> object:
    """The row group's minimum of ``column`` from its statistics (None: none recorded).

    Read for that column only: pyarrow's all-column ``RowGroupInfo.statistics`` raises on a float16
    column anywhere in the file, which would make an unused column stop the whole source.
    """
    for i in range(row_group.num_columns):
        meta = row_group.column(i)
        if meta.path_in_schema == column:
            stats = meta.statistics
            try:
                return stats.min if stats is not None and stats.has_min_max else None
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
                return None
    return None


def _read_footers(what: str, fragments: list[pads.ParquetFileFragment], in_flight: int) -> list[pa.ArrowInvalid | None]:
    """Every file's footer (its schema and row-group statistics), ``in_flight`` files at a time, in
    the files' order: each is a round trip to the store, so one at a time a source of 10,000 files
    on S3 (~30 ms a request) took 5 minutes to open, on every rank and every restart. A file that is
    not Parquet comes back as its error; a store that stays unreachable raises DataUnavailable."""

    def footer(frag: pads.ParquetFileFragment) -> pa.ArrowInvalid | None:
        try:
            with_retries(f"{what} ({frag.path})", frag.ensure_complete_metadata)
        except pa.ArrowInvalid as exc:
            return exc
        return None

    if in_flight <= 1 or len(fragments) <= 1:
        return [footer(f) for f in fragments]
    with ThreadPoolExecutor(max_workers=min(in_flight, len(fragments)), thread_name_prefix="footers") as pool:
        # map raises the first file's error in order and cancels the files not started: a store
        # that went away is reported after one file's retries, not after every file's.
        return list(pool.map(footer, fragments))


def warn_of_naive_times(streams: list[ParquetStream]) -> None:
    """Log when some sources' timestamps carry a time zone and others' do not: the naive ones are
    read as UTC, and if they are local wall-clock times the mix by time and the histories (events
    strictly before each example) are off by the zone's offset, future events included. Nothing
    in the files tells the two apart, so this is a warning, not an error."""
    naive = [s.source for s in streams if s.naive_times]
    zoned = [s.source for s in streams if not s.naive_times]
    if naive and zoned:
        log.warning(
            "data sources %s have timestamps without a time zone, read as UTC, beside sources whose times are "
            "UTC-based (%s): if they hold local wall-clock times, convert them to UTC",
            ", ".join(repr(n) for n in naive),
            ", ".join(repr(n) for n in zoned),
        )


def _as_seconds(value: object, unit: str = "auto") -> float:
    """A row group's minimum time as seconds (unknown: -inf, so it sorts first and keeps file order);
    a number in ``unit``, as the rows are read."""
    if value is None:
        return float("-inf")
    if isinstance(value, datetime):  # naive statistics are UTC, as the int64 values behind them
        return float((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())
    if hasattr(value, "toordinal"):
        return float((value.toordinal() - 719163) * 86400)  # date
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return float("-inf")
    return float(numbers_as_seconds(np.array([number]), unit)[0])


def _empty_chunk(index: int) -> Chunk:
    return Chunk(index, np.zeros(0, np.int64), np.zeros(0, np.float64), {})


__all__ = [
    "TIME_UNIT_CHOICES",
    "Chunk",
    "Counters",
    "InvalidData",
    "ParquetStream",
    "Unit",
    "check_schema",
    "numbers_as_seconds",
    "time_numbers",
    "time_seconds",
    "warn_of_naive_times",
]
