"""The precompute pod: a Ray driver running ``--workers`` consumer actors, and the autoscaler's metrics.

Each actor owns a :class:`~.worker.PrecomputeWorker` (its own consumer name in the group and its
own copy of the model) and runs steps in slices of ``slice_seconds``; the driver collects their
statistics, replaces an actor that died (its pending entries are claimed by the others after
``claim_idle_ms``), and on SIGTERM stops handing out slices, lets the running ones finish (each
step acks what it stored), then removes its consumers from the group. So pods scale in and out
without losing or double-writing work.

Metrics (``--metrics-port``): ``gem_precompute_backlog`` (candidate sets not yet acknowledged:
undelivered + pending) and ``gem_precompute_oldest_item_age_seconds`` (age of the oldest of them),
read from Redis (``XINFO GROUPS``, ``XPENDING``), plus work counters.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import asdict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .worker import StepStats, WorkerConfig, _decode, entry_age_seconds

log = logging.getLogger("gem_workloads.precompute")


def backlog(client: Any, stream: str, group: str, now: float | None = None) -> tuple[int, float]:
    """(candidate sets queued or in progress, age in seconds of the oldest of them) for ``group``."""
    now = time.time() if now is None else now
    try:
        groups = client.xinfo_groups(stream)
    except Exception as exc:
        if "no such key" in str(exc).lower():
            return 0, 0.0
        raise
    info = next((g for g in groups if _decode(g["name"]) == group), None)
    if info is None:
        return int(client.xlen(stream)), _first_age(client, stream, "-", now)
    pending = int(info["pending"])
    last = _decode(info["last-delivered-id"])
    lag = info.get("lag")
    undelivered = client.xrange(stream, min=f"({last}", max="+", count=1)
    if lag is None:  # Redis cannot tell after deletions: count what is after last-delivered-id
        lag = len(client.xrange(stream, min=f"({last}", max="+", count=100_000))
    ages = []
    if pending:
        summary = client.xpending(stream, group)
        ages.append(entry_age_seconds(_decode(summary["min"]), now))
    if undelivered:
        ages.append(entry_age_seconds(_decode(undelivered[0][0]), now))
    return pending + int(lag), max(ages) if ages else 0.0


def _first_age(client: Any, stream: str, start: str, now: float) -> float:
    first = client.xrange(stream, min=start, max="+", count=1)
    return entry_age_seconds(_decode(first[0][0]), now) if first else 0.0


class PrecomputeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.backlog = Gauge("gem_precompute_backlog", "Candidate sets queued or in progress (not acked).", registry=r)
        self.oldest = Gauge(
            "gem_precompute_oldest_item_age_seconds", "Age of the oldest candidate set not yet acked.", registry=r
        )
        self.entries = Counter(
            "gem_precompute_entries", "Candidate sets acknowledged, by outcome.", ["outcome"], registry=r
        )
        self.pairs = Counter("gem_precompute_pairs_written", "User-ad embeddings written.", registry=r)
        self.fresh = Counter("gem_precompute_pairs_fresh", "Predicted pairs skipped: still fresh.", registry=r)
        self.workers = Gauge("gem_precompute_workers", "Worker actors running in this pod.", registry=r)
        self.restarts = Counter("gem_precompute_worker_restarts", "Worker actors replaced after dying.", registry=r)
        self.errors = Counter("gem_precompute_step_errors", "Worker steps that failed and will be retried.", registry=r)
        self.compute = Histogram(
            "gem_precompute_compute_seconds",
            "Embedding compute time per worker slice.",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )

    def record(self, s: StepStats) -> None:
        self.entries.labels("stored").inc(s.entries - s.duplicates - s.dead)
        self.entries.labels("duplicate").inc(s.duplicates)
        self.entries.labels("dead_letter").inc(s.dead)
        self.pairs.inc(s.pairs_written)
        self.fresh.inc(s.pairs_fresh)
        self.errors.inc(s.errors)
        if s.compute_seconds:
            self.compute.observe(s.compute_seconds)

    def refresh(self, client: Any, stream: str, group: str) -> bool:
        """Read the backlog into the gauges; False when the source cannot be read.

        A source that does not answer leaves the gauges at their last reading, so the autoscaler
        never sees a backlog of zero it did not measure; the loop goes on (the workers' own reads
        fail and retry the same way until the source answers again).
        """
        import redis

        try:
            n, age = backlog(client, stream, group)
        except redis.exceptions.RedisError as exc:
            log.warning("cannot read the backlog of %s: %s", stream, exc)
            return False
        self.backlog.set(n)
        self.oldest.set(age)
        return True


class WorkerActor:
    """What each Ray actor runs (wrapped with ``ray.remote`` by :func:`run_pool`)."""

    def __init__(
        self,
        cfg: dict[str, Any],
        source_url: str,
        store_url: str,
        model_dir: str | None,
        preset: str | None,
        device: str | None = None,
        precision: str = "fp32",
    ) -> None:
        import redis
        import torch

        from ..models.devices import resolve_device
        from ..scoring.engine import Engine, load_model
        from .worker import PrecomputeWorker

        torch.set_num_threads(1)
        # --device, else $GEM_DEVICE, else the GPU Ray gave this actor (CUDA_VISIBLE_DEVICES), else the CPU
        where = resolve_device(device)
        loaded = load_model(model_dir, preset, where)
        if precision != "fp32":
            from ..scoring.precision_plan import resolve_precision

            resolve_precision(loaded, precision, where, model_dir)
        engine = Engine(loaded, where)
        source = redis.Redis.from_url(source_url)
        store = source if store_url == source_url else redis.Redis.from_url(store_url)
        self.worker = PrecomputeWorker(WorkerConfig(**cfg), source, engine, store)

    def run(self, seconds: float, block_ms: int = 500) -> dict[str, Any]:
        """Steps for about ``seconds``; returns the summed :class:`StepStats` as a dict."""
        total = StepStats()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                total.add(self.worker.step(block_ms=block_ms))
            except Exception:
                # Nothing was acked: the entries stay pending and are claimed again after claim_idle_ms
                # (and dead-lettered after max_deliveries).
                log.exception("precompute step failed; retrying")
                total.errors += 1
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        return asdict(total)

    def leave(self) -> bool:
        """Remove this consumer from the group if it holds no pending entries (clean scale-in)."""
        c = self.worker.cfg
        client = self.worker.client
        pending = client.xpending_range(c.stream, c.group, min="-", max="+", count=1, consumername=c.consumer)
        if pending:
            return False
        self.worker.client.xgroup_delconsumer(c.stream, c.group, c.consumer)
        return True


def run_pool(
    cfg: WorkerConfig,
    source_url: str,
    store_url: str,
    model_dir: str | None,
    preset: str | None,
    workers: int,
    metrics: PrecomputeMetrics,
    stop: threading.Event,
    slice_seconds: float = 2.0,
    max_seconds: float | None = None,
    gpus_per_worker: float = 0.0,
    device: str | None = None,
    precision: str = "fp32",
) -> StepStats:
    """Run ``workers`` actors until ``stop`` is set (or ``max_seconds``); returns the totals."""
    import ray
    import redis

    client = redis.Redis.from_url(source_url)
    remote_cls = ray.remote(num_cpus=1, num_gpus=gpus_per_worker, max_restarts=0)(WorkerActor)
    base = asdict(cfg)
    generation = 0

    def start(i: int) -> Any:
        nonlocal generation
        generation += 1
        consumer = f"{cfg.consumer}-{i}-g{generation}"
        return remote_cls.remote(
            {**base, "consumer": consumer}, source_url, store_url, model_dir, preset, device, precision
        )

    actors = [start(i) for i in range(workers)]
    running: dict[Any, int] = {actors[i].run.remote(slice_seconds): i for i in range(workers)}
    metrics.workers.set(workers)
    total = StepStats()
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    while running:
        done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
        metrics.refresh(client, cfg.stream, cfg.group)
        for ref in done:
            i = running.pop(ref)
            try:
                stats = StepStats(**ray.get(ref))
                metrics.record(stats)
                total.add(stats)
            except ray.exceptions.RayActorError as exc:
                log.warning("worker %d died (%s); starting a replacement", i, type(exc).__name__)
                metrics.restarts.inc()
                actors[i] = start(i)
            except ray.exceptions.RayError as exc:
                log.warning("worker %d slice failed: %s", i, exc)
            finished = stop.is_set() or (deadline is not None and time.monotonic() >= deadline)
            if not finished:
                running[actors[i].run.remote(slice_seconds)] = i
    for a in actors:
        try:
            ray.get(a.leave.remote(), timeout=30)
        except Exception as exc:
            log.warning("a worker could not leave the group cleanly: %s", exc)
    metrics.workers.set(0)
    metrics.refresh(client, cfg.stream, cfg.group)
    return total


def install_sigterm(stop: threading.Event) -> None:
    def handler(signum: int, frame: object) -> None:
        log.info("signal %d: finishing the running batches, then leaving the group", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
