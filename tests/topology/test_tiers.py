"""Independent tiers, label discovery and Kueue Topology levels, over hand-drawn fleets.

A fleet is drawn one host per line: ``name clique rack block`` with ``-`` for a missing label.
"""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.api.validation import InvalidSpec, parse_spec
from gem_operator.topology import Infeasible, Placement, cluster_view_from_objects, explain_plan, plan_gang
from gem_operator.topology.tiers import discover, kueue_levels

CLIQUE = "nvidia.com/gpu.clique"
RACK = "gem.dev/rack"
BLOCK = "gem.dev/block"
EXPLICIT = [
    {"name": "host", "label": "kubernetes.io/hostname"},
    {"name": "nvlink", "label": CLIQUE},
    {"name": "rack", "label": RACK},
    {"name": "block", "label": BLOCK},
    {"name": "zone", "label": "topology.kubernetes.io/zone"},
]


def node(name: str, labels: dict[str, str], gpus: int = 8) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def fleet(drawing: str) -> list[dict[str, Any]]:
    out = []
    for line in drawing.strip().splitlines():
        name, *values = line.split()
        labels = {k: v for k, v in zip((CLIQUE, RACK, BLOCK), values, strict=False) if v != "-"}
        out.append(node(name, labels))
    return out


def busy(host: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": f"other-{host}"},
        "spec": {"nodeName": host, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 8}}}]},
        "status": {"phase": "Running"},
    }


def job(tiers: list[dict[str, str]] | None = None, rules: list[dict[str, str]] | None = None, **par: int) -> Any:
    topology: dict[str, Any] = {}
    if tiers is not None:
        topology["tiers"] = tiers
    if rules:
        topology["placement"] = rules
    return GEMTrainingSpec.model_validate({"parallelism": par, "checkpoint": {"uri": "/c"}, "topology": topology})


def placed(result: Placement | Infeasible) -> Placement:
    assert isinstance(result, Placement), result.reason
    return result


# ---------------------------------------------------------------------------------------------
# The case that a widest-first walk got wrong: cliques labelled, racks and blocks not.

CLIQUES_ONLY = "\n".join(f"g{i:02d} nvl-{i // 4} - -" for i in range(16))


@pytest.mark.parametrize("tiers", [None, EXPLICIT], ids=["discovered", "explicit"])
def test_cliques_without_rack_labels_still_group_their_hosts(tiers: list[dict[str, str]] | None) -> None:
    # one host busy in every clique: each clique holds one cp pair, and 4 cp pairs are needed
    pods = [busy(f"g{i:02d}") for i in (0, 5, 10, 15)]
    plan = placed(
        plan_gang(job(tiers, pp=2, dp_shard=2, cp=2, tp=8), cluster_view_from_objects(fleet(CLIQUES_ONLY), pods))
    )
    assert plan.cost.groups_split["cp"]["nvlink"] == 0
    assert all(d["nvlink"].startswith("nvl-") for d in plan.node_domains)
    if tiers is None:
        assert plan.tiers == ("host", "nvlink")
    else:
        assert all(d["rack"] == "(none)" for d in plan.node_domains)


# ---------------------------------------------------------------------------------------------
# Table: fleet drawing, job, then per host the expected (nvlink, rack, block) domain names.

TABLE = [
    pytest.param(
        """
        h0 nvl-0 - b0
        h1 nvl-0 - b0
        h2 nvl-1 - b0
        h3 nvl-1 - b0
        """,
        {"h0": ("nvl-0", "(none)", "b0"), "h2": ("nvl-1", "(none)", "b0")},
        [],
        id="rack-missing-block-present",
    ),
    pytest.param(
        """
        h0 - r0 b0
        h1 - r0 b0
        h2 nvl-1 r1 b0
        h3 nvl-1 r1 b0
        """,
        {"h0": ("(none)", "r0", "b0"), "h1": ("(none)", "r0", "b0"), "h2": ("nvl-1", "r1", "b0")},
        [],
        id="clique-missing-rack-present",
    ),
    pytest.param(
        """
        h0 nvl-0 r0 b0
        h1 nvl-0 - b0
        h2 nvl-1 r1 -
        h3 nvl-1 r1 b0
        """,
        {"h1": ("nvl-0", "r0", "b0"), "h2": ("nvl-1", "r1", "b0")},
        [],
        id="partly-labelled-domains-take-their-tighter-domain's",
    ),
    pytest.param(
        """
        h0 nvl-0 r0 b0
        h1 nvl-0 r0 b0
        h2 nvl-0 r1 b0
        h3 nvl-1 r1 b0
        """,
        {"h0": ("nvl-0", "r0", "b0"), "h2": ("nvl-0", "r0", "b0"), "h3": ("nvl-1", "r1", "b0")},
        ["nvlink domain nvl-0 spans 2 rack domains (r0: 2 hosts, r1: 1 hosts); placed as one nvlink domain in rack r0"],
        id="clique-spanning-two-racks",
    ),
    pytest.param(
        """
        h0 nvl-0 r0 b0
        h1 nvl-0 r0 b0
        h2 nvl-1 r0 b1
        h3 nvl-1 r0 b1
        """,
        {"h0": ("nvl-0", "r0", "b0"), "h2": ("nvl-1", "r0", "b0")},
        ["rack domain r0 spans 2 block domains (b0: 2 hosts, b1: 2 hosts); placed as one rack domain in block b0"],
        id="rack-spanning-two-blocks-tie-takes-first-name",
    ),
    pytest.param(
        """
        h0 - - -
        h1 - - -
        h2 - - b0
        h3 - - b0
        """,
        {"h0": ("(none)", "(none)", "(none)"), "h2": ("(none)", "(none)", "b0")},
        [],
        id="unlabelled-hosts-are-alone-at-every-tier",
    ),
]


