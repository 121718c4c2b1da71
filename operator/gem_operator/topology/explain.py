"""Human-readable plans: the table ``gemop plan`` prints."""

from __future__ import annotations

from collections.abc import Sequence

from gem_operator.api.mesh import MESH_DIMS
from gem_operator.topology.placement import Infeasible, Placement


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _ranges(values: Sequence[int]) -> str:
    parts: list[str] = []
    start = prev = values[0]
    for v in values[1:]:
        if v == prev + 1:
            prev = v
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = v
    parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def plan_rows(result: Placement | Infeasible) -> list[tuple[str, str, str]]:
    """(tier, domain, node ranks) rows for a table; empty for an infeasible plan."""
    if isinstance(result, Infeasible):
        return []
    rows = []
    for tier in result.tiers[1:]:
        for dom, ranks in sorted(result.groups[tier].items(), key=lambda kv: kv[1][0]):
            rows.append((tier, dom, _ranges(ranks)))
    return rows


def explain_plan(result: Placement | Infeasible) -> str:
    """A human-readable account of a plan (what ``gemop plan --output table`` prints)."""
    if isinstance(result, Infeasible):
        lines = [f"infeasible: {result.reason}"]
        lines += [f"  {d}" for d in result.details]
        return "\n".join(lines)
    shape = ",".join(f"{d}={s}" for d, s in zip(MESH_DIMS, result.shape, strict=True))
    lines = [
        f"feasible: {len(result.nodes)} pods x {result.nproc_per_node} GPUs = {result.world_size} ranks; "
        f"mesh {shape}; ep={result.ep}; score {result.score:.4g}",
        "",
        "bytes per step crossing each tier, and groups split across it (per dimension):",
    ]
    if result.tierset is not None:
        lines[1:1] = ["", result.tierset.describe()]
    dims = [d for d in result.cost.groups if result.cost.total_bytes.get(d, 0) > 0 or d == "tp"]
    header = f"  {'tier':<10}{'bytes':>12}  " + "  ".join(f"{d:>12}" for d in dims)
    lines.append(header)
    for tier in result.tiers:
        cells = [f"{result.cost.groups_split[d].get(tier, 0)}/{result.cost.groups.get(d, 0)}".rjust(12) for d in dims]
        lines.append(f"  {tier:<10}{_fmt_bytes(result.cost.bytes_by_tier[tier]):>12}  " + "  ".join(cells))
    lines += ["", "node ranks by domain:"]
    for tier, dom, ranks in plan_rows(result):
        lines.append(f"  {tier:<10}{dom:<24}{ranks}")
    lines += ["", "node rank -> host:"]
    for node_rank, host in enumerate(result.nodes):
        doms = " ".join(f"{t}={result.node_domains[node_rank][t]}" for t in result.tiers[1:])
        lines.append(f"  {node_rank:>5}  {host:<24}{doms}")
    if result.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in result.warnings]
    return "\n".join(lines)
