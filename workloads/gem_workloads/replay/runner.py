"""Open-loop HTTP load from a trace: requests leave at the trace's times (divided by ``speedup``),
whether or not earlier ones have answered, so a slow server shows as latency, not as a lower rate.

Request cost maps to candidate count: a request of cost ``c`` (mean 1) carries
``round(candidates * c)`` candidates, clamped to ``[1, max_candidates]``. Bounded: ``duration``
seconds of (sped-up) trace, at most ``max_requests`` requests, at most ``max_in_flight`` open at
once (beyond that a request is counted as ``skipped`` and not sent), and a per-request timeout.

Output: one JSON line per interval (by send time) once all its requests have finished, then a
summary line. ``trace_rate`` is what the trace asked for; ``achieved_rate`` the successful
responses per second (per interval: of the requests sent in it; in the summary: over the trace
window, or until the last response if that came later); ``send_late_p99_ms`` how late the
replayer itself sent (an overloaded client shows here, not as a lower rate).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
import numpy as np

from .trace import Arrivals


@dataclass
class ReplayConfig:
    url: str
    speedup: float = 1.0
    duration: float | None = None  # seconds of replay (after speedup)
    max_requests: int = 100_000
    max_in_flight: int = 512
    timeout_s: float = 10.0
    interval_s: float = 1.0
    candidates: int = 64  # candidates of a request of mean cost
    max_candidates: int = 2048
    seq_len: int | None = None
    wait_ready_s: float = 60.0
    records_path: str | None = None  # JSONL, one line per request: send time, latency, status


@dataclass
class _Interval:
    start: float
    scheduled: int = 0
    sent: int = 0
    skipped: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    outstanding: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    candidates: int = 0


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    a = np.asarray(values)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def endpoints(url: str) -> tuple[str, str]:
    """(base URL, rank URL) from either form."""
    u = url.rstrip("/")
    if u.endswith("/v1/rank"):
        return u[: -len("/v1/rank")], u
    return u, u + "/v1/rank"


class BodyCache:
    """Request bodies with ``n`` candidates, cut from one template (encoded once per size)."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.template = template
        self.cache: dict[int, bytes] = {}

    def body(self, n: int) -> bytes:
        if n not in self.cache:
            cands = self.template["candidates"]
            picked = [cands[i % len(cands)] for i in range(n)]
            self.cache[n] = json.dumps({**self.template, "candidates": picked}, separators=(",", ":")).encode()
        return self.cache[n]


async def _get_json(session: aiohttp.ClientSession, url: str, params: dict[str, str], deadline: float) -> Any:
    """GET with retries while the server is starting (connection refused, 503); other errors fail at once."""
    while True:
        try:
            async with session.get(url, params=params) as r:
                if r.status == 200:
                    return await r.json()
                reason = f"HTTP {r.status}: {(await r.text())[:200]}"
                if r.status != 503:
                    raise RuntimeError(f"{url}: {reason}")
        except aiohttp.ClientError as exc:
            reason = str(exc)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer in time: {reason}")
        await asyncio.sleep(0.5)


async def fetch_template(session: aiohttp.ClientSession, cfg: ReplayConfig) -> dict[str, Any]:
    """A body from the server's ``/v1/example-request`` with as many candidates as a request may carry."""
    base, _ = endpoints(cfg.url)
    deadline = time.monotonic() + cfg.wait_ready_s
    info = await _get_json(session, f"{base}/v1/model", {}, deadline)
    n = min(cfg.max_candidates, int(info.get("max_candidates", cfg.max_candidates)))
    params = {"candidates": str(n)}
    if cfg.seq_len is not None:
        params["seq_len"] = str(cfg.seq_len)
    body: dict[str, Any] = await _get_json(session, f"{base}/v1/example-request", params, deadline)
    return body


