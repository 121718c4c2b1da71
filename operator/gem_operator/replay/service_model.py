"""A documented model of a GPU ranking replica, for replaying traces on simulated time. Pure.

Units: load is in *cost units per second*; one cost unit is one average request (the replay
normalises request weights to mean 1). Utilisation of the pool is `load / (ready * throughput)`.

Defaults and why (override any of them with `--profile FILE.json`, same keys):

- `throughput_per_replica` = 200 cost units/s: one H100-class replica serving a GEM-style
  ranker that encodes the user sequence once per request and scores ~1k candidates against it
  (computation shared across candidates), with dynamic batching. Order of magnitude only:
  replace with a measured profile of the real ranking server.
- `latency_p99_ms` = p99 vs utilisation, piecewise linear: flat around 18 ms while batches
  fill (0-50 %), a knee near 80 % (40 ms), then the queueing blow-up of a busy server
  (90 % -> 75 ms, 100 % -> 250 ms). A batching GPU server behaves like a many-slot queue, so it
  is flatter than M/M/1 at low load and as steep near saturation.
- Overload (`load > capacity`): the excess queues (fluid model); every queued cost unit adds
  `queue / capacity` seconds of waiting on top of the 100 % latency, and the queue drains once
  capacity catches up, so a late scale-up shows as several bad minutes, not one.
- `sm_active` = SM active vs utilisation, piecewise linear 0 % -> 0.03, 100 % -> 0.95:
  dcgm's SM active rises about linearly with work once kernels run back to back and never
  quite reaches 1 (launch gaps, host work between batches).
- `pod_start_seconds` = 30 (scheduling, image already on the node, container start, CUDA
  context) and `model_load_seconds` = 90 (about 150 GB at ~1.7 GB/s from the node or peer
  cache, the loader's target path in design §6): a new replica serves 120 s after it is
  created, and holds its GPUs from creation, so slow starts cost GPU-hours too.
- `cpu_utilisation` (for an HPA-on-CPU baseline): 0.05 + 0.25 * utilisation. CPU barely moves
  with GPU work, which is why CPU is a poor scaling signal for this server.
- `timeout_ms` = 10 000: latency reported when nothing can serve (no Ready replica); > 0, or an
  outage would read as within the SLO.
- `service_seconds` = 0 (off): when > 0, each replica serves one request at a time in this fixed
  time behind a round-robin front (the load test's emulated replicas), and the pool is simulated
  request by request (`round_robin.RoundRobinQueues`) instead of as one fluid queue with the
  `latency_p99_ms` curve: there a request's wait depends on its own replica's recent arrivals,
  which no per-second utilisation says.
"""

from __future__ import annotations

import itertools
import json
import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gem_operator.replay.round_robin import RoundRobinQueues

Curve = tuple[tuple[float, float], ...]


def interpolate(curve: Curve, x: float) -> float:
    """Piecewise-linear interpolation, flat beyond the ends."""
    xs = [p[0] for p in curve]
    if x <= xs[0]:
        return curve[0][1]
    if x >= xs[-1]:
        return curve[-1][1]
    i = bisect_right(xs, x)
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class ProfileError(ValueError):
    """A service profile file is unusable (the message names the file and the key)."""