@pytest.mark.parametrize(("drawing", "expected", "warnings"), TABLE)
def test_independent_tiers(drawing: str, expected: dict[str, tuple[str, str, str]], warnings: list[str]) -> None:
    plan = placed(plan_gang(job(EXPLICIT, dp_shard=4, tp=8), cluster_view_from_objects(fleet(drawing))))
    domains = dict(zip(plan.nodes, plan.node_domains, strict=True))
    for host, (nvl, rack, block) in expected.items():
        assert (domains[host]["nvlink"], domains[host]["rack"], domains[host]["block"]) == (nvl, rack, block), host
    assert [w.split(" (check")[0] for w in plan.topology_warnings] == warnings
    for w in warnings:
        assert any(w in x for x in plan.warnings)
        assert any(w in line for line in explain_plan(plan).splitlines())


def test_a_clique_spanning_racks_is_placed_by_its_clique() -> None:
    # nvl-0 holds h0 h1 (rack r0) and h2 (rack r1); r1 also holds h3 h4. A cp pair kept in one
    # clique may cross racks by label; the clique is what NVLink joins, so it wins.
    drawing = """
        h0 nvl-0 r0 b0
        h1 nvl-0 r0 b0
        h2 nvl-0 r1 b0
        h3 nvl-1 r1 b0
        h4 nvl-1 r1 b0
        h5 nvl-1 r1 b0
    """
    pods = [busy("h0"), busy("h3")]
    plan = placed(plan_gang(job(EXPLICIT, cp=2, dp_shard=2, tp=8), cluster_view_from_objects(fleet(drawing), pods)))
    assert plan.cost.groups_split["cp"]["nvlink"] == 0
    assert sorted(plan.nodes) == ["h1", "h2", "h4", "h5"]
    assert plan.topology_warnings and "nvl-0 spans 2 rack domains" in plan.topology_warnings[0]


# ---------------------------------------------------------------------------------------------
# Discovery

GKE = {
    "cloud.google.com/gce-topology-block": "blk-a",
    "cloud.google.com/gce-topology-subblock": "sub-1",
    "cloud.google.com/gce-topology-host": "phys-7",
}
EKS = {
    "topology.k8s.aws/network-node-layer-1": "nn-1",
    "topology.k8s.aws/network-node-layer-2": "nn-2",
    "topology.k8s.aws/network-node-layer-3": "nn-3",
}
OCI = {"oci.oraclecloud.com/host.rack_id": "rack-ocid", "oci.oraclecloud.com/host.network_block_id": "nb-ocid"}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(
            {**GKE, "topology.kubernetes.io/zone": "us-central1-a"},
            [
                ("machine", "cloud.google.com/gce-topology-host"),
                ("rack", "cloud.google.com/gce-topology-subblock"),
                ("block", "cloud.google.com/gce-topology-block"),
                ("zone", "topology.kubernetes.io/zone"),
            ],
            id="gke",
        ),
        pytest.param(
            {**EKS, CLIQUE: "c-0"},
            [
                ("nvlink", CLIQUE),
                ("rack", "topology.k8s.aws/network-node-layer-3"),
                ("block", "topology.k8s.aws/network-node-layer-2"),
                ("spine", "topology.k8s.aws/network-node-layer-1"),
            ],
            id="eks-with-gfd",
        ),
        pytest.param(
            OCI,
            [("rack", "oci.oraclecloud.com/host.rack_id"), ("block", "oci.oraclecloud.com/host.network_block_id")],
            id="oci",
        ),
        pytest.param({RACK: "r0", BLOCK: "b0"}, [("rack", RACK), ("block", BLOCK)], id="gem.dev"),
        pytest.param({}, [], id="bare"),
    ],
)
def test_discovery_finds_each_cloud_convention(labels: dict[str, str], expected: list[tuple[str, str]]) -> None:
    nodes = [node(f"n{i}", labels) for i in range(2)]
    names, found = discover(cluster_view_from_objects(nodes).hosts)
    assert list(zip(names, found, strict=True)) == [("host", None), *expected]


