"""The embedding store on Redis: versioned keys with TTL, idempotent writes, and the degrade-not-drop read path.

Keys (``P`` = key prefix, ``V`` = model version; an embedding of one model is never read as
another's)::

    P:V:e:{user}:{ad}          exact user-ad embedding                     (string, TTL)
    P:V:g:{user}:{group}       the user's recent embeddings in an ad group (hash ad -> embedding, TTL)
    P:V:gz:{user}:{group}      their write times, to keep the newest K      (sorted set, TTL)
    P:V:ub:{user}              the user's behaviour bucket                  (string, TTL)
    P:V:s:{bucket}:{ad}        the latest embedding of any user of that bucket for the ad (string, TTL)
    P:V:done:{stream}:{entry}  marker: this stream entry's writes are stored (string, TTL)

An embedding value is 8 bytes of write time (float64 Unix seconds) then float32 values. All the
writes of one stream entry and its ``done`` marker go in one MULTI/EXEC transaction, so an
entry is stored entirely or not at all, and a worker that finds the marker only acknowledges.

Read path (:class:`EmbeddingReader`): ``exact`` -> ``userAdGroupAggregate`` (mean of the user's
recent embeddings for the ad's group) -> ``similarUser`` (a same-bucket user's embedding of the
ad) -> ``none``; every lookup is counted per tier, with the age of what was served.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Histogram

TIERS = ("exact", "userAdGroupAggregate", "similarUser")
NONE_TIER = "none"
AGE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 86400)
Vector = npt.NDArray[np.float32]

# Keep the newest K embeddings per (user, ad group), atomically.
_GROUP_WRITE = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  redis.call('HDEL', KEYS[1], unpack(old))
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""


def pack(vector: Vector, ts: float) -> bytes:
    return struct.pack("<d", ts) + np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def unpack(raw: bytes) -> tuple[Vector, float]:
    (ts,) = struct.unpack_from("<d", raw)
    return np.frombuffer(raw, dtype=np.float32, offset=8).copy(), float(ts)


def check_tiers(tiers: Sequence[str]) -> tuple[str, ...]:
    """Validate a ``--fallback`` list: known tiers, ``exact`` first, no repeats."""
    out = tuple(t.strip() for t in tiers if t.strip())
    unknown = [t for t in out if t not in TIERS]
    if unknown:
        raise ValueError(f"unknown fallback tiers {unknown}; known: {list(TIERS)}")
    if not out or out[0] != "exact":
        raise ValueError(f"fallback tiers must start with 'exact', got {list(out)}")
    if len(set(out)) != len(out):
        raise ValueError(f"fallback tiers must not repeat, got {list(out)}")
    return out


@dataclass(frozen=True)
class Keys:
    prefix: str
    version: str

    def _k(self, *parts: object) -> str:
        return ":".join([self.prefix, self.version, *(str(p) for p in parts)])

    def exact(self, user: object, ad: object) -> str:
        return self._k("e", user, ad)

    def group(self, user: object, group: object) -> str:
        return self._k("g", user, group)

    def group_times(self, user: object, group: object) -> str:
        return self._k("gz", user, group)

    def bucket(self, user: object) -> str:
        return self._k("ub", user)

    def similar(self, bucket: object, ad: object) -> str:
        return self._k("s", bucket, ad)

    def done(self, stream: str, entry_id: str) -> str:
        return self._k("done", stream, entry_id)


@dataclass
class PairEmbedding:
    user: str
    ad: str
    group: str
    vector: Vector


class EmbeddingWriter:
    """Writes one stream entry's embeddings (and its ``done`` marker) in one transaction."""

    def __init__(self, client: Any, keys: Keys, ttl_seconds: int, tiers: Sequence[str], group_keep: int = 16) -> None:
        self.client, self.keys, self.ttl = client, keys, int(ttl_seconds)
        self.tiers = check_tiers(tiers)
        self.group_keep = group_keep
        self._group_script = client.register_script(_GROUP_WRITE)

    def is_done(self, stream: str, entry_ids: Sequence[str]) -> list[bool]:
        if not entry_ids:
            return []
        return [bool(v) for v in self.client.mget([self.keys.done(stream, e) for e in entry_ids])]

    def write_entry(
        self, stream: str, entry_id: str, pairs: Sequence[PairEmbedding], buckets: dict[str, int], now: float
    ) -> None:
        k, ttl = self.keys, self.ttl
        pipe = self.client.pipeline(transaction=True)
        for p in pairs:
            value = pack(p.vector, now)
            pipe.set(k.exact(p.user, p.ad), value, ex=ttl)
            if "userAdGroupAggregate" in self.tiers:
                self._group_script(
                    keys=[k.group(p.user, p.group), k.group_times(p.user, p.group)],
                    args=[p.ad, value, now, self.group_keep, ttl],
                    client=pipe,
                )
            if "similarUser" in self.tiers and p.user in buckets:
                pipe.set(k.similar(buckets[p.user], p.ad), value, ex=ttl)
        if "similarUser" in self.tiers:
            for user, bucket in buckets.items():
                pipe.set(k.bucket(user), bucket, ex=ttl)
        pipe.set(k.done(stream, entry_id), 1, ex=ttl)
        pipe.execute()

    def fresh(self, pairs: Sequence[tuple[str, str]], refresh_after_s: float, now: float) -> list[bool]:
        """Whether each (user, ad) already has an exact embedding younger than ``refresh_after_s``."""
        if not pairs:
            return []
        raw = self.client.mget([self.keys.exact(u, a) for u, a in pairs])
        return [v is not None and now - unpack(v)[1] < refresh_after_s for v in raw]