@dataclass(frozen=True)
class ServiceModel:
    """Per-replica behaviour of the ranking server. See the module docstring for the numbers."""

    throughput_per_replica: float = 200.0
    latency_p99_ms: Curve = ((0.0, 18.0), (0.5, 20.0), (0.7, 28.0), (0.8, 40.0), (0.9, 75.0), (1.0, 250.0))
    sm_active: Curve = ((0.0, 0.03), (1.0, 0.95))
    cpu_utilisation: Curve = ((0.0, 0.05), (1.0, 0.30))
    pod_start_seconds: float = 30.0
    model_load_seconds: float = 90.0
    timeout_ms: float = 10_000.0
    service_seconds: float = 0.0
    source: str = field(default="defaults", compare=False)

    @property
    def startup_seconds(self) -> float:
        return self.pod_start_seconds + self.model_load_seconds

    def utilisation_for_sm(self, sm: float) -> float:
        """Inverse of the SM curve (it is increasing): the utilisation that shows `sm`."""
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            if interpolate(self.sm_active, mid) < sm:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def p99_ms(self, utilisation: float, queue_wait_s: float = 0.0) -> float:
        return interpolate(self.latency_p99_ms, min(utilisation, 1.0)) + 1000.0 * queue_wait_s

    @classmethod
    def load(cls, path: str | Path) -> ServiceModel:
        """Defaults replaced by the keys of a JSON profile (curves as [[x, y], ...], x ascending)."""
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except OSError as exc:
            raise ProfileError(f"{p}: cannot read profile: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{p}: line {exc.lineno} column {exc.colno}: not JSON: {exc.msg}") from exc
        except RecursionError:  # json's decoder recurses per level
            raise ProfileError(f"{p}: not JSON: nested too deeply for a profile") from None
        return cls.from_mapping(raw, where=str(p))

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "profile") -> ServiceModel:
        if not isinstance(raw, Mapping):
            raise ProfileError(f"{where}: a profile is a JSON object of the keys {sorted(_KEYS)}")
        unknown = sorted(set(raw) - set(_KEYS))
        if unknown:
            raise ProfileError(f"{where}: unknown keys {unknown}; known keys are {sorted(_KEYS)}")
        model = cls(source=where)
        updates: dict[str, Any] = {}
        for key, value in raw.items():
            if key in _CURVES:
                updates[key] = _curve(value, f"{where}: {key}", key)
            else:
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise ProfileError(f"{where}: {key} must be a number, got {value!r}")
                if value < 0 or (key in _ABOVE_ZERO and value <= 0):
                    raise ProfileError(f"{where}: {key} must be positive, got {value!r}{_ABOVE_ZERO.get(key, '')}")
                updates[key] = float(value)
        return replace(model, **updates)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "throughput_per_replica": self.throughput_per_replica,
            "latency_p99_ms": [list(p) for p in self.latency_p99_ms],
            "sm_active": [list(p) for p in self.sm_active],
            "cpu_utilisation": [list(p) for p in self.cpu_utilisation],
            "pod_start_seconds": self.pod_start_seconds,
            "model_load_seconds": self.model_load_seconds,
            "timeout_ms": self.timeout_ms,
            "service_seconds": self.service_seconds,
        }


_CURVES = ("latency_p99_ms", "sm_active", "cpu_utilisation")
_KEYS = tuple(f.name for f in fields(ServiceModel) if f.name != "source")
# Keys where 0 is no setting at all, each with what 0 would do (pod start or load may be instant,
# and service_seconds 0 is "off").
_ABOVE_ZERO = {
    "throughput_per_replica": "",
    "timeout_ms": " (the p99 reported while nothing serves; 0 would show an outage as within the SLO)",
}


