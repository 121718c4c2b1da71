"""The Kueue manager as released, on the shared real control plane, through Kueue's v1beta2 API.

Skipped, naming the binary, when the cache lacks a control-plane binary, Kueue or helm. Checks what
only a running Kueue does: its webhook suspends a queued Job at creation and admits it against the
ClusterQueue's GPU quota while a Job over the quota stays suspended; a queued GEMTraining's gang
waits behind a running Job, is admitted as one Workload (v1beta2), is preempted by a higher-priority
Job (its pods removed, its quota released by the operator) and is admitted again once that Job is
gone; and the operator reads its tiers from a Kueue `Topology` (v1beta2, as TAS defines them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gem_operator.fleet import GPU

from .conftest import KUEUE_NAMESPACE as NAMESPACE
from .conftest import RealCluster, eventually, has_condition

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
KUEUE = f"{GROUP}/{VERSION}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU_QUOTA = 32  # the gang's 4 hosts of 8 GPUs, exactly
SAMPLE = Path(__file__).resolve().parents[2] / "crds" / "samples" / "gemtraining.yaml"
GEMTRAININGS = ("gem.dev", "v1alpha1", NAMESPACE, "gemtrainings")
SMALL = {"requests": {"cpu": "50m", "memory": "64Mi"}}


@pytest.fixture(scope="module")
def queues(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """A ResourceFlavor, a ClusterQueue of 32 GPUs that preempts lower priorities, a LocalQueue, and
    a WorkloadPriorityClass `high`; removed at the end (Kueue deletes a ClusterQueue once empty)."""
    operated = real_cluster
    operated.ensure_operator()
    custom = operated.custom
    flavor = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gpu"}}
    resources = [
        {"name": GPU, "nominalQuota": GPU_QUOTA},
        {"name": "cpu", "nominalQuota": 64},
        {"name": "memory", "nominalQuota": "64Gi"},
    ]
    cluster_queue = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {"coveredResources": [GPU, "cpu", "memory"], "flavors": [{"name": "gpu", "resources": resources}]}
            ],
        },
    }
    local_queue = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "gpu", "namespace": NAMESPACE},
        "spec": {"clusterQueue": "gpu"},
    }
    high = {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000}
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
    custom.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", high)
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "localqueues", local_queue)
    yield operated
    operated.delete_gem_objects(NAMESPACE)
    operated.kubectl("delete", "jobs", "--all", "-n", NAMESPACE, "--cascade=background")
    operated.kubectl("delete", f"localqueues.{GROUP}", "gpu", "-n", NAMESPACE)
    for kind in ("clusterqueues", "resourceflavors", "workloadpriorityclasses"):
        operated.kubectl("delete", f"{kind}.{GROUP}", "--all", "--wait=false")


def _job(name: str, gpus: int, priority: str | None = None) -> dict[str, Any]:
    container = {"name": "train", "image": "gem/train:test", "resources": {"limits": {GPU: str(gpus)}}}
    labels = {QUEUE_LABEL: "gpu", **({PRIORITY_LABEL: priority} if priority else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def _workloads(custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "workloads")["items"]
    return items


def _admitted(custom: client.CustomObjectsApi, owner: str) -> bool:
    return has_condition(_workload_of(custom, owner), "Admitted", "True")


def _workload_of(custom: client.CustomObjectsApi, owner: str) -> dict[str, Any] | None:
    owned = [w for w in _workloads(custom) if any(o["name"] == owner for o in w["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def _ready_pods(core: client.CoreV1Api, selector: str) -> list[Any]:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def _delete_job(batch: client.BatchV1Api, name: str) -> None:
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")


def test_kueue_admits_within_gpu_quota_and_holds_what_exceeds_it(queues: RealCluster) -> None:
    core, batch, custom = queues.core, client.BatchV1Api(queues.api), queues.custom
    fits = batch.create_namespaced_job(NAMESPACE, _job("fits", gpus=8))
    assert fits.spec.suspend is True, "Kueue's webhook suspends a queued Job when it is created"
    too_big = batch.create_namespaced_job(NAMESPACE, _job("too-big", gpus=GPU_QUOTA + 8))
    assert too_big.spec.suspend is True

    eventually("the Workload of 'fits' admitted", lambda: _admitted(custom, "fits"))
    eventually("'fits' resumed by Kueue", lambda: batch.read_namespaced_job("fits", NAMESPACE).spec.suspend is False)
    (pod,) = eventually("the pod of 'fits' Ready on a KWOK node", lambda: _ready_pods(core, "job-name=fits"))
    assert pod.spec.node_name in {n.metadata.name for n in core.list_node().items}

    pending = eventually("a Workload for 'too-big'", lambda: _workload_of(custom, "too-big"))
    assert pending["apiVersion"] == KUEUE
    assert not has_condition(pending, "Admitted", "True")
    assert batch.read_namespaced_job("too-big", NAMESPACE).spec.suspend is True
    assert not core.list_namespaced_pod(NAMESPACE, label_selector="job-name=too-big").items
    for name in ("fits", "too-big"):
        _delete_job(batch, name)
    eventually("the Jobs' Workloads to go", lambda: not _workloads(custom))


def _queued_gang(name: str = "gang", **labels: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: "gpu", **labels}}
    doc["spec"]["workload"]["resources"] = copy.deepcopy(SMALL)
    return doc


def _gang(custom: client.CustomObjectsApi) -> dict[str, Any]:
    found: dict[str, Any] = custom.get_namespaced_custom_object(
        "gem.dev", "v1alpha1", NAMESPACE, "gemtrainings", "gang"
    )
    return found


def _gang_pods(core: client.CoreV1Api) -> list[Any]:
    return list(core.list_namespaced_pod(NAMESPACE, label_selector="gem.dev/instance=gang").items)


def test_the_gang_waits_is_admitted_preempted_and_admitted_again(queues: RealCluster) -> None:
    core, batch, custom = queues.core, client.BatchV1Api(queues.api), queues.custom
    batch.create_namespaced_job(NAMESPACE, _job("blocker", gpus=8))
    eventually("the blocker admitted", lambda: _admitted(custom, "blocker"))

    custom.create_namespaced_custom_object(*GEMTRAININGS, _queued_gang())
    workload = eventually("the gang's Workload", lambda: _workload_of(custom, "gang"))
    assert workload["apiVersion"] == KUEUE and workload["metadata"]["name"] == "gang-workload"
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("workers", 4)]
    eventually("the gang Queued", lambda: (_gang(custom).get("status") or {}).get("phase") == "Queued")
    eventually(
        "Kueue to report the gang pending",
        lambda: has_condition(_workload_of(custom, "gang"), "QuotaReserved", "False"),
    )
    assert not _gang_pods(core), "no pod while 8 of 32 GPUs are taken"

    _delete_job(batch, "blocker")
    eventually("the gang admitted", lambda: _admitted(custom, "gang"), 180)
    eventually("4 gang pods Ready", lambda: len(_ready_pods(core, "gem.dev/instance=gang")) == 4, 180)
    assert has_condition(_gang(custom), "Admitted", "True")

    batch.create_namespaced_job(NAMESPACE, _job("urgent", gpus=8, priority="high"))
    eventually("the gang's pods removed after preemption", lambda: not _gang_pods(core), 180)
    evicted = eventually("the gang evicted", lambda: _evicted(_workload_of(custom, "gang")))
    assert evicted["reason"] == "Preempted", evicted
    eventually("'urgent' admitted", lambda: _admitted(custom, "urgent"), 180)
    eventually("the pod of 'urgent' Ready", lambda: _ready_pods(core, "job-name=urgent"), 180)
    assert not _admitted(custom, "gang")

    _delete_job(batch, "urgent")
    eventually("the gang admitted again", lambda: _admitted(custom, "gang"), 180)
    eventually("4 gang pods Ready again", lambda: len(_ready_pods(core, "gem.dev/instance=gang")) == 4, 180)
    events = core.list_namespaced_event(NAMESPACE, field_selector="involvedObject.name=gang").items
    assert {"WorkloadCreated", "Admitted", "Evicted"} <= {e.reason for e in events}
    assert queues.forbidden() == []
    queues.delete_gem_objects(NAMESPACE)
    eventually("the gang's Workload garbage-collected with it", lambda: _workload_of(custom, "gang") is None)


def test_a_high_priority_gang_preempts_lower_priority_work(queues: RealCluster) -> None:
    core, batch, custom = queues.core, client.BatchV1Api(queues.api), queues.custom
    batch.create_namespaced_job(NAMESPACE, _job("low", gpus=8))
    eventually("'low' admitted", lambda: _admitted(custom, "low"))
    custom.create_namespaced_custom_object(*GEMTRAININGS, _queued_gang("vip", **{PRIORITY_LABEL: "high"}))
    workload = eventually("the Workload of 'vip'", lambda: _workload_of(custom, "vip"))
    # Kueue orders and preempts by spec.priority, which the operator takes from the class.
    assert workload["spec"]["priority"] == 1000
    assert workload["spec"]["priorityClassRef"] == {"group": GROUP, "kind": "WorkloadPriorityClass", "name": "high"}
    evicted = eventually("'low' preempted for the gang", lambda: _evicted(_workload_of(custom, "low")), 180)
    assert evicted["reason"] == "Preempted", evicted
    eventually("'vip' admitted", lambda: _admitted(custom, "vip"), 180)
    eventually("4 pods of 'vip' Ready", lambda: len(_ready_pods(core, "gem.dev/instance=vip")) == 4, 180)
    assert queues.forbidden() == []
    queues.delete_gem_objects(NAMESPACE)
    _delete_job(batch, "low")
    eventually("the Workloads to go", lambda: not _workloads(custom))


def _pending(workload: dict[str, Any] | None) -> dict[str, Any] | None:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "QuotaReserved" and condition["status"] == "False":
            return dict(condition)
    return None


def _evicted(workload: dict[str, Any] | None) -> dict[str, Any] | None:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "Evicted" and condition["status"] == "True":
            return dict(condition)
    return None


def test_tiers_are_read_from_a_kueue_topology(queues: RealCluster) -> None:
    levels = [{"nodeLabel": "gem.dev/block"}, {"nodeLabel": "gem.dev/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
    topology = {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": "gpu"}, "spec": {"levels": levels}}
    queues.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology)
    job = _queued_gang()
    job["metadata"] = {"name": "tas", "namespace": NAMESPACE}
    job["spec"]["topology"] = {"kueueTopology": "gpu"}
    queues.custom.create_namespaced_custom_object(*GEMTRAININGS, job)

    def placement() -> dict[str, Any] | None:
        obj = queues.custom.get_namespaced_custom_object(*GEMTRAININGS, "tas")
        found: dict[str, Any] | None = (obj.get("status") or {}).get("placement")
        return found if has_condition(obj, "Placed", "True") else None

    placed = eventually("the tas job placed", placement)
    assert placed["tierSource"] == "kueue/gpu"
    assert [t["name"] for t in placed["tiers"]] == ["host", "rack", "block"]
    assert queues.forbidden() == []
    queues.delete_gem_objects(NAMESPACE)
    queues.custom.delete_cluster_custom_object(GROUP, VERSION, "topologies", "gpu")
