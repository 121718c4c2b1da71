"""What kube-apiserver does to a custom resource before storing it, for the embedded API server.

On create, update and patch: prune fields the structural schema does not know (as the API server
does; with ``fieldValidation=Strict``, as kubectl sends by default, they are a 400 "strict decoding
error" instead), apply defaults, check types, bounds, patterns and enums, then the CEL
``x-kubernetes-validations`` rules, which, as in kube-apiserver, are skipped (with a cause saying so)
when a type, enum, required, length or count error blocks them; any failure is a 422 ``Invalid``
whose causes carry the field paths, worded like the API server's (checked against kube-apiserver by
tests/controlplane/test_real_malformed.py). Also the Table view of a list (``kubectl get`` printer
columns) and the CRD's ``labelSelectorPath`` for ``/scale``. The emulator is a test double: the operator never needs it.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from openapi_schema_validator import OAS30Validator

from gem_operator.api.schema_check import apply_defaults

# Objects nested deeper than this (after pruning: only in free-form fields) are refused.
MAX_BODY_DEPTH = 100
# Request bodies nested deeper than this are refused before decoding (kube-apiserver's decoder
# stops at 10,000; Python's recursive one cannot go that far, so the emulator stops earlier).
MAX_DECODE_DEPTH = 800
Obj = dict[str, Any]


class Invalid(Exception):
    """A rejected write: ``causes`` are (field, message) pairs."""

    def __init__(self, causes: list[tuple[str, str]]) -> None:
        self.causes = causes
        super().__init__("; ".join(f"{f}: {m}" for f, m in causes))


class Undecodable(Exception):
    """Strict field validation found fields the schema does not declare (kube-apiserver: 400)."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        super().__init__("strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown))


# The message kube-apiserver adds when schema errors keep the CEL rules from running.
CEL_SKIPPED = (
    "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
# Schema errors that block the CEL rules in kube-apiserver (apiextensions' hasBlockingErr).
_BLOCKING = frozenset({"type", "enum", "required", "maxLength", "maxItems", "maxProperties"})
# Cause reasons by message prefix, as kube-apiserver's field.ErrorType names them.
_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
)


def cause_reason(message: str) -> str:
    """The `reason` kube-apiserver gives a cause, from how its message starts."""
    for prefix, reason in _REASONS:
        if message.startswith(prefix):
            return reason
    return "FieldValueTypeInvalid" if " in body must be of type " in message else "FieldValueInvalid"


def _path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def depth_over(value: Any, limit: int = MAX_BODY_DEPTH) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return False


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")


def json_too_deep(body: bytes, limit: int = MAX_DECODE_DEPTH) -> bool:
    """Whether a JSON text nests deeper than ``limit``, judged without decoding it (decoding recurses)."""
    if body.count(b"{") + body.count(b"[") <= limit:
        return False
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', body)):
        depth += 1 if match.group() in (b"{", b"[") else -1
        if depth > limit:
            return True
    return False


