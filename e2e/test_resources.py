"""End to end: apply the samples (and broken ones) and check children, placement, status and events.

Runs unchanged on a real cluster (``$KUBECONFIG``, operator installed by the chart) and on the
embedded cluster; see conftest.py for what each backend can and cannot show. Fixtures: ``backend``
(session) and ``applied`` (what a test applies is deleted afterwards, children awaited).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

SAMPLES = Path(__file__).resolve().parents[1] / "crds" / "samples"
GEM = "gem.dev/v1alpha1"
# On kind the workload image is the one run.sh built and loaded; elsewhere the samples' own.
WORKLOAD_IMAGE = os.environ.get("GEM_E2E_WORKLOAD_IMAGE", "")

pytestmark = pytest.mark.timeout(900)

Obj = dict[str, Any]
Applied = list[tuple[str, str, str]]


# The samples ask for production-sized pods (16 CPUs, 128 GiB); kind nodes are laptops' containers.
SMALL = {"requests": {"cpu": "50m", "memory": "64Mi"}}


def sample(name: str) -> Obj:
    doc: Obj = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    workload = doc["spec"].setdefault("workload", {})
    workload["resources"] = copy.deepcopy(SMALL)
    if WORKLOAD_IMAGE:
        workload["image"] = WORKLOAD_IMAGE
    return doc


def apply(backend: Any, applied: Applied, doc: Obj) -> None:
    backend.apply(doc)
    key = (doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    if key not in applied:
        applied.append(key)


def condition(obj: Obj, type_: str) -> Obj:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    assert found, f"{obj['kind']} {obj['metadata']['name']} has no {type_} condition: {obj.get('status')}"
    return found[0]


def has_condition(obj: Obj | None, type_: str, status: str) -> bool:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == type_ and c["status"] == status for c in conds)


def settled(backend: Any, kind: str, name: str, phases: set[str]) -> Obj:
    """Wait until the operator has observed the current generation and reports one of ``phases``."""

    def check() -> Obj | None:
        obj = backend.get(GEM, kind, name)
        status = (obj or {}).get("status") or {}
        if obj and status.get("observedGeneration") == obj["metadata"]["generation"] and status.get("phase") in phases:
            return obj
        return None

    found: Obj = backend.wait_for(check, f"{kind} {name} to reach {sorted(phases)} at its current generation")
    return found


def children(backend: Any, api_version: str, kind: str, instance: str) -> list[Obj]:
    found: list[Obj] = backend.list(api_version, kind, {"gem.dev/instance": instance})
    return found


def owned_by(child: Obj, owner: Obj) -> bool:
    refs = child["metadata"].get("ownerReferences") or []
    return any(r["uid"] == owner["metadata"]["uid"] and r.get("controller") for r in refs)


def reasons_for(backend: Any, owner: Obj) -> set[tuple[str, str]]:
    """(type, reason) of the Events about ``owner`` from either events API."""
    out = set()
    for event in backend.events():
        about = event.get("involvedObject") or event.get("regarding") or {}
        if about.get("uid") == owner["metadata"]["uid"] or (
            about.get("name") == owner["metadata"]["name"] and about.get("kind") == owner["kind"]
        ):
            out.add((event.get("type", ""), event.get("reason", "")))
    return out


def env_of(pod: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def pinned_host(pod: Obj) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expr["operator"] == "In" and len(expr["values"]) == 1
    host: str = expr["values"][0]
    return host


def test_gemtraining_places_a_pinned_gang(backend: Any, applied: Applied) -> None:
    job = sample("gemtraining")
    apply(backend, applied, job)
    name = job["metadata"]["name"]
    phases = {"Running"} if backend.pods_become_ready else {"Pending", "Running", "Restarting"}
    backend.wait_for(lambda: has_condition(backend.get(GEM, "GEMTraining", name), "Placed", "True"), "gang placement")
    gemt = settled(backend, "GEMTraining", name, phases)
    assert gemt["status"]["worldSize"] == 32 and gemt["status"]["nodes"] == 4

    pods = backend.wait_for(
        lambda: len(ps := children(backend, "v1", "Pod", name)) == 4 and ps, "the gang's 4 pods", timeout=None
    )
    pods = sorted(pods, key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-worker-{i}" for i in range(4)]
    hosts = [pinned_host(p) for p in pods]
    assert len(set(hosts)) == 4, f"one pod per host: {hosts}"
    nodes = {n["metadata"]["name"]: n for n in backend_nodes(backend, hosts)}
    for host in hosts:
        assert int(nodes[host]["status"]["allocatable"].get("nvidia.com/gpu", 0)) >= 8, host
    for i, pod in enumerate(pods):
        assert owned_by(pod, gemt)
        env = env_of(pod)
        assert env["WORLD_SIZE"] == "32" and env["NODE_RANK"] == env["PET_NODE_RANK"] == str(i)
        assert env["NPROC_PER_NODE"] == "8"
        assert env["GEM_MESH_SHAPE"] == "pp=2,dp_replicate=1,dp_shard=2,cp=2,tp=4"
        assert env["MASTER_ADDR"] == f"{name}-worker-0.{name}-rdzv.{backend.namespace}.svc"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod["metadata"]["labels"])
        assert not pod["spec"].get("schedulingGates"), "the gate is lifted once the whole gang exists"
    (svc,) = children(backend, "v1", "Service", name)
    assert svc["spec"]["clusterIP"] == "None" and owned_by(svc, gemt)
    (cm,) = children(backend, "v1", "ConfigMap", name)
    rankmap = json.loads(cm["data"]["rankmap.json"])
    assert [n["ranks"][0] for n in rankmap["nodes"]] == [0, 8, 16, 24]
    if backend.pods_become_ready:
        assert condition(gemt, "Ready")["status"] == "True" and gemt["status"]["readyNodes"] == 4
    backend.wait_for(lambda: ("Normal", "ChildrenCreated") in reasons_for(backend, gemt), "a ChildrenCreated event")


def backend_nodes(backend: Any, names: list[str]) -> list[Obj]:
    nodes: list[Obj] = [n for n in backend.list("v1", "Node") if n["metadata"]["name"] in names]
    return nodes


def test_pools_get_a_deployment_and_a_service(backend: Any, applied: Applied) -> None:
    rks, spc = sample("rankingservice"), sample("solarisprecompute")
    apply(backend, applied, rks)
    apply(backend, applied, spc)
    ready = backend.pods_become_ready
    ranker = settled(backend, "RankingService", "ads-ranker", {"Ready"} if ready else {"Ready", "Progressing"})
    (deploy,) = children(backend, "apps/v1", "Deployment", "ads-ranker")
    assert owned_by(deploy, ranker)
    assert deploy["spec"]["replicas"] == 2, "spec.replicas=1 is raised to autoscaling.minReplicas"
    assert ranker["status"]["desiredReplicas"] == 2
    assert ranker["status"]["selector"] == "gem.dev/kind=rankingservice,gem.dev/instance=ads-ranker,gem.dev/role=server"
    pod_spec = deploy["spec"]["template"]["spec"]
    init = pod_spec["initContainers"][0]
    assert init["command"] == ["gem-load"] and init["envFrom"] == [{"secretRef": {"name": "model-store-credentials"}}]
    cache = [v for v in pod_spec["volumes"] if "hostPath" in v]
    # The chart mounts the node cache only with its model-cache DaemonSet (GEM_NODE_CACHE); the
    # embedded cluster's operator always does. Either way the loader's --cache matches the volume.
    if backend.name == "embedded" or os.environ.get("GEM_E2E_NODE_CACHE") == "hostPath":
        assert cache and cache[0]["hostPath"]["path"] == "/var/cache/gem-models"
    else:
        assert not cache, "the chart without modelCache.enabled mounts no hostPath"
    assert ("--cache" in init["args"]) == bool(cache)
    assert pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    (svc,) = children(backend, "v1", "Service", "ads-ranker")
    assert owned_by(svc, ranker)
    if ready:
        assert ranker["status"]["readyReplicas"] == 2 and condition(ranker, "Ready")["status"] == "True"

    pre = settled(backend, "SolarisPrecompute", "ads-precompute", {"Ready"} if ready else {"Ready", "Progressing"})
    (pdeploy,) = children(backend, "apps/v1", "Deployment", "ads-precompute")
    assert owned_by(pdeploy, pre) and pdeploy["spec"]["replicas"] == 1


def test_spec_change_patches_children(backend: Any, applied: Applied) -> None:
    rks = sample("rankingservice")
    # The operator's own scaler holds replicas while it has no metrics (none on kind); with it off,
    # spec.replicas is what HPA/KEDA drive through the scale subresource, and the operator follows it.
    rks["spec"]["autoscaling"] = {"enabled": False}
    rks["spec"]["replicas"] = 2
    apply(backend, applied, rks)
    ready = backend.pods_become_ready
    first = settled(backend, "RankingService", "ads-ranker", {"Ready"} if ready else {"Ready", "Progressing"})
    bigger = copy.deepcopy(rks)
    bigger["spec"]["replicas"] = 3
    apply(backend, applied, bigger)
    backend.wait_for(
        lambda: [d["spec"]["replicas"] for d in children(backend, "apps/v1", "Deployment", "ads-ranker")] == [3],
        "the Deployment to be patched to 3 replicas",
    )

    def observed() -> bool:
        obj = backend.get(GEM, "RankingService", "ads-ranker") or {}
        status = obj.get("status") or {}
        return bool(
            status.get("observedGeneration") == obj["metadata"]["generation"] > first["metadata"]["generation"]
            and status.get("desiredReplicas") == 3
            and (not ready or status.get("readyReplicas") == 3)
        )

    backend.wait_for(observed, "status to follow the new generation")


def test_invalid_spec_gets_invalidspec_and_no_children(backend: Any, applied: Applied) -> None:
    bad = sample("gemtraining")
    bad["metadata"]["name"] = "bad-ep"
    bad["spec"]["parallelism"]["ep"] = 3  # must divide dpShard*cp = 4: only the operator knows
    apply(backend, applied, bad)
    obj = settled(backend, "GEMTraining", "bad-ep", {"Invalid"})
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "ep (3) must divide dpShard*cp (4)" in ready["message"]
    backend.wait_for(lambda: ("Warning", "InvalidSpec") in reasons_for(backend, obj), "an InvalidSpec warning event")
    for api_version, kind in (("v1", "Pod"), ("v1", "Service"), ("v1", "ConfigMap")):
        assert children(backend, api_version, kind, "bad-ep") == []
    # Fixed, it reconciles like any other resource.
    bad["spec"]["parallelism"]["ep"] = 2
    apply(backend, applied, bad)
    backend.wait_for(lambda: has_condition(backend.get(GEM, "GEMTraining", "bad-ep"), "Placed", "True"), "placement")


def test_structural_errors_are_rejected_at_apply(backend: Any, applied: Applied) -> None:
    bad = sample("gemtraining")
    bad["metadata"]["name"] = "bad-tp"
    bad["spec"]["parallelism"]["tp"] = 16  # > gpusPerNode: the CRD's CEL rule says no
    if not backend.server_validates:
        # The embedded API server evaluates no CRD schemas; `gemop validate` runs the same CEL offline.
        from gem_operator.api.schema_check import validate_manifest

        assert any("tensor-parallel group never leaves a host" in e for e in validate_manifest(bad))
        return
    applied.append((GEM, "GEMTraining", "bad-tp"))  # removed afterwards should it get in
    with pytest.raises(RuntimeError, match="tensor-parallel group never leaves a host"):
        backend.apply(bad)
    assert backend.get(GEM, "GEMTraining", "bad-tp") is None


def test_deleting_a_resource_removes_its_children(backend: Any, applied: Applied) -> None:
    apply(backend, applied, sample("rankingservice"))
    ranker = settled(backend, "RankingService", "ads-ranker", {"Ready", "Progressing"})
    backend.wait_for(lambda: children(backend, "apps/v1", "Deployment", "ads-ranker"), "the Deployment")
    backend.delete(GEM, "RankingService", "ads-ranker")

    def gone() -> bool:
        left = [
            *children(backend, "apps/v1", "Deployment", "ads-ranker"),
            *children(backend, "v1", "Service", "ads-ranker"),
        ]
        return not left and backend.get(GEM, "RankingService", "ads-ranker") is None

    backend.wait_for(gone, f"{ranker['metadata']['name']} and its children to go")
