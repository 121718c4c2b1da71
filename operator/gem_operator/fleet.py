"""What-if GPU fleets: ordinary `v1 Node` objects with topology labels and GPU capacity.

A fleet is plain Node YAML so that the same file can feed `gemop plan`, the embedded
cluster, and (by hand) a kind cluster. `make_fleet` generates regular fleets; `load_fleet`
validates a file and says which node and which field is wrong.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping
from typing import Any

import yaml

from gem_common.yamldocs import load_documents

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
CLIQUE = "nvidia.com/gpu.clique"
RACK = "gem.dev/rack"
BLOCK = "gem.dev/block"
ZONE = "topology.kubernetes.io/zone"
FLEETS_DIR = pathlib.Path(__file__).parent / "data" / "fleets"

Node = dict[str, Any]
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


class FleetError(ValueError):
    """A fleet file or node that cannot be used; the message names the node and field."""


def make_node(
    name: str,
    *,
    gpus: int = 8,
    labels: Mapping[str, str] | None = None,
    cpu: str = "96",
    memory: str = "1024Gi",
    index: int = 0,
) -> Node:
    """One Ready node with `gpus` allocatable GPUs (capacity == allocatable)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def make_fleet(
    hosts: int,
    gpus_per_host: int = 8,
    hosts_per_nvlink_domain: int = 4,
    hosts_per_rack: int | None = None,
    racks_per_block: int | None = None,
    zones: int = 1,
    *,
    name_prefix: str = "gpu",
) -> list[Node]:
    """A regular fleet: hosts fill NVLink domains, domains fill racks, racks fill blocks.

    Defaults: a rack holds two NVLink domains, all racks form one block, one zone. Zones are
    assigned to blocks round-robin.
    """
    if hosts <= 0 or gpus_per_host < 0 or hosts_per_nvlink_domain <= 0 or zones <= 0:
        raise FleetError("make_fleet: hosts, hosts_per_nvlink_domain and zones must be positive")
    per_rack = hosts_per_rack or hosts_per_nvlink_domain * 2
    racks = -(-hosts // per_rack)
    per_block = racks_per_block or racks
    nodes = []
    for i in range(hosts):
        rack = i // per_rack
        block = rack // per_block
        labels = {
            CLIQUE: f"nvl-{i // hosts_per_nvlink_domain}",
            RACK: f"rack-{rack}",
            BLOCK: f"block-{block}",
            ZONE: f"zone-{chr(ord('a') + block % zones)}",
        }
        nodes.append(make_node(f"{name_prefix}-{i:03d}", gpus=gpus_per_host, labels=labels, index=i))
    return nodes


def _fail(source: str, node: str, field: str, problem: str) -> FleetError:
    return FleetError(f"{source}: node {node!r}: {field}: {problem}")


def validate_node(node: Any, source: str = "fleet", position: int = 0) -> Node:
    """Check the fields the simulator and planner read; return the node unchanged."""
    if not isinstance(node, Mapping):
        raise FleetError(f"{source}: item #{position}: expected a Node mapping, got {type(node).__name__}")
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise FleetError(f"{source}: item #{position}: metadata.name: a non-empty string is required")
    if node.get("kind", "Node") != "Node":
        raise _fail(source, name, "kind", f"expected 'Node', got {node.get('kind')!r}")
    labels = (meta.get("labels") if isinstance(meta, Mapping) else None) or {}
    if not isinstance(labels, Mapping):
        raise _fail(source, name, "metadata.labels", "expected a mapping of strings")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise _fail(source, name, f"metadata.labels.{key}", f"expected a string, got {value!r}")
    status = node.get("status") or {}
    if not isinstance(status, Mapping):
        raise _fail(source, name, "status", "expected a mapping")
    for section in ("allocatable", "capacity"):
        values = status.get(section) or {}
        if not isinstance(values, Mapping):
            raise _fail(source, name, f"status.{section}", "expected a mapping of quantities")
        for key, value in values.items():
            text = str(value)
            if key == GPU and not text.isdigit():
                raise _fail(source, name, f"status.{section}.{key}", f"expected a non-negative integer, got {value!r}")
            if not _QUANTITY.match(text):
                raise _fail(source, name, f"status.{section}.{key}", f"not a quantity: {value!r}")
    for i, condition in enumerate(status.get("conditions") or []):
        if not isinstance(condition, Mapping) or "type" not in condition or "status" not in condition:
            raise _fail(source, name, f"status.conditions[{i}]", "needs 'type' and 'status'")
    for i, taint in enumerate((node.get("spec") or {}).get("taints") or []):
        if not isinstance(taint, Mapping) or "key" not in taint or "effect" not in taint:
            raise _fail(source, name, f"spec.taints[{i}]", "needs 'key' and 'effect'")
    return dict(node)


def parse_fleet(text: str, source: str = "fleet") -> list[Node]:
    """Accept a YAML list of Nodes, a `kind: List`/`NodeList`, or multiple documents."""
    try:
        docs = [doc for doc in load_documents(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise FleetError(f"{source}: not valid YAML: {exc}") from exc
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            items.extend(doc)
        elif isinstance(doc, Mapping) and "items" in doc:
            items.extend(doc.get("items") or [])
        else:
            items.append(doc)
    if not items:
        raise FleetError(f"{source}: no Node objects found")
    nodes = [validate_node(item, source, i) for i, item in enumerate(items)]
    names = [node["metadata"]["name"] for node in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise FleetError(f"{source}: node {duplicates[0]!r}: metadata.name: duplicated")
    return nodes


def load_fleet(path: str | pathlib.Path) -> list[Node]:
    """Load a fleet file; a bare name such as `demo` means a shipped fleet in `data/fleets/`."""
    candidate = pathlib.Path(path)
    if not candidate.exists() and (FLEETS_DIR / f"{path}.yaml").exists():
        candidate = FLEETS_DIR / f"{path}.yaml"
    try:
        text = candidate.read_text(encoding="utf-8")
    except OSError as exc:
        raise FleetError(f"{path}: cannot read fleet file: {exc.strerror}") from exc
    return parse_fleet(text, str(candidate))


def dump_fleet(nodes: list[Node]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}, sort_keys=False)