def _curve(value: Any, where: str, key: str = "") -> Curve:
    """A profile's curve, checked as the replay reads it: x is a utilisation (0-1), y finite, SM
    active a fraction that does not fall as load grows (the replay inverts it), and latency and
    CPU not negative. Python's JSON reads NaN and Infinity, which compared as nothing and crashed
    the replay or sized its pools at nonsense."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 2:
        raise ProfileError(f"{where}: a curve is a list of at least two [x, y] pairs")
    points: list[tuple[float, float]] = []
    for i, item in enumerate(value):
        if (
            not isinstance(item, Sequence)
            or isinstance(item, str)
            or len(item) != 2
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in item)
        ):
            raise ProfileError(f"{where}[{i}]: expected [x, y] finite numbers, got {item!r}")
        points.append((float(item[0]), float(item[1])))
    if any(b[0] <= a[0] for a, b in itertools.pairwise(points)):
        raise ProfileError(f"{where}: x values must increase strictly")
    if points[0][0] < 0 or points[-1][0] > 1:
        raise ProfileError(f"{where}: x is a utilisation, from 0 to 1; got {points[0][0]:g} to {points[-1][0]:g}")
    ys = [y for _, y in points]
    if key == "sm_active" and (min(ys) < 0 or max(ys) > 1 or any(b < a for a, b in itertools.pairwise(ys))):
        raise ProfileError(f"{where}: SM active is a fraction (0-1) that does not fall as load grows; got {ys}")
    if min(ys) < 0:
        raise ProfileError(f"{where}: y must not be negative; got {min(ys):g}")
    return tuple(points)


def single_server_p99_curve(
    service_seconds: float, points: Sequence[float] = (0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
) -> Curve:
    """p99 latency (ms) vs utilisation of one server holding each request for `service_seconds`.

    Under Poisson arrivals it is an M/D/1 queue: the wait exceeds t with probability about
    rho * exp(-2 (1 - rho) t / D), so p99 = D * (1 + max(0, ln(100 rho)) / (2 (1 - rho))); measured
    against one emulated replica at 60 % it was 6-10 D where the batching curve says 1.3 D. It is
    a steady state: applied to a pool behind round robin, or to a one-second burst, it overshoots
    (see `round_robin`). At rho = 1 the value is capped at the rho = 0.99 one.
    """
    d_ms = 1000.0 * service_seconds
    out = []
    for rho in points:
        r = min(rho, 0.99)
        wait = math.log(100 * r) / (2 * (1 - r)) if r > 0.01 else 0.0
        out.append((rho, d_ms * (1 + max(0.0, wait))))
    return tuple(out)


def fluid_step(queued: float, load: float, capacity: float, dt: float) -> tuple[float, float]:
    """Advance the fluid queue `dt` seconds at `load` against `capacity` (cost units/s).

    Returns (queued cost units, utilisation 0..1). Waiting work keeps the servers busy, so it
    counts toward utilisation; with no capacity everything waits and any load is full use.
    """
    queued = max(0.0, queued + (load - capacity) * dt)
    if capacity <= 0:
        return queued, (1.0 if load > 0 else 0.0)
    return queued, min(1.0, (load + (queued / dt if queued > 0 and dt > 0 else 0.0)) / capacity)


@dataclass
class Pool:
    """Replicas of one policy in the simulation: creation times; ready after the startup delay."""

    model: ServiceModel
    created: list[float] = field(default_factory=list)
    queue: float = 0.0  # cost units waiting (fluid model)
    gpu_seconds: float = 0.0
    _queues: RoundRobinQueues | None = field(default=None, repr=False)

    def ready_count(self, now: float) -> int:
        # created is sorted ascending (pods are appended at the current time).
        return bisect_right(self.created, now - self.model.startup_seconds)

    def ready_pods(self, now: float) -> list[bool]:
        ready_after = self.model.startup_seconds
        return [now - c >= ready_after for c in self.created]

    def scale_to(self, n: int, now: float) -> None:
        """Add new pods, or remove pods: those still starting first (newest first), then Ready ones."""
        if n > len(self.created):
            self.created.extend([now] * (n - len(self.created)))
        elif n < len(self.created):
            # created is kept sorted ascending: the newest (least ready) pods are at the end.
            del self.created[n:]

    def queue_seconds(self, now: float) -> float | None:
        """Seconds of queued work per Ready pod at its full rate (what its queue gauge / completion rate shows)."""
        ready = self.ready_count(now)
        if ready == 0:
            return None
        return self.queue / (ready * self.model.throughput_per_replica)

    def step(self, load: float, now: float, dt: float) -> tuple[float, float, float]:
        """Advance dt seconds at `load` cost units/s. Returns (utilisation, sm_active, p99 ms)."""
        self.gpu_seconds += len(self.created) * dt
        ready = self.ready_count(now)
        if self.model.service_seconds > 0:
            return self._step_round_robin(load, now, dt, ready)
        cap = ready * self.model.throughput_per_replica
        self.queue, util = fluid_step(self.queue, load, cap, dt)
        if cap <= 0:
            return util, 0.0, self.model.timeout_ms if load > 0 else 0.0
        wait = self.queue / cap
        p99 = min(self.model.p99_ms(util, wait), self.model.timeout_ms)
        return util, interpolate(self.model.sm_active, util), p99

    def _step_round_robin(self, load: float, now: float, dt: float, ready: int) -> tuple[float, float, float]:
        """The same step, request by request on fixed-time replicas behind round robin."""
        d = self.model.service_seconds
        if self._queues is None:
            self._queues = RoundRobinQueues(d)
        queues = self._queues
        queues.resize(len(self.created))
        served = queues.step(load * dt, now, dt, ready)
        self.queue = served.backlog_seconds / d
        if served.refused:
            return served.utilisation, 0.0, self.model.timeout_ms
        if served.latencies:
            p99_s = weighted_quantile(served.latencies, [1.0] * len(served.latencies), 0.99)
        else:  # nobody asked: what the next request would see
            p99_s = queues.next_wait(now + dt, ready) + d
        p99 = min(1000.0 * p99_s, self.model.timeout_ms)
        return served.utilisation, interpolate(self.model.sm_active, served.utilisation), p99


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The value below which a fraction q of the weight lies (no interpolation)."""
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return 0.0
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total - 1e-12:
            return v
    return pairs[-1][0]


__all__ = [
    "Curve",
    "Pool",
    "ProfileError",
    "ServiceModel",
    "fluid_step",
    "interpolate",
    "single_server_p99_curve",
    "weighted_quantile",
]
