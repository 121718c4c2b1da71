"""OneSeq user histories: events of several sequence sources, joined to each example at training time.

Each sequence source (purchases with ad and account ids, posts with actor and object ids...) keeps
its own event features. For an example of user ``u`` at time ``t`` the history is, per source, the
user's last ``length`` events strictly before ``t``, merged by time into one sequence and cut to
the last ``length``. The merged sequence is written as one jagged feature per (source, feature),
``seq_<source>_<feature>``, plus ``event_source`` (the source's index): every feature has the same
lengths, which is the unified sequence the model's sequence layers read, and the model encodes
each event with its source's own encoder (:class:`gem_workloads.models.kunlun.EventEncoders`).

The sequence datasets are the central store: they are read once (every file, not sharded: any
rank's examples may need any user) and kept as sorted columns, 8 x (2 + features) bytes per event;
nothing is copied into the examples. Lookups are vectorised binary searches, and the strict ``<``
is what keeps labels from leaking: an event at the example's own time is never in its history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..models.features import SEQUENCE_SOURCE
from .blocks import Jagged
from .parquet_stream import ParquetStream
from .spec import SequenceSpec

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def feature_name(source: str, feature: str) -> str:
    """The model's name of one source's event feature (a valid KJT key and table name)."""
    return f"seq_{source}_{feature}".replace("-", "_").replace(".", "_")


@dataclass
class _Events:
    user: IntArray
    time: FloatArray
    key: IntArray  # user rank * (times + 1) + time rank: (user, time) order as one integer
    features: dict[str, IntArray]


def _read_events(spec: SequenceSpec, stream: ParquetStream) -> tuple[IntArray, FloatArray, dict[str, IntArray]]:
    """Every clean event of one sequence source: users, times and its features, in stream order."""
    users: list[IntArray] = []
    times: list[FloatArray] = []
    feats: dict[str, list[IntArray]] = {f: [] for f in spec.features}
    for index in range(len(stream.units)):
        chunk = stream.read_unit(index)
        if chunk.size == 0:
            continue
        users.append(np.asarray(chunk.columns[spec.user].to_numpy(zero_copy_only=False), dtype=np.int64))
        times.append(chunk.time)
        for f in spec.features:
            feats[f].append(np.asarray(chunk.columns[f].to_numpy(zero_copy_only=False), dtype=np.int64))
    cat = {f: np.concatenate(v) if v else np.zeros(0, np.int64) for f, v in feats.items()}
    if not users:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), cat
    return np.concatenate(users), np.concatenate(times), cat


class SequenceHistory:
    """The sequence sources, indexed by (user, time); see the module docstring."""

    def __init__(self, specs: tuple[SequenceSpec, ...], streams: list[ParquetStream]) -> None:
        self.specs = specs
        raw = [_read_events(spec, stream) for spec, stream in zip(specs, streams, strict=True)]
        all_users = np.unique(np.concatenate([r[0] for r in raw])) if raw else np.zeros(0, np.int64)
        self._users = all_users
        self._times = np.unique(np.concatenate([r[1] for r in raw])) if raw else np.zeros(0)
        self._events: list[_Events] = []
        for ev_users, ev_times, feats in raw:
            key = self._key(np.searchsorted(all_users, ev_users), np.searchsorted(self._times, ev_times))
            order = np.argsort(key, kind="stable")
            self._events.append(
                _Events(ev_users[order], ev_times[order], key[order], {f: v[order] for f, v in feats.items()})
            )
        self.num_events = sum(len(e.user) for e in self._events)

    def _key(self, user_rank: IntArray, time_rank: IntArray) -> IntArray:
        return (user_rank.astype(np.int64) * (len(self._times) + 1) + time_rank).astype(np.int64)

    @property
    def feature_names(self) -> list[str]:
        return [SEQUENCE_SOURCE, *(feature_name(s.name, f) for s in self.specs for f in s.features)]

    def _per_source(self, users: IntArray, times: FloatArray, length: int) -> list[tuple[IntArray, IntArray]]:
        """Per source: (flat event indices, counts per example) of the last ``length`` events before each time."""
        rank = np.searchsorted(self._users, users)
        known = (
            (rank < len(self._users)) & (self._users[np.minimum(rank, len(self._users) - 1)] == users)
            if len(self._users)
            else np.zeros(len(users), bool)
        )
        before = self._key(rank, np.searchsorted(self._times, times, side="left"))
        start_key = self._key(rank, np.zeros(len(users), np.int64))
        out = []
        for ev in self._events:
            end = np.searchsorted(ev.key, before, side="left")
            first = np.searchsorted(ev.key, start_key, side="left")
            counts = np.where(known, np.minimum(end - first, length), 0).astype(np.int64)
            offsets = np.cumsum(counts) - counts
            idx = np.repeat(end - counts - offsets, counts) + np.arange(int(counts.sum()))
            out.append((idx.astype(np.int64), counts))
        return out

    def lookup(self, users: IntArray, times: FloatArray, length: int) -> dict[str, Jagged]:
        """The merged history of each example as jagged features (see :attr:`feature_names`)."""
        n = len(users)
        parts = self._per_source(users, times, length)
        example = np.concatenate([np.repeat(np.arange(n), c) for _, c in parts])
        when = np.concatenate([ev.time[idx] for ev, (idx, _) in zip(self._events, parts, strict=True)])
        source = np.concatenate([np.full(len(idx), s, np.int64) for s, (idx, _) in enumerate(parts)])
        local = np.concatenate([idx for idx, _ in parts])
        order = np.lexsort((source, when, example))
        example, source, local = example[order], source[order], local[order]
        total = np.bincount(example, minlength=n)
        group_start = np.cumsum(total) - total
        from_end = total[example] - (np.arange(len(example)) - group_start[example])
        keep = from_end <= length
        example, source, local = example[keep], source[keep], local[keep]
        lengths = np.minimum(total, length).astype(np.int64)
        out = {SEQUENCE_SOURCE: Jagged(source, lengths)}
        for s, (spec, ev) in enumerate(zip(self.specs, self._events, strict=True)):
            mine = source == s
            for f in spec.features:
                values = np.zeros(len(source), np.int64)
                values[mine] = ev.features[f][local[mine]]
                out[feature_name(spec.name, f)] = Jagged(values, lengths)
        return out


__all__ = ["SequenceHistory", "feature_name"]
