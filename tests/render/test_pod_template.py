"""spec.workload.podTemplate and shmSize merged into the pods of all three kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.api.kinds import kind_info
from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.api.validation import InvalidSpec, parse_spec
from gem_operator.render.common import Owner
from gem_operator.render.serving import render_precompute, render_ranking_service
from gem_operator.render.training import render_training
from gem_operator.topology import Infeasible, Placement, cluster_view_from_objects, plan_gang

OVERLAYS = Path(__file__).resolve().parents[2] / "crds" / "samples" / "overlays"
HOST_PIN = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-001"]}


def load(name: str) -> tuple[Owner, Any]:
    doc = yaml.safe_load((OVERLAYS / name).read_text())
    owner = Owner(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], "default", "uid-1")
    return owner, parse_spec(kind_info(doc["kind"]), doc)


def main(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def test_training_overlay_is_merged_into_every_pod() -> None:
    owner, spec = load("gemtraining-eks-efa.yaml")
    assert isinstance(spec, GEMTrainingSpec)
    nodes = [f"gpu-{i:03d}" for i in range(spec.num_nodes)]
    pod = render_training(owner, spec, node_names=nodes).pods[1]
    meta, ps = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "ads-ranking" and meta["labels"]["gem.dev/node-rank"] == "1"
    assert meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert "gem.dev/spec-hash" in meta["annotations"]
    assert ps["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert [t["key"] for t in ps["tolerations"]] == ["nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    # the user's node affinity ANDed with the pin: the one required term holds both
    terms = ps["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "eks.amazonaws.com/capacityType", "operator": "In", "values": ["ON_DEMAND", "CAPACITY_BLOCK"]},
                HOST_PIN,
            ]
        }
    ]
    assert ps["schedulingGates"] == [{"name": "gem.dev/gang"}]
    assert ps["priorityClassName"] == "training-high"
    assert ps["imagePullSecrets"] == [{"name": "ecr-pull"}]
    assert ps["securityContext"] == {"fsGroup": 1000}
    volumes = {v["name"]: v for v in ps["volumes"]}
    assert volumes["fsx"] == {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-training-data"}}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}}
    trainer = main(ps, "trainer")
    assert trainer["command"] == ["torchrun"]
    names = [e["name"] for e in trainer["env"]]
    assert names.index("NODE_RANK") < names.index("FI_PROVIDER")  # operator's env first, additions after
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in trainer["env"]
    mounts = {m["mountPath"]: m["name"] for m in trainer["volumeMounts"]}
    assert mounts["/data"] == "fsx" and mounts["/dev/shm"] == "dshm" and mounts["/etc/gem"] == "gem-config"
    assert trainer["resources"]["limits"] == {"memory": "1900Gi", "nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}
    assert trainer["resources"]["requests"]["vpc.amazonaws.com/efa"] == "32"
    assert trainer["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert [c["name"] for c in ps["containers"]] == ["trainer", "log-shipper"]


def test_training_pods_get_16gi_of_shm_by_default_and_none_for_zero() -> None:
    owner = Owner("gem.dev/v1alpha1", "GEMTraining", "job", "ml", "uid-1")
    base = {"parallelism": {"tp": 8}, "checkpoint": {"uri": "/ckpt"}}
    pod = render_training(owner, GEMTrainingSpec.model_validate(base)).pods[0]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["spec"]["containers"][0]["volumeMounts"]
    off = GEMTrainingSpec.model_validate({**base, "workload": {"shmSize": "0"}})
    pod = render_training(owner, off).pods[0]
    assert all(v["name"] != "dshm" for v in pod["spec"]["volumes"])


def test_ranking_overlay_host_network_rdma_and_native_sidecar() -> None:
    owner, spec = load("rankingservice-rdma.yaml")
    assert isinstance(spec, RankingServiceSpec)
    deployment = render_ranking_service(owner, spec, replicas=4)[0]
    template = deployment["spec"]["template"]
    ps = template["spec"]
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert ps["hostNetwork"] is True and ps["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert ps["runtimeClassName"] == "nvidia" and ps["schedulerName"] == "default-scheduler"
    assert "podAntiAffinity" in ps["affinity"]
    assert [c["name"] for c in ps["initContainers"]] == ["feature-cache", "model-loader"]
    assert ps["initContainers"][0]["restartPolicy"] == "Always"
    ranker = main(ps, "ranker")
    assert ranker["resources"]["limits"] == {"nvidia.com/gpu": "1", "rdma/ib": "1"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in ranker["volumeMounts"]


def test_precompute_overlay_and_no_shm_unless_asked() -> None:
    owner, spec = load("solarisprecompute-spot.yaml")
    assert isinstance(spec, SolarisPrecomputeSpec)
    ps = render_precompute(owner, spec, replicas=2)[0]["spec"]["template"]["spec"]
    assert ps["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert ps["priorityClassName"] == "batch-low"
    assert all(v["name"] != "dshm" for v in ps["volumes"])
    assert {"name": "GOOGLE_CLOUD_PROJECT", "value": "example"} in main(ps, "precompute")["env"]


@pytest.mark.parametrize(
    ("kind", "containers", "message"),
    [
        ("GEMTraining", [{"name": "ranker", "env": []}], "this kind's main container is 'trainer'"),
        ("GEMTraining", [{"name": "sidecar"}], "container 'sidecar' needs an image"),
        ("GEMTraining", [{"name": "model-loader", "image": "x"}], "'model-loader' is the operator's own"),
        ("GEMTraining", [{"name": "trainer", "image": "other:1"}], "use spec.workload.image"),
        ("GEMTraining", [{"name": "t", "image": "x", "resources": {"requests": {"rdma/ib": "lots"}}}], "quantity"),
    ],
)
def test_bad_containers_are_named(kind: str, containers: list[dict[str, Any]], message: str) -> None:
    body = {
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {
            "parallelism": {"tp": 8},
            "checkpoint": {"uri": "/c"},
            "workload": {"podTemplate": {"spec": {"containers": containers}}},
        },
    }
    with pytest.raises(InvalidSpec) as err:
        parse_spec(kind_info(kind), body)
    assert any("workload.podTemplate.spec" in p and message in p for p in err.value.problems), err.value.problems


def _node(name: str, pool: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pool": pool}},
        "spec": {"taints": [{"key": "dedicated", "value": pool, "effect": "NoSchedule"}]} if pool == "reserved" else {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_planner_places_only_where_the_template_lets_pods_run() -> None:
    nodes = [_node("a0", "general"), _node("a1", "general"), _node("r0", "reserved"), _node("r1", "reserved")]
    view = cluster_view_from_objects(nodes)
    base = {"parallelism": {"dpShard": 2, "tp": 8}, "checkpoint": {"uri": "/c"}}
    selected = {"nodeSelector": {"pool": "reserved"}, "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    job = GEMTrainingSpec.model_validate({**base, "workload": {"podTemplate": {"spec": selected}}})
    plan = plan_gang(job, view)
    assert isinstance(plan, Placement) and sorted(plan.nodes) == ["r0", "r1"]
    # without the toleration the reserved nodes' taint blocks them; the reason says so
    untolerated = GEMTrainingSpec.model_validate(
        {**base, "workload": {"podTemplate": {"spec": {"nodeSelector": {"pool": "reserved"}}}}}
    )
    result = plan_gang(untolerated, view)
    assert isinstance(result, Infeasible)
    assert "2 not selected by the pod template" in result.reason and "2 tainted" in result.reason
    # required node affinity: NotIn general leaves only the reserved pool
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["general"]}]}
                ]
            }
        }
    }
    by_affinity = GEMTrainingSpec.model_validate(
        {**base, "workload": {"podTemplate": {"spec": {**selected, "nodeSelector": {}, "affinity": affinity}}}}
    )
    plan = plan_gang(by_affinity, view)
    assert isinstance(plan, Placement) and sorted(plan.nodes) == ["r0", "r1"]
