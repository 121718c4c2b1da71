"""Topology-aware gang placement for a 5D-parallel GEMTraining (pure: no API, no clock).

One pod per host takes ``nproc_per_node`` GPUs; pod ``n`` (node rank ``n``) holds global ranks
``n*nproc .. n*nproc+nproc-1`` and their row-major mesh coordinates (docs/contracts.md). The
planner decides which host gets which node rank, so ranks and coordinates follow the hosts chosen.

Algorithm (all-or-nothing, deterministic, roughly linear in hosts + node ranks):

1. **Gang tree.** Node ranks are grouped by the parallel groups that connect them, cumulatively
   from the innermost dimension outwards (by default cp, ep, embedding, dp_shard, pp,
   dp_replicate; tp never leaves a pod): level ``k`` is the connected components of the node
   ranks under the groups of the first ``k`` dimensions. The levels nest, so they form a tree
   whose leaves are node ranks and whose root is the gang. A rule on a dimension holds for the
   level where that dimension joins (a superset of its groups, so honouring it is sufficient).
2. **Topology tree.** Hosts are grouped by the tier labels (host -> nvlink -> rack -> block ->
   zone by default) into nested domains; a host that qualifies (Ready, schedulable, no
   untolerated NoSchedule/NoExecute taint, not excluded, enough free GPUs) counts as one free
   slot. A missing label makes the host a domain of its own at that tier (never assume a
   shared domain without a label).
3. **Capacities.** Bottom-up, for every gang level with a rule, the number of whole groups of
   that level each domain can hold while keeping them inside one domain of the rule's tier
   (Required rules alone, then Required plus Preferred). The root's Required capacity decides
   feasibility before anything is placed, and names the tier and domain that fall short.
4. **Packing.** Top-down from a root domain: each gang-tree item (largest first) goes whole
   into the child domain whose Preferred capacity holds it, choosing the child whose tightest
   descendant tier still holds it, then best fit (fewest free slots), then name; a run of items
   that no single child holds is spread over the fewest children (largest first, best fit for
   the tail). An item that fits no child whole is split into its children items, unless a
   Required rule pins it, or splitting could not keep the cp/ep groups in their Preferred tier
   either (then it stays whole wherever it fits).
5. **Candidates.** Packing runs for a few gang trees (dp_replicate outermost; pp outermost, the
   rank order; Required dimensions innermost when there are any; plain index order) and a few
   roots each (the best-fitting domains of the two tightest tiers that hold the gang, and the
   whole cluster), packing from each root twice: the gang kept together as above, and spread,
   each of its parts (e.g. data-parallel replicas) going alone to the root's child that holds it
   in the tightest tier, so that a gang one block could hold with its groups scattered over many
   racks may instead go to several blocks that each hold a part in one rack (the heavy inner
   rings stay in a rack; only the light outer traffic crosses blocks). Index-order BestFit
   (what a topology-aware scheduler that ignores the mesh would do) is the floor: a candidate
   that moves more bytes than it across any tier wider than nvlink survives only if it keeps
   every cp/ep group in its Preferred tier and the floor does not. The winner has the fewest
   cp/ep groups outside their Preferred tier, then the lowest score (``cost.py``: bytes per
   step crossing each tier, weighted by link bandwidth), then comes first. Preferred rules that
   the winner could not honour become warnings.

GPU products (``products.py``): where the qualifying hosts carry two ``nvidia.com/gpu.product``
values or more, the whole algorithm runs once per product and the gang goes to one product (fewest
warnings, best fit, lowest score, name); only when no product can hold it does it run over all
hosts, with a warning naming the products it spans.

Default rules (a rule in ``spec.topology.placement`` replaces the default of its dimension): cp
and ep Preferred within nvlink, pp (each data-parallel replica's pipeline) Preferred within
block, the embedding sharding group Preferred within nvlink; tp is always inside a host. For a
spec that leaves ``embeddingShardingGroup`` unset, ``Placement.aligned_group`` gives per tier the
largest group of consecutive ranks whose aligned blocks each sit inside one domain of that tier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from gem_operator.api.mesh import IntArray
from gem_operator.api.training import DEFAULT_TIERS, GEMTrainingSpec
from gem_operator.topology.cluster import (
    DEFAULT_TOLERATIONS,
    ClusterView,
    HostView,
    blocking_taints,
    cluster_view_from_objects,
    node_selected,
)
from gem_operator.topology.cost import CostModel, comm_cost
from gem_operator.topology.domains import _build_topology, _compute_caps, _Dom, _Topo
from gem_operator.topology.explain import explain_plan, plan_rows
from gem_operator.topology.gang import _build_items, _gang_levels, _index_levels, _Level
from gem_operator.topology.packing import _Packer, _PackError
from gem_operator.topology.placement import PLANNER_NAME, Infeasible, Placement, PlanResult, RankAssignment
from gem_operator.topology.products import mixed_products_warning, split_by_product
from gem_operator.topology.tiers import TierSet
from gem_operator.topology.tiers import resolve as resolve_tiers

HOSTNAME_LABEL = "kubernetes.io/hostname"

# Rule dimension names (API, camelCase) -> names used here.
_RULE_DIMS = {
    "tp": "tp",
    "cp": "cp",
    "ep": "ep",
    "pp": "pp",
    "dpShard": "dp_shard",
    "dpReplicate": "dp_replicate",
    "embedding": "embedding",
}
_DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("cp", "nvlink"),
    ("ep", "nvlink"),
    ("embedding", "nvlink"),
    ("pp", "block"),
)
# Outward orders in which groups are merged into the gang tree; the planner packs each and keeps
# the cheapest plan (ties: the first, which keeps dp_replicate outermost).
_LOCALITY_ORDERS: tuple[tuple[str, ...], ...] = (
    ("cp", "ep", "dp_shard", "pp", "dp_replicate"),
    ("cp", "ep", "dp_shard", "dp_replicate", "pp"),
)


def _rules(
    spec: GEMTrainingSpec, tier_names: tuple[str, ...], tier_labels: tuple[str | None, ...]
) -> dict[str, tuple[int | None, int | None]]:
    """Per dimension: (Required tier, Preferred-or-Required tier) as tier indexes.

    Default rules find their tier by the default name, else by the default tier's label.
    """
    index = {n: i for i, n in enumerate(tier_names)}
    by_label = {lbl: i for i, lbl in enumerate(tier_labels) if lbl}
    for name, lbl in DEFAULT_TIERS:
        if name not in index and lbl in by_label:
            index[name] = by_label[lbl]
    explicit: dict[str, list[tuple[int, bool]]] = {}
    names = set(tier_names)
    for rule in spec.topology.placement:
        dim = _RULE_DIMS[rule.dimension]
        if rule.tier in names:
            explicit.setdefault(dim, []).append((index[rule.tier], str(rule.mode) == "Required"))
    out: dict[str, tuple[int | None, int | None]] = {}
    for dim, tier in _DEFAULT_RULES:
        if dim not in explicit and tier in index:
            out[dim] = (None, index[tier])
    for dim, rules in explicit.items():
        req = [t for t, r in rules if r]
        out[dim] = (min(req) if req else None, min(t for t, _ in rules))
    return out


def _qualify(
    view: ClusterView,
    nproc: int,
    exclude: frozenset[str],
    tolerations: Sequence[Mapping[str, str]],
    selected: Callable[[HostView], bool] = lambda _: True,
) -> tuple[set[str], dict[str, int], int]:
    ok: set[str] = set()
    why = {
        "excluded": 0,
        "not selected by the pod template": 0,
        "not Ready": 0,
        "cordoned": 0,
        "tainted": 0,
        "too few free GPUs": 0,
    }
    best_short = 0
    for h in view.hosts:
        if h.name in exclude:
            why["excluded"] += 1
        elif not selected(h):
            why["not selected by the pod template"] += 1
        elif not h.ready:
            why["not Ready"] += 1
        elif h.unschedulable:
            why["cordoned"] += 1
        elif blocking_taints(h, tolerations):
            why["tainted"] += 1
        elif h.free_gpus < nproc:
            why["too few free GPUs"] += 1
            best_short = max(best_short, h.free_gpus)
        else:
            ok.add(h.name)
    return ok, why, best_short


def _explain_required(
    topo: _Topo, levels: Sequence[_Level], req_idx: list[int], n_nodes: int, nproc: int
) -> Infeasible | None:
    for j, k in enumerate(req_idx):
        lv = levels[k]
        need = max(1, n_nodes // lv.size)
        have = topo.root.req[j]
        if have >= need:
            continue
        tier = lv.req_tier if lv.req_tier is not None else 0
        tier_name = topo.tier_names[tier]
        doms = topo.by_tier[tier] if tier < len(topo.by_tier) else [topo.root]
        # domains of tighter tiers alone at this one (hosts or, say, a clique without a rack label)
        alone = {id(p[tier]): p[tier] for p in topo.host_path.values() if tier < len(p) and p[tier].tier < tier}
        doms = doms + list(alone.values())
        best = max(doms, key=lambda d: (d.free, d.gpus_free, [-ord(ch) for ch in d.name]), default=None)
        dims = "/".join(lv.dims) or "gang"
        group_gpus = lv.size * nproc
        if best is None:
            return Infeasible(reason=f"no {tier_name} domains exist for the Required {dims} rule")
        where = f"the best domain {best.name} has {best.gpus_free} free of {best.gpus_total} GPUs"
        if best.free < lv.size:
            short = (lv.size - best.free) * nproc
            reason = (
                f"needs {short} more free GPUs in one {tier_name} domain: each {dims} group takes "
                f"{lv.size} hosts ({group_gpus} GPUs) and must stay within one {tier_name} domain "
                f"(Required); {where}"
            )
        else:
            reason = (
                f"needs room for {need} {dims} groups of {lv.size} hosts ({group_gpus} GPUs), each within "
                f"one {tier_name} domain (Required), but the free hosts hold only {have}; {where}"
            )
        return Infeasible(reason=reason, details=(f"{dims}: {have} of {need} groups fit",))
    return None


def plan_gang(
    spec: GEMTrainingSpec,
    view: ClusterView,
    *,
    exclude_nodes: Iterable[str] = frozenset(),
    cost_model: CostModel | None = None,
    tolerations: Sequence[Mapping[str, str]] = DEFAULT_TOLERATIONS,
    kueue_levels: Sequence[str] | None = None,
) -> Placement | Infeasible:
    """Place the whole gang or explain why it cannot be placed.

    ``kueue_levels``: the node labels of the Kueue Topology that ``spec.topology.kueueTopology``
    names (``tiers.kueue_levels`` reads them from the object), widest first.
    """
    if spec.topology.kueue_topology and not spec.topology.tiers and kueue_levels is None:
        return Infeasible(
            reason=f"spec.topology.kueueTopology names {spec.topology.kueue_topology!r} but its levels were not read",
            details=("create that kueue.x-k8s.io Topology, or set spec.topology.tiers instead",),
        )
    tierset = resolve_tiers(spec, view.hosts, kueue=kueue_levels)
    exclude = frozenset(exclude_nodes)
    qualification = _qualified(spec, view, exclude, tolerations)
    qualified = qualification[0]
    split = split_by_product(view, (h for h in view.hosts if h.name in qualified))
    # One GPU product when one can hold the gang (`products.py`): among those that can, the plan
    # with the fewest warnings, then best fit (the product with the fewest qualifying hosts, so the
    # larger pool stays whole for larger gangs), then the lowest score, then the product's name.
    placed = []
    for product, sub in split:
        plan = _plan(spec, sub, tierset, exclude, cost_model, tolerations)
        if isinstance(plan, Placement):
            room = sum(1 for h in sub.hosts if h.name in qualified)
            placed.append(((len(plan.warnings), room, round(plan.score, 9), product), plan))
    if placed:
        return replace(min(placed, key=lambda kp: kp[0])[1], tierset=tierset)
    result = _plan(spec, view, tierset, exclude, cost_model, tolerations, qualification)
    if not isinstance(result, Placement):
        return result
    if split:
        hosts = view.by_name()
        result = replace(result, warnings=(*result.warnings, mixed_products_warning(hosts[n] for n in result.nodes)))
    return replace(result, tierset=tierset)


def _qualified(
    spec: GEMTrainingSpec, view: ClusterView, exclude: frozenset[str], tolerations: Sequence[Mapping[str, str]]
) -> tuple[set[str], dict[str, int], int]:
    """The hosts a pod of the gang may run on (`_qualify`), with the pod template's tolerations,
    nodeSelector and required node affinity when it has them: the scheduler applies them too."""
    nproc = spec.nproc_per_node
    template = spec.workload.pod_template
    if template is None:
        return _qualify(view, nproc, exclude, tolerations)
    tolerations = [*tolerations, *(t.to_wire() for t in template.spec.tolerations)]
    affinity = template.spec.affinity.node_affinity if template.spec.affinity else None
    node_selector = template.spec.node_selector
    return _qualify(view, nproc, exclude, tolerations, lambda h: node_selected(h, node_selector, affinity))


def _plan(
    spec: GEMTrainingSpec,
    view: ClusterView,
    tierset: TierSet,
    exclude_nodes: Iterable[str],
    cost_model: CostModel | None,
    tolerations: Sequence[Mapping[str, str]],
    qualification: tuple[set[str], dict[str, int], int] | None = None,
) -> Placement | Infeasible:
    """Plan on `view`; `qualification` is `_qualified` of that same view when the caller has it."""
    cost_model = cost_model or cost_model_for(spec)
    nproc = spec.nproc_per_node
    n_nodes = spec.num_nodes
    exclude = frozenset(exclude_nodes)
    tier_names, labels = tierset.names, tierset.labels
    qualified, why, best_short = qualification or _qualified(spec, view, exclude, tolerations)
    if len(qualified) < n_nodes:
        skipped = ", ".join(f"{n} {reason}" for reason, n in why.items() if n)
        extra = f" (the fullest of those has {best_short} free)" if why["too few free GPUs"] else ""
        return Infeasible(
            reason=(
                f"needs {n_nodes} hosts with {nproc} free GPUs each ({n_nodes * nproc} GPUs) but only "
                f"{len(qualified)} of {len(view.hosts)} qualify" + (f"; skipped: {skipped}{extra}" if skipped else "")
            ),
            details=tuple(f"{reason}: {n}" for reason, n in why.items() if n),
        )
    rules = _rules(spec, tier_names, labels)
    absent = [(r.tier, str(r.mode)) for r in spec.topology.placement if r.tier not in tier_names]
    hard_absent = sorted({t for t, mode in absent if mode == "Required"})
    if hard_absent:
        return Infeasible(
            reason=(
                f"spec.topology.placement names tier(s) {', '.join(hard_absent)} (Required) but the tiers in use "
                f"are {', '.join(tier_names)} ({tierset.source})"
            ),
            details=("label the nodes, set spec.topology.tiers, or use one of the tiers in use",),
        )
    rule_warnings = tuple(
        f"placement rule tier {t!r} is not among the tiers in use ({', '.join(tier_names)}); the rule is ignored"
        for t in sorted({t for t, _ in absent})
    )
    topo = _build_topology(view.hosts, qualified, tier_names, labels)
    candidates: list[Placement] = []
    failure: Infeasible | None = None
    seen: list[list[IntArray]] = []
    # Dimensions with a Required rule may also go innermost (tightest tier first), so that their
    # groups are kept together on their own rather than inside a wider level.
    required = sorted(
        (d for d in _LOCALITY_ORDERS[0] if rules.get(d, (None, None))[0] is not None),
        key=lambda d: (rules[d][0] or 0, _LOCALITY_ORDERS[0].index(d)),
    )
    orders: list[tuple[str, ...] | None] = list(_LOCALITY_ORDERS)
    if required:
        orders.append((*required, *(d for d in _LOCALITY_ORDERS[0] if d not in required)))
    orders.append(None)
    for order in orders:
        level_parts = _gang_levels(spec, order) if order is not None else _index_levels(n_nodes)
        signature = [lab for _, lab in level_parts]
        if any(
            len(s) == len(signature) and all(np.array_equal(a, b) for a, b in zip(s, signature, strict=True))
            for s in seen
        ):
            continue
        seen.append(signature)
        for result in _plan_order(spec, topo, level_parts, rules, cost_model):
            if isinstance(result, Infeasible):
                failure = failure or result
            else:
                candidates.append(result)
    # Index-order BestFit (what a topology-aware scheduler without the mesh would do) is a floor:
    # a plan that moves more bytes across any tier wider than the first shared domain is kept only
    # when it keeps every cp/ep group inside its Preferred tier and the floor does not.
    floor = [r for r in _plan_order(spec, topo, _index_levels(n_nodes), rules, cost_model, bestfit=True)]
    baseline = next((r for r in floor if isinstance(r, Placement)), None)
    if baseline is not None:
        # tiers wider than the NVLink domain (or than the first tier above the host)
        wide = baseline.tiers[baseline.tiers.index("nvlink") + 1 if "nvlink" in baseline.tiers else 2 :]
        base_misses = _preferred_misses(baseline, rules)
        candidates = [
            c
            for c in candidates
            if _preferred_misses(c, rules) == 0 < base_misses
            or all(c.cost.bytes_by_tier[t] <= baseline.cost.bytes_by_tier[t] * (1 + 1e-9) for t in wide)
        ]
        candidates.append(baseline)
    if not candidates:
        if failure is None:
            failure = next((r for r in floor if isinstance(r, Infeasible)), None)
        return failure or Infeasible(reason="no placement found")
    # Fewest cp/ep groups outside their Preferred tier, then the lowest score, then the first.
    best = min(enumerate(candidates), key=lambda ic: (_preferred_misses(ic[1], rules), round(ic[1].score, 9), ic[0]))[1]
    return replace(
        best,
        warnings=(*topo.warnings, *rule_warnings, *best.warnings),
        topology_warnings=topo.warnings,
    )


def _preferred_misses(placement: Placement, rules: Mapping[str, tuple[int | None, int | None]]) -> int:
    """cp and ep groups outside their Preferred tier (the rules the planner puts first)."""
    out = 0
    for dim in ("cp", "ep"):
        tier = rules.get(dim, (None, None))[1]
        if tier is not None:
            out += placement.cost.groups_split.get(dim, {}).get(placement.tiers[tier], 0)
    return out


def _candidate_roots(topo: _Topo, levels: Sequence[_Level], req_idx: list[int], n_nodes: int) -> list[_Dom]:
    """Where to pack the gang from: the best-fitting domains of the two tightest tiers that hold it
    whole (Required rules included), then the whole cluster."""
    out: list[_Dom] = []
    tiers_used = 0
    for t in range(1, len(topo.by_tier)):
        fit = [
            d
            for d in topo.by_tier[t]
            if d.free >= n_nodes and all(d.req[j] >= math.ceil(n_nodes / levels[k].size) for j, k in enumerate(req_idx))
        ]
        if not fit:
            continue
        fit.sort(key=lambda d: (d.free, d.name))
        out.extend(fit[: 3 if not tiers_used else 2])
        tiers_used += 1
        if tiers_used == 2:
            break
    out.append(topo.root)
    return out


def _plan_order(
    spec: GEMTrainingSpec,
    topo: _Topo,
    level_parts: list[tuple[tuple[str, ...], IntArray]],
    rules: Mapping[str, tuple[int | None, int | None]],
    cost_model: CostModel | None,
    *,
    bestfit: bool = False,
) -> list[Placement | Infeasible]:
    """Plans for one gang tree, one per candidate root domain (only the first for ``bestfit``)."""
    nproc = spec.nproc_per_node
    n_nodes = spec.num_nodes
    levels: list[_Level] = []
    for k, (dims, labels_k) in enumerate(level_parts):
        # A rule on a dimension grouped with wider ones is enforced on that wider level (sufficient).
        req = [t for d in dims if d in rules and (t := rules[d][0]) is not None]
        pref = [t for d in dims if d in rules and (t := rules[d][1]) is not None]
        size = int(np.bincount(labels_k).max()) if k else 1
        levels.append(
            _Level(
                dims=dims,
                size=size,
                req_tier=min(req) if req else None,
                pref_tier=min(pref) if pref else None,
            )
        )
    req_idx, pref_idx = _compute_caps(topo, levels)
    explained = _explain_required(topo, levels, req_idx, n_nodes, nproc)
    if explained is not None:
        return [explained]
    root_item = _build_items(level_parts)
    out: list[Placement | Infeasible] = []
    roots = _candidate_roots(topo, levels, req_idx, n_nodes)
    # Each root packs the gang kept together, and (when the gang has parts) spread (`_Packer._spread`).
    variants = [False, True] if not bestfit and len(root_item.children) > 1 else [False]
    for root, spread in [(r, v) for r in (roots[:1] if bestfit else roots) for v in variants]:
        packer = _Packer(levels, req_idx, pref_idx, bestfit=bestfit, spread=spread)
        try:
            packer.pack(root, [root_item])
        except _PackError as err:
            out.append(
                Infeasible(
                    reason=f"the Required placement rules could not be met with the free hosts: {err}",
                    details=("try Preferred rules or free hosts in fewer domains",),
                )
            )
            continue
        if len(packer.assign) != n_nodes:
            out.append(Infeasible(reason=f"placed {len(packer.assign)} of {n_nodes} pods; no partial gangs"))
            continue
        nodes = tuple(packer.assign[n] for n in range(n_nodes))
        placement = _placement(spec, topo, nodes, cost_model)
        problems = _rule_violations(placement, topo.tier_names, rules)
        hard = [msg for msg, required in problems if required]
        if hard:
            out.append(Infeasible(reason="; ".join(hard), details=("the Required rules could not be met",)))
            continue
        out.append(replace(placement, warnings=tuple(msg for msg, _ in problems)))
    return out


def _placement(spec: GEMTrainingSpec, topo: _Topo, nodes: tuple[str, ...], cost_model: CostModel | None) -> Placement:
    tiers = topo.tier_names
    node_domains: list[dict[str, str]] = []
    ids: dict[str, list[int]] = {t: [] for t in tiers}
    groups: dict[str, dict[str, list[int]]] = {t: {} for t in tiers}
    for node_rank, host in enumerate(nodes):
        path = topo.host_path[host]
        names = {}
        for t, dom in enumerate(path):
            alone = dom.tier < t  # no label at this tier: the host (or its tighter domain) is alone in it
            names[tiers[t]] = "(none)" if alone else dom.name
            ids[tiers[t]].append(dom.uid)
            groups[tiers[t]].setdefault(f"(none) {dom.name}" if alone else dom.name, []).append(node_rank)
        node_domains.append(names)
    cost = comm_cost(
        ids,
        spec.parallelism.shape,
        spec.nproc_per_node,
        ep=spec.parallelism.ep,
        embedding_group=spec.embedding_group(),
        model=cost_model,
    )
    return Placement(
        nodes=nodes,
        shape=spec.parallelism.shape,
        nproc_per_node=spec.nproc_per_node,
        ep=spec.parallelism.ep,
        embedding_sharding_group=spec.embedding_group(),
        tiers=tiers,
        node_domains=tuple(node_domains),
        groups={t: {d: tuple(v) for d, v in g.items()} for t, g in groups.items()},
        cost=cost,
        aligned_group={t: _aligned_group(ids[t]) * spec.nproc_per_node for t in tiers},
    )


def _aligned_group(domains: Sequence[int]) -> int:
    """The most consecutive node ranks, dividing the gang, whose every aligned block shares a domain."""
    n = len(domains)
    for size in sorted((d for d in range(1, n + 1) if n % d == 0), reverse=True):
        if all(len(set(domains[i : i + size])) == 1 for i in range(0, n, size)):
            return size
    return 1


def _rule_violations(
    placement: Placement,
    tier_names: tuple[str, ...],
    rules: Mapping[str, tuple[int | None, int | None]],
) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for dim, (req, pref) in rules.items():
        for tier, required in ((req, True), (pref, False)):
            if tier is None or (not required and req is not None and req <= tier):
                continue
            name = tier_names[tier]
            split = placement.cost.groups_split.get(dim, {}).get(name, 0)
            if split:
                total = placement.cost.groups.get(dim, 0)
                mode = "Required" if required else "Preferred"
                out.append((f"{dim}: {split} of {total} groups span more than one {name} domain ({mode})", required))
    return out


def plan_from_files(
    spec_yaml_dict: Mapping[str, Any],
    nodes: Any,
    pods: Any = (),
    *,
    exclude_nodes: Iterable[str] = frozenset(),
    cost_model: CostModel | None = None,
) -> Placement | Infeasible:
    """What-if planning for ``gemop plan``: a GEMTraining manifest (or its spec) and node/pod exports.

    ``nodes`` and ``pods`` are lists of objects or ``kind: List`` documents as ``kubectl get -o yaml``
    writes them. Raises ``pydantic.ValidationError`` for an invalid spec.
    """
    raw = spec_yaml_dict.get("spec", spec_yaml_dict) if "kind" in spec_yaml_dict else spec_yaml_dict
    spec = GEMTrainingSpec.model_validate(raw)
    view = cluster_view_from_objects(nodes, pods)
    return plan_gang(spec, view, exclude_nodes=exclude_nodes, cost_model=cost_model)


def embedding_sharding_group(placement: Placement, spec: GEMTrainingSpec) -> int:
    """Ranks per TorchRec sharding group for the pods of this placement.

    The spec's value when set (``GEMTrainingSpec.embedding_group`` decides). Otherwise the largest
    aligned group of ranks that this placement keeps inside one domain of the embedding rule's tier
    (by default one NVLink domain): tables are sharded over as many GPUs as the fast fabric joins,
    and the embedding all-to-all stays on it.
    """
    if placement.tierset is not None:
        tier_labels = placement.tierset.labels
    else:
        labels = {t.name: t.label for t in spec.topology.tiers or ()}
        tier_labels = tuple(labels.get(t) for t in placement.tiers)
    rules = _rules(spec, placement.tiers, tier_labels)
    tier = rules.get("embedding", (None, None))[1]
    aligned = placement.aligned_group.get(placement.tiers[tier], 0) if tier is not None else 0
    # An aligned group is a multiple of one pod's ranks, so it is never below the unplaced default.
    return spec.embedding_group(aligned or None)


def cost_model_for(spec: GEMTrainingSpec) -> CostModel:
    """The default traffic model, with the link bandwidths that the spec's tiers declare."""
    declared = {t.name: t.bandwidth_gbps * 1e9 for t in spec.topology.tiers or () if t.bandwidth_gbps is not None}
    if not declared:
        return CostModel()
    defaults = CostModel()
    return replace(defaults, tier_bandwidth={**defaults.tier_bandwidth, **declared})


__all__ = [
    "PLANNER_NAME",
    "Infeasible",
    "Placement",
    "PlanResult",
    "RankAssignment",
    "cost_model_for",
    "embedding_sharding_group",
    "explain_plan",
    "plan_from_files",
    "plan_gang",
    "plan_rows",
]
