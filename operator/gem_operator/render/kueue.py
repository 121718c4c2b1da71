"""Kueue integration as an external framework: the gang's `Workload` (kueue.x-k8s.io/v1beta2).

Why a Workload, not labels on pods: Kueue's pod integration admits bare pods one by one, so a
queue label copied onto a gang's pods would let half a gang in. Instead, a GEMTraining that
carries `kueue.x-k8s.io/queue-name` gets one Workload whose single podSet describes the whole
gang (one pod per host, its per-pod requests); the operator creates no pod until Kueue writes
`status.admission`, and removes them again when Kueue evicts the Workload. The queue label
stays on the GEMTraining and its Workload; pods never carry it.

Kueue's current API is v1beta2 (since 0.15; v1beta1 is deprecated since 0.16 and is to stop being
served). The Workload is written in v1beta2 and in v1beta1 only where v2 is not served; the two
differ, for what is written here, in how the priority class is named.

Pure: (resource, spec) -> manifest, and (Workload) -> what Kueue decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import (
    ANNOTATION_SPEC_HASH,
    Owner,
    child_name,
    metadata,
    spec_hash,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_LEGACY_API_VERSION = "kueue.x-k8s.io/v1beta1"
# Newest first: what the operator tries, in order, until the cluster serves one.
KUEUE_API_VERSIONS = (KUEUE_API_VERSION, KUEUE_LEGACY_API_VERSION)
WORKLOAD_PRIORITY_GROUP = "kueue.x-k8s.io"
WORKLOAD_PRIORITY_KIND = "WorkloadPriorityClass"
ROLE_WORKLOAD = "workload"
POD_SET = "workers"


def queue_name(owner: Owner) -> str | None:
    """The LocalQueue the resource asks for (its `kueue.x-k8s.io/queue-name` label), if any."""
    value = dict(owner.labels).get(QUEUE_LABEL, "").strip()
    return value or None


def workload_name(owner: Owner) -> str:
    return child_name(owner, ROLE_WORKLOAD)


def _resources_only(container: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": container["name"], "image": container["image"]}
    if container.get("resources"):
        out["resources"] = container["resources"]
    return out


def pod_set_template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What Kueue needs of a gang pod: containers' requests/limits, tolerations, node constraints."""
    spec = pod["spec"]
    template: dict[str, Any] = {"containers": [_resources_only(c) for c in spec["containers"]]}
    if spec.get("initContainers"):
        template["initContainers"] = [_resources_only(c) for c in spec["initContainers"]]
    for key in ("tolerations", "nodeSelector", "priorityClassName", "restartPolicy"):
        if spec.get(key):
            template[key] = spec[key]
    return {"spec": template}


def _priority_fields(priority: str, api_version: str) -> dict[str, Any]:
    """The `kueue.x-k8s.io/priority-class` label names a WorkloadPriorityClass; each version spells it."""
    if api_version == KUEUE_LEGACY_API_VERSION:
        return {"priorityClassName": priority, "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}
    ref = {"group": WORKLOAD_PRIORITY_GROUP, "kind": WORKLOAD_PRIORITY_KIND, "name": priority}
    return {"priorityClassRef": ref}


def render_workload(
    owner: Owner,
    spec: GEMTrainingSpec,
    pod: Mapping[str, Any],
    queue: str,
    api_version: str = KUEUE_API_VERSION,
    priority_value: int | None = None,
) -> dict[str, Any]:
    """The Workload for the gang: one podSet of `num_nodes` pods shaped like `pod` (an unpinned worker).

    podSets are immutable in Kueue, so the annotation carries their hash: a new gang shape means a
    new Workload (the controller deletes and re-creates it, and the gang waits for a new admission).
    The hash covers only the podSets, so it is the same in either API version. `priority_value` is
    the named WorkloadPriorityClass's value: Kueue orders and preempts by `spec.priority`, which it
    fills itself only for the job kinds it integrates, so an external framework sets it.
    """
    pod_sets = [{"name": POD_SET, "count": spec.num_nodes, "template": pod_set_template(pod)}]
    meta = metadata(owner, workload_name(owner), ROLE_WORKLOAD, "gem-training", {QUEUE_LABEL: queue})
    priority = dict(owner.labels).get(PRIORITY_LABEL)
    if priority:
        meta["labels"][PRIORITY_LABEL] = priority
    meta["annotations"] = {ANNOTATION_SPEC_HASH: spec_hash(pod_sets)}
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": meta,
        # A user's spec.suspend deactivates the Workload so it holds no quota while held.
        "spec": {"queueName": queue, "podSets": pod_sets, "active": not spec.suspend},
    }
    if priority:
        body["spec"].update(_priority_fields(priority, api_version))
        if priority_value is not None:
            body["spec"]["priority"] = priority_value
    return body


@dataclass(frozen=True)
class KueueDecision:
    """What Kueue's status on the Workload says the gang may do now."""

    admitted: bool
    evicted: bool
    reason: str
    message: str
    cluster_queue: str | None = None
    flavors: tuple[str, ...] = ()  # ResourceFlavors assigned to the gang's podSet


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c
    return None


def assigned_flavors(admission: Mapping[str, Any]) -> tuple[str, ...]:
    """The ResourceFlavor names Kueue assigned to the gang's podSet, in order, without repeats."""
    names: list[str] = []
    for assignment in admission.get("podSetAssignments") or []:
        if not isinstance(assignment, Mapping) or assignment.get("name") not in (POD_SET, None):
            continue
        for flavor in (assignment.get("flavors") or {}).values():
            if isinstance(flavor, str) and flavor not in names:
                names.append(flavor)
    return tuple(names)


def flavor_node_labels(flavors: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The node labels the assigned ResourceFlavors require (their spec.nodeLabels, merged)."""
    out: dict[str, str] = {}
    for flavor in flavors:
        for key, value in ((flavor.get("spec") or {}).get("nodeLabels") or {}).items():
            out[str(key)] = str(value)
    return out


def decide(workload: Mapping[str, Any] | None, queue: str) -> KueueDecision:
    """Admitted once `status.admission` is set (and `Admitted` is not False); evicted while `Evicted` is True."""
    if workload is None:
        return KueueDecision(False, False, "WorkloadCreated", f"waiting for Kueue to admit the gang from queue {queue}")
    status = workload.get("status") or {}
    evicted = _condition(status, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        why = evicted.get("message") or evicted.get("reason") or "evicted"
        return KueueDecision(False, True, "Evicted", f"Kueue evicted the gang: {why}")
    admission = status.get("admission")
    admitted = _condition(status, "Admitted")
    if isinstance(admission, Mapping) and admission and (admitted is None or admitted.get("status") == "True"):
        cq = str(admission.get("clusterQueue") or "") or None
        flavors = assigned_flavors(admission)
        where = f" in ClusterQueue {cq}" if cq else ""
        flavor_text = f" (flavors {', '.join(flavors)})" if flavors else ""
        return KueueDecision(True, False, "Admitted", f"admitted by Kueue{where}{flavor_text}", cq, flavors)
    pending = _condition(status, "QuotaReserved")
    detail = (pending or {}).get("message") or ""
    message = f"waiting for Kueue to admit the gang from queue {queue}" + (f": {detail}" if detail else "")
    return KueueDecision(False, False, "Pending", message)
