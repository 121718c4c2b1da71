"""Kueue admission for GEMTraining, as Kueue's external job frameworks do it.

With `kueue.x-k8s.io/queue-name` on a GEMTraining the operator keeps a `Workload` for its gang
(render/kueue.py) and creates the gang's pods only while Kueue has admitted it. When Kueue
evicts (condition `Evicted=True`: preemption, a deactivated Workload, pods not ready in time),
the pods are removed and, once they are gone, the quota reservation is released on the
Workload's status as Kueue expects of the job, so it can be queued again. When the gang
finishes, the Workload is marked `Finished` so its quota is returned.

Kueue itself is not needed to run the operator: without the label none of this happens. The
Workload is kept in Kueue's v1beta2 API, in v1beta1 only on a cluster that does not serve v2.
"""

from __future__ import annotations

from typing import Any, Protocol

from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.controllers.reconcile import Outcome, PassContext, apply_children
from gem_operator.controllers.status import observe_gang, training_phase
from gem_operator.kube import KubeApi
from gem_operator.render.common import ANNOTATION_SPEC_HASH, Owner
from gem_operator.render.kueue import (
    KUEUE_API_VERSIONS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    KueueDecision,
    decide,
    flavor_node_labels,
    queue_name,
    render_workload,
    workload_name,
)
from gem_operator.render.training import TrainingChildren, worker_pod

WORKLOAD = "Workload"
RESOURCE_FLAVOR = "ResourceFlavor"
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"


class AdmissionPass(Protocol):
    """What admission needs of a GEMTraining's reconcile pass (``controllers.training.TrainingPass``).

    Declared here so that this module does not import the controller that calls it.
    """

    ctx: PassContext
    spec: GEMTrainingSpec
    outcome: Outcome
    owner: Owner
    status: dict[str, Any]
    fields: dict[str, Any]

    def event(self, type_: str, reason: str, message: str) -> None: ...

    def condition(self, type_: str, status: str, reason: str, message: str) -> None: ...

    async def delete_pods(self, names: set[str] | None = None) -> None: ...

    async def render(self, spec: GEMTrainingSpec, **kwargs: Any) -> TrainingChildren | None: ...


async def _read(kube: KubeApi, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object in the newest Kueue API version that has it (its `apiVersion` says which)."""
    for api_version in KUEUE_API_VERSIONS:
        found = await kube.get(api_version, kind, name, namespace)
        if found is not None:
            return found
    return None


async def _priority_value(tp: AdmissionPass) -> int | None:
    """The value of the WorkloadPriorityClass the resource's priority label names (None: no label, or
    no such class, which is reported as an Event: Kueue then queues the gang at the default priority)."""
    name = dict(tp.owner.labels).get(PRIORITY_LABEL, "").strip()
    if not name:
        return None
    found = await _read(tp.ctx.kube, WORKLOAD_PRIORITY_CLASS, name, "")
    value = (found or {}).get("value")
    if not isinstance(value, int):
        message = f"no WorkloadPriorityClass {name!r}: queued at the default priority"
        tp.event("Warning", "PriorityClassNotFound", message)
        return None
    return value


async def _create(tp: AdmissionPass, queue: str) -> dict[str, Any] | None:
    """Creates the Workload in the newest served version; None when no version is served."""
    priority = await _priority_value(tp)
    for api_version in KUEUE_API_VERSIONS:
        pod = worker_pod(tp.owner, tp.spec)
        desired = render_workload(tp.owner, tp.spec, pod, queue, api_version, priority)
        created = await tp.ctx.kube.create_if_served(desired)
        if created is not None:
            return created
    return None


def _hash(obj: dict[str, Any] | None) -> str | None:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)


async def admission(tp: AdmissionPass) -> KueueDecision | None:
    """Keep the gang's Workload in step with the spec; None when the resource asks for no queue."""
    queue = queue_name(tp.owner)
    if queue is None:
        return None
    ctx, spec = tp.ctx, tp.spec
    desired = render_workload(tp.owner, spec, worker_pod(tp.owner, spec), queue)
    name = desired["metadata"]["name"]
    current = await _read(ctx.kube, WORKLOAD, name, ctx.namespace)
    if current is not None and _hash(current) != _hash(desired):
        # podSets are immutable: a new gang shape is a new Workload, admitted afresh.
        await ctx.kube.delete(current["apiVersion"], WORKLOAD, name, ctx.namespace)
        tp.event("Normal", "WorkloadReplaced", f"gang shape changed: Workload {name} re-created for queue {queue}")
        return KueueDecision(False, False, "WorkloadReplaced", f"gang shape changed; waiting for Kueue ({queue})")
    if current is None:
        if await _create(tp, queue) is None:
            versions = " or ".join(KUEUE_API_VERSIONS)
            message = (
                f"metadata.labels[{QUEUE_LABEL}] is {queue!r} but this cluster serves no {versions} "
                "Workload API: install Kueue, or remove the label to run without a queue"
            )
            tp.condition("Admitted", "False", "KueueNotInstalled", message)
            old_reason = next(
                (c.get("reason") for c in tp.status.get("conditions") or [] if c.get("type") == "Admitted"), None
            )
            if old_reason != "KueueNotInstalled":
                tp.event("Warning", "KueueNotInstalled", message)
            return KueueDecision(False, False, "KueueNotInstalled", message)
        tp.event("Normal", "WorkloadCreated", f"Workload {name} created in queue {queue}: {spec.num_nodes} pods wait")
    elif (current.get("spec") or {}).get("active", True) != desired["spec"]["active"]:
        await ctx.kube.patch_merge(
            current["apiVersion"], WORKLOAD, name, ctx.namespace, {"spec": {"active": not spec.suspend}}
        )
    decision = decide(current, queue)
    old: dict[str, Any] = next((c for c in tp.status.get("conditions") or [] if c.get("type") == "Admitted"), {})
    tp.condition("Admitted", "True" if decision.admitted else "False", decision.reason, decision.message)
    if decision.admitted and old.get("status") != "True":
        tp.event("Normal", "Admitted", decision.message)
    if decision.evicted and old.get("reason") != "Evicted":
        tp.event("Warning", "Evicted", f"{decision.message}; removing the gang's pods")
    return decision