async def replay(
    arrivals: Arrivals,
    cfg: ReplayConfig,
    out: TextIO | None = None,
    template: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run the replay; writes interval lines and the summary to ``out`` and returns the summary."""
    out = sys.stdout if out is None else out
    times = np.asarray(arrivals.times) / cfg.speedup
    keep = np.arange(len(times))
    if cfg.duration is not None:
        keep = keep[times < cfg.duration]
    keep = keep[: cfg.max_requests]
    span = float(cfg.duration) if cfg.duration is not None else (float(times[keep[-1]]) if len(keep) else 0.0)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    connector = aiohttp.TCPConnector(limit=cfg.max_in_flight, force_close=False)
    _, rank_url = endpoints(cfg.url)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        bodies = BodyCache(template if template is not None else await fetch_template(session, cfg))
        n_intervals = max(1, int(np.ceil(max(span, 1e-9) / cfg.interval_s)))
        intervals = [_Interval(i * cfg.interval_s) for i in range(n_intervals)]
        for i in keep:
            intervals[min(int(times[i] // cfg.interval_s), n_intervals - 1)].scheduled += 1
        in_flight = 0
        all_lat: list[float] = []
        late_ms: list[float] = []
        last_ok = 0.0
        tasks: set[asyncio.Task[None]] = set()
        emitted = 0
        records: list[tuple[float, float | None, str, int]] = []  # (sent s, ms, status, candidates)

        async def send(iv: _Interval, body: bytes, n: int) -> None:
            nonlocal in_flight, last_ok
            t0 = clock()
            try:
                async with session.post(rank_url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    status = r.status
            except TimeoutError:
                status = -1
            except aiohttp.ClientError:
                status = -2
            ms = (clock() - t0) * 1000.0
            records.append((t0 - start, ms, {-1: "timeout", -2: "connection"}.get(status, str(status)), n))
            in_flight -= 1
            iv.outstanding -= 1
            if status == 200:
                last_ok = max(last_ok, clock() - start)
                iv.ok += 1
                iv.latencies_ms.append(ms)
                iv.candidates += n
                all_lat.append(ms)
            else:
                key = {-1: "timeout", -2: "connection"}.get(status, str(status))
                iv.errors[key] = iv.errors.get(key, 0) + 1

        def emit_ready(now: float, final: bool = False) -> None:
            nonlocal emitted
            while emitted < n_intervals:
                iv = intervals[emitted]
                closed = now >= iv.start + cfg.interval_s and iv.sent + iv.skipped >= iv.scheduled
                if not (final or (closed and iv.outstanding == 0)):
                    return
                out.write(json.dumps(_record(iv, cfg.interval_s)) + "\n")
                out.flush()
                emitted += 1

        start = clock()
        for i in keep:
            delay = start + float(times[i]) - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            late_ms.append(max(0.0, (clock() - start - float(times[i])) * 1000.0))
            iv = intervals[min(int(times[i] // cfg.interval_s), n_intervals - 1)]
            if in_flight >= cfg.max_in_flight:
                iv.skipped += 1
                records.append((clock() - start, None, "skipped", 0))
                continue
            n = int(min(max(round(cfg.candidates * arrivals.costs[i]), 1), cfg.max_candidates))
            in_flight += 1
            iv.sent += 1
            iv.outstanding += 1
            task = asyncio.get_running_loop().create_task(send(iv, bodies.body(n), n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            emit_ready(clock() - start)
        while clock() - start < span:
            await asyncio.sleep(min(0.05, span - (clock() - start)))
            emit_ready(clock() - start)
        if tasks:
            await asyncio.wait(set(tasks), timeout=cfg.timeout_s + 1)
        emit_ready(clock() - start, final=True)
        elapsed = clock() - start
    if cfg.records_path is not None:
        _write_records(cfg.records_path, records)
    scheduled = len(keep)
    ok = sum(iv.ok for iv in intervals)
    errors: dict[str, int] = {}
    for iv in intervals:
        for k, v in iv.errors.items():
            errors[k] = errors.get(k, 0) + v
    summary = {
        "summary": True,
        "span_s": round(span, 3),
        "elapsed_s": round(elapsed, 3),
        "scheduled": scheduled,
        "sent": sum(iv.sent for iv in intervals),
        "skipped": sum(iv.skipped for iv in intervals),
        "ok": ok,
        "errors": errors,
        "trace_rate": round(scheduled / span, 3) if span > 0 else None,
        # Successful responses per second, over the trace window or until the last one came back.
        "achieved_rate": round(ok / max(span, last_ok), 3) if span > 0 else None,
        "send_late_p99_ms": round(float(np.percentile(late_ms, 99)), 3) if late_ms else None,
        **_percentiles(all_lat),
    }
    out.write(json.dumps(summary) + "\n")
    out.flush()
    return summary


def _write_records(path: str, records: list[tuple[float, float | None, str, int]]) -> None:
    """One JSON line per request, by send time: ``{"t", "ms", "status", "candidates"}``; status is the
    HTTP code, or ``timeout``/``connection``/``skipped`` (``ms`` null for skipped ones)."""
    with open(path, "w") as f:
        for t, ms, status, n in sorted(records, key=lambda r: r[0]):
            row = {"t": round(t, 4), "ms": None if ms is None else round(ms, 3), "status": status, "candidates": n}
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def _record(iv: _Interval, interval_s: float) -> dict[str, Any]:
    return {
        "t": round(iv.start, 3),
        "interval_s": interval_s,
        "trace_rate": round(iv.scheduled / interval_s, 3),
        "sent": iv.sent,
        "skipped": iv.skipped,
        "ok": iv.ok,
        "errors": iv.errors,
        "achieved_rate": round(iv.ok / interval_s, 3),
        "candidates_per_s": round(iv.candidates / interval_s, 1),
        **_percentiles(iv.latencies_ms),
    }