def prune(schema: Mapping[str, Any], value: Any, path: list[Any], unknown: list[str]) -> Any:
    """Drop fields the schema does not specify (never descending into them); list them in ``unknown``.

    A map where the schema wants something else (a list, a string) has no declared field at all: each
    of its keys is unknown, as in kube-apiserver's pruning."""
    if isinstance(value, dict) and schema.get("type") not in ("object", None):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        unknown.extend(_path([*path, key]) for key in value)
        return {}
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and isinstance(extra, Mapping):
            return {k: prune(extra, v, [*path, k], unknown) for k, v in value.items()}
        if props is None:
            return value
        out = {}
        for key, sub in value.items():
            if key in props:
                out[key] = prune(props[key], sub, [*path, key], unknown)
            else:
                unknown.append(_path([*path, key]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [prune(schema["items"], item, [*path, i], unknown) for i, item in enumerate(value)]
    return value


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel(schema: Mapping[str, Any], value: Any, path: list[Any], out: list[tuple[str, str]]) -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        try:
            ok = bool(_program(rule["rule"]).evaluate({"self": json_to_cel(value)}))
        except Exception as exc:  # a rule that cannot be evaluated rejects, as the API server does
            out.append((_path(path) or "<root>", f"Invalid value: rule {rule['rule']!r} failed: {exc}"))
            continue
        if not ok:
            out.append((_path(path) or "<root>", f"Invalid value: {rule.get('message', rule['rule'])}"))
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                _cel(sub, value[name], [*path, name], out)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _cel(schema["items"], item, [*path, i], out)


def _clip(text: str, keep: int = 200) -> str:
    return text if len(text) <= keep else f"{text[: keep - 60]} ... {text[-40:]}"


def _json_type(value: Any) -> str:
    """The OpenAPI type name of a decoded JSON value, as kube-apiserver reports a wrong one."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    names = {float: "number", str: "string", list: "array", dict: "object"}
    return names.get(type(value), "null")


def _cause(err: Any) -> tuple[str, str]:
    """(field, message) as kube-apiserver words them: a missing field is named itself, "Required value"."""
    path = list(err.absolute_path)
    field = _path(path) or "<root>"
    if err.validator == "required" and isinstance(err.instance, dict):
        missing = [p for p in err.validator_value if p not in err.instance]
        if missing:
            return _path([*path, missing[0]]), "Required value"
    if err.validator == "enum":
        allowed = ", ".join(f'"{v}"' for v in err.validator_value)
        return field, _clip(f"Unsupported value: {json.dumps(err.instance)}: supported values: {allowed}")
    if err.validator == "type":
        got = _json_type(err.instance)
        return field, f'Invalid value: "{got}": {field} in body must be of type {err.validator_value}: "{got}"'
    if err.validator == "maxLength":
        return field, f"Too long: may not be more than {err.validator_value} bytes"
    if err.validator in ("maxItems", "maxProperties"):
        return field, f"Too many: {len(err.instance)}: must have at most {err.validator_value} items"
    return field, _clip(f"Invalid value: {err.message}")


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "x-kubernetes-validations" in schema or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


class Schema:
    """One served version's openAPIV3Schema, ready to admit objects."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator = OAS30Validator(dict(schema))
        self._has_rules = _has_rules(schema)

    def _part(self, name: str) -> Mapping[str, Any]:
        return (self.schema.get("properties") or {}).get(name) or {}

    def admit(self, obj: Obj, *, status: bool, strict: bool) -> Obj:
        """The object as it would be stored (pruned, defaulted), or raise Invalid."""
        unknown: list[str] = []
        out = dict(obj)
        for part in ("spec", "status") if status else ("spec",):
            if part in out:
                out[part] = prune(self._part(part), out[part], [part], unknown)
        if strict and unknown:
            raise Undecodable(unknown)
        if depth_over({k: v for k, v in out.items() if k != "metadata"}):
            raise Invalid([("<root>", f"object nested deeper than {MAX_BODY_DEPTH} levels")])
        out = dict(apply_defaults(self.schema, out))
        if not status:
            out.pop("status", None)  # status is not validated on writes to the object itself
        errors = sorted(self._validator.iter_errors(out), key=lambda e: list(e.absolute_path))
        causes = [_cause(err) for err in errors]
        if any(err.validator in _BLOCKING for err in errors):
            if self._has_rules:
                causes.append(("<nil>", CEL_SKIPPED))
        else:
            _cel(self.schema, out, [], causes)
        if causes:
            raise Invalid(causes)
        if not status and "status" in obj:
            out["status"] = obj["status"]
        return out


# -- Table (kubectl get) ---------------------------------------------------------------------------

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_-]+)==\"([^\"]*)\"\)\]")


def json_path(obj: Any, path: str) -> Any:
    """The small JSONPath subset printer columns use: ``.a.b`` and ``[?(@.k=="v")]`` filters."""
    values = [obj]
    pos = 0
    while pos < len(path):
        step = _STEP.match(path, pos)
        if step is None:
            return None
        pos = step.end()
        field, key, want = step.groups()
        nxt: list[Any] = []
        for v in values:
            if field is not None and isinstance(v, dict) and field in v:
                nxt.append(v[field])
            elif key is not None and isinstance(v, list):
                nxt.extend(i for i in v if isinstance(i, dict) and str(i.get(key)) == want)
        values = nxt
    return values[0] if values else None


def _age(stamp: Any, now: datetime.datetime) -> str:
    try:
        then = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2 or (unit == "m" and seconds >= 120):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(items: Sequence[Obj], columns: Sequence[Mapping[str, Any]], resource_version: str) -> Obj:
    """A meta.k8s.io/v1 Table of ``items`` with the CRD's printer columns after Name."""
    now = datetime.datetime.now(tz=datetime.UTC)
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    definitions += [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": int(c.get("priority", 0)),
        }
        for c in columns
    ]
    rows = []
    for item in items:
        meta = item.get("metadata") or {}
        cells: list[Any] = [meta.get("name")]
        for c in columns:
            value = json_path(item, c["jsonPath"])
            cells.append(_age(value, now) if c.get("type") == "date" and value is not None else value)
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
        rows.append({"cells": cells, "object": partial})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    return "as=Table" in accept
