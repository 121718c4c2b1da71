"""A fault-injecting HTTP proxy to put in front of an API server (test double, like the emulator).

It forwards every request to the upstream API and, at the configured rates, answers instead with
what a struggling kube-apiserver (or the load balancer in front of it) sends: 500, 429 with
Retry-After, 409 Conflict on writes, a delay before forwarding, a connection dropped without an
answer; and it cuts watch streams after a few seconds. Errors are ``Status`` objects, as the API
server writes them. The operator reaches it through a kubeconfig like any API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import random
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import aiohttp
import aiohttp.web
import yaml

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}
_WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class FaultSpec:
    """Rates are fractions of requests; each fault is drawn independently, in this order."""

    error_500: float = 0.0
    error_429: float = 0.0
    conflict_409: float = 0.0  # writes only: a GET is never answered 409
    reset: float = 0.0  # drop the connection without an answer
    delay: float = 0.0
    delay_seconds: float = 0.5
    retry_after_seconds: int = 1
    cut_watches_after: float | None = None  # seconds (uniform in 0.5x..1.5x); None: never
    seed: int = 0
    # Requests whose "METHOD /path" contains one of these always get a 500 (a call that keeps failing).
    always_fail: tuple[str, ...] = ()

    @classmethod
    def uniform(cls, rate: float, *, cut_watches_after: float | None = 5.0, seed: int = 0) -> FaultSpec:
        """``rate`` each of 500, 429 and 409, as many delayed, and watches cut every few seconds."""
        return cls(
            error_500=rate,
            error_429=rate,
            conflict_409=rate,
            delay=rate,
            cut_watches_after=cut_watches_after,
            seed=seed,
        )


def _status(code: int, reason: str, message: str, retry_after: int | None = None) -> aiohttp.web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    headers = {"Content-Type": "application/json"}  # exactly, as kube-apiserver writes it
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
        headers["Retry-After"] = str(retry_after)
    return aiohttp.web.Response(status=code, body=json.dumps(body).encode(), headers=headers)


@dataclass
class FaultProxy:
    """Serves on 127.0.0.1 (an ephemeral port) in its own thread; ``spec`` may be swapped live."""

    upstream: str
    spec: FaultSpec = field(default_factory=FaultSpec)
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.spec.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: aiohttp.web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    # -- faults ------------------------------------------------------------------------------------

    def _draw(self, rate: float) -> bool:
        return rate > 0 and self._rng.random() < rate

    async def _handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        spec = self.spec
        self.counts["requests"] += 1
        watch = request.query.get("watch") in ("true", "1")
        call = f"{request.method} {request.path}"
        if any(pattern in call for pattern in spec.always_fail):
            self.counts["always_fail"] += 1
            return _status(500, "InternalError", "Internal error occurred: injected persistent fault")
        if self._draw(spec.error_500):
            self.counts["500"] += 1
            return _status(500, "InternalError", "Internal error occurred: injected fault")
        if self._draw(spec.error_429):
            self.counts["429"] += 1
            return _status(429, "TooManyRequests", "the server is busy (injected)", spec.retry_after_seconds)
        if request.method in _WRITES and self._draw(spec.conflict_409):
            self.counts["409"] += 1
            return _status(409, "Conflict", "Operation cannot be fulfilled: the object has been modified (injected)")
        if self._draw(spec.reset):
            self.counts["reset"] += 1
            if request.transport is not None:
                request.transport.close()
            raise ConnectionResetError("injected reset")
        if self._draw(spec.delay):
            self.counts["delayed"] += 1
            await asyncio.sleep(spec.delay_seconds)
        return await self._forward(request, watch)

    async def _forward(self, request: aiohttp.web.Request, watch: bool) -> aiohttp.web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        url = self.upstream.rstrip("/") + request.rel_url.path_qs
        async with self._session.request(request.method, url, headers=headers, data=body or None) as upstream:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            if not watch:
                data = await upstream.read()
                return aiohttp.web.Response(status=upstream.status, body=data, headers=out_headers)
            response = aiohttp.web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            cut = self.spec.cut_watches_after
            deadline = None if cut is None else asyncio.get_running_loop().time() + cut * (0.5 + self._rng.random())
            while True:
                timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                except TimeoutError:
                    self.counts["watch_cut"] += 1
                    break
                except aiohttp.ClientError:
                    break  # upstream went away mid-stream
                if not chunk:
                    break
                try:
                    await response.write(chunk)
                except ConnectionError:
                    break  # the client went away (an operator shutting down ends its watches)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
            return response

    # -- serving -----------------------------------------------------------------------------------

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        app = aiohttp.web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await aiohttp.web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> Self:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name="gem-fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(15):
            raise RuntimeError("the fault proxy failed to start")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)
        self._loop = self._thread = None

    def write_kubeconfig(self, path: str | pathlib.Path) -> pathlib.Path:
        """A kubeconfig like the embedded cluster's, pointing at this proxy."""
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gem-faulty", "cluster": {"server": self.url}}],
            "users": [{"name": "gem-faulty", "user": {"token": "gem-sim"}}],
            "contexts": [{"name": "gem-faulty", "context": {"cluster": "gem-faulty", "user": "gem-faulty"}}],
            "current-context": "gem-faulty",
        }
        target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return target
