"""Which topology tiers a plan uses: the spec's, a Kueue ``Topology``'s levels, or those discovered.

Tiers are node labels, tightest first; the host tier (``kubernetes.io/hostname``) is always first.
When ``spec.topology.tiers`` is unset the planner looks at the labels the GPU nodes carry and
takes every known convention that is present, one label per role, in this order of tightness:

==========  ==============================================================================
role        labels (a role takes the one most GPU nodes carry; ties: this order)
==========  ==============================================================================
machine     ``cloud.google.com/gce-topology-host`` (GKE: the physical machine)
nvlink      ``nvidia.com/gpu.clique`` (NVIDIA GPU Feature Discovery: the NVLink domain)
rack        ``cloud.google.com/gce-topology-subblock``, ``topology.k8s.aws/network-node-layer-3``,
            ``oci.oraclecloud.com/host.rack_id``, ``gem.dev/rack``
block       ``cloud.google.com/gce-topology-block``, ``topology.k8s.aws/network-node-layer-2``,
            ``oci.oraclecloud.com/host.network_block_id``, ``gem.dev/block``
spine       ``topology.k8s.aws/network-node-layer-1`` (EKS: the widest network layer)
zone        ``topology.kubernetes.io/zone``
==========  ==============================================================================

The role names are the tier names placement rules use, so the default rules (cp/ep within
nvlink, pp within block) mean the same on every cloud. With ``spec.topology.kueueTopology`` the
levels of that Kueue ``Topology`` object (widest first, as Kueue lists them) become the tiers,
named by the role of a known label, else by the label's last path segment.

Each tier reports how many of the candidate nodes (nodes with allocatable GPUs) carry its label,
which is what ``status.placement.tiers`` and ``gemop plan`` show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gem_operator.api.training import DISCOVERED_TIER_NAMES, GEMTrainingSpec
from gem_operator.topology.cluster import HostView

HOSTNAME_LABEL = "kubernetes.io/hostname"

#: Discovery catalogue: (role, labels), tightest first (see the module docstring).
CONVENTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("machine", ("cloud.google.com/gce-topology-host",)),
    ("nvlink", ("nvidia.com/gpu.clique",)),
    (
        "rack",
        (
            "cloud.google.com/gce-topology-subblock",
            "topology.k8s.aws/network-node-layer-3",
            "oci.oraclecloud.com/host.rack_id",
            "gem.dev/rack",
        ),
    ),
    (
        "block",
        (
            "cloud.google.com/gce-topology-block",
            "topology.k8s.aws/network-node-layer-2",
            "oci.oraclecloud.com/host.network_block_id",
            "gem.dev/block",
        ),
    ),
    ("spine", ("topology.k8s.aws/network-node-layer-1",)),
    ("zone", ("topology.kubernetes.io/zone",)),
)
assert ("host", *(role for role, _ in CONVENTIONS)) == DISCOVERED_TIER_NAMES
ROLE_OF_LABEL: Mapping[str, str] = {label: role for role, labels in CONVENTIONS for label in labels}
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class TierSet:
    """The tiers one plan uses, tightest first; ``labels[i]`` is None for the host tier."""

    names: tuple[str, ...]
    labels: tuple[str | None, ...]
    #: where they came from: "spec", "discovered" or "kueue/<Topology name>"
    source: str
    #: per tier: how many candidate nodes carry its label (the host tier: all of them)
    carried: tuple[int, ...]
    #: nodes with allocatable GPUs (those counted in ``carried``)
    candidates: int

    def usage(self) -> list[dict[str, Any]]:
        """The ``status.placement.tiers`` entries."""
        return [
            {"name": n, "label": lbl or HOSTNAME_LABEL, "nodes": c}
            for n, lbl, c in zip(self.names, self.labels, self.carried, strict=True)
        ]

    def describe(self) -> str:
        """One line for ``gemop plan``: which tiers, from where, how many candidates carry each."""
        cells = ", ".join(
            f"{n}={lbl or HOSTNAME_LABEL} ({c}/{self.candidates})"
            for n, lbl, c in zip(self.names, self.labels, self.carried, strict=True)
        )
        return f"tiers ({self.source}): {cells}"


def _candidates(hosts: Sequence[HostView]) -> list[HostView]:
    return [h for h in hosts if h.allocatable_gpus > 0]


def _carried(hosts: Sequence[HostView], labels: Sequence[str | None]) -> tuple[int, ...]:
    return tuple(len(hosts) if lbl is None else sum(1 for h in hosts if h.labels.get(lbl)) for lbl in labels)


def discover(hosts: Sequence[HostView]) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The known label conventions present on the GPU nodes, one label per role, tightest first."""
    gpu_hosts = _candidates(hosts)
    names: list[str] = ["host"]
    labels: list[str | None] = [None]
    for role, options in CONVENTIONS:
        counts = [(sum(1 for h in gpu_hosts if h.labels.get(lbl)), -i, lbl) for i, lbl in enumerate(options)]
        best = max(counts)
        if best[0] > 0:
            names.append(role)
            labels.append(best[2])
    return tuple(names), tuple(labels)


