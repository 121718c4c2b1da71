"""Publish served candidate sets to the Redis stream the Solaris precompute workers consume."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ..exchange.messages import CandidateSet

log = logging.getLogger("gem_workloads.serving.publish")


class CandidatePublisher:
    """Fire-and-forget ``XADD`` (approximately capped at ``maxlen``); never delays or fails a ranking request.

    At most ``max_pending`` publishes are in flight; beyond that, sets are dropped and counted.
    """

    def __init__(self, url: str, stream: str, maxlen: int = 100_000, max_pending: int = 64) -> None:
        import redis.asyncio as aioredis

        self.client: Any = aioredis.Redis.from_url(url)
        self.stream, self.maxlen, self.max_pending = stream, maxlen, max_pending
        self.pending: set[asyncio.Task[None]] = set()
        self.published = 0
        self.dropped = 0

    def publish(self, request: Any, scores: list[float]) -> None:
        if len(self.pending) >= self.max_pending:
            self.dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self._xadd(CandidateSet(request, scores, time.time())))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _xadd(self, entry: CandidateSet) -> None:
        try:
            await self.client.xadd(self.stream, entry.fields(), maxlen=self.maxlen, approximate=True)
            self.published += 1
        except Exception as exc:
            self.dropped += 1
            log.warning("publishing a candidate set failed: %s", exc)

    async def close(self) -> None:
        if self.pending:
            await asyncio.wait(self.pending, timeout=2)
        await self.client.aclose()
