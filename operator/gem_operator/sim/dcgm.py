"""Simulated dcgm-exporter: per-pod SM active for pool pods, driven by a load curve.

Each tick it reads the Ready pods of every registered pool from the embedded cluster, spreads the
pool's load over them and pushes `DCGM_FI_PROF_SM_ACTIVE`-like values (through the service
model's SM-vs-utilisation curve) into a SimulatedSource the operator's autoscaler reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gem_operator.autoscaling.service_model import ServiceModel, interpolate
from gem_operator.autoscaling.sources import SimulatedSource
from gem_operator.sim.cluster import EmbeddedCluster

LoadCurve = Callable[[float], float]  # seconds since start -> cost units per second


@dataclass(frozen=True)
class Pool:
    namespace: str
    labels: Mapping[str, str]
    load: LoadCurve


def _ready(pod: Mapping[str, object]) -> bool:
    status = pod.get("status") or {}
    assert isinstance(status, Mapping)
    conds = status.get("conditions") or []
    assert isinstance(conds, list)
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conds
    )


class SmActiveSimulator:
    """Background thread publishing per-pod SM active for registered pools."""

    def __init__(
        self,
        cluster: EmbeddedCluster,
        source: SimulatedSource | None = None,
        model: ServiceModel | None = None,
        interval: float = 0.5,
    ) -> None:
        self.cluster = cluster
        self.source = source or SimulatedSource()
        self.model = model or ServiceModel()
        self.interval = interval
        self._pools: list[Pool] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-dcgm", daemon=True)
        self._started = 0.0

    def add_pool(self, namespace: str, labels: Mapping[str, str], load: LoadCurve) -> None:
        self._pools.append(Pool(namespace, dict(labels), load))

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def tick(self) -> None:
        """Publish one round of samples (also callable directly from tests)."""
        now = time.time()
        for pool in self._pools:
            pods = [p for p in self.cluster.list("v1", "Pod", pool.namespace, pool.labels) if _ready(p)]
            if not pods:
                continue
            utilisation = pool.load(self.elapsed()) / (len(pods) * self.model.throughput_per_replica)
            sm = interpolate(self.model.sm_active, min(max(utilisation, 0.0), 1.0))
            for pod in pods:
                self.source.push(pool.namespace, pod["metadata"]["name"], sm, now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
