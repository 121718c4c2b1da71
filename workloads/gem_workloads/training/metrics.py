"""Training metrics: AUC, FLOP counting, peak FLOP/s for MFU, and the Prometheus exporter."""

from __future__ import annotations

import logging
import time
from collections import deque

import numpy as np
import torch
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

log = logging.getLogger(__name__)

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s per device.
GPU_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "B200": 2250e12, "A100": 312e12, "L40S": 362e12}


def auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """ROC AUC by ranks (ties averaged); ``None`` when only one class is present."""
    labels = labels.astype(bool)
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    n = len(scores)
    # average ranks over ties
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [n]])
    for s, e in zip(starts, ends, strict=True):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


class AUCWindow:
    """Per-task AUC over the last ``size`` labelled predictions."""

    def __init__(self, num_tasks: int, size: int = 20_000) -> None:
        self.buffers: list[deque[tuple[np.ndarray, np.ndarray]]] = [deque() for _ in range(num_tasks)]
        self.counts = [0] * num_tasks
        self.size = size

    def add(self, probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
        p, y, m = (t.detach().float().cpu().numpy() for t in (probs, labels, mask))
        for t, buf in enumerate(self.buffers):
            sel = m[:, t] > 0
            if sel.any():
                buf.append((p[sel, t], y[sel, t]))
                self.counts[t] += int(sel.sum())
                while self.counts[t] - len(buf[0][0]) >= self.size:
                    self.counts[t] -= len(buf.popleft()[0])

    def value(self) -> float | None:
        values = []
        for buf in self.buffers:
            if buf:
                v = auc(np.concatenate([b[0] for b in buf]), np.concatenate([b[1] for b in buf]))
                if v is not None:
                    values.append(v)
        return float(np.mean(values)) if values else None


def peak_flops(device: torch.device, dtype: torch.dtype) -> float:
    """Peak FLOP/s of one device: a table for GPUs, a short matmul measurement on CPU."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in GPU_PEAK_BF16.items():
            if key in name:
                return value if dtype in (torch.bfloat16, torch.float16) else value / 2
        return 500e12
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    torch.mm(a, b)
    start = time.perf_counter()
    reps = 8
    for _ in range(reps):
        torch.mm(a, b)
    return reps * 2 * 512**3 / max(time.perf_counter() - start, 1e-9)


class PrometheusMetrics:
    """``gem_train_*`` series on ``/metrics`` (one exporter per pod: local rank 0)."""

    def __init__(self, port: int, labels: dict[str, str]) -> None:
        self.registry = CollectorRegistry()
        names = sorted(labels)
        self.labels = labels
        self.step = Gauge("gem_train_step", "Last completed training step", names, registry=self.registry)
        self.loss = Gauge("gem_train_loss", "Training loss (mean over ranks)", names, registry=self.registry)
        self.eps = Gauge("gem_train_examples_per_second", "Global examples per second", names, registry=self.registry)
        self.auc = Gauge("gem_train_auc", "Windowed training AUC (mean over tasks)", names, registry=self.registry)
        self.flops = Gauge(
            "gem_train_flops_per_second", "Achieved model FLOP/s (all ranks)", names, registry=self.registry
        )
        self.mfu = Gauge("gem_train_mfu", "Model FLOPs utilisation estimate", names, registry=self.registry)
        self.ckpt = Gauge("gem_train_checkpoint_step", "Step of the last checkpoint", names, registry=self.registry)
        self.examples = Counter("gem_train_examples", "Examples trained on", names, registry=self.registry)
        self.port = 0
        if port > 0:
            try:
                server, _ = start_http_server(port, registry=self.registry)
                self.port = int(server.server_port)
            except OSError as exc:
                log.warning("Prometheus exporter not started on port %d: %s", port, exc)

    def update(self, record: dict[str, float | int | None]) -> None:
        gauges = {
            "step": self.step,
            "loss": self.loss,
            "examples_per_s": self.eps,
            "auc": self.auc,
            "flops_per_s": self.flops,
            "mfu": self.mfu,
        }
        for key, gauge in gauges.items():
            value = record.get(key)
            if value is not None:
                gauge.labels(**self.labels).set(float(value))

    def add_examples(self, n: int) -> None:
        self.examples.labels(**self.labels).inc(n)

    def checkpointed(self, step: int) -> None:
        self.ckpt.labels(**self.labels).set(step)
