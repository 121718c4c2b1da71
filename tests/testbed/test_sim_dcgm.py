"""The simulated dcgm-exporter and ranking-server queue (`gem_testbed.servers.dcgm`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.policy import Observation, PodState, ScalerState, desired_replicas
from gem_operator.autoscaling.sources import SimulatedSource
from gem_testbed.servers.dcgm import SmActiveSimulator

NS = "default"
LABELS = {"gem.dev/instance": "ranker", "gem.dev/role": "server"}


class Pods:
    """Stands in for the embedded cluster's `list`: a fixed set of Ready pods."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def list(self, api: str, kind: str, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        assert (api, kind, namespace, dict(labels)) == ("v1", "Pod", NS, LABELS)
        ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        return [{"metadata": {"name": n}, "status": ready} for n in self.names]


def simulator(pods: Pods, load: dict[str, float]) -> tuple[SmActiveSimulator, SimulatedSource, SimulatedSource]:
    sm, queue = SimulatedSource(), SimulatedSource()
    sim = SmActiveSimulator(pods, sm, queue_source=queue)  # type: ignore[arg-type]
    sim.add_pool(NS, LABELS, lambda _t: load["value"])
    return sim, sm, queue


def test_overload_queues_and_the_queue_drains_once_capacity_catches_up() -> None:
    pods = Pods(["r-0", "r-1"])  # 2 x 200 cost units/s
    load = {"value": 600.0}
    sim, sm, queue = simulator(pods, load)
    sim.tick(0.0)
    assert queue.read_now(NS, pods.names).samples["r-0"].value == 0.0
    sim.tick(10.0)  # 10 s at 200/s over capacity: 2,000 units queued = 5 s of work for 400/s
    q = queue.read_now(NS, pods.names).samples
    assert q["r-0"].value == pytest.approx(5.0) and q["r-1"].value == pytest.approx(5.0)
    assert sm.read_now(NS, pods.names).samples["r-0"].value == pytest.approx(0.95)  # saturated

    pods.names = ["r-0", "r-1", "r-2", "r-3", "r-4"]  # 1,000/s now, 400/s spare
    sim.tick(13.0)  # 1,200 drained of 2,000
    assert queue.read_now(NS, pods.names).samples["r-4"].value == pytest.approx(800 / 1000)
    sim.tick(20.0)
    assert queue.read_now(NS, pods.names).samples["r-4"].value == 0.0
    assert sm.read_now(NS, pods.names).samples["r-4"].value < 0.6


def test_no_ready_pod_keeps_the_work_waiting() -> None:
    pods = Pods([])
    load = {"value": 100.0}
    sim, _, queue = simulator(pods, load)
    sim.tick(0.0)
    sim.tick(4.0)  # nobody serves: 400 units wait
    pods.names = ["r-0"]
    sim.tick(4.0)
    assert queue.read_now(NS, ["r-0"]).samples["r-0"].value == pytest.approx(400 / 200)


def test_policy_reads_the_simulated_queue_beyond_saturation() -> None:
    """Saturated SM active alone only doubles; the queue says how far demand is above capacity."""
    pods = Pods(["r-0", "r-1"])
    load = {"value": 2000.0}  # 10 replicas of work on 2
    sim, sm, queue = simulator(pods, load)
    spec = AutoscalingSpec.model_validate({"targetSmActive": 0.6, "maxReplicas": 64, "stabilizationSeconds": {"up": 0}})
    sim.tick(0.0)
    sim.tick(15.0)
    obs = Observation(
        current_replicas=2,
        pods=[PodState(n, ready=True) for n in pods.names],
        metrics=sm.read_now(NS, pods.names),
        queue=queue.read_now(NS, pods.names),
    )
    state = desired_replicas(spec, ScalerState(), obs, 100.0).state
    sim.tick(30.0)
    obs = Observation(
        current_replicas=2,
        pods=obs.pods,
        metrics=sm.read_now(NS, pods.names),
        queue=queue.read_now(NS, pods.names),
    )
    d = desired_replicas(spec, state, obs, 115.0)
    assert d.reason == "QueuedWork"
    assert d.recommendation is not None and d.recommendation > 4  # more than the saturation rule's doubling
