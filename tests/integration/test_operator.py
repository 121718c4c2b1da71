"""The operator end to end on the embedded cluster: children, status, events, changes, deletion."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.cli.operator import OperatorThread
from gem_testbed.cluster import EmbeddedCluster

pytestmark = pytest.mark.integration
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"
GEM = "gem.dev/v1alpha1"


def sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    return doc


def phase_of(cluster: EmbeddedCluster, kind: str, name: str) -> str | None:
    obj = cluster.get(GEM, kind, name, "default") or {}
    return (obj.get("status") or {}).get("phase")


def wait_phase(cluster: EmbeddedCluster, kind: str, name: str, *phases: str, timeout: float = 30) -> dict[str, Any]:
    cluster.wait_for(lambda: phase_of(cluster, kind, name) in phases, timeout=timeout)
    obj = cluster.get(GEM, kind, name, "default")
    assert obj is not None
    return obj


def children(cluster: EmbeddedCluster, api_version: str, kind: str, instance: str) -> list[dict[str, Any]]:
    return cluster.list(api_version, kind, "default", {"gem.dev/instance": instance})


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def test_samples_reconcile_to_children_and_ready_status(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    for name in ("gemtraining", "rankingservice", "solarisprecompute"):
        cluster.apply(sample(name))

    gemt = wait_phase(cluster, "GEMTraining", "gem-pretrain", "Running")
    assert gemt["status"]["observedGeneration"] == gemt["metadata"]["generation"]
    assert gemt["status"]["worldSize"] == 32 and gemt["status"]["nodes"] == 4
    assert condition(gemt, "Ready")["status"] == "True"
    (svc,) = children(cluster, "v1", "Service", "gem-pretrain")
    assert svc["spec"]["clusterIP"] == "None"
    (cm,) = children(cluster, "v1", "ConfigMap", "gem-pretrain")
    rankmap = json.loads(cm["data"]["rankmap.json"])
    assert [n["ranks"][0] for n in rankmap["nodes"]] == [0, 8, 16, 24]
    pods = sorted(children(cluster, "v1", "Pod", "gem-pretrain"), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == [f"gem-pretrain-worker-{i}" for i in range(4)]
    for i, pod in enumerate(pods):
        env = env_of(pod)
        assert env["WORLD_SIZE"] == "32" and env["NODE_RANK"] == env["PET_NODE_RANK"] == str(i)
        assert env["NPROC_PER_NODE"] == "8"
        assert env["GEM_MESH_SHAPE"] == "pp=2,dp_replicate=1,dp_shard=2,cp=2,tp=4"
        assert env["MASTER_ADDR"] == "gem-pretrain-worker-0.gem-pretrain-rdzv.default.svc"
        assert pod["metadata"]["ownerReferences"][0]["uid"] == gemt["metadata"]["uid"]
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod["metadata"]["labels"])
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"

    rks = wait_phase(cluster, "RankingService", "ads-ranker", "Ready")
    (deploy,) = children(cluster, "apps/v1", "Deployment", "ads-ranker")
    assert deploy["spec"]["replicas"] == 2  # spec.replicas=1 raised to autoscaling.minReplicas
    assert rks["status"]["readyReplicas"] == 2 and rks["status"]["desiredReplicas"] == 2
    assert rks["status"]["selector"] == "gem.dev/kind=rankingservice,gem.dev/instance=ads-ranker,gem.dev/role=server"
    assert len(children(cluster, "v1", "Service", "ads-ranker")) == 1
    init = deploy["spec"]["template"]["spec"]["initContainers"][0]
    assert init["command"] == ["gem-load"] and init["envFrom"] == [{"secretRef": {"name": "model-store-credentials"}}]

    wait_phase(cluster, "SolarisPrecompute", "ads-precompute", "Ready")
    (pdeploy,) = children(cluster, "apps/v1", "Deployment", "ads-precompute")
    assert pdeploy["spec"]["replicas"] == 1

    wait_for_events({("gem-pretrain", "ChildrenCreated"), ("ads-ranker", "ChildrenCreated")})


def test_spec_change_patches_children(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    # With the built-in autoscaler off, spec.replicas (what HPA/KEDA write) drives the Deployment;
    # with it on, the autoscaler does (tests/integration/test_autoscaling.py).
    manual = sample("rankingservice")
    manual["spec"]["autoscaling"] = {"enabled": False}
    cluster.apply(manual)
    wait_phase(cluster, "RankingService", "ads-ranker", "Ready")
    image = "registry.example/gem-workloads:0.2.0"
    spec = {**manual["spec"], "replicas": 5, "workload": {**manual["spec"]["workload"], "image": image}}
    cluster.apply({**manual, "spec": spec})
    cluster.wait_for(lambda: children(cluster, "apps/v1", "Deployment", "ads-ranker")[0]["spec"]["replicas"] == 5)

    def five_ready() -> bool:
        status = (cluster.get(GEM, "RankingService", "ads-ranker", "default") or {}).get("status") or {}
        return status.get("readyReplicas") == 5 and status.get("phase") == "Ready"

    cluster.wait_for(five_ready, timeout=30)
    rks = cluster.get(GEM, "RankingService", "ads-ranker", "default")
    assert rks is not None and rks["status"]["desiredReplicas"] == 5
    (deploy,) = children(cluster, "apps/v1", "Deployment", "ads-ranker")
    assert {c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]} == {image}
    assert rks["status"]["observedGeneration"] == rks["metadata"]["generation"] == 2

    gemt = sample("gemtraining")
    cluster.apply(gemt)
    wait_phase(cluster, "GEMTraining", "gem-pretrain", "Running")
    smaller = copy.deepcopy(gemt)
    smaller["spec"]["parallelism"]["dpShard"] = 1
    smaller["spec"]["parallelism"]["ep"] = 1
    cluster.apply(smaller)

    def shrunk() -> bool:
        pods = children(cluster, "v1", "Pod", "gem-pretrain")
        return len(pods) == 2 and all(env_of(p)["WORLD_SIZE"] == "16" for p in pods)

    cluster.wait_for(shrunk, timeout=30)
    wait_phase(cluster, "GEMTraining", "gem-pretrain", "Running")


def test_deleting_a_resource_removes_its_children(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    cluster.apply(sample("rankingservice"))
    cluster.apply(sample("gemtraining"))
    wait_phase(cluster, "RankingService", "ads-ranker", "Ready")
    wait_phase(cluster, "GEMTraining", "gem-pretrain", "Running")
    cluster.delete(GEM, "RankingService", "ads-ranker", "default")
    cluster.delete(GEM, "GEMTraining", "gem-pretrain", "default")

    def gone() -> bool:
        left = [
            *cluster.list("apps/v1", "Deployment", "default"),
            *cluster.list("v1", "Service", "default", {"app.kubernetes.io/managed-by": "gem-operator"}),
            *cluster.list("v1", "ConfigMap", "default", {"app.kubernetes.io/managed-by": "gem-operator"}),
            *cluster.list("v1", "Pod", "default"),
        ]
        return not left and cluster.get(GEM, "RankingService", "ads-ranker", "default") is None

    # kopf first stops the timers of a deleted object, then releases its finalizer; allow for that.
    cluster.wait_for(gone, timeout=45)


def test_invalid_resource_gets_invalidspec_and_no_children(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    bad = sample("gemtraining")
    bad["metadata"]["name"] = "bad-ep"
    bad["spec"]["parallelism"]["ep"] = 3
    cluster.apply(bad)
    obj = wait_phase(cluster, "GEMTraining", "bad-ep", "Invalid")
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "ep (3) must divide dpShard*cp (4)" in ready["message"]
    cluster.wait_for(
        lambda: any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in cluster.events("default"))
    )
    # The operator keeps serving other resources.
    cluster.apply(sample("rankingservice"))
    wait_phase(cluster, "RankingService", "ads-ranker", "Ready")
    for api_version, kind in (("v1", "Pod"), ("v1", "Service"), ("v1", "ConfigMap")):
        assert children(cluster, api_version, kind, "bad-ep") == []
    # Fixing the spec makes it reconcile normally.
    bad["spec"]["parallelism"]["ep"] = 2
    cluster.apply(bad)
    wait_phase(cluster, "GEMTraining", "bad-ep", "Running")
    warnings = [e for e in cluster.events("default") if e["reason"] == "InvalidSpec"]
    assert len(warnings) == 1, "the same rejection is reported once, not on every resync"


@pytest.mark.parametrize("fleet", ["large"])
def test_restart_mid_reconcile_creates_no_duplicates(
    cluster: EmbeddedCluster, start_operator: type[OperatorThread]
) -> None:
    big = sample("gemtraining")
    big["spec"]["parallelism"]["dpReplicate"] = 4  # 128 GPUs, 16 pods
    first = start_operator()  # type: ignore[call-arg]
    cluster.apply(big)
    cluster.wait_for(lambda: len(children(cluster, "v1", "Pod", "gem-pretrain")) >= 1, interval=0.005)
    first.stop()
    start_operator()  # type: ignore[call-arg]
    wait_phase(cluster, "GEMTraining", "gem-pretrain", "Running", timeout=60)
    pods = children(cluster, "v1", "Pod", "gem-pretrain")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"gem-pretrain-worker-{i}" for i in range(16))
    assert len(children(cluster, "v1", "Service", "gem-pretrain")) == 1
    assert len(children(cluster, "v1", "ConfigMap", "gem-pretrain")) == 1
    assert len({p["metadata"]["uid"] for p in pods}) == 16
