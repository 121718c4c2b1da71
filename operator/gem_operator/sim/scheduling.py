"""Pure scheduling rules of the simulated kube-scheduler: which nodes can take a pod.

Kept apart from the asyncio simulator so the rules are table-testable without a server.
The placement planner does the topology work; this only needs to honour what it asked for
(nodeName, nodeSelector, required node affinity, gates, taints, free GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gem_operator.sim.fleet import GPU
from gem_operator.sim.objects import Obj, labels_of, matches_labels

FINISHED = ("Succeeded", "Failed")


def gpu_request(pod: Mapping[str, Any]) -> int:
    """GPUs a pod needs: the sum over containers (limits imply requests for extended
    resources), or the largest init container if that is more."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        values = [resources.get(section, {}).get(GPU) for section in ("requests", "limits")]
        return max(int(v) for v in values if v is not None) if any(v is not None for v in values) else 0

    regular = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(regular, init)


def node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def allocatable_gpus(node: Mapping[str, Any]) -> int:
    return int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))


def gpus_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs held per node by pods bound there and not finished (one pass over the pods)."""
    out: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in FINISHED:
            out[node] = out.get(node, 0) + gpu_request(pod)
    return out


def used_gpus(node_name: str, pods: Iterable[Mapping[str, Any]]) -> int:
    """GPUs held by pods bound to the node and not finished (nor being deleted)."""
    return gpus_by_node(pods).get(node_name, 0)


def tolerates(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        effect_ok = not toleration.get("effect") or toleration.get("effect") == taint.get("effect")
        if toleration.get("operator") == "Exists":
            key_ok = not toleration.get("key") or toleration.get("key") == taint.get("key")
        else:
            key_ok = toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", "")
        if effect_ok and key_ok:
            return True
    return False


def _term_matches(labels: Mapping[str, str], term: Mapping[str, Any]) -> bool:
    requirements = [
        (expr["key"], expr["operator"], frozenset(str(v) for v in expr.get("values") or []))
        for expr in term.get("matchExpressions") or []
    ]
    return matches_labels(labels, requirements)


def affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector AND (any of the required nodeSelectorTerms)."""
    spec = pod.get("spec") or {}
    labels = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(labels, term) for term in terms)


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
            return dict(taint)
    return None


def why_not(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods: list[Obj],
    *,
    ignore_gpus: bool = False,
    usage: Mapping[str, int] | None = None,
) -> str:
    """Empty when the node can take the pod, else the scheduler-style reason."""
    if not node_ready(node):
        return "node(s) were not ready"
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    if not affinity_matches(pod, node):
        return "node(s) didn't match Pod's node affinity/selector"
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    name = node["metadata"]["name"]
    used = (usage if usage is not None else gpus_by_node(pods)).get(name, 0)
    if not ignore_gpus and gpu_request(pod) > allocatable_gpus(node) - used:
        return f"Insufficient {GPU}"
    return ""


def choose_node(pod: Mapping[str, Any], nodes: list[Obj], pods: list[Obj]) -> tuple[str | None, str]:
    """Pick a node (bin-packing: fewest free GPUs that fit, then name) or explain why none.

    Returns (node name, "") or (None, message like kube-scheduler's FailedScheduling).
    """
    wanted = (pod.get("spec") or {}).get("nodeName")
    candidates = [n for n in nodes if not wanted or n["metadata"]["name"] == wanted]
    if wanted and not candidates:
        return None, f'node "{wanted}" not found'
    usage = gpus_by_node(pods)
    reasons: dict[str, int] = {}
    feasible: list[tuple[int, str]] = []
    for node in candidates:
        # spec.nodeName bypasses the scheduler's selector and taint checks, not capacity.
        reason = (
            why_not(pod, node, pods, usage=usage)
            if not wanted
            else ("" if gpu_request(pod) <= allocatable_gpus(node) - usage.get(wanted, 0) else f"Insufficient {GPU}")
        )
        name = node["metadata"]["name"]
        if reason:
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            feasible.append((allocatable_gpus(node) - usage.get(name, 0), name))
    if feasible:
        return min(feasible)[1], ""
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return None, f"0/{len(candidates)} nodes are available: {detail}."
