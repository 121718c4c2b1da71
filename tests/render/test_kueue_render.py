"""The gang's Kueue Workload and how Kueue's status on it is read."""

from __future__ import annotations

from typing import Any

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import Owner
from gem_operator.render.kueue import (
    KUEUE_API_VERSION,
    KUEUE_LEGACY_API_VERSION,
    assigned_flavors,
    decide,
    flavor_node_labels,
    queue_name,
    render_workload,
)
from gem_operator.render.training import render_training

QUEUED = Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1", (("kueue.x-k8s.io/queue-name", "gpu"),))


def spec(**extra: Any) -> GEMTrainingSpec:
    return GEMTrainingSpec.model_validate(
        {"parallelism": {"dpShard": 4, "tp": 8}, "gpusPerNode": 8, "checkpoint": {"uri": "s3://c/job"}, **extra}
    )


def test_one_pod_set_describes_the_whole_gang() -> None:
    s = spec()
    pod = render_training(QUEUED, s).pods[0]
    wl = render_workload(QUEUED, s, pod, "gpu")
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2" and wl["kind"] == "Workload"
    assert wl["metadata"]["name"] == "job-workload"
    assert wl["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert wl["spec"]["queueName"] == "gpu" and wl["spec"]["active"] is True
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["count"] == 4  # 32 GPUs, one pod per 8-GPU host
    trainer = pod_set["template"]["spec"]["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "env" not in trainer  # only what Kueue accounts for
    # A different gang shape is a different Workload (podSets are immutable in Kueue).
    wider = spec(parallelism={"dpShard": 8, "tp": 8})
    other = render_workload(QUEUED, wider, render_training(QUEUED, wider).pods[0], "gpu")
    assert other["metadata"]["annotations"] != wl["metadata"]["annotations"]
    held = render_workload(QUEUED, spec(suspend=True), pod, "gpu")
    assert held["spec"]["active"] is False


def test_the_priority_class_label_is_spelled_per_api_version() -> None:
    labels = (("kueue.x-k8s.io/queue-name", "gpu"), ("kueue.x-k8s.io/priority-class", "batch-high"))
    owner = Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1", labels)
    s = spec()
    pod = render_training(owner, s).pods[0]
    current = render_workload(owner, s, pod, "gpu")
    assert current["apiVersion"] == KUEUE_API_VERSION == "kueue.x-k8s.io/v1beta2"
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "batch-high"}
    assert current["spec"]["priorityClassRef"] == ref and "priorityClassName" not in current["spec"]
    legacy = render_workload(owner, s, pod, "gpu", KUEUE_LEGACY_API_VERSION)
    assert legacy["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert legacy["spec"]["priorityClassName"] == "batch-high" and "priorityClassRef" not in legacy["spec"]
    assert legacy["spec"]["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert legacy["metadata"]["annotations"] == current["metadata"]["annotations"], "same gang, same hash"
    assert current["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "batch-high"
    assert "priority" not in current["spec"], "no value known: Kueue's default priority"
    valued = render_workload(owner, s, pod, "gpu", KUEUE_API_VERSION, 1000)
    assert valued["spec"]["priority"] == 1000 and valued["spec"]["priorityClassRef"] == ref


def test_queue_name_only_from_the_label() -> None:
    assert queue_name(QUEUED) == "gpu"
    assert queue_name(Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1")) is None
    assert queue_name(Owner("g/v", "GEMTraining", "j", "ml", "u", (("kueue.x-k8s.io/queue-name", " "),))) is None


def _cond(type_: str, status: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": type_, "message": message}


def test_decisions_follow_kueue_status() -> None:
    assert not decide(None, "gpu").admitted
    pending = decide({"status": {"conditions": [_cond("QuotaReserved", "False", "insufficient quota")]}}, "gpu")
    assert not pending.admitted and "insufficient quota" in pending.message
    admission = {"clusterQueue": "cq", "podSetAssignments": [{"name": "workers", "count": 4}]}
    ok = decide({"status": {"admission": admission}}, "gpu")
    assert ok.admitted and ok.cluster_queue == "cq"
    checks = decide({"status": {"admission": admission, "conditions": [_cond("Admitted", "False")]}}, "gpu")
    assert not checks.admitted  # quota reserved, admission checks still pending
    evicted = decide(
        {
            "status": {
                "admission": admission,
                "conditions": [_cond("Admitted", "True"), _cond("Evicted", "True", "Preempted")],
            }
        },
        "gpu",
    )
    assert evicted.evicted and not evicted.admitted and "Preempted" in evicted.message


def test_admitted_flavors_and_their_node_labels() -> None:
    admission = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "workers", "flavors": {"nvidia.com/gpu": "h100-rack1", "cpu": "default", "memory": "default"}},
            {"name": "other", "flavors": {"cpu": "spot"}},
        ],
    }
    assert assigned_flavors(admission) == ("h100-rack1", "default")
    flavors = [{"spec": {"nodeLabels": {"gem.dev/rack": "rack-1"}}}, {"spec": {}}]
    assert flavor_node_labels(flavors) == {"gem.dev/rack": "rack-1"}
