"""A real control plane (etcd, kube-apiserver, controller manager, scheduler, KWOK GPU nodes).

Runs on the session's control plane (conftest.py), which needs the binaries that
scripts/control-plane/build.sh puts in the cache; without them the test is skipped and the reason
names each missing binary. Checks what only real components do: the scheduler
binds a GPU pod to a KWOK node, KWOK walks it through init containers to Ready, PodSecurity rejects a
privileged pod, and the garbage collector removes the ReplicaSet and pods of a deleted Deployment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gem_operator.fleet import GPU
from gem_testbed.controlplane import INIT_MESSAGE_ANNOTATION, ControlPlane

from .conftest import RealCluster

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

NAMESPACE = "gem-cp"
LABELS = {"app": "ranker"}
INIT_MESSAGE = '{"loaded_bytes": 1048576, "seconds": 2.5}'
T = TypeVar("T")


def _eventually(what: str, probe: Callable[[], T | None], timeout: float = 180.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def cluster(real_cluster: RealCluster) -> tuple[ControlPlane, client.ApiClient]:
    """The session's control plane (conftest.py); this module works in its own namespace."""
    return real_cluster.plane, real_cluster.api


def _restricted_pod_spec(gpus: int) -> dict[str, Any]:
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "initContainers": [{"name": "loader", "image": "gem/loader:test", "securityContext": security}],
        "containers": [
            {
                "name": "server",
                "image": "gem/server:test",
                "resources": {"limits": {GPU: str(gpus)}},
                "securityContext": security,
            }
        ],
    }


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ranker", "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS, "annotations": {INIT_MESSAGE_ANNOTATION: INIT_MESSAGE}},
                "spec": _restricted_pod_spec(gpus=4),
            },
        },
    }


def _pods(core: client.CoreV1Api) -> list[Any]:
    return list(core.list_namespaced_pod(NAMESPACE, label_selector="app=ranker").items)


def _all_ready(pods: list[Any], count: int) -> list[Any] | None:
    def ready(pod: Any) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])

    return pods if len(pods) == count and all(ready(p) for p in pods) else None


def test_deployment_runs_on_kwok_gpu_nodes_and_is_garbage_collected(
    cluster: tuple[ControlPlane, client.ApiClient],
) -> None:
    _, api = cluster
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace({"metadata": {"name": NAMESPACE, "labels": labels}})
    _eventually("the default service account", lambda: core.list_namespaced_service_account(NAMESPACE).items)

    privileged = _restricted_pod_spec(gpus=1)
    privileged["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": "privileged"}, "spec": privileged})
    assert rejected.value.status == 403 and "PodSecurity" in str(rejected.value.body)

    apps.create_namespaced_deployment(NAMESPACE, _deployment())
    pods = _eventually("2 ranker pods Ready", lambda: _all_ready(_pods(core), 2))

    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert {p.spec.node_name for p in pods} <= set(nodes), "bound to the fleet's nodes by the scheduler"
    for pod in pods:
        assert nodes[pod.spec.node_name].status.allocatable[GPU] == "8"
        assert pod.status.phase == "Running"
        terminated = pod.status.init_container_statuses[0].state.terminated
        assert terminated.exit_code == 0 and terminated.message == INIT_MESSAGE
        assert pod.status.container_statuses[0].ready
        owner = pod.metadata.owner_references[0]
        assert owner.kind == "ReplicaSet" and owner.controller

    replica_sets = apps.list_namespaced_replica_set(NAMESPACE).items
    assert [rs.metadata.owner_references[0].kind for rs in replica_sets] == ["Deployment"]

    apps.delete_namespaced_deployment("ranker", NAMESPACE, propagation_policy="Background")
    _eventually(
        "the garbage collector to remove the ReplicaSet and its pods",
        lambda: not apps.list_namespaced_replica_set(NAMESPACE).items and not _pods(core),
    )
