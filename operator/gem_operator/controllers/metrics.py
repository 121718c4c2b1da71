"""The operator's own Prometheus metrics (prometheus-client)."""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter("gem_operator_reconcile_total", "Reconcile passes by kind and result.", ["kind", "result"])
RECONCILE_SECONDS = Histogram(
    "gem_operator_reconcile_seconds",
    "Time of one reconcile pass.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHILDREN = Counter(
    "gem_operator_children_applied_total",
    "Children created, patched or replaced.",
    ["kind", "child_kind", "action"],
)
SCALING_DECISIONS = Counter(
    "gem_operator_scaling_decisions_total",
    "Replica changes made by the built-in autoscaler.",
    ["kind", "direction", "reason"],
)
SM_ACTIVE = Gauge(
    "gem_operator_pool_sm_active", "Last SM-active reading the autoscaler used.", ["kind", "namespace", "name"]
)
EFFECTIVE_TARGET = Gauge(
    "gem_operator_pool_effective_target_sm_active",
    "SM target the autoscaler scales on (targetSmActive after the SLO feedback).",
    ["kind", "namespace", "name"],
)
MODEL_CACHE_FALLBACK_PODS = Gauge(
    "gem_operator_model_cache_fallback_pods",
    "Pods whose model loader could not use the node cache and pulled directly (termination message).",
    ["kind", "namespace", "name"],
)
INVALID_SPECS = Counter("gem_operator_invalid_spec_total", "Resources rejected as InvalidSpec.", ["kind"])

_started: set[int] = set()
_lock = threading.Lock()


def serve_metrics(port: int, addr: str = "0.0.0.0") -> bool:
    """Start the /metrics endpoint once per process and port; False when it already runs."""
    with _lock:
        if port in _started:
            return False
        start_http_server(port, addr=addr)
        _started.add(port)
        return True
