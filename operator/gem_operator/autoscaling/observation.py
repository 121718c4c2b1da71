"""What the policy is told at one sync: pods, per-pod metric readings, pool-level latency. Pure values.

Sources (`sources.py`, the replay, the embedded cluster) build these; `policy.desired_replicas`
reads them. A reading that could not be taken carries `error` and no samples: unavailable, never
zero, so the policy holds instead of scaling down.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PodSample:
    """One per-pod metric value and the time it was measured (seconds, same clock as `now`)."""

    value: float
    timestamp: float


@dataclass(frozen=True)
class MetricReading:
    """What a metric source returned: per-pod samples, or why there are none.

    `error` set means the source failed (timeout, HTTP error, bad response): the policy holds.
    """

    samples: Mapping[str, PodSample] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def unavailable(cls, error: str) -> MetricReading:
        return cls(samples={}, error=error)


@dataclass(frozen=True)
class LatencyReading:
    """The pool's p99 latency (ms) and when it was measured, or why there is none.

    One value per pool (the default query aggregates the histogram over the service's pods).
    `error` set, or `p99_ms` None, means unavailable: the SLO feedback then holds, and an
    unavailable latency never counts as a low one.
    """

    p99_ms: float | None = None
    timestamp: float | None = None
    error: str | None = None

    @classmethod
    def unavailable(cls, error: str) -> LatencyReading:
        return cls(error=error)


@dataclass(frozen=True)
class PodState:
    """A pod of the pool as the controller sees it."""

    name: str
    ready: bool
    model_loaded: bool = True
    scheduled: bool = True

    @property
    def serving(self) -> bool:
        return self.ready and self.model_loaded


@dataclass(frozen=True)
class PrecomputeSignals:
    """Queue and priority signals of a SolarisPrecompute pool. None means unknown."""

    backlog: int | None = None
    oldest_item_age_seconds: float | None = None
    ranker_over_slo: bool = False
    ranker_message: str = ""
    backlog_error: str = ""  # why the backlog is unknown, when it is (said with the scale-down it blocks)


@dataclass(frozen=True)
class Observation:
    """Everything the policy needs to know about the pool at one sync."""

    current_replicas: int
    pods: Sequence[PodState]
    metrics: MetricReading
    gpus_per_replica: int = 1
    free_gpus: int | None = None
    precompute: PrecomputeSignals | None = None
    queue: MetricReading | None = None  # seconds of queued work per pod (`metrics.queue`); None: not read
    latency: LatencyReading | None = None  # the pool's p99 (`metrics.latency`); None: not read (SM path only)
    panic_metrics: MetricReading | None = None  # SM active over `panic.windowSeconds`; None: use `metrics`


# A pod condition (e.g. set through a readiness gate) saying the model is on local disk and loaded.
MODEL_LOADED_CONDITION = "gem.dev/ModelLoaded"


def pod_states(pods: Iterable[Mapping[str, Any]]) -> list[PodState]:
    """PodStates from Pod objects (dicts as the API returns them). Pure.

    Terminating and finished pods are left out. `model_loaded` is the `gem.dev/ModelLoaded`
    condition when the pod has one; otherwise every init container (the model loader) must have
    exited 0.
    """
    out: list[PodState] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, Mapping)}
        ready = conds.get("Ready") == "True"
        if MODEL_LOADED_CONDITION in conds:
            loaded = conds[MODEL_LOADED_CONDITION] == "True"
        else:
            inits = status.get("initContainerStatuses") or []
            loaded = all(((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for s in inits) and (
                bool(inits) or ready
            )
        scheduled = bool((pod.get("spec") or {}).get("nodeName")) or conds.get("PodScheduled") == "True"
        out.append(PodState(name=str(meta.get("name", "")), ready=ready, model_loaded=loaded, scheduled=scheduled))
    return out
