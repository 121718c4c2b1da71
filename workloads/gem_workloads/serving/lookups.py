"""The ranker's side of Solaris: look up precomputed user-ad embeddings for a request's candidates.

Runs next to scoring (in a small thread pool, so a slow store never blocks the event loop) and
never fails a ranking request: if the store is unreachable the request is served without
embeddings and ``gem_embedding_store_errors_total`` counts it. Coverage per tier and freshness
are exported by :class:`~gem_workloads.precompute.store.EmbeddingReader` into the server's registry.

The model does not consume the embeddings yet (that needs an input slot in the model); the
response reports, per tier, how many candidates had one.
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from ..precompute.store import EmbeddingReader, Keys, check_tiers


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
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gem-lookup")

    def bind(self, model_version: str, registry: CollectorRegistry) -> None:
        """Called once the model is loaded: embeddings are keyed by the model version."""
        keys = Keys(self.key_prefix, self.version or model_version)
        self.reader = EmbeddingReader(self.client, keys, self.tiers, registry)
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

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.client.close()
