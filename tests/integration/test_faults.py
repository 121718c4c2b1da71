"""The real operator behind a fault-injecting proxy: retries, status on failure, fast requeue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.drivers.demo import PEERING_NAME
from gem_testbed.faults.proxy import FaultProxy, FaultSpec

pytestmark = pytest.mark.integration
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"
GEM = "gem.dev/v1alpha1"


@pytest.fixture
def proxy(cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    with FaultProxy(cluster.url) as p:
        monkeypatch.setenv("KUBECONFIG", str(p.write_kubeconfig(tmp_path / "faulty.kubeconfig")))
        yield p


@pytest.fixture
def faulty_operator(proxy: FaultProxy) -> Iterator[OperatorThread]:
    op = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
    op.start()
    yield op
    op.stop()


def status(cluster: EmbeddedCluster, kind: str, name: str) -> dict[str, Any]:
    return dict((cluster.get(GEM, kind, name, "default") or {}).get("status") or {})


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == type_), {})


def sample(file: str) -> dict[str, Any]:
    return dict(yaml.safe_load((SAMPLES / file).read_text()))


def test_a_call_that_keeps_failing_is_reported_in_status_and_retried_within_seconds(
    cluster: EmbeddedCluster, proxy: FaultProxy, faulty_operator: OperatorThread
) -> None:
    proxy.spec = FaultSpec(always_fail=("POST /apis/apps/v1/namespaces/default/deployments",))
    cluster.apply(sample("rankingservice.yaml"))
    degraded = cluster.wait_for(
        lambda: condition(status(cluster, "RankingService", "ads-ranker"), "Degraded") or None, timeout=30
    )
    assert degraded["status"] == "True" and degraded["reason"] == "ReconcileError"
    assert "create Deployment default/ads-ranker-server failed after" in degraded["message"]
    assert "HTTP 500" in degraded["message"]
    # Requeued within seconds (kopf's default would wait 60 s): more passes keep trying.
    hits = proxy.counts["always_fail"]
    cluster.wait_for(lambda: proxy.counts["always_fail"] >= hits + 6, timeout=20)
    assert any(e["reason"] == "ReconcileError" for e in cluster.events("default"))
    # The API recovers: the next pass converges and clears Degraded.
    proxy.spec = FaultSpec()
    cluster.wait_for(lambda: status(cluster, "RankingService", "ads-ranker").get("phase") == "Ready", timeout=40)
    cluster.wait_for(
        lambda: condition(status(cluster, "RankingService", "ads-ranker"), "Degraded").get("status") == "False",
        timeout=20,
    )
