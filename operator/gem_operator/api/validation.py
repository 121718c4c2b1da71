"""Semantic validation: turn a resource body into a typed spec, or into messages a person can act on.

The CRD's OpenAPI schema catches structural errors at apply time on a real API server; this is the
second line (the handler's), which also covers rules a schema cannot state and clusters where the
CRD is older than the operator. Each message starts with the field's path, e.g.
``spec.parallelism.tp: ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gem_operator.api.common import CR_NAME_MAX, ApiModel
from gem_operator.api.kinds import KindInfo

_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Our schemas nest a dozen levels at most; anything far deeper is malformed, and walking it
# recursively (pydantic, json, kopf's diff) would hit Python's recursion limit.
MAX_DEPTH = 32


class InvalidSpec(ValueError):
    """A resource the operator will not act on; ``problems`` each name a field and a fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def _path(loc: tuple[int | str, ...]) -> str:
    out = "spec"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    msg = str(error.get("msg", ""))
    if kind == "extra_forbidden":
        return "unknown field; remove it or check its spelling against the CRD (kubectl explain)"
    if kind == "missing":
        return "required field is missing; set it"
    if kind == "value_error":
        # Our own validators already phrase the problem and the fix.
        return msg.removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 60:
        msg = f"{msg} (got {value!r})"
    return msg


def validate_name(name: str) -> list[str]:
    """Children are named <name>-<role>-<index> and must stay valid DNS labels."""
    problems = []
    if len(name) > CR_NAME_MAX:
        problems.append(
            f"metadata.name: {len(name)} characters is too long; use at most {CR_NAME_MAX} so that "
            "child names (<name>-<role>-<index>) stay within 63"
        )
    if not _NAME.match(name):
        problems.append(
            "metadata.name: must be a DNS-1035 label (lower-case letters, digits and '-', starting with a "
            "letter); rename the resource"
        )
    return problems


def too_deep(value: Any, root: str = "spec", limit: int = MAX_DEPTH) -> str | None:
    """The path where ``value`` nests deeper than ``limit`` levels, or None; iterative, never recursing."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > limit:
            return path
        if isinstance(node, Mapping):
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))
    return None


def _short(path: str, keep: int = 120) -> str:
    return path if len(path) <= keep else path[:keep] + "..."


def parse_spec(info: KindInfo, body: Mapping[str, Any]) -> ApiModel:
    """Validate a whole resource body and return its typed spec, or raise InvalidSpec.

    Types are strict, as the API server's schema is: ``suspend: "yes"`` is an error, not True, and
    ``pp: true`` is not 1. (The JSON round trip is what makes pydantic strict about scalars while
    still reading enums and literals from their wire strings.)
    """
    problems = validate_name(str(body.get("metadata", {}).get("name", "")))
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        problems.append("spec: missing or not an object; add a spec (see crds/samples/)")
        raise InvalidSpec(problems)
    deep = too_deep(spec)
    if deep is not None:
        problems.append(
            f"{_short(deep)}: nested more than {MAX_DEPTH} levels deep; no field of {info.kind} nests like "
            "this: remove the unknown or malformed field"
        )
        raise InvalidSpec(problems)
    try:
        text = json.dumps(dict(spec))
    except (TypeError, ValueError) as exc:  # YAML dates, NaN: not what an API server stores
        problems.append(f"spec: not plain JSON ({exc}); write it as YAML/JSON objects, lists and scalars")
        raise InvalidSpec(problems) from None
    try:
        parsed = info.spec_model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        problems.extend(f"{_path(tuple(e['loc']))}: {_describe(e)}" for e in exc.errors())
        raise InvalidSpec(problems) from None
    if problems:
        raise InvalidSpec(problems)
    return parsed
