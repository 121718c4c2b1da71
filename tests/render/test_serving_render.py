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


def test_ranker_is_wired_to_its_precompute_pool_store_and_foundation_version() -> None:
    pool = SolarisPrecomputeSpec.model_validate(
        {
            "model": {"uri": "s3://m/foundation-v7"},
            "store": {"url": "redis://store:6379/1", "keyPrefix": "ads", "credentialsSecretRef": "redis-pass"},
            "source": {"url": "redis://stream:6379/0", "stream": "cands"},
            "fallback": {"tiers": ["exact", "similarUser"]},
            "foundationVersion": "foundation-v7",
        }
    )
    owner = Owner("gem.dev/v1alpha1", "SolarisPrecompute", "pre", "prod", "u-3")
    (pre,) = render_precompute(owner, pool, 1)
    pre_args = pre["spec"]["template"]["spec"]["containers"][0]["args"]
    assert pre_args[pre_args.index("--foundation-version") + 1] == "foundation-v7"
    deploy, _ = render_ranking_service(OWNER, ranking(precomputeRef="pre"), 1, precompute=pool)
    main = deploy["spec"]["template"]["spec"]["containers"][0]
    args = main["args"]

    def arg(flag: str) -> str:
        return str(args[args.index(flag) + 1])

    # Both sides name the same store, prefix, tiers and version; the ranker publishes to the pool's stream.
    assert arg("--embedding-store") == pool.store.url == pre_args[pre_args.index("--store") + 1]
    assert arg("--store-key-prefix") == "ads" == pre_args[pre_args.index("--key-prefix") + 1]
    assert arg("--fallback") == "exact,similarUser" == pre_args[pre_args.index("--fallback") + 1]
    assert arg("--store-version") == "foundation-v7"
    assert (arg("--publish-url"), arg("--publish-stream")) == ("redis://stream:6379/0", "cands")
    assert main["envFrom"] == [{"secretRef": {"name": "redis-pass"}}]
    # Without the pool (unset or not found) the ranker serves without a store.
    alone, _ = render_ranking_service(OWNER, ranking(precomputeRef="pre"), 1)
    assert "--embedding-store" not in alone["spec"]["template"]["spec"]["containers"][0]["args"]


def test_foundation_version_must_be_a_name() -> None:
    with pytest.raises(ValueError, match=r"foundation_?[vV]ersion"):
        SolarisPrecomputeSpec.model_validate(
            {
                "model": {"uri": "s3://m/f"},
                "store": {"url": "redis://s"},
                "source": {"url": "redis://s"},
                "foundationVersion": "bad version!",
            }
        )