async def admitted_node_labels(tp: AdmissionPass, decision: KueueDecision) -> dict[str, str]:
    """Node labels of the ResourceFlavors Kueue admitted the gang to: the planner keeps to those nodes."""
    flavors = []
    for name in decision.flavors:
        flavor = await _read(tp.ctx.kube, RESOURCE_FLAVOR, name, "")
        if flavor is not None:
            flavors.append(flavor)
    return flavor_node_labels(flavors)


async def hold(tp: AdmissionPass, decision: KueueDecision, pods: list[dict[str, Any]]) -> None:
    """Not admitted (or evicted): no pods; release the reservation once an evicted gang is gone.

    The pass's one render: the Service and ConfigMap of the gang without its pods.
    """
    children = await tp.render(tp.spec.model_copy(update={"suspend": True}))
    if children is not None:
        await apply_children(tp.ctx, GEM_TRAINING, children.all(), tp.outcome)
    if pods:
        if not decision.evicted:  # an eviction has its own Event
            tp.event("Normal", "GangRemoved", f"removed {len(pods)} pods: {decision.message}")
        await tp.delete_pods()
    elif decision.evicted:
        await _release(tp)
    tp.fields["placement"] = None
    training_phase(tp.outcome.draft, observe_gang(tp.spec.num_nodes, []), suspended=False)
    tp.fields["phase"] = "Queued"
    for type_ in ("Ready", "Running", "Placed"):
        tp.condition(type_, "False", "Queued" if not decision.evicted else "Evicted", decision.message)


async def _release(tp: AdmissionPass) -> None:
    """The job's half of an eviction: with no pods left, clear the admission so Kueue can requeue."""
    name = workload_name(tp.owner)
    stamp = tp.ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": "the gang's pods were removed after eviction",
        "lastTransitionTime": stamp,
    }
    current = await _read(tp.ctx.kube, WORKLOAD, name, tp.ctx.namespace)
    if current is None or not (current.get("status") or {}).get("admission"):
        return
    others = [
        c
        for c in (current.get("status") or {}).get("conditions") or []
        if c.get("type") not in ("QuotaReserved", "Admitted")
    ]
    admitted = {**condition, "type": "Admitted", "reason": "NoReservation"}
    await tp.ctx.kube.patch_merge(
        current["apiVersion"],
        WORKLOAD,
        name,
        tp.ctx.namespace,
        {"status": {"admission": None, "conditions": [*others, condition, admitted]}},
        status=True,
    )


async def finish(tp: AdmissionPass, phase: str, message: str) -> None:
    """Mark the Workload Finished (Succeeded/Failed) so Kueue returns its quota."""
    if queue_name(tp.owner) is None:
        return
    name = workload_name(tp.owner)
    current = await _read(tp.ctx.kube, WORKLOAD, name, tp.ctx.namespace)
    if current is None:
        return
    conditions = (current.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions):
        return
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": phase,
        "message": message,
        "lastTransitionTime": tp.ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    others = [c for c in conditions if c.get("type") != "Finished"]
    await tp.ctx.kube.patch_merge(
        current["apiVersion"],
        WORKLOAD,
        name,
        tp.ctx.namespace,
        {"status": {"conditions": [*others, finished]}},
        status=True,
    )
