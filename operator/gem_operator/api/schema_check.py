"""Offline validation of manifests against the generated CRDs, as an API server would do it.

Order follows the API server: apply structural defaults, check the OpenAPI schema, then evaluate
the CEL `x-kubernetes-validations` rules; then the operator's own semantic checks. `gemop validate`
uses it so that a GitOps pipeline can reject a bad manifest before it reaches a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from openapi_schema_validator import OAS30Validator

from gem_operator.api.crd import build_crd
from gem_operator.api.kinds import KindInfo, kind_info
from gem_operator.api.validation import InvalidSpec, parse_spec


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Fill in `default`s the way the API server does (objects recursively, list items too)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        for name, sub in schema.get("properties", {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(sub, out[name])
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _path(parts: Iterator[Any] | list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _cel_nodes(
    schema: Mapping[str, Any], value: Any, path: list[Any]
) -> Iterator[tuple[list[Any], dict[str, Any], Any]]:
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule, value
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _cel_nodes(sub, value[name], [*path, name])
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _cel_nodes(schema["items"], item, [*path, i])


def _unknown_fields(schema: Mapping[str, Any], value: Any, path: list[Any]) -> Iterator[str]:
    """Fields the schema does not know, as kubectl's strict field validation reports them."""
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in value.items():
            if name not in schema["properties"]:
                if not schema.get("x-kubernetes-preserve-unknown-fields"):
                    yield f"{_path([*path, name])}: unknown field; remove it or check its spelling"
            else:
                yield from _unknown_fields(schema["properties"][name], sub, [*path, name])
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from _unknown_fields(schema["items"], item, [*path, i])


def _clip(message: str, keep: int = 240) -> str:
    """jsonschema quotes the offending value whole; a 1 MB string must not become a 1 MB message."""
    return message if len(message) <= keep else f"{message[: keep - 80]} ... {message[-60:]}"


def _cel_holds(rule: str, value: Any) -> bool | str:
    """True or False as the rule says; a string when it cannot be evaluated on this value (the API
    server reports that as the rule failing too): an integer past int64, a field of the wrong type."""
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    try:
        return bool(program.evaluate({"self": json_to_cel(_decoded_numbers(value))}))
    except (CELEvalError, ValueError, TypeError, OverflowError) as exc:
        return str(exc.args[0] if exc.args else exc)[:120]


_INT64 = range(-(2**63), 2**63)


def _decoded_numbers(value: Any) -> Any:
    """``value`` with integers past int64 as floats, as the API server's JSON decoding stores them
    (celpy overflows on them instead; the schema, not a rule, refuses one where an integer belongs)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if value in _INT64 else float(value)
    if isinstance(value, Mapping):
        return {k: _decoded_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded_numbers(v) for v in value]
    return value


def _metadata_errors(obj: Mapping[str, Any]) -> list[str]:
    """What the API server's ObjectMeta decoding refuses before any schema or rule sees the object."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: expected an object with a name"]
    name = meta.get("name")
    if name is None or name == "":
        return ["metadata.name: missing; every object needs a name"]
    if not isinstance(name, str):
        return [f"metadata.name: expected a string, got a {type(name).__name__} ({str(name)[:40]})"]
    return [
        f"metadata.{key}: expected a string" for key in ("namespace",) if key in meta and not isinstance(meta[key], str)
    ]


def schema_errors(info: KindInfo, obj: Mapping[str, Any]) -> list[str]:
    """What an API server with our CRD installed would say about this object."""
    errors = _metadata_errors(obj)
    if errors:
        return errors
    schema = build_crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    value = apply_defaults(schema, dict(obj))
    errors = list(_unknown_fields(schema, value, []))
    errors += [
        f"{_path(list(err.absolute_path))}: {_clip(err.message)}"
        for err in sorted(OAS30Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    ]
    if errors:
        return errors
    for path, rule, node in _cel_nodes(schema, value, []):
        holds = _cel_holds(rule["rule"], node)
        if holds is True:
            continue
        unevaluable = f" (the rule cannot be evaluated here: {holds})" if isinstance(holds, str) else ""
        errors.append(f"{_path(path)}: {rule.get('message', rule['rule'])}{unevaluable}")
    return errors


def validate_manifest(obj: Mapping[str, Any]) -> list[str]:
    """Schema errors first (what `kubectl apply` would show), then the operator's semantic ones."""
    try:
        info = kind_info(str(obj.get("kind", "")))
    except KeyError as exc:
        return [f"kind: {exc.args[0]}"]
    errors = schema_errors(info, obj)
    if errors:
        return errors
    try:
        parse_spec(info, obj)
    except InvalidSpec as exc:
        return exc.problems
    return []
