"""Simulated dcgm-exporter and ranking-server queue: per-pod signals driven by a load curve.

Each tick it reads the Ready pods of every registered pool from the embedded cluster, spreads the
pool's load over them and pushes `DCGM_FI_PROF_SM_ACTIVE`-like values (through the service
model's SM-vs-utilisation curve) into a SimulatedSource the operator's autoscaler reads.

Load beyond the Ready capacity queues (the replay's fluid model, `service_model.Pool`). When a
`queue_source` is given, each tick also pushes the queued seconds of work per Ready pod, what the
default `metrics.queue.query` reads from a real server (queue gauge over completion rate): SM
active stops near 0.95 when pods are saturated, the queue says by how much demand exceeds them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gem_operator.autoscaling.sources import SimulatedSource
from gem_operator.replay.service_model import ServiceModel, fluid_step, interpolate
from gem_testbed.cluster import EmbeddedCluster

LoadCurve = Callable[[float], float]  # seconds since start -> cost units per second


@dataclass
class Pool:
    namespace: str
    labels: Mapping[str, str]
    load: LoadCurve
    queued: float = 0.0  # cost units waiting (fluid model)
    last_tick: float | None = None  # elapsed seconds at the previous tick


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
        queue_source: SimulatedSource | None = None,
    ) -> None:
        self.cluster = cluster
        self.source = source or SimulatedSource()
        self.queue_source = queue_source
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

    def tick(self, elapsed: float | None = None) -> None:
        """Publish one round of samples (tests call it directly, with `elapsed` seconds since start)."""
        now = time.time()
        elapsed = self.elapsed() if elapsed is None else elapsed
        throughput = self.model.throughput_per_replica
        for pool in self._pools:
            pods = [p for p in self.cluster.list("v1", "Pod", pool.namespace, pool.labels) if _ready(p)]
            load = max(pool.load(elapsed), 0.0)
            dt = 0.0 if pool.last_tick is None else max(0.0, elapsed - pool.last_tick)
            pool.last_tick = elapsed
            capacity = len(pods) * throughput
            pool.queued, utilisation = fluid_step(pool.queued, load, capacity, dt)
            if not pods:
                continue
            sm = interpolate(self.model.sm_active, utilisation)
            queued_seconds = pool.queued / capacity
            for pod in pods:
                name = pod["metadata"]["name"]
                self.source.push(pool.namespace, name, sm, now)
                if self.queue_source is not None:
                    self.queue_source.push(pool.namespace, name, queued_seconds, now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
