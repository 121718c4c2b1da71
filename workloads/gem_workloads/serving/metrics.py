"""Prometheus metrics of one ranking server (its own registry, so tests can run several servers).

``gem_ranking_request_seconds`` is the histogram the autoscaler's SLO check reads
(docs/contracts.md). GPU SM activity is exported only when a GPU and NVML are present: a CPU
server exports no SM metric at all rather than a made-up zero.
"""

from __future__ import annotations

import importlib
import time
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Dense between 10 ms and 1 s, where SLOs of ranking servers lie (spec.slo.p99LatencyMs, 50 ms by
# default; the emulated-device load test uses a few hundred ms), so a p99 near the SLO is resolved.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip


class CandidateRate:
    """Candidates scored per second over a sliding window (also exported as a counter)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.events: deque[tuple[float, int]] = deque()

    def add(self, n: int, now: float | None = None) -> None:
        self.events.append((time.monotonic() if now is None else now, n))

    def rate(self, now: float | None = None) -> float:
        t = time.monotonic() if now is None else now
        while self.events and self.events[0][0] < t - self.window_s:
            self.events.popleft()
        return sum(n for _, n in self.events) / self.window_s


class NvmlSampler:
    """SM activity of the GPU this process uses, from NVML (GPM SM utilisation on Hopper and newer,
    else the NVML utilisation rate, labelled by ``source``). ``None`` when no GPU/NVML is present."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.source = "nvml_utilization"

    @classmethod
    def create(cls, device_index: int = 0) -> NvmlSampler | None:
        try:
            import torch

            if not torch.cuda.is_available():
                return None
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            return cls(nvml, nvml.nvmlDeviceGetHandleByIndex(device_index))
        except Exception:
            return None

    def sample(self) -> float | None:
        try:
            util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            return float(util.gpu) / 100.0
        except Exception:
            return None


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, gpu: NvmlSampler | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "gem_ranking_request_seconds",
            "Latency of POST /v1/rank, from arrival to response (successful requests).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter("gem_ranking_requests", "Ranking requests by HTTP status code.", ["code"], registry=r)
        self.in_flight = Gauge("gem_ranking_in_flight_requests", "Requests being served now.", registry=r)
        self.queue_depth = Gauge("gem_ranking_queue_depth", "Requests waiting in the batcher's queue.", registry=r)
        self.candidates = Counter("gem_ranking_candidates", "Candidates scored.", registry=r)
        self.candidates_rate = Gauge(
            "gem_ranking_candidates_per_second", "Candidates scored per second over the last 10 s.", registry=r
        )
        self.batch_requests = Histogram(
            "gem_ranking_batch_requests",
            "Requests per dynamic batch.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.batch_seconds = Histogram(
            "gem_ranking_batch_seconds", "Model time per dynamic batch.", buckets=LATENCY_BUCKETS, registry=r
        )
        self.ready = Gauge("gem_ranking_model_ready", "1 once the model is loaded and serving.", registry=r)
        self.model_load_seconds = Gauge("gem_ranking_model_load_seconds", "Time taken to load the model.", registry=r)
        self.precision_layers = Gauge(
            "gem_ranking_precision_layers",
            "Model layers the serving precision plan runs in each precision.",
            ["precision"],
            registry=r,
        )
        self.precision_auc_delta = Gauge(
            "gem_ranking_precision_auc_delta", "Holdout AUC of the precision plan minus fp32's.", registry=r
        )
        self.rate = CandidateRate()
        self.gpu = gpu
        self.sm_active: Gauge | None = None
        if gpu is not None:
            self.sm_active = Gauge(
                "gem_ranking_gpu_sm_active", "GPU SM activity (fraction) read from NVML.", ["source"], registry=r
            )

    def precision_plan(self, summary: dict[str, Any] | None) -> None:
        """Export the plan the model runs (``LoadedModel.precision``; ``None``: fp32 as loaded)."""
        for precision, count in ((summary or {}).get("layers") or {}).items():
            self.precision_layers.labels(precision).set(count)
        delta = (summary or {}).get("aucDelta")
        if delta is not None:
            self.precision_auc_delta.set(delta)

    def on_batch(self, requests: int, candidates: int, seconds: float) -> None:
        self.batch_requests.observe(requests)
        self.batch_seconds.observe(seconds)
        self.candidates.inc(candidates)
        self.rate.add(candidates)

    def refresh(self, queue_depth: int) -> None:
        """Update the sampled gauges (called on every scrape)."""
        self.queue_depth.set(queue_depth)
        self.candidates_rate.set(self.rate.rate())
        if self.gpu is not None and self.sm_active is not None:
            value = self.gpu.sample()
            if value is not None:
                self.sm_active.labels(self.gpu.source).set(value)
