"""The Kueue manager as released, on the real control plane with KWOK GPU nodes.

Skipped, naming the binary, when the cache lacks a control-plane binary or Kueue. Checks what only
a running Kueue does: its webhook suspends a queued Job at creation, the Job's Workload is admitted
against the ClusterQueue's GPU quota and the Job's pod runs on a KWOK node, while a Job that exceeds
the quota stays suspended with its Workload pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from gem_operator.fleet import GPU, make_fleet
from gem_testbed.controlplane import CORE, ControlPlane, missing_binaries
from gem_testbed.controlplane.binaries import KUEUE

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

NAMESPACE = "gem-kueue"
KUEUE_API = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
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
def api() -> Iterator[client.ApiClient]:
    missing = missing_binaries((*CORE, KUEUE))
    if missing:
        pytest.skip("; ".join(str(error) for error in missing))
    with ControlPlane(make_fleet(2, gpus_per_host=8, hosts_per_nvlink_domain=2), kueue=True) as plane:
        api_client = config.new_client_from_config(config_file=str(plane.kubeconfig))
        yield api_client
        api_client.close()


def _queues(custom: client.CustomObjectsApi, gpu_quota: int) -> None:
    group, version = KUEUE_API
    custom.create_cluster_custom_object(
        group,
        version,
        "resourceflavors",
        {"apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}},
    )
    flavor = {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": gpu_quota}]}
    cluster_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [flavor]}]},
    }
    custom.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    local_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": "gpu", "namespace": NAMESPACE},
        "spec": {"clusterQueue": "gpu"},
    }
    custom.create_namespaced_custom_object(group, version, NAMESPACE, "localqueues", local_queue)


def _job(name: str, gpus: int) -> dict[str, Any]:
    container = {"name": "train", "image": "gem/train:test", "resources": {"limits": {GPU: str(gpus)}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: "gpu"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def _workload_of(custom: client.CustomObjectsApi, job: str) -> dict[str, Any] | None:
    group, version = KUEUE_API
    workloads = custom.list_namespaced_custom_object(group, version, NAMESPACE, "workloads")["items"]
    owned = [w for w in workloads if any(o["name"] == job for o in w["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def _condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return str(condition["status"])
    return None


def test_kueue_admits_within_gpu_quota_and_holds_what_exceeds_it(api: client.ApiClient) -> None:
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    _queues(custom, gpu_quota=8)

    fits = batch.create_namespaced_job(NAMESPACE, _job("fits", gpus=8))
    assert fits.spec.suspend is True, "Kueue's webhook suspends a queued Job when it is created"
    too_big = batch.create_namespaced_job(NAMESPACE, _job("too-big", gpus=16))
    assert too_big.spec.suspend is True

    admitted = _eventually(
        "the Workload of 'fits' admitted", lambda: _condition(_workload_of(custom, "fits"), "Admitted") == "True"
    )
    assert admitted
    _eventually("'fits' resumed by Kueue", lambda: batch.read_namespaced_job("fits", NAMESPACE).spec.suspend is False)

    def running_pod() -> Any:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector="job-name=fits").items
        ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        return ready[0] if ready else None

    pod = _eventually("the pod of 'fits' Ready on a KWOK node", running_pod)
    assert pod.spec.node_name in {n.metadata.name for n in core.list_node().items}

    pending = _eventually("a Workload for 'too-big'", lambda: _workload_of(custom, "too-big"))
    assert _condition(pending, "Admitted") != "True"
    assert batch.read_namespaced_job("too-big", NAMESPACE).spec.suspend is True
    assert not core.list_namespaced_pod(NAMESPACE, label_selector="job-name=too-big").items
