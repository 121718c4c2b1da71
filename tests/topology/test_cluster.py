"""Cluster view: Node/Pod dicts -> hosts with labels, free GPUs, readiness, taints, cordons."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.topology.cluster import (
    HostView,
    Taint,
    blocking_taints,
    cluster_view_from_objects,
    gpus_bound,
)


def node(name: str, gpus: Any = "8", *, ready: str = "True", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.clique": "nvl-0"}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "96", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}],
        },
    }


def pod(node_name: str | None, gpus: Any, phase: str = "Running", *, limits_only: bool = False) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if limits_only else {"requests": {"nvidia.com/gpu": gpus}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_free_gpus_count_live_bound_pods_only() -> None:
    pods = [
        pod("a", "2"),
        pod("a", 1, "Pending"),
        pod("a", "4", "Succeeded"),
        pod("a", "4", "Failed"),
        pod(None, "8", "Pending"),  # not bound yet
        pod("b", "3", limits_only=True),  # limits default the request
    ]
    view = cluster_view_from_objects([node("b"), node("a")], pods)
    hosts = view.by_name()
    assert [h.name for h in view.hosts] == ["a", "b"]  # sorted, deterministic
    assert hosts["a"].used_gpus == 3 and hosts["a"].free_gpus == 5
    assert hosts["b"].free_gpus == 5
    assert gpus_bound(pods) == {"a": 3, "b": 3}


def test_list_documents_readiness_cordons_and_taints() -> None:
    nodes = {
        "kind": "List",
        "items": [
            node("ok"),
            node("down", ready="Unknown"),
            node("cordoned", unschedulable=True),
            node("tainted", taints=[{"key": "maintenance", "effect": "NoSchedule"}]),
            node("gpu-taint", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}]),
            node("soft", taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
            node("cpu", gpus=None),
            node("milli", gpus="8000m"),
        ],
    }
    hosts = cluster_view_from_objects(nodes, {"kind": "PodList", "items": []}).by_name()
    assert hosts["ok"].ready and not hosts["down"].ready
    assert hosts["cordoned"].unschedulable
    assert [t.key for t in blocking_taints(hosts["tainted"])] == ["maintenance"]
    assert blocking_taints(hosts["gpu-taint"]) == []  # tolerated by the training pods
    assert blocking_taints(hosts["soft"]) == []  # PreferNoSchedule does not block
    assert hosts["cpu"].allocatable_gpus == 0
    assert hosts["milli"].allocatable_gpus == 8
    assert hosts["ok"].labels["nvidia.com/gpu.clique"] == "nvl-0"


def test_bad_inputs_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        cluster_view_from_objects([node("a"), node("a")])
    with pytest.raises(ValueError, match=r"metadata\.name"):
        cluster_view_from_objects([{"kind": "Node", "metadata": {}}])
    # Garbage quantities count as no GPUs rather than crashing the controller.
    hosts = cluster_view_from_objects([node("a", gpus="lots")], [pod("a", "x")]).by_name()
    assert hosts["a"].allocatable_gpus == 0 and hosts["a"].used_gpus == 0


def test_host_view_free_never_negative() -> None:
    host = HostView(name="a", allocatable_gpus=4, used_gpus=6, taints=(Taint("k", "NoExecute"),))
    assert host.free_gpus == 0
    assert blocking_taints(host, tolerations=[{"operator": "Exists"}]) == []
