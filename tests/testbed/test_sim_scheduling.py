"""Binding rules of the simulated scheduler, table-driven on pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.fleet import CLIQUE, GPU, make_fleet
from gem_testbed.kubelets.scheduling import choose_node, gpu_request


def pod(gpus: int = 0, **spec: Any) -> dict[str, Any]:
    limits = {"limits": {GPU: str(gpus)}} if gpus else {}
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": limits}], **spec},
    }


def fleet() -> list[dict[str, Any]]:
    nodes = make_fleet(4, gpus_per_host=8, hosts_per_nvlink_domain=2)
    nodes[0]["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes[1]["spec"]["unschedulable"] = True
    nodes[3]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return nodes  # only gpu-002 is plainly usable


def bound(node: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    p = pod(gpus, nodeName=node)
    p["metadata"] = {"name": f"b-{node}-{gpus}", "uid": f"b-{node}-{gpus}"}
    p["status"] = {"phase": phase}
    return p


def affinity(op: str, values: list[str] | None = None) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": CLIQUE, "operator": op}
    if values is not None:
        expr["values"] = values
    terms = [{"matchExpressions": [expr]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]

CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], str | None, str]] = [
    ("plain pod goes to the only usable node", pod(8), [], "gpu-002", ""),
    ("nodeName is honoured even on a tainted node", pod(1, nodeName="gpu-000"), [], "gpu-000", ""),
    ("nodeName to a missing node stays pending", pod(1, nodeName="nope"), [], None, 'node "nope" not found'),
    ("nodeSelector restricts", pod(1, nodeSelector={CLIQUE: "nvl-0"}), [], None, "didn't match"),
    (
        "toleration opens a tainted node",
        pod(1, tolerations=TOLERATE, nodeSelector={CLIQUE: "nvl-0"}),
        [],
        "gpu-000",
        "",
    ),
    (
        "Exists toleration",
        pod(1, tolerations=[{"operator": "Exists"}], affinity=affinity("In", ["nvl-0"])),
        [],
        "gpu-000",
        "",
    ),
    ("affinity In", pod(1, affinity=affinity("In", ["nvl-1"])), [], "gpu-002", ""),
    ("affinity NotIn", pod(1, affinity=affinity("NotIn", ["nvl-1"])), [], None, "untolerated taint"),
    ("affinity Exists", pod(1, affinity=affinity("Exists")), [], "gpu-002", ""),
    ("GPUs exhausted", pod(4), [bound("gpu-002", 6)], None, "Insufficient nvidia.com/gpu"),
    ("finished pods free their GPUs", pod(4), [bound("gpu-002", 6, "Succeeded")], "gpu-002", ""),
    ("too many GPUs for any host", pod(9), [], None, "0/4 nodes are available"),
]


@pytest.mark.parametrize(("case", "the_pod", "others", "node", "message"), CASES, ids=[c[0] for c in CASES])
def test_binding_rules(
    case: str, the_pod: dict[str, Any], others: list[dict[str, Any]], node: str | None, message: str
) -> None:
    chosen, why = choose_node(the_pod, fleet(), others)
    assert chosen == node
    assert message in why


def test_bin_packing_prefers_the_fuller_node() -> None:
    nodes = make_fleet(2)
    chosen, _ = choose_node(pod(2), nodes, [bound("gpu-001", 4)])
    assert chosen == "gpu-001"


def test_gpu_request_counts_requests_limits_and_init_containers() -> None:
    spec = {
        "containers": [{"resources": {"requests": {GPU: "2"}}}, {"resources": {"limits": {GPU: 3}}}],
        "initContainers": [{"resources": {"limits": {GPU: "8"}}}],
    }
    assert gpu_request({"spec": spec}) == 8
    spec["initContainers"] = []
    assert gpu_request({"spec": spec}) == 5
