"""`gemop validate`: check manifests as the API server (CRD schema + CEL) and the operator would.

Each file is judged on its own: one that cannot be read, parsed or is nested absurdly deep is
reported and the others are still checked. Inputs are files, directories (their *.yaml, *.yml and
*.json, recursively), or ``-`` for stdin; a file may hold several YAML documents and ``kind: List``
objects. Objects of other kinds are skipped with a note, so a whole GitOps directory can be passed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from gem_common.yamldocs import load_documents
from gem_operator.api.common import GROUP
from gem_operator.api.kinds import KINDS, KindInfo
from gem_operator.api.validation import MAX_DEPTH, too_deep

SUFFIXES = (".yaml", ".yml", ".json")
# A YAML text nested this deep cannot be a manifest of ours, and PyYAML's composer would recurse.
MAX_TEXT_DEPTH = 200


@dataclass
class Report:
    valid: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def expand(inputs: Sequence[str]) -> Iterator[tuple[str, Path | None]]:
    """(label, path) per file to read; path None is stdin. Missing paths are yielded and fail on read."""
    for item in inputs:
        if item == "-":
            yield "<stdin>", None
            continue
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
            yield from ((str(p), p) for p in found)
        else:
            yield item, path


def _text_depth(text: str) -> int:
    """Bracket/indent nesting of a YAML text, cheaply and without parsing it."""
    depth = best = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    indents = {len(line) - len(line.lstrip(" ")) for line in text.splitlines() if line.strip()}
    return max(best, len(indents))


def objects(docs: Sequence[Any]) -> Iterator[tuple[str, Any]]:
    """Objects with where they sit: a document, or an item of a List."""
    for d, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"document {d + 1}"
        if isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            items = doc.get("items")
            if not isinstance(items, list):
                yield f"{where}: items", items
                continue
            for i, item in enumerate(items):
                yield f"{where}: items[{i}]", item
        else:
            yield where, doc


def _gem_kind(kind: str) -> KindInfo | None:
    return next((info for info in KINDS if info.kind == kind), None)


def check_object(obj: Any) -> tuple[str, list[str] | None]:
    """(name, errors), or (note, None) for an object that is not one of ours."""
    from gem_operator.api.schema_check import validate_manifest

    if not isinstance(obj, Mapping):
        return "?", [f"not an object (got {type(obj).__name__}); a manifest is a mapping with apiVersion and kind"]
    kind, api_version = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "")
    meta = obj.get("metadata")
    name = f"{kind or '?'}/{(meta.get('name') if isinstance(meta, Mapping) else None) or '?'}"
    info = _gem_kind(kind)
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    if info is None:
        if group == GROUP:
            known = ", ".join(i.kind for i in KINDS)
            return name, [f"kind: {kind or '(missing)'} is not a kind of {GROUP}; known kinds: {known}"]
        return f"{name} ({api_version or 'no apiVersion'}) is not a {GROUP} kind: skipped", None
    if api_version != info.api_version:
        return name, [f"apiVersion: {api_version or '(missing)'} is not served for {kind}; use {info.api_version}"]
    deep = too_deep(obj, root="<root>", limit=MAX_DEPTH + 2)
    if deep is not None:
        return name, [f"{deep[:120]}: nested more than {MAX_DEPTH} levels deep; remove the malformed field"]
    try:
        return name, validate_manifest(obj)
    except RecursionError:
        return name, ["nested too deeply to validate; remove the malformed field"]


def validate_text(label: str, text: str, report: Report) -> None:
    if _text_depth(text) > MAX_TEXT_DEPTH:
        report.errors.append(f"{label}: nested more than {MAX_TEXT_DEPTH} levels deep; not a manifest")
        return
    try:
        docs = load_documents(text)
    except (yaml.YAMLError, RecursionError) as exc:
        report.errors.append(f"{label}: cannot parse: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return
    for where, obj in objects(docs):
        name, errors = check_object(obj)
        if errors is None:
            report.notes.append(f"{label}: {where}: {name}")
        elif errors:
            report.errors.extend(f"{label}: {name}: {e}" for e in errors)
        else:
            report.valid.append(f"{label}: {name}: valid")


def run_validate(inputs: Sequence[str], stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Exit 0 when every object of ours is valid, 1 when any is not (or a file cannot be read)."""
    out, err = out or sys.stdout, sys.stderr
    report = Report()
    for label, path in expand(inputs):
        before = len(report.errors)
        try:
            text = (stdin or sys.stdin).read() if path is None else path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            report.errors.append(f"{label}: cannot read: {exc}")
        else:
            validate_text(label, text, report)
        for line in report.errors[before:]:
            print(line, file=err)
    for line in report.valid:
        print(line, file=out)
    for line in report.notes:
        print(line, file=out)
    return 1 if report.errors else 0
