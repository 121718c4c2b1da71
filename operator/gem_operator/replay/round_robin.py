"""Fixed-time replicas behind a round-robin Service front, request by request. Pure.

The fluid model treats a pool as one queue and reads p99 off a curve of utilisation. That is
right for a batching GPU server, and wrong for replicas that serve one request at a time in a
fixed time D behind a front that hands each Ready replica the next request in turn (what the load
test runs: `--device emulated:...` with ``maxBatchSize: 1``, and kube-proxy-style round robin).
There, how long a request waits depends on how many requests its own replica got in the last
few service times, which no per-second utilisation says: a pool of 13 at 60 % holds p99 near D,
one replica at 60 % is at 6 D, and a one-second burst above the pool's capacity costs a few D,
not the steady-state queue of a saturated server. A closed loop on the shared trace measured
exactly this (a steady-state G/D/1 formula put p99 at 4 s in minutes the client saw 0.4-0.6 s).

So the pool is simulated the way it runs: each second's arrivals (its cost units, the fraction
carried to the next second) at uniform random times within the second, each given to the next
Ready replica in turn, served when that replica's earlier requests are done. A replica's queue
survives from second to second; one that is deleted takes its queue with it (the front stops
sending to it); with no Ready replica the front refuses, as a Service without endpoints does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Served:
    """One step's outcome: latencies (s) of the requests that arrived, and the pool's work."""

    latencies: list[float]
    utilisation: float  # busy fraction of the Ready replicas' wall time in the step (0..1)
    backlog_seconds: float  # service time still queued on Ready replicas at the end of the step
    refused: int  # arrivals with no Ready replica to go to


@dataclass
class RoundRobinQueues:
    """Per-replica "busy until" times; index i is the pool's i-th oldest pod."""

    service_seconds: float
    seed: int = 0
    busy_until: list[float] = field(default_factory=list)
    _next: int = 0
    _carry: float = 0.0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.service_seconds <= 0:
            raise ValueError("service_seconds must be > 0")
        self._rng = random.Random(self.seed)

    def resize(self, pods: int) -> None:
        """Follow the pool: new pods start idle; the newest go first when it shrinks."""
        if pods > len(self.busy_until):
            self.busy_until.extend([0.0] * (pods - len(self.busy_until)))
        else:
            del self.busy_until[pods:]

    def step(self, units: float, now: float, dt: float, ready: int) -> Served:
        """Serve `units` arrivals spread over [now, now + dt) on the first `ready` pods."""
        d = self.service_seconds
        total = max(0.0, units) + self._carry
        n = int(total)
        self._carry = total - n
        times = sorted(now + self._rng.random() * dt for _ in range(n))
        if ready <= 0:
            return Served([], 1.0 if n else 0.0, 0.0, n)
        busy = self.busy_until
        idle = [0.0] * ready  # idle gaps inside the step, before each replica's last service ends
        latencies = []
        for t in times:
            j = self._next % ready
            self._next += 1
            if t > busy[j]:
                idle[j] += t - max(now, busy[j])
            start = max(t, busy[j])
            busy[j] = start + d
            latencies.append(start + d - t)
        end = now + dt
        backlog = sum(max(0.0, busy[j] - end) for j in range(ready))
        # The busy fraction of wall time (what DCGM's SM active reads off a device), not the
        # offered load: work carried over from the last step is counted in the step it runs.
        busy_time = sum(max(0.0, min(end, busy[j]) - now - idle[j]) for j in range(ready))
        utilisation = min(1.0, busy_time / (ready * dt)) if dt > 0 else 0.0
        return Served(latencies, utilisation, backlog, 0)

    def next_wait(self, now: float, ready: int) -> float:
        """What a request arriving at `now` would wait: the next Ready pod in turn's queue."""
        if ready <= 0:
            return 0.0
        return max(0.0, self.busy_until[self._next % ready] - now)


__all__ = ["RoundRobinQueues", "Served"]
