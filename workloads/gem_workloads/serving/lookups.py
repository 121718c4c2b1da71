"""The ranker's side of Solaris: look up precomputed user-ad embeddings for a request's candidates.

Runs next to scoring (in a small thread pool, so a slow store never blocks the event loop) and
never fails a ranking request: if the store is unreachable the request is served without
embeddings and ``gem_embedding_store_errors_total`` counts it. Coverage per tier and freshness
are exported by :class:`~gem_workloads.precompute.store.EmbeddingReader` into the server's registry.

A vertical model (:class:`~gem_workloads.models.vertical.VerticalModel`) consumes them: its
lookups run *before* scoring (:meth:`PrecomputedLookups.fetch`) and hand the model each
candidate's embedding with its tier and the user's LoopFM memory, read from the store under the
version of the foundation model the vertical model was trained against. A missing store, a
corrupt entry or a version mismatch degrades (next tier, then ``none``), is counted, and never
fails the request. Other models only report, per tier, how many candidates had one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter as Tally
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter

from ..exchange.store import EmbeddingReader, Keys, check_tiers
from ..models.model_dir import LoadedModel
from ..models.vertical import TIER_INDEX, VerticalModel
from ..scoring.side_inputs import SideInputs

log = logging.getLogger("gem_workloads.serving")


class PrecomputedLookups:
    def __init__(
        self,
        url: str,
        key_prefix: str,
        tiers: Sequence[str],
        version: str | None = None,
        user_key: str = "user_id",
        ad_key: str = "item_id",
        group_key: str = "item_cluster",
    ) -> None:
        import redis

        self.client: Any = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.key_prefix, self.tiers, self.version = key_prefix, check_tiers(tiers), version
        self.user_key, self.ad_key, self.group_key = user_key, ad_key, group_key
        self.reader: EmbeddingReader | None = None
        self.errors: Counter | None = None
        self.vertical: VerticalModel | None = None
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gem-lookup")

    def bind(self, model_version: str, registry: CollectorRegistry, loaded: LoadedModel | None = None) -> None:
        """Called once the model is loaded: embeddings are keyed by the model version (a vertical
        model's: the version of the foundation model it was trained against)."""
        # A vertical model reads the embeddings of the foundation version it was trained against; when the
        # store is configured for another version (--store-version), the reader finds that version's
        # writes only, refuses and counts (see EmbeddingReader.version_live).
        trained_on = loaded.foundation_version if loaded is not None else None
        if trained_on and self.version and trained_on != self.version:
            log.warning(
                "model trained against foundation %s, store serves %s: lookups refused", trained_on, self.version
            )
        version = trained_on or self.version or model_version
        model = loaded.model if loaded is not None else None
        self.vertical = model if isinstance(model, VerticalModel) else None
        width = self.vertical.config.solaris_width or None if self.vertical is not None else None
        keys = Keys(self.key_prefix, version)
        self.reader = EmbeddingReader(self.client, keys, self.tiers, registry, width=width)
        self.errors = Counter(
            "gem_embedding_store_errors", "Lookups skipped because the embedding store failed.", registry=registry
        )

    def _lookup(self, raw: Any) -> dict[str, int]:
        assert self.reader is not None
        user = raw["user"]["features"].get(self.user_key)
        ads = [(c.get(self.ad_key), c.get(self.group_key, "_")) for c in raw["candidates"]]
        if user is None:
            return {}
        return dict(Tally(r.tier for r in self.reader.lookup(user, ads)))

    async def lookup(self, raw: Any) -> dict[str, int] | None:
        if self.reader is None:
            return None
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, self._lookup, raw)
        except Exception:
            if self.errors is not None:
                self.errors.inc()
            return None

    @property
    def feeds_model(self) -> bool:
        """Whether the served model consumes what the store returns (then lookups precede scoring)."""
        return self.vertical is not None

    def _fetch(self, raw: Any) -> tuple[dict[str, int], SideInputs]:
        assert self.reader is not None and self.vertical is not None
        cfg = self.vertical.config
        user = raw["user"]["features"].get(self.user_key)
        n = len(raw["candidates"])
        side = SideInputs()
        if user is None:
            return {}, side
        counts: dict[str, int] = {}
        if self.vertical.takes_solaris:
            ads = [(c.get(self.ad_key), c.get(self.group_key, "_")) for c in raw["candidates"]]
            found = self.reader.lookup(user, ads)
            side.solaris = np.zeros((n, cfg.solaris_width), np.float32)
            side.tier = np.array([TIER_INDEX[r.tier] for r in found], dtype=np.int64)
            for i, r in enumerate(found):
                if r.vector is not None:
                    side.solaris[i] = r.vector
            counts = dict(Tally(r.tier for r in found))
        if self.vertical.takes_memory:
            side.memory, side.memory_mask = self.reader.memory(user, cfg.memory_len, cfg.memory_width)
        return counts, side

    async def fetch(self, raw: Any) -> tuple[dict[str, int] | None, SideInputs | None]:
        """A vertical model's side inputs for one request; ``(None, None)`` when the store failed."""
        if self.reader is None or self.vertical is None:
            return None, None
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, self._fetch, raw)
        except Exception:
            if self.errors is not None:
                self.errors.inc()
            return None, None

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.client.close()
