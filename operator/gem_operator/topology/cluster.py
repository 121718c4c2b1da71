"""A pure view of the cluster for placement: GPU hosts, their topology labels and free GPUs.

The controller lists Nodes and Pods from the API and hands the plain dicts to
``cluster_view_from_objects``; ``gemop plan`` does the same with ``kubectl get -o yaml`` exports.
Nothing here talks to the API server or reads the clock.

Free GPUs on a node = allocatable ``nvidia.com/gpu`` minus the GPU requests (limits when no
request is given, as Kubernetes defaults them) of every pod bound to it (``spec.nodeName``)
that has not terminated (phase neither Succeeded nor Failed).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"

#: Taints the training pods tolerate (the GPU taint that GPU node pools commonly carry).
DEFAULT_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_DONE_PHASES = frozenset({"Succeeded", "Failed"})
_INT = re.compile(r"^\+?[0-9]+$")


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class HostView:
    """One node as the planner sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable_gpus: int = 0
    used_gpus: int = 0
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()

    @property
    def free_gpus(self) -> int:
        return max(0, self.allocatable_gpus - self.used_gpus)


@dataclass(frozen=True)
class ClusterView:
    """Hosts by name; built once per planning pass."""

    hosts: tuple[HostView, ...]

    def by_name(self) -> dict[str, HostView]:
        return {h.name: h for h in self.hosts}


def tolerated(taint: Taint, tolerations: Iterable[Mapping[str, str]]) -> bool:
    """Kubernetes toleration matching (key/operator/value/effect), enough for placement."""
    for tol in tolerations:
        effect = tol.get("effect", "")
        if effect and effect != taint.effect:
            continue
        op = tol.get("operator", "Equal")
        key = tol.get("key", "")
        if op == "Exists" and (not key or key == taint.key):
            return True
        if op == "Equal" and key == taint.key and tol.get("value", "") == taint.value:
            return True
    return False


def blocking_taints(host: HostView, tolerations: Iterable[Mapping[str, str]] = DEFAULT_TOLERATIONS) -> list[Taint]:
    tols = list(tolerations)
    return [t for t in host.taints if t.effect in _BLOCKING_EFFECTS and not tolerated(t, tols)]


def _gpu_count(value: Any) -> int:
    """Whole GPUs from a quantity ("8", 8, "8000m"); anything else counts as 0."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    if _INT.match(text):
        return int(text)
    if text.endswith("m") and _INT.match(text[:-1]):
        return int(text[:-1]) // 1000
    try:
        number = float(text)
    except ValueError:
        return 0
    return max(0, math.floor(number)) if math.isfinite(number) else 0


def _node_ready(status: Mapping[str, Any]) -> bool:
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return False


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    spec = pod.get("spec") or {}
    total = 0
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        total += _gpu_count(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE)))
    init_max = 0
    for container in spec.get("initContainers") or []:
        resources = (container or {}).get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        init_max = max(init_max, _gpu_count(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE))))
    return max(total, init_max)


def gpus_bound(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs requested by live pods, per node name."""
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        if (pod.get("status") or {}).get("phase") in _DONE_PHASES:
            continue
        gpus = _pod_gpus(pod)
        if gpus:
            used[node] = used.get(node, 0) + gpus
    return used


def _items(objs: Any) -> list[Mapping[str, Any]]:
    """Accept a list of objects or a ``kind: List`` / ``*List`` document."""
    if objs is None:
        return []
    if isinstance(objs, Mapping):
        return [o for o in objs.get("items") or [] if isinstance(o, Mapping)]
    return [o for o in objs if isinstance(o, Mapping)]


def host_from_node(node: Mapping[str, Any], used_gpus: int = 0) -> HostView:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise ValueError("a Node without metadata.name cannot be placed on")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    taints = tuple(
        Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=str(t.get("value", "") or ""))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    return HostView(
        name=name,
        labels=labels,
        allocatable_gpus=_gpu_count((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        used_gpus=used_gpus,
        ready=_node_ready(status),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
    )


def cluster_view_from_objects(nodes: Any, pods: Any = ()) -> ClusterView:
    """Build the view from plain Node and Pod dicts (``list[dict]`` or a ``kind: List`` dict).

    Pods count against the node named in ``spec.nodeName`` unless their phase is Succeeded
    or Failed. Nodes are sorted by name so that the view, and every plan, is deterministic.
    """
    used = gpus_bound(_items(pods))
    # One HostView per node, built with its used GPUs (10,000-node exports: this is on the clock).
    hosts = [host_from_node(n, used.get(str((n.get("metadata") or {}).get("name") or ""), 0)) for n in _items(nodes)]
    hosts.sort(key=lambda h: h.name)
    for before, after in itertools.pairwise(hosts):
        if before.name == after.name:
            raise ValueError(f"node {after.name!r} appears twice in the node list")
    return ClusterView(hosts=tuple(hosts))


def _expression_holds(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    key, op = str(expr.get("key", "")), str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selected(
    host: HostView, node_selector: Mapping[str, str], node_affinity: Mapping[str, Any] | None = None
) -> bool:
    """Whether the pods' nodeSelector and required node affinity admit this host, as the scheduler
    judges them (terms ORed, expressions in a term ANDed; ``metadata.name`` matchFields too)."""
    if any(host.labels.get(k) != v for k, v in node_selector.items()):
        return False
    required = (node_affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": host.name}
    for term in terms:
        exprs = term.get("matchExpressions") or []
        matches = term.get("matchFields") or []
        if not exprs and not matches:
            continue  # an empty term selects nothing
        if all(_expression_holds(host.labels, e) for e in exprs) and all(_expression_holds(fields, f) for f in matches):
            return True
    return False
