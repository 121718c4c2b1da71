"""Minimal Deployment and DaemonSet controllers for the embedded cluster.

Just enough for the demo and tests to see workload children behave: a Deployment keeps
`spec.replicas` pods of its current template (a template change rolls out with the strategy's
maxSurge/maxUnavailable, or all at once for Recreate) and reports ready and updated replicas; a
DaemonSet keeps one pod per matching node. No ReplicaSets, no history: the operator under test
only reads pods and status counts.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Protocol

from gem_testbed.emulator.objects import Obj, owned_by
from gem_testbed.kubelets.scheduling import FINISHED, affinity_matches, untolerated_taint

HASH_LABEL = "pod-template-hash"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class Store(Protocol):
    """What the controllers need from the emulator (kept narrow for testing)."""

    async def create_object(
        self, res: Any, obj: Obj, namespace: str | None = None, *, keep_status: bool = False
    ) -> Obj: ...

    async def patch_object(
        self,
        res: Any,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        replace: bool = False,
    ) -> Obj: ...

    async def delete_object(self, res: Any, namespace: str | None, name: str, *, orphan: bool = False) -> Obj: ...


def short_hash(value: Any) -> str:
    """Five characters from the alphabet Kubernetes uses for generated name suffixes."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def is_ready(pod: Obj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_from_template(owner: Obj, name: str, template_hash: str) -> Obj:
    template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    meta = template.get("metadata") or {}
    return {
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), HASH_LABEL: template_hash},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [_owner_ref(owner)],
        },
        "spec": template.get("spec") or {"containers": []},
    }


