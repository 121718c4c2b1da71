"""What a person reads: Events from `gem-operator`, and `kubectl scale` on an autoscaled pool answered."""

from __future__ import annotations

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


def status(cluster: EmbeddedCluster, name: str) -> dict[str, Any]:
    return (cluster.get(GEM, "RankingService", name, "default") or {}).get("status") or {}


def test_kubectl_scale_on_an_autoscaled_pool_says_who_owns_replicas(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text())
    cluster.apply(doc)
    cluster.wait_for(lambda: status(cluster, "ads-ranker").get("phase") == "Ready", timeout=30)
    before = status(cluster, "ads-ranker")["desiredReplicas"]
    # The autoscaler's memory is an object a person (or a health check) can read, not a JSON string.
    state = cluster.wait_for(lambda: status(cluster, "ads-ranker").get("scalerState"), timeout=15)
    assert isinstance(state, dict) and isinstance(state["recommendations"], list)
    # What `kubectl scale rks/ads-ranker --replicas=5` writes (through the scale subresource).
    cluster.apply({**doc, "spec": {**doc["spec"], "replicas": 5}})
    wait_for_events({("ads-ranker", "AutoscalerOwnsReplicas")})
    (event,) = [e for e in cluster.events("default") if e["reason"] == "AutoscalerOwnsReplicas"]
    assert event["type"] == "Warning"
    assert "-> 5" in event["message"] and f"keeps {before}" in event["message"]
    assert "spec.autoscaling.enabled: false" in event["message"]
    (deploy,) = cluster.list("apps/v1", "Deployment", "default", {"gem.dev/instance": "ads-ranker"})
    assert deploy["spec"]["replicas"] == before
    owner = next(c for c in status(cluster, "ads-ranker")["conditions"] if c["type"] == "ReplicasFromSpec")
    assert owner["status"] == "False" and owner["reason"] == "BuiltInAutoscaler"
    assert "spec.replicas (5) is only its starting point" in owner["message"]
    # Every Event says it comes from this operator, not from the framework.
    events = cluster.events("default")
    assert events and {e["source"]["component"] for e in events} == {"gem-operator"}
    assert {e.get("reportingComponent") for e in events} == {"gem-operator"}
