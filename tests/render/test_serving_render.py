"""RankingService / SolarisPrecompute builders."""

from __future__ import annotations

import pytest

from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.render.common import Owner
from gem_operator.render.serving import (
    desired_replicas_from_spec,
    pool_selector,
    render_precompute,
    render_ranking_service,
)

OWNER = Owner("gem.dev/v1alpha1", "RankingService", "rank", "prod", "u-2")


def ranking(**extra: object) -> RankingServiceSpec:
    return RankingServiceSpec.model_validate({"model": {"uri": "s3://m/v1"}, **extra})


@pytest.mark.parametrize(
    ("replicas", "autoscaling", "expected"),
    [
        (1, {"minReplicas": 2, "maxReplicas": 4}, 2),
        (9, {"minReplicas": 2, "maxReplicas": 4}, 4),
        (3, {"enabled": False}, 3),
    ],
)
def test_replicas_from_spec_within_bounds(replicas: int, autoscaling: dict[str, object], expected: int) -> None:
    assert desired_replicas_from_spec(ranking(replicas=replicas, autoscaling=autoscaling)) == expected


def test_ranking_deployment_and_service() -> None:
    spec = ranking(gpusPerReplica=2, model={"uri": "s3://m/v1", "credentialsSecretRef": {"name": "creds"}})
    deploy, service = render_ranking_service(OWNER, spec, 3)
    assert deploy["metadata"]["name"] == "rank-server" and deploy["spec"]["replicas"] == 3
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"] == selector
    pod = deploy["spec"]["template"]["spec"]
    loader = pod["initContainers"][0]
    assert loader["args"][:3] == ["pull", "s3://m/v1", "/var/lib/gem/model"]
    assert loader["envFrom"] == [{"secretRef": {"name": "creds"}}]
    main = pod["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "GEM_MODEL_DIR", "value": "/var/lib/gem/model"} in main["env"]
    assert "secret" not in str(main).lower()  # credentials reach only the loader
    assert deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pool_selector(OWNER, "server") == "gem.dev/kind=rankingservice,gem.dev/instance=rank,gem.dev/role=server"


def test_no_node_cache_means_no_hostpath() -> None:
    spec = ranking(model={"uri": "s3://m/v1", "loader": {"nodeCache": False}})
    deploy, _ = render_ranking_service(OWNER, spec, 1)
    assert all("hostPath" not in v for v in deploy["spec"]["template"]["spec"]["volumes"])


def test_operator_without_node_cache_drops_the_hostpath_whatever_the_spec() -> None:
    """GEM_NODE_CACHE=off (the chart's default install): no hostPath, no --cache, though nodeCache is true."""
    spec = ranking()
    assert spec.model.loader.node_cache
    deploy, _ = render_ranking_service(OWNER, spec, 1, node_cache=False)
    pod = deploy["spec"]["template"]["spec"]
    assert all("hostPath" not in v for v in pod["volumes"])
    assert "--cache" not in pod["initContainers"][0]["args"]
    on, _ = render_ranking_service(OWNER, spec, 1)
    assert "--cache" in on["spec"]["template"]["spec"]["initContainers"][0]["args"]


def test_precompute_deployment() -> None:
    spec = SolarisPrecomputeSpec.model_validate(
        {
            "model": {"uri": "gs://m/f"},
            "store": {"url": "redis://s:6379/0", "credentialsSecretRef": "redis-pass"},
            "source": {"url": "redis://s:6379/0"},
        }
    )
    owner = Owner("gem.dev/v1alpha1", "SolarisPrecompute", "pre", "prod", "u-3")
    (deploy,) = render_precompute(owner, spec, 0)
    assert deploy["metadata"]["name"] == "pre-precompute" and deploy["spec"]["replicas"] == 0
    main = deploy["spec"]["template"]["spec"]["containers"][0]
    assert "--fallback" in main["args"] and "exact,userAdGroupAggregate,similarUser" in main["args"]
    assert main["envFrom"] == [{"secretRef": {"name": "redis-pass"}}]


def test_loader_tries_peers_when_the_cache_daemonset_is_there() -> None:
    url = "http://gem-operator-model-cache.gem-system.svc:8470"
    deploy, _ = render_ranking_service(OWNER, ranking(), 1, peers=[url])
    args = deploy["spec"]["template"]["spec"]["initContainers"][0]["args"]
    assert args[args.index("--peers") + 1] == url
    off = ranking(model={"uri": "s3://m/v1", "loader": {"peerCache": False}})
    deploy, _ = render_ranking_service(OWNER, off, 1, peers=[url])
    assert "--peers" not in deploy["spec"]["template"]["spec"]["initContainers"][0]["args"]
    deploy, _ = render_ranking_service(OWNER, ranking(), 1)
    assert "--peers" not in deploy["spec"]["template"]["spec"]["initContainers"][0]["args"]
