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


# Waiting reasons that mean "this will not fix itself soon", worth a person's attention first.
_STUCK = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
)
MAX_REASONS = 3
MAX_MESSAGE = 160


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _container_reason(cs: Mapping[str, Any], init: bool) -> str | None:
    what = f"{'init container' if init else 'container'} {cs.get('name', '?')}"
    state = cs.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if waiting.get("reason"):
        reason = str(waiting["reason"])
        detail = waiting.get("message") or ""
        if reason == "CrashLoopBackOff" and last:
            detail = f"exit {last.get('exitCode', '?')}" + (f": {last['message']}" if last.get("message") else "")
        elif reason in ("PodInitializing", "ContainerCreating"):
            return None
        return f"{what} {reason}" + (f": {_short(detail)}" if detail else "")
    if init and terminated and terminated.get("exitCode", 0) != 0:
        detail = terminated.get("message") or terminated.get("reason") or ""
        return f"{what} failed (exit {terminated.get('exitCode')})" + (f": {_short(detail)}" if detail else "")
    return None


def pod_not_ready_reason(pod: Mapping[str, Any]) -> str | None:
    """Why one pod is not Ready, in the kubelet's words (None when nothing specific is known)."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return None
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    for cs in status.get("initContainerStatuses") or []:
        found = _container_reason(cs, init=True)
        if found:
            return found
    for cs in status.get("containerStatuses") or []:
        found = _container_reason(cs, init=False)
        if found:
            return found
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            return f"{cond['reason']}" + (f": {_short(cond['message'])}" if cond.get("message") else "")
    return None


def not_ready_summary(pods: Sequence[Mapping[str, Any]]) -> str:
    """'; '-joined reasons of the pods that are not Ready, stuck ones first, at most MAX_REASONS."""
    found: list[tuple[int, str]] = []
    for pod in pods:
        reason = pod_not_ready_reason(pod)
        if reason is None:
            continue
        name = (pod.get("metadata") or {}).get("name", "?")
        rank = 0 if any(s in reason for s in _STUCK) or "failed (exit" in reason else 1
        found.append((rank, f"pod {name}: {reason}"))
    found.sort(key=lambda r: r[0])
    shown = [text for _, text in found[:MAX_REASONS]]
    if len(found) > MAX_REASONS:
        shown.append(f"and {len(found) - MAX_REASONS} more pods not ready")
    return "; ".join(shown)
