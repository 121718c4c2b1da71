"""Gang placement on small hand-drawn clusters.

The default cluster (8 hosts of 8 GPUs, one block, one zone):

    rack r0: nvl-0 [h0 h1]  nvl-1 [h2 h3]
    rack r1: nvl-2 [h4 h5]  nvl-3 [h6 h7]
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from gem_operator.api.training import GEMTrainingSpec, TopologyTier
from gem_operator.topology import (
    ClusterView,
    Infeasible,
    Placement,
    cluster_view_from_objects,
    comm_cost,
    embedding_sharding_group,
    explain_plan,
    plan_from_files,
    plan_gang,
)
from gem_operator.topology.planner import cost_model_for, plan_rows

CLIQUE = "nvidia.com/gpu.clique"


def node(
    name: str,
    nvl: str | None,
    rack: str | None,
    *,
    block: str = "b0",
    zone: str = "z0",
    gpus: int = 8,
    ready: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "gem.dev/block": block, "topology.kubernetes.io/zone": zone}
    if nvl:
        labels[CLIQUE] = nvl
    if rack:
        labels["gem.dev/rack"] = rack
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def busy(host: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": f"other-{host}"},
        "spec": {"nodeName": host, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]},
        "status": {"phase": "Running"},
    }


def cluster(**overrides: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for h in range(8):
        name = f"h{h}"
        kwargs = overrides.get(name, {})
        out.append(node(name, f"nvl-{h // 2}", f"r{h // 4}", **kwargs))
    return out


def spec(rules: list[dict[str, str]] | None = None, gpus_per_node: int = 8, **par: int) -> GEMTrainingSpec:
    body: dict[str, Any] = {
        "parallelism": par,
        "gpusPerNode": gpus_per_node,
        "checkpoint": {"uri": "/ckpt"},
    }
    if rules:
        body["topology"] = {"placement": rules}
    return GEMTrainingSpec.model_validate(body)


def view(nodes: list[dict[str, Any]], busy_hosts: tuple[str, ...] = ()) -> ClusterView:
    return cluster_view_from_objects(nodes, [busy(h) for h in busy_hosts])


def placed(result: Placement | Infeasible) -> Placement:
    assert isinstance(result, Placement), result.reason
    return result


# ---------------------------------------------------------------------------------------------
# Table: (spec, busy hosts, hosts expected by node rank, groups split per dimension and tier).
# Groups are counted over ranks: a world of 32 with cp=2 has 16 cp groups.

CASES = [
    pytest.param(
        spec(tp=8, dp_shard=2),
        (),
        ("h0", "h1"),
        {"tp": {"host": 0}, "dp_shard": {"nvlink": 0}},
        id="tp8-on-8gpu-hosts-fills-one-nvlink-domain",
    ),
    pytest.param(
        spec(tp=8, cp=2),
        ("h0", "h2", "h4"),
        ("h6", "h7"),
        {"cp": {"nvlink": 0}},
        id="cp2-goes-to-the-only-nvlink-domain-with-room",
    ),
    pytest.param(
        spec(tp=8, cp=2, dp_shard=2),
        ("h0", "h4"),
        ("h2", "h3", "h6", "h7"),
        {"cp": {"nvlink": 0}, "dp_shard": {"rack": 16}},
        id="cp-groups-whole-in-nvlink-even-across-racks",
    ),
    pytest.param(
        spec(tp=8, cp=2),
        ("h1", "h3", "h5", "h7"),
        ("h0", "h2"),
        {"cp": {"nvlink": 8, "rack": 0}},
        id="fragmentation-forces-a-split-but-stays-in-one-rack",
    ),
    pytest.param(
        spec(tp=4, dp_shard=2, cp=2, gpus_per_node=8),
        ("h1", "h3", "h5", "h7"),
        ("h0", "h2"),
        {"tp": {"host": 0}, "cp": {"host": 0}},
        id="tp4-cp2-fit-inside-one-host",
    ),
]


@pytest.mark.parametrize(("job", "busy_hosts", "expected_nodes", "splits"), CASES)
def test_table(
    job: GEMTrainingSpec,
    busy_hosts: tuple[str, ...],
    expected_nodes: tuple[str, ...],
    splits: dict[str, dict[str, int]],
) -> None:
    plan = placed(plan_gang(job, view(cluster(), busy_hosts)))
    assert plan.nodes == expected_nodes
    for dim, tiers in splits.items():
        for tier, n in tiers.items():
            assert plan.cost.groups_split[dim][tier] == n, (dim, tier, plan.cost.groups_split[dim])
    assert plan.cost.groups_split["tp"]["host"] == 0


def test_fragmented_cp_gets_a_preferred_warning() -> None:
    plan = placed(plan_gang(spec(tp=8, cp=2), view(cluster(), ("h1", "h3", "h5", "h7"))))
    assert any("cp" in w and "nvlink" in w and "Preferred" in w for w in plan.warnings)


def test_required_rule_infeasible_says_what_is_missing_and_where() -> None:
    job = spec([{"dimension": "cp", "tier": "nvlink", "mode": "Required"}], tp=8, cp=2)
    result = plan_gang(job, view(cluster(), ("h1", "h3", "h5", "h7")))
    assert isinstance(result, Infeasible)
    assert "needs 8 more free GPUs in one nvlink domain" in result.reason
    assert "the best domain nvl-0 has 8 free of 16 GPUs" in result.reason
    assert "infeasible: needs 8 more" in explain_plan(result)
    assert result.to_json()["feasible"] is False and result.to_json()["ranks"] == []


def test_required_rule_counts_room_across_domains() -> None:
    job = spec([{"dimension": "cp", "tier": "nvlink", "mode": "Required"}], tp=8, cp=2, dp_shard=2)
    result = plan_gang(job, view(cluster(), ("h0", "h2", "h4")))  # only nvl-3 holds a cp group
    assert isinstance(result, Infeasible)
    assert "room for 2 cp groups" in result.reason and "only 1" in result.reason


def test_required_rack_rule_is_met_when_nvlink_is_fragmented() -> None:
    job = spec([{"dimension": "cp", "tier": "rack", "mode": "Required"}], tp=8, cp=2, dp_shard=2)
    plan = placed(plan_gang(job, view(cluster(), ("h1", "h3", "h5", "h7"))))
    assert plan.cost.groups_split["cp"]["rack"] == 0
    assert {plan.node_domains[0]["rack"]} == {plan.node_domains[1]["rack"]}


def test_required_gang_within_rack() -> None:
    job = spec([{"dimension": "dpReplicate", "tier": "rack", "mode": "Required"}], tp=8, dp_replicate=4)
    plan = placed(plan_gang(job, view(cluster(), ("h0",))))
    assert set(plan.nodes) == {"h4", "h5", "h6", "h7"}
    result = plan_gang(job, view(cluster(), ("h0", "h4")))
    assert isinstance(result, Infeasible)
    assert "rack" in result.reason and "dp_replicate" in result.reason


def test_required_pp_within_block() -> None:
    nodes = [node(f"h{i}", None, f"r{i // 2}", block=f"b{i // 4}") for i in range(8)]
    job = spec([{"dimension": "pp", "tier": "block", "mode": "Required"}], tp=8, pp=2, dp_replicate=2)
    plan = placed(plan_gang(job, view(nodes, ("h0", "h1", "h4", "h5"))))
    assert plan.cost.groups_split["pp"]["block"] == 0


def test_excluded_nodes_are_never_used() -> None:
    plan = placed(plan_gang(spec(tp=8, dp_shard=2), view(cluster()), exclude_nodes={"h0", "h1"}))
    assert plan.nodes == ("h2", "h3")
    result = plan_gang(spec(tp=8, dp_shard=8), view(cluster()), exclude_nodes={"h3"})
    assert isinstance(result, Infeasible)
    assert "1 excluded" in result.reason and "7 of 8 qualify" in result.reason


def test_not_ready_cordoned_tainted_hosts_are_skipped() -> None:
    nodes = cluster(
        h0={"ready": False},
        h1={"unschedulable": True},
        h2={"taints": [{"key": "maintenance", "effect": "NoExecute"}]},
        h3={"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},  # tolerated
    )
    plan = placed(plan_gang(spec(tp=8, dp_shard=5), view(nodes)))
    assert not {"h0", "h1", "h2"} & set(plan.nodes)
    assert "h3" in plan.nodes
    result = plan_gang(spec(tp=8, dp_shard=6), view(nodes))
    assert isinstance(result, Infeasible)
    assert "1 not Ready, 1 cordoned, 1 tainted" in result.reason


def test_hosts_with_too_few_free_gpus_do_not_qualify() -> None:
    pods = [busy(f"h{i}", gpus=1) for i in range(8)]
    result = plan_gang(spec(tp=8), cluster_view_from_objects(cluster(), pods))
    assert isinstance(result, Infeasible)
    assert "8 too few free GPUs" in result.reason and "has 7 free" in result.reason
    # A 4-GPU job fits on a host with 7 free GPUs.
    plan = placed(plan_gang(spec(tp=4), cluster_view_from_objects(cluster(), pods)))
    assert plan.nproc_per_node == 4 and len(plan.nodes) == 1


def test_missing_labels_make_singleton_domains() -> None:
    nodes = [node(f"h{i}", None, None) for i in range(4)]
    tiers = [
        ("host", "kubernetes.io/hostname"),
        ("nvlink", CLIQUE),
        ("rack", "gem.dev/rack"),
        ("block", "gem.dev/block"),
    ]
    job = spec(tp=8, cp=2).model_copy(deep=True)
    job.topology.tiers = [TopologyTier(name=n, label=lbl) for n, lbl in tiers]
    plan = placed(plan_gang(job, view(nodes)))
    assert plan.cost.groups_split["cp"]["nvlink"] == 8  # all 8 cp groups (one per tp rank)
    assert plan.cost.groups_split["cp"]["rack"] == 8
    assert plan.node_domains[0]["nvlink"] == "(none)"


def test_ranks_and_coords_follow_node_rank() -> None:
    job = spec(tp=4, cp=2, dp_shard=2, pp=2)
    plan = placed(plan_gang(job, view(cluster())))
    ranks = plan.ranks()
    assert len(ranks) == job.world_size == 32
    for r in ranks:
        assert r.rank == r.node_rank * plan.nproc_per_node + r.local_rank
        assert r.node == plan.nodes[r.node_rank]
        assert list(r.coords) == [int(c) for c in np.unravel_index(r.rank, job.parallelism.shape)]  # row-major


def test_deterministic_and_independent_of_input_order() -> None:
    job = spec(tp=8, cp=2, dp_shard=2)
    nodes = cluster()
    first = placed(plan_gang(job, view(nodes, ("h1",))))
    shuffled = list(nodes)
    random.Random(3).shuffle(shuffled)
    again = placed(plan_gang(job, view(shuffled, ("h1",))))
    assert first.nodes == again.nodes
    assert first.to_json() == again.to_json()


def test_plan_from_files_and_json_contract() -> None:
    manifest: dict[str, Any] = {
        "apiVersion": "gem.dev/v1alpha1",
        "kind": "GEMTraining",
        "metadata": {"name": "job"},
        "spec": {"parallelism": {"tp": 8, "cp": 2, "dpShard": 2}, "checkpoint": {"uri": "/ckpt"}},
    }
    nodes = {"apiVersion": "v1", "kind": "List", "items": cluster()}
    pods = {"apiVersion": "v1", "kind": "List", "items": [busy("h0")]}
    result = placed(plan_from_files(manifest, nodes, pods))
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["feasible"] is True and doc["reason"] is None
    assert len(doc["ranks"]) == 32
    first = doc["ranks"][0]
    assert set(first) >= {"rank", "node", "localRank", "coords"}
    assert first["coords"] == {"pp": 0, "dp_replicate": 0, "dp_shard": 0, "cp": 0, "tp": 0}
    assert set(doc["score"]) == {"host", "nvlink", "rack", "block", "zone"}
    assert "h0" not in result.nodes
    # A bare spec works too.
    assert isinstance(plan_from_files(manifest["spec"], cluster()), Placement)


def test_explain_plan_and_summary() -> None:
    plan = placed(plan_gang(spec(tp=8, cp=2, dp_shard=2), view(cluster(), ("h0",))))
    text = explain_plan(plan)
    assert "nvlink" in text and "h4" in text and "bytes per step" in text
    rows = plan_rows(plan)
    assert ("nvlink", "nvl-2", "0-1") in rows and ("rack", "r1", "0-3") in rows
    summary = plan.summary()
    assert summary.nodes == list(plan.nodes) and summary.score == plan.score
    assert summary.cross_tier_bytes["host"] > 0
    # Pods 0-1 share nvl-2 and 2-3 nvl-3: a sharding group of 16 ranks stays inside NVLink.
    assert plan.aligned_group == {"host": 8, "nvlink": 16, "rack": 32, "block": 32, "zone": 32}


def test_not_enough_gpus_at_all() -> None:
    result = plan_gang(spec(tp=8, dp_shard=16), view(cluster()))
    assert isinstance(result, Infeasible)
    assert result.reason.startswith("needs 16 hosts with 8 free GPUs each (128 GPUs)")


def test_custom_tiers_without_hostname_tier() -> None:
    job = GEMTrainingSpec.model_validate(
        {
            "parallelism": {"tp": 8, "cp": 2},
            "checkpoint": {"uri": "/ckpt"},
            "topology": {
                "tiers": [{"name": "nvl", "label": CLIQUE}, {"name": "rack", "label": "gem.dev/rack"}],
                "placement": [{"dimension": "cp", "tier": "nvl", "mode": "Required"}],
            },
        }
    )
    plan = placed(plan_gang(job, view(cluster(), ("h0",))))
    assert plan.tiers == ("host", "nvl", "rack")
    assert plan.cost.groups_split["cp"]["nvl"] == 0


def test_comm_cost_by_hand() -> None:
    # dp_shard ring of 4 pods over 2 racks: 2 ring edges cross the rack tier.
    cost = comm_cost({"host": [0, 1, 2, 3], "rack": [0, 0, 1, 1]}, (1, 1, 4, 1, 1), 1)
    assert cost.groups_split["dp_shard"] == {"host": 1, "rack": 1}
    per_edge = cost.total_bytes["dp_shard"] / 4
    assert cost.bytes_by_dim["dp_shard"]["rack"] == pytest.approx(2 * per_edge)
    assert cost.bytes_by_dim["dp_shard"]["host"] == pytest.approx(4 * per_edge)
    # all-to-all (ep=4): 8 of the 16 ordered pairs cross racks.
    cost = comm_cost({"host": [0, 1, 2, 3], "rack": [0, 0, 1, 1]}, (1, 1, 4, 1, 1), 1, ep=4)
    assert cost.bytes_by_dim["ep"]["rack"] == pytest.approx(cost.total_bytes["ep"] * 8 / 12)
    assert cost.score > 0


@pytest.mark.parametrize(
    ("rules", "explicit", "group"),
    [
        (None, None, 16),  # default rule: one NVLink domain (two hosts here)
        ([{"dimension": "embedding", "tier": "rack", "mode": "Preferred"}], None, 32),
        ([{"dimension": "embedding", "tier": "host", "mode": "Preferred"}], None, 8),
        (None, 4, 4),  # the spec's value always wins
    ],
)
def test_embedding_sharding_group_follows_the_placement(
    rules: list[dict[str, str]] | None, explicit: int | None, group: int
) -> None:
    job = spec(rules, tp=8, cp=2, dp_shard=2)
    if explicit:
        job = job.model_copy(update={"embedding_sharding_group": explicit})
    plan = placed(plan_gang(job, view(cluster(), ("h0",))))
    assert embedding_sharding_group(plan, job) == group


def test_declared_tier_bandwidth_weights_the_score() -> None:
    default = placed(plan_gang(spec(tp=8, dp_shard=8), view(cluster())))
    assert default.bytes_by_tier["rack"] > 0  # the gang spans both racks
    tiers = [
        {"name": "host", "label": "kubernetes.io/hostname"},
        {"name": "nvlink", "label": CLIQUE},
        {"name": "rack", "label": "gem.dev/rack", "bandwidthGBps": 1},
        {"name": "block", "label": "gem.dev/block"},
        {"name": "zone", "label": "topology.kubernetes.io/zone"},
    ]
    slow = GEMTrainingSpec.model_validate(
        {"parallelism": {"tp": 8, "dpShard": 8}, "topology": {"tiers": tiers}, "checkpoint": {"uri": "/ckpt"}}
    )
    assert slow.topology.tiers[2].to_wire()["bandwidthGBps"] == 1
    plan = placed(plan_gang(slow, view(cluster())))
    assert plan.bytes_by_tier == default.bytes_by_tier  # same bytes, slower links: a higher score
    assert plan.score > default.score
    assert cost_model_for(slow).bandwidth("rack") == 1e9 and cost_model_for(slow).bandwidth("nvlink") == 50e9


def _replica_cluster() -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Block b0: four racks, each with one free NVLink pair (a cp slot) and one more free host, so
    the whole gang fits in b0 with its cp groups in four racks; blocks b1 and b2: one rack each,
    wholly free, each holding one data-parallel replica (two cp groups) in one rack."""
    nodes = []
    busy_hosts = []
    for r in range(6):
        block = "b0" if r < 4 else f"b{r - 3}"
        for h in range(4):
            name = f"r{r}h{h}"
            nodes.append(node(name, f"nvl-{r}-{h // 2}", f"r{r}", block=block))
            if r < 4 and h == 3:
                busy_hosts.append(name)
    return nodes, tuple(busy_hosts)


