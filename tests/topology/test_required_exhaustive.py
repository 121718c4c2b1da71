"""Required rules on tiny clusters, checked against every possible assignment of hosts.

The planner must find a placement whenever one exists that keeps every Required group inside its
tier, and every placement it returns must keep them there.
"""

from __future__ import annotations

import itertools
import random

import pytest

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.topology import ClusterView, HostView, Infeasible, comm_cost, plan_gang

LABELS = ("nvidia.com/gpu.clique", "gem.dev/rack", "gem.dev/block", "topology.kubernetes.io/zone")
TIERS = ("nvlink", "rack", "block", "zone")
DIM = {"dpShard": "dp_shard", "dpReplicate": "dp_replicate"}


def _instance(rng: random.Random) -> tuple[ClusterView, GEMTrainingSpec] | None:
    n = rng.randint(2, 7)
    per_nvl = rng.randint(1, 3)
    per_rack = per_nvl * rng.randint(1, 2)
    hosts = []
    for i in range(n):
        rack = i // per_rack
        labels = {
            "kubernetes.io/hostname": f"h{i}",
            LABELS[0]: f"n{i // per_nvl}",
            LABELS[1]: f"r{rack}",
            LABELS[2]: f"b{rack // 2}",
            LABELS[3]: "z",
        }
        hosts.append(HostView(name=f"h{i}", labels=labels, allocatable_gpus=4, used_gpus=rng.choice((0, 0, 0, 4))))
    tp, cp, pp, dr, ds = (rng.choice(c) for c in ((1, 2, 4), (1, 2, 4), (1, 2), (1, 2), (1, 2)))
    world = tp * cp * pp * dr * ds
    if world % 4 or world // 4 > 4:
        return None
    ep = rng.choice([e for e in (1, 2, 4) if (ds * cp) % e == 0])
    rules = [
        {
            "dimension": rng.choice(("cp", "ep", "pp", "dpShard", "dpReplicate")),
            "tier": rng.choice(TIERS[:3]),
            "mode": "Required",
        }
        for _ in range(rng.randint(1, 2))
    ]
    spec = GEMTrainingSpec.model_validate(
        {
            "parallelism": {"pp": pp, "dpReplicate": dr, "dpShard": ds, "cp": cp, "tp": tp, "ep": ep},
            "gpusPerNode": 4,
            "checkpoint": {"uri": "/ckpt"},
            "topology": {"placement": rules},
        }
    )
    return ClusterView(hosts=tuple(hosts)), spec


def _satisfiable(view: ClusterView, spec: GEMTrainingSpec) -> bool:
    free = [h for h in view.hosts if h.free_gpus >= spec.nproc_per_node]
    ids: dict[tuple[str, ...], int] = {}
    for perm in itertools.permutations(free, spec.num_nodes):
        doms = {"host": [int(h.name[1:]) for h in perm]}
        for t, tier in enumerate(TIERS):
            doms[tier] = [ids.setdefault(tuple(h.labels[lbl] for lbl in LABELS[t:]), len(ids)) for h in perm]
        cost = comm_cost(doms, spec.parallelism.shape, spec.nproc_per_node, ep=spec.parallelism.ep)
        if all(cost.groups_split[DIM.get(r.dimension, r.dimension)][r.tier] == 0 for r in spec.topology.placement):
            return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_required_rules_match_exhaustive_search(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    while checked < 30:
        made = _instance(rng)
        if made is None:
            continue
        view, spec = made
        checked += 1
        result = plan_gang(spec, view)
        exists = _satisfiable(view, spec)
        if isinstance(result, Infeasible):
            assert not exists, (spec.parallelism, spec.topology.placement, result.reason)
            assert result.reason
        else:
            assert exists
            for rule in spec.topology.placement:
                assert result.cost.groups_split[DIM.get(rule.dimension, rule.dimension)][rule.tier] == 0
