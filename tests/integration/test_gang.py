"""GEMTraining gangs on a 32-host fleet (4 NVLink domains, 2 racks): placed, gated, ungated,
restarted from checkpoint after a node dies, suspended and resumed, and explained when impossible."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gem_operator.cli.operator import OperatorThread
from gem_testbed.cluster import EmbeddedCluster

pytestmark = pytest.mark.integration
GEM = "gem.dev/v1alpha1"


@pytest.fixture
def fleet() -> str:
    return "large"


def job(name: str = "pretrain", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "parallelism": {"pp": 2, "dpShard": 2, "cp": 2, "tp": 4, "ep": 2},  # 32 GPUs, 4 pods
        "gpusPerNode": 8,
        "checkpoint": {"uri": "s3://ckpt/pretrain", "intervalSteps": 100},
        "failurePolicy": {"maxRestarts": 3, "backoffSeconds": 1},
    }
    base.update(spec)
    return {"apiVersion": GEM, "kind": "GEMTraining", "metadata": {"name": name, "namespace": "default"}, "spec": base}


def get(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    return cluster.get(GEM, "GEMTraining", name, "default") or {}


def phase(cluster: EmbeddedCluster, name: str) -> str | None:
    return (get(cluster, name).get("status") or {}).get("phase")


def pods(cluster: EmbeddedCluster, name: str) -> list[dict[str, Any]]:
    found = cluster.list("v1", "Pod", "default", {"gem.dev/instance": name})
    return sorted(found, key=lambda p: int(p["metadata"]["labels"]["gem.dev/node-rank"]))


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def condition(cluster: EmbeddedCluster, name: str, type_: str) -> dict[str, Any]:
    conds = (get(cluster, name).get("status") or {}).get("conditions", [])
    return next((c for c in conds if c["type"] == type_), {})


def test_gang_is_placed_gated_ungated_and_ranks_follow_placement(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    cluster.apply(job())
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    status = get(cluster, "pretrain")["status"]
    planned = status["placement"]["nodes"]
    assert len(planned) == 4 and status["placement"]["planner"]
    assert condition(cluster, "pretrain", "Placed")["status"] == "True"
    running = pods(cluster, "pretrain")
    nodes = {n["metadata"]["name"]: n for n in cluster.list("v1", "Node")}
    for rank, pod in enumerate(running):
        assert pod["spec"]["nodeName"] == planned[rank]  # the node rank is where the planner put it
        assert not pod["spec"].get("schedulingGates")
        assert env(pod)["NODE_RANK"] == str(rank)
    # tp=4 x cp=2 inside a host, and the whole 32-GPU job inside one NVLink domain, so the
    # TorchRec sharding group (unset in the spec) spans all 32 ranks.
    assert len({nodes[n]["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in planned}) == 1
    assert status["placement"]["embeddingShardingGroup"] == 32
    assert {env(p)["GEM_EMBEDDING_SHARDING_GROUP"] for p in running} == {"32"}
    rankmap = json.loads(cluster.get("v1", "ConfigMap", "pretrain-config", "default")["data"]["rankmap.json"])
    assert [n["node"] for n in rankmap["nodes"]] == planned
    wait_for_events({("pretrain", "Placed"), ("pretrain", "Ungated")})


def test_node_failure_replaces_away_from_it_and_resumes_from_checkpoint(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    cluster.apply(job())
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    # The trainer on rank 1 crashes after saving step 200 (its termination message says so).
    cluster.fail_pod("default", "pretrain-worker-1", "Error", 1, json.dumps({"checkpoint": "step-000200"}))
    cluster.wait_for(lambda: (get(cluster, "pretrain").get("status") or {}).get("restarts") == 1, timeout=30)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    assert get(cluster, "pretrain")["status"]["lastCheckpoint"] == "step-000200"
    restarting = condition(cluster, "pretrain", "Restarting")
    assert restarting["status"] == "False" and restarting["reason"] == "RestartCompleted", restarting
    assert all(env(p)["GEM_RESUME_FROM"] == "step-000200" for p in pods(cluster, "pretrain"))

    victim = pods(cluster, "pretrain")[2]["spec"]["nodeName"]
    cluster.fail_node(victim)
    cluster.wait_for(lambda: (get(cluster, "pretrain").get("status") or {}).get("restarts") == 2, timeout=30)
    wait_for_events({("pretrain", "Restarting")})
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    status = get(cluster, "pretrain")["status"]
    assert victim not in status["placement"]["nodes"] and victim in status["excludedNodes"]
    assert all(p["spec"]["nodeName"] != victim for p in pods(cluster, "pretrain"))
    assert all(env(p)["GEM_RESUME_FROM"] == "step-000200" for p in pods(cluster, "pretrain"))
    assert victim in status["lastFailure"]


def test_restart_budget_is_respected(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    cluster.apply(job(failurePolicy={"maxRestarts": 1, "backoffSeconds": 0}))
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    cluster.fail_pod("default", "pretrain-worker-0")
    cluster.wait_for(lambda: (get(cluster, "pretrain").get("status") or {}).get("restarts") == 1, timeout=30)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    cluster.fail_pod("default", "pretrain-worker-3", "OOMKilled", 137)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Failed", timeout=30)
    failed = condition(cluster, "pretrain", "Failed")
    assert failed["reason"] == "RestartBudgetExhausted" and "OOMKilled" in failed["message"]


def test_replica_group_scope_restarts_only_the_failed_replica(
    cluster: EmbeddedCluster, operator: OperatorThread
) -> None:
    spec = {"parallelism": {"dpReplicate": 2, "dpShard": 2, "tp": 8}, "failurePolicy": {"scope": "ReplicaGroup",
            "maxRestarts": 3, "backoffSeconds": 0}}  # fmt: skip
    cluster.apply(job(**spec))
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, "pretrain")}
    cluster.fail_pod("default", "pretrain-worker-3")  # replica 1 = node ranks 2 and 3
    cluster.wait_for(lambda: (get(cluster, "pretrain").get("status") or {}).get("restarts") == 1, timeout=30)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, "pretrain")}
    assert after["pretrain-worker-0"] == before["pretrain-worker-0"]
    assert after["pretrain-worker-1"] == before["pretrain-worker-1"]
    assert after["pretrain-worker-2"] != before["pretrain-worker-2"]
    assert after["pretrain-worker-3"] != before["pretrain-worker-3"]


def test_suspend_and_resume(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    doc = job()
    cluster.apply(doc)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    cluster.apply({**doc, "spec": {**doc["spec"], "suspend": True}})
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Suspended" and not pods(cluster, "pretrain"), timeout=30)
    assert condition(cluster, "pretrain", "Suspended")["status"] == "True"
    # Nothing runs while suspended, and the status says so.
    assert condition(cluster, "pretrain", "Running")["status"] == "False"
    assert condition(cluster, "pretrain", "Ready")["status"] == "False"
    assert get(cluster, "pretrain")["status"]["readyNodes"] == 0
    cluster.apply({**doc, "spec": {**doc["spec"], "suspend": False}})
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    assert len(pods(cluster, "pretrain")) == 4


def test_unplaceable_edit_keeps_the_running_gang_until_the_new_shape_fits(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    doc = job()
    cluster.apply(doc)
    cluster.wait_for(lambda: phase(cluster, "pretrain") == "Running", timeout=30)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, "pretrain")}
    # dpReplicate 1 -> 9: 288 GPUs on a 256-GPU fleet. The change waits; the gang keeps running.
    wide = {**doc["spec"]["parallelism"], "dpReplicate": 9}
    cluster.apply({**doc, "spec": {**doc["spec"], "parallelism": wide}})
    cluster.wait_for(lambda: condition(cluster, "pretrain", "Placed").get("reason") == "ChangeWaiting", timeout=30)
    placed = condition(cluster, "pretrain", "Placed")
    assert "spec change waits" in placed["message"] and "running gang (4 pods) is kept" in placed["message"]
    assert "(36 pods, 288 GPUs) cannot be placed" in placed["message"], placed["message"]
    wait_for_events({("pretrain", "ChangeWaiting")})
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(cluster, "pretrain")} == before
    assert phase(cluster, "pretrain") == "Running"
    assert condition(cluster, "pretrain", "Running")["status"] == "True"
    # A shape that fits replaces the gang, and the teardown is an Event.
    fits = {**doc["spec"]["parallelism"], "dpReplicate": 2}
    cluster.apply({**doc, "spec": {**doc["spec"], "parallelism": fits}})
    cluster.wait_for(
        lambda: phase(cluster, "pretrain") == "Running" and len(pods(cluster, "pretrain")) == 8, timeout=30
    )
    assert condition(cluster, "pretrain", "Placed")["reason"] == "Placed"
    wait_for_events({("pretrain", "ChildrenReplaced")})


def test_impossible_job_is_explained_and_creates_nothing(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    cluster.apply(job("huge", parallelism={"dpReplicate": 40, "tp": 8}))  # 320 GPUs on a 256-GPU fleet
    cluster.wait_for(lambda: condition(cluster, "huge", "Placed").get("reason") == "Unschedulable", timeout=30)
    message = condition(cluster, "huge", "Placed")["message"]
    assert "40 hosts" in message and "8 free GPUs" in message
    assert phase(cluster, "huge") == "Pending"
    assert pods(cluster, "huge") == []
    wait_for_events({("huge", "PlacementFailed")})
