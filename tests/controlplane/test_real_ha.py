"""High availability on the real control plane: two operator processes with the chart's token, kopf
peering through the chart's KopfPeering, and `kill -9` of the active one.

The replicas get distinct priorities (as the chart's pods do from their UIDs); the lower one pauses
while the higher one's record lives. After SIGKILL no record is withdrawn, so the survivor resumes
once the dead record's lifetime (GEM_PEERING_LIFETIME, 6 s through the chart's extraEnv here) has
passed, and then catches up on everything that changed meanwhile: nothing is lost or doubled.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from .conftest import WORK_NAMESPACE as NAMESPACE
from .conftest import RealCluster, eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

SAMPLE = Path(__file__).resolve().parents[2] / "crds" / "samples" / "rankingservice.yaml"
LIFETIME = 6.0


def _ranker(name: str, replicas: int) -> str:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["autoscaling"] = {"enabled": False}
    doc["spec"]["replicas"] = replicas
    return json.dumps(doc)


def _deployments(cluster: RealCluster, name: str) -> list[Any]:
    apps = client.AppsV1Api(cluster.api)
    return list(apps.list_namespaced_deployment(NAMESPACE, label_selector=f"gem.dev/instance={name}").items)


def _ready(cluster: RealCluster, name: str, replicas: int) -> bool:
    obj = cluster.custom.get_namespaced_custom_object("gem.dev", "v1alpha1", NAMESPACE, "rankingservices", name)
    status = obj.get("status") or {}
    return bool(
        status.get("phase") == "Ready"
        and status.get("observedGeneration") == obj["metadata"]["generation"]
        and status.get("readyReplicas") == replicas
    )


def _peers(cluster: RealCluster) -> dict[str, Any]:
    peering = cluster.custom.get_namespaced_custom_object(
        "kopf.dev", "v1", NAMESPACE, "kopfpeerings", cluster.install.peering
    )
    return dict(peering.get("status") or {})


def test_the_standby_takes_over_after_kill_9_and_nothing_is_lost(real_cluster: RealCluster) -> None:
    for process in real_cluster.operators:
        process.stop()  # SIGTERM withdraws their records
    real_cluster.operators.clear()
    active = real_cluster.operator(name="gem-operator-active", priority=200)
    standby = real_cluster.operator(name="gem-operator-standby", priority=100)
    eventually("both replicas in the KopfPeering", lambda: len(_peers(real_cluster)) == 2, 60)
    # A replica that starts while a higher peer lives stays paused silently: it runs no handler.

    real_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_ranker("ha-one", 1))
    eventually("ha-one Ready", lambda: _ready(real_cluster, "ha-one", 1), 180)
    assert "Handler " in active.log_path.read_text()
    assert "Handler " not in standby.log_path.read_text(), "the standby ran no handler while paused"

    paused_log = len(standby.log_path.read_text())
    killed = time.monotonic()
    active.kill()  # kill -9: no record withdrawn
    assert not active.alive()
    # Changes while nobody acts: a spec change and a new resource.
    real_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_ranker("ha-one", 2))
    real_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=_ranker("ha-two", 1))
    eventually(
        "the standby resuming",
        lambda: "Resuming operations" in standby.log_path.read_text()[paused_log:],
        LIFETIME + 60,
    )
    takeover = time.monotonic() - killed
    assert takeover >= LIFETIME - 1.0, f"resumed after {takeover:.1f} s, before the dead record expired"
    eventually("ha-one at 2 replicas and ha-two Ready", lambda: (
        _ready(real_cluster, "ha-one", 2) and _ready(real_cluster, "ha-two", 1)), 180)  # fmt: skip
    for name, replicas in (("ha-one", 2), ("ha-two", 1)):
        (deployment,) = _deployments(real_cluster, name)  # exactly one: nothing doubled
        assert deployment.spec.replicas == replicas
    assert standby.alive()
    assert real_cluster.forbidden() == []
    real_cluster.delete_gem_objects(NAMESPACE)
