"""The operator installed by its chart on a real control plane, running with the chart's ServiceAccount token.

One control plane for the module (skipped, naming the binary, when one is missing): CRDs applied
server-side, `helm install` of charts/gem-operator, `gemop run` as a local process with a token from
the TokenRequest API. A GEMTraining's gang is created, ungated, bound by the real scheduler, walked
to Ready by KWOK and restarted when KWOK fails one of its pods; a RankingService's Deployment runs
and its status reports the loader's time; `gemop plan` reads `kubectl get nodes,pods -A -o json` of
it; the operator got no 403 for any of it, and a call outside the chart's RBAC is found as one.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gem_operator.fleet import GPU, make_fleet
from gem_testbed.controlplane import CORE, ControlPlane, missing_binaries
from gem_testbed.controlplane.binaries import HELM
from gem_testbed.controlplane.kwok import FAIL_ANNOTATION
from gem_testbed.controlplane.operator import (
    OperatorInstall,
    OperatorProcess,
    forbidden_requests,
    install_operator,
    request_count,
)

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

NAMESPACE = "gem-work"
GROUP, VERSION = "gem.dev", "v1alpha1"
T = TypeVar("T")


def _eventually(what: str, probe: Callable[[], T | None], timeout: float = 180.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class Rig:
    def __init__(self, plane: ControlPlane, install: OperatorInstall, operator: OperatorProcess) -> None:
        self.plane, self.install, self.operator = plane, install, operator
        self.api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    missing = missing_binaries((*CORE, HELM))
    if missing:
        pytest.skip("; ".join(str(error) for error in missing))
    fleet = make_fleet(4, gpus_per_host=8, hosts_per_nvlink_domain=2)
    with ControlPlane(fleet) as plane:
        install = install_operator(plane, watched=(NAMESPACE,))
        with OperatorProcess(plane, install, env={"GEM_RESYNC_SECONDS": "2"}) as operator:
            rig = Rig(plane, install, operator)
            yield rig
            rig.api.close()
    assert not plane.state_dir.exists()


def _create(rig: Rig, plural: str, body: dict[str, Any]) -> None:
    rig.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_the_chart_installs_a_least_privilege_account(rig: Rig) -> None:
    assert rig.install.username == f"system:serviceaccount:gem-system:{rig.install.service_account}"
    assert os.stat(rig.install.kubeconfig).st_mode & 0o077 == 0, "the token kubeconfig is private"
    chart = client.AppsV1Api(rig.api).list_namespaced_deployment("gem-system").items
    assert [d.spec.replicas for d in chart] == [0], "the chart's own Deployment is scaled away"
    peering = rig.custom.get_namespaced_custom_object("kopf.dev", "v1", NAMESPACE, "kopfpeerings", "gem-operator")
    assert peering["metadata"]["labels"]["app.kubernetes.io/instance"] == rig.install.release


def test_a_gang_runs_on_kwok_nodes_with_the_charts_rbac(rig: Rig) -> None:
    training = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GEMTraining",
        "metadata": {"name": "small", "namespace": NAMESPACE},
        "spec": {
            "parallelism": {"pp": 2, "dpReplicate": 1, "dpShard": 1, "cp": 1, "tp": 8, "ep": 1},
            "gpusPerNode": 8,
            "checkpoint": {"uri": "s3://ckpt/small"},
            "failurePolicy": {"maxRestarts": 3, "backoffSeconds": 0},
        },
    }
    _create(rig, "gemtrainings", training)

    def gang_ready() -> list[Any] | None:
        pods = rig.core.list_namespaced_pod(NAMESPACE, label_selector="gem.dev/instance=small").items
        return pods if len(pods) == 2 and all(_ready(p) for p in pods) else None

    pods = _eventually("the 2-pod gang Ready", gang_ready)
    nodes = {n.metadata.name for n in rig.core.list_node().items}
    assert {p.spec.node_name for p in pods} <= nodes
    assert len({p.spec.node_name for p in pods}) == 2, "one 8-GPU pod per node"
    assert all(not p.spec.scheduling_gates for p in pods), "the operator ungated them"

    # Failure injection: KWOK fails the annotated pod, and the operator restarts the gang.
    failed = pods[0].metadata.name
    rig.core.patch_namespaced_pod(failed, NAMESPACE, {"metadata": {"annotations": {FAIL_ANNOTATION: "137"}}})

    def restarts() -> int:
        body = rig.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "gemtrainings", "small")
        return int((body.get("status") or {}).get("restarts") or 0)

    assert _eventually("a gang restart after the injected failure", restarts) == 1

    service = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RankingService",
        "metadata": {"name": "ranker", "namespace": NAMESPACE},
        "spec": {
            "gpusPerReplica": 1,
            "port": 8080,
            "model": {"uri": "s3://gem-models/ranker/v1"},
            "slo": {"p99LatencyMs": 40},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
        },
    }
    _create(rig, "rankingservices", service)

    def load_seconds() -> float | None:
        body = rig.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "rankingservices", "ranker")
        value = (body.get("status") or {}).get("modelLoadSeconds")
        return float(value) if value is not None else None

    assert _eventually("status.modelLoadSeconds from the loader's termination message", load_seconds) > 0

    assert forbidden_requests(rig.plane, rig.install.username) == []
    assert rig.operator.forbidden_log_lines() == []
    assert request_count(rig.plane, rig.install.username) > 0, "the audit log records the operator's calls"


def test_plan_reads_this_clusters_export(rig: Rig, tmp_path: pathlib.Path) -> None:
    def gang_ready() -> bool:
        pods = rig.core.list_namespaced_pod(NAMESPACE, label_selector="gem.dev/instance=small").items
        return len(pods) == 2 and all(_ready(p) for p in pods)

    _eventually("the restarted gang Ready", gang_ready)
    export = tmp_path / "cluster.json"
    kubectl = ["kubectl", f"--kubeconfig={rig.plane.kubeconfig}", "get", "nodes,pods", "-A", "-o", "json"]
    export.write_text(subprocess.run(kubectl, capture_output=True, text=True, check=True, timeout=60).stdout)
    items = json.loads(export.read_text())["items"]
    busy = {p["spec"].get("nodeName") for p in items if p["kind"] == "Pod" and _requests_gpus(p)}
    free = sorted(n["metadata"]["name"] for n in items if n["kind"] == "Node" and n["metadata"]["name"] not in busy)
    assert len(free) == 1, "the gang fills two nodes and the ranker takes a GPU of a third"

    def plan(hosts: int) -> subprocess.CompletedProcess[str]:
        job = tmp_path / "job.yaml"
        spec = {"parallelism": {"pp": hosts, "tp": 8}, "checkpoint": {"uri": "s3://c/one"}}
        job.write_text(json.dumps({"kind": "GEMTraining", "spec": spec}))
        argv = ["plan", str(job), "--nodes", str(export), "--output", "json"]
        return subprocess.run([sys.executable, "-m", "gem_operator.cli", *argv], capture_output=True, text=True)

    one = plan(1)
    assert one.returncode == 0, one.stderr
    assert "4 nodes, " in one.stderr, "the export's pods are read with its nodes"
    assert json.loads(one.stdout)["nodes"] == free, "GPUs of the bound pods count as used"
    assert plan(2).returncode == 1, "two free hosts are not there"


def _requests_gpus(pod: dict[str, Any]) -> bool:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    containers = pod["spec"].get("containers") or []
    return any(GPU in ((c.get("resources") or {}).get("limits") or {}) for c in containers)


def test_a_call_outside_the_charts_rbac_is_reported(rig: Rig) -> None:
    # Runs last: it puts a 403 on the operator's account on purpose.
    with (
        config.new_client_from_config(config_file=str(rig.install.kubeconfig)) as token_client,
        pytest.raises(ApiException) as denied,
    ):
        client.CoreV1Api(token_client).list_namespaced_secret(NAMESPACE)
    assert denied.value.status == 403
    found = _eventually("the denial in the audit log", lambda: forbidden_requests(rig.plane, rig.install.username))
    assert found == [f"{rig.install.username} list secrets in {NAMESPACE}: HTTP 403"]
