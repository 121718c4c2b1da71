"""GPU products: a gang stays on one kind of GPU when the fleet has several (pure).

Synchronous training steps at the pace of its slowest rank, so a gang spread over H100 and A100
hosts runs at the A100's pace while holding the H100s. NVIDIA GPU Feature Discovery labels each
GPU node with ``nvidia.com/gpu.product``; where the hosts carry more than one value, the planner
places the gang on the hosts of one product (the best plan among the products that can hold it)
and spans products only when none can, saying so in a warning. A pod template that selects a
product (nodeSelector or node affinity on the label) leaves one product among the qualifying hosts
and so decides it; hosts without the label form a group of their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gem_operator.topology.cluster import ClusterView, HostView

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
UNLABELLED = "(no gpu.product label)"


def product_of(host: HostView) -> str:
    return host.labels.get(GPU_PRODUCT_LABEL) or UNLABELLED


def split_by_product(view: ClusterView, qualifying: Iterable[HostView]) -> list[tuple[str, ClusterView]]:
    """The fleet per GPU product, in name order, when the qualifying hosts carry two products or
    more (unlabelled hosts aside); otherwise no split (an empty list)."""
    products = {product_of(h) for h in qualifying} - {UNLABELLED}
    if len(products) < 2:
        return []
    groups: dict[str, list[HostView]] = {}
    for host in view.hosts:
        groups.setdefault(product_of(host), []).append(host)
    return [(p, ClusterView(hosts=tuple(groups[p]))) for p in sorted(groups)]


def mixed_products_warning(chosen: Iterable[HostView]) -> str:
    """The warning for a gang that had to span GPU products: which, on how many hosts, and the fix."""
    counts = Counter(product_of(h) for h in chosen)
    spread = ", ".join(f"{p} on {n} host{'s' if n > 1 else ''}" for p, n in sorted(counts.items()))
    return (
        f"no single GPU product can hold the gang, so it spans {spread}: it steps at the pace of the "
        f"slowest; free hosts of one product, or select one with a nodeSelector on {GPU_PRODUCT_LABEL}"
    )


__all__ = ["GPU_PRODUCT_LABEL", "UNLABELLED", "mixed_products_warning", "product_of", "split_by_product"]
