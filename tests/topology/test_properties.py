"""Planner invariants on random small clusters and meshes (hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.topology import ClusterView, HostView, Infeasible, Placement, plan_gang
from gem_operator.topology.cluster import blocking_taints
from gem_operator.topology.products import GPU_PRODUCT_LABEL, UNLABELLED, product_of

TIER_LABELS = ("nvidia.com/gpu.clique", "gem.dev/rack", "gem.dev/block", "topology.kubernetes.io/zone")
DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterView, frozenset[str]]:
    n_hosts = draw(st.integers(1, 24))
    gpus = draw(st.sampled_from((4, 8)))
    hosts_per_nvl = draw(st.integers(1, 6))
    hosts_per_rack = hosts_per_nvl * draw(st.integers(1, 3))
    # GPU products: none labelled, or each host one of two products (or, rarely, unlabelled).
    products = draw(st.sampled_from(((), ("H100",), ("H100", "A100"), ("H100", "A100", None))))
    hosts = []
    for i in range(n_hosts):
        rack = i // hosts_per_rack
        labels = {
            "kubernetes.io/hostname": f"h{i:02d}",
            "nvidia.com/gpu.clique": f"nvl{i // hosts_per_nvl}",
            "gem.dev/rack": f"r{rack}",
            "gem.dev/block": f"b{rack // 2}",
            "topology.kubernetes.io/zone": f"z{rack // 4}",
        }
        # Some hosts lose a label: they become domains of their own at that tier.
        if draw(st.integers(0, 9)) == 0:
            labels.pop(draw(st.sampled_from(TIER_LABELS)))
        product = draw(st.sampled_from(products)) if products else None
        if product is not None:
            labels[GPU_PRODUCT_LABEL] = product
        hosts.append(
            HostView(
                name=f"h{i:02d}",
                labels=labels,
                allocatable_gpus=gpus,
                used_gpus=draw(st.sampled_from((0, 0, 0, 0, 1, gpus))),
                ready=draw(st.integers(0, 11)) > 0,
                unschedulable=draw(st.integers(0, 11)) == 0,
            )
        )
    exclude = frozenset(h.name for h in hosts if draw(st.integers(0, 14)) == 0)
    return ClusterView(hosts=tuple(hosts)), exclude


@st.composite
def jobs(draw: st.DrawFn) -> GEMTrainingSpec:
    gpus_per_node = draw(st.sampled_from((4, 8)))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if gpus_per_node % t == 0]))
    cp = draw(st.sampled_from((1, 1, 2, 4)))
    pp = draw(st.sampled_from((1, 1, 2, 3)))
    dr = draw(st.sampled_from((1, 1, 2)))
    ds = draw(st.sampled_from((1, 2, 3, 4, 8)))
    world = tp * cp * pp * dr * ds
    if world > gpus_per_node and world % gpus_per_node:
        ds *= gpus_per_node  # make the world a multiple of the host
        world *= gpus_per_node
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if (ds * cp) % e == 0]))
    emb = draw(st.sampled_from([None] + [e for e in (4, 8, 16) if world % e == 0]))
    rules: list[dict[str, str]] = []
    for _ in range(draw(st.integers(0, 2))):
        rules.append(
            {
                "dimension": draw(st.sampled_from(("cp", "ep", "pp", "dpShard", "embedding", "tp"))),
                "tier": draw(st.sampled_from(("nvlink", "rack", "block", "zone"))),
                "mode": draw(st.sampled_from(("Required", "Preferred"))),
            }
        )
    body: dict[str, Any] = {
        "parallelism": {"pp": pp, "dpReplicate": dr, "dpShard": ds, "cp": cp, "tp": tp, "ep": ep},
        "gpusPerNode": gpus_per_node,
        "embeddingShardingGroup": emb,
        "checkpoint": {"uri": "/ckpt"},
        "topology": {"placement": rules},
    }
    return GEMTrainingSpec.model_validate(body)


def qualifies(host: HostView, nproc: int, exclude: frozenset[str]) -> bool:
    return (
        host.name not in exclude
        and host.ready
        and not host.unschedulable
        and not blocking_taints(host)
        and host.free_gpus >= nproc
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), jobs())
def test_planner_invariants(cluster: tuple[ClusterView, frozenset[str]], job: GEMTrainingSpec) -> None:
    view, exclude = cluster
    result = plan_gang(job, view, exclude_nodes=exclude)
    nproc = job.nproc_per_node
    usable = [h for h in view.hosts if qualifies(h, nproc, exclude)]
    event("feasible" if isinstance(result, Placement) else "infeasible")
    if isinstance(result, Infeasible):
        assert result.reason.strip()  # infeasible => an explanation
        assert result.to_json()["feasible"] is False
        # Without Required rules, counting hosts is the only reason to refuse.
        if not any(r.mode == "Required" and r.dimension != "tp" for r in job.topology.placement):
            assert len(usable) < job.num_nodes, result.reason
        return
    assert isinstance(result, Placement)
    assert result.reason is None
    # World size preserved; one pod per host; no host (or GPU) used twice; only qualifying hosts.
    assert len(result.nodes) == job.num_nodes
    assert result.world_size == job.world_size
    assert len(set(result.nodes)) == len(result.nodes)
    by_name = view.by_name()
    for name in result.nodes:
        assert qualifies(by_name[name], nproc, exclude)
    # tp groups never leave a host.
    assert result.cost.groups_split["tp"]["host"] == 0
    # One GPU product when one can hold the gang; spanning several is said.
    spanned = {product_of(by_name[n]) for n in result.nodes}
    mixed = any("no single GPU product can hold the gang" in w for w in result.warnings)
    event("spans GPU products" if mixed else f"{len(spanned)} GPU product label(s) on the gang")
    assert mixed == (len(spanned) > 1 and len({product_of(h) for h in usable} - {UNLABELLED}) > 1)
    per_product = {p: sum(1 for h in usable if product_of(h) == p) for p in {product_of(h) for h in usable}}
    if not any(r.mode == "Required" for r in job.topology.placement) and max(per_product.values()) >= job.num_nodes:
        assert len(spanned) == 1 or len(per_product.keys() - {UNLABELLED}) < 2, (spanned, per_product)
    # Coordinates form a bijection with ranks and follow the DeviceMesh convention.
    ranks = result.ranks()
    assert [r.rank for r in ranks] == list(range(job.world_size))
    coords = {r.coords for r in ranks}
    assert len(coords) == job.world_size
    for r in ranks:
        assert all(0 <= c < s for c, s in zip(r.coords, job.parallelism.shape, strict=True))
        assert list(r.coords) == [int(c) for c in np.unravel_index(r.rank, job.parallelism.shape)]  # row-major
        assert r.node == result.nodes[r.rank // nproc]
    # Required rules hold.
    names = {"dpShard": "dp_shard", "dpReplicate": "dp_replicate"}
    for rule in job.topology.placement:
        if rule.mode == "Required":
            dim = names.get(rule.dimension, rule.dimension)
            assert result.cost.groups_split[dim][rule.tier] == 0, (rule, result.cost.groups_split[dim])
    # Deterministic.
    again = plan_gang(job, view, exclude_nodes=exclude)
    assert isinstance(again, Placement) and again.nodes == result.nodes