def _index(pod: Obj) -> int:
    tail = pod["metadata"]["name"].rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _count(value: Any, replicas: int, round_up: bool, default: str) -> int:
    """maxSurge / maxUnavailable: an int, or a percentage of replicas (surge rounds up, unavailable down)."""
    value = default if value is None else value
    if isinstance(value, str) and value.endswith("%"):
        share = replicas * float(value[:-1]) / 100
        return int(-(-share // 1)) if round_up else int(share // 1)
    return int(value)


def _rolling_bounds(deploy: Obj, want: int) -> tuple[int, int] | None:
    """(most pods at once, fewest ready pods) of a RollingUpdate Deployment; None for Recreate."""
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return None
    rolling = strategy.get("rollingUpdate") or {}
    surge = _count(rolling.get("maxSurge"), want, True, "25%")
    unavailable = _count(rolling.get("maxUnavailable"), want, False, "25%")
    if surge == 0 and unavailable == 0:
        surge = 1  # what the API server's validation forces: a rollout must be able to move
    return want + surge, want - unavailable


async def reconcile_deployment(store: Store, pods_res: Any, deploy_res: Any, deploy: Obj, pods: list[Obj]) -> None:
    """Converge one Deployment's pods to `spec.replicas` of its current template; write status.

    A template change rolls as a RollingUpdate Deployment does: pods of the new template are added
    up to maxSurge above the replicas, and old pods go only while the ready pods stay at least
    replicas - maxUnavailable (old pods that are not ready go first); Recreate replaces them at once.
    """
    meta = deploy["metadata"]
    if meta.get("deletionTimestamp"):
        return
    namespace, name = meta["namespace"], meta["name"]
    template_hash = short_hash((deploy.get("spec") or {}).get("template") or {})
    want = int((deploy.get("spec") or {}).get("replicas", 1))
    owned = [p for p in pods if owned_by(p, meta["uid"])]
    finished = [p for p in owned if (p.get("status") or {}).get("phase") in FINISHED]
    live = [p for p in owned if p not in finished]
    old = [p for p in live if (p["metadata"].get("labels") or {}).get(HASH_LABEL) != template_hash]
    current = sorted((p for p in live if p not in old), key=_index)
    bounds = _rolling_bounds(deploy, want)
    doomed = finished + current[want:]
    current = current[:want]
    if bounds is None:
        doomed += old
        old = []
    else:
        fewest_ready = bounds[1]
        ready = sum(1 for p in current + old if is_ready(p))
        for pod in sorted(old, key=is_ready):  # not-ready old pods first: they serve nothing
            if is_ready(pod) and ready - 1 < fewest_ready:
                continue
            ready -= 1 if is_ready(pod) else 0
            doomed.append(pod)
        old = [p for p in old if p not in doomed]
    for pod in doomed:
        await store.delete_object(pods_res, namespace, pod["metadata"]["name"])
    used = {_index(p) for p in current}
    free = (i for i in range(want + len(used) + 1) if i not in used)
    room = want - len(current) if bounds is None else min(want - len(current), bounds[0] - len(current) - len(old))
    for _ in range(max(0, room)):
        pod_name = f"{name}-{template_hash}-{next(free)}"
        await store.create_object(pods_res, _pod_from_template(deploy, pod_name, template_hash), namespace)
        current.append({"metadata": {"name": pod_name}})
    ready = sum(1 for p in current + old if is_ready(p))
    updated_ready = sum(1 for p in current if is_ready(p))
    status = {
        "observedGeneration": meta.get("generation", 1),
        "replicas": len(current) + len(old),
        "updatedReplicas": len(current),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(0, want - ready),
        "conditions": [
            {
                "type": "Available",
                "status": "True" if ready >= want else "False",
                "reason": "MinimumReplicasAvailable" if ready >= want else "MinimumReplicasUnavailable",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if updated_ready >= want and not old else "ReplicaSetUpdated",
            },
        ],
    }
    await store.patch_object(deploy_res, namespace, name, {"status": status}, subresource="status")


async def reconcile_daemonset(
    store: Store, pods_res: Any, ds_res: Any, ds: Obj, nodes: list[Obj], pods: list[Obj]
) -> None:
    """Converge one DaemonSet to one pod per node its template selects and tolerates."""
    meta = ds["metadata"]
    if meta.get("deletionTimestamp"):
        return
    namespace, name = meta["namespace"], meta["name"]
    template = (ds.get("spec") or {}).get("template") or {}
    template_hash = short_hash(template)
    probe = {"spec": template.get("spec") or {}}
    targets = [n for n in nodes if affinity_matches(probe, n) and untolerated_taint(probe, n) is None]
    wanted = {f"{name}-{short_hash([template_hash, n['metadata']['name']])}": n for n in targets}
    owned = {p["metadata"]["name"]: p for p in pods if owned_by(p, meta["uid"])}
    for pod_name, pod in owned.items():
        if pod_name not in wanted or (pod.get("status") or {}).get("phase") in FINISHED:
            await store.delete_object(pods_res, namespace, pod_name)
    for pod_name, node in wanted.items():
        if pod_name not in owned or (owned[pod_name].get("status") or {}).get("phase") in FINISHED:
            pod = _pod_from_template(ds, pod_name, template_hash)
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            await store.create_object(pods_res, pod, namespace)
    live = [p for n, p in owned.items() if n in wanted and (p.get("status") or {}).get("phase") not in FINISHED]
    ready = sum(1 for p in live if is_ready(p))
    status = {
        "observedGeneration": meta.get("generation", 1),
        "desiredNumberScheduled": len(wanted),
        "currentNumberScheduled": len(live),
        "updatedNumberScheduled": len(live),
        "numberReady": ready,
        "numberAvailable": ready,
        "numberMisscheduled": 0,
    }
    await store.patch_object(ds_res, namespace, name, {"status": status}, subresource="status")


def simulated_init_message(container: Obj, seconds: float) -> str | None:
    """What an init container leaves in its termination message when it exits in the simulation.

    The model loader (`gem-load pull ... --termination-log`) reports its load time there
    (docs/contracts.md), and the operator turns it into `status.modelLoadSeconds`; the
    simulation reports the simulated run time and marks the result as simulated. Other init
    containers write nothing.
    """
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not any("gem-load" in str(part) for part in argv) or "pull" not in argv:
        return None
    return json.dumps({"seconds": round(seconds, 3), "simulated": True})
