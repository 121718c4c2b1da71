"""The pod lifecycle and workload controllers running inside the embedded cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gem_operator.controllers.status import model_load_seconds
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig

pytestmark = pytest.mark.timeout(30)
PODS = "/api/v1/namespaces/default/pods"


def condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def wait_pod(cluster: EmbeddedCluster, name: str, check: Any) -> dict[str, Any]:
    return cluster.wait_for(lambda: (p := cluster.get("v1", "Pod", name, "default")) and check(p) and p, timeout=5)


def test_pod_goes_pending_running_ready(cluster: EmbeddedCluster, pod_factory: Any) -> None:
    cluster.apply(pod_factory("p", gpus=8))
    pod = wait_pod(cluster, "p", lambda p: condition(p, "Ready").get("status") == "True")
    status = pod["status"]
    assert status["phase"] == "Running" and status["podIP"] and status["hostIP"] and status["startTime"]
    assert pod["spec"]["nodeName"].startswith("gpu-")
    assert {c["type"] for c in status["conditions"]} >= {
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
    }
    assert status["containerStatuses"][0]["ready"] is True


def test_scheduling_gates_hold_until_removed_by_merge_patch(
    cluster: EmbeddedCluster, api: Any, pod_factory: Any
) -> None:
    cluster.apply(pod_factory("gated", gpus=1, schedulingGates=[{"name": "gem.dev/placement"}]))
    pod = wait_pod(cluster, "gated", lambda p: condition(p, "PodScheduled").get("reason") == "SchedulingGated")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    status, _ = api.merge(
        f"{PODS}/gated",
        {"spec": {"schedulingGates": None, "nodeSelector": {"kubernetes.io/hostname": "gpu-005"}}},
    )
    assert status == 200
    pod = wait_pod(cluster, "gated", lambda p: condition(p, "Ready").get("status") == "True")
    assert pod["spec"]["nodeName"] == "gpu-005"


def test_gpus_exhausted_leaves_pod_unschedulable_then_binds_when_freed(
    cluster: EmbeddedCluster, pod_factory: Any
) -> None:
    for i in range(8):
        cluster.apply(pod_factory(f"full-{i}", gpus=8))
    cluster.wait_for(lambda: all(p["status"]["phase"] == "Running" for p in cluster.list("v1", "Pod", "default")))
    cluster.apply(pod_factory("extra", gpus=1))
    pod = wait_pod(cluster, "extra", lambda p: condition(p, "PodScheduled").get("reason") == "Unschedulable")
    assert "8 Insufficient nvidia.com/gpu" in condition(pod, "PodScheduled")["message"]
    cluster.delete("v1", "Pod", "full-3", "default")
    wait_pod(cluster, "extra", lambda p: condition(p, "Ready").get("status") == "True")


def test_fail_pod_and_fail_node(cluster: EmbeddedCluster, pod_factory: Any) -> None:
    cluster.apply(pod_factory("a", gpus=8, nodeName="gpu-001"))
    cluster.apply(pod_factory("b", gpus=1))
    wait_pod(cluster, "a", lambda p: condition(p, "Ready").get("status") == "True")
    b = wait_pod(cluster, "b", lambda p: condition(p, "Ready").get("status") == "True")
    failed = cluster.fail_pod("default", "b", reason="OOMKilled")
    assert failed["status"]["phase"] == "Failed" and failed["status"]["reason"] == "OOMKilled"
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    node = cluster.fail_node("gpu-001")
    assert condition(node, "Ready")["status"] == "False"
    a = cluster.get("v1", "Pod", "a", "default")
    assert a is not None and a["status"]["phase"] == "Failed" and a["status"]["reason"] == "NodeLost"
    cluster.apply(pod_factory("c", gpus=8, nodeSelector={"kubernetes.io/hostname": "gpu-001"}))
    wait_pod(cluster, "c", lambda p: "not ready" in condition(p, "PodScheduled").get("message", ""))
    cluster.recover_node("gpu-001")
    wait_pod(cluster, "c", lambda p: condition(p, "Ready").get("status") == "True")
    assert b["spec"]["nodeName"]


def deployment(replicas: int, image: str = "ranker:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ranker", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "ranker"}},
            "template": {
                "metadata": {"labels": {"app": "ranker"}},
                "spec": {
                    "containers": [{"name": "s", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
                },
            },
        },
    }


def test_deployment_scales_up_and_down_and_reports_status(cluster: EmbeddedCluster) -> None:
    cluster.apply(deployment(3))

    def status(ready: int) -> dict[str, Any] | None:
        d = cluster.get("apps/v1", "Deployment", "ranker", "default")
        s = (d or {}).get("status") or {}
        return d if s.get("readyReplicas") == ready and s.get("replicas") == ready else None

    d = cluster.wait_for(lambda: status(3), timeout=5)
    assert d["status"]["observedGeneration"] == d["metadata"]["generation"] == 1
    pods = cluster.list("v1", "Pod", "default", labels="app=ranker")
    names = sorted(p["metadata"]["name"] for p in pods)
    assert [n.rsplit("-", 1)[1] for n in names] == ["0", "1", "2"]
    assert all(len(n.split("-")[1]) == 5 for n in names)
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == d["metadata"]["uid"] for p in pods)
    cluster.apply(deployment(1))
    d = cluster.wait_for(lambda: status(1), timeout=5)
    assert d["status"]["observedGeneration"] == 2
    assert [p["metadata"]["name"] for p in cluster.list("v1", "Pod", "default")] == [names[0]]
    cluster.apply(deployment(1, image="ranker:2"))  # new template: pods replaced
    cluster.wait_for(lambda: [p for p in cluster.list("v1", "Pod", "default") if p["metadata"]["name"] != names[0]])
    cluster.delete("apps/v1", "Deployment", "ranker", "default")
    cluster.wait_for(lambda: not cluster.list("v1", "Pod", "default"), timeout=5)


def test_deployment_rolls_out_keeping_old_pods_until_new_ones_are_ready(cluster: EmbeddedCluster, api: Any) -> None:
    """maxUnavailable 0, maxSurge 1 (what the operator renders): the old pod serves until its successor is Ready."""
    first = deployment(1, image="ranker:1")
    first["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    cluster.apply(first)
    old = cluster.wait_for(
        lambda: [p for p in cluster.list("v1", "Pod", "default") if condition(p, "Ready").get("status") == "True"]
    )[0]
    second = copy.deepcopy(first)
    second["spec"]["template"]["spec"]["containers"][0]["image"] = "ranker:2"
    second["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": "gem.dev/ModelLoaded"}]
    cluster.apply(second)
    new = cluster.wait_for(
        lambda: [
            p
            for p in cluster.list("v1", "Pod", "default")
            if p["metadata"]["name"] != old["metadata"]["name"]
            and condition(p, "ContainersReady").get("status") == "True"
        ]
    )[0]
    names = {p["metadata"]["name"] for p in cluster.list("v1", "Pod", "default")}
    assert names == {old["metadata"]["name"], new["metadata"]["name"]}  # a surge of one, the old one kept
    d = cluster.get("apps/v1", "Deployment", "ranker", "default") or {}
    assert d["status"]["readyReplicas"] == 1 and d["status"]["updatedReplicas"] == 1
    loaded = {"type": "gem.dev/ModelLoaded", "status": "True"}
    api.merge(
        f"{PODS}/{new['metadata']['name']}/status", {"status": {"conditions": [*new["status"]["conditions"], loaded]}}
    )
    cluster.wait_for(
        lambda: [p["metadata"]["name"] for p in cluster.list("v1", "Pod", "default")] == [new["metadata"]["name"]],
        timeout=5,
    )


def test_daemonset_runs_one_pod_per_matching_node(cluster: EmbeddedCluster) -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "dcgm"}},
            "template": {
                "metadata": {"labels": {"app": "dcgm"}},
                "spec": {"nodeSelector": {"nvidia.com/gpu.clique": "nvl-0"}, "containers": [{"name": "e"}]},
            },
        },
    }
    cluster.apply(ds)
    d = cluster.wait_for(
        lambda: (
            (d := cluster.get("apps/v1", "DaemonSet", "dcgm", "default"))
            and (d.get("status") or {}).get("numberReady") == 4
            and d
        ),
        timeout=5,
    )
    assert d["status"]["desiredNumberScheduled"] == 4
    nodes = sorted(p["spec"]["nodeName"] for p in cluster.list("v1", "Pod", "default"))
    assert nodes == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]


async def test_async_mode_with_delays() -> None:
    async with EmbeddedCluster(fleet="demo", lifecycle=LifecycleConfig(start_delay=0.05, ready_delay=0.05)) as cluster:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}]},
        }
        await cluster.aapply(pod)
        import asyncio

        for _ in range(100):
            got = await cluster.aget("v1", "Pod", "p", "default")
            if condition(got, "Ready").get("status") == "True":
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("pod never became ready")
        with pytest.raises(RuntimeError, match="a\\* helpers"):
            cluster.get("v1", "Pod", "p", "default")


def test_readiness_gates_hold_ready_until_their_condition_is_true(
    cluster: EmbeddedCluster, api: Any, pod_factory: Any
) -> None:
    cluster.apply(pod_factory("gate", readinessGates=[{"conditionType": "gem.dev/ModelLoaded"}]))
    pod = wait_pod(cluster, "gate", lambda p: condition(p, "ContainersReady").get("status") == "True")
    assert condition(pod, "Ready")["status"] == "False"
    loaded = {"type": "gem.dev/ModelLoaded", "status": "True"}
    api.merge(f"{PODS}/gate/status", {"status": {"conditions": [*pod["status"]["conditions"], loaded]}})
    wait_pod(cluster, "gate", lambda p: condition(p, "Ready").get("status") == "True")


def test_init_containers_run_before_the_pod_starts_and_report_the_model_load(
    cluster: EmbeddedCluster, pod_factory: Any
) -> None:
    loader = {"name": "model-loader", "image": "gem", "command": ["gem-load"], "args": ["pull", "s3://m/v1", "/m"]}
    other = {"name": "setup", "image": "busybox", "command": ["true"]}
    cluster.apply(pod_factory("loading", gpus=1, initContainers=[loader, other]))
    pod = wait_pod(cluster, "loading", lambda p: condition(p, "Initialized").get("status") == "False")
    assert pod["status"]["phase"] == "Pending" and condition(pod, "Ready")["reason"] == "PodInitializing"
    assert [s["state"].keys() for s in pod["status"]["initContainerStatuses"]] == [{"running"}, {"running"}]
    pod = wait_pod(cluster, "loading", lambda p: condition(p, "Ready").get("status") == "True")
    loaded, setup = pod["status"]["initContainerStatuses"]
    assert loaded["state"]["terminated"]["exitCode"] == 0 and setup["state"]["terminated"]["exitCode"] == 0
    assert "message" not in setup["state"]["terminated"]
    assert model_load_seconds([pod]) == pytest.approx(LifecycleConfig().init_delay)
