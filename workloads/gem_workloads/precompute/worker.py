"""One Solaris consumer: read candidate sets from the stream, predict pairs, embed them, store them, ack.

At-least-once delivery with exactly-once effects:

- Entries come from a consumer group (``XREADGROUP``); an entry is acknowledged (``XACK``) only
  after its embeddings are stored, so a worker killed mid-batch leaves its entries pending.
- Every step first claims entries that another consumer left pending for longer than
  ``claim_idle_ms`` (``XAUTOCLAIM``), so a dead worker's work is picked up by the survivors.
- An entry's writes and its ``done`` marker commit in one transaction; a worker that gets an
  entry whose marker exists (its first owner died between storing and acking) only acks it, so
  no work is written twice.
- An unusable entry (not a valid candidate set) or one that failed ``max_deliveries`` times goes
  to the dead-letter stream ``{stream}:dead`` with the reason, then is acked: never silently lost.

Pair prediction: a candidate set published by the ranker is what this user is being shown now;
the same user is likely to see the same ads again soon (next page, refresh, next session). The
worker predicts the set's top ``max_pairs_per_set`` candidates by the ranker's score (all of
them, in order, when no scores were published) and skips pairs whose exact embedding is still
fresher than ``refresh_after_s``.

LoopFM memory: with a Kunlun-style (foundation) model, each stored entry also appends the
LoopFM representation of the set's top candidate (:mod:`gem_workloads.models.loopfm`, summarised
from the embedding just computed: no extra model work) to the user's historical memory, which the
ranker reads for a vertical model. Every write also records the model version in the store, so a
ranker expecting another foundation version refuses to read (see :mod:`gem_workloads.exchange.store`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..exchange.messages import CandidateSet
from ..exchange.store import EmbeddingWriter, Keys, PairEmbedding, check_tiers
from ..models.kunlun import KunlunModel
from ..models.loopfm import summarise
from ..scoring.engine import Engine
from ..scoring.request import RankRequest, RequestError, parse_request, select_candidates

log = logging.getLogger("gem_workloads.precompute")

Entry = tuple[str, dict[bytes, bytes]]


@dataclass
class WorkerConfig:
    stream: str = "gem:candidates"
    group: str = "solaris"
    consumer: str = "worker-0"
    key_prefix: str = "gem:emb"
    ttl_seconds: int = 3600
    tiers: tuple[str, ...] = ("exact", "userAdGroupAggregate", "similarUser")
    batch_size: int = 256  # pairs per embedding batch
    read_count: int = 16  # stream entries per read
    block_ms: int = 1000
    claim_idle_ms: int = 30_000
    max_deliveries: int = 5
    max_pairs_per_set: int = 256
    refresh_after_s: float | None = None  # default: half the TTL
    user_key: str = "user_id"
    ad_key: str = "item_id"
    group_key: str = "item_cluster"
    bucket_bits: int = 8
    # LoopFM historical memory: representations kept per user (0: do not write memory).
    memory_len: int = 16
    # Chaos testing: exit the process after computing a batch, before storing it (a pod killed mid-batch).
    die_after_compute: bool = False

    def __post_init__(self) -> None:
        self.tiers = check_tiers(self.tiers)
        if self.batch_size < 1 or self.read_count < 1 or self.max_pairs_per_set < 1:
            raise ValueError("batch_size, read_count and max_pairs_per_set must be >= 1")
        if self.memory_len < 0:
            raise ValueError("memory_len must be >= 0")


@dataclass
class StepStats:
    entries: int = 0  # entries acknowledged
    claimed: int = 0  # of which taken over from another consumer
    duplicates: int = 0  # entries already stored by a consumer that died before acking
    dead: int = 0  # entries sent to the dead-letter stream
    pairs_written: int = 0
    pairs_fresh: int = 0  # predicted pairs skipped because their embedding is still fresh
    compute_seconds: float = 0.0
    oldest_entry_age_s: float = 0.0
    errors: int = 0  # steps that failed (store or stream unreachable, model error); their entries are retried

    def add(self, other: StepStats) -> None:
        for f in self.__dataclass_fields__:
            if f == "oldest_entry_age_s":
                self.oldest_entry_age_s = max(self.oldest_entry_age_s, other.oldest_entry_age_s)
            else:
                setattr(self, f, getattr(self, f) + getattr(other, f))


def entry_age_seconds(entry_id: str, now: float) -> float:
    """Stream ids start with the Unix milliseconds at which the entry was added."""
    return max(0.0, now - int(entry_id.split("-")[0]) / 1000.0)


def ensure_group(client: Any, stream: str, group: str) -> None:
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except Exception as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def behaviour_bucket(vectors: npt.NDArray[np.float32], bits: int, seed: int = 7) -> npt.NDArray[np.int64]:
    """Sign-of-random-projection hash: users with similar behaviour vectors share a bucket."""
    planes = np.random.default_rng(seed).standard_normal((vectors.shape[1], bits)).astype(np.float32)
    signs = (vectors @ planes) > 0
    result: npt.NDArray[np.int64] = (signs * (1 << np.arange(bits))).sum(1).astype(np.int64)
    return result


@dataclass
class _Work:
    entry_id: str
    user: str
    request: RankRequest  # only the predicted candidates
    ads: list[tuple[str, str]]  # (ad, group) per predicted candidate
    embeddings: list[npt.NDArray[np.float32]] = field(default_factory=list)
    bucket: int | None = None


class PrecomputeWorker:
    """``client``: the Redis of the stream; ``store``: the Redis of the embedding store (may be the same)."""

    def __init__(self, cfg: WorkerConfig, client: Any, engine: Engine, store: Any | None = None) -> None:
        self.cfg, self.client, self.engine = cfg, client, engine
        self.keys = Keys(cfg.key_prefix, engine.loaded.version)
        self.writer = EmbeddingWriter(
            store if store is not None else client, self.keys, cfg.ttl_seconds, cfg.tiers, memory_keep=cfg.memory_len
        )
        self.refresh_after_s = cfg.refresh_after_s if cfg.refresh_after_s is not None else cfg.ttl_seconds / 2
        self._claim_cursor = "0-0"
        ensure_group(client, cfg.stream, cfg.group)

    # -- reading -------------------------------------------------------------------------------
    def claim(self) -> list[Entry]:
        """Entries other consumers left pending for longer than ``claim_idle_ms``."""
        c = self.cfg
        reply = self.client.xautoclaim(
            c.stream, c.group, c.consumer, c.claim_idle_ms, start_id=self._claim_cursor, count=c.read_count
        )
        self._claim_cursor = _decode(reply[0])
        return [(_decode(i), f) for i, f in reply[1] if f is not None]

    def read(self, block_ms: int | None = None) -> list[Entry]:
        c = self.cfg
        reply = self.client.xreadgroup(
            c.group, c.consumer, {c.stream: ">"}, count=c.read_count, block=c.block_ms if block_ms is None else block_ms
        )
        return [(_decode(i), f) for _, entries in (reply or []) for i, f in entries]

    def step(self, block_ms: int | None = None) -> StepStats:
        claimed = self.claim()
        entries = claimed or self.read(block_ms)
        stats = self.process(entries)
        stats.claimed = len(claimed)
        return stats

    # -- processing ----------------------------------------------------------------------------
    def process(self, entries: list[Entry]) -> StepStats:
        c, stats = self.cfg, StepStats()
        if not entries:
            return stats
        now = time.time()
        stats.oldest_entry_age_s = max(entry_age_seconds(i, now) for i, _ in entries)
        done = self.writer.is_done(c.stream, [i for i, _ in entries])
        to_ack = [i for (i, _), d in zip(entries, done, strict=True) if d]
        stats.duplicates = len(to_ack)
        deliveries = self._deliveries([i for (i, _), d in zip(entries, done, strict=True) if not d])
        work: list[_Work] = []
        for (entry_id, fields), d in zip(entries, done, strict=True):
            if d:
                continue
            if deliveries.get(entry_id, 1) > c.max_deliveries:
                self._dead_letter(entry_id, fields, f"failed {deliveries[entry_id] - 1} times")
                to_ack.append(entry_id)
                stats.dead += 1
                continue
            try:
                work.append(self._predict(entry_id, CandidateSet.from_fields(fields), stats, now))
            except (ValueError, RequestError) as exc:
                reason = exc.message if isinstance(exc, RequestError) else str(exc)
                self._dead_letter(entry_id, fields, reason)
                to_ack.append(entry_id)
                stats.dead += 1
        t0 = time.perf_counter()
        self._compute([w for w in work if w.request.num_candidates])
        stats.compute_seconds = time.perf_counter() - t0
        if c.die_after_compute:
            log.error("die_after_compute: exiting before storing %d entries", len(work))
            os._exit(17)
        now = time.time()
        for w in work:
            pairs = [
                PairEmbedding(w.user, ad, group, vec)
                for (ad, group), vec in zip(w.ads, (v for e in w.embeddings for v in e), strict=True)
            ]
            memory = self._memory(w.user, pairs[0].vector) if pairs and c.memory_len else None
            self.writer.write_entry(
                c.stream, w.entry_id, pairs, {} if w.bucket is None else {w.user: w.bucket}, now, memory
            )
            stats.pairs_written += len(pairs)
            to_ack.append(w.entry_id)
        if to_ack:
            self.client.xack(c.stream, c.group, *to_ack)
        stats.entries = len(to_ack)
        return stats

    def _memory(self, user: str, embedding: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.float32]] | None:
        """The LoopFM representation of ``embedding`` for the user's memory (foundation models only)."""
        model = self.engine.loaded.model
        if not isinstance(model, KunlunModel):
            return None
        rep = summarise(model, torch.from_numpy(np.ascontiguousarray(embedding, dtype=np.float32))[None, :])
        return {user: rep[0].numpy()}

    def _deliveries(self, ids: list[str]) -> dict[str, int]:
        if not ids:
            return {}
        lo, hi = min(ids, key=_id_key), max(ids, key=_id_key)
        rows = self.client.xpending_range(self.cfg.stream, self.cfg.group, min=lo, max=hi, count=len(ids) * 4 + 16)
        wanted = set(ids)
        return {_decode(r["message_id"]): int(r["times_delivered"]) for r in rows if _decode(r["message_id"]) in wanted}

    def _dead_letter(self, entry_id: str, fields: dict[bytes, bytes], reason: str) -> None:
        log.warning("entry %s to %s:dead: %s", entry_id, self.cfg.stream, reason)
        dead = {**fields, b"entry": entry_id.encode(), b"reason": reason.encode()}
        self.client.xadd(f"{self.cfg.stream}:dead", dead, maxlen=10_000)

    def _predict(self, entry_id: str, cset: CandidateSet, stats: StepStats, now: float) -> _Work:
        c = self.cfg
        req = parse_request(cset.request, self.engine.schema, self.engine.seq_len, max_candidates=1_000_000)
        raw = cset.request
        user = raw["user"]["features"].get(c.user_key)
        if user is None:
            raise ValueError(f"user.features.{c.user_key}: missing (the user key of the store)")
        cands = raw["candidates"]
        order = np.arange(len(cands))
        if cset.scores is not None and len(cset.scores) == len(cands):
            order = np.argsort(-np.asarray(cset.scores), kind="stable")
        seen: set[str] = set()
        rows: list[int] = []
        ads: list[tuple[str, str]] = []
        for i in order:
            cand = cands[int(i)]
            if c.ad_key not in cand:
                raise ValueError(f"candidates[{int(i)}].{c.ad_key}: missing (the ad key of the store)")
            ad = str(cand[c.ad_key])
            if ad in seen:
                continue
            seen.add(ad)
            rows.append(int(i))
            ads.append((ad, str(cand.get(c.group_key, "_"))))
            if len(rows) >= c.max_pairs_per_set:
                break
        fresh = self.writer.fresh([(str(user), a) for a, _ in ads], self.refresh_after_s, now)
        keep = [k for k, f in enumerate(fresh) if not f]
        stats.pairs_fresh += len(ads) - len(keep)
        return _Work(
            entry_id,
            str(user),
            select_candidates(req, np.asarray([rows[k] for k in keep], dtype=np.int64)),
            [ads[k] for k in keep],
        )

    def _compute(self, work: list[_Work]) -> None:
        """Embed in batches of at most ``batch_size`` pairs (a larger set is split); each user is
        encoded once per batch it appears in."""
        size = self.cfg.batch_size
        chunks: list[tuple[_Work, RankRequest]] = []
        for w in work:
            n = w.request.num_candidates
            if n <= size:
                chunks.append((w, w.request))
                continue
            for lo in range(0, n, size):
                rows = np.arange(lo, min(lo + size, n), dtype=np.int64)
                chunks.append((w, select_candidates(w.request, rows)))
        i = 0
        while i < len(chunks):
            batch, pairs = [chunks[i]], chunks[i][1].num_candidates
            i += 1
            while i < len(chunks) and pairs + chunks[i][1].num_candidates <= size:
                pairs += chunks[i][1].num_candidates
                batch.append(chunks[i])
                i += 1
            embeddings, users = self.engine.embed([r for _, r in batch])
            buckets = behaviour_bucket(users, self.cfg.bucket_bits)
            for (w, _), e, b in zip(batch, embeddings, buckets, strict=True):
                w.embeddings.append(e)  # chunks of one set arrive in order
                w.bucket = int(b)


def _decode(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