def test_discovery_counts_candidate_nodes_and_prefers_the_commoner_label() -> None:
    nodes = [node(f"n{i}", {OCI_RACK: f"o{i // 2}"} if i < 3 else {RACK: "r0"}) for i, OCI_RACK in
             [(i, "oci.oraclecloud.com/host.rack_id") for i in range(4)]]  # fmt: skip
    nodes.append(node("cpu-0", {RACK: "r9"}, gpus=0))  # not a candidate: no GPUs
    plan = placed(plan_gang(job(tp=8), cluster_view_from_objects(nodes)))
    assert plan.tierset is not None
    assert plan.tierset.source == "discovered"
    assert plan.tierset.usage() == [
        {"name": "host", "label": "kubernetes.io/hostname", "nodes": 4},
        {"name": "rack", "label": "oci.oraclecloud.com/host.rack_id", "nodes": 3},
    ]
    assert "tiers (discovered): host=kubernetes.io/hostname (4/4), rack=oci.oraclecloud.com/host.rack_id (3/4)" in (
        explain_plan(plan)
    )
    wire = plan.summary().to_wire()
    assert wire["tierSource"] == "discovered"
    assert wire["tiers"][1] == {"name": "rack", "label": "oci.oraclecloud.com/host.rack_id", "nodes": 3}
    assert plan.to_json()["candidateNodes"] == 4


def test_gke_fleet_places_cp_inside_subblocks() -> None:
    nodes = [
        node(f"g{i}", {**GKE, "cloud.google.com/gce-topology-subblock": f"sub-{i // 2}", "cloud.google.com/gce-topology-host": f"p{i}"})  # noqa: E501
        for i in range(6)
    ]  # fmt: skip
    rules = [{"dimension": "cp", "tier": "rack", "mode": "Required"}]
    plan = placed(plan_gang(job(rules=rules, cp=2, dp_shard=2, tp=8), cluster_view_from_objects(nodes, [busy("g0")])))
    assert plan.cost.groups_split["cp"]["rack"] == 0
    assert "g1" not in plan.nodes  # g1 is alone in sub-0 now


def test_rules_on_tiers_discovery_did_not_find() -> None:
    nodes = fleet("\n".join(f"h{i} - r{i // 2} -" for i in range(4)))
    view = cluster_view_from_objects(nodes)
    hard = plan_gang(job(rules=[{"dimension": "cp", "tier": "nvlink", "mode": "Required"}], cp=2, tp=8), view)
    assert isinstance(hard, Infeasible)
    assert "nvlink (Required)" in hard.reason and "host, rack (discovered)" in hard.reason
    soft = placed(plan_gang(job(rules=[{"dimension": "cp", "tier": "nvlink"}], cp=2, tp=8), view))
    assert any("'nvlink' is not among the tiers in use (host, rack)" in w for w in soft.warnings)


def test_unknown_rule_tier_without_tiers_is_refused_by_the_handler() -> None:
    body = {
        "apiVersion": "gem.dev/v1alpha1",
        "kind": "GEMTraining",
        "metadata": {"name": "x"},
        "spec": {"checkpoint": {"uri": "/c"}, "topology": {"placement": [{"dimension": "cp", "tier": "pod"}]}},
    }
    with pytest.raises(InvalidSpec) as err:
        parse_spec(GEM_TRAINING, body)
    assert "placement[0].tier 'pod' is not a tier" in str(err.value.problems)
    body["spec"]["topology"] = {"tiers": EXPLICIT, "kueueTopology": "default"}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(GEM_TRAINING, body)
    assert "not both" in str(err.value.problems)


# ---------------------------------------------------------------------------------------------
# Kueue Topology levels

KUEUE_TOPOLOGY = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "Topology",
    "metadata": {"name": "default"},
    "spec": {
        "levels": [
            {"nodeLabel": "cloud.provider.com/topology-block"},
            {"nodeLabel": RACK},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}


def test_kueue_topology_levels_become_the_tiers() -> None:
    nodes = [node(f"k{i}", {"cloud.provider.com/topology-block": "B", RACK: f"r{i // 2}"}) for i in range(4)]
    spec = job(cp=2, tp=8).model_copy(deep=True)
    spec.topology.kueue_topology = "default"
    plan = placed(plan_gang(spec, cluster_view_from_objects(nodes), kueue_levels=kueue_levels(KUEUE_TOPOLOGY)))
    assert plan.tiers == ("host", "rack", "topology-block")
    assert plan.tierset is not None and plan.tierset.source == "kueue/default"
    assert plan.cost.groups_split["cp"]["rack"] == 0
    # not read (the controller could not find it): no plan, and the message names the field
    missing = plan_gang(spec, cluster_view_from_objects(nodes))
    assert isinstance(missing, Infeasible) and "spec.topology.kueueTopology" in missing.reason


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"metadata": {"name": "t"}, "spec": {}}, "has no spec.levels"),
        ({"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": ""}]}}, "spec.levels[0].nodeLabel is missing"),
    ],
)
def test_bad_kueue_topologies_are_named(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        kueue_levels(obj)
