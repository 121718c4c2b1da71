"""Pure helpers on raw Kubernetes object dicts: patches, selectors, metadata.

They live apart from the emulator so that the patch and selector semantics can be tested
without HTTP, and so that the lifecycle simulator can reuse them when it reads the store.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


class PatchError(ValueError):
    """A JSON patch that cannot be applied: the API server answers 422 for these."""


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch (what kopf and `kubectl patch --type=merge` send).

    Dicts merge recursively, `null` removes a key, and lists are replaced whole.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: Obj = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise PatchError(f"index in {path!r} is out of range")
        parent.insert(index, value)
    else:
        raise PatchError(f"parent of {path!r} is not a container")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1], path)
    _resolve(parent, parts[-1:], path)  # raises when absent
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return doc


def json_patch(target: Obj, operations: Any) -> Obj:
    """Apply an RFC 6902 JSON patch (add/remove/replace/move/copy/test) to a copy of `target`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc: Any = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation: {op!r}")
        kind, path = op["op"], str(op["path"])
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            _resolve(doc, parts, path)
            doc = _add(_remove(doc, parts, path), parts, copy.deepcopy(op.get("value")), path)
        elif kind in ("move", "copy"):
            source = str(op.get("from", ""))
            value = copy.deepcopy(_resolve(doc, _pointer(source), source))
            if kind == "move":
                doc = _remove(doc, _pointer(source), source)
            doc = _add(doc, parts, value, path)
        elif kind == "test":
            if _resolve(doc, parts, path) != op.get("value"):
                raise PatchError(f"test operation failed at {path!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    if not isinstance(doc, dict):
        raise PatchError("a JSON patch must leave an object")
    return doc


# -- label selectors -------------------------------------------------------------------------------

Requirement = tuple[str, str, frozenset[str]]  # (key, operator, values)
_SET_RE = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|=|!=)\s*([^\s,]*))?\s*$")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse the string form (`a=b,c,!d,e!=f,g in (x,y)`) that `?labelSelector=` carries."""
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        match = _SET_RE.match(part)
        if match is None:
            raise ValueError(f"unable to parse label selector requirement {part!r}")
        negated, key, set_op, set_values, eq_op, eq_value = match.groups()
        if negated:
            requirements.append((key, "DoesNotExist", frozenset()))
        elif set_op:
            values = frozenset(v.strip() for v in set_values.split(",") if v.strip())
            requirements.append((key, "In" if set_op == "in" else "NotIn", values))
        elif eq_op:
            requirements.append((key, "NotIn" if eq_op == "!=" else "In", frozenset([eq_value])))
        else:
            requirements.append((key, "Exists", frozenset()))
    return requirements


def selector_from_dict(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """Turn a structured `LabelSelector` (matchLabels + matchExpressions) into requirements."""
    if not selector:
        return []
    requirements: list[Requirement] = [
        (key, "In", frozenset([str(value)])) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        requirements.append((expr["key"], expr["operator"], frozenset(expr.get("values") or [])))
    return requirements


def matches_requirement(labels: Mapping[str, str], requirement: Requirement) -> bool:
    """Evaluate one requirement; also handles Gt/Lt used by node affinity."""
    key, operator, values = requirement
    present = key in labels
    value = labels.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(str(value)), int(next(iter(values)))
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def matches_labels(labels: Mapping[str, str], requirements: list[Requirement]) -> bool:
    return all(matches_requirement(labels, requirement) for requirement in requirements)


def dotted(obj: Any, path: str) -> Any:
    """Read `a.b.c` from nested dicts; None when any step is missing."""
    for part in path.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def matches_fields(obj: Obj, selector: str) -> bool:
    """Evaluate a `?fieldSelector=` such as `metadata.name=x,status.phase!=Failed`."""
    for part in _split_top_level(selector):
        negated = "!=" in part
        key, _, value = part.replace("!=", "=").replace("==", "=").partition("=")
        actual = dotted(obj, key.strip())
        equal = ("" if actual is None else str(actual)) == value.strip()
        if equal == negated:
            return False
    return True


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)
