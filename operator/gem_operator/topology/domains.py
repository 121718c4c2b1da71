"""The topology tree: hosts grouped into domains by the tier labels, with free slots and capacities."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gem_operator.topology.cluster import HostView
from gem_operator.topology.gang import _Level


@dataclass(eq=False)
class _Dom:
    uid: int
    tier: int
    name: str
    children: list[_Dom] = field(default_factory=list)
    host: str | None = None
    free: int = 0  # qualified hosts
    gpus_free: int = 0
    gpus_total: int = 0
    req: list[int] = field(default_factory=list)
    pref: list[int] = field(default_factory=list)
    maxfree: list[int] = field(default_factory=list)  # per tier <= own: most free slots in one descendant


@dataclass
class _Topo:
    tier_names: tuple[str, ...]
    root: _Dom
    hosts: dict[str, _Dom]
    by_tier: list[list[_Dom]]
    host_path: dict[str, tuple[_Dom, ...]]  # host -> its domain at every tier (0..T-1); a tighter one when alone
    warnings: tuple[str, ...] = ()  # inconsistent nesting of the labels


def _build_topology(
    hosts: Sequence[HostView],
    qualified: set[str],
    tier_names: tuple[str, ...],
    labels: tuple[str | None, ...],
) -> _Topo:
    """Domains from the tier labels, built tightest first; every tier stands on its own.

    At each tier the domains built so far (hosts at first) join the domain their hosts' label
    names. A domain whose hosts carry no label at this tier stays alone at it (a host without a
    rack label still belongs to its NVLink domain, and that domain to its block). A domain whose
    hosts name several domains of a wider tier (a clique spanning two racks) is kept whole, placed
    by the tighter tier into the wider domain most of its hosts name (ties: the first name), and
    reported in ``_Topo.warnings``; hosts of such a domain without the wider label join it too.
    """
    n_tiers = len(tier_names)
    uid = 0
    root = _Dom(uid=uid, tier=n_tiers, name="cluster")
    by_tier: list[list[_Dom]] = [[] for _ in range(n_tiers)]
    host_doms: dict[str, _Dom] = {}
    paths: dict[str, list[_Dom]] = {}
    members: dict[int, list[HostView]] = {}
    warnings: list[str] = []
    units: list[_Dom] = []
    for h in hosts:
        uid += 1
        leaf = _Dom(uid=uid, tier=0, name=h.name, host=h.name, free=1 if h.name in qualified else 0)
        leaf.gpus_free, leaf.gpus_total = h.free_gpus, h.allocatable_gpus
        by_tier[0].append(leaf)
        host_doms[h.name] = leaf
        paths[h.name] = [leaf]
        members[leaf.uid] = [h]
        units.append(leaf)
    for t in range(1, n_tiers):
        lbl = labels[t]
        by_value: dict[str, _Dom] = {}
        next_units: list[_Dom] = []
        for unit in units:
            group = members[unit.uid]
            counts: dict[str, int] = {}
            for h in group:
                value = h.labels.get(lbl) if lbl else None
                if value:
                    counts[value] = counts.get(value, 0) + 1
            if not counts:
                next_units.append(unit)  # no label at this tier: alone at it
                for h in group:
                    paths[h.name].append(paths[h.name][-1])
                continue
            value = min(counts, key=lambda v: (-counts[v], v))
            if len(counts) > 1:
                warnings.append(
                    f"{tier_names[unit.tier]} domain {unit.name} spans {len(counts)} {tier_names[t]} domains "
                    f"({', '.join(f'{v}: {counts[v]} hosts' for v in sorted(counts))}); placed as one "
                    f"{tier_names[unit.tier]} domain in {tier_names[t]} {value} (check the {lbl} labels)"
                )
            dom = by_value.get(value)
            if dom is None:
                uid += 1
                dom = by_value[value] = _Dom(uid=uid, tier=t, name=value)
                by_tier[t].append(dom)
                members[dom.uid] = []
                next_units.append(dom)
            dom.children.append(unit)
            members[dom.uid].extend(group)
            dom.gpus_free += unit.gpus_free
            dom.gpus_total += unit.gpus_total
            for h in group:
                paths[h.name].append(dom)
        units = next_units
    root.children = list(units)
    host_path = {name: tuple(path) for name, path in paths.items()}
    for t in range(1, n_tiers):
        for dom in by_tier[t]:
            dom.free = sum(c.free for c in dom.children)
            dom.children.sort(key=lambda d: d.name)
    root.free = sum(c.free for c in root.children)
    root.children.sort(key=lambda d: d.name)

    # maxfree[i]: the most free slots in one domain of tier i inside (a host alone at a tier is
    # that tier's domain)
    def padded(child: _Dom, upto: int) -> list[int]:
        return child.maxfree + [child.free] * (upto - len(child.maxfree))

    for dom in by_tier[0]:
        dom.maxfree = [dom.free]
    for t in range(1, n_tiers):
        for dom in by_tier[t]:
            kids = [padded(c, t) for c in dom.children]
            dom.maxfree = [max(k[i] for k in kids) for i in range(t)] + [dom.free]
    kids = [padded(c, n_tiers) for c in root.children]
    root.maxfree = [max((k[i] for k in kids), default=0) for i in range(n_tiers)] + [root.free]
    return _Topo(
        tier_names=tier_names,
        root=root,
        hosts=host_doms,
        by_tier=by_tier,
        host_path=host_path,
        warnings=tuple(warnings),
    )


def _compute_caps(topo: _Topo, levels: Sequence[_Level]) -> tuple[list[int], list[int]]:
    """Per domain, whole-group capacities of the constrained levels; returns the levels indexed."""
    req_idx = [k for k, lv in enumerate(levels) if lv.req_tier is not None and lv.size > 1]
    pref_idx = [k for k, lv in enumerate(levels) if lv.pref_tier is not None and lv.size > 1]

    def caps(dom: _Dom, idx: list[int], tier_of: list[int], attr: str) -> list[int]:
        out: list[int] = []
        for j, k in enumerate(idx):
            c = levels[k].size
            if dom.tier > tier_of[j]:
                v = sum(getattr(ch, attr)[j] for ch in dom.children)
            else:
                v = dom.free // c
                for i in range(j):
                    v = min(v, out[i] // math.ceil(c / levels[idx[i]].size))
            out.append(v)
        return out

    req_tiers = [levels[k].req_tier or 0 for k in req_idx]
    pref_tiers = [levels[k].pref_tier or 0 for k in pref_idx]
    zeros_req = [0] * len(req_idx)
    zeros_pref = [0] * len(pref_idx)
    for dom in topo.by_tier[0]:
        # every constrained level spans two or more hosts: one host holds none of its groups
        dom.req = zeros_req
        dom.pref = zeros_pref
    doms = [d for tier in topo.by_tier[1:] for d in tier] + [topo.root]
    for dom in doms:
        dom.req = caps(dom, req_idx, req_tiers, "req")
        dom.pref = caps(dom, pref_idx, pref_tiers, "pref")
    return req_idx, pref_idx
