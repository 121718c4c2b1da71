"""The ranking server's HTTP API (aiohttp).

- ``POST /v1/rank``: body as in :mod:`gem_workloads.scoring.request`; answer
  ``{"scores": [[p_task, ...], ...], "tasks": [...], "model_version": ..., "shared": bool}``.
  400 malformed JSON, 413 too many candidates or too large a body, 422 wrong types / missing or
  empty fields, 503 while loading or when the queue is full (with ``Retry-After``).
- ``GET /readyz``: 200 only once the model is loaded (with the precision plan it runs);
  ``GET /healthz``: 200 while the process is
  sound (503 if the model failed to load, so the kubelet restarts the pod).
- ``GET /metrics``: Prometheus text (see :mod:`.metrics`).
- ``GET /v1/example-request?candidates=N&seq_len=L``: a valid body for this model (load tests).
- ``GET /v1/model``: kind, version, preset name, sequence length, tasks, precision plan.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..models.model_dir import LoadedModel
from ..scoring.engine import Batcher, Engine, QueueFull
from ..scoring.request import RequestError, example_request, parse_body, parse_request
from .lookups import PrecomputedLookups
from .metrics import ServerMetrics
from .publish import CandidatePublisher

if TYPE_CHECKING:
    from .device import EmulatedDevice

log = logging.getLogger("gem_workloads.serving")

# Largest body read at all (100k candidates fit; the candidate limit answers 413 with a clear message).
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass
class ServerConfig:
    share: bool = True
    max_candidates: int = 2048
    max_batch_requests: int = 64
    max_batch_candidates: int = 8192
    max_queue: int = 256
    batch_timeout_s: float = 0.002
    emulated_device: EmulatedDevice | None = None  # --device emulated:NAME (serving/device.py)
    device: str = "cpu"  # where the loaded model's weights are: the engine moves every input there
    copy_user_state: bool = False  # --copy-user-state: per-candidate copies (the sharing bench's baseline)


class ServerState:
    def __init__(self, cfg: ServerConfig, load: Callable[[], LoadedModel], metrics: ServerMetrics) -> None:
        self.cfg, self.load, self.metrics = cfg, load, metrics
        self.engine: Engine | None = None
        self.batcher: Batcher | None = None
        self.load_error: str | None = None
        self.load_task: asyncio.Task[None] | None = None
        self.publisher: CandidatePublisher | None = None
        self.lookups: PrecomputedLookups | None = None

    async def load_model(self) -> None:
        t0 = time.perf_counter()
        try:
            loaded = await asyncio.get_running_loop().run_in_executor(None, self.load)
        except Exception as exc:
            self.load_error = f"model failed to load: {exc}"
            log.error(self.load_error)
            return
        try:
            engine = self._engine(loaded)
        except ValueError as exc:  # weights on another device than the one the inputs go to
            self.load_error = f"model failed to load: {exc}"
            log.error(self.load_error)
            return
        batcher = Batcher(
            engine,
            share=self.cfg.share,
            max_batch_requests=self.cfg.max_batch_requests,
            max_batch_candidates=self.cfg.max_batch_candidates,
            max_queue=self.cfg.max_queue,
            batch_timeout_s=self.cfg.batch_timeout_s,
            on_batch=self.metrics.on_batch,
        )
        batcher.start()
        if self.lookups is not None:
            self.lookups.bind(loaded.version, self.metrics.registry, loaded)
        self.engine, self.batcher = engine, batcher
        self.metrics.model_load_seconds.set(time.perf_counter() - t0)
        self.metrics.precision_plan(loaded.precision)
        self.metrics.ready.set(1)
        log.info("model %s (%s) loaded in %.2fs", loaded.version, loaded.kind, time.perf_counter() - t0)

    def _engine(self, loaded: LoadedModel) -> Engine:
        device = torch.device(self.cfg.device)
        if self.cfg.emulated_device is not None:
            from .device import EmulatedEngine

            return EmulatedEngine(loaded, device, self.cfg.copy_user_state, emulated=self.cfg.emulated_device)
        return Engine(loaded, device, self.cfg.copy_user_state)


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status, headers=headers)


async def rank(request: web.Request) -> web.Response:
    state = request.app[STATE]
    m = state.metrics
    t0 = time.perf_counter()
    m.in_flight.inc()
    try:
        resp = await _rank(request, state)
    finally:
        m.in_flight.dec()
    m.requests.labels(str(resp.status)).inc()
    if resp.status == 200:
        m.request_seconds.observe(time.perf_counter() - t0)
    return resp


async def _rank(request: web.Request, state: ServerState) -> web.Response:
    engine, batcher = state.engine, state.batcher
    if engine is None or batcher is None:
        return _error(503, state.load_error or "model is still loading; retry shortly", {"Retry-After": "1"})
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        raw = parse_body(body)
        parsed = parse_request(raw, engine.schema, engine.seq_len, state.cfg.max_candidates)
    except RequestError as exc:
        return _error(exc.status, exc.message)
    fetched: dict[str, int] | None = None
    lookup: asyncio.Task[dict[str, int] | None] | None = None
    if state.lookups is not None and state.lookups.feeds_model:  # the model reads the store: look up first
        fetched, parsed.side = await state.lookups.fetch(raw)
    elif state.lookups is not None:
        lookup = asyncio.get_running_loop().create_task(state.lookups.lookup(raw))
    try:
        probs = await batcher.submit(parsed)
    except QueueFull:
        if lookup is not None:
            lookup.cancel()
        return _error(503, f"queue full ({state.cfg.max_queue} requests waiting); retry later", {"Retry-After": "1"})
    except Exception as exc:
        if lookup is not None:
            lookup.cancel()
        log.exception("scoring failed")
        return _error(500, f"scoring failed: {type(exc).__name__}: {exc}")
    if state.publisher is not None:
        state.publisher.publish(raw, probs[:, 0].tolist())
    answer: dict[str, Any] = {
        "scores": [[round(float(p), 7) for p in row] for row in probs],
        "tasks": engine.task_names,
        "model_version": engine.loaded.version,
        "shared": state.cfg.share,
    }
    if lookup is not None:
        answer["precomputed"] = await lookup
    elif state.lookups is not None:
        answer["precomputed"] = fetched
    return web.json_response(answer)


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.engine is not None:
        loaded = state.engine.loaded
        return web.json_response({"ready": True, "model_version": loaded.version, "precision": loaded.precision})
    return web.json_response({"ready": False, "reason": state.load_error or "loading model"}, status=503)


async def healthz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.load_error:
        return web.json_response({"healthy": False, "reason": state.load_error}, status=503)
    return web.json_response({"healthy": True})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.metrics.refresh(state.batcher.depth if state.batcher else 0)
    resp = web.Response(body=generate_latest(state.metrics.registry))
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return resp


def _int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise RequestError(422, f"{name}: expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise RequestError(422, f"{name}: must be in [{lo}, {hi}], got {value}")
    return value


async def example(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.engine is None:
        return _error(503, "model is still loading")
    try:
        n = _int_param(request, "candidates", 64, 1, state.cfg.max_candidates)
        seq = _int_param(request, "seq_len", state.engine.seq_len, 0, 65_536)
        seed = _int_param(request, "seed", 0, 0, 2**31)
    except RequestError as exc:
        return _error(exc.status, exc.message)
    return web.json_response(example_request(state.engine.schema, n, seq, seed))


async def model_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.engine is None:
        return _error(503, "model is still loading")
    loaded = state.engine.loaded
    info: dict[str, Any] = {
        "kind": loaded.kind,
        "version": loaded.version,
        "preset": loaded.config.name,
        "seq_len": loaded.config.seq_len,
        "tasks": state.engine.task_names,
        "shared": state.cfg.share,
        "max_candidates": state.cfg.max_candidates,
        "precision": loaded.precision,
    }
    return web.json_response(info)


def create_app(
    cfg: ServerConfig,
    load: Callable[[], LoadedModel],
    server_metrics: ServerMetrics | None = None,
    publisher: CandidatePublisher | None = None,
    lookups: PrecomputedLookups | None = None,
) -> web.Application:
    """The app; the model loads in the background after startup (``/readyz`` says when)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    state = ServerState(cfg, load, server_metrics or ServerMetrics())
    state.publisher = publisher
    state.lookups = lookups
    app[STATE] = state

    async def on_startup(app: web.Application) -> None:
        state.load_task = asyncio.get_running_loop().create_task(state.load_model())

    async def on_cleanup(app: web.Application) -> None:
        if state.load_task is not None and not state.load_task.done():
            state.load_task.cancel()
        if state.batcher is not None:
            await state.batcher.stop()
        if state.publisher is not None:
            await state.publisher.close()
        if state.lookups is not None:
            state.lookups.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_post("/v1/rank", rank)
    app.router.add_get("/v1/example-request", example)
    app.router.add_get("/v1/model", model_info)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
