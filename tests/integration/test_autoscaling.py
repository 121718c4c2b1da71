"""The built-in autoscaler on the embedded cluster: the child Deployment follows the load."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gem_operator.autoscaling.access import PrometheusCredentials
from gem_operator.autoscaling.policy import PrecomputeSignals
from gem_operator.autoscaling.sources import SimulatedSource
from gem_operator.cli.operator import OperatorThread
from gem_operator.controllers.autoscaler import use_metric_sources, use_prometheus_credentials
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.servers.dcgm import SmActiveSimulator

pytestmark = pytest.mark.integration
GEM = "gem.dev/v1alpha1"
FAST_POLICIES = {
    "scaleUp": [{"pods": 8, "periodSeconds": 1}],
    "scaleDown": [{"percent": 100, "periodSeconds": 1}],
}


@pytest.fixture
def source() -> Iterator[SimulatedSource]:
    src = SimulatedSource()
    use_metric_sources(lambda _spec: src, lambda _spec: src)
    yield src
    use_metric_sources(None, None)


def ranker(name: str = "ranker", **autoscaling: Any) -> dict[str, Any]:
    return {
        "apiVersion": GEM,
        "kind": "RankingService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "model": {"uri": "s3://models/r"},
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 6,
                "targetSmActive": 0.6,
                "stabilizationSeconds": {"up": 0, "down": 0},
                "policies": FAST_POLICIES,
                **autoscaling,
            },
        },
    }


def deployment_replicas(cluster: EmbeddedCluster, name: str) -> int:
    deploy = cluster.get("apps/v1", "Deployment", name, "default") or {}
    return int((deploy.get("spec") or {}).get("replicas") or -1)


def status(cluster: EmbeddedCluster, kind: str, name: str) -> dict[str, Any]:
    return ((cluster.get(GEM, kind, name, "default") or {}).get("status")) or {}


def test_replicas_follow_load_and_hold_without_metrics(
    cluster: EmbeddedCluster,
    source: SimulatedSource,
    start_operator: type[OperatorThread],
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    load = {"value": 60.0}
    dcgm = SmActiveSimulator(cluster, source, interval=0.1)
    dcgm.add_pool("default", {"gem.dev/instance": "ranker", "gem.dev/role": "server"}, lambda _t: load["value"])
    dcgm.start()
    try:
        start_operator()  # type: ignore[call-arg]
        cluster.apply(ranker())
        cluster.wait_for(lambda: status(cluster, "RankingService", "ranker").get("phase") == "Ready", timeout=30)
        assert deployment_replicas(cluster, "ranker-server") == 1

        load["value"] = 700.0  # ~3.5 replicas of work: at SM target 0.6 that needs 6
        cluster.wait_for(lambda: deployment_replicas(cluster, "ranker-server") == 6, timeout=40)
        # The pass scales the Deployment first and writes its own status last: wait for that write.
        cluster.wait_for(lambda: status(cluster, "RankingService", "ranker").get("desiredReplicas") == 6, timeout=10)
        st = status(cluster, "RankingService", "ranker")
        assert st["desiredReplicas"] == 6 and st["lastScaleReason"]
        wait_for_events({("ranker", "Scaled")})

        load["value"] = 60.0
        cluster.wait_for(lambda: deployment_replicas(cluster, "ranker-server") <= 2, timeout=40)
        low = deployment_replicas(cluster, "ranker-server")

        # Metrics vanish while load would allow fewer replicas: hold, and say why.
        source.fail("prometheus unreachable")
        load["value"] = 700.0
        cluster.wait_for(
            lambda: any(
                c["type"] == "MetricsUnavailable" and c["status"] == "True"
                for c in status(cluster, "RankingService", "ranker").get("conditions", [])
            ),
            timeout=30,
        )
        assert deployment_replicas(cluster, "ranker-server") == low
    finally:
        dcgm.stop()


def test_the_operators_prometheus_credentials_reach_each_sync(
    cluster: EmbeddedCluster, start_operator: type[OperatorThread], tmp_path: Any
) -> None:
    """Prometheus read as on a real cluster (no simulated source), with the operator's credentials:
    a token file that cannot be read holds the pool and says which setting and file, in the
    MetricsUnavailable condition, before anything is asked of Prometheus."""
    use_metric_sources(None, None)
    token = tmp_path / "token"
    use_prometheus_credentials(PrometheusCredentials(bearer_token_file=str(token)))
    try:
        start_operator()  # type: ignore[call-arg]
        prometheus = {"url": "http://127.0.0.1:9", "headers": {"X-Scope-OrgID": "team-ads"}}
        cluster.apply(ranker(metrics={"prometheus": prometheus}))

        def unavailable() -> str:
            for c in status(cluster, "RankingService", "ranker").get("conditions", []):
                if c["type"] == "MetricsUnavailable" and c["status"] == "True":
                    return str(c.get("message", ""))
            return ""

        cluster.wait_for(lambda: "GEM_PROMETHEUS_BEARER_TOKEN_FILE" in unavailable(), timeout=30)
        assert f"GEM_PROMETHEUS_BEARER_TOKEN_FILE: cannot read {token}" in unavailable()
    finally:
        use_prometheus_credentials(PrometheusCredentials())


def test_disabled_autoscaler_leaves_replicas_to_spec(cluster: EmbeddedCluster, source: SimulatedSource,
                                                     operator: OperatorThread) -> None:  # fmt: skip
    doc = ranker("manual", enabled=False)
    doc["spec"]["replicas"] = 3
    cluster.apply(doc)
    cluster.wait_for(lambda: deployment_replicas(cluster, "manual-server") == 3, timeout=30)
    # HPA/KEDA would write spec.replicas through the scale subresource.
    scaled = cluster.apply({**doc, "spec": {**doc["spec"], "replicas": 5}})
    assert scaled["spec"]["replicas"] == 5
    cluster.wait_for(lambda: deployment_replicas(cluster, "manual-server") == 5, timeout=30)


def test_precompute_scales_on_backlog_and_yields(cluster: EmbeddedCluster, source: SimulatedSource,
                                                 operator: OperatorThread) -> None:  # fmt: skip
    doc = {
        "apiVersion": GEM,
        "kind": "SolarisPrecompute",
        "metadata": {"name": "pre", "namespace": "default"},
        "spec": {
            "model": {"uri": "s3://models/f"},
            "store": {"url": "redis://s:6379/0"},
            "source": {"url": "redis://s:6379/0"},
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 5,
                "backlogTargetPerReplica": 100,
                "stabilizationSeconds": {"up": 0, "down": 0},
                "policies": FAST_POLICIES,
                "yieldTo": "ranker",
            },
        },
    }
    source.push_precompute("default", PrecomputeSignals(backlog=450, oldest_item_age_seconds=5.0))
    cluster.apply(doc)
    cluster.wait_for(lambda: deployment_replicas(cluster, "pre-precompute") == 5, timeout=40)
    source.push_precompute(
        "default",
        PrecomputeSignals(backlog=450, oldest_item_age_seconds=5.0, ranker_over_slo=True, ranker_message="p99 90 ms"),
    )
    cluster.wait_for(lambda: deployment_replicas(cluster, "pre-precompute") == 1, timeout=40)


def test_slo_feedback_lands_in_status_and_survives_an_operator_restart(
    cluster: EmbeddedCluster, start_operator: type[OperatorThread]
) -> None:
    """A p99 over the SLO cuts status.autoscaling.effectiveTargetSmActive and blocks scale-down; a new
    operator process resumes from status (the latency gone, it holds what was learned)."""
    src, latency = SimulatedSource(), SimulatedSource()
    use_metric_sources(lambda _spec: src, lambda _spec: src, None, lambda _spec: latency)
    load = {"value": 30.0}  # SM ~0.17 on 1 replica: would scale to the floor
    dcgm = SmActiveSimulator(cluster, src, interval=0.1)
    dcgm.add_pool("default", {"gem.dev/instance": "slo", "gem.dev/role": "server"}, lambda _t: load["value"])
    dcgm.start()
    try:
        first = start_operator()  # type: ignore[call-arg]
        body = ranker("slo", minReplicas=1, sloFeedback={"decreaseIntervalSeconds": 0})
        body["spec"]["replicas"] = 1
        body["spec"]["slo"] = {"p99LatencyMs": 40}
        cluster.apply(body)
        cluster.wait_for(lambda: status(cluster, "RankingService", "slo").get("phase") == "Ready", timeout=30)
        cluster.wait_for(
            lambda: (
                (status(cluster, "RankingService", "slo").get("autoscaling") or {}).get("effectiveTargetSmActive")
                == 0.6
            ),
            timeout=20,
        )

        def learned() -> float:
            return float((status(cluster, "RankingService", "slo").get("autoscaling") or {})["effectiveTargetSmActive"])

        import time

        latency.push_latency("default", 80.0, time.time())
        cluster.wait_for(lambda: learned() < 0.5, timeout=30)
        st = status(cluster, "RankingService", "slo")
        assert st["autoscaling"]["p99LatencyMs"] == 80.0
        assert st["scalerState"]["effectiveTarget"] == pytest.approx(learned(), abs=1e-3)

        # A new operator process, and the latency signal gone: it resumes from status, no reset.
        first.stop()
        latency.fail("prometheus unreachable")
        before = learned()
        stamp = status(cluster, "RankingService", "slo")["lastMetric"]["timestamp"]
        time.sleep(1.1)  # the next SM sample carries a later second
        start_operator()  # type: ignore[call-arg]
        # The new process's first pass writes a new lastMetric: by then it has read scalerState back.
        cluster.wait_for(
            lambda: status(cluster, "RankingService", "slo")["lastMetric"]["timestamp"] != stamp, timeout=20
        )
        assert learned() == pytest.approx(before)  # a fresh state would have written 0.6
    finally:
        dcgm.stop()
        use_metric_sources(None, None)


def test_a_target_learned_for_half_an_hour_is_a_condition_and_one_event(
    cluster: EmbeddedCluster,
    source: SimulatedSource,
    start_operator: type[OperatorThread],
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    """The run of low targets the TargetLearned condition counts lives in status.scalerState: a pool
    whose status says the loop has held 0.36 (0.6 x targetSmActive) for 31 minutes, read back through
    the API, turns the condition True at its first sync, with one event, and keeps the run."""
    dcgm = SmActiveSimulator(cluster, source, interval=0.1)
    dcgm.add_pool("default", {"gem.dev/instance": "learned", "gem.dev/role": "server"}, lambda _t: 50.0)
    dcgm.start()
    since = time.time() - 31 * 60
    try:
        doc = ranker("learned")
        doc["spec"]["slo"] = {"p99LatencyMs": 40}
        doc["status"] = {"scalerState": {"effectiveTarget": 0.36, "targetLowRun": [since, 0.38]}}
        cluster.apply(doc)
        start_operator()  # type: ignore[call-arg]

        def learned() -> dict[str, Any] | None:
            for c in status(cluster, "RankingService", "learned").get("conditions", []):
                if c["type"] == "TargetLearned" and c["status"] == "True":
                    return dict(c)
            return None

        cond = cluster.wait_for(learned, timeout=30)
        assert cond["reason"] == "HeldBelowDeclared"
        assert "declare spec.autoscaling.targetSmActive near 0.36" in cond["message"]
        wait_for_events({("learned", "TargetLearned")})
        kept = status(cluster, "RankingService", "learned")["scalerState"]["targetLowRun"]
        assert kept == [since, 0.38]
        # Later syncs keep the condition True and post no second event.
        first_sync = status(cluster, "RankingService", "learned").get("lastMetric")
        cluster.wait_for(
            lambda: status(cluster, "RankingService", "learned").get("lastMetric") != first_sync, timeout=30
        )
        posted = [e for e in cluster.events("default") if e["reason"] == "TargetLearned"]
        assert len(posted) == 1 and learned() is not None
    finally:
        dcgm.stop()
