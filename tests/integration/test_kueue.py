"""Kueue admission on the embedded cluster with Kueue's Workload CRD installed; the test plays Kueue.

The operator keeps one Workload per queued GEMTraining, creates no pod before `status.admission`
is set, creates the whole gang after, removes it when Kueue evicts, and then releases the
reservation so Kueue can requeue it. Pods never carry the queue label. The Workload CRD here serves
v1beta1 only, so this is the operator's path for a cluster without Kueue's v1beta2 (the real Kueue, on
v1beta2, is in tests/controlplane).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.api.crd import gem_crds
from gem_operator.cli.operator import OperatorThread
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.drivers.demo import PEERING_NAME, peering_object
from gem_testbed.emulator.crds import load_crds

from .conftest import FAST

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "crds" / "samples"
GEM = "gem.dev/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta1"
QUEUE = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def kueue_installed() -> bool:
    return True


@pytest.fixture
def cluster(
    fleet: str, kueue_installed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[EmbeddedCluster]:
    crds = list(gem_crds().values())
    if kueue_installed:
        crds += load_crds(sorted((HERE / "kueue").glob("*.kueue.x-k8s.io.yaml")))
    with EmbeddedCluster(fleet, crds, lifecycle=FAST) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.write_kubeconfig(tmp_path / "kubeconfig")))
        c.apply(peering_object(PEERING_NAME, "default"))
        yield c


def queued_job() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "gemtraining.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["metadata"]["labels"] = {QUEUE: "gpu-training"}
    return doc


def status(cluster: EmbeddedCluster) -> dict[str, Any]:
    return (cluster.get(GEM, "GEMTraining", "gem-pretrain", "default") or {}).get("status") or {}


def condition(cluster: EmbeddedCluster, type_: str) -> dict[str, Any]:
    return next((c for c in status(cluster).get("conditions") or [] if c["type"] == type_), {})


def pods(cluster: EmbeddedCluster) -> list[dict[str, Any]]:
    return cluster.list("v1", "Pod", "default", {"gem.dev/instance": "gem-pretrain"})


def workload(cluster: EmbeddedCluster) -> dict[str, Any] | None:
    return cluster.get(KUEUE, "Workload", "gem-pretrain-workload", "default")


def kueue_writes(cluster: EmbeddedCluster, status_: dict[str, Any]) -> None:
    wl = workload(cluster)
    assert wl is not None
    cluster.apply({"apiVersion": KUEUE, "kind": "Workload", "metadata": wl["metadata"], "status": status_})


def cond(type_: str, status_: str, reason: str, message: str = "") -> dict[str, str]:
    return {
        "type": type_,
        "status": status_,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }


ADMISSION = {
    "clusterQueue": "gpu-cluster-queue",
    "podSetAssignments": [{"name": "workers", "flavors": {"nvidia.com/gpu": "rack-1-h100"}, "count": 4}],
}
# The flavor Kueue admits the gang to: the demo fleet's second rack (gpu-004 .. gpu-007).
FLAVOR = {
    "apiVersion": KUEUE,
    "kind": "ResourceFlavor",
    "metadata": {"name": "rack-1-h100"},
    "spec": {"nodeLabels": {"gem.dev/rack": "rack-1"}},
}


def test_gang_waits_for_admission_and_leaves_on_eviction(
    cluster: EmbeddedCluster, operator: OperatorThread, wait_for_events: Callable[[set[tuple[str, str]]], Any]
) -> None:
    cluster.apply(queued_job())
    cluster.wait_for(lambda: workload(cluster) is not None and status(cluster).get("phase") == "Queued")
    wl = workload(cluster)
    assert wl is not None
    gemt = cluster.get(GEM, "GEMTraining", "gem-pretrain", "default")
    assert gemt is not None
    assert wl["metadata"]["ownerReferences"][0]["uid"] == gemt["metadata"]["uid"]
    assert wl["spec"]["queueName"] == "gpu-training" and wl["spec"]["active"] is True
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["count"] == 4
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # Several resync passes later (1 s each) still no pod: the gang waits for Kueue.
    with pytest.raises(TimeoutError):
        cluster.wait_for(lambda: pods(cluster), timeout=2.5)
    assert condition(cluster, "Admitted")["status"] == "False"
    assert "gpu-training" in condition(cluster, "Admitted")["message"]

    # Kueue admits (to a flavor of one rack): the whole gang is created on that flavor's nodes,
    # without the queue label on any pod.
    cluster.apply(FLAVOR)
    kueue_writes(
        cluster,
        {
            "admission": ADMISSION,
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")],
        },
    )
    cluster.wait_for(lambda: status(cluster).get("phase") == "Running", timeout=30)
    running = pods(cluster)
    assert len(running) == 4
    assert all(not k.startswith("kueue.x-k8s.io/") for p in running for k in p["metadata"]["labels"])
    assert sorted(p["spec"]["nodeName"] for p in running) == [f"gpu-00{i}" for i in range(4, 8)]
    assert condition(cluster, "Admitted")["status"] == "True"
    assert "flavors rack-1-h100" in condition(cluster, "Admitted")["message"]

    # Kueue evicts (preemption): the pods go, then the job releases its quota reservation.
    wl = workload(cluster)
    assert wl is not None
    evicted = [*wl["status"]["conditions"], cond("Evicted", "True", "Preempted", "Preempted by a higher-priority job")]
    kueue_writes(cluster, {"conditions": evicted})
    cluster.wait_for(lambda: not pods(cluster), timeout=15)
    cluster.wait_for(lambda: not ((workload(cluster) or {}).get("status") or {}).get("admission"), timeout=15)
    released = {c["type"]: c for c in (workload(cluster) or {})["status"]["conditions"]}
    assert released["QuotaReserved"]["status"] == "False"
    assert status(cluster)["phase"] == "Queued"
    assert "Preempted" in condition(cluster, "Ready")["message"]
    wait_for_events({("gem-pretrain", "WorkloadCreated"), ("gem-pretrain", "Admitted"), ("gem-pretrain", "Evicted")})

    # Kueue admits it again (eviction over): the gang comes back.
    kueue_writes(
        cluster,
        {
            "admission": ADMISSION,
            "conditions": [
                cond("QuotaReserved", "True", "QuotaReserved"),
                cond("Admitted", "True", "Admitted"),
                cond("Evicted", "False", "Admitted"),
            ],
        },
    )
    cluster.wait_for(lambda: len(pods(cluster)) == 4, timeout=30)


@pytest.mark.parametrize("kueue_installed", [False])
def test_queue_label_without_kueue_says_so(cluster: EmbeddedCluster, operator: OperatorThread) -> None:
    """No Workload CRD served: the gang holds, and the condition names the two ways out."""
    cluster.apply(queued_job())
    cluster.wait_for(lambda: condition(cluster, "Admitted").get("reason") == "KueueNotInstalled")
    assert "install Kueue, or remove the label" in condition(cluster, "Admitted")["message"]
    assert status(cluster)["phase"] == "Queued" and not pods(cluster)
