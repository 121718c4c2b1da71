"""Reading Kueue's ``Topology`` objects (kueue.x-k8s.io), whose levels can serve as the tiers.

Kueue served ``Topology`` as v1alpha1, then v1beta1, and now v1beta2 (v1beta1 deprecated since 0.16);
each is tried, newest first.
"""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource

from gem_operator.kube.client import KubeApi

KUEUE_GROUP = "kueue.x-k8s.io"
TOPOLOGY_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")

for _version in TOPOLOGY_VERSIONS:
    create_global_resource(KUEUE_GROUP, _version, "Topology", "topologies")


async def read_topology(kube: KubeApi, name: str) -> dict[str, Any] | None:
    """The named cluster-scoped Topology, or None when no served version has it."""
    for version in TOPOLOGY_VERSIONS:
        obj = await kube.get(f"{KUEUE_GROUP}/{version}", "Topology", name, "")  # cluster-scoped
        if obj is not None:
            return obj
    return None
