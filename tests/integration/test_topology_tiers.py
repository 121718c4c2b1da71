"""Tiers on the embedded cluster: inconsistent labels reported as Warning Events, the tiers used
in status, and tiers read from a Kueue Topology object."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.crd import gem_crds
from gem_operator.cli.operator import OperatorThread
from gem_operator.fleet import load_fleet
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.drivers.demo import PEERING_NAME, peering_object
from tests.integration.conftest import FAST, EventWaiter

pytestmark = pytest.mark.integration
GEM = "gem.dev/v1alpha1"
KUEUE_TOPOLOGY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "topologies.kueue.x-k8s.io"},
    "spec": {
        "group": "kueue.x-k8s.io",
        "scope": "Cluster",
        "names": {"kind": "Topology", "plural": "topologies", "singular": "topology", "listKind": "TopologyList"},
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedCluster]:
    # The demo fleet (nvl-0: gpu-000..003 in rack-0), with gpu-003 labelled rack-1 and
    # gpu-004..007 carrying no rack label.
    nodes: list[dict[str, Any]] = []
    for n in load_fleet("demo"):
        node = dict(n)
        labels = dict(node["metadata"]["labels"])
        if node["metadata"]["name"] == "gpu-003":
            labels["gem.dev/rack"] = "rack-1"
        elif node["metadata"]["name"] >= "gpu-004":
            labels.pop("gem.dev/rack", None)
        node["metadata"] = {**node["metadata"], "labels": labels}
        nodes.append(node)
    with EmbeddedCluster(nodes, [*gem_crds().values(), KUEUE_TOPOLOGY_CRD], lifecycle=FAST) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.write_kubeconfig(tmp_path / "kubeconfig")))
        c.apply(peering_object(PEERING_NAME, "default"))
        yield c


def job(name: str, **topology: Any) -> dict[str, Any]:
    spec = {"parallelism": {"cp": 2, "dpShard": 2, "tp": 8}, "checkpoint": {"uri": "s3://ckpt/t"}}
    if topology:
        spec["topology"] = topology
    return {"apiVersion": GEM, "kind": "GEMTraining", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def status(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    return (cluster.get(GEM, "GEMTraining", name, "default") or {}).get("status") or {}


def placed_reason(cluster: EmbeddedCluster, name: str) -> str | None:
    conds = status(cluster, name).get("conditions") or []
    return next((c.get("reason") for c in conds if c["type"] == "Placed"), None)


def test_inconsistent_labels_warn_and_status_names_the_tiers(
    cluster: EmbeddedCluster, operator: OperatorThread, wait_for_events: EventWaiter
) -> None:
    cluster.apply(job("tiers"))
    cluster.wait_for(lambda: placed_reason(cluster, "tiers") == "Placed", timeout=30)
    placement = status(cluster, "tiers")["placement"]
    assert placement["tierSource"] == "discovered"
    assert [(t["name"], t["nodes"]) for t in placement["tiers"]] == [
        ("host", 8),
        ("nvlink", 8),
        ("rack", 4),
        ("block", 8),
        ("zone", 8),
    ]
    wait_for_events({("tiers", "TopologyInconsistent"), ("tiers", "Placed")})
    warning = next(e for e in cluster.events("default") if e["reason"] == "TopologyInconsistent")
    assert warning["type"] == "Warning"
    assert "nvlink domain nvl-0 spans 2 rack domains" in warning["message"]


def test_tiers_from_a_kueue_topology(
    cluster: EmbeddedCluster, operator: OperatorThread, wait_for_events: EventWaiter
) -> None:
    cluster.apply(job("kq", kueueTopology="gpu"))
    cluster.wait_for(lambda: placed_reason(cluster, "kq") == "TopologyNotFound", timeout=30)
    assert "no Kueue Topology named 'gpu'" in next(
        c["message"] for c in status(cluster, "kq")["conditions"] if c["type"] == "Placed"
    )
    assert cluster.list("v1", "Pod", "default", {"gem.dev/instance": "kq"}) == []
    levels = [
        {"nodeLabel": "gem.dev/block"},
        {"nodeLabel": "nvidia.com/gpu.clique"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Topology",
            "metadata": {"name": "gpu"},
            "spec": {"levels": levels},
        }
    )
    cluster.wait_for(lambda: placed_reason(cluster, "kq") == "Placed", timeout=30)
    placement = status(cluster, "kq")["placement"]
    assert placement["tierSource"] == "kueue/gpu"
    assert [t["name"] for t in placement["tiers"]] == ["host", "nvlink", "block"]