@dataclass
class Lookup:
    tier: str  # one of TIERS or "none"
    vector: Vector | None
    age_seconds: float | None


class EmbeddingReader:
    """The ranker's read path: for each (ad, group) of one user, the best tier that has an embedding."""

    def __init__(
        self, client: Any, keys: Keys, tiers: Sequence[str], registry: CollectorRegistry | None = None
    ) -> None:
        self.client, self.keys = client, keys
        self.tiers = check_tiers(tiers)
        self.registry = registry or CollectorRegistry()
        self.lookups = Counter(
            "gem_embedding_lookups",
            "Precomputed-embedding lookups by the tier that served them (none: missed).",
            ["tier"],
            registry=self.registry,
        )
        self.age = Histogram(
            "gem_embedding_age_seconds",
            "Age of the precomputed embedding served, by tier.",
            ["tier"],
            buckets=AGE_BUCKETS,
            registry=self.registry,
        )
        self.counts = dict.fromkeys((*TIERS, NONE_TIER), 0)

    def coverage(self) -> dict[str, float]:
        """Share of lookups served by each tier (and missed), since this reader started."""
        total = sum(self.counts.values())
        return {t: (n / total if total else 0.0) for t, n in self.counts.items()}

    def lookup(self, user: object, ads: Sequence[tuple[object, object]], now: float | None = None) -> list[Lookup]:
        now = time.time() if now is None else now
        k = self.keys
        out: list[Lookup | None] = [None] * len(ads)
        raw = self.client.mget([k.exact(user, a) for a, _ in ads]) if ads else []
        for i, v in enumerate(raw):
            if v is not None:
                vec, ts = unpack(v)
                out[i] = Lookup("exact", vec, now - ts)
        missing = [i for i, o in enumerate(out) if o is None]
        if missing and "userAdGroupAggregate" in self.tiers:
            groups = sorted({str(ads[i][1]) for i in missing})
            pipe = self.client.pipeline(transaction=False)
            for g in groups:
                pipe.hgetall(k.group(user, g))
            agg: dict[str, Lookup] = {}
            for g, members in zip(groups, pipe.execute(), strict=True):
                if members:
                    vecs, stamps = zip(*(unpack(v) for v in members.values()), strict=True)
                    agg[g] = Lookup("userAdGroupAggregate", np.mean(np.stack(vecs), axis=0), now - max(stamps))
            for i in missing:
                out[i] = agg.get(str(ads[i][1]))
            missing = [i for i, o in enumerate(out) if o is None]
        if missing and "similarUser" in self.tiers:
            bucket = self.client.get(k.bucket(user))
            if bucket is not None:
                b = bucket.decode() if isinstance(bucket, bytes) else str(bucket)
                for i, v in zip(missing, self.client.mget([k.similar(b, ads[i][0]) for i in missing]), strict=True):
                    if v is not None:
                        vec, ts = unpack(v)
                        out[i] = Lookup("similarUser", vec, now - ts)
        result = [o if o is not None else Lookup(NONE_TIER, None, None) for o in out]
        for r in result:
            self.counts[r.tier] += 1
            self.lookups.labels(r.tier).inc()
            if r.age_seconds is not None:
                self.age.labels(r.tier).observe(max(r.age_seconds, 0.0))
        return result
