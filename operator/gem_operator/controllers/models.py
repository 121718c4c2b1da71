"""Model versions between a GEMTraining and the pools that serve them (pure: no API calls).

How the operator learns the versions: from the trainer's termination message (docs/contracts.md),
``{"checkpoint": ..., "models": [{"version", "uri", "step", "eval"}, ...]}``, merged into
``status.models`` by version. Why not list the export store: the operator would then need the
training's object-store credentials (reading Secrets' data in every namespace) and a network path
to every bucket and volume, while the trainer already holds both and the termination message is
the channel it already reports checkpoints through. The cost: a version exported while a pod runs
is listed when that pod ends (finishes, fails, is restarted), not at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gem_operator.api.training import MAX_LISTED_MODELS, ExportedModel

from .gang import termination_messages

LATEST = "latest"


def _messages(pod: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    for message in termination_messages(pod):
        try:
            parsed = json.loads(message)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            yield parsed


def reported_models(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Versions the trainers reported (valid entries only; a malformed one is skipped, never fatal)."""
    found: list[dict[str, Any]] = []
    for pod in pods:
        for message in _messages(pod):
            listed = message.get("models")
            for entry in listed if isinstance(listed, list) else []:  # a pod writes what it likes here
                try:
                    found.append(ExportedModel.model_validate(entry).to_wire())
                except ValueError:
                    continue
    return found


def _entries(models: Any) -> list[Mapping[str, Any]]:
    """The objects of a status.models list; anything else there (a hand-edited status) is skipped."""
    return [m for m in models if isinstance(m, Mapping)] if isinstance(models, list | tuple) else []


def _version(entry: Mapping[str, Any]) -> int | None:
    version = entry.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def merge_models(previous: Sequence[Mapping[str, Any]] | None, reported: Sequence[Mapping[str, Any]]) -> list[Any]:
    """status.models: previous and reported versions by number (a report wins), oldest first, the newest kept."""
    by_version: dict[int, Mapping[str, Any]] = {}
    for entry in [*_entries(previous), *reported]:
        version = entry.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            by_version[version] = entry
    return [dict(by_version[v]) for v in sorted(by_version)][-MAX_LISTED_MODELS:]


def pick_version(models: Sequence[Mapping[str, Any]], version: int | str) -> Mapping[str, Any] | None:
    """The entry of ``version`` (a number, or ``latest``: the highest) among a training's status.models."""
    numbered = [m for m in _entries(models) if _version(m) is not None]
    if not numbered:
        return None
    if version == LATEST:
        return max(numbered, key=lambda m: _version(m) or 0)
    return next((m for m in numbered if m.get("version") == version), None)


def new_versions(previous: Sequence[Mapping[str, Any]] | None, merged: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Entries of ``merged`` whose version ``previous`` did not list."""
    known = {m.get("version") for m in _entries(previous)}
    return [m for m in merged if m.get("version") not in known]


def describe_version(entry: Mapping[str, Any]) -> str:
    """One line for the ModelExported Event: version, step, URI and the holdout AUCs."""
    evals = sorted((entry.get("eval") or {}).items())
    aucs = ", ".join(f"{task} AUC {m['auc']:.4f}" for task, m in evals if m.get("auc") is not None)
    step = entry.get("step")
    return f"version {entry['version']}{f' (step {step})' if step is not None else ''} at {entry['uri']}" + (
        f"; holdout {aucs}" if aucs else ""
    )
