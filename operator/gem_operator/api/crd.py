"""Generate CustomResourceDefinitions from the pydantic models (the single source of truth).

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3.0 schema: no $ref,
no anyOf-with-null (use nullable), no additionalProperties=false beside properties, boolean
exclusiveMinimum, and defaults for nested objects so the API server fills them in. The conversion
below is deliberately small and total: an unknown construct raises instead of slipping through.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema, to_jsonable_python

from gem_operator.api.common import CR_NAME_MAX
from gem_operator.api.kinds import KINDS, KindInfo

_DROP = {"title"}
_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "nullable",
    "format",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
}


class _DefaultsFromFactories(GenerateJsonSchema):
    """Emit defaults for default_factory fields too, so nested objects are defaulted server-side."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is None or schema.get("default_factory_takes_data"):
            return super().default_schema(schema)
        json_schema = self.generate_inner(schema["schema"])
        value = factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            # `{}` lets the API server fill in the nested defaults, but it checks a default against
            # the object's CEL rules without doing so: where the model has rules, its values in full.
            ref = str(json_schema.get("$ref", "")).rsplit("/", 1)[-1]
            definition = next((d for key, d in self.definitions.items() if key == ref), json_schema)
            has_rules = "x-kubernetes-validations" in str(definition)
            json_schema["default"] = (
                value.model_dump(mode="json", by_alias=True, exclude_none=True) if has_rules else {}
            )
        else:
            json_schema["default"] = to_jsonable_python(value, by_alias=True, exclude_none=True)
        return json_schema


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    return node


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    node = dict(node)
    if "$ref" in node:
        return _resolve(node, defs)  # type: ignore[no-any-return]
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf with {len(options)} non-null options structurally: {options}")
        inner = _structural(_resolve(options[0], defs), defs)
        inner.update({k: v for k, v in node.items() if k not in _DROP})
        inner["nullable"] = True
        if inner.get("default", 0) is None:
            del inner["default"]
        return inner
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("type") == "object" and node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if node.get("type") == "object" and node.get("additionalProperties") is True:
        # extra="allow": fields kept as written (a Kubernetes object the API server validates)
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            node["minimum" if key == "exclusiveMinimum" else "maximum"] = node[key]
            node[key] = True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key not in _KEEP:
            raise ValueError(f"schema keyword {key!r} has no structural equivalent")
        if key == "properties":
            out[key] = {name: _structural(_resolve(sub, defs), defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(_resolve(value, defs), defs)
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of a model, camelCase, with defaults and validations."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_DefaultsFromFactories)
    return _structural(raw, raw.get("$defs", {}))


def build_crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition for one kind."""
    spec_schema = model_schema(info.spec_model)
    status_schema = model_schema(info.status_model)
    root: dict[str, Any] = {
        "type": "object",
        "description": info.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {CR_NAME_MAX}",
                "message": f"metadata.name must be at most {CR_NAME_MAX} characters so child names stay valid",
            }
        ],
    }
    subresources: dict[str, Any] = {"status": {}}
    if info.scalable:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": info.crd_name,
            "labels": {"app.kubernetes.io/name": "gem-operator", "app.kubernetes.io/part-of": "gem-operator"},
        },
        "spec": {
            "group": info.group,
            "scope": "Namespaced",
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": list(info.categories),
            },
            "versions": [
                {
                    "name": info.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": list(info.printer_columns),
                }
            ],
        },
    }


def _peering_crd(namespaced: bool) -> dict[str, Any]:
    """kopf's peering CRDs, so two operator replicas never both act (design.md section 3)."""
    kind = "KopfPeering" if namespaced else "ClusterKopfPeering"
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def peering_crds() -> list[dict[str, Any]]:
    """kopf's KopfPeering (namespaced) and ClusterKopfPeering CRDs."""
    return [_peering_crd(namespaced=True), _peering_crd(namespaced=False)]


def gem_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD for the three gem.dev kinds."""
    return {f"{info.group}_{info.plural}.yaml": build_crd(info) for info in KINDS}


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD, for every kind plus kopf's peering CRDs."""
    out = gem_crds()
    for crd in peering_crds():
        out[f"kopf.dev_{crd['spec']['names']['plural']}.yaml"] = crd
    return out


def render_yaml(crd: dict[str, Any]) -> str:
    """Stable YAML text (the drift test compares it byte for byte)."""
    header = "# Generated by `gemop crds` from gem_operator/api. Do not edit by hand.\n"
    return header + yaml.dump(crd, Dumper=_NoAliasDumper, sort_keys=False, width=120)


class _NoAliasDumper(yaml.SafeDumper):
    """Shared sub-schemas (the same container schema twice) are written out, not as YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
