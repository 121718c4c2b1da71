"""Placement quality of the topology planner against two baselines, on the same generated instances.

Baselines (both take one host per pod, like the planner, and give ranks by pod index):

* A, kube-scheduler-like: each pod goes to a least-allocated qualifying host; with whole-host pods
  every qualifying host scores the same, so ties are broken at random (as kube-scheduler does).
* B, Kueue-TAS-like BestFit: the pod count goes to the lowest tier where one domain fits it (the
  domain with the least free capacity that fits), or else over the fewest domains (largest first,
  best fit for the rest); descending, each domain's pods go to its children the same way; pod
  indexes follow the chosen domains in order, so consecutive indexes share a domain.

Instances: fleets of 128-1,024 hosts of 8 GPUs; NVLink domains of 1 or 9 hosts (8 or 72 GPUs),
racks, blocks and zones; 30-70 % of the hosts already busy (in runs, as earlier jobs leave them);
jobs of 64-4,096 GPUs with mixed meshes. Reports, per tier, groups split and bytes per step
crossing (median and worst), the targets with PASS/FAIL, and the planner's time for a 4,096-GPU gang
on a 10,000-host fleet.

    python bench/placement.py            # 200 instances
    python bench/placement.py --quick    # 100 instances, about a minute
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.topology.cluster import ClusterView, HostView
from gem_operator.topology.cost import CommCost, comm_cost
from gem_operator.topology.planner import Infeasible, plan_gang

TIERS = ("host", "nvlink", "rack", "block", "zone")
LABELS = {
    "nvlink": "nvidia.com/gpu.clique",
    "rack": "gem.dev/rack",
    "block": "gem.dev/block",
    "zone": "topology.kubernetes.io/zone",
}
GPUS = 8


# ---------------------------------------------------------------------------------------------
# Instances


def make_fleet(rng: random.Random, hosts: int, nvl_hosts: int, occupancy: float) -> ClusterView:
    rack_hosts = 18 if nvl_hosts == 9 else 16
    racks_per_block = rng.choice((4, 8))
    blocks_per_zone = rng.choice((2, 4))
    busy = [0] * hosts
    target = int(occupancy * hosts)
    n_busy = 0
    while n_busy < target:
        start = rng.randrange(hosts)
        run = rng.choice((1, 1, 2, 3, 4, 6, 8, 9))
        for h in range(start, min(hosts, start + run)):
            if not busy[h]:
                busy[h] = rng.randint(1, GPUS) if run == 1 else GPUS
                n_busy += 1
    out = []
    for h in range(hosts):
        rack = h // rack_hosts
        block = rack // racks_per_block
        labels = {
            "kubernetes.io/hostname": f"h{h:05d}",
            LABELS["nvlink"]: f"nvl{h // nvl_hosts:04d}",
            LABELS["rack"]: f"rack{rack:04d}",
            LABELS["block"]: f"blk{block:03d}",
            LABELS["zone"]: f"zone{block // blocks_per_zone}",
        }
        out.append(HostView(name=f"h{h:05d}", labels=labels, allocatable_gpus=GPUS, used_gpus=busy[h]))
    return ClusterView(hosts=tuple(out))


def make_job(rng: random.Random, gpus: int) -> GEMTrainingSpec:
    while True:
        tp = rng.choice((4, 8, 8))
        cp = rng.choice((1, 1, 2, 4))
        pp = rng.choice((1, 1, 2, 4))
        rest = gpus // (tp * cp * pp)
        if rest < 1 or gpus % (tp * cp * pp):
            continue
        dr = rng.choice([d for d in (1, 2, 4) if rest % d == 0])
        ds = rest // dr
        ep = rng.choice([e for e in (1, 1, 2, 4, 8, 16) if (ds * cp) % e == 0])
        emb = rng.choice((None, 8, 16, 64))
        if emb is not None and gpus % emb:
            emb = None
        return GEMTrainingSpec.model_validate(
            {
                "parallelism": {"pp": pp, "dpReplicate": dr, "dpShard": ds, "cp": cp, "tp": tp, "ep": ep},
                "gpusPerNode": GPUS,
                "embeddingShardingGroup": emb,
                "checkpoint": {"uri": "/ckpt"},
            }
        )


# ---------------------------------------------------------------------------------------------
# Baselines


def _qualified(view: ClusterView) -> list[HostView]:
    return [h for h in view.hosts if h.free_gpus >= GPUS]


def baseline_a(view: ClusterView, n: int, rng: random.Random) -> list[str] | None:
    hosts = _qualified(view)
    if len(hosts) < n:
        return None
    # Least-allocated: every qualifying host scores the same; kube-scheduler breaks ties at random.
    return [h.name for h in rng.sample(hosts, n)]


def _path(h: HostView) -> tuple[str, ...]:
    return (*(h.labels[LABELS[t]] for t in reversed(TIERS[1:])), h.name)


def baseline_b(view: ClusterView, n: int) -> list[str] | None:
    hosts = _qualified(view)
    if len(hosts) < n:
        return None
    # Tree of domains as nested dicts with free counts.
    paths = sorted(_path(h) for h in hosts)
    depth = len(TIERS)

    def count(prefix_len: int) -> dict[tuple[str, ...], int]:
        out: dict[tuple[str, ...], int] = {}
        for p in paths:
            out[p[:prefix_len]] = out.get(p[:prefix_len], 0) + 1
        return out

    counts = [count(k) for k in range(depth + 1)]  # counts[k]: domains given by k path elements

    def children(prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], int]]:
        k = len(prefix) + 1
        return sorted(((p, c) for p, c in counts[k].items() if p[:-1] == prefix), key=lambda pc: pc[0])

    def choose(domains: list[tuple[tuple[str, ...], int]], need: int) -> list[tuple[tuple[str, ...], int]]:
        fit = [d for d in domains if d[1] >= need]
        if fit:
            best = min(fit, key=lambda d: (d[1], d[0]))
            return [(best[0], need)]
        out = []
        rest = sorted(domains, key=lambda d: (-d[1], d[0]))
        while need > 0:
            fit = [d for d in rest if d[1] >= need]
            if fit:
                best = min(fit, key=lambda d: (d[1], d[0]))
                out.append((best[0], need))
                break
            d = rest.pop(0)
            out.append((d[0], d[1]))
            need -= d[1]
        return out

    # Lowest level where one domain fits everything (counts[k] for k = depth-1 .. 1).
    chosen: list[tuple[tuple[str, ...], int]] | None = None
    for k in range(depth - 1, 0, -1):
        fit = [(p, c) for p, c in counts[k].items() if c >= n]
        if fit:
            best = min(fit, key=lambda d: (d[1], d[0]))
            chosen = [(best[0], n)]
            break
    if chosen is None:
        chosen = choose(sorted(counts[1].items()), n)
    # Descend to hosts.
    while chosen and len(chosen[0][0]) < depth:
        nxt: list[tuple[tuple[str, ...], int]] = []
        for prefix, need in chosen:
            nxt.extend(choose(children(prefix), need))
        chosen = nxt
    return [p[-1] for p, _ in chosen]


# ---------------------------------------------------------------------------------------------
# Evaluation


def domain_ids(view: ClusterView, nodes: Sequence[str]) -> dict[str, list[int]]:
    by = {h.name: h for h in view.hosts}
    out: dict[str, list[int]] = {}
    for i, tier in enumerate(TIERS):
        ids: dict[tuple[str, ...], int] = {}
        col = []
        for name in nodes:
            p = _path(by[name])
            key = p[: len(TIERS) - i]
            col.append(ids.setdefault(key, len(ids)))
        out[tier] = col
    return out


def cost_of(view: ClusterView, spec: GEMTrainingSpec, nodes: Sequence[str]) -> CommCost:
    return comm_cost(
        domain_ids(view, nodes),
        spec.parallelism.shape,
        spec.nproc_per_node,
        ep=spec.parallelism.ep,
        embedding_group=spec.embedding_sharding_group or spec.nproc_per_node,
    )


def split_free_exists(view: ClusterView, spec: GEMTrainingSpec) -> bool | None:
    """Whether cp/ep groups can all sit inside NVLink domains (None: they fit in a host)."""
    par = spec.parallelism
    chunk_gpus = max(par.cp, par.ep) * par.tp
    if chunk_gpus <= GPUS:
        return None
    c = chunk_gpus // GPUS
    free: dict[str, int] = {}
    for h in _qualified(view):
        key = h.labels[LABELS["nvlink"]]
        free[key] = free.get(key, 0) + 1
    return sum(f // c for f in free.values()) >= spec.num_nodes // c


@dataclass
class Row:
    name: str
    cost: CommCost
    seconds: float


def run(instances: int, seed: int, max_hosts: int, show: bool = False) -> int:
    rng = random.Random(seed)
    results: dict[str, list[CommCost]] = {"planner": [], "A": [], "B": []}
    plan_times: list[float] = []
    cpep_violations = 0
    cpep_cases = 0
    infeasible = 0
    conflicts = 0
    tries = 0
    while len(results["planner"]) < instances:
        tries += 1
        hosts = rng.randrange(128, max_hosts + 1)
        nvl = rng.choice((1, 9))
        view = make_fleet(rng, hosts, nvl, rng.uniform(0.3, 0.7))
        free_gpus = len(_qualified(view)) * GPUS
        sizes = [g for g in (64, 128, 256, 512, 1024, 2048, 4096) if g <= free_gpus]
        if not sizes:
            continue
        spec = make_job(rng, rng.choice(sizes))
        t0 = time.process_time()
        plan = plan_gang(spec, view)
        plan_times.append(time.process_time() - t0)
        if show and plan_times[-1] > 1.0:
            print(f"slow: {plan_times[-1]:.2f} s for {spec.num_nodes} pods on {hosts} hosts")
        if isinstance(plan, Infeasible):
            infeasible += 1
            continue
        a = baseline_a(view, spec.num_nodes, rng)
        b = baseline_b(view, spec.num_nodes)
        assert a is not None and b is not None
        results["planner"].append(plan.cost)
        results["A"].append(cost_of(view, spec, a))
        results["B"].append(cost_of(view, spec, b))
        exists = split_free_exists(view, spec)
        label = (
            f"#{len(results['planner'])} hosts={hosts} nvl={nvl} free={free_gpus // GPUS} pods={spec.num_nodes} "
            f"mesh={spec.parallelism.shape} ep={spec.parallelism.ep} emb={spec.embedding_sharding_group}"
        )
        if exists:
            cpep_cases += 1
            split = plan.cost.groups_split
            if split["cp"].get("nvlink", 0) or split["ep"].get("nvlink", 0):
                cpep_violations += 1
                if show:
                    print(f"cp/ep split although a split-free placement exists: {label}")
        p_rack, b_rack = plan.cost.bytes_by_tier["rack"], results["B"][-1].bytes_by_tier["rack"]
        if p_rack > b_rack * (1 + 1e-9):
            b_split = results["B"][-1].groups_split
            b_cpep = b_split["cp"].get("nvlink", 0) + b_split["ep"].get("nvlink", 0)
            p_cpep = plan.cost.groups_split["cp"].get("nvlink", 0) + plan.cost.groups_split["ep"].get("nvlink", 0)
            if exists and b_cpep > 0 == p_cpep:
                conflicts += 1
            if show:
                print(
                    f"cross-rack bytes {p_rack / 2**30:.1f} GiB > B's {b_rack / 2**30:.1f} GiB: {label}; "
                    f"cp/ep groups split across NVLink: planner {p_cpep}, B {b_cpep}, split-free exists: {exists}"
                )
    n = len(results["planner"])
    print(f"instances: {n} placed ({infeasible} infeasible requests skipped); seed {seed}")
    print()
    print("groups split across each tier (all dimensions; median / worst per instance)")
    header = f"  {'tier':<8}" + "".join(f"{name:>18}" for name in results)
    print(header)
    for tier in TIERS:
        cells = []
        for costs in results.values():
            vals = [sum(c.groups_split[d].get(tier, 0) for d in c.groups_split) for c in costs]
            cells.append(f"{statistics.median(vals):>9.0f} / {max(vals):<6}")
        print(f"  {tier:<8}" + "".join(cells))
    print()
    print("bytes per step crossing each tier (GiB; median / worst)")
    print(header)
    for tier in TIERS:
        cells = []
        for costs in results.values():
            gib = [c.bytes_by_tier[tier] / 2**30 for c in costs]
            cells.append(f"{statistics.median(gib):>9.1f} / {max(gib):<6.0f}")
        print(f"  {tier:<8}" + "".join(cells))
    print()
    tp_off_host = sum(c.groups_split["tp"].get("host", 0) for c in results["planner"])
    rack_p = [c.bytes_by_tier["rack"] for c in results["planner"]]
    rack_b = [c.bytes_by_tier["rack"] for c in results["B"]]
    rack_a = [c.bytes_by_tier["rack"] for c in results["A"]]
    ratios = [p / b for p, b in zip(rack_p, rack_b, strict=True) if b > 0]
    worse = sum(1 for p, b in zip(rack_p, rack_b, strict=True) if p > b * (1 + 1e-9))
    med_ratio = statistics.median(ratios) if ratios else 0.0
    ratio_of_medians = statistics.median(rack_p) / max(1e-9, statistics.median(rack_b))
    score_ratio = statistics.median(
        p.score / b.score for p, b in zip(results["planner"], results["B"], strict=True) if b.score > 0
    )

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    print("targets")
    print(f"  tp groups off-host (planner): {tp_off_host}  {verdict(tp_off_host == 0)}")
    print(
        f"  cp/ep groups split across NVLink when a split-free placement exists: "
        f"{cpep_violations} of {cpep_cases} instances  {verdict(cpep_violations == 0)}"
    )
    print(
        f"  cross-rack bytes planner/B: median of per-instance ratios {med_ratio:.2f} "
        f"(over {len(ratios)} instances where B crosses racks), ratio of medians {ratio_of_medians:.2f}"
        f"  {verdict(med_ratio <= 0.7)}"
    )
    print(
        f"  instances where the planner's cross-rack bytes exceed B's: {worse} ({conflicts} of them where B "
        f"splits cp/ep groups across NVLink and the planner keeps all whole, as the cp/ep target asks)"
        f"  {verdict(worse == 0)}"
    )
    a_over_b = statistics.median(rack_a) / max(1e-9, statistics.median(rack_b))
    print(
        f"  (for reference: cross-rack bytes A/B ratio of medians {a_over_b:.2f};"
        f" planner/B score median ratio {score_ratio:.2f})"
    )
    print(
        f"  planner CPU time per instance: median {statistics.median(plan_times) * 1e3:.1f} ms, "
        f"worst {max(plan_times) * 1e3:.1f} ms"
    )
    return 0 if tp_off_host == 0 and cpep_violations == 0 and med_ratio <= 0.7 and worse == 0 else 1


def big_timing(seed: int) -> float:
    rng = random.Random(seed)
    view = make_fleet(rng, 10_008, 9, 0.5)
    spec = GEMTrainingSpec.model_validate(
        {
            "parallelism": {"pp": 4, "dpReplicate": 2, "dpShard": 16, "cp": 2, "tp": 8, "ep": 8},
            "gpusPerNode": GPUS,
            "checkpoint": {"uri": "/ckpt"},
        }
    )
    best = wall = float("inf")
    for _ in range(3):
        t0, w0 = time.process_time(), time.perf_counter()
        plan = plan_gang(spec, view)
        best = min(best, time.process_time() - t0)
        wall = min(wall, time.perf_counter() - w0)
    assert not isinstance(plan, Infeasible), plan
    # The same fleet with only hostname and zone labels (hosts are then alone at every other tier).
    bare = ClusterView(
        hosts=tuple(
            HostView(
                name=h.name,
                labels={k: v for k, v in h.labels.items() if k in ("kubernetes.io/hostname", LABELS["zone"])},
                allocatable_gpus=h.allocatable_gpus,
                used_gpus=h.used_gpus,
            )
            for h in view.hosts
        )
    )
    t0 = time.process_time()
    assert not isinstance(plan_gang(spec, bare), Infeasible)
    bare_s = time.process_time() - t0
    best = max(best, bare_s)
    ok = best <= 1.0
    print(
        f"  planner time, 4,096-GPU gang (512 pods) on a 10,008-host fleet (50 % busy): {best:.3f} s CPU "
        f"({wall:.3f} s wall; best of 3, one thread); {bare_s:.3f} s CPU with only hostname and zone "
        f"labels  {'PASS' if ok else 'FAIL'}"
    )
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 instances (about a minute)")
    parser.add_argument("--instances", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-hosts", type=int, default=1024)
    parser.add_argument("--show-failures", action="store_true", help="print the instances that miss a target")
    args = parser.parse_args(argv)
    instances = args.instances or (100 if args.quick else 200)
    rc = run(instances, args.seed, args.max_hosts, args.show_failures)
    big = big_timing(args.seed)
    return rc if big <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