def test_replicas_spread_over_blocks_when_each_then_sits_in_one_rack() -> None:
    # tp=8 per host; cp groups of 2 hosts; dp_shard rings (heavy) inside a replica; dp_replicate (light) across.
    nodes, busy_hosts = _replica_cluster()
    job = spec(tp=8, cp=2, dp_shard=2, dp_replicate=2)
    plan = placed(plan_gang(job, view(nodes, busy_hosts)))
    replicas = [plan.nodes[:4], plan.nodes[4:]]
    racks = [{plan.node_domains[plan.nodes.index(h)]["rack"] for h in rep} for rep in replicas]
    assert sorted(r.pop() for r in racks if len(r) == 1) == ["r4", "r5"]  # each replica in one rack
    assert plan.cost.groups_split["cp"]["nvlink"] == 0
    assert plan.cost.groups_split["dp_shard"]["rack"] == 0
    # Kept together in b0 (what packing the gang whole chose before) costs more, by bytes and by score.
    together = ("r0h0", "r0h1", "r1h0", "r1h1", "r2h0", "r2h1", "r3h0", "r3h1")
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    tiers = {"host": "kubernetes.io/hostname", "nvlink": CLIQUE, "rack": "gem.dev/rack", "block": "gem.dev/block"}
    ids = {tier: [hash(labels[h][label]) for h in together] for tier, label in tiers.items()}
    kept = comm_cost(ids, job.parallelism.shape, job.nproc_per_node, model=cost_model_for(job))
    assert plan.cost.bytes_by_tier["rack"] < kept.bytes_by_tier["rack"]
    assert plan.cost.bytes_by_tier["block"] > 0 == kept.bytes_by_tier["block"]  # only dp_replicate crosses
    assert plan.score < kept.score