def kueue_levels(topology: Mapping[str, Any]) -> list[str]:
    """Node-label keys of a Kueue ``Topology`` object's ``spec.levels``, widest first as listed.

    Raises ValueError naming the field when the object has no usable levels.
    """
    levels = (topology.get("spec") or {}).get("levels")
    name = (topology.get("metadata") or {}).get("name", "?")
    if not isinstance(levels, list) or not levels:
        raise ValueError(f"Kueue Topology {name!r} has no spec.levels")
    out: list[str] = []
    for i, level in enumerate(levels):
        label = level.get("nodeLabel") if isinstance(level, Mapping) else None
        if not isinstance(label, str) or not label:
            raise ValueError(f"Kueue Topology {name!r}: spec.levels[{i}].nodeLabel is missing")
        out.append(label)
    return out


def _level_name(label: str, taken: set[str]) -> str:
    base = ROLE_OF_LABEL.get(label) or _NAME_UNSAFE.sub("-", label.rsplit("/", 1)[-1].lower()).strip("-")[:24]
    if not base or not base[0].isalpha():
        base = f"level-{base}".rstrip("-")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def resolve(
    spec: GEMTrainingSpec,
    hosts: Sequence[HostView],
    *,
    kueue: Sequence[str] | None = None,
    kueue_name: str | None = None,
) -> TierSet:
    """The tiers for this spec on these hosts.

    ``kueue`` is the label list of the Kueue Topology that ``spec.topology.kueueTopology`` names
    (the controller reads it; ``kueue_levels``). The caller checks that it was given.
    """
    gpu_hosts = _candidates(hosts)
    names: list[str]
    labels: list[str | None]
    if spec.topology.tiers:
        source = "spec"
        names, labels = [], []
        tiers = spec.topology.tiers
        if tiers[0].label != HOSTNAME_LABEL:
            names.append("host" if all(t.name != "host" for t in tiers) else "node")
            labels.append(None)
        for t in tiers:
            names.append(t.name)
            labels.append(None if t.label == HOSTNAME_LABEL else t.label)
    elif kueue is not None:
        source = f"kueue/{kueue_name or spec.topology.kueue_topology}"
        names, labels = ["host"], [None]
        taken = {"host"}
        for label in reversed(list(kueue)):
            if label == HOSTNAME_LABEL or label in labels:
                continue
            names.append(_level_name(label, taken))
            labels.append(label)
    else:
        source = "discovered"
        found = discover(hosts)
        names, labels = list(found[0]), list(found[1])
    return TierSet(
        names=tuple(names),
        labels=tuple(labels),
        source=source,
        carried=_carried(gpu_hosts, labels),
        candidates=len(gpu_hosts),
    )
