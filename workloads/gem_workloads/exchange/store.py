"""The embedding store on Redis: versioned keys with TTL, idempotent writes, and the degrade-not-drop read path.

Keys (``P`` = key prefix, ``V`` = model version; an embedding of one model is never read as
another's)::

    P:V:e:{user}:{ad}          exact user-ad embedding                     (string, TTL)
    P:V:g:{user}:{group}       the user's recent embeddings in an ad group (hash ad -> embedding, TTL)
    P:V:gz:{user}:{group}      their write times, to keep the newest K      (sorted set, TTL)
    P:V:ub:{user}              the user's behaviour bucket                  (string, TTL)
    P:V:s:{bucket}:{ad}        the latest embedding of any user of that bucket for the ad (string, TTL)
    P:V:done:{stream}:{entry}  marker: this stream entry's writes are stored (string, TTL)
    P:V:m:{user}               the user's LoopFM historical memory (sorted set by write time, newest K, TTL)
    P:versions                 the model versions writing to this prefix (sorted set, score = last write)

Ids in keys are spelled signed: an id of the unsigned 64-bit upper half (``18446744073709551615``)
is keyed as its signed twin (``-1``), the same bits, as training and serving fold them
(``models.features.fold_id``), so a producer that writes unsigned ids and a ranker that sends
signed ones meet on one key. Every other part is kept as written.

An embedding value is 8 bytes of write time (float64 Unix seconds) then float32 values. All the
writes of one stream entry and its ``done`` marker go in one MULTI/EXEC transaction, so an
entry is stored entirely or not at all, and a worker that finds the marker only acknowledges.

Read path (:class:`EmbeddingReader`): ``exact`` -> ``userAdGroupAggregate`` (mean of the user's
recent embeddings for the ad's group) -> ``similarUser`` (a same-bucket user's embedding of the
ad) -> ``none``; every lookup is counted per tier, with the age of what was served.

Versioning: a reader whose model version is not among the versions written to the store recently
(``P:versions``) refuses to read (every lookup is ``none``) and counts
``gem_embedding_version_mismatch_total``: a vertical model must read the embeddings of the
foundation model it was trained against, never another's. An entry that does not unpack to a
vector of the expected width is skipped (the next tier serves) and counted in
``gem_embedding_corrupt_entries_total{tier}``.
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


_SIGNED_END = 2**63  # ids in [2**63, 2**64) are the unsigned spelling of negative signed ids


def key_part(part: object) -> str:
    """`part` as a key spells it: an unsigned 64-bit id above the signed range (an int or its
    decimal digits) as its signed twin, anything else as `str` spells it."""
    text = str(part)
    if len(text) in (19, 20) and text.isascii() and text.isdigit():
        value = int(text)
        if _SIGNED_END <= value < 2 * _SIGNED_END:
            return str(value - 2 * _SIGNED_END)
    return text


@dataclass(frozen=True)
class Keys:
    prefix: str
    version: str

    def _k(self, *parts: object) -> str:
        return ":".join([self.prefix, self.version, *(key_part(p) for p in parts)])

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

    def memory(self, user: object) -> str:
        return self._k("m", user)

    @property
    def versions(self) -> str:
        return f"{self.prefix}:versions"


@dataclass
class PairEmbedding:
    user: str
    ad: str
    group: str
    vector: Vector


class EmbeddingWriter:
    """Writes one stream entry's embeddings (and its ``done`` marker) in one transaction."""

    def __init__(
        self,
        client: Any,
        keys: Keys,
        ttl_seconds: int,
        tiers: Sequence[str],
        group_keep: int = 16,
        memory_keep: int = 16,
    ) -> None:
        self.client, self.keys, self.ttl = client, keys, int(ttl_seconds)
        self.tiers = check_tiers(tiers)
        self.group_keep, self.memory_keep = group_keep, max(int(memory_keep), 1)
        self._group_script = client.register_script(_GROUP_WRITE)

    def is_done(self, stream: str, entry_ids: Sequence[str]) -> list[bool]:
        if not entry_ids:
            return []
        return [bool(v) for v in self.client.mget([self.keys.done(stream, e) for e in entry_ids])]

    def write_entry(
        self,
        stream: str,
        entry_id: str,
        pairs: Sequence[PairEmbedding],
        buckets: dict[str, int],
        now: float,
        memory: dict[str, Vector] | None = None,
    ) -> None:
        """``memory``: a LoopFM representation per user, appended to the user's historical memory."""
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
        for user, rep in (memory or {}).items():
            pipe.zadd(k.memory(user), {pack(rep, now): now})
            pipe.zremrangebyrank(k.memory(user), 0, -(self.memory_keep + 1))
            pipe.expire(k.memory(user), ttl)
        pipe.zadd(k.versions, {k.version: now})
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
        self,
        client: Any,
        keys: Keys,
        tiers: Sequence[str],
        registry: CollectorRegistry | None = None,
        width: int | None = None,
        version_ttl_s: float = 86_400.0,
    ) -> None:
        """``width``: floats per embedding (entries of another width are corrupt); ``version_ttl_s``:
        a version is live in the store while it was written to within this long."""
        self.client, self.keys = client, keys
        self.tiers = check_tiers(tiers)
        self.width, self.version_ttl_s = width, version_ttl_s
        self.registry = registry or CollectorRegistry()
        self.corrupt = Counter(
            "gem_embedding_corrupt_entries",
            "Store entries skipped because they do not hold a vector of the model's width, by tier.",
            ["tier"],
            registry=self.registry,
        )
        self.mismatch = Counter(
            "gem_embedding_version_mismatch",
            "Lookups refused because the store holds no embeddings of the served model's version.",
            registry=self.registry,
        )
        self._live: tuple[float, bool, bool] | None = None  # (checked at, store has versions, ours is live)
        self.store_versions: list[str] = []
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

    def decode(self, raw: Any, tier: str, width: int | None = None) -> tuple[Vector, float] | None:
        """An entry's (vector, write time), or ``None`` (counted) when it is not a valid embedding
        of ``width`` floats (default: the reader's width)."""
        width = self.width if width is None else width
        if not isinstance(raw, bytes | bytearray) or len(raw) < 8 or (len(raw) - 8) % 4:
            self.corrupt.labels(tier).inc()
            return None
        vec, ts = unpack(bytes(raw))
        if (width is not None and len(vec) != width) or not np.isfinite(vec).all() or not np.isfinite(ts):
            self.corrupt.labels(tier).inc()
            return None
        return vec, ts

    def version_live(self, now: float) -> bool:
        """Whether the store holds recent writes of this reader's version (checked at most once a second).

        A store nobody has written to yet is not a mismatch (lookups simply miss); a store written by
        other versions only is: the lookup is refused and counted."""
        if self._live is None or now - self._live[0] >= 1.0:
            rows = self.client.zrangebyscore(self.keys.versions, now - self.version_ttl_s, "+inf")
            self.store_versions = [r.decode() if isinstance(r, bytes) else str(r) for r in rows]
            self._live = (now, bool(rows), self.keys.version in self.store_versions)
        has_versions, ours = self._live[1], self._live[2]
        return ours or not has_versions

    def _finish(self, out: list[Lookup | None]) -> list[Lookup]:
        result = [o if o is not None else Lookup(NONE_TIER, None, None) for o in out]
        for r in result:
            self.counts[r.tier] += 1
            self.lookups.labels(r.tier).inc()
            if r.age_seconds is not None:
                self.age.labels(r.tier).observe(max(r.age_seconds, 0.0))
        return result

    def lookup(self, user: object, ads: Sequence[tuple[object, object]], now: float | None = None) -> list[Lookup]:
        now = time.time() if now is None else now
        k = self.keys
        out: list[Lookup | None] = [None] * len(ads)
        if not self.version_live(now):
            self.mismatch.inc()
            return self._finish(out)
        raw = self.client.mget([k.exact(user, a) for a, _ in ads]) if ads else []
        for i, v in enumerate(raw):
            if v is not None and (got := self.decode(v, "exact")) is not None:
                out[i] = Lookup("exact", got[0], now - got[1])
        missing = [i for i, o in enumerate(out) if o is None]
        if missing and "userAdGroupAggregate" in self.tiers:
            groups = sorted({str(ads[i][1]) for i in missing})
            pipe = self.client.pipeline(transaction=False)
            for g in groups:
                pipe.hgetall(k.group(user, g))
            agg: dict[str, Lookup] = {}
            for g, members in zip(groups, pipe.execute(), strict=True):
                good = [
                    d for v in (members or {}).values() if (d := self.decode(v, "userAdGroupAggregate")) is not None
                ]
                if good:
                    vecs, stamps = zip(*good, strict=True)
                    agg[g] = Lookup("userAdGroupAggregate", np.mean(np.stack(vecs), axis=0), now - max(stamps))
            for i in missing:
                out[i] = agg.get(str(ads[i][1]))
            missing = [i for i, o in enumerate(out) if o is None]
        if missing and "similarUser" in self.tiers:
            bucket = self.client.get(k.bucket(user))
            if bucket is not None:
                b = bucket.decode() if isinstance(bucket, bytes) else str(bucket)
                for i, v in zip(missing, self.client.mget([k.similar(b, ads[i][0]) for i in missing]), strict=True):
                    if v is not None and (got := self.decode(v, "similarUser")) is not None:
                        out[i] = Lookup("similarUser", got[0], now - got[1])
        return self._finish(out)

    def memory(
        self, user: object, k: int, width: int, now: float | None = None
    ) -> tuple[Vector, npt.NDArray[np.bool_]]:
        """The user's last ``k`` LoopFM representations written strictly before ``now``, right-aligned
        (most recent last): ``([k, width], present [k])``; corrupt entries are skipped and counted."""
        now = time.time() if now is None else now
        out = np.zeros((k, width), dtype=np.float32)
        present = np.zeros(k, dtype=bool)
        if not self.version_live(now):
            return out, present
        rows = self.client.zrevrangebyscore(self.keys.memory(user), f"({now!r}", "-inf", start=0, num=k)
        good: list[Vector] = []
        for raw in rows:
            got = self.decode(raw, "memory", width)
            if got is not None:
                good.append(got[0])
        for j, vec in enumerate(reversed(good)):
            out[k - len(good) + j] = vec
            present[k - len(good) + j] = True
        return out, present
