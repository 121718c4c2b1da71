"""Shutdown closes the API client only after the passes in flight end (or a bound passes)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gem_operator.controllers import settings
from gem_operator.controllers.reconcile import PassesInFlight


class ClosingApi:
    def __init__(self, passes: PassesInFlight) -> None:
        self.passes = passes
        self.closed_while_running: bool | None = None

    async def close(self) -> None:
        self.closed_while_running = not self.passes.idle


class Memo(dict[str, Any]):
    """kopf's memo: attribute and item access to the same values."""

    def __getattr__(self, name: str) -> Any:
        return self[name]


async def test_the_client_closes_after_the_pass_in_flight() -> None:
    passes = PassesInFlight()
    api = ClosingApi(passes)
    release = asyncio.Event()

    async def a_pass() -> None:
        async with passes.running():
            await release.wait()

    running = asyncio.create_task(a_pass())
    await asyncio.sleep(0)
    assert not passes.idle
    closing = asyncio.create_task(settings.close(memo=Memo(kube=api, passes=passes), logger=logging.getLogger()))
    await asyncio.sleep(0.05)
    assert api.closed_while_running is None  # still waiting for the pass
    release.set()
    await asyncio.gather(running, closing)
    assert api.closed_while_running is False


async def test_a_pass_that_never_ends_delays_shutdown_only_by_the_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settings, "DRAIN_SECONDS", 0.05)
    passes = PassesInFlight()
    api = ClosingApi(passes)
    async with passes.running():
        await settings.close(memo=Memo(kube=api, passes=passes), logger=logging.getLogger("gem"))
    assert api.closed_while_running is True
    assert "passes still running" in caplog.text
    assert passes.idle
