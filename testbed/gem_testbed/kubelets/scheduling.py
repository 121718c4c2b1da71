"""Pure scheduling rules of the simulated kube-scheduler: which nodes can take a pod.

Kept apart from the asyncio simulator so the rules are table-testable without a server.
The placement planner does the topology work; this only needs to honour what it asked for
(nodeName, nodeSelector, required node affinity, gates, taints, free GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gem_operator.fleet import GPU
from gem_testbed.emulator.objects import Obj, Requirement, matches_requirement

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


NodeFilter = Callable[[Mapping[str, Any]], bool]


def node_filter(pod: Mapping[str, Any]) -> NodeFilter:
    """The pod's nodeSelector AND (any of its required nodeSelectorTerms), parsed once.

    A predicate over a node: choosing a node for a pod tests every node of the fleet, so the
    selector is read once per pod, not once per (pod, node).
    """
    spec = pod.get("spec") or {}
    selector: list[Requirement] = [
        (key, "In", frozenset([str(value)])) for key, value in (spec.get("nodeSelector") or {}).items()
    ]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms: list[list[Requirement]] = [
        [
            (expr["key"], expr["operator"], frozenset(str(v) for v in expr.get("values") or []))
            for expr in term.get("matchExpressions") or []
        ]
        for term in required.get("nodeSelectorTerms") or []
    ]

    def matches(node: Mapping[str, Any]) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if selector and not _all_match(labels, selector):
            return False
        return not terms or any(_all_match(labels, term) for term in terms)

    return matches


def _all_match(labels: Mapping[str, Any], requirements: list[Requirement]) -> bool:
    """`matches_labels` with the common `In` test inlined: a gang pod pinned to one host is
    tested against every node of the fleet, so this runs (pods x nodes) times."""
    for requirement in requirements:
        key, operator, values = requirement
        if operator == "In":
            if labels.get(key) not in values:  # values are strings: a missing label never matches
                return False
        elif not matches_requirement(labels, requirement):
            return False
    return True


def affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector AND (any of the required nodeSelectorTerms)."""
    return node_filter(pod)(node)


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
    matches: NodeFilter | None = None,
) -> str:
    """Empty when the node can take the pod, else the scheduler-style reason.

    ``matches`` is the pod's `node_filter` when the caller tests many nodes for one pod.
    """
    if not node_ready(node):
        return "node(s) were not ready"
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    if not (matches or node_filter(pod))(node):
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
    matches = node_filter(pod)
    request = gpu_request(pod)

    def reason_for(node: Obj, usage: Mapping[str, int]) -> str:
        if not wanted:
            return why_not(pod, node, pods, usage=usage, matches=matches)
        # spec.nodeName bypasses the scheduler's selector and taint checks, not capacity.
        return "" if request <= allocatable_gpus(node) - usage.get(wanted, 0) else f"Insufficient {GPU}"

    # Fast path: only nodes the pod's selector admits can take it (one for a pinned gang pod), so
    # test those fully and count GPUs in use only on them, instead of every node and every pod.
    admitted = candidates if wanted else [n for n in candidates if matches(n)]
    names = {n["metadata"]["name"] for n in admitted}
    usage = gpus_by_node(p for p in pods if (p.get("spec") or {}).get("nodeName") in names)
    feasible = [
        (allocatable_gpus(node) - usage.get(node["metadata"]["name"], 0), node["metadata"]["name"])
        for node in admitted
        if not reason_for(node, usage)
    ]
    if feasible:
        return min(feasible)[1], ""
    # None fits: explain with each node's first failing check, as kube-scheduler's message does.
    usage = gpus_by_node(pods)
    reasons: dict[str, int] = {}
    for node in candidates:
        reason = reason_for(node, usage)
        reasons[reason] = reasons.get(reason, 0) + 1
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return None, f"0/{len(candidates)} nodes are available: {detail}."
