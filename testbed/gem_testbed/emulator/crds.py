"""CustomResourceDefinitions as the emulator needs them: what each one makes discoverable.

The emulator serves a CRD's kinds the moment the CRD object exists (as a real API server
does once the CRD is Established), so both `EmbeddedCluster(crds=[...])` and a
`kubectl create -f crd.yaml` over HTTP end up here.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gem_operator.api.crd import peering_crds

ALL_VERBS = frozenset({"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"})


@dataclasses.dataclass(frozen=True)
class ResourceSpec:
    """One served group/version/plural with the discovery facts kopf and kubectl read."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    shortnames: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    subresources: frozenset[str] = frozenset()
    scale_paths: tuple[str, str] | None = None  # (specReplicasPath, statusReplicasPath) without "."
    label_selector_path: str | None = None  # scale.labelSelectorPath without the leading "."
    # The version's openAPIV3Schema and printer columns (admission and Table views); not compared.
    schema: Any = dataclasses.field(default=None, compare=False, hash=False)
    printer_columns: tuple[Any, ...] = dataclasses.field(default=(), compare=False, hash=False)


class CRDError(ValueError):
    """A CRD dict the emulator cannot serve (names the missing field)."""


def crd_resources(crd: Mapping[str, Any]) -> list[ResourceSpec]:
    """List the resources one CRD object defines, one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    name = (crd.get("metadata") or {}).get("name", "?")
    for field in ("group", "scope", "versions"):
        if not spec.get(field):
            raise CRDError(f"CRD {name!r}: spec.{field} is required")
    for field in ("plural", "kind"):
        if not names.get(field):
            raise CRDError(f"CRD {name!r}: spec.names.{field} is required")
    result: list[ResourceSpec] = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        scale_paths = None
        selector_path = None
        if scale:
            scale_paths = (
                str(scale.get("specReplicasPath", ".spec.replicas")).lstrip("."),
                str(scale.get("statusReplicasPath", ".status.replicas")).lstrip("."),
            )
            if scale.get("labelSelectorPath"):
                selector_path = str(scale["labelSelectorPath"]).lstrip(".")
        result.append(
            ResourceSpec(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec["scope"] == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                shortnames=frozenset(names.get("shortNames") or []),
                categories=frozenset(names.get("categories") or []),
                subresources=frozenset(subresources),
                scale_paths=scale_paths,
                label_selector_path=selector_path,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return result


def load_crds(sources: Iterable[Mapping[str, Any] | str | pathlib.Path]) -> list[dict[str, Any]]:
    """Accept CRD dicts or YAML files (multi-document allowed); return CRD dicts."""
    result: list[dict[str, Any]] = []
    for source in sources:
        if isinstance(source, Mapping):
            result.append(dict(source))
            continue
        with open(source, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    result.append(doc)
    return result


# kopf's own peering CRDs (one definition, shared with `gemop crds`): needed for peering.
KOPF_PEERING_CRDS: tuple[dict[str, Any], ...] = tuple(peering_crds())
