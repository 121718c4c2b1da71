"""What the pods themselves say: loader termination messages and why a pod is not Ready.

Pure functions over pod bodies (status as the kubelet reports it), kept apart from the
reconcilers so that every kind reports the same reasons in the same words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

LOADER_CONTAINERS = frozenset({"model-loader", "checkpoint-restore"})


def _loader_messages(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if cs.get("name") not in LOADER_CONTAINERS:
            continue
        message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
        try:
            parsed = json.loads(message) if message else None
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out.append(parsed)
    return out


def cache_fallbacks(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The loaders' reasons for pulling without the node cache (`cacheFallback`), one per pod that did."""
    found: list[str] = []
    for pod in pods:
        for message in _loader_messages(pod):
            reason = message.get("cacheFallback")
            if isinstance(reason, str) and reason:
                found.append(reason)
                break
    return found
